"""A job's MLflow run as a writer: params, tags, metrics, text and binary artifacts, end status.

Metric values go out in batches from a background thread (:mod:`sweeps.tracking.batches`); params,
tags and small texts are journaled first where the run has a folder
(:mod:`sweeps.tracking.records`). Everything goes through an explicit client (no global "active
run"), so jobs that run one after another in one process never inherit each other's state: an
:class:`mlflow.MlflowClient`, or the store process's
:class:`~sweeps.tracking.store_client.RemoteClient` (then this module, and the job's process,
never import mlflow: entities come from :func:`sweeps.tracking.entities.classes`).
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps import names
from sweeps.tracking.batches import MetricBatches, now_ms
from sweeps.tracking import cursor
from sweeps.tracking.cursor import Cursor
from sweeps.tracking.records import RECORDS, RecordLog
from sweeps.tracking.series import in_series
from sweeps.tracking.store import quiet_sqlite
from sweeps.tracking.store_client import in_store

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("sweeps")


class RunWriter(MetricBatches):
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
        # which epochs replay() sends: in_series(rec, every_epochs, every_evaluated) (sweeps.tracking.series)
        self.every_epochs, self.every_evaluated = 1, True
        self.records: RecordLog | None = None  # where params, tags, texts are journaled first (sweeps.tracking.records)
        self._shipping: str | None = None  # the run folder whose ship lock the ingesting process holds (keep_in)
        self._start(client, run_id)

    @classmethod
    def attach(cls, client: MlflowClient, run_id: str, reopen: bool = True,
               read_summary: bool | None = None) -> "RunWriter":
        """Write to an existing run: a killed job resuming (``reopen``: status back to RUNNING), or
        rank 0 of a data-parallel job logging into the run its job process opened and will close
        (``reopen=False``: the status is left alone; :meth:`close`, never :meth:`end`).
        ``read_summary`` (default: ``reopen``): the run's values so far are read first (one call),
        so that a value an earlier part of the run logged at step 0 is not logged again
        (:meth:`log_summary`)."""
        job = cls.__new__(cls)
        job._init(client, run_id)
        if reopen:
            client.update_run(run_id, status="RUNNING")
        if read_summary is None:
            read_summary = reopen
        if read_summary:
            job._summary = dict(client.get_run(run_id).data.metrics)
        return job

    def keep_in(self, folder: Path) -> None:
        """Keep the run's records in its ``folder`` (beside its checkpoints and epoch journal):
        params, tags and texts journaled before they are sent (:data:`~sweeps.tracking.records.RECORDS`),
        and the :attr:`cursor`, how far the journal has reached MLflow. Whoever ingests the run's
        values holds its ship lock until :meth:`end` (:func:`~sweeps.tracking.cursor.hold`): a
        replay after this process's death waits for it."""
        self.records = RecordLog(folder / RECORDS)
        self.cursor = Cursor(folder)
        self._shipping = str(Path(folder).absolute())
        self.post(f"the ship lock of run {self.run_id}", cursor.hold, self._shipping)

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

    def replay(self, records: list[dict]) -> int:
        """Send the journal's ``records`` (per-epoch dicts, ``epoch`` = step) that never reached the
        run — queued when a process died, or dropped after every retry. Only the records after the
        run's :attr:`cursor` are looked at (all of them without one: :mod:`sweeps.tracking.cursor`),
        and of those only the (metric, epoch) the run lacks are sent (:func:`held_steps`), so every
        epoch is logged once. Each value keeps its record's timestamp
        (:data:`~sweeps.names.TIMESTAMP_MS`), so one that lands meanwhile by another way (the dead
        job's store process ingesting a batch it had been posted) is the same row. Under
        ``every_epochs`` > 1 only the series' epochs (:func:`~sweeps.tracking.series.in_series`) and
        the last of ``records``. Returns how many values were sent."""
        self.flush()
        if not records:
            return 0
        through = (self.cursor.read() if self.cursor is not None else None) or 0
        last = records[-1]
        records = [r for r in records if r["epoch"] > through
                   and (r is last or in_series(r, self.every_epochs, self.every_evaluated))]
        wanted: dict[str, list[int]] = {}
        for rec in records:
            for key in rec:
                if "/" in key:
                    wanted.setdefault(key, []).append(rec["epoch"])
        held = {k: set(v) for k, v in in_store(self.client, held_steps, self.run_id, wanted).items()} if wanted else {}
        now = now_ms()  # records journaled before they carried a timestamp
        missing = [self._Metric(key, float(rec[key]), int(rec.get(names.TIMESTAMP_MS, now)), rec["epoch"])
                   for rec in records for key in rec if "/" in key and rec["epoch"] not in held[key]]
        self._queue.extend(missing)
        self._queue.append(last["epoch"])  # the cursor moves to the journal's end once they are taken
        self.lost = 0
        self.flush()
        if missing:
            log.info("MLflow: %d metric value(s) of earlier epochs sent from the journal", len(missing))
        return len(missing)

    def log_bytes(self, data: bytes, name: str) -> None:
        """Log ``data`` as the run's artifact ``name`` (a file in a temporary folder, read by
        :meth:`mlflow.MlflowClient.log_artifact` where the store is: this machine)."""
        with tempfile.TemporaryDirectory(prefix="sweeps-artifact-") as folder:
            path = Path(folder) / name
            path.write_bytes(data)
            self.client.log_artifact(self.run_id, str(path))

    def log_text(self, text: str, name: str) -> None:
        """Log ``text`` as the run's artifact ``name`` (see :meth:`set_tags` for when; journaled
        first: :meth:`~sweeps.tracking.records.RecordLog.append`)."""
        if self.records:
            self.records.append("texts", {name: text})
        self._later(f"{name} of run {self.run_id}", "log_text", self.run_id, text, name)

    def end(self, status: str) -> None:
        """Send what is queued, then close the run: ``FINISHED``, ``FAILED`` or ``KILLED``. A
        closed run is replayed no more: nothing is journaled after this (:attr:`records` off)."""
        self.records = None
        self.close()
        self.client.set_terminated(self.run_id, status)
        if self._shipping:
            self.post(f"the ship lock of run {self.run_id}", cursor.release, self._shipping)
            self._shipping = None


