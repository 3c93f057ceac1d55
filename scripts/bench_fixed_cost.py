#!/usr/bin/env python
"""What a job costs besides its training, as users run it (``python -m sweeps`` in a subprocess,
in a fresh folder with a new sqlite store). Prints figures with their spread (median [min, max]
over ``--repeats``); asserts nothing.

    python scripts/bench_fixed_cost.py [--repeats 3] [--only marginal,items,tabular,multirun]

- marginal: the fixed cost of one more job in a sweep. Two sweeps of 1-epoch tiny jobs (MLP
  64-16-10, 256 synthetic examples, CPU), of 5 and of 15 jobs, each in its own process:
  ((wall₁₅ − Σ training₁₅) − (wall₅ − Σ training₅)) ÷ 10, where training is each run's
  ``time/total_s``. The process's own start-up (imports, store creation) cancels out; it is
  printed beside as the start-up. Where that start-up varies by seconds (a slow VM), ÷ 10 leaves
  ±0.2 s: so each job's cycle inside the 15-job sweep is printed too (from its run's creation to
  the next job's, less its training; jobs 2-14), the steadier figure. Target: ≤ 0.5 s
  per job.
- items: the same 10-job sweep under cProfile, each once-per-job step's cumulative time ÷ 10
  (composition, run creation with params/tags/inputs, data and model, training, the closing
  summary/telemetry/artifacts/status). cProfile slows Python-heavy steps ~1.5-2×: read the
  column as where the time goes, not as the cost.
- tabular: one 1-epoch job of the tabular preset (``+experiment=diabetes batch=full epochs=1``)
  against the script it replaces (import torch and scikit-learn, train the same MLP for 100
  full-batch epochs, print the test RMSE). Target: sweeps ≤ the script + 2 s.
- multirun: what ``-m`` adds: the same 1-epoch tabular job as a one-job sweep (``python -m sweeps
  -m ...``: the sweep's parent run, its summary and verdict) and alone, alternated, each in a new
  folder, the store template in the cache. Wall and CPU (user + system of the command and every
  process it started) per command. Target: ≤ 1 s more wall.
"""
from __future__ import annotations

import argparse
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SWEEPS_", "HYDRA_"))}
TINY = ["model=mlp", "model.hidden=[16]", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=256",
        "dataset.test_size=64", "batch=64", "epochs=1", "device=cpu"]
