"""The Python entry: [`run`][sweeps.api.run] a sweep in-process exactly as ``python -m sweeps`` does, and
read any experiment's jobs back as a table with [`results`][sweeps.report.results.results], its verdict with [`verdict`][sweeps.report.results.verdict]
(notebooks, scripts)."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sweeps.errors import UsageError
from sweeps.report.results import results, sweep_records, verdict

__all__ = ["run", "results", "verdict"]


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
        One dict per job in the order they ran ([`sweeps.report.results.job_record`][sweeps.report.results.job_record]:
            ``run_id``, ``outcome``, ``batch``, ``time/median_epoch_s``, ...); jobs skipped as
            already done come with ``outcome`` ``skipped`` and the figures of the run that did them.

    Raises:
        UsageError: bad input (a wrong key or value, a target that does not import, a missing
            ``config_dir``) — its one line, as the command line prints it.
        KeyboardInterrupt: Ctrl-C (the interrupted job's run is closed ``killed`` first).
    """
    from sweeps import state
    from sweeps.sweep import command

    args = (["-m"] if multirun else []) + list(overrides)
    if config_dir is not None:
        if not Path(config_dir).is_dir():
            raise UsageError(f"config_dir={config_dir} is not a folder: give the folder holding your "
                             "model/, dataset/, ... option files")
        args = ["--config-dir", str(Path(config_dir).resolve()), *args]
    with command_state(["sweeps", *args]), contextlib.redirect_stderr(_Tee(sys.stderr)) as err:
        code = call_cli(command.cli)
    if code == 2:
        raise UsageError(err.last_error() or "bad input (see the lines above)")
    if code in (130, 143):
        raise KeyboardInterrupt
    last_sweep, last_job = state.current().last_sweep, state.current().last_job  # the command's own state
    if multirun and last_sweep:
        return sweep_records(last_sweep["tracking_uri"], last_sweep["run_id"])
    if last_job.get("run_id"):
        from sweeps.report.results import single_record

        return [single_record(last_job["tracking_uri"], last_job["run_id"])]
    return []


def call_cli(entry) -> int:
    """Call the command line's ``entry`` (`sweeps.sweep.command.cli`) and return its exit status."""
    try:
        entry()
    except SystemExit as e:
        if isinstance(e.code, str):  # what the interpreter does with sys.exit("message")
            print(e.code, file=sys.stderr)
            return 1
        return 0 if e.code is None else e.code
    return 0


@contextlib.contextmanager
def command_state(argv: list[str]):
    """Run a command of the command line in this process as if it were a process of its own:
    ``sys.argv`` set to ``argv``, a fresh process state (`sweeps.state.begin_command`:
    no outcome counts, last job or sweep); afterwards
    everything a run changes in the process put back — argv, environment, SIGINT/SIGTERM handlers,
    the root logger's handlers and level (Hydra gives each job its own), Hydra's singletons."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from sweeps import state

    saved_argv, saved_env = sys.argv, dict(os.environ)
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    state.begin_command()
    sys.argv = list(argv)
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in saved_handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in saved_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved_level)
        HydraConfig.instance().cfg = None
        GlobalHydra.instance().clear()
        for s, handler in saved_signals.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


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
