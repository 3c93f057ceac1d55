#!/usr/bin/env python
"""What a job costs as users run it: ``python -m sweeps ...`` (a subprocess, the study preset's
defaults) against a hand-written loop on the same data, in the same run. Prints figures with
their spread (min / median / max over ``--repeats``); asserts nothing.

    python scripts/bench_job_overhead.py [--repeats 3] [--epochs 10000] [--only study5,study4,startup]
    python scripts/bench_job_overhead.py --only default   # a user's small tabular job at sweeps' defaults
    python scripts/bench_job_overhead.py --device cuda --only study5,study4   # the presets' GPU jobs, hand loops on the GPU
    # study5-every-epoch: study 5 with every epoch in the MLflow series (the preset's stride undone), for comparison
    # study5-threads1, study5-threads2: study 5 with device.threads=1 or 2 (job and hand loop alike)
    # study5-extra --extra KEY=VALUE ...: study 5 with these overrides on top of the preset
    # default-extra --extra KEY=VALUE ...: the default case with these overrides (the hand loops take device.threads)
    # --study4-glibc-default: study 4 also with device.malloc_trim_mb=null (glibc's own heap), for comparison

- study 5 (``+experiment=tabular_cpu_vs_gpu device=cpu dataset.train_size=1000``: the 13-16-32-16-1
  regressor, Adam 0.01, full batch, CPU): the marginal cost of an epoch, (wall of N epochs − wall
  of 100) ÷ (N − 100), for sweeps' process and for the hand loop (the same model class, data,
  optimizer and evaluation cadence, no bookkeeping), the hand loop's taken as the mean of one run
  right before and one right after each repeat's sweeps jobs. Target ≤ 1.25×. The preset's
  ``mlflow.log_every_epochs: 10`` and ``mlflow.series_points: 320`` apply (every 50th epoch at
  10,000; ``study5-every-epoch`` measures every epoch). Flatness: from the run's
  ``time/elapsed_s`` series, the per-epoch cost from epoch 2,000 to N within 10 % of that from
  100 to 2,000; printed too as the ratio of the two windows' median cost between consecutive
  series points (every 50 epochs at the preset), which a cost that grows with the epochs moves
  and a stall of a few seconds (this VM's speed drifts by tens of % within a minute) does not.
- default (``+experiment=diabetes batch=full``, CPU, every other setting sweeps' default: each
  epoch evaluated, the MLflow series at ``mlflow.series_points``): a user's small tabular job (the
  10-16-32-16-1 regressor on scikit-learn's diabetes rows, 354 for training, ~1-ms epochs) against
  a hand loop on the same tensors (``sweeps.data.builtin.diabetes``): Adam 0.01, full batch,
  ``loss.item()`` each epoch, no evaluation. Marginal cost per epoch and flatness as study 5's.
  Target ≤ 1.25×. Beside it, the job written by hand: a hand loop that also evaluates each epoch as
  the job does (the test loss of the 88 test rows under ``torch.no_grad()``), steps the job's
  Adam implementation (fused on a CPU) and runs on the job's torch threads (its ``torch.threads``
  tag, read from a 1-epoch job: one thread for steps this small): its ratio to the first is what
  the job does differently, the job's ratio to it what sweeps' bookkeeping costs.
- study 4 (``+experiment=mnist_devices device=cpu``: MLP 784-1000-1000-10, batch 100, Adam): the
  MNIST test split the repo holds, examples/data (10,000 real digits, used as both splits: the
  training split is not on this machine) — median epoch vs a bare loop over the same tensors (target ≤ 1.05×),
  and the job's wall vs the bare loop's work (its epochs and evaluations, mean of the runs before
  and after) + the job's own start-up (its data read included) (target ≤ 1.15×), ``--study4-epochs`` epochs
  (10); the bare loop runs before and after the job, and both per-epoch series are printed.
- start-up: the fixed cost of one more job in a sweep (scripts/bench_fixed_cost.py, target ≤ 0.5 s).

``--device cuda``: studies 4 and 5 with ``device=cuda`` (each preset sweeps cpu,cuda), the hand
loops' tensors and model on the GPU, their clocks read after ``torch.cuda.synchronize()`` (CUDA
runs asynchronously: the clock waits for the work, as the job's epoch clock does), after one
unmeasured warm-up run of each hand loop in this process (CUDA context, cuBLAS handles, kernels).
``--mnist-raw`` points at another copy of the MNIST t10k files. The hand loops step
``torch.optim.Adam(params, lr)`` as a user writes it (torch's default implementation: a loop over
the parameters on a CPU, foreach on CUDA); a job at ``optimizer.impl=auto`` steps the fused one.
``--hand-optimizer job`` gives the hand loops the job's implementation, for sweeps' own cost alone.
"""
from __future__ import annotations

