"""The README's quick start, run as written: its smoke sweep and its report, each command taken
from the README's own block, in a fresh folder; what they print has the shape of the README's
sample (the header, one [k/N] line per job, the summary's columns, the next commands, the
report's table)."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow  # the smoke preset's 8 jobs, ResNet-50 among them: 2-4 min on 2 busy cores

SECTION = "## Quick start on a CPU"


def _quick_start() -> tuple[list[str], str]:
    """The section's commands (its first code block) and the rest of its text."""
    readme = (REPO / "README.md").read_text()
    start = readme.index(SECTION)
    section = readme[start:readme.index("\n## ", start + 1)]
    block = re.search(r"\n\n((?:    \S.*\n)+)", section).group(1)
    return [line.strip() for line in block.splitlines()], section


def _run(command: str, cwd) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    return subprocess.run([sys.executable, *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_the_quick_start_runs_as_written_and_prints_what_the_readme_shows(tmp_path):
    commands, section = _quick_start()
    assert commands == ["python -m sweeps -m +experiment=smoke", "python -m sweeps.report --experiment smoke",
                        "mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db"]
    sample = [line[4:] for line in section.splitlines() if line.startswith("    ")]

    sweep = _run(commands[0], tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    out = sweep.stdout + sweep.stderr
    assert "sweeps: 8 jobs of preset smoke → MLflow experiment 'smoke'" in sample
    assert "sweeps: 8 jobs of preset smoke → MLflow experiment 'smoke'" in out
    assert [int(k) for k in re.findall(r"^\[(\d)/8\] \+case=", out, re.M)] == list(range(1, 9))
    columns = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.startswith("job ")]
    assert columns == [re.split(r"\s{2,}", next(line for line in sample if line.startswith("job ")).strip())], \
        "the summary's columns differ from the README's"  # widths follow the values
    assert re.search(r"^8 job\(s\): \d ok", out, re.M) and any(re.match(r"8 job\(s\): \d ok", s) for s in sample)
    assert re.search(r"^  report     python -m sweeps\.report --experiment smoke --run-id [0-9a-f]{32}$", out, re.M)
    assert f"  MLflow UI  mlflow ui --backend-store-uri sqlite:///{tmp_path}/mlruns/mlflow.db" in out

    report = _run(commands[1], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    table = next(line for line in sample if line.startswith("| job |"))
    assert table in report.stdout.splitlines(), "the report's table differs from the README's"
    assert re.search(r"^report: reports/[0-9a-f]{12}/report\.md$", report.stdout + report.stderr, re.M)
