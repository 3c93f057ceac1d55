"""Exactly once: each (metric, epoch) of a run is stored once, however many ways it reaches MLflow.

A job SIGKILLed just after its writer posted a batch, then rerun at once: the rerun replays the
dead job's journal while the dead job's store process may still ingest that batch. Both carry the
epoch's own timestamp (``names.TIMESTAMP_MS``), so MLflow's SQL store, which keys a value by
(key, timestamp, step, value), keeps one row; and the rerun first waits for the run's ship lock,
which that store process holds until it has answered everything (``sweeps.tracking.journal.cursor``)."""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import Param

from conftest import StartedCli, runs, store


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_a_batch_ingested_after_the_journal_was_replayed_is_not_stored_twice(tmp_path):
    """The race of a kill -9 and a quick rerun, in order: the dead job queued epochs 1-5 (its
    batch not yet ingested), the rerun's start replays the journal and closes the run, then the
    dead job's batch lands. Every (metric, epoch) is stored once."""
    from sweeps import names
    from sweeps.tracking.follower import delivery, follower
    from sweeps.tracking.replay import replay

    client, experiment, run_id, folder = _journaled_killed_run(
        tmp_path, 5, lambda e: {**_record(e), names.TEST_ACC: float("nan")})
    dead = follower.Followed(run_id, str(folder))  # the dead job's follower: read 1-5, asked the store, not yet sent
    dead._read()
    dead.checked = True

    assert replay.mark_stale(client, experiment, tmp_path / "checkpoints") == 1  # the rerun's start
    dead.ship(client, delivery.sender(client), final=True)  # the dead job's batch, ingested after the replay

    for key in (names.TRAIN_LOSS, names.EPOCH_S, names.TEST_ACC):
        steps = sorted(m.step for m in client.get_metric_history(run_id, key))
        assert steps == [1, 2, 3, 4, 5], (key, steps)
    assert client.get_run(run_id).info.status == "KILLED"


