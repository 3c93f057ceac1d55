"""The MLflow writer process on a real sqlite store: after the hand-over a job's epochs cost the
training process no store call, a writer process killed with SIGKILL mid-job loses nothing, and
every epoch lands in MLflow exactly once."""
from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import sys
import threading
import time

import pytest
from mlflow import MlflowClient

from conftest import runs, store
from sweeps import names
from sweeps.tracking.store import open_client
from sweeps.tracking import relay
from sweeps.tracking.epochs import EpochLog, read_journal
from sweeps.tracking.writer import RunWriter


@pytest.fixture
def handoff(monkeypatch):
    """Hand a run to the writer process after 3 epochs (not 100), however few values are left; the
    process is ended after the test."""
    monkeypatch.setattr(relay, "HANDOFF_EPOCHS", 3)
    monkeypatch.setattr(relay, "HANDOFF_VALUES", 0)
    yield
    relay.stop()


def _run(tmp_path) -> tuple[MlflowClient, RunWriter]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a new store as a job makes it
    return client, RunWriter(client, client.create_experiment("w"), "job", None, {})


def _record(epoch: int) -> dict:
    return {"epoch": epoch, names.TRAIN_LOSS: 1.0 / epoch, names.EPOCH_S: 0.001 * epoch, "samples": 10}


def _steps(client, run_id, key=names.TRAIN_LOSS) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def _at_normal_priority(pid: int) -> bool:
    """Give the writer process, every thread of it, normal priority back once it has lowered itself
    (``priority.lowest`` sets SCHED_IDLE last), where this process may (root, CAP_SYS_NICE): under
    SCHED_IDLE it gets no CPU while the other test worker keeps both cores busy (CI: nothing sent in
    60 s). False where it may not, or where the process never lowered itself."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    deadline = time.monotonic() + 30
    while os.sched_getscheduler(pid) != os.SCHED_IDLE:  # until then it runs at this process's priority
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return _raise_threads(pid) and _raise_threads(pid)  # a thread started during the first pass inherited SCHED_IDLE


def _raise_threads(pid: int) -> bool:
    """Every thread of ``pid`` at normal priority now (False where this process may not). A thread
    that lowers itself later (the run writer's sending thread, once the writer process has
    imported MLflow) needs another call."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, int(tid), 0)
        except PermissionError:  # RLIMIT_NICE: an unprivileged process cannot raise another
            return False
        except ProcessLookupError:  # that thread ended
            pass
    return True


@pytest.mark.slow  # a writer process of its own (~5 s), as the file's other tests
def test_after_the_handoff_an_epoch_makes_no_store_call_in_the_training_process(tmp_path, handoff, monkeypatch):
    client, writer = _run(tmp_path)
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600, last_epoch=400)
    for epoch in range(1, 4):
        log.append(_record(epoch))
    assert log.relayed and relay.running()
    pid = relay._proc.pid  # its own process group in this process's session: autogroup counts it with the job
    assert os.getpgid(pid) == pid and (os.getsid(pid) == os.getsid(0) or sys.version_info < (3, 11))
    writer.flush()  # the 3 in-process epochs; from here on this process sends no metric
    calls = []
    real = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda *a, **k: (calls.append(k.get("metrics")), real(*a, **k)))
    for epoch in range(4, 401):
        log.append(_record(epoch))
        assert not writer._queue  # nothing queued in this process
    assert calls == []  # nor sent by it
    log.close()  # waits for the writer process to have sent the rest (or sends what it could not)
    writer.end("FINISHED")
    assert _steps(client, writer.run_id) == list(range(1, 401))
    assert _steps(client, writer.run_id, names.EPOCH_S) == list(range(1, 401))
    assert [r["epoch"] for r in read_journal(tmp_path / "run" / "epochs.jsonl")] == list(range(1, 401))


