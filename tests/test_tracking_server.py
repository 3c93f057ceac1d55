"""A shared MLflow tracking server: `mlflow server` with a database backend on 127.0.0.1, a small
sweep logged to it over HTTP, and the runs read back through the server."""
from __future__ import annotations

import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from mlflow import MlflowClient

from conftest import TEST_CONF, run_cli
from sweeps.tracking.follower.series import stride

START_S = 90  # bounded wait for /health (a busy 2-core machine starts the server in ~10-30 s)
REPO = Path(__file__).resolve().parents[1]
# docs/devices.md, "Beyond one machine": an sqlite server's file put in WAL mode before its first start.
WAL_COMMAND = """python -c "import sqlite3; sqlite3.connect('{db}').execute('PRAGMA journal_mode=WAL')\""""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(tmp_path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """``mlflow server`` (1 worker, sqlite) on a free loopback port, answering /health."""
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                               "--artifacts-destination", str(tmp_path / "artifacts")],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **(env or {})}, start_new_session=True)
    deadline = time.monotonic() + START_S
    while True:
        try:
            if requests.get(f"{uri}/health", timeout=2).ok:
                return server, uri
        except requests.RequestException:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            _stop_server(server)
            raise AssertionError(f"mlflow server did not answer /health within {START_S} s (exit {server.poll()})")
        time.sleep(0.5)


