"""The optimizer and its schedule, each a Hydra ``_target_`` (`sweeps.config.targets`): the
optimizer at the scaled learning rate with its implementation (``optimizer.impl``: fused, foreach,
loop), and the per-epoch lr schedule.

``optimizer.impl``: ``fused`` (one kernel per parameter group, CPU and CUDA), ``foreach``
(batched kernels over the parameter list) or ``loop`` (one parameter at a time); ``auto`` is
``fused`` on CPU and CUDA where the class has it (Adam, AdamW, SGD, Adagrad) and every parameter
is a real floating-point tensor, and PyTorch's own default elsewhere. Fused is the fastest of the
three (PyTorch docs, ``torch.optim``, "Algorithms": foreach and fused implementations; Hugging
Face Transformers' ``TrainingArguments.optim`` defaults to fused AdamW since PyTorch 2.8): on CUDA
`torch.amp.GradScaler` steps it without reading the inf/NaN flag back to the host, and on a
CPU one kernel replaces the loop's ~10 per parameter, the larger part of a small model's step.
The same update rule, not the same bits: float sums in another order.
"""
from __future__ import annotations

import logging

import torch
from omegaconf import DictConfig

from sweeps.config.targets import call_target, declares, locate
from sweeps.devices import of
from sweeps.errors import UsageError
from sweeps.names import OPTIMIZER_IMPLS

log = logging.getLogger("sweeps")


def optimizer_kwargs(impl: str, device: torch.device, scaled: bool = False) -> dict:
    """Keyword arguments selecting the optimizer implementation for ``optimizer.impl=impl``.

    Raises:
        ValueError: unknown ``impl``.
    """
    if impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"optimizer.impl={impl!r} is unknown: use one of {', '.join(OPTIMIZER_IMPLS)}")
    kind = of(device)  # sweeps.devices: which kinds run fused kernels, which sync on a read-back
    if impl == "auto":
        return {"fused": True} if kind.supports_fused_optimizer() else {}
    if scaled and kind.asynchronous and impl != "fused":
        log.warning("optimizer.impl=%s with precision=fp16: GradScaler reads its inf/NaN flag back to the host "
                    "every step (a sync); optimizer.impl=fused avoids it", impl)
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[impl]


def make_optimizer(cfg: DictConfig, params, lr: float, device: torch.device,
                   scaled: bool = False) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` (the ``optimizer`` node) names by ``_target_`` — any
    ``torch.optim`` class or the user's, called as ``target(params, lr=lr, **option keys)`` —
    at the scaled ``lr``, with the implementation ``optimizer.impl`` asks for where the class
    takes ``fused``/``foreach`` (``impl=auto`` on a class without them, or with a parameter fused
    kernels do not take, such as a complex one: its own default).

    Raises:
        UsageError: the target does not import or rejects its arguments; ``impl=fused`` or
            ``foreach`` on a class without that argument.
    """
    impl = optimizer_kwargs(cfg.impl, device, scaled)
    target = locate(cfg, "optimizer")
    params = list(params)  # the model's parameters (a generator): read below, then passed on
    for key in list(impl):
        if not declares(target, key):
            if cfg.impl != "auto":
                raise UsageError(f"optimizer.impl={cfg.impl}: {cfg._target_} has no {key} implementation; "
                                 "use optimizer.impl=auto")
            del impl[key]
    if cfg.impl == "auto" and not all(p.is_floating_point() for p in params if isinstance(p, torch.Tensor)):
        impl.pop("fused", None)  # torch's fused kernels take real floating-point parameters only
    return call_target(cfg, "optimizer", params, lr=lr, **impl)


def describe(optimizer: torch.optim.Optimizer) -> str:
    """The optimizer's class and the implementation its steps take, for the run's
    `OPTIMIZER_TAG`: ``"Adam, fused"``, ``"SGD, foreach"``, ``"Adam, loop
    (torch's default on cpu)"`` — torch's own choice where neither switch is set: foreach where
    every parameter is on CUDA or XPU, the loop elsewhere (``torch.optim.optimizer.
    _default_to_fused_or_foreach``) — or the class alone for one without the switches."""
    name, defaults = type(optimizer).__name__, optimizer.defaults
    if "fused" not in defaults and "foreach" not in defaults:
        return name
    if defaults.get("fused"):
        return f"{name}, fused"
    if defaults.get("foreach") is not None:
        return f"{name}, {'foreach' if defaults['foreach'] else 'loop'}"
    devices = {p.device.type for group in optimizer.param_groups for p in group["params"]}
    chosen = "foreach" if devices and devices <= {"cuda", "xpu"} else "loop"
    return f"{name}, {chosen} (torch's default on {', '.join(sorted(devices)) or 'no device'})"


def make_schedule(cfg: DictConfig, optimizer: torch.optim.Optimizer, epochs: int):
    """The per-epoch lr schedule ``cfg`` (the ``schedule`` node) names by ``_target_`` — any
    ``torch.optim.lr_scheduler`` class or the user's, called as ``target(optimizer, **option
    keys)`` plus ``epochs=`` where it names that argument — stepped once per epoch.

    Raises:
        UsageError: the target does not import or rejects its arguments.
    """
    return call_target(cfg, "schedule", optimizer, supplied={"epochs": epochs})