def test_params_tags_texts_and_inputs_a_killed_job_never_had_stored_reach_its_run_at_the_next_start(tmp_path,
                                                                                                     monkeypatch):
    """A job killed after it journaled its params, tags, config text and dataset inputs but before
    the store took them (its posted calls died with its store process; its queued tags with it):
    the next start sends what the run lacks and nothing twice, then closes the run killed — a text
    longer than a journal line keeps (a long job's epochs.csv) too, from the file it was written to."""
    import socket

    from omegaconf import OmegaConf

    from sweeps import names
    from sweeps.tracking.follower import delivery
    from sweeps.tracking.writer import inputs, records
    from sweeps.tracking.replay import replay
    from sweeps.tracking.writer import run_writer as writer
    from sweeps.tracking.store.store import open_client

    monkeypatch.setattr(delivery, "FLUSH_S", 30.0)  # the dead job's beat sends nothing during the test
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("race")
    tags = {names.HOST_TAG: socket.gethostname(), names.PID_TAG: str(_dead_pid()), names.HASH_TAG: "h1",
            names.OUTCOME_TAG: names.RUNNING}
    run_id = client.create_run(experiment, run_name="killed", tags=tags).info.run_id
    client.log_batch(run_id, params=[Param("already", "there")])
    folder = tmp_path / "checkpoints" / "h1" / run_id
    dead = writer.RunWriter.attach(client, run_id, reopen=False)
    dead.records = records.RecordLog(folder / records.RECORDS)
    posted = []
    monkeypatch.setattr(dead, "_later", lambda *args, **kwargs: posted.append(args))  # never reaches the store
    monkeypatch.setattr(dead, "post", lambda *args: posted.append(args))  # nor do the dataset inputs
    dead.log_params({"already": "there", "optimizer.lr": 0.1, "batch": 64})
    dead.set_tags({names.COMPILED_TAG: "no", "sweeps.note": "first"})
    dead.set_tags({"sweeps.note": "second"})
    dead.queue_tags({names.LR_TAG: "as written"})  # held for the next metric batch, which never came
    dead._tags.clear()
    dead.log_text("optimizer:\n  lr: 0.1\n", "config.yaml")
    long_text = "epoch,train/loss\n" + "".join(f"{i},{1 / i:.6f}\n" for i in range(1, 5000))
    assert len(long_text) > records.TEXT_MAX
    dead.log_text(long_text, "epochs.csv")
    inputs.log_job_data(dead, OmegaConf.create({"name": "diabetes"}), "generated:diabetes", [10], 354, 88,
                        regression=True)
    assert len(posted) == 7 and not client.get_run(run_id).data.tags.get("sweeps.note")
    assert not client.get_run(run_id).inputs.dataset_inputs

    assert replay.mark_stale(client, experiment, tmp_path / "checkpoints") == 1  # the next start
    run = client.get_run(run_id)
    assert run.data.params == {"already": "there", "optimizer.lr": "0.1", "batch": "64", names.TRAIN_EXAMPLES: "354",
                               names.TEST_EXAMPLES: "88", names.INPUT_SHAPE: "10"}
    assert sorted(i.dataset.name for i in run.inputs.dataset_inputs) == ["diabetes/test", "diabetes/train"]
    assert run.data.tags["sweeps.note"] == "second" and run.data.tags[names.COMPILED_TAG] == "no"
    assert run.data.tags[names.LR_TAG] == "as written"
    assert sorted(a.path for a in client.list_artifacts(run_id)) == ["config.yaml", "epochs.csv"]
    assert client.download_artifacts(run_id, "config.yaml", str(tmp_path)) and \
        (tmp_path / "config.yaml").read_text() == "optimizer:\n  lr: 0.1\n"
    assert client.download_artifacts(run_id, "epochs.csv", str(tmp_path)) and \
        (tmp_path / "epochs.csv").read_text() == long_text
    assert run.info.status == "KILLED" and run.data.tags[names.OUTCOME_TAG] == names.KILLED
    assert records.replay(client, client.get_run(run_id), folder) == 0  # a second start sends nothing again
    assert records.replay(client, client.get_run(run_id), tmp_path / "no journal") == 0  # a run journaled nothing
    dead.close()


def _duplicates(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT run_uuid, key, step, COUNT(*) FROM metrics WHERE step > 0 "
                           "GROUP BY run_uuid, key, step HAVING COUNT(*) > 1").fetchall()


TRIES = int(os.environ.get("SWEEPS_RACE_TRIES", "1"))  # ~1-2 min each beside a busy core; 20 for the full check


