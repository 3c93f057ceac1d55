"""The run writer and the epoch journal on a real sqlite MLflow store: metrics are sent off the
training path, a job's records survive its process, and every epoch reaches the store once."""
from __future__ import annotations

import csv
import json

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from conftest import runs, store
from sweeps import names
from sweeps.tracking.store.store import open_client
from sweeps.tracking.follower import delivery
from sweeps.tracking.journal.journal import EpochLog, read_journal
from sweeps.tracking.writer.run_writer import RunWriter


def _client(tmp_path) -> tuple[MlflowClient, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a new store as a job makes it
    return client, client.create_experiment("w")


def _records(n: int) -> list[dict]:
    return [{"epoch": e, "train/loss": 1.0 / e, "time/epoch_s": 0.01 * e, "samples": 10} for e in range(1, n + 1)]


def _steps(client, run_id, key="train/loss") -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_logging_job_level_values_costs_no_store_round_trip_and_the_end_sends_them_in_few_calls(tmp_path, monkeypatch):
    client, exp = _client(tmp_path)
    w = RunWriter(client, exp, "job", None, {})
    calls = []
    real = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda *a, **k: (calls.append(1), real(*a, **k)))
    for rec in _records(2500):
        w.log_metrics({k: v for k, v in rec.items() if "/" in k}, step=rec["epoch"])
    assert len(calls) <= 1  # queued: at most a background send happened meanwhile
    w.end("FINISHED")
    assert _steps(client, w.run_id) == list(range(1, 2501))
    assert len(calls) <= 6  # 5,000 values in chunks of 1,000, not one call per epoch


def test_queued_tags_ride_with_the_next_metric_batch_and_all_reach_the_run(tmp_path, monkeypatch):
    client, exp = _client(tmp_path)
    w = RunWriter(client, exp, "job", None, {})
    sent = []
    real = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda run_id, **k: (sent.append(k), real(run_id, **k)))
    w.queue_tags({names.THREADS_TAG: 2, names.LOADER_TAG: "in-process"})
    w.log_metrics({names.EPOCH_S: 0.5}, step=1)
    w.queue_tags({names.PEAK_TAG: "none"})
    assert sent == []  # no store call of their own
    w.flush()
    assert len(sent) == 1 and {t.key for t in sent[0]["tags"]} == {names.THREADS_TAG, names.LOADER_TAG, names.PEAK_TAG}
    assert [m.key for m in sent[0]["metrics"]] == [names.EPOCH_S]
    w.queue_tags({names.TELEMETRY_TAG: "host only"})  # nothing left to send with: a batch of its own at the end
    w.end("FINISHED")
    tags = client.get_run(w.run_id).data.tags
    assert tags[names.THREADS_TAG] == "2" and tags[names.PEAK_TAG] == "none" and tags[names.TELEMETRY_TAG] == "host only"
    assert client.get_run(w.run_id).info.status == "FINISHED"


def test_the_journal_keeps_every_epoch_and_a_torn_last_line_is_ignored(tmp_path):
    journal = tmp_path / "run" / "epochs.jsonl"
    log = EpochLog(None, journal, regression=False, log_every_s=60)
    for rec in _records(5):
        log.append(rec)
    log.close()
    with open(journal, "a") as f:
        f.write('{"epoch": 6, "train/lo')  # the process died mid-write
    assert [r["epoch"] for r in read_journal(journal)] == [1, 2, 3, 4, 5]
    assert [r["epoch"] for r in read_journal(journal, up_to_epoch=3)] == [1, 2, 3]
    assert json.loads(journal.read_text().splitlines()[0])["train/loss"] == 1.0


def test_replay_sends_what_a_dead_process_had_not_shipped_exactly_once(tmp_path):
    """A job journaled epochs 1-6, its follower shipped 1-2 (the cursor says so) and the process
    died: a replay sends 3-6 (two metrics each), a second replay nothing."""
    from sweeps.tracking.follower import follower

    client, exp = _client(tmp_path)
    first = RunWriter(client, exp, "job", None, {})
    folder = tmp_path / "run"
    log = EpochLog(None, folder / "epochs.jsonl", regression=False)
    for rec in _records(2):
        log.append(rec)
    follower.Followed(first.run_id, str(folder)).ship(client, delivery.sender(client), final=True)
    for rec in _records(6)[2:]:
        log.append(rec)
    log.close()
    again = RunWriter.attach(client, first.run_id)
    again.keep_in(folder)
    assert again.replay(read_journal(folder / "epochs.jsonl")) == 4 * 2
    assert again.replay(read_journal(folder / "epochs.jsonl")) == 0  # a second replay finds nothing missing
    again.end("FINISHED")
    assert _steps(client, first.run_id) == [1, 2, 3, 4, 5, 6]
    assert _steps(client, first.run_id, "time/epoch_s") == [1, 2, 3, 4, 5, 6]


