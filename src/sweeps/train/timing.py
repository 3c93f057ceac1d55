"""The timing core: per-iteration phase times without a host sync inside a step.

A training step is cut into four phases at five marks::

    mark ─data─► mark ─forward─► mark ─backward─► mark ─optimizer─► mark (= next step's first)

On CUDA each mark is a recorded ``torch.cuda.Event`` (recording does not block the host), on the
current stream *of the job's device* — not of the process's current device, which stays cuda:0
for a job placed on cuda:k unless someone called ``set_device``: an event recorded on another
GPU's stream would time that GPU's (idle) queue. All
events of an epoch are resolved with one synchronize when the epoch ends. The interval between
two events is GPU-timeline time, so ``data`` is how long the GPU waited for the next batch (host
loading + host-to-device copy) — the number that says whether the input pipeline is the
bottleneck. On CPU each mark is ``time.perf_counter()``.

Because consecutive phases share their marks, Σ phases equals the time from the epoch's first mark
to its last: compared with the epoch wall time (synchronized at both edges) any gap shows.
"""
from __future__ import annotations

import time

import torch

from sweeps.devices import of
from sweeps.names import PHASES


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on ``device`` (no-op on CPU): its kind's
    `sweeps.devices.DeviceKind.synchronize`."""
    of(device).synchronize(device)


def record(event, device: torch.device) -> None:
    """Record the CUDA ``event`` on ``device``'s current stream (the stream the job's kernels go
    to), whatever the process's current device is. Never synchronizes."""
    event.record(torch.cuda.current_stream(device))


class PhaseTimer:
    """Collects phase marks for one epoch and turns them into mean per-iteration times.

    Usage per epoch: `start` once, then per step `mark` after each phase (4 marks
    a step, in the order of `PHASES`), then `summary`. The device's kind
    (`sweeps.devices.of`) chooses the marks: CUDA events where its ``events``, else its
    ``clock`` (`time.perf_counter` for the CPU).
    """

    def __init__(self, device: torch.device):
        self.device = device
        kind = of(device)
        self.cuda = kind.events
        self._clock = kind.clock  # host marks (s)
        self._events: list = []  # CUDA: a pool of events reused epoch after epoch
        self._marks: list = []  # CPU: perf_counter values; CUDA: events recorded this epoch
        self._n = 0
        self._stream = None  # CUDA: the device's current stream, looked up once per epoch

    def start(self) -> None:
        """Open an epoch: the first mark."""
        self._n = 0
        self._marks = []
        if self.cuda:
            self._stream = torch.cuda.current_stream(self.device)
        self.mark()

    def mark(self) -> None:
        """Close the current phase. Never synchronizes."""
        if self.cuda:
            if self._n == len(self._events):
                self._events.append(torch.cuda.Event(enable_timing=True))
            event = self._events[self._n]
            event.record(self._stream)  # on the job's device (see the module docstring)
            self._marks.append(event)
        else:
            self._marks.append(self._clock())
        self._n += 1

    def summary(self, synchronized: bool = False) -> dict[str, float]:
        """Resolve the epoch's marks: one synchronize on CUDA, none when ``synchronized`` (the
        caller has already waited for the device — an epoch's wall clock ends so — and the
        events are complete).

        Returns:
            ``{phase: mean ms per iteration}`` for the four phases, plus ``steps`` (count) and
            ``total_ms`` (Σ phases over the epoch, ms).
        """
        n_steps = (len(self._marks) - 1) // len(PHASES)
        if n_steps == 0:
            return {**{p: 0.0 for p in PHASES}, "steps": 0, "total_ms": 0.0}
        if self.cuda:
            if not synchronized:
                self._marks[-1].synchronize()
            deltas = [a.elapsed_time(b) for a, b in zip(self._marks, self._marks[1:])]
        else:
            deltas = [(b - a) * 1e3 for a, b in zip(self._marks, self._marks[1:])]
        sums = [sum(deltas[i::len(PHASES)]) for i in range(len(PHASES))]
        out = {p: s / n_steps for p, s in zip(PHASES, sums)}
        return {**out, "steps": n_steps, "total_ms": sum(sums)}


class wall_clock:  # noqa: N801 (used as a function: ``with wall_clock(device) as clock``)
    """Wall time of a block with the device synchronized at both edges.

    ``with wall_clock(device) as clock:`` yields a dict whose ``s`` key holds the elapsed seconds
    (``time.perf_counter``) once the block exits, whether it returned or raised. A class rather
    than a ``@contextmanager`` generator: the training loop enters two per epoch, and the generator's
    machinery cost ~4 µs each of a 1-ms tabular epoch (2 cores).
    """

    __slots__ = ("device", "out", "t0")

    def __init__(self, device: torch.device):
        self.device, self.out, self.t0 = device, {"s": 0.0}, 0.0

    def __enter__(self) -> dict:
        synchronize(self.device)
        self.t0 = time.perf_counter()
        return self.out

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.out["s"] = time.perf_counter() - self.t0
