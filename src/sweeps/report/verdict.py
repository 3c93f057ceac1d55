"""The verdict: a sweep's training jobs → one [`Finding`][sweeps.report.verdict.Finding] per model × dataset (× data size)
× device — two answers, named: the batch (at its best lr) fastest to the target and the batch of
the highest throughput; the quality each batch reached where there is no target; the throughput
knee, the largest batch that fits, which device wins and by how much (and, over the data size,
where that flips), energy and money per epoch and to the target. `sweeps.report.verdict_text`
words it.

A comparison is made only between jobs that ran under the same un-swept conditions
(`conditions`: torch threads, loader, optimizer implementation, precision, compilation, the
machine), and a pick only where the repeats' spread allows it (`sweeps.report.pick`):
otherwise the finding says what differs, what ties, and how to settle it.
"""
from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from sweeps import names
from sweeps.report import best_lr, cost
from sweeps.report.compare import mismatches
from sweeps.report.pick import Figure, Pick, drift, figure, rank
from sweeps.report.model_label import model_label
from sweeps.report.runs import JobRecord, memory_key, used_device
from sweeps.report.timing_noise import unreliable

DEVICE_KEYS = ("device", "device.index", "device.gpus", "device.backend")
SIZE_KEY = "dataset.train_size"  # study 5 sweeps it: the device comparison's crossover
GROUP_EXCLUDE = (*best_lr.EXCLUDE, *DEVICE_KEYS, SIZE_KEY)  # a verdict paragraph: every swept key but these
KNEE_GAIN = 0.10  # past the knee, doubling the batch gains less than this share of samples/s
ACC_CLOSE = 0.01  # one run each: accuracies within 1 point are the same quality
RMSE_CLOSE = 0.05  # one run each: RMSEs within 5 % of each other are the same quality


@dataclass
class Finding:
    """The verdict for one model × dataset (× data size) on one device. Figures are medians over
    repeats, each with its run count; None where the sweep holds nothing to say it."""

    group: str  # the swept keys but batch, repeat, lr, device and data size ("all": none)
    model: str  # what ran (`sweeps.report.model_label.model_label`: WRN-10-1 for wrn28_10 at depth 10, width 1)
    dataset: str
    train_size: int | None  # dataset.train_size (None: the whole set)
    device: str  # the swept device value(s), else the device type the jobs ran on ("cpu on host-b": several machines)
    batches: int  # how many batch sizes ran ok
    best_batch: float | None  # the headline pick: fastest to target where a batch reached it, else highest throughput
    best_lr: float | None  # the effective lr at the best batch
    by: str  # what picked it: "time to target" or "samples/s" ("" when nothing did)
    time_to_target_s: float | None  # at the fastest-to-target batch (or the leader of a tie)
    samples_per_s: float | None  # at the highest-throughput batch (or the leader of a tie)
    target_batch: float | None  # fastest to target (None: no pick)
    throughput_batch: float | None  # highest samples/s (None: no pick)
    runs: int  # runs behind the headline figure (0: none)
    target_tie: str  # batches that tie to target: "128 and 256 (3.1 vs 3.2 s; 3 runs each, their ranges overlap)", else ""
    throughput_tie: str  # batches that tie on samples/s, likewise
    quality: str  # without a target: each batch's final score, "16: acc 0.969, 256: acc 0.887"
    quality_warning: str  # the highest-throughput batch trained to a worse quality beyond noise
    target_missed: str  # with a target no batch reached: which target, and the best score reached
    lr_per_batch: str  # "32: 0.01, 128: 0.03, 512: none reached the target" where the lr was tuned, else ""
    grid: str  # what the lr grid cannot tell: ties, edges, diverged and chance-level lrs ("; "-joined)
    knee: float | None  # smallest batch past which each doubling gains < 10 % samples/s
    last_gain: float | None  # samples/s gained per doubling between the two largest batches (0.42: 42 %)
    fits: float | None  # largest batch that fits
    fits_how: str  # "task=max_batch", "OOM at <batch>", "all tried fit"
    energy_per_epoch_j: float | None
    energy_to_target_j: float | None
    cost_per_epoch: float | None  # in currency, where a price was given
    cost_to_target: float | None
    currency: str
    wins: bool | None  # beside the group's other devices at this size (None: one device, or no pick)
    speedup: float | None  # the winner's margin over the next device (≥ 1), on both rows
    crossover_rows: int | None  # the smallest data size from which the other device wins
    held: str  # un-swept conditions that differ between the jobs ("" when all held): no comparison made
    drift: str  # what identical repeats say of the machine drifting over the sweep ("" when nothing)
    note: str  # the spread, ties and noise behind the picks ("" when none)
    # what holds the picked configuration back and what its advice measured (tags diag.*), "" when not diagnosed
    diagnosis: str = ""
    target_figure: Figure | None = field(default=None, repr=False)  # time to target at target_batch [s]
    throughput_figure: Figure | None = field(default=None, repr=False)  # samples/s at throughput_batch

    FRAME_EXCLUDE = ("target_figure", "throughput_figure")


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def throughput(job: JobRecord) -> float | None:
    """Training examples per second, the job's ``perf/median_samples_per_s`` (the figure MLflow's
    run table shows); for a run logged without it, ``data.train_examples`` ÷ the median epoch time
    (epochs 2 on; a 1-epoch job's one epoch), else the last epoch's ``perf/samples_per_s``."""
    if names.MEDIAN_SAMPLES_PER_S in job.metrics:
        return job.metrics[names.MEDIAN_SAMPLES_PER_S]
    t, examples = job.epoch_time()[0], job.params.get(names.TRAIN_EXAMPLES)
    if t and examples and examples.isdigit():
        return int(examples) / t
    return job.metrics.get(names.SAMPLES_PER_S)