@pytest.mark.slow  # ~9 s: two writer processes' imports and a SIGKILL (the default run stays under 2.5 min)
def test_a_writer_process_killed_mid_job_loses_nothing_and_logs_each_epoch_once(tmp_path, handoff):
    # with mlflow.log_every_epochs=7, so the series is thinned alike in-process (epochs 1-3), in
    # the writer process (killed halfway) and in the replay on close (what it had not sent)
    client, writer = _run(tmp_path)
    writer.every_epochs = 7
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600)
    for epoch in range(1, 301):
        log.append({**_record(epoch), **({names.TEST_LOSS: 0.5} if epoch == 150 else {})})
    pid = relay.running()
    raised = _at_normal_priority(pid)  # so it sends some before the kill however busy the cores are
    deadline = time.monotonic() + 60
    while len(_steps(client, writer.run_id)) <= 2 and time.monotonic() < deadline:  # it has sent some
        if raised:  # its sending thread lowers itself when it starts: under SCHED_IDLE beside the other
            _raise_threads(pid)  # test worker's busy cores it sent nothing in 60 s (CI, 2 runs in 14)
        time.sleep(0.2)
    # unprivileged on a busy machine it may have sent nothing yet: the kill then loses only what it
    # read, and every assertion below still holds
    assert len(_steps(client, writer.run_id)) > 2 or not raised, "the writer process sent nothing in 60 s"
    os.kill(pid, signal.SIGKILL)  # mid-job: what it read and had not sent dies with it
    for epoch in range(301, 604):
        log.append(_record(epoch))
    log.close()  # finds it dead: replays from the records, checking the run's history
    writer.end("FINISHED")
    series = sorted({1, 150, 603} | set(range(7, 604, 7)))  # first, every 7th, the evaluated one, the last
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert _steps(client, writer.run_id, key) == series, key  # each once
    assert _steps(client, writer.run_id, names.TEST_LOSS) == [150]
    assert [r["epoch"] for r in read_journal(tmp_path / "run" / "epochs.jsonl")] == list(range(1, 604))
    assert len(log.records) == 603  # epochs.csv is written from these
    # the next job that hands over starts a new writer process
    _, second = _run(tmp_path / "second")
    log = EpochLog(second, tmp_path / "second" / "run" / "epochs.jsonl", regression=True, log_every_s=3600)
    for epoch in range(1, 11):
        log.append(_record(epoch))
    assert relay.running() not in (None, pid)
    log.close()
    second.end("FINISHED")
    assert _steps(second.client, second.run_id) == list(range(1, 11))


@pytest.mark.slow  # starts a writer process (~3 s): the default suite keeps the kill -9 and no-store-call tests
def test_a_stalled_writer_process_is_taken_over_and_each_epoch_lands_once(tmp_path, handoff, monkeypatch):
    """A writer process that makes no progress (here SIGSTOP: as if starved of CPU at nice 19)
    is killed after STALL_S; the job, idle by then, sends the rest itself."""
    monkeypatch.setattr(relay, "STALL_S", 1.0)
    client, writer = _run(tmp_path)
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600)
    for epoch in range(1, 201):
        log.append(_record(epoch))
    pid = relay.running()
    os.kill(pid, signal.SIGSTOP)
    log.close()
    assert relay.running() is None  # killed: it can send nothing more
    writer.end("FINISHED")
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert _steps(client, writer.run_id, key) == list(range(1, 201))


@pytest.mark.slow  # a writer process's start, a slowed drain and a replay of ~20,000 values: 16 s here, 51 s in CI
def test_a_writer_process_that_creeps_is_taken_over_mid_drain_and_each_epoch_lands_once(tmp_path, handoff,
                                                                                         monkeypatch, caplog):
    """A writer process that keeps making progress, but slowly (here its store is locked 4/5 of the
    time, so it sends a batch a second whatever this CPU's speed: as a process starved of CPU at
    the lowest priority beside busy programs creeps), is killed mid-drain once its pace over
    STALL_S is under SLOW_RATE; the job replays the rest, checking what the process had sent."""
    monkeypatch.setattr(relay, "STALL_S", 3.0)
    monkeypatch.setattr(relay, "SLOW_RATE", 1e9)  # any pace creeps: the store's lock makes it last on any CPU
    client, writer = _run(tmp_path)
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600)
    epochs = 10_000  # 20,000 values: ~15 s for the slowed process, taken over after ~4 s
    for epoch in range(1, 11):
        log.append(_record(epoch))
    deadline = time.monotonic() + 60
    while len(_steps(client, writer.run_id)) < 10 and time.monotonic() < deadline:  # it has started and sends
        time.sleep(0.2)
    pid, stop = relay.running(), threading.Event()

    def hold_the_store() -> None:  # until the take-over kills the process: then the job's replay needs it
        db = sqlite3.connect(tmp_path / "mlflow.db", timeout=60, isolation_level=None)
        try:
            while not stop.is_set():
                os.kill(pid, 0)  # ProcessLookupError once killed and reaped
                db.execute("BEGIN IMMEDIATE")
                stop.wait(0.8)
                db.execute("COMMIT")
                time.sleep(0.2)
        except ProcessLookupError:
            pass
        finally:
            db.close()
    holder = threading.Thread(target=hold_the_store, daemon=True)
    holder.start()
    try:
        for epoch in range(11, epochs + 1):
            log.append(_record(epoch))
        with caplog.at_level(logging.WARNING, logger="sweeps"):
            log.close()
    finally:
        stop.set()
        holder.join()
    # taken over while it progressed; where the other test worker keeps both cores busy the process,
    # under SCHED_IDLE, may give no sign at all for STALL_S and is taken over as stalled instead
    assert ("values/s; the job sends the rest itself" in caplog.text
            or "no progress in 3 s; the job sends the rest itself" in caplog.text), caplog.text
    assert relay.running() is None  # killed: it can send nothing more
    writer.end("FINISHED")
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert _steps(client, writer.run_id, key) == list(range(1, epochs + 1)), key  # each once


