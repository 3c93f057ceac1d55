"""The report's Markdown tables: study 1's reference table per model, max-batch results,
inference timings, side-by-side comparisons and data-parallel scaling efficiency."""
from __future__ import annotations

import statistics
from typing import Sequence

from sweeps import names
from sweeps.report import cost
from sweeps.report.columns import (CPU_MEMORY, GPU_MEMORY, QUALITY, Footnotes, lr_cell, memory, memory_columns,
                                   quality, quality_columns)
from sweeps.console import hms
from sweeps.report.runs import JobRecord, memory_key
from sweeps.report.timing_noise import unreliable


COMPARE_KEYS = ("device", "device.index", "device.gpus", "precision")  # side-by-side columns
# A 1-epoch job has no epochs 2+: its first epoch stands in, marked, since it also holds warm-up.
FIRST_EPOCH_MARK = "*"
FIRST_EPOCH_NOTE = (f"{FIRST_EPOCH_MARK} first epoch's time: a 1-epoch job has no epochs 2+ "
                    "(it includes warm-up, so it overstates the steady epoch time)")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _median_spread(values: list[float], digits: int = 2) -> str:
    """``m`` for one value; ``m [lo, hi]`` (median, min, max) for the repeats of a configuration."""
    if not values:
        return "-"
    if len(values) == 1:
        return _f(values[0], digits)
    return f"{_f(statistics.median(values), digits)} [{_f(min(values), digits)}, {_f(max(values), digits)}]"


def epoch_values(runs: list[JobRecord]) -> tuple[list[float], bool]:
    """The epoch time of each of ``runs`` that has one (s): the median from epoch 2, or a 1-epoch
    run's first epoch standing in (`JobRecord.epoch_time`); ``True`` when one stood in."""
    timed = [t for t in (j.epoch_time() for j in runs) if t[0] is not None]
    return [t for t, _ in timed], any(f for _, f in timed)


def epoch_cell(runs: list[JobRecord], digits: int = 2) -> tuple[str, bool]:
    """`epoch_values` of ``runs`` as ``m [lo, hi]`` (`_median_spread`), ending in
    `FIRST_EPOCH_MARK` (and ``True``) when a first epoch stood in."""
    values, first = epoch_values(runs)
    return _median_spread(values, digits) + (FIRST_EPOCH_MARK if first else ""), first


def with_note(table: str, marked: bool) -> str:
    """``table`` followed by `FIRST_EPOCH_NOTE` when one of its cells is marked."""
    return f"{table}\n\n{FIRST_EPOCH_NOTE}" if marked else table


def _note(runs: list[JobRecord]) -> str:
    """Why a row's figure should not be trusted, from any of its runs ("" when it can)."""
    notes = {unreliable(m.get(names.EPOCH_P10_S), m.get(names.EPOCH_P90_S), m.get(names.OTHER_CPU_MEAN_PCT))
             for m in (j.metrics for j in runs)}
    return "; ".join(sorted(n for n in notes if n))


def has_target(job: JobRecord) -> bool:
    """Whether ``job`` ran with a target quality (``target.metric`` set)."""
    return job.params.get(names.TARGET_METRIC_PARAM) not in (None, "None", "null", "")


def target_cell(runs: list[JobRecord]) -> str:
    """Time to target (s) over ``runs``: ``m [lo, hi]`` of those that reached it, ``missed`` when
    none did, and ``(k/n missed)`` after the figure when some did not."""
    times = [j.metrics[names.TO_TARGET_S] for j in runs if names.TO_TARGET_S in j.metrics]
    missed = sum(1 for j in runs if j.tags.get(names.TARGET_TAG) == names.TARGET_MISSED)
    if not times:
        return names.TARGET_MISSED if missed else "-"
    return _median_spread(times) + (f" ({missed}/{len(runs)} missed)" if missed else "")


TRAINING_JOBS = "Training jobs"  # the heading of the one table of a sweep with one batch per configuration
EPOCH_HEADER = "median epoch from 2 [s]"
TARGET_HEADERS = ("time to target [s]", "epochs to target")


