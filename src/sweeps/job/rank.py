"""One rank of a data-parallel job (``device=ddp``): the process torch's launcher starts N times.

Each rank joins the process group, builds the job's data and runs the same
`sweeps.tasks.train.TrainTask.run` as a one-device job, with a `RankJob` in the place
of the job process's `Job`:

- rank 0 logs each epoch as it ends into the job's MLflow run (opened, and later closed, by the
  job process), appends it to the run's journal, prints the console rows and saves checkpoints;
- the other ranks log nothing: their records reach rank 0 through the per-epoch gather.

How a rank ends. OK: rank 0 flushes its writer, the rank leaves the group and returns. A failure
(any exception): the rank writes ``{rank, kind, type, text, time}`` as JSON to
``<work dir>/rank<r>.json`` (``kind``: the outcome `sweeps.job.outcome.classify`
gives — ``oom``, ``diverged``, ``error``…; ``text``: one line; ``time``: Unix s), flushes, and
exits 1 at once (``os._exit``: no teardown of a process group a dead peer may hang); the agent
sees the exit within its ``monitor_interval`` and sends the other ranks SIGTERM. SIGTERM and
SIGINT raise [`Terminated`][sweeps.errors.Terminated] / KeyboardInterrupt, so ``finally`` blocks run and
rank 0 flushes; a rank stuck where Python cannot run a handler (a CUDA sync waiting on NCCL for a
dead peer) is ended by a watchdog `GRACE_S` seconds after the signal, after a flush.
A rank ignores SIGUSR2: in a Slurm job (``hydra/launcher=slurm``) Slurm's time-limit warning
reaches every process of the step, and the job process acts on it, stopping the ranks through
the agent (`sweeps.launchers.slurm.requeue`); a rank killed by it would end the job ``error``.
"""
from __future__ import annotations

import json
import logging
import multiprocessing.util
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from sweeps.errors import describe
from sweeps.job import signals
from sweeps.job.outcome import classify, explain
from sweeps.tasks.base import create
from sweeps.telemetry.sampler import for_job
from sweeps.tracking.follower import series
from sweeps.tracking.journal.journal import EpochLog
from sweeps.train import distributed, host_heap
from sweeps.train.checkpoint import Checkpoints

log = logging.getLogger("sweeps")
MEASURED = "measured_s"  # rank 0's compile time (s), for the job's time/overhead_s
GRACE_S = 5.0  # s a signalled rank gets to unwind by itself before the watchdog ends it


@dataclass
class RankSpec:
    """What the job process tells every rank (pickled into the spawned processes)."""

    cfg: dict  # the resolved job config
    backend: str  # nccl | gloo
    tracking_uri: str
    run_id: str  # the job's MLflow run, opened by the job process
    run_dir: str  # checkpoints: <checkpoint.dir>/<config hash>/<run id>
    journal: str  # the run's epochs.jsonl, appended to by rank 0 only
    resume: bool  # the job process found a checkpoint: every rank loads the newest
    logged_through: int  # epochs already in the run (resumed from an older checkpoint): not sent again
    work_dir: str  # the job's scratch folder: failure reports rank<r>.json, rank 0's measured_s
    log_format: str  # the job process's log record format (Hydra's)
    log_targets: list  # [("stream", "stdout"|"stderr") | ("file", path)]: where its logs go


class _Silent:
    """Writer, epoch log and checkpoints of the ranks other than 0: nothing is kept or logged."""

    off = ""  # never switched off: there is nothing to write

    def log_metrics(self, *args, **kwargs) -> None:
        pass

    set_tags = queue_tags = log_params = log_text = log_bytes = log_file = post = log_metrics
    send_pending = log_series = log_summary = append = close = flush = log_metrics

    def due(self, epoch: int) -> bool:
        return False


class RankJob:
    """The job as one rank sees it: what `Task.run` uses of a
    `Job` — `writer`, `epochs`, `checkpoints`,
    `resume_state`, `telemetry`, `log`. Rank 0's write to the job's run
    (without changing its status), journal and checkpoint folder; telemetry samples rank 0's
    process and every rank's GPU (`job_gpus`; its per-epoch metrics join the records)."""

    log = log

    def __init__(self, spec: RankSpec, cfg, regression: bool, rank: int, device):
        run_dir = Path(spec.run_dir)
        self.rank, self.work_dir = rank, Path(spec.work_dir)
        self.measured_s = 0.0  # measured work outside the epochs (compilation): handed to the job process
        self.resume_state = Checkpoints(run_dir, 0, cfg.checkpoint.keep).load_latest() if spec.resume else None
        self.writer = self.epochs = self.checkpoints = _Silent()
        self.telemetry = None
        if rank == 0:
            from mlflow import MlflowClient  # rank 0 only: the others never talk to the store

            from sweeps.tracking.writer.run_writer import RunWriter

            # the run its job process opened, maybe resumed: what an earlier part logged at step 0
            # (time/compile_s) is not logged a second time
            self.writer = RunWriter.attach(MlflowClient(spec.tracking_uri), spec.run_id, reopen=False,
                                           read_summary=True)
            self.writer.every_epochs, self.writer.every_evaluated = series.of_config(cfg)
            self.epochs = EpochLog(self.writer, Path(spec.journal), regression, cfg.log_every_s, cfg.epochs,
                                   logged_through=spec.logged_through)
            self.checkpoints = Checkpoints(run_dir, cfg.checkpoint.every_epochs, cfg.checkpoint.keep,
                                           cfg.checkpoint.every_s)
            self.telemetry = for_job(cfg.telemetry.interval_s, job_gpus(device))

    def close(self) -> None:
        """Stop telemetry, close the journal, send every queued metric (the run stays open: the
        job process closes it), hand ``measured_s`` to the job process. Never raises."""
        def measured() -> None:
            if self.rank == 0:
                (self.work_dir / MEASURED).write_text(repr(self.measured_s), encoding="utf-8")

        for step in (self.telemetry.stop if self.telemetry else None, self.epochs.close, self.writer.close, measured):
            try:
                step and step()
            except Exception as e:  # one failed step never keeps the others from running
                log.warning("rank 0: closing: %s", describe(e))


