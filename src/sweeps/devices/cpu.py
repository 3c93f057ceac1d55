"""``device=cpu`` (and ``device=auto`` where no GPU is visible, and every rank of ``device=ddp``
on Gloo): the host itself. Phases are timed with `time.perf_counter`, nothing is queued (no
synchronize), a job's memory peak is the process's resident set, and torch's fused optimizer
kernels run here."""
from __future__ import annotations

from sweeps.devices.base import DeviceKind


class CPU(DeviceKind):
    """The host's CPU: the defaults of `DeviceKind`, plus fused optimizers."""

    name = "cpu"
    type = "cpu"

    def supports_fused_optimizer(self) -> bool:
        return True
