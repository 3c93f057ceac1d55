"""A run's metric values, queued and sent in batches from a background thread, with retries.

Values are queued and sent in batches (``log_batch``, at most :data:`BATCH` values a call, every
:data:`FLUSH_S` seconds, or less often when the server is slow: :mod:`sweeps.tracking.cadence`),
so a job pays a list append per epoch, not a round trip to the store: a 10,000-epoch job of 1 ms
epochs makes a few hundred calls, not 10,000. :meth:`MetricBatches.flush` sends everything queued
and is called on every way a job ends; a failed send is retried with backoff (connection errors,
5xx, a busy server's "QueuePool limit" 400) and never fails the job — what still cannot be sent
is reported once. A store that has not answered for :data:`DOWN_S` counts as down: each later
send is tried once, and the rest of a flush whose send failed is counted lost without a call
(every epoch is in the job's journal and records, which the job's end or a later start replays),
so a tracking server that goes away costs a job's end about a minute, not MLflow's minutes of
retries per batch (:mod:`sweeps.tracking.http_policy`). Once a job's store process is gone, the
background thread sends nothing (:class:`~sweeps.tracking.store_client.BackgroundHeld`): its
values wait for a flush at the caller's normal priority (the job's end, a resume's replay).
Each journaled epoch's values are followed in the queue by the epoch's number, which moves the
run's :class:`~sweeps.tracking.cursor.Cursor` once MLflow has taken them.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from sweeps.errors import brief
from sweeps.tracking import entities, http_policy, priority
from sweeps.tracking.cadence import Cadence
from sweeps.tracking.cursor import Cursor
from sweeps.tracking.store_client import BackgroundHeld
from sweeps.tracking.store_service import HURRY_AFTER_S

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

log = logging.getLogger("sweeps")
FLUSH_S = 2.0  # seconds between background sends of queued metrics while the server is quick
BATCH = 1000  # MLflow's log_batch limit on metrics per call
RETRIES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # s to wait before each retry of a failed send
DOWN_S = 30.0  # s of failed sends after which the store counts as down: later sends are tried once


class MetricBatches:
    """The sending side of a run's writer (:class:`~sweeps.tracking.writer.RunWriter`): the
    queue of metric values and tags, the background thread that sends it, the retries and the
    store's down state. :attr:`lost` counts the values that could not be sent after every retry.
    :attr:`cursor` (None: none) records the last journaled epoch MLflow holds; the queue holds that
    epoch's number (an ``int``) after its values."""

    def _start(self, client: Any, run_id: str) -> None:
        """Queue for run ``run_id`` of ``client`` and start the background thread."""
        self.client, self.run_id = client, run_id
        self._Metric, self._Param, self._RunTag = entities.classes(client)
        self._busy_said = False
        self._queue: list[Metric | int] = []  # an int: every value before it of that epoch is queued
        self.cursor: Cursor | None = None  # the run's folder's cursor (sweeps.tracking.cursor)
        self._posted: list | None = None  # what send_later posted, until its answer is read
        self._tags: list[tuple[str, str]] = []  # queue_tags: sent with the next batch (appended like _queue)
        self._lock = threading.Lock()  # one sender at a time: the thread, or a flush
        self._wake = threading.Event()
        self._closed = False
        self._yield = False  # a caller waits for the beat's send: it stops after the batch under way
        self.lost = 0  # metric values that could not be sent after every retry
        self._down_since: float | None = None  # monotonic s of the first failed send since the last success
        self._refused_tags: dict[str, str] = {}  # tags that went with a batch the store never took
        self.cadence = Cadence(floor_s=FLUSH_S)  # the background beat: backs off as sends slow down
        self._summary: dict[str, float] = {}  # a reopened run's values so far: not logged again at step 0
        self._thread = threading.Thread(target=self._loop, name="sweeps-mlflow-writer", daemon=True)
        self._thread.start()

    @property
    def unsent_tags(self) -> dict[str, str]:
        """The tags the store has not taken: those of batches it refused, then those
        :meth:`~sweeps.tracking.writer.RunWriter.queue_tags` still holds (a tag queued twice: its last value)."""
        return {**self._refused_tags, **dict(self._tags)}

    def log_metrics(self, metrics: dict[str, float], step: int = 0, timestamp_ms: int | None = None) -> None:
        """Queue ``metrics`` at ``step`` (O(1) per value; sent by the background thread), stamped
        ``timestamp_ms`` (ms since the Unix epoch; None: now) — a journaled epoch's own
        (:data:`~sweeps.names.TIMESTAMP_MS`), so that sending it again is a no-op. In a reopened run
        (a resumed job) a step-0 value the run already holds (batch size, lr, FLOPs logged again at
        its restart) is not logged twice."""
        ts = now_ms() if timestamp_ms is None else int(timestamp_ms)
        batch = [self._Metric(k, float(v), ts, step) for k, v in metrics.items()
                 if v is not None and not (step == 0 and self._summary.get(k) == float(v))]
        self._queue.extend(batch)  # list.extend is atomic under the GIL: no lock on the hot path

    def log_epoch(self, metrics: dict[str, float], epoch: int, timestamp_ms: int) -> None:
        """Queue a journaled epoch's ``metrics`` (:meth:`log_metrics` at step ``epoch``), then the
        epoch's number: once MLflow has taken everything up to it, the :attr:`cursor` moves there."""
        self.log_metrics(metrics, epoch, timestamp_ms)
        self._queue.append(epoch)

    def log_summary(self, metrics: dict[str, float]) -> None:
        """Queue a job's end-of-job ``metrics`` at step 0, each key once in the run: a resumed run
        that holds one already keeps it — its earlier process posted its summary, then was killed
        before it closed the run (the resumed job's ``time/job_s`` would differ, a second point at
        step 0)."""
        self.log_metrics({k: v for k, v in metrics.items() if k not in self._summary})

    def log_series(self, key: str, values: list[float]) -> None:
        """Queue ``values`` as the steps 1..N of metric ``key``."""
        ts = now_ms()
        self._queue.extend(self._Metric(key, float(v), ts, i) for i, v in enumerate(values, start=1))

    def flush(self, most: int | None = None) -> None:
        """Send everything queued now (the caller waits), or at most ``most`` values: the background
        beat sends what was queued when it woke, so values that keep arriving while a slow server
        answers never hold it in one endless flush. A caller that waits for the beat's batch past
        :data:`~sweeps.tracking.store_service.HURRY_AFTER_S` (on a machine whose cores other
        programs keep busy, the lowest priority gets next to no CPU) has the beat stop after it
        and the store process hurry it (:meth:`~sweeps.tracking.store_client.RemoteClient.hurry`),
        then sends the rest at its own priority. A whole flush first reads the answer to
        :meth:`send_later`'s request (values it was refused are sent here). Never raises."""
        if most is not None:
            self._lock.acquire()
        else:
            self._hold()
        try:
            if most is None:
                getattr(self.client, "settle", lambda: None)()  # a posted send refused re-queues its values
                posted, self._posted = self._posted, None
                if posted is not None:  # taken (a refused one was re-queued): the cursor moves past its epochs
                    self._advance(posted)
            left = len(self._queue) if most is None else most
            pending = self._tags[:]
            del self._tags[:len(pending)]  # tags queued meanwhile go with the next batch
            tags = dict(pending)  # a tag queued twice: its last value
            while self._queue and (most is None or (left > 0 and not self._yield and not self._closed)):
                chunk = self._queue[:BATCH if most is None else min(BATCH, left)]
                del self._queue[:len(chunk)]  # appends made meanwhile stay queued
                left -= len(chunk)
                sent = self._send(chunk, tags)
                tags = {}
                if not sent and self.down:  # one call per flush while the store is down
                    if most is None:
                        self._give_up(left)
                    break
            if tags:
                self._send([], tags)
        finally:
            self._lock.release()

    @property
    def down(self) -> bool:
        """Whether the store has refused or not answered every send for :data:`DOWN_S` or more."""
        return self._down_since is not None and time.monotonic() - self._down_since >= DOWN_S

    def _give_up(self, count: int) -> None:
        """Count the first ``count`` queued values lost without a call: the store is down."""
        rest = self._queue[:count]
        del self._queue[:len(rest)]
        rest = _values(rest)
        if rest:
            self.lost += len(rest)
            log.warning("MLflow: the store has not answered for %.0f s: %d more metric value(s) of run %s not "
                        "sent; every epoch is in the job's journal and epochs.csv", time.monotonic() - self._down_since,
                        len(rest), self.run_id)

    def _send(self, queued: list[Metric | int], tags: dict[str, str] | None = None) -> bool:
        """The values of ``queued`` (epoch numbers among them move the :attr:`cursor`) and ``tags``
        in one ``log_batch``, retried after each of :data:`RETRIES` while the error is transient and
        the store not :attr:`down`; whether they were sent."""
        tags = [self._RunTag(k, v) for k, v in (tags or {}).items()]
        chunk = _values(queued)
        posted = self._posted is not None  # refused while this batch is sent, it goes back ahead of it
        if not chunk and not tags:  # epoch numbers alone: their values went with an earlier batch
            self._advance(queued)
            return True
        for wait in (*RETRIES, None):
            try:
                self.client.log_batch(self.run_id, metrics=chunk, tags=tags)
                self._down_since = None
                if not posted:
                    self._advance(queued)
                return True
            except BackgroundHeld:  # the background thread's, once the store process is gone: kept
                self._queue[:0] = queued
                self._tags[:0] = [(t.key, t.value) for t in tags]
                raise
            except Exception as e:  # connection refused, 5xx, busy pool (HTTP 400 "QueuePool limit")
                transient = http_policy.transient(e)
                if transient and self._down_since is None:
                    self._down_since = time.monotonic()
                if wait is None or not transient or self.down:
                    self.lost += len(chunk)
                    self._refused_tags.update((t.key, t.value) for t in tags)
                    what = [f"{len(chunk)} metric value(s)"] * bool(chunk) + [f"tag(s) {', '.join(t.key for t in tags)}"] * bool(tags)
                    log.warning("MLflow: %s of run %s not logged (%s: %s)", " and ".join(what), self.run_id,
                                type(e).__name__, brief(e))
                    return False
                if not self._busy_said:  # once per run: the store is busy, the writer waits and retries
                    self._busy_said = True
                    log.warning("MLflow: the store is busy (%s: %s); retrying — every epoch is in the journal, "
                                "nothing is lost", type(e).__name__, brief(e, 80))
                time.sleep(wait)

    def _advance(self, taken: list[Metric | int]) -> None:
        """Move the :attr:`cursor` to the last epoch number in ``taken`` (values MLflow has just
        taken), unless a value was lost before them or a posted batch is still unanswered: the
        cursor never leads the store."""
        if self.cursor is None or self.lost or self._posted is not None:
            return
        for item in reversed(taken):
            if item.__class__ is int:
                self.cursor.write(item)
                return

    def _loop(self) -> None:
        priority.lowest(threading.get_native_id())  # this thread only: sends use cores the training leaves idle
        while not self._wake.wait(self.cadence.wait_s()):
            values, start = len(self._queue), time.monotonic()
            try:
                self.flush(values)
            except BackgroundHeld:  # kept queued for a flush at normal priority (module docstring)
                continue
            self.cadence.sent(time.monotonic() - start, values, BATCH)

    def send_later(self) -> None:
        """Hand everything queued to the store process in one request and return without waiting
        for MLflow to ingest it (:meth:`~sweeps.tracking.store_client.RemoteClient.post`): a job's
        end builds its tables and draws its figure meanwhile, on the other core. Where the store
        refuses it, its values go back on the queue, which :meth:`flush` then sends with retries
        (MLflow's SQL store drops a value it holds already, so a batch logged twice is logged
        once). With an in-process client, nothing: :meth:`flush` sends them."""
        if not getattr(self.client, "remote", False):
            return
        self._hold()
        try:
            queued = self._queue[:]
            del self._queue[:len(queued)]
            values = _values(queued)
            if values:  # plain tuples: they pickle ~10x faster than the entities' own reduce
                self._posted = queued
                try:
                    self.client.post(f"{len(values)} metric value(s)", log_batches, self.run_id,
                                     [tuple(m) for m in values], on_error=lambda: self._requeue(queued))
                except BaseException:  # not sent (a signal while it was written): the last flush sends them
                    self._requeue(queued)
                    raise
            else:
                self._advance(queued)
        finally:
            self._lock.release()

    def _requeue(self, queued: list[Metric | int]) -> None:
        self._posted = None
        self._queue[:0] = queued

    def _hold(self) -> None:
        """Take the sending lock; past :data:`~sweeps.tracking.store_service.HURRY_AFTER_S` behind
        the beat's batch, have the beat stop after it and the store process hurry it (which ends
        its background process: the next background batch starts another, ~2 s of imports)."""
        if not self._lock.acquire(timeout=HURRY_AFTER_S):
            self._yield = True  # the beat stops between batches
            getattr(self.client, "hurry", lambda: None)()
            self._lock.acquire()
            self._yield = False

    def close(self) -> None:
        """Stop the background thread and send what is left at the caller's priority (see
        :meth:`flush`). Idempotent."""
        if not self._closed:
            self._closed = True
            self._wake.set()
        self.flush()
        self._thread.join(timeout=60)



def log_batches(client: MlflowClient, run_id: str, values: list[tuple[str, float, int, int]]) -> None:
    """``values`` — (key, value, timestamp ms, step) each — logged to run ``run_id`` with
    :meth:`mlflow.MlflowClient.log_batch`, :data:`BATCH` a call: where the store is
    (:meth:`MetricBatches.send_later`). Raises what MLflow raises, at the first refused batch."""
    from mlflow.entities import Metric

    for i in range(0, len(values), BATCH):
        client.log_batch(run_id, metrics=[Metric(*v) for v in values[i:i + BATCH]])


def _values(queued: list) -> list:
    """The metric values of ``queued``, without the epoch numbers among them."""
    return [m for m in queued if m.__class__ is not int]


def now_ms() -> int:
    return int(time.time() * 1000)
