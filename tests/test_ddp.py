"""device=ddp on the CPU (Gloo, 2 processes) against a real sqlite store: every rank runs the one
training path (sweeps.train.builder.build_training via TrainTask.run), rank 0 logs each epoch as it ends,
a failure on any rank ends the job at once with the right outcome.

Jobs run in-process (Hydra's compose API, then sweeps.job.lifecycle.run, as ``python -m sweeps``
would); the ranks are real processes started by torch's launcher. The NCCL path (one process
per GPU) cannot run here (no GPU); its machine checks are unit-tested.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ddp_helpers
import helpers
import sweeps.config
from conftest import TEST_CONF, TESTS, run_cli, runs, store
from sweeps import launchers
from sweeps.data.device_loader import DeviceBatches, resident
from sweeps.data.loaders import TensorBatches
from sweeps.errors import DeviceUnavailable
from sweeps.job import ddp
from sweeps.placement import device
from sweeps.job.lifecycle import run as run_job
from sweeps.train import distributed
from sweeps.train.builder import COMPILE_BACKEND_ENV

# 256 examples at global batch 64: 4 steps per epoch, each rank 32 examples of each step; MLP
# without BatchNorm; fixed seed
SAME = ["model=mlp", "model.hidden=[16]", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256",
        "dataset.test_size=64", "epochs=2", "batch=64", "schedule=constant", "telemetry.interval_s=0",
        "checkpoint.every_epochs=0"]
DDP = ["device=ddp", "device.gpus=2", "device.backend=gloo", "device.timeout_s=120"]
# The one-process run and the 2 ranks see the same examples per step (the ranks slice the
# permutation one process draws) and the same mean gradient; only the order of float additions
# differs (gradient all-reduce, per-rank loss sums): 1e-4 relative is ample.
LOSS_RTOL = 1e-4
# a failed rank ends the job in seconds, not by device.timeout_s (120 s): timed from the moment the
# rank raised (helpers.note_failure_time), since rank start-up is as slow as the machine is busy
FAIL_WITHIN_S = 30


def _ended_after_failure(monkeypatch, tmp_path: Path) -> Callable[[], float]:
    """Ask the failing test model to note when it raised; the returned function gives the seconds
    from then to now (AssertionError when it never raised)."""
    at = tmp_path / "failed_at"
    monkeypatch.setenv(helpers.FAILED_AT, str(at))

    def since() -> float:
        assert at.exists(), "the test model never raised"
        return time.monotonic() - float(at.read_text())
    return since


def _job(cwd: Path, overrides: list[str], monkeypatch) -> tuple[str, object]:
    """Run one job in-process in ``cwd`` (its ./mlruns, ./checkpoints); (outcome, its MLflow run)."""
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)
    for key in [k for k in os.environ if k.startswith(("MLFLOW_", "SWEEPS_")) and k != COMPILE_BACKEND_ENV]:
        monkeypatch.delenv(key)
    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        cfg = compose("config", overrides=[*overrides, f"hydra.searchpath=[file://{TESTS / 'conf'}]"])
    sweeps.config.validate(sweeps.config.complete(cfg))  # as python -m sweeps checks its job's values
    outcome = run_job(cfg, launchers.current())
    (run,) = runs(cwd)
    return outcome, run


def _history(cwd: Path, run, key: str) -> dict[int, float]:
    return {m.step: m.value for m in store(cwd).get_metric_history(run.info.run_id, key)}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: SAME on one CPU process; (cwd, run)."""
    mp = pytest.MonkeyPatch()
    try:
        cwd = tmp_path_factory.mktemp("one")
        outcome, run = _job(cwd, [*SAME, "device=cpu"], mp)
    finally:
        mp.undo()
    assert outcome == "ok"
    return cwd, run


