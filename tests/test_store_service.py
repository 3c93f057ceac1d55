"""The store's own process (sweeps.tracking.store_service): a job's store calls — run, params,
tags, metric batches, artifacts, dataset inputs, reads — answered by a real store process on a
real sqlite store, read back with a plain MlflowClient; its errors; its death mid-job (nothing
logged is lost); a store it cannot open; which command lines start one."""
from __future__ import annotations

import logging
import os
import signal
import time

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from sweeps import names
from sweeps.errors import UsageError
from sweeps.tracking import inputs
from sweeps.tracking.store_service import RemoteClient, StoreError, StoreService, _runs_one_job
from sweeps.tracking.writer import RunWriter


@pytest.fixture
def service(tmp_path):
    svc = StoreService()
    svc.open(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp")
    yield svc
    svc.close()


def test_a_jobs_store_calls_land_in_the_store_through_its_process(service, caplog):
    client, experiment_id = service.opened()
    assert isinstance(client, RemoteClient) and client.tracking_uri == service.uri
    writer = RunWriter(client, experiment_id, "mlp b64 cpu", None, {names.OUTCOME_TAG: names.RUNNING})
    writer.log_params({"model.hidden": 64, "batch": 64})
    writer.set_tags({names.HASH_TAG: "abc"})
    for epoch in (1, 2, 3):
        writer.log_metrics({names.EPOCH_S: 0.5 * epoch, names.TRAIN_LOSS: 1.0 / epoch}, step=epoch)
    writer.log_text("a,b\n1,2\n", "epochs.csv")
    writer.log_bytes(b"\x89PNG", "telemetry.png")
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
    os.kill(service.proc.pid, signal.SIGKILL)
    service.proc.wait(timeout=10)
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        writer.log_metrics({names.EPOCH_S: 2.0}, step=2)
        writer.set_tags({names.OUTCOME_TAG: names.OK})
        writer.end("FINISHED")  # every call after the death runs in this process, on its own client
    assert sum("store's process ended" in r.getMessage() for r in caplog.records) == 1
    _assert_whole(MlflowClient(service.uri), writer.run_id)


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
    (["-m", "batch=64,128"], False),  # a sweep's process opens the store itself for its parent run
    (["--multirun", "batch=64"], False),
    (["--help"], False),
    (["--hydra-help"], False),
    (["--cfg", "job"], False),
    (["--info"], False),
    (["--version"], False),
    (["--cfg"], False),  # malformed: Hydra says so; no store process for it
])
def test_only_a_command_that_runs_one_job_starts_a_store_process(argv, starts):
    assert _runs_one_job(argv) is starts


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux scheduling policies")
def test_the_store_process_and_the_writer_thread_yield_the_cpu_to_the_training(service):
    """Once the store is open the store process runs at nice 19 under SCHED_IDLE (any training
    thread that wakes preempts it at once) in a session whose autogroup is at nice 19 too; the
    run's background writer thread in the job's process is lowered the same way, alone: the
    job's own thread keeps its priority and policy."""
    client, experiment_id = service.opened()
    pid = service.proc.pid
    deadline = time.monotonic() + 10
    while os.sched_getscheduler(pid) != os.SCHED_IDLE and time.monotonic() < deadline:
        time.sleep(0.01)  # it lowers itself right after its "ready"
    assert os.sched_getscheduler(pid) == os.SCHED_IDLE
    assert os.getpriority(os.PRIO_PROCESS, pid) == 19
    if os.path.exists(f"/proc/{pid}/autogroup"):  # kernels with autogroup: "/autogroup-N nice 19"
        with open(f"/proc/{pid}/autogroup") as f:
            assert f.read().split()[-1] == "19"
    before = (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))
    writer = RunWriter(client, experiment_id, "job", None, {})
    try:
        thread = writer._thread  # its background sender
        deadline = time.monotonic() + 5
        while os.sched_getscheduler(thread.native_id) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.01)  # the thread lowers itself as it starts
        assert os.sched_getscheduler(thread.native_id) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == 19
        assert (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)) == before
    finally:
        writer.end("FINISHED")
