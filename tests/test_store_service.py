"""The store's own process (sweeps.tracking.store_service): a job's store calls — run, params,
tags, metric batches, artifacts, dataset inputs, reads — answered by a real store process on a
real sqlite store, read back with a plain MlflowClient; its errors; its death mid-job (nothing
logged is lost); a store it cannot open; which command lines start one."""
from __future__ import annotations

import fcntl
import logging
import os
import signal
import sqlite3
import struct
import sys
import termios
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
from sweeps.tracking import batches, inputs, priority
from sweeps.tracking.store_client import RemoteClient, StoreError
from sweeps.tracking.store_processes import _runs_jobs
from sweeps.tracking.store_service import StoreService
from sweeps.tracking.writer import RunWriter


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
    # the job's end posts its queued values (MLflow ingests them while the job goes on); a post the
    # store refuses is a warning, its values go back on the queue, and the answers after it stay in order
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        writer.send_later()
        gone = RunWriter.attach(client, "0" * 32, reopen=False)
        gone.log_metrics({names.EPOCH_S: 1.0}, step=1)
        gone.send_later()
        assert client.get_run(writer.run_id).data.params["batch"] == "64"
    failed = [r.getMessage() for r in caplog.records if "not logged" in r.getMessage()]
    assert len(failed) == 1 and failed[0].startswith("MLflow: 1 metric value(s) not logged (MlflowException: "), failed
    assert [m.key for m in gone._queue] == [names.EPOCH_S]  # sent again by its flush, with retries
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
    writer.send_later()
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


@pytest.mark.slow  # a store process of its own (~5 s)
def test_the_cursor_waits_for_a_posted_batch_the_store_refuses_while_the_beat_sends_a_later_one(
        service, tmp_path, monkeypatch, caplog):
    """A job's end posts its queued epochs 1-2 (``send_later``), a batch the store refuses (a
    metric name MLflow rejects) and says so while the writer's beat sends epoch 3, which it takes.
    Epochs 1-2 go back on the queue ahead of epoch 3, so the run's cursor (``shipped.json``) must
    not move to 3: a kill now leaves them to the next start, which replays after the cursor."""
    from sweeps.tracking.cursor import Cursor

    monkeypatch.setattr(batches, "FLUSH_S", 30.0)  # only the explicit flushes send
    client, experiment_id = service.opened()
    writer = RunWriter(client, experiment_id, "job", None, {})
    writer.cursor = Cursor(tmp_path)
    writer.log_epoch({names.TRAIN_LOSS: 1.0, "refused!": 1.0}, 1, 1_000)
    writer.log_epoch({names.TRAIN_LOSS: 0.5}, 2, 2_000)
    writer.send_later()
    writer.log_epoch({names.TRAIN_LOSS: 0.3}, 3, 3_000)
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        writer.flush(most=10)  # the beat's send: it reads the refusal first, then sends epoch 3
    assert any("metric value(s) not logged" in r.getMessage() for r in caplog.records)
    real = MlflowClient(service.uri)
    assert [m.step for m in real.get_metric_history(writer.run_id, names.TRAIN_LOSS)] == [3]
    assert Cursor(tmp_path).read() is None
    writer.close()  # epochs 1-2 refused again: lost, so the cursor stays
    assert Cursor(tmp_path).read() is None and writer.lost == 3


JOB_THAT_DIES = """
import os, signal, sys
from sweeps.tracking.store_service import StoreService
from sweeps.tracking.writer import RunWriter

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
    """Store processes (``sweeps.tracking.store_process``, not their background process) among the
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
            if b"sweeps.tracking.store_process" in argv and b"--background" not in argv:
                found.append(kid)
            elif b"--background" not in argv:
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