def noise(jobs: list[JobRecord]) -> str:
    """Why the timings of ``jobs`` should not be trusted ("" when they can)."""
    found = {unreliable(j.metrics.get(names.EPOCH_P10_S), j.metrics.get(names.EPOCH_P90_S),
                        j.metrics.get(names.OTHER_CPU_MEAN_PCT)) for j in jobs}
    return "; ".join(sorted(n for n in found if n))


def _lead(text: str | None) -> str:
    """A condition tag's value without its reasons: ``"1 (small steps …)"`` → ``"1"``."""
    return re.split(r" \(", text or "", maxsplit=1)[0].strip()


# Conditions a timing depends on that a sweep holds constant unless it sweeps them: (what the
# verdict calls it, where the run keeps it, read the tag or param's lead only).
CONDITIONS = (("torch threads", names.THREADS_TAG, True), ("loader", names.LOADER_TAG, True),
              ("optimizer", names.OPTIMIZER_TAG, False), ("compiled", names.COMPILED_TAG, True),
              ("precision", "precision", False), ("channels_last", "channels_last", False),
              ("CPU", names.ENV_CPU, False), ("GPUs", names.ENV_GPUS, False))


def conditions(job: JobRecord) -> dict[str, str]:
    """The un-swept conditions ``job`` ran under (`CONDITIONS`), from its tags and params;
    a condition the run does not record is left out."""
    out = {}
    for what, key, lead in CONDITIONS:
        value = job.tags.get(key, job.params.get(key))
        if value is not None and key not in job.swept:
            out[what] = _lead(value) if lead else value
    return out


def held(jobs: list[JobRecord]) -> str:
    """Which conditions differ between ``jobs`` and where: ``"torch threads 1 at batch 32, 2 at
    batch 64"`` ("" when every job ran under the same)."""
    by_job = [(j, conditions(j)) for j in jobs]
    said = []
    for what, _, _ in CONDITIONS:
        values: dict[str, set[float]] = {}
        for j, c in by_job:
            if what in c:
                values.setdefault(c[what], set()).add(j.batch or 0)
        if len(values) > 1:
            said.append(f"{what} " + ", ".join(f"{v} at batch {', '.join(f'{b:.0f}' for b in sorted(bs))}"
                                               for v, bs in sorted(values.items(), key=lambda kv: min(kv[1]))))
    return "; ".join(said)


