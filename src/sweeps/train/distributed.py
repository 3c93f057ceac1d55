"""Data parallelism inside the training builder: what changes for a rank of a ``device=ddp`` job.

Outside an initialised process group every function here returns its input unchanged, so the
single-device path and the data-parallel path are the same code.

- `init` / `shutdown`: this process's rank in the job's process group (NCCL: one
  GPU per rank; Gloo: the CPU, its cores shared out).
- `wrap`: the model in `DistributedDataParallel` (gradients
  averaged across ranks in the backward pass).
- `shard`: each rank takes ``batch / world`` examples per step from its own part of a
  per-epoch permutation that all ranks share, so the ranks of step *k* together see the same
  examples as one process at ``batch`` (given that permutation) and DDP's averaged gradient is
  that process's gradient. The test loader is not sharded: every rank evaluates the whole test
  set (no collective in evaluation, test metrics equal to one process's; the cost is N-fold
  redundant evaluation, which is timed apart as ``time/eval_s``).
- `gather_epoch`: one ``all_gather_object`` per epoch, after evaluation (never inside a
  step), and `reduce_records` into the one record rank 0 logs.
"""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from sweeps import names
from sweeps.data.loaders import KeyedExamples


def world_size() -> int:
    """Processes in the job's process group (1 outside one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def init(backend: str, timeout_s: float, threads: int | None = None) -> torch.device:
    """Join the process group torch's launcher set up (env: ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``); ``timeout_s`` bounds every collective (s);
    ``threads``: torch's intra-op CPU threads for this rank (``device.threads``; default on Gloo:
    the rank's share of the cores).

    Returns:
        this rank's device: ``cuda:<LOCAL_RANK>`` for ``nccl``, else ``cpu``.
    """
    world = int(os.environ["WORLD_SIZE"])
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)  # NCCL collectives and all_gather_object use the current device
        if threads:
            torch.set_num_threads(threads)
    else:  # N processes share the cores: without this each one starts a thread per core (oversubscribed)
        device = torch.device("cpu")
        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return device


def shutdown() -> None:
    """Leave the process group (after a job that ended ok; a failed rank just exits)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in DDP under a process group, else ``model`` itself."""
    if world_size() == 1:
        return model
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


class ShardedBatches:
    """This rank's part of each step of an in-memory loader (`TensorBatches`
    or `DeviceBatches`, global ``batch`` ``B``, ``n`` examples).

    Every epoch draws the permutation the loader itself would (``randperm(n)`` from its seeded
    ``generator``, which every rank holds in the same state); step *k* of rank *r* takes
    positions ``k·B + r·B/W … k·B + (r+1)·B/W``. The last, short step is split evenly, padded
    with the permutation's first examples (as `DistributedSampler` pads) so every rank
    runs the same number of steps at the same batch shape. Augmentation draws from the same
    generator per sub-batch, so ranks stay in lockstep (with ``dataset.augment`` the later
    epochs' permutations differ from one process's, which draws for whole batches).

    Yields ``(x, y)`` with ``x`` of shape ``(≤ B/W, *in_shape)``; ``len()`` is the step count.
    """

    def __init__(self, loader, rank: int, world: int):
        self.loader, self.rank, self.world = loader, rank, world
        b, n = loader.batch_size, loader.n
        self.steps = -(-n // b)
        self.remainder = n - (self.steps - 1) * b  # examples in the last step, all ranks together
        self.last = -(-self.remainder // world)  # this rank's examples in the last step (padded)
        self.batch_size = b // world
        self.n = (self.steps - 1) * self.batch_size + self.last  # examples per epoch on this rank

    @property
    def generator(self) -> torch.Generator:
        return self.loader.generator  # a checkpoint saves it: the permutations go on where they were

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        inner, g, b = self.loader, self.loader.generator, self.loader.batch_size
        order = torch.randperm(inner.n, generator=g, device=g.device) if inner.shuffle else \
            torch.arange(inner.n, device=g.device)
        pad = self.last * self.world - self.remainder
        if pad:
            order = torch.cat([order, order[torch.arange(pad, device=order.device) % inner.n]])
        for k in range(self.steps):
            size = self.batch_size if k < self.steps - 1 else self.last
            start = k * b + self.rank * size
            yield inner.take(order[start:start + size])


class EpochSampling:
    """A DataLoader over a `DistributedSampler` (``batch / world`` per step) that tells
    the sampler the epoch before each pass (``set_epoch``: a new shared permutation per epoch);
    with workers, each example's augmentation is seeded from ``(seed, epoch, index)``
    (`_Keyed`), without them the training process's RNG (which a checkpoint holds) draws
    it. ``epoch`` counts passes from 0; a resumed job sets it to the epochs done, which restores
    both — there is no generator state to checkpoint (``generator`` is None)."""

    generator = None

    def __init__(self, loader: DataLoader, sampler: DistributedSampler, seed: int):
        self.loader, self.sampler, self.seed, self.epoch = loader, sampler, seed, 0
        self.batch_size, self.n = loader.batch_size, len(sampler)  # per rank (compile's batch shapes)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.sampler.set_epoch(self.epoch)
        self.loader.generator.manual_seed(self.seed + 100_003 * self.epoch)  # the workers' base seed: not a state to save
        self.epoch += 1
        return iter(self.loader)


class _Keyed(Sampler):
    """A `DistributedSampler`'s indices as ``(epoch key, index)`` for
    `KeyedExamples`: the key follows the sampler's epoch, so a
    resumed job (which sets the epoch) augments each example as an uninterrupted one would."""

    def __init__(self, sampler: DistributedSampler, seed: int):
        self.sampler, self.seed = sampler, seed

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        key = self.seed + 100_003 * self.sampler.epoch
        return ((key, i) for i in self.sampler)


def shard(loaders: tuple, batch: int, seed: int) -> tuple:
    """``(train, test)`` loaders for this rank (see the module docstring); unchanged outside a
    process group. ``batch`` is the global batch; ``seed`` seeds the shared permutations.

    Raises:
        ValueError: ``batch`` does not divide over the ranks (the config check says so first).
    """
    world = world_size()
    if world == 1:
        return loaders
    train, test = loaders
    if batch % world:
        raise ValueError(f"batch={batch} does not divide over {world} processes")
    if not isinstance(train, DataLoader):  # in memory, on the host or the device
        return ShardedBatches(train, rank(), world), test
    sampler = DistributedSampler(train.dataset, world, rank(), shuffle=True, seed=seed)
    keyed = isinstance(train.dataset, KeyedExamples)  # workers: augmentation keyed by (epoch, example)
    sharded = DataLoader(train.dataset, batch_size=batch // world, sampler=_Keyed(sampler, seed) if keyed else sampler,
                         num_workers=train.num_workers,
                         collate_fn=train.collate_fn, pin_memory=train.pin_memory,
                         persistent_workers=train.persistent_workers, worker_init_fn=train.worker_init_fn,
                         generator=torch.Generator())
    # each rank's workers draw their own augmentations
    return EpochSampling(sharded, sampler, seed + 7919 * rank()), test


def gather_epoch(rec: dict) -> dict:
    """Every rank's record of the epoch just ended, reduced (`reduce_records`) — the same
    on every rank, so every rank takes the same decisions from it (a diverged loss). One
    ``all_gather_object`` (a host sync) per epoch; ``rec`` itself outside a process group."""
    world = world_size()
    if world == 1:
        return rec
    recs: list = [None] * world
    dist.all_gather_object(recs, rec)
    return reduce_records(recs)


_SLOWEST = (names.EPOCH_S, names.EVAL_S, names.ELAPSED_S, names.EPOCH_PEAK_MB)  # max over ranks


def reduce_records(recs: list[dict]) -> dict:
    """One epoch record from the ranks' records (rank 0's first): ``phase/<p>_ms`` is the mean
    over ranks and ``phase/<p>_max_ms`` the slowest rank's; ``time/epoch_s`` (and eval, elapsed,
    peak memory) the slowest rank's; ``samples`` the sum; ``train/loss`` and ``train/acc`` the
    mean weighted by samples (the global mean); ``perf/samples_per_s`` all samples over the
    slowest rank's epoch time. Test metrics, telemetry and the rest are rank 0's (every rank
    evaluates the whole test set; only rank 0 samples telemetry)."""
    out = dict(recs[0])
    samples = [r.get("samples", 0) for r in recs]
    total = sum(samples)
    out["samples"] = total
    for phase in names.PHASES:
        values = [r[names.phase_ms(phase)] for r in recs if names.phase_ms(phase) in r]
        if values:
            out[names.phase_ms(phase)] = sum(values) / len(values)
            out[names.phase_max_ms(phase)] = max(values)
    if all(names.PHASE_SUM_S in r for r in recs):
        out[names.PHASE_SUM_S] = sum(r[names.PHASE_SUM_S] for r in recs) / len(recs)
    for key in (names.TRAIN_LOSS, names.TRAIN_ACC):
        if total and all(key in r for r in recs):
            out[key] = sum(r[key] * s for r, s in zip(recs, samples)) / total
    for key in _SLOWEST:
        if all(key in r for r in recs):
            out[key] = max(r[key] for r in recs)
    if out.get(names.EPOCH_S):
        out[names.SAMPLES_PER_S] = total / out[names.EPOCH_S]
    return out
