"""Data parallelism inside the training builder: what changes for a rank of a ``device=ddp`` job.

Outside an initialised process group every function here returns its input unchanged, so the
single-device path and the data-parallel path are the same code.

- :func:`wrap`: the model in :class:`~torch.nn.parallel.DistributedDataParallel` (gradients
  averaged across ranks in the backward pass).
- :func:`shard`: each rank takes ``batch / world`` examples per step from its own part of every
  epoch's permutation, so a step sees the same examples as one process at ``batch``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def world_size() -> int:
    """Processes in the job's process group (1 outside one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in DDP under a process group, else ``model`` itself."""
    if world_size() == 1:
        return model
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def shard(loaders: tuple, batch: int) -> tuple:
    """``(train, test)`` loaders for this rank: unchanged outside a process group.

    Raises:
        NotImplementedError: under a process group until data-parallel sharding lands here.
    """
    if world_size() == 1:
        return loaders
    raise NotImplementedError("data-parallel sharding of the training loader")
