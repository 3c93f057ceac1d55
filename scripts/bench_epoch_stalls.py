#!/usr/bin/env python
"""Epochs held up by sweeps' own logging: study 5's job (``+experiment=tabular_cpu_vs_gpu
device=cpu dataset.train_size=1000``, ~1-ms full-batch epochs, the preset's defaults) run as users
run it — one job (``python -m sweeps ...``), a sweep of it (``python -m sweeps -m ...``, Hydra's
basic launcher: the job runs in the sweep's process) and a pool's (``-m hydra/launcher=gpu_pool
hydra.launcher.n_jobs=2``: the job runs in a joblib worker, with its share of the cores) — on a quiet machine and beside N busy loops
(``while True: pass``, nice 0, the core count by default). Per run, from the run's ``epochs.csv``
(every epoch, epoch 1 left out: warm-up): the median, 99th percentile and largest epoch time (ms)
and how many epochs took over 10 ms. Prints median [min, max] over ``--repeats``; asserts nothing.

    python scripts/bench_epoch_stalls.py [--repeats 3] [--epochs 5000] [--hogs N] [--only one,sweep,pool]

Why: MLflow's ingestion holds the GIL; a sending thread at the lowest priority that a busy machine
starves while it holds the GIL holds the training's next epoch up until it runs again (seconds), and
a batch answered at normal priority beside the training takes a core from it for a time slice
(~100 ms). docs/benchmarks.md, "A job beside busy programs", has the figures.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_job_overhead import last_run, study5_args, sweeps_job  # beside this script: sys.path[0] when run as a script
from sweeps.provenance.machine import fingerprint

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars between the rows (its own downloads)


MODES = {"one": ("one job", []), "sweep": ("sweep (-m)", ["-m"]),
         "pool": ("pool (-m)", ["-m", "hydra/launcher=gpu_pool", "hydra.launcher.n_jobs=2"])}  # in a worker


def one_run(mode: list[str], hogs: int, epochs: int) -> dict[str, float]:
    """The job's epoch figures (ms) and its process's wall (s), beside ``hogs`` busy loops;
    ``mode``: the command's arguments before the job's (:data:`MODES`)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wall, client = sweeps_job([*mode, *study5_args(), f"epochs={epochs}"], Path(tmp))
            run = last_run(client, "tabular_cpu_vs_gpu")  # the job: a sweep's parent run starts before it
            folder = Path(client.download_artifacts(run.info.run_id, "", str(Path(tmp) / "artifacts")))
            rows = list(csv.DictReader(io.StringIO(next(folder.rglob("epochs.csv")).read_text())))
    finally:
        for loop in loops:
            loop.kill()
    ms = sorted(1e3 * float(r["time/epoch_s"]) for r in rows[1:])
    return {"median": statistics.median(ms), "p99": ms[int(0.99 * len(ms))], "max": ms[-1],
            "over 10 ms": sum(m > 10 for m in ms), "wall s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5000)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", default="one,sweep,pool", help="which of " + ",".join(MODES))
    a = ap.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {fingerprint()['cpu']['model']} ({os.cpu_count()} cores); "
          f"{a.epochs} epochs, median [min, max] of {a.repeats}")
    for hogs in (0, a.hogs):
        modes = [MODES[m] for m in a.only.split(",")]
        runs: dict[str, list[dict]] = {label: [] for label, _ in modes}
        for _ in range(a.repeats):  # alternated: the machine's speed drifts
            for label, mode in modes:
                runs[label].append(one_run(mode, hogs, a.epochs))
        for label, figures in runs.items():
            cells = "; ".join(f"{k} {statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]"
                              for k in figures[0] for v in [[f[k] for f in figures]])
            print(f"{'quiet' if not hogs else f'{hogs} busy loops':13} {label:10} epoch ms: {cells}", flush=True)


if __name__ == "__main__":
    main()