def test_a_drain_is_taken_over_when_its_pace_would_keep_the_job_waiting(monkeypatch):
    """The creep rule on the progress lines' (monotonic s, values left): slower than SLOW_RATE over
    the last STALL_S with more than STALL_S to go at that pace; a quick drain, or a slow one that is
    nearly done, is waited for."""
    monkeypatch.setattr(relay, "STALL_S", 5.0)
    monkeypatch.setattr(relay, "SLOW_RATE", 1000.0)
    creeping = [(t, 40_000 - 300 * t) for t in range(0, 7)]  # 300 values/s, ~130 s to go
    assert not relay._creeps(creeping[:5])  # under STALL_S of history: not judged yet
    assert relay._creeps(creeping[:6]) and relay._creeps(creeping)
    quick = [(t, 40_000 - 5_000 * t) for t in range(0, 7)]  # 5,000 values/s
    assert not relay._creeps(quick)
    almost_done = [(t, 2_000 - 300 * t) for t in range(0, 6)]  # 300 values/s, 500 left: < 2 s to go
    assert not relay._creeps(almost_done)
    fitful = [(0.0, 9_000), (5.5, 8_000), (6.5, 7_000)]  # two batches of 1,000 in 6.5 s: ~300 values/s
    assert relay._creeps(fitful)


def test_a_job_with_few_values_to_come_keeps_its_in_process_queue(tmp_path, handoff, monkeypatch):
    # 2 values an epoch: the 497 epochs to come are 994 values, fewer than a process start is worth
    monkeypatch.setattr(relay, "HANDOFF_VALUES", 1000)
    client, writer = _run(tmp_path)
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600, last_epoch=500)
    for epoch in range(1, 501):
        log.append(_record(epoch))
    assert not log.relayed and relay.running() is None  # no process started for it
    log.close()
    writer.end("FINISHED")
    assert _steps(client, writer.run_id) == list(range(1, 501))


def test_a_thinned_series_counts_only_the_epochs_it_sends(tmp_path, handoff, monkeypatch):
    # 1,998 epochs to come, 2 values each: 3,996 values, but at log_every_epochs=10 only ~400 are
    # sent: not worth a process. The series holds the first, every 10th and the last epoch
    monkeypatch.setattr(relay, "HANDOFF_VALUES", 2000)
    assert relay.worth_handing_over(1998, 2, every=1) and not relay.worth_handing_over(1998, 2, every=10)
    monkeypatch.setattr(relay, "HANDOFF_VALUES_SPARE_CORE", 300)  # a core the training leaves free: fewer pay
    assert relay.worth_handing_over(1998, 2, every=10, spare_core=True)
    client, writer = _run(tmp_path)
    writer.every_epochs = 10
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600, last_epoch=2001)
    for epoch in range(1, 2002):
        log.append(_record(epoch))
    assert not log.relayed and relay.running() is None
    log.close()
    writer.end("FINISHED")
    assert _steps(client, writer.run_id) == [1, *range(10, 2001, 10), 2001]
    assert len(read_journal(tmp_path / "run" / "epochs.jsonl")) == 2001  # the journal keeps every epoch


@pytest.mark.slow  # starts a writer process (~3 s): the default suite keeps the kill -9 and no-store-call tests
def test_a_full_disk_after_the_handoff_sends_the_later_epochs_in_process(tmp_path, handoff):
    client, writer = _run(tmp_path)
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600)
    for epoch in range(1, 21):
        log.append(_record(epoch))

    class Full:  # the disk fills up: this epoch's line and every later one are refused
        name = "epochs.jsonl"

        def write(self, *_):
            raise OSError(28, "No space left on device")

        flush = close = write
    log._file = Full()
    for epoch in range(21, 41):
        log.append(_record(epoch))
    assert log.off and writer._queue  # the epochs after the journal stopped are queued in-process
    log.close()
    writer.end("FINISHED")
    assert _steps(client, writer.run_id) == list(range(1, 41))


