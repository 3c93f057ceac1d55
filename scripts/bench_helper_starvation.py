#!/usr/bin/env python
"""A job's end on a busy machine: how long the job waits for its own helper processes (the store
process and its follower process) while other programs keep every core busy. The follower ships
the run's journal at the lowest CPU priority (``sweeps.tracking.follower.priority``: nice 19,
``SCHED_IDLE``); the store process answers every call the job waits for at normal priority, and
at the job's end takes over from a follower that has not moved for 5 s
(``sweeps.tracking.follower.shipping``). Prints figures with their spread (median [min, max] over
``--repeats``); asserts nothing.

    python scripts/bench_helper_starvation.py [--repeats 3] [--hogs N] [--apart] [--long]   # N: the core count by default

Each repeat runs the same job as users run it (``python -m sweeps`` in a subprocess, a new sqlite
store) once on a quiet machine and once beside N busy loops (``while True: pass``, nice 0,
started by this script: one session with the job, or with ``--apart`` a session of their own).
The job: the tabular preset's model on scikit-learn's diabetes data, 3 epochs, CPU; with
``--long``, study 5's model for 3,000 epochs at one torch thread, every epoch in the MLflow
series (~45,000 values), whose end waits for them to be in MLflow. Every 0.1 s it reads the job's main thread and every thread of its helper processes
(``/proc/PID/task/TID/stat`` state; ``.../schedstat``: CPU time and time spent runnable but
waiting for a core, in ns; man 5 proc). Figures per run:

- wall: the job's process from start to exit (s);
- stalled: time the job's main thread slept while a thread of a helper was runnable (s): the job
  waiting on a helper that has work but no core;
- helpers waited: the helpers' total time runnable but not running (s), and their CPU time (s);
  helpers: how many the job started, per run.

Measured on the project's 2-core VM (2026-11-26, docs/benchmarks.md, "A job beside busy
programs"). The lowest priority is the right choice for work the job does not wait for (it must not
delay a step); for work the job waits for, it makes the job wait for everyone.
"""
from __future__ import annotations

import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SWEEPS_", "HYDRA_"))}
JOB = ["model=mlp_tabular", "dataset=diabetes", "epochs=3", "device=cpu"]
# a long series: 3,000 epochs x ~15 values, every one sent (the 320-point cap undone)
LONG = ["+experiment=tabular_cpu_vs_gpu", "device=cpu", "dataset.train_size=1000", "epochs=3000",
        "mlflow.log_every_epochs=1", "mlflow.series_points=null", "device.threads=1"]
HELPERS = (b"sweeps.tracking.service.server", b"sweeps.tracking.follower.follower")
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


def _helper_pids(parent: int) -> list[int]:
    """The store process started by process ``parent`` and its follower process (those running
    now)."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if any(name in open(path, "rb").read() for name in HELPERS):
                ppid = int(open(path.replace("cmdline", "stat")).read().rsplit(")", 1)[1].split()[1])
                found.append((int(path.split("/")[2]), ppid))
        except (OSError, ValueError, IndexError):
            continue
    mine = [pid for pid, ppid in found if ppid == parent]
    return mine + [pid for pid, ppid in found if ppid in mine]


def one_job(job: list[str]) -> dict[str, float]:
    """Run ``python -m sweeps JOB`` once in a fresh folder; its wall, stalled and its helper
    processes' figures (s), and how many helpers it started."""
    started = time.perf_counter()
    err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe would block the job mid-run
    proc = subprocess.Popen([sys.executable, "-m", "sweeps", *job], cwd=tempfile.mkdtemp(prefix="starve-"), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=err, text=True)
    last: dict[int, tuple[str, float, float]] = {}  # helper pid → its last reading
    stalled, scans = 0.0, 0
    while proc.poll() is None:
        if scans % 10 == 0:  # a new helper (a follower starts again after a take-over): look once a second
            last.update({pid: ("S", 0.0, 0.0) for pid in _helper_pids(proc.pid) if pid not in last})
        scans += 1
        mine = _read(proc.pid, str(proc.pid))  # the job's main thread
        now = {pid: _read(pid) for pid in last}
        last.update({pid: r for pid, r in now.items() if r is not None})
        if mine and mine[0] == "S" and any(r and r[0] == "R" for r in now.values()):
            stalled += POLL_S
        time.sleep(POLL_S)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        err.seek(0)
        raise SystemExit(f"the job failed ({proc.returncode}): {err.read()[-2000:]}")
    return {"wall": wall, "stalled": stalled, "helpers_waited": sum(r[2] for r in last.values()),
            "helpers_cpu": sum(r[1] for r in last.values()), "helpers": len(last)}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}, {max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy loops beside the job")
    parser.add_argument("--apart", action="store_true",
                        help="start the busy loops in a session of their own (another terminal's programs: "
                             "Linux's autogroup then shares the CPU between the two sessions first)")
    parser.add_argument("--long", action="store_true",
                        help=f"run a job with a long MLflow series: {' '.join(LONG)}")
    args = parser.parse_args()
    if not os.path.exists("/proc/self/schedstat"):
        raise SystemExit("needs Linux's /proc/PID/schedstat")
    job = LONG if args.long else JOB
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a `timeout` still stops the busy loops (finally)
    one_job(job)  # warm the page cache and the store template; not counted
    results: dict[str, list[dict[str, float]]] = {"quiet": [], "busy": []}
    for _ in range(args.repeats):
        results["quiet"].append(one_job(job))
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=args.apart)
                for _ in range(args.hogs)]
        try:
            time.sleep(0.5)
            results["busy"].append(one_job(job))
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    where = "in a session of their own" if args.apart else "in the job's session"
    print(f"python -m sweeps {' '.join(job)}")
    print(f"{args.repeats} repeats, {args.hogs} busy loop(s) {where} beside the busy runs; median [min, max], s")
    print(f"{'run':6s} {'wall':>22s} {'stalled on helpers':>22s} {'helpers waited':>22s} {'helpers CPU':>22s} helpers")
    for name, rows in results.items():
        print(f"{name:6s} " + " ".join(f"{_spread([r[k] for r in rows]):>22s}"
                                       for k in ("wall", "stalled", "helpers_waited", "helpers_cpu"))
              + f" {'/'.join(str(r['helpers']) for r in rows)}")


if __name__ == "__main__":
    main()
