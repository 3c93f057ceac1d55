"""A job's MLflow run as a writer: params, tags, job-level metrics, text and binary artifacts,
the run's journal followed, end status.

The per-epoch metrics are not sent from here: the job appends them to the run's journal
(`sweeps.tracking.journal.journal`) and the follower ships the journal where the store is
(`sweeps.tracking.follower.follower`; `RunWriter.follow`, `RunWriter.drain`). Params,
tags and small texts are journaled first where the run has a folder
(`sweeps.tracking.writer.records`) and posted; job-level values (step 0: batch size, learning rate,
the summary) and queued tags go together in one call (`RunWriter.send_pending`). Everything
goes through an explicit client (no global "active run"), so jobs that run one after another in
one process never inherit each other's state: an `mlflow.MlflowClient`, or the store
process's `RemoteClient` (then this module, and the job's
process, never import mlflow: entities come from `sweeps.tracking.store.entities.classes`).
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps import names
from sweeps.tracking.follower import delivery, shipping
from sweeps.tracking.journal import cursor
from sweeps.tracking.store import entities
from sweeps.tracking.follower.delivery import now_ms
from sweeps.tracking.journal.cursor import Cursor
from sweeps.tracking.writer.records import RECORDS, RecordLog
from sweeps.tracking.store.store import quiet_sqlite
from sweeps.tracking.service.client import in_store

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("sweeps")


class RunWriter:
    """One job's MLflow run: nested under the sweep's parent run when there is one. `lost`
    counts the values the store refused after every retry (kept for a later start: the journal,
    `keep_unclosed`)."""

    def __init__(self, client: MlflowClient, experiment_id: str, name: str,
                 parent_run_id: str | None, tags: dict[str, str]):
        self.client = client
        tags = {k: str(v) for k, v in tags.items()}  # plain str: a str subclass (torch's version) pickles by its module
        if parent_run_id:
            tags = {**tags, names.PARENT_RUN_TAG: parent_run_id}
        self._init(client, client.create_run(experiment_id, run_name=name, tags=tags).info.run_id)
        self._fresh = True  # created now: the store holds none of its epochs (follow)

    def _init(self, client: MlflowClient, run_id: str) -> None:
        if not getattr(client, "remote", False):  # a rank's own client too: wait for a shared sqlite store's lock, quietly
            quiet_sqlite()
        self.client, self.run_id = client, run_id
        _, self._Param, self._RunTag = entities.classes(client)
        # which epochs the follower ships: in_series(rec, every_epochs, every_evaluated) (sweeps.tracking.follower.series)
        self.every_epochs, self.every_evaluated = 1, True
        self.records: RecordLog | None = None  # where params, tags, texts are journaled first (sweeps.tracking.writer.records)
        self.cursor: Cursor | None = None  # the run folder's cursor: how far its journal has reached MLflow
        self._shipping: str | None = None  # the run folder whose ship lock the ingesting process holds (keep_in)
        self._following = self._draining = self._fresh = False
        self._metrics: list[delivery.Value] = []  # step-0 values and series not yet sent (send_pending)
        self._tags: dict[str, str] = {}  # queued tags not yet sent
        self._refused_tags: dict[str, str] = {}  # tags of a send the store refused
        self._summary: dict[str, float] = {}  # a reopened run's values so far: not logged again at step 0
        self.lost = 0

    @classmethod
    def attach(cls, client: MlflowClient, run_id: str, reopen: bool = True,
               read_summary: bool | None = None) -> "RunWriter":
        """Write to an existing run: a killed job resuming (``reopen``: status back to RUNNING), or
        rank 0 of a data-parallel job logging into the run its job process opened and will close
        (``reopen=False``: the status is left alone; `close`, never `end`).
        ``read_summary`` (default: ``reopen``): the run's values so far are read first (one call),
        so that a value an earlier part of the run logged at step 0 is not logged again
        (`log_summary`)."""
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
        params, tags and texts journaled before they are sent (`RECORDS`),
        and the `cursor`, how far the journal has reached MLflow. Whoever ingests the run's
        values holds its ship lock until `end` (`hold`): a
        replay after this process's death waits for it."""
        self.records = RecordLog(folder / RECORDS)
        self.cursor = Cursor(folder)
        self._shipping = str(Path(folder).absolute())
        self.post(f"the ship lock of run {self.run_id}", cursor.hold, self._shipping)

    def follow(self) -> None:
        """Have the follower ship the run's journal (in the `cursor`'s folder) from the
        cursor, on the run's series stride (`every_epochs`, `every_evaluated`), until
        `drain` (`sweeps.tracking.follower.shipping.follow`, not waited for). What is pending
        goes first."""
        self.send_pending()
        self.post(f"the journal of run {self.run_id}", shipping.follow, self.run_id, self._folder(),
                  self.every_epochs, self.every_evaluated, self._fresh)
        self._following, self._fresh = True, False

    def drain(self, through: int, records: list[dict] | None = None) -> None:
        """Have every journaled epoch through ``through`` (the job's last) put in the run — by the
        follower, or, where it stalls, by the store's caller at normal priority
        (`sweeps.tracking.follower.shipping.drain`); ``records``: the job's records, where its journal
        could not hold them all (a full disk), shipped from the cursor. Sends what is pending
        first. Not waited for through a store process (the job builds its tables meanwhile):
        `drained` waits."""
        self.send_pending()
        if self._following or records is not None:
            self._following = False
            self.post(f"the last epochs of run {self.run_id}", shipping.drain, self.run_id, self._folder(),
                      through, self.every_epochs, self.every_evaluated, records)
            self._draining = True

    def drained(self) -> int:
        """Wait for `drain` and every posted call; the values the store refused after every
        retry (`lost`, kept for a later start)."""
        self.flush()
        if self._draining:
            self._draining = False
            self.lost += in_store(self.client, shipping.drained, self.run_id)[1]
        return self.lost

    def _folder(self) -> str | None:
        return str(self.cursor.path.parent) if self.cursor is not None else None

    def log_params(self, params: dict[str, Any]) -> None:
        """Log ``params`` (see `set_tags` for when the store takes them, and what a kill
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
        `records` is set the tags are journaled first: a job killed before the store took
        them has them sent by the next start (`sweeps.tracking.writer.records.replay`)."""
        if self.records:
            self.records.append("tags", tags)
        self._later(f"tag(s) {', '.join(tags)} of run {self.run_id}", "log_batch", self.run_id,
                    tags=[self._RunTag(k, str(v)) for k, v in tags.items()])

    def queue_tags(self, tags: dict[str, Any]) -> None:
        """Set ``tags`` with the next job-level values (`send_pending`) rather than in a store
        call of their own (~10 ms of MLflow's each, about a third of a tiny job's store work).
        Journaled first where `records` is set (see `set_tags`): a job killed before
        they were sent keeps them too."""
        if self.records:
            self.records.append("tags", tags)
        self._tags.update((k, str(v)) for k, v in tags.items())

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        """Log job-level ``metrics`` at ``step`` (0: the run's summary values) with the next
        `send_pending`. In a reopened run (a resumed job) a step-0 value the run already
        holds (batch size, lr, FLOPs logged again at its restart) is not logged twice."""
        ts = now_ms()
        self._metrics += [(k, float(v), ts, step) for k, v in metrics.items()
                          if v is not None and not (step == 0 and self._summary.get(k) == float(v))]

    def log_summary(self, metrics: dict[str, float]) -> None:
        """Log a job's end-of-job ``metrics`` at step 0, each key once in the run: a resumed run
        that holds one already keeps it — its earlier process logged its summary, then was killed
        before it closed the run (the resumed job's ``time/job_s`` would differ, a second point at
        step 0)."""
        self.log_metrics({k: v for k, v in metrics.items() if k not in self._summary})

    def log_series(self, key: str, values: list[float]) -> None:
        """Log ``values`` as the steps 1..N of metric ``key`` (with the next `send_pending`)."""
        ts = now_ms()
        self._metrics += [(key, float(v), ts, i) for i, v in enumerate(values, start=1)]

    def send_pending(self) -> None:
        """Send the logged job-level values and queued tags in one call
        (`send_values`: retried where the store is), not waited for
        through a store process: a refusal is a warning, and adds to `lost` and
        `unsent_tags` (`settle` reads it). Called when the run's journal is followed,
        at the job's first epoch, and by `flush`."""
        values, tags = self._metrics, self._tags
        if not values and not tags:
            return
        self._metrics, self._tags = [], {}

        def refused() -> None:
            self.lost += len(values)
            self._refused_tags.update(tags)

        what = f"{len(values)} value(s) and {len(tags)} tag(s) of run {self.run_id}"
        if getattr(self.client, "remote", False):
            self.client.post(what, delivery.send_values, self.run_id, values, tags, on_error=refused)
            return
        try:
            delivery.send_values(self.client, self.run_id, values, tags)
        except Exception:  # noqa: BLE001 (said by the sender; kept for the job's end)
            refused()

    @property
    def unsent_tags(self) -> dict[str, str]:
        """The tags the store has not taken: those of a send it refused, then those
        `queue_tags` still holds (a tag queued twice: its last value)."""
        return {**self._refused_tags, **self._tags}

    def settle(self) -> None:
        """Wait for the answers of what was posted to a store process (a refusal is then counted)."""
        getattr(self.client, "settle", lambda: None)()

    def flush(self) -> None:
        """Send what is pending and wait for every posted call's answer. Never raises."""
        self.send_pending()
        self.settle()

    def close(self) -> None:
        """`flush`: the run stays open (a data-parallel rank's, a closed run's last values). Idempotent."""
        self.flush()

    def post(self, what: str, fn: Any, *args: Any) -> None:
        """``fn(client, *args)`` where the store is, as `in_store`
        runs it, but not waited for where that is a store process
        (`post`: a refusal is a warning naming
        ``what``); called here with an in-process client."""
        if getattr(self.client, "remote", False):
            self.client.post(what, fn, *args)
        else:
            fn(self.client, *args)

    def _later(self, what: str, method: str, *args: Any, **kwargs: Any) -> None:
        """``client.<method>(*args, **kwargs)``: posted to a store process (`set_tags`), made
        here with an in-process client."""
        if getattr(self.client, "remote", False):
            self.client.post_call(what, method, *args, **kwargs)
        else:
            getattr(self.client, method)(*args, **kwargs)

    def replay(self, records: list[dict] | None = None) -> int:
        """Send the epochs of the run's journal (``records``, per-epoch dicts with ``epoch`` = step;
        None: the journal in the `cursor`'s folder) that never reached the run — a job that
        died, values the store refused after every retry. Only those after the `cursor`
        (all without one), and of them the (metric, epoch) the run lacks
        (`held_steps`), each with its record's timestamp, so every
        epoch is logged once; under ``every_epochs`` > 1 only the series' epochs and the last
        (`sweeps.tracking.follower.shipping.replay`, where the store is). Returns how many values were
        sent; those the store refused again add to `lost`."""
        self.flush()
        if records is not None and not records:
            return 0
        sent, left = in_store(self.client, shipping.replay, self.run_id, self._folder(), self.every_epochs,
                              self.every_evaluated, records)
        self.lost = left
        if sent:
            log.info("MLflow: %d metric value(s) of earlier epochs sent from the journal", sent)
        return sent

    def log_bytes(self, data: bytes, name: str) -> None:
        """Log ``data`` as the run's artifact ``name`` (a file in a temporary folder, read by
        `mlflow.MlflowClient.log_artifact` where the store is: this machine)."""
        with tempfile.TemporaryDirectory(prefix="sweeps-artifact-") as folder:
            path = Path(folder) / name
            path.write_bytes(data)
            self.client.log_artifact(self.run_id, str(path))

    def log_file(self, path: str | Path, folder: str | None = None) -> None:
        """Log the file at ``path`` as an artifact of the run, under ``folder`` (None: at the top),
        now (a file of the job's, read by `mlflow.MlflowClient.log_artifact` where the store is:
        this machine)."""
        self.client.log_artifact(self.run_id, str(path), folder)

    def log_text(self, text: str, name: str) -> None:
        """Log ``text`` as the run's artifact ``name`` (see `set_tags` for when; journaled
        first: `append`)."""
        if self.records:
            self.records.append("texts", {name: text})
        self._later(f"{name} of run {self.run_id}", "log_text", self.run_id, text, name)

    def end(self, status: str) -> None:
        """Send what is pending, then close the run: ``FINISHED``, ``FAILED`` or ``KILLED``. A
        closed run is replayed no more: nothing is journaled after this (`records` off), and
        its ship lock is given back."""
        self.records = None
        self.flush()
        self.client.set_terminated(self.run_id, status)
        if self._shipping:
            self.post(f"the ship lock of run {self.run_id}", cursor.release, self._shipping)
            self._shipping = None
