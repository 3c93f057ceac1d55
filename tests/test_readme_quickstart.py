"""The README's quick start, run as written: its smoke sweep and its report, each command taken
from the README's own block, in a fresh folder; what they print has the shape of the README's
sample (the header, one [k/N] line per job, the summary's columns, the next commands, the
report's table). The default suite runs the same commands in this process with the sweep narrowed
to three of the preset's eight cases (a classifier, a regressor, one whose data is missing); the
slow tests run all eight once, in a real interpreter, and read that sweep three ways: its
console, its jobs' outcomes in the store, its report's table."""
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO, cli_in_process, runs, table_block, table_rows
from sweeps import names

SECTION = "## Quick start on a CPU"
THREE_CASES = "+case=mlp_imagefolder,mlp_tabular_diabetes,mlp_cifar10"  # the command line wins over the preset's list


def _quick_start() -> tuple[list[str], list[str]]:
    """The section's commands (its first code block) and its sample output (the indented lines)."""
    readme = (REPO / "README.md").read_text()
    start = readme.index(SECTION)
    section = readme[start:readme.index("\n## ", start + 1)]
    block = re.search(r"\n\n((?:    \S.*\n)+)", section).group(1)
    commands = [line.strip() for line in block.splitlines()]
    assert commands == ["python -m sweeps -m +experiment=smoke", "python -m sweeps.report --experiment smoke",
                        "mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db"]
    return commands, [line[4:] for line in section.splitlines() if line.startswith("    ")]


def _check_sweep(out: str, sample: list[str], jobs: int, cwd) -> None:
    """The sweep's console has the sample's shape for a sweep of ``jobs`` jobs."""
    header = f"sweeps: {jobs} jobs of preset smoke → MLflow experiment 'smoke'"
    assert "sweeps: 8 jobs of preset smoke → MLflow experiment 'smoke'" in sample
    assert header in out, out[-3000:]
    assert [int(k) for k in re.findall(rf"^\[(\d)/{jobs}\] \+case=", out, re.M)] == list(range(1, jobs + 1))
    columns = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.startswith("job ")]
    assert columns == [re.split(r"\s{2,}", next(line for line in sample if line.startswith("job ")).strip())], \
        "the summary's columns differ from the README's"  # widths follow the values
    assert re.search(rf"^{jobs} job\(s\): \d ok", out, re.M) and any(re.match(r"8 job\(s\): \d ok", s) for s in sample)
    verdict = "Verdict (tag sweeps.verdict on the sweep's run):"
    assert verdict in sample and verdict in out
    assert "mlp on cifar10 (case=mlp_cifar10) — cpu: no job ended ok." in sample
    assert "mlp on cifar10 (case=mlp_cifar10) — cpu: no job ended ok." in out.splitlines()
    assert re.search(r"^  report     python -m sweeps\.report --experiment smoke --run-id [0-9a-f]{32}$", out, re.M)
    assert f"  MLflow UI  mlflow ui --backend-store-uri sqlite:///{cwd}/mlruns/mlflow.db" in out


def _check_report(out: str, sample: list[str]) -> None:
    """The report's output has the sample's table header and its path line."""
    table = next(line for line in sample if line.startswith("| job |"))
    assert table in out.splitlines(), "the report's table differs from the README's"
    assert re.search(r"^report: reports/[0-9a-f]{12}/report\.md$", out, re.M)


def test_the_quick_start_narrowed_to_three_jobs_prints_what_the_readme_shows(tmp_path, monkeypatch):
    from sweeps.report.__main__ import main as report_main

    commands, sample = _quick_start()
    sweep = cli_in_process([*shlex.split(commands[0])[3:], THREE_CASES], tmp_path, fresh_store=True)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    _check_sweep(sweep.stdout + sweep.stderr, sample, 3, tmp_path)
    assert re.search(r"^\+case=mlp_cifar10 +unavailable +UNAVAILABLE +see \[1\]$", sweep.stdout + sweep.stderr, re.M)

    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("MLFLOW_", "SWEEPS_"))]:
        monkeypatch.delenv(key)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert report_main(shlex.split(commands[1])[3:]) == 0, err.getvalue()[-3000:]
    _check_report(out.getvalue() + err.getvalue(), sample)


