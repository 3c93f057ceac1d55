"""The verdict: a sweep's training jobs → one :class:`Finding` per model × dataset (× data size)
× device — the best batch (at its best lr), the throughput knee, the largest batch that fits,
which device wins and by how much (and, over the data size, where that flips), energy and money
per epoch and to the target. :mod:`sweeps.report.verdict_text` words it.

A pick that rests on noisy timings (:func:`sweeps.report.timing_noise.unreliable`) and a margin
inside that noise is not made: the finding says why instead.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from sweeps import names
from sweeps.report import best_lr, cost
from sweeps.report.runs import JobRecord, memory_key, used_device
from sweeps.report.timing_noise import SPREAD_LIMIT, unreliable

DEVICE_KEYS = ("device", "device.index", "device.gpus", "device.backend")
SIZE_KEY = "dataset.train_size"  # study 5 sweeps it: the device comparison's crossover
GROUP_EXCLUDE = (*best_lr.EXCLUDE, *DEVICE_KEYS, SIZE_KEY)  # a verdict paragraph: every swept key but these
KNEE_GAIN = 0.10  # past the knee, doubling the batch gains less than this share of samples/s
CLOSE = SPREAD_LIMIT  # two figures this close, one of them noisy: no pick


@dataclass
class Finding:
    """The verdict for one model × dataset (× data size) on one device. Figures are medians over
    repeats; None where the sweep holds nothing to say it."""

    group: str  # the swept keys but batch, repeat, lr, device and data size ("all": none)
    model: str
    dataset: str
    train_size: int | None  # dataset.train_size (None: the whole set)
    device: str  # the swept device value(s), else the device type the jobs ran on
    batches: int  # how many batch sizes ran ok
    best_batch: float | None  # shortest time to target, else highest samples/s (None: no pick)
    best_lr: float | None  # the effective lr at the best batch
    by: str  # what picked it: "time to target" or "samples/s" ("" when nothing did)
    time_to_target_s: float | None  # at the best batch
    samples_per_s: float | None  # at the best batch (training examples ÷ median epoch time)
    lr_per_batch: str  # "32: 0.01, 128: 0.03, 512: none reached the target" where the lr was tuned, else ""
    knee: float | None  # smallest batch past which each doubling gains < 10 % samples/s
    last_gain: float | None  # samples/s gained per doubling between the two largest batches (0.42: 42 %)
    fits: float | None  # largest batch that fits
    fits_how: str  # "task=max_batch", "OOM at <batch>", "all tried fit"
    energy_per_epoch_j: float | None
    energy_to_target_j: float | None
    cost_per_epoch: float | None  # in currency, where cost.per_hour was given
    cost_to_target: float | None
    currency: str
    wins: bool | None  # beside the group's other devices at this size (None: one device, or no pick)
    speedup: float | None  # the winner's margin over the next device (≥ 1), on both rows
    crossover_rows: int | None  # the smallest data size from which the other device wins
    note: str  # noise or missing figures behind the picks ("" when none)


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def throughput(job: JobRecord) -> float | None:
    """Training examples per second: ``data.train_examples`` ÷ the median epoch time, else the
    last epoch's ``perf/samples_per_s``."""
    t, examples = job.epoch_time()[0], job.params.get(names.TRAIN_EXAMPLES)
    if t and examples and examples.isdigit():
        return int(examples) / t
    return job.metrics.get(names.SAMPLES_PER_S)


def noise(jobs: list[JobRecord]) -> str:
    """Why the timings of ``jobs`` should not be trusted ("" when they can)."""
    found = {unreliable(j.metrics.get(names.EPOCH_P10_S), j.metrics.get(names.EPOCH_P90_S),
                        j.metrics.get(names.OTHER_CPU_MEAN_PCT)) for j in jobs}
    return "; ".join(sorted(n for n in found if n))


