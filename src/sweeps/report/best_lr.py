"""The learning rate tuned per batch size: where a sweep runs each batch at several learning rates
(``optimizer.lr`` or ``optimizer.base_lr`` swept beside ``batch``), the lr that reached the
target in the fewest steps, and the curve of that lr against the batch.

Steps to target only mean something with the lr tuned at each batch (Shallue et al. 2019,
"Measuring the Effects of Data Parallelism on Neural Network Training"; Goyal et al. 2017):
one lr for every batch compares a well-tuned batch with a badly tuned one.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sweeps import names
from sweeps.report.runs import JobRecord

EXCLUDE = ("batch", "repeat", *names.LR_PARAMS)  # a line of the figures: every swept key but these
# The one tie rule (`choose`), as docs/reading-results.md states it word for word (a test checks):
TIE_RULE = ("per batch, the lr with the fewest steps to target (median over repeats) is the best; lrs level "
            "on steps tie, the verdict says so, and the one with the better final score on the target's "
            "metric, then the smaller lr, stands for the batch")


@dataclass
class Choice:
    """The runs a batch size is judged by."""

    batch: float
    lr: float | None  # the chosen effective lr (metric ``lr``); None: no lr reached the target
    jobs: list[JobRecord] = field(default_factory=list)  # its ok runs (every ok run of the batch when lr is None)
    lrs: int = 1  # how many learning rates the batch ran at
    tied: list[float] = field(default_factory=list)  # lrs level on steps to target with the chosen one (it among them)

    @property
    def reached(self) -> bool:
        return self.lr is not None and all(names.TARGET_STEPS in j.metrics for j in self.jobs)


def _median(jobs: list[JobRecord], key: str) -> float:
    return statistics.median(j.metrics[key] for j in jobs)


def _final(jobs: list[JobRecord]) -> float:
    """The runs' final score on their target's metric (``test/final_acc`` for ``test/acc``,
    ``test/final_rmse`` for ``test/rmse``), signed so that lower is better; 0 where there is none."""
    final = {names.TEST_ACC: names.FINAL_ACC, names.TEST_RMSE: names.FINAL_RMSE}.get(
        jobs[0].params.get(names.TARGET_METRIC_PARAM, ""))
    if final is None or not all(final in j.metrics for j in jobs):
        return 0.0
    return _median(jobs, final) * (-1 if jobs[0].params.get(names.TARGET_MODE_PARAM, "max") == "max" else 1)


def choose(jobs: list[JobRecord]) -> dict[float, Choice]:
    """``{batch: Choice}`` for the ok training runs among ``jobs`` (one model, dataset and device),
    by numeric batch. Per batch, its runs grouped by effective lr (4 significant digits); an lr
    counts when every ok run of it reached the target. The tie rule (`TIE_RULE`): the
    chosen lr has the fewest steps to target (median over repeats, metric
    ``target/steps``); lrs level on steps — a target is only checked where the runs evaluate, so
    they often are — are a tie (`Choice.tied`, which the verdict states), and of them the
    one with the better final score on the target's metric stands for the batch, then the smaller
    lr. A batch where no lr reached (or that ran without a target) gets ``lr`` None and all its ok
    runs — unless it ran at one lr, which is then its lr (``reached`` tells the two apart)."""
    by_batch: dict[float, dict[str, list[JobRecord]]] = defaultdict(lambda: defaultdict(list))
    for j in jobs:
        if j.outcome == names.OK and j.batch is not None and names.LR in j.metrics:
            by_batch[j.batch][f"{j.metrics[names.LR]:.4g}"].append(j)
    out = {}
    for batch in sorted(by_batch):
        by_lr = by_batch[batch]
        reached = [(_median(js, names.TARGET_STEPS), _final(js), float(lr), js)
                   for lr, js in by_lr.items() if all(names.TARGET_STEPS in j.metrics for j in js)]
        if reached:
            steps, _, lr, js = min(reached, key=lambda r: r[:3])
            tied = sorted(r[2] for r in reached if r[0] == steps)
            out[batch] = Choice(batch, lr, js, len(by_lr), tied if len(tied) > 1 else [])
        elif len(by_lr) == 1:
            ((lr, js),) = by_lr.items()
            out[batch] = Choice(batch, float(lr), js, 1)
        else:
            out[batch] = Choice(batch, None, [j for js in by_lr.values() for j in js], len(by_lr))
    return out


def tried(jobs: list[JobRecord]) -> dict[float, list[float]]:
    """``{batch: [lr, ...]}``: every effective lr each batch ran at, whatever the outcome, ascending."""
    out: dict[float, set[float]] = defaultdict(set)
    for j in jobs:
        if j.batch is not None and names.LR in j.metrics:
            out[j.batch].add(float(f"{j.metrics[names.LR]:.4g}"))
    return {b: sorted(lrs) for b, lrs in sorted(out.items())}


def _next(lrs: list[float], up: bool) -> str:
    """The next two lrs past an edge of ``lrs``, on the grid's own step (the ratio of its two
    outermost lrs at that edge): ``0.3 and 1`` past 0.03, 0.1."""
    ratio = lrs[-1] / lrs[-2] if up else lrs[0] / lrs[1]
    edge = lrs[-1] if up else lrs[0]
    return f"{edge * ratio:.2g} and {edge * ratio ** 2:.2g}"


def listed(items: list[str]) -> str:
    """``a and b``, ``a, b and c``."""
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def grid_notes(jobs: list[JobRecord], choices: dict[float, Choice]) -> list[str]:
    """What an lr grid cannot tell, one phrase each: lrs tied at a batch, a best lr at an edge of
    the lrs tried (with the next two to try), lrs that diverged (outcome ``diverged``) and lrs
    whose runs ended at chance accuracy (``test/final_acc`` ≤ 1.2 ÷ the classes, param
    ``data.classes``). Nothing where no batch ran at several lrs."""
    grid = tried(jobs)
    if not any(len(lrs) > 1 for lrs in grid.values()):
        return []
    notes = [f"batch {b:.0f}: lr {listed([f'{lr:.3g}' for lr in c.tied])} tie "
             f"({_median(c.jobs, names.TARGET_STEPS):.0f} steps to target each)" for b, c in choices.items() if c.tied]
    for b, c in choices.items():
        lrs = grid.get(b, [])
        if c.reached and len(lrs) >= 2 and c.lr in (lrs[0], lrs[-1]) and not c.tied:
            up = c.lr == lrs[-1]
            notes.append(f"batch {b:.0f}'s best lr {c.lr:.3g} is the {'largest' if up else 'smallest'} tried: "
                         f"try {_next(lrs, up)} next")
    diverged = defaultdict(list)
    chance = defaultdict(list)
    for j in jobs:
        if j.batch is None or names.LR not in j.metrics:
            continue
        lr = float(f"{j.metrics[names.LR]:.4g}")
        if j.outcome == names.DIVERGED:
            diverged[lr].append(j.batch)
        classes = j.params.get(names.CLASSES_PARAM, "")
        if j.outcome == names.OK and classes.isdigit() and int(classes) > 1 and names.FINAL_ACC in j.metrics \
                and j.metrics[names.FINAL_ACC] <= 1.2 / int(classes):
            chance[lr].append(j.batch)
    for what, found in (("diverged", diverged), ("stayed at chance accuracy", chance)):
        for lr, batches in sorted(found.items()):
            at = ", ".join(f"{b:.0f}" for b in sorted(set(batches)))
            notes.append(f"lr {lr:.3g} {what} at batch {at}")
    return notes


def varies_lr(jobs: list[JobRecord]) -> bool:
    """Whether some batch of one line (`EXCLUDE`) ran at more than one learning rate."""
    seen: dict[tuple[str, float], set[str]] = defaultdict(set)
    for j in jobs:
        if j.batch is not None and names.LR in j.metrics:
            seen[j.label(exclude=EXCLUDE), j.batch].add(f"{j.metrics[names.LR]:.4g}")
    return any(len(lrs) > 1 for lrs in seen.values())


def choices(jobs: list[JobRecord]) -> dict[str, dict[float, Choice]]:
    """`choose` per line: ``{label without batch, repeat and lr: {batch: Choice}}``."""
    lines: dict[str, list[JobRecord]] = defaultdict(list)
    for j in jobs:
        lines[j.label(exclude=EXCLUDE)].append(j)
    return {label: choose(js) for label, js in lines.items()}


def tuned(jobs: list[JobRecord]) -> tuple[list[JobRecord], dict[tuple[str, float], float]]:
    """The runs the steps-to-target figure draws when the sweep varies the lr: per line and batch,
    the chosen lr's runs (all of a batch's runs where no lr reached, so it shows as missed), and
    ``{(label, batch): lr}`` to mark each point with its lr."""
    kept, marks = [], {}
    for label, by_batch in choices(jobs).items():
        for batch, choice in by_batch.items():
            kept += choice.jobs
            if choice.reached:
                marks[label, batch] = choice.lr
    return kept, marks


def figure(jobs: list[JobRecord], path: Path) -> Path | None:
    """The best lr (`choose`) against batch size, log–log, one line per model/device, with
    the linear (lr ∝ batch; Goyal et al. 2017) and square-root (lr ∝ √batch; Krizhevsky 2014)
    rules drawn through its smallest batch's best lr; None unless the sweep varies the lr and some
    line has two batches whose lr reached the target."""
    if not varies_lr(jobs):
        return None
    lines = {label: [(b, c.lr) for b, c in by.items() if c.reached and c.lrs > 1]
             for label, by in choices(jobs).items()}
    lines = {k: v for k, v in lines.items() if len(v) >= 2}
    if not lines:
        return None
    from matplotlib.figure import Figure  # here: the sweep's end reads the choice without drawing

    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    for label, points in lines.items():
        batches, lrs = [b for b, _ in points], [lr for _, lr in points]
        line, = ax.plot(batches, lrs, marker="o", label=label)
        b0, lr0 = points[0]
        ax.plot(batches, [lr0 * b / b0 for b in batches], ls="--", color=line.get_color(), alpha=0.5)
        ax.plot(batches, [lr0 * (b / b0) ** 0.5 for b in batches], ls=":", color=line.get_color(), alpha=0.5)
    ticks = sorted({b for points in lines.values() for b, _ in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [f"{b:.0f}" for b in ticks])
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("best learning rate (fewest steps to target)")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8, title="dashed: linear rule, dotted: square-root rule", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
