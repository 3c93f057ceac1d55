"""The MLflow store: where it is, opening it (and the experiment) safely, finding a sweep's runs.

Everything goes through an explicit `mlflow.MlflowClient` (no global "active run"), so
jobs that run one after another in one process never inherit each other's state. Importing this
module loads nothing heavy (MLflow, SQLAlchemy and requests are imported where a store is opened):
the command line answers ``--help`` and bad input without them.
"""
from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from omegaconf import DictConfig, OmegaConf

from sweeps import names
from sweeps.errors import UsageError, brief
from sweeps.tracking.store import create as new_store

if TYPE_CHECKING:
    from mlflow import MlflowClient

PARENT_RUN_ENV = "SWEEPS_PARENT_RUN_ID"  # set by the sweep callback, read by each job
SWEPT_KEYS_ENV = "SWEEPS_SWEPT_KEYS"  # the keys a sweep varies, comma-separated (job names)
SWEEP_URI_ENV = "SWEEPS_SWEEP_TRACKING_URI"  # the store holding the parent run

for _name in ("alembic", "mlflow"):  # their INFO lines (DB migrations) would drown the epoch table
    logging.getLogger(_name).setLevel(logging.WARNING)


def tracking_uri(cfg: DictConfig) -> str:
    """``mlflow.tracking_uri`` of ``cfg``, see `resolve_uri`."""
    return resolve_uri(cfg.mlflow.tracking_uri)


def resolve_uri(explicit: str | None = None, create: bool = True) -> str:
    """``explicit``, else ``$MLFLOW_TRACKING_URI``, else sqlite in ./mlruns/mlflow.db (the folder
    made where ``create``: a job's store, not a reader's).

    Raises:
        UsageError: the default ./mlruns directory cannot be created.
    """
    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    mlruns = Path.cwd() / "mlruns"
    if not create:
        return f"sqlite:///{mlruns / 'mlflow.db'}"
    try:
        mlruns.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {mlruns} ({e.strerror}): run from a writable directory or "
                         "set mlflow.tracking_uri=sqlite:////writable/path/mlflow.db") from None
    return f"sqlite:///{mlruns / 'mlflow.db'}"


SQLITE_BUSY_TIMEOUT_MS = 120_000  # how long an sqlite write waits for another process's lock
_quiet: list[bool] = []


def quiet_sqlite() -> None:
    """Make an sqlite store shared by many processes (the default ./mlruns, a sweep's jobs on one
    machine) wait for its lock instead of failing: every sqlite connection this process opens
    through SQLAlchemy (MLflow's store) gets ``PRAGMA busy_timeout`` of
    `SQLITE_BUSY_TIMEOUT_MS` when it opens (pysqlite's default is 5 s; six processes
    logging at once on two cores waited longer). MLflow's SQL store then sets 20 s on every session
    it makes (``mlflow/store/db/utils.py``, ``make_managed_session``), so a store call waits at most
    20 s for the lock and then raises "database is locked": the run writer retries such a write
    (`RETRIES`), says so once, and replays what is still refused from
    the journal — a lock held 30 s by another process costs the job its retries, not its epochs.
    MLflow's own ERROR log with a traceback for each "database is locked" is silenced. (No WAL: it is unsafe on the network filesystems a Slurm
    cluster may keep ./mlruns on.) Idempotent."""
    if _quiet:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _busy_timeout(dbapi_connection, _record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")

    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    _quiet.append(True)


def open_store(uri: str, experiment: str, hold: Callable[[], ContextManager] = nullcontext) -> tuple[MlflowClient, str]:
    """An `mlflow.MlflowClient` on ``uri`` and the id of ``experiment`` there, creating DB
    and experiment if needed.

    A brand-new sqlite DB migrated by several processes at once fails, so creation is serialized
    by a lock file beside the DB; a tracking server is asked for ``/health`` first, so an
    unreachable one fails in seconds instead of MLflow's minutes of retries. ``hold`` (the
    launcher's `sweeps.launch.signals.held`) wraps the sqlite store's opening under that
    lock: MLflow's migration cut short by a signal leaves a DB no later start opens ("table …
    already exists"), so a signal then waits until the store is whole.

    Raises:
        UsageError: the store cannot be opened or the server does not answer (one line).
    """
    from filelock import FileLock, Timeout
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    quiet_sqlite()
    if uri.startswith(("http://", "https://")):
        _check_server(uri)
    try:
        path = _sqlite_path(uri)
        if path:
            with FileLock(path + ".lock", timeout=CREATE_LOCK_TIMEOUT_S), hold():
                new_store.ensure(path)  # a missing DB: a copy of the migrated template (seconds saved)
                opened = _experiment(MlflowClient(uri), experiment)
            _check_writable(path)
            return opened
        return _experiment(MlflowClient(uri), experiment)
    except (MlflowException, OSError, SQLAlchemyError, sqlite3.Error, Timeout) as e:
        detail = brief(e)
        hint = ("it is not an sqlite database: move it aside" if "not a database" in detail else
                "free some space" if "full" in detail or "No space" in detail else "check the path is writable")
        raise UsageError(f"cannot open the MLflow store {uri} ({type(e).__name__}: {detail}): {hint}, or set "
                         "mlflow.tracking_uri=...") from None


CREATE_LOCK_TIMEOUT_S = 120  # how long opening an sqlite store waits for another process creating it


def _sqlite_path(uri: str) -> str | None:
    """The file of an ``sqlite:///`` URI (query string dropped), else None."""
    return uri[len("sqlite:///"):].split("?", 1)[0] if uri.startswith("sqlite:///") else None


def open_client(uri: str) -> MlflowClient:
    """A client on the store at ``uri`` for reading it (reports, notebooks, tests) while jobs may
    be creating it: MLflow creates a missing sqlite DB and migrates it on first use, and two
    processes doing that at once leave one of them with "table … already exists" — so a reader
    first opens an sqlite store under the same lock file `prepare` creates it under.

    A missing folder is a mistyped path, not a store being made (jobs make ./mlruns before the
    store in it): it is refused rather than created empty.

    Raises:
        LookupError: the sqlite store's folder does not exist (one line naming it).
        filelock.Timeout: another process held the lock for `CREATE_LOCK_TIMEOUT_S`.
        OSError, sqlite3.Error: a missing DB cannot be created there (`new_store.ensure`).
    """
    from filelock import FileLock
    from mlflow import MlflowClient

    quiet_sqlite()
    path = _sqlite_path(uri)
    if not path:
        return MlflowClient(uri)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise LookupError(f"no MLflow store at {uri}: the folder {folder} does not exist; give the store's "
                          "path (--tracking-uri, $MLFLOW_TRACKING_URI) or run from the folder the sweeps ran in "
                          "(./mlruns)")
    with FileLock(path + ".lock", timeout=CREATE_LOCK_TIMEOUT_S):
        new_store.ensure(path)
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)  # creates and migrates a missing DB, whole
    return client


