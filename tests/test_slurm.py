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

from conftest import REPO, TEST_CONF, TESTS, run_cli, runs, store

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


def _job_log(cwd: Path) -> str:
    """The end of the sweep's first job's log (command.log: sweeps' own lines, Slurm's signals
    and requeues) and of its Slurm job's stderr (submitit, slurmstepd): a failure says what happened."""
    logs = sorted(cwd.glob("multirun/*/*/0/command.log")) + sorted(cwd.glob("multirun/*/*/.submitit/*/*_log.err"))
    return "\n".join(f"--- {p.relative_to(cwd)}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)


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
        job_id, deadline = None, time.time() + 300  # the 4-CPU node may still hold other tests' jobs
        while job_id is None and time.time() < deadline and proc.poll() is None:  # the slow job, one epoch in
            time.sleep(1)
            try:
                for r in _children(tmp_path):
                    if r.data.params.get("model") == "slow" and "time/epoch_s" in r.data.metrics:
                        job_id = r.data.tags.get("slurm.job_id")
            except Exception:  # the store is still being made
                continue
        if not job_id:
            queue = subprocess.run(["squeue", "-o", "%i %j %T %R %M"], capture_output=True, text=True).stdout
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the slow job never logged an epoch; squeue:\n{queue}\nsweep stderr:\n{err[-2000:]}")
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


def test_bad_input_found_in_a_slurm_job_ends_that_job_alone(started, tmp_path):
    # momentum=-1 composes and passes the sweep's own check; only torch.optim.SGD, built by the
    # job's check_parts on the node, rejects it
    proc = run_cli(["-m", "hydra/launcher=slurm", "model=mlp", "optimizer.momentum=0.9,-1", *TINY], tmp_path,
                   timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # an errored job, not the sweep's bad input (2)
    parents = [r for r in runs(tmp_path) if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1  # not deleted by the job's process
    parent = parents[0]
    assert parent.info.status == "FINISHED" and "sweeps.stopped" not in parent.data.tags
    children = _children(tmp_path)
    assert [r.data.tags["outcome"] for r in children] == ["ok"]  # the bad job opened no run
    errors = {k: v for k, v in parent.data.tags.items() if k.startswith("slurm.error.")}
    assert len(errors) == 1 and "Invalid momentum value" in next(iter(errors.values())), parent.data.tags
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("sweeps: error: Slurm job")]
    assert len(line) == 1 and "momentum=-1" in line[0] and "Invalid momentum" in line[0], proc.stderr[-3000:]
    assert "killed" not in proc.stdout and "1 job(s): 1 ok" in proc.stdout


def test_a_bad_value_in_a_slurm_sweep_stops_it_before_anything_is_submitted(started, tmp_path):
    proc = run_cli(["-m", "hydra/launcher=slurm", "model=mlp", "epochs=2,0",
                    *[a for a in TINY if not a.startswith("epochs=")]], tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "epochs=0 is not valid" in proc.stderr and "Submitted" not in proc.stdout + proc.stderr
    # no parent run, no job submitted: no store at all, or one without runs
    assert not (tmp_path / "mlruns").exists() or store(tmp_path).get_experiment_by_name("sweeps") is None \
        or not runs(tmp_path)


def test_a_time_limit_requeues_and_resumes_in_the_same_run(requeue_sweep):
    proc, cwd = requeue_sweep
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    children = _children(cwd)
    assert len(children) == 1, [r.data.tags.get("outcome") for r in children]  # one job, one run, counted once
    run = children[0]
    tags = run.data.tags
    assert tags["outcome"] == "ok" and run.info.status == "FINISHED", (tags.get("error"), _job_log(cwd))
    assert tags["job.resumed"] == "true" and int(tags["slurm.restarts"]) >= 1
    client = MlflowClient(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")
    for key in ("time/epoch_s", "train/loss", "test/acc"):
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert steps == list(range(1, REQUEUE_EPOCHS + 1)), (key, steps)  # every epoch logged exactly once
    lost = client.get_metric_history(run.info.run_id, "time/requeue_lost_s")
    assert lost and all(m.value > 0 for m in lost)
    assert "1 job(s): 1 ok" in out


def test_slurm_tags_come_from_the_variables_slurm_sets(monkeypatch):
    from sweeps.launchers.slurm import requeue as slurm

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

    from sweeps.launchers.slurm import launcher as slurm_launcher

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
    from sweeps.job import signals
    from sweeps.launchers.slurm import requeue as slurm
    from sweeps.train.checkpoint import Checkpoints

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        signal.signal(signal.SIGTERM, signals.raise_terminated)
        signal.signal(signal.SIGUSR2, slurm._on_usr2)
        slurm._SlurmJob.asked_at, slurm._SlurmJob.job, slurm._SlurmJob.epoch_end, slurm._SlurmJob.timer = None, None, True, None
        slurm._SlurmJob.grace_s = 0.2
        ckpt = slurm._CheckpointThenStop(Checkpoints(tmp_path, 0))
        assert not ckpt.due(1)
        os.kill(os.getpid(), signal.SIGUSR2)  # the time limit is near: the next epoch end is due, then stop
        assert ckpt.due(1) and slurm._SlurmJob.asked_at is not None
        with pytest.raises(slurm.Requeue):
            ckpt.save(1, {"x": 1})
        assert [p.name for p in ckpt.files()] == ["epoch_0001.pt"]
        with pytest.raises(Terminated):  # no epoch end within grace_s: SIGTERM, stop from the last checkpoint
            time.sleep(5)
    finally:
        if slurm._SlurmJob.timer is not None:
            slurm._SlurmJob.timer.cancel()
        slurm._SlurmJob.asked_at, slurm._SlurmJob.timer, slurm._SlurmJob.epoch_end = None, None, False
        for s, handler in saved.items():
            signal.signal(s, handler)


class _Disposition:
    """A one-item dataset: what SIGUSR2 does in the data loader worker that loads it."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> int:
        import signal

        return int(signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN)


def test_a_data_loader_worker_of_a_slurm_job_ignores_the_sigusr2_slurm_sends_every_process():
    import signal

    from torch.utils.data import DataLoader

    from sweeps.launchers.slurm import requeue as slurm

    def one_epoch() -> list[int]:
        assert signal.getsignal(signal.SIGUSR2) is slurm._on_usr2  # the job's process acts on it
        return [int(x) for x in DataLoader(_Disposition(), batch_size=None, num_workers=1)]

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        assert slurm.run_job(one_epoch, 120) == [1]  # a worker killed by it would end the epoch with an error
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert [int(x) for x in DataLoader(_Disposition(), batch_size=None, num_workers=1)] == [0]  # outside a job: as it was


def test_the_grace_after_sigusr2_leaves_time_to_close_and_requeue():
    from sweeps.launchers.slurm import requeue as slurm

    assert slurm.grace_s(120) == 75 and slurm.grace_s(300) == 255  # 45 s kept for fsync, closing, requeue
    assert slurm.grace_s(10) == 5  # a short delay (the 1-minute-limit test): half of it


def test_squeue_states_a_job_does_not_leave_end_the_wait(monkeypatch):
    from sweeps.launchers.slurm import launcher as slurm_launcher

    states = {"1_0": "PREEMPTED", "1_1": "SPECIAL_EXIT", "1_2": "REVOKED", "1_3": "RUNNING", "1_4": "REQUEUED",
              "1_5": "PENDING"}
    out = "".join(f"{j}|{s}|n1\n" for j, s in states.items())
    monkeypatch.setattr(slurm_launcher.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
    watcher = slurm_launcher._squeue_watcher()
    for job_id in states:
        watcher.register_job(job_id)
    watcher.update()
    assert {j for j in states if watcher.is_done(j, mode="cache")} == {"1_0", "1_1", "1_2"}


class _FakeJob:
    def __init__(self, job_id: str, result=None, raises: Exception | None = None):
        self.job_id, self.state, self._result, self._raises = job_id, "COMPLETED", result, raises

    def results(self):
        if self._raises is not None:
            raise self._raises
        return [self._result]


def _slurm_launcher(overrides: list[str]):
    """The sweeps Slurm launcher as Hydra sets it up in a sweep's process (the real config loader)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext, RunMode
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from omegaconf import OmegaConf

    import sweeps.config
    from sweeps.launchers.slurm.launcher import SlurmLauncher

    sweeps.config.register()
    setup_globals()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        loader = GlobalHydra.instance().config_loader()
        config = loader.load_configuration("config", overrides=["hydra/launcher=slurm", *overrides],
                                           run_mode=RunMode.MULTIRUN)
    params = OmegaConf.to_container(config.hydra.launcher, resolve=True)
    params.pop("_target_")
    launcher = SlurmLauncher(**params)
    launcher.setup(hydra_context=HydraContext(config_loader=loader, callbacks=Callbacks()), task_function=None,
                   config=config)
    return launcher


def test_each_slurm_job_gets_the_gpus_of_its_own_device(monkeypatch, tmp_path):
    import submitit
    from hydra.core.utils import JobReturn, JobStatus
    from submitit.slurm.slurm import SlurmJob

    from sweeps.launchers.slurm import launcher as slurm_launcher

    monkeypatch.setattr(SlurmJob, "watcher", SlurmJob.watcher)  # launch() replaces it: restored after
    asked = []
    monkeypatch.setattr(slurm_launcher, "partition_has_gpus", lambda partition: asked.append(partition) or False)
    submitted = []  # (gpus_per_node, [overrides of each job]) per array

    class FakeExecutor:
        def __init__(self, **kwargs):
            self.parameters = {}

        def update_parameters(self, **kwargs):
            self.parameters.update(kwargs)

        def map_array(self, fn, overrides, *rest):
            submitted.append((self.parameters["gpus_per_node"], [list(o) for o in overrides]))
            out = []
            for o in overrides:
                ret = JobReturn(overrides=list(o), status=JobStatus.COMPLETED)
                ret.return_value = "ok"
                out.append(_FakeJob(f"{len(submitted)}_{len(out)}", ret))
            return out

    monkeypatch.setattr(submitit, "AutoExecutor", FakeExecutor)
    nccl = "device.backend=nccl"
    sweep = [["device=cpu"], ["device=cuda"], ["device=ddp", "device.gpus=2", nccl], ["device=cuda", "seed=1"],
             ["device=ddp", "device.gpus=4", nccl], ["device=auto"], ["device=ddp", "device.gpus=2", "device.backend=gloo"]]
    launcher = _slurm_launcher([f"hydra.sweep.dir={tmp_path}", f"hydra.launcher.submitit_folder={tmp_path}/.submitit"])
    results = launcher.launch(sweep, initial_job_idx=0)
    assert [r.overrides for r in results] == sweep and all(r.return_value == "ok" for r in results)  # sweep order
    assert submitted == [(None, [["device=cpu"], ["device=auto"], ["device=ddp", "device.gpus=2", "device.backend=gloo"]]),
                         (1, [["device=cuda"], ["device=cuda", "seed=1"]]),
                         (2, [["device=ddp", "device.gpus=2", nccl]]), (4, [["device=ddp", "device.gpus=4", nccl]])]
    assert asked == ["debug"]  # sinfo once, for device=auto (the partition of the preset)

    submitted.clear()  # the launcher's own request serves every job: one array
    launcher.params["gpus_per_node"] = 1
    launcher.launch(sweep[:3], initial_job_idx=0)
    assert submitted == [(1, sweep[:3])]


def test_a_slurm_job_that_raised_is_an_error_one_that_came_back_empty_is_killed(monkeypatch, capsys):
    from hydra.core.utils import JobReturn, JobStatus
    from submitit.core.utils import FailedJobError, UncompletedJobError

    from sweeps.errors import DataUnavailable
    from collections import Counter

    from sweeps import state
    from sweeps.job import outcome
    from sweeps.launchers.slurm import launcher as slurm_launcher

    lost = []
    monkeypatch.setattr(slurm_launcher, "_close_lost_run", lambda job_id, state: lost.append(job_id))
    monkeypatch.delenv("SWEEPS_PARENT_RUN_ID", raising=False)
    monkeypatch.setattr(state.current(), "outcomes", Counter())
    usage = JobReturn(overrides=["dataset=cifar10"], status=JobStatus.FAILED)
    usage.return_value = DataUnavailable("cifar10 is not under dataset.root=/data (/data) and download=false")
    trace = "JobRecord (task=0) failed during processing with trace:\n----------------------\n{}\n----------------------\n"
    crash = FailedJobError(trace.format("Traceback (most recent call last):\n  ...\nRuntimeError: composition failed"))
    used_up = FailedJobError(trace.format("Traceback:\nsubmitit.core.utils.UncompletedJobError: JobRecord not requeued "
                                          "because: timed-out too many times."))
    empty = UncompletedJobError("Job 4_3 (task: 0) with path ... has not produced any output (state: CANCELLED)")
    assert outcome.exit_status() == 0
    got = [slurm_launcher._result(_FakeJob("4_0", usage), ["a=1"]).return_value,
           slurm_launcher._result(_FakeJob("4_1", raises=crash), ["a=2"]).return_value,
           slurm_launcher._result(_FakeJob("4_2", raises=used_up), ["a=3"]).return_value,
           slurm_launcher._result(_FakeJob("4_3", raises=empty), ["a=4"]).return_value]
    assert got == ["error", "error", "killed", "killed"] and lost == ["4_2", "4_3"]
    assert outcome.exit_status() == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["sweeps: error: Slurm job 4_0 (a=1): cifar10 is not under dataset.root=/data (/data) and download=false",
                   "sweeps: error: Slurm job 4_1 (a=2): RuntimeError: composition failed"]
