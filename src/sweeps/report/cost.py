"""What a job costs: money from the price the user gave (``cost.per_hour``, logged with the job's
params) and energy from GPU telemetry, per epoch and to the target.

Money counts the device's time training and evaluating — the median epoch time, the time to
target — at ``cost.per_hour`` for the device the job ran on (× the processes of a data-parallel
job, one device each); start-up and the sweep's own bookkeeping are not priced. Energy is the
GPU's (``energy/j_per_sample`` × examples): a CPU job has none.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from sweeps import names
from sweeps.report.runs import JobRecord, used_device


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "None", "null", "") else None
    except ValueError:
        return None


def price(job: JobRecord) -> float | None:
    """The price of one device-hour for ``job``: its ``cost.per_hour`` param, or for a mapping
    (params ``cost.per_hour.cuda``, ``cost.per_hour.cpu``) the entry of the device it ran on
    (`sweeps.report.runs.used_device`); None where none was given."""
    given = _number(job.params.get(names.COST_PER_HOUR_PARAM))
    if given is None:
        given = _number(job.params.get(f"{names.COST_PER_HOUR_PARAM}.{used_device(job.params, job.tags)}"))
    return given


def currency(jobs: Sequence[JobRecord]) -> str:
    """The ``cost.currency`` the ``jobs`` were priced in ('' where none was named)."""
    given = {j.params.get(names.COST_CURRENCY_PARAM) for j in jobs if price(j) is not None}
    given -= {None, "None", "null", ""}
    return ", ".join(sorted(given))


def money(job: JobRecord, seconds: float | None) -> float | None:
    """The price of ``seconds`` of ``job``'s devices (None without a price or a time)."""
    per_hour = price(job)
    if per_hour is None or seconds is None:
        return None
    return per_hour * seconds / 3600 * job.metrics.get(names.WORLD_SIZE, 1)


def per_epoch(job: JobRecord) -> float | None:
    """Money for one epoch of ``job`` (its median epoch time, or a 1-epoch job's first epoch)."""
    return money(job, job.epoch_time()[0])


def to_target(job: JobRecord) -> float | None:
    """Money to ``job``'s target (``time/to_target_s``); None where it missed it or had none."""
    return money(job, job.metrics.get(names.TO_TARGET_S))


def energy_per_epoch(job: JobRecord) -> float | None:
    """GPU energy of one training epoch [J]: ``energy/j_per_sample`` × the training examples."""
    per_sample, examples = job.metrics.get(names.ENERGY_J_PER_SAMPLE), _number(job.params.get(names.TRAIN_EXAMPLES))
    return per_sample * examples if per_sample is not None and examples else None


def energy_to_target(job: JobRecord) -> float | None:
    """GPU energy to the target [J]: ``energy/j_per_sample`` × ``target/samples``."""
    per_sample, samples = job.metrics.get(names.ENERGY_J_PER_SAMPLE), job.metrics.get(names.TARGET_SAMPLES)
    return per_sample * samples if per_sample is not None and samples is not None else None


def priced(jobs: Sequence[JobRecord]) -> bool:
    """Whether any of ``jobs`` has a price (the tables then add money columns)."""
    return any(price(j) is not None for j in jobs)


KEYS = ("cost per epoch", "cost to target")  # the tables' money columns, before the currency (headers)


def columns(jobs: Sequence[JobRecord], target: bool) -> tuple[str, ...]:
    """The money columns of a table of ``jobs`` (`KEYS`): none unless a job was priced; to
    target only where a job had a target (``target``)."""
    return KEYS[:1 + target] if priced(jobs) else ()


def headers(jobs: Sequence[JobRecord]) -> tuple[str, str]:
    """The money columns' headers, with the currency where one was named."""
    unit = currency(jobs)
    suffix = f" [{unit}]" if unit else ""
    return f"cost per epoch{suffix}", f"cost to target{suffix}"


def amount(value: float | None) -> str:
    """A sum of money to 3 significant digits ('-' for none): 0.00213, 1.25, 1.2e+03."""
    return "-" if value is None else f"{value:.3g}"


def parse_price(text: str) -> float | dict[str, float]:
    """``--cost-per-hour``: ``"2.5"`` (every device) or ``"cpu=0.1,cuda=2.5"`` (per device type).

    Raises:
        ValueError: anything else (one line naming what works).
    """
    try:
        if "=" not in text:
            return float(text)
        pairs = (part.split("=", 1) for part in text.split(","))
        return {device.strip(): float(value) for device, value in pairs}
    except ValueError:
        raise ValueError(f"--cost-per-hour {text!r}: give a price per device-hour, 2.5 for every device or "
                         "cpu=0.1,cuda=2.5 per device type") from None


def with_price(jobs: Sequence[JobRecord], per_hour: float | dict[str, float], unit: str | None = None) -> list[JobRecord]:
    """``jobs`` priced at ``per_hour`` (`parse_price`'s value) in currency ``unit``, as though
    each had run with ``cost.per_hour`` (and ``cost.currency``) set: its params rewritten, its
    figures untouched."""
    if isinstance(per_hour, dict):
        prices = {f"{names.COST_PER_HOUR_PARAM}.{device}": str(p) for device, p in per_hour.items()}
    else:
        prices = {names.COST_PER_HOUR_PARAM: str(per_hour)}
    out = []
    for j in jobs:
        params = {k: v for k, v in j.params.items() if not k.startswith(names.COST_PER_HOUR_PARAM)}
        params.update(prices)
        if unit is not None:
            params[names.COST_CURRENCY_PARAM] = unit
        out.append(replace(j, params=params))
    return out
