"""What a user reads on the console: the per-epoch table of a job (in the manner of Chainer's
LogReport/PrintReport) and the one-screen table that closes a sweep."""
from __future__ import annotations

import csv
import io
from typing import Sequence

from sweeps import names


def hms(seconds: float | None) -> str:
    """``h:mm:ss`` (``-`` for None)."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class EpochTable:
    """Per-epoch rows: epoch, losses, accuracies (or RMSE), epoch time, Σ phases and elapsed."""

    def __init__(self, regression: bool):
        score = [(names.TEST_RMSE, "test rmse")] if regression else [(names.TRAIN_ACC, "train acc"),
                                                                     (names.TEST_ACC, "test acc")]
        self.columns = [("epoch", "epoch"), (names.TRAIN_LOSS, "train loss"), (names.TEST_LOSS, "test loss"),
                        *score, (names.EPOCH_S, "epoch s"), (names.PHASE_SUM_S, "phases s"),
                        (names.EVAL_S, "eval s"), (names.ELAPSED_S, "elapsed s")]
        self.widths = [max(10, len(title)) for _, title in self.columns]

    def header(self) -> str:
        return "  ".join(f"{title:>{w}}" for (_, title), w in zip(self.columns, self.widths))

    def row(self, rec: dict) -> str:
        cells = []
        for (key, _), w in zip(self.columns, self.widths):
            v = rec.get(key)
            text = "-" if v is None else (f"{v:d}" if isinstance(v, int) else f"{v:.4f}")
            cells.append(f"{text:>{w}}")
        return "  ".join(cells)

    def csv(self, records: Sequence[dict]) -> str:
        """All keys of all records as CSV (the per-epoch table artifact), in the order they first
        appear. Records differ in their keys (``test/*`` only on epochs that evaluate, with
        ``eval.every_epochs``): the header is their union and a record's missing cells are empty."""
        keys = list(dict.fromkeys(k for rec in records for k in rec))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys, restval="")
        writer.writeheader()
        writer.writerows(records)
        return buf.getvalue()


SUMMARY_COLUMNS = ("job", "outcome", "first epoch s", "median epoch s (2+)", "total", "overhead", "final", "note")


def summary_table(rows: Sequence[dict]) -> str:
    """Fixed-width table, one line per job.

    Each row: ``job`` (its overrides), ``outcome``, ``first_s``, ``median_s``, ``total_s`` (s or
    None), ``overhead_s`` and ``overhead_frac`` (the job's wall time outside training, evaluation
    and compilation), ``final`` (text such as ``acc 0.9123`` or ``rmse 54.1``) and ``note`` (why
    the figure is unreliable, if it is). Jobs that did not finish show their outcome in capitals
    (``OOM``) in place of the times.
    """
    lines = []
    for r in rows:
        if r["outcome"] == "ok":
            overhead = "-" if r.get("overhead_s") is None else \
                f"{r['overhead_s']:.1f} s ({100 * (r.get('overhead_frac') or 0):.0f}%)"
            cells = [r["job"], r["outcome"], _num(r.get("first_s")), _num(r.get("median_s")),
                     hms(r.get("total_s")), overhead, r.get("final", "-"), r.get("note", "")]
        else:
            cells = [r["job"], r["outcome"], r["outcome"].upper(), "", "", "", r.get("error", "")[:60], ""]
        lines.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(SUMMARY_COLUMNS, *lines)]
    fmt = lambda cells: "  ".join(f"{c!s:<{w}}" for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(SUMMARY_COLUMNS), rule, *map(fmt, lines)])


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