def _background_calls(client: RemoteClient, until: int = os.SCHED_IDLE, probe=thread_probe.scheduling) -> list[tuple]:
    """Make background calls (from a thread lowered alone, as the run writer's) until one is
    answered by a thread of scheduling policy ``until`` (SCHED_IDLE: the store process's
    background process); what ``probe`` said of the thread that answered each (scheduling
    policy, nice[, process id])."""
    seen: list = []

    def lowered_caller() -> None:
        priority.lowest(threading.get_native_id())
        deadline = time.monotonic() + 180  # SCHED_IDLE: the other test worker may keep both cores busy for minutes
        while (not seen or seen[-1][0] != until) and time.monotonic() < deadline:
            seen.append(tuple(client.run(probe)))
            time.sleep(0.05)
    caller = threading.Thread(target=lowered_caller)
    caller.start()
    caller.join(200)
    return seen


def _schedule_threads(pid: int, policy: int, nice: int) -> None:
    """Every thread of process ``pid`` at ``policy`` and ``nice`` (Linux: both are per thread)."""
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def _unread_requests(background: int) -> int:
    """Bytes waiting in the requests pipe of ``background`` (a store process's background
    process; the pipe's read end is its fd named in its command line, opened again through
    /proc: FIONREAD counts them without reading one)."""
    with open(f"/proc/{background}/cmdline", "rb") as f:
        fd = int(f.read().split(b"\0")[3])  # python -m sweeps.tracking.store_process REQUESTS ANSWERS PARENT --background
    own = os.open(f"/proc/{background}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return struct.unpack("i", fcntl.ioctl(own, termios.FIONREAD, b"\0" * 4))[0]
    finally:
        os.close(own)


def _background_up(client: RemoteClient, pid: int) -> tuple[int, tuple[int, int]]:
    """Wait until the background process of store process ``pid`` answers a background call:
    (the process id that answered the first one, what a last one ran at: scheduling policy,
    nice). Its start — importing mlflow and opening
    the store, seconds of CPU — runs at SCHED_IDLE by design, and beside the other test worker's
    busy cores (the chaos test's) it did not answer in 200 s (CI, 2026-11-27): a test that only
    needs it up runs that start at normal priority where it may (once it has lowered itself,
    which it does first), then lowers it again."""
    deadline = time.monotonic() + 60
    while not _children(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    (background,) = _children(pid)
    while os.sched_getscheduler(background) != os.SCHED_IDLE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.sched_getscheduler(background) == os.SCHED_IDLE  # it lowers itself before its imports
    try:
        _schedule_threads(background, os.SCHED_OTHER, 0)
        raised = True
    except OSError:  # not permitted (no CAP_SYS_NICE): it starts at its own priority, as users' do
        raised = False
    first = _background_calls(client, os.SCHED_OTHER if raised else os.SCHED_IDLE, thread_probe.answering)
    if raised:
        _schedule_threads(background, os.SCHED_IDLE, priority.LOWEST)
    return first[0][2], _background_calls(client)[-1][:2]


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


@pytest.mark.slow  # a store process, probes and a 2,000-value batch at the lowest priority: ~6 s of the default run
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: priorities and CPU time per thread")
def test_the_store_process_answers_each_call_at_its_callers_priority(tmp_path, monkeypatch):
    """The run writer's background thread is lowered alone (nice 19 under SCHED_IDLE: any
    training thread that wakes preempts it at once), and the store process answers its batches in
    a background process of its own lowered the same way; a call the job's thread waits for is answered at
    that thread's normal priority, so on a busy machine the job's end does not wait for everyone.
    The process shares the job's session (Linux's autogroup counts it with the job), in a process
    group of its own (a Ctrl-C in the terminal does not reach it)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    service = StoreService()
    service.open(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")
    try:
        client, experiment_id = service.opened()
        pid = service.proc.pid
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpgid(pid) == (pid if sys.version_info >= (3, 11) else os.getsid(pid))
        mine = (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))
        assert tuple(client.run(thread_probe.scheduling)) == mine  # the job's thread waits: its own priority

        answered_by, at = _background_up(client, pid)
        # the background process starts once the store is open, lowered before its imports; a
        # background call waits for its store to open and is answered by it (never by the store
        # process meanwhile at normal priority, taking a core from the training)
        (background,) = _children(pid)
        assert answered_by == background and at == (os.SCHED_IDLE, priority.LOWEST)
        assert (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)) == mine  # this thread untouched
        # answered by the store process's background process, lowered whole, with its own client
        assert os.getpgid(background) == os.getpgid(pid)  # out of the terminal's Ctrl-C too
        assert all(os.sched_getscheduler(int(t)) == os.SCHED_IDLE for t in os.listdir(f"/proc/{background}/task"))
        assert os.getpriority(os.PRIO_PROCESS, background) == priority.LOWEST
        assert [t for t in os.listdir(f"/proc/{pid}/task") if os.sched_getscheduler(int(t)) == os.SCHED_IDLE] == []

        writer = RunWriter(client, experiment_id, "job", None, {})
        deadline = time.monotonic() + 5
        while os.sched_getscheduler(writer._thread.native_id) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.01)  # the thread lowers itself as it starts
        assert os.sched_getscheduler(writer._thread.native_id) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, writer._thread.native_id) == priority.LOWEST
        # its beat's batch (2,000 values: ~0.3 s of MLflow's work) is answered on the lowered thread
        cpu = {tid: _cpu_s(tid, tid) for tid in (pid, background)}
        writer.log_series(names.TRAIN_LOSS, [1.0 / i for i in range(1, 2001)])
        real = MlflowClient(service.uri)
        deadline = time.monotonic() + 180  # answered under SCHED_IDLE: bounded, however busy the cores
        while len(real.get_metric_history(writer.run_id, names.TRAIN_LOSS)) < 2000 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(real.get_metric_history(writer.run_id, names.TRAIN_LOSS)) == 2000
        spent = {tid: _cpu_s(tid, tid) - cpu[tid] for tid in cpu}
        assert spent[background] > 5 * spent[pid], spent
        writer.end("FINISHED")
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


@pytest.mark.slow  # a store process and its background process: ~6 s of imports
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: SCHED_IDLE, /proc")
def test_a_background_call_stuck_mid_transaction_does_not_hold_up_the_jobs_call(tmp_path, monkeypatch):
    """On a machine whose cores other programs keep busy, a background call (the run writer's
    batch, answered at the lowest priority) can stall holding sqlite's write lock; it held a 10,000-
    epoch job's end 55 s. A call the job waits for (its end's tags) tells the store process to
    hurry: the background process is killed (its transaction rolled back) and the held call is
    answered at normal priority, then the job's. Each lands once, through the store process."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    db = tmp_path / "mlflow.db"
    service = StoreService()
    service.open(f"sqlite:///{db}", "exp")
    try:
        client, experiment_id = service.opened()
        run_id = client.create_run(experiment_id).info.run_id
        assert _background_up(client, service.proc.pid)[1] == (os.SCHED_IDLE, priority.LOWEST)
        held: list = []

        def background_call() -> None:
            priority.lowest(threading.get_native_id())
            held.append(tuple(client.run(thread_probe.hold_the_store, str(db), run_id, "held")))
        caller = threading.Thread(target=background_call, daemon=True)
        caller.start()
        deadline = time.monotonic() + 180  # the background process runs under SCHED_IDLE: bounded, however busy
        while not _write_locked(db) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _write_locked(db)  # the background process is stuck mid-transaction
        (stuck,) = _children(service.proc.pid)

        answered: list = []
        job = threading.Thread(target=lambda: answered.append(client.set_tag(run_id, names.OUTCOME_TAG, "ok")),
                               daemon=True)
        job.start()
        job.join(60)
        caller.join(60)
        assert answered == [None] and not caller.is_alive()
        # the held call was answered again by the store process's main thread, at normal priority
        assert held == [(os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))]
        assert stuck not in _children(service.proc.pid) and not _write_locked(db)
        assert service._local is None  # still through the store process: the job never opened the store
        real = MlflowClient(service.uri)
        assert [m.value for m in real.get_metric_history(run_id, "held")] == [1.0]
        assert real.get_run(run_id).data.tags[names.OUTCOME_TAG] == "ok"
    finally:
        service.close()


