"""A cheap fingerprint of the data a job reads, for the job's identity (``sweeps.data_fingerprint``).

Files (cifar10, mnist, imagefolder): the relative path and size of every file under
``dataset.root`` that the dataset reads, hashed — no file content is read, so a 10,000-image
folder costs one directory walk (~20 ms). The path of the root itself is not part of it: the same
files moved to another folder give the same fingerprint (a resumed job finds its run), while a
folder with other files, or the same names with other sizes, never does. Data generated from the
config (synthetic, diabetes from scikit-learn) is named by its generator: the config already
covers it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from omegaconf import DictConfig

# the sub-folders a torchvision dataset reads under dataset.root
SUBDIRS = {"cifar10": ("cifar-10-batches-py",), "mnist": ("MNIST",), "imagefolder": ("train", "val")}


def data_fingerprint(cfg: DictConfig) -> str:
    """16 hex digits naming the data ``cfg`` (the ``dataset`` node) reads; ``generated:<name>``
    for data made from the config, ``missing`` when the folder is not there."""
    if cfg.name not in SUBDIRS:
        return f"generated:{cfg.name}"
    root = Path(str(cfg.root)).expanduser()
    entries = []
    for sub in SUBDIRS[cfg.name]:
        base = root / sub
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = Path(dirpath) / name
                try:
                    size = path.stat().st_size
                except OSError:
                    continue
                entries.append(f"{path.relative_to(root).as_posix()}\t{size}")
    if not entries:
        return "missing"
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]
