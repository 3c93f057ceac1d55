"""python -m sweeps.report on a store filled by real small sweeps."""
from __future__ import annotations

import re

import pytest

from conftest import TEST_CONF, cli_in_process, runs, store, table_block, table_rows
from sweeps.report import __main__ as report

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def batch_sweep(tmp_path_factory):
    """oom_above (OOM above batch 32) and mlp at batch 128 and 16 — given in that order, so text
    order ("128" < "16") and numeric order differ."""
    cwd = tmp_path_factory.mktemp("report")
    proc = cli_in_process(["-m", "model=oom_above,mlp", "batch=128,16", "dataset=synthetic", "dataset.shape=[1,8,8]",
                           "dataset.train_size=256", "dataset.test_size=64", "epochs=2", "device=cpu", TEST_CONF], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = cwd / "out"
    assert report.main(["--tracking-uri", store(cwd).tracking_uri, "--out", str(out)]) == 0
    return cwd, out, (out / "report.md").read_text()


def test_reference_tables_per_model_sorted_by_numeric_batch(batch_sweep):
    _, _, text = batch_sweep
    mlp = table_rows(text, "model=mlp")
    assert [r[0] for r in mlp] == ["16", "128"]
    assert mlp[0][1] == "1/1" and re.fullmatch(r"0:00:\d\d", mlp[0][5]) and 0 <= float(mlp[0][6]) <= 1
    assert float(mlp[0][2]) > 0 and float(mlp[0][8]) >= 0  # the effective lr, overhead [s]
    header = table_block(text, "model=mlp")[0]
    assert header == ("| batch | runs | lr | first epoch [s] | median epoch from 2 [s] | total time | accuracy "
                      "| process RSS MB | overhead [s] | note |")


def test_oom_rows_say_oom(batch_sweep):
    _, _, text = batch_sweep
    oom = table_rows(text, "model=oom_above")
    assert [r[0] for r in oom] == ["16", "128"]
    assert oom[0][3] != "OOM" and oom[1][3] == "OOM [1]" and oom[1][1] == "0/1"
    assert "\n\n[1] " in text.split("## model=oom_above", 1)[1].split("\n## ", 1)[0]  # its reason, under the table


def test_figures_written_and_listed(batch_sweep):
    _, out, text = batch_sweep
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["accuracy_vs_batch.png", "diagnosis.png", "epoch_time_vs_batch.png", "phases.png"]
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
        assert f"]({name})" in text


def test_report_logged_to_the_parent_run(batch_sweep):
    cwd, _, _ = batch_sweep
    client = store(cwd)
    exp = client.get_experiment_by_name("sweeps")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`sweeps.kind` = 'sweep'")
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/report.md" in logged and "report/phases.png" in logged


@pytest.mark.slow  # a sweep of its own (~4 s); the module's shared sweep covers the tables
def test_device_comparison_and_inference_timing(tmp_path):
    """A sweep over device (cuda unavailable here) and timing method: side-by-side columns."""
    proc = cli_in_process(["-m", "task=inference", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]",
                           "dataset.train_size=64", "dataset.test_size=64", "batch=32", "timing.iters=5",
                           "timing.warmup=1", "device=cpu,cuda", "timing.mode=naive,events"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    assert report.main(["--tracking-uri", store(tmp_path).tracking_uri, "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    rows = table_rows(text, "Comparison over device")
    header = table_block(text, "Comparison over device")[0]
    assert header == "| job | device=cpu | device=cuda | speedup cuda |"
    by_job = {r[0]: r for r in rows}
    assert set(by_job) == {"timing.mode=naive", "timing.mode=events"}
    import torch
    if not torch.cuda.is_available():
        assert by_job["timing.mode=naive"][2] == "UNAVAILABLE [1]" and float(by_job["timing.mode=naive"][1]) > 0
        below = text.split("## Comparison over device\n", 1)[1].split("\n## ", 1)[0]
        assert "\n\n[1] device=cuda but no CUDA device is visible here" in below  # the reason, once
        assert "[2]" not in below
    assert "## Training jobs" not in text  # an inference job that never ran is no training job
    inf = table_rows(text, "Inference timing")
    assert len(inf) == 4
    assert (out / "inference_timing.png").read_bytes().startswith(PNG)


def test_no_sweep_is_one_line_and_exit_2(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    assert report.main(["--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sweeps.report: error: no sweep")


def test_a_mistyped_store_path_is_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "mlrnus"
    assert report.main(["--tracking-uri", f"sqlite:///{missing / 'mlflow.db'}"]) == 2
    monkeypatch.chdir(tmp_path)  # the default ./mlruns, from a folder no sweep ran in
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert report.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("sweeps.report: error: no MLflow store at") for line in err)
    assert str(missing) in err[0] and "--tracking-uri" in err[0]
    assert list(tmp_path.iterdir()) == []  # neither folder nor an empty store made


@pytest.mark.slow  # a sweep of its own (~4 s); the module's shared sweep covers the tables
def test_repeats_are_one_row_with_the_median_and_its_spread(tmp_path):
    proc = cli_in_process(["-m", "model=mlp", "repeat=0,1,2", "batch=32", "dataset=synthetic", "dataset.shape=[1,8,8]",
                           "dataset.train_size=128", "dataset.test_size=32", "epochs=3", "device=cpu",
                           "telemetry.interval_s=0", TEST_CONF], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 job(s): 3 ok" in proc.stdout  # repeats are jobs of their own, never skipped as done
    out = tmp_path / "out"
    assert report.main(["--tracking-uri", store(tmp_path).tracking_uri, "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    (row,) = table_rows(text, "all")  # repeat is not a group of its own: one row for batch 32
    assert row[0] == "32" and row[1] == "3/3"
    assert re.fullmatch(r"[\d.]+ \[[\d.]+, [\d.]+\]", row[4])  # median epoch: median [min, max]


def test_a_one_epoch_job_shows_its_first_epoch_marked_with_a_footnote():
    """A 1-epoch job has no epochs 2+: its first epoch stands in for the median, marked."""
    from sweeps import names
    from sweeps.report.runs import JobRecord
    from sweeps.report.tables import FIRST_EPOCH_NOTE, TRAINING_JOBS, comparison, reference_tables

    def job(device: str, first_s: float) -> JobRecord:
        return JobRecord(device, device, "ok", "", {"device": device}, {"device": device, "epochs": "1"},
                   {names.FIRST_EPOCH_S: first_s, names.BATCH: 8})

    jobs = [job("cpu", 0.5), job("cuda", 0.25)]
    (title, table), = reference_tables(jobs)  # one batch per device: the devices are the rows of one table
    assert title == TRAINING_JOBS
    assert "| device=cpu | 8 | 1/1 | - | 0.50 | 0.50* |" in table and table.endswith(FIRST_EPOCH_NOTE)
    side_by_side = comparison(jobs, "device")
    assert "| all | 0.500* | 0.250* | 2.00× |" in side_by_side and side_by_side.endswith(FIRST_EPOCH_NOTE)


# A reason longer than a footnote line, with a path longer than one: it wraps between words only.
LONG_PATH = "/data/" + "nested-folder/" * 8 + "mnist"
MNIST_REASON = (f"MNIST is not under dataset.root=data ({LONG_PATH}) and dataset.download=false; put the four idx "
                "files in <root>/MNIST/raw/, or run once with network access and dataset.download=true")
CIFAR_REASON = "CIFAR-10 is not under dataset.root=data (/x/data) and dataset.download=false"


def _log_sweep(uri: str, jobs: list[tuple[str, str, str, dict[str, str], dict[str, float]]]) -> None:
    """A sweep's parent run and its job runs ``(overrides, outcome, error, params, metrics)``, in
    that order, logged with MLflow's client into the store at ``uri`` as a sweep logs them."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    from sweeps import names

    client = MlflowClient(uri)
    exp = client.create_experiment("mixed")
    parent = client.create_run(exp, start_time=1_000, tags={names.KIND_TAG: "sweep"}).info.run_id
    for i, (overrides, outcome, error, params, metrics) in enumerate(jobs):
        tags = {names.PARENT_RUN_TAG: parent, names.OVERRIDES_TAG: overrides, names.OUTCOME_TAG: outcome,
                names.ENV_GPUS: "none", **({names.ERROR_TAG: error} if error else {})}
        run = client.create_run(exp, start_time=2_000 + i, tags=tags).info.run_id
        client.log_batch(run, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                         params=[Param(k, v) for k, v in {"task": "train", **params}.items()])


def test_a_mixed_table_shows_each_jobs_quality_memory_lr_and_reason(tmp_path):
    """Classification and regression jobs, CPU and GPU jobs, unavailable jobs in one table (one
    batch per configuration): each job fills its own quality and memory column, shows its lr, and
    every unavailable job's reason stands in full under the table, one number per reason."""
    from conftest import seed_store
    from sweeps import names

    seed_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    timing = {names.BATCH: 32, names.FIRST_EPOCH_S: 0.5, names.MEDIAN_EPOCH_S: 0.25, names.TOTAL_S: 1.0,
              names.OVERHEAD_S: 0.1}
    cpu, gpu = {"device": "cpu"}, {"device": "cuda"}
    _log_sweep(uri, [
        ("case=cnn", "ok", "", {**cpu, "dataset.regression": "False"},
         {**timing, names.LR: 0.025, names.FINAL_ACC: 0.9123, names.PEAK_MB: 1100}),
        ("case=tabular", "ok", "", {**cpu, "dataset.regression": "True"},
         {**timing, names.LR: 0.0025, names.FINAL_RMSE: 12.5, names.PEAK_MB: 1040}),
        ("case=cnn_gpu", "ok", "", gpu, {**timing, names.LR: 0.1, names.FINAL_ACC: 0.5, names.PEAK_MB: 321}),
        ("case=mnist", "unavailable", MNIST_REASON, cpu, {names.BATCH: 32}),
        ("case=cifar", "unavailable", CIFAR_REASON, cpu, {names.BATCH: 32}),
        ("case=mnist_again", "unavailable", MNIST_REASON, cpu, {names.BATCH: 32}),
    ])
    assert report.main(["--tracking-uri", uri, "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert table_block(text, "Training jobs")[0] == (
        "| job | batch | runs | lr | first epoch [s] | median epoch from 2 [s] | total time | accuracy | RMSE "
        "| GPU peak allocated MB | process RSS MB | overhead [s] | note |")
    rows = {r[0]: r[1:] for r in table_rows(text, "Training jobs")}
    assert list(rows) == ["case=cnn", "case=tabular", "case=cnn_gpu", "case=mnist", "case=cifar", "case=mnist_again"]
    # lr, accuracy, RMSE, GPU peak allocated MB, process RSS MB
    pick = lambda r: (r[2], r[6], r[7], r[8], r[9])  # noqa: E731
    assert pick(rows["case=cnn"]) == ("0.025", "0.9123", "", "", "1100")
    assert pick(rows["case=tabular"]) == ("0.0025", "", "12.50", "", "1040")
    assert pick(rows["case=cnn_gpu"]) == ("0.1", "0.5000", "", "321", "")
    assert [rows[k][3] for k in ("case=mnist", "case=cifar", "case=mnist_again")] == \
           ["UNAVAILABLE [1]", "UNAVAILABLE [2]", "UNAVAILABLE [1]"]
    below = text.split("## Training jobs\n", 1)[1].split("\n## ", 1)[0].split("\n\n[1] ", 1)[1]
    joined = " ".join(below.split())  # a line break only ever stands where a space was
    assert joined.startswith(f"{MNIST_REASON} [2] {CIFAR_REASON}")
    assert all(len(line) <= 100 or LONG_PATH in line for line in below.splitlines())


def test_the_verdict_opens_the_report_and_is_on_the_parent_run(batch_sweep):
    """A real sweep: the verdict names the OOM boundary as the largest batch that fits, and the
    sweep's end (then the report) set it on the parent run."""
    from sweeps import names

    cwd, _, text = batch_sweep
    assert text.index("## Verdict") < text.index("## model=")
    top = text.split("## Verdict\n\n", 1)[1].split("\n## ", 1)[0]
    oom = next(p for p in top.split("\n\n") if p.startswith("**oom_above on synthetic**"))
    assert "largest batch that fits 16 (OOM at 128)" in oom
    client = store(cwd)
    (parent,) = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id],
                                   "tags.`sweeps.kind` = 'sweep'")
    assert parent.data.tags[names.VERDICT_TAG] == top.strip()
    assert parent.data.tags["sweeps.verdict.model:oom_above"] == oom.strip()
