"""Test models for the CUDA-path tests (tests/test_gpu_paths.py), reachable from a job through
``hydra.searchpath`` (tests/conf/model) and this folder on ``sys.path``."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import torch
from torch import nn


class EagerProbe(nn.Module):
    """A small MLP (``conv``: a Conv2d first) that counts the forward passes Python really ran
    outside dynamo's tracing (``eager``, class-level): a compiled model runs its graph, not this code."""

    eager: Counter = Counter()  # (training, batch size) → passes; nothing is touched while dynamo traces

    def __init__(self, in_shape: Sequence[int], num_outputs: int, conv: bool = False):
        super().__init__()
        c = in_shape[0]
        self.conv = nn.Conv2d(c, 4, 3, padding=1) if conv else None
        features = (4 if conv else c) * int(torch.tensor(in_shape[1:]).prod())
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(features, num_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # not while dynamo traces (Python state changed here would be guarded on), nor the FLOP
        # count's pass on a meta-device copy, nor the pre-flight's shape check (a training-mode module
        # under no_grad, which no training step is): both eager by design
        preflight = self.training and not torch.is_grad_enabled()
        if not torch.compiler.is_compiling() and x.device.type != "meta" and not preflight:
            EagerProbe.eager[(self.training, len(x))] += 1
        return self.fc(self.conv(x) if self.conv is not None else x)


class StickyCudaError(nn.Module):
    """A model whose forward fails as a GPU does after an illegal memory access (faked: the
    error text CUDA gives, raised as torch raises it)."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\n"
                           "CUDA kernel errors might be asynchronously reported at some other API call")


class DeviceAssert(nn.Module):
    """A model whose forward indexes out of bounds on the GPU: a real device-side assert, the
    sticky CUDA error a GPU test can provoke."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bad = torch.tensor([10**6], device=x.device)
        return x.flatten(1)[:, bad].float().sum().expand(len(x), 1) * self.fc.weight