def _stop_server(server: subprocess.Popen) -> None:
    """End the server and every process it started (uvicorn, MLflow's job consumers): killing
    ``mlflow server`` alone leaves them running, holding ~2 GB between them. They share the
    process group its own session gave it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:  # the whole group has ended
            break
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(1)  # the group's other members end after its leader


@pytest.fixture(scope="module")
def wal_server(tmp_path_factory):
    """One ``mlflow server`` for the module's tests that need a plain one, on an sqlite file put in
    WAL mode by docs/devices.md's own step (this Python) before its first start; (uri, db file).
    Each test logs to an experiment of its own; none stops it (a server that goes away is a proxy's
    ``down()``)."""
    readme_step = WAL_COMMAND.format(db="/srv/mlflow/mlflow.db")
    assert readme_step in (REPO / "docs" / "devices.md").read_text(), f"docs/devices.md no longer says {readme_step!r}"
    tmp_path = tmp_path_factory.mktemp("server")
    db = tmp_path / "server.db"
    argv = shlex.split(WAL_COMMAND.format(db=db))
    subprocess.run([sys.executable, *argv[1:]], check=True, timeout=60)
    server, uri = _start_server(tmp_path)
    yield uri, db
    _stop_server(server)


@pytest.mark.slow  # a 2-job sweep through the shared server: ~20 s here
def test_sweep_logs_to_a_tracking_server_over_http(tmp_path, wal_server):
    uri, db = wal_server
    job_dir = tmp_path / "jobs"
    job_dir.mkdir()
    proc = run_cli(["-m", "model=mlp", "batch=16,32", "dataset=synthetic", "dataset.shape=[1,8,8]",
                    "dataset.train_size=64", "dataset.test_size=16", "epochs=1", "device=cpu",
                    "telemetry.interval_s=0", f"mlflow.tracking_uri={uri}", "mlflow.experiment=shared",
                    TEST_CONF], job_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (job_dir / "mlruns").exists()  # nothing went to a local store
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("shared")
    found = client.search_runs([exp.experiment_id])
    children = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    assert len(found) == 3 and len(children) == 2
    assert all(r.data.tags["outcome"] == "ok" and "test/final_acc" in r.data.metrics for r in children)
    assert "config.yaml" in [a.path for a in client.list_artifacts(children[0].info.run_id)]
    with sqlite3.connect(db) as conn:  # MLflow created its schema in the file and left it in WAL mode
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT COUNT(*) FROM runs WHERE experiment_id = ?", (exp.experiment_id,)).fetchone() == (3,)
    conn.close()


@pytest.mark.slow  # a server with a one-connection pool and 4 concurrent jobs of 300 short epochs: ~1-2 min
def test_an_overloaded_server_gets_every_epoch_exactly_once(tmp_path):
    """A server that can serve one request at a time (pool size 1, no overflow) and 4 jobs logging
    at once: the jobs never fail or wait on it (metrics go from a background writer, retried), and
    every epoch of every job reaches it once."""
    server, uri = _start_server(tmp_path, {"MLFLOW_SQLALCHEMYSTORE_POOL_SIZE": "1",
                                           "MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW": "0"})
    try:
        job_dir = tmp_path / "jobs"
        job_dir.mkdir()
        epochs = 300
        proc = run_cli(["-m", "hydra/launcher=gpu_pool", "hydra.launcher.n_jobs=4", "seed=0,1,2,3", "model=mlp",
                        "model.hidden=[8]", "dataset=synthetic", "dataset.shape=[4]", "dataset.train_size=32",
                        "dataset.test_size=8", "batch=full", f"epochs={epochs}", "device=cpu",
                        "telemetry.interval_s=0", f"mlflow.tracking_uri={uri}", "mlflow.experiment=busy",
                        TEST_CONF], job_dir, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("busy")
        children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
        assert len(children) == 4 and all(r.data.tags["outcome"] == "ok" for r in children)
        for run in children:
            for key in ("train/loss", "time/epoch_s"):
                steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
                assert sorted(steps) == list(range(1, epochs + 1)), (key, len(steps))
    finally:
        _stop_server(server)



class _Proxy:
    """tests/slow_proxy.py in front of a real server (the network boundary): ``delay(s)`` slows
    every request, ``down()`` / ``up()`` drop and restore the connection (a server restarting)."""

    def __init__(self, upstream: str):
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("slow_proxy.py")),
                                       upstream.rsplit(":", 1)[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
        self.uri = f"http://127.0.0.1:{self._proc.stdout.readline().strip()}"

    def _say(self, line: str) -> None:
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        assert self._proc.stdout.readline().strip() == "ok"

    def delay(self, seconds: float) -> None:
        self._say(f"delay {seconds}")

    def down(self) -> None:
        self._say("down")

    def up(self) -> None:
        self._say("up")

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()


@pytest.mark.slow  # server start-up plus ~30-60 s of logging through a slowed, then dropped, connection
def test_a_slow_then_restarting_server_gets_every_value_once_and_the_writer_backs_off(wal_server, monkeypatch,
                                                                                       tmp_path):
    """The follower's beat follows the server: sends that take over 0.5 s stretch it well past the
    quick 2 s (fewer, larger batches), a server that drops every connection for a while is waited
    out, and every value of every epoch reaches the store exactly once."""
    from sweeps.tracking.follower import delivery
    from sweeps.tracking.follower.delivery import FLUSH_S
    from sweeps.tracking.journal.journal import JOURNAL, EpochLog
    from sweeps.tracking.writer.run_writer import RunWriter

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the sender's own retries, not urllib3's
    uri, _ = wal_server
    proxy = _Proxy(uri)
    try:
        client = MlflowClient(proxy.uri)
        writer = RunWriter(client, client.create_experiment("slow"), "job", None, {})
        writer.keep_in(tmp_path / "run")
        log = EpochLog(writer, tmp_path / "run" / JOURNAL, regression=False)
        cadence = delivery.sender(client).cadence  # the follower's (a thread here: an in-process client)
        sends = []  # seconds each of the follower's sends took, as its cadence is told
        noted = cadence.sent
        cadence.sent = lambda seconds, values, batch: (values and sends.append(seconds), noted(seconds, values, batch))
        writer.follow()
        keys = [f"train/m{i}" for i in range(15)]
        epoch = 0

        def epochs(until) -> None:
            nonlocal epoch
            deadline = time.monotonic() + 180  # bounded, however loaded the machine
            while not until() and time.monotonic() < deadline:
                epoch += 1
                log.append({"epoch": epoch, **{k: epoch + i for i, k in enumerate(keys)}})
                time.sleep(0.1)

        proxy.delay(0.5)
        epochs(lambda: len(sends) >= 3)  # three sends, each slowed by >= 0.5 s
        assert len(sends) >= 3 and min(sends) >= 0.5
        assert cadence.beat_s > 1.5 * FLUSH_S  # backed off: ~10 x the slow sends' latency
        proxy.delay(0)
        proxy.down()  # the server goes away mid-job ...
        until = time.monotonic() + 6
        epochs(lambda: time.monotonic() > until)
        proxy.up()  # ... and comes back
        until = time.monotonic() + 2
        epochs(lambda: time.monotonic() > until)
        writer.drain(epoch)  # the job's end ships the rest at once
        assert writer.drained() == 0
        writer.end("FINISHED")
        for key in keys:
            steps = [m.step for m in MlflowClient(uri).get_metric_history(writer.run_id, key)]
            assert sorted(steps) == list(range(1, epoch + 1)), (key, len(steps), epoch)
    finally:
        proxy.close()


@pytest.mark.slow  # server start-up, a job whose server goes away, its bounded end, a second start: ~2-3 min
def test_a_server_that_goes_away_mid_job_holds_its_end_minutes_not_hours_and_the_next_start_closes_the_run(
        tmp_path, wal_server):
    """The tracking server stops answering while a job trains (MLflow's default retries would hold
    the job's end ~4 min per call, ~30 min per batch): the job still ends, its run's folder keeps
    the journal and the outcome; once the server is back, the next start of the same command sends
    the epochs the run lacks, each once, closes the run as the job ended (ok) and skips the job."""
    uri, _ = wal_server
    proxy = _Proxy(uri)
    try:
        job_dir = tmp_path / "jobs"
        job_dir.mkdir()
        epochs = 1000
        args = ["model=mlp", "model.hidden=[8]", "dataset=synthetic", "dataset.shape=[4]", "dataset.train_size=32",
                "dataset.test_size=8", "batch=full", f"epochs={epochs}", "device=cpu", "telemetry.interval_s=0",
                f"mlflow.tracking_uri={proxy.uri}", "mlflow.experiment=away", TEST_CONF]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "1"  # the user's own, kept; sweeps' 5 would add ~2 min here
        job = subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=job_dir, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        client = MlflowClient(uri)
        deadline = time.monotonic() + 180
        run = None
        while run is None or "train/loss" not in run.data.metrics:  # the job has sent epochs
            assert job.poll() is None and time.monotonic() < deadline, "the job ended before it sent an epoch"
            time.sleep(0.5)
            exp = client.get_experiment_by_name("away")
            found = client.search_runs([exp.experiment_id]) if exp else []
            run = found[0] if found else None
        proxy.down()
        out, err = job.communicate(timeout=400)  # MLflow's own retries would hold it ~30 min
        said = out + err
        assert job.returncode == 0, said[-3000:]
        assert "could not be closed" in said and "the next `python -m sweeps`" in said, said[-3000:]
        assert "Retrying (Retry(" not in said  # urllib3's line per retry is muted
        assert client.get_run(run.info.run_id).info.status == "RUNNING"
        folder = next((job_dir / "checkpoints").glob(f"*/{run.info.run_id}"))
        assert (folder / "ended.json").is_file() and (folder / "epochs.jsonl").is_file()
        proxy.up()
        again = run_cli(args, job_dir, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        said = again.stdout + again.stderr
        assert "already done" in said and "closed as ok" in said, said[-3000:]
        closed = client.get_run(run.info.run_id)
        assert closed.info.status == "FINISHED" and closed.data.tags["outcome"] == "ok"
        assert "test/final_acc" in closed.data.metrics
        every = stride(1, 320, epochs)  # mlflow.series_points' default: 1000 epochs draw ~200 points
        assert every > 1
        series = [e for e in range(1, epochs + 1) if e == 1 or e % every == 0]
        for key in ("train/loss", "time/epoch_s"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            assert sorted(steps) == series, (key, len(steps))  # each epoch of the series once, none lost
        assert "epochs.csv" in [a.path for a in client.list_artifacts(run.info.run_id)]
        assert not folder.exists()
    finally:
        proxy.close()


def test_sweeps_turns_mlflows_telemetry_off_unless_the_user_set_it(monkeypatch):
    """Offline, MLflow's telemetry thread removes a variable from os.environ while requests reads
    os.environ for an HTTP call to the server, and the call fails (KeyError). sweeps sets
    MLFLOW_DISABLE_TELEMETRY=true when the package is imported; a user's own setting stands."""
    import importlib

    import sweeps
    from mlflow.telemetry import utils

    # as on a user's machine: pytest's own variables (PYTEST_CURRENT_TEST) turn telemetry off here
    monkeypatch.setattr(utils, "_IS_IN_CI_ENV_OR_TESTING", False)
    monkeypatch.setattr(utils, "_IS_MLFLOW_DEV_VERSION", False)
    monkeypatch.delenv("DO_NOT_TRACK", raising=False)
    monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)
    assert not utils.is_telemetry_disabled()
    importlib.reload(sweeps)
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true" and utils.is_telemetry_disabled()
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "false")  # the user wants it on
    importlib.reload(sweeps)
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "false" and not utils.is_telemetry_disabled()


