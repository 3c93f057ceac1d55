"""The MLflow store in a process of its own, as a job's process sees it: start it, call it.

Why: a one-job command spent ~2 s importing mlflow (1.2 s) and opening its SQL store (0.9 s)
before it could create its run, on the same core as torch's import (docs/benchmarks.md, "the
tabular job"). A command that runs jobs starts the store's process
(:mod:`sweeps.tracking.store_process`) before Hydra composes its config (:func:`prestart`) and
names the store once the config is valid (:func:`start`); it imports mlflow and opens the store on
the second core while the job imports torch and builds its data, and the job's process never
imports mlflow: every store call — run creation, params, tags, the writer's metric batches,
artifacts, resume, the summary — is a :class:`RemoteClient` method call pickled to it over a
pipe and answered there by an :class:`mlflow.MlflowClient` (Weights & Biases' service process is
the model). MLflow's ingestion (~85 µs a value here) then runs off the training process's GIL.
Each call is answered at its caller's priority: the run writer's background batches (its
sending thread is lowered, :func:`sweeps.tracking.priority.lowered`) in the store process's
background process, at the lowest priority, so they take cores the training leaves idle;
every call a job's thread waits for — run creation, params, artifacts, the last flush, the
summary — on its main thread at normal priority, so a busy machine does not make the job's end
wait for everyone (docs/benchmarks.md, "A job's end on a busy machine"). A call the job waits for
that finds a background batch under way says HURRY (:meth:`StoreService._say_hurry`): that batch
is then ended and answered at normal priority too ("A background batch the job waits for"). The process stays in the
job's session (Linux's autogroup: it shares the job's group) in a process group of its own (a
Ctrl-C in the terminal does not reach it).

A sweep's process (``-m``) keeps a client of its own for its parent run, and its store process
answers the jobs that Hydra's basic launcher runs in it (:func:`prestart`). A process that had
imported mlflow before the command started keeps its own client for everything: tests that hold
a client, a pool worker (joblib, submitit), a data-parallel rank.

A store process that dies (SIGKILL, a native crash) costs nothing logged: the call it was
answering and every later one run in this process on a client of its own (importing mlflow
then), the same calls on the same arguments — a call the process had done before it died is
then done twice, harmless for all but ``create_run`` (MLflow's SQL store drops a metric value it
holds already; params and tags are set to the same value). A signal's exception (Ctrl-C) while
the job waits for an answer gives the pipe up the same way, so no later call reads that answer
as its own. Errors raised there come back as :class:`StoreError` subclasses named like the
original (``MlflowException``, ...) with its text.
"""
from __future__ import annotations

import atexit
import importlib
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
from sweeps.tracking import priority

log = logging.getLogger("sweeps")
# a request's first byte, then its pickle: which thread of the store process answers it
LOW, NORMAL = b"L", b"N"
HURRY_AFTER_S = 0.2  # s a call the job waits for waits for the pipe before the store process is told to hurry
_services: dict[str, "StoreService"] = {}  # tracking URI → its store process (one per URI per process)
_spare: list["StoreService"] = []  # started by prestart(), not yet told which store to open
_errors: dict[str, type] = {}


class StoreError(Exception):
    """An exception raised by the store's process; the subclass is named like the original."""


def remote_error(kind: str, text: str) -> StoreError:
    """A :class:`StoreError` subclass named ``kind`` (one class per name) carrying ``text``."""
    cls = _errors.get(kind) or _errors.setdefault(kind, type(kind, (StoreError,), {}))
    return cls(text)


def execute(client: Any, kind: str, name: str, args: tuple, kwargs: dict) -> Any:
    """Run one call on ``client`` (an :class:`mlflow.MlflowClient`): its method ``name``
    (``kind`` ``client``), or the function ``module:qualname`` given the client first
    (``kind`` ``function``, :meth:`RemoteClient.run`)."""
    if kind == "client":
        return getattr(client, name)(*args, **kwargs)
    module, _, qualname = name.partition(":")
    fn: Any = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    return fn(client, *args, **kwargs)


