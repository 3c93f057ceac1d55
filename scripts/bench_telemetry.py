#!/usr/bin/env python
"""What the telemetry sampler costs a training step. Prints its figures; asserts nothing.

    python scripts/bench_telemetry.py [--seconds 40] [--interval 1.0]

1. One sample's cost (median of many, µs): host only (psutil), and host + one GPU through NVML —
   the real driver where NVML works, else the fake NVML of the tests (then only the Python side of
   a sample is measured, not the driver's own latency).
2. The sampler's duty at ``--interval``: one sample's cost ÷ the interval, the share of one core
   the sampler thread takes — the upper bound of what it can take from the training thread.
3. An A/B on a real training step — study 4's MLP (784-1000-1000-10, batch 100, SGD) on this
   machine's device — without the sampler, with it at ``--interval`` and at a 0.01 s stress
   interval, in interleaved rounds (order rotated each round); each configuration's mean step
   time ÷ the same round's time without the sampler, median and quartiles over the rounds.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fake NVML

from sweeps.telemetry import nvml as telemetry_nvml  # noqa: E402
from sweeps.provenance.machine import fingerprint  # noqa: E402
from sweeps.telemetry.sampler import Telemetry
from sweeps.telemetry.nvml import gpu_ids  # noqa: E402


def nvml_setup(device: torch.device) -> tuple[list, object, str]:
    """(GPU ids, NVML module, description): the real NVML for a CUDA device, else the fake."""
    if device.type == "cuda" and not telemetry_nvml.nvml_problem():
        return gpu_ids(device), None, "real NVML"
    from fake_nvml import FakeNVML

    return ["GPU-fake-0"], FakeNVML(time.monotonic), "fake NVML (no GPU here: Python-side cost only)"


def sample_cost_us(interval: float, gpus: list, nvml, n: int) -> float:
    tel = Telemetry(interval, gpus, nvml=nvml).start()
    try:
        costs = []
        for _ in range(n):
            t0 = time.perf_counter()
            tel.sample()
            costs.append(time.perf_counter() - t0)
    finally:
        tel.stop()
    return statistics.median(costs) * 1e6


def step_ms(model, opt, x, y, steps: int, device: torch.device) -> float:
    """Mean time of ``steps`` training steps (ms), the device synchronized at both ends."""
    loss_fn = nn.CrossEntropyLoss()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=40, help="length of the A/B (s)")
    ap.add_argument("--interval", type=float, default=1.0, help="sampler interval under test (s)")
    ap.add_argument("--samples", type=int, default=2000, help="samples timed for the per-sample cost")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpus, nvml, how = nvml_setup(device)
    fp = fingerprint()
    print(f"machine: {fp['cpu']['model']}, {fp['cpu']['cores']} cores, {fp['ram_gb']} GB RAM, "
          f"GPUs: {', '.join(g['name'] for g in fp['gpus']) or 'none'}; torch {fp['torch']}, "
          f"python {platform.python_version()}; device {device}; GPU path: {how}")

    host_us = sample_cost_us(args.interval, [], None, args.samples)
    gpu_us = sample_cost_us(args.interval, gpus, nvml, args.samples)
    print(f"one sample: host only {host_us:.0f} µs; host + 1 GPU ({how.split(' (')[0]}) {gpu_us:.0f} µs")
    print(f"sampler duty at {args.interval:g} s: host only {host_us / 1e4 / args.interval:.4f} %, "
          f"host + 1 GPU {gpu_us / 1e4 / args.interval:.4f} % of one core")

    torch.manual_seed(0)
    torch.set_num_threads(torch.get_num_threads())
    model = nn.Sequential(nn.Linear(784, 1000), nn.ReLU(), nn.Linear(1000, 1000), nn.ReLU(),
                          nn.Linear(1000, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(100, 784, device=device), torch.randint(0, 10, (100,), device=device)
    step_ms(model, opt, x, y, 20, device)  # burn-in: allocator, thread pools, clocks
    per = step_ms(model, opt, x, y, 20, device)
    configs = {"off": None, f"on, every {args.interval:g} s": args.interval, "on, every 0.01 s (stress)": 0.01}
    block_s = 0.5  # one configuration's share of a round
    steps = max(10, int(block_s * 1e3 / per))
    rounds = max(5, int(args.seconds / (block_s * len(configs))))
    times: dict[str, list[float]] = {k: [] for k in configs}
    for r in range(rounds):
        order = list(configs)[r % len(configs):] + list(configs)[:r % len(configs)]  # rotate: no order bias
        for name in order:
            tel = Telemetry(configs[name], gpus, nvml=nvml).start() if configs[name] else None
            try:
                times[name].append(step_ms(model, opt, x, y, steps, device))
            finally:
                if tel:
                    tel.stop()
    print(f"training step ({device}, MLP 784-1000-1000-10, batch 100), {rounds} rounds × {steps} steps; "
          "change vs off: median of per-round ratios [quartiles]:")
    for name, ts in times.items():
        ratios = sorted(100 * (t / off - 1) for t, off in zip(ts, times["off"]))
        q1, q2, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios * 3)
        print(f"  sampler {name:<28} {statistics.median(ts):8.3f} ms/step  {q2:+6.2f} %  [{q1:+.2f}, {q3:+.2f}]")
    bound = gpu_us / 1e4 / args.interval
    print(f"overhead at {args.interval:g} s: bound from the sampler's duty {bound:.4f} % of a step "
          f"({'under' if bound < 0.5 else 'OVER'} 0.5 %); A/B medians within their quartiles are noise")

if __name__ == "__main__":
    main()
