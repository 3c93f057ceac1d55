"""python -m sweeps.report --compare on one store holding sweeps from two machines: real tiny jobs
run in-process, the machine faked at the hardware boundary (the env.* tags and the hardware
identity a job reads from sweeps.provenance.machine)."""
from __future__ import annotations

import contextlib
import io
import re
import statistics

import pytest
from mlflow import MlflowClient

from conftest import TEST_CONF, cli_in_process, store
from sweeps import names
from sweeps.report import __main__ as report
from sweeps.report.compare import compare
from sweeps.report.compare_tables import config_table
from sweeps.report.runs import JobRecord
from sweeps.report.tables import FIRST_EPOCH_NOTE

TINY = ["-m", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64",
        "dataset.test_size=32", "epochs=2", "device=cpu", "telemetry.interval_s=0", "telemetry.figure=false", TEST_CONF]
HOST_A, HOST_B = "host-a / test cpu", "host-b / test cpu"


def _sweep_on(host: str, torch_version: str, args: list[str], cwd) -> None:
    """A sweep as machine ``host`` with torch ``torch_version`` would log it."""
    from sweeps.job import identity, lifecycle as job
    from sweeps.provenance import machine

    tags = {**job.environment_tags(), "env.host": host, "env.torch": torch_version}
    with pytest.MonkeyPatch.context() as mp:
        for module in (job, machine):  # the job's tags, and the sweep's (it imports them when it opens its run)
            mp.setattr(module, "environment_tags", lambda: tags)
        mp.setattr(identity, "hardware", lambda device_type: f"{host} / test cpu")
        proc = cli_in_process(args, cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report.main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """One store: host-a ran batch 32 twice (repeat=0,1), host-b batch 16 and 32 once each with
    another torch version. Returns (folder, tracking URI, exit status, stdout, stderr) of
    ``--compare --experiment sweeps``."""
    cwd = tmp_path_factory.mktemp("compare")
    _sweep_on("host-a", "2.0.0", [*TINY, "batch=32", "repeat=0,1"], cwd)
    _sweep_on("host-b", "2.1.0", [*TINY, "batch=16,32"], cwd)
    uri = store(cwd).tracking_uri
    return (cwd, uri, *_main(["--compare", "--tracking-uri", uri, "--experiment", "sweeps", "--out", str(cwd / "out")]))


def _table(text: str, heading: str) -> list[list[str]]:
    """Header and rows of the table under ``## heading``."""
    block = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[:1] + lines[2:]]


def _logged(uri: str, host: str, batch: int, metric: str) -> list[float]:
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id],
                              f"tags.`env.host` = '{host}' and params.batch = '{batch}'")
    return [r.data.metrics[metric] for r in runs if metric in r.data.metrics]


def _median(cell: str) -> float:
    return float(cell.split()[0].rstrip("*"))


