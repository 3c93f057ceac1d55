"""One line of progress on a terminal, rewritten in place, for an export or import of many runs."""
from __future__ import annotations

import sys
import time
from typing import TextIO

EVERY_S = 0.2  # s between two rewrites of the line


class Progress:
    """``[12/100 runs] 45,000 values  export`` on ``stream`` (default stderr) where it is a
    terminal, at most every `EVERY_S` seconds; nothing where it is not (a log file, a test).
    `done` ends the line."""

    def __init__(self, what: str, total: int, stream: TextIO | None = None, force: bool = False):
        self.what, self.total = what, total
        self.stream = stream if stream is not None else sys.stderr
        self.on = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.runs = self.values = 0
        self._at = 0.0
        self._shown = False

    def step(self, runs: int = 0, values: int = 0) -> None:
        """Count ``runs`` more runs and ``values`` more metric values; redraw where due."""
        self.runs += runs
        self.values += values
        if self.on and time.monotonic() - self._at >= EVERY_S:
            self._draw()

    def _draw(self) -> None:
        self._at = time.monotonic()
        self.stream.write(f"\r{self.what}: [{self.runs}/{self.total} runs] {self.values:,} values ")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self.on:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