def test_a_busy_store_is_retried_and_nothing_is_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(delivery, "RETRIES", (0.01, 0.01, 0.01))
    client, exp = _client(tmp_path)
    w = RunWriter(client, exp, "job", None, {})
    real, failures = client.log_batch, iter(range(2))

    def busy(*args, **kwargs):  # the server's pool is full twice, then answers
        if next(failures, None) is not None:
            raise MlflowException("QueuePool limit of size 1 overflow 0 reached, connection timed out")
        return real(*args, **kwargs)
    monkeypatch.setattr(client, "log_batch", busy)
    for rec in _records(3):
        w.log_metrics({"train/loss": rec["train/loss"]}, step=rec["epoch"])
    w.end("FINISHED")
    assert w.lost == 0 and _steps(client, w.run_id) == [1, 2, 3]


def test_console_rows_are_throttled_but_the_first_and_last_always_show(caplog):
    caplog.set_level("INFO", logger="sweeps")
    log = EpochLog(None, None, regression=False, log_every_s=3600, last_epoch=10_000)
    for rec in _records(10_000):
        rec.update({"test/loss": 1.0, "test/acc": 0.5, "train/acc": 0.5, "time/eval_s": 0.0,
                    "time/elapsed_s": 0.0, "phase/sum_s": 0.0})
        log.append(rec)
    rows = [r.getMessage() for r in caplog.records]
    assert len(rows) == 4  # header, epoch 1, "… 9998 epoch(s) not shown", epoch 10,000
    assert "9998 epoch(s) not shown" in rows[2] and rows[3].split()[0] == "10000"


def test_epochs_csv_has_every_column_of_every_epoch(in_process, tiny, tmp_path):
    """eval.every_epochs=2: epoch 1 has no test metrics, epochs 2 and 4 have them. The artifact's
    header is the union of the records' columns, and each row's cells sit under their own names."""
    assert in_process([*tiny, "model=mlp", "epochs=4", "eval.every_epochs=2", "telemetry.interval_s=0",
                       "checkpoint.every_epochs=0"]) == "ok"
    (run,) = runs(tmp_path)
    path = store(tmp_path).download_artifacts(run.info.run_id, "epochs.csv", str(tmp_path))
    with open(path, newline="") as f:
        header, *rows = list(csv.reader(f))
    assert {names.TEST_LOSS, names.TEST_ACC, names.TRAIN_LOSS, names.EPOCH_S} <= set(header)
    assert all(len(row) == len(header) for row in rows)
    table = [dict(zip(header, row)) for row in rows]
    assert [r["epoch"] for r in table] == ["1", "2", "3", "4"]
    assert [bool(r[names.TEST_LOSS]) for r in table] == [False, True, False, True]
    losses = {int(m.step): m.value for m in store(tmp_path).get_metric_history(run.info.run_id, names.TEST_LOSS)}
    assert {int(r["epoch"]): float(r[names.TEST_LOSS]) for r in table if r[names.TEST_LOSS]} == losses


def test_a_resumed_run_does_not_log_its_step_0_values_twice(tmp_path):
    """A killed job resumes in its run and logs batch size, lr and FLOPs again at its restart:
    each keeps one point at step 0; a value that changed is still logged, and a new one."""
    client, exp = _client(tmp_path)
    first = RunWriter(client, exp, "job", None, {})
    first.log_metrics({names.BATCH: 64, names.LR: 0.1})
    first.log_metrics({"train/loss": 1.0}, step=1)
    first.end("KILLED")
    again = RunWriter.attach(client, first.run_id)
    again.log_metrics({names.BATCH: 64, names.LR: 0.2, names.FLOPS_PER_EXAMPLE: 10.0})
    again.log_metrics({"train/loss": 0.5}, step=2)
    again.end("FINISHED")
    history = {k: sorted((m.step, m.value) for m in client.get_metric_history(first.run_id, k))
               for k in (names.BATCH, names.LR, names.FLOPS_PER_EXAMPLE, "train/loss")}
    assert history[names.BATCH] == [(0, 64.0)]
    assert sorted(v for _, v in history[names.LR]) == [0.1, 0.2]
    assert history[names.FLOPS_PER_EXAMPLE] == [(0, 10.0)] and history["train/loss"] == [(1, 1.0), (2, 0.5)]


