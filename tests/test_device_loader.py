"""dataset.loader=device (sweeps.data.device_loader): the same examples per epoch as the DataLoader path,
bit for bit without augmentation; torchvision's crop/flip semantics and statistics with it;
deterministic under a seed; resumable through the checkpoint's RNG state."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF

from sweeps import config
from sweeps.train.checkpoint import rng_state, set_rng_state
from sweeps.data import build_datasets, make_loaders
from sweeps.data.device_loader import PAD, DeviceBatches, Resident, device_loaders, resident
from sweeps.errors import UsageError
from torch.utils.data import TensorDataset
from test_data import (_cifar_cfg, _idx_images, _idx_labels, cifar_root, dataset_cfg,  # noqa: F401 (fixture)
                       one_line)

CPU = torch.device("cpu")


def _epoch(loader) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*loader)
    return torch.cat(xs), torch.cat(ys)


def _canonical(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The epoch's (x, y) pairs in an order that depends only on their values (a multiset)."""
    flat = x.reshape(len(x), -1).double()
    key = flat @ torch.linspace(1, 2, flat.shape[1], dtype=torch.float64) + 1e6 * y.reshape(len(y), -1)[:, 0].double()
    order = key.argsort()
    return x[order], y[order]


def _same_multiset(a, b) -> None:
    (xa, ya), (xb, yb) = _canonical(*a), _canonical(*b)
    assert xa.shape == xb.shape and torch.equal(ya, yb)
    assert torch.equal(xa, xb)  # bitwise: ToTensor + Normalize, the same ops in the same order


@pytest.mark.parametrize("subset", [None, 13])
def test_cifar10_epoch_is_the_dataloader_multiset(cifar_root, subset):  # noqa: F811
    """CIFAR-10 (and a seeded subset of it): one epoch of device batches holds exactly the
    normalised images and labels one epoch of the DataLoader holds; test batches keep order."""
    root = cifar_root[0]
    train, test, _ = build_datasets(_cifar_cfg(root, f"dataset.train_size={subset or 'null'}"), seed=0)
    host = make_loaders(train, test, 6, CPU, 0, seed=0)
    dev = device_loaders(train, test, 6, CPU, augment=False, seed=0)
    for h, d in zip(host, dev):
        assert len(h) == len(d)
        _same_multiset(_epoch(h), _epoch(d))
        assert [len(x) for x, _ in h] == [len(x) for x, _ in d]  # full batches, then the remainder
    assert torch.equal(_epoch(host[1])[0], _epoch(dev[1])[0])  # test set: same order too
    assert not torch.equal(_epoch(dev[0])[1], resident(train).y)  # shuffled


