"""A real multirun through the CLI against a real sqlite MLflow store: nesting, outcomes, names.

The OOM sweep (exit status 0) and the error sweep (exit status 1) go through the CLI's entry
point in-process (``cli_in_process``: the parent/child structure a user's sweep writes), single
jobs through ``in_process``; real processes are tested in test_nothing_lost and test_startup."""
from __future__ import annotations

import csv

import pytest
import torch

from conftest import TEST_CONF, cli_in_process, runs, store

EPOCH_METRICS = {"time/epoch_s", "time/eval_s", "phase/sum_s", "train/loss", "train/acc", "test/loss",
                 "test/acc", "phase/data_ms", "phase/forward_ms", "phase/backward_ms", "phase/optimizer_ms",
                 "perf/samples_per_s", "train/lr"}
SUMMARY_METRICS = {"time/first_epoch_s", "time/median_epoch_s", "time/total_s", "test/final_acc",
                   "mem/peak_mb", "batch", "lr"}


TINY = ["dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=128", "dataset.test_size=32",
        "epochs=2", "device=cpu", TEST_CONF]
SWEEPS = {
    # model=oom_above,mlp × batch=16,64: the OOM job (oom_above, 64) comes second, jobs follow it
    "oom_sweep": ["-m", "model=oom_above,mlp", "batch=16,64", *TINY],
}
ERROR_SWEEP = ["-m", "model=broken,mlp", "batch=32", *TINY]  # in-process: exit status 1 from the CLI's own code


@pytest.fixture(scope="module")
def oom_sweep(tmp_path_factory):
    """model=oom_above,mlp × batch=16,64: the OOM job (oom_above, 64) comes second, jobs follow it.
    Through the CLI's entry point in this process (exit status, stdout, the store it writes)."""
    cwd = tmp_path_factory.mktemp("oom_sweep")
    return cwd, cli_in_process(SWEEPS["oom_sweep"], cwd)


def test_sweep_finishes_with_exit_0_despite_oom(oom_sweep):
    cwd, proc = oom_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_one_parent_run_with_every_job_nested(oom_sweep):
    cwd, _ = oom_sweep
    all_runs = runs(cwd)
    parents = [r for r in all_runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in all_runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["sweeps.kind"] == "sweep"
    assert len(children) == 4
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert parents[0].data.tags["sweeps.outcomes.ok"] == "3" and parents[0].data.tags["sweeps.outcomes.oom"] == "1"


def test_outcomes_and_job_names(oom_sweep):
    cwd, _ = oom_sweep
    children = [r for r in runs(cwd) if "mlflow.parentRunId" in r.data.tags]
    by_name = {c.data.tags["sweeps.overrides"]: c for c in children}
    # the overrides tag shows only the swept keys, in the order given; the run name reads them
    assert set(by_name) == {"model=oom_above batch=16", "model=oom_above batch=64", "model=mlp batch=16",
                            "model=mlp batch=64"}
    sweep_id = children[0].data.tags["mlflow.parentRunId"][:6]
    assert by_name["model=mlp batch=64"].info.run_name == f"mlp b64 cpu #{sweep_id}"
    oom = by_name["model=oom_above batch=64"]
    assert oom.data.tags["outcome"] == "oom"
    assert "out of memory" in oom.data.tags["error"].lower() and "\n" not in oom.data.tags["error"]
    assert oom.info.status == "FAILED"  # the run list shows it did not train
    for name in set(by_name) - {"model=oom_above batch=64"}:
        assert by_name[name].data.tags["outcome"] == "ok" and by_name[name].info.status == "FINISHED"
    # the jobs after the OOM ran in full
    order = [c.data.tags["sweeps.overrides"] for c in children]
    assert order.index("model=oom_above batch=64") < order.index("model=mlp batch=64")


def test_contract_metrics_params_tags_artifacts(oom_sweep):
    cwd, _ = oom_sweep
    client = store(cwd)
    job = next(r for r in runs(cwd) if r.data.tags.get("sweeps.overrides") == "model=mlp batch=64")
    assert SUMMARY_METRICS <= set(job.data.metrics)
    assert job.data.metrics["batch"] == 64
    assert job.data.metrics["lr"] == pytest.approx(0.1 * 64 / 128)  # linear scaling from 0.1 @ 128
    for key in EPOCH_METRICS:
        history = client.get_metric_history(job.info.run_id, key)
        assert sorted(m.step for m in history) == [1, 2], key  # once per epoch, steps from 1
    # Σ phases next to the epoch time: the phases account for the epoch
    for epoch_s, phases_s in zip(*(sorted((m.step, m.value) for m in client.get_metric_history(job.info.run_id, k))
                                   for k in ("time/epoch_s", "phase/sum_s"))):
        assert phases_s[1] <= epoch_s[1] * 1.001
        assert phases_s[1] >= 0.5 * epoch_s[1]
    params = job.data.params
    assert params["batch"] == "64" and params["model"] == "mlp" and params["dataset.name"] == "synthetic"
    assert params["optimizer.momentum"] == "0.9" and params["lr_scaling.rule"] == "linear"
    for tag in ("env.host", "env.cpu", "env.cores", "env.ram_gb", "env.gpus", "env.driver", "env.cuda",
                "env.torch", "env.torchvision", "env.git_commit"):
        assert job.data.tags.get(tag), tag
    assert job.data.tags["env.torch"] == torch.__version__
    artifacts = {a.path for a in client.list_artifacts(job.info.run_id)}
    assert {"config.yaml", "epochs.csv"} <= artifacts
    local = client.download_artifacts(job.info.run_id, "epochs.csv", str(cwd))
    with open(local) as f:
        table = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in table] == [1, 2]


