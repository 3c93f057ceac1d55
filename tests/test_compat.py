"""Each private Hydra / MLflow / joblib / CPython internal that :mod:`sweeps.compat` fences is
still there, with the parameters compat relies on: a release that changes one fails here, by the
behaviour it would break, not in a user's sweep."""
from __future__ import annotations

import inspect
import subprocess
import sys

from omegaconf import OmegaConf

from sweeps import compat


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def test_importing_compat_loads_no_private_module_nor_mlflow_nor_torch():
    code = ("import sys, sweeps.compat; bad = [m for m in sys.modules if m.startswith(('hydra._internal', "
            "'mlflow', 'torch', 'joblib'))]; print(bad); sys.exit(bool(bad))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_process_ends_without_teardown_after_running_atexit_hooks_once():
    hooks = compat.exit_hooks()
    assert callable(hooks), "CPython's atexit._run_exitfuncs is gone: exit_now falls back to a full teardown"
    assert not _has_signature(hooks) or _params(hooks) == []
    code = ("import atexit, os; from sweeps import compat; atexit.register(print, 'hook'); "
            "compat.exit_hooks()(); compat.exit_hooks()(); os._exit(0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "hook\n"


def _has_signature(fn) -> bool:
    try:
        inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return True


def test_a_stuck_pool_worker_cannot_hold_the_sweeps_exit():
    from joblib.externals.loky import get_reusable_executor, reusable_executor

    assert compat._POOL_MODULE == reusable_executor.__name__
    assert hasattr(reusable_executor, "_executor")
    executor = get_reusable_executor(max_workers=1)
    try:
        executor.submit(int, 1).result(timeout=60)
        assert compat.pool_executor() is executor
        assert isinstance(executor._processes, dict) and executor._processes
        assert hasattr(executor, "_executor_manager_thread")
        workers = list(executor._processes.values())
        compat.stop_process_pool(5.0)
        assert not any(w.is_alive() for w in workers)
    finally:
        executor.shutdown(wait=True)


def test_the_command_config_is_composed_once():
    Hydra, apply = compat.compose_once_hooks()
    assert _params(Hydra.get_mode) == ["config_name", "overrides"]
    loader = compat.config_loader_class()
    assert _params(loader.load_configuration) == ["config_name", "overrides", "run_mode", "from_shell",
                                                  "validate_sweep_overrides"]
    assert _params(loader._apply_overrides_to_config) == ["overrides", "cfg"]
    assert hasattr(loader, "validate_sweep_overrides_legal")
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = OmegaConf.create({"a": 1, "b": {"c": 2}})
    apply(OverridesParser.create().parse_overrides(["a=3", "b.c=4"]), cfg)
    assert OmegaConf.to_container(cfg) == {"a": 3, "b": {"c": 4}}


def test_a_sweeps_plain_value_jobs_are_derived_as_hydra_composes_them():
    apply, dirname = compat.job_composer_hooks()
    assert _params(apply) == ["overrides", "cfg"]
    assert _params(dirname) == ["overrides", "exclude_keys", "item_sep", "kv_sep"]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(["seed=1", "batch=2"])
    assert dirname(overrides=parsed, kv_sep="=", item_sep=",", exclude_keys=[]) == "batch=2,seed=1"


def test_every_composition_names_its_mlflow_experiment():
    loader = compat.config_loader_class()
    seen = []
    real = loader.load_configuration
    try:
        compat.wrap_load_configuration(seen.append, "test_compat_marker")
        wrapped = loader.load_configuration
        assert wrapped.__wrapped__ is real and wrapped.test_compat_marker
        compat.wrap_load_configuration(seen.append, "test_compat_marker")  # idempotent
        assert loader.load_configuration is wrapped
    finally:
        loader.load_configuration = real
    from sweeps.config import presets

    presets.name_the_experiment()
    assert getattr(loader.load_configuration, "fills_experiment", False)


def test_a_config_group_option_is_traced_to_its_file(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mlp.yaml").write_text("width: 3\n")
    repo = compat.config_repository([("test", f"file://{tmp_path}")])
    found = repo.load_config("model/mlp")
    assert found is not None and found.config.width == 3
    assert str(found.path).split("://", 1)[-1] == str(tmp_path)


def test_the_store_process_starts_only_for_command_lines_that_run_jobs():
    parser = compat.hydra_args_parser()
    args, _ = parser.parse_known_args(["--cfg", "job", "batch=1"])
    for name in ("help", "hydra_help", "cfg", "info", "shell_completion", "experimental_rerun"):
        assert hasattr(args, name), name
    assert args.cfg == "job"
    from sweeps.tracking.service import registry

    assert registry._runs_jobs(["batch=1"]) and not registry._runs_jobs(["--cfg", "job"])


def test_the_basic_sweeper_is_named_by_hydras_public_config():
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    assert f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}" == compat.BASIC_SWEEPER


def test_a_new_store_is_created_from_mlflows_own_migrations(tmp_path):
    create_tables, head = compat.mlflow_create_tables(), compat.mlflow_head_revision()
    assert create_tables is not None and head is not None, "MLflow's schema helpers moved: new stores migrate slowly"
    assert _params(create_tables) == ["engine"] and _params(head) == []
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        create_tables(engine)
        with engine.connect() as conn:
            version = conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()
    assert version == head()
