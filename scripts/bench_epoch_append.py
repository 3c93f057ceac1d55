#!/usr/bin/env python
"""What an epoch's bookkeeping costs the training process, piece by piece (µs per epoch, median
[min, max] over ``--repeats`` of ``--epochs`` records each); asserts nothing.

    python scripts/bench_epoch_append.py [--repeats 5] [--epochs 3000]

- ``a job's append``: :meth:`EpochLog.append` as a job makes it, with a run (the line written and
  flushed; the follower ships it from the journal in another process, which is what
  ``bench_job_overhead.py`` shows on top);
- ``journal only``: the same without a run (a data-parallel rank other than 0);
- the other per-epoch pieces of :meth:`sweeps.train.loop.Trainer.fit`: the host-load window
  (:class:`sweeps.train.noise.HostLoad`, read at most every 0.1 s), the process RSS read for
  ``mem/epoch_peak_mb``, and the constant schedule's ``step()``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil
import torch

from sweeps.tracking.journal.journal import EpochLog
from sweeps.train.noise import HostLoad

RECORD = {"train/loss": 0.5, "train/lr": 0.01, "time/epoch_s": 0.0007, "time/eval_s": 0.0, "time/elapsed_s": 1.0,
          "phase/sum_s": 0.0007, "phase/data_ms": 0.01, "phase/forward_ms": 0.2, "phase/backward_ms": 0.3,
          "phase/optimizer_ms": 0.1, "perf/samples_per_s": 1.4e6, "mem/epoch_peak_mb": 500.0,
          "system/host/other_cpu_pct": 3.0, "samples": 1000, "steps": 1}


class _Run:
    """A RunWriter as an epoch's append meets it (its pending values were sent at the first)."""

    def send_pending(self) -> None:
        pass


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def per_epoch_us(fn, epochs: int) -> float:
    t0 = time.perf_counter()
    for e in range(1, epochs + 1):
        fn(e)
    return 1e6 * (time.perf_counter() - t0) / epochs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3000)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.repeats} repeats of {args.epochs} epochs; µs per epoch")
    results: dict[str, list[float]] = {}
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters())
    schedule = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    optimizer.step()  # in the order training steps them (no warning)
    process, host = psutil.Process(), HostLoad()
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            for name, run in (("a job's append (journal line)", True), ("journal only (no run)", False)):
                log = EpochLog(_Run() if run else None, Path(tmp) / name[:9] / "epochs.jsonl", regression=True,
                               log_every_s=3600)

                def step(e, log=log):
                    log.append({"epoch": e, **RECORD})
                results.setdefault(name, []).append(per_epoch_us(step, args.epochs))
                log.close()
        results.setdefault("host-load window (HostLoad start+stop)", []).append(
            per_epoch_us(lambda e: (host.start(), host.stop()), args.epochs))
        results.setdefault("process RSS read (psutil memory_info)", []).append(
            per_epoch_us(lambda e: process.memory_info(), args.epochs))
        results.setdefault("ConstantLR schedule.step()", []).append(
            per_epoch_us(lambda e: schedule.step(), args.epochs))
    width = max(map(len, results))
    for name, values in results.items():
        print(f"  {name:<{width}}  {spread(values)}")


if __name__ == "__main__":
    main()
