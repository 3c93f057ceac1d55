"""Memory outcomes of a step: recognising an out-of-memory error from any allocator, and giving
the memory back afterwards so the next job (or trial) starts from a clean allocator."""
from __future__ import annotations

import atexit
import gc

import torch

# Text of the allocators' out-of-memory errors that are not torch.OutOfMemoryError:
# CPU ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ..."), cuDNN/cuBLAS
# workspaces ("CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED") and older CUDA builds.
_OOM_TEXT = ("out of memory", "can't allocate memory", "status_alloc_failed")

def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory failure of any allocator."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


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