def _check_writable(path: str) -> None:
    """Write to the sqlite file and roll back: a read-only file (or mount) and a full disk are
    found here, in one line, instead of in a screen of SQLAlchemy tracebacks at the first run.
    Reading alone would not tell: sqlite opens a read-only file read-only without complaint.

    Raises:
        sqlite3.OperationalError: ``attempt to write a readonly database``, ``database or disk is full``.
    """
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE _sweeps_write_probe (x)")
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def _check_server(uri: str, timeout_s: float = 5.0) -> None:
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s).raise_for_status()
    except requests.RequestException as e:
        raise UsageError(f"the MLflow tracking server at {uri} does not answer ({type(e).__name__}); start it "
                         "(mlflow server ...) or set mlflow.tracking_uri / MLFLOW_TRACKING_URI") from None


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created if missing (another process may create it meanwhile)."""
    return _experiment(client, name)[1]


def _experiment(client: MlflowClient, name: str) -> tuple[MlflowClient, str]:
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return client, exp.experiment_id
    try:
        return client, client.create_experiment(name)
    except MlflowException:  # another process created it between our lookup and create
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return client, exp.experiment_id


def flatten(cfg: DictConfig, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """The resolved config as ``{dotted.key: str(value)}`` (lists kept whole, e.g. ``[64, 128]``),
    without the top-level nodes ``skip``, and without an lr that is not set
    (`sweeps.names.LR_PARAMS` at null: a ``base_lr`` job logs no ``optimizer.lr``)."""
    out: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
            return
        if node is None and prefix[:-1] in names.LR_PARAMS:
            return
        out[prefix[:-1]] = str(node)[:names.MAX_PARAM_VAL_LENGTH]

    data = OmegaConf.to_container(cfg, resolve=True)
    walk({k: v for k, v in data.items() if k not in skip}, "")
    return out


def deleted(client: MlflowClient, run_id: str) -> bool:
    """Whether run ``run_id`` is deleted (the MLflow UI's delete, ``mlflow runs delete``, its
    experiment deleted): MLflow then refuses every write to it until ``mlflow runs restore``.
    False where the store does not answer. One call; ``client`` as `open_store` gives it
    or the store process's."""
    try:
        return client.get_run(run_id).info.lifecycle_stage == "deleted"
    except Exception:  # noqa: BLE001 (a store away or busy says nothing about the run)
        return False


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> list:
    """The job runs of a sweep, oldest first."""
    return client.search_runs([experiment_id], f"tags.`{names.PARENT_RUN_TAG}` = '{parent_run_id}'",
                              order_by=["attributes.start_time ASC"], max_results=10_000)

