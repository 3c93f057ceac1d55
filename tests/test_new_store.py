"""A new sqlite store is MLflow's own schema, made once and copied: the same tables, indexes and
revision as MLflow's migrations give, whole or absent after a crash, and a bad template costs
time, never a store. Real sqlite files and MLflow's real migrations."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from sweeps.tracking.store import create
from sweeps.tracking.service import registry


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The template's cache, private to the test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "sweeps"


def _prepare(db: Path):
    cfg = OmegaConf.create({"mlflow": {"tracking_uri": f"sqlite:///{db}", "experiment": "e"}})
    return registry.prepare(cfg)


def _schema(db: Path) -> tuple[list, list]:
    """Every table, index and trigger with its definition's lines (sorted: MLflow's own migrations
    write a recreated table's CHECK constraints in an order that varies run to run), and the
    schema revision."""
    conn = sqlite3.connect(db)
    try:
        objects = sorted((kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                         for kind, name, table, sql in conn.execute(
                             "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_autoindex%'"))
        return objects, conn.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        conn.close()


@pytest.mark.slow  # MLflow's own creation and the template's, both migrating: ~3 s
def test_a_new_store_has_the_schema_mlflow_migrates_to_first_built_then_copied(tmp_path, cache):
    by_mlflow = tmp_path / "mlflow.db"
    MlflowClient(f"sqlite:///{by_mlflow}").search_experiments()  # MLflow's own creation path
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    for db in (first, second):
        db.parent.mkdir()
        client, experiment_id = _prepare(db)
        run = client.create_run(experiment_id)
        client.log_metric(run.info.run_id, "train/loss", 0.5, step=1)
        assert client.get_metric_history(run.info.run_id, "train/loss")[0].value == 0.5
        assert {e.name for e in client.search_experiments()} == {"Default", "e"}
    assert list(cache.glob("mlflow-*.db")), "the first store left no template"
    assert _schema(first) == _schema(by_mlflow) == _schema(second)
    assert not list(tmp_path.glob("*/mlflow.db.creating-*"))


@pytest.fixture(scope="module")
def first_store(tmp_path_factory) -> tuple[Path, Path]:
    """A store made by the template path (MLflow's migrations, ~1 s) and the template it left:
    ``(store, template)``, made once for the module in a cache of its own."""
    folder = tmp_path_factory.mktemp("first")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(folder / "cache"))
        _prepare(folder / "first.db")
        return folder / "first.db", next((folder / "cache" / "sweeps").glob("mlflow-*.db"))


# each damage rebuilds the template (~2 s): one in the default run, the others in the slow step
@pytest.mark.parametrize("damage", [pytest.param("garbage", marks=pytest.mark.slow),
                                    pytest.param("stale revision", marks=pytest.mark.slow), "an experiment in it"])
def test_a_damaged_or_stale_template_is_rebuilt_and_the_store_is_whole(tmp_path, cache, first_store, damage):
    first, built = first_store
    cache.mkdir(parents=True)
    template = cache / built.name
    shutil.copyfile(built, template)
    if damage == "garbage":
        template.write_bytes(b"not a database" * 100)
    else:
        conn = sqlite3.connect(template)
        conn.execute("UPDATE alembic_version SET version_num = '0000'" if damage == "stale revision" else
                     "INSERT INTO experiments (name, lifecycle_stage) VALUES ('leftover', 'active')")
        conn.commit()
        conn.close()
    client, _ = _prepare(tmp_path / "second.db")
    assert {e.name for e in client.search_experiments()} == {"Default", "e"}
    assert _schema(tmp_path / "second.db") == _schema(first) == _schema(template)


def test_a_crash_while_creating_leaves_no_store_and_the_next_start_makes_it_whole(tmp_path, cache, monkeypatch):
    import mlflow.store.db.utils as db_utils

    db = tmp_path / "mlflow.db"
    real = db_utils._initialize_tables

    def dies_midway(engine):
        db_utils.InitialBase.metadata.create_all(engine)  # the first tables, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(db_utils, "_initialize_tables", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        create.ensure(str(db))
    assert not db.exists() and not list(tmp_path.glob("mlflow.db.creating-*"))
    monkeypatch.setattr(db_utils, "_initialize_tables", real)
    db.touch()  # what MLflow's own creation, killed before its first commit, leaves: 0 bytes
    client, experiment_id = _prepare(db)
    assert client.get_experiment(experiment_id).name == "e"


def test_without_a_writable_cache_the_store_is_still_created(tmp_path, monkeypatch):
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-folder"))
    client, experiment_id = _prepare(tmp_path / "mlflow.db")
    assert client.get_experiment(experiment_id).name == "e"
    assert create.template_path() is not None and not create.template_path().exists()
