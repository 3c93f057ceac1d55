"""The loss, a ``loss._target_`` like every other part: ``loss=auto`` (``_target_: null``) picks
cross-entropy for classification and MSE for regression; otherwise a class (a ``torch.nn`` loss or
the user's), instantiated with the option's keys and then called per batch, or a function
``(output, target, **keys) -> scalar`` (``torch.nn.functional.mse_loss`` or the user's def),
called per batch with the option's keys — with or without ``_partial_: true``."""
from __future__ import annotations

import inspect
from typing import Callable

import torch
from omegaconf import DictConfig
from torch import nn

from sweeps.config.targets import bind_target, call_target, locate
from sweeps.data import DataSpec


def make_loss(cfg: DictConfig, spec: DataSpec) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss of ``cfg`` (the ``loss`` node) for data ``spec``. Regression targets are shaped
    like the outputs (a dataset giving scalar targets ``(N,)`` to a model with outputs ``(N, 1)``
    would otherwise broadcast to ``(N, N)`` without a word).

    Raises:
        UsageError: the target does not import, or rejects its arguments (a function: its keys
            beside two positional ``(output, target)``).
    """
    if cfg.get("_target_") and inspect.isclass(locate(cfg, "loss")):
        loss = call_target(cfg, "loss")
    elif cfg.get("_target_"):  # the loss itself: its keys bound now, (output, target) per batch
        loss = bind_target(cfg, "loss", positional=2)
    else:
        loss = nn.MSELoss() if spec.problem == "regression" else nn.CrossEntropyLoss()
    if spec.problem != "regression":
        return loss

    def regression_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss(out, y.reshape(out.shape))

    # loss=auto's MSE is the mean squared error the test RMSE is the root of: an evaluation takes
    # both from one sum (sweeps.train.loop.Trainer.evaluate)
    regression_loss.mean_squared_error = not cfg.get("_target_")
    return regression_loss
