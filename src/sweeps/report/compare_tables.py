"""``python -m sweeps.report --compare``, written out: per configuration a table with a column per
group (median [min, max] over its runs) and the ratio of each group to the baseline, an overview
of median epoch times, and the figures side by side (``compare.md`` in the output folder)."""
from __future__ import annotations

import statistics
from datetime import datetime, timezone
from pathlib import Path

from sweeps import names
from sweeps.report import plots
from sweeps.report.columns import CPU_MEMORY, GPU_MEMORY, memory
from sweeps.report.compare import Comparison
from sweeps.report.runs import JobRecord
from sweeps.report.tables import FIRST_EPOCH_MARK, epoch_values, md_table, with_note
from sweeps.report.timing_noise import unreliable

# (row label, metric, which runs): the latest value of each, per run; a row shows where any run
# has it. mem/peak_mb is a GPU's peak allocation for a GPU job and the process's RSS for a CPU job
# (sweeps.report.columns): a row each, so a cpu-vs-cuda comparison never divides one by the other.
ROWS = (("first epoch [s]", names.FIRST_EPOCH_S, None), ("samples/s (last epoch)", names.SAMPLES_PER_S, None),
        *((f"{p} [ms/iteration]", names.phase_ms(p), None) for p in names.PHASES),
        ("inference median [ms/batch]", names.INFER_MEDIAN_MS, None), ("test accuracy", names.FINAL_ACC, None),
        ("test RMSE", names.FINAL_RMSE, None), ("energy [J/sample]", names.ENERGY_J_PER_SAMPLE, None),
        (GPU_MEMORY, names.PEAK_MB, GPU_MEMORY), (CPU_MEMORY, names.PEAK_MB, CPU_MEMORY),
        ("largest batch that fits", names.MAX_BATCH, None),
        ("time to target [s]", names.TO_TARGET_S, None), ("epochs to target", names.TARGET_EPOCHS, None),
        ("steps to target", names.TARGET_STEPS, None))
EPOCH_ROW = "median epoch from 2 [s]"


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}"


def _spread(values: list[float]) -> str:
    """``m [lo, hi]`` (median, min, max) for several values, ``m`` for one (or several that print
    the same), ``-`` for none."""
    if not values:
        return "-"
    lo, hi = _num(min(values)), _num(max(values))
    return lo if lo == hi else f"{_num(statistics.median(values))} [{lo}, {hi}]"


def _ok(jobs: list[JobRecord]) -> list[JobRecord]:
    return [j for j in jobs if j.outcome == names.OK]


def _epoch_values(jobs: list[JobRecord]) -> tuple[list[float], bool]:
    return epoch_values(_ok(jobs))  # ok runs only: an OOM's partial epochs are no figure


def _ratios(values: dict[str, list[float]], cmp: Comparison) -> list[str]:
    """Each non-baseline group's median ÷ the baseline's median."""
    base = values.get(cmp.baseline)
    base_m = statistics.median(base) if base else None
    return [f"{statistics.median(v) / base_m:.2f}×" if (v := values.get(g)) and base_m else "-"
            for g in cmp.groups if g != cmp.baseline]


def ratio_headers(cmp: Comparison) -> list[str]:
    """``÷ baseline`` for two groups, ``<group> ÷ baseline`` for more (group labels run long)."""
    others = [g for g in cmp.groups if g != cmp.baseline]
    return ["÷ baseline"] if len(others) == 1 else [f"{g} ÷ baseline" for g in others]


def _runs_cell(jobs: list[JobRecord]) -> str:
    """``ok/all``, and how the others ended (``0/1 OOM``)."""
    if not jobs:
        return "-"
    failed = [j.outcome.upper() for j in jobs if j.outcome != names.OK]
    return f"{len(jobs) - len(failed)}/{len(jobs)}" + (f" {', '.join(sorted(set(failed)))}" if failed else "")


def _epoch_row(label: str, by_group: dict[str, list[JobRecord]], cmp: Comparison) -> tuple[list[str] | None, bool]:
    """``label``, the median epoch time per group and the ratios (None where no run has one);
    ``True`` when a 1-epoch job's first epoch stands in (the cell is marked)."""
    epoch = {g: _epoch_values(by_group.get(g, [])) for g in cmp.groups}
    if not any(v for v, _ in epoch.values()):
        return None, False
    return ([label, *(_spread(v) + (FIRST_EPOCH_MARK if m else "") for v, m in epoch.values()),
             *_ratios({g: v for g, (v, _) in epoch.items()}, cmp)], any(m for _, m in epoch.values()))


def _notes(jobs: list[JobRecord]) -> str:
    """Why the group's figures should not be trusted, from any of its runs ("" when they can)."""
    m = [j.metrics for j in _ok(jobs)]
    return "; ".join(sorted({n for x in m if (n := unreliable(
        x.get(names.EPOCH_P10_S), x.get(names.EPOCH_P90_S), x.get(names.OTHER_CPU_MEAN_PCT)))}))