import argparse
import gzip
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from mlflow import MlflowClient

from sweeps.models import MLP
from sweeps.names import THREADS_TAG
from sweeps.provenance.machine import fingerprint

REPO = Path(__file__).resolve().parents[1]
MNIST_RAW = REPO / "examples" / "data" / "mnist-t10k" / "raw"
DEVICE = torch.device("cpu")  # --device: where the jobs and the hand loops run
HAND_ADAM: dict = {}  # --hand-optimizer: the hand loops' Adam implementation (plain: torch's default)


def job_adam() -> dict:
    """The Adam implementation a job at ``optimizer.impl=auto`` gets on ``DEVICE`` (fused on CPU and CUDA)."""
    from sweeps.train.optim import optimizer_kwargs

    return optimizer_kwargs("auto", DEVICE)
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SWEEPS_", "HYDRA_"))}


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    """``median [min, max]`` of ``values``."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def sweeps_job(args: list[str], cwd: Path) -> tuple[float, MlflowClient]:
    """Run ``python -m sweeps ARGS`` in ``cwd``; (process wall s, client on its store)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=cwd, env=ENV, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"sweeps failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, MlflowClient(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")


def last_run(client: MlflowClient, experiment: str):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)[0]


def job_threads(args: list[str], experiment: str) -> int:
    """torch's intra-op threads a job of ``args`` runs with: its ``torch.threads`` tag, from a
    1-epoch run (``device.threads``, or at null sweeps' choice, e.g. 1 for small CPU steps)."""
    with tempfile.TemporaryDirectory() as tmp:
        _, client = sweeps_job([*args, "epochs=1"], Path(tmp))
        return int(last_run(client, experiment).data.tags[THREADS_TAG].split()[0])


# ── study 5 ──────────────────────────────────────────────────────────────────────────────────
def study5_args() -> list[str]:
    """The study-5 job's overrides on ``DEVICE``."""
    return ["+experiment=tabular_cpu_vs_gpu", f"device={DEVICE.type}", "dataset.train_size=1000"]


def synchronize() -> None:
    """Wait for ``DEVICE``'s queued work before a clock is read (nothing to wait for on the CPU)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def hand_loop_study5(epochs: int, eval_every: int, threads: int) -> float:
    """The same job written by hand: seconds for ``epochs`` epochs (process already warm), with
    ``threads`` torch threads (the job's own count: ``device.threads``, else torch's default)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _hand_loop_study5(epochs, eval_every)
    finally:
        torch.set_num_threads(before)


