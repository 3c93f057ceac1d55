"""Data-parallel training (``device=ddp``): start and supervise ``device.gpus`` processes.

The job process (its `Job` has opened the MLflow run) starts N
ranks with torch's own launcher (`torch.distributed.launcher.api.elastic_launch`,
torchrun's ``--standalone`` semantics: one node, a c10d rendezvous on a free local port, no
restarts), NCCL on GPUs, Gloo on the CPU. Each rank runs the same training code as one device
(`sweeps.job.rank`); the training itself — global batch split over the ranks, one
shared permutation per epoch, gradients averaged, records gathered once per epoch — lives in
`sweeps.train.distributed`.

- Rank 0 appends every epoch as it ends to the run's journal, which the job process's follower
  ships to the job's run (`sweeps.tracking.follower.follower`); the job process never writes the
  journal while ranks run, and once they have ended (any way) it reads rank 0's records back
  from it, so the job's summary and ``epochs.csv`` are those of one device, and its end drains
  them all into the run.
- A rank that fails writes one JSON line per failure and exits; the agent (polling every
  `MONITOR_S`) stops the other ranks at once; this module raises the earliest failure as
  what a one-device job would have raised: `torch.OutOfMemoryError` (``oom``),
  [`Diverged`][sweeps.errors.Diverged], [`RankFailed`][sweeps.errors.RankFailed] naming the rank (``error``;
  a sticky CUDA error in its text lost that rank's context, not the job process's).
  ``device.timeout_s`` bounds the rendezvous and every collective: the last resort of a hang.
- Under the GPU pool (`sweeps.placement.gpu_pool`) the job holds ``device.gpus`` GPUs and the
  ranks are started with ``CUDA_VISIBLE_DEVICES`` set to their UUIDs, so rank r runs on the
  r-th GPU the job holds, never on one another job holds.
- SIGINT/SIGTERM to the job process: the agent stops the ranks (rank 0 flushes), then the job
  ends ``killed`` as without ddp. The launcher's own signal handlers are removed afterwards.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from pathlib import Path

import torch
from omegaconf import OmegaConf

from sweeps.errors import DeviceUnavailable, Diverged, RankFailed, signal_exception
from sweeps.placement import gpu_pool
from sweeps.job import rank as rank_process
from sweeps.placement.device import ddp_backend as backend
from sweeps.tracking.store import store
from sweeps.tracking.journal.journal import read_journal
from sweeps.train.noise import JOB_PID_ENV

log = logging.getLogger("sweeps")
MONITOR_S = 0.1  # s between the agent's checks of the ranks: how soon a failed rank stops the others
DEFAULT_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def launch(job, journal: Path) -> None:
    """Run the job's task on ``device.gpus`` ranks and wait for them; afterwards (on every
    ending) ``job.epochs.records`` holds rank 0's records from ``journal``.

    ``job`` is the `Job` whose run is open: its ``cfg``,
    ``run_id``, ``checkpoints.directory`` and ``resume_state`` are passed on to the ranks.

    Raises:
        torch.OutOfMemoryError: a rank ran out of memory first (the message names the rank).
        Diverged: the training loss became non-finite (all ranks agree on it).
        RankFailed: a rank failed otherwise, or died without saying why (killed, crashed).
        Terminated, KeyboardInterrupt: the job process got SIGTERM / SIGINT.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg = job.cfg
    work = Path(tempfile.mkdtemp(prefix="sweeps-ddp-"))  # the ranks' failure files and torch's logs
    log_format, log_targets = _log_setup()
    spec = rank_process.RankSpec(
        cfg=OmegaConf.to_container(cfg, resolve=True), backend=backend(cfg.device),
        tracking_uri=store.tracking_uri(cfg), run_id=job.run_id, run_dir=str(job.checkpoints.directory.resolve()),
        journal=str(journal.resolve()), resume=job.resume_state is not None,
        logged_through=job.epochs.logged_through, work_dir=str(work),
        log_format=log_format, log_targets=log_targets)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=cfg.device.gpus, max_restarts=0,
                          run_id=f"sweeps-{uuid.uuid4().hex[:8]}", rdzv_backend="c10d",
                          rdzv_endpoint=f"127.0.0.1:{_free_port()}", rdzv_configs={"timeout": int(cfg.device.timeout_s)},
                          monitor_interval=MONITOR_S, start_method="spawn",
                          logs_specs=DefaultLogsSpecs(log_dir=str(work / "torch")))
    os.environ[JOB_PID_ENV] = str(os.getpid())  # for the ranks (child processes): siblings are the job's CPU
    visible = os.environ.get(VISIBLE_ENV)
    if gpu_pool.held():  # the pool's GPUs for this job, by UUID: rank r's cuda:r is the r-th of them
        os.environ[VISIBLE_ENV] = ",".join(gpu_pool.held())
    # the launcher installs its own SIGINT/SIGTERM/... handlers and leaves them: keep the job's
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    try:
        elastic_launch(config, rank_process.main)(spec)
    except ChildFailedError as e:
        raise first_failure(work, e) from None
    except SignalException as e:  # the ranks are stopped; the job ends killed as without ddp
        raise signal_exception(e.sigval) from None
    finally:
        if gpu_pool.held() and visible is None:  # the spawned ranks have read it; this process's CUDA never does
            os.environ.pop(VISIBLE_ENV, None)
        elif gpu_pool.held():
            os.environ[VISIBLE_ENV] = visible
        for s, handler in saved.items():
            try:
                signal.signal(s, handler)
            except (ValueError, TypeError):  # not the main thread, or a handler set outside Python
                pass
        job.epochs.records = read_journal(journal)  # rank 0's, resumed epochs included: the job's end drains them
        job.epochs.journaled = job.epochs.records[-1]["epoch"] if job.epochs.records else 0
        try:  # compilation: measured work, not overhead
            job.measured_s = float((work / rank_process.MEASURED).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        shutil.rmtree(work, ignore_errors=True)


def first_failure(work_dir: Path, exc: Exception) -> Exception:
    """The exception to end the job with: the earliest of the ranks' failure files (see
    `sweeps.job.rank`), else what the launcher says of the first rank that exited."""
    reports = []
    for path in work_dir.glob("rank*.json"):
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    if not reports:  # killed (OOM killer, SIGKILL) or crashed before it could say why
        failures = getattr(exc, "failures", {})
        if not failures:
            return RankFailed(f"a data-parallel rank failed: {(str(exc).strip() or repr(exc)).splitlines()[0]}")
        rank, failure = exc.get_first_failure()
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}"
        return RankFailed(f"data-parallel rank {rank} died ({how}) without reporting an error")
    first = min(reports, key=lambda r: (r["time"], r["kind"] != "oom"))
    if first["kind"] == "oom":
        return torch.OutOfMemoryError(f"{first['text']} (rank {first['rank']})")
    if first["kind"] == "diverged":
        return Diverged(first["text"])
    if first["kind"] == "unavailable":
        return DeviceUnavailable(first["text"])
    return RankFailed(f"{first['type']} on rank {first['rank']}: {first['text']}")


def _log_setup() -> tuple[str, list]:
    """This process's log format and targets (console streams, Hydra's job log file), for the ranks."""
    fmt, targets = DEFAULT_FORMAT, []
    for handler in logging.getLogger().handlers:
        if handler.formatter is not None and getattr(handler.formatter, "_fmt", None):
            fmt = handler.formatter._fmt
        if isinstance(handler, logging.FileHandler):
            target = ("file", handler.baseFilename)
        elif isinstance(handler, logging.StreamHandler):
            target = ("stream", "stdout" if handler.stream is sys.stdout else "stderr")
        else:
            continue
        if target not in targets:
            targets.append(target)
    return fmt, targets or [("stream", "stderr")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
