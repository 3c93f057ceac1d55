"""Host-side loaders: a seeded, shuffled DataLoader for files, and :class:`TensorBatches` that
slices in-memory tensors with one gather per batch (no per-example Python calls)."""
from __future__ import annotations

import os

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset, TensorDataset


def default_workers(cfg: DictConfig, device: torch.device) -> int:
    """DataLoader workers: 0 for in-memory tensors (workers would only add IPC), else a few
    per device — decoding and augmenting images on the training process stalls the step."""
    if cfg.num_workers is not None:
        return cfg.num_workers
    if cfg.name in ("diabetes", "synthetic"):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(8, cpus) if device.type == "cuda" else min(4, max(1, cpus // 2))


class TensorBatches:
    """Batches sliced from in-memory tensors with one gather each — a DataLoader would call
    ``__getitem__`` and collate per example, which dominates the step for tabular data (a full
    batch of 10⁶ rows: 10⁶ Python calls). Reshuffled every epoch from a seeded generator.

    Yields ``(x, y)`` with ``x`` of shape ``(≤ batch, *in_shape)``.
    """

    def __init__(self, data: TensorDataset, batch: int, shuffle: bool, seed: int = 0):
        self.tensors, self.batch_size, self.shuffle = data.tensors, batch, shuffle
        self.n = len(data.tensors[0])
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def __iter__(self):
        order = torch.randperm(self.n, generator=self.generator) if self.shuffle else None
        for start in range(0, self.n, self.batch_size):
            pick = order[start:start + self.batch_size] if order is not None else slice(start, start + self.batch_size)
            yield tuple(t[pick] for t in self.tensors)


def make_loaders(train: Dataset, test: Dataset, batch: int, device: torch.device, workers: int,
                 seed: int) -> tuple:
    """Shuffled training loader (seeded) and ordered test loader, both of ``batch`` examples:
    :class:`TensorBatches` for in-memory tensors, a DataLoader for everything else."""
    if isinstance(train, TensorDataset) and isinstance(test, TensorDataset):
        return TensorBatches(train, batch, True, seed), TensorBatches(test, min(batch, len(test)), False)
    common = dict(num_workers=workers, pin_memory=device.type == "cuda", persistent_workers=workers > 0)
    train_loader = DataLoader(train, batch_size=batch, shuffle=True,
                              generator=torch.Generator().manual_seed(seed), **common)
    test_loader = DataLoader(test, batch_size=min(batch, len(test)), shuffle=False, **common)
    return train_loader, test_loader
