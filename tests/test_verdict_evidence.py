"""The verdict picks only what the data supports: comparisons between jobs that ran under the same
un-swept conditions, picks only where the repeats' spread allows them, both answers named, and
what an lr grid cannot tell said as such — on hand-logged runs, and in a real sqlite store for
re-targeting and pricing from the report."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import seed_store
from sweeps import names
from sweeps.report import best_lr, verdict, verdict_text
from sweeps.report import __main__ as report
from sweeps.report.runs import JobRecord
from test_verdict import _job, _log_sweep

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _speed(batch: float, epoch_s: float, repeat: int | None = None, tags: dict | None = None, **metrics) -> JobRecord:
    """An ok job at ``batch`` without a target; 8,000 examples an epoch, ``epoch_s`` its median epoch."""
    swept = {"repeat": str(repeat)} if repeat is not None else {}
    job = _job(batch, 0.1, None, epoch_s=epoch_s, swept=swept, **metrics)
    del job.params[names.TARGET_METRIC_PARAM], job.tags[names.TARGET_TAG]
    job.tags.update(tags or {})
    return job


def test_a_comparison_between_jobs_on_different_thread_counts_is_declined():
    one = {names.THREADS_TAG: "1 (small steps: 17 MFLOP each, under 20; device.threads to choose; 2 cores)"}
    two = {names.THREADS_TAG: "2 (torch default; 2 cores)"}
    (f,) = verdict.findings([_speed(32, 2.0, tags=one), _speed(64, 0.5, tags=two)])
    assert (f.best_batch, f.throughput_batch, f.knee, f.last_gain) == (None, None, None, None)
    assert f.held == "torch threads 1 at batch 32, 2 at batch 64"
    text = verdict_text.sentence(f)
    assert "highest throughput" not in text and "knee" not in text
    assert ("no batch compared with another: the jobs ran under different conditions (torch threads 1 at batch 32, "
            "2 at batch 64); hold them (e.g. device.threads=N) or sweep them") in text
    (f,) = verdict.findings([_speed(32, 2.0, tags=two), _speed(64, 0.5, tags=two)])  # held: compared
    assert f.throughput_batch == 64 and not f.held


def test_a_margin_inside_the_repeats_spread_is_a_tie_and_one_beyond_it_a_pick():
    overlapping = [_speed(32, t, r) for r, t in enumerate((1.0, 1.3, 1.15))] + \
                  [_speed(64, t, r) for r, t in enumerate((0.9, 1.2, 1.1))]
    (f,) = verdict.findings(overlapping)
    assert f.best_batch is None and f.throughput_batch is None
    assert f.throughput_tie == "64 and 32 (7,273 vs 6,957 samples/s; 3 runs each, their ranges overlap)"
    assert "highest throughput: a tie between batch 64 and 32" in verdict_text.sentence(f)
    apart = [_speed(32, t, r) for r, t in enumerate((1.0, 1.05, 1.1))] + \
            [_speed(64, t, r) for r, t in enumerate((0.8, 0.85, 0.9))]
    (f,) = verdict.findings(apart)
    assert f.throughput_batch == 64 and f.note == ""  # 3 runs each, ranges apart: a rank test at p = 0.05
    assert "highest throughput: batch 64 (9,412 samples/s, median of 3 runs, 8,889–10,000)" in verdict_text.sentence(f)
    (f,) = verdict.findings(apart[:2] + apart[3:5])  # 2 runs each: a pick, said to be weak
    assert f.throughput_batch == 64 and "2 runs per configuration (weak evidence)" in f.note


def test_one_run_per_configuration_says_the_spread_is_unknown_and_how_to_settle_it():
    (f,) = verdict.findings([_speed(32, 1.0), _speed(64, 0.5)])
    assert f.throughput_batch == 64
    text = verdict_text.sentence(f)
    assert "highest throughput: batch 64 (16,000 samples/s, 1 run)" in text
    assert ("one run per configuration: the run-to-run spread is unknown, so the answers are provisional; "
            "repeat=0,1,2 gives each 3 runs, enough to test a margin") in text


def test_lrs_that_tie_on_steps_are_stated_as_a_tie_by_the_documented_rule():
    jobs = [_job(32, 0.01, 500), _job(32, 0.03, 250, **{names.FINAL_ACC: 0.90}),
            _job(32, 0.1, 250, **{names.FINAL_ACC: 0.92})]
    choice = best_lr.choose(jobs)[32]
    assert (choice.lr, choice.tied) == (0.1, [0.03, 0.1])  # level on steps: the better final score stands for it
    (f,) = verdict.findings(jobs)
    assert "batch 32: lr 0.03 and 0.1 tie (250 steps to target each)" in verdict_text.sentence(f)
    text = " ".join((DOCS / "reading-results.md").read_text().split())
    assert best_lr.TIE_RULE in text  # the docs state the code's rule, word for word


def test_a_best_lr_at_the_edge_of_the_grid_is_flagged_with_the_next_lrs_to_try():
    jobs = [_job(128, 0.01, 400), _job(128, 0.03, 200), _job(128, 0.1, 100)]
    (f,) = verdict.findings(jobs)
    assert f.best_lr == 0.1
    assert "batch 128's best lr 0.1 is the largest tried: try 0.33 and 1.1 next" in verdict_text.sentence(f)
    (f,) = verdict.findings([_job(128, 0.01, 100), _job(128, 0.03, 200)])
    assert "batch 128's best lr 0.01 is the smallest tried: try 0.0033 and 0.0011 next" in f.grid


def test_diverged_and_chance_level_lrs_are_named():
    diverged = _job(64, 1.0, None)
    diverged.outcome = names.DIVERGED
    stuck = _job(64, 0.3, None, params={names.CLASSES_PARAM: "10"}, **{names.FINAL_ACC: 0.1})
    (f,) = verdict.findings([_job(64, 0.1, 125), stuck, diverged])
    assert "lr 1 diverged at batch 64" in f.grid and "lr 0.3 stayed at chance accuracy at batch 64" in f.grid


def test_an_unreachable_target_leads_the_paragraph():
    jobs = [_job(b, 0.1, None, params={"target.value": "0.99"}, **{names.FINAL_ACC: acc})
            for b, acc in ((32, 0.97), (64, 0.95), (128, 0.90))]
    (f,) = verdict.findings(jobs)
    assert verdict_text.sentence(f).startswith(
        "cpu: no batch reached the target test/acc ≥ 0.99 (best: acc 0.970 at batch 32); highest throughput: batch 128")


def test_without_a_target_the_fastest_batch_is_never_best_and_its_worse_quality_is_warned():
    jobs = [_speed(b, t, **{names.FINAL_ACC: acc}) for b, t, acc in ((16, 4.0, 0.969), (64, 1.0, 0.95),
                                                                    (256, 0.3, 0.887))]
    (f,) = verdict.findings(jobs)
    text = verdict_text.sentence(f)
    assert "best" not in text
    assert "highest throughput: batch 256 (26,667 samples/s, 1 run)" in text
    assert "quality reached per batch 16: acc 0.969, 64: acc 0.950, 256: acc 0.887" in text
    assert ("batch 256, the fastest, trained to a worse acc 0.887 than batch 16's 0.969: set a target "
            "(target.metric=test/acc target.value=0.97) to compare at equal quality") in text
    (f,) = verdict.findings([_speed(b, t, **{names.FINAL_ACC: 0.95}) for b, t in ((16, 4.0), (256, 0.3))])
    assert f.quality_warning == ""  # the same quality: nothing to warn of


def test_every_batch_reaching_the_target_at_the_same_evaluation_is_warned():
    jobs = [_job(b, 0.1, 8000 / b * 2, **{names.TARGET_EPOCHS: 2}) for b in (32, 64, 128)]
    (f,) = verdict.findings(jobs)
    assert "every batch reached the target at the same evaluation (epoch 2)" in f.note
    assert "python -m sweeps.report --target VALUE" in f.note
    (f,) = verdict.findings([*jobs, _job(256, 0.1, None, epoch_s=0.5)])  # a batch that never reached it: not "every batch"
    assert "same evaluation" not in f.note


def test_drift_between_identical_repeats_is_stated():
    jobs = [_speed(b, t * (1.4 if r else 1.0), r) for r in (0, 1) for b, t in ((32, 2.0), (64, 1.0), (128, 0.6))]
    (f,) = verdict.findings(jobs)
    assert f.drift == "repeat 1 ran 40% slower than repeat 0 (median of 3 configurations)"
    assert "the machine drifted: repeat 1 ran 40% slower" in verdict_text.sentence(f)
    steady = [_speed(b, t * (1.02 if r else 1.0), r) for r in (0, 1) for b, t in ((32, 2.0), (64, 1.0))]
    assert verdict.findings(steady)[0].drift == ""


def _epochs_csv(accs: list[float], epoch_s: float, batch: int) -> str:
    rows = ["epoch,time/epoch_s,time/eval_s,samples,steps,test/acc"]
    rows += [f"{e},{epoch_s},0.1,8000,{8000 // batch},{acc}" for e, acc in enumerate(accs, 1)]
    return "\n".join(rows) + "\n"


@pytest.fixture
def logged_grid(tmp_path):
    """A sweep of three batches in a real store, its target 0.8 reached by each at epoch 2, with
    every epoch in each job's epochs.csv; no price."""
    from mlflow import MlflowClient

    seed_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    curves = {32: [0.7, 0.85, 0.88, 0.9], 64: [0.7, 0.82, 0.86, 0.89], 128: [0.6, 0.81, 0.84, 0.87]}
    epoch_s = {32: 2.0, 64: 1.2, 128: 0.8}
    parent = _log_sweep(uri, "grid", [
        (f"batch={b}", {"model": "mlp", "dataset": "mnist10k", "device": "cpu", names.TRAIN_EXAMPLES: 8000,
                        names.TARGET_METRIC_PARAM: "test/acc", "target.value": 0.8, "cost.per_hour": "None"},
         {names.BATCH: b, names.LR: 0.1, names.MEDIAN_EPOCH_S: epoch_s[b], names.FINAL_ACC: curves[b][-1],
          names.TARGET_EPOCHS: 2, names.TARGET_STEPS: 2 * 8000 // b, names.TARGET_SAMPLES: 16000,
          names.TO_TARGET_S: 2 * (epoch_s[b] + 0.1)})
        for b in curves])
    client = MlflowClient(uri)
    for run in client.search_runs([client.get_run(parent).info.experiment_id], f"tags.`{names.PARENT_RUN_TAG}` = '{parent}'"):
        batch = int(run.data.metrics[names.BATCH])
        client.log_text(run.info.run_id, _epochs_csv(curves[batch], epoch_s[batch], batch), "epochs.csv")
    return tmp_path, uri, parent


