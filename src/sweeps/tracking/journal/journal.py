"""A job's per-epoch records: an append-only journal, and the console rows.

Each record costs O(1) whatever the job's length: one JSON line appended to the journal (flushed
to the OS, so it survives a killed process), and at most one console row per ``log_every_s``
seconds (the first and last epoch are always shown). That append is all a job does for MLflow on
its hot path: the follower ships the journal to the run (`sweeps.tracking.follower.follower`), its
epochs of the run's MLflow series (`in_series`). Nothing here
touches the device or blocks on the store.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from sweeps import names
from sweeps.console import EpochTable

JOURNAL = "epochs.jsonl"  # a run's per-epoch records, in its folder beside its checkpoints
log = logging.getLogger("sweeps")


class EpochLog:
    """Collects the records of one job.

    Args:
        writer: the run's `RunWriter` (its pending job-level values
            are sent at the first epoch), or None (a data-parallel rank other than 0).
        journal: the JSON-lines file to append to (created with its folder), or None.
        regression: console columns for regression (RMSE) instead of accuracy.
        log_every_s: the least time between two console rows (s); 0 prints every epoch.
        last_epoch: the job's final epoch number (its row is always printed).
        records: records already logged (a resumed job), kept but not logged again.
        logged_through: epochs up to this one already have their metrics in the run (a job
            resumed from a checkpoint older than its last logged epoch): their re-run is
            journaled, and the run's cursor (there already) keeps it from being shipped again.
        rewrite: first rewrite the journal to hold ``records`` alone (a job resuming from its
            checkpoint runs the later epochs again).

    A journal that cannot be written (immutable, read-only, a full disk) is switched off with
    one warning and the ``sweeps.checkpoints`` tag, as when an append fails mid-job: the job goes
    on, its epochs still reach MLflow (from `records`, at its end: `unjournaled`) and
    ``epochs.csv``.
    """

    def __init__(self, writer, journal: Path | None, regression: bool, log_every_s: float = 0.0,
                 last_epoch: int | None = None, records: list[dict] | None = None, logged_through: int = 0,
                 rewrite: bool = False):
        self.writer, self.table = writer, EpochTable(regression, verbose=log.isEnabledFor(logging.DEBUG))
        self.log_every_s, self.last_epoch = log_every_s, last_epoch
        self.records: list[dict] = list(records or [])
        self.logged_through = logged_through
        self.journaled = self.records[-1]["epoch"] if self.records else 0  # the last epoch the journal holds
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
        (`TIMESTAMP_MS`) unless it has one: every send of its values carries
        that timestamp, so a value sent twice (a replay beside a dead job's store process) is one
        row, not two."""
        rec.setdefault(names.TIMESTAMP_MS, int(time.time() * 1000))
        self.records.append(rec)
        self._appended += 1
        if self._file is not None:
            try:
                self._file.write(_line(rec))
                self._file.flush()
                self.journaled = rec["epoch"]
            except OSError as e:  # a full disk ends the journal, not the measurement
                self._journal_failed(e)  # this epoch's line is torn (no newline): a reader skips it
        if self._appended == 1 and self.writer is not None:  # the job's start values, ahead of its epochs
            self.writer.send_pending()
        self._console(rec)

    def unjournaled(self) -> bool:
        """Whether `records` holds an epoch the journal does not (it could not be written, or a
        signal came between the two): the job's end then ships from `records`."""
        return bool(self.records) and self.records[-1]["epoch"] != self.journaled

    def _journal_failed(self, e: OSError) -> None:
        name = self.journal or "the journal"
        try:
            if self._file is not None:
                self._file.close()
        except OSError:
            pass
        self._file = None
        self.off = f"cannot append to {name} ({e.strerror or e})"
        log.warning("%s: the epochs reach MLflow at the job's end, from memory (a kill before it loses them)",
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

    def csv(self) -> str:
        """Every record as CSV (the ``epochs.csv`` artifact)."""
        return self.table.csv(self.records)

    def close(self) -> None:
        """Close the journal. Idempotent; never raises."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as e:  # the last buffered line met a full disk
                self._journal_failed(e)
            self._file = None


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
