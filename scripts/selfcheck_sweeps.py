"""The checks of ``scripts/gpu_selfcheck.py`` that run the CLI (``python -m sweeps``, a subprocess
in a folder of its own, its ./mlruns read back): a compiled 4-job sweep, the ``max_batch``
boundary twice, and the two-GPU checks. Rows as in :mod:`selfcheck_checks`."""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from selfcheck_checks import REPO, row


def cli(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """``python -m sweeps ARGS`` in ``cwd`` (its own ./mlruns)."""
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def jobs(cwd: Path) -> tuple[list, object]:
    """(the job runs of the default store under ``cwd`` — a sweep's children, or a single run without
    ``-m`` — not the sweep's parent run, its client)."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("sweeps")
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("sweeps.kind") != "sweep"], client


def _energy_vs_power(client, run) -> float | None:
    """Energy counter ÷ trapezoid-integrated power over the job's telemetry.csv (GPU 0)."""
    text = Path(client.download_artifacts(run.info.run_id, "telemetry.csv")).read_text()
    rows = [r for r in csv.DictReader(io.StringIO(text)) if r.get("gpu0_power_w") and r.get("gpu0_energy_j")]
    if len(rows) < 3:
        return None
    t, p = [float(r["t_s"]) for r in rows], [float(r["gpu0_power_w"]) for r in rows]
    integrated = sum((t[i + 1] - t[i]) * (p[i + 1] + p[i]) / 2 for i in range(len(t) - 1))
    return (float(rows[-1]["gpu0_energy_j"]) - float(rows[0]["gpu0_energy_j"])) / integrated


def compile_sweep(dev: torch.device) -> list:
    """4 compiled jobs in one process (batch 32…256): each compiled (tag), compile time > 0; on a
    GPU also 0 < MFU < 1, energy > 0 and counter ≈ integrated power within 5 %. The CPU uses the
    aot_eager backend (dynamo's cache is what is checked; inductor's CPU code generation would
    take minutes on a small machine)."""
    cwd = Path(tempfile.mkdtemp(prefix="selfcheck-compile-"))
    model = "model=cnn10 dataset.shape=[3,32,32]" if dev.type == "cuda" else "model=mlp dataset.shape=[1,8,8]"
    n = 50000 if dev.type == "cuda" else 2048  # GPU: epochs long enough (~1 s) for exact energy edges
    args = ["-m", *model.split(), "dataset=synthetic", f"dataset.train_size={n}", "dataset.test_size=256",
            "batch=32,64,128,256", "epochs=2", "compile=true", f"device={'cuda' if dev.type == 'cuda' else 'cpu'}",
            "telemetry.interval_s=0.2", "telemetry.figure=false"]
    proc = cli(args, cwd, None if dev.type == "cuda" else {"SWEEPS_COMPILE_BACKEND": "aot_eager"})
    if proc.returncode != 0:
        return [row("compile: 4-job sweep in one process", False, (proc.stderr.strip().splitlines() or ["?"])[-1][:200])]
    runs, client = jobs(cwd)
    states = [(r.data.tags.get("outcome"), r.data.tags.get("compiled"), r.data.metrics.get("time/compile_s", 0)) for r in runs]
    out = [row("compile: 4-job sweep in one process", len(runs) == 4 and all(o == "ok" and c == "true" and s > 0
               for o, c, s in states), "; ".join(f"{o}, compiled={c}, {s:.1f} s" for o, c, s in states))]
    if dev.type == "cuda":
        mfu = [r.data.metrics.get("perf/mfu", 0) for r in runs]
        energy = [r.data.metrics.get("energy/train_j", 0) for r in runs]
        ratio = [_energy_vs_power(client, r) for r in runs]
        out += [row("compile sweep: 0 < MFU < 1", all(0 < m < 1 for m in mfu), ", ".join(f"{m:.3f}" for m in mfu)),
                row("compile sweep: energy > 0, counter ≈ ∫power (5 %)", all(e > 0 for e in energy) and
                    all(q is not None and abs(q - 1) <= 0.05 for q in ratio),
                    ", ".join(f"{e:.0f} J ({'?' if q is None else f'{q:.3f}'})" for e, q in zip(energy, ratio)))]
    return out


def max_batch_twice(dev: torch.device) -> list:
    """``task=max_batch`` twice (repeat=0,1): both searches end ``exact`` within 0.5 % of each
    other. Not to the example: near the boundary whether a batch fits also depends on cuDNN's
    workspace choices and the allocator's state (an H100 gave 25,680 and 25,664, 0.06 % apart)."""
    cwd = Path(tempfile.mkdtemp(prefix="selfcheck-max-batch-"))
    proc = cli(["-m", "task=max_batch", "model=cnn10", "dataset=synthetic", "dataset.shape=[3,32,32]",
                       "dataset.train_size=1024", "dataset.test_size=256", "repeat=0,1", "device=cuda",
                       "max_batch.start=256", "telemetry.figure=false"], cwd)
    runs = jobs(cwd)[0] if proc.returncode == 0 else []
    found = [(r.data.metrics.get("mem/max_batch"), r.data.tags.get("max_batch.bound")) for r in runs]
    same = len(found) == 2 and all(b == "exact" and n for n, b in found) and abs(found[0][0] / found[1][0] - 1) <= 0.005
    return [row("max_batch: the same boundary twice (0.5 %)", same,
                str(found) if found else (proc.stderr.strip().splitlines() or ["?"])[-1][:200])]


def two_gpus() -> list:
    """Pool exclusivity (4 jobs, 2 at a time: jobs that overlap in time never share a GPU), a
    2-GPU DDP job ok, an injected OOM on rank 1 ending oom in < 60 s."""
    cwd = Path(tempfile.mkdtemp(prefix="selfcheck-2gpu-"))
    tiny = ["model=cnn10", "dataset=synthetic", "dataset.shape=[3,32,32]", "dataset.train_size=4096",
            "dataset.test_size=256", "epochs=2", "telemetry.figure=false"]
    for sub in ("pool", "ddp", "oom"):  # each command's own ./mlruns
        (cwd / sub).mkdir()
    proc = cli(["-m", "hydra/launcher=gpu_pool", "hydra.launcher.n_jobs=2", "batch=64,128,256,512",
                       "device=cuda", *tiny], cwd / "pool")
    runs = jobs(cwd / "pool")[0] if proc.returncode == 0 else []
    spans = [(r.info.start_time, r.info.end_time, r.data.params.get("device.index")) for r in runs]
    clash = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1] and a[2] == b[2]]
    out = [row("2 GPUs: pool jobs never share a GPU", len(runs) == 4 and not clash and {s[2] for s in spans} == {"0", "1"},
               f"device.index {[s[2] for s in spans]}, {len(clash)} overlapping on one GPU")]
    proc = cli(["device=ddp", "device.gpus=2", "batch=256", *tiny], cwd / "ddp")
    ddp = jobs(cwd / "ddp")[0] if (cwd / "ddp" / "mlruns").exists() else []
    out.append(row("2 GPUs: DDP job ok", [r.data.tags.get("outcome") for r in ddp] == ["ok"], f"exit {proc.returncode}"))
    t = time.monotonic()
    proc = cli(["device=ddp", "device.gpus=2", "batch=256", *tiny, "model=oom_on_rank",
                       f"hydra.searchpath=[file://{REPO / 'tests' / 'conf'}]"], cwd / "oom")
    took, oom = time.monotonic() - t, jobs(cwd / "oom")[0] if (cwd / "oom" / "mlruns").exists() else []
    out.append(row("2 GPUs: OOM on rank 1 ends oom < 60 s", [r.data.tags.get("outcome") for r in oom] == ["oom"] and took < 60,
                   f"{took:.0f} s (whole CLI process)"))
    return out
