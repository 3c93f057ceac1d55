"""What a user reads on the console: its log lines (`ConsoleFormatter`), the per-epoch
table of a job (in the manner of Chainer's LogReport/PrintReport) and the one-screen table that
closes a sweep. Lines stay within `WIDTH` columns (a word longer than a line, a path, stays
whole)."""
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
    a line longer than `WIDTH` wrapped; with ``hydra.verbose=true`` (or ``=sweeps``: the
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


SUMMARY_COLUMNS = ("job", "outcome", "first epoch s", "median s", "total", "overhead", "final")


def summary_table(rows: Sequence[dict]) -> str:
    """Fixed-width table, one line per job, then its footnotes; every line within `WIDTH`.

    Each row: ``job`` (its overrides), ``outcome``, ``first_s``, ``median_s`` (the median epoch
    from epoch 2 on), ``total_s`` (s or None), ``job_s`` (the job's wall time, s), ``overhead_s``
    and ``overhead_frac`` (the job's wall time outside training, evaluation and compilation),
    ``final`` (text such as ``acc 0.9123`` or ``rmse 54.1``), ``note`` (why the timing is
    unreliable, if it is) and ``error`` (why a job did not end ok). Jobs that did not finish show
    their outcome in capitals (``OOM``) in place of the times and ``see [1]``: footnote ``[1]``,
    under the table, has the whole reason; a noisy timing shows ``[a]`` after its median: footnote
    ``[a]`` says ``timed noisily: <note>`` (one footnote for the rows that give the same reason or
    note), each wrapped at `WIDTH` columns. The overhead's share of the job is shown from
    `OVERHEAD_SHARE_FROM_S` of wall time on: in a shorter job a job's fixed cost is most of
    its time, which says nothing of the training. Where a job's name is too long for the line, it
    has a line of its own (wrapped between overrides) and its figures follow on the next, under
    the others' figures.
    """
    lines, short = [], False
    errors: list[str] = []  # footnotes [1], [2], ...: why a job did not end ok
    notes: list[str] = []  # footnotes [a], [b], ...: why a job's timing is noisy

    def mark(text: str, kind: list[str]) -> str:
        if text not in kind:
            kind.append(text)
        i = kind.index(text)
        return f"[{i + 1}]" if kind is errors else f"[{_letters(i)}]"

    for r in rows:
        if r["outcome"] == "ok":
            overhead = "-"
            if r.get("overhead_s") is not None:
                long_enough = (r.get("job_s") or 0) >= OVERHEAD_SHARE_FROM_S
                short |= not long_enough
                overhead = f"{r['overhead_s']:.1f} s" + (f" ({100 * (r.get('overhead_frac') or 0):.0f}%)"
                                                        if long_enough else " *")
            median = _num(r.get("median_s")) + (f" {mark(r['note'], notes)}" if r.get("note") else "")
            cells = [r["job"], r["outcome"], _num(r.get("first_s")), median, hms(r.get("total_s")), overhead,
                     r.get("final", "-")]
        else:
            error = r.get("error", "")
            cells = [r["job"], r["outcome"], r["outcome"].upper(), "", "", "",
                     f"see {mark(error, errors)}" if error else ""]
        lines.append([str(c) for c in cells])
    widths = [max(len(c) for c in col) for col in zip(SUMMARY_COLUMNS, *lines)]
    room = WIDTH - sum(widths[1:]) - 2 * (len(widths) - 1)  # what the job column may take
    if widths[0] > room:  # as wide as the names that keep their line
        widths[0] = max([len(SUMMARY_COLUMNS[0])] + [len(cells[0]) for cells in lines if len(cells[0]) <= room])
    fmt = lambda cells: "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    body = []
    for cells in lines:
        if len(cells[0]) > widths[0]:  # a name too long to share its line: on its own, the figures under it
            body += [wrap(cells[0], indent="  "), fmt(["", *cells[1:]])]
        else:
            body.append(fmt(cells))
    rule = "  ".join("-" * w for w in widths)
    foot = [wrap(f"[{i}] {text}", indent=" " * (len(str(i)) + 3)) for i, text in enumerate(errors, 1)]
    foot += [wrap(f"[{_letters(i)}] timed noisily: {text}", indent=" " * (len(_letters(i)) + 3))
             for i, text in enumerate(notes)]
    if short:
        foot.append(wrap(f"* overhead of a job under {OVERHEAD_SHARE_FROM_S:.0f} s: mostly its fixed start and "
                         "end (store, data, model), not a share of training worth reading"))
    return "\n".join([fmt(SUMMARY_COLUMNS), rule, *body, *foot])


def _letters(i: int) -> str:
    """Footnote letters: 0 → ``a``, 25 → ``z``, 26 → ``aa``."""
    return (_letters(i // 26 - 1) if i >= 26 else "") + "abcdefghijklmnopqrstuvwxyz"[i % 26]


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