def test_the_report_retargets_from_the_logged_curves(logged_grid):
    tmp_path, uri, parent = logged_grid
    assert report.main(["--tracking-uri", uri, "--run-id", parent, "--out", str(tmp_path / "a")]) == 0
    before = (tmp_path / "a" / "report.md").read_text()
    assert "every batch reached the target at the same evaluation (epoch 2)" in before
    assert report.main(["--tracking-uri", uri, "--run-id", parent, "--target", "0.88", "--out", str(tmp_path / "b")]) == 0
    after = (tmp_path / "b" / "report.md").read_text()
    assert "- re-targeted from the logged curves: test/acc ≥ 0.88 (the sweep's own verdict stays on its run)" in after
    top = after.split("## Verdict\n", 1)[1].split("\n## ", 1)[0]
    # batch 32 reaches 0.88 at epoch 3 (3 × 2.1 s), batch 64 at epoch 4 (4 × 1.3 s), batch 128 never
    assert "fastest to target: batch 64 at lr 0.1 (5.2 s, 1 run)" in top
    assert "same evaluation" not in top
    from mlflow import MlflowClient

    tag = MlflowClient(uri).get_run(parent).data.tags[names.VERDICT_TAG]
    assert "fastest to target: batch 128 at lr 0.1 (1.8 s, 1 run)" in tag  # the sweep's own target, untouched


