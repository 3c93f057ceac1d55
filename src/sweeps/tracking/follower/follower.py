"""The follower: ships each followed run's journal to MLflow, from the run's cursor.

Job → journal → follower → MLflow. A job appends each epoch's record to its run's journal
(``epochs.jsonl``, `sweeps.tracking.journal.journal`) and does nothing else for MLflow on its hot
path. The follower reads the lines the journal gained, takes the epochs after the run's cursor
(`sweeps.tracking.journal.cursor`) that belong to the run's MLflow series
(`in_series`), sends their values with each record's own timestamp
(`Sender`: at most `PER_CALL` values a
call, cut at epoch ends, retried) and moves the cursor after each shipment the store committed.

Where it runs: at the lowest priority (`lowest`), so MLflow's
ingestion (~85 µs a value on 2 cores) takes only the cores the training leaves idle — the
store process's child process (`serve`, started by `sweeps.tracking.follower.shipping`), or a
thread of the job's process where the job holds an `mlflow.MlflowClient` (a data-parallel
rank, tests). Not a thread of the store process: a thread cannot leave ``SCHED_IDLE`` again, and
one starved holding the GIL or sqlite's write lock would hold up the calls the job waits for
(docs/benchmarks.md, "A job beside busy programs"). Each beat (2 s, longer while the store is
slow: `sweeps.tracking.follower.cadence`) it ships what each run's journal gained.

A job's end drains its run: the follower ships through its last epoch at once, or, where it
stalls, the store's caller takes over (`sweeps.tracking.follower.shipping`). A shipper that may be
behind the store (a replay, a restarted follower, after a failed send) first asks which of its
values the store holds (`held_steps`): a value sent twice costs MLflow's SQL store a lookup
per value (~20 s for 1,000 in a run of 200,000).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sweeps import names
from sweeps.errors import brief
from sweeps.tracking.follower import delivery, priority
from sweeps.tracking.store import http_policy
from sweeps.tracking.journal.cursor import Cursor
from sweeps.tracking.follower.held import held_steps
from sweeps.tracking.journal.journal import JOURNAL
from sweeps.tracking.follower.series import in_series

log = logging.getLogger("sweeps")


class Followed:
    """One run being shipped: its journal in ``folder`` (None: ``records`` only, no cursor), read
    from where the last read ended, and the series stride (``every``, ``evaluated``) of
    `in_series`. ``records``: the records to ship instead of the
    journal's (a journal that could not be written). ``fresh``: a run just created, of which the
    store holds no epoch yet, so its first shipment is sent without asking (`held_steps`: on a
    tracking server, each metric's whole history; 15 calls a run, 7,500 when 500 jobs start).
    `through`: the job's last epoch, shipped whether on the stride or not; `at`: the
    last epoch shipped (or passed over)."""

    def __init__(self, run_id: str, folder: str | None, every: int = 1, evaluated: bool = True,
                 records: list[dict] | None = None, fresh: bool = False):
        self.run_id, self.every, self.evaluated = run_id, every, evaluated
        self.cursor = Cursor(folder) if folder else None
        self.journal = Path(folder) / JOURNAL if folder else None
        self.at = (self.cursor.read() if self.cursor else None) or 0
        self.through: int | None = None
        self.checked = fresh  # the store was asked which of the values it holds (the cursor may lag a shipment)
        self.sent = 0  # values sent
        self.gone = False  # the store refused the run as deleted (http_policy.gone): not shipped again
        self._failing = False  # the last send failed (said once, until one succeeds)
        self._records = records
        self._offset, self._tail = 0, b""
        self._pending: list[dict] = []

    def _read(self) -> None:
        """Add the records the journal gained since the last read (a torn last line waits for its end)."""
        if self._records is not None:
            new, self._records = self._records, []
        else:
            try:
                with open(self.journal, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except OSError:  # not written yet, or removed (the run ended)
                return
            self._offset += len(data)
            *lines, self._tail = (self._tail + data).split(b"\n")
            new = []
            for line in lines:
                try:
                    new.append(json.loads(line))
                except ValueError:  # a line torn by a full disk: the journal ended there
                    continue
        self._pending += [r for r in new if r.get("epoch", 0) > self.at]

    def _values(self, rec: dict) -> list[delivery.Value]:
        if not (in_series(rec, self.every, self.evaluated) or rec["epoch"] == self.through):
            return []
        ts = int(rec.get(names.TIMESTAMP_MS) or delivery.now_ms())  # records journaled before they carried one
        return [(k, float(v), ts, rec["epoch"]) for k, v in rec.items() if "/" in k]

    def ship(self, client: Any, sender: delivery.Sender, final: bool = False) -> int:
        """Send what the journal gained, in shipments cut at epoch ends, moving the cursor after
        each; the newest record waits, unless ``final``, for a later one or `through` (it
        may be the job's last, which ends the series wherever the stride is). ``final``: the last
        record is the job's last (`through` where unset). Returns how many values are left
        unsent (the store refused them after every retry): 0 once caught up."""
        self._read()
        pending = self._pending
        if final and pending and self.through is None:
            self.through = pending[-1]["epoch"]
        n = len(pending)
        if n and not final and self.through is None and not in_series(pending[-1], self.every, self.evaluated):
            n -= 1
        items = [(rec["epoch"], self._values(rec)) for rec in pending[:n]]
        i = 0
        while i < n:
            chunk, j = [], i
            while j < n and (not chunk or len(chunk) + len(items[j][1]) <= delivery.PER_CALL):
                chunk += items[j][1]
                j += 1
            error = None
            if chunk and not self.checked:  # until a shipment of which the store holds nothing
                try:
                    unheld = self._unheld(client, chunk)
                    self.checked, chunk = len(unheld) == len(chunk), unheld
                except Exception as e:  # noqa: BLE001 (a store down or busy: as a failed send, asked again)
                    error = e
                    if not self._failing:
                        log.warning("MLflow: cannot ask which epochs run %s holds (%s: %s); asked again",
                                    self.run_id, type(e).__name__, brief(e))
            if chunk and error is None:
                error = sender.send(client, self.run_id, chunk, say=not self._failing)
            if error is not None:
                self.gone = http_policy.gone(error)
                self.checked, self._failing = False, True  # a failed call may have committed: ask again
                self._pending = pending[i:]  # the next beat (or the drain) sends them again: said once
                return sum(len(values) for _, values in items[i:])
            self.sent, self.at, self._failing = self.sent + len(chunk), items[j - 1][0], False
            if self.cursor is not None:
                self.cursor.write(self.at)
            i = j
        self._pending = pending[n:]
        return 0

    def _unheld(self, client: Any, chunk: list[delivery.Value]) -> list[delivery.Value]:
        wanted: dict[str, list[int]] = {}
        for key, _, _, step in chunk:
            wanted.setdefault(key, []).append(step)
        held = {k: set(v) for k, v in held_steps(client, self.run_id, wanted).items()}
        return [v for v in chunk if v[3] not in held[v[0]]]


class Follower:
    """Ships the runs it follows, one beat at a time (`beat`), as the main loop of the
    follower process (`serve`) or a thread of this process (`tell`, which starts the
    thread; it ends when no run is left). Commands: ``("follow", run id, folder, every,
    evaluated, fresh)`` (`Followed`), ``("drain", run id, last epoch)`` (the follower process ships it at once; a
    thread's run is taken over by `take`), ``("forget", run id)``. A run the store refuses
    as deleted (`gone`) is followed no more: its epochs stay
    in its journal."""

    def __init__(self, client: Any):
        self.client, self.sender = client, delivery.sender(client)
        self.runs: dict[str, Followed] = {}
        self.lock = threading.Lock()  # held while a run is shipped: a drain takes a run over between shipments
        self._commands: list[tuple] = []
        self._guard = threading.Lock()  # the commands and the thread's start and end
        self._thread: threading.Thread | None = None

    def command(self, cmd: tuple) -> None:
        kind, run_id, *args = cmd
        if kind == "follow":
            folder, every, evaluated, fresh = args
            self.runs[run_id] = Followed(run_id, folder, every, evaluated, fresh=fresh)
        elif kind == "drain" and run_id in self.runs:
            self.runs[run_id].through = args[0]
        elif kind == "forget":
            self.runs.pop(run_id, None)

    def beat(self) -> None:
        for run in list(self.runs.values()):
            with self.lock:
                if self.runs.get(run.run_id) is not run:  # taken over meanwhile
                    continue
                run.ship(self.client, self.sender)
                if run.gone or (run.through is not None and run.at >= run.through):
                    self.runs.pop(run.run_id, None)

    def tell(self, cmd: tuple) -> None:
        """Hand ``cmd`` to this process's follower thread, started where none runs."""
        with self._guard:
            self._commands.append(cmd)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="sweeps-follower", daemon=True)
                self._thread.start()

    def take(self, run_id: str) -> Followed | None:
        """Stop shipping ``run_id`` here (after the shipment under way) and return it (None: not followed)."""
        with self._guard:
            for cmd in self._commands:
                self.command(cmd)
            self._commands.clear()
        with self.lock:
            return self.runs.pop(run_id, None)

    def _loop(self) -> None:
        priority.lowest(threading.get_native_id())  # this thread only: the job's own threads stay as they are
        while True:
            time.sleep(self.sender.cadence.wait_s())  # a drain takes its run over here (take), not by a command
            with self._guard:
                for cmd in self._commands:
                    self.command(cmd)
                self._commands.clear()
                if not self.runs:
                    self._thread = None
                    return
            self.beat()


def serve() -> None:
    """``python -m sweeps.tracking.follower.follower REQUESTS READY PARENT``: the follower process. REQUESTS
    is a pipe carrying pickles (`Connection`): ``("open",
    tracking URI, experiment)``, then `Follower` commands, read only once the store is
    open; READY a pipe it writes one message to then (until then a drain does not wait for it: a
    short job's end ships its few values itself). It ships at the lowest priority, and exits when
    the pipe closes or its parent (the store process) is gone."""
    priority.lowest()  # before the imports: they too take only cores nothing else wants
    for sig in (signal.SIGINT, signal.SIGTERM, *(getattr(signal, n, None) for n in ("SIGUSR1", "SIGUSR2", "SIGTTOU"))):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    requests_fd, ready_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    logging.basicConfig(level=logging.WARNING, format="[sweeps follower] %(levelname)s %(message)s")
    inbox = Connection(requests_fd, writable=False)
    from sweeps.tracking.store import http_policy, store

    http_policy.quiet_retries()
    try:
        _, uri, experiment = inbox.recv()
        follower = Follower(store.open_store(uri, experiment)[0])
        Connection(ready_fd, readable=False).send_bytes(b"!")  # from now on a drain waits for it
        while True:
            if inbox.poll(follower.sender.cadence.wait_s()):
                while inbox.poll(0):
                    follower.command(inbox.recv())
            if os.getppid() != parent:
                break
            follower.beat()
    except (EOFError, OSError):  # the store process is done with it
        pass
    except Exception as e:  # noqa: BLE001 (a store it cannot open: the drains ship at normal priority)
        log.warning("MLflow: the follower stopped (%s: %s); a job's end ships its values", type(e).__name__, e)
    os._exit(0)


if __name__ == "__main__":
    serve()
