"""The built-in datasets, each a ``dataset._target_`` like a user's own: torchvision (CIFAR-10,
MNIST, ImageFolder), scikit-learn (diabetes) and synthetic tensors.

Each returns ``(train, test, DataSpec)`` — the contract's ``(train, test)`` plus the optional
[`DataSpec`][sweeps.data.spec.DataSpec] that states the shape, classes and the regression
target's scale exactly ([`sweeps.data.datasets.build_datasets`][sweeps.data.datasets.build_datasets]). Missing files raise
[`DataUnavailable`][sweeps.errors.DataUnavailable] with one line that names ``dataset.root`` and says how to provide the
data; nothing here prints a traceback for a user's mistake. A function's ``reads`` attribute
names the folders under ``root`` it reads (the data fingerprint); ``generated`` marks data made
from the arguments alone (nothing to fingerprint).
"""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable

import torch
from PIL import Image
from torch.utils.data import TensorDataset

from sweeps.data.spec import DataSpec
from sweeps.errors import DataUnavailable, UsageError, brief

# Per-channel mean and std of the training images (computed on the full training splits).
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
MNIST_STATS = ((0.1307,), (0.3081,))
DOWNLOAD_TIMEOUT_S = 30  # a download that cannot connect fails instead of hanging the sweep


def _image_transforms(stats, augment: bool, crop, extra=()) -> tuple[Callable, Callable]:
    from torchvision import transforms  # here, not at the top: only image datasets need torchvision

    norm = [transforms.ToTensor(), transforms.Normalize(*stats)]
    aug = [transforms.RandomCrop(crop, padding=4), transforms.RandomHorizontalFlip()] if augment else []
    return transforms.Compose([*extra, *aug, *norm]), transforms.Compose([*extra, *norm])


def _torchvision(cls, title: str, hint: str, root: str, download: bool, augment: bool, stats, crop: int):
    folder = Path(root).expanduser()
    train_tf, test_tf = _image_transforms(stats, augment, crop)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        train = cls(folder, train=True, transform=train_tf, download=download)
        test = cls(folder, train=False, transform=test_tf, download=False)
    except (RuntimeError, OSError) as e:  # torchvision: "Dataset not found"; urllib: URLError
        detail = brief(e) or type(e).__name__  # torchvision's text spans lines
        why = "dataset.download=false" if not download else f"download failed ({detail})"
        raise DataUnavailable(f"{title} is not under dataset.root={root} ({folder.resolve()}) and "
                              f"{why}; {hint}, or run once with network access and dataset.download=true") from None
    finally:
        socket.setdefaulttimeout(previous)
    return train, test


def cifar10(root: str = "data", download: bool = True, augment: bool = False):
    """CIFAR-10 (torchvision): 50,000 train / 10,000 test images ``(3, 32, 32)``, 10 classes."""
    from torchvision import datasets

    train, test = _torchvision(datasets.CIFAR10, "CIFAR-10",
                               "put the python version (cifar-10-batches-py/) from "
                               "https://www.cs.toronto.edu/~kriz/cifar.html there", root, download, augment,
                               CIFAR10_STATS, 32)
    return train, test, DataSpec((3, 32, 32), 10)


def mnist(root: str = "data", download: bool = True, augment: bool = False):
    """MNIST (torchvision): 60,000 train / 10,000 test images ``(1, 28, 28)``, 10 classes."""
    from torchvision import datasets

    train, test = _torchvision(datasets.MNIST, "MNIST", "put the four idx files in <root>/MNIST/raw/",
                               root, download, augment, MNIST_STATS, 28)
    return train, test, DataSpec((1, 28, 28), 10)


cifar10.reads = ("cifar-10-batches-py",)  # the folders under root the data fingerprint covers
mnist.reads = ("MNIST",)


