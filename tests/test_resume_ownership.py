"""A job killed in one sweep and resumed by the next belongs to the sweep that resumed it: it moves
under the new parent run (the old one is named in a tag), and the new sweep's summary counts it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TEST_CONF, TESTS, runs, store

SLOW = ["model=slow", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256", "dataset.test_size=32",
        "batch=32", "epochs=6", "device=cpu", "telemetry.interval_s=0", "checkpoint.every_epochs=1", TEST_CONF]


def _sweep(cwd) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    env["PYTHONPATH"] = str(TESTS)
    return subprocess.Popen([sys.executable, "-m", "sweeps", "-m", "seed=0", *SLOW], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # two CLI sweeps and a signal: ~30 s
def test_a_resumed_job_moves_to_the_sweep_that_resumed_it(tmp_path):
    proc = _sweep(tmp_path)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "checkpoints").glob("*/*/epoch_0002.pt")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    (old_parent,) = [r for r in runs(tmp_path) if "mlflow.parentRunId" not in r.data.tags]

    again = _sweep(tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert "1 job(s): 1 ok" in out  # the new sweep counts the job it resumed
    parents = [r for r in runs(tmp_path) if "mlflow.parentRunId" not in r.data.tags]
    (job,) = [r for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags]
    new_parent = next(p for p in parents if p.info.run_id != old_parent.info.run_id)
    assert job.data.tags["mlflow.parentRunId"] == new_parent.info.run_id
    assert job.data.tags["sweeps.previous_sweep"] == old_parent.info.run_id
    assert job.data.tags["job.resumed"] == "true" and job.data.tags["outcome"] == "ok"
    steps = sorted(m.step for m in store(tmp_path).get_metric_history(job.info.run_id, "train/loss"))
    assert steps == [1, 2, 3, 4, 5, 6]  # continued in the same run, each epoch once