def gains(per_batch: dict[float, float]) -> list[float]:
    """Samples/s gained per doubling of the batch from each batch to the next (``{batch: samples/s}``;
    a step that is not a doubling is scaled to one: ×4 gaining 30 % is 14 % a doubling)."""
    batches = sorted(per_batch)
    return [(per_batch[b2] / per_batch[b1]) ** (1 / math.log2(b2 / b1)) - 1 for b1, b2 in zip(batches, batches[1:])]


def knee(per_batch: dict[float, float]) -> float | None:
    """The smallest batch past which every doubling gains less than `KNEE_GAIN` in samples/s
    (`gains`); None with fewer than two batches or when the largest batch still gains."""
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


def _machine(job: JobRecord) -> str | None:
    """The host ``job`` ran on: tag ``env.host``, else the host part of ``sweeps.hardware`` (None: neither)."""
    return job.tags.get(names.ENV_HOST) or job.tags.get(names.HARDWARE_TAG, "").split(" / ")[0] or None


def _device(job: JobRecord, machines: bool = False) -> str:
    """The swept device value(s), else the device type ``job`` ran on — ``"cpu on host-b"`` where
    the verdict's jobs span ``machines``: each machine's device is a device of its own."""
    device = " ".join(v for k, v in job.swept.items() if k in DEVICE_KEYS) or used_device(job.params, job.tags)
    return f"{device} on {host}" if machines and (host := _machine(job)) else device


def _size(job: JobRecord) -> int | None:
    size = job.params.get(SIZE_KEY, job.swept.get(SIZE_KEY))
    return int(size) if size and size.isdigit() else None


def _final_key(jobs: list[JobRecord]) -> str | None:
    """``test/final_acc`` or ``test/final_rmse``: the final score ``jobs`` logged (None: neither)."""
    return next((k for k in (names.FINAL_ACC, names.FINAL_RMSE) if any(k in j.metrics for j in jobs)), None)


def _worse(a: Figure, b: Figure, key: str) -> bool:
    """Whether final score ``a`` is worse than ``b`` beyond noise: ranges apart with two runs or
    more a side, else by more than `ACC_CLOSE` (accuracy, points) or `RMSE_CLOSE` (RMSE,
    relative)."""
    higher = key == names.FINAL_ACC
    if a.n >= 2 and b.n >= 2:
        return a.hi < b.lo if higher else a.lo > b.hi
    if higher:
        return b.median - a.median > ACC_CLOSE
    return b.median > 0 and a.median / b.median - 1 > RMSE_CLOSE


def _score(key: str, value: float) -> str:
    return f"acc {value:.3f}" if key == names.FINAL_ACC else f"rmse {value:.3g}"


def _quality(all_ok: dict[float, list[JobRecord]], top: float | None) -> tuple[str, str]:
    """``(each batch's final score, a warning)``: the warning when the highest-throughput batch
    ``top`` trained to a worse score than the best batch's, beyond noise (`_worse`)."""
    key = _final_key([j for js in all_ok.values() for j in js])
    if key is None:
        return "", ""
    scores = {b: f for b, js in all_ok.items() if (f := figure(j.metrics.get(key) for j in js))}
    if not scores:
        return "", ""
    text = ", ".join(f"{b:.0f}: {_score(key, f.median)}" for b, f in scores.items())
    best = (max if key == names.FINAL_ACC else min)(scores, key=lambda b: scores[b].median)
    warning = ""
    if top is not None and top in scores and top != best and _worse(scores[top], scores[best], key):
        target = ("target.metric=test/acc target.value=" + f"{scores[best].median:.2f}" if key == names.FINAL_ACC
                  else "target.metric=test/rmse target.mode=min target.value=" + f"{scores[best].median:.3g}")
        warning = (f"batch {top:.0f}, the fastest, trained to a worse {_score(key, scores[top].median)} than batch "
                   f"{best:.0f}'s {scores[best].median:.3f}: set a target ({target}) to compare at equal quality")
    return text, warning


