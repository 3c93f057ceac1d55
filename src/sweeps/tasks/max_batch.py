"""``task=max_batch``: the largest batch that fits for a model / device / precision.

Search: double the batch from ``max_batch.start`` until a trial runs out of memory (or
``max_batch.limit`` is reached), then bisect between the last batch that fit and the first that
did not — exact to one example of its own trials, in about 2·log2(N) trials. "Fits" assumes
memory grows with the batch, which it does for these models. Two searches can still differ by a
few examples: near the boundary, whether a batch fits also depends on cuDNN's workspace choices
and the allocator's state (cnn10 on an H100: 25,680 and 25,664, 0.06 % apart).

A trial is one real training step at that batch — forward, backward and optimizer step through
the job's own `Trainer` (same precision, autocast, loss scaling,
channels_last, optimizer implementation, so the same memory) — plus one evaluation batch, on
random inputs of the dataset's shape. Out of memory is what the device's kind says it is
(`sweeps.devices.DeviceKind.is_oom`: any allocator's, `sweeps.devices.is_oom`).
Recovery happens *outside* the ``except`` block: inside it the traceback still holds the failed
frames and their tensors. Then the gradients are dropped, garbage is collected and the CUDA
cache emptied, so each trial starts from the memory the previous one found.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (tensors, MB), reset before each trial;
on a CPU the process's peak resident set (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``; else the current RSS). A CPU rarely raises an out-of-memory error —
the kernel's OOM killer ends the process first — so on a CPU a trial whose memory, extrapolated
linearly from the last batch that fit, exceeds 80 % of the memory available when the search
began counts as not fitting (``max_batch/predicted``) and is not run.
"""
from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
import torch

from sweeps import devices, names
from sweeps.tasks.base import Task, register
from sweeps.train.builder import build_model
from sweeps.train.loop import Trainer
from sweeps.train.memory import release_memory, warm_cublas
from sweeps.train.optim import make_optimizer
from sweeps.train.speed import random_batch
from sweeps.train.timing import synchronize

log = logging.getLogger("sweeps")
MB = 2**20


@dataclass
class Trial:
    """One trial: ``batch`` examples; whether it ``fits``; its peak memory (MB, None when it
    did not fit); ``predicted``: skipped on a CPU because it would not fit in RAM."""
    batch: int
    fits: bool
    peak_mb: float | None = None
    predicted: bool = False


@dataclass
class Result:
    """``max_batch`` (0: not even ``start`` fits), the peak memory at it (MB), ``bound``:
    ``exact`` (the next batch fails), ``limit`` (``max_batch.limit`` fits: the true maximum may
    be higher) or ``none`` (nothing fits), and every trial in order."""
    max_batch: int
    peak_mb: float | None
    bound: str
    trials: list[Trial] = field(default_factory=list)


def search(trial: Callable[[int], Trial], start: int = 1, limit: int = 65536) -> Result:
    """Doubling from ``start`` (capped at ``limit``), then bisection; ``trial(b)`` runs one trial."""
    trials: list[Trial] = []
    good, good_peak, bad = 0, None, None
    b = start
    while bad is None:
        t = trial(b)
        trials.append(t)
        if not t.fits:
            bad = b
        else:
            good, good_peak = b, t.peak_mb
            if b >= limit:
                return Result(good, good_peak, "limit", trials)
            b = min(2 * b, limit)
    while bad - good > 1:
        mid = (good + bad) // 2
        t = trial(mid)
        trials.append(t)
        if t.fits:
            good, good_peak = mid, t.peak_mb
        else:
            bad = mid
    return Result(good, good_peak, "exact" if good else "none", trials)


def _reset_peak(device: torch.device) -> None:
    kind = devices.of(device)
    kind.reset_peak(device)  # the kind's own peak (CUDA's allocator statistics)
    if not kind.host_memory:
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: peak RSS (VmHWM) := current RSS
    except OSError:
        pass


def peak_mb(device: torch.device) -> float:
    """Peak memory since `_reset_peak`: the device kind's (`sweeps.devices.DeviceKind.peak_mb`:
    CUDA tensors), or where it keeps none the process's peak RSS (MB)."""
    if (peak := devices.of(device).peak_mb(device)) is not None:
        return peak
    try:
        return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) / 1024
    except (OSError, AttributeError):
        return psutil.Process().memory_info().rss / MB