@pytest.mark.slow  # one run of 3,000 steps on the shared server: a few seconds
def test_a_follower_asks_a_server_for_its_batchs_steps_not_every_metrics_whole_history(wal_server, monkeypatch):
    """A follower that may start behind the store (after a failed send, a resumed run) asks which
    of its batch's steps the run holds: a tracking server is asked for that step range alone (the
    route MLflow's UI reads charts with), not for each metric's whole history, which it would read
    for every metric of every such run just when it is the busiest. A range the route would
    sample (2,500 rows or more) is still answered exactly, from the whole history."""
    from mlflow.entities import Metric

    from sweeps.tracking.follower.follower import held_steps

    uri, _ = wal_server
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("held")).info.run_id
    for first in range(0, 3000, 1000):  # steps 0-2999 of train/loss; train/acc at 0 and the even steps to 98
        client.log_batch(run_id, metrics=[Metric("train/loss", float(s), 1, s) for s in range(first, first + 1000)])
    client.log_batch(run_id, metrics=[Metric("train/acc", 0.5, 1, s) for s in range(0, 100, 2)])
    whole: list[str] = []
    real = client.get_metric_history
    monkeypatch.setattr(client, "get_metric_history", lambda rid, key: (whole.append(key), real(rid, key))[1])
    held = held_steps(client, run_id, {"train/loss": list(range(2990, 3010)), "train/acc": [0, 1, 2, 3, 99, 100]})
    assert held == {"train/loss": list(range(2990, 3000)), "train/acc": [0, 2]}
    assert whole == []  # the steps' range only
    held = held_steps(client, run_id, {"train/loss": [0, 2999, 3000]})  # 3,000 rows in the range: sampled there
    assert held == {"train/loss": [0, 2999]} and whole == ["train/loss"]