@pytest.mark.slow  # two sweeps logged as two hosts: ~7 s on 2 cores
def test_one_column_per_host_and_ratios_from_the_logged_values(two_hosts):
    cwd, uri, code, text, _ = two_hosts
    assert code == 0
    header, *rows = _table(text, "median epoch from 2 [s] by configuration")
    assert header == ["configuration", HOST_A, HOST_B, "÷ baseline"]
    assert [r[0] for r in rows] == ["batch=16", "batch=32"]  # numeric order; repeat is not a configuration
    only_b, both = rows
    assert only_b[1] == "-" and only_b[3] == "-"  # host-a never ran batch 16: no cell, no ratio
    assert _median(only_b[2]) == pytest.approx(_logged(uri, "host-b", 16, names.MEDIAN_EPOCH_S)[0], rel=0.01)
    a = _logged(uri, "host-a", 32, names.MEDIAN_EPOCH_S)
    b = _logged(uri, "host-b", 32, names.MEDIAN_EPOCH_S)
    assert len(a) == 2 and len(b) == 1
    assert _median(both[1]) == pytest.approx(statistics.median(a), rel=0.01)
    spread = re.fullmatch(r"\S+ \[(\S+), (\S+)\]", both[1])  # host-a's two repeats: median [min, max]
    if spread:  # (one value where both print the same)
        assert [float(x) for x in spread.groups()] == pytest.approx([min(a), max(a)], rel=0.01)
    assert both[3] == f"{b[0] / statistics.median(a):.2f}×"
    header, *rows = _table(text, "batch=32")
    by_row = {r[0]: r for r in rows}
    assert by_row["runs ok"][1:3] == ["2/2", "1/1"]
    a = _logged(uri, "host-a", 32, names.SAMPLES_PER_S)
    b = _logged(uri, "host-b", 32, names.SAMPLES_PER_S)
    assert by_row["samples/s (last epoch)"][3] == f"{b[0] / statistics.median(a):.2f}×"
    assert {"forward [ms/iteration]", "backward [ms/iteration]", "test accuracy"} <= set(by_row)
    pngs = sorted(p.name for p in (cwd / "out").glob("*.png"))
    assert pngs == ["compare_epoch_time.png", "compare_phases.png", "compare_samples_per_s.png"]
    assert all(f"]({name})" in text for name in pngs)


@pytest.mark.slow  # two sweeps logged as two hosts: ~7 s on 2 cores
def test_a_torch_version_mismatch_is_one_warning_naming_the_key(two_hosts):
    _, _, _, text, err = two_hosts
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [f"sweeps.report: warning: compared runs differ in env.torch, not only in machine: "
                        f"2.0.0 ({HOST_A}); 2.1.0 ({HOST_B})"]
    assert "## Warnings" in text and "env.torch" in text


@pytest.mark.slow  # two sweeps logged as two hosts: ~7 s on 2 cores
def test_by_sweep_ids_filter_torch_version_and_a_baseline_prefix(two_hosts):
    cwd, uri, *_ = two_hosts
    client = store(cwd)
    sweeps = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id],
                                "tags.`sweeps.kind` = 'sweep'", order_by=["attributes.start_time ASC"])
    args = [a for s in sweeps for a in ("--sweep", s.info.run_id)] + ["--sweep", sweeps[0].info.run_id]  # twice: once
    code, text, err = _main(["--compare", "--tracking-uri", uri, *args, "--filter", "params.batch = '32'",
                             "--by", "torch", "--baseline", "2.1", "--out", str(cwd / "out2")])
    assert code == 0, err
    header, *rows = _table(text, "median epoch from 2 [s] by configuration")
    assert header == ["configuration", "2.1.0", "2.0.0", "÷ baseline"]  # the baseline's column first
    assert [r[0] for r in rows] == ["all"]  # one configuration: batch 32
    a, b = _logged(uri, "host-a", 32, names.MEDIAN_EPOCH_S), _logged(uri, "host-b", 32, names.MEDIAN_EPOCH_S)
    assert rows[0][3] == f"{statistics.median(a) / b[0]:.2f}×"
    runs_ok = {r[0]: r for r in _table(text, "all")[1:]}["runs ok"]
    assert runs_ok[1:3] == ["1/1", "2/2"]  # the sweep named twice counts once
    # the machines differ too: one line for all their tags, not one per tag
    (warning,) = [line for line in err.splitlines() if "warning" in line]
    assert warning == ("sweeps.report: warning: compared runs differ in machine (env.host, sweeps.hardware), "
                              "not only in torch: host-a / test cpu (2.0.0); host-b / test cpu (2.1.0)")


