"""How long a run's background writer waits between sends: it follows the tracking server's latency.

A server shared by many jobs saturates when every job sends on a fixed beat (one ``mlflow server``
with 4 workers: ~60 jobs sending once a second, docs/benchmarks.md). So the wait between two sends is
``K`` times the recent time a send took, clamped to ``[floor_s, cap_s]``: a job spends at most
about 1/``K`` of its time waiting on the server, and when the server slows down every job sends
less often, each send carrying more values (the writer coalesces everything queued into as few
``log_batch`` calls as MLflow's 1,000-value limit allows). The server's load then settles at what
it can serve instead of its queue growing without bound. A jitter of ±``JITTER`` spreads jobs
that started together, so their sends do not arrive in waves.

Pure logic, no I/O: the writer calls `Cadence.sent` after each send and sleeps
`Cadence.wait_s`. Only the background beat follows it; the end-of-job flush is immediate.
"""
from __future__ import annotations

import math
import random

FLOOR_S = 2.0  # s: the quiet-server beat (the writer's FLUSH_S)
CAP_S = 30.0  # s: the longest wait, however slow the server (a job's metrics are never older than this + a send)
K = 10.0  # wait = K x recent latency per call: the server holds at most ~1/K of a job's time
SMOOTH = 0.5  # weight of the newest latency in the running estimate (one slow send moves it halfway)
JITTER = 0.1  # ± fraction of the wait, drawn per send, so jobs started together drift apart


class Cadence:
    """The send beat of one writer: ``wait_s()`` seconds until the next background send.

    ``floor_s`` and ``cap_s`` (s) bound the wait; ``k`` scales the smoothed per-call latency (s)
    into it; ``jitter`` (fraction) and ``rng`` (a `random.Random`) spread it. Raises
    ``ValueError`` on bounds that cannot hold (``0 < floor_s <= cap_s``, ``k > 0``, ``0 <= jitter < 1``).
    """

    def __init__(self, floor_s: float = FLOOR_S, cap_s: float = CAP_S, k: float = K, jitter: float = JITTER,
                 rng: random.Random | None = None):
        if not (0 < floor_s <= cap_s) or k <= 0 or not (0 <= jitter < 1):
            raise ValueError(f"cadence: need 0 < floor_s <= cap_s, k > 0, 0 <= jitter < 1; got floor_s={floor_s}, "
                             f"cap_s={cap_s}, k={k}, jitter={jitter}")
        self.floor_s, self.cap_s, self.k, self.jitter = floor_s, cap_s, k, jitter
        self.latency_s = 0.0  # smoothed seconds per log_batch call, retries' waits included
        self._rng = rng or random.Random()

    @property
    def beat_s(self) -> float:
        """The wait (s) before jitter: ``clamp(k x latency_s, floor_s, cap_s)``."""
        return min(self.cap_s, max(self.floor_s, self.k * self.latency_s))

    def wait_s(self) -> float:
        """Seconds to sleep before the next send: `beat_s` ± jitter, never above ``cap_s``."""
        return min(self.cap_s, self.beat_s * (1 + self.jitter * self._rng.uniform(-1, 1)))

    def sent(self, seconds: float, values: int, values_per_call: int = 1000) -> None:
        """Note that a send of ``values`` metric values took ``seconds`` (s, wall clock, retries
        included): ``ceil(values / values_per_call)`` calls. A send of nothing (an empty queue) is not a
        measurement and leaves the beat alone."""
        if values <= 0:
            return
        per_call = max(0.0, seconds) / math.ceil(values / values_per_call)
        self.latency_s += SMOOTH * (per_call - self.latency_s)
