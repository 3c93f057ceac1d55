"""Sweeps on real data that is here offline: MNIST digits as an ImageFolder, scikit-learn's diabetes.

The MNIST sweep is a whole end-to-end process (slow); the diabetes sweep runs through the same
entry point in-process."""
from __future__ import annotations

import math

import pytest

from conftest import cli_in_process, run_cli, runs, store
from sweeps import names


def _jobs(cwd, experiment="sweeps"):
    return {r.data.tags["sweeps.overrides"]: r for r in runs(cwd, experiment) if "mlflow.parentRunId" in r.data.tags}


@pytest.mark.slow  # two real-data jobs to an accuracy: ~5 s on 2 cores
def test_diabetes_regression_full_batch_and_minibatch(tmp_path):
    proc = cli_in_process(["-m", "+experiment=diabetes", "epochs=20"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path, "diabetes")
    assert set(jobs) == {"batch=full", "batch=32"}
    full, mini = jobs["batch=full"], jobs["batch=32"]
    assert full.data.metrics["batch"] == 354  # the whole training split in one step
    assert full.data.metrics["lr"] == pytest.approx(0.01)  # lr_scaling=none
    client = store(tmp_path)
    for job in (full, mini):
        assert "test/acc" not in job.data.metrics and "train/acc" not in job.data.metrics
        rmse = client.get_metric_history(job.info.run_id, "test/rmse")
        assert [m.step for m in sorted(rmse, key=lambda m: m.step)] == list(range(1, 21))
        # RMSE in the target's units: the target's std is ~77, a trained model does better than that
        assert 0 < job.data.metrics["test/final_rmse"] < 77 and math.isfinite(job.data.metrics["test/final_rmse"])
    assert "rmse" in proc.stdout[proc.stdout.rindex("first epoch s"):]


@pytest.mark.slow
def test_offline_mnist_preset(tmp_path, mnist_folder, monkeypatch):
    """The README's offline example: mlp and cnn10_narrow at batch 64 and 256, 2 epochs on the CPU,
    on 8,000 real digits (~2 min alone, ~6 min beside another test); every job reaches the preset's target (90% test accuracy), timed
    within the job, and the report's reference table has the time-to-target column and figure."""
    proc = run_cli(["-m", "+experiment=offline_mnist", f"dataset.folder={mnist_folder}"], tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from sweeps.tracking.writer.naming import parse_overrides

    jobs = {}
    for name, run in _jobs(tmp_path, "offline_mnist").items():
        swept = dict(parse_overrides(name))
        jobs[swept["model"], swept["batch"]] = run
    assert set(jobs) == {(m, b) for m in ("mlp", "cnn10_narrow") for b in ("64", "256")}, set(jobs)
    for (model, _), job in jobs.items():
        assert job.data.tags["outcome"] == "ok" and job.data.metrics["test/final_acc"] >= 0.90
        assert job.data.params[names.INPUT_SHAPE] == "1x28x28"  # grayscale PNGs: one channel
        if model == "mlp":
            assert job.data.metrics["model/params"] == 784 * 1000 + 1000 + 1000 * 1000 + 1000 + 1000 * 10 + 10
        assert job.data.tags[names.TARGET_TAG] == "reached"
        assert job.data.metrics[names.TO_TARGET_S] <= job.data.metrics[names.TOTAL_S]
    from sweeps.report.__main__ import main as report

    monkeypatch.chdir(tmp_path)
    assert report(["--experiment", "offline_mnist"]) == 0
    folder = next((tmp_path / "reports").iterdir())
    text = (folder / "report.md").read_text()
    assert "| time to target [s] | epochs to target |" in text
    assert (folder / "to_target.png").stat().st_size > 0 and "to_target.png" in text