def _hand_loop_study5(epochs: int, eval_every: int) -> float:
    from sklearn.datasets import make_regression

    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in make_regression(2000, 13, noise=10.0, random_state=0))
    y = ((y - y[:1000].mean()) / y[:1000].std()).unsqueeze(1)
    x, y = x.to(DEVICE), y.to(DEVICE)
    xtr, ytr, xte, yte = x[:1000], y[:1000], x[1000:], y[1000:]
    torch.manual_seed(0)
    model = MLP((13,), 1, hidden=[16, 32, 16]).to(DEVICE)
    opt, loss_fn = torch.optim.Adam(model.parameters(), lr=0.01, **HAND_ADAM), torch.nn.MSELoss()
    synchronize()
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        loss = loss_fn(model(xtr), ytr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if epoch % eval_every == 0 or epoch == epochs:
            model.eval()
            with torch.no_grad():
                loss_fn(model(xte), yte).item()
    synchronize()
    return time.perf_counter() - t0


def study5(repeats: int, epochs: int, extra: list[str] | None = None, label: str = "preset defaults") -> None:
    """Marginal ms/epoch of ``python -m sweeps`` (:func:`study5_args` + ``extra``) and of the hand loop, each
    repeat measured back to back; flatness from the run's ``time/elapsed_s`` series."""
    print(f"\n## study 5 ({label}): {epochs} epochs, full batch, {DEVICE.type} — marginal cost per epoch")
    marginal(repeats, epochs, study5_args(), "tabular_cpu_vs_gpu", hand_loop_study5, extra or [])


def default_args() -> list[str]:
    """The ``default`` case's overrides: a user's small tabular job, every other setting sweeps' default."""
    return ["+experiment=diabetes", "batch=full"]


def hand_loop_default(epochs: int, eval_every: int, threads: int, as_the_job: bool = False) -> float:
    """Seconds for ``epochs`` epochs of the diabetes job written by hand (the same tensors, model,
    optimizer; ``loss.item()`` each epoch as a hand loop prints or keeps it; no evaluation, whatever
    ``eval_every``), with ``threads`` torch threads. ``as_the_job``: also the test loss every
    ``eval_every``-th epoch, as a hand loop writes it (``model.eval()``, ``torch.no_grad()``, the
    MSE of the 88 test rows, ``.item()``, ``model.train()``), and the job's Adam implementation
    (:func:`job_adam`) — the job without its bookkeeping, so the two ratios part what the job does
    differently (evaluation, optimizer kernel) from what sweeps' bookkeeping costs."""
    from sweeps.data.builtin import diabetes

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        train, test, spec = diabetes()
        (x, y), (x_test, y_test) = train.tensors, test.tensors
        torch.manual_seed(0)
        model = MLP(spec.in_shape, 1, hidden=[16, 32, 16])
        opt = torch.optim.Adam(model.parameters(), lr=0.01, **(job_adam() if as_the_job else HAND_ADAM))
        loss_fn = torch.nn.MSELoss()
        model.train()
        t0 = time.perf_counter()
        for epoch in range(1, epochs + 1):
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
            if as_the_job and epoch % eval_every == 0:
                model.eval()
                with torch.no_grad():
                    loss_fn(model(x_test), y_test).item()
                model.train()
        return time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)


def hand_loop_default_evaluated(epochs: int, eval_every: int, threads: int) -> float:
    """:func:`hand_loop_default` with the job's evaluation cadence and Adam implementation."""
    return hand_loop_default(epochs, eval_every, threads, as_the_job=True)


def default(repeats: int, epochs: int, extra: list[str] | None = None) -> None:
    """The ``default`` case (module docstring): :func:`default_args` (+ ``extra``) vs :func:`hand_loop_default`."""
    label = " ".join(extra) if extra else "default settings"
    print(f"\n## {label}: a small tabular job, {epochs} epochs, full batch, cpu — marginal cost per epoch")
    if DEVICE.type != "cpu":
        print("skipped: the default case runs on the CPU (the preset's device)")
        return
    marginal(repeats, epochs, default_args(), "diabetes", hand_loop_default, extra or [], also=hand_loop_default_evaluated)


