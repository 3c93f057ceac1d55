"""One process state (sweeps.state): each command starts from a fresh one; what is true of the
process itself (a CUDA context lost to a sticky error) carries over; the sweep's parent run is
held in it and exported only for jobs in child processes; launchers plug in through one interface."""
from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from conftest import TEST_CONF, cli_in_process
from hydra.core.hydra_config import HydraConfig

from sweeps import state
from sweeps import launchers
from sweeps.job import parent_run

ONE_JOB = ["model=mlp", "model.hidden=[8]", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32",
           "dataset.test_size=8", "epochs=1", "telemetry.interval_s=0", "telemetry.figure=false", TEST_CONF]


def _an_earlier_command_left(before: state.ProcessState) -> None:
    """What an earlier command in this process leaves: an error job, a SIGINT, a sweep."""
    before.outcomes["error"] += 1
    before.last_job.update(name="old", outcome="error", run_id="x", tracking_uri="sqlite:///old.db")
    before.last_sweep.update(run_id="s", tracking_uri="sqlite:///old.db")
    before.signals.append(signal.SIGINT)
    before.planned_jobs = 4


def test_each_command_line_run_starts_from_a_fresh_state(tmp_path):
    before = state.current()
    _an_earlier_command_left(before)
    proc = cli_in_process([*ONE_JOB, "device=cpu"], tmp_path)
    # neither the earlier error (exit 1) nor its SIGINT (no job starts after a signal) reach this command
    assert proc.returncode == 0, proc.stderr[-2000:]
    now = state.current()
    assert now is not before and now.outcomes == Counter(ok=1) and now.last_job["outcome"] == "ok"
    assert not now.last_sweep and not now.signals and now.planned_jobs is None


def test_sweeps_run_starts_from_a_fresh_state_and_reads_back_its_own_job(tmp_path, monkeypatch):
    import sweeps

    from conftest import seed_store

    monkeypatch.chdir(tmp_path)
    seed_store(tmp_path)
    before = state.current()
    _an_earlier_command_left(before)
    (record,) = sweeps.run([*ONE_JOB, "device=cpu"], multirun=False)
    assert record["outcome"] == "ok" and record["run_id"] != "x"  # its own job, not the earlier command's
    assert state.current() is not before and state.current().outcomes == Counter(ok=1)


def test_a_lost_cuda_context_stays_lost_for_the_next_command(tmp_path):
    """The counts are the command's; the CUDA context is the process's: a later command's CUDA job
    ends unavailable, naming the sticky error, instead of failing on the lost context."""
    before = state.current()
    _an_earlier_command_left(before)
    before.cuda_lost = "AcceleratorError: CUDA error: an illegal memory access was encountered"
    before.cuda_contexts.add(0)
    proc = cli_in_process([*ONE_JOB, "device=cuda"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]  # unavailable is no error
    assert "sticky CUDA error lost this process's CUDA context" in proc.stdout
    now = state.current()
    assert now.outcomes == Counter(unavailable=1) and now.cuda_lost == before.cuda_lost and now.cuda_contexts == {0}


def test_the_sweeps_parent_run_is_read_from_the_state_and_exported_only_for_child_processes(monkeypatch):
    for name in ("SWEEPS_PARENT_RUN_ID", "SWEEPS_SWEEP_TRACKING_URI", "SWEEPS_SWEPT_KEYS"):
        monkeypatch.delenv(name, raising=False)
    parent_run.note(parent_run_id="p1", tracking_uri="sqlite:///a.db", swept_keys="batch,lr")
    assert os.environ["SWEEPS_PARENT_RUN_ID"] == "p1"  # what a joblib/submitit worker inherits
    monkeypatch.setenv("SWEEPS_PARENT_RUN_ID", "changed-by-someone")
    assert parent_run.get("parent_run_id") == "p1"  # this process reads its state, not the variable
    assert parent_run.close() == ("p1", "sqlite:///a.db")
    assert "SWEEPS_PARENT_RUN_ID" not in os.environ and parent_run.get("parent_run_id") is None
    assert state.current().last_sweep == {"run_id": "p1", "tracking_uri": "sqlite:///a.db"}
    monkeypatch.setenv("SWEEPS_SWEPT_KEYS", "seed")  # a job in a child process: only the environment has it
    assert parent_run.get("swept_keys") == "seed"


def _under(launcher: str, *overrides: str) -> None:
    """Hydra's config of a run under ``hydra/launcher=launcher``, as Hydra sets it for a job."""
    from hydra import compose as hydra_compose, initialize_config_dir

    import sweeps.config

    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        cfg = hydra_compose("config", overrides=[f"hydra/launcher={launcher}", *overrides], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)


def test_the_launcher_is_asked_through_one_interface(monkeypatch):
    monkeypatch.delenv(launchers.POOL_ENV, raising=False)
    assert type(launchers.current()) is launchers.Launcher and launchers.current().pool_slots() is None
    _under("gpu_pool", "hydra.launcher.n_jobs=3")
    assert isinstance(launchers.current(), launchers.JoblibPool) and launchers.current().pool_slots() == 3
    monkeypatch.setenv(launchers.POOL_ENV, "5")  # the variable wins over n_jobs
    assert launchers.current().pool_slots() == 5
    _under("slurm")
    slurm = launchers.current()
    assert isinstance(slurm, launchers.SlurmArray) and not slurm.ends_job_alone()  # not inside a Slurm job

    class Mine(launchers.Launcher):
        def pool_slots(self) -> int | None:
            return 7
    monkeypatch.setattr(launchers, "_REGISTRY", list(launchers._REGISTRY))
    launchers.register("sweeps_slurm", Mine())
    assert launchers.current().pool_slots() == 7


@pytest.mark.slow  # four in-process jobs: ~5 s
def test_only_a_command_that_exits_after_its_one_job_skips_the_collection_for_a_next_job(tmp_path, monkeypatch):
    """``release_memory`` (a full garbage collection, the CUDA cache emptied: ~0.2-0.3 s the first
    time in a process holding torch) is for the next job in the same process. ``python -m sweeps``
    with one job has none and skips it; :func:`sweeps.run`'s process goes on after the command, and
    a sweep's jobs follow one another in it: they collect."""
    from sweeps.sweep import command
    from sweeps.job import finish

    freed: list = []
    monkeypatch.setattr(finish, "release_memory", lambda device=None: freed.append(device))
    entry = command.cli
    for exits, args, jobs_freed in ((True, ONE_JOB, 0), (False, ONE_JOB, 1), (True, ["-m", *ONE_JOB, "seed=1,2"], 2)):
        freed.clear()
        monkeypatch.setattr(command, "cli", lambda early=None, e=exits: entry(early, process_exits=e))
        proc = cli_in_process([*args, "device=cpu"], tmp_path / f"{exits}{len(args)}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert len(freed) == jobs_freed, (exits, args)
