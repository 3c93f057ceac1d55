"""Host-side loaders: a seeded, shuffled DataLoader for files, and :class:`TensorBatches` that
slices in-memory tensors with one gather per batch (no per-example Python calls)."""
from __future__ import annotations

import os

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset, TensorDataset


def default_workers(cfg: DictConfig, device: torch.device) -> int:
    """DataLoader workers when ``dataset.num_workers`` is null: 0 for in-memory tensors (workers
    would only add IPC); else the cores the training leaves free — on a GPU every core but one
    (up to 8: the training process needs one to feed the device); on a CPU the cores beyond
    torch's intra-op threads (up to 4), so workers never fight the training for cores (on a
    machine whose cores torch uses entirely: 0, images are decoded in the training process and
    show in ``phase/data_ms``). :func:`describe_workers` says which, for the run's tags."""
    if cfg.num_workers is not None:
        return cfg.num_workers
    if cfg.name in ("diabetes", "synthetic"):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device.type == "cuda":
        return max(0, min(8, cpus - 1))
    return max(0, min(4, cpus - torch.get_num_threads()))


def describe_workers(cfg: DictConfig, device: torch.device) -> str:
    """One line for the ``data.loader`` tag: the loader and how its worker count was chosen."""
    if cfg.get("loader") == "device":
        return f"device (the dataset resident on {device.type}; no workers)"
    n = default_workers(cfg, device)
    if cfg.num_workers is not None:
        return f"dataloader, {n} worker(s) (dataset.num_workers)"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return (f"dataloader, {n} worker(s) (chosen: {cpus} core(s), {torch.get_num_threads()} torch thread(s), "
            f"{device.type} training)")


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
        if self.batch_size >= self.n:  # full batch: its mean gradient does not depend on the order,
            yield self.tensors  # so no permutation and no copy (study 5: 10,000 epochs of one step)
            return
        order = torch.randperm(self.n, generator=self.generator) if self.shuffle else None
        for start in range(0, self.n, self.batch_size):
            yield self.take(order[start:start + self.batch_size] if order is not None
                            else slice(start, start + self.batch_size))

    def take(self, pick) -> tuple:
        """The examples ``pick`` (an index tensor or a slice) as ``(x, y)``; a data-parallel rank
        takes its part of each step through this (:mod:`sweeps.train.distributed`)."""
        return tuple(t[pick] for t in self.tensors)


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
