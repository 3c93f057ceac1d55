"""Benchmark: export a sweep of R runs × E epochs to a bundle, and import it into a new store.

    python scripts/bench_bundle.py                       # 100 runs × 1,000 epochs, MLflow series as a job logs it
    python scripts/bench_bundle.py --every-epoch         # every epoch of every metric stored (mlflow.series_points=null)
    python scripts/bench_bundle.py --runs 10 --epochs 250,500,1000 --every-epoch   # how the cost grows with epochs
    python scripts/bench_bundle.py --workers 1           # the import in one process

The source store is built the way a sweep leaves it: a parent run (``sweeps.kind=sweep``) and R
child runs, each with the 16 per-epoch metrics a tiny CPU job logs, on the series a job of E epochs
stores (``mlflow.series_points: 320``: every 5th epoch at E = 1,000, plus the first and last;
``--every-epoch``: all E), 20 step-0 summaries, ~70 params, ~40 tags and its three artifacts
(config.yaml, epochs.csv with E rows, fingerprint.json). Then, ``--repeats`` times each: export
(`sweeps.bundle.export_bundle`) and import into a fresh sqlite store
(`sweeps.bundle.import_bundle`), timed with a monotonic clock. Prints, per epoch count, the median
[min, max] seconds of each, and µs per metric value (flat when cost grows linearly in epochs).
The source store is kept under ``--work`` (built once per shape) for reruns.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

EPOCH_KEYS = ("train/loss", "train/lr", "test/loss", "test/rmse", "time/epoch_s", "time/eval_s", "time/elapsed_s",
              "phase/sum_s", "phase/data_ms", "phase/forward_ms", "phase/backward_ms", "phase/optimizer_ms",
              "perf/samples_per_s", "perf/flops_per_s", "mem/epoch_peak_mb", "system/host/other_cpu_pct")
SUMMARY_KEYS = tuple(f"summary/value_{i}" for i in range(20))


def build(db: Path, runs: int, epochs: int, every_epoch: bool) -> int:
    """A source store at ``db`` holding one sweep as described in the module docstring; returns
    the metric values it holds."""
    from mlflow.entities import Metric, Param, RunTag

    from sweeps import names
    from sweeps.tracking.follower import series
    from sweeps.tracking.store.store import open_store

    client, exp = open_store(f"sqlite:///{db}", "bench")
    stride = 1 if every_epoch else series.stride(1, 320, epochs)
    steps = [e for e in range(1, epochs + 1) if series.in_series({"epoch": e}, stride, False) or e == epochs]
    env = {names.ENV_HOST: "bench-host", names.HARDWARE_TAG: "bench-host / bench CPU", names.ENV_TORCH: "2.x",
           names.ENV_CUDA: "none", names.ENV_CPU: "bench CPU"}
    parent = client.create_run(exp, run_name="sweep", tags={names.KIND_TAG: "sweep", **env}).info.run_id
    t0, total = 1_700_000_000_000, 0
    with tempfile.TemporaryDirectory() as tmp:
        art = Path(tmp)
        (art / "config.yaml").write_text("model: mlp\n" * 60)
        (art / "fingerprint.json").write_text(json.dumps({"host": "bench-host", "cpu": {"model": "bench CPU"}}))
        (art / "epochs.csv").write_text("epoch,loss\n" + "".join(f"{e},{1 / e:.6f}\n" for e in range(1, epochs + 1)))
        for r in range(runs):
            rid = client.create_run(exp, run_name=f"job {r}", tags={names.PARENT_RUN_TAG: parent, **env,
                                                                    **{f"tag.{i}": "x" * 20 for i in range(35)}}).info.run_id
            client.log_batch(rid, params=[Param(f"param.{i}", str(i)) for i in range(70)])
            values = [Metric(k, 1.0 / s + i, t0 + s * 1000, s) for s in steps for i, k in enumerate(EPOCH_KEYS)]
            values += [Metric(k, float(i), t0, 0) for i, k in enumerate(SUMMARY_KEYS)]
            for i in range(0, len(values), 1000):
                client.log_batch(rid, metrics=values[i:i + 1000])
            client.log_artifacts(rid, tmp)
            client.set_terminated(rid, "FINISHED")
            total += len(values)
    client.set_terminated(parent, "FINISHED")
    return total


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} s [{min(xs):.1f}, {max(xs):.1f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--epochs", default="1000", help="comma-separated epoch counts (default 1000)")
    ap.add_argument("--every-epoch", action="store_true", help="store every epoch (default: a job's series)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None,
                    help="import worker processes (default: import_bundle's own choice: 2 from 100,000 values)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sweeps-bench-bundle")
    args = ap.parse_args(argv)
    from sweeps.bundle import export_bundle, import_bundle

    for epochs in (int(e) for e in args.epochs.split(",")):
        shape = f"{args.runs}x{epochs}{'-every' if args.every_epoch else ''}"
        src = args.work / shape
        db = src / "mlflow.db"
        marker = src / "values.txt"
        if not marker.is_file():
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir(parents=True)
            t = time.monotonic()
            marker.write_text(str(build(db, args.runs, epochs, args.every_epoch)))
            print(f"built {shape}: {marker.read_text()} values in {time.monotonic() - t:.0f} s", file=sys.stderr)
        values = int(marker.read_text())
        exports, imports = [], []
        for i in range(args.repeats):
            bundle = args.work / f"{shape}.zip"
            done = export_bundle("bench", bundle, tracking_uri=f"sqlite:///{db}")
            exports.append(done.seconds)
            target = args.work / f"target-{shape}-{i}"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            got = import_bundle(bundle, tracking_uri=f"sqlite:///{target / 'mlflow.db'}", workers=args.workers)
            imports.append(got.seconds)
            assert got.values == values, (got.values, values)
            shutil.rmtree(target, ignore_errors=True)
        size = (args.work / f"{shape}.zip").stat().st_size / 1e6
        print(f"{args.runs} runs x {epochs} epochs ({values:,} values, bundle {size:.1f} MB): "
              f"export {spread(exports)} ({statistics.median(exports) / values * 1e6:.0f} us/value), "
              f"import {spread(imports)} ({statistics.median(imports) / values * 1e6:.0f} us/value), "
              f"{args.repeats} repeats", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
