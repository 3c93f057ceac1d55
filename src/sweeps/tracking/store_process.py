"""The store's process (``python -m sweeps.tracking.store_process REQUESTS ANSWERS PARENT``): imports
MLflow, opens the store the job names and answers the job's store calls.

Started by :mod:`sweeps.tracking.store_service` (see there for the why). REQUESTS and ANSWERS are
pipe file descriptors carrying pickles (:class:`multiprocessing.connection.Connection` framing),
PARENT the job's process id.
Its first request is ``("open", tracking URI, experiment)``, its first answer ``("ready",
experiment id)`` once the store is open, or ``("usage", one line)`` where it cannot be (then it
exits); then, for each request — a priority byte (:data:`~sweeps.tracking.store_service.LOW` or
``NORMAL``), then the pickle of ``(kind, name, args, kwargs)``
(:func:`~sweeps.tracking.store_service.execute`) — ``("ok", result)`` with MLflow entities
mirrored (:func:`~sweeps.tracking.entities.mirror`) or ``("error", type name, text)``. The main
thread, at normal priority, reads each request and answers the ``NORMAL`` ones (calls the job
waits for); it hands the ``LOW`` ones (the run writer's background batches) to a thread lowered
alone (:func:`~sweeps.tracking.priority.lowest`), unpickled and run there. It ignores SIGINT and
SIGTERM (the job closes its run through it after a signal) and SIGTTOU (in a background process
group of the terminal's session, a warning it writes must not stop it), and exits when the
requests pipe closes or its parent process is gone (forked data loader workers may hold the pipe
open).
"""
from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

PARENT_POLL_S = 1.0  # s between checks that the job's process is still there


def main() -> None:
    faulthandler.enable()  # a native crash (sqlite, a driver) prints the stacks on the job's stderr
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGTTOU", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    requests_fd, answers_fd, parent = sys.argv[1:4]
    inbox, outbox = Connection(int(requests_fd), writable=False), Connection(int(answers_fd), readable=False)
    threading.Thread(target=_watch_parent, args=(int(parent),), name="sweeps-store-parent", daemon=True).start()
    logging.basicConfig(level=logging.WARNING, format="[sweeps store process] %(levelname)s %(message)s")

    from sweeps.errors import UsageError, describe
    from sweeps.tracking import store
    from sweeps.tracking.store_service import LOW

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
    background = Background(client)
    while True:
        try:
            request = inbox.recv_bytes()
        except (EOFError, OSError):  # the job's process is done with the store: every call was answered,
            _exit()                  # so nothing is pending
        answer = background.answer(request) if request[:1] == LOW else answer_to(client, request)
        try:
            outbox.send(answer)
        except OSError:  # the job gave the pipe up (interrupted while waiting) or is gone
            _exit()
        except Exception as e:  # noqa: BLE001 (a result that does not pickle still gets an answer)
            _send(outbox, ("error", type(e).__name__, str(e)))


def answer_to(client: Any, request: bytes) -> tuple:
    """The answer to one ``request`` (its priority byte, then its pickle) run on ``client``:
    ``("ok", result)`` or ``("error", type name, text)``, never raised — a request that does not
    unpickle and an exception of the call alike reach the caller as a
    :class:`~sweeps.tracking.store_service.StoreError` named like it."""
    from sweeps.tracking.entities import mirror
    from sweeps.tracking.store_service import execute

    try:
        kind, name, args, kwargs = pickle.loads(memoryview(request)[1:])
        return ("ok", mirror(execute(client, kind, name, args, kwargs)))
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


class Background:
    """A thread of this process at the lowest priority, lowered alone, that answers the job's
    background calls (the run writer's batches while the job trains): they take cores the
    training leaves idle, while the main thread answers at normal priority what the job waits for
    (module docstring). Calls come one at a time (the job holds a lock over each exchange), so the
    main thread hands one over and waits for its answer."""

    def __init__(self, client: Any):
        self._client = client
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="sweeps-store-background", daemon=True).start()

    def answer(self, request: bytes) -> tuple:
        """:func:`answer_to` ``request``, run on the lowered thread."""
        self._requests.put(request)
        return self._answers.get()

    def _serve(self) -> None:
        from sweeps.tracking import priority

        priority.lowest(threading.get_native_id())
        while True:
            self._answers.put(answer_to(self._client, self._requests.get()))


def _send(outbox: Connection, answer: tuple) -> None:
    """Send one answer; exit quietly where the job gave the pipe up: a job interrupted while the
    store opened (Ctrl-C during its imports) has said its one line and gone, and a traceback here
    would follow that line on the stderr they share."""
    try:
        outbox.send(answer)
    except OSError:  # BrokenPipeError, ConnectionResetError: the job's end of the pipe is closed
        _exit()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    _exit()


def _exit() -> None:
    """Exit now, without the interpreter's shutdown (MLflow's exit hooks, ~0.5 s) that the job's
    process would wait on: every call made was answered and committed, nothing is pending."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
