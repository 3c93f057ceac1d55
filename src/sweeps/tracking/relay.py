"""The MLflow writer process, as the training process sees it: hand a run's journal over, drain it.

A job's per-epoch metrics cost the training process the journal line it appends anyway
(:class:`~sweeps.tracking.epochs.EpochLog`): after :data:`HANDOFF_EPOCHS` epochs the job hands
the run to one writer process (:mod:`sweeps.tracking.relay_process`, nice 19, started lazily, one
per process that runs jobs: a ``python -m sweeps`` invocation, a pool worker, a Slurm job, rank 0
of a data-parallel job), which tails the journal from where the hand-over left it and sends
batches to MLflow with :class:`~sweeps.tracking.writer.RunWriter`'s retries. Why a process: MLflow's
SQL store ingests ~50 µs per value and a job logs ~15 values per epoch; a thread of the training
process does that on the same GIL as the training (docs/benchmarks.md). Why tail the file rather
than pipe each record: the line is written anyway, so the per-epoch cost is zero, not a second
write (``scripts/bench_epoch_append.py``: ~11 µs per epoch for the line alone, ~23 µs with a pipe
write on top). Jobs with fewer than :data:`HANDOFF_VALUES` values still to send after :data:`HANDOFF_EPOCHS`
epochs (every job of most sweeps) never start the process, so it adds nothing to their fixed cost
(:func:`worth_handing_over`).

At the job's end :func:`drain` asks for the run's last lines to be sent and waits for the answer
(values sent, values lost). Anything but a clean answer — the process died (SIGKILL), timed out
(it is then killed, so it can send nothing more), or lost values to a store that stayed down —
is reported as not ``ok`` and the caller replays the journal in-process, which checks the run's
metric history first (:meth:`RunWriter.replay`): every epoch lands once.

Messages are JSON lines on the process's stdin; answers JSON lines on its stdout.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sweeps.tracking import priority

log = logging.getLogger("sweeps")
HANDOFF_EPOCHS = 100  # epochs a job logs in-process before its journal goes to the writer process
# ... and only where the values still to send would cost the training process more than the
# writer process costs to start. Its imports and its store take ~2 s of CPU (mlflow, SQLAlchemy;
# 2-core VM), what ~40,000 values cost at MLflow's ~50 µs each; where the training's threads
# keep every core busy that CPU is taken from the training either way, so a job with fewer values
# to come (study 5's 10,000 epochs at a series stride of 10: ~15,000; its preset's 50: ~3,000) keeps its in-process
# queue: 1.24× its hand loop instead of 1.49× (study 5, measured on a 2-core VM)
HANDOFF_VALUES = 40_000
# where the training leaves a core free (device.threads below the cores) the start costs it
# nothing, and sending moves off its GIL: worth it from ~0.5 s of values (1.22× vs 1.43× there)
HANDOFF_VALUES_SPARE_CORE = 10_000
STALL_S = 5.0  # s a drain waits for the writer process's next sign of progress before taking over
# values/s below which a drain that has STALL_S or more still to go is taken over: about an eighth of
# what the job itself sends to a local sqlite store at normal priority (~8,000 values/s: log_batch
# of 1,000 values, 123 ms, 2-core VM). One at the lowest priority that gets only the odd slice of a
# core beside busy programs sends a batch now and then, far slower than the idle job would (against
# a store that slow itself the take-over costs a history read, and loses nothing; measured
# on a 2-core VM)
SLOW_RATE = 1000.0
# s after killing a stalled writer process before the job reads the run's history: a request a
# tracking server had received whole is committed by then, so the replay does not send it again
SETTLE_S = 1.0

_lock = threading.Lock()  # one request at a time per process (pool workers may run jobs in threads)
_proc: subprocess.Popen | None = None


def worth_handing_over(epochs_left: int | None, values_per_epoch: int, every: int = 1,
                       spare_core: bool = False) -> bool:
    """Whether a job with ``epochs_left`` epochs to come (None: not known), each with
    ``values_per_epoch`` metric values of which every ``every``-th epoch's go to the series
    (the series' stride: :func:`~sweeps.tracking.series.stride`), has enough left to send to pay for the writer process's start:
    at least :data:`HANDOFF_VALUES` values, or :data:`HANDOFF_VALUES_SPARE_CORE` where its torch
    threads leave a core free (``spare_core``)."""
    if epochs_left is None:
        return True
    least = HANDOFF_VALUES_SPARE_CORE if spare_core else HANDOFF_VALUES
    return epochs_left // max(every, 1) * values_per_epoch >= least


@dataclass
class Drained:
    """A drain's answer: ``sent`` and ``lost`` metric values; ``ok`` False when the writer process
    gave no answer (dead or timed out): the caller then replays the journal."""

    sent: int = 0
    lost: int = 0
    ok: bool = True


def follow(run_id: str, tracking_uri: str, journal: Path, offset: int, after_epoch: int, every: int = 1,
           evaluated: bool = True) -> bool:
    """Ask the writer process to send run ``run_id``'s journal from byte ``offset`` on (records of
    epochs > ``after_epoch`` only, those :func:`~sweeps.tracking.series.in_series` under
    ``every`` and ``evaluated``), starting the process if none runs. Returns False where it could
    not be started or reached (the caller keeps logging in-process). Never raises."""
    msg = {"op": "follow", "run": run_id, "uri": tracking_uri, "journal": str(Path(journal).resolve()),
           "offset": offset, "after": after_epoch, "every": every, "evaluated": evaluated}  # an absolute path: the job may chdir later (tests do)
    with _lock:
        try:
            _write(_started(), msg)
            return True
        except (OSError, ValueError) as e:  # cannot start (no fork: memory) or it died: stay in-process
            log.warning("MLflow writer process unavailable (%s: %s): metrics are sent in-process", type(e).__name__, e)
            return False


def drain(run_id: str, until_epoch: int) -> Drained:
    """Have the writer process send run ``run_id``'s journal through epoch ``until_epoch`` and wait
    for its answer as long as it reports progress at least every :data:`STALL_S` seconds (values
    left to send) at :data:`SLOW_RATE` values/s or more, or has less than :data:`STALL_S` left at
    its pace. A writer process that stalls or creeps — starved of CPU at the lowest priority by a
    loaded machine, still importing, or retrying a store that is down — is killed, and the answer
    is not ``ok``: the training process, idle now and at its own priority, replays the rest. Never
    raises."""
    with _lock:
        proc = _proc
        if proc is None or proc.poll() is not None:
            return Drained(ok=False)
        try:
            _write(proc, {"op": "drain", "run": run_id, "until": until_epoch})
            answer, pace = _read_line(proc, STALL_S), []
            while answer is not None and "progress" in answer:
                pace.append((time.monotonic(), int(answer["progress"])))
                if _creeps(pace):
                    log.warning("MLflow writer process: %d value(s) left at under %.0f values/s; the job sends "
                                "the rest itself", pace[-1][1], SLOW_RATE)
                    answer = None
                    break
                answer = _read_line(proc, STALL_S)
        except (OSError, ValueError):
            answer = None
        if answer is None or answer.get("unknown"):  # dead, stuck, or a later process that never had the run
            if answer is None:  # stop it for good, so nothing it still holds is sent twice
                _kill(proc)
                time.sleep(SETTLE_S)
            return Drained(ok=False)
        return Drained(int(answer.get("sent", 0)), int(answer.get("lost", 0)))


def _creeps(pace: list[tuple[float, int]]) -> bool:
    """Whether a drain whose progress lines so far were ``pace`` ((monotonic s, values left), oldest
    first) went slower than :data:`SLOW_RATE` over the last :data:`STALL_S` s or more and still has
    more than :data:`STALL_S` s to go at that rate."""
    now, left = pace[-1]
    before = [p for p in pace if now - p[0] >= STALL_S]
    if not before:
        return False
    then, left_then = before[-1]
    rate = (left_then - left) / (now - then)
    return rate < SLOW_RATE and left > rate * STALL_S


def running() -> int | None:
    """The writer process's pid, or None when none runs."""
    proc = _proc
    return proc.pid if proc is not None and proc.poll() is None else None


