"""The store's process (``python -m sweeps.tracking.store_process REQUESTS ANSWERS PARENT HURRY``):
imports MLflow, opens the store the job names and answers the job's store calls.

Started by :mod:`sweeps.tracking.store_service` (see there for the why). REQUESTS and ANSWERS are
pipe file descriptors carrying pickles (:class:`multiprocessing.connection.Connection` framing),
PARENT the job's process id, HURRY a pipe the job writes a byte to when a call it waits for is
held up behind a background one.
Its first request is ``("open", tracking URI, experiment)``, its first answer ``("ready",
experiment id)`` once the store is open, or ``("usage", one line)`` where it cannot be (then it
exits); then, for each request — a priority byte (:data:`~sweeps.tracking.store_service.LOW` or
``NORMAL``), then the pickle of ``(kind, name, args, kwargs)``
(:func:`~sweeps.tracking.store_client.execute`) — ``("ok", result)`` with MLflow entities
mirrored (:func:`~sweeps.tracking.entities.mirror`) or ``("error", type name, text)``. The main
thread, at normal priority, reads each request and answers the ``NORMAL`` ones (calls the job
waits for); it hands the ``LOW`` ones (the run writer's background batches) to a background
process (:class:`Background`: this module with ``--background`` in place of HURRY, wholly at the
lowest priority, :func:`~sweeps.tracking.priority.lowest`, with a client of its own; started as
soon as the store is open, and a ``LOW`` call waits for its store to open). A process,
not a thread, because a background call can then be ended at any point: on a machine whose cores
other programs keep busy the lowest priority gets next to no CPU, and a batch it has begun holds
sqlite's write lock (or the pipe the job shares) until it ends, so the job's next call would wait
for it — 55 s at a 10,000-epoch job's end beside two busy loops (measured on a
2-core VM). When the job says HURRY, the background process is killed (the store rolls its
transaction back) and the main thread answers the call itself at normal priority, as it does
every background call for :data:`HURRIED_S` after. It ignores SIGINT and
SIGTERM (the job closes its run through it after a signal), SIGUSR1 and SIGUSR2 (Slurm's
``--signal`` warning reaches every process of the job step; the job's own process acts on it and
still needs its store: :mod:`sweeps.launch.slurm.requeue`) and SIGTTOU (in a background process
group of the terminal's session, a warning it writes must not stop it), and exits when the
requests pipe closes or its parent process is gone (forked data loader workers may hold the pipe
open) — then only once it has done every request the job sent before it died or gave the pipe up:
a job SIGKILLed right after posting its params loses none of them. (A job that gave the pipe up
runs its unanswered posts itself too: they are idempotent — params and tags set to the same
value, metric values MLflow's SQL store drops when it holds them already, texts rewritten.)
"""
from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

PARENT_POLL_S = 1.0  # s between checks that the job's process is still there
HURRIED_S = 5.0  # s after the job's HURRY during which background calls are answered at normal priority
_serving = threading.Event()  # the main loop runs: it, not the watcher thread, exits once the parent is gone
_helpers: list["Background"] = []  # this process's background process (none in a background process), ended with it