def _pick(scores: dict, jobs: dict, lower: bool, what: str) -> tuple:
    """``(key, note)``: the key of the best score (lowest or highest); None with a note when the
    runner-up is within :data:`CLOSE` and either one's timings are noisy."""
    if not scores:
        return None, ""
    ranked = sorted(scores, key=lambda k: scores[k], reverse=not lower)
    if len(ranked) > 1:
        a, b = scores[ranked[0]], scores[ranked[1]]
        margin = (b / a if lower else a / b) - 1 if a and b else math.inf
        why = noise([*jobs[ranked[0]], *jobs[ranked[1]]])
        if why and margin < CLOSE:
            name = (lambda k: f"{what} {k:.0f}") if what == "batch" else str  # noqa: E731
            return None, (f"no pick: {name(ranked[0])} and {name(ranked[1])} are within {100 * margin:.0f}% "
                          f"on noisy timings ({why})")
    return ranked[0], ""


def gains(per_batch: dict[float, float]) -> list[float]:
    """Samples/s gained per doubling of the batch from each batch to the next (``{batch: samples/s}``;
    a step that is not a doubling is scaled to one: ×4 gaining 30 % is 14 % a doubling)."""
    batches = sorted(per_batch)
    return [(per_batch[b2] / per_batch[b1]) ** (1 / math.log2(b2 / b1)) - 1 for b1, b2 in zip(batches, batches[1:])]


def knee(per_batch: dict[float, float]) -> float | None:
    """The smallest batch past which every doubling gains less than :data:`KNEE_GAIN` in samples/s
    (:func:`gains`); None with fewer than two batches or when the largest batch still gains."""
    batches, steps = sorted(per_batch), gains(per_batch)
    for i in range(len(steps)):
        if all(g < KNEE_GAIN for g in steps[i:]):
            return batches[i]
    return None


def _lr_per_batch(choices: dict[float, best_lr.Choice]) -> str:
    """``32: 0.01, 128: 0.03, 512: none reached the target`` where some batch ran at several lrs."""
    if all(c.lrs == 1 for c in choices.values()):
        return ""
    return ", ".join(f"{b:.0f}: " + (f"{c.lr:.3g}" if c.reached else "none reached the target")
                     for b, c in choices.items())


def _fits(jobs: list[JobRecord], ok_batches: list[float], fits: dict[tuple, int]) -> tuple[float | None, str]:
    for j in jobs:  # a task=max_batch result for the same model, input, precision and machine
        if (n := fits.get(memory_key(j.params, j.tags))) is not None:
            return float(n), "task=max_batch"
    ooms = sorted(j.batch for j in jobs if j.outcome == names.OOM and j.batch is not None)
    if ooms:
        below = [b for b in ok_batches if b < ooms[0]]
        return (max(below) if below else None), f"OOM at {ooms[0]:.0f}"
    return (max(ok_batches) if ok_batches else None), "all tried fit"


def _device(job: JobRecord) -> str:
    return " ".join(v for k, v in job.swept.items() if k in DEVICE_KEYS) or used_device(job.params, job.tags)


def _size(job: JobRecord) -> int | None:
    size = job.params.get(SIZE_KEY, job.swept.get(SIZE_KEY))
    return int(size) if size and size.isdigit() else None