def config_table(by_group: dict[str, list[JobRecord]], cmp: Comparison) -> str:
    """One configuration: a row per figure, a column per group, then the ratio columns; a 1-epoch
    job's first epoch standing in for the median is marked and explained under the table."""
    blank = ["" for g in cmp.groups if g != cmp.baseline]
    runs = {g: by_group.get(g, []) for g in cmp.groups}
    rows = [["runs ok", *(_runs_cell(runs[g]) for g in cmp.groups), *blank]]
    epoch, marked = _epoch_row(EPOCH_ROW, by_group, cmp)
    rows += [epoch] if epoch else []
    for label, metric, kind in ROWS:
        values = {g: [j.metrics[metric] for j in _ok(runs[g]) if metric in j.metrics
                      and kind in (None, memory(j))] for g in cmp.groups}
        if any(values.values()):
            rows.append([label, *(_spread(values[g]) for g in cmp.groups), *_ratios(values, cmp)])
    notes = [_notes(runs[g]) for g in cmp.groups]
    rows += [["note", *notes, *blank]] if any(notes) else []
    return with_note(md_table(["", *cmp.groups, *ratio_headers(cmp)], rows), marked)


def overview(cmp: Comparison) -> str | None:
    """Median epoch time per configuration (rows) and group (columns), with the ratios; None when
    no run has an epoch time (inference or max-batch jobs only)."""
    rows, marked = [], False
    for config, by_group in cmp.configs.items():
        row, first = _epoch_row(config, by_group, cmp)
        rows += [row] if row else []
        marked |= first
    return with_note(md_table(["configuration", *cmp.groups, *ratio_headers(cmp)], rows), marked) if rows else None


def _figures(cmp: Comparison, out: Path) -> list[tuple[str, Path | None]]:
    def bars(values_of) -> dict[str, dict[str, tuple]]:
        cells: dict[str, dict[str, tuple]] = {}
        for config, by_group in cmp.configs.items():
            for g in cmp.groups:
                values, marked = values_of(by_group.get(g, []))
                if values:
                    cells.setdefault(config, {})[g] = (statistics.median(values), min(values), max(values), marked)
        return cells

    def metric(key):
        return lambda js: ([j.metrics[key] for j in _ok(js) if key in j.metrics], False)

    phases = {c: {g: [statistics.median(j.metrics[names.phase_ms(p)] for j in js) for p in names.PHASES]
                  for g in cmp.groups if (js := [j for j in _ok(by_group.get(g, []))
                                                 if all(names.phase_ms(p) in j.metrics for p in names.PHASES)])}
              for c, by_group in cmp.configs.items()}
    return [
        ("Median epoch time", plots.grouped_bars(bars(_epoch_values), cmp.groups, EPOCH_ROW,
                                                 out / "compare_epoch_time.png")),
        ("Throughput", plots.grouped_bars(bars(metric(names.SAMPLES_PER_S)), cmp.groups, "samples/s",
                                          out / "compare_samples_per_s.png")),
        ("Phase times per iteration", plots.grouped_phases(phases, cmp.groups, out / "compare_phases.png")),
        ("Energy per sample", plots.grouped_bars(bars(metric(names.ENERGY_J_PER_SAMPLE)), cmp.groups, "J/sample",
                                                 out / "compare_energy_per_sample.png")),
    ]


def write_comparison(cmp: Comparison, where: str, out: Path) -> Path:
    """Write ``out/compare.md`` and its figures; returns its path. ``where`` names the store and
    the selection in the header."""
    out.mkdir(parents=True, exist_ok=True)
    count = {g: sum(len(by.get(g, [])) for by in cmp.configs.values()) for g in cmp.groups}
    lines = [f"# Comparison by {cmp.asked}", "", f"- runs: {where}",
             f"- {sum(count.values())} job runs in {len(cmp.configs)} configurations"
             + (f" (told apart by {', '.join(cmp.label_keys)})" if cmp.label_keys else ""),
             "- groups: " + ", ".join(f"`{g}` ({n} runs)" for g, n in count.items()) + f"; baseline `{cmp.baseline}`",
             "- `÷ baseline`: a group's median over the baseline's (times: above 1 is slower; samples/s: above 1 "
             "is faster); cells are median [min, max] over a group's runs of the configuration",
             f"- generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", ""]
    if cmp.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in cmp.warnings), ""]
    if (table := overview(cmp)) is not None:
        lines += [f"## {EPOCH_ROW} by configuration", "", table, ""]
    for config, by_group in cmp.configs.items():
        lines += [f"## {config}", "", config_table(by_group, cmp), ""]
    for title, path in _figures(cmp, out):
        if path is not None:
            lines += [f"## {title}", "", f"![{title}]({path.name})", ""]
    report = out / "compare.md"
    report.write_text("\n".join(lines))
    return report
