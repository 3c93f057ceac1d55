"""The checks of ``scripts/gpu_selfcheck.py``: each returns rows ``(check, PASS|FAIL|SKIP, detail)``.

They use sweeps' own code — :class:`~sweeps.train.loop.Trainer` and its phase timer,
:func:`~sweeps.tasks.inference.time_forward`; ``selfcheck_sweeps.py`` runs the CLI — so a PASS is a
statement about the figures a sweep logs. Thresholds come from issue #15: forward of a
20-ms sleep reads 20 ± 2 ms; Σ phases within 5 % of the epoch; CUDA events ≈ synchronized host
clock within 5 % and the naive clock < 50 % of them (ResNet-50 inference, batch 128); after an
OOM, throughput ≥ 0.98 of a fresh process and memory back to its baseline; energy counter ≈
integrated power within 5 %; 0 < MFU < 1; a data-parallel OOM on rank 1 ends ``oom`` in < 60 s.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from sweeps.data import DataSpec
from sweeps.train.loop import Trainer
from sweeps.train.memory import is_oom, release_memory, warm_cublas

REPO = Path(__file__).resolve().parents[1]
SPEC = DataSpec((16,), 4)
FORWARD_MS, DATA_MS = 20.0, 10.0


def row(name: str, ok: bool, detail: str) -> tuple[str, str, str]:
    return name, "PASS" if ok else "FAIL", detail


class SleepForward(nn.Module):
    """A linear layer whose forward first sleeps :data:`FORWARD_MS`: ``torch.cuda._sleep`` (a GPU
    spin of ``cycles`` clock cycles, calibrated by :func:`sleep_cycles`) on CUDA, the host's sleep on a CPU."""

    def __init__(self, cycles: int = 0):
        super().__init__()
        self.fc, self.cycles = nn.Linear(16, 4), cycles
        self.slept_ms: list[float] = []  # CPU: what the host really slept (the OS may oversleep)

    def forward(self, x):
        if x.is_cuda:
            with torch.cuda.device(x.device):  # on x's stream, where the trainer's events are (not cuda:0's)
                torch.cuda._sleep(self.cycles)
        else:
            t = time.perf_counter()
            time.sleep(FORWARD_MS / 1e3)
            self.slept_ms.append((time.perf_counter() - t) * 1e3)
        return self.fc(x)


def sleep_cycles(dev: torch.device, ms: float = FORWARD_MS) -> int:
    """Cycles of ``torch.cuda._sleep`` that take ``ms`` on ``dev``, measured with the host clock
    and a synchronize (not with the events under test), over a 200-ms spin."""
    n = int(torch.cuda.get_device_properties(dev).clock_rate * 200)  # kHz × 200 ms: ~200 ms at boost clock
    with torch.cuda.device(dev):
        torch.cuda._sleep(n // 10)
        torch.cuda.synchronize(dev)
        t = time.perf_counter()
        torch.cuda._sleep(n)
        torch.cuda.synchronize(dev)
    return int(n * ms / ((time.perf_counter() - t) * 1e3))


class Delayed(list):
    """Batches that keep the trainer waiting ``delay_s`` each (a slow input pipeline)."""

    def __init__(self, batches, delay_s: float):
        super().__init__(batches)
        self.delay_s = delay_s

    def __iter__(self):
        for b in super().__iter__():
            time.sleep(self.delay_s)
            yield b


def _trainer(model: nn.Module, dev: torch.device) -> Trainer:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return Trainer(model.to(dev), SPEC, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0), dev)


def _batches(dev: torch.device, steps: int, batch: int = 32) -> list:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, 16, generator=g).to(dev), torch.randint(0, 4, (batch,), generator=g).to(dev))
            for _ in range(steps)]


def _fit(trainer: Trainer, loader, epochs: int = 2) -> list[dict]:
    records: list[dict] = []
    trainer.fit(loader, _batches(trainer.device, 1), epochs, records.append)
    return records


def timing_truth(dev: torch.device) -> list:
    """Forward of a 20-ms sleep reads 20 ± 2 ms (on a CPU: the sleep the host really took, ± 2 ms,
    one torch thread: a busy host oversleeps, and that is not the timer's error); Σ phases within
    5 % of the epoch; a 10-ms data delay shows in phase/data_ms (on a tiny model, so the device
    queue cannot hide it)."""
    where, threads = f" ({dev})", torch.get_num_threads()
    model = SleepForward(sleep_cycles(dev) if dev.type == "cuda" else 0)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    try:
        rec = _fit(_trainer(model, dev), _batches(dev, 10))[-1]
        delayed = _fit(_trainer(nn.Linear(16, 4), dev), Delayed(_batches(dev, 10), DATA_MS / 1e3))[-1]
    finally:
        torch.set_num_threads(threads)
    fwd, ratio, data = rec["phase/forward_ms"], rec["phase/sum_s"] / rec["time/epoch_s"], delayed["phase/data_ms"]
    truth = statistics.fmean(model.slept_ms[-10:]) if model.slept_ms else FORWARD_MS
    return [row("timing: forward of a 20 ms sleep" + where, abs(fwd - truth) <= 2,
                f"{fwd:.2f} ms" + (f" (host slept {truth:.2f} ms)" if model.slept_ms else "")),
            row("timing: Σ phases / epoch" + where, 0.95 <= ratio <= 1.0 + 1e-9, f"{ratio:.3f}"),
            row("timing: 10 ms data delay in phase/data_ms" + where, DATA_MS * 0.9 <= data <= DATA_MS * 1.5,
                f"{data:.2f} ms (forward {delayed['phase/forward_ms']:.2f} ms)")]


