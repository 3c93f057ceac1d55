"""A job's MLflow run as a writer: params, tags, metrics, text and binary artifacts, end status.

Metrics are queued and sent from a background thread in batches (``log_batch``, at most
:data:`BATCH` values a call, every :data:`FLUSH_S` seconds, or less often when the server is slow:
:mod:`sweeps.tracking.cadence`), so a job pays a list append per epoch, not a round trip to the
store: a 10,000-epoch job of 1 ms epochs makes a few hundred calls, not 10,000. :meth:`RunWriter.flush` sends everything queued and is called on every way a
job ends; a failed send is retried with backoff (connection errors, 5xx, a busy server's
"QueuePool limit" 400) and never fails the job — what still cannot be sent is reported once. A
store that has not answered for :data:`DOWN_S` counts as down: each later send is tried once, and
the rest of a flush whose send failed is counted lost without a call (every epoch is in the
job's journal and records, which the job's end or a later start replays), so a tracking server
that goes away costs a job's end about a minute, not MLflow's minutes of retries per batch
(:mod:`sweeps.tracking.http_policy`).

Everything goes through an explicit client (no global "active run"), so jobs that run one after
another in one process never inherit each other's state: an :class:`mlflow.MlflowClient`, or the
store process's :class:`~sweeps.tracking.store_client.RemoteClient` (then this module, and the
job's process, never import mlflow: entities come from :func:`sweeps.tracking.entities.classes`).
"""
from __future__ import annotations

import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps import names
from sweeps.errors import brief
from sweeps.tracking import entities, http_policy, priority
from sweeps.tracking.cadence import Cadence
from sweeps.tracking.records import RecordLog
from sweeps.tracking.series import in_series
from sweeps.tracking.store import quiet_sqlite
from sweeps.tracking.store_service import HURRY_AFTER_S

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

log = logging.getLogger("sweeps")
FLUSH_S = 2.0  # seconds between background sends of queued metrics while the server is quick
BATCH = 1000  # MLflow's log_batch limit on metrics per call
RETRIES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # s to wait before each retry of a failed send
DOWN_S = 30.0  # s of failed sends after which the store counts as down: later sends are tried once


