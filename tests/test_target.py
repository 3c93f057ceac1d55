"""Time to a target quality (``target.*``): per job, from its own per-epoch history, stopped there
when asked, missed without harm, and counted once across a kill and resume. Real jobs on
scikit-learn's diabetes data in-process against a real sqlite store."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import TEST_CONF, runs, store
from sweeps.errors import UsageError

DIABETES = ["+experiment=diabetes", "batch=128", "device=cpu", TEST_CONF]


def _history(cwd: Path, run, key: str) -> list[float]:
    return [m.value for m in sorted(store(cwd).get_metric_history(run.info.run_id, key), key=lambda m: m.step)]


def _first_met(values: list[float], target: float) -> int:
    return next(i + 1 for i, v in enumerate(values) if v <= target)


def test_a_reachable_target_is_timed_from_the_jobs_own_history(in_process, tmp_path):
    """Reached: the three summaries and the tag, ``target/epochs`` the first epoch whose
    ``test/rmse`` met it, the time the training + evaluation time up to it (≤ total), the examples
    and steps the epochs' own; all epochs still run (stop=false)."""
    assert in_process([*DIABETES, "epochs=6", "target.metric=test/rmse", "target.value=70", "target.mode=min"]) == "ok"
    run = runs(tmp_path, "diabetes")[-1]
    m = run.data.metrics
    assert run.data.tags["sweeps.target"] == "reached"
    rmse = _history(tmp_path, run, "test/rmse")
    assert len(rmse) == 6
    first = _first_met(rmse, 70)
    assert m["target/epochs"] == first
    assert m["time/to_target_s"] <= m["time/total_s"]
    spent = sum(_history(tmp_path, run, "time/epoch_s")[:first]) + sum(_history(tmp_path, run, "time/eval_s")[:first])
    assert math.isclose(m["time/to_target_s"], spent, rel_tol=1e-6)
    assert m["target/samples"] == first * 354 and m["target/steps"] == first * math.ceil(354 / 128)


def test_stop_ends_the_job_at_the_epoch_that_reached_it(in_process, tmp_path):
    assert in_process([*DIABETES, "epochs=50", "target.metric=test/rmse", "target.value=70", "target.mode=min",
                       "target.stop=true"]) == "ok"
    run = runs(tmp_path, "diabetes")[-1]
    assert run.data.tags["sweeps.target"] == "reached" and run.data.tags["outcome"] == "ok"
    rmse = _history(tmp_path, run, "test/rmse")
    assert len(rmse) == run.data.metrics["target/epochs"] < 50 and rmse[-1] <= 70 < min(rmse[:-1] + [math.inf])


def test_an_unreachable_target_is_missed_and_the_job_stays_ok(in_process, tmp_path):
    assert in_process([*DIABETES, "epochs=4", "target.metric=test/rmse", "target.value=1", "target.mode=min",
                       "target.stop=true"]) == "ok"
    run = runs(tmp_path, "diabetes")[-1]
    assert run.data.tags["sweeps.target"] == "missed" and run.data.tags["outcome"] == "ok"
    assert len(_history(tmp_path, run, "test/rmse")) == 4
    assert not {"time/to_target_s", "target/epochs", "target/samples"} & set(run.data.metrics)


@pytest.mark.parametrize("overrides, says", [
    (["target.metric=test/acc"], "target.value"),
    (["target.metric=test/final_acc", "target.value=0.9"], "not a per-epoch metric"),
    (["target.metric=test/acc", "target.value=0.9", "target.mode=up"], "target.mode"),
])
def test_a_bad_target_is_one_line(in_process, overrides, says):
    with pytest.raises(UsageError) as e:
        in_process([*DIABETES, "epochs=2", *overrides])
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow  # three in-process jobs, one killed and resumed: ~4 s
def test_a_killed_and_resumed_job_times_its_target_like_an_uninterrupted_one(in_process, tmp_path, monkeypatch):
    """A Ctrl-C in epoch 3, then the rerun resumes: ``target/epochs`` equals an uninterrupted
    run's with the same seed, and ``time/to_target_s`` sums every epoch up to it once — the time
    before the kill included."""
    job = [*DIABETES, "model=interrupt_once", "epochs=6", "checkpoint.every_epochs=1", "target.metric=train/loss",
           "target.mode=min"]
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    assert in_process([*job, "target.value=0"]) == "ok"  # unreachable: learn the loss curve first
    loss = _history(plain, runs(plain, "diabetes")[-1], "train/loss")
    value = loss[3]  # the 4th epoch's loss: reached after the kill in epoch 3
    assert in_process([*job, f"target.value={value}", "resume=false"]) == "ok"
    reference = runs(plain, "diabetes")[-1].data.metrics

    monkeypatch.chdir(tmp_path)
    (tmp_path / "interrupt.flag").touch()
    with pytest.raises(KeyboardInterrupt):
        in_process([*job, f"target.value={value}"])
    assert runs(tmp_path, "diabetes")[-1].data.tags["outcome"] == "killed"
    assert in_process([*job, f"target.value={value}"]) == "ok"
    run = runs(tmp_path, "diabetes")[-1]
    assert run.data.tags["job.resumed"] == "true"
    m = run.data.metrics
    assert m["target/epochs"] == reference["target/epochs"] == _first_met(loss, value)
    first = int(m["target/epochs"])
    epochs = _history(tmp_path, run, "time/epoch_s")
    evals = _history(tmp_path, run, "time/eval_s")
    assert len(epochs) == 6  # every epoch logged once
    assert math.isclose(m["time/to_target_s"], sum(epochs[:first]) + sum(evals[:first]), rel_tol=1e-6)
    assert m["time/to_target_s"] > sum(epochs[2:first])  # more than the resumed part alone


@pytest.mark.slow  # a sweep of its own (~3.5 s); the target's own tests above stay
def test_compare_and_results_carry_the_time_to_target(tmp_path, capsys):
    """``--compare`` has time/epochs/steps-to-target rows; ``sweeps.results`` the columns and the
    reached/missed tag."""
    import sweeps
    from conftest import cli_in_process
    from sweeps.report.__main__ import main as report

    proc = cli_in_process(["-m", *DIABETES, "epochs=3", "batch=32,128", "target.metric=test/rmse",
                           "target.value=70", "target.mode=min"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    monkeypatch = pytest.MonkeyPatch()
    try:
        monkeypatch.chdir(tmp_path)
        capsys.readouterr()
        assert report(["--compare", "--experiment", "diabetes", "--by", "batch"]) == 0
        out = capsys.readouterr().out
        table = sweeps.results("diabetes")
    finally:
        monkeypatch.undo()
    assert "| time to target [s] |" in out and "| epochs to target |" in out
    assert {"time/to_target_s", "target/epochs", "target/steps", "target"} <= set(table.columns)
    assert set(table["target"]) <= {"reached", "missed"} and len(table) == 2
    reached = table[table["target"] == "reached"]
    assert (reached["time/to_target_s"] > 0).all() and (reached["target/epochs"] >= 1).all()
