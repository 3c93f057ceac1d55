"""``dataset.loader=device``: the whole dataset resident on the device, batches cut there.

In the manner of airbench (KellerJordan/cifar10-airbench): images are kept as uint8 on the device
(CIFAR-10's 50,000 × 3 × 40 × 40 padded training images are 240 MB), and every batch is gathered,
randomly cropped and flipped, converted to float and normalised there — a handful of kernels on
the step's own stream, no host work, no host-to-device copy, no worker processes. The phase
timer's ``data`` phase then measures only those kernels (~0 next to forward and backward).

The batches are the ones the DataLoader path gives, computed the same way:

- each epoch is a seeded permutation of the training set cut into ``batch``-sized pieces (the
  last one short), so an epoch visits every example once — the same multiset of examples;
- augmentation matches torchvision's ``RandomCrop(size, padding=4)`` (zero padding of the uint8
  pixels, offset uniform in 0..8 on each axis) then ``RandomHorizontalFlip()`` (p = 0.5),
  drawn independently per example;
- normalisation is ``ToTensor`` then ``Normalize``: ``x / 255``, ``- mean``, ``/ std`` in fp32,
  the same three operations in the same order, so un-augmented batches are bitwise equal.

Randomness comes from a `torch.Generator` on the device seeded with ``seed``, exposed as
``.generator`` (a checkpoint can save and restore it). Only in-memory datasets qualify: CIFAR-10
and MNIST (torchvision keeps their pixels in ``.data``), diabetes and synthetic (tensors).
Folders of image files are decoded by a DataLoader (``dataset.loader=dataloader``).
"""
from __future__ import annotations

from dataclasses import dataclass

import sys

import numpy as np
import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from sweeps.data.builtin import CIFAR10_STATS, MNIST_STATS
from sweeps.data.indexed import IndexedBatches
from sweeps.errors import UsageError

PAD = 4  # pixels of zero padding around each image before the random crop (as the DataLoader path)


@dataclass
class Resident:
    """A dataset as tensors: ``x`` ``(N, C, H, W)`` uint8 pixels (``stats`` given) or ``(N, ...)``
    float features; ``y`` ``(N,)`` int64 classes or ``(N, 1)`` float targets; ``stats`` the
    per-channel (mean, std) of ``Normalize``, in units of [0, 1] pixels."""

    x: torch.Tensor
    y: torch.Tensor
    stats: tuple | None = None


def _torchvision_kind(ds: Dataset) -> str | None:
    """``"cifar10"`` or ``"mnist"`` for torchvision's CIFAR10 / MNIST, else None. torchvision is
    not imported for this: a dataset of its kind exists only where it was imported already (its
    import pulls in torch._dynamo, ~1.2 s that a tabular or synthetic job does not need)."""
    datasets = sys.modules.get("torchvision.datasets")
    if datasets is None:
        return None
    return "cifar10" if isinstance(ds, datasets.CIFAR10) else "mnist" if isinstance(ds, datasets.MNIST) else None


def can_reside(ds: Dataset) -> bool:
    """Whether `resident` can hold ``ds`` on the device (tensors, CIFAR-10, MNIST, or a
    subset of one of them)."""
    inner = ds.dataset if isinstance(ds, Subset) else ds
    return isinstance(inner, TensorDataset) or _torchvision_kind(inner) is not None


def resident_loader(loader: str, train: Dataset) -> bool:
    """Whether ``dataset.loader=loader`` serves ``train`` from the device: ``device`` yes,
    ``dataloader`` no, ``auto`` where the data are in memory (`can_reside`)."""
    return loader == "device" or (loader == "auto" and can_reside(train))


def resident(ds: Dataset) -> Resident:
    """The tensors behind ``ds``: a TensorDataset, torchvision's CIFAR10 or MNIST, or a Subset
    of one of them (seeded ``dataset.train_size`` subsets), on the CPU.

    Raises:
        UsageError: anything else (an ImageFolder: its images are files to decode).
    """
    idx = None
    if isinstance(ds, Subset):
        ds, idx = ds.dataset, torch.as_tensor(ds.indices, dtype=torch.long)
    kind = _torchvision_kind(ds)
    if isinstance(ds, TensorDataset):
        x, y = ds.tensors
        out = Resident(x, y)
    elif kind == "cifar10":  # .data: (N, 32, 32, 3) uint8 numpy, HWC
        out = Resident(torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous(),
                       torch.as_tensor(ds.targets, dtype=torch.long), CIFAR10_STATS)
    elif kind == "mnist":  # .data: (N, 28, 28) uint8 tensor
        out = Resident(ds.data.unsqueeze(1).contiguous(), torch.as_tensor(ds.targets, dtype=torch.long), MNIST_STATS)
    else:
        raise UsageError(f"dataset.loader=device needs tensors in memory (a TensorDataset, CIFAR-10, MNIST), "
                         f"not {type(ds).__name__}: use dataset.loader=dataloader (or auto)")
    if idx is not None:
        out = Resident(out.x[idx], out.y[idx], out.stats)
    return out


