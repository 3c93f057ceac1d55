"""Sweeps through a real one-node Slurm cluster (scripts/local_slurm.sh): ``hydra/launcher=slurm``.

The cluster fixture starts the cluster (apt-installing Slurm where needed; skipped with one line
where it cannot: no root, no apt) with 4 job slots on this machine's cores (SWEEPS_SLURM_CPUS),
and stops it at the end when it was not running before. The time-limit sweep starts first, in the
background, so its minutes of waiting for Slurm's 1-minute limit overlap the other tests.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from conftest import REPO, TEST_CONF, TESTS, run_cli, runs

SCRIPT = REPO / "scripts" / "local_slurm.sh"
TINY = ["dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=128", "dataset.test_size=32",
        "epochs=2", "device=cpu", "telemetry.interval_s=0", TEST_CONF]
# ~3.5 s epochs that sleep instead of computing (cheap on 2 cores): 32 steps of 0.1 s
SLOW = ["model=slow", "model.delay_s=0.1", "batch=16", "dataset=synthetic", "dataset.shape=[1,8,8]",
        "dataset.train_size=512", "dataset.test_size=32", "device=cpu", "telemetry.interval_s=0", TEST_CONF]
REQUEUE_EPOCHS = 15  # ~55 s of training + ~10 s of start-up: more than its 1-minute limit allows
pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def cluster():
    """The one-node cluster, started idempotently; stopped afterwards only if this fixture started it."""
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT} missing")
    was_running = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True).returncode == 0
    env = {**os.environ, "SWEEPS_SLURM_CPUS": os.environ.get("SWEEPS_SLURM_CPUS", "4")}
    try:
        proc = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("no Slurm cluster: scripts/local_slurm.sh start took over 300 s")
    if proc.returncode != 0:
        pytest.skip("no Slurm cluster: " + ((proc.stderr or proc.stdout).strip().splitlines() or ["?"])[-1])
    yield
    if not was_running:
        subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True, timeout=120)


def _env() -> dict[str, str]:
    """run_cli's environment: no inherited MLflow/Hydra/sweeps settings, the test models importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    """``python -m sweeps ARGS`` in the background (sbatch passes its environment to the jobs)."""
    return subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=cwd, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _children(cwd: Path) -> list:
    return [r for r in runs(cwd) if "mlflow.parentRunId" in r.data.tags]


@pytest.fixture(scope="module")
def requeue_sweep(cluster, request, tmp_path_factory):
    """The 1-minute-limit sweep, started before the other tests when its test is selected."""
    if not any(item.name == "test_a_time_limit_requeues_and_resumes_in_the_same_run" for item in request.session.items):
        yield None
        return
    cwd = tmp_path_factory.mktemp("requeue")
    proc = _start(["-m", "hydra/launcher=slurm", "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=10",
                   f"epochs={REQUEUE_EPOCHS}", *SLOW], cwd)
    yield proc, cwd
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture
def started(requeue_sweep):
    """Every test first makes sure the time-limit sweep is under way."""
    return requeue_sweep


def test_a_sweep_of_4_jobs_runs_through_slurm_with_slurm_tags(started, tmp_path):
    proc = run_cli(["-m", "hydra/launcher=slurm", "model=mlp", "batch=16,32", "seed=0,1", *TINY], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parents = [r for r in runs(tmp_path) if "mlflow.parentRunId" not in r.data.tags]
    children = _children(tmp_path)
    assert len(parents) == 1 and len(children) == 4
    ids = set()
    for r in children:
        tags = r.data.tags
        assert tags["outcome"] == "ok" and r.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert tags["slurm.partition"] == "debug" and tags["slurm.node"] and tags["slurm.restarts"] == "0"
        array, index = tags["slurm.job_id"].split("_")
        assert index == tags["slurm.array_index"]
        ids.add((array, index))
    assert {a for a, _ in ids} == {next(iter(ids))[0]} and {i for _, i in ids} == {"0", "1", "2", "3"}  # one array
    assert "4 job(s): 4 ok" in proc.stdout
    assert "sacct" not in proc.stdout + proc.stderr  # job states come from squeue: no accounting warnings


def test_scancel_ends_the_job_killed_and_the_rest_of_the_sweep_goes_on(started, tmp_path):
    # model.delay_s is slow's own key: slow keeps its default 0.05 s per step here (~2 s epochs)
    proc = _start(["-m", "hydra/launcher=slurm", "model=slow,mlp", "epochs=40", *SLOW[2:]], tmp_path)
    try:
        job_id, deadline = None, time.time() + 180
        while job_id is None and time.time() < deadline and proc.poll() is None:  # the slow job, one epoch in
            time.sleep(1)
            try:
                for r in _children(tmp_path):
                    if r.data.params.get("model") == "slow" and "time/epoch_s" in r.data.metrics:
                        job_id = r.data.tags.get("slurm.job_id")
            except Exception:  # the store is still being made
                continue
        assert job_id, "the slow job never logged an epoch"
        subprocess.run(["scancel", job_id], check=True, timeout=30)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]  # killed is not an error: the sweep's other job ran
    by_model = {r.data.params["model"]: r for r in _children(tmp_path)}
    killed, ok = by_model["slow"], by_model["mlp"]
    assert killed.data.tags["outcome"] == "killed" and killed.info.status == "KILLED"
    assert "SIGTERM" in killed.data.tags["error"]
    assert ok.data.tags["outcome"] == "ok" and ok.info.status == "FINISHED"
    assert "2 job(s): 1 killed, 1 ok" in out