def _missed(jobs: list[JobRecord], all_ok: dict[float, list[JobRecord]]) -> str:
    """With a target no ok run reached: ``"no batch reached test/acc ≥ 0.99 (best: acc 0.972 at batch 16)"``."""
    first = next((j for js in all_ok.values() for j in js), None)
    if first is None:
        return ""
    metric = first.params.get(names.TARGET_METRIC_PARAM, "the target")
    mode, value = first.params.get(names.TARGET_MODE_PARAM, "max"), first.params.get(names.TARGET_VALUE_PARAM, "?")
    text = f"no batch reached the target {metric} {'≥' if mode == 'max' else '≤'} {value}"
    key = _final_key(jobs)
    if key is not None:
        finals = {b: v for b, js in all_ok.items() if (v := _med([j.metrics[key] for j in js if key in j.metrics]))}
        if finals:
            best = (max if key == names.FINAL_ACC else min)(finals, key=finals.get)
            text += f" (best: {_score(key, finals[best])} at batch {best:.0f})"
    return text


def _spread_note(picks: dict[str, Pick]) -> str:
    """What the runs behind ``picks`` (``{"time to target": pick, "samples/s": pick}``) leave
    unknown, and how many repeats would settle it."""
    picks = {what: p for what, p in picks.items() if p.tied}  # the answers the sweep had figures for
    single = [what for what, p in picks.items() if p.single]
    if single:
        of = "" if len(single) == len(picks) else f" of {single[0]}"
        return (f"one run per configuration: the run-to-run spread{of} is unknown, so "
                f"{'the answers are' if not of else 'that answer is'} provisional; repeat=0,1,2 gives each 3 runs, "
                "enough to test a margin")
    if any(p.weak for p in picks.values()):
        return "the picks rest on 2 runs per configuration (weak evidence); repeat=0,1,2 settles them"
    return ""


def _same_evaluation(reached: dict[float, best_lr.Choice], batches: int) -> str:
    """A warning when every one of the ``batches`` batch sizes reached the target at the same
    evaluation: steps to target then measure how often the runs evaluate, not the batch size."""
    epochs = {b: _med([j.metrics[names.TARGET_EPOCHS] for j in c.jobs if names.TARGET_EPOCHS in j.metrics])
              for b, c in reached.items()}
    values = set(epochs.values())
    if len(reached) < 2 or len(reached) < batches or len(values) != 1 or None in values:
        return ""
    (epoch,) = values
    return (f"every batch reached the target at the same evaluation (epoch {epoch:.0f}): steps to target measure "
            "the evaluation interval, not the batch; re-target from the logged curves (python -m sweeps.report "
            "--target VALUE, a harder value) to tell the batches apart")


def _tie(pick: Pick, figures: dict[float, Figure], fmt: str, unit: str) -> str:
    """``"128 and 64 (7,273 vs 6,667 samples/s; within 10% on one run each)"`` for a pick that tied, else ""."""
    if len(pick.tied) < 2:
        return ""
    batches = best_lr.listed([f"{b:.0f}" for b in pick.tied])
    values = " vs ".join(fmt.format(figures[b].median) for b in pick.tied)
    ns = {figures[b].n for b in pick.tied}
    why = ("within 10% on one run each" if pick.single else
           f"{ns.pop()} runs each, their ranges overlap" if len(ns) == 1 else "their runs' ranges overlap")
    return f"{batches} ({values} {unit}; {why})"


def _drift(jobs: list[JobRecord]) -> str:
    """Machine drift over the sweep, from identical configurations' repeats (`pick.drift`)."""
    pairs: dict[str, dict[str, float]] = {}
    for j in jobs:
        if j.outcome == names.OK and "repeat" in j.swept and (t := j.epoch_time()[0]):
            pairs.setdefault(j.label(exclude=("repeat",)), {})[j.swept["repeat"]] = t
    return drift(pairs)