def _run(command: str, cwd) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    return subprocess.run([sys.executable, *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The quick start run once as written, in a fresh folder: the sweep (the smoke preset's 8
    jobs, ResNet-50 among them: 1-4 min on 2 busy cores), then the report when the sweep ended 0;
    (folder, sweep, report or None, the README's sample lines). The slow tests below read it."""
    commands, sample = _quick_start()
    cwd = tmp_path_factory.mktemp("quick_start")
    sweep = _run(commands[0], cwd)
    report = _run(commands[1], cwd) if sweep.returncode == 0 else None
    return cwd, sweep, report, sample


@pytest.mark.slow
def test_the_quick_start_runs_as_written_and_prints_what_the_readme_shows(quick_start):
    cwd, sweep, report, sample = quick_start
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    _check_sweep(sweep.stdout + sweep.stderr, sample, 8, cwd)
    assert report.returncode == 0, report.stderr[-3000:]
    _check_report(report.stdout + report.stderr, sample)


@pytest.mark.slow
def test_the_smoke_preset_trains_every_model_and_dataset_family(quick_start):
    """The install check: every family trains; offline, the torchvision sets without files are
    skipped as unavailable (one line each), never an error."""
    cwd, sweep, _, _ = quick_start
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    jobs = {r.data.tags[names.OVERRIDES_TAG]: r for r in runs(cwd, "smoke") if names.PARENT_RUN_TAG in r.data.tags}
    assert len(jobs) == 8
    outcomes = {name: r.data.tags[names.OUTCOME_TAG] for name, r in jobs.items()}
    assert outcomes.pop("+case=mlp_cifar10") in ("ok", "unavailable")
    assert outcomes.pop("+case=mlp_mnist") in ("ok", "unavailable")
    assert set(outcomes.values()) == {"ok"}
    assert names.FINAL_RMSE in jobs["+case=mlp_tabular_diabetes"].data.metrics


@pytest.mark.slow
def test_the_smoke_presets_report_shows_each_jobs_own_quality_lr_and_reason(quick_start):
    """The smoke preset mixes classification and regression jobs and, offline, unavailable ones:
    the report's one table shows accuracy for the first, RMSE for the second, each job's lr as
    logged, and every unavailable job's reason in full under the table."""
    cwd, sweep, report, _ = quick_start
    assert report is not None, sweep.stderr[-3000:]  # the sweep failed, so no report was made
    assert report.returncode == 0, report.stderr[-3000:]
    path = re.search(r"^report: (reports/[0-9a-f]{12}/report\.md)$", report.stdout + report.stderr, re.M)
    text = (cwd / path.group(1)).read_text()
    header = [c.strip() for c in table_block(text, "Training jobs")[0].strip("|").split("|")]
    rows = {r[0]: dict(zip(header, r)) for r in table_rows(text, "Training jobs")}
    below = " ".join(text.split("## Training jobs\n", 1)[1].split("\n## ", 1)[0].split())
    kinds = set()
    for run in [r for r in runs(cwd, "smoke") if names.PARENT_RUN_TAG in r.data.tags]:
        row, m = rows[run.data.tags[names.OVERRIDES_TAG].lstrip("+")], run.data.metrics
        if run.data.tags[names.OUTCOME_TAG] == "ok":
            assert row["lr"] == f"{m[names.LR]:.4g}" and row["process RSS MB"] == f"{m[names.PEAK_MB]:.0f}"
            kind = "accuracy" if names.FINAL_ACC in m else "RMSE"
            assert (row["accuracy"], row["RMSE"]) == ((f"{m[names.FINAL_ACC]:.4f}", "") if kind == "accuracy"
                                                       else ("", f"{m[names.FINAL_RMSE]:.2f}"))
        else:
            kind = run.data.tags[names.OUTCOME_TAG]
            mark = re.fullmatch(r"UNAVAILABLE \[(\d)\]", row["first epoch [s]"])
            assert mark and f"[{mark[1]}] {run.data.tags[names.ERROR_TAG]}" in below
        kinds.add(kind)
    assert kinds == {"accuracy", "RMSE", "unavailable"}  # cifar10 and mnist: no files under ./data here
