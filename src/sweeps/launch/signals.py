"""SIGINT and SIGTERM: raised as exceptions while a job works, held back while it writes its end.

While training, a signal raises :class:`KeyboardInterrupt` (SIGINT) or
:class:`~sweeps.errors.Terminated` (SIGTERM) where the job is, and the job context turns it into
``outcome=killed``. While the job context opens or closes a run, a signal is only noted
(:func:`held`): the run is written whole, exactly once, and the signal is raised right after.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from sweeps.errors import Terminated

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def raise_terminated(signum, frame) -> None:
    """The SIGTERM handler of a sweep process: raise like Ctrl-C, named SIGTERM."""
    raise Terminated()


def install() -> None:
    """The handlers of a sweep process: SIGTERM raises :class:`Terminated`; SIGINT raises
    KeyboardInterrupt even where the process inherited it ignored (a background job of a
    non-interactive shell), so ``kill -INT`` still ends the sweep cleanly."""
    signal.signal(signal.SIGTERM, raise_terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def as_exception(signum: int) -> KeyboardInterrupt:
    """The exception a signal is raised as."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def held() -> Iterator[list[int]]:
    """Note SIGINT/SIGTERM instead of raising them for the body; yields the list of signals that
    arrived (in order). Outside the main thread (no handlers can be set there) it does nothing."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    saved = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield pending
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
