"""Creating a missing sqlite store: MLflow's schema, whole or not at all, in a fraction of the time.

MLflow creates a missing sqlite DB at a client's first use by running its ~70 Alembic migrations
against it, each committed (and synced to disk) on its own: ~1,000 ``fdatasync`` calls and
0.7-1.0 s of CPU, 1.5-5.7 s of wall on a 2-core machine (docs/benchmarks.md). A user who
starts a one-epoch job in a new folder waits for that every time. Here the same migrations
(MLflow's own migration helper, `sweeps.compat.mlflow_create_tables`) run once on a scratch file
with ``synchronous=OFF`` and an in-memory rollback journal, and the result — an empty store at
MLflow's head revision, no experiment in it (MLflow adds "Default" when a client first opens
it) — is kept as a template in the user's cache, keyed by the MLflow and SQLAlchemy versions. A
new store is a copy of the template, synced and renamed into place: a crash at any moment leaves
either no DB (the next start creates it) or a whole one, never a half-migrated file.

Callers hold the store's creation lock (`sweeps.tracking.service.registry.prepare`); without MLflow's
private helper (a future MLflow), MLflow creates the store itself as before.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import sqlite3
from pathlib import Path

log = logging.getLogger("sweeps")


def cache_dir() -> Path:
    """Where the template lives: ``$XDG_CACHE_HOME/sweeps``, else ``~/.cache/sweeps``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sweeps"


def template_path() -> Path | None:
    """The template for this MLflow and SQLAlchemy (their migrations define its schema); None
    without a home folder to keep it in."""
    import mlflow
    import sqlalchemy

    try:
        return cache_dir() / f"mlflow-{mlflow.__version__}-sqlalchemy-{sqlalchemy.__version__}.db"
    except RuntimeError:  # Path.home(): no $HOME and no passwd entry
        return None


def ensure(path: str) -> bool:
    """Create the sqlite store ``path`` if it is missing or empty (a crash before MLflow's first
    write leaves 0 bytes); True if this call created it. Nothing is left behind on failure.

    Raises:
        OSError: the folder cannot be written (full, read-only).
        sqlite3.Error: the new file cannot be written as a database.
    """
    if path in ("", ":memory:") or (os.path.exists(path) and os.path.getsize(path) > 0):
        return False
    scratch = f"{path}.creating-{os.getpid()}"
    try:
        if not _copy_template(scratch) and not _migrate(scratch):
            return False  # no MLflow helper: MLflow creates it at the first client's use
        _sync(scratch)
        os.replace(scratch, path)
        _sync(os.path.dirname(os.path.abspath(path)))
        return True
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def _copy_template(dest: str) -> bool:
    """Copy a valid template to ``dest``; False when there is none (or it is bad: then removed)."""
    template = template_path()
    if template is None or not template.is_file():
        return False
    if not _valid(template):
        log.debug("stale MLflow store template %s removed", template)
        template.unlink(missing_ok=True)
        return False
    shutil.copyfile(template, dest)
    return True


def _valid(db: Path) -> bool:
    """Whether ``db`` is a whole sqlite file at MLflow's head schema revision with no experiment
    (False, too, when this MLflow lacks the helper that names the head)."""
    head = _head_revision()
    if head is None:
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            empty = conn.execute("SELECT count(*) FROM experiments").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return ok and empty and revision is not None and revision[0] == head


@functools.lru_cache(maxsize=1)
def _head_revision() -> str | None:
    """MLflow's head schema revision, None without the helper that names it. Asked once a
    process: MLflow reads its ~70 migration scripts for it (~40 ms), and it changes only with the
    installed MLflow."""
    from sweeps import compat

    head = compat.mlflow_head_revision()
    return None if head is None else head()


def _migrate(dest: str) -> bool:
    """Run MLflow's migrations on a new file ``dest`` without a sync per migration, and keep a
    copy as the template (best effort: an unwritable cache only costs the next store the same
    migrations). False when MLflow lacks the helper."""
    from sweeps import compat

    initialize_tables = compat.mlflow_create_tables()
    if initialize_tables is None:
        return False
    import sqlalchemy
    from sqlalchemy import event

    engine = sqlalchemy.create_engine(f"sqlite:///{dest}")

    @event.listens_for(engine, "connect")
    def _fast(dbapi_connection, _record) -> None:  # the file is renamed into place only when whole
        dbapi_connection.execute("PRAGMA synchronous = OFF")
        dbapi_connection.execute("PRAGMA journal_mode = MEMORY")

    try:
        initialize_tables(engine)
    finally:
        engine.dispose()
    _keep_template(dest)
    return True


def _keep_template(src: str) -> None:
    template = template_path()
    if template is None:
        return
    scratch = template.with_name(f"{template.name}.{os.getpid()}")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, scratch)
        _sync(str(scratch))
        os.replace(scratch, template)
    except OSError as e:
        log.debug("no MLflow store template kept in %s: %s", template.parent, e)
        try:
            scratch.unlink(missing_ok=True)
        except OSError:  # the folder itself is what failed
            pass


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
