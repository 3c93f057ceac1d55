#!/usr/bin/env python
"""Study 1's models on a GPU: epoch time, throughput, data wait and MFU at batch 128…2048, fp32 vs
bf16, device-resident data vs the DataLoader. Prints its figures; asserts nothing.

    python scripts/bench_gpu.py                                   # everything below (~6 min on an H100)
    python scripts/bench_gpu.py --models wrn28_10 --precisions bf16 --batches 512 --compile
    python scripts/bench_gpu.py --cifar-root data --train-size 50000 --out bench_gpu.json

Every configuration trains ``--epochs`` epochs (default 2) of ``--train-size`` CIFAR-10 images
(real ones under ``--cifar-root/cifar-10-batches-py`` when present, else random pixels through
the same torchvision reader and transforms: crop with padding 4 + flip, ToTensor, Normalize)
through sweeps' own Trainer — SGD momentum 0.9, weight decay 5e-4, lr 0.1 × batch / 128, fused
optimizer, channels_last (``--no-channels-last`` to turn off) — and reports the last epoch:
wall time (device synchronized at both edges), examples/s, ``phase/data_ms`` (how long the GPU
waited for each batch), achieved TFLOP/s and MFU (FLOPs per example counted by FlopCounterMode,
peak from sweeps.train.flops.PEAK_TFLOPS), peak memory. A batch that does not fit shows ``OOM``.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from torch.utils.data import Subset
from torchvision import datasets

from bench_timing_core import RandomCIFAR10  # noqa: E402 (scripts/ is on sys.path when run as a script)
from sweeps.data.builtin import CIFAR10_STATS, DataSpec, _image_transforms
from sweeps.data.loaders import make_loaders
from sweeps.train.precision import apply_precision
from sweeps.data.device_loader import device_loaders
from sweeps.provenance.machine import fingerprint
from sweeps.train.flops import peak_flops, training_flops_per_example
from sweeps.models import CNN10, WideResNet
from sweeps.train.memory import is_oom, release_memory
from sweeps.train.optim import optimizer_kwargs
from sweeps.train.speed import compile_and_warm, use_channels_last
from sweeps.train.timing import wall_clock
from sweeps.train.loop import Trainer

MODELS = {"cnn10": lambda: CNN10((3, 32, 32), 10), "wrn28_10": lambda: WideResNet((3, 32, 32), 10)}
SPEC = DataSpec((3, 32, 32), 10)


def cifar(root: Path | None, n: int, seed: int = 0):
    """(train subset of ``n``, 1,000 test images, where they came from)."""
    train_tf, test_tf = _image_transforms(CIFAR10_STATS, True, 32)
    if root is not None and (root / "cifar-10-batches-py").is_dir():
        train = datasets.CIFAR10(root, train=True, transform=train_tf)
        test = datasets.CIFAR10(root, train=False, transform=test_tf)
        pick = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:n].sort().values
        return Subset(train, pick.tolist()), Subset(test, list(range(1000))), "CIFAR-10"
    return RandomCIFAR10(n, train_tf, seed), RandomCIFAR10(1000, test_tf, seed + 1), "random pixels"


def one(model_name: str, precision: str, loader: str, batch: int, data, args, dev: torch.device) -> dict:
    from omegaconf import OmegaConf

    train, test = data
    prec = apply_precision(OmegaConf.create({"name": precision}), dev)
    torch.manual_seed(0)
    model = MODELS[model_name]().to(dev)
    flops = training_flops_per_example(model, SPEC)
    channels_last = args.channels_last and use_channels_last(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * batch / 128, momentum=0.9, weight_decay=5e-4,
                          **optimizer_kwargs("auto", dev, prec.scaled))
    trainer = Trainer(model, SPEC, opt, None, dev, progress_after_s=float("inf"), precision=prec,
                      channels_last=channels_last)
    if loader == "device":
        loaders = device_loaders(train, test, batch, dev, augment=True, seed=0)
    else:
        loaders = make_loaders(train, test, batch, dev, args.workers, seed=0)
    compile_s = compile_and_warm(trainer, *loaders) if args.compile else None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    for epoch in range(1, args.epochs + 1):
        with wall_clock(dev) as clock:
            rec = trainer.train_epoch(loaders[0], f"epoch {epoch}")
    peak, _ = peak_flops(dev, precision)
    achieved = flops * rec["samples"] / clock["s"]
    return {"epoch_s": clock["s"], "samples_per_s": rec["samples"] / clock["s"], "data_ms": rec["phase/data_ms"],
            "step_ms": rec["phase/sum_s"] / max(rec["steps"], 1) * 1e3, "tflops": achieved / 1e12,
            "mfu": achieved / peak if peak else None, "compile_s": compile_s,
            "peak_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="cnn10,wrn28_10")
    ap.add_argument("--batches", default="128,256,512,1024,2048")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--loaders", default="device,dataloader")
    ap.add_argument("--train-size", type=int, default=10_000, help="training images per epoch")
    ap.add_argument("--epochs", type=int, default=2, help="the last one is reported")
    ap.add_argument("--workers", type=int, default=8, help="DataLoader workers")
    ap.add_argument("--cifar-root", type=Path, default=None)
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    ap.add_argument("--compile", action="store_true", help="torch.compile (warm-up outside the timed epochs)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, help="also write the results as JSON")
    args = ap.parse_args()
    dev = torch.device(args.device)
    fp = fingerprint()
    gpus = ", ".join(g.get("name", "?") for g in fp["gpus"]) or "none"
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  GPUs: {gpus}; driver {fp.get('nvidia_driver')}, CUDA {fp.get('cuda_runtime')}, "
          f"cuDNN {fp.get('cudnn')}; {fp['cpu']['model']} ({fp['cpu']['cores']} cores); Python {platform.python_version()}, "
          f"torch {torch.__version__}")
    train, test, source = cifar(args.cifar_root, args.train_size)
    print(f"data: {source}, {args.train_size} training images per epoch; epoch {args.epochs} reported; "
          f"channels_last {args.channels_last}, compile {args.compile}\n")
    header = (f"{'model':9} {'prec':5} {'loader':10} {'batch':>5} {'epoch s':>8} {'img/s':>8} {'data ms':>8} "
              f"{'step ms':>8} {'TFLOP/s':>8} {'MFU':>6} {'peak MB':>8}")
    print(header)
    print("-" * len(header))
    results = []
    for model_name in args.models.split(","):
        for precision in args.precisions.split(","):
            for loader in args.loaders.split(","):
                for batch in map(int, args.batches.split(",")):
                    row = {"model": model_name, "precision": precision, "loader": loader, "batch": batch}
                    try:
                        row.update(one(model_name, precision, loader, batch, (train, test), args, dev))
                    except Exception as e:  # noqa: BLE001 — an OOM is a result
                        if not is_oom(e):
                            raise
                        row["oom"] = True
                    release_memory(dev)  # out of the except block: the failed frames are gone
                    results.append(row)
                    if row.get("oom"):
                        print(f"{model_name:9} {precision:5} {loader:10} {batch:>5} {'OOM':>8}", flush=True)
                        continue
                    mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "-"
                    peak = f"{row['peak_mb']:.0f}" if row["peak_mb"] is not None else "-"
                    print(f"{model_name:9} {precision:5} {loader:10} {batch:>5} {row['epoch_s']:8.2f} "
                          f"{row['samples_per_s']:8.0f} {row['data_ms']:8.2f} {row['step_ms']:8.2f} "
                          f"{row['tflops']:8.1f} {mfu:>6} {peak:>8}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"gpus": gpus, "torch": torch.__version__, "data": source,
                                        "args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))
        print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
