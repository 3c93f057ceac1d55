"""The README's first lines, run in order as a newcomer runs them on a fresh machine without a GPU
or a network: clone, a virtual environment, the install, the main job on the data the repo ships,
the tests — and the main job's MLflow store holds its runs.

The install step is the one stand-in: the venv reaches the packages already on this machine
(torch, MLflow, ...) and the clone's own ``src/`` through a ``.pth`` file, as an editable install
would, instead of downloading ~6 GB of wheels (CI's own first step installs as written). The tests
line runs a narrowed set in the clone: the whole suite is CI's own step."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

FIRST_LINES = [
    "git clone <this repository's URL> sweeps && cd sweeps",
    "python -m venv .venv && . .venv/bin/activate",
    'pip install -e ".[dev]"',
    "python -m sweeps -m +experiment=offline_mnist",
    "python -m pytest",
]


def _first_block(readme: str) -> list[str]:
    """The commands of the README's first code block, comments dropped."""
    block = re.search(r"\n\n((?:    .*\n)+)", readme).group(1)
    return [re.split(r"\s+#\s", line.strip())[0] for line in block.splitlines()]


def test_the_readmes_first_lines_run_in_order_on_what_the_repo_ships(tmp_path):
    commands = _first_block((REPO / "README.md").read_text())
    assert commands == FIRST_LINES, "the README's first lines changed: update this test with them"
    clone = tmp_path / "sweeps"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=300)
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "sweeps_clone.pth").write_text(f"{clone / 'src'}\n")  # the clone's code, as pip install -e makes it
    (site / "zz_machine_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # what activating the venv does

    main = subprocess.run(["python", "-m", "sweeps", "-m", "+experiment=offline_mnist"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=900)
    assert main.returncode == 0, main.stderr[-3000:]
    where = subprocess.run(["python", "-c", "import sweeps; print(sweeps.__file__)"], cwd=tmp_path, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(clone)), f"sweeps imported from {where}, not the clone"
    assert "4 job(s): 4 ok" in main.stdout and "Verdict" in main.stdout

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{clone / 'mlruns' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("offline_mnist")
    jobs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("sweeps.kind") != "sweep"]
    assert sorted((r.data.params["model"], r.data.params["batch"]) for r in jobs) == [
        ("cnn10_narrow", "256"), ("cnn10_narrow", "64"), ("mlp", "256"), ("mlp", "64")]
    assert {r.data.tags["outcome"] for r in jobs} == {"ok"}

    tests = subprocess.run(["python", "-m", "pytest", "-q", "-p", "no:randomly", "-n", "0", "tests/test_names.py"],
                           cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0, tests.stdout[-3000:]