def host_syncs(dev: torch.device) -> list:
    """Host syncs of a training epoch (``torch.cuda.set_sync_debug_mode``) do not grow with steps.
    A first counted epoch is thrown away: on an H100 (torch 2.11) it held one sync more, once per
    process, in ``torch/cuda/__init__.py``."""
    counts = []
    for steps in (5, 5, 20):
        trainer, batches = _trainer(nn.Linear(16, 4), dev), _batches(dev, steps)
        trainer.train_epoch(batches, "warm")
        torch.cuda.synchronize(dev)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                trainer.train_epoch(batches, "count")
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts.append(sum("synchroniz" in str(w.message) for w in seen))
    counts = counts[1:]
    return [row(f"timing: host syncs per epoch, 5 vs 20 steps ({dev})", counts[0] == counts[1], f"{counts[0]} vs {counts[1]}")]


def precision(dev: torch.device) -> list:
    """TF32 off under precision=fp32, on under tf32, and off again after (no leak): error of a
    4096² matmul against fp64 (fp32: ~1e-6 relative; TF32's 10-bit mantissa: ~1e-3)."""
    from omegaconf import OmegaConf

    from sweeps.train.precision import apply_precision

    g = torch.Generator(device=dev).manual_seed(0)
    a, b = (torch.randn(4096, 4096, device=dev, generator=g) for _ in range(2))
    exact = a.double() @ b.double()
    errors = {}
    for name in ("fp32", "tf32", "fp32 after tf32"):
        apply_precision(OmegaConf.create({"name": name.split()[0]}), dev)
        errors[name] = ((a @ b).double() - exact).norm().item() / exact.norm().item()
    ok = errors["fp32"] < 1e-5 and errors["tf32"] > 1e-4 and errors["fp32 after tf32"] < 1e-5
    return [row("precision: TF32 off/on/off (matmul vs fp64)", ok, ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))]


def inference_methods(dev: torch.device) -> list:
    """Seed 002: ResNet-50, batch 128: events ≈ sync within 5 %, naive < 50 % of events."""
    from omegaconf import OmegaConf

    from sweeps.models import resnet50
    from sweeps.tasks.inference import time_forward
    from sweeps.train.precision import apply_precision

    apply_precision(OmegaConf.create({"name": "fp32"}), dev)
    model, x = resnet50((3, 224, 224), 1000).to(dev), torch.randn(128, 3, 224, 224, device=dev)
    med = {m: statistics.median(time_forward(model, x, m, 10, 30)["times_ms"]) for m in ("events", "sync", "naive")}
    ok = abs(med["events"] / med["sync"] - 1) <= 0.05 and med["naive"] < 0.5 * med["events"]
    return [row("inference: events ≈ sync, naive < 50 % (ResNet-50, 128)", ok,
                ", ".join(f"{k} {v:.1f} ms" for k, v in med.items()))]


def throughput(dev: torch.device) -> float:
    """Training samples/s of cnn10 on batch-256 random CIFAR-shaped images (after a warm-up),
    under ``precision=fp32`` in any process: PyTorch's default leaves cuDNN's TF32 on, and on an
    H100 that alone made a fresh process 2.2× faster than one where a job had set fp32."""
    from omegaconf import OmegaConf

    from sweeps.models import CNN10
    from sweeps.train.precision import apply_precision

    apply_precision(OmegaConf.create({"name": "fp32"}), dev)
    model = CNN10((3, 32, 32), 10).to(dev)
    trainer = Trainer(model, DataSpec((3, 32, 32), 10), torch.optim.SGD(model.parameters(), lr=0.1), None, dev)
    batches = [(torch.randn(256, 3, 32, 32, device=dev), torch.randint(0, 10, (256,), device=dev))] * 30
    trainer.train_epoch(batches[:5], "warm")
    torch.cuda.synchronize(dev)
    t = time.perf_counter()
    out = trainer.train_epoch(batches, "timed")
    return out["samples"] / (time.perf_counter() - t)


def oom_recovery(dev: torch.device) -> list:
    """An OOM (WideResNet-28-10 at batch 16384), then: memory back to the baseline, and cnn10's
    throughput ≥ 0.98 of the same measured in a fresh process."""
    from sweeps.models import WideResNet

    code = f"import sys; sys.path.insert(0, {str(REPO / 'scripts')!r}); import selfcheck_checks as c, torch; " \
           f"print(c.throughput(torch.device({str(dev)!r})))"
    fresh = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()[-1])
    warm_cublas(dev)
    release_memory(dev)
    baseline = torch.cuda.memory_allocated(dev)
    oom = False
    try:
        model = WideResNet((3, 32, 32), 10).to(dev)
        model(torch.randn(16384, 3, 32, 32, device=dev)).sum().backward()
    except Exception as e:
        if not is_oom(e):
            raise
        oom = True
    model = None
    release_memory(dev)  # out of the except block: the failed frames are gone
    back = torch.cuda.memory_allocated(dev)
    after = throughput(dev)
    return [row("oom: memory back to baseline", oom and back == baseline, f"OOM {'raised' if oom else 'NOT raised'}; "
                f"{baseline / 2**20:.1f} → {back / 2**20:.1f} MiB"),
            row("oom: next job's throughput / fresh process", after >= 0.98 * fresh,
                f"{after:.0f} / {fresh:.0f} samples/s = {after / fresh:.3f}")]