def stop() -> None:
    """End the writer process (closing its stdin; it has drained every job that ended). Idempotent."""
    global _proc
    with _lock:
        proc, _proc = _proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            _kill(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def _started() -> subprocess.Popen:
    global _proc
    if _proc is not None and _proc.poll() is None:
        return _proc
    if _proc is not None:  # it died (SIGKILL): the jobs it followed replay at their drain
        _kill(_proc)
    env = dict(os.environ)  # the folder holding this package goes first on its path: the same code as here
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))
    # a Ctrl-C in the terminal stops the jobs, which then drain it; it ends when stdin closes
    _proc = subprocess.Popen([sys.executable, "-m", "sweeps.tracking.relay_process"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, **priority.own_group())
    if not _exit_hook:
        _exit_hook.append(atexit.register(stop))
    return _proc


_exit_hook: list = []  # stop() registered once per process


def _write(proc: subprocess.Popen, msg: dict) -> None:
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def _read_line(proc: subprocess.Popen, timeout_s: float) -> dict | None:
    """The next JSON line of ``proc``'s stdout, or None at EOF (it died) or after ``timeout_s``
    without one. Read a byte at a time: a progress line may be followed by the answer."""
    fd, data, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            log.warning("MLflow writer process: no progress in %.0f s; the job sends the rest itself", timeout_s)
            return None
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _kill(proc: subprocess.Popen) -> None:
    global _proc
    try:
        proc.kill()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
    if _proc is proc:
        _proc = None