# (label, file suffix, function name) of the steps a job takes once, in the order it takes them
ITEMS = [
    ("compose the job (Hydra, or derived from its family's shared part)", "sweeps/sweep/compose.py",
     "compose"),
    ("  of which Hydra's own compositions", "hydra/_internal/config_loader_impl.py", "load_configuration"),
    ("Hydra: run_job (output dir, .hydra/*.yaml, logging)", "hydra/core/utils.py", "run_job"),
    ("job: complete + validate the config", "sweeps/config/targets.py", "complete"),
    ("job: build the task (data, model, optimizer)", "sweeps/tasks/base.py", "prepare"),
    ("run open: create run, params, config.yaml, inputs", "sweeps/job/lifecycle.py", "__enter__"),
    ("training (the task's run)", "sweeps/tasks/train.py", "run"),
    ("close: summary, telemetry, artifacts, status", "sweeps/job/finish.py", "finish"),
    ("  of which the drain posted (the follower ships the last epochs meanwhile)", "sweeps/tracking/writer/run_writer.py", "drain"),
    ("  of which waiting for the store process (the drain, posted calls)", "sweeps/tracking/writer/run_writer.py", "drained"),
    ("  of which telemetry.png (drawn while the store ingests)", "sweeps/telemetry/plot.py", "render"),
    ("  of which free memory (gc)", "sweeps/train/memory.py", "release_memory"),
]
# `python -m sweeps ARGS` under cProfile. Not `python -m cProfile`: it writes its file after the
# program returns, and `python -m sweeps` ends with os._exit once its atexit hooks have run
# (sweeps/__main__.py); the profile is written by one of those hooks instead.
PROFILED = """
import atexit, cProfile, runpy, sys
out, sys.argv = sys.argv[1], ["sweeps", *sys.argv[2:]]
profile = cProfile.Profile()
atexit.register(profile.dump_stats, out)
profile.enable()
runpy.run_module("sweeps", run_name="__main__", alter_sys=True)
"""
SCRIPT_004 = """
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
x, y = load_diabetes(return_X_y=True)
xtr, xte, ytr, yte = (torch.tensor(a, dtype=torch.float32) for a in train_test_split(x, y, test_size=0.2, random_state=0))
ytr, yte = ytr.unsqueeze(1), yte.unsqueeze(1)
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(100):
    loss = torch.nn.functional.mse_loss(model(xtr), ytr)
    opt.zero_grad(); loss.backward(); opt.step()
with torch.no_grad():
    print("test RMSE", torch.nn.functional.mse_loss(model(xte), yte).sqrt().item())
"""


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median [min, max]`` of ``values``."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def run(args: list[str], cwd: Path, env: dict | None = None, cpu: list | None = None) -> float:
    """Wall seconds of ``python ARGS`` in ``cwd`` (``env``: default :data:`ENV`); exits with its
    stderr if it fails. ``cpu``: a list the command's CPU seconds are appended to (user + system of
    it and of every process it started and waited for, :func:`os.wait4`)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:4])} … failed ({proc.returncode}):\n{stderr[-3000:]}")
    if cpu is not None:
        usage = _usage.pop(proc.pid, None)
        cpu.append(usage.ru_utime + usage.ru_stime if usage else float("nan"))
    return wall


_usage: dict = {}  # pid → its resource usage, read by the wait below (Popen's own wait discards it)
_popen_try_wait = subprocess.Popen._try_wait


def _try_wait(self, wait_flags):  # Popen waits with waitpid; wait4 gives the same answer and the usage
    try:
        pid, status, usage = os.wait4(self.pid, wait_flags)
    except ChildProcessError:
        return _popen_try_wait(self, wait_flags)
    if pid:
        _usage[pid] = usage
    return pid, status


subprocess.Popen._try_wait = _try_wait


def sweep(jobs: int, cwd: Path, profile: Path | None = None) -> tuple[float, float, list[float]]:
    """(process wall s, Σ the jobs' ``time/total_s``, each later job's cycle s) of a ``jobs``-job
    sweep of :data:`TINY`. A job's cycle: from its run's creation to the next job's, less its
    training (``time/total_s``) — one job's fixed cost, measured inside the sweep, so the
    process's start-up (10-18 s on a slow VM, ±2 s) never enters it; the first job's (its lazy
    imports) is left out."""
    from mlflow import MlflowClient

    command = ["-c", PROFILED, str(profile)] if profile else ["-m", "sweeps"]
    wall = run([*command, "-m", f"seed=range(0,{jobs})", *TINY], cwd)
    client = MlflowClient(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("sweeps")
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == jobs and all(r.data.tags.get("outcome") == "ok" for r in children), "a job did not end ok"
    children.sort(key=lambda r: r.info.start_time)
    cycles = [(b.info.start_time - a.info.start_time) / 1e3 - a.data.metrics.get("time/total_s", 0.0)
              for a, b in zip(children[1:], children[2:])]
    return wall, sum(r.data.metrics.get("time/total_s", 0.0) for r in children), cycles


def marginal(repeats: int, small: int = 5, large: int = 15) -> None:
    print(f"\n## fixed cost of one more job: sweeps of {small} and {large} one-epoch tiny jobs")
    per_job, start_up, cycle = [], [], []
    for r in range(repeats):
        outside = {}
        for n in (small, large):
            with tempfile.TemporaryDirectory() as tmp:
                wall, training, cycles = sweep(n, Path(tmp))
                outside[n] = wall - training
        per_job.append((outside[large] - outside[small]) / (large - small))
        start_up.append(outside[small] - small * per_job[-1])
        cycle.append(statistics.median(cycles))
        print(f"  repeat {r}: {per_job[-1]:.3f} s per job, process start-up {start_up[-1]:.2f} s; inside the "
              f"{large}-job sweep {spread(cycles, '{:.3f}')} s per job")
    print(f"fixed cost per job {spread(per_job, '{:.3f}')} s (target ≤ 0.5); process start-up "
          f"{spread(start_up)} s, once per sweep")
    print(f"fixed cost per job inside a sweep (each repeat's median job cycle less its training) "
          f"{spread(cycle, '{:.3f}')} s (target ≤ 0.5)")


def items(jobs: int = 10) -> None:
    print(f"\n## where a job's fixed cost goes: a {jobs}-job sweep under cProfile, per job")
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "sweep.prof"
        wall, training, _ = sweep(jobs, Path(tmp), profile)
        stats = pstats.Stats(str(profile)).stats  # {(file, line, function): (calls, ncalls, tottime, cumtime, callers)}
    print(f"{'step':72} {'ms per job':>10}  calls")
    for label, suffix, function in ITEMS:
        hits = [(s[0], s[3]) for (f, _, fn), s in stats.items() if fn == function and f.endswith(suffix)]
        calls, cum = sum(h[0] for h in hits), sum(h[1] for h in hits)
        print(f"{label:72} {1e3 * cum / jobs:10.1f}  {calls}")
    print(f"(whole sweep under cProfile: {wall:.1f} s, Σ training {training:.2f} s)")


def tabular(repeats: int) -> None:
    """The 1-epoch tabular job against seed 004's script, each repeat in a new folder (a new
    store): first with the store template in the user's cache (``sweeps.tracking.store.create``: every
    new store after the first on a machine), then once with an empty cache (the first store a
    machine makes: MLflow's migrations run, and leave the template)."""
    print("\n## one 1-epoch tabular job vs the script it replaces (100 full-batch epochs, by hand)")
    job = ["-m", "sweeps", "+experiment=diabetes", "batch=full", "epochs=1", "device=cpu"]
    with tempfile.TemporaryDirectory() as tmp:
        run(job, Path(tmp))  # the template is in the cache from here on
    ours, theirs = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            ours.append(run(job, Path(tmp)))
            theirs.append(run(["-c", SCRIPT_004], Path(tmp)))
    extra = [a - b for a, b in zip(ours, theirs)]
    print(f"sweeps job {spread(ours)} s; hand script {spread(theirs)} s; difference {spread(extra)} s (target ≤ 2)")
    with tempfile.TemporaryDirectory() as tmp:
        cold = run(job, Path(tmp), {**ENV, "XDG_CACHE_HOME": str(Path(tmp) / "empty-cache")})
    print(f"the same job with no template in the cache (the machine's first store): {cold:.2f} s "
          f"(+{cold - statistics.median(ours):.2f} s)")


def multirun(repeats: int) -> None:
    """:func:`tabular`'s job as a one-job ``-m`` sweep and alone, alternated (module docstring)."""
    print("\n## what -m adds: a one-job sweep of a 1-epoch tabular job vs the same job alone")
    job = ["+experiment=diabetes", "batch=full", "epochs=1", "device=cpu"]
    with tempfile.TemporaryDirectory() as tmp:
        run(["-m", "sweeps", *job], Path(tmp))  # the template is in the cache from here on
    walls: dict[str, list[float]] = {"-m": [], "alone": []}
    cpus: dict[str, list[float]] = {"-m": [], "alone": []}
    for _ in range(repeats):
        for kind, args in (("-m", ["-m", "sweeps", "-m", *job]), ("alone", ["-m", "sweeps", *job])):
            with tempfile.TemporaryDirectory() as tmp:
                walls[kind].append(run(args, Path(tmp), cpu=cpus[kind]))
    extra = [a - b for a, b in zip(walls["-m"], walls["alone"])]
    for kind in walls:
        print(f"  {kind:5}: wall {spread(walls[kind])} s, CPU {spread(cpus[kind])} s")
    print(f"-m adds {spread(extra)} s of wall (target ≤ 1)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="marginal,items,tabular")
    args = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.machine())
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {cpu} ({os.cpu_count()} logical cores); Python "
          f"{platform.python_version()}; load average {os.getloadavg()[0]:.2f}")
    parts = args.only.split(",")
    if "marginal" in parts:
        marginal(args.repeats)
    if "items" in parts:
        items()
    if "tabular" in parts:
        tabular(args.repeats)
    if "multirun" in parts:
        multirun(args.repeats)


if __name__ == "__main__":
    main()