class _Watcher(threading.Thread):
    """Reads the store and the journal while the job runs: once epoch 1's ``train/loss`` is in
    the run, note what is there, then let the paused rank go on (``release``)."""

    def __init__(self, cwd: Path, release: Path):
        super().__init__(daemon=True)
        self.cwd, self.release, self.seen, self.ranks = cwd, release, {}, []

    def run(self) -> None:
        deadline, client = time.monotonic() + 90, None
        while time.monotonic() < deadline and not self.seen:
            time.sleep(0.2)
            try:
                client = client or store(self.cwd)  # under the lock a job creates the DB with
                (run,) = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id])
                steps = {m.step for m in client.get_metric_history(run.info.run_id, "train/loss")}
            except Exception:  # the store or the run is not there yet
                continue
            if 1 in steps:
                journal = [json.loads(line) for p in (self.cwd / "checkpoints").glob("*/*/epochs.jsonl")
                           for line in p.read_text().splitlines()]
                self.seen = {"status": client.get_run(run.info.run_id).info.status, "steps": steps,
                             "journal_epochs": [r["epoch"] for r in journal]}
        # Slurm's time-limit warning reaches every process of a job step: the ranks go on
        self.ranks = _ranks()
        for pid in self.ranks:
            os.kill(pid, signal.SIGUSR2)
        self.release.touch()


def _ranks() -> list[int]:
    """Process ids of this process's children that torch's launcher spawned (the ranks)."""
    pids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    ranks = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    ranks.append(pid)
        except FileNotFoundError:
            pass
    return ranks


@pytest.mark.slow  # ~12 s: two rank processes start, and a one-process reference runs
def test_ddp_logs_each_epoch_as_it_ends_and_matches_one_process(tmp_path, monkeypatch, one_process):
    ref_cwd, single = one_process
    cwd = tmp_path / "two"
    release = tmp_path / "release"
    monkeypatch.setenv(ddp_helpers.PAUSE_FILE, str(release))
    monkeypatch.setenv(ddp_helpers.PAUSE_AT, "5")  # rank 0's 5th training step: the first of epoch 2
    watcher = _Watcher(cwd, release)
    watcher.start()
    outcome, run = _job(cwd, [*SAME, *DDP, "model._target_=ddp_helpers.PauseOnRank0"], monkeypatch)
    watcher.join(timeout=5)
    assert outcome == "ok" and run.data.tags["outcome"] == "ok"
    # while rank 0 was held in epoch 2, epoch 1 was already in the run and in the journal
    assert watcher.seen == {"status": "RUNNING", "steps": {1}, "journal_epochs": [1]}
    if os.path.exists("/proc/self/task"):  # Linux: the ranks found through /proc
        assert len(watcher.ranks) == 2  # each sent SIGUSR2 while rank 0 was held, and the job still ended ok
    m = run.data.metrics
    assert m["device.world_size"] == 2
    for key in ("train/loss", "test/loss"):  # both epochs: the ranks share every epoch's permutation
        ddp_curve, one_curve = _history(cwd, run, key), _history(ref_cwd, single, key)
        assert sorted(ddp_curve) == [1, 2]
        for epoch, value in one_curve.items():
            assert ddp_curve[epoch] == pytest.approx(value, rel=LOSS_RTOL), (key, epoch)
    for phase in ("forward", "backward", "optimizer", "data"):  # mean over ranks and the slowest rank
        assert 0 <= m[f"phase/{phase}_ms"] <= m[f"phase/{phase}_max_ms"]
    assert m["perf/samples_per_s"] > 0 and m["batch"] == 64
    # the job process read rank 0's records back: summaries and epochs.csv as on one device
    assert m["time/median_epoch_s"] > 0 and m["time/first_epoch_s"] > 0
    csv = store(cwd).download_artifacts(run.info.run_id, "epochs.csv", str(tmp_path))
    assert len(Path(csv).read_text().strip().splitlines()) == 3  # header + 2 epochs


@pytest.mark.slow  # ~8 s each of rank start-up; the default run keeps the DDP epoch test and the unit tests
@pytest.mark.parametrize("kind", ["oom", "error"])
def test_failure_in_backward_on_rank_1_ends_the_job_at_once(tmp_path, monkeypatch, kind):
    """Rank 1 raises inside backward while rank 0 waits for its gradients in the all-reduce."""
    monkeypatch.setenv(ddp_helpers.FAIL, kind)
    since_failure = _ended_after_failure(monkeypatch, tmp_path)
    outcome, run = _job(tmp_path / "job", [*SAME, *DDP, "model._target_=ddp_helpers.FailInBackward"], monkeypatch)
    assert since_failure() < FAIL_WITHIN_S
    assert outcome == kind and run.data.tags["outcome"] == kind
    assert "rank 1" in run.data.tags["error"] and "\n" not in run.data.tags["error"]
    assert run.info.status == "FAILED"  # oom and error alike: the job did not get through its work
    if kind == "error":  # the failing rank's own error, not the peer's broken collective
        assert run.data.tags["error"] == "RuntimeError: RuntimeError on rank 1: broken backward on purpose (test model)"


