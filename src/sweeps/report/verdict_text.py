"""The verdict in words: one short paragraph per group (model × dataset and every other swept key
but batch, repeat, lr, device and data size) at the top of the report, the same on the sweep's
parent run in MLflow (tags), and the findings as a ``pandas.DataFrame`` (`frame`)."""
from __future__ import annotations

import re
from dataclasses import asdict
from typing import TYPE_CHECKING

from sweeps import names
from sweeps.report import cost
from sweeps.report.verdict import KNEE_GAIN, Finding

if TYPE_CHECKING:
    from mlflow import MlflowClient


def _num(x: float) -> str:
    return f"{x:.0f}" if x == int(x) else f"{x:.3g}"


def _money(value: float | None, unit: str) -> str:
    return f"{cost.amount(value)}{' ' + unit if unit else ''}"


def _runs(n: int) -> str:
    return f"{n} run{'s' * (n != 1)}"


def _figure(f: Finding, which: str, runs: bool = True) -> str:
    """The figure behind an answer, with its run count and range: ``"3.1 s, median of 3 runs,
    2.9–3.4"`` (``runs`` False: ``"3.1 s"``); the bare median where the figure's runs are not known."""
    fig = f.target_figure if which == "target" else f.throughput_figure
    fmt, unit = ("{:.3g}", "s") if which == "target" else ("{:,.0f}", "samples/s")
    value = f.time_to_target_s if which == "target" else f.samples_per_s
    if fig is not None and runs:
        return fig.text(fmt, unit)
    return f"{fmt.format(value)} {unit}"


def _alone(f: Finding, which: str) -> str:
    """A group's one batch: ``"5,000,000 samples/s at batch 100000 (1 run)"``."""
    fig = f.target_figure if which == "target" else f.throughput_figure
    batch = f.target_batch if which == "target" else f.throughput_batch
    to = " to target" if which == "target" else ""
    runs = f" ({fig.runs('{:.3g}' if which == 'target' else '{:,.0f}')})" if fig is not None else ""
    return f"{_figure(f, which, runs=False)}{to} at batch {_num(batch)}{runs}"


def sentence(f: Finding, size: bool = True) -> str:
    """What one device's runs of a group say, led by the device (and by the data size where
    ``size``, a group that varies it): an unreachable target first; then the two answers, named
    — fastest to target and highest throughput, each with its figure, run count and range, or the
    batches that tie — and, without a target, the quality each batch reached; the lr per batch and
    what the lr grid cannot tell; the knee, the largest batch that fits, energy, money, what holds
    the picked batch back (its diagnosis, and what its advice measured); then a note of what
    differs, ties, the spread and drift."""
    parts = [f.target_missed] if f.target_missed else []
    several = f.batches > 1
    if f.target_batch is not None:
        lr = f" at lr {f.best_lr:.3g}" if f.best_lr is not None else ""
        parts.append(f"fastest to target: batch {_num(f.target_batch)}{lr} ({_figure(f, 'target')})" if several
                     else _alone(f, "target"))
    elif f.target_tie:
        parts.append(f"fastest to target: a tie between batch {f.target_tie}")
    if f.throughput_batch is not None:
        parts.append(f"highest throughput: batch {_num(f.throughput_batch)} ({_figure(f, 'throughput')})"
                     if several else _alone(f, "throughput"))
    elif f.throughput_tie:
        parts.append(f"highest throughput: a tie between batch {f.throughput_tie}")
    if f.batches == 0:
        parts.append("no job ended ok")
    elif not parts and not f.note:
        parts.append("no batch to pick: no timings")
    if f.quality and several:
        parts.append(f"quality reached per batch {f.quality}")
    if f.quality_warning:
        parts.append(f.quality_warning)
    if f.lr_per_batch:
        parts.append(f"best lr per batch {f.lr_per_batch}")
    if f.grid:
        parts.append(f.grid)
    if f.knee is not None:
        parts.append(f"throughput knee at batch {_num(f.knee)} (each doubling past it gains < "
                     f"{100 * KNEE_GAIN:.0f}% samples/s)")
    elif f.last_gain is not None:
        parts.append(f"no throughput knee (the doubling to the largest batch still gains {100 * f.last_gain:.0f}% "
                     "samples/s)")
    if f.fits is not None and (several or f.fits_how != "all tried fit"):
        parts.append(f"largest batch that fits {_num(f.fits)} ({f.fits_how})")
    elif f.fits_how.startswith("OOM"):
        parts.append(f"no batch fits ({f.fits_how})")
    if f.energy_per_epoch_j is not None:
        to_target = f", {f.energy_to_target_j:.4g} J to target" if f.energy_to_target_j is not None else ""
        parts.append(f"GPU energy {f.energy_per_epoch_j:.4g} J per epoch{to_target}")
    if f.cost_per_epoch is not None:
        to_target = f", {_money(f.cost_to_target, f.currency)} to target" if f.cost_to_target is not None else ""
        parts.append(f"cost {_money(f.cost_per_epoch, f.currency)} per epoch{to_target}")
    if f.diagnosis:
        parts.append(f"what holds batch {_num(f.best_batch)} back: {f.diagnosis}" if f.best_batch is not None
                     else f.diagnosis)
    rows = f" at {f.train_size:,} rows" if size and f.train_size is not None else ""
    text = f"{f.device}{rows}: " + "; ".join(parts) + "."
    notes = "; ".join(n for n in (f.note, f"the machine drifted: {f.drift}" if f.drift else "") if n)
    return text + (f" Note: {notes}." if notes else "")


