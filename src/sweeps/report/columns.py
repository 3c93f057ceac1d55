"""What a job's cells in the report's tables mean, job by job: its quality (accuracy for a
classification job, RMSE for a regression job), what its memory figure measures (the GPU's peak
allocation or the process's RSS), its effective learning rate, and the footnotes that give each
job that did not end ``ok`` its reason. A table that mixes kinds gets a column per kind, each job
filling its own, so no figure sits under another figure's header."""
from __future__ import annotations

import textwrap
from typing import Sequence

from sweeps import names
from sweeps.report.runs import JobRecord, used_device

# Quality column header → (summary metric, per-epoch metric, digits shown), in table order.
ACCURACY, RMSE = "accuracy", "RMSE"
QUALITY = {ACCURACY: (names.FINAL_ACC, names.TEST_ACC, 4), RMSE: (names.FINAL_RMSE, names.TEST_RMSE, 2)}
# mem/peak_mb is torch's peak allocation on a GPU, the process's peak resident set on a CPU
# (sweeps.train.loop.Trainer.peak_memory_mb): two different quantities, never one column.
GPU_MEMORY, CPU_MEMORY = "GPU peak allocated MB", "process RSS MB"
FOOTNOTE_WIDTH = 100  # columns: a footnote's lines wrap here, between words


def quality(job: JobRecord) -> str | None:
    """`ACCURACY` or `RMSE`: the quality column ``job`` fills, from the score it logged,
    else its ``dataset.regression`` param; None when neither tells (a job that never trained)."""
    for header, (final, per_epoch, _) in QUALITY.items():
        if final in job.metrics or per_epoch in job.metrics:
            return header
    regression = job.params.get("dataset.regression")
    return {"True": RMSE, "False": ACCURACY}.get(regression or "")


def quality_columns(jobs: Sequence[JobRecord]) -> list[str]:
    """The quality headers a table of ``jobs`` needs: each kind present, accuracy first;
    ``[accuracy]`` when no job tells (the default task)."""
    kinds = {quality(j) for j in jobs}
    return [h for h in QUALITY if h in kinds] or [ACCURACY]


def memory(job: JobRecord) -> str:
    """`GPU_MEMORY` or `CPU_MEMORY`: what ``job``'s ``mem/peak_mb`` measures, from the
    device it ran on (`sweeps.report.runs.used_device`)."""
    return GPU_MEMORY if used_device(job.params, job.tags) == "cuda" else CPU_MEMORY


def memory_columns(jobs: Sequence[JobRecord]) -> list[str]:
    """The memory headers a table of ``jobs`` needs: GPU first, each only where a job has it."""
    kinds = {memory(j) for j in jobs}
    return [h for h in (GPU_MEMORY, CPU_MEMORY) if h in kinds] or [CPU_MEMORY]


def lr_cell(jobs: Sequence[JobRecord]) -> str:
    """The effective learning rate the ``jobs`` logged (metric ``lr``, 4 significant digits); the
    distinct values joined by ``, `` where they differ; ``-`` where none logged one (a job that
    ended before its data was ready)."""
    values = dict.fromkeys(f"{j.metrics[names.LR]:.4g}" for j in jobs if names.LR in j.metrics)
    return ", ".join(values) or "-"


class Footnotes:
    """Numbered reasons under one table: `mark` puts ``[n]`` in a cell, `under`
    writes each reason in full below the table. One number per distinct reason."""

    def __init__(self) -> None:
        self.reasons: dict[str, int] = {}

    def mark(self, jobs: Sequence[JobRecord]) -> str:
        """`` [n]`` (`` [n, m]`` for several reasons) for the ``jobs`` that did not end ``ok`` and
        logged a reason (tag ``error``); ``""`` for none."""
        numbers = [self.reasons.setdefault(j.error, len(self.reasons) + 1)
                   for j in jobs if j.outcome != names.OK and j.error]
        return f" [{', '.join(str(n) for n in dict.fromkeys(numbers))}]" if numbers else ""

    def under(self, table: str) -> str:
        """``table`` followed by its footnotes, each a paragraph of its own, ``[n] reason``,
        wrapped at `FOOTNOTE_WIDTH` columns between words (a word longer than that, a path,
        keeps its own line whole); continuation lines indented under the reason."""
        notes = [textwrap.fill(f"[{n}] {reason}", FOOTNOTE_WIDTH, subsequent_indent="    ",
                               break_long_words=False, break_on_hyphens=False)
                 for reason, n in self.reasons.items()]
        return "\n\n".join([table, *notes])