def test_a_job_that_raises_or_runs_out_of_memory_in_slurm(started, tmp_path):
    proc = run_cli(["-m", "hydra/launcher=slurm", "model=broken,oom_above,mlp", "batch=64", *TINY], tmp_path,
                   timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # an error in a Slurm job, read back from MLflow
    by_model = {r.data.params["model"]: r for r in _children(tmp_path)}
    assert by_model["broken"].data.tags["outcome"] == "error" and by_model["broken"].info.status == "FAILED"
    assert "broken on purpose" in by_model["broken"].data.tags["error"]
    assert by_model["oom_above"].data.tags["outcome"] == "oom"
    assert by_model["mlp"].data.tags["outcome"] == "ok"
    assert all(r.data.tags.get("slurm.job_id") for r in by_model.values())


def test_a_time_limit_requeues_and_resumes_in_the_same_run(requeue_sweep):
    proc, cwd = requeue_sweep
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    children = _children(cwd)
    assert len(children) == 1, [r.data.tags.get("outcome") for r in children]  # one job, one run, counted once
    run = children[0]
    tags = run.data.tags
    assert tags["outcome"] == "ok" and run.info.status == "FINISHED", tags.get("error")
    assert tags["resumed"] == "true" and int(tags["slurm.restarts"]) >= 1
    client = MlflowClient(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")
    for key in ("time/epoch_s", "train/loss", "test/acc"):
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert steps == list(range(1, REQUEUE_EPOCHS + 1)), (key, steps)  # every epoch logged exactly once
    lost = client.get_metric_history(run.info.run_id, "time/requeue_lost_s")
    assert lost and all(m.value > 0 for m in lost)
    assert "1 job(s): 1 ok" in out


def test_slurm_tags_come_from_the_variables_slurm_sets(monkeypatch):
    from sweeps.launch import slurm

    for key in [k for k in os.environ if k.startswith("SLURM")]:
        monkeypatch.delenv(key)
    assert slurm.tags() == {}
    for key, value in {"SLURM_JOB_ID": "107", "SLURM_ARRAY_JOB_ID": "104", "SLURM_ARRAY_TASK_ID": "3",
                       "SLURMD_NODENAME": "n1", "SLURM_JOB_PARTITION": "gpu", "SLURM_RESTART_COUNT": "2"}.items():
        monkeypatch.setenv(key, value)
    assert slurm.tags() == {"slurm.job_id": "104_3", "slurm.array_index": "3", "slurm.node": "n1",
                            "slurm.partition": "gpu", "slurm.restarts": "2"}


def test_gpus_per_job_follow_the_device(monkeypatch):
    from omegaconf import OmegaConf

    from sweeps.launch import slurm_launcher

    def gpus(has_gpus: bool, **device) -> int:
        monkeypatch.setattr(slurm_launcher, "partition_has_gpus", lambda partition: has_gpus)
        return slurm_launcher.gpus_for(OmegaConf.create(device), "debug")

    assert gpus(True, name="cpu") == 0 and gpus(False, name="cuda", index=0) == 1
    assert gpus(True, name="auto", index=0) == 1 and gpus(False, name="auto", index=0) == 0
    assert gpus(False, name="ddp", gpus=4, backend="nccl") == 4 and gpus(True, name="ddp", gpus=4, backend="gloo") == 0
    assert gpus(True, name="ddp", gpus=2, backend="auto") == 2 and gpus(False, name="ddp", gpus=2, backend="auto") == 0


def test_sigusr2_checkpoints_at_the_epoch_end_or_gives_up_after_the_grace(tmp_path):
    import signal

    from sweeps.errors import Terminated
    from sweeps.launch import signals, slurm
    from sweeps.train.checkpoint import Checkpoints

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        signal.signal(signal.SIGTERM, signals.raise_terminated)
        signal.signal(signal.SIGUSR2, slurm._on_usr2)
        slurm._Job.asked_at, slurm._Job.job, slurm._Job.epoch_end, slurm._Job.timer = None, None, True, None
        slurm._Job.grace_s = 0.2
        ckpt = slurm._CheckpointThenStop(Checkpoints(tmp_path, 0))
        assert not ckpt.due(1)
        os.kill(os.getpid(), signal.SIGUSR2)  # the time limit is near: the next epoch end is due, then stop
        assert ckpt.due(1) and slurm._Job.asked_at is not None
        with pytest.raises(slurm.Requeue):
            ckpt.save(1, {"x": 1})
        assert [p.name for p in ckpt.files()] == ["epoch_0001.pt"]
        with pytest.raises(Terminated):  # no epoch end within grace_s: SIGTERM, stop from the last checkpoint
            time.sleep(5)
    finally:
        if slurm._Job.timer is not None:
            slurm._Job.timer.cancel()
        slurm._Job.asked_at, slurm._Job.timer, slurm._Job.epoch_end = None, None, False
        for s, handler in saved.items():
            signal.signal(s, handler)
