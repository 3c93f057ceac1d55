"""The running sweep's parent run, as its jobs see it: held in this process's state
(`sweeps.state.ProcessState.sweep`), and exported to the environment only for the jobs that
a launcher runs in child processes (joblib's workers, submitit's), which inherit it."""
from __future__ import annotations

import os

from sweeps.state import current
from sweeps.tracking.store.store import PARENT_RUN_ENV, SWEEP_URI_ENV, SWEPT_KEYS_ENV

_ENV = {"parent_run_id": PARENT_RUN_ENV, "tracking_uri": SWEEP_URI_ENV, "swept_keys": SWEPT_KEYS_ENV,
        "planned_jobs": "SWEEPS_PLANNED_JOBS",  # the sweep's job count, for the console's [k/N]
        "checked_jobs": "SWEEPS_CHECKED_JOBS"}  # how many jobs the sweep checked before launching them


def get(key: str) -> str | None:
    """The running sweep's ``parent_run_id``, ``tracking_uri``, ``swept_keys`` (comma-separated),
    ``planned_jobs`` or ``checked_jobs`` (every job's values checked before the first started):
    from this process's state, else — a job in a launcher's child process — from the environment
    the sweep's process exported; None outside a sweep."""
    value = current().sweep.get(key)
    return value if value is not None else (os.environ.get(_ENV[key]) or None)


def note(**values: str) -> None:
    """Note values of the running sweep (``parent_run_id=...``, ``tracking_uri=...``,
    ``swept_keys=...``)."""
    current().sweep.update(values)
    for key, value in values.items():
        os.environ[_ENV[key]] = value  # for child processes only: this process reads its state


def close() -> tuple[str | None, str | None]:
    """Forget the running sweep (a later sweep in this process starts clean); returns its parent
    run id and store, also kept in `last_sweep` (what
    [`sweeps.run`][sweeps.api.run] reads back)."""
    parent, uri = get("parent_run_id"), get("tracking_uri")
    current().sweep.clear()
    for name in _ENV.values():
        os.environ.pop(name, None)
    if parent:
        current().last_sweep.update(run_id=parent, tracking_uri=uri or "")
    return parent, uri
