"""How far a run's journal has reached MLflow: the cursor file :data:`CURSOR` in the run's folder.

The run's writer queues each journaled epoch's values followed by the epoch's number
(:meth:`~sweeps.tracking.batches.MetricBatches.log_epoch`). Once MLflow has taken a batch
(``log_batch`` returned, so the store committed it), the writer records the last epoch whose values
were all in that batch or in earlier ones, with nothing before them refused. The file then reads
``{"epoch": E}``.

A replay looks only at the journal's epochs after E (:meth:`~sweeps.tracking.writer.RunWriter.replay`:
a resumed job, or a later start closing a run whose process died), asks the store which of their
values it holds already (the cursor lags a batch where the process was killed between the commit
and the write, or its store process finished a batch after it died) and sends the rest. It does not
read every metric's whole history: 10,000 epochs of ~20 metrics are ~200,000 rows.

The cursor may lag behind the store by a batch, never lead it: it is written after the commit. It is
written whole (a temporary file, then a rename), so a kill mid-write leaves the earlier cursor.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

CURSOR = "shipped.json"  # in a run's folder, beside its journal (epochs.jsonl)
log = logging.getLogger("sweeps")


class Cursor:
    """The cursor of the run whose folder is ``folder`` (see the module docstring). It only moves
    forward: a resumed job runs epochs again that the run holds already (from its last checkpoint
    to its last logged epoch), journals them with new timestamps and does not send them, so a
    replay must never start before them."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / CURSOR
        self._at: int | None = None  # the epoch last read or written here (None: not read yet)
        self.off = False  # the folder could not be written: the cursor stays where it was

    def read(self) -> int | None:
        """The last epoch MLflow holds every journaled value of; None where there is no readable
        cursor (no batch of the run was taken yet, or the folder could not be written)."""
        try:
            self._at = int(json.loads(self.path.read_text(encoding="utf-8"))["epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            self._at = None
        return self._at

    def write(self, epoch: int) -> None:
        """Record that MLflow holds every journaled value through ``epoch`` (nothing where the
        cursor is there or further already). Never raises: a folder that cannot be written
        (read-only, full) switches the cursor off, with a debug line."""
        if self.off:
            return
        if self._at is None:
            self.read()
        if self._at is not None and epoch <= self._at:
            return
        partial = self.path.with_name(CURSOR + ".partial")
        try:
            partial.write_text(json.dumps({"epoch": int(epoch)}), encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as e:
            self.off = True
            log.debug("the run's cursor is off (%s): %s", self.path, e)
            return
        self._at = int(epoch)