def marginal(repeats: int, epochs: int, base: list[str], experiment: str, hand_loop, extra: list[str],
             also=None) -> None:
    """Marginal ms/epoch of ``python -m sweeps BASE EXTRA`` (runs of ``experiment``) and of
    ``hand_loop(epochs, eval_every, threads)`` → s, each repeat measured back to back; flatness from
    the run's ``time/elapsed_s`` series. ``also``: a second hand loop of the same signature,
    measured beside the first, and its ratio printed too."""
    composed = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tests'); "
                               "from conftest import compose; from sweeps.tracking.follower.series import stride_of_config; "
                               "c = compose(%r); print(c.eval.every_epochs, stride_of_config(c), c.device.threads or 0)"
                               % [*base, *extra, f"epochs={epochs}"]],
                              cwd=REPO, env=ENV, capture_output=True, text=True, check=True).stdout.split()
    eval_every, series_every = int(composed[0]), int(composed[1])
    threads = int(composed[2]) or torch.get_num_threads()  # the hand loop: device.threads, else torch's default
    # the job written by hand runs with the threads the job ran with (at null: sweeps' choice)
    also_threads = job_threads([*base, *extra], experiment) if also else threads
    print("command:", "python -m sweeps", " ".join([*base, *extra]), f"epochs={epochs}",
          f"(job's Adam: {job_adam() or 'torch default'}; hand loop's: {HAND_ADAM or 'torch default'})",
          f"(eval.every_epochs={eval_every}, MLflow series every {series_every} epochs, "
          f"device.threads={composed[2] if composed[2] != '0' else 'null'}; hand loop: {threads} torch thread(s)"
          + (f", hand loop as the job: {also_threads} (the job's)" if also else "") + ")")
    ours, hand, flat, flat_median = [], [], [], []
    if DEVICE.type == "cuda":
        hand_loop(200, eval_every, threads)  # unmeasured: CUDA context, cuBLAS handles, first kernels

    def marginal_hand(loop=hand_loop) -> float:
        count = also_threads if loop is also else threads
        walls = {n: loop(n, eval_every, count) for n in (100, epochs)}
        return (walls[epochs] - walls[100]) / (epochs - 100)

    hand_also = []

    # the VM's speed drifts by tens of % within minutes (docs/methodology.md): each repeat's hand loop
    # runs right before and right after its sweeps jobs and counts as their mean (an A-B-A design),
    # so a drift that is linear over the repeat cancels out of its ratio
    for r in range(repeats):
        before = [marginal_hand()]
        before_also = [marginal_hand(also)] if also else []
        walls = {}
        for n in (100, epochs):
            with tempfile.TemporaryDirectory() as tmp:
                walls[n], client = sweeps_job([*base, *extra, f"epochs={n}"], Path(tmp))
                if n == epochs:
                    run = last_run(client, experiment)
                    elapsed = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "time/elapsed_s")}
                    mid = min(2000, epochs // 2)
                    at = {k: elapsed[max(s for s in elapsed if s <= k)] for k in (100, mid, epochs)}  # series points
                    early = (at[mid] - at[100]) / (mid - 100)
                    late = (at[epochs] - at[mid]) / (epochs - mid)
                    flat.append(late / early)
                    # the same windows, each as the median cost of the steps between the series'
                    # points: a growth with the epoch count shows in it, a one-off stall of the VM does not
                    steps = sorted(elapsed)
                    cost = [(b, (elapsed[b] - elapsed[a]) / (b - a)) for a, b in zip(steps, steps[1:])]
                    flat_median.append(statistics.median(c for b, c in cost if b > mid)
                                       / statistics.median(c for b, c in cost if 100 < b <= mid))
        ours.append((walls[epochs] - walls[100]) / (epochs - 100))
        hand.append(statistics.fmean(before + [marginal_hand()]))  # before and after the job: drift cancels
        if also:
            hand_also.append(statistics.fmean(before_also + [marginal_hand(also)]))
        print(f"  repeat {r}: sweeps {1e3 * ours[-1]:.3f} ms/epoch, hand loop {1e3 * hand[-1]:.3f} ms/epoch, "
              + (f"hand loop as the job {1e3 * hand_also[-1]:.3f} ms/epoch, " if also else "")
              + f"late/early {flat[-1]:.3f} (medians: {flat_median[-1]:.3f})")
    ratios = [a / b for a, b in zip(ours, hand)]
    print(f"sweeps marginal ms/epoch {spread([1e3 * v for v in ours])}; hand loop {spread([1e3 * v for v in hand])}")
    if also:
        print(f"hand loop as the job (eval.every_epochs={eval_every}, Adam {job_adam() or 'torch default'}) "
              f"{spread([1e3 * v for v in hand_also])} ms/epoch; ratio sweeps ÷ it "
              f"{spread([a / b for a, b in zip(ours, hand_also)])} (sweeps' bookkeeping); ratio it ÷ hand loop "
              f"{spread([a / b for a, b in zip(hand_also, hand)])} (evaluation and optimizer kernel)")
    print(f"ratio sweeps ÷ hand {spread(ratios)} (target ≤ 1.25); flatness late ÷ early {spread(flat)} (target 0.9–1.1); "
          f"by the medians of the series' steps {spread(flat_median)}")


# ── study 4 ──────────────────────────────────────────────────────────────────────────────────
def mnist_root(tmp: Path) -> Path:
    """An MNIST root torchvision reads: the real t10k files as both the test and the training split."""
    raw = tmp / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for kind in ("images-idx3", "labels-idx1"):
        src = MNIST_RAW / f"t10k-{kind}-ubyte.gz"
        for split in ("train", "t10k"):
            with gzip.open(src) as f, open(raw / f"{split}-{kind}-ubyte", "wb") as out:
                shutil.copyfileobj(f, out)
    return tmp / "mnist"


def bare_loop_study4(root: Path, epochs: int) -> tuple[list[float], float]:
    """Per-epoch seconds of a bare loop over the same normalised tensors (batch 100, Adam) and the
    seconds of its evaluations: the test split, batch 100, after every epoch, as the preset's job
    does (its ``time/epoch_s`` is the training pass alone)."""
    from torchvision import datasets

    ds = datasets.MNIST(root, train=True, download=False)
    x = ((ds.data.float() / 255 - 0.1307) / 0.3081).unsqueeze(1).to(DEVICE)
    y = ds.targets.to(DEVICE)
    torch.manual_seed(0)
    model = MLP((1, 28, 28), 10).to(DEVICE)
    opt, loss_fn = torch.optim.Adam(model.parameters(), lr=0.001, **HAND_ADAM), torch.nn.CrossEntropyLoss()
    times, eval_s = [], 0.0
    for _ in range(epochs):
        t = time.perf_counter()
        model.train()
        for idx in torch.randperm(len(x), device=DEVICE).split(100):
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        synchronize()
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(xb).argmax(1) == yb).sum()) for xb, yb in zip(x.split(100), y.split(100)))
        eval_s += time.perf_counter() - t
        assert correct > 0
    return times, eval_s


