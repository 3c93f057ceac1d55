"""Outcomes: how a job ended, as data. An OOM or a crash is logged and the sweep goes on."""
from __future__ import annotations

from collections import Counter

from hydra.errors import InstantiationException

from sweeps.errors import DataUnavailable, DeviceUnavailable, Diverged
from sweeps.names import DIVERGED, ERROR, KILLED, OK, OOM, SKIPPED, UNAVAILABLE  # noqa: F401 (re-exported)
from sweeps.train.memory import is_oom, release_memory  # noqa: F401 (re-exported)


_counts: Counter = Counter()  # outcomes of the jobs run by this process (exit status, skips)


def classify(exc: BaseException) -> tuple[str, str]:
    """``(outcome, one-line message)`` for an exception that ended a job."""
    if isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        exc = exc.__cause__  # hydra.utils.instantiate wraps the model's own error
    lines = str(exc).strip().splitlines() or [""]
    if "Original Traceback" in str(exc):  # re-raised from a DataLoader worker: the cause is last
        return (OOM if is_oom(exc) else ERROR), lines[-1].strip()[:500]
    first_line = lines[0][:500]
    message = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
    if isinstance(exc, (DeviceUnavailable, DataUnavailable)):  # data: only with dataset.if_missing=skip
        return UNAVAILABLE, first_line
    if isinstance(exc, Diverged):
        return DIVERGED, first_line
    if is_oom(exc):
        return OOM, message
    return ERROR, message


def note(outcome: str) -> None:
    """Count a job's outcome (exit status, the sweep's count of skipped jobs)."""
    _counts[outcome] += 1


def count(outcome: str) -> int:
    """How many jobs of this process ended with ``outcome``."""
    return _counts[outcome]


def note_sweep_errors(n: int) -> None:
    """The sweep's count of ``error`` jobs, read from its MLflow child runs (the jobs may have run
    in other processes: joblib, submitit)."""
    _counts["sweep_" + ERROR] = n


def exit_status() -> int:
    """1 when any job of this process, or of the sweep it ran, ended in ``error``, else 0."""
    return 1 if _counts[ERROR] or _counts["sweep_" + ERROR] else 0
