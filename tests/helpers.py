"""Test models that fail on purpose, reachable from a real Hydra multirun through
``hydra.searchpath`` (tests/conf) and ``PYTHONPATH`` (this folder)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

import torch
from torch import nn


class OOMAbove(nn.Module):
    """A small MLP whose forward runs out of memory when the batch exceeds ``max_batch``.

    ``kind=torch`` raises ``torch.OutOfMemoryError`` (what a CUDA allocator raises; faked here, at
    the hardware boundary); ``kind=cpu`` asks the real CPU allocator for 2**60 bytes, which fails
    with its own out-of-memory RuntimeError.
    """

    def __init__(self, in_shape: Sequence[int], num_outputs: int, max_batch: int = 32, kind: str = "torch"):
        super().__init__()
        self.max_batch, self.kind = max_batch, kind
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(in_shape).prod()), num_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(x) > self.max_batch:
            if self.kind == "cpu":
                torch.empty(2**60, dtype=torch.uint8)
            raise torch.OutOfMemoryError(f"CUDA out of memory (test model: batch {len(x)} > {self.max_batch})")
        return self.net(x)


class Broken(nn.Module):
    """A model whose forward raises a plain error (a bug, not an OOM)."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("broken on purpose\nsecond line that must not reach the tag")


class InterruptAfter(nn.Module):
    """A small MLP whose forward raises KeyboardInterrupt (a user's Ctrl-C) after ``calls`` calls —
    or, with ``how=exec_sigint``, sends this process a real SIGINT from inside source text run by
    ``exec`` (what dataclasses and namedtuple do while a module imports), so the process's own
    handler raises it there."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int, calls: int = 3, how: str = "raise"):
        super().__init__()
        self.calls, self.how = calls, how
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(in_shape).prod()), num_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls -= 1
        if self.calls < 0 and self.how == "exec_sigint":
            exec("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)", {})
        if self.calls < 0:
            raise KeyboardInterrupt
        return self.net(x)


class Slow(nn.Module):
    """An MLP that sleeps ``delay_s`` in each training forward, so a test can signal it mid-run.
    Its arithmetic is the plain MLP's: loss curves compare with uninterrupted runs."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int, delay_s: float = 0.05):
        super().__init__()
        self.delay_s = delay_s
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(in_shape).prod()), 32), nn.ReLU(),
                                 nn.Dropout(0.1), nn.Linear(32, num_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            time.sleep(self.delay_s)
        return self.net(x)


FAILED_AT = "DDP_TEST_FAILED_AT"  # where a failing test model writes when it raised


def note_failure_time() -> None:
    """Write ``time.monotonic()`` (s; one clock for every process of the machine) to the file
    ``$DDP_TEST_FAILED_AT`` when set: a test then times a job's end from the moment of the
    failure, not from its start (rank start-up depends on the machine's load)."""
    if os.environ.get(FAILED_AT):
        Path(os.environ[FAILED_AT]).write_text(repr(time.monotonic()))


class OOMOnRank(nn.Module):
    """A small MLP whose training forward raises ``torch.OutOfMemoryError`` on data-parallel rank
    ``rank`` only (``torch.distributed.get_rank()``); on the other ranks, and outside
    torch.distributed, it trains normally."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int, rank: int = 1):
        super().__init__()
        self.rank = rank
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(in_shape).prod()), num_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.distributed.is_initialized() and torch.distributed.get_rank() == self.rank:
            note_failure_time()
            raise torch.OutOfMemoryError(f"CUDA out of memory (test model: rank {self.rank})")
        return self.net(x)


class InterruptOnce(nn.Module):
    """A small MLP whose forward raises KeyboardInterrupt (a Ctrl-C) at its ``calls``-th call while
    a file ``flag`` exists in the working directory, removing the file: the same config then
    resumes (no flag) and trains on with the same arithmetic as a run that was never stopped."""

    def __init__(self, in_shape: Sequence[int], num_outputs: int, calls: int = 10, flag: str = "interrupt.flag"):
        super().__init__()
        self.calls, self.flag = calls, flag
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(in_shape).prod()), 16), nn.ReLU(),
                                 nn.Linear(16, num_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls -= 1
        if self.calls < 0 and os.path.exists(self.flag):
            os.remove(self.flag)
            raise KeyboardInterrupt
        return self.net(x)
