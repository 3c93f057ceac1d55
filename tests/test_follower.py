"""The follower on a real sqlite MLflow store: a job appends its epochs to the run's journal and
nothing else; the follower ships them beat by beat from the run's cursor, a drain ships the rest
through the job's last epoch, and every (metric, epoch) lands once — after a stall, a kill or a
replay too."""
from __future__ import annotations

import os
import signal
import time

import pytest

from sweeps import names
from sweeps.tracking.follower import delivery, follower, shipping
from sweeps.tracking.journal.cursor import CURSOR, Cursor
from sweeps.tracking.journal.journal import JOURNAL, EpochLog
from sweeps.tracking.store.store import open_client
from sweeps.tracking.writer.run_writer import RunWriter


def _job(tmp_path, every: int = 1):
    """(client, writer following its run's journal, the run's EpochLog) as a job opens them."""
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    writer = RunWriter(client, client.create_experiment("f"), "job", None, {})
    folder = tmp_path / "checkpoints" / "h1" / writer.run_id
    writer.keep_in(folder)
    writer.every_epochs, writer.every_evaluated = every, False
    epochs = EpochLog(writer, folder / JOURNAL, regression=False)
    writer.follow()
    return client, writer, epochs


def _append(epochs: EpochLog, first: int, last: int) -> None:
    for e in range(first, last + 1):
        epochs.append({"epoch": e, names.TRAIN_LOSS: 1.0 / e, names.EPOCH_S: 0.01 * e, "samples": 10})


def _steps(client, run_id: str, key: str = names.TRAIN_LOSS) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


def test_an_epochs_append_makes_no_store_call_and_the_follower_ships_the_journal_beat_by_beat(tmp_path, monkeypatch):
    """2,500 epochs appended: no ``log_batch`` from the job's thread; the follower (a thread here:
    an in-process client) ships them at its beats in batches of ≤ 1,000 values and moves the
    cursor; the drain leaves nothing behind."""
    monkeypatch.setattr(delivery, "FLUSH_S", 0.2)
    client, writer, epochs = _job(tmp_path)
    calls: list[str] = []
    real = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda *a, **k: (calls.append(threading_name()), real(*a, **k))[1])
    _append(epochs, 1, 2500)
    assert "MainThread" not in calls  # the job's thread made no store call per epoch
    _at_normal_priority(shipping.shipping(client)._thread._thread)
    deadline = time.monotonic() + 60
    while (Cursor(writer.cursor.path.parent).read() or 0) < 2499 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (Cursor(writer.cursor.path.parent).read() or 0) >= 2499  # shipped before the job's end
    writer.drain(2500)
    assert writer.drained() == 0
    writer.end("FINISHED")
    assert sorted(_steps(client, writer.run_id)) == list(range(1, 2501))
    assert sorted(_steps(client, writer.run_id, names.EPOCH_S)) == list(range(1, 2501))
    assert len(calls) <= 8  # 5,000 values: a handful of calls, not one an epoch


def _at_normal_priority(thread) -> None:
    """The follower thread (lowest priority, SCHED_IDLE, by design) back at normal priority where
    permitted: beside the other test worker's busy cores it would get no CPU for the test's length."""
    try:
        os.sched_setscheduler(thread.native_id, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, thread.native_id, 0)
    except (OSError, AttributeError):  # not permitted (no CAP_SYS_NICE), or not Linux: as it is
        pass


def threading_name() -> str:
    import threading

    return threading.current_thread().name


def test_a_capped_series_ships_its_stride_and_the_jobs_last_epoch_once(tmp_path, monkeypatch):
    """Stride 10: epochs 1, 10, 20, … and the job's last (57, off the stride) land, each once; the
    newest record waits for a later one or the drain (it may be the last)."""
    monkeypatch.setattr(delivery, "FLUSH_S", 0.1)
    client, writer, epochs = _job(tmp_path, every=10)
    _append(epochs, 1, 57)
    time.sleep(1.0)
    assert 57 not in _steps(client, writer.run_id)
    writer.drain(57)
    assert writer.drained() == 0
    writer.end("FINISHED")
    assert sorted(_steps(client, writer.run_id)) == [1, 10, 20, 30, 40, 50, 57]


