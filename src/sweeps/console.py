"""What a user reads on the console: its log lines (:class:`ConsoleFormatter`), the per-epoch
table of a job (in the manner of Chainer's LogReport/PrintReport) and the one-screen table that
closes a sweep. Lines stay within :data:`WIDTH` columns but for the final tables' own cells."""
from __future__ import annotations

import csv
import io
import logging
import textwrap
from typing import Sequence

from sweeps import names


WIDTH = 100  # columns a console line keeps within (wrapped past it, never cut)
OVERHEAD_SHARE_FROM_S = 30.0  # s of job wall time from which the overhead is also shown as a share


def wrap(text: str, width: int = WIDTH, indent: str = "  ") -> str:
    """``text`` wrapped between words at ``width`` columns, later lines indented by ``indent``;
    each line of a multi-line text on its own. A word longer than a line (a path) stays whole, and
    so does a line indented by four spaces: a command to copy and paste."""
    return "\n".join(textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False,
                                    break_on_hyphens=False) if len(line) > width and not line.startswith("    ")
                     else line for line in text.splitlines() or [""])


class ConsoleFormatter(logging.Formatter):
    """The console's log lines (``conf/hydra/job_logging/sweeps.yaml`` and
    ``hydra_logging/sweeps.yaml``): a message as it is, a warning or an error with its level first,
    a line longer than :data:`WIDTH` wrapped; with ``hydra.verbose=true`` (or ``=sweeps``: the
    ``sweeps`` logger at DEBUG) the date, logger and level before each line, as Hydra prints them.
    The job's log file keeps that detail always."""

    DETAIL = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"

    def __init__(self) -> None:
        super().__init__(self.DETAIL)

    def format(self, record: logging.LogRecord) -> str:
        if logging.getLogger("sweeps").isEnabledFor(logging.DEBUG):
            return super().format(record)
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        text = wrap(text)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def hms(seconds: float | None) -> str:
    """``h:mm:ss`` (``-`` for None)."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class EpochTable:
    """Per-epoch rows: epoch, losses, accuracies (or RMSE), epoch time, evaluation time and elapsed
    (``verbose``: Σ phases too), ≤ 100 columns; ``epochs.csv`` holds every key of every record."""

    def __init__(self, regression: bool, verbose: bool = False):
        score = [(names.TEST_RMSE, "test rmse")] if regression else [(names.TRAIN_ACC, "train acc"),
                                                                     (names.TEST_ACC, "test acc")]
        self.columns = [("epoch", "epoch"), (names.TRAIN_LOSS, "train loss"), (names.TEST_LOSS, "test loss"),
                        *score, (names.EPOCH_S, "epoch s"), *[(names.PHASE_SUM_S, "phases s")] * verbose,
                        (names.EVAL_S, "eval s"), (names.ELAPSED_S, "elapsed s")]
        self.widths = [max(8, len(title)) for _, title in self.columns]

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
    """Fixed-width table, one line per job, then its footnotes.

    Each row: ``job`` (its overrides), ``outcome``, ``first_s``, ``median_s``, ``total_s`` (s or
    None), ``job_s`` (the job's wall time, s), ``overhead_s`` and ``overhead_frac`` (the job's wall
    time outside training, evaluation and compilation), ``final`` (text such as ``acc 0.9123`` or
    ``rmse 54.1``), ``note`` (why the figure is unreliable, if it is) and ``error`` (why a job did
    not end ok). Jobs that did not finish show their outcome in capitals (``OOM``) in place of the
    times and a numbered footnote with their whole reason, wrapped at :data:`WIDTH` columns. The
    overhead's share of the job is shown from :data:`OVERHEAD_SHARE_FROM_S` of wall time on: in a
    shorter job a job's fixed cost is most of its time, which says nothing of the training.
    """
    lines, notes, short = [], [], False
    for r in rows:
        if r["outcome"] == "ok":
            overhead = "-"
            if r.get("overhead_s") is not None:
                long_enough = (r.get("job_s") or 0) >= OVERHEAD_SHARE_FROM_S
                short |= not long_enough
                overhead = f"{r['overhead_s']:.1f} s" + (f" ({100 * (r.get('overhead_frac') or 0):.0f}%)"
                                                        if long_enough else " *")
            cells = [r["job"], r["outcome"], _num(r.get("first_s")), _num(r.get("median_s")),
                     hms(r.get("total_s")), overhead, r.get("final", "-"), r.get("note", "")]
        else:
            error = r.get("error", "")
            if error and error not in notes:
                notes.append(error)
            mark = f"see [{notes.index(error) + 1}]" if error else ""
            cells = [r["job"], r["outcome"], r["outcome"].upper(), "", "", "", mark, ""]
        lines.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(SUMMARY_COLUMNS, *lines)]
    fmt = lambda cells: "  ".join(f"{c!s:<{w}}" for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    rule = "  ".join("-" * w for w in widths)
    foot = [wrap(f"[{i}] {text}", indent=" " * (len(str(i)) + 3)) for i, text in enumerate(notes, 1)]
    if short:
        foot.append(wrap(f"* overhead of a job under {OVERHEAD_SHARE_FROM_S:.0f} s: mostly its fixed start and "
                         "end (store, data, model), not a share of training worth reading"))
    return "\n".join([fmt(SUMMARY_COLUMNS), rule, *map(fmt, lines), *foot])


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
