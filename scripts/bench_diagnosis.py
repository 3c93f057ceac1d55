#!/usr/bin/env python
"""What the diagnosis window costs: the same job with the profiled window on (``diag.steps=20``,
the default) and off (``diag.steps=0``), as users run it (``python -m sweeps -m ...`` in a
subprocess, the two interleaved over ``--repeats``), read back from the MLflow store. Prints per
arm (after a warm-up repeat of each, not counted) the timed epochs' median (``time/median_epoch_s``, median [min, max] over the repeats) — which
the window, run after them, must leave within noise — and the job's wall time (``time/job_s``),
which carries the window's cost; plus the class each job was given. Asserts nothing.

    python scripts/bench_diagnosis.py [--repeats 3] [--job "model=mlp_tabular dataset=diabetes batch=32 epochs=20"]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile

DEFAULT_JOB = "model=mlp_tabular dataset=diabetes batch=32 epochs=20 device=cpu telemetry.interval_s=0"


def _spread(values: list[float], fmt: str = "{:.4f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--job", default=DEFAULT_JOB, help="the job's overrides (space-separated)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-diag-") as cwd:
        repeats = ",".join(str(r) for r in range(1, args.repeats + 1))
        # resume=false: the window changes no measured figure, so diag.steps is not part of a job's
        # identity, and the second arm would be skipped as done; repeat=0 is a warm-up, not counted
        cmd = [sys.executable, "-m", "sweeps", "-m", *args.job.split(), "diag.steps=20,0", f"repeat=0,{repeats}",
               "resume=false"]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
            return proc.returncode
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{cwd}/mlruns/mlflow.db")
        exp = client.get_experiment_by_name("sweeps")
        jobs = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"job: {args.job}; {args.repeats} repeats a arm, interleaved")
    for steps in ("20", "0"):
        arm = [r for r in jobs if r.data.params.get("diag.steps") == steps and r.data.params.get("repeat") != "0"]
        epochs = [r.data.metrics["time/median_epoch_s"] for r in arm]
        walls = [r.data.metrics["time/job_s"] for r in arm]
        classes = sorted({r.data.tags.get("diag.bottleneck", "-") for r in arm})
        print(f"diag.steps={steps:>2}: median epoch {_spread(epochs)} s, job wall {_spread(walls, '{:.2f}')} s, "
              f"class {', '.join(classes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
