"""The timing core attributes time to the right phase and accounts for the whole epoch."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from sweeps import names
from sweeps.job.summary import summary_row
from sweeps.console import summary_table
from sweeps.train import timing
from sweeps.train.loop import summarize
from sweeps.train.timing import PHASES, PhaseTimer, wall_clock


def _step(timer: PhaseTimer, sleeps_s: dict[str, float]) -> None:
    for phase in PHASES:
        time.sleep(sleeps_s.get(phase, 0.0))
        timer.mark()


def test_cpu_phases_are_attributed_and_sum_to_the_epoch():
    timer = PhaseTimer(torch.device("cpu"))
    with wall_clock(torch.device("cpu")) as clock:
        timer.start()
        for _ in range(3):
            _step(timer, {"data": 0.002, "forward": 0.010, "backward": 0.020, "optimizer": 0.001})
    s = timer.summary()
    assert s["steps"] == 3
    # each phase holds at least its own sleep, and the order is kept
    assert s["data"] >= 2 and s["forward"] >= 10 and s["backward"] >= 20 and s["optimizer"] >= 1
    assert s["backward"] > s["forward"] > s["data"]
    # consecutive phases share their marks: Σ phases is the span from first to last mark
    assert s["total_ms"] == pytest.approx(sum(s[p] for p in PHASES) * 3)
    assert s["total_ms"] <= clock["s"] * 1e3


def test_empty_epoch_summary():
    timer = PhaseTimer(torch.device("cpu"))
    timer.start()
    assert timer.summary() == {**{p: 0.0 for p in PHASES}, "steps": 0, "total_ms": 0.0}


class FakeStream:
    """Stands in for torch.cuda.current_stream(device): the stream of that device."""

    def __init__(self, device=None):
        self.device = torch.device(device) if device is not None else torch.device("cuda", 0)  # current: cuda:0


class FakeEvent:
    """Stands in for torch.cuda.Event at the hardware boundary: a timestamp set on record(), and
    the stream it was recorded on (None: the current device's current stream, i.e. cuda:0's)."""
    synchronized = 0

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.t = None
        self.stream = None

    def record(self, stream=None):
        self.t = time.perf_counter()
        self.stream = stream if stream is not None else FakeStream()

    def synchronize(self):
        FakeEvent.synchronized += 1

    def elapsed_time(self, other: "FakeEvent") -> float:
        return (other.t - self.t) * 1e3


def test_cuda_path_records_events_and_synchronizes_once_per_epoch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    synced = []
    monkeypatch.setattr(timing, "synchronize", lambda device: synced.append(device))
    timer = PhaseTimer(torch.device("cuda", 0))
    for epoch in range(2):
        FakeEvent.synchronized = 0
        timer.start()
        for _ in range(4):
            _step(timer, {"forward": 0.003})
        s = timer.summary()
        assert FakeEvent.synchronized == 1  # one sync per epoch, none per step
        assert s["steps"] == 4 and s["forward"] >= 3
    assert len(timer._events) == 1 + 4 * 4  # the pool is reused, not grown, in epoch 2


def test_events_are_recorded_on_the_jobs_gpu_not_the_current_one(monkeypatch):
    """A job on cuda:1 in a process whose current device is cuda:0 (no set_device): every mark is
    recorded on cuda:1's stream — on cuda:0's, the events would time an idle GPU."""
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    monkeypatch.setattr(timing, "synchronize", lambda device: None)
    timer = PhaseTimer(torch.device("cuda", 1))
    timer.start()
    _step(timer, {})
    timer.summary()
    assert [str(e.stream.device) for e in timer._marks] == ["cuda:1"] * 5


def _console_summary(epoch_s: list[float]) -> str:
    """The sweep's closing console table for one finished job with these epoch times (s): its
    records summarised as the job logs them, read back as the table reads the run."""
    records = [{"epoch": e, names.EPOCH_S: t, names.ELAPSED_S: sum(epoch_s[:e]), names.EPOCH_PEAK_MB: 1.0,
                names.OTHER_CPU_PCT: 0.0} for e, t in enumerate(epoch_s, 1)]
    run = SimpleNamespace(data=SimpleNamespace(metrics=summarize(records, regression=False),
                                               tags={names.OUTCOME_TAG: names.OK}), info=SimpleNamespace(run_name="job"))
    return summary_table([summary_row(run)])


def test_a_slow_first_epoch_is_warm_up_not_a_spread_note():
    assert "spread" not in _console_summary([1.0, 0.1, 0.1, 0.1])  # epoch 1 ten times slower: warm-up
    assert "epochs spread" in _console_summary([0.1, 0.1, 1.0, 0.1])  # the same slow epoch later is noise


@pytest.mark.gpu
@pytest.mark.parametrize("index", [0, 1])
def test_real_cuda_events_time_gpu_work(index):
    if index >= torch.cuda.device_count():
        pytest.skip(f"needs {index + 1} CUDA devices")
    dev = torch.device("cuda", index)
    a = torch.randn(4096, 4096, device=dev)
    timer = PhaseTimer(dev)
    timer.start()
    for _ in range(3):
        timer.mark()
        for _ in range(10):
            a = a @ a / 4096
        timer.mark(); timer.mark(); timer.mark()
    s = timer.summary()
    assert s["forward"] > 10 * s["backward"]
