"""FLOPs per training example, achieved FLOP/s, and MFU against the device's datasheet peak.

Counting (once per job): `torch.utils.flop_counter.FlopCounterMode` (PyTorch docs,
``torch.utils.flop_counter``) intercepts the aten ops of one forward + backward pass and applies
its shape formulas — 2 FLOPs per multiply-add of matmuls and convolutions (``mm``, ``addmm``,
``bmm``, ``convolution`` and their backward ops; attention kernels too); element-wise work
(BatchNorm, ReLU, pooling, the optimizer) counts zero, the convention of MFU (Chowdhery et al.
2022, PaLM, appendix B; nanoGPT's ``estimate_mfu``). The pass runs on a copy of the model on the
``meta`` device: shapes only, no arithmetic, no memory, no effect on the model.

A training step costs about 3 forward passes: forward, then input- and weight-gradients in the
backward (the first layer's input gradient is skipped: the input needs none). WRN-28-10 on a
32×32 image: 5.24 G multiply-adds forward → 31.5 GFLOP per training example → 1.57 PFLOP per
CIFAR-10 epoch (50,000 images).

MFU = achieved FLOP/s ÷ the dense peak of the device at the job's precision (`PEAK_TFLOPS`).
"""
from __future__ import annotations

import copy
import logging
import re
from typing import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from sweeps import names
from sweeps.data.spec import DataSpec
from sweeps.errors import describe

log = logging.getLogger("sweeps")

# Dense (no 2:4 sparsity) peak TFLOP/s per precision at boost clock, from NVIDIA's datasheets.
# The datasheets print tensor-core figures "with sparsity"; dense is half of those.
# fp16 and bf16 autocast both run on the 16-bit tensor cores. GPUs without TF32 (Volta,
# Turing) run tf32 as plain fp32; without bf16 there is no entry (MFU omitted).
#   H100 / H200: "NVIDIA H100 Tensor Core GPU" datasheet (SXM: FP32 67, TF32 989*, BF16/FP16
#     1,979*; PCIe: FP32 51, TF32 756*, BF16/FP16 1,513*) and "NVIDIA H200 Tensor Core GPU"
#     datasheet (SXM: same as H100 SXM). * with sparsity.
#   A100: "NVIDIA A100 Tensor Core GPU" datasheet (FP32 19.5, TF32 156, BF16/FP16 312; SXM and PCIe).
#   V100: "NVIDIA Tesla V100" datasheet (SXM2: FP32 15.7, tensor 125; PCIe: 14, 112).
#   T4: "NVIDIA T4" datasheet (FP32 8.1, FP16 tensor 65).
#   L4: "NVIDIA L4" datasheet (FP32 30.3, TF32 120*, BF16/FP16 242*).
#   A10: "NVIDIA A10" datasheet (FP32 31.2, TF32 62.5, BF16/FP16 125).
#   L40S: "NVIDIA L40S" datasheet (FP32 91.6, TF32 366*, BF16/FP16 733*).
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
    "H200 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "V100 SXM2": {"fp32": 15.7, "tf32": 15.7, "fp16": 125.0},
    "V100 PCIe": {"fp32": 14.0, "tf32": 14.0, "fp16": 112.0},
    "T4": {"fp32": 8.1, "tf32": 8.1, "fp16": 65.0},
    "L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
    "A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 366.5, "fp16": 366.5},
}

# torch.cuda.get_device_name() → table key; first match wins. NVL and other variants whose
# clocks differ are left unmatched (MFU omitted) rather than guessed.
_GPU_NAMES = [(r"H100.*(PCIe|PCIE)", "H100 PCIe"), (r"H100.*NVL", None), (r"H100", "H100 SXM"),
              (r"H200.*NVL", None), (r"H200", "H200 SXM"), (r"A100", "A100"),
              (r"V100.*(SXM2|SXM)", "V100 SXM2"), (r"V100.*(PCIE|PCIe)", "V100 PCIe"), (r"\bT4\b", "T4"),
              (r"\bL4\b", "L4"), (r"\bA10\b", "A10"), (r"L40S", "L40S")]


def gpu_model(name: str) -> str | None:
    """The `PEAK_TFLOPS` key for a CUDA device name (``"NVIDIA H100 80GB HBM3"`` →
    ``"H100 SXM"``), or None when the table does not know it."""
    for pattern, key in _GPU_NAMES:
        if re.search(pattern, name):
            return key
    return None


