"""What one process remembers across the jobs it runs, in one object (`ProcessState`),
reached through one accessor (`current`) and replaced by each entry point
(`begin_command`: ``python -m sweeps``, [`sweeps.run`][sweeps.api.run]).

Here, not in `sweeps.job`: the training code (`sweeps.train.memory`) notes a lost
CUDA context in it too, and nothing in ``train`` may import ``launch``. This module imports
nothing of sweeps, so every layer may reach it.

Environment variables are no channel inside one process: the sweep's parent run and swept keys
live in `ProcessState.sweep` (`sweeps.job.parent_run` also exports them, for
the jobs that launchers run in child processes).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

@dataclass
class ProcessState:
    """Everything a process carries from one job to the next.

    - ``outcomes``: how many jobs this process ended with each outcome (``sweep_error``: the
      sweep's count of ``error`` children, read from MLflow) — the exit status;
    - ``last_job``: the last job closed (name, outcome, run_id, tracking_uri) — the CLI's last words;
    - ``last_sweep``: the last sweep closed (run_id, tracking_uri) — what [`sweeps.run`][sweeps.api.run] reads;
    - ``sweep``: the running sweep's parent_run_id, tracking_uri, swept_keys ({} outside one);
    - ``planned_jobs``: how many jobs the running sweep will launch (None: a single run; 0: not
      known in advance);
    - ``exits_after_command``: the process ends with this command (``python -m sweeps``, not
      [`sweeps.run`][sweeps.api.run]): a single run's job leaves nothing for a next one to be freed of;
    - ``signals``: SIGINT/SIGTERM numbers received since the handlers were installed, in order;
    - ``cuda_lost``: the one line of a sticky CUDA error ("" while the CUDA context is fine);
    - ``cuda_contexts``: CUDA indices (this process's numbering) where a job made a context;
    - ``device_kind``: the kind of device (`sweeps.devices.DeviceKind`) the latest job was placed on (None: none yet);
    - ``pool_waited_s``: seconds the latest GPU-pool claim waited (s);
    - ``pool_held``: the running job's pool GPUs (NVML UUIDs);
    - ``said``: the machine notices said so far (`said_once`);
    - ``job_times``: the wall times (s) of the running sweep's jobs this process ran, for the
      console's time left;
    - ``held``: the automatic speed choices a sweep holds constant, decided by the first job of
      each key and reused by the later ones: ``{(sweep's parent run id, model, dataset, device
      type): choice}`` (the torch thread count: `sweeps.train.speed.threads_held_for_sweep`);
    - ``job_kinds``: the console's time left by kind of job (`sweeps.job.progress`):
      ``plan``, the kind of each job the running sweep launches, in order; ``running``, the kind
      of the job running now; ``times``, {kind: wall times (s) of the jobs of it this process ran}.
    """

    outcomes: Counter = field(default_factory=Counter)
    last_job: dict[str, str] = field(default_factory=dict)
    last_sweep: dict[str, str] = field(default_factory=dict)
    sweep: dict[str, str] = field(default_factory=dict)
    planned_jobs: int | None = None
    exits_after_command: bool = False
    signals: list[int] = field(default_factory=list)
    cuda_lost: str = ""
    cuda_contexts: set[int] = field(default_factory=set)
    device_kind: Any = None
    pool_waited_s: float = 0.0
    pool_held: list[str] = field(default_factory=list)
    said: set = field(default_factory=set)
    job_times: list[float] = field(default_factory=list)
    held: dict = field(default_factory=dict)
    job_kinds: dict = field(default_factory=dict)


_current = ProcessState()


def current() -> ProcessState:
    """This process's state (the one accessor)."""
    return _current


def replace(state: ProcessState) -> ProcessState:
    """Make ``state`` this process's state; returns the one it replaces (tests put it back)."""
    global _current
    previous, _current = _current, state
    return previous


def begin_command() -> ProcessState:
    """A fresh state for a new command in this process (the CLI, [`sweeps.run`][sweeps.api.run]): no counts,
    no last job or sweep, no signals. What is true of the process itself carries over: a CUDA
    context lost to a sticky error stays lost, and the contexts made stay made."""
    old = _current
    replace(ProcessState(cuda_lost=old.cuda_lost, cuda_contexts=set(old.cuda_contexts)))
    return _current


def said_once(key: object) -> bool:
    """True the first time ``key`` is asked in this command, False after: a machine notice (no
    NVML, the torch thread count, an edge sample's cost) is said once per sweep, not per job."""
    if key in _current.said:
        return False
    _current.said.add(key)
    return True
