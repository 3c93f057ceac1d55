#!/usr/bin/env python
"""What a sweep costs beyond the training it runs. Prints its figures; asserts nothing.

    python scripts/bench_sweep_overhead.py [--jobs 10] [--warm-store] [-- extra overrides]

Runs a real multirun of ``--jobs`` tiny jobs (``seed=0..N-1``; MLP 64-16-10 on 256 synthetic
examples, 1 epoch, CPU, every other setting at its default — telemetry and its figure on) in a
fresh folder with its own sqlite MLflow store, the way a user runs one, and reads the store back
(``--warm-store``: a one-job run creates the store first, so its one-off schema migration —
seconds — is not in the measured sweep, as for every sweep after a folder's first):

- wall: the whole ``python -m sweeps -m ...`` process, start to exit;
- training: Σ ``time/total_s`` over the jobs (``Trainer.fit``: epochs and evaluation);
- per-job overhead = (wall − training) ÷ jobs — interpreter, imports, Hydra, MLflow runs,
  params, artifacts, telemetry, the summary, all included. Target: ≤ 1.5 s per job.
- its split: start-up (process start → the sweep's parent run opens), per job (its MLflow run's
  start → end, minus its training) and between jobs (one run's end → the next one's start:
  Hydra's job set-up, config composition, dataset construction), and the tail (the last job's end
  → process exit: summary, parent run closed, interpreter exit).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from mlflow import MlflowClient

from sweeps.provenance.machine import fingerprint

TINY = ["model=mlp", "model.hidden=[16]", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256",
        "dataset.test_size=64", "batch=64", "epochs=1", "device=cpu"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--warm-store", action="store_true", help="create the MLflow store before the measured sweep")
    ap.add_argument("extra", nargs="*", help="further overrides, e.g. telemetry.figure=false")
    args = ap.parse_args()
    fp = fingerprint()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {fp['cpu']['model']} ({fp['cpu']['cores']} logical cores), "
          f"{fp['ram_gb']:.1f} GB; Python {platform.python_version()}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "sweeps", "-m", f"seed=range(0,{args.jobs})", *TINY, *args.extra]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SWEEPS_"))}
        print("command:", " ".join(["python", *cmd[1:]]))
        if args.warm_store:
            subprocess.run([sys.executable, "-m", "sweeps", "seed=-1", *TINY], cwd=tmp, env=env, capture_output=True, check=True)
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        t1 = time.time()
        if proc.returncode != 0:
            sys.exit(f"the sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        client = MlflowClient(f"sqlite:///{Path(tmp) / 'mlruns' / 'mlflow.db'}")
        exp = client.get_experiment_by_name("sweeps")
        all_runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    parent = next(r for r in all_runs if r.data.tags.get("sweeps.kind") == "sweep")
    jobs = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(jobs) == args.jobs and all(j.data.tags["outcome"] == "ok" for j in jobs), "not every job ended ok"
    wall = t1 - t0
    training = sum(j.data.metrics["time/total_s"] for j in jobs)
    in_job = [(j.info.end_time - j.info.start_time) / 1e3 - j.data.metrics["time/total_s"] for j in jobs]
    between = [(b.info.start_time - a.info.end_time) / 1e3 for a, b in zip(jobs, jobs[1:])]
    startup = parent.info.start_time / 1e3 - t0
    first_gap = (jobs[0].info.start_time - parent.info.start_time) / 1e3
    tail = t1 - jobs[-1].info.end_time / 1e3
    n = len(jobs)
    print(f"\n{n} jobs: wall {wall:.2f} s, training Σ time/total_s {training:.2f} s")
    print(f"per-job overhead (wall − training) / jobs: {(wall - training) / n:.3f} s")
    print(f"  start-up (process start → parent run): {startup:.2f} s; parent run → first job's run: {first_gap:.2f} s")
    print(f"  in a job's run, besides training: median {statistics.median(in_job):.3f} s "
          f"[min {min(in_job):.3f}, max {max(in_job):.3f}]")
    print(f"  between jobs: median {statistics.median(between):.3f} s [min {min(between):.3f}, max {max(between):.3f}]")
    print(f"  tail (last job's end → exit): {tail:.2f} s")
    print(f"  per-job overhead without start-up and tail: {(wall - training - startup - tail) / n:.3f} s")


if __name__ == "__main__":
    main()