def main() -> None:
    faulthandler.enable()  # a native crash (sqlite, a driver) prints the stacks on the job's stderr
    for sig in (signal.SIGINT, signal.SIGTERM, *(getattr(signal, n, None) for n in ("SIGUSR1", "SIGUSR2", "SIGTTOU"))):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    requests_fd, answers_fd, parent_arg, hurry = sys.argv[1:5]
    parent = int(parent_arg)
    background = hurry == "--background"
    if background:  # before the imports: they too take only cores nothing else wants
        from sweeps.tracking import priority

        priority.lowest()
    inbox, outbox = Connection(int(requests_fd), writable=False), Connection(int(answers_fd), readable=False)
    threading.Thread(target=_watch_parent, args=(parent,), name="sweeps-store-parent", daemon=True).start()
    logging.basicConfig(level=logging.WARNING, format="[sweeps store process] %(levelname)s %(message)s")

    from sweeps.errors import UsageError, describe
    from sweeps.tracking import http_policy, store
    from sweeps.tracking.store_service import LOW

    http_policy.quiet_retries()

    # the imports an sqlite or PostgreSQL store's opening needs (~0.9 s), before the job names it
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    try:
        _, uri, experiment = inbox.recv()
    except (EOFError, OSError):  # the command ended before naming a store (bad input, an interrupt)
        _exit()
    try:
        client, experiment_id = store.open_store(uri, experiment)
    except UsageError as e:
        _send(outbox, ("usage", str(e)))
        _exit()
    except Exception as e:  # noqa: BLE001 (one line for the job, whatever the store raised)
        _send(outbox, ("usage", f"cannot open the MLflow store {uri} ({describe(e)})"))
        _exit()
    _send(outbox, ("ready", experiment_id))
    if not background:  # started now, while the job still imports torch and builds its data (cores to spare)
        _helpers.append(Background(client, uri, experiment, int(hurry)))
        _helpers[0].start()
    helper = _helpers[0] if _helpers else None
    _serving.set()  # from here this loop watches the parent: what it sent before it died is answered first
    heard = True  # False once the job's end of the answers pipe is closed: it died, or gave the pipe up
    while True:
        try:
            while not inbox.poll(PARENT_POLL_S):
                if os.getppid() != parent:  # gone, and nothing it sent is left unread
                    _exit()
            request = inbox.recv_bytes()
        except (EOFError, OSError):  # the job's process is done with the store, and every request it sent
            _exit()                  # was read: so nothing is pending
        answer = helper.answer(request) if helper and request[:1] == LOW else answer_to(client, request)
        if not heard:  # the requests it posted before that are still done (at worst twice: module docstring)
            continue
        try:
            if isinstance(answer, bytes):  # the background process's answer, pickled already
                outbox.send_bytes(answer)
            else:
                outbox.send(answer)
        except OSError:  # the job gave the pipe up (interrupted while waiting) or is gone
            heard = False
        except Exception as e:  # noqa: BLE001 (a result that does not pickle still gets an answer)
            _send(outbox, ("error", type(e).__name__, str(e)))


def answer_to(client: Any, request: bytes) -> tuple:
    """The answer to one ``request`` (its priority byte, then its pickle) run on ``client``:
    ``("ok", result)`` or ``("error", type name, text)``, never raised — a request that does not
    unpickle and an exception of the call alike reach the caller as a
    the job as a :class:`~sweeps.tracking.store_client.StoreError` named like it."""
    from sweeps.tracking.entities import mirror
    from sweeps.tracking.http_policy import execute_guarded
    from sweeps.tracking.store_client import execute

    try:
        kind, name, args, kwargs = pickle.loads(memoryview(request)[1:])
        return ("ok", mirror(execute_guarded(lambda: execute(client, kind, name, args, kwargs))))
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


