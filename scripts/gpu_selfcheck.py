#!/usr/bin/env python
"""Does sweeps measure right on this machine? One command on a new GPU machine (issue #15):

    python scripts/gpu_selfcheck.py [--out docs/gpu_selfcheck.md] [--quick]

prints a PASS / FAIL / SKIP table and writes it as markdown with the hardware, the versions and
the date. The checks (thresholds and why: ``scripts/selfcheck_checks.py``, ``selfcheck_sweeps.py``):

- environment: the NVIDIA driver is new enough for torch's CUDA build; every CUDA device is found
  in NVML by its UUID (the telemetry and GPU-pool identity); the GPU's datasheet peak is known (MFU);
  the compilers inductor (C++) and Triton (C) run and Python headers, for ``compile=true``;
- precision: TF32 really off under ``precision=fp32``, on under ``tf32``, off again after;
- timing truth: a forward that sleeps 20 ms reads 20 ± 2 ms; Σ phases within 5 % of the epoch; a
  10-ms data delay shows in ``phase/data_ms``; host syncs per epoch do not grow with steps; the
  forward check again on ``cuda:1`` with ``cuda:0`` current, where there are two GPUs;
- ResNet-50 inference at batch 128: CUDA events ≈ synchronized clock, naive clock < 50 %;
- OOM recovery: memory back to baseline, throughput ≥ 0.98 of a fresh process;
- a 4-job CLI sweep with ``compile=true`` in one process: every job compiled, MFU, energy;
- ``task=max_batch`` finds the same boundary twice (within 0.5 %);
- two GPUs: pool exclusivity, a DDP job ok, an injected OOM on rank 1 ends ``oom`` in < 60 s;
- finally ``pytest -m gpu``.

Without a GPU it says so in one line, runs the CPU parts (timing truth with a host-sleep model,
Σ phases, data delay, a 4-job compiled sweep, the compiler check) and exits 0 unless one FAILs.
Exit status: 1 when any check FAILs, else 0.
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

import torch

import selfcheck_checks as checks
import selfcheck_sweeps as sweeps_checks
from sweeps.errors import brief
from sweeps.placement.device import compiler_problem, driver_problem
from sweeps.telemetry import nvml
from sweeps.provenance.machine import fingerprint

row = checks.row


def environment(gpus: int) -> list:
    from sweeps.train.flops import peak_flops

    missing = compiler_problem()
    out = [row("env: compilers and Python headers (compile=true)", not missing, missing or "found")]
    if not gpus:
        return out
    problem = driver_problem()
    out.append(row("env: driver vs torch's CUDA build", not problem, problem or f"CUDA {torch.version.cuda} ok"))
    found = []
    n = nvml.pynvml
    n.nvmlInit()
    try:
        for i in range(gpus):
            uuid = nvml.device_uuid(i)
            try:
                name = n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByUUID(uuid))
                found.append(f"cuda:{i} {uuid} = {name.decode() if isinstance(name, bytes) else name}")
            except Exception as e:
                found.append(f"cuda:{i} {uuid} NOT FOUND ({type(e).__name__})")
    finally:
        n.nvmlShutdown()
    out.append(row("env: CUDA devices found in NVML by UUID", not any("NOT" in f for f in found), "; ".join(found)))
    peak, about = peak_flops(torch.device("cuda", 0), "bf16")
    return out + [row("env: datasheet peak known (MFU)", peak is not None, about)]


def pytest_gpu() -> list:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"],
                          cwd=checks.REPO, capture_output=True, text=True)
    last = (proc.stdout.strip().splitlines() or ["?"])[-1]
    return [row("pytest -m gpu", proc.returncode == 0, last[:200])]


def run_all(quick: bool) -> tuple[list, int]:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    dev = torch.device("cuda", 0) if gpus else torch.device("cpu")
    steps = [("environment", lambda: environment(gpus)), ("timing", lambda: checks.timing_truth(dev)),
             ("compile sweep", lambda: sweeps_checks.compile_sweep(dev))]
    if gpus:
        steps[2:2] = [("precision", lambda: checks.precision(dev)), ("syncs", lambda: checks.host_syncs(dev)),
                      ("inference", lambda: checks.inference_methods(dev)), ("oom", lambda: checks.oom_recovery(dev))]
        steps += [("max_batch", lambda: sweeps_checks.max_batch_twice(dev))]
        if gpus >= 2:
            steps += [("timing cuda:1", lambda: checks.timing_truth(torch.device("cuda", 1))), ("2 GPUs", sweeps_checks.two_gpus)]
        if not quick:
            steps += [("pytest", pytest_gpu)]
    rows = []
    for name, step in steps:
        t = time.monotonic()
        try:
            got = step()
        except Exception as e:  # a check that crashes is a FAIL with its one line, the others still run
            got = [row(name, False, f"{type(e).__name__}: {brief(e)}")]
        rows += [(c, s, f"{d} [{time.monotonic() - t:.0f} s]" if i == len(got) - 1 else d) for i, (c, s, d) in enumerate(got)]
        print(*(f"{s:4}  {c}: {d}" for c, s, d in got), sep="\n", flush=True)
    if not gpus:
        rows += [(c, "SKIP", "no GPU here") for c in ("env: driver, NVML ↔ CUDA by UUID, datasheet peak",
                 "precision: TF32 off/on/off", "timing: host syncs per epoch", "inference: ResNet-50 timing methods",
                 "oom recovery", "compile sweep: MFU, energy", "max_batch twice", "pytest -m gpu")]
    if gpus < 2:
        rows.append(("two-GPU checks (timing on cuda:1, pool, DDP, OOM on rank 1)", "SKIP", f"{gpus} GPU(s) here"))
    return rows, gpus


def table(rows: list) -> str:
    lines = ["| check | result | detail |", "|---|---|---|"]
    return "\n".join(lines + [f"| {c} | {s} | {d.replace('|', '/')} |" for c, s, d in rows])


def markdown(rows: list, started: datetime.datetime) -> str:
    fp = fingerprint()
    gpus = "; ".join(f"{g['name']} ({g['memory_gb']} GB, cc {g['compute_capability']})" for g in fp["gpus"]) or "none"
    versions = {"torch": torch.__version__, "CUDA (torch)": torch.version.cuda, "NVIDIA driver": fp.get("nvidia_driver"),
                "cuDNN": torch.backends.cudnn.version(), "python": sys.version.split()[0], "sweeps commit": fp.get("git_commit")}
    return "\n".join([f"# GPU self-check — {fp['host']}", "",
                      f"Run {started:%Y-%m-%d %H:%M} UTC with `python scripts/gpu_selfcheck.py`.", "",
                      f"- CPU: {fp['cpu']['model']} ({fp['cpu']['cores']} cores), RAM {fp['ram_gb']} GB",
                      f"- GPUs: {gpus}", *(f"- {k}: {v}" for k, v in versions.items()), "", table(rows), ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=checks.REPO / "docs" / "gpu_selfcheck.md", help="markdown results")
    parser.add_argument("--quick", action="store_true", help="leave out pytest -m gpu")
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    if not torch.cuda.is_available():
        print(f"gpu_selfcheck: no CUDA GPU here ({driver_problem() or 'torch.cuda.is_available() is False'}): "
              "running the CPU parts only")
    rows, _ = run_all(args.quick)
    print("\n" + table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(rows, started), encoding="utf-8")
    print(f"\nwritten: {args.out}")
    return 1 if any(s == "FAIL" for _, s, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