def _diagnosis(chosen: list[JobRecord]) -> str:
    """The picked configuration's diagnosis in one clause: its bottleneck and evidence (the most
    common among its runs), then each advice with what ``python -m sweeps.advise`` measured for
    it, or the advice to try where nothing was measured yet."""
    tagged = [j for j in chosen if names.BOTTLENECK_TAG in j.tags and not j.tags[names.BOTTLENECK_TAG].startswith("unknown")]
    if not tagged:
        return ""
    common = Counter(j.tags[names.BOTTLENECK_TAG] for j in tagged).most_common(1)[0][0]
    job = next(j for j in tagged if j.tags[names.BOTTLENECK_TAG] == common)
    clause = f"{common}: {job.tags.get(names.DIAG_EVIDENCE_TAG, '')}".rstrip(": ")
    checked = {k[len(names.DIAG_CHECKED_TAG_PREFIX):]: v.split("; A/B sweep")[0]
               for j in tagged for k, v in j.tags.items() if k.startswith(names.DIAG_CHECKED_TAG_PREFIX)}
    advice = [a for a in job.tags.get(names.DIAG_ADVICE_TAG, "").split("; ") if a]
    measured = [f"{a} measured {checked[a.split('=')[0]]}" for a in advice if a.split("=")[0] in checked]
    untried = [a for a in advice if a.split("=")[0] not in checked]
    if measured:
        clause += "; " + "; ".join(measured)
    if untried:
        clause += f"; to try: {', '.join(untried)} (python -m sweeps.advise)"
    return clause


def finding(group: str, device: str, jobs: list[JobRecord], fits: dict[tuple, int]) -> Finding:
    """The [`Finding`][sweeps.report.verdict.Finding] of ``jobs``: one group at one data size on one device."""
    choices = best_lr.choose(jobs)
    all_ok = {b: [j for j in jobs if j.outcome == names.OK and j.batch == b] for b in choices}
    ok = [j for js in all_ok.values() for j in js]
    differs = held(ok)
    speed = {b: f for b, js in all_ok.items() if (f := figure(throughput(j) for j in js))}
    reached = {b: c for b, c in choices.items() if c.reached}
    to_target = {b: f for b, c in reached.items() if (f := figure(j.metrics.get(names.TO_TARGET_S) for j in c.jobs))}
    has_target = any(names.TARGET_TAG in j.tags for j in jobs)
    notes: list[str] = []
    if differs:  # a batch comparison would compare the conditions, not the batches
        target_pick = speed_pick = Pick(None)
        notes.append(f"no batch compared with another: the jobs ran under different conditions ({differs}); "
                     "hold them (e.g. device.threads=N) or sweep them")
    else:
        target_pick, speed_pick = rank(to_target, lower=True), rank(speed, lower=False)
    spread = _spread_note({"time to target": target_pick, "samples/s": speed_pick}) if len(choices) > 1 else ""
    notes += [spread] if spread else []
    if (same := _same_evaluation(reached, len(choices))) and not differs:
        notes.append(same)
    if noisy := [why for j in ok if (why := noise([j]))]:
        notes.append(f"{len(noisy)} of {len(ok)} runs timed noisily (e.g. {noisy[0]})")
    headline, by = (target_pick, "time to target") if to_target else (speed_pick, "samples/s" if speed else "")
    best = headline.best
    chosen = choices[best].jobs if best is not None else []
    top = speed_pick.best
    quality, warning = _quality(all_ok, top) if not reached and not differs else ("", "")
    missed = _missed(jobs, all_ok) if has_target and not reached else ""
    t_lead, s_lead = target_pick.leader, speed_pick.leader
    fit, fits_how = _fits(jobs, sorted(choices), fits)
    per_batch = {b: f.median for b, f in speed.items()}
    first = (chosen or jobs)[0]
    headline_figure = (to_target if by == "time to target" else speed).get(headline.leader)
    return Finding(
        group, model_label(first.params), first.params.get("dataset", "?"), _size(first), device, len(choices),
        best, choices[best].lr if best is not None else None, by,
        to_target[t_lead].median if t_lead is not None else None,
        speed[s_lead].median if s_lead is not None else None,
        target_pick.best, top, headline_figure.n if headline_figure else 0,
        _tie(target_pick, to_target, "{:.3g}", "s"), _tie(speed_pick, speed, "{:,.0f}", "samples/s"),
        quality, warning, missed, _lr_per_batch(choices), "; ".join(best_lr.grid_notes(jobs, choices)),
        knee(per_batch) if not differs else None,
        gains(per_batch)[-1] if len(per_batch) > 1 and not differs else None, fit, fits_how,
        _med([e for j in chosen if (e := cost.energy_per_epoch(j)) is not None]),
        _med([e for j in chosen if (e := cost.energy_to_target(j)) is not None]),
        _med([m for j in chosen if (m := cost.per_epoch(j)) is not None]),
        _med([m for j in chosen if (m := cost.to_target(j)) is not None]),
        cost.currency(jobs), None, None, None, differs, _drift(jobs), "; ".join(notes), _diagnosis(chosen),
        to_target.get(t_lead) if t_lead is not None else None, speed.get(s_lead) if s_lead is not None else None)


