"""A store or a disk that cannot take writes: one line before any job runs when the store is
corrupt, read-only or full; a checkpoint folder that fills up mid-job costs the checkpoints,
not the measurement. Real file systems: a small tmpfs and a read-only bind mount (root only —
the tests skip with one line elsewhere)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import runs, store
from sweeps.errors import UsageError

TINY = ["model=mlp_tabular", "dataset=diabetes", "epochs=3", "device=cpu", "telemetry.interval_s=0"]


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount here ({proc.stderr.strip() or 'mount failed'}; needs root)")


@pytest.fixture
def mounts():
    """Mount points made by a test, unmounted afterwards (newest first)."""
    made: list[Path] = []
    yield made
    for point in reversed(made):
        subprocess.run(["umount", str(point)], capture_output=True)


def _full_tmpfs(point: Path, mounts: list, size: str = "256k", keep: Path | None = None) -> None:
    """A tmpfs of ``size`` at ``point`` holding ``keep`` (a file copied in first), then filled up."""
    saved = keep.read_bytes() if keep is not None else None
    point.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point))
    mounts.append(point)
    if saved is not None:
        (point / keep.name).write_bytes(saved)
    try:
        with open(point / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass


def _line(in_process, overrides) -> str:
    with pytest.raises(UsageError) as caught:
        in_process(overrides)
    line = str(caught.value)
    assert "\n" not in line
    return line


def test_corrupt_store(tmp_path, in_process):
    (tmp_path / "mlruns").mkdir(exist_ok=True)
    (tmp_path / "mlruns" / "mlflow.db").write_bytes(b"not sqlite " * 1000)
    line = _line(in_process, TINY)
    assert "mlflow.db" in line and "not an sqlite database" in line and "mlflow.tracking_uri" in line


@pytest.mark.slow  # jobs against a read-only mount of the store: ~3.5 s
def test_read_only_store(tmp_path, in_process, mounts):
    in_process(TINY)  # a store with one run in it
    db = tmp_path / "mlruns" / "mlflow.db"
    _mount("--bind", str(db), str(db))
    mounts.append(db)
    _mount("-o", "remount,ro,bind", str(db))
    line = _line(in_process, [*TINY, "epochs=2"])
    assert "mlflow.db" in line and "readonly" in line and "writable" in line


def test_full_store(tmp_path, in_process, mounts):
    in_process(TINY)
    mlruns = tmp_path / "mlruns"
    db = mlruns / "mlflow.db"
    shutil.copy(db, tmp_path / "mlflow.db")
    _full_tmpfs(mlruns, mounts, size="2m", keep=tmp_path / "mlflow.db")
    line = _line(in_process, [*TINY, "epochs=2"])
    assert "mlflow.db" in line and "full" in line and "free some space" in line


def test_full_checkpoint_disk_costs_the_checkpoints_not_the_job(tmp_path, in_process, mounts):
    _full_tmpfs(tmp_path / "ck", mounts)
    assert in_process([*TINY, "checkpoint.dir=ck", "checkpoint.every_epochs=1"]) == "ok"
    (run,) = runs(tmp_path)
    assert run.data.tags["sweeps.checkpoints"].startswith("off: cannot ") and "ck" in run.data.tags["sweeps.checkpoints"]
    steps = [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == [1, 2, 3]  # every epoch measured and logged


@pytest.mark.parametrize("floats", [10, 100_000])  # within torch.save's buffer (OSError) and past it (RuntimeError)
def test_a_checkpoint_that_meets_a_full_disk_switches_saving_off(tmp_path, mounts, floats):
    import torch

    from sweeps.train.checkpoint import Checkpoints

    _full_tmpfs(tmp_path / "ck", mounts)
    ckpt = Checkpoints(tmp_path / "ck" / "run", every_epochs=1)
    assert ckpt.save(1, {"w": torch.zeros(floats)}) is None
    assert "No space left on device" in ckpt.off and not ckpt.due(2)
    assert not list((tmp_path / "ck" / "run").glob(".tmp-*"))  # no partial file left behind


def test_a_checkpoint_folder_made_immutable_mid_save_switches_saving_off(tmp_path, monkeypatch):
    # found by scripts/chaos.py (seed 1124, fault 7): the folder became immutable between the
    # write and its rename, and the failed clean-up of the temporary file ended the job `error`
    import torch

    from sweeps.train import checkpoint
    from sweeps.train.checkpoint import Checkpoints

    folder = tmp_path / "ck" / "run"
    ckpt = Checkpoints(folder, every_epochs=1)
    assert ckpt.save(1, {"w": torch.zeros(4)}) is not None
    real_save = torch.save

    def save_then_freeze(obj, f):
        real_save(obj, f)
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not permitted here (needs root on a filesystem with attributes)")

    monkeypatch.setattr(checkpoint.torch, "save", save_then_freeze)
    try:
        assert ckpt.save(2, {"w": torch.zeros(4)}) is None  # refused: no exception
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    assert "Operation not permitted" in ckpt.off and not ckpt.due(3)
    assert [f.name for f in ckpt.files()] == ["epoch_0001.pt"]


def test_the_journal_failing_switches_checkpoints_off_too(tmp_path, in_process, mounts, monkeypatch):
    """A checkpoint newer than the journal's last line would resume with epochs missing from the summary."""
    from sweeps.train.checkpoint import Checkpoints

    saved = []
    monkeypatch.setattr(Checkpoints, "save", lambda self, epoch, state: saved.append(epoch))
    _full_tmpfs(tmp_path / "ck", mounts)
    assert in_process([*TINY, "checkpoint.dir=ck", "checkpoint.every_epochs=1"]) == "ok"
    assert saved == []


