"""The device seam: what differs from one kind of device to another, behind one interface,
`DeviceKind` (how a job finds its kind: `sweeps.devices.registry`)."""
from __future__ import annotations

import time
from typing import Callable

import torch

from sweeps.errors import DeviceUnavailable

# Text of the allocators' out-of-memory errors that are not torch.OutOfMemoryError:
# CPU ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ..."), cuDNN/cuBLAS
# workspaces ("CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED") and older CUDA builds.
OOM_TEXT = ("out of memory", "can't allocate memory", "status_alloc_failed")


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory failure of any allocator (`OOM_TEXT`)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in OOM_TEXT)


class DeviceKind:
    """One kind of device: everything sweeps does differently for it. The defaults are a plain
    device of torch type `type` that sweeps knows nothing about: host clocks, no peak of its own,
    nothing fused or pinned, no telemetry. A kind is a subclass overriding what differs; it is
    built with no arguments (``DeviceKind(type)`` for the plain default).

    Attributes:
        name: how the console and tags call the kind (``cpu``, ``cuda``, ``toy``).
        type: the torch device type its tensors live on (``cpu``, ``cuda``).
        events: phases are timed by CUDA events on the device's stream (`torch.cuda.Event`,
            resolved once an epoch), not by `clock`.
        host_memory: its tensors live in the host's RAM, so where `peak_mb` is None a job's
            memory peak is the process's resident set.
        asynchronous: its kernels queue behind the host, so reading a value back waits for them
            (a sync), which a fused optimizer avoids under loss scaling.
        telemetry: which sampler reads the device while a job runs: ``"nvml"`` (its GPUs through
            NVML, `sweeps.telemetry.nvml`) or None (the host only).
    """

    name: str = "cpu"
    type: str = "cpu"
    events: bool = False
    host_memory: bool = True
    asynchronous: bool = False
    telemetry: str | None = None

    def __init__(self, type: str | None = None):  # noqa: A002 (torch's own word for it)
        if type is not None:
            self.type = self.name = type

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.name!r})"

    # ── placement ──────────────────────────────────────────────────────────────────────────
    def available(self) -> str:
        """Why a job cannot run on this kind in this process ("" when it can)."""
        return ""

    def torch_device(self, index: int | None = None) -> torch.device:
        """The device a job of this kind runs on, made ready for it; ``index``: which one of a
        kind of many (``device.index``; None for a kind of one).

        Raises:
            DeviceUnavailable: `available` says why not, or ``index`` does not exist here.
        """
        if why := self.available():
            raise DeviceUnavailable(why)
        return torch.device(self.type)

    # ── time ───────────────────────────────────────────────────────────────────────────────
    def synchronize(self, device: torch.device) -> None:
        """Wait for all work queued on ``device`` (a no-op where nothing is queued)."""

    clock: Callable[[], float] = staticmethod(time.perf_counter)
    """The host clock phase marks read where not `events` (seconds, monotonic)."""

    # ── memory ─────────────────────────────────────────────────────────────────────────────
    def reset_peak(self, device: torch.device) -> None:
        """Start `peak_mb` afresh (after a compile warm-up, before a max_batch trial)."""

    def peak_mb(self, device: torch.device) -> float | None:
        """Peak memory of ``device`` since `reset_peak` (MB), or None where the kind keeps no
        peak of its own (the caller then reads the host's, where `host_memory`)."""
        return None

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the device ran out of memory (default: any allocator's, `is_oom`)."""
        return is_oom(exc)

    def free_memory(self) -> None:
        """Give back what a finished or failed job (or trial) left in the kind's allocator and
        reset its peak, so the next one starts from a clean allocator. Never raises."""

    def warm_up(self, device: torch.device) -> None:
        """Allocate what the device's libraries keep for good (cuBLAS workspaces) before a memory
        baseline is taken, so the baseline is what later steps return to."""

    # ── arithmetic ─────────────────────────────────────────────────────────────────────────
    def autocast_supported(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether ``dtype`` autocast runs on ``device`` (default: torch has autocast for the
        device type, and a tiny matmul under it comes out in ``dtype``)."""
        if not torch.amp.is_autocast_available(device.type):
            return False
        try:
            a = torch.ones(2, 2, device=device)
            with torch.autocast(device.type, dtype=dtype):
                return (a @ a).dtype == dtype
        except RuntimeError:
            return False

    def supports_fused_optimizer(self) -> bool:
        """Whether torch's fused optimizer kernels (``fused=True``) run on this kind."""
        return False

    # ── data ───────────────────────────────────────────────────────────────────────────────
    def pin_memory(self) -> bool:
        """Whether host batches are page-locked for asynchronous copies to the device."""
        return False
