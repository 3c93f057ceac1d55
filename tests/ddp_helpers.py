"""Test models for ``device=ddp``: plugged into ``model=mlp`` with ``model._target_=ddp_helpers.X``
(they take the mlp node's ``hidden``/``dropout``) and steered by environment variables, which the
spawned ranks inherit from the test process. Each acts on one rank only (``$RANK``, set by torch's
launcher), so the other ranks show what a healthy peer does."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from helpers import note_failure_time
from sweeps.models.zoo import MLP

PAUSE_FILE, PAUSE_AT = "DDP_TEST_PAUSE_FILE", "DDP_TEST_PAUSE_AT_CALL"  # PauseOnRank0
FAIL = "DDP_TEST_FAIL"  # FailInBackward: oom | error
PROBE_FILE = "DDP_TEST_PROBE_FILE"  # ConvProbe: where rank 0 writes what it saw


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


class PauseOnRank0(MLP):
    """The mlp; rank 0's training forward number ``$DDP_TEST_PAUSE_AT_CALL`` (1-based: the
    first step of a later epoch) waits until ``$DDP_TEST_PAUSE_FILE`` exists (60 s at most), so a
    test can look at the store while the job is known to be mid-run."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int, hidden: Sequence[int] = (16,), dropout: float = 0.0):
        super().__init__(in_shape, num_outputs, hidden, dropout)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and _rank() == 0:
            self.calls += 1
            if self.calls == int(os.environ.get(PAUSE_AT, "0")):
                release = Path(os.environ[PAUSE_FILE])
                deadline = time.monotonic() + 60
                while not release.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
        return super().forward(x)


class FailInBackward(MLP):
    """The mlp; on rank 1 the first training step's backward raises ``$DDP_TEST_FAIL``:
    ``oom`` → :class:`torch.OutOfMemoryError` (what the CUDA allocator raises; faked here at the
    hardware boundary), ``error`` → a plain RuntimeError (a bug). The other rank is then inside
    the same backward, waiting for rank 1's gradients in DDP's all-reduce."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if self.training and _rank() == 1 and out.requires_grad and not out.is_meta:  # not the FLOP count's pass
            out.register_hook(self._raise)
        return out

    @staticmethod
    def _raise(grad: torch.Tensor) -> None:
        note_failure_time()
        if os.environ.get(FAIL) == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory (test model: backward on rank 1)")
        raise RuntimeError("broken backward on purpose (test model)")


class ConvProbe(nn.Module):
    """A tiny conv net (so ``channels_last`` applies) whose first training forward on rank 0
    writes to ``$DDP_TEST_PROBE_FILE`` what it sees: the memory format of its weight and its
    input, and the loader the training loop iterates (found in the caller's frame)."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int, hidden: Sequence[int] = (), dropout: float = 0.0):
        super().__init__()
        self.conv = nn.Conv2d(in_shape[0], 4, 3, padding=1)
        self.head = nn.Sequential(nn.ReLU(), nn.Flatten(), nn.Linear(4 * in_shape[1] * in_shape[2], num_outputs))
        self.seen = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and not self.seen and _rank() == 0:
            self.seen = True
            frame, loader = sys._getframe(1), None
            while frame is not None and loader is None:  # Trainer.train_epoch(self, loader, desc)
                loader = frame.f_locals.get("loader") if frame.f_code.co_name == "train_epoch" else None
                frame = frame.f_back
            Path(os.environ[PROBE_FILE]).write_text(json.dumps({
                "weight_channels_last": self.conv.weight.is_contiguous(memory_format=torch.channels_last),
                "input_channels_last": x.is_contiguous(memory_format=torch.channels_last) and x.stride(1) == 1,
                "loader": type(loader).__name__,
                "inner_loader": type(getattr(loader, "loader", None)).__name__,
                "batch": len(x),
            }))
        return self.head(self.conv(x))
