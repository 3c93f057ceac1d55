"""The report's verdict: the lr tuned per batch, the throughput knee, the device that wins and
where that flips over the data size, money where a price was given — on hand-logged runs in a
real sqlite MLflow store, read back from the report, the sweep's parent run and ``sweeps.verdict``."""
from __future__ import annotations

import pytest

from conftest import seed_store
from sweeps import names
from sweeps.report import best_lr, verdict, verdict_text
from sweeps.report import __main__ as report
from sweeps.report.runs import JobRecord


def _job(batch: float, lr: float, steps: float | None, samples_per_epoch: int = 8000, epoch_s: float | None = None,
         to_target_s: float | None = None, swept: dict | None = None, params: dict | None = None,
         **metrics: float) -> JobRecord:
    """An ok training job at ``batch`` and ``lr``; ``steps`` to target, or None: it missed it."""
    epoch_s = epoch_s or {32: 2.0, 64: 1.0, 128: 0.6}[batch]  # 4000, 8000, 13333 samples/s: no knee
    swept = {"batch": f"{batch:.0f}", "optimizer.lr": f"{lr}", **(swept or {})}
    m = {names.BATCH: batch, names.LR: lr, names.MEDIAN_EPOCH_S: epoch_s, **metrics}
    tags = {names.TARGET_TAG: names.TARGET_MISSED if steps is None else names.TARGET_REACHED, names.ENV_GPUS: "none"}
    if steps is not None:
        m.update({names.TARGET_STEPS: steps, names.TARGET_SAMPLES: steps * batch,
                  names.TO_TARGET_S: to_target_s if to_target_s is not None else steps * batch / 8000 * epoch_s})
    p = {"model": "mlp", "dataset": "mnist10k", "device": "cpu", "task": "train", names.TARGET_METRIC_PARAM: "test/acc",
         names.TRAIN_EXAMPLES: str(samples_per_epoch), **{k: str(v) for k, v in swept.items()}, **(params or {})}
    return JobRecord(f"b{batch:.0f} lr{lr}", "", names.OK, "", swept, p, m, tags)


# batch 32: lr 0.1 reaches in the fewest steps; batch 64: two lrs tie on steps and examples (the
# target is checked once an epoch), the better final accuracy wins, not the shorter time; batch 128:
# no lr reaches the target.
GRID = [
    _job(32, 0.01, 500), _job(32, 0.1, 250, to_target_s=4.0), _job(32, 1.0, None),
    _job(64, 0.01, None), _job(64, 0.1, 125, to_target_s=2.5, **{names.FINAL_ACC: 0.93}),
    _job(64, 0.3, 125, to_target_s=3.0, **{names.FINAL_ACC: 0.95}),
    _job(128, 0.1, None), _job(128, 0.3, None), _job(128, 1.0, None),
]


def test_the_best_lr_per_batch_is_the_one_with_fewest_steps_to_target():
    chosen = best_lr.choose(GRID)
    assert {b: c.lr for b, c in chosen.items()} == {32: 0.1, 64: 0.3, 128: None}
    assert [c.reached for c in chosen.values()] == [True, True, False]
    assert len(chosen[128].jobs) == 3 and chosen[32].lrs == 3
    kept, marks = best_lr.tuned(GRID)  # what the steps-to-target figure draws
    assert marks == {("all", 32): 0.1, ("all", 64): 0.3}
    assert sorted((j.batch, j.metrics[names.LR]) for j in kept) == [(32, 0.1), (64, 0.3), (128, 0.1), (128, 0.3),
                                                                     (128, 1.0)]
    (f,) = verdict.findings(GRID)
    assert (f.best_batch, f.best_lr, f.by, f.time_to_target_s) == (64, 0.3, "time to target", 3.0)
    assert f.lr_per_batch == "32: 0.1, 64: 0.3, 128: none reached the target"
    assert verdict_text.sentence(f) == (
        "cpu: fastest to target: batch 64 at lr 0.3 (3 s, 1 run); highest throughput: batch 128 (13,333 samples/s, "
        "3 runs); best lr per batch 32: 0.1, 64: 0.3, 128: none reached the target; batch 64: lr 0.1 and 0.3 tie "
        "(125 steps to target each); no throughput knee (the doubling to the largest batch still gains 67% "
        "samples/s); largest batch that fits 128 (all tried fit). Note: one run per configuration: the run-to-run "
        "spread of time to target is unknown, so that answer is provisional; repeat=0,1,2 gives each 3 runs, enough "
        "to test a margin.")