class Background:
    """The background process (module docstring) that answers the job's background calls, started
    once the store is open (:meth:`start`) and again at the next background call after it was
    killed. A background call waits for its store to open (~2 s of imports at the lowest priority,
    much longer while the training keeps every core busy): answered here meanwhile, at normal
    priority, the writer's batches took a core from the training at each beat (epochs of ~100 ms
    instead of ~1 ms in a study 5 job, docs/benchmarks.md, "A job beside busy programs"). Killed when the
    job says HURRY (a byte on ``hurry``, a non-blocking pipe) — a call the job waits for is held
    up behind a background one, whether it waits for the store to open or is being answered —
    and the background call then answered here, at normal priority. Calls come one at a time
    (the job holds a lock over each exchange)."""

    def __init__(self, client: Any, uri: str, experiment: str, hurry: int):
        self._client, self._open = client, ("open", uri, experiment)
        self._hurry = hurry
        os.set_blocking(hurry, False)
        self._proc: subprocess.Popen | None = None
        self._conns: tuple[Connection, Connection] | None = None
        self._ready = False
        self._refused = False  # it could not open the store: background calls stay on this thread
        self._hurried_until = 0.0

    def answer(self, request: bytes) -> tuple | bytes:
        """The answer to ``request`` (:func:`answer_to`): the background process's, pickled, or
        this thread's where the job is in a hurry or was lately, or no process can start or open
        the store."""
        if self._hurried() or time.monotonic() < self._hurried_until or not self.start():
            return answer_to(self._client, request)
        out, into = self._conns
        try:
            if not self._ready:  # its store is still opening
                if not self._answered(into):
                    return self._here(request)
                self._ready = into.recv()[0] == "ready"
                if not self._ready:  # it could not open the store this process holds open: not again
                    self._refused = True
                    return self._here(request)
            out.send_bytes(request)
            if self._answered(into):
                return into.recv_bytes()
        except (EOFError, OSError):  # it died (killed, out of memory): this thread answers
            pass
        return self._here(request)

    def _answered(self, into: Connection) -> bool:
        """Wait until the background process has written to ``into``; False once the job says HURRY."""
        while True:
            if into in wait([into, self._hurry]):
                return True
            if self._hurried():
                return False

    def _here(self, request: bytes) -> tuple:
        """Kill the background process and answer ``request`` on this thread, at normal priority."""
        self.stop()
        return answer_to(self._client, request)

    def _hurried(self) -> bool:
        """Whether the job said HURRY since last asked (reads every byte waiting), or closed its
        end of the pipe: a job that died or ended waits for nothing, and a call it left is best
        finished here, at normal priority, than by a background process a busy machine starves
        (an end-of-file is always readable, so waiting on it for the background answer spun a core)."""
        said = False
        try:
            while True:
                data = os.read(self._hurry, 64)
                said = True  # a byte, or b"": the job closed its end
                if not data:
                    break
        except BlockingIOError:  # nothing (more) waiting
            pass
        except OSError:
            said = True
        if said:
            self._hurried_until = time.monotonic() + HURRIED_S
        return said

    def start(self) -> bool:
        """Start the background process where there is none (never waits for its store to open);
        False where none can run: no fork, or it could not open the store."""
        if self._refused:
            return False
        if self._conns is None:
            requests_r, requests_w = os.pipe()
            answers_r, answers_w = os.pipe()
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "sweeps.tracking.store_process", str(requests_r), str(answers_w),
                     str(os.getpid()), "--background"], pass_fds=(requests_r, answers_w))
            except OSError:  # no fork (memory): this thread answers
                self._refused = True
                return False
            finally:
                os.close(requests_r)
                os.close(answers_w)
            self._conns = (Connection(requests_w, readable=False), Connection(answers_r, writable=False))
            self._ready = False
            try:
                self._conns[0].send(self._open)
            except OSError:
                self.stop()
                return False
        return True

    def kill(self) -> None:
        """Kill the background process, if any, without waiting (this process is exiting)."""
        if self._proc is not None:
            self._proc.kill()

    def stop(self) -> None:
        """Kill the background process and wait for it to be gone (its store transaction then
        rolled back, its locks released); the next background call starts another."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        for conn in self._conns or ():
            conn.close()
        self._proc = self._conns = None
        self._ready = False


def _send(outbox: Connection, answer: tuple) -> None:
    """Send one answer; exit quietly where the job gave the pipe up: a job interrupted while the
    store opened (Ctrl-C during its imports) has said its one line and gone, and a traceback here
    would follow that line on the stderr they share."""
    try:
        outbox.send(answer)
    except OSError:  # BrokenPipeError, ConnectionResetError: the job's end of the pipe is closed
        _exit()


def _watch_parent(parent: int) -> None:
    """Exit once ``parent`` is gone while the store opens (the main loop watches it after)."""
    while not _serving.wait(PARENT_POLL_S):
        if os.getppid() != parent:
            _exit()


def _exit() -> None:
    """Exit now, without the interpreter's shutdown (MLflow's exit hooks, ~0.5 s) that the job's
    process would wait on: every call made was answered and committed, nothing is pending."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    for helper in _helpers:  # idle (every call was answered) or still importing: nothing to keep
        helper.kill()
    os._exit(0)


if __name__ == "__main__":
    main()
