"""A fake NVML at the hardware boundary: nvidia-ml-py's function names, constants and error classes
(the real ``pynvml.NVMLError_*``), with values scripted as functions of a test clock — so the
sampler, energy accounting and summaries run as they would on a GPU machine, deterministically.

Units as NVML returns them: clocks MHz, utilisation %, memory bytes, temperature °C, power mW,
energy mJ (a counter since the "driver" loaded).
"""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Callable

import pynvml


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeNVML:
    """``gpus`` fake boards ``GPU-fake-<i>``; ``unsupported`` names queries that raise
    ``NVMLError_NotSupported``; ``init_error`` is raised by ``nvmlInit`` (e.g. LibraryNotFound).

    Board ``i`` reads, at time ``t``: SM clock 1000 + 100 t MHz, memory clock 1215 MHz,
    utilisation 10 t %, memory used (1000 + 100 t) MB, temperature 40 + t + i °C, power
    ``power_w(t)`` (default 200 + 100 t W) and energy counter 5 MJ + ∫power = 5e6 + 200 t + 50 t² J,
    fan 30 %, clock-event reasons ``reasons(t)`` (default: gpu_idle before t=1, sw_power_cap at t=3).
    ``energy_read_s``: how long the energy counter's read takes (s), moving a :class:`Clock` on
    (an H200 VM's driver took 3.6 ms a call, docs/benchmarks.md; the other queries ~10 µs).
    """

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVML_CLOCK_SM, NVML_CLOCK_MEM = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, clock: Callable[[], float], gpus: int = 1, unsupported=(), init_error=None,
                 power_w: Callable[[float], float] = lambda t: 200 + 100 * t,
                 energy_j: Callable[[float], float] = lambda t: 5e6 + 200 * t + 50 * t * t,
                 reasons: Callable[[float], int] = lambda t: 0x1 if t < 1 else (0x4 if t == 3 else 0),
                 energy_read_s: float = 0.0):
        self.clock, self.gpus, self.unsupported, self.init_error = clock, gpus, set(unsupported), init_error
        self.energy_read_s = energy_read_s
        self.power_w, self.energy_j, self.reasons = power_w, energy_j, reasons
        self.calls: Counter = Counter()
        self.fail_next: dict[str, BaseException] = {}  # query → error raised once (transient)
        self.open = 0  # nvmlInit minus nvmlShutdown

    def _ask(self, name: str) -> float:
        self.calls[name] += 1
        if name in self.fail_next:
            raise self.fail_next.pop(name)
        if name in self.unsupported:
            raise pynvml.NVMLError_NotSupported()
        return self.clock()

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.open += 1

    def nvmlShutdown(self):
        self.open -= 1

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < self.gpus:
            raise pynvml.NVMLError_InvalidArgument()
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for i in range(self.gpus):
            if uuid == f"GPU-fake-{i}":
                return i
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetName(self, h):
        return f"Fake GPU {h}"

    def nvmlDeviceGetClockInfo(self, h, kind):
        t = self._ask("nvmlDeviceGetClockInfo")
        return int(1000 + 100 * t) if kind == self.NVML_CLOCK_SM else 1215

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=10 * self._ask("nvmlDeviceGetUtilizationRates"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        used = (1000 + 100 * self._ask("nvmlDeviceGetMemoryInfo")) * 2**20
        return SimpleNamespace(total=80 * 2**30, used=used, free=80 * 2**30 - used)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 40 + self._ask("nvmlDeviceGetTemperature") + h

    def nvmlDeviceGetPowerUsage(self, h):
        return round(self.power_w(self._ask("nvmlDeviceGetPowerUsage")) * 1000)

    def nvmlDeviceGetFanSpeed(self, h):
        self._ask("nvmlDeviceGetFanSpeed")
        return 30

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.reasons(self._ask("nvmlDeviceGetCurrentClocksEventReasons"))

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        value = round(self.energy_j(self._ask("nvmlDeviceGetTotalEnergyConsumption")) * 1000)
        if self.energy_read_s:
            self.clock.t += self.energy_read_s  # the driver's answer takes this long
        return value

    # system and static device queries (the machine's fingerprint)
    def nvmlSystemGetDriverVersion(self):
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000  # CUDA 13.0

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}"

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000  # mW

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPciInfo(self, h):
        self._ask("nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0")
