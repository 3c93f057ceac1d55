"""The learning rate a job trains at, and where it came from.

An optimizer option gives one of two keys (both sweeps' own, never passed to the class as such):

- ``lr``: the learning rate at every batch size, as written (no scaling);
- ``base_lr``: the learning rate at ``lr_scaling.base_batch`` examples per step, scaled to the
  job's batch by ``lr_scaling.rule`` (`scaled_lr`) — study 1's convention.

Both in the option's YAML (or both on the command line) is ambiguous and refused in one line
naming each source. Otherwise the more specific source wins:

- a command line that sets one of them (``optimizer.lr=0.05``) replaces the other where the
  option's YAML or a preset set it (the built-in ``sgd``'s ``base_lr: 0.1``): what the user typed
  last wins;
- an optimizer option chosen on the command line (``+experiment=diabetes optimizer=mysgd``) whose
  YAML sets one of them replaces the other where a preset set it: the preset's rate was for the
  preset's own optimizer. The job's lr line says so (`NOTE_KEY`, `describe_lr`).
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

from omegaconf import DictConfig, open_dict

from sweeps.errors import UsageError

LR_KEYS = ("lr", "base_lr")
# Set by `settle` in the optimizer node where the rate it kept needs saying (a preset's other
# key set aside); read by `describe_lr`; sweeps' own, never passed to the optimizer class.
NOTE_KEY = "lr_note"


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


def settle(node: DictConfig, option: str, overrides: Iterable[str] = (), written: Mapping | None = None,
           file: str = "", chosen: bool = False, preset: str = "") -> None:
    """Leave exactly one of ``lr`` and ``base_lr`` set (not None) in the optimizer ``node``, in
    place. Where both are set:

    - ``overrides`` (the job's command-line overrides, ``key=value``) set only one: the other is
      cleared;
    - else the option was ``chosen`` on the command line and ``written`` (the keys its own YAML
      ``file`` sets, where known) holds only one: the other, which the preset (``preset``, e.g.
      ``experiment/diabetes``; empty: none chosen) or the primary config set for its own
      optimizer, is cleared and the node's `NOTE_KEY` says so.

    Idempotent.

    Raises:
        UsageError: neither is set, or both are set by one source (the option's YAML, the command
            line, a preset) or by sources neither of which wins — one line naming both keys and
            where each came from, where known.
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
    keep = "one — lr (the rate at every batch size, as written) or base_lr (the rate at lr_scaling.base_batch " \
           "examples, scaled by lr_scaling)"
    if typed:
        raise UsageError(f"optimizer={option}: the command line sets both lr: {node.lr} and base_lr: {node.base_lr} "
                         f"(optimizer.lr=, optimizer.base_lr=): keep {keep}")
    in_file = [k for k in LR_KEYS if written is not None and written.get(k) is not None]
    where = f" ({file})" if file else ""
    if len(in_file) == 2:
        raise UsageError(f"optimizer={option} sets both lr: {node.lr} and base_lr: {node.base_lr} in its own "
                         f"file{where}: keep {keep}")
    if len(in_file) == 1:
        mine = in_file[0]
        other = next(k for k in LR_KEYS if k != mine)
        if chosen:  # the user's option, chosen on the command line: the preset's rate was for its own optimizer
            note = (f"optimizer={option}'s {mine}{', as written' if mine == 'lr' else ''}; "
                    f"{'the preset' if preset else 'the config'}'s {other} "
                    f"{node[other]:.4g} was for its own optimizer")
            with open_dict(node):
                node[other] = None
                node[NOTE_KEY] = note
            return
        raise UsageError(f"optimizer={option} sets {mine}: {node[mine]}{where} and "
                         f"{f'the preset {preset}' if preset else 'the config'} sets {other}: "
                         f"{node[other]}: keep {keep}")
    raise UsageError(f"optimizer={option} sets both lr: {node.lr} and base_lr: {node.base_lr}: keep {keep}")


def describe_lr(cfg: DictConfig, batch: int) -> tuple[float, str]:
    """The learning rate a job of ``cfg`` trains at with a global batch of ``batch`` examples,
    and one line saying where it came from: ``lr 0.025 = base_lr 0.1 × 32/128 (linear)``,
    ``lr 0.001 = base_lr 0.001 × √(128/128) (sqrt)``, ``lr 0.01 = base_lr 0.01 (none)`` or
    ``lr 0.05 (as written, no scaling)``; where `settle` set a preset's key aside, its note
    instead: ``lr 0.003 (optimizer=mysgd's lr, as written; the preset's base_lr 0.01 was for its
    own optimizer)``. ``cfg`` has been through
    [`sweeps.config.targets.complete`][sweeps.config.targets.complete] (one of ``optimizer.lr`` / ``base_lr`` set).

    Raises:
        UsageError: unknown ``lr_scaling.rule``.
    """
    optimizer, scaling = cfg.optimizer, cfg.lr_scaling
    note = optimizer.get(NOTE_KEY)
    if optimizer.get("lr") is not None:
        return float(optimizer.lr), f"lr {optimizer.lr:.4g} ({note or 'as written, no scaling'})"
    rule, base = str(scaling.rule), int(scaling.base_batch)
    lr = scaled_lr(float(optimizer.base_lr), batch, base, rule)
    factor = {"linear": f" × {batch}/{base}", "sqrt": f" × √({batch}/{base})"}.get(rule, "")
    return lr, f"lr {lr:.4g} = base_lr {optimizer.base_lr:.4g}{factor} ({rule}{'; ' + note if note else ''})"


def _keys(overrides: Iterable[str]) -> set[str]:
    """The keys ``key=value`` overrides set (``+key``, ``++key`` and ``~key`` included)."""
    return {str(o).lstrip("+~").split("=", 1)[0].strip() for o in overrides}