STEPS_PER_QUERY = 500  # steps asked of an SQL store at once (sqlite allows 32,766 bound values a query)


def held_steps(client: MlflowClient, run_id: str, wanted: dict[str, list[int]]) -> dict[str, list[int]]:
    """For each metric key of ``wanted``, the steps among its list at which run ``run_id`` holds
    a value; run where the store is (:func:`~sweeps.tracking.store_client.in_store`). MLflow's SQL
    store is asked for those steps alone (``get_metric_history_bulk_interval_from_steps``,
    :data:`STEPS_PER_QUERY` at a time) where they are few: reading a 10,000-epoch metric's whole
    history takes ~1 s, and sending values the run holds again costs more (MLflow's SQL store then
    looks each one up: ~20 s for 1,000 values in a run of 200,000, 2-core VM). Many steps, or any
    other store (a tracking server): the metric's whole history. Raises what MLflow raises."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    out: dict[str, list[int]] = {}
    for key, steps in wanted.items():
        if isinstance(store, SqlAlchemyStore) and len(steps) <= 4 * STEPS_PER_QUERY:
            found = []
            for i in range(0, len(steps), STEPS_PER_QUERY):
                chunk = steps[i:i + STEPS_PER_QUERY]
                found += [m.step for m in store.get_metric_history_bulk_interval_from_steps(
                    run_id, key, chunk, max_results=4 * len(chunk))]
        else:
            found = [m.step for m in client.get_metric_history(run_id, key)]
        out[key] = sorted(set(found) & set(steps))
    return out