def _study4_job(args: list[str], cwd: Path) -> tuple[float, dict, list[float], float]:
    """One study-4 job in ``cwd``: (process wall s, the run's metrics, its ``time/epoch_s`` series,
    its evaluations' total s)."""
    cwd.mkdir()
    wall, client = sweeps_job(args, cwd)
    run = last_run(client, "mnist_devices")
    series = [x.value for x in sorted(client.get_metric_history(run.info.run_id, "time/epoch_s"), key=lambda x: x.step)]
    job_eval = sum(x.value for x in client.get_metric_history(run.info.run_id, "time/eval_s"))
    return wall, run.data.metrics, series, job_eval


GLIBC_DEFAULT = "device.malloc_trim_mb=null"  # the job with glibc's own heap thresholds (sweeps.train.host_heap)


def study4(repeats: int, epochs: int = 10, glibc_default: bool = False) -> None:
    """Study 4's figures: the bare loop runs right before and right after each repeat's job (the
    mean of its two medians: this VM's speed drifts by 10-20 % between minutes), and the job's
    per-epoch series is printed, so that what its first epochs share the cores with (the store
    process importing mlflow and opening the store, ~3 s of CPU) shows beside the steady epochs.
    ``glibc_default``: each repeat also runs the job with :data:`GLIBC_DEFAULT` (the two jobs'
    order alternating between repeats), the reason the job was 5-12 % slower before it kept its
    heap (docs/benchmarks.md, "Overhead against a hand loop")."""
    print(f"\n## study 4: MNIST MLP 784-1000-1000-10, batch 100, {DEVICE.type}, {epochs} epochs (10,000 real digits per epoch)")
    if not MNIST_RAW.is_dir():
        print(f"skipped: {MNIST_RAW} is not here")
        return
    epoch_ratio, steady_ratio, wall_ratio, default_ratio, kept_ratio = [], [], [], [], []
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            root = mnist_root(Path(tmp))
            args = ["+experiment=mnist_devices", f"device={DEVICE.type}", f"dataset.root={root}", f"epochs={epochs}",
                    "dataset.if_missing=stop"]
            variants = [[], [GLIBC_DEFAULT]] if glibc_default else [[]]
            if DEVICE.type == "cuda" and r == 0:
                bare_loop_study4(root, 2)  # unmeasured: CUDA context, cuBLAS handles, first kernels
            bare_before, eval_before = bare_loop_study4(root, epochs)
            jobs = {tuple(v): _study4_job(args + v, Path(tmp) / f"job{i}")
                    for i, v in enumerate(variants if r % 2 == 0 else variants[::-1])}
            bare_after, eval_after = bare_loop_study4(root, epochs)
            wall, m, series, job_eval = jobs[()]
            bare_median = (statistics.median(bare_before[1:]) + statistics.median(bare_after[1:])) / 2
            bare_steady = (statistics.median(bare_before[2:]) + statistics.median(bare_after[2:])) / 2
            bare_work = (sum(bare_before) + eval_before + sum(bare_after) + eval_after) / 2
            # the job's own start-up as sweeps measured it: its data read and model build included
            startup = m["time/job_s"] - m["time/total_s"]
            epoch_ratio.append(m["time/median_epoch_s"] / bare_median)
            steady_ratio.append(statistics.median(series[2:]) / bare_steady)
            wall_ratio.append(m["time/job_s"] / (bare_work + startup))
            print(f"  repeat {r}: sweeps median epoch {m['time/median_epoch_s']:.3f} s (process {wall:.1f} s, job "
                  f"{m['time/job_s']:.2f} s, start-up {startup:.2f} s, overhead {m['time/overhead_s']:.2f} s); "
                  f"bare loop {statistics.median(bare_before[1:]):.3f} before, "
                  f"{statistics.median(bare_after[1:]):.3f} after s/epoch")
            print(f"    epochs s, sweeps: {' '.join(f'{t:.3f}' for t in series)}")
            if glibc_default:
                other = jobs[(GLIBC_DEFAULT,)][1]["time/median_epoch_s"]
                default_ratio.append(other / bare_median)
                kept_ratio.append(m["time/median_epoch_s"] / other)
                print(f"    {GLIBC_DEFAULT}: median epoch {other:.3f} s; epochs s: "
                      f"{' '.join(f'{t:.3f}' for t in jobs[(GLIBC_DEFAULT,)][2])}")
            print(f"    epochs s, bare (after): {' '.join(f'{t:.3f}' for t in bare_after)}; evaluations "
                  f"{eval_before:.2f}, {eval_after:.2f} s in all (sweeps: {job_eval:.2f} s)")
    print(f"median epoch sweeps ÷ bare {spread(epoch_ratio)} (target ≤ 1.05); from epoch 3 on "
          f"{spread(steady_ratio)}; job wall ÷ (bare + start-up) {spread(wall_ratio)} (target ≤ 1.15)")
    if glibc_default:
        print(f"with {GLIBC_DEFAULT}: median epoch ÷ bare {spread(default_ratio)}; "
              f"sweeps' default ÷ it {spread(kept_ratio)}")