def test_console_shows_epoch_table_and_summary(oom_sweep):
    _, proc = oom_sweep
    out = proc.stdout + proc.stderr
    assert "train loss" in out and "test acc" in out and "elapsed s" in out
    summary = out[out.rindex("first epoch s"):]
    assert "model=oom_above batch=64" in summary and "OOM" in summary
    assert "4 job(s): 3 ok, 1 oom" in summary


def test_error_job_is_logged_failed_and_sweep_goes_on(tmp_path):
    proc = cli_in_process(ERROR_SWEEP, tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    children = {r.data.tags["sweeps.overrides"]: r for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags}
    broken, mlp = children["model=broken"], children["model=mlp"]
    assert broken.info.status == "FAILED" and broken.data.tags["outcome"] == "error"
    assert broken.data.tags["error"] == "ValueError: broken on purpose"
    assert mlp.info.status == "FINISHED" and mlp.data.tags["outcome"] == "ok"
    parent = next(r for r in runs(tmp_path) if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "FINISHED" and parent.data.tags["sweeps.outcomes.error"] == "1"


def test_single_run_is_a_plain_run_and_cpu_allocator_oom_is_caught(tmp_path, tiny, in_process):
    assert in_process(["model=oom_above", "model.kind=cpu", "batch=64", *tiny]) == "oom"  # exit 0
    (run,) = runs(tmp_path)
    assert "mlflow.parentRunId" not in run.data.tags
    assert run.data.tags["outcome"] == "oom"
    assert "can't allocate memory" in run.data.tags["error"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_without_gpu_is_unavailable(tmp_path, tiny, in_process):
    assert in_process(["model=mlp", "batch=32", *tiny, "device=cuda"]) == "unavailable"  # exit 0
    (run,) = runs(tmp_path)
    assert run.data.tags["outcome"] == "unavailable"
    assert "device=cuda" in run.data.tags["error"]
    assert not list((tmp_path / "checkpoints").glob("*/*")), "its run folder is left: a rerun adds another"


def test_a_store_failing_while_the_sweep_opens_stops_it_in_one_line(tmp_path, monkeypatch):
    """The store answers the checks, then refuses the parent run: Hydra would turn the callback's
    exception into a warning and run every job without a parent; the sweep stops instead."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from conftest import cli_in_process

    def refuse(self, *args, **kwargs):
        raise MlflowException("database is locked\n(after 5 retries)")
    monkeypatch.setattr(MlflowClient, "create_run", refuse)
    proc = cli_in_process(["-m", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32",
                           "dataset.test_size=8", "epochs=1", "device=cpu", "batch=8,16"], tmp_path)
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("sweeps: error:")]
    assert "parent run" in line and "database is locked (after 5 retries)" in line
    assert "Launching" not in proc.stdout + proc.stderr  # no job ran


@pytest.mark.slow  # a sweep whose store fails at its end: ~3 s
def test_a_store_failing_while_the_sweep_closes_is_one_line_and_exit_1(tmp_path, monkeypatch):
    from conftest import cli_in_process
    from sweeps.sweep import callback as sweep

    def broken(*args, **kwargs):
        raise OSError("disk I/O error")
    monkeypatch.setattr(sweep, "describe_sweep", broken)
    proc = cli_in_process(["-m", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32",
                           "dataset.test_size=8", "epochs=1", "device=cpu", "batch=8,16"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "summary could not be written" in proc.stdout + proc.stderr and "disk I/O error" in proc.stdout + proc.stderr
    jobs = [r for r in runs(tmp_path) if r.data.tags.get("sweeps.kind") != "sweep"]
    assert len(jobs) == 2 and {r.data.tags["outcome"] for r in jobs} == {"ok"}  # the jobs' runs stand


@pytest.mark.slow  # a 4-job in-process sweep: ~4-5 s
def test_a_sweeps_jobs_share_one_composition_and_each_runs_its_own_config(tmp_path, monkeypatch):
    """Hydra would compose a basic sweep's jobs in the whole-sweep check, again in its sweeper's
    validate_batch_is_legal and again in the launcher; the later two take the check's config, and
    jobs that differ only in values are derived from one composition of what they share
    (sweeps.sweep.compose): 4 jobs, 2 compositions (the first job, checked against
    the shared one) — and each job still runs its own values."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    composed = []
    real = ConfigLoaderImpl.load_sweep_config

    def counting(self, master_config, sweep_overrides):
        composed.append(tuple(sweep_overrides))
        return real(self, master_config, sweep_overrides)
    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counting)
    proc = cli_in_process(["-m", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32",
                           "dataset.test_size=8", "epochs=1", "device=cpu", "batch=8,16", "seed=3,4"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fixed = ("model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32", "dataset.test_size=8",
             "epochs=1", "device=cpu")
    assert composed == [(*fixed, "batch=8", "seed=3"), ("model=mlp", "dataset=synthetic", "device=cpu")], composed
    jobs = [r for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags]
    assert sorted((r.data.params["batch"], r.data.params["seed"]) for r in jobs) == [
        ("16", "3"), ("16", "4"), ("8", "3"), ("8", "4")]
    assert {r.data.tags["outcome"] for r in jobs} == {"ok"}


def test_the_import_ahead_thread_drops_a_failed_import_without_a_traceback(capfd):
    """The sweep imports the job's code in a thread while it opens the store; a Ctrl-C storm can
    break that import half-way (chaos seed 2913 fault 42: ``operator prims::pow does not exist``).
    The thread drops it without a word: a sweep stopped by Ctrl-C prints one line, not a traceback,
    and a real failure raises again in the first job."""
    import threading

    from sweeps.sweep import callback as sweep

    thread = threading.Thread(target=sweep._import_quietly, args=("sweeps_no_such_module_here",))
    thread.start()
    thread.join()
    assert "Traceback" not in capfd.readouterr().err


def test_each_jobs_values_are_checked_once_in_a_sweep_and_once_in_a_single_run(tmp_path, monkeypatch):
    """One validation per job: the sweep checks every job's values before the first starts, and
    the job does not check them again; a single run checks its own once."""
    from sweeps import config
    from sweeps.config import checks
    from sweeps.sweep import check

    checked = []
    real = checks.validate

    def counting(cfg):
        checked.append(int(cfg.batch))
        return real(cfg)
    for module in (config, checks, check):
        monkeypatch.setattr(module, "validate", counting)
    tiny = ["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32",
            "dataset.test_size=8", "epochs=1", "device=cpu"]
    proc = cli_in_process(["-m", *tiny, "batch=8,16,32"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert checked == [8, 16, 32], checked
    assert {r.data.tags["outcome"] for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags} == {"ok"}

    checked.clear()
    single = cli_in_process([*tiny, "batch=8"], tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    assert checked == [8]
