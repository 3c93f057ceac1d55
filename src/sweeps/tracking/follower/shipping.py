"""Where a store's runs are shipped from, in the process that holds the store's client: the
follower process it starts (the store process: `start`) or a follower thread (a job holding
an `mlflow.MlflowClient` of its own), the runs it follows (`follow`), their drains at
the jobs' ends (`drain`, `drained`) and the replays of dead jobs' journals
(`replay`). Each is run where the store is (`in_store`,
`post`).

A drain waits for the follower's cursor to reach the job's last epoch. Where it does not move for
`STALL_S` (a machine whose cores other programs keep busy starves the lowest priority; a
store that refuses) the caller, at normal priority, takes over: the follower process is killed
(the store rolls its transaction back, releasing sqlite's write lock; the next run's follow
starts another) and the rest is shipped here, from the cursor, asking the store first which
values it holds (`Followed`). A follower still opening its store
(a short job) is not waited for: the job's end ships its few values itself. A run deleted while
its job ran (an sqlite store) is waited for a second (its follower dropped it), then its drain is
refused at once.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import weakref
from multiprocessing.connection import Connection
from typing import Any

from sweeps.tracking.follower import delivery
from sweeps.tracking.journal.cursor import Cursor
from sweeps.tracking.follower.follower import Followed, Follower
from sweeps.tracking.store.store import deleted

log = logging.getLogger("sweeps")
STALL_S = 5.0  # s a drain waits for the follower's cursor to move before it ships the rest itself


class Shipping:
    """Where a store's runs are shipped from, in the process holding the store's client: the
    follower process (``process``: `start`, the store process) or a `Follower`
    thread; the runs it follows (`follow`) and their drains (`drain`)."""

    def __init__(self, client: Any, process: tuple[str, str] | None = None):
        self.client, self._open = client, process
        self.followed: dict[str, tuple] = {}  # run id → (folder, every, evaluated)
        self.results: dict[str, tuple[int, int]] = {}  # run id → its last drain's (sent, left), for drained()
        self._proc: subprocess.Popen | None = None
        self._out: Connection | None = None
        self._ready: Connection | None = None  # the follower process's one byte once its store is open
        self._thread = None if process else Follower(client)

    def tell(self, cmd: tuple) -> None:
        if self._thread is not None:
            self._thread.tell(cmd)
            return
        if self._proc is None or self._proc.poll() is not None:
            self._start(but=cmd[1] if cmd[0] == "follow" else None)
        if self._out is None:  # none could start: the drain ships the run
            return
        try:
            self._out.send(cmd)
        except OSError:  # it died: the drain takes over
            pass

    def _start(self, but: str | None = None) -> None:
        """Start the follower process, following every run this process follows (``but`` that
        run: its command follows), from their cursors, asking the store first (a follower that
        died may have left a committed shipment its cursor does not name)."""
        self.stop()
        requests_r, requests_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "sweeps.tracking.follower.follower", str(requests_r),
                                           str(ready_w), str(os.getpid())], pass_fds=(requests_r, ready_w))
        except OSError as e:  # no fork (memory): drains ship at the job's end
            log.warning("MLflow: no follower process (%s); a job's values are shipped at its end", e)
            os.close(requests_w)
            os.close(ready_r)
            return
        finally:
            os.close(requests_r)
            os.close(ready_w)
        self._out, self._ready = Connection(requests_w, readable=False), Connection(ready_r, writable=False)
        try:
            self._out.send(("open", *self._open))
            for run_id, args in self.followed.items():
                if run_id != but:
                    self._out.send(("follow", run_id, *args, False))
        except OSError:
            pass

    def stop(self) -> None:
        """Kill the follower process, if any, and wait for it (its transaction rolled back)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        for conn in (self._out, self._ready):
            if conn is not None:
                conn.close()
        self._proc = self._out = self._ready = None

    def _started(self) -> bool:
        """Whether the follower process runs and has its store open (it shipped, or ships at once)."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        if self._ready is not None and self._ready.poll(0):  # its byte, or an end of file: it is gone
            try:
                self._ready.recv_bytes()
            except (EOFError, OSError):
                return False
            self._ready.close()
            self._ready = None
        return self._ready is None

    def drain(self, run_id: str, folder: str | None, through: int, every: int, evaluated: bool,
              records: list[dict] | None) -> tuple[int, int]:
        """Ship run ``run_id`` through epoch ``through`` (see the module docstring); (values sent
        here, values left unsent)."""
        followed = self.followed.pop(run_id, None)
        run = None
        if self._thread is not None:
            run = self._thread.take(run_id)
        elif followed and records is None and self._started():
            try:
                self._out.send(("drain", run_id, through))
                waited = self._wait(Cursor(folder), through, run_id)
                if waited == "done":
                    return 0, 0
            except OSError:  # it died: shipped here
                waited = "died"
            if waited != "deleted":  # a deleted run's follower is well: it ships that run no more
                self.stop()  # the next run's follow starts another
        elif followed and self._proc is not None:  # still opening its store (a short job): it reads this first
            try:
                self._out.send(("forget", run_id))
            except OSError:
                pass
        if run is None or records is not None:
            run = Followed(run_id, folder, every, evaluated, records)
        run.through = through
        left = run.ship(self.client, delivery.sender(self.client), final=True)
        return run.sent, left

    def _wait(self, cursor: Cursor, through: int, run_id: str) -> str:
        """Wait until ``cursor`` reaches ``through``: ``"done"``; ``"stalled"`` once it has not
        moved for `STALL_S` or the follower process is gone; ``"deleted"`` where, the cursor
        still for a second, an sqlite store says run ``run_id`` is deleted (its follower dropped
        it; a tracking server is not asked: one gone away would hold the drain for its retries)."""
        last, since, asked = None, time.monotonic(), False
        while True:
            at = cursor.read() or 0
            if at >= through:
                return "done"
            if at != last:
                last, since = at, time.monotonic()
            elif time.monotonic() - since > STALL_S or self._proc is None or self._proc.poll() is not None:
                return "stalled"
            elif not asked and time.monotonic() - since > 1.0 and self._open[0].startswith("sqlite:"):
                asked = True  # a local file answers at once; a server that went away would take its retries
                if deleted(self.client, run_id):
                    return "deleted"
            time.sleep(0.02)


_shippings: weakref.WeakKeyDictionary[Any, Shipping] = weakref.WeakKeyDictionary()


def shipping(client: Any) -> Shipping:
    """The `Shipping` of ``client`` in this process: a follower thread unless `start`
    gave it a process."""
    held = _shippings.get(client)
    if held is None:
        held = _shippings[client] = Shipping(client)
    return held


def start(client: Any, uri: str, experiment: str) -> Shipping:
    """Give ``client`` (the store process's) a follower process, started now: its imports
    overlap the job's."""
    held = _shippings[client] = Shipping(client, (uri, experiment))
    held._start()
    return held


def stop_all() -> None:
    """Kill every follower process of this process (it exits)."""
    for held in list(_shippings.values()):
        if held._proc is not None:
            held._proc.kill()


def follow(client: Any, run_id: str, folder: str, every: int, evaluated: bool, fresh: bool = False) -> None:
    """Ship run ``run_id``'s journal in ``folder`` from its cursor, beat after beat, where the
    store is (`follow`); ``fresh``: a run just created
    (`Followed`)."""
    held = shipping(client)
    held.followed[run_id] = (folder, every, evaluated)
    held.tell(("follow", run_id, folder, every, evaluated, fresh))


def drain(client: Any, run_id: str, folder: str | None, through: int, every: int, evaluated: bool,
          records: list[dict] | None = None) -> tuple[int, int]:
    """Ship run ``run_id`` through epoch ``through`` now and stop following it: the follower at
    once, or this caller where its cursor stalls; ``records`` (a journal that could not be
    written): those, from the cursor, shipped here. (Values sent here, values left unsent)."""
    held = shipping(client)
    held.results[run_id] = held.drain(run_id, folder, through, every, evaluated, records)
    return held.results[run_id]


def drained(client: Any, run_id: str) -> tuple[int, int]:
    """What the last `drain` of run ``run_id`` here returned (it is answered first)."""
    return shipping(client).results.pop(run_id, (0, 0))


def replay(client: Any, run_id: str, folder: str | None, every: int, evaluated: bool,
           records: list[dict] | None = None) -> tuple[int, int]:
    """Ship what run ``run_id``'s journal in ``folder`` (or ``records``) holds after its cursor
    and the run lacks, its last record included: a dead job's, a job resumed. (Sent, left)."""
    run = Followed(run_id, folder, every, evaluated, records)
    left = run.ship(client, delivery.sender(client), final=True)
    return run.sent, left
