"""The optimizer and its schedule: SGD or Adam at the scaled learning rate, the implementation
(``optimizer.impl``: fused, foreach, loop) and the per-epoch lr schedule.

``optimizer.impl``: ``fused`` (one kernel per parameter group, CPU and CUDA), ``foreach``
(batched kernels over the parameter list) or ``loop`` (one parameter at a time); ``auto`` is
``fused`` on CUDA — the implementation :class:`torch.amp.GradScaler` can step without reading
the inf/NaN flag back to the host — and PyTorch's own default elsewhere (PyTorch docs,
``torch.optim``, "Algorithms": foreach and fused implementations).
"""
from __future__ import annotations

import logging

import torch
from omegaconf import DictConfig

from sweeps.names import OPTIMIZER_IMPLS

log = logging.getLogger("sweeps")


def optimizer_kwargs(impl: str, device: torch.device, scaled: bool = False) -> dict:
    """Keyword arguments selecting the optimizer implementation for ``optimizer.impl=impl``.

    Raises:
        ValueError: unknown ``impl``.
    """
    if impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"optimizer.impl={impl!r} is unknown: use one of {', '.join(OPTIMIZER_IMPLS)}")
    if impl == "auto":
        return {"fused": True} if device.type == "cuda" else {}
    if scaled and device.type == "cuda" and impl != "fused":
        log.warning("optimizer.impl=%s with precision=fp16: GradScaler reads its inf/NaN flag back to the host "
                    "every step (a sync); optimizer.impl=fused avoids it", impl)
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[impl]


def make_optimizer(cfg: DictConfig, params, lr: float, **impl) -> torch.optim.Optimizer:
    """SGD (momentum, Nesterov, weight decay) or Adam from the ``optimizer`` node at ``lr``;
    ``impl``: ``fused=True`` / ``foreach=...`` (see :func:`sweeps.train.speed.optimizer_kwargs`)."""
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                               weight_decay=cfg.weight_decay, **impl)
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay, **impl)
    raise ValueError(f"optimizer.name={cfg.name!r} is unknown: use sgd or adam")


def make_schedule(cfg: DictConfig, optimizer: torch.optim.Optimizer, epochs: int):
    """Per-epoch lr schedule: ``multistep`` (× gamma at each milestone, given as fractions of
    ``epochs``: 0.5, 0.8 → epochs 50 and 80 of 100), ``constant`` or ``cosine`` (to 0 at the end)."""
    if cfg.name == "multistep":
        milestones = sorted({round(f * epochs) for f in cfg.milestones})
        return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=cfg.gamma)
    if cfg.name == "constant":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    if cfg.name == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    raise ValueError(f"schedule.name={cfg.name!r} is unknown: use multistep, constant or cosine")