def test_the_report_prices_a_sweep_run_without_a_price(logged_grid):
    tmp_path, uri, parent = logged_grid
    assert report.main(["--tracking-uri", uri, "--run-id", parent, "--cost-per-hour", "2.5", "--currency", "USD",
                        "--out", str(tmp_path / "p")]) == 0
    text = (tmp_path / "p" / "report.md").read_text()
    assert "| cost per epoch [USD] | cost to target [USD] |" in text
    assert "cost 0.000556 USD per epoch, 0.00125 USD to target" in text  # 2.5/h × 0.8 s; × 1.8 s
    assert report.main(["--tracking-uri", uri, "--run-id", parent, "--cost-per-hour", "cheap"]) == 2


def test_the_verdict_names_the_model_that_ran_not_its_option():
    wrn = {"model": "wrn28_10", "model._target_": "sweeps.models.WideResNet", "model.depth": "10", "model.width": "1",
           "model.dropout": "0.0", "dataset": "synthetic"}
    jobs = [_job(b, 0.1, None, params=wrn) for b in (32, 64)]
    (f,) = verdict.findings(jobs)
    assert f.model == "WRN-10-1"
    assert verdict_text.paragraphs([f])[0][1].startswith("**WRN-10-1 on synthetic** — ")
    (f,) = verdict.findings([_job(32, 0.1, None, params={**wrn, "model.depth": "28", "model.width": "10"})])
    assert f.model == "wrn28_10"  # at its own defaults: the option's name


def test_the_verdicts_samples_per_s_is_the_runs_summary_metric():
    job = _speed(64, 1.0, **{names.MEDIAN_SAMPLES_PER_S: 7777.0})
    assert verdict.throughput(job) == 7777.0  # what MLflow's run table shows for the run
    del job.metrics[names.MEDIAN_SAMPLES_PER_S]
    assert verdict.throughput(job) == 8000.0  # a run logged before it: examples ÷ median epoch time