@pytest.mark.slow  # real jobs killed and rerun beside a busy core: ~1-2 min on 2 cores at 1 try
def test_kill_9_and_a_rerun_within_half_a_second_store_each_epoch_once(tmp_path):
    """``+experiment=diabetes batch=32``, SIGKILLed 1-4 s into its epochs and rerun 0.1-0.5 s later
    with a busy loop on the other core (the dead job's store process then ingests its last batch
    late), TRIES times (``SWEEPS_RACE_TRIES=20`` for 20): no (metric, epoch) stored
    twice, no run left RUNNING, each rerun ends ok."""
    rng = random.Random(52)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    # one torch thread: beside a busy loop, two threads that wait on each other made an epoch ~3 s
    args = ["-m", "+experiment=diabetes", "batch=32", "epochs=100", "device.threads=1", "checkpoint.every_epochs=10"]
    try:
        for attempt in range(TRIES):
            cwd = tmp_path / f"try{attempt}"
            cwd.mkdir()
            started = StartedCli(args, cwd)
            deadline = time.monotonic() + 120
            while not list(cwd.glob("checkpoints/*/*/epochs.jsonl")) and time.monotonic() < deadline:
                assert started.proc.poll() is None, started.result().stderr[-2000:]
                time.sleep(0.02)
            time.sleep(rng.uniform(1.0, 4.0))
            os.kill(started.proc.pid, signal.SIGKILL)
            started.proc.wait()
            time.sleep(rng.uniform(0.1, 0.5))
            rerun = StartedCli(args, cwd).result()
            assert rerun.returncode == 0, rerun.stderr[-2000:]
            time.sleep(1.0)  # a dead store process still ingesting gets its chance to write a duplicate
            assert _duplicates(cwd / "mlruns" / "mlflow.db") == [], f"try {attempt}"
            jobs = [r for r in runs(cwd, "diabetes") if r.data.tags.get("mlflow.parentRunId")]
            assert jobs and all(r.info.status != "RUNNING" for r in runs(cwd, "diabetes")), f"try {attempt}"
            assert jobs[-1].data.tags["outcome"] == "ok", f"try {attempt}"
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.parametrize("outcome,status", [("ok", "FINISHED"), ("oom", "FAILED")])
def test_a_job_killed_between_its_outcome_and_its_runs_status_is_closed_as_it_ended(tmp_path, outcome, status):
    """chaos seed 2914 fault 70: SIGKILL 256 ms after a job's last epoch, as its end had logged
    ``outcome=ok`` but not yet the run's status. The rerun's start closed the run as killed, then
    resumed it and trained its last epochs again; a run whose end logged a done outcome is closed
    as that outcome instead, its folder removed, so the rerun skips the job."""
    import socket

    from sweeps import names
    from sweeps.tracking.replay import replay
    from sweeps.tracking.journal.journal import JOURNAL
    from sweeps.tracking.store.store import open_client

    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("window")
    ids = {}
    for name, tag in (("ended", outcome), ("died", names.RUNNING)):  # the second: killed mid-run
        tags = {names.HOST_TAG: socket.gethostname(), names.PID_TAG: str(_dead_pid()), names.HASH_TAG: name,
                names.OUTCOME_TAG: tag}
        ids[name] = client.create_run(experiment, run_name=name, tags=tags).info.run_id
        (tmp_path / "checkpoints" / name / ids[name]).mkdir(parents=True)
        (tmp_path / "checkpoints" / name / ids[name] / JOURNAL).write_text('{"epoch": 1}\n')

    assert replay.mark_stale(client, experiment, tmp_path / "checkpoints") == 2
    ended, died = (client.get_run(ids[n]) for n in ("ended", "died"))
    assert (ended.info.status, ended.data.tags[names.OUTCOME_TAG]) == (status, outcome)
    assert not (tmp_path / "checkpoints" / "ended" / ids["ended"]).exists()  # as the job's end would have
    assert (died.info.status, died.data.tags[names.OUTCOME_TAG]) == ("KILLED", names.KILLED)
    assert (tmp_path / "checkpoints" / "died" / ids["died"]).is_dir()  # its checkpoints resume it


class _Store:
    """A client that passes every call to the real ``client``, but for those ``refuse`` (method
    name → ``fn(*args, **kwargs)``: raise, or return None to pass the call on)."""

    def __init__(self, client, **refuse):
        self._client, self._refuse = client, refuse

    def __getattr__(self, name):
        real = getattr(self._client, name)
        if name not in self._refuse:
            return real

        def call(*args, **kwargs):
            self._refuse[name](*args, **kwargs)
            return real(*args, **kwargs)
        return call


def _steps(client, run_id, key) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def _killed_run(client, experiment: str) -> str:
    import socket

    from sweeps import names

    tags = {names.HOST_TAG: socket.gethostname(), names.PID_TAG: str(_dead_pid()), names.HASH_TAG: "h1",
            names.OUTCOME_TAG: names.RUNNING}
    return client.create_run(experiment, run_name="killed", tags=tags).info.run_id


def _record(epoch: int) -> dict:
    from sweeps import names

    return {"epoch": epoch, names.TRAIN_LOSS: 1.0 / epoch, names.EPOCH_S: 0.01 * epoch}


def _journaled_killed_run(tmp_path, last: int, record=_record):
    """A run on a new sqlite store whose job (a dead process) journaled epochs 1..``last``
    (``record(epoch)`` each) and sent none: (client, experiment id, run id, the run's folder)."""
    from sweeps.tracking.journal.journal import JOURNAL, EpochLog
    from sweeps.tracking.store.store import open_client

    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("killed")
    run_id = _killed_run(client, experiment)
    folder = tmp_path / "checkpoints" / "h1" / run_id
    epochs = EpochLog(None, folder / JOURNAL, regression=False)
    for e in range(1, last + 1):
        epochs.append(record(e))
    epochs.close()
    return client, experiment, run_id, folder


