"""Which epochs reach a run's MLflow series, on a real sqlite store: the follower ships those of
the series (:func:`sweeps.tracking.follower.series.in_series`) from the job's journal, the journal keeps
every epoch, a full disk stops the journal and not the series, and a replay after a killed job
thins the series as the job did."""
from __future__ import annotations


import pytest
from mlflow import MlflowClient

from sweeps import names
from sweeps.tracking.journal.journal import EpochLog, read_journal
from sweeps.tracking.store.store import open_client
from sweeps.tracking.writer.run_writer import RunWriter


def _run(tmp_path) -> tuple[MlflowClient, RunWriter]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a new store as a job makes it
    writer = RunWriter(client, client.create_experiment("w"), "job", None, {})
    writer.keep_in(tmp_path / "run")  # its journal: run/epochs.jsonl
    return client, writer


def _finish(writer: RunWriter, log: EpochLog, status: str) -> None:
    """The run's end as a job's makes it: its journal drained (from its records where the journal
    could not hold them), then the run closed."""
    writer.follow()
    writer.drain(log.records[-1]["epoch"] if log.records else 0, log.records if log.unjournaled() else None)
    assert writer.drained() == 0
    writer.end(status)


def _record(epoch: int) -> dict:
    return {"epoch": epoch, names.TRAIN_LOSS: 1.0 / epoch, names.EPOCH_S: 0.001 * epoch, "samples": 10}


def _steps(client, run_id, key=names.TRAIN_LOSS) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_a_thinned_series_holds_the_first_every_nth_and_the_last_epoch(tmp_path):
    # log_every_epochs=10: the series holds the first, every 10th and the last epoch
    client, writer = _run(tmp_path)
    writer.every_epochs = 10
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600, last_epoch=2001)
    for epoch in range(1, 2002):
        log.append(_record(epoch))
    log.close()
    _finish(writer, log, "FINISHED")
    assert _steps(client, writer.run_id) == [1, *range(10, 2001, 10), 2001]
    assert len(read_journal(tmp_path / "run" / "epochs.jsonl")) == 2001  # the journal keeps every epoch


def test_a_full_disk_mid_job_stops_the_journal_and_not_the_series(tmp_path):
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
    assert log.off  # said once, and the job goes on
    log.close()
    _finish(writer, log, "FINISHED")
    assert _steps(client, writer.run_id) == list(range(1, 41))  # every epoch in the series
    assert [r["epoch"] for r in read_journal(tmp_path / "run" / "epochs.jsonl")] == list(range(1, 21))
    assert client.get_run(writer.run_id).data.tags[names.CHECKPOINTS_TAG].startswith("off: cannot append")


@pytest.mark.parametrize("journaled", [False, True], ids=["before-its-journal-line", "after-its-journal-line"])
def test_a_signal_inside_an_epochs_append_still_gets_that_epoch_to_mlflow_once(tmp_path, journaled):
    # a SIGINT lands in the append of epoch 4 (chaos seed 2915, fault 164): before its journal line
    # was written, or after; the job's end then closes the run as killed, and the run holds
    # epochs 1-4, each once
    client, writer = _run(tmp_path)
    journal = tmp_path / "run" / "epochs.jsonl"
    log = EpochLog(writer, journal, regression=True, log_every_s=3600)
    for epoch in range(1, 4):
        log.append(_record(epoch))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if journaled:
        log._console = interrupted
    else:
        write, log._file.write = log._file.write, interrupted
    with pytest.raises(KeyboardInterrupt):
        log.append(_record(4))
    if not journaled:
        log._file.write = write
    log.close()
    _finish(writer, log, "KILLED")
    assert [r["epoch"] for r in read_journal(journal)] == ([1, 2, 3, 4] if journaled else [1, 2, 3])
    assert _steps(client, writer.run_id) == [1, 2, 3, 4]
    assert _steps(client, writer.run_id, names.EPOCH_S) == [1, 2, 3, 4]


@pytest.mark.parametrize("epochs", [300, 10_000])
def test_at_the_defaults_a_short_job_logs_every_epoch_and_a_long_one_at_most_series_points(tmp_path, epochs):
    # a job that evaluates every epoch (the default): 300 epochs are each in the run's series;
    # 10,000 are ≤ 320 points (mlflow.series_points), the first and the last among them; the
    # journal keeps every epoch either way
    from conftest import compose
    from sweeps.tracking.follower import series

    client, writer = _run(tmp_path)
    writer.every_epochs, writer.every_evaluated = series.of_config(compose([f"epochs={epochs}"]))
    log = EpochLog(writer, tmp_path / "run" / "epochs.jsonl", regression=True, log_every_s=3600, last_epoch=epochs)
    for epoch in range(1, epochs + 1):
        log.append({**_record(epoch), names.TEST_RMSE: 1.0 / epoch})
    log.close()
    _finish(writer, log, "FINISHED")
    steps = _steps(client, writer.run_id, names.TEST_RMSE)
    assert _steps(client, writer.run_id) == steps
    if epochs <= 320:
        assert steps == list(range(1, epochs + 1))
    else:
        assert len(steps) <= 320 and steps[0] == 1 and steps[-1] == epochs
    assert len(read_journal(tmp_path / "run" / "epochs.jsonl")) == epochs


def test_a_replay_thins_evaluated_epochs_as_the_job_does(tmp_path):
    # a stride of 5 set by the cap (evaluated=False): a replay after the job's death sends the
    # first, each 5th and (as the job's end does) the last epoch, every evaluated epoch or not
    records = [{**_record(epoch), names.TEST_RMSE: 1.0} for epoch in range(1, 24)]
    client, writer = _run(tmp_path / "replay")
    writer.every_epochs, writer.every_evaluated = 5, False
    writer.replay(records)
    writer.close()
    assert _steps(client, writer.run_id, names.TEST_RMSE) == [1, 5, 10, 15, 20, 23]
