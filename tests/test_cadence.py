"""The writer's send beat follows the tracking server: 2 s while it is quick, longer as its sends slow
down (so 500 jobs sharing one server settle at what it can serve), back again when it recovers."""
from __future__ import annotations

import random

import pytest

from sweeps.tracking.follower import delivery
from sweeps.tracking.follower.cadence import Cadence


def _steady(**kw) -> Cadence:
    return Cadence(jitter=0, **kw)


def test_a_quick_server_is_sent_to_every_two_seconds():
    c = _steady()
    assert c.wait_s() == delivery.FLUSH_S == 2.0  # no send yet
    for _ in range(5):
        c.sent(0.02, 15)  # 20 ms a call
    assert c.wait_s() == 2.0


def test_slow_sends_stretch_the_wait_to_k_times_the_latency_up_to_the_cap():
    c = _steady(k=10)
    for _ in range(10):
        c.sent(0.8, 30)
    assert c.wait_s() == pytest.approx(8.0, rel=0.01)  # 10 x 0.8 s
    c.sent(60.0, 30)  # a send that waited through retries of a down server
    assert c.wait_s() == 30.0  # the cap: metrics are never held longer


def test_latency_is_per_call_so_a_big_coalesced_send_is_not_mistaken_for_a_slow_server():
    c = _steady(k=10)
    for _ in range(10):
        c.sent(1.0, 5000)  # 5 calls of 1,000 values, 0.2 s each
    assert c.wait_s() == pytest.approx(2.0, rel=0.01)


def test_the_beat_comes_back_when_the_server_recovers_and_an_empty_send_changes_nothing():
    c = _steady()
    c.sent(10.0, 100)
    assert c.wait_s() == 30.0
    c.sent(5.0, 0)  # nothing was queued: no measurement
    assert c.wait_s() == 30.0
    for _ in range(12):
        c.sent(0.01, 100)
    assert c.wait_s() == 2.0


def test_jitter_spreads_jobs_started_together_within_its_bounds():
    rng = random.Random(0)
    waits = [Cadence(rng=rng).wait_s() for _ in range(200)]
    assert min(waits) >= 1.8 and max(waits) <= 2.2 and len({round(w, 3) for w in waits}) > 100
    slow = Cadence(rng=rng)
    slow.sent(100.0, 10)
    assert all(slow.wait_s() <= 30.0 for _ in range(100))  # never above the cap


@pytest.mark.parametrize("kw", [{"floor_s": 0}, {"floor_s": 5, "cap_s": 2}, {"k": 0}, {"jitter": 1.0}])
def test_bounds_that_cannot_hold_are_refused_naming_them(kw):
    with pytest.raises(ValueError, match="cadence: need 0 < floor_s <= cap_s"):
        Cadence(**kw)