def step_trial(model, spec, device: torch.device, precision, channels_last: bool,
               make_optimizer: Callable) -> Callable[[int], Trial]:
    """A ``trial(b)`` that runs one training step and one evaluation batch of ``b`` random
    examples on ``model`` through a `Trainer`, with a fresh optimizer from
    ``make_optimizer(params)`` (its state is part of the footprint)."""
    kind = devices.of(device)
    warm_cublas(device)  # its workspace stays allocated: part of the baseline, not of the first trial
    release_memory(device)
    baseline = kind.peak_mb(device)
    baseline = psutil.Process().memory_info().rss / MB if baseline is None else baseline
    budget = 0.8 * psutil.virtual_memory().available / MB  # CPU only: see the module's docstring
    last: list[Trial] = []

    def run(b: int) -> None:
        x, y = random_batch(spec, b, device)
        trainer = Trainer(model, spec, make_optimizer(model.parameters()), None, device, math.inf,
                          precision=precision, channels_last=channels_last)
        trainer.train_epoch([(x, y)], f"max_batch {b}")
        trainer.evaluate([(x, y)])
        synchronize(device)

    def trial(b: int) -> Trial:
        if kind.host_memory and last and last[-1].peak_mb is not None:
            grown = max(last[-1].peak_mb - baseline, 0.0) * b / last[-1].batch
            if grown > budget:
                log.info("max_batch: batch %d: skipped, ~%.0f MB predicted > %.0f MB of RAM available", b, grown, budget)
                return Trial(b, False, predicted=True)
        _reset_peak(device)
        fits = True
        try:
            run(b)
        except Exception as e:
            if not kind.is_oom(e):
                raise
            fits = False
        # out of the except block: the failed frames (and their tensors) are gone now
        model.zero_grad(set_to_none=True)
        peak = peak_mb(device) if fits else None
        release_memory(device)
        log.info("max_batch: batch %d %s%s", b, "fits" if fits else "does not fit",
                 f" (peak {peak:.0f} MB)" if peak is not None else "")
        out = Trial(b, fits, peak)
        if fits:
            last.append(out)
        return out

    return trial


def run_task(cfg, job, model, spec, device: torch.device, precision, channels_last: bool,
             make_optimizer: Callable) -> Result:
    """``task=max_batch`` for one job: search, then log ``mem/max_batch``,
    ``mem/max_batch_peak_mb`` (and ``mem/peak_mb``), ``max_batch/trials``, per trial (step = trial
    number) ``max_batch/batch``, ``max_batch/fits`` (1/0), ``max_batch/peak_mb``,
    ``max_batch/predicted``, and the tag ``max_batch.bound``. ``cfg`` is the ``max_batch`` node.

    Raises:
        torch.OutOfMemoryError: not even ``max_batch.start`` fits (the job's outcome is then ``oom``).
    """
    result = search(step_trial(model, spec, device, precision, channels_last, make_optimizer), cfg.start, cfg.limit)
    for i, t in enumerate(result.trials, 1):
        job.log_metrics({names.TRIAL_BATCH: t.batch, names.TRIAL_FITS: float(t.fits),
                         names.TRIAL_PREDICTED: float(t.predicted),
                         **({names.TRIAL_PEAK_MB: t.peak_mb} if t.peak_mb is not None else {})}, step=i)
    job.set_tags({names.MAX_BATCH_BOUND_TAG: result.bound})
    job.log_metrics({names.MAX_BATCH: result.max_batch, names.MAX_BATCH_TRIALS: len(result.trials),
                     **({names.MAX_BATCH_PEAK_MB: result.peak_mb, names.PEAK_MB: result.peak_mb}
                        if result.peak_mb is not None else {})})
    if result.bound == "none":
        raise torch.OutOfMemoryError(f"max_batch: not even batch {cfg.start} fits on {device}")
    log.info("max_batch: %d fits (%s; peak %.0f MB; %d trials)", result.max_batch,
             "the next batch does not" if result.bound == "exact" else f"max_batch.limit={cfg.limit} reached",
             result.peak_mb or 0.0, len(result.trials))
    return result


@register
class MaxBatchTask(Task):
    """``task=max_batch``: `run_task` with the job's model, precision and optimizer."""

    name = "max_batch"
    settings = ("max_batch",)
    needs_train_data = False  # random inputs of the data's shape

    def run(self, job, device: torch.device) -> None:
        cfg, data = self.cfg, self.data
        model, precision, channels_last = build_model(cfg, data.spec, device)
        t0 = time.perf_counter()
        try:
            run_task(cfg.max_batch, job.writer, model, data.spec, device, precision, channels_last,
                     lambda params: make_optimizer(cfg.optimizer, params, data.lr, device, precision.scaled))
        finally:
            job.measured_s = time.perf_counter() - t0  # the trials are the measurement