def test_a_new_runs_follower_sends_its_first_batch_without_asking_the_store_and_a_resumed_runs_asks(
        tmp_path, monkeypatch):
    """A run the job just created holds none of its epochs: its first batch goes without
    :func:`~sweeps.tracking.follower.held.held_steps` (on a tracking server, every metric's whole
    history: 15 calls a run at each of 500 jobs' start). A resumed run's follower (the run
    reopened, its cursor possibly a batch behind) asks first; each epoch still lands once."""
    monkeypatch.setattr(delivery, "FLUSH_S", 0.1)
    asked: list[str] = []
    real = follower.held_steps
    monkeypatch.setattr(follower, "held_steps", lambda client, run_id, wanted: (asked.append(run_id),
                                                                              real(client, run_id, wanted))[1])
    client, writer, epochs = _job(tmp_path)
    _append(epochs, 1, 5)
    writer.drain(5)
    assert writer.drained() == 0
    assert asked == []  # new: nothing to ask
    epochs.close()
    resumed = RunWriter.attach(client, writer.run_id)
    resumed.keep_in(writer.cursor.path.parent)
    (writer.cursor.path.parent / CURSOR).write_text('{"epoch": 3}')  # a batch behind what the store holds
    resumed.follow()
    more = EpochLog(resumed, writer.cursor.path.parent / JOURNAL, regression=False)
    _append(more, 6, 8)
    resumed.drain(8)
    assert resumed.drained() == 0
    resumed.end("FINISHED")
    assert asked and set(asked) == {writer.run_id}  # resumed: asked before its first batch
    assert sorted(_steps(client, writer.run_id)) == list(range(1, 9))


def test_a_follower_whose_question_to_the_store_fails_asks_again_and_keeps_shipping(tmp_path, monkeypatch, caplog):
    """A resumed run's follower asks the store which epochs it holds before its first batch; where
    that question fails (a server gone for a moment), it is a failed send: said once, asked again
    at the next beat, and the follower goes on shipping the journal while the job runs — it does
    not stop, leaving the whole run to the job's end."""
    import logging

    monkeypatch.setattr(delivery, "FLUSH_S", 0.1)
    failures = [ConnectionError("Connection refused")]
    real = follower.held_steps

    def held_steps(client, run_id, wanted):
        if failures:
            raise failures.pop()
        return real(client, run_id, wanted)

    monkeypatch.setattr(follower, "held_steps", held_steps)
    client, writer, epochs = _job(tmp_path)
    _append(epochs, 1, 3)
    writer.drain(3)
    assert writer.drained() == 0
    epochs.close()
    resumed = RunWriter.attach(client, writer.run_id)  # not fresh: it asks before its first batch
    folder = writer.cursor.path.parent
    resumed.keep_in(folder)
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        resumed.follow()
        more = EpochLog(resumed, folder / JOURNAL, regression=False)
        _append(more, 4, 20)
        _at_normal_priority(shipping.shipping(client)._thread._thread)
        deadline = time.monotonic() + 60
        while (Cursor(folder).read() or 0) < 19 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (Cursor(folder).read() or 0) >= 19  # shipped by the follower, before the job's end
    assert failures == []
    assert len([r for r in caplog.records if "cannot ask which epochs" in r.getMessage()]) == 1
    resumed.drain(20)
    assert resumed.drained() == 0
    resumed.end("FINISHED")
    assert sorted(_steps(client, writer.run_id)) == list(range(1, 21))


def test_a_run_deleted_mid_job_is_followed_no_more_without_a_warning_and_its_drain_counts_the_rest(
        tmp_path, monkeypatch, caplog):
    """The user deletes a job's run (the MLflow UI's delete) after its follower shipped epochs 1-3:
    MLflow refuses every later write to it. The follower drops the run at its next refusal instead
    of retrying it every beat, says nothing (the job's end says it once), and the drain reports
    the values left; the store says the run is deleted, and a later done run of the same config
    clears the deleted run's folder."""
    import logging

    from sweeps.tracking.replay import resume
    from sweeps.tracking.store import store

    monkeypatch.setattr(delivery, "FLUSH_S", 0.1)
    client, writer, epochs = _job(tmp_path)
    _append(epochs, 1, 3)
    followed = shipping.shipping(client)._thread
    _at_normal_priority(followed._thread)
    deadline = time.monotonic() + 60
    while (Cursor(writer.cursor.path.parent).read() or 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.delete_run(writer.run_id)
    sends: list[int] = []
    real = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda *a, **k: (sends.append(1), real(*a, **k))[1])
    with caplog.at_level(logging.WARNING, logger="sweeps"):
        _append(epochs, 4, 10)
        deadline = time.monotonic() + 60
        while writer.run_id in followed.runs and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer.run_id not in followed.runs  # dropped at its first refusal
        refused = len(sends)
        time.sleep(0.5)  # beats go by: nothing more is sent for it
        assert len(sends) == refused == 1
        writer.drain(10)
        assert writer.drained() > 0  # the epochs after the deletion: kept in the journal, not sent
    assert not caplog.records
    assert store.deleted(client, writer.run_id)
    assert max(_steps(client, writer.run_id)) <= 3
    folder = writer.cursor.path.parent
    resume.clear_finished(tmp_path / "checkpoints", "h1", client, keep="a-later-done-run")
    assert not folder.exists()