@pytest.mark.slow
def test_oom_in_forward_on_one_rank_ends_the_job_oom_without_hanging(tmp_path, monkeypatch):
    since_failure = _ended_after_failure(monkeypatch, tmp_path)
    outcome, run = _job(tmp_path / "job", ["model=oom_on_rank", "dataset=synthetic", "dataset.shape=[1,8,8]",
                                   "dataset.train_size=128", "dataset.test_size=32", "epochs=2", "batch=32", *DDP,
                                   "telemetry.interval_s=0"], monkeypatch)
    assert since_failure() < FAIL_WITHIN_S
    assert outcome == "oom" and run.data.tags["outcome"] == "oom"
    assert "rank 1" in run.data.tags["error"]


@pytest.mark.slow  # ~8 s of rank start-up; the default run keeps the other DDP paths
def test_compile_applies_under_ddp(tmp_path, monkeypatch, one_process):
    """compile=true compiles every rank's DDP model before the first epoch (aot_eager here: the
    same tracing as inductor without code generation) and leaves the training unchanged."""
    ref_cwd, single = one_process
    monkeypatch.setenv(COMPILE_BACKEND_ENV, "aot_eager")
    outcome, run = _job(tmp_path, [*SAME, *DDP, "compile=true"], monkeypatch)
    assert outcome == "ok"
    m = run.data.metrics
    assert m["time/compile_s"] > 0
    assert m["time/overhead_s"] + m["time/compile_s"] <= m["time/job_s"] + 1e-6  # rank 0's compile: not overhead
    for key in ("train/loss", "test/loss"):
        assert m[key] == pytest.approx(single.data.metrics[key], rel=LOSS_RTOL), key


@pytest.mark.slow  # ~8 s of rank start-up; the default run keeps the other DDP paths
def test_channels_last_and_device_loader_apply_under_ddp(tmp_path, monkeypatch):
    probe = tmp_path / "probe.json"
    monkeypatch.setenv(ddp_helpers.PROBE_FILE, str(probe))
    outcome, _ = _job(tmp_path / "job", [*SAME, "dataset.shape=[3,8,8]", *DDP, "model._target_=ddp_helpers.ConvProbe",
                                         "channels_last=true", "dataset.loader=device", "epochs=1"], monkeypatch)
    assert outcome == "ok"
    seen = json.loads(probe.read_text())  # what rank 0's model saw in its first training step
    assert seen == {"weight_channels_last": True, "input_channels_last": True, "loader": "ShardedBatches",
                    "inner_loader": "DeviceBatches", "batch": 32}


