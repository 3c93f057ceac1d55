"""Outcomes: how a job ended, as data. An OOM or a crash is logged and the sweep goes on."""
from __future__ import annotations

import gc

import torch
from hydra.errors import InstantiationException

from sweeps.errors import DeviceUnavailable

OK, OOM, ERROR, UNAVAILABLE, KILLED = "ok", "oom", "error", "unavailable", "killed"

# Text of the allocators' out-of-memory errors that are not torch.OutOfMemoryError:
# CPU ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ..."), cuDNN/cuBLAS
# workspaces ("CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED") and older CUDA builds.
_OOM_TEXT = ("out of memory", "can't allocate memory", "status_alloc_failed")

_process_errors = 0  # jobs that ended in `error` in this process; sets the exit status


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory failure of any allocator."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


def classify(exc: BaseException) -> tuple[str, str]:
    """``(outcome, one-line message)`` for an exception that ended a job."""
    if isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        exc = exc.__cause__  # hydra.utils.instantiate wraps the model's own error
    first_line = (str(exc).strip().splitlines() or [""])[0][:500]
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
    """
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)


def note(outcome: str) -> None:
    """Count a job's outcome toward the process's exit status."""
    global _process_errors
    if outcome == ERROR:
        _process_errors += 1


def exit_status() -> int:
    """1 when any job in this process ended in ``error``, else 0."""
    return 1 if _process_errors else 0