class StoreService:
    """One store process (see the module docstring): started at once, importing mlflow; told which
    store to open by :meth:`open`."""

    def __init__(self):
        self.uri = self.experiment = ""
        self._lock = threading.Lock()  # one call at a time: the job's thread and its writer's share the pipe
        self._local: Any = None  # this process's own client once the store process died
        self._ready: tuple | None = None  # the process's first answer: ("ready", experiment id) or ("usage", text)
        self._posted: deque[tuple[str, bytes]] = deque()  # (what, request) of posted calls not yet answered, in order
        requests_r, self._requests = os.pipe()
        self._answers, answers_w = os.pipe()
        hurry_r, self._hurry = os.pipe()  # a byte: a call this process waits for is held up (store_process)
        os.set_blocking(self._hurry, False)
        env = dict(os.environ)  # the folder holding this package goes first on its path: the same code as here
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
        # a Ctrl-C in the terminal stops the job, which then closes its run through it
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeps.tracking.store_process", str(requests_r),
                                      str(answers_w), str(os.getpid()), str(hurry_r)],
                                     pass_fds=(requests_r, answers_w, hurry_r), env=env, **priority.own_group())
        for fd in (requests_r, answers_w, hurry_r):
            os.close(fd)
        self._out, self._in = Connection(self._requests, readable=False), Connection(self._answers, writable=False)

    def open(self, uri: str, experiment: str) -> None:
        """Have the process open the store at ``uri`` and experiment ``experiment`` (it answers
        when done: :meth:`opened`)."""
        self.uri, self.experiment = uri, experiment
        with self._lock:
            try:
                self._out.send(("open", uri, experiment))
            except OSError as e:
                self._died(type(e).__name__)

    def opened(self) -> tuple[RemoteClient, str]:
        """(client, experiment id) once the store process has opened the store (where it died
        first, the client runs its calls here).

        Raises:
            UsageError: the store cannot be opened (the process's one line).
        """
        with self._lock:
            if self._ready is None and self._local is None:
                self._ready = self._exchange(None)
            if self._local is not None:
                from sweeps.tracking import store

                return RemoteClient(self), store.experiment_id(self._local, self.experiment)
        if self._ready[0] == "usage":
            raise UsageError(self._ready[1])
        return RemoteClient(self), self._ready[1]

    def call(self, kind: str, name: str, args: tuple, kwargs: dict) -> Any:
        """:func:`execute` in the store process (or here, once it died), at the calling thread's
        priority (module docstring); its result or its error.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: an argument that does not pickle
                (nothing was sent; the process stays in use).
        """
        low = priority.lowered()
        request = (LOW if low else NORMAL) + pickle.dumps((kind, name, args, kwargs), pickle.HIGHEST_PROTOCOL)
        if not self._lock.acquire(timeout=HURRY_AFTER_S):
            if not low:  # most likely a background batch the store process answers at the lowest priority
                self._say_hurry()
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

    def post(self, what: str, kind: str, name: str, args: tuple, kwargs: dict) -> None:
        """:meth:`call` without waiting for it to be done: the request is sent and its answer read
        before the next call's (or at :func:`stop`); a failure is then logged as a warning naming
        ``what``. For work at a job's end that the job need not wait for (the telemetry figure:
        matplotlib's import and the drawing take ~1 s there while the job builds ``epochs.csv``).
        Where the store process is gone, it runs here now. Never raises for the call's own failure.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: an argument that does not pickle.
        """
        request = NORMAL + pickle.dumps((kind, name, args, kwargs), pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._collect()
            if self._local is None:
                try:
                    self._out.send_bytes(request)
                    self._posted.append((what, request))
                    return
                except OSError as e:
                    self._died(type(e).__name__)
            self._done(what, self._answer_here(request))

    def _collect(self) -> None:
        """Read the answers of the posted calls, in order (the lock held); a call whose answer
        the store process died before giving runs here."""
        while self._posted:
            what, request = self._posted[0]
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
            self._done(what, answer)

    def _answer_here(self, request: bytes) -> tuple:
        try:
            return ("ok", self._execute_here(request))
        except Exception as e:  # noqa: BLE001 (reported by _done, like the store process's answer)
            return ("error", type(e).__name__, str(e))

    def _execute_here(self, request: bytes) -> Any:
        """What the store process would have run, on this process's client: light entities
        become MLflow's (sweeps.tracking.entities) on the way through pickle."""
        kind, name, args, kwargs = pickle.loads(memoryview(request)[1:])
        return execute(self._local, kind, name, args, kwargs)

    def settle(self) -> None:
        """Wait for the posted calls' answers (:meth:`post`)."""
        with self._lock:
            self._collect()

    @staticmethod
    def _done(what: str, answer: tuple) -> None:
        if answer[0] != "ok":
            log.warning("MLflow: %s not logged (%s: %s)", what, answer[1], answer[2])

    def _say_hurry(self) -> None:
        """Tell the store process that a call this process waits for is held up: it ends the
        background call under way and answers it, and those of the next few seconds, at normal
        priority (:mod:`sweeps.tracking.store_process`)."""
        try:
            os.write(self._hurry, b"!")
        except OSError:  # the pipe is full (said already) or closed (the process is gone)
            pass

    def _exchange(self, request: bytes | None) -> tuple | None:
        """Send ``request`` (its priority's byte, then its pickle; None: nothing) and read the
        process's answer; None where it died (this
        process then holds a client of its own). A signal's exception (Ctrl-C) raised between the
        two may leave an answer unread or half-read, which the next call would take for its own:
        so the pipe is given up (the process finishes its call and exits) and the exception goes
        on; later calls run here."""
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
        """Stop using the process (``why`` it is gone) and open the store here (now, or at the next
        call where ``wait`` is False: a signal is on its way up)."""
        log.warning("MLflow: the store's process ended (%s); this process opens the store itself", why)
        self.close(wait)
        self._local = _Later(self.uri, self.experiment) if not wait else _open_here(self.uri, self.experiment)

    def close(self, wait: bool = True) -> None:
        """End the store process: it exits when its requests pipe closes (waited for up to 10 s
        where ``wait``); one never told a store (bad input ended the command) is killed, since it
        holds no store, only the command's stdout and stderr, which a caller reading them to their
        end would wait on. Idempotent."""
        for conn in (self._out, self._in):
            try:
                conn.close()
            except OSError:
                pass
        if self._hurry >= 0:
            os.close(self._hurry)
            self._hurry = -1
        if not self.uri:
            self.proc.kill()
        elif not wait:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _open_here(uri: str, experiment: str) -> Any:
    from sweeps.tracking import store

    return store.open_store(uri, experiment)[0]


class _Later:
    """A client of this process opened at its first use (after an interrupted call)."""

    def __init__(self, uri: str, experiment: str):
        self.uri, self.experiment, self._client = uri, experiment, None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = _open_here(self.uri, self.experiment)
        return getattr(self._client, name)


class RemoteClient:
    """The :class:`mlflow.MlflowClient` methods sweeps calls, run by the store's process: each
    attribute is a method taking MlflowClient's arguments (light entities for entities,
    :mod:`sweeps.tracking.entities`) and returning its result with entities as
    :class:`~sweeps.tracking.entities.Mirror` objects."""

    remote = True  # sweeps.tracking.entities.classes: build light entities for this client

    def __init__(self, service: StoreService):
        self._service, self.tracking_uri = service, service.uri

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._service.call("client", name, args, kwargs)

    def hurry(self) -> None:
        """Tell the store process that this process waits for the background call under way (see
        :meth:`StoreService._say_hurry`); calls this process's threads make themselves say so
        after :data:`HURRY_AFTER_S`."""
        self._service._say_hurry()

    def run(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(client, *args, **kwargs)`` in the store's process: a module-level sweeps function
        that builds MLflow objects (dataset inputs) where mlflow is imported anyway."""
        return self._service.call("function", f"{fn.__module__}:{fn.__qualname__}", args, kwargs)

    def post(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> None:
        """:meth:`run` without waiting for it (:meth:`StoreService.post`): a failure is logged as
        a warning naming ``what`` once its answer is read."""
        self._service.post(what, "function", f"{fn.__module__}:{fn.__qualname__}", args, kwargs)


def in_store(client: Any, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(client, *args, **kwargs)`` where the client's store is: in the store's process for a
    :class:`RemoteClient`, here for an :class:`mlflow.MlflowClient`."""
    return client.run(fn, *args, **kwargs) if getattr(client, "remote", False) else fn(client, *args, **kwargs)


def in_store_later(client: Any, what: str, fn: Callable, *args: Any, **kwargs: Any) -> None:
    """:func:`in_store` without waiting for a :class:`RemoteClient`'s store process to be done
    (:meth:`RemoteClient.post`; its failure is logged as a warning naming ``what``); with an
    :class:`mlflow.MlflowClient`, now (raising what ``fn`` raises)."""
    if getattr(client, "remote", False):
        client.post(what, fn, *args, **kwargs)
    else:
        fn(client, *args, **kwargs)


def prestart(argv: list[str]) -> None:
    """Start a store process now if the command line ``argv`` (``sys.argv[1:]``) runs jobs — one,
    or a sweep's (``-m``); not ``--help``, ``--cfg``, ``--info`` — as read by Hydra's own argument
    parser, so its imports overlap Hydra's composition as well as torch's import. A sweep's
    process keeps a client of its own for its parent run; the store process answers its jobs when
    they run in this process (Hydra's basic launcher), so their metric batches are ingested off
    the training's GIL: a writer thread at the lowest priority that held the GIL through MLflow's
    ingestion on a busy machine held an epoch up for 1.4–4.4 s (docs/benchmarks.md, "A sweep's
    jobs"). A launcher that runs jobs elsewhere gives it back (:func:`discard_spare`). Never
    raises."""
    if _spare or _services or "mlflow" in sys.modules or not _runs_jobs(argv):
        return
    try:
        _spare.append(StoreService())
    except (OSError, ValueError) as e:  # no fork (memory), no pass_fds (not POSIX)
        log.warning("MLflow: no store process (%s); this process opens the store itself", e)
        return
    atexit.register(stop)


def _runs_jobs(argv: list[str]) -> bool:
    import argparse

    from hydra._internal.utils import get_args_parser

    if any(a in ("--version", "-h", "--help", "--hydra-help") for a in argv):  # argparse would print and exit
        return False
    parser = get_args_parser()
    parser.exit_on_error = False  # a malformed command line is Hydra's to report, not this check's
    try:
        args, _ = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit):
        return False
    return not (args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
                or args.experimental_rerun)


def discard_spare() -> None:
    """End the store process :func:`prestart` started but no job of this process will use (a
    sweep whose launcher runs its jobs in other processes). Idempotent."""
    while _spare:
        _spare.pop().close()


def start(uri: str, experiment: str) -> None:
    """Have the store process started by :func:`prestart` open the store at ``uri`` (experiment
    ``experiment`` first). Without one (a pool worker, tests calling the job directly) the job
    opens the store itself, as it does for a second ``uri``.

    Raises:
        UsageError: the process had died and this process cannot open the store either.
    """
    if uri in _services or not _spare:
        return
    service = _spare.pop()
    service.open(uri, experiment)
    _services[uri] = service


def opened(uri: str, experiment: str) -> tuple[RemoteClient, str] | None:
    """(client, id of ``experiment``) from the store process started for ``uri``; None where none
    was started.

    Raises:
        UsageError: the store cannot be opened (one line, from the store process).
    """
    service = _services.get(uri)
    if service is None:
        return None
    answer = service.opened()
    if experiment == service.experiment:
        return answer
    from sweeps.tracking import store

    client = answer[0]
    return client, client.run(store.experiment_id, experiment)


def stop() -> None:
    """End every store process of this process (at exit; tests). Idempotent."""
    while _spare:
        _spare.pop().close()
    while _services:
        service = _services.popitem()[1]
        service.settle()  # calls posted at a job's end (its telemetry figure) are done before the process goes
        service.close()
