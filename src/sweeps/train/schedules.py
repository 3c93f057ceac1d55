"""Learning-rate schedules that ``torch.optim.lr_scheduler`` does not offer in the form the
presets want; each a ``schedule._target_`` (``_partial_: true``) called with the optimizer and
the job's ``epochs``, stepped once per epoch. Any ``torch.optim.lr_scheduler`` class works as a
target too (``conf/schedule/cosine.yaml``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch.optim import lr_scheduler


def multistep(optimizer: torch.optim.Optimizer, epochs: int, milestones: Sequence[float] = (0.5, 0.8),
              gamma: float = 0.1) -> lr_scheduler.MultiStepLR:
    """lr × ``gamma`` at each milestone, given as fractions of ``epochs`` (0.5, 0.8 → epochs 50
    and 80 of 100: study 1's schedule, docs/studies.md)."""
    return lr_scheduler.MultiStepLR(optimizer, sorted({round(f * epochs) for f in milestones}), gamma=gamma)


def warmup_cosine(optimizer: torch.optim.Optimizer, epochs: int, warmup_epochs: int = 5,
                  start_factor: float = 0.1, eta_min: float = 0.0) -> lr_scheduler.LRScheduler:
    """Linear warm-up from ``start_factor`` × lr to lr over ``warmup_epochs`` epochs, then cosine
    annealing to ``eta_min`` over the remaining epochs: ``SequentialLR`` of ``LinearLR`` and
    ``CosineAnnealingLR``. Warm-up is what keeps the linear scaling rule stable at large batch
    sizes (Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", §2.2).
    ``warmup_epochs`` ≥ ``epochs`` warms up for the whole job (no cosine part).

    Raises:
        ValueError: ``start_factor`` not in (0, 1], or ``warmup_epochs`` < 0.
    """
    if not 0 < start_factor <= 1 or warmup_epochs < 0:
        raise ValueError(f"schedule.start_factor={start_factor}, schedule.warmup_epochs={warmup_epochs}: use "
                         "0 < start_factor ≤ 1 and warmup_epochs ≥ 0")
    warmup = min(warmup_epochs, epochs)
    if warmup == 0:
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs, eta_min=eta_min)
    ramp = lr_scheduler.LinearLR(optimizer, start_factor=start_factor, end_factor=1.0, total_iters=warmup)
    if warmup >= epochs:
        return ramp
    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs - warmup, eta_min=eta_min)
    return lr_scheduler.SequentialLR(optimizer, [ramp, cosine], milestones=[warmup])
