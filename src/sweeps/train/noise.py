"""How noisy a timing is: the host's load from other processes during an epoch, and the spread
of a job's epoch times.

An epoch time measured while another process used the cores is not the device's figure: three
identical CPU runs once logged median epochs of 3.17, 12.60 and 3.14 s because of one such
neighbour. `HostLoad` measures it per epoch from two reads of ``/proc/stat`` (through
`psutil.cpu_times`) and of this process tree's CPU times — O(1) per epoch, never per step.
"""
from __future__ import annotations

import os
import statistics
import time

import psutil

from sweeps import names

def _busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores, since boot)."""
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


JOB_PID_ENV = "SWEEPS_JOB_PID"  # a data-parallel rank's job process: its whole tree is the job
CHILDREN_EVERY_S = 5.0  # how often the list of child processes is refreshed (it scans /proc: ~2 ms)


def _own_s(process: psutil.Process, children: list[psutil.Process]) -> float:
    """CPU seconds of this process and its live ``children`` (DataLoader workers belong to the job)."""
    total = sum(process.cpu_times()[:2])
    for child in children:
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # it ended between the listing and the read
            pass
    return total


MIN_WINDOW_S = 0.1  # counters are read at most this often: a read costs ~0.1 ms, a 10th of a tiny epoch


class HostLoad:
    """Other processes' share of the machine's CPU over the latest window of at least
    `MIN_WINDOW_S`, read at epoch edges.

    Call `start` and `stop` at an epoch's edges; ``stop()`` returns percent of all
    cores (0–100; 100 = every core busy with other work). An epoch of ≥ 0.1 s gets its own window;
    shorter epochs share the latest window that closed (the counters are read at most every
    0.1 s, so a 1-ms epoch does not pay two reads). A child that ends within the window takes its
    CPU time with it, so the figure can read a little high then; it never fails (0.0 where the
    counters cannot be read).
    """

    def __init__(self):
        # the job's process tree: this process, or under device=ddp the job process that started
        # the ranks, so the other ranks (and every rank's loader workers) count as the job, not noise
        root = os.environ.get(JOB_PID_ENV, "")
        try:
            self.process = psutil.Process(int(root)) if root.isdigit() else psutil.Process()
        except psutil.Error:
            self.process = psutil.Process()
        self.cores = psutil.cpu_count() or 1
        self.value = 0.0
        self._last: tuple[float, float, float] | None = None
        self._children: list[psutil.Process] = []
        self._listed_at = -CHILDREN_EVERY_S

    def start(self) -> None:
        self._read()

    def stop(self) -> float:
        self._read()
        return self.value

    def _read(self) -> None:
        now = time.perf_counter()
        if self._last is not None and now - self._last[0] < MIN_WINDOW_S:
            return
        try:
            if now - self._listed_at >= CHILDREN_EVERY_S:  # workers persist across epochs: list them rarely
                self._children, self._listed_at = self.process.children(recursive=True), now
            counters = (now, _busy_s(), _own_s(self.process, self._children))
        except (psutil.Error, OSError):
            return
        if self._last is not None:
            wall, busy, own = (a - b for a, b in zip(counters, self._last))
            self.value = max(0.0, min(100.0, 100.0 * (busy - own) / (wall * self.cores))) if wall > 0 else 0.0
        self._last = counters


def spread(times: list[float]) -> dict[str, float]:
    """p10, p90 and median absolute deviation of ``times`` (s) — the epochs from 2 on of a job —
    as ``time/epoch_p10_s``, ``time/epoch_p90_s``, ``time/epoch_mad_s``; empty below 2 values."""
    if len(times) < 2:
        return {}
    q = statistics.quantiles(times, n=10, method="inclusive")
    median = statistics.median(times)
    return {names.EPOCH_P10_S: q[0], names.EPOCH_P90_S: q[-1],
            names.EPOCH_MAD_S: statistics.median(abs(t - median) for t in times)}
