"""This process's store processes (`sweeps.tracking.service.connection`): which command lines
start one (`prestart`, before Hydra composes the config), which store it opens
(`start`, once the config is valid), the client a job gets from it (`opened`; 
`prepare`: that client, else one of this process), and
their end (`discard_spare`, `stop`).

A sweep's process (``-m``) whose launcher runs the jobs in it (Hydra's basic launcher, joblib's
at ``n_jobs=1``) opens its parent run, summary and verdict through the store process its jobs
use: it never imports mlflow either. One whose launcher runs them elsewhere gives its store
process back and opens the store itself, for the parent run alone. A pool's worker (joblib,
submitit) and a Slurm job start one at their first job (`start`). A process
that had imported mlflow before keeps its own client for everything: tests that hold a client, a
data-parallel rank.
"""
from __future__ import annotations

import atexit
import logging
import sys
from contextlib import nullcontext
from typing import Any, Callable, ContextManager

from omegaconf import DictConfig

from sweeps.tracking.store import store
from sweeps.tracking.service.client import RemoteClient
from sweeps.tracking.service.connection import StoreService

log = logging.getLogger("sweeps")
_services: dict[str, StoreService] = {}  # tracking URI → its store process (one per URI per process)
_spare: list[StoreService] = []  # started by prestart(), not yet told which store to open
_tried: list[bool] = []  # a store process was started (or tried): start() starts no other one


def prestart(argv: list[str]) -> None:
    """Start a store process now if the command line ``argv`` (``sys.argv[1:]``) runs jobs — one,
    or a sweep's (``-m``); not ``--help``, ``--cfg``, ``--info`` — as read by Hydra's own argument
    parser, so its imports overlap Hydra's composition as well as torch's import. A sweep's
    store process answers its parent run and its jobs when they run in this process (Hydra's
    basic launcher), so their journals are shipped (its follower) off the training's GIL: a writer
    thread at the lowest priority that held the GIL through MLflow's ingestion on a busy machine
    held an epoch up for 1.4–4.4 s (docs/benchmarks.md, "A job beside busy programs"). A launcher that runs jobs elsewhere gives it back (`discard_spare`). Never
    raises."""
    if _spare or _services or "mlflow" in sys.modules or not _runs_jobs(argv):
        return
    service = _launch()
    if service is not None:
        _spare.append(service)


def _launch() -> StoreService | None:
    """A new store process; None where none can start."""
    _tried.append(True)
    try:
        service = StoreService()
    except (OSError, ValueError) as e:  # no fork (memory), no pass_fds (not POSIX)
        log.warning("MLflow: no store process (%s); this process opens the store itself", e)
        return None
    atexit.register(stop)
    return service


def _runs_jobs(argv: list[str]) -> bool:
    import argparse

    from sweeps import compat

    if any(a in ("--version", "-h", "--help", "--hydra-help") for a in argv):  # argparse would print and exit
        return False
    parser = compat.hydra_args_parser()
    parser.exit_on_error = False  # a malformed command line is Hydra's to report, not this check's
    try:
        args, _ = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit):
        return False
    return not (args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
                or args.experimental_rerun)


def discard_spare() -> None:
    """End the store process `prestart` started but no job of this process will use (a
    sweep whose launcher runs its jobs in other processes). Idempotent."""
    while _spare:
        _spare.pop().close()


def start(uri: str, experiment: str) -> None:
    """Have this process's store process open the store at ``uri`` (experiment ``experiment``
    first): the one `prestart` started, or one started now in a process that runs jobs it
    was not started for and has not imported mlflow — a pool worker (joblib, ``gpu_pool``) or a
    Slurm job at its first job; its imports then overlap the job's import of torch, and its jobs'
    MLflow ingestion leaves the training's process as a one-job command's does (in a worker's own
    client, a writer thread at the lowest priority held the GIL through it: docs/benchmarks.md,
    "A job beside busy programs"). Otherwise (tests that hold a client, a second ``uri``) the job opens the
    store itself.

    Raises:
        UsageError: the process had died and this process cannot open the store either.
    """
    if uri in _services:
        return
    if _spare:
        service = _spare.pop()
    elif _services or _tried or "mlflow" in sys.modules or (service := _launch()) is None:
        return  # one store process a process (a failed start is not tried again at every job)
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
    client = answer[0]
    return client, client.run(store.experiment_id, experiment)


def prepare(cfg: DictConfig, hold: Callable[[], ContextManager] = nullcontext) -> tuple[Any, str]:
    """Client for the store and the experiment id, creating DB and experiment if needed: the
    store's own process's client where the command started one for this store
    (`sweeps.tracking.service.connection`: this process then never imports mlflow), else an
    `mlflow.MlflowClient` of this process (`open_store`).

    Raises:
        UsageError: the store cannot be opened or the server does not answer (one line).
    """
    uri = store.tracking_uri(cfg)
    client = opened(uri, str(cfg.mlflow.experiment))
    return client if client is not None else store.open_store(uri, str(cfg.mlflow.experiment), hold)


def stop() -> None:
    """End every store process of this process (at exit; tests). Idempotent."""
    _tried.clear()
    while _spare:
        _spare.pop().close()
    while _services:
        service = _services.popitem()[1]
        service.settle()  # calls posted at a job's end (its last metric values) are done before the process goes
        service.close()
