"""SIGINT and SIGTERM: the first is raised where the job is; every later one is only noted.

While training, the first signal raises [`Interrupted`][sweeps.errors.Interrupted] (SIGINT, a
KeyboardInterrupt) or [`Terminated`][sweeps.errors.Terminated] (SIGTERM) where the job is, and the job
context turns it into ``outcome=killed``. From then on, any number of further signals (Ctrl-C held down, a scheduler
resending) are only noted (`received`): they are never raised into the code that closes
the runs, so every run is written whole and the process ends 130/143 with one line. While the
job context opens or closes a run, even the first signal is only noted (`held`): the run is
written whole, exactly once, and the signal is raised right after.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from sweeps.errors import Terminated, signal_exception
from sweeps.state import current

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# the signals this process got since install(), in order: this process's state (ProcessState.signals)


def raise_terminated(signum, frame) -> None:
    """The SIGTERM handler of a rank or a Slurm job's process: raise like Ctrl-C, named SIGTERM."""
    raise Terminated()


def _note(signum, frame) -> None:
    current().signals.append(signum)


def _first(signum, frame) -> None:
    """The first signal: from now on only noted, then raised here (where the job is)."""
    current().signals.append(signum)
    for s in SIGNALS:
        signal.signal(s, _note)
    raise signal_exception(signum)


def install() -> None:
    """The handlers of a sweep process: the first SIGINT or SIGTERM raises KeyboardInterrupt or
    [`Terminated`][sweeps.errors.Terminated] (even where the process inherited SIGINT ignored, as a background job of a
    non-interactive shell does, so ``kill -INT`` still ends the sweep cleanly); later ones are
    noted only."""
    current().signals.clear()
    for s in SIGNALS:
        signal.signal(s, _first)


def note_only() -> None:
    """Note SIGINT and SIGTERM from now on, never raise them (in the main thread): the sweep has
    returned and its exit status is being decided; the caller reads `received`."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _note)


def ignore() -> None:
    """Ignore SIGINT and SIGTERM from now on (in the main thread): the process has decided its exit
    status and is leaving. Python's shutdown puts a Python-level handler back to the default
    action, so a signal still arriving then (the tail of a Ctrl-C storm) would kill the process
    with -SIGINT instead of 130; an ignored signal stays ignored."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def name(signum: int) -> str:
    """``"SIGINT"`` or ``"SIGTERM"``: how stderr and the runs name the signal."""
    return signal.Signals(signum).name


def received() -> list[int]:
    """The signals noted since `install` (empty: none), first first."""
    return current().signals


def stop_if_received() -> None:
    """Raise the first signal's exception if one arrived already (a job must not start after the
    sweep was interrupted, even where something swallowed the first exception).

    Raises:
        Interrupted: SIGINT (or [`Terminated`][sweeps.errors.Terminated]: SIGTERM) was received."""
    if received():
        raise signal_exception(received()[0])


@contextmanager
def held() -> Iterator[list[int]]:
    """Note SIGINT/SIGTERM instead of raising them for the body; yields the list of signals that
    arrived in it (in order). Afterwards the handlers are put back — unless a signal arrived (in
    the body or before): then every later one is only noted too. Outside the main thread (no
    handlers can be set there) it does nothing."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    saved = {s: signal.getsignal(s) for s in SIGNALS}

    def note(signum, frame) -> None:
        pending.append(signum)
        current().signals.append(signum)

    for s in SIGNALS:
        signal.signal(s, note)
    try:
        yield pending
    finally:
        for s, handler in saved.items():
            if received() and saved[s] is _first:  # interrupted: no later signal is raised
                handler = _note
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
