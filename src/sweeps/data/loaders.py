"""Host-side loaders: a seeded, shuffled DataLoader for files, and `TensorBatches` that
slices in-memory tensors with one gather per batch (no per-example Python calls)."""
from __future__ import annotations

import os

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset, Sampler, Subset, TensorDataset, get_worker_info

from sweeps.data.indexed import IndexedBatches
from sweeps.devices import of


def in_memory(ds: Dataset) -> bool:
    """Whether ``ds`` is tensors in memory (a TensorDataset, or a seeded subset of one)."""
    return isinstance(ds.dataset if isinstance(ds, Subset) else ds, TensorDataset)


# torch's intra-op thread count as this process started, before any job set its own
# (device.threads, the small-step rule): what the default worker count is derived from
_PROCESS_THREADS = torch.get_num_threads()


def process_threads() -> int:
    """torch's default intra-op thread count for this process: what it had when sweeps' data code
    was imported, before any job set threads (``OMP_NUM_THREADS`` and the like count; a job's
    ``device.threads`` or the small-step rule do not)."""
    return _PROCESS_THREADS


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_workers(cfg: DictConfig, device: torch.device, train: Dataset | None = None) -> int:
    """DataLoader workers (a count) when ``dataset.num_workers`` is null; its value, untouched,
    when set. Null: 0 for in-memory tensors (workers would only add IPC); else the cores the
    training leaves free — on a GPU every core but one (up to 8: the training process needs one to
    feed the device); on a CPU the cores beyond torch's default intra-op thread count for the
    process (`process_threads`, up to 4), so workers never fight the training for cores (on
    a machine whose cores torch uses entirely: 0, images are decoded in the training process and
    show in ``phase/data_ms``).

    The count depends on the dataset, the device type and the machine only: not on the batch
    size, and not on the job's own thread count (``device.threads`` or the small-step rule), so
    every job of a model × dataset × device in a sweep gets the same workers and, with the device
    type, the same pinning (`make_loaders`). `describe_workers` says which, for the
    run's tags."""
    if cfg.num_workers is not None:
        return cfg.num_workers
    if train is not None and in_memory(train):
        return 0
    cpus = _cores()
    if device.type == "cuda":
        return max(0, min(8, cpus - 1))
    return max(0, min(4, cpus - process_threads()))


def describe_workers(cfg: DictConfig, device: torch.device, train: Dataset | None = None,
                     resident: bool = False, threads: int | None = None) -> str:
    """One line for the ``data.loader`` tag: the loader (``resident``: the device loader), how its
    worker count was chosen, and the torch thread count the job trains with (``threads``; None:
    torch's current count — call it once the job's count is set), e.g. ``"dataloader, 0
    worker(s) (chosen: 2 core(s), torch's default 2 thread(s), cpu training); trains on 1 torch
    thread(s)"``."""
    trains = f"trains on {threads if threads is not None else torch.get_num_threads()} torch thread(s)"
    if resident:
        return f"device (the dataset resident on {device.type}; no workers); {trains}"
    n = default_workers(cfg, device, train)
    if cfg.num_workers is not None:
        return f"dataloader, {n} worker(s) (dataset.num_workers); {trains}"
    return (f"dataloader, {n} worker(s) (chosen: {_cores()} core(s), torch's default {process_threads()} "
            f"thread(s), {device.type} training); {trains}")