def imagefolder(root: str, augment: bool = False, channels: int | None = None, image_size: int | None = None,
                seed: int = 0):
    """The user's own ``<root>/train/<class>/`` and ``<root>/val/<class>/`` images (torchvision
    ImageFolder), ``channels`` 1 or 3 (None: from the first image), resized to ``image_size``²
    (None: keep; then all images must share one size), normalised with per-channel mean and std
    estimated on ≤ 500 training images (seeded)."""
    from torchvision import datasets, transforms

    folder = Path(root).expanduser()
    layout = "ImageFolder layout is <root>/train/<class>/<image> and <root>/val/<class>/<image>"
    if not (folder / "train").is_dir() or not (folder / "val").is_dir():
        raise DataUnavailable(f"dataset.root={root} ({folder.resolve()}) has no train/ and val/ folders; {layout}")
    try:
        probe = datasets.ImageFolder(folder / "train")
    except (FileNotFoundError, OSError) as e:
        raise DataUnavailable(f"dataset.root={root}: {e}; {layout}") from None
    if channels not in (None, 1, 3):
        raise UsageError(f"dataset.channels={channels} is not valid: use 1, 3 or null (from the images)")
    with Image.open(probe.samples[0][0]) as first:
        channels = channels or (1 if first.mode in ("L", "I", "I;16", "1") else 3)
        width, height = first.size
    size = (image_size, image_size) if image_size else (height, width)
    # ImageFolder's loader already gives RGB; Grayscale(3) would replace colour with gray copies
    extra = ([transforms.Grayscale(1)] if channels == 1 else []) + \
        ([transforms.Resize(size)] if image_size else [])  # else all images must share one size
    stats = _estimate_stats(probe, extra, seed)
    train_tf, test_tf = _image_transforms(stats, augment, size, extra)
    try:
        train = datasets.ImageFolder(folder / "train", transform=train_tf)
        test = datasets.ImageFolder(folder / "val", transform=test_tf)
    except (FileNotFoundError, OSError) as e:  # e.g. a class folder of val/ without images
        raise DataUnavailable(f"dataset.root={root}: {brief(e, 300)}; {layout}") from None
    if test.classes != train.classes:
        raise DataUnavailable(f"dataset.root={root}: val/ classes {test.classes} differ from train/ {train.classes}")
    return train, test, DataSpec((channels, *size), len(train.classes))


imagefolder.reads = ("train", "val")


def mnist10k(root: str, folder: str | None = None, augment: bool = False, seed: int = 0):
    """MNIST's 10,000 test digits from the idx files in ``<root>/raw`` (the repo ships them in
    ``examples/data/mnist-t10k``) as an ImageFolder: 8,000 train / 2,000 val images ``(1, 28, 28)``,
    10 classes. The PNGs are written once to ``folder`` (None: ``<root>/imagefolder``) by
    `sweeps.data.mnist_folder.ensure`, then read as `imagefolder` reads any folder.

    Raises:
        DataUnavailable: the idx files are missing or altered, or the folder cannot be written.
    """
    from sweeps.data import mnist_folder

    base = Path(root).expanduser()
    out = mnist_folder.ensure(base / "raw", Path(folder).expanduser() if folder else base / "imagefolder")
    return imagefolder(str(out), augment=augment, channels=1, seed=seed)


mnist10k.reads = ("raw",)  # the PNGs are made from these: the idx files are the data's identity


def _estimate_stats(folder, extra: list, seed: int, n: int = 500):
    """Per-channel mean and std over a seeded sample of ≤ ``n`` training images of ``folder``
    (a torchvision ImageFolder)."""
    from torchvision import transforms

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


def diabetes(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's bundled diabetes regression set (442 rows × 10 features), split with
    ``test_fraction`` held out (seeded), standardised with training statistics; the DataSpec's
    ``target_scale`` puts RMSE back in the target's units."""
    from sklearn.datasets import load_diabetes

    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in load_diabetes(return_X_y=True))
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(test_fraction * len(x)))
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    # standardise with training statistics only, so nothing leaks from the test rows
    xm, xs = x[train_idx].mean(0), x[train_idx].std(0)
    ym, ys = y[train_idx].mean(), y[train_idx].std()
    x, y = (x - xm) / xs, ((y - ym) / ys).unsqueeze(1)
    spec = DataSpec((x.shape[1],), 1, "regression", float(ys))
    return TensorDataset(x[train_idx], y[train_idx]), TensorDataset(x[test_idx], y[test_idx]), spec


def synthetic(shape=(3, 32, 32), num_classes: int = 10, regression: bool = False,
              train_size: int | None = None, test_size: int | None = None, seed: int = 0):
    """Random tensors of ``shape`` for pure throughput: ``train_size`` (default 10,000) and
    ``test_size`` (2,000) examples, classes drawn from ``0..num_classes-1`` or (``regression``)
    scikit-learn's linear-plus-noise target, standardised."""
    shape = tuple(shape)
    n_train, n_test = train_size or 10_000, test_size or 2_000
    if regression:  # scikit-learn's linear-plus-noise problem, target standardised
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
                             torch.randint(0, num_classes, (n,), generator=g))
    return make(n_train), make(n_test), DataSpec(shape, num_classes)


diabetes.generated = synthetic.generated = True  # made from the arguments: no files to fingerprint