def test_figures_draw_each_batch_at_its_best_lr(tmp_path):
    assert best_lr.figure(GRID, tmp_path / "lr.png").read_bytes().startswith(b"\x89PNG")
    assert report._to_target(GRID, tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")
    assert best_lr.figure([j for j in GRID if j.metrics[names.LR] == 0.1], tmp_path / "none.png") is None


@pytest.mark.parametrize("per_batch, knee", [
    ({32: 1000, 64: 1800, 128: 2000, 256: 2100}, 128),  # 64 → 128 still gains 11 %
    ({32: 1000, 64: 1050, 128: 1500, 256: 1550}, 128),  # a flat step before a gain is no knee
    ({32: 1000, 64: 1500, 128: 2000}, None),  # still gaining at the largest batch
    ({100: 1000, 400: 1300}, None),  # ×4 gaining 30 %: 14 % per doubling
    ({100: 1000, 400: 1150}, 100),  # 7 % per doubling
    ({64: 1000}, None),
])
def test_the_knee_is_where_doubling_the_batch_stops_paying(per_batch, knee):
    assert verdict.knee(per_batch) == knee


def test_noisy_timings_within_the_noise_are_not_picked():
    jobs = [_job(b, 0.1, None, epoch_s=t, **{names.OTHER_CPU_MEAN_PCT: 50.0}) for b, t in ((32, 1.0), (64, 0.97))]
    for j in jobs:
        del j.params[names.TARGET_METRIC_PARAM], j.tags[names.TARGET_TAG]
    (f,) = verdict.findings(jobs)
    assert f.best_batch is None and f.throughput_tie == "64 and 32 (8,247 vs 8,000 samples/s; within 10% on one run each)"
    assert "2 of 2 runs timed noisily (e.g. other processes used 50% of the CPU)" in f.note
    apart = [_job(b, 0.1, None, epoch_s=t) for b, t in ((32, 1.0), (64, 0.8))]
    (f,) = verdict.findings(apart)
    assert (f.best_batch, f.by) == (64, "samples/s") and f.target_missed.startswith("no batch reached the target")


def _log_sweep(uri: str, experiment: str, jobs: list[tuple[str, dict, dict]]) -> str:
    """A sweep's parent run and its ok job runs ``(overrides, params, metrics)`` in a real store; its id."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(uri)
    exp = client.create_experiment(experiment)
    parent = client.create_run(exp, start_time=1_000, tags={names.KIND_TAG: "sweep"}).info.run_id
    for i, (overrides, params, metrics) in enumerate(jobs):
        tags = {names.PARENT_RUN_TAG: parent, names.OVERRIDES_TAG: overrides, names.OUTCOME_TAG: names.OK,
                names.ENV_GPUS: "none" if params["device"] == "cpu" else "NVIDIA H100"}
        run = client.create_run(exp, start_time=2_000 + i, tags=tags).info.run_id
        client.log_batch(run, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                         params=[Param(k, str(v)) for k, v in {"task": "train", **params}.items()])
    return parent


# Study 5: the CPU wins on small data, the GPU from 100,000 rows; epoch time in s per (device, rows).
STUDY5 = {("cpu", 1000): 0.001, ("cuda", 1000): 0.004, ("cpu", 10000): 0.01, ("cuda", 10000): 0.012,
          ("cpu", 100000): 0.1, ("cuda", 100000): 0.02}


@pytest.fixture
def study5(tmp_path):
    seed_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    price = {"cost.per_hour.cuda": 2.5, "cost.per_hour.cpu": 0.1, "cost.currency": "USD"}
    parent = _log_sweep(uri, "study5", [
        (f"device={device} dataset.train_size={rows}",
         {"model": "mlp_tabular", "dataset": "synthetic", "device": device, "dataset.train_size": rows,
          names.TRAIN_EXAMPLES: rows, **price},
         {names.BATCH: rows, names.LR: 0.01, names.MEDIAN_EPOCH_S: t, names.FIRST_EPOCH_S: t})
        for (device, rows), t in STUDY5.items()])
    return tmp_path, uri, parent


def test_study5_verdict_states_the_crossover_and_the_money(study5):
    tmp_path, uri, parent = study5
    from sweeps.report.runs import load_jobs
    from sweeps.tracking.store.store import open_client

    client = open_client(uri)
    rows = verdict.findings(load_jobs(client, client.get_run(parent)))
    assert [(f.device, f.train_size, f.wins) for f in rows] == [
        ("cpu", 1000, True), ("cuda", 1000, False), ("cpu", 10000, True), ("cuda", 10000, False),
        ("cpu", 100000, False), ("cuda", 100000, True)]
    assert {f.crossover_rows for f in rows} == {100000}
    assert rows[0].speedup == pytest.approx(4.0) and rows[-1].speedup == pytest.approx(5.0)
    assert rows[-1].cost_per_epoch == pytest.approx(2.5 * 0.02 / 3600) and rows[-1].currency == "USD"
    assert report.main(["--tracking-uri", uri, "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    top = text.split("## Verdict\n", 1)[1].split("\n## ", 1)[0]
    assert "**mlp_tabular on synthetic** —" in top and "Crossover: cuda wins from 100,000 rows." in top
    assert "cpu wins at 1,000 rows: 4.00× cuda (samples/s)." in top
    assert "cuda wins at 100,000 rows: 5.00× cpu (samples/s)." in top
    assert "cost 1.39e-05 USD per epoch" in top  # 2.5 USD/h × 0.02 s
    header = next(line for line in text.splitlines() if line.startswith("| job |"))
    assert "| cost per epoch [USD] | overhead [s] |" in header  # no target: no cost to target


def test_the_verdict_is_on_the_sweeps_parent_run(study5):
    from mlflow import MlflowClient

    from sweeps.sweep.callback import record_verdict
    from sweeps.tracking.store import store

    _, uri, parent = study5
    client = MlflowClient(uri)
    run = client.get_run(parent)
    record_verdict(client, parent, run.info.experiment_id, store.child_runs(client, run.info.experiment_id, parent))
    tags = client.get_run(parent).data.tags
    assert tags[names.VERDICT_TAG].startswith("**mlp_tabular on synthetic** — cpu wins at 1,000 rows: 4.00× cuda")
    assert "Crossover: cuda wins from 100,000 rows." in tags[names.VERDICT_TAG]
    assert not [k for k in tags if k.startswith(names.VERDICT_TAG_PREFIX)]  # one group: no tag of its own
    assert verdict_text.tag_key("model=mlp dataset=x,y") == "sweeps.verdict.model:mlp dataset:x_y"
    import dataclasses

    (f,) = verdict.findings(GRID)  # two groups: a tag each besides the whole
    verdict_text.log_to_parent(client, parent, [f, dataclasses.replace(f, group="model=cnn", model="cnn")])
    tags = client.get_run(parent).data.tags
    assert tags["sweeps.verdict.model:cnn"].startswith("**cnn on mnist10k** — cpu: fastest to target: batch 64")
    assert tags["sweeps.verdict.all"].startswith("**mlp on mnist10k** — cpu: fastest to target: batch 64")
    assert tags[names.VERDICT_TAG] == tags["sweeps.verdict.all"] + "\n\n" + tags["sweeps.verdict.model:cnn"]


def test_sweeps_verdict_is_a_dataframe_of_the_findings(study5):
    import sweeps

    _, uri, _ = study5
    df = sweeps.verdict("study5", tracking_uri=uri)
    assert len(df) == 6 and list(df.columns[:5]) == ["group", "model", "dataset", "train_size", "device"]
    cuda = df[(df.device == "cuda") & (df.train_size == 100000)].iloc[0]
    assert bool(cuda.wins) and cuda.crossover_rows == 100000 and cuda.currency == "USD"
    assert cuda.verdict.startswith("cuda at 100,000 rows: 5,000,000 samples/s at batch 100000 (1 run); cost 1.39e-05 "
                                   "USD")
    with pytest.raises(LookupError, match="no experiment named 'nope'"):
        sweeps.verdict("nope", tracking_uri=uri)


def test_without_a_price_there_is_no_money(tmp_path):
    seed_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    _log_sweep(uri, "free", [(f"batch={b}", {"model": "mlp", "dataset": "mnist10k", "device": "cpu",
                                              "cost.per_hour": "None", names.TRAIN_EXAMPLES: 8000},
                              {names.BATCH: b, names.LR: 0.1, names.MEDIAN_EPOCH_S: t})
                             for b, t in ((32, 2.0), (64, 1.2), (128, 1.1))])
    assert report.main(["--tracking-uri", uri, "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert "cost" not in text.split("## Verdict", 1)[1]
    verdict_line = text.split("## Verdict\n\n", 1)[1].splitlines()[0]
    assert verdict_line == ("**mlp on mnist10k** — cpu: highest throughput: a tie between batch 128 and 64 "
                            "(7,273 vs 6,667 samples/s; within 10% on one run each); throughput knee at batch 64 (each doubling "
                            "past it gains < 10% samples/s); largest batch that fits 128 (all tried fit). Note: one run "
                            "per configuration: the run-to-run spread is unknown, so the answers are provisional; "
                            "repeat=0,1,2 gives each 3 runs, enough to test a margin.")


def test_a_group_whose_jobs_never_ran_says_so_and_inference_jobs_have_no_verdict():
    unavailable = JobRecord("x", "", names.UNAVAILABLE, "no data", {"batch": "32"},
                            {"model": "mlp", "dataset": "mnist", "device": "cpu", "task": "train"}, {}, {})
    inference = JobRecord("y", "", names.OK, "", {}, {"model": "resnet50", "dataset": "synthetic", "task": "inference"},
                          {names.INFER_MEDIAN_MS: 3.0}, {})
    (f,) = verdict.findings([unavailable, inference])
    assert verdict_text.sentence(f) == "cpu: no job ended ok."
    assert verdict_text.markdown(verdict.findings([inference])) == []


def test_priced_jobs_with_a_target_get_both_money_columns():
    from sweeps.report.tables import reference_tables

    priced = [_job(32, 0.1, 250, to_target_s=4.0, params={"cost.per_hour": "3.6", "cost.currency": "EUR"})]
    (_, table), = reference_tables(priced)
    header, _, row = table.splitlines()[:3]
    cells = dict(zip(header.strip("|").split(" | "), row.strip("|").split(" | ")))
    assert (cells["cost per epoch [EUR]"], cells["cost to target [EUR]"]) == ("0.002", "0.004")  # 3.6/h × 2 s, × 4 s
    (_, table), = reference_tables([_job(32, 0.1, 250)])
    assert "cost" not in table


def test_the_verdict_says_what_holds_the_picked_batch_back_and_what_its_advice_measured():
    """One clause per best configuration: its bottleneck with the evidence, each advice with what
    ``python -m sweeps.advise`` measured, or the advice still to try."""
    jobs = [_job(32, 0.1, 400), _job(64, 0.1, 100), _job(128, 0.1, 100)]  # batch 64 fastest to target
    for j in jobs:
        j.tags.update({names.BOTTLENECK_TAG: "input-bound",
                       names.DIAG_EVIDENCE_TAG: "46 % of each step waits for data (rule: ≥ 25 %; 2 ms a step)",
                       names.DIAG_ADVICE_TAG: "dataset.loader=device; dataset.num_workers=1"})
    (f,) = verdict.findings(jobs)
    assert f.best_batch is not None
    pick = next(j for j in jobs if j.batch == f.best_batch)
    pick.tags[names.diag_checked("dataset.loader")] = "2.30× [2.10, 2.40] per epoch, 3 repeats each; A/B sweep abc"
    (f,) = verdict.findings(jobs)
    assert f.diagnosis == ("input-bound: 46 % of each step waits for data (rule: ≥ 25 %; 2 ms a step); "
                           "dataset.loader=device measured 2.30× [2.10, 2.40] per epoch, 3 repeats each; "
                           "to try: dataset.num_workers=1 (python -m sweeps.advise)")
    assert f"what holds batch {f.best_batch:.0f} back: input-bound: 46 %" in verdict_text.sentence(f)
    undiagnosed = [_job(32, 0.1, 100), _job(64, 0.1, 100)]
    (plain,) = verdict.findings(undiagnosed)
    assert plain.diagnosis == "" and "holds" not in verdict_text.sentence(plain)
