"""README "Benchmark your own model", run as a new user runs it: sweeps built as a wheel and
installed (not editable) into a fresh virtual environment, the example folder copied to a folder
outside the repo, its preset swept with ``--config-dir conf``, the report read back.

The venv reaches the dependencies already installed on this machine (torch, MLflow, ...) through
a path line in a ``.pth`` file — not the project's own editable install, whose import hook lives
in a ``.pth`` that only a site directory runs — so the test takes a minute, not a download of
torch. ``import sweeps`` in the venv is checked to come from the wheel."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, runs

pytestmark = pytest.mark.slow

# The README's steps after the install (the test installs the wheel it just built in their place).
STEPS = [
    "cp -r examples/own_model ~/waves && cd ~/waves",
    "python -m sweeps --config-dir conf -m +experiment=waves_batch",
    "python -m sweeps.report --experiment waves",
]


def _section(readme: str, title: str) -> str:
    start = readme.index(f"## {title}")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end > 0 else None]


def test_readme_own_model_steps_from_a_wheel_outside_the_repo(tmp_path):
    section = _section((REPO / "README.md").read_text(), "Benchmark your own model")
    for step in STEPS:
        assert step in section, f"README no longer says {step!r}"
    dist, venv, user = tmp_path / "dist", tmp_path / "venv", tmp_path / "waves"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("sweeps-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_machine_deps.pth").write_text("\n".join(sorted(deps)) + "\n")  # after the wheel's own path

    shutil.copytree(REPO / "examples" / "own_model", user)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_", "PYTHON"))}
    where = subprocess.run([str(python), "-c", "import sweeps; print(sweeps.__file__)"], cwd=user, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(site)), f"sweeps imported from {where}, not the wheel"

    sweep = subprocess.run([str(python), "-m", "sweeps", "--config-dir", "conf", "-m", "+experiment=waves_batch",
                            "epochs=2"], cwd=user, env=env, capture_output=True, text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    jobs = [r for r in runs(user, "waves") if r.data.tags.get("sweeps.kind") != "sweep"]
    assert [r.data.tags["outcome"] for r in jobs] == ["ok", "ok"]
    assert {(r.data.params["model"], r.data.params["dataset"]) for r in jobs} == {("conv1d", "waves")}

    report = subprocess.run([str(python), "-m", "sweeps.report", "--experiment", "waves"], cwd=user, env=env,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    assert re.search(r"\| batch \| runs \| lr \| first epoch \[s\] \|", report.stdout), report.stdout[-3000:]
    assert re.search(r"\| 32 \| 1/1 \|", report.stdout) and re.search(r"\| 64 \| 1/1 \|", report.stdout)
