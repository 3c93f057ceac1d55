"""A job inside Slurm: the tags that tie its MLflow run to its Slurm job, and a time limit or
preemption turned into checkpoint → requeue → resume in the same run.

`on_open` (called by `Job` through
`sweeps.launchers`) tags every run that runs in a
Slurm job. In a job that ``hydra/launcher=slurm`` started (`SlurmLauncher`,
which runs the job through `run_job`), submitit's signal handlers are replaced:

- SIGUSR2 — submitit's ``--signal=USR2@signal_delay_s``: the time limit is near, or the job is
  preempted. A training job writes a checkpoint at the end of its current epoch and stops there;
  if that epoch does not end within ``grace_s`` (or for other tasks) it stops at once, from its
  newest checkpoint. Its run is closed ``killed`` (its ``error`` says requeued), then submitit's own
  protocol pickles the job again and ``scontrol requeue``-s it. The restarted job finds its killed
  run by config hash and resumes it (``Job``): same run, ``resumed`` tag, every epoch once.
- SIGTERM without a SIGUSR2 before it (scancel, or the hard time limit) — the run ends ``killed``
  like a Ctrl-C, and the job is not requeued (submitit itself would ignore SIGTERM).

Slurm sends ``--signal`` to every process of the job step, not only the job's: the job's store
process ignores it (`sweeps.tracking.service.server`), and so does every process forked from
the job's while it runs (data loader workers), which SIGUSR2 would otherwise kill mid-epoch.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from sweeps import names
from sweeps.errors import Terminated, describe
from sweeps.job import signals

log = logging.getLogger("sweeps")
GRACE_MARGIN_S = 45.0  # of signal_delay_s, kept for the checkpoint's fsync, closing the run, scontrol requeue


class Requeue(Terminated):
    """Raised at the end of the epoch whose checkpoint a SIGUSR2 asked for: the job stops to be requeued."""

    signal_name = "SIGUSR2"


class _SlurmJob:
    """This process's Slurm job (one sweeps job per Slurm job): when a requeue was asked for, and
    the job context, which may wait for an epoch end."""
    asked_at: float | None = None  # wall clock (s) of the first SIGUSR2
    job = None  # the Job, once open
    epoch_end: bool = False  # whether the job checkpoints and stops at its next epoch end when asked
    grace_s: float = 60.0  # how long to wait for that epoch end (s)
    active: bool = False  # whether run_job is running a job in this process
    timer: threading.Timer | None = None


def _forked_child_ignores_usr2() -> None:
    """In a process forked from a job's while `run_job` runs it (a data loader worker):
    ignore SIGUSR2, which Slurm sends to every process of the step (module docstring)."""
    if _SlurmJob.active:
        _SlurmJob.active = False  # this process runs no job
        try:
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        except ValueError:  # forked from a thread other than the main one: left as it was
            pass


if hasattr(os, "register_at_fork"):  # inert unless run_job is running a job in the forking process
    os.register_at_fork(after_in_child=_forked_child_ignores_usr2)


def tags() -> dict[str, str]:
    """The Slurm job this process runs in, as run tags (`sweeps.names.SLURM_TAGS`), from the
    ``SLURM_*`` variables Slurm sets; ``{}`` outside Slurm."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return {}
    array, index = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    out = {names.SLURM_JOB_TAG: f"{array}_{index}" if array and index else env["SLURM_JOB_ID"],
           names.SLURM_NODE_TAG: env.get("SLURMD_NODENAME", socket.gethostname()),
           names.SLURM_PARTITION_TAG: env.get("SLURM_JOB_PARTITION", ""),
           names.SLURM_RESTARTS_TAG: env.get("SLURM_RESTART_COUNT", "0")}
    if index:
        out[names.SLURM_ARRAY_INDEX_TAG] = index
    return out


def on_open(job) -> None:
    """Called by `Job` once its run is open: tag it with its Slurm job;
    on a requeued job resuming, log ``time/requeue_lost_s`` (wall s from the newest checkpoint's write
    to now, step = restart count); in a job `run_job` runs, let a SIGUSR2 stop a training job
    at its next epoch end, after that epoch's checkpoint. Outside Slurm it does nothing."""
    slurm_tags = tags()
    if not slurm_tags:
        return
    job.writer.set_tags(slurm_tags)
    restarts = int(slurm_tags[names.SLURM_RESTARTS_TAG] or 0)
    files = job.checkpoints.files()
    if job.resume_state is not None and restarts > 0 and files:
        job.writer.log_metrics({names.REQUEUE_LOST_S: max(0.0, time.time() - files[-1].stat().st_mtime)}, step=restarts)
    if signal.getsignal(signal.SIGUSR2) is _on_usr2:  # our handler: run_job runs this job
        _SlurmJob.job = job
        if job.cfg.task == "train" and job.cfg.device.name != "ddp":  # ddp ranks checkpoint in their own processes
            _SlurmJob.epoch_end = True
            job.checkpoints = _CheckpointThenStop(job.checkpoints)
        elif _SlurmJob.asked_at is not None:  # asked while starting, and no epoch end to wait for: stop now
            os.kill(os.getpid(), signal.SIGTERM)  # held while the run opens: raised once it is open


