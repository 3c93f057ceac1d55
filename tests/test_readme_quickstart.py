"""The README's quick start, run as written: its smoke sweep and its report, each command taken
from the README's own block, in a fresh folder; what they print has the shape of the README's
sample (the header, one [k/N] line per job, the summary's columns, the next commands, the
report's table). The default suite runs the same commands in this process with the sweep narrowed
to three of the preset's eight cases (a classifier, a regressor, one whose data is missing); the slow test runs
all eight in a real interpreter."""
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO, cli_in_process

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


@pytest.mark.slow  # the smoke preset's 8 jobs, ResNet-50 among them: 2-4 min on 2 busy cores
def test_the_quick_start_runs_as_written_and_prints_what_the_readme_shows(tmp_path):
    commands, sample = _quick_start()
    sweep = _run(commands[0], tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    _check_sweep(sweep.stdout + sweep.stderr, sample, 8, tmp_path)
    report = _run(commands[1], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    _check_report(report.stdout + report.stderr, sample)
