"""``python -m sweeps [-m] key=value ...``: compose the config with Hydra and run the job(s).

Lazy start: this module and what it imports before a job starts (Hydra, the config package, the
sweep callback) load neither torch, torchvision nor mlflow, so ``--help``, ``--cfg job``, a
composition error and a bad value answer in about a second; the job module (and with it torch)
is imported once a job's values are checked (``scripts/bench_startup.py`` times it), while the
MLflow store opens in a process of its own (`sweeps.tracking.service.connection`)."""
from __future__ import annotations

import logging
import os
import re
import sys

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig

from sweeps import config, names, state
from sweeps.config.checks import check_added_keys, check_importable
from sweeps.errors import UsageError
from sweeps.sweep import callback as sweep
from sweeps.sweep.compose_once import composed_once
from sweeps.sweep.check import check_data_root, one_line, unknown_key_line
from sweeps.job import outcome, parent_run, signals
from sweeps.tracking.store import http_policy, store
from sweeps.tracking.service import registry

config.register()


@hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra's task function: one job. Bad input stops the whole sweep with one line — except in a
    Slurm job, where it ends that job alone: the sweep's process records it ``error`` and keeps its
    parent run (`sweeps.launchers.slurm.launcher`): the launcher says (`sweeps.launchers`)."""
    try:
        config.complete(cfg)  # sweeps' own keys of the _target_ groups filled, options named (in place)
        if not parent_run.get("checked_jobs"):  # a sweep checked each job's values before its first began
            config.validate(cfg)  # before torch is imported: a bad value answers at once
            _check_names(cfg)  # before the store process opens the store: nothing is created for bad input
            if not _data_on_another_node():
                check_data_root(cfg.dataset)  # files this machine must read: missing ones said before anything starts
        # the store process started by cli() opens the store on the other core while torch imports here
        registry.start(store.tracking_uri(cfg), str(cfg.mlflow.experiment))
        with signals.held():  # see _import_job
            lifecycle = _import_job()
        signals.stop_if_received()
        from sweeps import launchers

        return lifecycle.run(cfg, launchers.current())
    except UsageError as e:
        from sweeps import launchers

        # a Slurm job's process: sweep.stop here would close the sweep's parent run from a job's process
        if launchers.current().ends_job_alone():
            print(f"sweeps: error: {e}", file=sys.stderr, flush=True)
            raise
        sweep.stop(e)


def _data_on_another_node() -> bool:
    """Whether this process is a Slurm job of a sweep, whose data lives on its own node (checked
    there by the job itself)."""
    from sweeps import launchers

    return launchers.current().ends_job_alone()


def _check_names(cfg: DictConfig) -> None:
    """The job's ``_target_`` modules exist (`sweeps.config.checks.check_importable`) and
    its ``+key=value`` overrides add no near-miss of a key (`check_added_keys`).

    Raises:
        UsageError: one line naming the option or key and what would work.
    """
    from hydra.core.hydra_config import HydraConfig

    check_importable(cfg)
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        check_added_keys(cfg, list(hydra_cfg.overrides.task), list(hydra_cfg.runtime.choices))


class _SaidBySweeps(logging.Filter):
    """Drops Hydra's own lines for a ``_target_`` that does not import (``hydra.utils.get_object``
    logs "Error getting object at ..." over three lines, then raises): sweeps says it in one
    line (`sweeps.config.targets.locate`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Error getting object at ")


logging.getLogger("hydra.utils").addFilter(_SaidBySweeps())


def composition_line(exc: BaseException, argv: list[str]) -> str:
    """The one line a composition error of the command ``argv`` prints after ``sweeps: error:``:
    for a key the config lacks, the nearest keys (`sweeps.sweep.check.unknown_key_line`,
    read from the config composed again without that key, `_compose`); else Hydra's message
    in one line (`sweeps.sweep.check.one_line`)."""
    config_dir, config_name, overrides = _command_line(argv)
    line = unknown_key_line(exc, overrides, lambda rest: _compose(config_dir, config_name, rest))
    return line or one_line(exc)


def _command_line(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """``(--config-dir, --config-name, the overrides)`` of a ``python -m sweeps`` command line
    (``-cd``/``-cn`` and the ``--flag=value`` forms too; other flags dropped)."""
    config_dir = config_name = None
    overrides: list[str] = []
    items = iter(argv)
    for item in items:
        flag, eq, value = item.partition("=")
        if flag in ("--config-dir", "-cd", "--config-name", "-cn"):
            value = value if eq else next(items, "")
            if flag in ("--config-dir", "-cd"):
                config_dir = value
            else:
                config_name = value
        elif not item.startswith("-"):
            overrides.append(item)
    return config_dir, config_name, overrides


def _compose(config_dir: str | None, config_name: str | None, overrides: list[str]) -> DictConfig:
    """The command's config composed afresh with Hydra's compose API: ``overrides`` with each
    sweep (``batch=16,64``) at its first value, ``config_dir`` (the user's ``--config-dir``) on
    the search path."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    single = []
    for text, parsed in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if parsed.is_sweep_override():
            text = f"{parsed.get_key_element()}={next(iter(parsed.sweep_string_iterator()))}"
        single.append(text)
    if config_dir is not None:
        single.append(f"hydra.searchpath=[file://{os.path.abspath(config_dir)}]")
    GlobalHydra.instance().clear()  # the failed command's Hydra is done with
    with initialize_config_dir(version_base="1.3", config_dir=str(config.CONF_DIR)):
        return compose(config_name or "config", overrides=single)


def _import_job():
    """The job module, and with it torch and the training code (a few seconds, once per process).
    A signal meanwhile is noted and raised once the imports are done (by the caller, which holds
    signals for this call), not raised into them: importlib runs finalizers (its module locks'
    weakref callbacks), and an exception raised inside one is printed ("Exception ignored in …")
    and dropped — the process went on as if no Ctrl-C had come (scripts/chaos.py, docs/benchmarks.md)."""
    from sweeps.job import lifecycle

    return lifecycle


def interrupted_message(signal_name: str) -> str:
    """What stderr says after a signal: the same as the MLflow runs say, and whether a rerun has
    anything left to do."""
    last = state.current().last_job
    if last.get("outcome") == names.KILLED:
        return f"sweeps: interrupted by {signal_name}: job {last['name']!r} is KILLED; rerun to resume it"
    if last:
        planned = state.current().planned_jobs  # None: a single run; 0: a sweep whose size is not known
        if planned is not None and (planned == 0 or outcome.jobs_ended() < planned):
            return (f"sweeps: interrupted by {signal_name} after job {last['name']!r} ended {last['outcome']}; "
                    "the sweep is KILLED; rerun it to run the remaining jobs")
        return (f"sweeps: interrupted by {signal_name} after job {last['name']!r} ended {last['outcome']}; "
                "no job was left to run")
    return f"sweeps: interrupted by {signal_name} before any job ran"


def _interrupted(name: str) -> None:
    """Close the sweep's parent run KILLED, say so in one line, exit 130 (SIGINT) or 143 (SIGTERM).
    Signals arriving meanwhile are only noted (`sweeps.job.signals`)."""
    with signals.held():
        sweep.interrupted(name)
        print(interrupted_message(name), file=sys.stderr)
        logging.shutdown()
    signals.ignore()  # the interpreter's shutdown resets handlers to the default: a late signal would kill it (-2)
    sys.exit(143 if name == "SIGTERM" else 130)


def _job_process_died(exc: BaseException) -> None:
    """A job's own process (``hydra/launcher=gpu_pool``: joblib's workers) died without a word —
    SIGKILL, the kernel's OOM killer: close the sweep's parent run KILLED, say so in one line, exit
    1. The job's run, left RUNNING by its dead owner, is closed ``killed`` by the next start (its
    journal replayed first), which resumes it."""
    codes = re.search(r"exit codes of the workers are \{(.*?)\}", str(exc))
    # joblib's pool names the dead worker's signal when it has reaped it by then, else the dict is empty
    how = f"a job process died ({codes.group(1) if codes and codes.group(1).strip() else 'killed'})"
    with signals.held():
        sweep.interrupted(how)
        print(f"sweeps: error: {how}; the sweep is KILLED; rerun it to resume that job and run the remaining ones",
              file=sys.stderr)
        logging.shutdown()
    signals.ignore()
    sys.exit(1)


def cli(early: list[int] | None = None, process_exits: bool = False) -> None:
    """Entry point: exit 1 when any job ended in ``error`` (after every job has run); exit 2 with
    one line for bad input (a composition error included); on SIGINT or SIGTERM close the runs as
    KILLED, flush the logs and exit 130 or 143 — also for a signal in ``early`` (noted while this
    module was importing, `sweeps.__main__`; the list is read after this call's own handlers
    are in, so none is lost). ``process_exits``: the process ends with this call (``python -m
    sweeps``; `sweeps.state.ProcessState.exits_after_command`). Each call starts from a
    fresh process state (`sweeps.state.begin_command`): no counts, last job or signals of an
    earlier command."""
    state.begin_command().exits_after_command = process_exits
    http_policy.bound_http_retries()  # before any helper process starts: they inherit it
    signals.install()
    if early:  # nothing has started: no parent run to close, the one line and 130/143
        _interrupted(signals.name(early[0]))
    with signals.held():  # a signal raised inside Popen's fork would leave the store process half-started
        registry.prestart(sys.argv[1:])  # one job: its store process imports mlflow while Hydra composes
    if signals.received():
        _interrupted(signals.name(signals.received()[0]))
    full_error = bool(os.environ.get("HYDRA_FULL_ERROR"))  # the user asked for Hydra's traceback
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing its message and exiting 1
    try:
        with composed_once():  # Hydra composes the command's config once, not twice
            main()
        signals.note_only()  # the sweep returned: a late signal (a Ctrl-C storm's tail) is noted, never raised
    except HydraException as e:  # composition: a typo, a wrong type, an unknown option
        if signals.received():  # a signal raised inside composition and swallowed there broke it
            _interrupted(signals.name(signals.received()[0]))
        if full_error:
            raise
        # one line, exit 2; a multirun's parent run (no job yet) removed
        sweep.stop(UsageError(composition_line(e, sys.argv[1:])))
    except SystemExit as e:  # Hydra's own argument errors exit 1 (or 2 from argparse)
        if e.code == 1 and not state.current().last_job:  # before any job ran: bad input, the documented 2
            sys.exit(2)
        raise
    except KeyboardInterrupt as e:  # Terminated too
        _interrupted(getattr(e, "signal_name", "SIGINT"))
    except Exception as e:
        if type(e).__name__ != "TerminatedWorkerError":  # joblib's (not imported here: the start stays light)
            raise
        _job_process_died(e)
    if signals.received():  # noted where it could not be raised (or swallowed by a library): still a stop
        _interrupted(signals.name(signals.received()[0]))
    status = outcome.exit_status()
    signals.ignore()  # decided: the interpreter's shutdown must not die of a late signal (-2; chaos.py seed 2311)
    sys.exit(status)