@pytest.mark.slow  # starts a writer process (~3 s): the default suite keeps the kill -9 and no-store-call tests
def test_a_long_job_through_the_writer_process_lands_every_epoch_once(in_process, tiny, tmp_path, handoff, caplog):
    """The job hands its run over; at its end the writer process has sent it all, or, starved of
    CPU (it runs under SCHED_IDLE: the other test worker busy on both cores starved it for 60 s and
    more), is taken over after STALL_S: every epoch lands once either way."""
    assert in_process([*tiny, "model=mlp", "model.hidden=[16]", "epochs=40", "telemetry.interval_s=0",
                       "log_every_s=60"]) == "ok"
    taken_over = "the job sends the rest itself" in caplog.text
    assert relay.running() or taken_over  # the job handed its run over
    (run,) = runs(tmp_path)
    client = store(tmp_path)
    for key in (names.TRAIN_LOSS, names.EPOCH_S, names.TEST_LOSS):
        assert _steps(client, run.info.run_id, key) == list(range(1, 41))
    assert run.data.tags[names.OUTCOME_TAG] == "ok" and run.info.status == "FINISHED"


@pytest.mark.slow  # a real `mlflow server`, started twice: ~1 min here
def test_a_server_down_mid_job_loses_nothing_and_logs_each_epoch_once(tmp_path, handoff):
    """The tracking server goes away after the hand-over and comes back on the same port and
    database: the writer process retries, and every epoch lands once."""
    from test_tracking_server import _start_server, _stop_server

    server, uri = _start_server(tmp_path)
    try:
        client = MlflowClient(uri)
        writer = RunWriter(client, client.create_experiment("w"), "job", None, {})
        log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600)
        for epoch in range(1, 101):
            log.append(_record(epoch))
        assert log.relayed
        _stop_server(server)  # down: the writer process's sends fail and are retried
        for epoch in range(101, 301):
            log.append(_record(epoch))
        time.sleep(3)
        port = int(uri.rsplit(":", 1)[1])
        import test_tracking_server

        free_port = test_tracking_server._free_port
        test_tracking_server._free_port = lambda: port  # back on the same address and database
        try:
            server, _ = _start_server(tmp_path)
        finally:
            test_tracking_server._free_port = free_port
        log.close()
        writer.end("FINISHED")
        for key in (names.TRAIN_LOSS, names.EPOCH_S):
            assert _steps(client, writer.run_id, key) == list(range(1, 301))
    finally:
        _stop_server(server)


@pytest.mark.parametrize("epochs", [300, 10_000])
def test_at_the_defaults_a_short_job_logs_every_epoch_and_a_long_one_at_most_series_points(tmp_path, epochs):
    # a job that evaluates every epoch (the default): 300 epochs are each in the run's series;
    # 10,000 are ≤ 320 points (mlflow.series_points), the first and the last among them; the
    # journal keeps every epoch either way
    from conftest import compose
    from sweeps.tracking import series

    client, writer = _run(tmp_path)
    writer.every_epochs, writer.every_evaluated = series.of_config(compose([f"epochs={epochs}"]))
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600, last_epoch=epochs)
    for epoch in range(1, epochs + 1):
        log.append({**_record(epoch), names.TEST_RMSE: 1.0 / epoch})
    log.close()
    writer.end("FINISHED")
    steps = _steps(client, writer.run_id, names.TEST_RMSE)
    assert _steps(client, writer.run_id) == steps
    if epochs <= 320:
        assert steps == list(range(1, epochs + 1))
    else:
        assert len(steps) <= 320 and steps[0] == 1 and steps[-1] == epochs
    assert len(read_journal(tmp_path / "run" / "epochs.jsonl")) == epochs


def test_the_writer_process_and_a_replay_thin_evaluated_epochs_as_the_job_does(tmp_path):
    # a stride of 5 set by the cap (evaluated=False): the writer process's follower and a replay
    # after the job's death send the first, each 5th and (the replay, as the job's end) the last
    from sweeps.tracking.relay_process import Follower

    journal = tmp_path / "run" / "epochs.jsonl"
    journal.parent.mkdir(parents=True)
    records = [{**_record(epoch), names.TEST_RMSE: 1.0} for epoch in range(1, 24)]
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    client, writer = _run(tmp_path / "follower")
    Follower(writer, str(journal), 0, 0, every=5, evaluated=False).drain(23)
    assert _steps(client, writer.run_id, names.TEST_RMSE) == [1, 5, 10, 15, 20]
    client, writer = _run(tmp_path / "replay")
    writer.every_epochs, writer.every_evaluated = 5, False
    writer.replay(records)
    writer.close()
    assert _steps(client, writer.run_id, names.TEST_RMSE) == [1, 5, 10, 15, 20, 23]