def test_mnist_and_tensor_datasets_match_the_dataloader(tmp_path):
    """MNIST idx files, synthetic tensors and diabetes rows: the same multiset per epoch."""
    rng = np.random.default_rng(2)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in [("train", 11), ("t10k", 5)]:
        (raw / f"{split}-images-idx3-ubyte").write_bytes(_idx_images(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx_labels(rng.integers(0, 10, n)))
    cfgs = [dataset_cfg("dataset=mnist", f"dataset.root='{tmp_path}'", "dataset.download=false"),
            dataset_cfg("dataset=synthetic", "dataset.train_size=23", "dataset.test_size=7", "dataset.shape=[2,3,3]"),
            dataset_cfg("dataset=diabetes")]
    for cfg in cfgs:
        train, test, _ = build_datasets(cfg, seed=0)
        host, dev = make_loaders(train, test, 4, CPU, 0, seed=0), device_loaders(train, test, 4, CPU, False, seed=0)
        for h, d in zip(host, dev):
            _same_multiset(_epoch(h), _epoch(d))


def test_augmented_epoch_keeps_labels_and_shapes(cifar_root):  # noqa: F811
    root = cifar_root[0]
    train, test, _ = build_datasets(_cifar_cfg(root), seed=0)
    loader, _ = device_loaders(train, test, 8, CPU, augment=True, seed=0)
    x, y = _epoch(loader)
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.float32
    assert sorted(y.tolist()) == sorted(train.targets)


def _position_images(n: int, h: int = 32, w: int = 32) -> torch.Tensor:
    """uint8 images whose channel 0 is row + 1, channel 1 column + 1, channel 2 the example id."""
    x = torch.zeros(n, 3, h, w, dtype=torch.uint8)
    x[:, 0] = (torch.arange(h) + 1).view(h, 1)
    x[:, 1] = (torch.arange(w) + 1).view(1, w)
    x[:, 2] = (torch.arange(n) % 250 + 1).view(n, 1, 1)
    return x


def test_augmentation_is_torchvisions_crop_then_flip_with_its_statistics():
    """Each augmented image equals torchvision's ``crop(pad(img, 4), dy, dx)`` (then ``hflip``)
    for the offsets it encodes; offsets are uniform over 0..8 on each axis, independent, and half
    the images are flipped — RandomCrop(32, padding=4) + RandomHorizontalFlip() statistics."""
    n = 4500
    src = _position_images(n)
    loader = DeviceBatches(Resident(src, torch.zeros(n, dtype=torch.long), ((0, 0, 0), (1, 1, 1))), 500, CPU,
                           shuffle=True, augment=True, seed=3)
    dys, dxs, flips = [], [], []
    for x, _ in loader:
        px = (x * 255).round().to(torch.uint8)  # mean 0, std 1: back to the stored pixels
        for img in px:
            dy = int(img[0, 16, 16]) - 1 - 16 + PAD
            flip = bool(img[1, 16, 17] < img[1, 16, 16])
            # flipped: out[:, j] = padded[:, dx + 31 - j], so column 16 holds source column dx + 11
            dx = int(img[1, 16, 16]) - (12 if flip else 13)
            ident = int(img[2, 16, 16])
            original = src[(ident - 1) % 250]  # channels 0 and 1 are the same for every example
            expected = TF.crop(TF.pad(original, [PAD]), dy, dx, 32, 32)
            expected = TF.hflip(expected) if flip else expected
            assert torch.equal(img[:2], expected[:2]), (dy, dx, flip)
            assert ((img[2] == ident) | (img[2] == 0)).all()  # padding is zero pixels
            dys.append(dy), dxs.append(dx), flips.append(flip)
    dys, dxs = np.array(dys), np.array(dxs)
    assert len(dys) == n
    sigma = (n * (1 / 9) * (8 / 9)) ** 0.5
    for offsets in (dys, dxs):
        counts = np.bincount(offsets, minlength=9)
        assert len(counts) == 9 and (abs(counts - n / 9) < 4 * sigma).all(), counts
    assert abs(sum(flips) - n / 2) < 4 * (n / 4) ** 0.5
    assert abs(np.corrcoef(dys, dxs)[0, 1]) < 0.06 and abs(np.corrcoef(dys, flips)[0, 1]) < 0.06


def test_deterministic_under_a_seed_and_resumable():
    """Same seed → the same batches, epoch after epoch; each epoch reshuffles; another seed gives
    another order; the generator's state (saved by a checkpoint) replays the next epoch."""
    data = Resident(_position_images(40), torch.arange(40), ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)))

    def make(seed):
        return DeviceBatches(data, 8, CPU, shuffle=True, augment=True, seed=seed)

    a, b, c = make(0), make(0), make(1)
    a1, a2 = _epoch(a), _epoch(a)
    b1, b2 = _epoch(b), _epoch(b)
    assert all(torch.equal(p, q) for p, q in zip(a1 + a2, b1 + b2))
    assert sorted(a1[1].tolist()) == list(range(40)) and not torch.equal(a1[1], a2[1])
    assert not torch.equal(_epoch(c)[1], a1[1])
    state = rng_state(a)
    assert "loader" in state
    nxt = _epoch(a)
    set_rng_state(state, b)
    assert all(torch.equal(p, q) for p, q in zip(nxt, _epoch(b)))


def test_folders_are_not_in_memory():
    """dataset.loader=device on data that are not tensors in memory (image files) stops with one
    line while the job prepares, before its run opens; loader=auto serves them from a DataLoader;
    a dataset class the device loader does not know is a UsageError too."""
    from sweeps.data import DataSpec
    from sweeps.data.device_loader import resident_loader
    from sweeps.tasks.base import check_parts

    config.register()
    from test_config import _compose

    cfg = config.complete(_compose(["model=mlp", "dataset=imagefolder", "dataset.root=x", "dataset.loader=device"]))
    files = torch.utils.data.Dataset()  # not tensors: what an ImageFolder is to the device loader
    with pytest.raises(UsageError) as e:
        check_parts(cfg, DataSpec((1, 8, 8), 10), files)
    assert "dataset.loader=auto or dataloader" in one_line(e)
    assert not resident_loader("auto", files) and resident_loader("auto", TensorDataset(torch.zeros(2, 1)))
    with pytest.raises(UsageError):
        config.validate(_compose(["dataset.loader=gpu"]))
    with pytest.raises(UsageError):
        resident(torch.utils.data.Dataset())
