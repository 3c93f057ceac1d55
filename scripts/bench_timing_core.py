#!/usr/bin/env python
"""What sweeps' timing core costs, and whether its phases account for the epoch. Prints its
figures; asserts nothing.

    python scripts/bench_timing_core.py [--rounds 36] [--device cpu|cuda] [--configs mlp,tabular]

1. Overhead: one training epoch through sweeps (``Trainer.train_epoch``: the phase timer's four
   marks per step, the progress bar, the disabled GradScaler and autocast of fp32, on-device
   loss/accuracy sums) vs a bare hand-written PyTorch loop doing the same work (forward, loss,
   backward, ``step``, ``zero_grad(set_to_none=True)``, the same on-device sums) on the same
   model, data (device-resident batches, identical order) and device. Both epochs are timed as
   ``Trainer.fit`` times them: wall clock, device synchronized at both edges. Rounds interleave
   the two (order alternating); the ratio sweeps ÷ bare is given per round (median, quartiles)
   and over all rounds (Σ sweeps ÷ Σ bare). Targets: ≤ 1.02 on a CPU, ≤ 1.01 on a GPU. A second,
   identical bare loop timed in the same rounds gives the noise floor (bare ÷ bare); rounds run
   the three epochs in all six orders in turn.
2. Accounting: Σ phase times (``phase/sum_s``) ÷ epoch wall time (``time/epoch_s``) of the
   sweeps epochs. Target: within [0.97, 1.00].
3. Data wait: ``phase/data_ms`` of an epoch on CIFAR-shaped images served by the DataLoader
   (torchvision's per-image PIL crop/flip/ToTensor/Normalize, as ``dataset=cifar10``) vs the
   device loader (``dataset.loader=device``), next to ``phase/forward_ms``.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets

from sweeps.data.builtin import CIFAR10_STATS, DataSpec, _image_transforms
from sweeps.data.device_loader import DeviceBatches, Resident, resident
from sweeps.provenance.machine import fingerprint
from sweeps.models import MLP
from sweeps.train.timing import wall_clock
from sweeps.train.loop import Trainer

# name: (in_shape, hidden sizes, classes, batch, examples per epoch)
CONFIGS = {
    "mlp": ((1, 28, 28), [1000, 1000], 10, 100, 6000),  # study 4: 784-1000-1000-10, batch 100
    "tabular": ((13,), [16, 32, 16], 1, 32, 4096),  # study 5's regressor at batch 32: tiny steps
}


def bare_epoch(model, opt, loader, regression: bool, dev) -> float:
    """The hand-written loop: same work as a sweeps step, nothing else."""
    loss_fn = nn.MSELoss() if regression else nn.CrossEntropyLoss()
    model.train()
    loss_sum = torch.zeros((), device=dev)
    correct = torch.zeros((), device=dev, dtype=torch.long)
    for x, y in loader:
        out = model(x)
        loss = loss_fn(out, y)
        loss_sum += loss.detach() * len(x)
        if not regression:
            correct += (out.detach().argmax(1) == y).sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss_sum.item() + correct.item()


def overhead(name: str, rounds: int, dev: torch.device) -> None:
    in_shape, hidden, classes, batch, n = CONFIGS[name]
    regression = classes == 1
    spec = DataSpec(in_shape, classes, "regression" if regression else "classification")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, *in_shape, generator=g)
    y = torch.randn(n, 1, generator=g) if regression else torch.randint(0, classes, (n,), generator=g)
    torch.manual_seed(0)
    models = [MLP(in_shape, classes, hidden=hidden).to(dev) for _ in range(3)]  # sweeps, bare, bare again
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in models]
    loaders = [DeviceBatches(Resident(x, y), batch, dev, shuffle=True, seed=1) for _ in range(3)]
    trainer = Trainer(models[0], spec, opts[0], None, dev, progress_after_s=2.0)

    def epoch(which: int) -> dict:
        if which == 0:
            return trainer.train_epoch(loaders[0], "sweeps")
        bare_epoch(models[which], opts[which], loaders[which], regression, dev)
        return {}

    for _ in range(2):  # warm-up: allocator, kernels, thread pools
        for which in range(3):
            epoch(which)
    times: list[list[float]] = [[], [], []]
    accounting = []
    orders = [(0, 1, 2), (1, 2, 0), (2, 0, 1), (0, 2, 1), (1, 0, 2), (2, 1, 0)]
    for r in range(rounds):
        for which in orders[r % len(orders)]:  # every order, so no position is favoured
            with wall_clock(dev) as clock:
                rec = epoch(which)
            times[which].append(clock["s"])
            if which == 0:
                accounting.append(rec["phase/sum_s"] / clock["s"])
    sweeps_s, bare_s, again_s = times

    def ratio(a: list[float], b: list[float]) -> str:
        r = [p / q for p, q in zip(a, b)]
        q1, med, q3 = statistics.quantiles(r, n=4) if len(r) > 1 else (r[0],) * 3
        return f"median {med:.4f} [quartiles {q1:.4f}, {q3:.4f}], Σ/Σ {sum(a) / sum(b):.4f}"

    steps = -(-n // batch)
    per_step_us = (statistics.median(sweeps_s) - statistics.median(bare_s)) / steps * 1e6
    print(f"\n[{name}] {'×'.join(map(str, in_shape))} → {hidden} → {classes}, batch {batch}, {steps} steps/epoch, "
          f"{rounds} rounds on {dev}")
    print(f"  epoch medians: sweeps {statistics.median(sweeps_s) * 1e3:.1f} ms, bare {statistics.median(bare_s) * 1e3:.1f} ms "
          f"({statistics.median(bare_s) / steps * 1e3:.3f} ms per bare step; difference {per_step_us:+.1f} µs per step)")
    print(f"  1. overhead sweeps / bare: {ratio(sweeps_s, bare_s)}")
    print(f"     noise floor, bare / bare (a second, identical bare loop): {ratio(again_s, bare_s)}")
    print(f"  2. accounting Σ phases / epoch wall: median {statistics.median(accounting):.4f} "
          f"[min {min(accounting):.4f}, max {max(accounting):.4f}]")


class RandomCIFAR10(datasets.CIFAR10):
    """CIFAR-10's reader fed random pixels instead of files: the same per-image work (PIL image,
    then the transforms) as ``dataset=cifar10``, on machines without the dataset."""

    def __init__(self, n: int, transform, seed: int = 0):  # noqa: super().__init__ would read files
        rng = np.random.default_rng(seed)
        self.data = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        self.targets = [int(t) for t in rng.integers(0, 10, n)]
        self.transform, self.target_transform, self.train = transform, None, True


def data_wait(dev: torch.device, n: int = 2048, batch: int = 128) -> None:
    spec = DataSpec((3, 32, 32), 10)
    train_tf, _ = _image_transforms(CIFAR10_STATS, True, 32)
    ds = RandomCIFAR10(n, train_tf)
    host = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=0, pin_memory=dev.type == "cuda")
    device = DeviceBatches(resident(ds), batch, dev, shuffle=True, augment=True)
    print(f"\n[data wait] CIFAR-shaped uint8 images with crop+flip, batch {batch}, {n} images, MLP 3072-1000-1000-10, "
          f"{dev}, DataLoader num_workers=0")
    for label, loader in (("DataLoader", host), ("device loader", device)):
        torch.manual_seed(0)
        model = MLP(spec.in_shape, 10).to(dev)
        trainer = Trainer(model, spec, torch.optim.SGD(model.parameters(), lr=0.01), None, dev)
        trainer.train_epoch(loader, "warm-up")
        rec = trainer.train_epoch(loader, label)
        print(f"  {label:14s} phase/data_ms {rec['phase/data_ms']:8.3f}   phase/forward_ms {rec['phase/forward_ms']:7.3f}"
              f"   Σ phases {rec['phase/sum_s']:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=36)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--configs", default="mlp,tabular", help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--no-data-wait", action="store_true", help="skip part 3")
    args = ap.parse_args()
    dev = torch.device(args.device)
    fp = fingerprint()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {fp['cpu']['model']} ({fp['cpu']['cores']} logical cores), "
          f"{fp['ram_gb']:.1f} GB, GPUs: {', '.join(g.get('name', '?') for g in fp['gpus']) or 'none'}; "
          f"Python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.configs.split(","):
        overhead(name, args.rounds, dev)
    if not args.no_data_wait:
        data_wait(dev)


if __name__ == "__main__":
    main()
