"""Memory outcomes of a step: recognising an out-of-memory error from any allocator, and giving
the memory back afterwards so the next job (or trial) starts from a clean allocator; recognising
a *sticky* CUDA error, after which this process's CUDA context is lost for good."""
from __future__ import annotations

import atexit
import gc

import torch

from sweeps import devices
from sweeps.devices import is_oom  # noqa: F401 (any allocator's out-of-memory error; sweeps.job.outcome reads it here)
from sweeps.train import host_heap
from sweeps.state import current

# cudaGetErrorString texts of the errors the CUDA Runtime API reference (enum cudaError) says
# leave "the process in an inconsistent state and any further CUDA work will return the same
# error. To continue using CUDA, the process must be terminated and relaunched": 700 illegal
# address, 702 launch timeout, 710 device-side assert, 714 hardware stack error, 715 illegal
# instruction, 716 misaligned address, 718 invalid program counter, 719 launch failure,
# 214 uncorrectable ECC error, 220 uncorrectable NVLink error.
_STICKY_TEXT = ("illegal memory access", "launch timed out", "device-side assert", "hardware stack error",
                "illegal instruction", "misaligned address", "invalid program counter",
                "unspecified launch failure", "uncorrectable ecc error", "uncorrectable nvlink error")


def is_sticky_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error that poisons this process's CUDA context (see above)."""
    text = str(exc).lower()
    return "cuda" in text and any(t in text for t in _STICKY_TEXT)


def note_cuda_lost(line: str) -> None:
    """Remember that this process's CUDA context is lost (``line`` says how); later CUDA work in it
    is refused (`sweeps.placement.device.resolve_device`) and memory is no longer
    released. Kept in this process's state (`sweeps.state.ProcessState.cuda_lost`)."""
    state = current()
    state.cuda_lost = state.cuda_lost or line

def release_memory(device: torch.device | None = None) -> None:
    """Free what a finished (or failed) job left: collect garbage, empty the CUDA cache and reset
    peak statistics, and give the host heap's free memory back (`sweeps.train.host_heap.trim`),
    so the next job (or trial) in this process starts from a clean allocator.

    Call it *outside* the ``except`` block: inside it, the traceback still holds the failed
    frames and with them the tensors.

    What survives the collection is long-lived (modules, caches) and is frozen (`gc.freeze`):
    later collections skip it, so this one costs milliseconds instead of the ~0.3 s a full
    collection of a process holding torch, Hydra, MLflow and matplotlib takes.

    Never raises. CUDA is left alone where this process never initialised it (a CPU job on a GPU
    machine: resetting the statistics of an allocator that does not exist raises) and where a
    sticky error has lost its context.
    """
    gc.collect()
    gc.freeze()  # undone at exit (below), so interpreter shutdown still finalizes everything
    host_heap.trim()  # the freed heap a job kept (device.malloc_trim_mb): a CPU RSS read after this holds what is in use
    cuda = devices.builtin("cuda")
    cuda.free_memory()  # wherever this process initialised CUDA, whatever the job's device
    if device is not None and (kind := devices.of(device)) is not cuda:
        kind.free_memory()


def reset_peak(device: torch.device) -> None:
    """Start peak-memory statistics of ``device`` afresh (its kind's
    `sweeps.devices.DeviceKind.reset_peak`: no-op on a CPU or an uninitialised CUDA); e.g.
    after a compile warm-up, whose memory is not the epochs'."""
    devices.of(device).reset_peak(device)


def warm_cublas(device: torch.device) -> None:
    """A small matmul on ``device``, forward and backward, so cuBLAS has allocated its workspaces
    (through the caching allocator, per handle and stream, and the handles are per thread) before
    a memory baseline is taken: the forward's on this thread, and the backward's on the autograd
    engine's device thread, which has a handle of its own (measured on an H100, torch 2.11: a
    32-MiB workspace that the first backward added and that stayed). Taken before, the baseline
    is lower than what any later step can return to. No-op on a CPU: its kind's
    `sweeps.devices.DeviceKind.warm_up`."""
    devices.of(device).warm_up(device)


atexit.register(gc.unfreeze)  # before shutdown: what release_memory froze is finalized as usual


