"""Datasets and loaders: torchvision (CIFAR-10, MNIST, ImageFolder), scikit-learn (diabetes) and
synthetic tensors, each cut to a seeded subset on request and served by a torch DataLoader.

Missing files raise :class:`DataUnavailable` with one line that names ``dataset.root`` and says
how to provide the data; nothing here prints a traceback for a user's mistake.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torchvision import datasets, transforms

from sweeps.errors import DataUnavailable, UsageError, brief

# Per-channel mean and std of the training images (computed on the full training splits).
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
MNIST_STATS = ((0.1307,), (0.3081,))
DOWNLOAD_TIMEOUT_S = 30  # a download that cannot connect fails instead of hanging the sweep


@dataclass(frozen=True)
class DataSpec:
    """What a model needs to know about the data.

    Attributes:
        in_shape: one example's shape, ``(C, H, W)`` for images or ``(F,)`` for tabular rows.
        num_outputs: classes, or 1 for regression.
        task: ``classification`` or ``regression``.
        target_scale: regression: std of the raw target, so RMSE is reported in target units.
    """

    in_shape: tuple[int, ...]
    num_outputs: int
    task: str = "classification"
    target_scale: float = 1.0


def _image_transforms(stats, augment: bool, crop, extra=()) -> tuple[Callable, Callable]:
    norm = [transforms.ToTensor(), transforms.Normalize(*stats)]
    aug = [transforms.RandomCrop(crop, padding=4), transforms.RandomHorizontalFlip()] if augment else []
    return transforms.Compose([*extra, *aug, *norm]), transforms.Compose([*extra, *norm])


def _torchvision(cls, title: str, hint: str, cfg: DictConfig, stats, crop: int):
    root = Path(cfg.root).expanduser()
    train_tf, test_tf = _image_transforms(stats, cfg.augment, crop)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        train = cls(root, train=True, transform=train_tf, download=cfg.download)
        test = cls(root, train=False, transform=test_tf, download=False)
    except (RuntimeError, OSError) as e:  # torchvision: "Dataset not found"; urllib: URLError
        detail = brief(e) or type(e).__name__  # torchvision's text spans lines
        why = "dataset.download=false" if not cfg.download else f"download failed ({detail})"
        raise DataUnavailable(f"{title} is not under dataset.root={cfg.root} ({root.resolve()}) and "
                              f"{why}; {hint}, or run once with network access and dataset.download=true") from None
    finally:
        socket.setdefaulttimeout(previous)
    return train, test


def _cifar10(cfg: DictConfig, seed: int):
    train, test = _torchvision(datasets.CIFAR10, "CIFAR-10",
                               "put the python version (cifar-10-batches-py/) from "
                               "https://www.cs.toronto.edu/~kriz/cifar.html there", cfg, CIFAR10_STATS, 32)
    return train, test, DataSpec((3, 32, 32), 10)


def _mnist(cfg: DictConfig, seed: int):
    train, test = _torchvision(datasets.MNIST, "MNIST", "put the four idx files in "
                               "<root>/MNIST/raw/", cfg, MNIST_STATS, 28)
    return train, test, DataSpec((1, 28, 28), 10)


def _imagefolder(cfg: DictConfig, seed: int):
    root = Path(cfg.root).expanduser()
    layout = "ImageFolder layout is <root>/train/<class>/<image> and <root>/val/<class>/<image>"
    if not (root / "train").is_dir() or not (root / "val").is_dir():
        raise DataUnavailable(f"dataset.root={cfg.root} ({root.resolve()}) has no train/ and val/ folders; {layout}")
    try:
        probe = datasets.ImageFolder(root / "train")
    except (FileNotFoundError, OSError) as e:
        raise DataUnavailable(f"dataset.root={cfg.root}: {e}; {layout}") from None
    if cfg.channels not in (None, 1, 3):
        raise UsageError(f"dataset.channels={cfg.channels} is not valid: use 1, 3 or null (from the images)")
    with Image.open(probe.samples[0][0]) as first:
        channels = cfg.channels or (1 if first.mode in ("L", "I", "I;16", "1") else 3)
        width, height = first.size
    size = (cfg.image_size, cfg.image_size) if cfg.image_size else (height, width)
    # ImageFolder's loader already gives RGB; Grayscale(3) would replace colour with gray copies
    extra = ([transforms.Grayscale(1)] if channels == 1 else []) + \
        ([transforms.Resize(size)] if cfg.image_size else [])  # else all images must share one size
    stats = _estimate_stats(probe, extra, seed)
    train_tf, test_tf = _image_transforms(stats, cfg.augment, size, extra)
    try:
        train = datasets.ImageFolder(root / "train", transform=train_tf)
        test = datasets.ImageFolder(root / "val", transform=test_tf)
    except (FileNotFoundError, OSError) as e:  # e.g. a class folder of val/ without images
        raise DataUnavailable(f"dataset.root={cfg.root}: {brief(e, 300)}; {layout}") from None
    if test.classes != train.classes:
        raise DataUnavailable(f"dataset.root={cfg.root}: val/ classes {test.classes} differ from train/ {train.classes}")
    return train, test, DataSpec((channels, *size), len(train.classes))


def _estimate_stats(folder: datasets.ImageFolder, extra: list, seed: int, n: int = 500):
    """Per-channel mean and std over a seeded sample of ≤ ``n`` training images."""
    to_tensor = transforms.Compose([*extra, transforms.ToTensor()])
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(folder), generator=g)[:n].tolist()
    images = []
    for i in idx:
        path = folder.samples[i][0]
        try:
            images.append(to_tensor(folder.loader(path)))
        except OSError as e:  # PIL.UnidentifiedImageError, truncated files
            raise UsageError(f"cannot read image {path} ({type(e).__name__}): remove or replace it") from None
    x = torch.stack(images)
    mean = x.mean(dim=(0, 2, 3))
    std = x.std(dim=(0, 2, 3)).clamp_min(1e-6)
    return tuple(mean.tolist()), tuple(std.tolist())


def _diabetes(cfg: DictConfig, seed: int):
    from sklearn.datasets import load_diabetes

    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in load_diabetes(return_X_y=True))
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(cfg.test_fraction * len(x)))
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    # standardise with training statistics only, so nothing leaks from the test rows
    xm, xs = x[train_idx].mean(0), x[train_idx].std(0)
    ym, ys = y[train_idx].mean(), y[train_idx].std()
    x, y = (x - xm) / xs, ((y - ym) / ys).unsqueeze(1)
    spec = DataSpec((x.shape[1],), 1, "regression", float(ys))
    return TensorDataset(x[train_idx], y[train_idx]), TensorDataset(x[test_idx], y[test_idx]), spec


def _synthetic(cfg: DictConfig, seed: int):
    shape = tuple(cfg.shape)
    n_train, n_test = cfg.train_size or 10_000, cfg.test_size or 2_000
    if cfg.regression:  # scikit-learn's linear-plus-noise problem, target standardised
        from sklearn.datasets import make_regression

        x, y = (torch.as_tensor(a, dtype=torch.float32) for a in make_regression(
            n_train + n_test, int(torch.tensor(shape).prod()), noise=10.0, random_state=seed))
        ym, ys = y[:n_train].mean(), y[:n_train].std()
        x, y = x.reshape(-1, *shape), ((y - ym) / ys).unsqueeze(1)
        return (TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:]),
                DataSpec(shape, 1, "regression", float(ys)))
    g = torch.Generator().manual_seed(seed)

    def make(n):
        return TensorDataset(torch.randn(n, *shape, generator=g),
                             torch.randint(0, cfg.num_classes, (n,), generator=g))
    return make(n_train), make(n_test), DataSpec(shape, cfg.num_classes)


BUILDERS = {"cifar10": _cifar10, "mnist": _mnist, "imagefolder": _imagefolder,
            "diabetes": _diabetes, "synthetic": _synthetic}


def _subset(ds: Dataset, n: int | None, seed: int, key: str) -> Dataset:
    if n is None or n == len(ds):
        return ds
    if n > len(ds):
        raise UsageError(f"dataset.{key}={n} is larger than the data ({len(ds)} examples): "
                         f"use at most {len(ds)}, or null for all")
    idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    if isinstance(ds, TensorDataset):  # stay a tensor dataset: TensorBatches can slice it
        return TensorDataset(*(t[idx] for t in ds.tensors))
    return Subset(ds, idx.tolist())


def build_datasets(cfg: DictConfig, seed: int) -> tuple[Dataset, Dataset, DataSpec]:
    """Training and test datasets for ``cfg`` (the ``dataset`` node) and their :class:`DataSpec`.

    Raises:
        DataUnavailable: files missing under ``cfg.root`` (and not downloadable).
        UsageError: unknown ``cfg.name``, or a subset larger than the data.
    """
    if cfg.name not in BUILDERS:
        raise UsageError(f"dataset.name={cfg.name!r} is unknown: use one of {', '.join(BUILDERS)}")
    train, test, spec = BUILDERS[cfg.name](cfg, seed)
    return _subset(train, cfg.train_size, seed, "train_size"), _subset(test, cfg.test_size, seed + 1, "test_size"), spec