# ── start-up ─────────────────────────────────────────────────────────────────────────────────
def startup(repeats: int) -> None:
    """The fixed cost of one more job in a sweep: :func:`bench_fixed_cost.marginal` (one
    definition, one script; ``python scripts/bench_fixed_cost.py`` also breaks it down)."""
    from bench_fixed_cost import marginal  # beside this script: sys.path[0] when run as a script

    marginal(repeats)


def main() -> None:
    global DEVICE, MNIST_RAW
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10_000)
    ap.add_argument("--only", default="study5,study4,startup", help="comma-separated: default, study5, study4, "
                    "startup, study5-every-epoch, study5-threads1, study5-threads2, study5-extra, default-extra")
    ap.add_argument("--study4-epochs", type=int, default=10, help="at least 3 (the ratio from epoch 3 on)")
    ap.add_argument("--study4-glibc-default", action="store_true",
                    help=f"study 4: each repeat also runs the job with {GLIBC_DEFAULT}, for comparison")
    ap.add_argument("--extra", nargs="*", default=[], metavar="KEY=VALUE",
                    help="study5-extra, default-extra: that case again with these overrides (e.g. device.threads=1)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="studies 4 and 5: the jobs' device=... and the hand loops' device")
    ap.add_argument("--hand-optimizer", choices=["plain", "job"], default="plain",
                    help="the hand loops' Adam: plain (torch.optim.Adam(params, lr), as written by hand) or job "
                         "(the implementation the job gets at optimizer.impl=auto: fused on CPU and CUDA)")
    ap.add_argument("--mnist-raw", type=Path, default=MNIST_RAW,
                    help="folder holding t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (study 4)")
    args = ap.parse_args()
    DEVICE, MNIST_RAW = torch.device(args.device), args.mnist_raw
    HAND_ADAM.update(job_adam() if args.hand_optimizer == "job" else {})
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here")
    if args.study4_epochs < 3:
        ap.error(f"--study4-epochs {args.study4_epochs}: at least 3 (study 4 reports the epochs from the 3rd on)")
    fp = fingerprint()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {fp['cpu']['model']} ({fp['cpu']['cores']} logical cores), "
          f"{fp['ram_gb']:.1f} GB; Python {platform.python_version()}, torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.2f}"
          + (f"; GPU {torch.cuda.get_device_name(DEVICE)}, driver {fp.get('nvidia_driver')}" if DEVICE.type == "cuda" else ""))
    parts = args.only.split(",")
    if "default" in parts:
        default(args.repeats, args.epochs)
    if "default-extra" in parts and args.extra:
        default(args.repeats, args.epochs, args.extra)
    if "study5" in parts:
        study5(args.repeats, args.epochs)
    if "study5-every-epoch" in parts:  # the same with every epoch in the MLflow series: what the preset's setting saves
        study5(args.repeats, args.epochs, ["mlflow.log_every_epochs=1", "mlflow.series_points=null"],
               "every epoch in the MLflow series")
    for threads in (1, 2):  # study5-threads1/2: torch's threads set (the hand loop runs with the same count)
        if f"study5-threads{threads}" in parts:
            study5(args.repeats, args.epochs, [f"device.threads={threads}"], f"device.threads={threads}")
    if "study5-extra" in parts and args.extra:
        study5(args.repeats, args.epochs, args.extra, " ".join(args.extra))
    if "study4" in parts:
        study4(args.repeats, args.study4_epochs, args.study4_glibc_default)
    if "startup" in parts:
        startup(args.repeats)


if __name__ == "__main__":
    main()