def test_a_resumed_run_keeps_the_summary_its_killed_process_had_logged(tmp_path):
    """A job's end posted its summary (step 0), then the process was killed before it closed the
    run; the next start resumes the run, and the job's end logs no second point of any key."""
    client, exp = _client(tmp_path)
    first = RunWriter(client, exp, "job", None, {})
    first.log_metrics({"train/loss": 1.0}, step=1)
    first.log_summary({names.JOB_S: 1.0, names.TOTAL_S: 0.5})
    first.close()  # sent; the run is left RUNNING, as by a SIGKILL (then marked killed)
    again = RunWriter.attach(client, first.run_id)
    again.log_summary({names.JOB_S: 2.0, names.TOTAL_S: 0.5, names.OVERHEAD_S: 0.1})
    again.end("FINISHED")
    history = {k: sorted((m.step, m.value) for m in client.get_metric_history(first.run_id, k))
               for k in (names.JOB_S, names.TOTAL_S, names.OVERHEAD_S)}
    assert history == {names.JOB_S: [(0, 1.0)], names.TOTAL_S: [(0, 0.5)], names.OVERHEAD_S: [(0, 0.1)]}


def test_log_every_epochs_thins_the_run_series_and_epochs_csv_keeps_every_epoch(in_process, tiny, tmp_path):
    assert in_process([*tiny, "model=mlp", "epochs=11", "eval.every_epochs=5", "mlflow.log_every_epochs=4",
                       "telemetry.interval_s=0", "checkpoint.every_epochs=0"]) == "ok"
    (run,) = runs(tmp_path)
    client = store(tmp_path)
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, names.TRAIN_LOSS))
    assert steps == [1, 4, 5, 8, 10, 11]  # first, every 4th, the evaluated 5 and 10, the last (evaluated)
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, names.TEST_LOSS)) == [5, 10, 11]
    path = client.download_artifacts(run.info.run_id, "epochs.csv", str(tmp_path))
    with open(path, newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == [str(e) for e in range(1, 12)]
    assert run.data.params["mlflow.log_every_epochs"] == "4"
    assert run.data.metrics[names.TOTAL_S] > 0 and names.MEDIAN_EPOCH_S in run.data.metrics  # from all 11 epochs


def test_series_points_caps_the_run_series_on_a_round_stride(in_process, tiny, tmp_path):
    # 23 epochs, at most ~5 points: a stride of 5 (23 / 5 = 4.6, rounded up to 1-2-5), so the series
    # holds the first, each 5th, the evaluated ones (10 and 20 are on the stride) and the last
    assert in_process([*tiny, "model=mlp", "epochs=23", "eval.every_epochs=10", "mlflow.series_points=5",
                       "telemetry.interval_s=0", "checkpoint.every_epochs=0"]) == "ok"
    (run,) = runs(tmp_path)
    client = store(tmp_path)
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, names.TRAIN_LOSS)) == [1, 5, 10, 15, 20, 23]
    path = client.download_artifacts(run.info.run_id, "epochs.csv", str(tmp_path))
    with open(path, newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == [str(e) for e in range(1, 24)]
    assert run.data.params["mlflow.series_points"] == "5"


@pytest.mark.parametrize("every, points, epochs, stride", [
    (10, 320, 200, 10),  # study 5's default job: under the cap, log_every_epochs holds
    (10, 320, 10_000, 50),  # its 10,000 epochs: 31.25 rounded up to 50 (200 points)
    (1, 320, 320, 1), (1, 320, 321, 2), (1, 320, 641, 5), (1, 320, 3_201, 20),
    (7, 320, 10_000, 50), (100, 320, 10_000, 100),  # the larger of the two
    (1, None, 10**6, 1), (1, 3, 10**8, 5 * 10**7),
])
def test_the_series_stride_is_the_round_number_that_keeps_it_under_series_points(every, points, epochs, stride):
    from sweeps.tracking.follower.series import stride as series_stride, stride_of_run

    assert series_stride(every, points, epochs) == stride
    params = {"mlflow.log_every_epochs": str(every), "mlflow.series_points": str(points), "epochs": str(epochs)}
    assert stride_of_run(params) == stride  # a replay after the job's death agrees (None logs as "None")


@pytest.mark.parametrize("eval_every, stride", [
    (1, 50), (25, 50), (100, 50),  # the stride lands on evaluations, or each evaluation on it: as is
    (7, 35), (3, 60), (40, 40),  # neither: eval_every × 1, 2, 5, … (31.25 rounded up on the evaluations)
])
def test_a_capped_stride_lands_on_evaluated_epochs(eval_every, stride):
    # 10,000 epochs at series_points=320: a stride of 50 alone would keep one evaluation in 350
    # epochs at eval.every_epochs=7; the curve of test/… values keeps ~as many points as train/…
    from sweeps.tracking.follower.series import stride as series_stride, stride_of_run

    assert series_stride(1, 320, 10_000, eval_every) == stride
    params = {"mlflow.log_every_epochs": "1", "mlflow.series_points": "320", "epochs": "10000",
              "eval.every_epochs": str(eval_every)}
    assert stride_of_run(params) == stride


def test_the_series_cap_thins_evaluated_epochs_too_and_log_every_epochs_alone_does_not():
    from sweeps.tracking.follower.series import in_series, of_run

    evaluated = [{"epoch": e, "train/loss": 1.0, "test/rmse": 1.0} for e in range(1, 10_001)]
    every, each_evaluated = of_run({"mlflow.log_every_epochs": "1", "mlflow.series_points": "320",
                                    "epochs": "10000", "eval.every_epochs": "1"})
    assert (every, each_evaluated) == (50, False)
    kept = [r["epoch"] for r in evaluated if in_series(r, every, each_evaluated)]
    assert kept == [1, *range(50, 10_001, 50)] and len(kept) <= 320  # the last (10,000) is on the stride here
    # no cap reached: log_every_epochs keeps each evaluated epoch, as it always did
    every, each_evaluated = of_run({"mlflow.log_every_epochs": "4", "mlflow.series_points": "320", "epochs": "11",
                                    "eval.every_epochs": "5"})
    assert (every, each_evaluated) == (4, True)
    assert [r["epoch"] for r in evaluated[:11] if in_series(r, every, each_evaluated)] == list(range(1, 12))


@pytest.mark.parametrize("epochs, line", [
    (320, None),  # a short job at the defaults: every epoch in its series, nothing to say
    (10_000, "  MLflow series: 1 in 50 of 10000 epochs (mlflow.series_points=320); all in epochs.csv"),
])
def test_the_console_says_once_where_every_epoch_is_when_the_default_series_thins_it(epochs, line):
    from conftest import compose
    from sweeps.tracking.follower.series import console_line

    assert console_line(compose(["+experiment=diabetes", "batch=full", f"epochs={epochs}"])) == line
    assert line is None or len(line) <= 100  # one console line


def test_a_series_stride_of_bad_settings_is_refused():
    from sweeps.tracking.follower.series import stride

    for every, points, eval_every in ((0, None, 1), (1, 0, 1), (1, 320, 0)):
        with pytest.raises(ValueError, match="use 1 or more"):
            stride(every, points, 100, eval_every)


def test_a_series_points_below_1_stops_with_one_line():
    from conftest import compose
    from sweeps.config.checks import validate
    from sweeps.errors import UsageError

    with pytest.raises(UsageError, match=r"^mlflow\.series_points=0 is not valid: use null [^\n]*$"):
        validate(compose(["mlflow.series_points=0"]))


def test_a_log_every_epochs_below_1_stops_with_one_line():
    from conftest import compose
    from sweeps.config.checks import validate
    from sweeps.errors import UsageError

    with pytest.raises(UsageError, match=r"^mlflow\.log_every_epochs=0 is not valid: use 1 [^\n]*$"):
        validate(compose(["mlflow.log_every_epochs=0"]))
