"""A job's per-epoch records: an append-only journal, the run's metrics, and the console rows.

Each record costs O(1) whatever the job's length: one JSON line appended to the journal (flushed
to the OS, so it survives a killed process), and at most one console row per ``log_every_s``
seconds (the first and last epoch are always shown). The epochs of the run's MLflow series
(:func:`~sweeps.tracking.series.in_series`) are queued on the run's
:class:`~sweeps.tracking.writer.RunWriter`, whose background thread sends them in batches. Nothing
here touches the device or blocks on the store.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from sweeps import names
from sweeps.errors import describe
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

    A journal that cannot be written (immutable, read-only, a full disk) is switched off with
    one warning and the ``sweeps.checkpoints`` tag, as when an append fails mid-job: the job goes
    on, its epochs still reach MLflow and ``epochs.csv``.
    """

    def __init__(self, writer, journal: Path | None, regression: bool, log_every_s: float = 0.0,
                 last_epoch: int | None = None, records: list[dict] | None = None, logged_through: int = 0,
                 rewrite: bool = False):
        self.writer, self.table = writer, EpochTable(regression, verbose=log.isEnabledFor(logging.DEBUG))
        self.log_every_s, self.last_epoch = log_every_s, last_epoch
        self.records: list[dict] = list(records or [])
        self.logged_through = logged_through
        self._queued_through = logged_through  # the last epoch whose metrics append() queued
        self._printed_at: float | None = None
        self._hidden = 0  # rows not printed since the last printed one
        self._file = None
        self.off = ""  # why the journal stopped (a full disk)
        self.journal = journal
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
            except OSError as e:  # a full disk ends the journal, not the measurement
                self._journal_failed(e)  # this epoch's line is torn (no newline): a reader skips it
        if (self.writer is not None and rec["epoch"] > self.logged_through
                and in_series(rec, self.writer.every_epochs, self.writer.every_evaluated)):
            self.writer.log_epoch(_metrics(rec), rec["epoch"], rec[names.TIMESTAMP_MS])
            self._queued_through = rec["epoch"]
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
        """The job's last epoch ends its series: ``mlflow.log_every_epochs`` > 1 may have left it
        out, or a signal interrupted :meth:`append` after the record was kept and before its
        metrics were queued (chaos seed 2915, fault 164: a SIGINT storm; the run was closed as
        killed with its last journaled epoch missing). Queued again where the interruption came
        after the queueing, the values carry the record's timestamp: the same rows."""
        last = self.records[-1] if self.records else None
        if (self.writer is None or last is None or self._appended == 0
                or last["epoch"] <= max(self.logged_through, self._queued_through)):
            return
        try:
            self.writer.log_epoch(_metrics(last), last["epoch"], last.get(names.TIMESTAMP_MS))
        except Exception as e:  # noqa: BLE001 (never raises: epochs.csv holds it)
            log.warning("MLflow: the last epoch's values not queued (%s); epochs.csv holds them", describe(e))

    def csv(self) -> str:
        """Every record as CSV (the ``epochs.csv`` artifact)."""
        return self.table.csv(self.records)

    def close(self) -> None:
        """Close the journal and queue the job's last epoch where the series left it out (the
        run's writer sends the queue at the run's end). Idempotent; never raises."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as e:  # the last buffered line met a full disk
                self._journal_failed(e)
            self._file = None
        self._last_point()


def _metrics(rec: dict) -> dict:
    """A record's metrics: the keys with a ``/`` (``epoch``, ``samples``, ``steps`` are not)."""
    return {k: v for k, v in rec.items() if "/" in k}


# one encoder for every line: json.dumps builds a new one per call where separators are given
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _line(rec: dict) -> str:
    return _encode(rec) + "\n"


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
