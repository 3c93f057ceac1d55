"""A toy device kind (tests/conf/device/toy.yaml, tests/test_device_seam.py): the host's CPU
under another name, with a peak of its own (`Toy.PEAK_MB`), counting what sweeps asks of it."""
from __future__ import annotations

import time
from collections import Counter

import torch

from sweeps.devices.cpu import CPU


class Toy(CPU):
    """Runs on the CPU and names itself ``toy``; every call sweeps makes on it is counted in
    `Toy.calls` (by method name; the class's, since each job builds its own instance)."""

    name = "toy"
    PEAK_MB = 42.0  # what peak_mb always answers (MB)
    calls: Counter = Counter()

    def torch_device(self, index: int | None = None) -> torch.device:
        Toy.calls["torch_device"] += 1
        return super().torch_device(index)

    def clock(self) -> float:
        Toy.calls["clock"] += 1
        return time.perf_counter()

    def synchronize(self, device: torch.device) -> None:
        Toy.calls["synchronize"] += 1

    def reset_peak(self, device: torch.device) -> None:
        Toy.calls["reset_peak"] += 1

    def peak_mb(self, device: torch.device) -> float:
        Toy.calls["peak_mb"] += 1
        return self.PEAK_MB
