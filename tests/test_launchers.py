"""Launchers beyond Hydra's basic one: jobs in other processes (joblib pool, submitit local).

The exit status and the skipped count then come from the MLflow child runs, not from counters
in the launching process. GPU pinning itself needs GPUs: here the pool runs CPU slots.
"""
from __future__ import annotations

import pytest

from conftest import TEST_CONF, run_cli, runs
from sweeps import launchers
from sweeps.placement import gpu_pool

TINY = ["dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=128", "dataset.test_size=32",
        "epochs=2", "device=cpu", "telemetry.interval_s=0", "checkpoint.every_epochs=0", TEST_CONF]
METRICS = {"time/first_epoch_s", "time/median_epoch_s", "time/total_s", "test/final_acc", "mem/peak_mb",
           "batch", "lr", "train/loss", "test/acc", "phase/forward_ms", "perf/samples_per_s"}


@pytest.mark.slow  # 8 jobs in loky worker processes: ~25 s here
def test_gpu_pool_runs_8_jobs_on_2_cores_into_a_fresh_store(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=gpu_pool", "model=mlp", "batch=16,32,64,128", "seed=0,1", *TINY],
                   tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    children = [r for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 8
    for r in children:
        assert r.data.tags["outcome"] == "ok" and r.info.status == "FINISHED"
        assert METRICS <= set(r.data.metrics), METRICS - set(r.data.metrics)
    assert "8 job(s): 8 ok" in proc.stdout


@pytest.mark.slow  # two sweeps in worker processes: ~60 s here
def test_error_exit_status_and_skips_come_from_mlflow(tmp_path):
    args = ["-m", "hydra/launcher=gpu_pool", "model=broken,mlp", *TINY]
    first = run_cli(args, tmp_path, timeout=300)
    assert first.returncode == 1, first.stderr[-3000:]  # the error happened in a worker process
    again = run_cli(args, tmp_path, timeout=300)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "1 job(s) skipped" in again.stdout  # mlp was done (ok); broken ran again


@pytest.mark.parametrize("overrides, here", [
    ([], True),  # Hydra's basic launcher
    (["hydra/launcher=gpu_pool", "hydra.launcher.n_jobs=1"], True),  # joblib runs n_jobs=1 in the caller
    (["hydra/launcher=gpu_pool"], False),  # n_jobs=2: loky workers
    (["hydra/launcher=joblib"], False),
    (["hydra/launcher=submitit_local"], False),
])
def test_a_sweep_keeps_its_store_process_only_where_its_jobs_run_in_its_process(overrides, here):
    """The sweep's process gives its store process back (``store_processes.discard_spare``) unless
    its launcher runs the jobs there; a pool's workers start their own."""
    from hydra import compose, initialize_config_dir

    import sweeps.config

    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        config = compose("config", overrides=overrides, return_hydra_config=True)
    assert launchers.runs_jobs_in_this_process(config) is here


def test_pool_slots_are_exclusive(monkeypatch):
    monkeypatch.setenv(launchers.POOL_ENV, "2")
    monkeypatch.setattr(gpu_pool, "lock_dir", lambda: tmp)
    import tempfile
    from pathlib import Path
    tmp = Path(tempfile.mkdtemp())
    a, lock_a = gpu_pool.acquire(2, "t")
    b, lock_b = gpu_pool.acquire(2, "t")
    assert {a, b} == {0, 1}
    with pytest.raises(TimeoutError):
        gpu_pool.acquire(2, "t", timeout_s=0.3)
    lock_a.release()
    again, lock_again = gpu_pool.acquire(2, "t", timeout_s=1)
    assert again == a
    lock_again.release()
    lock_b.release()


@pytest.mark.slow  # submitit polls its jobs: ~40 s here
def test_submitit_local_runs_jobs_as_separate_processes(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=submitit_local", "model=mlp,broken", *TINY], tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # broken's error, read back from MLflow
    children = [r for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["outcome"] for r in children) == ["error", "ok"]
    pids = {r.data.tags["sweeps.pid"] for r in children}
    assert len(pids) == 2  # each job in a process of its own
    ok = next(r for r in children if r.data.tags["outcome"] == "ok")
    assert METRICS <= set(ok.data.metrics)
