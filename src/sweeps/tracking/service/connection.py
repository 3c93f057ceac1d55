"""The MLflow store in a process of its own, as a job's process sees it: the pipe to it.

Why: a one-job command would spend ~2 s importing mlflow (~1.2 s) and opening its SQL store
(~0.9 s) before it could create its run, on the same core as torch's import (docs/benchmarks.md,
"Start-up and fixed cost"). A command that runs jobs starts the store's process
(`sweeps.tracking.service.server`) before Hydra composes its config and names the store once
the config is valid (`sweeps.tracking.service.registry`); it imports mlflow and opens the
store on the second core while the job imports torch and builds its data, and the job's process
never imports mlflow: every store call — run creation, params, tags, the writer's metric
shipments, artifacts, resume, the summary — is a `RemoteClient`
method call (`StoreService.call`; `StoreService.post` where the job need not wait
yet) pickled to it over a pipe and answered there by an `mlflow.MlflowClient` (Weights &
Biases' service process is the model).
MLflow's ingestion (~85 µs a value) then runs off the training process's GIL: the store
process answers the job's calls at normal priority, so a busy machine does not make the job's end
wait for everyone (docs/benchmarks.md, "A job beside busy programs"), and its follower process
ships the runs' journals at the lowest (`sweeps.tracking.follower.follower`). The process stays in the
job's session (Linux's autogroup: it shares the job's group) in a process group of its own (a
Ctrl-C in the terminal does not reach it).

A store process that dies (SIGKILL, a native crash) costs nothing logged: the call it was
answering and every later one run in this process on a client of its own (importing mlflow
then), the same calls on the same arguments — a call the process had done before it died is
then done twice, harmless for all but ``create_run`` (a metric value carries its timestamp, which
MLflow's SQL store keys it by; params and tags are set to the same value), and the runs it
followed are followed by a thread of this process (`sweeps.tracking.follower.follower`). A signal's exception (Ctrl-C) while
the job waits for an answer gives the pipe up the same way, so no later call reads that answer
as its own. Errors raised there come back as `StoreError` subclasses named like the
original (``MlflowException``, ...) with its text.
"""
from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from sweeps.errors import UsageError
from sweeps.tracking.store import http_policy
from sweeps.tracking.follower import priority
from sweeps.tracking.service.client import RemoteClient, execute, remote_error

log = logging.getLogger("sweeps")
# posts unanswered at once: their answers (a few dozen bytes each) never fill the answers pipe
# (64 KiB), which would stop the store process reading requests while the job writes one
MAX_POSTED = 64