def _compare(cells: list[tuple[Finding, list[JobRecord]]]) -> str | None:
    """Mark the winning device among ``cells`` (one group at one size, a device each): by time to
    target where every device reached it, else by samples/s, each at its own best batch, picked
    by the rule of `sweeps.report.pick`; returns the winner's device (None: fewer than two
    devices with figures, or a tie, which the rows' notes then state). Where the devices' runs
    differ in software (``env.torch``, ``env.cuda``, …), each row's note says so
    (`sweeps.report.compare.mismatches`)."""
    use_time = all(f.target_figure is not None for f, _ in cells)
    scores = {f.device: (f.target_figure if use_time else f.throughput_figure) for f, _ in cells}
    scores = {d: s for d, s in scores.items() if s is not None}
    if len(scores) < 2:
        return None
    pick = rank(scores, lower=use_time)
    ranked = sorted((s.median for s in scores.values()), reverse=not use_time)
    margin = ranked[1] / ranked[0] if use_time else ranked[0] / ranked[1]
    what = "time to target" if use_time else "samples/s"
    why = (f"{' and '.join(pick.tied)} tie on {what} "
           + ("(their runs' ranges overlap)" if not pick.single else "(within 10% on one run each)")
           if pick.best is None else "")
    machines = len({m for _, js in cells for j in js if (m := _machine(j))}) > 1
    software = mismatches({"all": {f.device: js for f, js in cells}}, [names.HARDWARE_TAG],
                          "machine" if machines else "device")
    for f, _ in cells:
        f.wins = None if pick.best is None else f.device == pick.best
        f.speedup = None if pick.best is None else margin
        f.note = "; ".join(n for n in (f.note, why, *software) if n)
    return pick.best


def findings(jobs: list[JobRecord], fits: dict[tuple, int] | None = None) -> list[Finding]:
    """One [`Finding`][sweeps.report.verdict.Finding] per group × data size × device of the training jobs in ``jobs``
    (``task=inference`` and ``task=max_batch`` jobs are left out; ``fits``:
    `sweeps.report.runs.max_batches`), in the order the jobs ran; devices compared at each
    size, and the crossover set where the winner changes over ``dataset.train_size``. Where the
    jobs ran on more than one machine (``env.host``), each machine's device is a device of its
    own (``"cpu on host-a"``, ``"cpu on host-b"``): the machines are compared side by side."""
    cells: dict[str, dict[int | None, dict[str, list[JobRecord]]]] = {}
    train = [j for j in jobs if j.params.get("task", "train") == "train" and names.INFER_MEDIAN_MS not in j.metrics]
    machines = len({m for j in train if (m := _machine(j))}) > 1  # e.g. a sweep imported from another machine
    for j in train:
        group = cells.setdefault(j.label(exclude=GROUP_EXCLUDE), {})
        group.setdefault(_size(j), {}).setdefault(_device(j, machines), []).append(j)
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