class RunWriter:
    """One job's MLflow run: nested under the sweep's parent run when there is one."""

    def __init__(self, client: MlflowClient, experiment_id: str, name: str,
                 parent_run_id: str | None, tags: dict[str, str]):
        self.client = client
        tags = {k: str(v) for k, v in tags.items()}  # plain str: a str subclass (torch's version) pickles by its module
        if parent_run_id:
            tags = {**tags, names.PARENT_RUN_TAG: parent_run_id}
        self._init(client, client.create_run(experiment_id, run_name=name, tags=tags).info.run_id)

    def _init(self, client: MlflowClient, run_id: str) -> None:
        if not getattr(client, "remote", False):  # a rank's own client too: wait for a shared sqlite store's lock, quietly
            quiet_sqlite()
        self.client, self.run_id = client, run_id
        self._Metric, self._Param, self._RunTag = entities.classes(client)
        self._busy_said = False
        self._queue: list[Metric] = []
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
        # which epochs replay() sends: in_series(rec, every_epochs, every_evaluated) (sweeps.tracking.series)
        self.every_epochs, self.every_evaluated = 1, True
        self.records: RecordLog | None = None  # where params, tags, texts are journaled first (sweeps.tracking.records)
        self._thread = threading.Thread(target=self._loop, name="sweeps-mlflow-writer", daemon=True)
        self._thread.start()

    @classmethod
    def attach(cls, client: MlflowClient, run_id: str, reopen: bool = True) -> "RunWriter":
        """Write to an existing run: a killed job resuming (``reopen``: status back to RUNNING), or
        rank 0 of a data-parallel job logging into the run its job process opened and will close
        (``reopen=False``: the status is left alone; :meth:`close`, never :meth:`end`)."""
        job = cls.__new__(cls)
        job._init(client, run_id)
        if reopen:
            client.update_run(run_id, status="RUNNING")
            job._summary = dict(client.get_run(run_id).data.metrics)
        return job

    def log_params(self, params: dict[str, Any]) -> None:
        """Log ``params`` (see :meth:`set_tags` for when the store takes them, and what a kill
        between the two keeps)."""
        if self.records:
            self.records.append("params", params)
        self._later(f"{len(params)} param(s) of run {self.run_id}", "log_batch", self.run_id,
                    params=[self._Param(k, str(v)) for k, v in params.items()])

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Set ``tags``. Through a store process, the job does not wait: MLflow's SQL store takes
        ~10 ms a call (its own work, not the pipe's), spent on the other core while the job goes
        on; the next call that waits for an answer (a run created, a flush, the run's end) comes
        after it, and a refusal is a warning naming the tags, not an exception. With an
        in-process client the call is made here and raises what MLflow raises. Where
        :attr:`records` is set the tags are journaled first: a job killed before the store took
        them has them sent by the next start (:func:`sweeps.tracking.records.replay`)."""
        if self.records:
            self.records.append("tags", tags)
        self._later(f"tag(s) {', '.join(tags)} of run {self.run_id}", "log_batch", self.run_id,
                    tags=[self._RunTag(k, str(v)) for k, v in tags.items()])

    def queue_tags(self, tags: dict[str, Any]) -> None:
        """Set ``tags`` with the next batch of metric values (the background beat, a flush, the
        run's end) rather than in a store call of their own (~10 ms of MLflow's each, about a
        third of a tiny job's store work). Journaled first where :attr:`records` is set (see
        :meth:`set_tags`): a job killed before that batch keeps them too."""
        if self.records:
            self.records.append("tags", tags)
        items = [(k, str(v)) for k, v in tags.items()]
        self._tags.extend(items)  # atomic under the GIL, as log_metrics: the beat may be sending meanwhile

    @property
    def unsent_tags(self) -> dict[str, str]:
        """The tags the store has not taken: those of batches it refused, then those
        :meth:`queue_tags` still holds (a tag queued twice: its last value)."""
        return {**self._refused_tags, **dict(self._tags)}

    def post(self, what: str, fn: Any, *args: Any) -> None:
        """``fn(client, *args)`` where the store is, as :func:`~sweeps.tracking.store_client.in_store`
        runs it, but not waited for where that is a store process
        (:meth:`~sweeps.tracking.store_client.RemoteClient.post`: a refusal is a warning naming
        ``what``); called here with an in-process client."""
        if getattr(self.client, "remote", False):
            self.client.post(what, fn, *args)
        else:
            fn(self.client, *args)

    def _later(self, what: str, method: str, *args: Any, **kwargs: Any) -> None:
        """``client.<method>(*args, **kwargs)``: posted to a store process (:meth:`set_tags`), made
        here with an in-process client."""
        if getattr(self.client, "remote", False):
            self.client.post_call(what, method, *args, **kwargs)
        else:
            getattr(self.client, method)(*args, **kwargs)

    def log_metrics(self, metrics: dict[str, float], step: int = 0, timestamp_ms: int | None = None) -> None:
        """Queue ``metrics`` at ``step`` (O(1) per value; sent by the background thread), stamped
        ``timestamp_ms`` (ms since the Unix epoch; None: now) — a journaled epoch's own
        (:data:`~sweeps.names.TIMESTAMP_MS`), so that sending it again is a no-op. In a reopened run
        (a resumed job) a step-0 value the run already holds (batch size, lr, FLOPs logged again at
        its restart) is not logged twice."""
        ts = _now_ms() if timestamp_ms is None else int(timestamp_ms)
        batch = [self._Metric(k, float(v), ts, step) for k, v in metrics.items()
                 if v is not None and not (step == 0 and self._summary.get(k) == float(v))]
        self._queue.extend(batch)  # list.extend is atomic under the GIL: no lock on the hot path

    def log_series(self, key: str, values: list[float]) -> None:
        """Queue ``values`` as the steps 1..N of metric ``key``."""
        ts = _now_ms()
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

    def replay(self, records: list[dict]) -> int:
        """Send the journal's ``records`` (per-epoch dicts, ``epoch`` = step) that never reached the
        run — queued when a process died, or dropped after every retry — checking each metric's
        history first, so every epoch is logged once; each value keeps its record's timestamp
        (:data:`~sweeps.names.TIMESTAMP_MS`), so one that lands meanwhile by another way (the dead
        job's store process ingesting a batch it had been posted) is the same row. Under ``every_epochs`` > 1 only the series'
        epochs (:func:`~sweeps.tracking.series.in_series`) and the last of ``records``. Returns how
        many values were sent."""
        self.flush()
        records = [r for i, r in enumerate(records) if i == len(records) - 1 or in_series(r, self.every_epochs, self.every_evaluated)]
        keys = {k for rec in records for k in rec if "/" in k}
        missing = []
        now = _now_ms()  # records journaled before they carried a timestamp
        for key in keys:
            logged = {m.step for m in self.client.get_metric_history(self.run_id, key)}
            missing += [self._Metric(key, float(rec[key]), int(rec.get(names.TIMESTAMP_MS, now)), rec["epoch"])
                        for rec in records if key in rec and rec["epoch"] not in logged]
        self._queue.extend(missing)
        self.lost = 0
        self.flush()
        if missing:
            log.info("MLflow: %d metric value(s) of earlier epochs sent from the journal", len(missing))
        return len(missing)

    @property
    def down(self) -> bool:
        """Whether the store has refused or not answered every send for :data:`DOWN_S` or more."""
        return self._down_since is not None and time.monotonic() - self._down_since >= DOWN_S

    def _give_up(self, count: int) -> None:
        """Count the first ``count`` queued values lost without a call: the store is down."""
        rest = self._queue[:count]
        del self._queue[:len(rest)]
        if rest:
            self.lost += len(rest)
            log.warning("MLflow: the store has not answered for %.0f s: %d more metric value(s) of run %s not "
                        "sent; every epoch is in the job's journal and epochs.csv", time.monotonic() - self._down_since,
                        len(rest), self.run_id)

    def _send(self, chunk: list[Metric], tags: dict[str, str] | None = None) -> bool:
        """``chunk`` and ``tags`` in one ``log_batch``, retried after each of :data:`RETRIES` while
        the error is transient and the store not :attr:`down`; whether they were sent."""
        tags = [self._RunTag(k, v) for k, v in (tags or {}).items()]
        for wait in (*RETRIES, None):
            try:
                self.client.log_batch(self.run_id, metrics=chunk, tags=tags)
                self._down_since = None
                return True
            except Exception as e:  # connection refused, 5xx, busy pool (HTTP 400 "QueuePool limit")
                transient = _transient(e)
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

    def _loop(self) -> None:
        priority.lowest(threading.get_native_id())  # this thread only: sends use cores the training leaves idle
        while not self._wake.wait(self.cadence.wait_s()):
            values, start = len(self._queue), time.monotonic()
            self.flush(values)
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
            if queued:  # plain tuples: they pickle ~10x faster than the entities' own reduce
                try:
                    self.client.post(f"{len(queued)} metric value(s)", log_batches, self.run_id,
                                     [tuple(m) for m in queued], on_error=lambda: self._requeue(queued))
                except BaseException:  # not sent (a signal while it was written): the last flush sends them
                    self._requeue(queued)
                    raise
        finally:
            self._lock.release()

    def _requeue(self, values: list[Metric]) -> None:
        self._queue[:0] = values

    def _hold(self) -> None:
        """Take the sending lock; past :data:`~sweeps.tracking.store_service.HURRY_AFTER_S` behind
        the beat's batch, have the beat stop after it and the store process hurry it (which ends
        its background process: the next background batch starts another, ~2 s of imports)."""
        if not self._lock.acquire(timeout=HURRY_AFTER_S):
            self._yield = True  # the beat stops between batches
            getattr(self.client, "hurry", lambda: None)()
            self._lock.acquire()
            self._yield = False

    def log_bytes(self, data: bytes, name: str) -> None:
        """Log ``data`` as the run's artifact ``name`` (a file in a temporary folder, read by
        :meth:`mlflow.MlflowClient.log_artifact` where the store is: this machine)."""
        with tempfile.TemporaryDirectory(prefix="sweeps-artifact-") as folder:
            path = Path(folder) / name
            path.write_bytes(data)
            self.client.log_artifact(self.run_id, str(path))

    def log_text(self, text: str, name: str) -> None:
        """Log ``text`` as the run's artifact ``name`` (see :meth:`set_tags` for when; journaled
        first up to :data:`~sweeps.tracking.records.TEXT_MAX` characters)."""
        if self.records:
            self.records.append("texts", {name: text})
        self._later(f"{name} of run {self.run_id}", "log_text", self.run_id, text, name)

    def close(self) -> None:
        """Stop the background thread and send what is left at the caller's priority (see
        :meth:`flush`). Idempotent."""
        if not self._closed:
            self._closed = True
            self._wake.set()
        self.flush()
        self._thread.join(timeout=60)

    def end(self, status: str) -> None:
        """Send what is queued, then close the run: ``FINISHED``, ``FAILED`` or ``KILLED``. A
        closed run is replayed no more: nothing is journaled after this (:attr:`records` off)."""
        self.records = None
        self.close()
        self.client.set_terminated(self.run_id, status)


def log_batches(client: MlflowClient, run_id: str, values: list[tuple[str, float, int, int]]) -> None:
    """``values`` — (key, value, timestamp ms, step) each — logged to run ``run_id`` with
    :meth:`mlflow.MlflowClient.log_batch`, :data:`BATCH` a call: where the store is
    (:meth:`RunWriter.send_later`). Raises what MLflow raises, at the first refused batch."""
    from mlflow.entities import Metric

    for i in range(0, len(values), BATCH):
        client.log_batch(run_id, metrics=[Metric(*v) for v in values[i:i + BATCH]])


def _transient(e: Exception) -> bool:
    """Whether a failed send is worth retrying: the server or network is busy, not the request bad."""
    text = str(e)
    return (http_policy.unanswered(e) or "QueuePool limit" in text or "database is locked" in text
            or any(f" {code}" in text for code in ("500", "502", "503", "504")))


def _now_ms() -> int:
    return int(time.time() * 1000)