def peak_flops(device: torch.device, precision: str) -> tuple[float | None, str]:
    """(dense peak FLOP/s of ``device`` at ``precision``, or None; a one-line description for a tag)."""
    if device.type != "cuda":
        return None, f"unknown for {device.type} (MFU omitted)"
    name = torch.cuda.get_device_name(device)
    key = gpu_model(name)
    tflops = PEAK_TFLOPS.get(key or "", {}).get(precision)
    if tflops is None:
        return None, f"unknown for {name} at {precision} (MFU omitted)"
    return tflops * 1e12, f"{key} {precision} {tflops:g} TFLOP/s (NVIDIA datasheet, dense)"


def training_flops_per_example(model: nn.Module, spec: DataSpec, loss_fn: nn.Module | None = None,
                               batch: int = 2, example: torch.Tensor | None = None) -> float:
    """FLOPs of forward + backward for one training example (FLOP, not FLOP/s).

    Counted by `FlopCounterMode` on a ``meta``-device copy of ``model`` in training mode,
    on a batch of ``batch`` examples shaped and typed like ``example`` (one real input, e.g. int64
    token ids for an embedding; None: float32 of ``spec.in_shape``), then divided by ``batch``.
    """
    meta = copy.deepcopy(model).to("meta").train()
    shape, dtype = (spec.in_shape, torch.float32) if example is None else (tuple(example.shape), example.dtype)
    x = torch.empty(batch, *shape, dtype=dtype, device="meta")
    if spec.problem == "regression":
        loss_fn, y = loss_fn or nn.MSELoss(), torch.empty(batch, spec.num_outputs, device="meta")
    else:
        loss_fn, y = loss_fn or nn.CrossEntropyLoss(), torch.zeros(batch, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        loss_fn(meta(x), y).backward()
    return counter.get_total_flops() / batch


def perf_metrics(flops_per_example: float | None, peak: float | None, samples: int, seconds: float) -> dict:
    """``perf/flops_per_s`` (achieved, FLOP/s) and ``perf/mfu`` (fraction of ``peak``, 0..1) for
    ``samples`` training examples in ``seconds``; empty when the count is unknown."""
    if not flops_per_example or seconds <= 0:
        return {}
    achieved = flops_per_example * samples / seconds
    return {names.FLOPS_PER_S: achieved, **({names.MFU: achieved / peak} if peak else {})}


def first_input(dataset) -> torch.Tensor | None:
    """The input of ``dataset``'s first example as a tensor (its dtype and shape are what the model
    gets: token ids stay integers), or None where it cannot be read. torch's global RNG is left as
    it was (a random transform draws from it)."""
    try:
        with torch.random.fork_rng(devices=[]):
            return torch.as_tensor(dataset[0][0])
    except Exception as e:  # the count falls back to float32 inputs; the epochs will say what is wrong
        log.debug("first example not read for the FLOP count (%s)", describe(e))
        return None


def tracker(writer, model: nn.Module, spec: DataSpec, device: torch.device, precision: str,
            devices: int = 1, example: torch.Tensor | None = None) -> tuple[Callable[[dict], None], float | None]:
    """Count the model's FLOPs once, log ``perf/flops_per_example`` and ``perf/peak_flops`` (job
    level) and the ``perf.peak`` tag through ``writer`` (``log_metrics``, ``set_tags``), and return
    a function that adds `perf_metrics` to an epoch record in place. A model the counter
    cannot handle only loses these metrics. ``devices``: data-parallel ranks, each a ``device``
    (the records then count all ranks' samples, so the peak is ``devices`` × one device's).
    ``example``: one real input (`first_input`), whose dtype and shape the count uses.
    Returns that function and the training FLOPs per example (None where not counted)."""
    try:
        per_example = training_flops_per_example(model, spec, example=example)
    except Exception as e:  # MFU is a bonus: never fail a job over it
        log.warning("FLOPs not counted (%s): perf/flops_per_s and perf/mfu omitted", describe(e))
        per_example = None
    peak, about = peak_flops(device, precision)
    if peak and devices > 1:
        peak, about = peak * devices, f"{devices} × {about}"
    writer.log_metrics({k: v for k, v in {names.FLOPS_PER_EXAMPLE: per_example, names.PEAK_FLOPS: peak}.items() if v})
    writer.queue_tags({names.PEAK_TAG: about})

    def with_perf(rec: dict) -> None:
        rec.update(perf_metrics(per_example, peak, rec.get("samples", 0), rec.get(names.EPOCH_S, 0.0)))
    return with_perf, per_example