@pytest.mark.slow
def test_a_store_locked_longer_than_sqlites_default_wait_is_waited_for_quietly(tmp_path, caplog):
    """Another process holding the sqlite store's write lock for 7 s (pysqlite gives up after 5 s
    by default): a run's writes wait for it and land; no ERROR record from MLflow's store."""
    import logging
    import sqlite3
    import threading
    import time

    from sweeps.tracking.store.store import open_client, quiet_sqlite
    from sweeps.tracking.writer.run_writer import RunWriter

    quiet_sqlite()  # as registry.prepare does before the first connection
    db = tmp_path / "mlflow.db"
    client = open_client(f"sqlite:///{db}")
    experiment = client.create_experiment("locked")
    writer = RunWriter(client, experiment, "run", None, {})
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # what a busy neighbour's write transaction looks like
    release = threading.Timer(7.0, lambda: (holder.execute("COMMIT"), holder.close()))
    release.start()
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        writer.log_metrics({"train/loss": 1.0}, step=1)
        writer.end("FINISHED")
    release.join()
    assert time.perf_counter() - started >= 6.5  # it waited for the lock instead of failing at 5 s
    assert [m.value for m in client.get_metric_history(writer.run_id, "train/loss")] == [1.0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert writer.lost == 0


@pytest.mark.slow  # a 30-s lock waited out: ~35 s
def test_a_store_locked_for_30_s_mid_job_costs_the_job_retries_not_epochs(tmp_path, caplog, monkeypatch):
    """Another process holds the sqlite store's write lock for 30 s while a job appends epochs:
    past MLflow's own 20-s wait per session (``make_managed_session``), a send then fails with
    "database is locked". The job's appends never wait for the lock; the follower's send is
    retried, the job's end waits the lock out, and every epoch lands once, the run FINISHED,
    with one warning and no ERROR from MLflow's store."""
    import logging
    import sqlite3
    import threading
    import time

    from sweeps import names
    from sweeps.tracking.follower import delivery
    from sweeps.tracking.journal.journal import JOURNAL, EpochLog
    from sweeps.tracking.writer.run_writer import RunWriter
    from sweeps.tracking.store.store import open_client, quiet_sqlite

    monkeypatch.setattr(delivery, "FLUSH_S", 0.2)
    quiet_sqlite()  # as registry.prepare does before the first connection
    db = tmp_path / "mlflow.db"
    client = open_client(f"sqlite:///{db}")
    writer = RunWriter(client, client.create_experiment("locked"), "job", None, {})
    folder = tmp_path / "checkpoints" / writer.run_id
    writer.keep_in(folder)
    epochs = EpochLog(writer, folder / JOURNAL, regression=False)
    writer.follow()
    append = lambda e: epochs.append({"epoch": e, names.TRAIN_LOSS: 1.0 / e, "samples": 10})  # noqa: E731
    append(1)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # a neighbour's long write transaction
    release = threading.Timer(30.0, lambda: (holder.execute("COMMIT"), holder.close()))
    release.start()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        for e in range(2, 21):
            append(e)
            time.sleep(0.1)
        assert release.is_alive()  # the job's epochs did not wait for the lock
        writer.drain(20)
        assert writer.drained() == 0
        writer.end("FINISHED")
    release.join()
    assert time.monotonic() - started >= 29  # the end waited the lock out
    assert sorted(m.step for m in client.get_metric_history(writer.run_id, names.TRAIN_LOSS)) == list(range(1, 21))
    assert client.get_run(writer.run_id).info.status == "FINISHED"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r for r in caplog.records if "busy" in r.getMessage()]  # the user is told why the end waits