def test_a_stale_runs_replay_starts_at_its_cursor_and_reads_no_metric_history(tmp_path, monkeypatch):
    """A killed run's next start looks at the epochs after the run's cursor (``shipped.json``)
    alone: its dead process journaled epochs 11-12 and never sent them, and its cursor lags at
    epoch 8 (it died between a batch's commit and the cursor's write). Epochs 11-12 are sent, 9-10
    are found in the run and not sent again, and no metric's whole history is read (a 10,000-epoch
    run holds ~200,000 rows): each epoch is stored once and the cursor ends at 12."""
    from sweeps import names
    from sweeps.tracking.follower import delivery, follower
    from sweeps.tracking.replay import replay
    from sweeps.tracking.journal.cursor import Cursor
    from sweeps.tracking.journal.journal import JOURNAL, EpochLog

    client, experiment, run_id, folder = _journaled_killed_run(tmp_path, 10)
    follower.Followed(run_id, str(folder)).ship(client, delivery.sender(client))  # its follower's beats
    assert Cursor(folder).read() == 10
    late = EpochLog(None, folder / JOURNAL, regression=False)  # journaled, never sent
    for e in (11, 12):
        late.append(_record(e))
    late.close()
    (folder / "shipped.json").write_text('{"epoch": 8}')

    def no_history(*args, **kwargs):
        raise AssertionError("the replay read a metric's history")

    sent = []
    stale = _Store(client, get_metric_history=no_history, log_batch=lambda run, metrics=(), **k: sent.extend(metrics))
    assert replay.mark_stale(stale, experiment, tmp_path / "checkpoints") == 1
    assert sorted({m.step for m in sent}) == [11, 12]
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert _steps(client, run_id, key) == list(range(1, 13)), key
    assert Cursor(folder).read() == 12
    assert client.get_run(run_id).info.status == "KILLED"


def test_the_cursor_stays_before_a_batch_the_store_refused_and_the_next_beat_sends_it(tmp_path):
    """The follower ships epochs 1-2; the store refuses the batch of epochs 3-6 (not a transient
    error: no retry). The cursor stays at 2 and nothing of 3-6 is stored; the next beat sends the
    same epochs from the journal, then each epoch is stored once and the cursor is at 6."""
    from mlflow.exceptions import MlflowException

    from sweeps import names
    from sweeps.tracking.follower import delivery, follower
    from sweeps.tracking.journal.cursor import Cursor
    from sweeps.tracking.journal.journal import JOURNAL, EpochLog
    from sweeps.tracking.store.store import open_client

    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(client.create_experiment("cursor")).info.run_id
    refused = []

    def refuse_epoch_3(run, metrics=(), **kwargs):
        if not refused and any(m.step == 3 for m in metrics):
            refused.append(3)
            raise MlflowException("INVALID_PARAMETER_VALUE: refused for the test")

    store_ = _Store(client, log_batch=refuse_epoch_3)
    epochs = EpochLog(None, tmp_path / JOURNAL, regression=False)
    shipper = follower.Followed(run_id, str(tmp_path))
    for e in range(1, 3):
        epochs.append(_record(e))
    assert shipper.ship(store_, delivery.sender(store_)) == 0 and Cursor(tmp_path).read() == 2
    for e in range(3, 7):
        epochs.append(_record(e))
    assert shipper.ship(store_, delivery.sender(store_)) == 8  # refused: two values of each of 3-6 left
    assert refused and Cursor(tmp_path).read() == 2
    assert _steps(client, run_id, names.TRAIN_LOSS) == [1, 2]
    assert shipper.ship(store_, delivery.sender(store_), final=True) == 0  # the next beat
    epochs.close()
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert _steps(client, run_id, key) == [1, 2, 3, 4, 5, 6], key
    assert Cursor(tmp_path).read() == 6


