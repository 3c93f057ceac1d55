"""The MLflow writer process (``python -m sweeps.tracking.relay_process``): tails the journals of
the runs it is handed and sends their per-epoch metrics, at the lowest CPU priority.

Started by :mod:`sweeps.tracking.relay` (see there for the protocol's why). Per followed run it
keeps a byte offset into the run's ``epochs.jsonl`` and reads what was appended since, every
:data:`POLL_S` seconds: complete lines only (a line being written is read next time), each
metric with a ``/`` in its name queued at step = ``epoch`` on the run's
:class:`~sweeps.tracking.writer.RunWriter`, whose thread sends batches of ≤ 1000 values with
retries. Messages on stdin (JSON lines):

- ``{"op": "follow", "run", "uri", "journal", "offset", "after", "every", "evaluated"}``: send the
  records of epochs > ``after`` from byte ``offset`` of ``journal`` to run ``run`` of store ``uri``
  (those in the series of stride ``every``: :func:`~sweeps.tracking.series.in_series`);
- ``{"op": "drain", "run", "until"}``: read the journal to its end (epochs ≤ ``until``), send
  everything, forget the run, answer ``{"run", "sent", "lost"}`` on stdout.

When stdin closes (the training process ended, or was killed), it exits at once without sending
more: a job that ended drained its run first, and a killed job's journal is replayed exactly once
by whoever resumes or closes its run (:func:`sweeps.tracking.resume.mark_stale`) — a writer still
sending meanwhile could log an epoch twice.
"""
from __future__ import annotations

import faulthandler
import json
import logging
import os
import queue
import signal
import sys
import threading

from sweeps import names
from sweeps.tracking import http_policy, priority
from sweeps.tracking.series import in_series
from sweeps.tracking.writer import RunWriter

log = logging.getLogger("sweeps")
POLL_S = 0.5  # s between reads of the followed journals (their metrics go out every writer.FLUSH_S)
BEAT_S = 1.0  # s between progress lines while draining


class Follower:
    """One run's journal, read from ``offset`` (bytes) on; records of epochs ≤ ``after`` skipped."""

    def __init__(self, writer: RunWriter, journal: str, offset: int, after: int, every: int = 1,
                 evaluated: bool = True):
        self.writer, self.journal, self.offset, self.after = writer, journal, offset, after
        writer.every_epochs, writer.every_evaluated = every, evaluated
        self.queued = 0  # metric values handed to the writer

    def read(self, until: int | None = None) -> None:
        """Queue the complete lines appended since the last read (O(new bytes))."""
        try:
            with open(self.journal, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:  # not there (yet) or unreadable: the drain's replay covers it
            return
        end = data.rfind(b"\n") + 1  # a torn or half-written last line waits for its newline
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a line torn by a full disk, completed by a later one: skipped
                continue
            epoch = rec.get("epoch", 0)
            if epoch <= self.after or (until is not None and epoch > until) or not in_series(rec, self.writer.every_epochs, self.writer.every_evaluated):
                continue
            metrics = {k: v for k, v in rec.items() if "/" in k}
            self.writer.log_metrics(metrics, step=epoch, timestamp_ms=rec.get(names.TIMESTAMP_MS))
            self.queued += sum(v is not None for v in metrics.values())
        self.offset += end

    def drain(self, until: int) -> dict:
        """Read to the end, send everything (with retries), stop the run's sender. Meanwhile a
        ``{"progress": values left}`` line goes out each second the queue shrank: the training
        process waits while this process gets on, and takes over when it does not (starved of
        CPU at nice 19 on a loaded machine, or stuck)."""
        self.read(until)
        done = threading.Event()

        def beat() -> None:
            left = len(self.writer._queue)
            while not done.wait(BEAT_S):
                now = len(self.writer._queue)
                if now < left:
                    _answer({"progress": now})
                left = now
        beater = threading.Thread(target=beat, name="sweeps-relay-progress", daemon=True)
        beater.start()
        self.writer.close()
        done.set()
        beater.join()
        return {"run": self.writer.run_id, "sent": self.queued - self.writer.lost, "lost": self.writer.lost}


def main() -> None:
    faulthandler.enable()  # a native crash (sqlite, a driver) prints the stacks on the job's stderr
    if hasattr(signal, "SIGTTOU"):  # a background process group of the terminal's session: a warning
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # it writes there must not stop it (stty tostop)
    priority.lowest()  # the whole process (its sender threads too): the training comes first
    logging.basicConfig(level=logging.WARNING, format="[sweeps writer process] %(levelname)s %(message)s")
    http_policy.quiet_retries()
    from mlflow import MlflowClient  # after the priority: its ~1 s of imports runs at nice 19 too

    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_read_stdin, args=(inbox,), name="sweeps-relay-stdin", daemon=True).start()
    clients: dict[str, MlflowClient] = {}
    runs: dict[str, Follower] = {}
    while True:
        try:
            msg = inbox.get(timeout=POLL_S)
        except queue.Empty:
            msg = None
        if msg is not None and msg.get("op") == "follow":
            try:
                client = clients.get(msg["uri"]) or clients.setdefault(msg["uri"], MlflowClient(msg["uri"]))
                writer = RunWriter.attach(client, msg["run"], reopen=False)
            except Exception as e:  # noqa: BLE001 (the run stays unknown here: its drain replays in-process)
                log.warning("cannot write to run %s (%s: %s)", msg["run"], type(e).__name__, e)
                continue
            runs[msg["run"]] = Follower(writer, msg["journal"], int(msg["offset"]), int(msg["after"]),
                                        int(msg.get("every", 1)), bool(msg.get("evaluated", True)))
        elif msg is not None and msg.get("op") == "drain":
            follower = runs.pop(msg["run"], None)  # unknown: never followed here (a restarted process)
            answer = follower.drain(int(msg["until"])) if follower else {"run": msg["run"], "unknown": True}
            _answer(answer)
        for follower in runs.values():
            follower.read()


def _answer(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _read_stdin(inbox: queue.Queue) -> None:
    for line in sys.stdin.buffer:
        try:
            inbox.put(json.loads(line))
        except ValueError:
            continue
    os._exit(0)  # stdin closed: the training process is gone (see the module docstring)


if __name__ == "__main__":
    main()
