"""Time to a target quality: the question batch-size studies ask (a faster epoch that needs more
epochs is not faster training).

MLPerf Training scores *time to train* — the time until the model first reaches a fixed quality
on its evaluation set (MLPerf Training rules, "Benchmark results": evaluation time counts, the
system's and the model's initialisation are excluded). Shallue et al. 2019, "Measuring the
Effects of Data Parallelism on Neural Network Training" (JMLR 20), plot the *steps* to such a
result against the batch size: steps × batch constant is perfect scaling; their curves show it,
then diminishing returns, then a maximal useful batch.

Here, per job with ``target.metric`` set: ``time/to_target_s`` is the sum of the training passes
and evaluations (``time/epoch_s`` + ``time/eval_s``) from epoch 1 through the epoch whose
evaluation first met the target — compilation, warm-up before epoch 1, start-up and per-epoch
bookkeeping (checkpoints, logging) excluded; a resumed job's records hold every epoch of every
part once, so the sum counts time before a kill once and the lost re-run of an epoch not at all.
``target/epochs``, ``target/samples`` (examples seen) and ``target/steps`` (optimizer steps) go
with it.
"""
from __future__ import annotations

from typing import Any, Iterable

from sweeps import names


def met(rec: dict, target: Any) -> bool:
    """Whether the epoch record ``rec`` meets ``target`` (``metric``, ``value``, ``mode``); an epoch
    that did not evaluate (no ``test/*`` value) meets no test target."""
    value = rec.get(target.metric)
    if value is None or target.metric is None:
        return False
    return value >= target.value if target.mode == "max" else value <= target.value


def to_target(records: Iterable[dict], target: Any) -> dict[str, float]:
    """``time/to_target_s`` (s), ``target/epochs``, ``target/samples``, ``target/steps`` from the
    job's per-epoch records (oldest first), or ``{}`` when no epoch met the target (or none is set)."""
    if target is None or target.metric is None:
        return {}
    seconds = samples = steps = 0.0
    for rec in records:
        seconds += rec.get(names.EPOCH_S, 0.0) + rec.get(names.EVAL_S, 0.0)
        samples += rec.get("samples", 0)
        steps += rec.get("steps", 0)
        if met(rec, target):
            return {names.TO_TARGET_S: seconds, names.TARGET_EPOCHS: rec["epoch"], names.TARGET_SAMPLES: samples,
                    names.TARGET_STEPS: steps}
    return {}
