"""The Python entry: :func:`run` a sweep in-process exactly as ``python -m sweeps`` does, and
read any experiment's jobs back as a table with :func:`results` (notebooks, scripts)."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sweeps.errors import UsageError
from sweeps.report.results import results, sweep_records

__all__ = ["run", "results"]


def run(overrides: list[str], config_dir: str | None = None, multirun: bool = True) -> list[dict[str, Any]]:
    """Run ``python -m sweeps [-m] [--config-dir DIR] OVERRIDES`` in this process: Hydra's
    composition and launcher, the sweep's MLflow parent run, resume, the summary on stdout —
    everything the command line does, in the current directory (``./mlruns``).

    Args:
        overrides: what follows the command, e.g. ``["model=mlp", "batch=32,64", "epochs=2"]``
            or ``["+experiment=waves_batch"]``.
        config_dir: the user's ``conf/`` folder (Hydra's ``--config-dir``): its options join
            the built-in ones.
        multirun: ``-m`` (comma-separated values sweep); False runs one job.

    Returns:
        One dict per job in the order they ran (:func:`sweeps.report.results.job_record`:
        ``run_id``, ``outcome``, ``batch``, ``time/median_epoch_s``, ...); jobs skipped as
        already done come with ``outcome`` ``skipped`` and the figures of the run that did them.

    Raises:
        UsageError: bad input (a wrong key or value, a target that does not import, a missing
            ``config_dir``) — its one line, as the command line prints it.
        KeyboardInterrupt: Ctrl-C (the interrupted job's run is closed ``killed`` first).
    """
    from hydra.core.global_hydra import GlobalHydra

    from sweeps.launch import cli, job, outcome, sweep

    args = (["-m"] if multirun else []) + list(overrides)
    if config_dir is not None:
        if not Path(config_dir).is_dir():
            raise UsageError(f"config_dir={config_dir} is not a folder: give the folder holding your "
                             "model/, dataset/, ... option files")
        args = ["--config-dir", str(Path(config_dir).resolve()), *args]
    job.LAST_JOB.clear()
    sweep.LAST_SWEEP.clear()
    outcome.reset()
    saved_argv, saved_env = sys.argv, dict(os.environ)
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()  # Hydra gives each job console and file handlers: the caller's come back
    saved_handlers, saved_level = root.handlers[:], root.level
    sys.argv = ["sweeps", *args]
    code: Any = 0
    try:
        with contextlib.redirect_stderr(_Tee(sys.stderr)) as err:
            try:
                cli.cli()
            except SystemExit as e:
                code = e.code
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        for s, handler in saved_signals.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        GlobalHydra.instance().clear()
        for handler in root.handlers[:]:
            if handler not in saved_handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in saved_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved_level)
    if code == 2:
        raise UsageError(err.last_error() or "bad input (see the lines above)")
    if code in (130, 143):
        raise KeyboardInterrupt
    if multirun and sweep.LAST_SWEEP:
        return sweep_records(sweep.LAST_SWEEP["tracking_uri"], sweep.LAST_SWEEP["run_id"])
    if job.LAST_JOB.get("run_id"):
        from sweeps.report.results import single_record

        return [single_record(job.LAST_JOB["tracking_uri"], job.LAST_JOB["run_id"])]
    return []


class _Tee:
    """stderr as it is, remembering the last ``sweeps: error:`` line (the one-line message)."""

    def __init__(self, stream):
        self.stream, self._last = stream, ""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("sweeps: error: "):
                self._last = line.removeprefix("sweeps: error: ")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def last_error(self) -> str:
        return self._last

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
