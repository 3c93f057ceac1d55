"""One meaning per label and figure: a model's label says the sizes that ran, the job's throughput
is one summary metric, and the console's time left comes from jobs of the same kind."""
from __future__ import annotations

import re
import statistics

import pytest

from conftest import cli_in_process, runs
from sweeps import names, state
from sweeps.job import progress
from sweeps.report.model_label import model_label

WRN = {"model": "wrn28_10", "model._target_": "sweeps.models.WideResNet", "model.dropout": "0.0"}


@pytest.mark.parametrize("params, label", [
    ({**WRN, "model.depth": "10", "model.width": "1"}, "WRN-10-1"),  # the smoke preset's wrn_synthetic
    ({**WRN, "model.depth": "28", "model.width": "10"}, "wrn28_10"),  # its defaults: the option says WRN-28-10
    ({**WRN, "model.depth": "28", "model.width": "10", "model.dropout": "0"}, "wrn28_10"),  # 0 == 0.0
    ({**WRN, "model.depth": "16", "model.width": "4", "model.dropout": "0.3"}, "WRN-16-4(dropout=0.3)"),
    ({**WRN, "model.depth": "28", "model.width": "10", "model.dropout": "0.3"}, "wrn28_10(dropout=0.3)"),
    ({"model": "mlp", "model._target_": "sweeps.models.MLP", "model.hidden": "[1000, 1000]"}, "mlp"),
    ({"model": "mlp", "model._target_": "sweeps.models.MLP", "model.hidden": "[256, 256]"}, "mlp(hidden=256-256)"),
    # cnn10_narrow extends cnn10 (defaults: [cnn10, _self_]): its own widths are its defaults
    ({"model": "cnn10_narrow", "model._target_": "sweeps.models.CNN10", "model.widths": "[16, 32, 64]",
      "model.convs_per_stage": "3"}, "cnn10_narrow"),
    ({"model": "cnn10_narrow", "model._target_": "sweeps.models.CNN10", "model.widths": "[16, 32, 64]",
      "model.convs_per_stage": "2"}, "cnn10_narrow(convs_per_stage=2)"),
    ({"model": "resnet50", "model._target_": "sweeps.models.resnet50"}, "resnet50"),
    ({"model": "mynet", "model._target_": "userpkg.MyNet", "model.depth": "3"}, "mynet"),  # the user's own
    ({"model": "mlp", "model._target_": "userpkg.MLP", "model.hidden": "[8]"}, "mlp"),  # a user's mlp of its own
    ({}, "?"),
])
def test_a_models_label_says_what_ran(params, label):
    assert model_label(params) == label


