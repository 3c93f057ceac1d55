"""The measured gain of one piece of advice: the ratio of two arms' median epoch times, its range
over the repeats, and what it says in words.

The ratio is the original arm's median epoch time ÷ the advised arm's (above 1: the advice made an
epoch faster). Its range runs from the original's fastest repeat ÷ the advised arm's slowest to
the original's slowest ÷ the advised arm's fastest: it lies wholly above 1 exactly when the
advised arm's worst repeat beats the original's best, the report's rule for a pick
(`sweeps.report.pick.beats`; for 3 repeats a side a one-sided rank test at p = 0.05). With one
repeat on either side the spread is unknown and a margin under `sweeps.report.pick.CLOSE` (10 %)
is a tie, as in the verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

from sweeps.report import pick

HELPED, NOISE, SLOWER, UNMEASURED = "helped", "no gain beyond noise", "slower", "not measured"


@dataclass
class Gain:
    """One advised override against the original configuration.

    Attributes:
        override: the advice, ``key=value`` (e.g. ``dataset.num_workers=1``).
        original: the original arm's median epoch times, one per repeat (s); empty where none
            ended ok.
        advised: the advised arm's (s).
        why: where an arm has no time, what happened to it (its outcome and error).
    """

    override: str
    original: tuple[float, ...]
    advised: tuple[float, ...]
    why: str = ""

    @property
    def key(self) -> str:
        return self.override.split("=", 1)[0]

    def _figures(self) -> tuple[pick.Figure, pick.Figure] | None:
        a, b = pick.figure(self.original), pick.figure(self.advised)
        return (a, b) if a and b and b.lo > 0 and b.median > 0 else None

    @property
    def ratio(self) -> float | None:
        """The original's median epoch time ÷ the advised arm's (None: an arm has no time)."""
        f = self._figures()
        return f[0].median / f[1].median if f else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """``(low, high)``: the original's fastest repeat ÷ the advised arm's slowest, and its
        slowest ÷ the advised arm's fastest (None: an arm has no time)."""
        f = self._figures()
        return (f[0].lo / f[1].hi, f[0].hi / f[1].lo) if f else None

    @property
    def verdict(self) -> str:
        """`HELPED` (the advised arm beats the original beyond their spread), `SLOWER` (the
        original beats it), `NOISE` (neither) or `UNMEASURED` (an arm has no time)."""
        f = self._figures()
        if f is None:
            return UNMEASURED
        if pick.beats(f[1], f[0], lower=True):
            return HELPED
        if pick.beats(f[0], f[1], lower=True):
            return SLOWER
        return NOISE

    def repeats(self) -> str:
        """``"3 repeats each"``, ``"1 repeat each"`` or ``"3 and 2 repeats"``."""
        a, b = len(self.original), len(self.advised)
        return f"{a} repeat{'s' * (a != 1)} each" if a == b else f"{a} and {b} repeats"

    def text(self) -> str:
        """What the check found, without the override: ``"2.30× [2.10, 2.40] per epoch, 3 repeats
        each (median epoch 0.41 s → 0.18 s)"``, then ``": no gain beyond noise"``, ``": slower
        beyond noise: did not help"``, a weak pick's note, or why it was not measured."""
        if self.verdict == UNMEASURED:
            return f"not measured: {self.why or 'an arm has no median epoch time'}"
        lo, hi = self.interval
        f = self._figures()
        out = (f"{_x(self.ratio)}× [{_x(lo)}, {_x(hi)}] per epoch, {self.repeats()} "
               f"(median epoch {_s(f[0].median)} → {_s(f[1].median)})")
        if self.verdict == NOISE:
            return out + ": no gain beyond noise"
        if self.verdict == SLOWER:
            return out + ": slower beyond noise: did not help"
        if min(f[0].n, f[1].n) == 1:
            return out + " (one run a side: the spread is unknown; --repeats 3 settles it)"
        if min(f[0].n, f[1].n) < pick.SETTLING_RUNS:
            return out + f" (weak: under {pick.SETTLING_RUNS} repeats a side)"
        return out

    def line(self) -> str:
        """The console's line: ``"dataset.loader=device: 2.30× [2.10, 2.40] per epoch, ..."``."""
        return f"{self.override}: {self.text()}"


def summary(gains: list[Gain]) -> str:
    """The final line over every check: how many helped, which did not."""
    helped = [g for g in gains if g.verdict == HELPED]
    rest = [g for g in gains if g.verdict != HELPED]
    said = f"advice checked: {len(helped)} of {len(gains)} helped"
    if helped:
        said += " (" + ", ".join(f"{g.override} {_x(g.ratio)}×" for g in helped) + ")"
    if rest:
        said += "; did not help: " + ", ".join(f"{g.override} ({g.verdict})" for g in rest)
    return said


def _x(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _s(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"
