"""Outcomes: how a job ended, as data. An OOM or a crash is logged and the sweep goes on.

A sticky CUDA error (illegal address, ECC, launch failure: `is_sticky_cuda_error`) ends its
job ``error`` with a line that says so, and marks this process's CUDA context as lost: every
later CUDA job in the process then ends ``unavailable`` at once with a line naming the cause
(`sweeps.placement.device.resolve_device`) instead of failing with errors of its own; CPU jobs
still run. A rerun of the sweep (a fresh process) runs those jobs; resume skips the done ones.
A data-parallel rank's error ([`RankFailed`][sweeps.errors.RankFailed]) is classified by its text too,
but a sticky CUDA error there lost the rank's context, in its own process: this one's is fine.
"""
from __future__ import annotations

from hydra.errors import InstantiationException

from sweeps.errors import DataUnavailable, DeviceUnavailable, Diverged, RankFailed
from sweeps.names import DIVERGED, ERROR, KILLED, OK, OOM, SKIPPED, UNAVAILABLE  # noqa: F401 (re-exported)
from sweeps.state import current

STICKY_NOTE = ("sticky CUDA error: this process's CUDA context is lost, its later CUDA jobs end unavailable; "
               "rerun the sweep to run them in a fresh process")

# The counts and the last job closed live in this process's state (sweeps.state: outcomes, last_job).


def explain(exc: BaseException) -> tuple[BaseException, str]:
    """The exception that says why (Hydra's instantiate wraps the model's own error) and its one
    line (an error re-raised from a DataLoader worker carries its cause on the last line)."""
    if isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        exc = exc.__cause__
    lines = str(exc).strip().splitlines() or [""]
    return exc, (lines[-1] if "Original Traceback" in str(exc) else lines[0]).strip()[:500]


def classify(exc: BaseException) -> tuple[str, str]:
    """``(outcome, one-line message)`` for an exception that ended a job."""
    from sweeps.train.memory import is_oom, is_sticky_cuda_error, note_cuda_lost  # torch: loaded by a failed job

    exc, line = explain(exc)
    if "Original Traceback" in str(exc):  # from a DataLoader worker: the line is the cause itself
        return (OOM if is_oom(exc) else ERROR), line
    # a rank's failure reads as the RuntimeError it is (its line names the rank's own exception type)
    name = "RuntimeError" if isinstance(exc, RankFailed) else type(exc).__name__
    message = f"{name}: {line}" if line else name
    if isinstance(exc, (DeviceUnavailable, DataUnavailable)):  # data: only with dataset.if_missing=skip
        return UNAVAILABLE, line
    if isinstance(exc, Diverged):
        return DIVERGED, line
    if is_oom(exc):
        return OOM, message
    if is_sticky_cuda_error(exc) and not isinstance(exc, RankFailed):  # a rank's: its own process's context
        note_cuda_lost(message)
        return ERROR, f"{message} ({STICKY_NOTE})"
    return ERROR, message


def note(outcome: str) -> None:
    """Count a job's outcome (exit status, the sweep's count of skipped jobs)."""
    current().outcomes[outcome] += 1


def count(outcome: str) -> int:
    """How many jobs of this process ended with ``outcome``."""
    return current().outcomes[outcome]


def jobs_ended() -> int:
    """How many jobs this process ended (any outcome, skips included)."""
    return sum(n for k, n in current().outcomes.items() if not k.startswith("sweep_"))


def note_sweep_errors(n: int) -> None:
    """The sweep's count of ``error`` jobs, read from its MLflow child runs (the jobs may have run
    in other processes: joblib, submitit)."""
    current().outcomes["sweep_" + ERROR] = n


def exit_status() -> int:
    """1 when any job of this process, or of the sweep it ran, ended in ``error``, else 0."""
    counts = current().outcomes
    return 1 if counts[ERROR] or counts["sweep_" + ERROR] else 0
