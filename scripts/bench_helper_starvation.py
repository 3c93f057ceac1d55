#!/usr/bin/env python
"""A job's end on a busy machine: how long the job waits for its own store process while other
programs keep every core busy. The store process answers the run writer's background batches on
a thread at the lowest CPU priority (``sweeps.tracking.priority``: nice 19, ``SCHED_IDLE``) and
every call the job waits for at normal priority (``sweeps.tracking.store_process``); before
2026-11-26 the whole process ran at the lowest priority, in a session of its own whose autogroup
was at nice 19 too. Prints figures with their spread (median [min, max] over ``--repeats``);
asserts nothing.

    python scripts/bench_helper_starvation.py [--repeats 3] [--hogs N] [--apart]   # N: the core count by default

Each repeat runs the same small job as users run it (``python -m sweeps`` in a subprocess, the
tabular preset's model on scikit-learn's diabetes data, 3 epochs, CPU, a new sqlite store) once
on a quiet machine and once beside N busy loops (``while True: pass``, nice 0, started by this
script: one session with the job, or with ``--apart`` a session of their own). Every 0.1 s it
reads the job's process and its store process, all their threads (``/proc/PID/task/TID/stat``
state; ``.../schedstat``: CPU time and time spent runnable but waiting for a core, in ns; man 5
proc). Figures per run:

- wall: the job's process from start to exit (s);
- stalled: time the job's main thread slept while a thread of its store process was runnable (s): the job waiting
  on a helper that has work but no core;
- store waited: the store process's total time runnable but not running (s), and its CPU time (s).

Measured on the project's 2-core VM (2026-11-26, docs/benchmarks.md, "A job's end on a busy
machine"). The lowest priority is the right choice for work the job does not wait for (it must not
delay a step); for work the job waits for, it makes the job wait for everyone.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SWEEPS_", "HYDRA_"))}
JOB = ["model=mlp_tabular", "dataset=diabetes", "epochs=3", "device=cpu"]
POLL_S = 0.1


def _read(pid: int | None, threads: str = "[0-9]*") -> tuple[str, float, float] | None:
    """(state, CPU s, runnable-but-waiting s) of process ``pid``'s ``threads`` (a glob of thread
    ids: all of them by default; state ``R`` where any is runnable); None when it is not there."""
    if pid is None:
        return None
    states, run_s, wait_s = [], 0.0, 0.0
    for task in glob.glob(f"/proc/{pid}/task/{threads}"):
        try:
            states.append(open(f"{task}/stat").read().rsplit(")", 1)[1].split()[0])
            run_ns, wait_ns = open(f"{task}/schedstat").read().split()[:2]
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
        run_s, wait_s = run_s + int(run_ns) / 1e9, wait_s + int(wait_ns) / 1e9
    if not states:
        return None
    return ("R" if "R" in states else states[0]), run_s, wait_s


def _store_pid(parent: int) -> int | None:
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if b"sweeps.tracking.store_process" in open(path, "rb").read():
                if int(open(path.replace("cmdline", "stat")).read().rsplit(")", 1)[1].split()[1]) == parent:
                    return int(path.split("/")[2])
        except (OSError, ValueError, IndexError):
            continue
    return None


def one_job() -> dict[str, float]:
    """Run the job once in a fresh folder; its wall, stalled and the store process's figures (s)."""
    started = time.perf_counter()
    err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe would block the job mid-run
    job = subprocess.Popen([sys.executable, "-m", "sweeps", *JOB], cwd=tempfile.mkdtemp(prefix="starve-"), env=ENV,
                           stdout=subprocess.DEVNULL, stderr=err, text=True)
    store, last_store, stalled = None, None, 0.0
    while job.poll() is None:
        store = store or _store_pid(job.pid)
        mine, theirs = _read(job.pid, str(job.pid)), _read(store)  # the job's main thread
        if theirs is not None:
            last_store = theirs
        if mine and theirs and mine[0] == "S" and theirs[0] == "R":
            stalled += POLL_S
        time.sleep(POLL_S)
    wall = time.perf_counter() - started
    if job.returncode != 0:
        err.seek(0)
        raise SystemExit(f"the job failed ({job.returncode}): {err.read()[-2000:]}")
    return {"wall": wall, "stalled": stalled, "store_waited": last_store[2] if last_store else float("nan"),
            "store_cpu": last_store[1] if last_store else float("nan")}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}, {max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy loops beside the job")
    parser.add_argument("--apart", action="store_true",
                        help="start the busy loops in a session of their own (another terminal's programs: "
                             "Linux's autogroup then shares the CPU between the two sessions first)")
    args = parser.parse_args()
    if not os.path.exists("/proc/self/schedstat"):
        raise SystemExit("needs Linux's /proc/PID/schedstat")
    one_job()  # warm the page cache and the store template; not counted
    results: dict[str, list[dict[str, float]]] = {"quiet": [], "busy": []}
    for _ in range(args.repeats):
        results["quiet"].append(one_job())
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=args.apart)
                for _ in range(args.hogs)]
        try:
            time.sleep(0.5)
            results["busy"].append(one_job())
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    where = "in a session of their own" if args.apart else "in the job's session"
    print(f"{args.repeats} repeats, {args.hogs} busy loop(s) {where} beside the busy runs; median [min, max], s")
    print(f"{'run':6s} {'wall':>22s} {'stalled on store':>22s} {'store waited':>22s} {'store CPU':>22s}")
    for name, rows in results.items():
        print(f"{name:6s} " + " ".join(f"{_spread([r[k] for r in rows]):>22s}"
                                       for k in ("wall", "stalled", "store_waited", "store_cpu")))


if __name__ == "__main__":
    main()
