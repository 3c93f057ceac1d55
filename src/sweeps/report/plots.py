"""Figures of a sweep, and of runs compared side by side (PNG through matplotlib's object API:
`Figure`, no pyplot global state, no display).

Each function writes one figure to ``path`` and returns it, or returns None when the runs hold
nothing to draw (e.g. no telemetry), so the report only lists figures that exist.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from sweeps import names
from sweeps.names import PHASES
from sweeps.report.runs import JobRecord


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)  # a bare Figure renders with the Agg canvas: no pyplot state, no display
    return path


def _by_group(jobs: list[JobRecord], metric: str) -> dict[str, list[tuple[float, float]]]:
    """``{label without batch: [(batch, value)]}`` for ok jobs that have ``metric``, by batch."""
    groups: dict[str, list] = defaultdict(list)
    for j in jobs:
        if j.outcome == "ok" and j.batch is not None and metric in j.metrics:
            groups[j.label(exclude=("batch",))].append((j.batch, j.metrics[metric]))
    return {k: sorted(v) for k, v in groups.items()}


def versus_batch(jobs: list[JobRecord], metric: str, ylabel: str, path: Path, logy: bool = False) -> Path | None:
    """``metric`` against batch size, one line per model/device (every swept key but batch)."""
    groups = _by_group(jobs, metric)
    if not groups or all(len(v) < 2 for v in groups.values()):
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    batches = sorted({b for points in groups.values() for b, _ in points})
    for label, points in groups.items():
        line, = ax.plot([b for b, _ in points], [v for _, v in points], marker="o", label=label)
        for j in jobs:  # where the batch did not fit: a dotted line in the group's colour
            if j.outcome == "oom" and j.batch is not None and j.label(exclude=("batch",)) == label:
                ax.axvline(j.batch, color=line.get_color(), ls=":", alpha=0.7)
                ax.annotate("OOM", (j.batch, 1), xycoords=("data", "axes fraction"), ha="center",
                            va="bottom", fontsize=7, color=line.get_color())
                batches.append(j.batch)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(batches)), [f"{b:.0f}" for b in sorted(set(batches))])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def phase_breakdown(jobs: list[JobRecord], path: Path) -> Path | None:
    """Stacked bars: mean data/forward/backward/optimizer time per iteration (last epoch), per job."""
    rows = [j for j in jobs if all(names.phase_ms(p) in j.metrics for p in PHASES)]
    if not rows:
        return None
    fig = Figure(figsize=(max(6.4, 0.7 * len(rows) + 2), 4.4))
    ax = fig.subplots()
    bottom = [0.0] * len(rows)
    for phase in PHASES:
        values = [j.metrics[names.phase_ms(phase)] for j in rows]
        ax.bar(range(len(rows)), values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(rows)), [j.label() for j in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per iteration")
    ax.legend(fontsize=8)
    return _save(fig, path)


def step_diagnosis(jobs: list[JobRecord], path: Path) -> Path | None:
    """Stacked bars: where each diagnosed job's step goes (``diag/<part>_pct``, 100 % a bar),
    its bottleneck (tag ``diag.bottleneck``) above it; None where no job was diagnosed."""
    rows = [j for j in jobs if all(names.diag_pct(p) in j.metrics for p in names.DIAG_PARTS)]
    if not rows:
        return None
    fig = Figure(figsize=(max(6.4, 0.7 * len(rows) + 2), 4.6))
    ax = fig.subplots()
    bottom = [0.0] * len(rows)
    for part in names.DIAG_PARTS:
        values = [j.metrics[names.diag_pct(part)] for j in rows]
        ax.bar(range(len(rows)), values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    for i, j in enumerate(rows):
        ax.annotate(j.tags.get(names.BOTTLENECK_TAG, ""), (i, 101), ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 112)
    ax.set_xticks(range(len(rows)), [j.label() for j in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of a step")
    ax.legend(fontsize=8, ncols=len(names.DIAG_PARTS), loc="lower center", bbox_to_anchor=(0.5, 1.04))
    return _save(fig, path)


def inference_by_method(jobs: list[JobRecord], path: Path) -> Path | None:
    """Median time per batch (p10–p90 whiskers) per inference job, log scale: the naive host
    clock's error against the synchronized and CUDA-event timings is orders of magnitude."""
    rows = [j for j in jobs if names.INFER_MEDIAN_MS in j.metrics]
    if not rows:
        return None
    med = [j.metrics[names.INFER_MEDIAN_MS] for j in rows]
    low = [m - j.metrics.get(names.INFER_P10_MS, m) for m, j in zip(med, rows)]
    high = [j.metrics.get(names.INFER_P90_MS, m) - m for m, j in zip(med, rows)]
    fig = Figure(figsize=(max(6.4, 0.8 * len(rows) + 2), 4.2))
    ax = fig.subplots()
    colors = {"naive": "tab:red", "sync": "tab:blue", "events": "tab:green"}
    ax.bar(range(len(rows)), med, yerr=[low, high], capsize=3,
           color=[colors.get(j.params.get("timing.mode", ""), "tab:gray") for j in rows])
    ax.set_xticks(range(len(rows)), [j.label() for j in rows], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms per batch (median, p10–p90)")
    return _save(fig, path)


def per_epoch(jobs: list[JobRecord], history: Callable[[str, str], list], metric: str, ylabel: str,
              path: Path) -> Path | None:
    """A per-epoch metric (e.g. ``system/gpu/energy_j``) over epochs, one line per job that logged it."""
    series = {j.label(): history(j.run_id, metric) for j in jobs if metric in j.metrics}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    for label, points in series.items():
        ax.plot([s for s, _ in points], [v for _, v in points], marker=".", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _offsets(n: int, width: float) -> list[float]:
    """Bar centres of ``n`` groups side by side around each configuration's tick."""
    return [(i - (n - 1) / 2) * width for i in range(n)]


def grouped_bars(cells: dict[str, dict[str, tuple[float, float, float, bool]]], groups: list[str], ylabel: str,
                 path: Path) -> Path | None:
    """``--compare``: one cluster per configuration, one bar per group side by side — the median
    of its runs with [min, max] whiskers; a hatched bar is a 1-epoch job's first epoch standing in
    for the median. ``cells[config][group] = (median, min, max, first_epoch)``. Log scale when the
    bars span more than 20×."""
    configs = [c for c, by in cells.items() if by]
    if not configs:
        return None
    width = 0.8 / len(groups)
    fig = Figure(figsize=(max(6.4, 0.45 * len(configs) * len(groups) + 2.5), 4.6))
    ax = fig.subplots()
    for offset, group in zip(_offsets(len(groups), width), groups):
        at = [(k, cells[c][group]) for k, c in enumerate(configs) if group in cells[c]]
        if not at:
            continue
        bars = ax.bar([k + offset for k, _ in at], [m for _, (m, *_) in at], width, label=group,
                      yerr=[[m - lo for _, (m, lo, _, _) in at], [hi - m for _, (m, _, hi, _) in at]], capsize=3)
        for bar, (_, (*_, first)) in zip(bars, at):
            if first:
                bar.set_hatch("//")
    values = [v[0] for by in cells.values() for v in by.values() if v[0] > 0]
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xticks(range(len(configs)), configs, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def grouped_phases(cells: dict[str, dict[str, list[float]]], groups: list[str], path: Path) -> Path | None:
    """``--compare``: stacked data/forward/backward/optimizer ms per iteration (median over the
    runs, last epoch), one bar per group side by side for each configuration; groups told apart
    by hatching. ``cells[config][group]`` = the phase times in `PHASES` order."""
    configs = [c for c, by in cells.items() if by]
    if not configs:
        return None
    width = 0.8 / len(groups)
    hatches = ["", "//", "..", "xx", "\\\\", "oo"]
    colors = [f"C{i}" for i in range(len(PHASES))]
    fig = Figure(figsize=(max(6.4, 0.45 * len(configs) * len(groups) + 2.5), 4.6))
    ax = fig.subplots()
    for n, (offset, group) in enumerate(zip(_offsets(len(groups), width), groups)):
        at = [(k, cells[c][group]) for k, c in enumerate(configs) if group in cells[c]]
        bottom = [0.0] * len(at)
        for i, phase in enumerate(PHASES):
            values = [v[i] for _, v in at]
            ax.bar([k + offset for k, _ in at], values, width, bottom=bottom, color=colors[i],
                   hatch=hatches[n % len(hatches)], edgecolor="white",
                   label=phase if n == 0 else None)
            bottom = [b + v for b, v in zip(bottom, values)]
        if at:  # the hatching legend: which bar is which group
            ax.bar([0], [0], 0, color="white", edgecolor="gray", hatch=hatches[n % len(hatches)], label=group)
    ax.set_xticks(range(len(configs)), configs, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per iteration")
    ax.legend(fontsize=8)
    return _save(fig, path)


def to_target(jobs: list[JobRecord], path: Path, exclude: tuple[str, ...] = ("batch", "repeat"),
              marks: dict[tuple[str, float], float] | None = None) -> Path | None:
    """Steps and examples to the target quality against batch size, log–log, one line per
    model/device (every swept key but ``exclude``): the median over repeats with [min, max]
    bars, and the perfect-scaling reference through the smallest batch — steps × batch constant,
    i.e. examples constant (Shallue et al. 2019, "Measuring the Effects of Data Parallelism on
    Neural Network Training", Fig. 1). A batch whose runs all missed the target is marked; with
    ``marks`` (``{(label, batch): lr}``: the lr tuned per batch, `sweeps.report.best_lr.tuned`)
    each point is labelled with its lr."""
    groups: dict[str, dict[float, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    missed: dict[str, set[float]] = defaultdict(set)
    for j in jobs:
        if j.outcome != "ok" or j.batch is None:
            continue
        label = j.label(exclude=exclude)
        if names.TARGET_STEPS in j.metrics:
            groups[label][j.batch].append((j.metrics[names.TARGET_STEPS], j.metrics[names.TARGET_SAMPLES]))
        elif j.tags.get(names.TARGET_TAG) == names.TARGET_MISSED:
            missed[label].add(j.batch)
    if not any(len(points) >= 2 for points in groups.values()):
        return None
    fig = Figure(figsize=(10, 4.2))
    axes = fig.subplots(1, 2)
    for label, by_batch in groups.items():
        batches = sorted(by_batch)
        for ax, i in zip(axes, (0, 1)):
            values = [sorted(v[i] for v in by_batch[b]) for b in batches]
            mid = [v[len(v) // 2] for v in values]
            line = ax.errorbar(batches, mid, yerr=[[m - v[0] for m, v in zip(mid, values)],
                                                   [v[-1] - m for m, v in zip(mid, values)]],
                               marker="o", capsize=3, label=label)[0]
            ref = [mid[0] * batches[0] / b for b in batches] if i == 0 else [mid[0]] * len(batches)
            ax.plot(batches, ref, ls="--", color=line.get_color(), alpha=0.5)
            for b, m in zip(batches, mid):
                if (label, b) in (marks or {}):
                    ax.annotate(f"lr {marks[label, b]:.3g}", (b, m), textcoords="offset points", xytext=(4, 4),
                                fontsize=7, color=line.get_color())
            for b in missed.get(label, ()):
                ax.axvline(b, color=line.get_color(), ls=":", alpha=0.7)
                ax.annotate("missed", (b, 1), xycoords=("data", "axes fraction"), ha="center", va="bottom",
                            fontsize=7, color=line.get_color())
    ticks = sorted({b for by_batch in groups.values() for b in by_batch} | {b for m in missed.values() for b in m})
    for ax, ylabel in zip(axes, ("steps to target", "examples to target")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{b:.0f}" for b in ticks])
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3, which="both")
    title = "dashed: perfect scaling" + ("; each batch at its best lr" if marks else "")
    axes[0].legend(fontsize=8, title=title, title_fontsize=8)
    return _save(fig, path)
