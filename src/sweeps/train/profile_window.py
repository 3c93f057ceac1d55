"""Where a training step's time goes: a short window of steps under ``torch.profiler``, after the
timed epochs, cut into the parts of `sweeps.bottleneck.PARTS`.

The window runs the job's own training step (`sweeps.train.loop.Trainer.train_epoch`) with the
phase timer swapped for `ProfilingTimer`, whose marks open and close one
``record_function`` range per phase (``sweeps::data``, ``sweeps::forward``, ``sweeps::backward``,
``sweeps::optimizer``) and step the profiler. Warm-up steps come first (the profiler's
``schedule``: they are not recorded), then ``steps`` recorded ones. The timed epochs are over by
then, so none of their figures carries the profiler's cost; the window's own step time is logged
beside the epochs' (``diag/step_ms`` against ``phase/*_ms``), so that cost shows.

The parts of a step, from the Chrome trace the profiler writes (the run's ``diag/trace.json``
artifact, which opens in Perfetto or ``chrome://tracing``):

- ``data``: the ``sweeps::data`` range — waiting for the mini-batch and its copy to the device;
- ``optimizer``: the ``sweeps::optimizer`` range (the step and ``zero_grad``);
- ``communication``: in the forward and backward ranges, time covered by a collective (an op
  named like ``c10d::allreduce_``, ``gloo:all_reduce``, ``nccl:all_reduce``, ``record_param_comms``,
  or the reducer's wait for one);
- ``compute``: in those ranges, time covered by any other operator on the job's thread;
- ``host``: the rest of those ranges — Python and dispatch between operators.

The five add up to the step (its four ranges back to back) by construction; `measure` also returns
the window's host-clock step time, synchronized at both edges, to check that against. On CUDA the
trace's kernels add the device's view: kernels per step, their median duration and the share of
the step in which no kernel runs (``device_idle_pct``).
"""
from __future__ import annotations

import bisect
import os
import re
import sys
import itertools
import json
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from sweeps import devices
from sweeps.bottleneck import Breakdown
from sweeps.names import PHASES

RANGE_PREFIX = "sweeps::"
# Op names of collectives and of DDP's wait for them (torch.distributed's c10d ops, the backends'
# own annotations, the reducer's comm hook)
REDUCER = "torch.distributed.ddp.reducer::"  # DDP's reducer's own annotations (bucket copies)
COMMUNICATION = ("c10d::", "all_reduce", "allreduce", "all_gather", "broadcast", "reduce_scatter", "barrier",
                 "gloo:", "nccl:", "record_param_comms", "ProcessGroup", "DDP::", "Reducer::")


class ProfilingTimer:
    """`sweeps.train.timing.PhaseTimer`'s interface (``start``, ``mark``, ``summary``) for the
    profiled window: each phase a ``record_function`` range, the profiler stepped after each
    step's last mark, and each recorded step's span on the host clock (from its first range's
    start to its last range's end, synchronized on the device; the profiler's stepping between
    steps left out, as the trace's steps leave it out)."""

    def __init__(self, prof, device: torch.device, warmup: int):
        self.prof, self.device, self.warmup = prof, device, warmup
        self.steps = 0  # steps completed (warm-up included)
        self.i = 0
        self.range = None
        self.step_started = 0.0
        self.recorded_s, self.recorded = 0.0, 0  # the recorded steps' host-clock time (s) and count

    def _begin(self, i: int) -> None:
        self.i = i
        if i == 0:
            self.step_started = time.perf_counter()
        self.range = torch.profiler.record_function(RANGE_PREFIX + PHASES[i])
        self.range.__enter__()

    def start(self) -> None:
        self._begin(0)

    def mark(self) -> None:
        if self.i < len(PHASES) - 1:
            self.range.__exit__(None, None, None)
            self._begin(self.i + 1)
            return
        devices.of(self.device).synchronize(self.device)  # inside the optimizer's range: the step's device work ends in it
        self.range.__exit__(None, None, None)
        ended = time.perf_counter()
        self.steps += 1
        if self.steps > self.warmup:
            self.recorded_s += ended - self.step_started
            self.recorded += 1
        self.prof.step()
        self._begin(0)

    def summary(self, synchronized: bool = False) -> dict[str, float]:
        if self.range is not None:  # the data range the loop's end left open
            self.range.__exit__(None, None, None)
            self.range = None
        return {"total_ms": 0.0, "steps": self.steps, **{p: 0.0 for p in PHASES}}

    def wall_step_ms(self) -> float | None:
        """The recorded steps' mean time on the host clock (ms), or None before any."""
        return self.recorded_s * 1e3 / self.recorded if self.recorded else None