def _open_new_store(uri: str, as_job: bool, start, errors) -> None:
    """In a forked process: wait for the others, then open the store as a job or as a reader."""
    from omegaconf import OmegaConf

    from sweeps.tracking.store import store as tracking_store
    from sweeps.tracking.service import registry

    start.wait()
    try:
        if as_job:
            registry.prepare(OmegaConf.create({"mlflow": {"tracking_uri": uri, "experiment": "sweeps"}}))
        else:
            tracking_store.open_client(uri).search_runs(["0"])
    except BaseException as e:  # noqa: BLE001 - the parent asserts on it
        errors.put(f"{'job' if as_job else 'reader'}: {type(e).__name__}: {e}"[:300])


def test_a_reader_polling_a_store_that_jobs_are_creating_breaks_neither(tmp_path):
    # the Slurm test's poll of a background sweep once migrated the brand-new DB at the same time
    # as the sweep, which then stopped on "table spans already exists"
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # mlflow is already imported here: the processes start at once
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    (tmp_path / "mlruns").mkdir()
    start, errors = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_new_store, args=(uri, i % 2 == 0, start, errors)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    failed = [errors.get(timeout=1) for _ in range(errors.qsize())] if not errors.empty() else []
    assert not failed, failed
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert [e.name for e in store(tmp_path).search_experiments()].count("sweeps") == 1


def test_sweeps_bounds_mlflows_http_retries_unless_the_user_set_them(monkeypatch):
    """MLflow's own 7 retries hold a refused call ~250 s: sweeps' default is 5, 0-2-4-8-16 s apart,
    as MLflow reads them; a value the user exported is kept."""
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR, MLFLOW_HTTP_REQUEST_MAX_RETRIES

    from sweeps.tracking.store import http_policy

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "")  # recorded, so the default set below is undone
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "5")  # the user's own
    http_policy.bound_http_retries()
    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 5
    assert MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get() == 5


@pytest.mark.slow  # a server's HTTP retries waited out: ~3 s
def test_once_a_call_has_waited_out_every_retry_later_calls_try_once_until_one_is_answered(monkeypatch):
    """A tracking server that drops every connection (the network boundary: a real socket): the
    first call is tried 1 + MLflow's retries times; while the store counts as down each later call
    is tried once; an answer (here an HTTP 404) ends that, and retries come back."""
    import socket
    import threading

    from mlflow import MlflowClient

    from sweeps.tracking.store import http_policy

    monkeypatch.setattr(http_policy, "_down", [])
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted, mode = [], ["drop"]

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(mode[0])
            if mode[0] == "answer":
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = MlflowClient(f"http://127.0.0.1:{listener.getsockname()[1]}")

    def attempts() -> tuple[int, bool]:
        before = len(accepted)
        with pytest.raises(Exception) as e:
            http_policy.execute_guarded(lambda: client.get_run("0" * 32))
        time.sleep(0.2)  # the listener thread counts the last connection
        return len(accepted) - before, http_policy.unanswered(e.value)

    try:
        assert attempts() == (3, True)  # 1 + 2 retries: the store is down from here
        assert attempts() == (1, True)  # one try while down
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"  # the user's setting put back
        mode[0] = "answer"
        assert attempts() == (1, False)  # answered (an HTTP error): no longer down
        mode[0] = "drop"
        assert attempts() == (3, True)
    finally:
        listener.close()
