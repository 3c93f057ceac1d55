"""The loss, a ``loss._target_`` like every other part: ``loss=auto`` (``_target_: null``) picks
cross-entropy for classification and MSE for regression; any ``torch.nn`` loss or the user's
callable ``(output, target) -> scalar`` otherwise."""
from __future__ import annotations

from typing import Callable

import torch
from omegaconf import DictConfig
from torch import nn

from sweeps.config.targets import call_target
from sweeps.data import DataSpec


def make_loss(cfg: DictConfig, spec: DataSpec) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss of ``cfg`` (the ``loss`` node) for data ``spec``. Regression targets are shaped
    like the outputs (a dataset giving scalar targets ``(N,)`` to a model with outputs ``(N, 1)``
    would otherwise broadcast to ``(N, N)`` without a word).

    Raises:
        UsageError: the target does not import or rejects its arguments.
    """
    if cfg.get("_target_"):
        loss = call_target(cfg, "loss")
    else:
        loss = nn.MSELoss() if spec.task == "regression" else nn.CrossEntropyLoss()
    if spec.task != "regression":
        return loss
    return lambda out, y: loss(out, y.reshape(out.shape))
