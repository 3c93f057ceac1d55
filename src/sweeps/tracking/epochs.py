"""A job's per-epoch records: an append-only journal, the run's metrics, and the console rows.

Each record costs O(1) whatever the job's length: one JSON line appended to the journal (flushed
to the OS, so it survives a killed process), and at most one console row per ``log_every_s``
seconds (the first and last epoch are always shown). Its metrics go to MLflow two ways: the
first :data:`~sweeps.tracking.relay.HANDOFF_EPOCHS` epochs are queued on the run's in-process
:class:`~sweeps.tracking.writer.RunWriter` (as are all of a job with fewer than
:data:`~sweeps.tracking.relay.HANDOFF_VALUES` values to send after that); then the
journal is handed to the writer process (:mod:`sweeps.tracking.relay`), which tails it, so a
later epoch costs the training process nothing beyond its line. Without a journal (none asked, or
a full disk stopped it) every epoch is queued in-process. Nothing here touches the device or
blocks on the store.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from sweeps import names
from sweeps.errors import describe
from sweeps.tracking import relay
from sweeps.tracking.console import EpochTable
from sweeps.tracking.series import in_series

JOURNAL = "epochs.jsonl"  # a run's per-epoch records, in its folder beside its checkpoints
log = logging.getLogger("sweeps")


class EpochLog:
    """Collects the records of one job.

    Args:
        writer: the run's :class:`~sweeps.tracking.writer.RunWriter` (metrics with a ``/`` in
            their name are logged at step = ``record["epoch"]``), or None (no MLflow: a
            data-parallel rank other than 0).
        journal: the JSON-lines file to append to (created with its folder), or None.
        regression: console columns for regression (RMSE) instead of accuracy.
        log_every_s: the least time between two console rows (s); 0 prints every epoch.
        last_epoch: the job's final epoch number (its row is always printed).
        records: records already logged (a resumed job), kept but not logged again.
        logged_through: epochs up to this one already have their metrics in the run (a job
            resumed from a checkpoint older than its last logged epoch): their re-run is
            journaled but not sent again, so no step is logged twice.
        rewrite: first rewrite the journal to hold ``records`` alone (a job resuming from its
            checkpoint runs the later epochs again).
        spare_core: the training leaves a CPU core free (fewer torch threads than cores): the
            writer process pays from fewer values (:func:`~sweeps.tracking.relay.worth_handing_over`).

    A journal that cannot be written (immutable, read-only, a full disk) is switched off with
    one warning and the ``sweeps.checkpoints`` tag, as when an append fails mid-job: the job goes
    on, its epochs still reach MLflow and ``epochs.csv``.
    """

    def __init__(self, writer, journal: Path | None, regression: bool, log_every_s: float = 0.0,
                 last_epoch: int | None = None, records: list[dict] | None = None, logged_through: int = 0,
                 rewrite: bool = False, spare_core: bool = False):
        self.spare_core = spare_core
        self.writer, self.table = writer, EpochTable(regression, verbose=log.isEnabledFor(logging.DEBUG))
        self.log_every_s, self.last_epoch = log_every_s, last_epoch
        self.records: list[dict] = list(records or [])
        self.logged_through = logged_through
        self._printed_at: float | None = None
        self._hidden = 0  # rows not printed since the last printed one
        self._file = None
        self.off = ""  # why the journal stopped (a full disk)
        self.journal = journal
        self.relayed = False  # the journal was handed to the writer process
        self._handoff_decided = False  # whether to hand over was weighed (after HANDOFF_EPOCHS epochs)
        self._journaled_through = 0  # the last epoch whose line the journal holds whole
        self._appended = 0  # records appended by this process
        if journal is not None:
            try:
                journal.parent.mkdir(parents=True, exist_ok=True)
                if rewrite:
                    journal.write_text("".join(map(_line, self.records)), encoding="utf-8")
                self._file = open(journal, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
            except OSError as e:  # found by scripts/chaos.py: a resume onto an immutable journal
                self._journal_failed(e)

    def append(self, rec: dict) -> None:
        """Record one epoch (see the module docstring), stamped with its wall clock
        (:data:`~sweeps.names.TIMESTAMP_MS`) unless it has one: every later send of its values
        carries that timestamp, so a value sent twice (a dead job's store process ingesting what the
        job posted after a rerun replayed the journal) is one row, not two."""
        rec.setdefault(names.TIMESTAMP_MS, int(time.time() * 1000))
        self.records.append(rec)
        self._appended += 1
        if self._file is not None:
            try:
                self._file.write(_line(rec))
                self._file.flush()
                self._journaled_through = rec["epoch"]
            except OSError as e:  # a full disk ends the journal, not the measurement
                self._journal_failed(e)  # this epoch's line is torn (no newline): the writer process skips it
        if self.writer is not None and rec["epoch"] > self.logged_through and not (self.relayed and self._file):
            if in_series(rec, self.writer.every_epochs, self.writer.every_evaluated):
                self.writer.log_metrics(_metrics(rec), step=rec["epoch"], timestamp_ms=rec[names.TIMESTAMP_MS])
            if self._file is not None and self._appended >= relay.HANDOFF_EPOCHS and not self._handoff_decided:
                self._handoff_decided = True  # once per job: a process that cannot start is not retried per epoch
                left = None if self.last_epoch is None else self.last_epoch - rec["epoch"]
                if relay.worth_handing_over(left, len(_metrics(rec)), self.writer.every_epochs, self.spare_core):
                    # later epochs: the writer process reads them from the journal, from here on
                    self.relayed = relay.follow(self.writer.run_id, self.writer.client.tracking_uri, self.journal,
                                                self._file.tell(), rec["epoch"], self.writer.every_epochs,
                                                self.writer.every_evaluated)
        self._console(rec)

    def _journal_failed(self, e: OSError) -> None:
        name = self.journal or "the journal"
        try:
            if self._file is not None:
                self._file.close()
        except OSError:
            pass
        self._file = None
        self.off = f"cannot append to {name} ({e.strerror or e})"
        log.warning("%s: the epochs go on to MLflow without a journal (a kill now may lose the queued ones)",
                    self.off)
        if self.writer is not None:
            try:  # the store may sit on the same full disk: the tag is a nicety, the job goes on
                self.writer.set_tags({names.CHECKPOINTS_TAG: f"off: {self.off}"})
            except Exception as e:
                log.warning("could not tag the run with it (%s)", type(e).__name__)

    def _console(self, rec: dict) -> None:
        now = time.monotonic()
        last = rec["epoch"] == self.last_epoch
        if self._printed_at is not None and not last and now - self._printed_at < self.log_every_s:
            self._hidden += 1
            return
        if self._printed_at is None:
            log.info(self.table.header())
        elif self._hidden:
            log.info("  … %d epoch(s) not shown (at most one row per log_every_s=%g s; all in epochs.csv)",
                     self._hidden, self.log_every_s)
        self._printed_at, self._hidden = now, 0
        log.info(self.table.row(rec))

    def _last_point(self) -> None:
        """The job's last epoch ends its series (``mlflow.log_every_epochs`` > 1 may have left it out)."""
        last = self.records[-1] if self.records else None
        if (self.writer is None or last is None or last["epoch"] <= self.logged_through or self._appended == 0
                or in_series(last, self.writer.every_epochs, self.writer.every_evaluated)):
            return
        try:
            self.writer.log_metrics(_metrics(last), step=last["epoch"], timestamp_ms=last.get(names.TIMESTAMP_MS))
        except Exception as e:  # noqa: BLE001 (never raises: epochs.csv holds it)
            log.warning("MLflow: the last epoch's values not queued (%s); epochs.csv holds them", describe(e))

    def csv(self) -> str:
        """Every record as CSV (the ``epochs.csv`` artifact)."""
        return self.table.csv(self.records)

    def close(self) -> None:
        """Close the journal, then (once handed over) wait for the writer process to send the rest
        of it; where that fails (the process died, the store stayed down) the run's missing values
        are replayed in-process from the records, each once (:meth:`RunWriter.replay`). Idempotent;
        never raises."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as e:  # the last buffered line met a full disk
                self._journal_failed(e)
            self._file = None
        if not self.relayed:
            self._last_point()
            return
        self.relayed = False
        done = relay.drain(self.writer.run_id, self._journaled_through)
        if done.ok and not done.lost:
            log.debug("MLflow: the writer process sent %d metric value(s) of run %s", done.sent, self.writer.run_id)
            self._last_point()
            return
        log.warning("MLflow: the writer process %s; sending the missing epochs from the journal in-process",
                    f"could not send {done.lost} value(s)" if done.ok else "ended before it was done")
        try:
            self.writer.replay(self.records)
        except Exception as e:  # noqa: BLE001 (the journal and epochs.csv still hold every epoch)
            log.warning("MLflow: replay failed (%s: %s); epochs.csv and %s hold every epoch", type(e).__name__, e,
                        self.journal)


def _metrics(rec: dict) -> dict:
    """A record's metrics: the keys with a ``/`` (``epoch``, ``samples``, ``steps`` are not)."""
    return {k: v for k, v in rec.items() if "/" in k}


def _line(rec: dict) -> str:
    return json.dumps(rec, separators=(",", ":")) + "\n"


def read_journal(path: Path, up_to_epoch: int | None = None) -> list[dict]:
    """The records of a journal, oldest first, at most through epoch ``up_to_epoch``; a torn last
    line (the process died while writing it) is ignored. A missing file gives ``[]``."""
    out: list[dict] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if up_to_epoch is None or rec.get("epoch", 0) <= up_to_epoch:
            out.append(rec)
    return out
