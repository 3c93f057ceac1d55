"""How far a run's journal has reached MLflow (the cursor file `CURSOR` in the run's folder),
and which process is moving it there (the run's ship lock, `SHIP_LOCK` beside it).

The follower (`sweeps.tracking.follower.follower`) ships the journal's epochs to MLflow in shipments cut at
epoch ends; once MLflow has taken a shipment (``log_batch`` returned, so the store committed it), it records
the shipment's last epoch: the file then reads ``{"epoch": E}``, every journaled value through E is in
the run (the epochs off the run's series stride are passed over, not sent).

A replay looks only at the journal's epochs after E (`replay`:
a resumed job, or a later start closing a run whose process died), asks the store which of their
values it holds already (the cursor lags a shipment where the follower was killed between the commit
and the write) and sends the rest. It does not
read every metric's whole history: 10,000 epochs of ~20 metrics are ~200,000 rows.

The cursor may lag behind the store by a shipment, never lead it: it is written after the commit. It is
written whole (a temporary file, then a rename), so a kill mid-write leaves the earlier cursor.

The ship lock makes "what the run lacks" a fixed answer while a replay asks it. The process that
ingests a run's values for its job — the job's store process, or the job's own process where it
holds an in-process client — holds an ``flock`` on `SHIP_LOCK` from the run's start to its
end (`hold`, `release`). A job killed with ``kill -9`` leaves its store process behind,
answering what the job had sent it (its posted tags, the follower's shipment under way) before it exits. A
rerun's `mark_stale` waits for that lock (`wait_for_shipper`)
before it replays the journal and closes the run: nothing of the dead job then lands after the
replay, such as its ``sweeps.outcome=running`` over the ``killed`` the rerun wrote. The kernel
releases the lock with the process that held it, however that process ends.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

CURSOR = "shipped.json"  # in a run's folder, beside its journal (epochs.jsonl)
SHIP_LOCK = "ship.lock"  # in a run's folder: flock'ed by the process that ingests the run's values; holds its pid
SHIP_WAIT_S = 60.0  # s a replay waits for a dead job's store process to finish what it was sent
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
        cursor (no shipment of the run was taken yet, or the folder could not be written)."""
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


_held: dict[str, int] = {}  # run folder → the open file holding its ship lock, in this process


def hold(client: Any, folder: str) -> None:
    """Take the ship lock of the run whose folder is ``folder`` (created where missing) and keep it
    until `release` or this process's end; run where the run's values are ingested
    (`post`: the store process, else the job's own). Never
    waits: where another process holds it still (a dead job's store process that
    `wait_for_shipper` gave up on), the run goes on without it. Never raises."""
    if folder in _held:
        return
    path = Path(folder) / SHIP_LOCK
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        log.debug("the run's ship lock is off (%s): %s", path, e)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)  # who ships it: named by a replay that waits
    except OSError:
        os.close(fd)
        return
    _held[folder] = fd


def release(client: Any, folder: str) -> None:
    """Give the ship lock of ``folder`` back (`hold`): the run's values are all in. Idempotent."""
    fd = _held.pop(folder, None)
    if fd is not None:
        os.close(fd)


def wait_for_shipper(folder: str | Path, run_id: str, timeout_s: float | None = None) -> bool:
    """Wait until no process holds the ship lock of the run whose folder is ``folder`` (id
    ``run_id``), up to ``timeout_s`` (s; default `SHIP_WAIT_S`), saying once which process it waits for: True once none
    does (or the run has no lock file), False where one still did after ``timeout_s``; a replay
    then goes on anyway, and a value that process sends later carries its epoch's timestamp, so
    MLflow's SQL store keeps one row of it. A hold of this process's own is given back first: the
    run's job is gone, and an ``flock`` of this process would wait for it. Never raises."""
    release(None, str(Path(folder).absolute()))
    try:
        fd = os.open(Path(folder) / SHIP_LOCK, os.O_RDWR)
    except OSError:  # no lock file: the run's job never took one (or its folder is gone)
        return True
    timeout_s = SHIP_WAIT_S if timeout_s is None else timeout_s
    deadline, said = time.monotonic() + timeout_s, False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except OSError:  # a file system without locks: nothing to wait for
                return True
            if time.monotonic() >= deadline:
                log.warning("run %s: process %s still ships its values after %.0f s; its journal is replayed "
                            "anyway (a value sent twice carries its epoch's timestamp: one row)",
                            run_id, _holder(fd), timeout_s)
                return False
            if not said:
                log.info("run %s: waiting for process %s, which still ships what its dead job sent it "
                         "(up to %.0f s)", run_id, _holder(fd), timeout_s)
                said = True
            time.sleep(0.05)
    finally:
        os.close(fd)  # the lock, where taken, goes with it: the replay's writes need none


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip() or "?"
    except (OSError, UnicodeDecodeError):
        return "?"