def _reference_row(batch: float | None, members: list[JobRecord], fits: dict[tuple, int],
                   notes: Footnotes) -> tuple[dict[str, str], bool]:
    """One row of a reference table (header → cell) for the ``members`` run at ``batch``, and
    whether a first epoch stood in for the median (the cell is marked)."""
    ok = [j for j in members if j.outcome == names.OK]
    row = {"batch": "-" if batch is None else f"{batch:.0f}", "runs": f"{len(ok)}/{len(members)}",
           "lr": lr_cell(members)}
    if not ok:  # the outcome in place of the times, its reason's mark beside it
        j = members[0]
        n = fits.get(memory_key(j.params, j.tags)) if j.outcome == names.OOM else None
        row["first epoch [s]"] = j.outcome.upper() + (f" (fits up to {n})" if n else "") + notes.mark(members)
        row[memory(j)] = _f(j.metrics.get(names.PEAK_MB), 0)
        return row, False
    row["runs"] += notes.mark(members)  # repeats that failed: "2/3 [1]"
    col = lambda key, js=ok: [j.metrics[key] for j in js if key in j.metrics]  # noqa: E731
    totals = col(names.TOTAL_S)
    epoch, first = epoch_cell(ok)
    row.update({"first epoch [s]": _median_spread(col(names.FIRST_EPOCH_S)), EPOCH_HEADER: epoch,
                "total time": hms(statistics.median(totals)) if totals else "-",
                TARGET_HEADERS[0]: target_cell(ok), TARGET_HEADERS[1]: _median_spread(col(names.TARGET_EPOCHS), 0),
                "overhead [s]": _median_spread(col(names.OVERHEAD_S)), "note": _note(ok)})
    for key, of in zip(cost.KEYS, (cost.per_epoch, cost.to_target)):  # where a price was given
        values = [v for v in map(of, ok) if v is not None]
        row[key] = cost.amount(statistics.median(values)) if values else "-"
    for header, (final, _, digits) in QUALITY.items():  # each job under its own kind's header
        if kind := [j for j in ok if quality(j) == header]:
            row[header] = _median_spread(col(final, kind), digits)
    for header in (GPU_MEMORY, CPU_MEMORY):
        if kind := [j for j in ok if memory(j) == header]:
            row[header] = _median_spread(col(names.PEAK_MB, kind), 0)
    return row, first


def reference_tables(jobs: list[JobRecord], fits: dict[tuple, int] | None = None) -> list[tuple[str, str]]:
    """Study 1's table per group (every swept key but batch and repeat): batch | runs | lr |
    first epoch [s] | median epoch from 2 [s] | total time | accuracy and/or RMSE | GPU peak
    allocated MB and/or process RSS MB | overhead [s] | note. Where every group has one batch
    (a sweep over models or datasets at one batch), the groups are the rows of one table,
    `TRAINING_JOBS`, led by a ``job`` column.

    The columns a table holds follow its jobs (`sweeps.report.columns`): accuracy for
    classification jobs, RMSE for regression jobs, both where the table mixes them, each job
    filling its own; ``mem/peak_mb`` under the GPU's peak allocation for a GPU job and under the
    process's RSS for a CPU job; ``lr`` is the effective learning rate each job logged. A 1-epoch
    job's first epoch stands in for its median, marked ``*`` and explained under the table
    (`FIRST_EPOCH_NOTE`). Rows by numeric batch size; the repeats of a batch
    (``repeat=0,1,2``) are one row with the median of each figure and its [min, max]; ``note``
    flags a row whose epochs spread or whose host was loaded by other processes
    (`sweeps.report.timing_noise.unreliable`). Jobs that did not finish show their outcome
    in place of the times — an OOM as ``OOM (fits up to N)`` when ``fits``
    (`sweeps.report.runs.max_batches`) knows the largest batch that fits — marked ``[n]``,
    with their reason (tag ``error``) in full under the table (`Footnotes`). Jobs with a
    target add ``time to target [s]`` (`target_cell`) and ``epochs to target``; jobs with a
    price (``cost.per_hour``) add ``cost per epoch`` and ``cost to target`` (`sweeps.report.cost`)."""
    groups: dict[str, dict[float | None, list[JobRecord]]] = {}
    for j in jobs:
        if names.INFER_MEDIAN_MS not in j.metrics and j.params.get("task") not in ("inference", "max_batch"):
            groups.setdefault(j.label(exclude=("batch", "repeat")), {}).setdefault(j.batch, []).append(j)
    if len(groups) > 1 and all(len(by_batch) == 1 for by_batch in groups.values()):
        tables = [(TRAINING_JOBS, [(label, *next(iter(by.items()))) for label, by in groups.items()])]
    else:
        tables = [(label, [(None, batch, members) for batch, members in
                           sorted(by.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))])
                  for label, by in groups.items()]
    out = []
    for title, rows in tables:
        members = [j for *_, js in rows for j in js]
        headers = ["batch", "runs", "lr", "first epoch [s]", EPOCH_HEADER, "total time",
                   *(TARGET_HEADERS if any(has_target(j) for j in members) else ()), *quality_columns(members),
                   *memory_columns(members), *cost.columns(members, any(map(has_target, members))),
                   "overhead [s]", "note"]
        headers[:0] = ["job"] if title == TRAINING_JOBS else []
        notes, cells, marked = Footnotes(), [], False
        for label, batch, js in rows:
            row, first = _reference_row(batch, js, fits or {}, notes)
            cells.append([label if h == "job" else row.get(h, "") for h in headers])
            marked |= first
        headers = [dict(zip(cost.KEYS, cost.headers(members))).get(h, h) for h in headers]  # with the currency
        out.append((title, notes.under(with_note(md_table(headers, cells), marked))))
    return out


