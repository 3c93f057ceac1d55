"""MNIST's 10,000 test digits as an ImageFolder of PNGs, written from the idx files the repo holds.

The repo ships the published test split (``examples/data/mnist-t10k/raw``, 1.6 MB) rather than
10,000 PNGs; the folder a job reads is made from it once: ``<out>/{train,val}/<digit>/<index>.png``,
8,000 / 2,000 by ``numpy.random.default_rng(0).permutation(10000)`` (its first 8,000 train),
``<index>`` the image's position in the idx file, zero-padded to 5 digits. Jobs that start at
once each write a folder of their own and rename it into place: the first wins, the others
discard theirs. No torch here (numpy and PIL).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from sweeps.errors import DataUnavailable

IMAGES, LABELS = "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"
MD5 = {IMAGES: "9fb629c4189551a2d022fa330f9573f3", LABELS: "ec29112dd5afa0611ce80d1b7f02629c"}  # torchvision's
TRAIN = 8000  # of the 10,000: the rest is val
SOURCE = "http://yann.lecun.com/exdb/mnist/ (or torchvision's mirrors: torchvision.datasets.MNIST(download=True))"


def read_idx(raw: Path) -> tuple[np.ndarray, np.ndarray]:
    """The images ``(10000, 28, 28)`` uint8 and labels ``(10000,)`` uint8 of the idx files in ``raw``.

    Raises:
        DataUnavailable: a file is missing or its md5 is not the published one.
    """
    data = {}
    for name in (IMAGES, LABELS):
        path = raw / name
        if not path.is_file():
            raise DataUnavailable(f"dataset.root: no {name} in {raw}; put MNIST's test split there ({SOURCE})")
        blob = path.read_bytes()
        if hashlib.md5(blob).hexdigest() != MD5[name]:
            raise DataUnavailable(f"{path} is not the published {name} (md5 differs); fetch it again from {SOURCE}")
        data[name] = gzip.decompress(blob)
    images = np.frombuffer(data[IMAGES], np.uint8, offset=16).reshape(-1, 28, 28)  # idx3 header: 4 int32
    labels = np.frombuffer(data[LABELS], np.uint8, offset=8)  # idx1 header: 2 int32
    return images, labels


def ensure(raw: str | Path, out: str | Path) -> Path:
    """``out`` holding the ImageFolder of the idx files in ``raw`` (see the module); written when
    ``out`` lacks ``train/`` and ``val/``, else left as it is. ~3-10 s for the 10,000 PNGs (~9 MB).

    Raises:
        DataUnavailable: the idx files are missing or altered (`read_idx`), or ``out``
            cannot be written.
    """
    raw, out = Path(raw).expanduser(), Path(out).expanduser()
    if (out / "train").is_dir() and (out / "val").is_dir():
        return out
    images, labels = read_idx(raw)
    order = np.random.default_rng(0).permutation(len(labels))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as e:
        raise DataUnavailable(f"cannot write the MNIST ImageFolder to {out} ({e}); point dataset.folder at a "
                              "writable folder") from None
    try:
        for rank, i in enumerate(order):
            folder = work / ("train" if rank < TRAIN else "val") / str(labels[i])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[i], mode="L").save(folder / f"{i:05d}.png")
        try:
            os.rename(work, out)  # atomic: a reader never sees half a folder
        except OSError:  # another job's folder got there first (or out/ is a non-empty leftover)
            if not (out / "train").is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out