class DeviceBatches(IndexedBatches):
    """Batches of ``(x, y)`` cut from tensors resident on ``device``.

    Args:
        data: the dataset's tensors (see `Resident`), moved to ``device`` once here.
        batch: examples per batch; the last batch of an epoch holds the remainder.
        shuffle: a new seeded permutation every epoch (training) or the stored order (test).
        augment: random crop (padding `PAD`) + horizontal flip per example; images only.
        seed: seeds `generator`, which lives on ``device``.

    Yields ``x`` ``(≤ batch, C, H, W)`` float32 normalised (images) or the stored features, and
    ``y``. Nothing here synchronizes with the host.
    """

    def __init__(self, data: Resident, batch: int, device: torch.device, shuffle: bool = False,
                 augment: bool = False, seed: int = 0):
        self.batch_size, self.shuffle, self.device = batch, shuffle, device
        self.n = len(data.x)
        self.augment = augment and data.stats is not None and data.x.dim() == 4
        x = data.x
        if self.augment:  # pad once; each crop is then a gather from the padded store
            x = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD))
        self.x, self.y = x.to(device), data.y.to(device)
        self.image_hw = tuple(data.x.shape[-2:])
        self.mean = self.std = None
        if data.stats is not None:
            self.mean, self.std = (torch.tensor(s, dtype=torch.float32, device=device).view(-1, 1, 1)
                                   for s in data.stats)
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def whole(self) -> tuple | None:
        """The stored features as one batch; images are always cut (each batch is normalised)."""
        return (self.x, self.y) if self.mean is None else None

    def in_order(self, start: int, stop: int) -> torch.Tensor:
        """The stored order as an index on the device (the images' gather takes an index)."""
        return torch.arange(start, min(stop, self.n), device=self.device)

    def take(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The examples ``idx`` (int64 on the device) as one batch ``(x, y)``, augmented and
        normalised like every batch; a data-parallel rank takes its part of each step through this."""
        return self._images(idx) if self.mean is not None else self.x[idx], self.y[idx]

    def _images(self, idx: torch.Tensor) -> torch.Tensor:
        """uint8 pixels of ``idx`` → cropped, flipped, normalised float32 ``(B, C, H, W)``."""
        x = self._crop_flip(idx) if self.augment else self.x[idx]
        return x.float().div_(255).sub_(self.mean).div_(self.std)  # ToTensor, then Normalize

    def _crop_flip(self, idx: torch.Tensor) -> torch.Tensor:
        """One gather: output pixel (i, j) of example b is padded pixel (dy_b + i, dx_b + j), or
        (dy_b + i, dx_b + W-1-j) when b is flipped (torchvision: crop first, then flip)."""
        (h, w), b, dev, g = self.image_hw, len(idx), self.device, self.generator
        dy = torch.randint(0, 2 * PAD + 1, (b,), device=dev, generator=g)
        dx = torch.randint(0, 2 * PAD + 1, (b,), device=dev, generator=g)
        flip = torch.randint(0, 2, (b,), device=dev, generator=g).bool()
        i, j = torch.arange(h, device=dev), torch.arange(w, device=dev)
        rows = dy[:, None] + i  # (B, H)
        cols = dx[:, None] + torch.where(flip[:, None], j.flip(0), j)  # (B, W)
        ch = torch.arange(self.x.shape[1], device=dev)
        return self.x[idx[:, None, None, None], ch[None, :, None, None], rows[:, None, :, None], cols[:, None, None, :]]


def device_loaders(train: Dataset, test: Dataset, batch: int, device: torch.device, augment: bool,
                   seed: int) -> tuple[DeviceBatches, DeviceBatches]:
    """Training batches (shuffled, seeded, augmented when ``augment``) and test batches (in
    order, ``min(batch, len(test))`` each), both resident on ``device`` — the device-side
    counterpart of `sweeps.data.loaders.make_loaders`.

    Raises:
        UsageError: a dataset that is not in memory (see `resident`).
    """
    test_data = resident(test)
    return (DeviceBatches(resident(train), batch, device, shuffle=True, augment=augment, seed=seed),
            DeviceBatches(test_data, min(batch, len(test_data.x)), device))