def finding(group: str, device: str, jobs: list[JobRecord], fits: dict[tuple, int]) -> Finding:
    """The :class:`Finding` of ``jobs``: one group at one data size on one device."""
    choices = best_lr.choose(jobs)
    all_ok = {b: [j for j in jobs if j.outcome == names.OK and j.batch == b] for b in choices}
    per_batch = {b: t for b, js in all_ok.items() if (t := _med([x for j in js if (x := throughput(j))]))}
    reached = {b: c for b, c in choices.items() if c.reached}
    notes = []
    if reached:
        by = "time to target"
        scores = {b: statistics.median(j.metrics[names.TO_TARGET_S] for j in c.jobs) for b, c in reached.items()
                  if all(names.TO_TARGET_S in j.metrics for j in c.jobs)}
        best, why = _pick(scores, {b: c.jobs for b, c in reached.items()}, True, "batch")
    else:
        by = "samples/s" if per_batch else ""
        if any(names.TARGET_TAG in j.tags for j in jobs):
            notes.append("no batch reached the target")
        best, why = _pick(per_batch, all_ok, False, "batch")
    notes += [why] if why else []
    chosen = choices[best].jobs if best is not None else []
    ok_batches = sorted(choices)
    fit, fits_how = _fits(jobs, ok_batches, fits)
    first = (chosen or jobs)[0]
    ok = [j for js in all_ok.values() for j in js]
    if noisy := [why for j in ok if (why := noise([j]))]:
        notes.append(f"{len(noisy)} of {len(ok)} runs timed noisily (e.g. {noisy[0]})")
    return Finding(
        group, first.params.get("model", "?"), first.params.get("dataset", "?"), _size(first), device, len(choices),
        best, choices[best].lr if best is not None else None, by,
        _med([j.metrics[names.TO_TARGET_S] for j in chosen if names.TO_TARGET_S in j.metrics]),
        per_batch.get(best) if best is not None else None, _lr_per_batch(choices), knee(per_batch),
        gains(per_batch)[-1] if len(per_batch) > 1 else None, fit, fits_how,
        _med([e for j in chosen if (e := cost.energy_per_epoch(j)) is not None]),
        _med([e for j in chosen if (e := cost.energy_to_target(j)) is not None]),
        _med([m for j in chosen if (m := cost.per_epoch(j)) is not None]),
        _med([m for j in chosen if (m := cost.to_target(j)) is not None]),
        cost.currency(jobs), None, None, None, "; ".join(notes))


def _compare(cells: list[tuple[Finding, list[JobRecord]]]) -> str | None:
    """Mark the winning device among ``cells`` (one group at one size, a device each): by time to
    target where every device reached it, else by samples/s; returns the winner's device."""
    use_time = all(f.time_to_target_s is not None for f, _ in cells)
    scores = {f.device: (f.time_to_target_s if use_time else f.samples_per_s) for f, _ in cells}
    scores = {d: s for d, s in scores.items() if s is not None}
    if len(scores) < 2:
        return None
    by_device = {f.device: [j for j in js if j.outcome == names.OK] for f, js in cells}
    winner, why = _pick(scores, by_device, use_time, "device")
    ranked = sorted(scores.values(), reverse=not use_time)
    margin = ranked[1] / ranked[0] if use_time else ranked[0] / ranked[1]
    for f, _ in cells:
        f.wins = None if winner is None else f.device == winner
        f.speedup = None if winner is None else margin
        f.note = "; ".join(n for n in (f.note, why) if n)
    return winner


def findings(jobs: list[JobRecord], fits: dict[tuple, int] | None = None) -> list[Finding]:
    """One :class:`Finding` per group × data size × device of the training jobs in ``jobs``
    (``task=inference`` and ``task=max_batch`` jobs are left out; ``fits``:
    :func:`sweeps.report.runs.max_batches`), in the order the jobs ran; devices compared at each
    size, and the crossover set where the winner changes over ``dataset.train_size``."""
    cells: dict[str, dict[int | None, dict[str, list[JobRecord]]]] = {}
    for j in jobs:
        if j.params.get("task", "train") == "train" and names.INFER_MEDIAN_MS not in j.metrics:
            group = cells.setdefault(j.label(exclude=GROUP_EXCLUDE), {})
            group.setdefault(_size(j), {}).setdefault(_device(j), []).append(j)
    out = []
    for label, by_size in cells.items():
        winners: dict[int, str] = {}
        rows = []
        for size in sorted(by_size, key=lambda s: (s is None, s or 0)):
            cell = [(finding(label, device, js, fits or {}), js) for device, js in by_size[size].items()]
            if (winner := _compare(cell)) is not None and size is not None:
                winners[size] = winner
            rows += [f for f, _ in cell]
        sizes = sorted(winners)
        flip = next((s for s in sizes if winners[s] != winners[sizes[0]]), None) if sizes else None
        for f in rows:
            f.crossover_rows = flip
        out += rows
    return out