@pytest.mark.slow  # two sweeps logged as two hosts: ~7 s on 2 cores
@pytest.mark.parametrize("args, says", [
    (["--compare", "--experiment", "nope"], "no experiment or preset named 'nope' in sqlite:"),
    (["--compare", "--filter", "tags.`env.host` = 'host-c'"], "no job runs match"),
    (["--compare", "--filter", "this is not a filter"], "MLflow cannot search with"),
    (["--compare", "--tag", "env.host"], "--tag 'env.host' is not KEY=VALUE"),
    (["--compare", "--sweep", "0" * 32], "no run '" + "0" * 32 + "'"),
    (["--compare", "--by", "nokey"], "unknown --by key 'nokey'"),
    (["--compare", "--by", "model"], "nothing to compare; --by a key that differs among them: env.host"),
    (["--compare", "--baseline", "host-z"], "--baseline 'host-z' is not one of the groups"),
    (["--by", "host"], "--by is for comparing runs: add --compare"),
])
def test_bad_selection_is_one_line_naming_it_and_exit_2(two_hosts, args, says):
    _, uri, *_ = two_hosts
    code, out, err = _main(["--tracking-uri", uri, *args])
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("sweeps.report: error: ") and says in line, line


def _job(run_id: str, host: str, metrics: dict[str, float]) -> JobRecord:
    return JobRecord(run_id, run_id, "ok", "", {}, {"model": "mlp", "epochs": "1"}, metrics, {names.HARDWARE_TAG: host})


def test_a_one_epoch_job_shows_its_first_epoch_marked_and_energy_where_measured():
    """No epochs 2+: the first epoch's time stands in, marked with * and a footnote. Energy per
    sample (GPU telemetry) gets a row where a run logged it."""
    jobs = [_job("a", "host-a", {names.FIRST_EPOCH_S: 0.5, names.ENERGY_J_PER_SAMPLE: 0.02}),
            _job("b", "host-b", {names.FIRST_EPOCH_S: 0.25, names.ENERGY_J_PER_SAMPLE: 0.03})]
    cmp = compare(jobs, ["machine"])
    table = config_table(cmp.configs["all"], cmp)
    assert "| median epoch from 2 [s] | 0.5* | 0.25* | 0.50× |" in table and table.endswith(FIRST_EPOCH_NOTE)
    assert "| energy [J/sample] | 0.02 | 0.03 | 1.50× |" in table
    cpu_only = compare([_job("c", "host-a", {names.FIRST_EPOCH_S: 1.0}), _job("d", "host-b", {})], ["machine"])
    assert "energy" not in config_table(cpu_only.configs["all"], cpu_only)


def test_the_gpu_slot_and_params_only_newer_runs_log_do_not_split_a_configuration():
    """Host A ran on GPU 1 of a pool with a newer sweeps (it logs data.train_examples); host B on
    GPU 0 without that param: one configuration, one ratio."""
    a = _job("a", "host-a", {names.MEDIAN_EPOCH_S: 2.0})
    a.params.update({"device.index": "1", "data.train_examples": "1000", "batch": "64"})
    b = _job("b", "host-b", {names.MEDIAN_EPOCH_S: 1.0})
    b.params.update({"device.index": "None", "batch": "64"})
    c = _job("c", "host-b", {names.MEDIAN_EPOCH_S: 3.0})
    c.params.update({"device.index": "0", "batch": "128"})
    cmp = compare([a, b, c], ["machine"])
    assert list(cmp.configs) == ["batch=64", "batch=128"]
    assert set(cmp.configs["batch=64"]) == {"host-a", "host-b"}


def test_gpu_allocation_and_process_rss_are_rows_of_their_own():
    """mem/peak_mb is the GPU's peak allocation on a GPU and the process's RSS on a CPU: a
    comparison by device puts each under its own row, and divides neither by the other."""
    cpu = _job("a", "host-a", {names.FIRST_EPOCH_S: 1.0, names.PEAK_MB: 1200.0})
    gpu = _job("b", "host-a", {names.FIRST_EPOCH_S: 0.1, names.PEAK_MB: 300.0})
    cpu.params["device"], gpu.params["device"] = "cpu", "cuda"
    cmp = compare([cpu, gpu], ["device"])
    table = config_table(cmp.configs["all"], cmp)
    assert "| GPU peak allocated MB | - | 300 | - |" in table
    assert "| process RSS MB | 1200 | - | - |" in table
    assert "peak memory" not in table