def test_a_replay_after_a_dead_follower_sends_what_the_run_lacks_once(tmp_path):
    """A follower shipped epochs 1-4 and was killed after the store committed epochs 5-6 and
    before it wrote its cursor (it lags a batch); the replay asks the store first and sends 7-9."""
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(client.create_experiment("f")).info.run_id
    folder = tmp_path / "run"
    epochs = EpochLog(None, folder / JOURNAL, regression=False)
    _append(epochs, 1, 9)
    epochs.close()
    first = follower.Followed(run_id, str(folder), records=None)
    first.through = 4
    first._read()
    first._pending = first._pending[:4]
    assert first.ship(client, delivery.sender(client)) == 0 and Cursor(folder).read() == 4
    committed = follower.Followed(run_id, None, records=[{"epoch": e, names.TRAIN_LOSS: 1.0 / e,
                                                           names.EPOCH_S: 0.01 * e} for e in (5, 6)])
    committed.ship(client, delivery.sender(client), final=True)  # no cursor written: the kill came first
    sent, left = shipping.replay(client, run_id, str(folder), 1, True)
    assert (sent, left) == (6, 0) and Cursor(folder).read() == 9
    assert sorted(_steps(client, run_id)) == list(range(1, 10))


def test_a_journal_that_could_not_be_written_is_shipped_from_the_jobs_records_at_its_end(tmp_path):
    """A full disk ended the journal after epoch 2: the drain ships the rest from the records the
    job holds (from the cursor, nothing twice)."""
    client, writer, epochs = _job(tmp_path)
    _append(epochs, 1, 2)
    epochs._journal_failed(OSError(28, "No space left on device"))
    _append(epochs, 3, 5)
    assert epochs.unjournaled()
    writer.drain(5, epochs.records)
    assert writer.drained() == 0
    writer.end("FINISHED")
    assert sorted(_steps(client, writer.run_id)) == [1, 2, 3, 4, 5]


@pytest.mark.slow  # a follower process of its own: ~2-4 s of imports
@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="POSIX: a process stopped as a busy machine starves it")
def test_a_drain_takes_over_from_a_stalled_follower_process_and_every_epoch_lands_once(tmp_path, monkeypatch):
    """The follower process gets no CPU (stopped: what two busy loops do to a SCHED_IDLE process)
    with 3,000 epochs to ship: the job's end waits ``STALL_S`` for its cursor, then kills it (its
    transaction, if any, rolled back) and ships the rest at normal priority; the next follow starts
    another follower."""
    monkeypatch.setattr(shipping, "STALL_S", 1.0)
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    held = shipping.start(client, uri, "f")
    try:
        deadline = time.monotonic() + 120
        while not held._started() and time.monotonic() < deadline:
            for tid in os.listdir(f"/proc/{held._proc.pid}/task") if os.path.isdir("/proc/self/task") else ():
                _at_normal_priority(type("T", (), {"native_id": int(tid)}))  # its start, beside busy cores
            time.sleep(0.05)
        assert held._started()
        writer = RunWriter(client, client.create_experiment("f2"), "job", None, {})
        folder = tmp_path / "checkpoints" / "h1" / writer.run_id
        writer.keep_in(folder)
        epochs = EpochLog(writer, folder / JOURNAL, regression=False)
        writer.follow()
        stalled = held._proc
        os.kill(stalled.pid, signal.SIGSTOP)
        _append(epochs, 1, 3000)
        start = time.monotonic()
        writer.drain(3000)
        assert writer.drained() == 0
        assert time.monotonic() - start < 60 and stalled.poll() is not None  # taken over: the follower killed
        writer.end("FINISHED")
        assert sorted(_steps(client, writer.run_id)) == list(range(1, 3001))
        assert Cursor(folder).read() == 3000
        shipping.follow(client, "another", str(tmp_path / "other"), 1, True)
        assert held._proc is not None and held._proc is not stalled  # a new one for the next run
    finally:
        held.stop()
