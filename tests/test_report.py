"""python -m sweeps.report on a store filled by real small sweeps."""
from __future__ import annotations

import re

import pytest

from conftest import TEST_CONF, cli_in_process, store
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


def _block(text: str, heading: str) -> list[str]:
    """The lines of the first table under ``## heading``."""
    after = text.split(f"## {heading}\n", 1)[1]
    return [line for line in after.split("\n## ", 1)[0].splitlines() if line.startswith("|")]


def _table_after(text: str, heading: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in _block(text, heading)[2:]]


def test_reference_tables_per_model_sorted_by_numeric_batch(batch_sweep):
    _, _, text = batch_sweep
    mlp = _table_after(text, "model=mlp")
    assert [r[0] for r in mlp] == ["16", "128"]
    assert mlp[0][1] == "1/1" and re.fullmatch(r"0:00:\d\d", mlp[0][4]) and 0 <= float(mlp[0][5]) <= 1
    assert float(mlp[0][7]) >= 0  # overhead [s]
    header = _block(text, "model=mlp")[0]
    assert header == ("| batch | runs | first epoch [s] | median epoch from 2 [s] | total time | accuracy | peak MB "
                      "| overhead [s] | note |")


def test_oom_rows_say_oom(batch_sweep):
    _, _, text = batch_sweep
    oom = _table_after(text, "model=oom_above")
    assert [r[0] for r in oom] == ["16", "128"]
    assert oom[0][2] != "OOM" and oom[1][2] == "OOM" and oom[1][1] == "0/1"


def test_figures_written_and_listed(batch_sweep):
    _, out, text = batch_sweep
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["accuracy_vs_batch.png", "epoch_time_vs_batch.png", "phases.png"]
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


def test_device_comparison_and_inference_timing(tmp_path):
    """A sweep over device (cuda unavailable here) and timing method: side-by-side columns."""
    proc = cli_in_process(["-m", "task=inference", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]",
                           "dataset.train_size=64", "dataset.test_size=64", "batch=32", "timing.iters=5",
                           "timing.warmup=1", "device=cpu,cuda", "timing.mode=naive,events"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    assert report.main(["--tracking-uri", store(tmp_path).tracking_uri, "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    rows = _table_after(text, "Comparison over device")
    header = _block(text, "Comparison over device")[0]
    assert header == "| job | device=cpu | device=cuda | speedup cuda |"
    by_job = {r[0]: r for r in rows}
    assert set(by_job) == {"timing.mode=naive", "timing.mode=events"}
    import torch
    if not torch.cuda.is_available():
        assert by_job["timing.mode=naive"][2] == "UNAVAILABLE" and float(by_job["timing.mode=naive"][1]) > 0
    inf = _table_after(text, "Inference timing")
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


def test_repeats_are_one_row_with_the_median_and_its_spread(tmp_path):
    proc = cli_in_process(["-m", "model=mlp", "repeat=0,1,2", "batch=32", "dataset=synthetic", "dataset.shape=[1,8,8]",
                           "dataset.train_size=128", "dataset.test_size=32", "epochs=3", "device=cpu",
                           "telemetry.interval_s=0", TEST_CONF], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 job(s): 3 ok" in proc.stdout  # repeats are jobs of their own, never skipped as done
    out = tmp_path / "out"
    assert report.main(["--tracking-uri", store(tmp_path).tracking_uri, "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    (row,) = _table_after(text, "all")  # repeat is not a group of its own: one row for batch 32
    assert row[0] == "32" and row[1] == "3/3"
    assert re.fullmatch(r"[\d.]+ \[[\d.]+, [\d.]+\]", row[3])  # median epoch: median [min, max]


def test_a_one_epoch_job_shows_its_first_epoch_marked_with_a_footnote():
    """A 1-epoch job has no epochs 2+: its first epoch stands in for the median, marked."""
    from sweeps import names
    from sweeps.report.runs import JobRecord
    from sweeps.report.tables import FIRST_EPOCH_NOTE, comparison, reference_tables

    def job(device: str, first_s: float) -> JobRecord:
        return JobRecord(device, device, "ok", "", {"device": device}, {"device": device, "epochs": "1"},
                   {names.FIRST_EPOCH_S: first_s, names.BATCH_SIZE: 8})

    jobs = [job("cpu", 0.5), job("cuda", 0.25)]
    tables = dict(reference_tables(jobs))
    assert "| 8 | 1/1 | 0.50 | 0.50* |" in tables["device=cpu"] and tables["device=cpu"].endswith(FIRST_EPOCH_NOTE)
    side_by_side = comparison(jobs, "device")
    assert "| all | 0.500* | 0.250* | 2.00× |" in side_by_side and side_by_side.endswith(FIRST_EPOCH_NOTE)
