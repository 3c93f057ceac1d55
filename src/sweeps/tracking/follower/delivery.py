"""Sending a run's values to MLflow in shipments, with retries: run where the store is.

Values go out with ``log_batch``, at most `PER_CALL` a call (MLflow's limit). A failed send is
retried with backoff (`RETRIES`: connection errors, 5xx, a busy server's "QueuePool limit"
400, sqlite's "database is locked" after MLflow's 20-s busy timeout) and never fails a job; what
still cannot be sent is reported once. A store that has not answered for `DOWN_S` counts as
down: each later send is tried once, so a tracking server that goes away costs a job's end about a
minute, not MLflow's minutes of retries per shipment (`sweeps.tracking.store.http_policy`). Nothing is
lost by a refusal: every epoch is in the run's journal, which the follower ships from its cursor
(`sweeps.tracking.follower.follower`), and the job-level values a job's end could not send are kept in
the run's folder for the next start (`sweeps.tracking.replay.replay.keep_unclosed`).
"""
from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from sweeps.errors import brief
from sweeps.tracking.store import http_policy
from sweeps.tracking.follower.cadence import Cadence

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("sweeps")
FLUSH_S = 2.0  # s between the follower's beats while the store is quick (cadence's floor)
PER_CALL = 1000  # MLflow's log_batch limit on metrics per call
RETRIES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # s to wait before each retry of a failed send
DOWN_S = 30.0  # s of failed sends after which the store counts as down: later sends are tried once

Value = tuple[str, float, int, int]  # a metric value: (key, value, timestamp ms, step)


class Sender:
    """The ``log_batch`` calls to one store, with the retries and the down state above, and the
    `Cadence` of the calls' latency (the follower's beat)."""

    def __init__(self):
        self._down_since: float | None = None  # monotonic s of the first failed send since the last success
        self._busy_said = False
        self.cadence = Cadence(floor_s=FLUSH_S)

    @property
    def down(self) -> bool:
        """Whether the store has refused or not answered every send for `DOWN_S` or more."""
        return self._down_since is not None and time.monotonic() - self._down_since >= DOWN_S

    def send(self, client: MlflowClient, run_id: str, values: list[Value],
             tags: dict[str, str] | None = None, say: bool = True) -> Exception | None:
        """Log ``values`` and ``tags`` to run ``run_id`` of ``client`` (an
        `mlflow.MlflowClient`; `PER_CALL` values a call, the tags with the first),
        retried after each of `RETRIES` while the error is transient and the store not
        `down`; None once sent, else the last error (said in one warning line where ``say``,
        unless the run is deleted: `gone`)."""
        from mlflow.entities import Metric, RunTag

        metrics, tag_list = [Metric(*v) for v in values], [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        start, done = time.monotonic(), 0
        for wait in (*RETRIES, None):
            try:
                while done < len(metrics) or tag_list:
                    client.log_batch(run_id, metrics=metrics[done:done + PER_CALL], tags=tag_list)
                    done, tag_list = done + PER_CALL, []
                self._down_since = None
                self.cadence.sent(time.monotonic() - start, len(metrics), PER_CALL)
                return None
            except Exception as e:  # connection refused, 5xx, busy pool (HTTP 400 "QueuePool limit"), locked
                transient = http_policy.transient(e)
                if transient and self._down_since is None:
                    self._down_since = time.monotonic()
                if wait is None or not transient or self.down:
                    if not say or http_policy.gone(e):  # a deleted run: the job's end says it, once
                        return e
                    what = ([f"{len(metrics) - done} metric value(s)"] * (done < len(metrics))
                            + [f"tag(s) {', '.join(t.key for t in tag_list)}"] * bool(tag_list))
                    log.warning("MLflow: %s of run %s not logged (%s: %s)", " and ".join(what) or "values",
                                run_id, type(e).__name__, brief(e))
                    return e
                if not self._busy_said:  # once: the store is busy, the sender waits and retries
                    self._busy_said = True
                    log.warning("MLflow: the store is busy (%s: %s); retrying — every epoch is in the journal, "
                                "nothing is lost", type(e).__name__, brief(e, 80))
                time.sleep(wait)
        return None  # not reached


_senders: weakref.WeakKeyDictionary[Any, Sender] = weakref.WeakKeyDictionary()  # client → its sender


def sender(client: MlflowClient) -> Sender:
    """The `Sender` of ``client`` in this process (one, so its down state is the store's)."""
    held = _senders.get(client)
    if held is None:
        held = _senders[client] = Sender()
    return held


def send_values(client: MlflowClient, run_id: str, values: list[Value], tags: dict[str, str]) -> None:
    """``values`` and ``tags`` of run ``run_id`` sent where the store is
    (`in_store`): a job's values at step 0, its tags.

    Raises:
        Exception: the last error where the store refused them after every retry.
    """
    error = sender(client).send(client, run_id, values, tags)
    if error is not None:
        raise error


def now_ms() -> int:
    return int(time.time() * 1000)