@pytest.mark.slow
def test_sigterm_flushes_rank_0_and_a_rerun_resumes_the_curve(tmp_path):
    """SIGTERM to the job process (``python -m sweeps``: the signal is the point): the agent
    stops the ranks, rank 0's epochs are all in the run, the run is KILLED; a rerun resumes it
    from rank 0's checkpoint and its loss curve is the uninterrupted job's."""
    args = ["model=slow", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256", "dataset.test_size=32",
            "batch=32", "epochs=6", "schedule=constant", "telemetry.interval_s=0", "checkpoint.every_epochs=1", *DDP,
            TEST_CONF]
    reference, cwd = tmp_path / "reference", tmp_path / "resumed"
    for d in (reference, cwd):
        d.mkdir()
    assert run_cli(args, reference, timeout=300).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    proc = subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=cwd, env={**env, "PYTHONPATH": str(TESTS)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((cwd / "checkpoints").glob("*/*/epoch_0002.pt")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-3000:]
    (killed,) = runs(cwd)
    assert killed.info.status == "KILLED" and killed.data.tags["outcome"] == "killed"
    journal = [json.loads(line)["epoch"] for p in (cwd / "checkpoints").glob("*/*/epochs.jsonl")
               for line in p.read_text().splitlines()]
    assert len(journal) >= 2 and sorted(_history(cwd, killed, "train/loss")) == journal  # flushed: nothing lost

    assert run_cli(args, cwd, timeout=300).returncode == 0
    (resumed,) = runs(cwd)
    (ref,) = runs(reference)
    assert resumed.info.run_id == killed.info.run_id and resumed.data.tags["job.resumed"] == "true"
    assert resumed.data.tags["outcome"] == "ok"
    curve, ref_curve = _history(cwd, resumed, "train/loss"), _history(reference, ref, "train/loss")
    assert sorted(curve) == list(range(1, 7))
    for epoch, value in ref_curve.items():
        assert curve[epoch] == pytest.approx(value, rel=LOSS_RTOL), epoch


def test_rank_0_of_a_resumed_run_logs_no_second_compile_time(tmp_path):
    """A resumed compile=true job under DDP compiles again on rank 0 and hands its compile time to
    ``log_summary``: the run keeps its first part's ``time/compile_s``, one point."""
    from sweeps.job.rank import RankJob, RankSpec
    from sweeps.tracking.store.store import open_client
    from sweeps.tracking.writer.run_writer import RunWriter
    from sweeps import names

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = open_client(uri)
    first = RunWriter(client, client.create_experiment("ddp"), "job", None, {})
    first.log_summary({names.COMPILE_S: 3.0})  # the first part's rank 0, before its job was killed
    first.close()
    sweeps.config.register()
    with initialize_config_dir(config_dir=str(sweeps.config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*SAME, *DDP, "compile=true"])
    spec = RankSpec(cfg=OmegaConf.to_container(cfg, resolve=True), backend="gloo", tracking_uri=uri,
                    run_id=first.run_id, run_dir=str(tmp_path / "run"), journal=str(tmp_path / "epochs.jsonl"),
                    resume=False, logged_through=0, work_dir=str(tmp_path), log_format="%(message)s", log_targets=[])
    rank0 = RankJob(spec, cfg, True, 0, torch.device("cpu"))  # the second part: killed before a checkpoint
    rank0.writer.log_summary({names.COMPILE_S: 2.5, names.WARMUP_S: 0.5})
    rank0.close()
    history = {k: [(m.step, m.value) for m in client.get_metric_history(first.run_id, k)]
               for k in (names.COMPILE_S, names.WARMUP_S)}
    assert history == {names.COMPILE_S: [(0, 3.0)], names.WARMUP_S: [(0, 0.5)]}
    assert client.get_run(first.run_id).info.status == "RUNNING"  # rank 0 never ends the run: its job process does


@pytest.mark.parametrize("make", [
    lambda data, seed: TensorBatches(data, 4, True, seed),
    lambda data, seed: DeviceBatches(resident(data), 4, torch.device("cpu"), shuffle=True, seed=seed)],
    ids=["host", "device"])
def test_ranks_together_take_one_process_steps(make):
    """Step k of the 2 ranks together is step k of one process at the global batch, every epoch;
    the last, short step (10 = 2·4 + 2) is split evenly (padded when it does not divide)."""
    for n in (10, 11):
        data = TensorDataset(torch.arange(n, dtype=torch.float32)[:, None], torch.arange(n))
        single, ranks = make(data, 3), [distributed.ShardedBatches(make(data, 3), r, 2) for r in (0, 1)]
        assert [len(r) for r in ranks] == [len(single)] * 2 and ranks[0].batch_size == 2
        for _ in range(2):  # epochs: the permutations stay shared
            for k, (one, *parts) in enumerate(zip(single, *ranks)):
                ys = torch.cat([y for _, y in parts])
                assert len(parts[0][1]) == len(parts[1][1])  # the same batch shape on every rank
                if k < len(single) - 1 or n == 10:
                    assert torch.equal(ys, one[1]), (n, k)
                else:  # 3 left over: 2 per rank, padded with the epoch's first example
                    assert set(one[1].tolist()) <= set(ys.tolist()) and len(ys) == 4


def test_ranks_together_take_the_shared_permutation_with_a_dataloader():
    """The DataLoader path (files): DistributedSampler's permutation of the epoch (seed + epoch),
    step k of the 2 ranks together = its positions 4k..4k+3; a resumed loader (set_epoch) goes on
    with the next epoch's permutation."""
    data = TensorDataset(torch.arange(12)[:, None])
    ranks = []
    for r in (0, 1):
        sampler = DistributedSampler(data, 2, r, shuffle=True, seed=5)
        ranks.append(distributed.EpochSampling(DataLoader(data, 2, sampler=sampler, generator=torch.Generator()),
                                               sampler, seed=r))
    assert ranks[0].batch_size == 2 and ranks[0].n == 6 and ranks[0].generator is None
    for epoch in range(2):
        perm = torch.randperm(12, generator=torch.Generator().manual_seed(5 + epoch))
        for k, parts in enumerate(zip(*ranks)):
            assert sorted(torch.cat([x for (x,) in parts]).flatten().tolist()) == sorted(perm[4 * k:4 * k + 4].tolist())
    ranks[0].set_epoch(1)  # resumed after epoch 1
    assert sorted(torch.cat([x for (x,) in ranks[0]]).flatten().tolist()) == sorted(
        torch.randperm(12, generator=torch.Generator().manual_seed(6))[0::2].tolist())


def test_the_earliest_failure_is_the_outcome(tmp_path):
    """The failing rank's report wins over the later reports of ranks whose collectives broke."""
    reports = [{"rank": 0, "kind": "error", "type": "RuntimeError", "text": "Connection reset by peer", "time": 2.0},
               {"rank": 1, "kind": "oom", "type": "OutOfMemoryError", "text": "CUDA out of memory", "time": 1.0}]
    for r in reports:
        (tmp_path / f"rank{r['rank']}.json").write_text(json.dumps(r))
    exc = ddp.first_failure(tmp_path, RuntimeError("child failed"))
    assert isinstance(exc, torch.OutOfMemoryError) and str(exc) == "CUDA out of memory (rank 1)"
    reports[1].update(kind="error", type="ValueError", text="bad value")
    (tmp_path / "rank1.json").write_text(json.dumps(reports[1]))
    assert str(ddp.first_failure(tmp_path, RuntimeError())) == "ValueError on rank 1: bad value"
    for path in tmp_path.glob("rank*.json"):  # a rank killed before it could say why
        path.unlink()
    assert "rank failed" in str(ddp.first_failure(tmp_path, RuntimeError("signal 9")))


def test_reduce_records_mean_max_and_throughput():
    recs = [{"phase/forward_ms": 2.0, "train/loss": 1.0, "samples": 32, "time/epoch_s": 1.0, "test/loss": 3.0},
            {"phase/forward_ms": 4.0, "train/loss": 2.0, "samples": 32, "time/epoch_s": 2.0, "test/loss": 3.0}]
    out = distributed.reduce_records(recs)
    assert out["phase/forward_ms"] == 3.0 and out["phase/forward_max_ms"] == 4.0
    assert out["train/loss"] == 1.5 and out["samples"] == 64 and out["time/epoch_s"] == 2.0
    assert out["perf/samples_per_s"] == 32.0 and out["test/loss"] == 3.0


def test_more_processes_than_gpus_is_unavailable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = OmegaConf.create({"name": "ddp", "gpus": 2, "backend": "auto", "timeout_s": 10})
    with pytest.raises(DeviceUnavailable, match="device.gpus=2 processes but this machine has 1"):
        device.resolve_ddp(cfg)
    cfg.backend = "gloo"  # the CPU takes any number of processes
    assert device.resolve_ddp(cfg) == torch.device("cpu")


def test_report_scaling_efficiency():
    from sweeps.report.tables import scaling_efficiency
    from sweeps.report.runs import JobRecord

    def job(device, gpus, sps):
        swept = {"model": "mlp", "device": device, **({"device.gpus": gpus} if gpus else {})}
        metrics = {"perf/samples_per_s": sps, **({"device.world_size": gpus} if gpus else {})}
        return JobRecord("id", "n", "ok", "", swept, {}, metrics)

    table = scaling_efficiency([job("cpu", None, 100.0), job("ddp", 2, 150.0), job("ddp", 4, 200.0)])
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    assert [(r[1].strip(), r[-1].strip()) for r in rows] == [("2", "0.75"), ("4", "0.50")]
    assert scaling_efficiency([job("cpu", None, 100.0)]) is None