def _devices(rows: list[Finding]) -> list[str]:
    """Which device wins at each size, and the crossover where the winner changes."""
    out, by_size = [], {}
    for f in rows:
        by_size.setdefault(f.train_size, []).append(f)
    for size, fs in by_size.items():
        winner = next((f for f in fs if f.wins), None)
        if winner is not None:
            others = ", ".join(f.device for f in fs if f is not winner)
            by = "time to target" if winner.by == "time to target" and all(f.time_to_target_s for f in fs) \
                else "samples/s"
            at = f" at {size:,} rows" if size is not None else ""
            out.append(f"{winner.device} wins{at}: {winner.speedup:.2f}× {others} ({by}).")
    flip = rows[0].crossover_rows if rows else None
    if flip is not None:
        winner = next(f.device for f in by_size[flip] if f.wins)
        out.append(f"Crossover: {winner} wins from {flip:,} rows.")
    return out


def _sizes_vary(rows: list[Finding]) -> bool:
    return len({f.train_size for f in rows}) > 1


def paragraphs(rows: list[Finding]) -> list[tuple[str, str]]:
    """``[(group, paragraph)]``: per group, which device wins by how much and the crossover over the
    data size, then a sentence per device and data size."""
    groups: dict[str, list[Finding]] = {}
    for f in rows:
        groups.setdefault(f.group, []).append(f)
    out = []
    for group, fs in groups.items():
        rest = " ".join(p for p in group.split() if not p.startswith(("model=", "dataset="))) if group != "all" else ""
        head = f"**{fs[0].model} on {fs[0].dataset}**" + (f" ({rest})" if rest else "")
        sized = _sizes_vary(fs)
        out.append((group, " ".join([head + " —", *_devices(fs), *(sentence(f, sized) for f in fs)])))
    return out


def markdown(rows: list[Finding]) -> list[str]:
    """The report's ``## Verdict`` section, as lines (none without findings)."""
    if not rows:
        return []
    lines = ["## Verdict", ""]
    for _, text in paragraphs(rows):
        lines += [text, ""]
    return lines


def tag_key(group: str) -> str:
    """The parent run's tag for a group's paragraph: ``sweeps.verdict.`` + the group, ``=`` written
    ``:`` and other characters MLflow keys refuse as ``_`` (``model=mlp`` → ``sweeps.verdict.model:mlp``)."""
    return names.VERDICT_TAG_PREFIX + re.sub(r"[^\w./\- :]", "_", group.replace("=", ":"))


def log_to_parent(client: MlflowClient, parent_run_id: str, rows: list[Finding]) -> None:
    """Set the verdict on the sweep's parent run: tag ``sweeps.verdict`` (every paragraph) and,
    where there are several groups, ``sweeps.verdict.<group>`` (one each), cut to MLflow's tag
    length. Nothing without findings."""
    found = paragraphs(rows)
    if not found:
        return
    tags = {names.VERDICT_TAG: "\n\n".join(text for _, text in found)}
    tags.update({tag_key(group): text for group, text in found} if len(found) > 1 else {})
    for key, value in tags.items():
        client.set_tag(parent_run_id, key, value[:names.MAX_TAG_VAL_LENGTH])


def frame(rows: list[Finding]):
    """The findings as a ``pandas.DataFrame``: one row per group × data size × device, the fields of
    [`Finding`][sweeps.report.verdict.Finding] as columns, plus ``verdict`` (its device's sentence)."""
    import pandas as pd

    sized = {g for g in {f.group for f in rows} if _sizes_vary([f for f in rows if f.group == g])}
    keep = [k for k in Finding.__dataclass_fields__ if k not in Finding.FRAME_EXCLUDE]
    return pd.DataFrame([{**{k: v for k, v in asdict(f).items() if k in keep}, "verdict": sentence(f, f.group in sized)}
                         for f in rows], columns=[*keep, "verdict"])
