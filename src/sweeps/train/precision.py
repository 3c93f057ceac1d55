"""How a job does its arithmetic: precision (TF32 switches, autocast, loss scaling) and determinism."""
from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from sweeps.devices import of
from sweeps.errors import DeviceUnavailable, UsageError


# precision name → (TF32 for fp32 matmuls/convolutions on CUDA, autocast dtype, loss scaling).
# TF32 stays off under autocast: what autocast leaves in fp32 (reductions, losses) stays IEEE.
PRECISIONS = {"fp32": (False, None, False), "tf32": (True, None, False),
              "bf16": (False, torch.bfloat16, False), "fp16": (False, torch.float16, True)}


@dataclass(frozen=True)
class Precision:
    """How a step does its arithmetic: ``autocast`` dtype (None: none) and loss scaling.

    ``fp32`` and ``tf32`` differ only in the global TF32 switches `apply_precision` sets
    (TF32: 10-bit mantissa tensor-core matmuls on Ampere and newer; no effect on a CPU).
    ``bf16``/``fp16`` run the forward pass under `torch.autocast` (matmuls and
    convolutions in 16 bit, weights and optimizer state stay fp32); ``fp16`` also scales the
    loss with `torch.amp.GradScaler` so small gradients do not flush to zero.
    """

    name: str = "fp32"
    dtype: torch.dtype | None = None
    scaled: bool = False

    def autocast(self, device: torch.device):
        """A fresh context manager for one forward pass on ``device`` (a no-op for fp32/tf32)."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler:
        """A GradScaler, enabled for ``fp16`` only (disabled: ``scale``/``step``/``update`` pass
        through). Sync-free only with a fused optimizer (``optimizer.impl=fused``, the CUDA
        default): otherwise its ``step`` reads the inf/NaN flag back to the host each step."""
        return torch.amp.GradScaler(device.type, enabled=self.scaled)


def apply_precision(cfg: DictConfig, device: torch.device | None = None) -> Precision:
    """Set the global TF32 switches for ``precision=NAME`` and return its `Precision`.

    ``fp32`` is true IEEE fp32: PyTorch lets cuDNN convolutions use TF32 by default, so both
    switches are set off explicitly; ``tf32`` sets both on.

    Raises:
        UsageError: unknown ``precision.name``.
        DeviceUnavailable: ``device`` cannot run the autocast dtype (bf16 on a pre-Ampere GPU,
            fp16 autocast on a CPU build without it) — the job ends ``outcome=unavailable``.
    """
    if cfg.name not in PRECISIONS:
        raise UsageError(f"precision={cfg.name!r} is unknown: use one of {', '.join(PRECISIONS)}")
    tf32, dtype, scaled = PRECISIONS[cfg.name]
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    if device is not None and dtype is not None and not autocast_supported(device, dtype):
        raise DeviceUnavailable(f"precision={cfg.name}: {device} cannot run {dtype} autocast here "
                                f"(torch {torch.__version__}); use precision=fp32")
    return Precision(cfg.name, dtype, scaled)


def autocast_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``dtype`` autocast works on ``device``, as its kind says
    (`sweeps.devices.DeviceKind.autocast_supported`): bf16 on CUDA needs compute capability 8.0
    (Ampere) or newer; elsewhere a tiny matmul under autocast is tried."""
    return of(device).autocast_supported(device, dtype)


def set_determinism(on: bool) -> None:
    """``deterministic=true``: deterministic kernels only (an error names any op without one),
    cuDNN autotuning off, cuBLAS with a fixed workspace — see PyTorch's "Reproducibility" notes
    (https://pytorch.org/docs/stable/notes/randomness.html). On the CPU training is already
    bit-for-bit repeatable under a seed; on a GPU atomics (scatter/index_add, some backward
    kernels) and autotuned algorithms differ run to run unless this is on. Costs speed on GPUs."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS call
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    if on:
        torch.backends.cudnn.benchmark = False