class TensorBatches(IndexedBatches):
    """Batches sliced from in-memory tensors with one gather each — a DataLoader would call
    ``__getitem__`` and collate per example, which dominates the step for tabular data (a full
    batch of 10⁶ rows: 10⁶ Python calls). Reshuffled every epoch from a seeded generator.

    Yields ``(x, y)`` with ``x`` of shape ``(≤ batch, *in_shape)``. With ``pin`` (a CUDA job) the
    batches are in page-locked host memory, so the trainer's ``x.to(device, non_blocking=True)``
    is a real asynchronous copy — from pageable memory CUDA stages the batch through a pinned
    buffer with the host waiting (CUDA Runtime API, "API synchronization behavior"; PyTorch's
    ``pin_memory`` notes). A full batch is the stored tensors, pinned once; a smaller one is
    gathered, then pinned (one more host copy of the batch).
    """

    def __init__(self, data: TensorDataset, batch: int, shuffle: bool, seed: int = 0, pin: bool = False):
        self.tensors, self.batch_size, self.shuffle, self.pin = data.tensors, batch, shuffle, pin
        self.n = len(data.tensors[0])
        self.generator = torch.Generator().manual_seed(seed)
        if pin and batch >= self.n:
            self.tensors = tuple(t.pin_memory() for t in self.tensors)

    def whole(self) -> tuple:
        """The stored tensors, pinned once for a CUDA job: no gather or copy per epoch."""
        return self.tensors

    def take(self, pick) -> tuple:
        """The examples ``pick`` (an index tensor or a slice) as ``(x, y)``; a data-parallel rank
        takes its part of each step through this (`sweeps.train.distributed`)."""
        batch = tuple(t[pick] for t in self.tensors)
        return tuple(t.pin_memory() for t in batch) if self.pin else batch


class EpochKeyedSampler(Sampler):
    """A seeded shuffle that also hands each example its own random key, ``(epoch key, index)``.

    With DataLoader workers, augmentation runs on the workers' RNGs, which live in other
    processes (persistent: for the whole job) and which no checkpoint can save, so a resumed job
    would crop and flip differently from one that never stopped. Here the per-epoch key is drawn
    from `generator` — the only state, saved with the checkpoint — and
    `KeyedExamples` seeds the worker's RNG from ``(key, index)`` before each example, so the
    augmentation of example *i* in epoch *e* no longer depends on which worker drew it or on
    when the workers started. Yields ``(int, int)`` pairs, ``len(source)`` per epoch.
    """

    def __init__(self, n: int, seed: int):
        self.n, self.generator = n, torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        key = int(torch.randint(2**62, (), generator=self.generator))
        for i in torch.randperm(self.n, generator=self.generator).tolist():
            yield key, i


class KeyedExamples(Dataset):
    """``dataset[(key, i)]`` = ``dataset[i]`` with, in a worker process, torch's RNG seeded from
    ``(key, i)`` first (see `EpochKeyedSampler`); in the training process itself the global
    RNG is left alone (a checkpoint restores it)."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item):
        key, i = item
        if get_worker_info() is not None:
            torch.manual_seed((key + 1_000_003 * i) % 2**63)
        return self.dataset[i]


def shuffle_generator(loader) -> torch.Generator | None:
    """The generator that draws ``loader``'s order (and augmentation keys): what a checkpoint saves."""
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, EpochKeyedSampler):
        return sampler.generator
    return getattr(loader, "generator", None)


def make_loaders(train: Dataset, test: Dataset, batch: int, device: torch.device, workers: int,
                 seed: int) -> tuple:
    """Shuffled training loader (seeded) and ordered test loader, both of ``batch`` examples:
    `TensorBatches` for in-memory tensors, a DataLoader for everything else (with workers,
    an `EpochKeyedSampler` so that a resumed job draws the same examples and
    augmentations as one that never stopped)."""
    pin = of(device).pin_memory()  # the kind's (CUDA): page-locked batches, asynchronous host-to-device copies
    if isinstance(train, TensorDataset) and isinstance(test, TensorDataset):
        return TensorBatches(train, batch, True, seed, pin), TensorBatches(test, min(batch, len(test)), False, pin=pin)
    common = dict(num_workers=workers, pin_memory=pin, persistent_workers=workers > 0)
    if workers > 0:  # the loader's own generator only seeds the workers' base seed, which no longer matters
        train_loader = DataLoader(KeyedExamples(train), batch_size=batch, sampler=EpochKeyedSampler(len(train), seed),
                                  generator=torch.Generator().manual_seed(seed), **common)
    else:
        train_loader = DataLoader(train, batch_size=batch, shuffle=True,
                                  generator=torch.Generator().manual_seed(seed), **common)
    test_loader = DataLoader(test, batch_size=min(batch, len(test)), shuffle=False, **common)
    return train_loader, test_loader
