"""The learning rate a job trains at, and where it came from.

An optimizer option gives one of two keys (both sweeps' own, never passed to the class as such):

- ``lr``: the learning rate at every batch size, as written (no scaling);
- ``base_lr``: the learning rate at ``lr_scaling.base_batch`` examples per step, scaled to the
  job's batch by ``lr_scaling.rule`` (:func:`scaled_lr`) — study 1's convention.

Both in the option's YAML (or both on the command line) is ambiguous and refused in one line. A
command line that sets one of them (``optimizer.lr=0.05``) replaces the other where the option's
YAML set it (the built-in ``sgd``'s ``base_lr: 0.1``): what the user typed last wins.
"""
from __future__ import annotations

import math
from typing import Iterable

from omegaconf import DictConfig, open_dict

from sweeps.errors import UsageError

LR_KEYS = ("lr", "base_lr")


def scaled_lr(base_lr: float, batch: int, base_batch: int, rule: str) -> float:
    """Learning rate for ``batch`` from ``base_lr`` at ``base_batch``.

    ``linear``: lr = base_lr × batch / base_batch (Goyal et al. 2017, "Accurate, Large Minibatch
    SGD"; Smith et al. 2017, "Don't Decay the Learning Rate, Increase the Batch Size");
    ``sqrt``: lr = base_lr × √(batch / base_batch) (Krizhevsky 2014, "One weird trick");
    ``none``: lr = base_lr.

    Raises:
        UsageError: unknown rule.
    """
    ratio = batch / base_batch
    factors = {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}
    if rule not in factors:
        raise UsageError(f"lr_scaling.rule={rule!r} is unknown: use one of {', '.join(factors)}")
    return base_lr * factors[rule]


def settle(node: DictConfig, option: str, overrides: Iterable[str] = ()) -> None:
    """Leave exactly one of ``lr`` and ``base_lr`` set (not None) in the optimizer ``node``, in
    place: where both are set and ``overrides`` (the job's command-line overrides, ``key=value``)
    set only one of them, the other is cleared. Idempotent.

    Raises:
        UsageError: neither is set, or both are set by the same source (the option's YAML, or
            the command line) — one line naming both keys.
    """
    given = [k for k in LR_KEYS if node.get(k) is not None]
    if not given:
        raise UsageError(f"optimizer={option} sets no learning rate: write lr: 0.01 (the rate at every batch "
                         "size) or base_lr: 0.01 (the rate at lr_scaling.base_batch examples, scaled by lr_scaling)")
    if len(given) == 1:
        return
    typed = {k for k in LR_KEYS if f"optimizer.{k}" in _keys(overrides)}
    if len(typed) == 1:  # the command line's key replaces the other, which the option's YAML set
        with open_dict(node):
            node[next(k for k in LR_KEYS if k not in typed)] = None
        return
    raise UsageError(f"optimizer={option} sets both lr: {node.lr} and base_lr: {node.base_lr}: keep one — lr (the "
                     "rate at every batch size, as written) or base_lr (the rate at lr_scaling.base_batch "
                     "examples, scaled by lr_scaling)")


def describe_lr(cfg: DictConfig, batch: int) -> tuple[float, str]:
    """The learning rate a job of ``cfg`` trains at with a global batch of ``batch`` examples,
    and one line saying where it came from: ``lr 0.025 = base_lr 0.1 × 32/128 (linear)``,
    ``lr 0.001 = base_lr 0.001 × √(128/128) (sqrt)``, ``lr 0.01 = base_lr 0.01 (none)`` or
    ``lr 0.05 (as written, no scaling)``. ``cfg`` has been through
    :func:`sweeps.config.targets.complete` (one of ``optimizer.lr`` / ``base_lr`` set).

    Raises:
        UsageError: unknown ``lr_scaling.rule``.
    """
    optimizer, scaling = cfg.optimizer, cfg.lr_scaling
    if optimizer.get("lr") is not None:
        return float(optimizer.lr), f"lr {optimizer.lr:.4g} (as written, no scaling)"
    rule, base = str(scaling.rule), int(scaling.base_batch)
    lr = scaled_lr(float(optimizer.base_lr), batch, base, rule)
    factor = {"linear": f" × {batch}/{base}", "sqrt": f" × √({batch}/{base})"}.get(rule, "")
    return lr, f"lr {lr:.4g} = base_lr {optimizer.base_lr:.4g}{factor} ({rule})"


def _keys(overrides: Iterable[str]) -> set[str]:
    """The keys ``key=value`` overrides set (``+key``, ``++key`` and ``~key`` included)."""
    return {str(o).lstrip("+~").split("=", 1)[0].strip() for o in overrides}