def test_the_label_reads_params_alone_without_torch():
    import subprocess
    import sys

    code = ("import sys; from sweeps.report.model_label import model_label; "
            "print(model_label({'model': 'wrn28_10', 'model.depth': '10', 'model.width': '1'}), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["WRN-10-1", "False"]


def test_a_jobs_kind_keeps_what_scales_its_work_and_drops_what_does_not():
    assert progress.job_kind(["+case=wrn_synthetic", "repeat=1", "batch=64"]) == "case=wrn_synthetic"
    assert progress.job_kind(["model=mlp", "batch=64", "optimizer.base_lr=0.05", "seed=3"]) == "model=mlp"
    assert progress.job_kind(["batch=64", "epochs=3", "dataset.train_size=512", "device=cpu"]) == \
        "dataset.train_size=512 device=cpu epochs=3"
    assert progress.job_kind(["model=mlp", "model.depth=3"]) != progress.job_kind(["model=mlp", "model.depth=4"])
    assert progress.job_kind(["batch=32"]) == progress.job_kind(["batch=64"]) == ""


def test_the_time_left_comes_from_jobs_of_the_same_kind():
    plan = ["a", "b", "a", "b"]
    assert progress.time_left(plan, {}, 1) == ""  # nothing ran yet
    assert progress.time_left(plan, {"a": [100.0]}, 2) == "  (time left unknown: 2 jobs left of a kind not run yet)"
    # a fast kind "a" says nothing about the slow kind "b": only b's own time does
    assert progress.time_left(plan, {"a": [1.0], "b": [100.0]}, 3) == "  (about 0:01:41 left)"
    assert progress.time_left(plan, {"a": [1.0], "b": [100.0]}, 4) == "  (about 0:01:40 left)"
    # a kind's mean: two jobs of it left, its jobs so far 30 s and 10 s
    assert progress.time_left(["a", "a"], {"a": [30.0, 10.0]}, 1) == "  (about 0:00:40 left)"
    assert progress.time_left(["a"], {"a": [5.0]}, 7) == ""  # a place beyond the plan: no words


def test_the_job_line_counts_each_jobs_time_under_its_kind():
    previous = state.replace(state.ProcessState())
    try:
        from sweeps.job import parent_run

        plan = [["+case=slow"], ["+case=fast"], ["+case=fast", "repeat=1"], ["+case=slow", "repeat=1"]]
        progress.begin_sweep(4, plan)
        parent_run.note(planned_jobs="4")
        assert progress.job_line("+case=slow", 1, plan[0]) == "[1/4] +case=slow"
        progress.job_ended(120.0)
        assert progress.job_line("+case=fast", 2, plan[1]).endswith("(time left unknown: 2 jobs left of a kind not run yet)")
        progress.job_ended(2.0)
        assert progress.job_line("+case=fast repeat=1", 3, plan[2]) == "[3/4] +case=fast repeat=1  (about 0:02:02 left)"
        progress.job_ended(2.0)
        assert progress.job_line("+case=slow repeat=1", 4, plan[3]) == "[4/4] +case=slow repeat=1  (about 0:02:00 left)"
        assert state.current().job_kinds["times"] == {"case=slow": [120.0], "case=fast": [2.0, 2.0]}
    finally:
        state.replace(previous)


TINY = ["model=mlp", "model.hidden=[16]", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=96",
        "dataset.test_size=32", "device=cpu", "telemetry.interval_s=0"]


def test_a_sweeps_console_estimates_the_time_left_by_kind_and_logs_the_median_throughput(tmp_path):
    """A real sweep (Hydra, the store, sqlite MLflow): two kinds (2 and 3 epochs) at two batches.
    Job 2 is of a kind not run yet; jobs 3 and 4 are estimated from their own kind only. Each
    job's ``perf/median_samples_per_s`` = training examples ÷ ``time/median_epoch_s``."""
    done = cli_in_process(["-m", *TINY, "batch=32,48", "epochs=2,3"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout + done.stderr
    lines = [line for line in text.splitlines() if re.match(r"\[\d/4\]", line)]
    assert len(lines) == 4, text
    assert "left" not in lines[0]
    assert lines[1].endswith("(time left unknown: 2 jobs left of a kind not run yet)"), lines
    for line in lines[2:]:
        assert re.search(r"\(about \d:\d\d:\d\d left\)$", line), lines
    jobs = [r for r in runs(tmp_path) if r.data.tags.get(names.KIND_TAG) != "sweep"]
    assert len(jobs) == 4
    for job in jobs:
        m, p = job.data.metrics, job.data.params
        assert m[names.MEDIAN_SAMPLES_PER_S] == pytest.approx(int(p[names.TRAIN_EXAMPLES]) / m[names.MEDIAN_EPOCH_S])
        assert int(p[names.TRAIN_EXAMPLES]) == 96
        # a summary, not a point of the per-epoch series (whose latest value is the last epoch's)
        from conftest import store

        history = store(tmp_path).get_metric_history(job.info.run_id, names.MEDIAN_SAMPLES_PER_S)
        assert [h.step for h in history] == [0]
        series = store(tmp_path).get_metric_history(job.info.run_id, names.SAMPLES_PER_S)
        assert sorted(h.step for h in series) == list(range(1, int(p["epochs"]) + 1))


def test_a_one_epoch_job_has_the_median_throughput_of_its_one_epoch():
    from sweeps.train.loop import summarize

    rec = {names.EPOCH_S: 0.5, names.ELAPSED_S: 0.6, names.EPOCH_PEAK_MB: 1.0, "samples": 100, names.TEST_ACC: 0.1}
    assert summarize([rec], regression=False)[names.MEDIAN_SAMPLES_PER_S] == pytest.approx(200.0)
    more = [{**rec, "epoch": i, names.EPOCH_S: s} for i, s in enumerate([9.0, 1.0, 2.0, 4.0], 1)]
    out = summarize(more, regression=False)
    assert out[names.MEDIAN_SAMPLES_PER_S] == pytest.approx(100 / statistics.median([1.0, 2.0, 4.0]))
    assert names.MEDIAN_SAMPLES_PER_S in names.SUMMARY_METRICS and names.MEDIAN_SAMPLES_PER_S not in names.EPOCH_METRICS