class _Died(BaseException):
    """The job's process, SIGKILLed: nothing of its end runs."""


def test_a_resumed_job_killed_again_never_has_the_epochs_it_ran_again_replayed(tmp_path, in_process, monkeypatch):
    """A job interrupted after epoch 6 resumes from its epoch-3 checkpoint and runs epochs 4-6
    again: it journals them anew (new timestamps) and does not send them, as the run holds them.
    Killed before its first batch (its cursor lagging at epoch 2: the first process died between a
    batch's commit and the cursor's write), the next start's replay sends epochs 7-8 and nothing
    of 4-6 again: each (metric, epoch) is stored once."""
    from sweeps import names
    from sweeps.job import lifecycle
    from sweeps.tracking.follower import delivery, shipping
    from sweeps.tracking.replay import replay
    from sweeps.train.loop import Trainer

    tiny = ["model=mlp", "model.hidden=[16]", "dataset=synthetic", "dataset.shape=[1,8,8]",
            "dataset.train_size=64", "dataset.test_size=16", "batch=16", "epochs=8", "device=cpu",
            "telemetry.interval_s=0", "checkpoint.every_epochs=1", "checkpoint.keep=10"]
    train_epoch, calls = Trainer.train_epoch, iter(range(100))

    def interrupted_at_epoch_7(*args, **kwargs):
        if next(calls) == 6:
            raise KeyboardInterrupt
        return train_epoch(*args, **kwargs)

    monkeypatch.setattr(Trainer, "train_epoch", interrupted_at_epoch_7)
    with pytest.raises(KeyboardInterrupt):
        in_process(tiny)
    monkeypatch.setattr(Trainer, "train_epoch", train_epoch)
    (folder,) = (tmp_path / "checkpoints").glob("*/*")
    for late in sorted(folder.glob("epoch_*.pt"))[3:]:  # its newest checkpoint: epoch 3
        late.unlink()
    (folder / "shipped.json").write_text('{"epoch": 2}')

    def died(job, *args):
        job.epochs.close()
        shipping.shipping(job.client)._thread.take(job.run_id)  # its follower (a thread here) stops with it
        raise _Died

    monkeypatch.setattr(delivery, "FLUSH_S", 30.0)  # the rerun's follower ships nothing before it dies
    monkeypatch.setattr(lifecycle, "finish", died)
    with pytest.raises(_Died):
        in_process(tiny)
    client, run_id = store(tmp_path), folder.name
    client.set_tag(run_id, names.PID_TAG, str(_dead_pid()))
    experiment = client.get_run(run_id).info.experiment_id
    assert replay.mark_stale(client, experiment, tmp_path / "checkpoints") == 1
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert _steps(client, run_id, key) == list(range(1, 9)), key


_SHIPPER = """
import sys, time
from pathlib import Path
from mlflow import MlflowClient
from mlflow.entities import Metric
from sweeps import names
from sweeps.tracking.journal import cursor
from sweeps.tracking.journal.journal import read_journal
uri, run_id, folder, wait_s = sys.argv[1:5]
client = MlflowClient(uri)
cursor.hold(client, folder)
print("holding", flush=True)
time.sleep(float(wait_s))  # the batch and tags the dead job had sent it, answered late (a busy core)
client.set_tag(run_id, names.OUTCOME_TAG, names.RUNNING)
values = [Metric(k, v, r[names.TIMESTAMP_MS], r["epoch"]) for r in read_journal(Path(folder) / "epochs.jsonl")
          for k, v in r.items() if "/" in k]
client.log_batch(run_id, metrics=values)
"""


def _killed_run_with_a_shipper(tmp_path, wait_s: float):
    """A run whose job was killed after journaling epochs 1-5 and whose store process lives on,
    holding the run's ship lock, and answers the job's last posts (``outcome=running``, the five
    epochs' values) ``wait_s`` seconds later: (client, experiment, run id, the shipper's process)."""
    client, experiment, run_id, folder = _journaled_killed_run(tmp_path, 5)
    shipper = subprocess.Popen([sys.executable, "-c", _SHIPPER, client.tracking_uri, run_id, str(folder), str(wait_s)],
                               stdout=subprocess.PIPE, text=True)
    assert shipper.stdout.readline().strip() == "holding"
    return client, experiment, run_id, shipper