def job_gpus(device) -> list:
    """The devices of the whole job, as rank 0's telemetry samples them: on NCCL every rank's GPU
    (``cuda:0``…``cuda:<local world - 1>``: one node, rank r on cuda:r), so an N-GPU job's power,
    energy and memory add up over its N GPUs; on Gloo the CPU."""
    if device.type != "cuda":
        return [device]
    import torch

    world = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1)
    return [torch.device("cuda", r) for r in range(world)]


def main(spec: RankSpec) -> None:
    """The entry point of every rank (env: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ... from
    torch's launcher). Returns only when the job ended ok; otherwise the process exits (see the
    module docstring)."""
    rank = int(os.environ["RANK"])
    _logging(spec, rank)
    signal.signal(signal.SIGTERM, signals.raise_terminated)  # the agent stops ranks with SIGTERM
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # Slurm's warning is the job process's (module docstring)
    watchdog = _Watchdog()
    try:
        cfg = OmegaConf.create(spec.cfg)
        device = distributed.init(spec.backend, cfg.device.timeout_s, cfg.device.get("threads"))
        host_heap.retain(cfg.device.get("malloc_trim_mb"))  # as the job process did (its tag says how)
        task = create(cfg)
        task.prepare()  # seeded: every rank builds the same data
        watchdog.job = RankJob(spec, cfg, task.regression, rank, device)
        task.run(watchdog.job, device)
    except BaseException as e:  # Terminated and KeyboardInterrupt too: flush, then exit
        code = _failed(spec.work_dir, rank, e)
        watchdog.close()
        _exit(code)
    watchdog.close()
    distributed.shutdown()


def _failed(work_dir: str, rank: int, exc: BaseException) -> int:
    """Report ``exc`` (see the module docstring); the exit status: 1, or 130/143 for a signal."""
    if isinstance(exc, KeyboardInterrupt):  # stopped by the agent (another rank failed) or the user
        return 143 if getattr(exc, "signal_name", "") == "SIGTERM" else 130
    kind, _ = classify(exc)
    cause, text = explain(exc)
    record = {"rank": rank, "kind": kind, "type": type(cause).__name__, "text": text, "time": time.time()}
    path = Path(work_dir) / f"rank{rank}.json"
    try:
        path.with_suffix(".tmp").write_text(json.dumps(record), encoding="utf-8")
        os.replace(path.with_suffix(".tmp"), path)  # the job process never reads half a file
    except OSError as e:  # the job process then reports the exit status alone
        log.warning("rank %d: cannot write %s (%s)", rank, path, e)
    first = sorted(q.name for q in Path(work_dir).glob("rank*.json") if q != path)
    if first:  # a consequence (a collective whose peer left): that rank's own report says why
        log.warning("rank %d stopped after rank %s failed (%s: %s)", rank, first[0][4:-5], record["type"], text[:120])
    elif kind == "error":
        log.error("rank %d failed", rank, exc_info=(type(exc), exc, exc.__traceback__))
    else:
        log.warning("rank %d: %s (%s: %s)", rank, kind, record["type"], text)
    return 1


class _Watchdog:
    """Ends this process `GRACE_S` s after SIGTERM/SIGINT unless the main thread has ended it
    by then. Python runs a signal handler only between bytecodes: a rank blocked in C (a CUDA
    sync on an NCCL collective whose peer died) would otherwise wait for the agent's SIGKILL,
    30 s later, and rank 0's queued metrics would be lost."""

    def __init__(self):
        self.job: RankJob | None = None
        self._done = threading.Event()
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)  # written by the C-level handler, however busy the main thread
        threading.Thread(target=self._watch, args=(read,), name="sweeps-rank-watchdog", daemon=True).start()

    def _watch(self, read: int) -> None:
        stop = {signal.SIGTERM, signal.SIGINT}
        while not stop.intersection(os.read(read, 64)):  # not SIGCHLD (DataLoader workers ending)
            pass
        if self._done.wait(GRACE_S):
            return
        flusher = threading.Thread(target=self.close, daemon=True)  # a flush must not hold the exit
        flusher.start()
        flusher.join(GRACE_S)
        _exit(143)

    def close(self) -> None:
        """Flush and close rank 0's job (idempotent)."""
        if self.job is not None:
            self.job.close()
        self._done.set()


def _exit(code: int) -> None:
    """Exit now with ``code``, logs and streams flushed (no interpreter teardown)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:  # unlink this process's semaphores (tqdm's lock), or the resource tracker warns of leaks
        multiprocessing.util._run_finalizers(0)
    except Exception:
        pass
    os._exit(code)


def _logging(spec: RankSpec, rank: int) -> None:
    """Log where the job process logs: rank 0 at INFO (the epoch table), the others warnings only."""
    root = logging.getLogger()
    root.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    fmt = logging.Formatter(spec.log_format if rank == 0 else f"[rank {rank}]{spec.log_format}")
    for kind, target in spec.log_targets:
        if kind == "file" and rank != 0:
            continue
        handler = logging.FileHandler(target, "a") if kind == "file" else logging.StreamHandler(getattr(sys, target))
        handler.setFormatter(fmt)
        root.addHandler(handler)
