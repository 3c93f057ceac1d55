"""The store's process (``python -m sweeps.tracking.service.server REQUESTS ANSWERS PARENT``):
imports MLflow, opens the store the job names and answers the job's store calls.

Started by `sweeps.tracking.service.connection` (see there for the why). REQUESTS and ANSWERS are
pipe file descriptors carrying pickles (`multiprocessing.connection.Connection` framing),
PARENT the job's process id. Its first request is ``("open", tracking URI, experiment)``, its
first answer ``("ready", experiment id)`` once the store is open, or ``("usage", one line)`` where
it cannot be (then it exits); then, for each request — the pickle of ``(kind, name, args,
kwargs)`` (`execute`) — ``("ok", result)`` with MLflow
entities mirrored (`mirror`) or ``("error", type name, text)``,
at normal priority: every call a job makes waits for it, or comes before one that does. Once the
store is open it starts the follower process (`sweeps.tracking.follower.follower`), which ships the
journals of the runs the job follows at the lowest priority.

It ignores SIGINT and SIGTERM (the job closes its run through it after a signal), SIGUSR1 and
SIGUSR2 (Slurm's ``--signal`` warning reaches every process of the job step; the job's own
process acts on it and still needs its store: `sweeps.launchers.slurm.requeue`) and SIGTTOU (in
a background process group of the terminal's session, a warning it writes must not stop it), and
exits when the requests pipe closes or its parent process is gone (forked data loader workers may
hold the pipe open) — then only once it has done every request the job sent before it died or
gave the pipe up: a job SIGKILLed right after posting its params loses none of them. (A job that
gave the pipe up runs its unanswered posts itself too: they are idempotent — params and tags set
to the same value, metric values carrying their epoch's timestamp, texts rewritten.) It then
kills the follower process: what a dead job's follower had not shipped, a later start replays
from the run's cursor (`sweeps.tracking.replay.replay.mark_stale`).
"""
from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import signal
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

PARENT_POLL_S = 1.0  # s between checks that the job's process is still there
_serving = threading.Event()  # the main loop runs: it, not the watcher thread, exits once the parent is gone


def main() -> None:
    faulthandler.enable()  # a native crash (sqlite, a driver) prints the stacks on the job's stderr
    for sig in (signal.SIGINT, signal.SIGTERM, *(getattr(signal, n, None) for n in ("SIGUSR1", "SIGUSR2", "SIGTTOU"))):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    requests_fd, answers_fd, parent_arg = sys.argv[1:4]
    parent = int(parent_arg)
    inbox, outbox = Connection(int(requests_fd), writable=False), Connection(int(answers_fd), readable=False)
    threading.Thread(target=_watch_parent, args=(parent,), name="sweeps-store-parent", daemon=True).start()
    logging.basicConfig(level=logging.WARNING, format="[sweeps store process] %(levelname)s %(message)s")

    from sweeps.errors import UsageError, describe
    from sweeps.tracking.store import http_policy, store
    from sweeps.tracking.follower import shipping

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
    shipping.start(client, uri, experiment)  # now, while the job still imports torch and builds its data
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
        answer = answer_to(client, request)
        if not heard:  # the requests it posted before that are still done (at worst twice: module docstring)
            continue
        try:
            outbox.send(answer)
        except OSError:  # the job gave the pipe up (interrupted while waiting) or is gone
            heard = False
        except Exception as e:  # noqa: BLE001 (a result that does not pickle still gets an answer)
            _send(outbox, ("error", type(e).__name__, str(e)))


def answer_to(client: Any, request: bytes) -> tuple:
    """The answer to one ``request`` (a pickle) run on ``client``:
    ``("ok", result)`` or ``("error", type name, text)``, never raised — a request that does not
    unpickle and an exception of the call alike reach the caller as a
    the job as a `StoreError` named like it."""
    from sweeps.tracking.store.entities import mirror
    from sweeps.tracking.store.http_policy import execute_guarded
    from sweeps.tracking.service.client import execute

    try:
        kind, name, args, kwargs = pickle.loads(request)
        return ("ok", mirror(execute_guarded(lambda: execute(client, kind, name, args, kwargs))))
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


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
    from sweeps.tracking.follower import shipping  # the run's cursor says what it shipped: a later start replays the rest

    shipping.stop_all()
    os._exit(0)


if __name__ == "__main__":
    main()