def test_a_rerun_closes_a_killed_run_only_after_its_dead_jobs_store_process_has_shipped_what_it_was_sent(
        tmp_path, caplog):
    """kill -9 of a job and a quick rerun: the dead job's store process still holds the run's ship
    lock and answers the job's last posts 1.5 s later. The rerun's start waits for it, saying
    which process it waits for, then replays nothing twice and closes the run as killed — the dead
    job's late ``outcome=running`` does not land over it (without the wait it did)."""
    from sweeps import names
    from sweeps.tracking.replay import replay

    client, experiment, run_id, shipper = _killed_run_with_a_shipper(tmp_path, wait_s=1.5)
    try:
        with caplog.at_level("INFO", logger="sweeps"):
            assert replay.mark_stale(client, experiment, tmp_path / "checkpoints") == 1
        ended_first = shipper.poll()
        assert shipper.wait(timeout=60) == 0  # whatever it still had to send is in now
    finally:
        shipper.kill()
        shipper.wait()
    run = client.get_run(run_id)
    assert (run.info.status, run.data.tags[names.OUTCOME_TAG]) == ("KILLED", names.KILLED)
    assert ended_first == 0, "the replay went on while the dead job's store process still shipped"
    assert f"waiting for process {shipper.pid}" in caplog.text
    for key in (names.TRAIN_LOSS, names.EPOCH_S):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == [1, 2, 3, 4, 5], key


def test_a_shipper_that_never_ends_holds_a_rerun_up_for_the_bounded_wait_only(tmp_path, caplog):
    """A dead job's store process that does not finish (a store that hangs it): the rerun's start
    waits ``timeout_s``, warns naming it, and replays and closes the run anyway."""
    from sweeps import names
    from sweeps.tracking.journal import cursor
    from sweeps.tracking.replay import replay

    client, experiment, run_id, shipper = _killed_run_with_a_shipper(tmp_path, wait_s=60)
    try:
        start = time.monotonic()
        with caplog.at_level("INFO", logger="sweeps"):
            assert not cursor.wait_for_shipper(tmp_path / "checkpoints" / "h1" / run_id, run_id, timeout_s=1.0)
        assert 1.0 <= time.monotonic() - start < 5
        assert f"process {shipper.pid} still ships its values" in caplog.text
        shipper.kill()  # the lock goes with the process, however it ends
        shipper.wait()
        assert cursor.wait_for_shipper(tmp_path / "checkpoints" / "h1" / run_id, run_id, timeout_s=0)
        assert replay.mark_stale(client, experiment, tmp_path / "checkpoints") == 1
    finally:
        shipper.kill()
        shipper.wait()
    assert client.get_run(run_id).data.tags[names.OUTCOME_TAG] == names.KILLED
    assert len(client.get_metric_history(run_id, names.TRAIN_LOSS)) == 5


def test_the_process_that_ingests_a_run_holds_its_ship_lock_from_its_start_to_its_end(tmp_path):
    """A job's run holds its ship lock while it is open (an in-process client: the job's own
    process ingests) and gives it back when it ends."""
    import fcntl

    from sweeps.tracking.journal import cursor
    from sweeps.tracking.store.store import open_client
    from sweeps.tracking.writer.run_writer import RunWriter

    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    writer = RunWriter(client, client.create_experiment("lock"), "job", None, {})
    folder = tmp_path / "checkpoints" / "h1" / writer.run_id
    writer.keep_in(folder)

    def free() -> bool:
        fd = os.open(folder / cursor.SHIP_LOCK, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    try:
        assert not free()
        assert (folder / cursor.SHIP_LOCK).read_text() == str(os.getpid())
    finally:
        writer.end("FINISHED")
    assert free()