def _cycled(loader, n: int) -> Iterator:
    """The first ``n`` mini-batches of ``loader``, passing over it again as often as needed."""
    return itertools.islice(itertools.chain.from_iterable(itertools.repeat(loader)), n)


# a line of the profiler's C++ library (kineto): "USDT:2026-01-02 10:00:00 123:123 File.cpp:39] ...",
# or its note that a later profiler started in another thread than the first ("External init callback ...")
KINETO_LINE = re.compile(rb"^([A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\]"
                         rb"|ERROR: External init callback must run in same thread)")


@contextmanager
def _without_kineto_lines():
    """The block with the process's stderr (fd 2) held in a file, then written out less the
    lines of the profiler's C++ library, which logs each start and stop there whatever its level
    (torch's own and the user's lines come out as they were, after the block)."""
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        for line in held:
            if not KINETO_LINE.match(line):
                os.write(2, line)
        held.close()


def measure(trainer, loader, steps: int = 20, warmup: int = 3, trace_path: str | Path | None = None,
            timed_step_ms: float | None = None) -> Breakdown:
    """Run ``warmup`` + ``steps`` training steps of ``trainer`` on ``loader`` under
    ``torch.profiler`` (CPU activity, and CUDA's where the trainer's device is a GPU) and return
    where the recorded steps' time went (`breakdown`; ``timed_step_ms``: the timed epochs' mean
    step, ms, which takes the profiler's own cost off). The model and optimizer train on: call it
    after the job's timed epochs. The Chrome trace is written to ``trace_path`` (default: a
    temporary file, removed).

    Raises:
        ValueError: ``steps`` < 1.
    """
    if steps < 1:
        raise ValueError(f"diag.steps={steps}: at least 1 step to profile (0 turns the window off)")
    from torch.profiler import ProfilerActivity, profile, schedule

    device = trainer.device
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    own = trace_path is None
    path = Path(trace_path) if trace_path else Path(tempfile.mkstemp(prefix="sweeps-trace-", suffix=".json")[1])
    saved_timer, saved_tty = trainer.timer, trainer.tty
    try:
        with _without_kineto_lines(), profile(activities=activities, schedule=schedule(wait=0, warmup=warmup, active=steps), acc_events=True,
                                      on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
            timer = ProfilingTimer(prof, device, warmup)
            trainer.timer, trainer.tty = timer, False
            trainer.train_epoch(_cycled(loader, warmup + steps), "profile")
        wall = timer.wall_step_ms()
        return breakdown(json.loads(path.read_text()), wall, cuda, timed_step_ms)
    finally:
        trainer.timer, trainer.tty = saved_timer, saved_tty
        if own:
            path.unlink(missing_ok=True)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _covered(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """µs of [lo, hi] covered by the (merged) ``intervals``."""
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)


def _gaps(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of [lo, hi] that none of ``intervals`` covers."""
    out, at = [], lo
    for a, b in _union(_clip(intervals, lo, hi)):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < hi:
        out.append((at, hi))
    return out


def _clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def _is_communication(name: str) -> bool:
    return any(word in name for word in COMMUNICATION)


def _nested(events: list[dict]) -> list[tuple[dict, int]]:
    """The outermost of ``events`` (one thread's complete events), each with how many events it
    holds, itself included."""
    out: list[list] = []
    ends: list[float] = []  # the open events' ends, outermost first
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while ends and e["ts"] >= ends[-1]:
            ends.pop()
        if not ends:
            out.append([e, 0])
        out[-1][1] += 1
        ends.append(e["ts"] + e["dur"])
    return [(e, n) for e, n in out]


def _on_the_device(steps: list[dict[str, dict]], events: list[dict], wall_step_ms: float | None) -> Breakdown:
    """A GPU job's breakdown on the device's timeline: in each step (its four host ranges, the
    last ending once the device is done), ``data`` is the data range, ``communication`` the time
    a collective's kernel (NCCL's) runs, ``optimizer`` the time another kernel runs in the
    optimizer's range, ``compute`` in the forward and backward ranges, and ``host`` the rest:
    the device idle while the host launches. The profiler's cost is not taken off here: what it
    adds is host time, which a GPU step hides where the device is the bottleneck and shows where
    the host is."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    nccl = _union([(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e.get("name", "").lower()])
    other = _union([(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e.get("name", "").lower()])
    parts = dict.fromkeys(("data", "host", "compute", "optimizer", "communication"), 0.0)
    total = idle = 0.0
    durations: list[float] = []
    count = 0
    for s in steps:
        lo, hi = s["data"]["ts"], s["optimizer"]["ts"] + s["optimizer"]["dur"]
        total += hi - lo
        data_end = s["data"]["ts"] + s["data"]["dur"]
        parts["data"] += data_end - lo
        comm = _covered(nccl, data_end, hi)
        fb = _covered(other, data_end, s["optimizer"]["ts"])
        opt = _covered(other, s["optimizer"]["ts"], hi)
        parts["communication"] += comm
        parts["compute"] += fb
        parts["optimizer"] += opt
        parts["host"] += max(0.0, (hi - data_end) - _covered(_union([*nccl, *other]), data_end, hi))
        idle += (hi - lo) - _covered(_union([*nccl, *other]), lo, hi)
        inside = [e["dur"] for e in kernels if lo <= e["ts"] < hi]
        durations += inside
        count += len(inside)
    n = len(steps)
    pct = {k: 100.0 * v / total if total > 0 else 0.0 for k, v in parts.items()}
    return Breakdown(step_ms=total / n / 1e3, wall_step_ms=wall_step_ms, steps=n, parts_pct=pct, device="cuda",
                     profiled_step_ms=total / n / 1e3, kernels_per_step=count / n,
                     median_kernel_us=statistics.median(durations) if durations else None,
                     device_idle_pct=100.0 * idle / total if total > 0 else None)


def breakdown(trace: dict, wall_step_ms: float | None, cuda: bool, timed_step_ms: float | None = None) -> Breakdown:
    """The `Breakdown` of the recorded steps in a Chrome ``trace`` (the profiler's JSON: a
    ``traceEvents`` list of complete events with ``ts`` and ``dur`` in µs). Steps are the
    ``sweeps::data`` ranges each followed by the other three phases on the same thread.

    On a GPU (``cuda``) the parts are of the device's timeline (`_on_the_device`). On a CPU the
    profiler's own cost is taken off: with ``timed_step_ms`` (the timed epochs' step, ms: the
    step without the profiler), the difference to the profiled step is spread over the events
    recorded in a step, equally (each event's recording costs alike), and every range loses the
    share of the events it holds, an operator that of the events inside it (its own recording
    lies at its edges, outside it). The parts are then of the unprofiled step.

    Raises:
        ValueError: the trace holds no complete step.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    ranges = sorted((e for e in events if e.get("name", "").startswith(RANGE_PREFIX)), key=lambda e: e["ts"])
    steps: list[dict[str, dict]] = []
    current: dict[str, dict] = {}
    for e in ranges:
        phase = e["name"][len(RANGE_PREFIX):]
        if phase == PHASES[0]:
            current = {}
        current[phase] = e
        if phase == PHASES[-1] and len(current) == len(PHASES):
            steps.append(current)
            current = {}
    if not steps:
        raise ValueError("the profiler's trace holds no complete training step")
    tid = steps[0][PHASES[0]]["tid"]
    mine = [e for e in events if e.get("tid") == tid and e.get("cat") in ("cpu_op", "user_annotation")
            and not e["name"].startswith((RANGE_PREFIX, "ProfilerStep#"))]  # the operators, the optimizer's annotations
    starts = sorted(e["ts"] for e in mine)

    def held(lo: float, hi: float) -> int:  # events that start in [lo, hi)
        return bisect.bisect_left(starts, hi) - bisect.bisect_left(starts, lo)

    if cuda:
        return _on_the_device(steps, events, wall_step_ms)
    n = len(steps)
    profiled = sum(s["optimizer"]["ts"] + s["optimizer"]["dur"] - s["data"]["ts"] for s in steps) / n  # µs
    per_step = held(steps[0]["data"]["ts"], steps[-1]["optimizer"]["ts"] + steps[-1]["optimizer"]["dur"]) / n
    cost = max(0.0, profiled - timed_step_ms * 1e3) / per_step if timed_step_ms and per_step else 0.0  # µs an event
    top = _nested([e for e in mine if e.get("cat") == "cpu_op"])  # what runs (annotations only group it)
    outer = {id(e) for e, _ in top}
    inner = sorted((e for e in mine if id(e) not in outer), key=lambda e: e["ts"])
    nested = [(e["ts"], e["ts"] + e["dur"]) for e in inner if e.get("cat") == "cpu_op"]
    inner_starts = [e["ts"] for e in inner]

    def _holds_reducer(op: dict) -> bool:  # an event of DDP's reducer inside ``op``
        lo, hi = bisect.bisect_left(inner_starts, op["ts"]), bisect.bisect_left(inner_starts, op["ts"] + op["dur"])
        return any(e["name"].startswith(REDUCER) for e in inner[lo:hi])
    flight = _union([(e["ts"], e["ts"] + e["dur"]) for e in events  # collectives, on any thread
                     if e.get("cat") in ("cpu_op", "user_annotation") and _is_communication(e.get("name", ""))])
    parts = dict.fromkeys(("data", "host", "compute", "optimizer", "communication"), 0.0)
    for s in steps:
        a, b = s["data"]["ts"], s["data"]["ts"] + s["data"]["dur"]
        parts["data"] += max(0.0, (b - a) - cost * held(a, b))
        for phase in ("forward", "backward", "optimizer"):
            a, b = s[phase]["ts"], s[phase]["ts"] + s[phase]["dur"]
            inside = [(e, k) for e, k in top if a <= e["ts"] < b]
            # an operator holds the recording of the k - 1 events inside it; its own lies outside
            comm = sum(max(0.0, min(e["dur"], b - e["ts"]) - cost * (k - 1)) for e, k in inside
                       if _is_communication(e["name"]))
            ops = sum(max(0.0, min(e["dur"], b - e["ts"]) - cost * (k - 1)) for e, k in inside
                      if not _is_communication(e["name"]))
            # the time no operator runs here, and the share of it a collective is in flight on any
            # thread (a data-parallel backward waiting for its all-reduce): communication, not host
            gaps = _gaps([(e["ts"], e["ts"] + e["dur"]) for e, _ in inside], a, b)
            raw = sum(y - x for x, y in gaps)
            waiting = sum(_covered(flight, x, y) for x, y in gaps) / raw if raw > 0 else 0.0
            # DDP's reducer runs as a hook inside the autograd operator that accumulated the gradient: the
            # time that operator runs none of its own operators there (bucketing, launching the all-reduce,
            # waiting for it and for the other ranks) is communication, not compute
            if flight:
                held_up = sum(y - x for e, k in inside if k > 1 and _holds_reducer(e)
                              for x, y in _gaps(nested, e["ts"], e["ts"] + e["dur"]))
                held_up = min(held_up, ops)
                comm, ops = comm + held_up, ops - held_up
            budget = max(0.0, (b - a) - cost * held(a, b))  # the range without the profiler's recording
            if comm + ops > budget:  # the recording this range held lay in its operators: theirs shrink
                comm, ops = comm * budget / (comm + ops), ops * budget / (comm + ops)
            rest = budget - comm - ops
            parts["communication"] += comm + waiting * rest
            parts["optimizer" if phase == "optimizer" else "compute"] += ops
            parts["host"] += (1 - waiting) * rest
    total = sum(parts.values())
    pct = {k: 100.0 * v / total if total > 0 else 0.0 for k, v in parts.items()}
    return Breakdown(step_ms=total / n / 1e3, wall_step_ms=wall_step_ms, steps=n, parts_pct=pct, device="cpu",
                     profiled_step_ms=profiled / 1e3, events_per_step=per_step)
