"""A pick only where the repeats' spread allows it: the rule every choice of the verdict (batch,
lr, device) goes through, and the machine drift the repeats reveal.

The rule (`rank`), for figures with one value per run (a configuration's repeats):

- with at least two runs on both sides, one configuration beats another when their ranges do not
  overlap: the better one's worst run beats the other's best. For 3 runs against 3 that is a
  one-sided Mann–Whitney U test at p = 1/20 = 0.05 (complete separation is the only arrangement
  of 6 values that reaches it; Mann & Whitney 1947), for 2 against 2 only p = 1/6, so the verdict
  says the pick is weak below 3 runs;
- with one run on either side the spread is unknown: figures within `CLOSE` of each other
  are a tie, a larger margin is a provisional pick that the verdict flags as resting on one run
  (repeat=0,1,2 settles it). MLPerf Training likewise scores several runs, never one.

Configurations the best one does not beat are tied with it: the verdict names them all instead of
picking one.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Hashable

CLOSE = 0.10  # one run each: medians within 10 % of each other are a tie
SETTLING_RUNS = 3  # runs per configuration at which non-overlapping ranges are a rank test at p = 0.05
DRIFT = 0.10  # identical repeats whose epoch times differ by more than this (median ratio) drifted


@dataclass(frozen=True)
class Figure:
    """One configuration's figure over its runs (``values``: one per run, in any unit)."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def lo(self) -> float:
        return min(self.values)

    @property
    def hi(self) -> float:
        return max(self.values)

    def text(self, fmt: str, unit: str) -> str:
        """``"1,802 samples/s, 1 run"`` or ``"1,802 samples/s, median of 3 runs, 1,750–1,850"``;
        ``fmt`` formats one number (``"{:,.0f}"``)."""
        return f"{fmt.format(self.median)} {unit}, {self.runs(fmt)}"

    def runs(self, fmt: str) -> str:
        """The runs behind the figure: ``"1 run"``, ``"3 runs"`` (alike to ``fmt``), or ``"median of 3
        runs, 1,750–1,850"``."""
        if self.n == 1:
            return "1 run"
        if fmt.format(self.lo) == fmt.format(self.hi):
            return f"{self.n} runs"
        return f"median of {self.n} runs, {fmt.format(self.lo)}–{fmt.format(self.hi)}"


def figure(values) -> Figure | None:
    """A `Figure` of the non-None ``values`` (None when there are none)."""
    kept = tuple(v for v in values if v is not None)
    return Figure(kept) if kept else None


@dataclass
class Pick:
    """What `rank` concluded: ``best`` (None when tied), the configurations ``tied`` with the
    leader (the leader first; one entry when it stands alone), ``single`` (some compared
    configuration has one run: the spread is unknown) and ``weak`` (a pick on fewer than
    `SETTLING_RUNS` runs a side)."""

    best: Hashable | None
    tied: list = field(default_factory=list)
    single: bool = False
    weak: bool = False

    @property
    def leader(self):
        return self.tied[0] if self.tied else None


def beats(a: Figure, b: Figure, lower: bool) -> bool:
    """Whether ``a`` is better than ``b`` beyond their spread (the module's rule); ``lower``: a
    smaller value is better (seconds), else a larger one (samples/s)."""
    if a.n >= 2 and b.n >= 2:
        return a.hi < b.lo if lower else a.lo > b.hi
    if lower:
        return a.median > 0 and b.median / a.median - 1 > CLOSE
    return b.median > 0 and a.median / b.median - 1 > CLOSE


def rank(figures: dict, lower: bool) -> Pick:
    """The `Pick` among ``figures`` (``{key: Figure}``): the leader by median, and every
    configuration it does not beat (`beats`) tied with it. An empty dict picks nothing."""
    if not figures:
        return Pick(None)
    order = sorted(figures, key=lambda k: figures[k].median, reverse=not lower)
    lead = figures[order[0]]
    tied = [order[0], *(k for k in order[1:] if not beats(lead, figures[k], lower))]
    compared = [figures[k] for k in (tied if len(tied) > 1 else order[:2])]
    single = any(f.n == 1 for f in compared) and len(figures) > 1
    weak = not single and len(figures) > 1 and any(f.n < SETTLING_RUNS for f in compared)
    return Pick(order[0] if len(tied) == 1 else None, tied, single, weak)


def drift(pairs: dict[Hashable, dict[str, float]]) -> str:
    """What the repeats say of the machine over the sweep ("" when nothing drifted):
    ``pairs`` maps each configuration to ``{repeat: epoch time}``; for every repeat other than the
    first the median over configurations of its epoch time ÷ the first repeat's. A median ratio
    further than `DRIFT` from 1 is drift: ``"repeat 1 ran 34% slower than repeat 0 (median
    of 12 configurations)"``."""
    ratios: dict[str, list[float]] = {}
    for by_repeat in pairs.values():
        if len(by_repeat) < 2:
            continue
        first = min(by_repeat, key=_repeat_order)
        for r, t in by_repeat.items():
            if r != first and by_repeat[first]:
                ratios.setdefault(f"{first}|{r}", []).append(t / by_repeat[first])
    said = []
    for key, values in sorted(ratios.items(), key=lambda kv: _repeat_order(kv[0].split("|")[1])):
        first, r = key.split("|")
        m = statistics.median(values)
        if abs(m - 1) > DRIFT:
            how = f"{100 * (m - 1):.0f}% slower" if m > 1 else f"{100 * (1 - m):.0f}% faster"
            said.append(f"repeat {r} ran {how} than repeat {first} (median of {len(values)} configuration"
                        f"{'s' * (len(values) != 1)})")
    return "; ".join(said)


def _repeat_order(value: str):
    return (0, int(value)) if value.lstrip("-").isdigit() else (1, value)
