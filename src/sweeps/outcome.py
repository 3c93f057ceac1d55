"""Outcomes: how a job ended, as data. An OOM or a crash is logged and the sweep goes on."""
from __future__ import annotations

import atexit
import gc
from collections import Counter

import torch
from hydra.errors import InstantiationException

from sweeps.errors import DeviceUnavailable

OK, OOM, ERROR, UNAVAILABLE, KILLED = "ok", "oom", "error", "unavailable", "killed"
SKIPPED = "skipped"  # already done in an earlier run of the same config (resume)

# Text of the allocators' out-of-memory errors that are not torch.OutOfMemoryError:
# CPU ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ..."), cuDNN/cuBLAS
# workspaces ("CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED") and older CUDA builds.
_OOM_TEXT = ("out of memory", "can't allocate memory", "status_alloc_failed")

_counts: Counter = Counter()  # outcomes of the jobs run by this process (exit status, skips)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory failure of any allocator."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


def classify(exc: BaseException) -> tuple[str, str]:
    """``(outcome, one-line message)`` for an exception that ended a job."""
    if isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        exc = exc.__cause__  # hydra.utils.instantiate wraps the model's own error
    lines = str(exc).strip().splitlines() or [""]
    if "Original Traceback" in str(exc):  # re-raised from a DataLoader worker: the cause is last
        return (OOM if is_oom(exc) else ERROR), lines[-1].strip()[:500]
    first_line = lines[0][:500]
    message = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
    if isinstance(exc, DeviceUnavailable):
        return UNAVAILABLE, first_line
    if is_oom(exc):
        return OOM, message
    return ERROR, message


def release_memory(device: torch.device | None = None) -> None:
    """Free what a finished (or failed) job left: collect garbage, empty the CUDA cache and reset
    peak statistics, so the next job in this process starts from a clean allocator.

    Call it *outside* the ``except`` block: inside it, the traceback still holds the failed
    frames and with them the tensors.

    What survives the collection is long-lived (modules, caches) and is frozen (:func:`gc.freeze`):
    later collections skip it, so this one costs milliseconds instead of the ~0.3 s a full
    collection of a process holding torch, Hydra, MLflow and matplotlib takes.
    """
    gc.collect()
    gc.freeze()  # undone at exit (below), so interpreter shutdown still finalizes everything
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)


atexit.register(gc.unfreeze)  # before shutdown: what release_memory froze is finalized as usual


def note(outcome: str) -> None:
    """Count a job's outcome (exit status, the sweep's count of skipped jobs)."""
    _counts[outcome] += 1


def count(outcome: str) -> int:
    """How many jobs of this process ended with ``outcome``."""
    return _counts[outcome]


def note_sweep_errors(n: int) -> None:
    """The sweep's count of ``error`` jobs, read from its MLflow child runs (the jobs may have run
    in other processes: joblib, submitit)."""
    _counts["sweep_" + ERROR] = n


def exit_status() -> int:
    """1 when any job of this process, or of the sweep it ran, ended in ``error``, else 0."""
    return 1 if _counts[ERROR] or _counts["sweep_" + ERROR] else 0