@pytest.mark.slow  # a store process and its background process: ~6 s of imports
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux: SCHED_IDLE, /proc")
def test_a_jobs_end_does_not_wait_for_a_starved_background_batch(tmp_path, monkeypatch):
    """The background process gets no CPU (stopped: what two busy loops do to a SCHED_IDLE process)
    while the run writer's beat sends a batch through it; the job's end — its queued values posted
    (``RunWriter.send_later``), then ``RunWriter.end`` — has the store process hurry that batch,
    stops the beat after it and sends the rest itself: it returns, and every value lands once."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    service = StoreService()
    service.open(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")
    try:
        client, experiment_id = service.opened()
        assert _background_up(client, service.proc.pid)[1] == (os.SCHED_IDLE, priority.LOWEST)
        (background,) = _children(service.proc.pid)
        writer = RunWriter(client, experiment_id, "job", None, {})
        deadline = time.monotonic() + 30
        while os.sched_getscheduler(writer._thread.native_id) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.01)  # the beat's thread lowers itself as it starts
        try:  # beside the other test worker's busy cores, a lowered beat could take its batch, then
            # send it only after the job's end below (answered then by the store process itself)
            os.sched_setscheduler(writer._thread.native_id, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, writer._thread.native_id, 0)
        except OSError:  # not permitted: as it is
            pass
        os.kill(background, signal.SIGSTOP)
        writer.log_series(names.TRAIN_LOSS, [1.0 / i for i in range(1, 2501)])  # 3 batches of ≤ 1,000
        while _unread_requests(background) == 0 and time.monotonic() < deadline + 30:
            time.sleep(0.05)  # the beat (2 s) takes its first batch and the store process hands it on
        assert len(writer._queue) == 1500 and _unread_requests(background) > 0  # waiting in the stopped process

        def job_end() -> None:  # as finish does: the queued values posted first, then the figure, then the run closed
            writer.send_later()
            writer.log_bytes(plot.render(_telemetry(), "job"), "telemetry.png")
            writer.end("FINISHED")
        ended = threading.Thread(target=job_end, daemon=True)
        ended.start()
        ended.join(60)
        assert not ended.is_alive() and background not in _children(service.proc.pid)
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
    # (sweeps.launch.slurm.requeue) and still needs its store to close the run and requeue
    client, experiment_id = service.opened()
    writer = RunWriter(client, experiment_id, "job", None, {})
    deadline = time.monotonic() + 60
    while not _children(service.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    helpers = [service.proc.pid, *_children(service.proc.pid)]
    assert len(helpers) == 2  # the store process and its background process
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
def test_a_dead_store_process_found_by_the_writers_background_thread_is_opened_by_the_jobs_thread_alone(
        service, monkeypatch):
    # the background thread runs at the lowest priority holding the pipe's lock: opening the store
    # there (importing mlflow) would hold the job's next call for as long as other programs keep
    # the cores busy — a Slurm job's run then outlived its time limit
    from sweeps.tracking import store_service

    opened_by: list[tuple[str, bool]] = []
    real_open = store_service._open_here

    def open_here(uri: str, experiment: str):
        opened_by.append((threading.current_thread().name, priority.lowered()))
        return real_open(uri, experiment)
    monkeypatch.setattr(store_service, "_open_here", open_here)
    client, experiment_id = service.opened()
    writer = RunWriter(client, experiment_id, "job", None, {})
    os.kill(service.proc.pid, signal.SIGKILL)
    service.proc.wait(timeout=10)
    writer.log_metrics({names.EPOCH_S: 1.0}, step=1)
    writer.queue_tags({"phase": "one"})
    deadline = time.monotonic() + 60
    while service._local is None and time.monotonic() < deadline:  # the background beat (every 2 s) finds it
        time.sleep(0.05)
    time.sleep(2 * batches.FLUSH_S)  # and tries again at its next beat
    assert service._local is not None and opened_by == []
    writer.log_metrics({names.EPOCH_S: 2.0}, step=2)
    writer.end("FINISHED")  # the job's own flush: the store opened here, on the job's thread
    assert opened_by == [("MainThread", False)]
    run = MlflowClient(service.uri).get_run(writer.run_id)
    assert [m.value for m in MlflowClient(service.uri).get_metric_history(writer.run_id, names.EPOCH_S)] == [1.0, 2.0]
    assert run.data.tags["phase"] == "one" and run.info.status == "FINISHED" and writer.lost == 0