def max_batch_table(jobs: list[JobRecord]) -> str | None:
    """Per ``task=max_batch`` job: the largest batch that fits, the peak memory at it (the GPU's
    peak allocation, or the process's RSS for a CPU job: a column each), whether the search found
    the boundary (``exact``) or stopped at ``max_batch.limit``, and its trial count; a job that did
    not end ``ok`` has its reason under the table."""
    found = [j for j in jobs if j.params.get("task") == "max_batch"]
    if not found:
        return None
    mem, notes = memory_columns(found), Footnotes()
    rows = [[j.label(), j.outcome + notes.mark([j]), _f(j.metrics.get(names.MAX_BATCH), 0),
             *(_f(j.metrics.get(names.MAX_BATCH_PEAK_MB), 0) if memory(j) == h else "" for h in mem),
             j.tags.get(names.MAX_BATCH_BOUND_TAG, "-"), _f(j.metrics.get(names.MAX_BATCH_TRIALS), 0)]
            for j in found]
    return notes.under(md_table(["job", "outcome", "max batch", *(f"{h} at it" for h in mem), "bound", "trials"],
                                rows))


def inference_table(jobs: list[JobRecord]) -> str | None:
    """Per inference job: median, p10, p90 ms per batch and throughput; a job that did not end
    ``ok`` has its reason under the table."""
    timings = (names.INFER_MEDIAN_MS, names.INFER_P10_MS, names.INFER_P90_MS)
    notes = Footnotes()
    rows = [[j.label(), j.outcome + notes.mark([j]), *(_f(j.metrics.get(k), 3) for k in timings),
             _f(j.metrics.get(names.SAMPLES_PER_S), 1)]
            for j in jobs if names.INFER_MEDIAN_MS in j.metrics or j.params.get("task") == "inference"]
    if not rows:
        return None
    return notes.under(md_table(["job", "outcome", "median ms/batch", "p10 ms", "p90 ms", "samples/s"], rows))


def comparison(jobs: list[JobRecord], key: str) -> str:
    """Side by side over the values of ``key`` (e.g. device=cpu vs cuda): median epoch time (a
    1-epoch job's first epoch, marked; or the inference median) per remaining label, and the
    speedup of each column over the first. A job that did not end ``ok`` shows its outcome,
    its reason under the table."""
    values = list(dict.fromkeys(j.swept[key] for j in jobs if key in j.swept))
    cells: dict[str, dict[str, JobRecord]] = {}
    for j in jobs:
        if key in j.swept:
            cells.setdefault(j.label(exclude=(key,)), {})[j.swept[key]] = j

    def time_of(j: JobRecord | None) -> tuple[float | None, bool]:
        if j is None or j.outcome != "ok":
            return None, False
        t, first = j.epoch_time()
        return (t, first) if t is not None else (j.metrics.get(names.INFER_MEDIAN_MS), False)

    headers = ["job", *(f"{key}={v}" for v in values), *(f"speedup {v}" for v in values[1:])]
    rows, marked, notes = [], False, Footnotes()
    for label, row in cells.items():
        timed = [time_of(row.get(v)) for v in values]
        times = [t for t, _ in timed]
        shown = [_f(t, 3) + (FIRST_EPOCH_MARK if first else "") if t is not None
                 else (row[v].outcome.upper() + notes.mark([row[v]]) if v in row else "-")
                 for (t, first), v in zip(timed, values)]
        marked |= any(first for _, first in timed)
        speed = [f"{times[0] / t:.2f}×" if times[0] and t else "-" for t in times[1:]]
        rows.append([label, *shown, *speed])
    return notes.under(with_note(md_table(headers, rows), marked))


def scaling_efficiency(jobs: list[JobRecord]) -> str | None:
    """Data-parallel scaling: for each config run on 1 and on N processes (metric
    ``device.world_size``, 1 where absent), ``perf/scaling_efficiency`` = throughput_N / (N ×
    throughput_1), throughput = ``perf/samples_per_s`` (last epoch). None when no pair exists."""
    cells: dict[str, dict[int, float]] = {}
    for j in jobs:
        if j.outcome == "ok" and names.SAMPLES_PER_S in j.metrics:
            world = int(j.metrics.get("device.world_size", 1))
            cells.setdefault(j.label(exclude=("device", "device.gpus", "device.backend")), {})[world] = \
                j.metrics[names.SAMPLES_PER_S]
    rows = [[label, f"{n}", _f(by[1], 1), _f(by[n], 1), f"{by[n] / (n * by[1]):.2f}"]
            for label, by in cells.items() if 1 in by for n in sorted(by) if n > 1]
    if not rows:
        return None
    return md_table(["job", "processes", "samples/s on 1", "samples/s on N", names.SCALING_EFFICIENCY], rows)