class StoreService:
    """One store process (see the module docstring): started at once, importing mlflow; told which
    store to open by `open`."""

    def __init__(self):
        self.uri = self.experiment = ""
        self._lock = threading.Lock()  # one call at a time: the job's threads share the pipe
        self._local: Any = None  # this process's own client once the store process died
        self._ready: tuple | None = None  # the process's first answer: ("ready", experiment id) or ("usage", text)
        self._posted: deque[tuple[str, bytes, Any]] = deque()  # (what, request, on_error) of calls not yet answered
        requests_r, self._requests = os.pipe()
        self._answers, answers_w = os.pipe()
        env = dict(os.environ)  # the folder holding this package goes first on its path: the same code as here
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
        # a Ctrl-C in the terminal stops the job, which then closes its run through it
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeps.tracking.service.server", str(requests_r),
                                      str(answers_w), str(os.getpid())],
                                     pass_fds=(requests_r, answers_w), env=env, **priority.own_group())
        for fd in (requests_r, answers_w):
            os.close(fd)
        self._out, self._in = Connection(self._requests, readable=False), Connection(self._answers, writable=False)

    def open(self, uri: str, experiment: str) -> None:
        """Have the process open the store at ``uri``, experiment ``experiment`` (see `opened`)."""
        self.uri, self.experiment = uri, experiment
        with self._lock:
            try:
                self._out.send(("open", uri, experiment))
            except OSError as e:
                self._died(type(e).__name__)

    def opened(self) -> tuple[RemoteClient, str]:
        """(client, experiment id) once the store process has opened the store (or this one, where it died).

        Raises:
            UsageError: the store cannot be opened (the process's one line).
        """
        with self._lock:
            if self._ready is None and self._local is None:
                self._ready = self._exchange(None)
            if self._local is not None:
                from sweeps.tracking.store import store

                return RemoteClient(self), store.experiment_id(self._local, self.experiment)
        if self._ready[0] == "usage":
            raise UsageError(self._ready[1])
        return RemoteClient(self), self._ready[1]

    def call(self, kind: str, name: str, args: tuple, kwargs: dict) -> Any:
        """`execute` in the store process (or here, once it died); its result or its error.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: an argument that does not pickle
                (nothing was sent; the process stays in use).
        """
        request = pickle.dumps((kind, name, args, kwargs), pickle.HIGHEST_PROTOCOL)
        self._lock.acquire()
        try:
            self._collect()
            if self._local is None:
                answer = self._exchange(request)
                if answer is not None:
                    if answer[0] == "ok":
                        return answer[1]
                    raise remote_error(*answer[1:])
            return self._execute_here(request)
        finally:
            self._lock.release()

    def post(self, what: str, kind: str, name: str, args: tuple, kwargs: dict,
             on_error: Callable[[], None] | None = None) -> None:
        """`call` without waiting for it: the answer is read before the next call's (or at
        `settle`, or `stop`); a failure is then a
        warning naming ``what``, and ``on_error()`` is called. For work the job need not wait for
        yet: its run's drain at its end (`drain`, while it
        builds ``epochs.csv``), a run's params, tags and texts (~10 ms each,
        `set_tags`). Up to
        `MAX_POSTED` posts wait for their answers at once (a large request holds the caller
        until the store process reads it). The store process answers every request it was sent
        before it exits, even where this process died meanwhile; where it is gone, the call runs
        here now. Never raises for the call's own failure.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: an argument that does not pickle.
        """
        request = pickle.dumps((kind, name, args, kwargs), pickle.HIGHEST_PROTOCOL)
        self._lock.acquire()
        try:
            self._collect(keep=MAX_POSTED - 1)
            if self._local is None:
                try:
                    self._out.send_bytes(request)
                    self._posted.append((what, request, on_error))
                    return
                except OSError as e:
                    self._died(type(e).__name__)
            self._done(what, self._answer_here(request), on_error)
        finally:
            self._lock.release()

    def _collect(self, keep: int = 0) -> None:
        """Read the answers of the posted calls, in order, until ``keep`` are left unanswered (the
        lock held); a call whose answer the store process died before giving runs here."""
        while len(self._posted) > keep:
            what, request, on_error = self._posted[0]
            if self._local is None:
                try:
                    answer = self._in.recv()
                except (EOFError, OSError) as e:
                    self._died(f"exit status {self.proc.poll()}" if self.proc.poll() is not None else type(e).__name__)
                    continue  # run here, below
                except BaseException:  # a signal: the pipe is given up (see _exchange); the call runs here later
                    self._died("interrupted while it answered", wait=False)
                    raise
            else:
                answer = self._answer_here(request)
            self._posted.popleft()
            self._done(what, answer, on_error)

    def _answer_here(self, request: bytes) -> tuple:
        try:
            return ("ok", self._execute_here(request))
        except Exception as e:  # noqa: BLE001 (reported by _done, like the store process's answer)
            return ("error", type(e).__name__, str(e))

    def _execute_here(self, request: bytes) -> Any:
        """What the store process would have run, on this process's client: light entities
        become MLflow's (sweeps.tracking.store.entities) on the way through pickle."""
        kind, name, args, kwargs = pickle.loads(request)
        return execute(self._local, kind, name, args, kwargs)

    def settle(self) -> None:
        """Wait for the posted calls' answers (`post`)."""
        self._lock.acquire()
        try:
            self._collect()
        finally:
            self._lock.release()

    @staticmethod
    def _done(what: str, answer: tuple, on_error: Callable[[], None] | None = None) -> None:
        if answer[0] != "ok":  # a deleted run refuses every post: the job's end says so once
            log.log(logging.DEBUG if http_policy.gone(answer[2]) else logging.WARNING,
                    "MLflow: %s not logged (%s: %s)", what, answer[1], answer[2])
            if on_error is not None:
                on_error()

    def _exchange(self, request: bytes | None) -> tuple | None:
        """Send ``request`` (a pickle; None: nothing) and read the
        process's answer; None where it died (this process then holds a client of its own). A
        signal's exception (Ctrl-C) between the two may leave an answer unread, which the next call
        would take for its own: so the pipe is given up (the process finishes its call and exits),
        the exception goes on, and later calls run here."""
        try:
            if request is not None:
                self._out.send_bytes(request)
            return self._in.recv()
        except (EOFError, OSError) as e:
            self._died(f"exit status {self.proc.poll()}" if self.proc.poll() is not None else type(e).__name__)
        except BaseException:
            self._died("interrupted while it answered", wait=False)
            raise
        return None

    def _died(self, why: str, wait: bool = True) -> None:
        """Stop using the process (``why`` it is gone) and open the store here: now, or at the next
        call where ``wait`` is False (a signal is on its way up)."""
        log.warning("MLflow: the store's process ended (%s); this process opens the store itself", why)
        self.close(wait)
        self._local = _open_here(self.uri, self.experiment) if wait else _Later(self.uri, self.experiment)

    def close(self, wait: bool = True) -> None:
        """End the store process: it exits when its requests pipe closes (waited for up to 10 s
        where ``wait``); one never told a store (bad input ended the command) is killed: it holds
        only the command's stdout and stderr, which a caller reading them would wait on. Idempotent."""
        for conn in (self._out, self._in):
            try:
                conn.close()
            except OSError:
                pass
        if not self.uri:
            self.proc.kill()
        elif not wait:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _open_here(uri: str, experiment: str) -> Any:
    from sweeps.tracking.store import store

    return store.open_store(uri, experiment)[0]


class _Later:
    """A client of this process opened at its first use (after an interrupted call)."""

    def __init__(self, uri: str, experiment: str):
        self.uri, self.experiment, self._client = uri, experiment, None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = _open_here(self.uri, self.experiment)
        return getattr(self._client, name)
