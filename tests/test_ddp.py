"""device=ddp on the CPU (Gloo, 2 processes) through the real CLI against a real sqlite store.

The NCCL path (one process per GPU) cannot run here (no GPU); its machine checks are unit-tested.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from omegaconf import OmegaConf

from conftest import TEST_CONF, run_cli, runs
from sweeps.launch import ddp
from sweeps.errors import DeviceUnavailable

# one epoch of 256 examples at global batch 64 (4 steps); MLP without BatchNorm, fixed seed
SAME = ["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256",
        "dataset.test_size=64", "epochs=1", "batch=64", "schedule=constant", "telemetry.interval_s=0",
        "checkpoint.every_epochs=0"]
# The one-process run and the 2 ranks see the same examples per step (DistributedSampler's
# epoch-0 permutation is the single loader's) and the same mean gradient; only the order of
# float additions differs (gradient all-reduce, per-rank loss sums): 1e-4 relative is ample.
LOSS_RTOL = 1e-4


def test_ddp_matches_one_process_and_logs_one_run(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    with ThreadPoolExecutor(2) as pool:  # both at once: the machine waits on process start-up mostly
        procs = [pool.submit(run_cli, [*SAME, "device=cpu"], one),
                 pool.submit(run_cli, [*SAME, "device=ddp", "device.gpus=2", "device.backend=gloo"], two, 300)]
    for proc in (p.result() for p in procs):
        assert proc.returncode == 0, proc.stderr[-3000:]
    (single,), ranked = runs(one), runs(two)
    assert len(ranked) == 1  # only rank 0 reports: one run
    m = ranked[0].data.metrics
    assert ranked[0].data.tags["outcome"] == "ok"
    assert m["device.world_size"] == 2
    for key in ("train/loss", "test/loss"):
        assert m[key] == pytest.approx(single.data.metrics[key], rel=LOSS_RTOL), key
    for phase in ("forward", "backward", "optimizer", "data"):  # mean over ranks and the slowest rank
        assert 0 <= m[f"phase/{phase}_ms"] <= m[f"phase/{phase}_max_ms"]
    assert m["perf/samples_per_s"] > 0 and m["batch_size"] == 64


def test_oom_on_one_rank_ends_the_job_oom_without_hanging(tmp_path):
    t0 = time.monotonic()
    proc = run_cli(["model=oom_on_rank", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=128",
                    "dataset.test_size=32", "epochs=2", "batch=32", "device=ddp", "device.gpus=2",
                    "device.backend=gloo", "device.timeout_s=60", "telemetry.interval_s=0", TEST_CONF],
                   tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.monotonic() - t0 < 120  # agreed at once, not by the 60 s collective timeout
    (run,) = runs(tmp_path)
    assert run.data.tags["outcome"] == "oom"
    assert "rank 1" in run.data.tags["error"]


def test_batch_that_does_not_divide_is_one_clear_line(tmp_path):
    proc = run_cli(["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "batch=33", "device=ddp",
                    "device.gpus=2"], tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("sweeps: error: batch=33") and "device.gpus=2" in lines[-1]
    assert "Traceback" not in proc.stderr


def test_more_processes_than_gpus_is_unavailable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = OmegaConf.create({"name": "ddp", "gpus": 2, "backend": "auto", "timeout_s": 10})
    with pytest.raises(DeviceUnavailable, match="device.gpus=2 processes but this machine has 1"):
        ddp.resolve(cfg)
    cfg.backend = "gloo"  # the CPU takes any number of processes
    assert ddp.resolve(cfg) == torch.device("cpu")


def test_reduce_records_mean_max_and_throughput():
    recs = [{"phase/forward_ms": 2.0, "train/loss": 1.0, "samples": 32, "time/epoch_s": 1.0, "test/loss": 3.0},
            {"phase/forward_ms": 4.0, "train/loss": 2.0, "samples": 32, "time/epoch_s": 2.0, "test/loss": 3.0}]
    out = ddp.reduce_records(recs)
    assert out["phase/forward_ms"] == 3.0 and out["phase/forward_max_ms"] == 4.0
    assert out["train/loss"] == 1.5 and out["samples"] == 64 and out["time/epoch_s"] == 2.0
    assert out["perf/samples_per_s"] == 32.0 and out["test/loss"] == 3.0


def test_report_scaling_efficiency():
    from sweeps.report.tables import scaling_efficiency
    from sweeps.report.runs import Job

    def job(device, gpus, sps):
        swept = {"model": "mlp", "device": device, **({"device.gpus": gpus} if gpus else {})}
        metrics = {"perf/samples_per_s": sps, **({"device.world_size": gpus} if gpus else {})}
        return Job("id", "n", "ok", "", swept, {}, metrics)

    table = scaling_efficiency([job("cpu", None, 100.0), job("ddp", 2, 150.0), job("ddp", 4, 200.0)])
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    assert [(r[1].strip(), r[-1].strip()) for r in rows] == [("2", "0.75"), ("4", "0.50")]
    assert scaling_efficiency([job("cpu", None, 100.0)]) is None
