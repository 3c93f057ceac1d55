"""The one place this project uses private Hydra, MLflow, joblib and CPython internals.

Each function below wraps one internal that has no public equivalent in the pinned releases
(Hydra 1.3, MLflow, joblib); every private module is imported inside the function that needs
it, so ``import sweeps.compat`` costs nothing and imports no Hydra internals, mlflow or torch.
``tests/test_compat.py`` checks each of them against the installed releases: a release that
renames or reshapes one fails there, by name, before a user meets it.

What each use does, and what it saves (figures from the measurements at the call sites):

- `exit_hooks` — CPython's ``atexit._run_exitfuncs``: runs the ``atexit`` hooks once, so
  `sweeps.__main__.exit_now` can end the process with `os._exit` and skip the
  interpreter's teardown: **1.2-1.6 s** saved for a one-epoch tabular job, 0.7 s after a bare
  ``import torch`` (2-core CI machine).
- `stop_process_pool` — joblib's process-pool executor (``joblib.externals`` reusable
  executor's ``_executor``, ``_processes``, ``_executor_manager_thread``): ends the pool's
  workers at the sweep's end, killing one that is stuck. **No start-up saved**: it is a fix for
  a sweep that printed its summary and never exited (joblib's executor issues #348, #437). No public API reaches a reusable pool's workers.
- `compose_once_hooks` — Hydra's ``hydra._internal.hydra.Hydra`` (its ``get_mode``) and
  ``ConfigLoaderImpl._apply_overrides_to_config``: the command's config composed once, not twice
  (`sweeps.sweep.compose_once`): **~0.1-0.35 s** a command, on 2 cores.
- `job_composer_hooks` — ``ConfigLoaderImpl._apply_overrides_to_config`` and
  ``get_overrides_dirname``: a sweep's jobs derived from a family's base
  (`sweeps.sweep.compose`): **~80-200 ms a job** (on 2 cores), so seconds for a sweep of
  tens of jobs.
- `wrap_load_configuration` — wraps ``ConfigLoaderImpl.load_configuration`` so every
  composition fills ``mlflow.experiment`` (`sweeps.config.presets`). **No start-up saved**:
  Hydra 1.3 has no public hook for it (``Callback.on_compose_config`` is not in a 1.3 release).
- `config_repository` — ``ConfigRepository`` and ``ConfigSearchPathImpl``: the running
  command's config repository rebuilt from ``hydra.runtime.config_sources``, to name the file a
  config group option comes from (`sweeps.config.targets`). **No start-up saved**: Hydra
  has no public constructor for either.
- `hydra_args_parser` — ``hydra._internal.utils.get_args_parser``: reads the command line
  as Hydra does, to start the store process before Hydra composes
  (`sweeps.tracking.service.registry`), overlapping its ~2 s of mlflow import and store opening with the composition and
  torch's import. Hydra has no public parser.
- `BASIC_SWEEPER` — the ``_target_`` of Hydra's public ``hydra/sweeper=basic`` config
  option: a name compared, never imported.
- `mlflow_create_tables`, `mlflow_head_revision` — MLflow's ``mlflow.store.db.utils._initialize_tables`` and
  ``_get_latest_schema_revision``: a new sqlite store's migrations run once into a cached
  template (`sweeps.tracking.store.create`): **1.5-5.7 s** of wall (0.7-1.0 s of CPU) saved
  for each new store on a 2-core VM. Without them (a future MLflow) MLflow creates the store
  itself, as before.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # hydra/sweeper=basic: named, not imported
_POOL_MODULE = "joblib.externals.loky.reusable_executor"  # joblib's reusable process pool


def exit_hooks() -> Callable[[], None] | None:
    """CPython's ``atexit._run_exitfuncs`` (runs each hook once, then forgets them); None on an
    interpreter without it."""
    import atexit

    return getattr(atexit, "_run_exitfuncs", None)


def pool_executor() -> Any:
    """joblib's reusable process-pool executor where this process has started one, else None
    (the pool's module is looked up, never imported)."""
    reusable = sys.modules.get(_POOL_MODULE)
    return getattr(reusable, "_executor", None)


def stop_process_pool(exit_s: float) -> None:
    """End the workers of joblib's process pool where this process has one (``hydra/launcher=
    gpu_pool``, ``joblib``): every job is done, so each is told to stop and waited for up to
    ``exit_s``; one still there then is killed, the worker alone — its store process answers what
    it was sent, then exits (`sweeps.tracking.service.server`), where the pool's own kill
    takes the whole process tree. A worker SIGKILLed while it held the pool's queue lock (waiting
    for its next job) leaves the others blocked on that lock for good, and the pool's shutdown at
    the interpreter's exit waits for them (module docstring). Never raises."""
    executor = pool_executor()
    if executor is None:
        return
    workers = list(getattr(executor, "_processes", {}).values())
    manager = getattr(executor, "_executor_manager_thread", None)  # shutdown() forgets it
    try:
        executor.shutdown(wait=False)  # an idle worker takes its stop and exits
        deadline = time.monotonic() + exit_s
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.is_alive():
                os.kill(worker.pid, signal.SIGKILL)
        if manager is not None:
            manager.join(exit_s)  # it sees the workers gone and ends: then no thread holds the exit
    except Exception:  # noqa: BLE001 (the exit goes on: at worst as before)
        pass


def hydra_class() -> Any:
    """Hydra's ``Hydra`` (``hydra._internal.hydra``): the object whose ``get_mode`` composes."""
    from hydra._internal.hydra import Hydra

    return Hydra


def config_loader_class() -> Any:
    """Hydra's ``ConfigLoaderImpl`` (``hydra._internal.config_loader_impl``)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    return ConfigLoaderImpl


def apply_overrides(overrides: list, cfg: Any) -> None:
    """Hydra's ``ConfigLoaderImpl._apply_overrides_to_config(overrides, cfg)``: parsed overrides
    applied to ``cfg`` in order, as the last step of a composition."""
    config_loader_class()._apply_overrides_to_config(overrides, cfg)


def compose_once_hooks() -> tuple[Any, Callable[[list, Any], None]]:
    """``(Hydra, apply_overrides)`` for `sweeps.sweep.compose_once`."""
    return hydra_class(), apply_overrides


def job_composer_hooks() -> tuple[Callable[[list, Any], None], Callable[..., str]]:
    """``(apply_overrides, get_overrides_dirname)`` for `sweeps.sweep.compose.JobComposer`:
    Hydra's own ``_apply_overrides_to_config`` and ``get_overrides_dirname``."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

    return ConfigLoaderImpl._apply_overrides_to_config, get_overrides_dirname


def wrap_load_configuration(after: Callable[[Any], None], marker: str) -> None:
    """Wrap ``ConfigLoaderImpl.load_configuration`` so ``after(cfg)`` runs on each composed
    config; the wrapper carries the attribute ``marker`` (True) and ``__wrapped__``. Idempotent
    per ``marker``."""
    loader = config_loader_class()
    load = loader.load_configuration
    if getattr(load, marker, False):
        return

    def load_configuration(self, *args, **kwargs):
        cfg = load(self, *args, **kwargs)
        after(cfg)
        return cfg

    setattr(load_configuration, marker, True)
    load_configuration.__wrapped__ = load
    loader.load_configuration = load_configuration


def config_repository(sources: list[tuple[str, str]]) -> Any:
    """Hydra's ``ConfigRepository`` over the search path ``sources`` (``(provider, "schema://path")``
    pairs, in order), its config sources registered first."""
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra.core.plugins import Plugins

    Plugins.instance()  # registers Hydra's config sources (file://, pkg://, structured://)
    path = ConfigSearchPathImpl()
    for provider, where in sources:
        path.append(provider, where)
    return ConfigRepository(path)


def hydra_args_parser() -> Any:
    """Hydra's own ``argparse`` parser of its command line (``hydra._internal.utils.get_args_parser``)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def mlflow_create_tables() -> Callable[[Any], None] | None:
    """MLflow's ``mlflow.store.db.utils._initialize_tables(engine)`` (every migration, to head);
    None on an MLflow without it."""
    try:
        from mlflow.store.db.utils import _initialize_tables
    except ImportError:
        return None
    return _initialize_tables


def mlflow_head_revision() -> Callable[[], str] | None:
    """MLflow's ``mlflow.store.db.utils._get_latest_schema_revision()``; None on an MLflow without it."""
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision
    except ImportError:
        return None
    return _get_latest_schema_revision