class _CheckpointThenStop:
    """A job's `Checkpoints`, plus: once a requeue is asked for, the
    next epoch end is due, and after its checkpoint is written the job stops (`Requeue`)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def due(self, epoch: int) -> bool:
        return _SlurmJob.asked_at is not None or self._inner.due(epoch)

    def save(self, epoch: int, state: dict) -> Path:
        path = self._inner.save(epoch, state)
        if _SlurmJob.asked_at is not None:
            log.warning("Slurm: checkpoint of epoch %d written %.0f s after SIGUSR2; stopping to be requeued",
                        epoch, time.time() - _SlurmJob.asked_at)
            raise Requeue()
        return path


def _on_usr2(signum, frame) -> None:
    """SIGUSR2: note it; stop now (SIGTERM to this process, which a run opening or closing holds),
    or after the current epoch's checkpoint — also when the job has yet to open its run — with
    SIGTERM as the fallback after ``grace_s``."""
    if _SlurmJob.job is not None and _SlurmJob.job.outcome is not None:
        return  # the job has ended: nothing left to save
    if _SlurmJob.asked_at is None:
        _SlurmJob.asked_at = time.time()
        log.warning("Slurm: SIGUSR2 (time limit near, or preempted): %s", "requeue from the newest checkpoint"
                    if _SlurmJob.job is not None and not _SlurmJob.epoch_end else "checkpoint at this epoch's end, then requeue")
    if _SlurmJob.job is not None and not _SlurmJob.epoch_end:
        os.kill(os.getpid(), signal.SIGTERM)
    elif _SlurmJob.timer is None:
        _SlurmJob.timer = threading.Timer(_SlurmJob.grace_s, _give_up)
        _SlurmJob.timer.daemon = True
        _SlurmJob.timer.start()


def _give_up() -> None:
    """``grace_s`` after SIGUSR2 with no epoch end: stop now (unless the job has ended meanwhile)."""
    if _SlurmJob.job is None or _SlurmJob.job.outcome is None:
        os.kill(os.getpid(), signal.SIGTERM)


def _quiet() -> None:
    """No more signal handling: the job has ended (or is leaving to be requeued)."""
    if _SlurmJob.timer is not None:
        _SlurmJob.timer.cancel()
    for s in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


def run_job(call: Callable[[], Any], signal_delay_s: float) -> Any:
    """Run one job (``call``: Hydra's run of the job) in its Slurm job's process, under the signal
    handling of the module docstring; returns what ``call`` returns.

    Raises:
        SystemExit: 143 after SIGTERM (the run is closed killed); submitit's own exit once requeued.
        submitit.core.utils.UncompletedJobError: a requeue was asked for but the job's requeues at
            the time limit are used up (``max_num_timeout``); submitit reports it as the job's result.
    """
    requeue = signal.getsignal(signal.SIGUSR2)  # submitit's: pickle this call again, scontrol requeue, exit
    _SlurmJob.asked_at, _SlurmJob.job, _SlurmJob.epoch_end, _SlurmJob.timer = None, None, False, None
    # the signal comes signal_delay_s (or up to 30 s more: slurmctld checks limits every 30 s) before
    # the limit; what grace_s leaves (GRACE_MARGIN_S, 45 s) is for the checkpoint's
    # fsync, closing the run and scontrol requeue
    _SlurmJob.grace_s = grace_s(signal_delay_s)
    signal.signal(signal.SIGTERM, signals.raise_terminated)
    signal.signal(signal.SIGUSR2, _on_usr2)
    _SlurmJob.active = True
    try:
        result = call()
    except KeyboardInterrupt:  # the job's run is closed killed (Job)
        _quiet()
        if _SlurmJob.asked_at is None or not callable(requeue):  # not callable: submitit did not start this job
            log.warning("Slurm: SIGTERM (scancel or the time limit): the job's run is closed killed")
            raise SystemExit(143) from None
        try:
            requeue(signal.SIGUSR2, None)  # exits (SystemExit) once requeued
        except SystemExit:  # requeued: the restarted job waits for slurmctld, this process has KillWait s left
            _note(f"time limit or preemption (SIGUSR2): checkpointed and requeued as Slurm job "
                  f"{tags().get(names.SLURM_JOB_TAG)}; it goes on in this run", requeued=True)
            raise
        except Exception as e:  # requeues used up (max_num_timeout), or scontrol refused
            _note(f"time limit or preemption (SIGUSR2), not requeued ({str(e).splitlines()[0][:200]}): "
                  "rerun the sweep to resume it from its checkpoint")
            raise
        raise SystemExit(143)  # submitit's handler returned without exiting
    finally:
        _SlurmJob.active = False
    _quiet()
    return result


def grace_s(signal_delay_s: float) -> float:
    """How long after SIGUSR2 a training job may take to reach its epoch end: all but
    `GRACE_MARGIN_S` of ``signal_delay_s`` (75 s of the default 120 s), at least half of it."""
    return max(signal_delay_s / 2, signal_delay_s - GRACE_MARGIN_S)


def in_job() -> bool:
    """Whether this process is running a sweep's job inside its Slurm job (`run_job`). There
    bad input ends that job alone (``error``): the sweep runs in another process, which records it
    and keeps its parent run (`sweeps.launchers.slurm.launcher._result`)."""
    return _SlurmJob.active


def _note(error: str, requeued: bool = False) -> None:
    """Say in the closed run's ``error`` tag what became of it (a resumed run clears it). A requeued
    run stopped before its first checkpoint is deleted instead: its restarted job starts afresh in a
    new run, and the sweep counts the job once."""
    job = _SlurmJob.job
    if job is None or job.writer is None:
        return
    try:
        if requeued and not job.checkpoints.files():
            job.client.delete_run(job.run_id)
        else:
            job.client.set_tag(job.run_id, names.ERROR_TAG, error)
    except Exception as e:  # the requeue matters more than the wording
        log.warning("Slurm: could not note run %s as requeued (%s)", job.run_id, describe(e))
