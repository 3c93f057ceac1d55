"""The store's own process (sweeps.tracking.service.connection): a job's store calls — run, params,
tags, metric batches, artifacts, dataset inputs, reads — answered by a real store process on a
real sqlite store, read back with a plain MlflowClient; its errors; its death mid-job (nothing
logged is lost); a store it cannot open; which command lines start one."""
from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
import threading
import time

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

import thread_probe
from conftest import TEST_CONF, TESTS, StartedCli
from sweeps import names
from sweeps.errors import UsageError
from sweeps.telemetry import plot
from sweeps.telemetry.sampler import Telemetry
from sweeps.tracking.writer import inputs
from sweeps.tracking.follower import priority
from sweeps.tracking.journal.cursor import Cursor
from sweeps.tracking.journal.journal import JOURNAL, EpochLog
from sweeps.tracking.service.client import RemoteClient, StoreError
from sweeps.tracking.service.registry import _runs_jobs
from sweeps.tracking.service.connection import StoreService
from sweeps.tracking.writer.run_writer import RunWriter


@pytest.fixture
def service(tmp_path):
    svc = StoreService()
    svc.open(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")
    yield svc
    svc.close()


def _telemetry() -> Telemetry:
    """A few host samples of one epoch (a figure's worth)."""
    tel = Telemetry(1000).start()
    tel.epoch_start(1)
    tel.epoch_end(1)
    tel.stop()
    return tel


@pytest.mark.slow  # a store process of its own (~5 s); a real `python -m sweeps` of the default suite uses one
def test_a_jobs_store_calls_land_in_the_store_through_its_process(service, caplog, tmp_path):
    client, experiment_id = service.opened()
    assert isinstance(client, RemoteClient) and client.tracking_uri == service.uri
    writer = RunWriter(client, experiment_id, "mlp b64 cpu", None, {names.OUTCOME_TAG: names.RUNNING})
    writer.log_params({"model.hidden": 64, "batch": 64})
    writer.set_tags({names.HASH_TAG: "abc"})
    for epoch in (1, 2, 3):
        writer.log_metrics({names.EPOCH_S: 0.5 * epoch, names.TRAIN_LOSS: 1.0 / epoch}, step=epoch)
    writer.log_text("a,b\n1,2\n", "epochs.csv")
    writer.log_bytes(plot.render(_telemetry(), "mlp b64 cpu"), "telemetry.png")
    # the job posts its pending values (MLflow ingests them while the job goes on); a post the
    # store refuses is a warning, its values are counted lost (kept for a later start), and the
    # answers after it stay in order
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        writer.send_pending()
        gone = RunWriter.attach(client, "0" * 32, reopen=False)
        gone.log_metrics({names.EPOCH_S: 1.0}, step=1)
        gone.send_pending()
        assert client.get_run(writer.run_id).data.params["batch"] == "64"
    failed = [r.getMessage() for r in caplog.records if "not logged" in r.getMessage()]
    assert len(failed) == 1 and failed[0].startswith(f"MLflow: 1 value(s) and 0 tag(s) of run {'0' * 32} not logged "
                                                     "(MlflowException: "), failed
    assert gone.lost == 1
    inputs.log_job_data(writer, OmegaConf.create({"name": "diabetes", "root": None}), "generated:diabetes", (10,),
                        354, 88, True)
    mirrored = client.get_run(writer.run_id)  # read back through the process: attributes as MLflow's
    assert mirrored.info.run_id == writer.run_id and mirrored.data.tags[names.HASH_TAG] == "abc"
    writer.end("FINISHED")

    real = MlflowClient(service.uri)
    run = real.get_run(writer.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "mlp b64 cpu"
    assert run.data.params["model.hidden"] == "64" and run.data.params[names.TRAIN_EXAMPLES] == "354"
    assert [(m.step, m.value) for m in real.get_metric_history(writer.run_id, names.EPOCH_S)] == \
        [(1, 0.5), (2, 1.0), (3, 1.5)]
    assert {f.path for f in real.list_artifacts(writer.run_id)} == {"epochs.csv", "telemetry.png"}
    with open(real.download_artifacts(writer.run_id, "telemetry.png", str(tmp_path)), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert sorted(d.dataset.name for d in run.inputs.dataset_inputs) == ["diabetes/test", "diabetes/train"]
    history = client.get_metric_history(writer.run_id, names.TRAIN_LOSS)
    assert [m.step for m in history] == [1, 2, 3]
    with pytest.raises(StoreError) as raised:  # its errors come back named like the original, with its text
        client.get_run("0" * 32)
    assert type(raised.value).__name__ == "MlflowException" and "0" * 32 in str(raised.value)

    # a Ctrl-C while the job waits for an answer: that answer never reaches a later call (one process
    # for both halves: each start costs ~2 s of imports)
    writer = RunWriter(client, experiment_id, "job", None, {})
    writer.log_metrics({names.EPOCH_S: 1.0}, step=1)
    writer.flush()
    real_recv = service._in.recv

    def interrupted_recv():
        service._in.recv = real_recv
        raise KeyboardInterrupt
    service._in.recv = interrupted_recv
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        with pytest.raises(KeyboardInterrupt):
            client.set_tag(writer.run_id, names.HASH_TAG, "interrupted")
        assert client.get_run(writer.run_id).info.run_id == writer.run_id  # its own answer, not set_tag's
        writer.log_metrics({names.EPOCH_S: 2.0}, step=2)
        writer.set_tags({names.OUTCOME_TAG: names.OK})
        writer.end("FINISHED")  # every call after it runs in this process, on its own client
    assert sum("store's process ended" in r.getMessage() for r in caplog.records) == 1
    _assert_whole(MlflowClient(service.uri), writer.run_id)
    service.proc.wait(timeout=10)  # it answered the interrupted call, found the pipe given up and left


def _assert_whole(real: MlflowClient, run_id: str) -> None:
    assert [m.value for m in real.get_metric_history(run_id, names.EPOCH_S)] == [1.0, 2.0]
    assert real.get_run(run_id).info.status == "FINISHED"
    assert real.get_run(run_id).data.tags[names.OUTCOME_TAG] == names.OK


@pytest.mark.slow  # its own store process: ~2 s of imports
def test_a_store_process_killed_mid_job_loses_nothing(service, caplog):
    client, experiment_id = service.opened()
    writer = RunWriter(client, experiment_id, "job", None, {})
    writer.log_metrics({names.EPOCH_S: 1.0}, step=1)
    writer.flush()
    # posted (5 batches: ~1 s of MLflow's ingestion), then the process dies before answering it,
    # having committed some of them or none: it runs here, and each value lands once
    writer.log_series(names.TRAIN_LOSS, [1.0 / i for i in range(1, 5001)])
    writer.send_pending()
    os.kill(service.proc.pid, signal.SIGKILL)
    service.proc.wait(timeout=10)
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        writer.log_metrics({names.EPOCH_S: 2.0}, step=2)
        writer.set_tags({names.OUTCOME_TAG: names.OK})
        writer.end("FINISHED")  # every call after the death runs in this process, on its own client
    assert sum("store's process ended" in r.getMessage() for r in caplog.records) == 1
    real = MlflowClient(service.uri)
    _assert_whole(real, writer.run_id)
    assert sorted(m.step for m in real.get_metric_history(writer.run_id, names.TRAIN_LOSS)) == list(range(1, 5001))


JOB_THAT_DIES = """
import os, signal, sys
from sweeps.tracking.service.connection import StoreService
from sweeps.tracking.writer.run_writer import RunWriter

service = StoreService()
service.open(sys.argv[1], "exp")
client, experiment_id = service.opened()
writer = RunWriter(client, experiment_id, "job", None, {})
writer.log_params({f"p{i}": i for i in range(60)})
for i in range(40):  # posted, not waited for: ~0.4 s or more of MLflow's work still to do at the kill
    writer.set_tags({f"t{i}": i})
writer.log_text("hello", "notes.txt")
print(writer.run_id, service.proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow  # a job's process and its store process: ~5 s of imports
def test_what_a_job_posted_before_it_was_killed_still_reaches_the_store(tmp_path):
    """Params, tags and texts are posted to the store process without waiting: a job SIGKILLed
    right after posting them loses none (the store process answers every request it was sent
    before it leaves)."""
    import subprocess

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = subprocess.run([sys.executable, "-c", JOB_THAT_DIES, uri], capture_output=True, text=True, timeout=120)
    assert job.returncode == -signal.SIGKILL, job.stderr[-2000:]
    run_id, store_pid = job.stdout.split()
    deadline = time.monotonic() + 120
    while os.path.exists(f"/proc/{store_pid}") and time.monotonic() < deadline:
        time.sleep(0.1)  # it answers what it was sent, then notices its job is gone and exits
    assert not os.path.exists(f"/proc/{store_pid}"), "the store process outlived its job by 2 minutes"
    real = MlflowClient(uri)
    run = real.get_run(run_id)
    assert len(run.data.params) == 60 and all(run.data.tags.get(f"t{i}") == str(i) for i in range(40))
    assert [f.path for f in real.list_artifacts(run_id)] == ["notes.txt"]


@pytest.mark.slow  # its own store process: ~2 s of imports (the in-process twin: test_store_and_disk.py)
def test_a_store_the_process_cannot_open_stops_the_job_with_one_line(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not a database, a text file that happens to sit where the store should be" * 100)
    svc = StoreService()
    try:
        svc.open(f"sqlite:///{db}", "exp")
        with pytest.raises(UsageError) as raised:
            svc.opened()
    finally:
        svc.close()
    text = str(raised.value)
    assert "\n" not in text and str(db) in text and "mlflow.tracking_uri" in text


@pytest.mark.parametrize("argv, starts", [
    (["batch=64"], True),
    ([], True),
    (["+experiment=diabetes", "batch=full"], True),
    (["-m", "batch=64,128"], True),  # for the jobs the basic launcher runs in it (its parent run: its own client)
    (["--multirun", "batch=64"], True),
    (["--help"], False),
    (["--hydra-help"], False),
    (["--cfg", "job"], False),
    (["--info"], False),
    (["--version"], False),
    (["--cfg"], False),  # malformed: Hydra says so; no store process for it
])
def test_only_a_command_that_runs_jobs_starts_a_store_process(argv, starts):
    assert _runs_jobs(argv) is starts


def _parent(pid: int) -> int | None:
    """Process ``pid``'s parent's id (None: it ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _store_processes(pid: int) -> list[int]:
    """Store processes (``sweeps.tracking.service.server``, not their follower process) among the
    descendants of process ``pid``. A store process's own children are not searched: its one child
    is its background process, which between its fork and its exec still shows the store
    process's command line (a background process is restarted after the job hurried it)."""
    found, todo = [], [pid]
    while todo:
        try:
            kids = _children(todo.pop())
        except OSError:  # ended meanwhile
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"sweeps.tracking.service.server" in argv:
                found.append(kid)
            else:
                todo.append(kid)
    return found


@pytest.mark.slow  # two real sweeps, one through a joblib pool of two workers: ~30-80 s
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: /proc/PID/task/TID/children")
def test_a_sweeps_jobs_log_through_a_store_process_where_they_run_in_the_sweeps_process(tmp_path):
    """``python -m sweeps -m`` with Hydra's basic launcher: the jobs, run in the sweep's process,
    log through a store process (MLflow's ingestion off the training's GIL: a starved writer thread
    holding it through an in-process batch held epochs up for seconds), and every epoch of every
    job lands once; with a pool of two the jobs run in workers, each of which starts a store
    process of its own for them (the sweep's process keeps none)."""
    job = ["model=slow", "model.delay_s=0.005", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256",
           "dataset.test_size=32", "batch=32", "device=cpu", "epochs=30", "telemetry.interval_s=0", TEST_CONF]
    seen, sweep_pid = {}, {}
    # (joblib at n_jobs=1 runs the jobs in the sweep's process too: test_launchers.py)
    pools = {"basic": [], "pool of 2": ["hydra/launcher=gpu_pool", "hydra.launcher.n_jobs=2"]}  # in two workers
    for launcher, pool in pools.items():
        cwd = tmp_path / launcher.replace(" ", "_")
        cwd.mkdir()
        started = StartedCli(["-m", *pool, *job, "seed=1,2"], cwd, timeout=300)
        sweep_pid[launcher] = started.proc.pid
        seen[launcher], journals = set(), 0
        while started.proc.poll() is None:
            if list(cwd.glob("checkpoints/*/*/epochs.jsonl")):  # a job is under way (its journal)
                seen[launcher].update((pid, _parent(pid)) for pid in _store_processes(started.proc.pid)
                                      if _parent(pid) is not None)
                journals += 1
            time.sleep(0.05)
        assert journals, "no job was seen under way"
        proc = started.result()
        assert proc.returncode == 0, proc.stderr[-3000:]
        client = MlflowClient(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")
        exp = client.get_experiment_by_name("sweeps")
        jobs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(names.KIND_TAG) != "sweep"]
        assert len(jobs) == 2 and all(r.data.tags[names.OUTCOME_TAG] == "ok" for r in jobs)
        for run in jobs:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, names.EPOCH_S)]
            assert sorted(steps) == list(range(1, 31)), steps
    # jobs in the sweep's process: the sweep's store process; in a pool's workers: each worker's own
    # (its first job starts it), none of the sweep's
    assert seen["basic"] and {parent for _, parent in seen["basic"]} == {sweep_pid["basic"]}, (seen, sweep_pid)
    parents = {parent for _, parent in seen["pool of 2"]}
    assert parents and sweep_pid["pool of 2"] not in parents, (seen, sweep_pid)


def _schedule_threads(pid: int, policy: int, nice: int) -> None:
    """Every thread of process ``pid`` at ``policy`` and ``nice`` (Linux: both are per thread)."""
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def _follower_of(store_pid: int) -> int:
    """The follower process of store process ``store_pid`` (its one child), once started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for kid in _children(store_pid):
            with open(f"/proc/{kid}/cmdline", "rb") as f:  # between its fork and its exec: the parent's
                if b"sweeps.tracking.follower.follower" in f.read().split(b"\0"):
                    return kid
        time.sleep(0.02)
    raise AssertionError(f"store process {store_pid} started no follower in 60 s")


def _job_following(client, experiment_id: str, folder) -> tuple[RunWriter, EpochLog]:
    writer = RunWriter(client, experiment_id, "job", None, {})
    writer.keep_in(folder / writer.run_id)
    epochs = EpochLog(writer, folder / writer.run_id / JOURNAL, regression=False)
    writer.follow()
    return writer, epochs


def _append(epochs: EpochLog, first: int, last: int) -> None:
    for e in range(first, last + 1):
        epochs.append({"epoch": e, names.TRAIN_LOSS: 1.0 / e, names.EPOCH_S: 0.01 * e})


def _shipping(follower_pid: int, writer: RunWriter, epoch: int) -> None:
    """Run the follower at normal priority until it has shipped ``epoch`` (its start — importing
    mlflow and opening the store, seconds of CPU — runs at SCHED_IDLE by design, and beside the
    other test worker's busy cores it may take minutes), then lower it again."""
    try:
        _schedule_threads(follower_pid, os.SCHED_OTHER, 0)
        raised = True
    except OSError:  # not permitted (no CAP_SYS_NICE): it starts at its own priority, as users' do
        raised = False
    deadline = time.monotonic() + 180
    while (Cursor(writer.cursor.path.parent).read() or 0) < epoch and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (Cursor(writer.cursor.path.parent).read() or 0) >= epoch
    if raised:
        _schedule_threads(follower_pid, os.SCHED_IDLE, priority.LOWEST)


def _children(pid: int) -> list[int]:
    """Process ids of the children of process ``pid`` (man 5 proc, /proc/PID/task/TID/children)."""
    kids = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return kids


def _cpu_s(pid: int, tid: int) -> float:
    """CPU time (s) of thread ``tid`` of process ``pid`` (man 5 proc, /proc/PID/task/TID/schedstat)."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


@pytest.mark.slow  # a store process and its follower process: ~4 s of imports
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: priorities per thread, /proc")
def test_the_store_process_answers_at_normal_priority_and_its_follower_ships_at_the_lowest(tmp_path, monkeypatch):
    """The store process answers every call at the job's own priority (a busy machine does not
    make the job's end wait for everyone); its follower process ships the runs' journals lowered
    whole (nice 19 under SCHED_IDLE: any training thread that wakes preempts it at once). Both
    share the job's session (Linux's autogroup counts them with the job), in a process group of
    their own (a Ctrl-C in the terminal does not reach them); the job's process has no thread of
    its own for MLflow."""
    import threading as threads

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    service = StoreService()
    service.open(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")
    try:
        client, experiment_id = service.opened()
        pid = service.proc.pid
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpgid(pid) == (pid if sys.version_info >= (3, 11) else os.getsid(pid))
        mine = (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))
        assert tuple(client.run(thread_probe.scheduling)) == mine
        follower = _follower_of(pid)
        deadline = time.monotonic() + 30
        while os.sched_getscheduler(follower) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.01)  # it lowers itself before its imports
        assert all(os.sched_getscheduler(int(t)) == os.SCHED_IDLE for t in os.listdir(f"/proc/{follower}/task"))
        assert os.getpriority(os.PRIO_PROCESS, follower) == priority.LOWEST
        assert os.getpgid(follower) == os.getpgid(pid)
        assert [t for t in os.listdir(f"/proc/{pid}/task") if os.sched_getscheduler(int(t)) == os.SCHED_IDLE] == []
        before = {t.name for t in threads.enumerate()}
        writer, epochs = _job_following(client, experiment_id, tmp_path / "checkpoints")
        _append(epochs, 1, 3)
        _shipping(follower, writer, 3)
        assert {t.name for t in threads.enumerate()} == before  # no writer thread in the job's process
        writer.drain(3)
        writer.end("FINISHED")
        assert sorted(m.step for m in MlflowClient(service.uri).get_metric_history(writer.run_id, names.EPOCH_S)) == \
            [1, 2, 3]
    finally:
        service.close()


def _write_locked(db) -> bool:
    """Whether another connection holds sqlite's write lock on ``db``."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as e:
        assert "locked" in str(e), e
        return True
    finally:
        conn.close()


@pytest.mark.slow  # a store process and its follower process: ~4 s of imports, 20,000 epochs
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: SCHED_IDLE, /proc")
def test_a_follower_stuck_mid_transaction_does_not_hold_up_the_jobs_end(tmp_path, monkeypatch):
    """On a machine whose cores other programs keep busy, the follower (lowest priority) can stall
    holding sqlite's write lock; a background batch stalled so held a 10,000-epoch job's end 55 s.
    The job's end waits ``STALL_S`` for the follower's cursor, then the store process kills it
    (its transaction rolled back, the lock free) and ships the rest at normal priority: every epoch
    lands once, through the store process."""
    db = tmp_path / "mlflow.db"
    service = StoreService()
    service.open(f"sqlite:///{db}", "exp")
    try:
        client, experiment_id = service.opened()
        follower = _follower_of(service.proc.pid)
        writer, epochs = _job_following(client, experiment_id, tmp_path / "checkpoints")
        _append(epochs, 1, 1)
        _shipping(follower, writer, 1)
        _schedule_threads(follower, os.SCHED_OTHER, 0)  # quick, to be caught inside a transaction
        _append(epochs, 2, 20_000)
        deadline, stuck = time.monotonic() + 120, False
        while not stuck and time.monotonic() < deadline:
            if _write_locked(db):
                os.kill(follower, signal.SIGSTOP)
                stuck = _write_locked(db)
                if not stuck:
                    os.kill(follower, signal.SIGCONT)
        assert stuck, "the follower was never caught inside a transaction"
        start = time.monotonic()
        writer.drain(20_000)
        writer.set_tags({names.OUTCOME_TAG: "ok"})
        assert writer.drained() == 0
        writer.end("FINISHED")
        assert time.monotonic() - start < 60 and follower not in _children(service.proc.pid)
        assert not _write_locked(db) and service._local is None  # still through the store process
        real = MlflowClient(service.uri)
        assert sorted(m.step for m in real.get_metric_history(writer.run_id, names.TRAIN_LOSS)) == \
            list(range(1, 20_001))
        assert real.get_run(writer.run_id).data.tags[names.OUTCOME_TAG] == "ok"
    finally:
        service.close()


@pytest.mark.slow  # a store process and its follower process: ~4 s of imports
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: SCHED_IDLE, /proc")
def test_a_jobs_end_does_not_wait_for_a_starved_follower(tmp_path, monkeypatch):
    """The follower gets no CPU (stopped: what two busy loops do to a SCHED_IDLE process) with
    2,500 epochs to ship; the job's end — the drain posted, the figure, the run closed — waits
    ``STALL_S`` for its cursor, then the store process ships them itself: it returns, and every
    value lands once."""
    service = StoreService()
    service.open(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")
    try:
        client, experiment_id = service.opened()
        follower = _follower_of(service.proc.pid)
        writer, epochs = _job_following(client, experiment_id, tmp_path / "checkpoints")
        _append(epochs, 1, 1)
        _shipping(follower, writer, 1)
        os.kill(follower, signal.SIGSTOP)
        _append(epochs, 2, 2500)

        def job_end() -> None:  # as finish does: the drain posted first, then the figure, then the run closed
            writer.drain(2500)
            writer.log_bytes(plot.render(_telemetry(), "job"), "telemetry.png")
            writer.drained()
            writer.end("FINISHED")
        ended = threading.Thread(target=job_end, daemon=True)
        ended.start()
        ended.join(60)
        assert not ended.is_alive() and follower not in _children(service.proc.pid)
        assert writer.lost == 0 and service._local is None
        real = MlflowClient(service.uri)
        steps = [m.step for m in real.get_metric_history(writer.run_id, names.TRAIN_LOSS)]
        assert sorted(steps) == list(range(1, 2501))
        assert real.get_run(writer.run_id).info.status == "FINISHED"
        assert [f.path for f in real.list_artifacts(writer.run_id)] == ["telemetry.png"]
    finally:
        service.close()


@pytest.mark.slow  # a store process and its background process: ~6 s of imports
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: /proc/PID/task/TID/children")
def test_slurms_sigusr2_to_every_process_of_the_job_step_leaves_the_store_processes_serving(service, caplog):
    # Slurm's --signal=USR2@delay reaches every process of the step; the job's own acts on it
    # (sweeps.launchers.slurm.requeue) and still needs its store to close the run and requeue
    client, experiment_id = service.opened()
    writer = RunWriter(client, experiment_id, "job", None, {})
    deadline = time.monotonic() + 60
    while not _children(service.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    helpers = [service.proc.pid, *_children(service.proc.pid)]
    assert len(helpers) == 2  # the store process and its follower process
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        for pid in helpers:
            os.kill(pid, signal.SIGUSR2)
        time.sleep(0.5)
        writer.log_metrics({names.EPOCH_S: 1.0}, step=1)
        writer.end("FINISHED")
    assert service.proc.poll() is None and all(os.path.exists(f"/proc/{pid}") for pid in helpers)
    assert not [r.getMessage() for r in caplog.records if "store's process ended" in r.getMessage()]
    assert [m.value for m in MlflowClient(service.uri).get_metric_history(writer.run_id, names.EPOCH_S)] == [1.0]


@pytest.mark.slow  # its own store process: ~2 s of imports
def test_a_dead_store_process_leaves_the_jobs_process_shipping_its_run_itself(service, tmp_path, caplog):
    """The store process dies (SIGKILL) mid-job: the job's process opens the store itself, its
    run's journal is shipped from the cursor by this process (a follower thread, the drain), and
    every epoch lands once."""
    client, experiment_id = service.opened()
    writer, epochs = _job_following(client, experiment_id, tmp_path / "checkpoints")
    _append(epochs, 1, 100)
    os.kill(service.proc.pid, signal.SIGKILL)
    service.proc.wait(timeout=10)
    _append(epochs, 101, 200)
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        writer.drain(200)
        assert writer.drained() == 0
        writer.end("FINISHED")
    assert sum("store's process ended" in r.getMessage() for r in caplog.records) == 1
    real = MlflowClient(service.uri)
    assert sorted(m.step for m in real.get_metric_history(writer.run_id, names.TRAIN_LOSS)) == list(range(1, 201))
    assert real.get_run(writer.run_id).info.status == "FINISHED"
