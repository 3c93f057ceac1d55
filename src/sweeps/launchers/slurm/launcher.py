"""``hydra/launcher=slurm`` in the sweep's process: submit the jobs as Slurm arrays through
submitit (Hydra's submitit launcher) — one per GPU count, asking Slurm for the GPUs each job's
``device`` needs — and wait for every job's result.

A job that ends without a result (scancel, SIGKILL, a node failure, its requeues used up) does not
stop the sweep: its run, if still RUNNING, is closed ``killed``, and the sweep goes on to its summary.
A job that raised instead — bad input found on its node (a ``UsageError``: a missing dataset, no C
compiler for ``compile=true``) before it opened a run, or a crash outside its run — ends ``error``:
one line on stderr and a ``slurm.error.<job id>`` tag on the sweep's parent run, which stays open for
the other jobs; the sweep exits 1.
Job states come from ``squeue``, not ``sacct`` (see `SlurmLauncher.launch`). Inside each job
`sweeps.launchers.slurm.requeue` handles the time limit and preemption.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
from omegaconf import OmegaConf

from sweeps import names
from sweeps.errors import UsageError, brief, describe
from sweeps.job import outcome, parent_run
from sweeps.launchers.slurm import requeue

log = logging.getLogger("sweeps")
# squeue's names of the states a job does not leave (a preempted job that Slurm requeues shows
# REQUEUED/PENDING, not PREEMPTED); GONE: squeue no longer lists a job it listed (ended, then forgotten)
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED", "GONE"}
JOB_ERROR_TAG_PREFIX = names.SLURM_ERROR_TAG_PREFIX  # + Slurm job id, on the parent run: a job that raised, and why


class SlurmLauncher(SubmititSlurmLauncher):
    """Hydra's submitit Slurm launcher, with sweeps' requeue protocol, GPUs from ``device`` and job
    states from squeue (see the module docstring). Configured by ``conf/hydra/launcher/slurm.yaml``;
    Hydra instantiates it as ``hydra_plugins.sweeps_slurm.SlurmLauncher``."""

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """Run one job in its Slurm job's process, under sweeps' requeue protocol
        (`sweeps.launchers.slurm.requeue.run_job`)."""
        delay = float(self.params.get("signal_delay_s") or 120)
        return requeue.run_job(lambda: super(SlurmLauncher, self).__call__(*args, **kwargs), delay)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit the jobs and wait for them (Hydra's submitit launcher, with GPUs from each job's
        ``device`` when ``gpus_per_node`` is null — one array per GPU count — and one result per job
        even when Slurm lost one)."""
        import submitit
        from submitit.slurm.slurm import SlurmJob

        # submitit polls job states with sacct, which needs Slurm's accounting database: where there is
        # none it warns on every poll and never learns that a job died without a result. squeue asks
        # slurmctld itself (a class attribute: submitit builds array jobs as SlurmJob directly).
        SlurmJob.watcher = _squeue_watcher()
        params = dict(self.params)
        gpus = self.gpus_per_job(job_overrides, params)
        executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                         slurm_max_num_timeout=params.pop("max_num_timeout"))
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        args = [(list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
                 Singleton.get_state()) for i, o in enumerate(job_overrides)]
        jobs: list = [None] * len(args)
        for count, indices in arrays(gpus).items():  # one array per GPU count, in the sweep's order
            if count is not None:
                executor.update_parameters(gpus_per_node=count or None)
            log.info("Slurm: %d job(s) to partition %s, %s GPU(s) each, %s min limit; logs in %s/.submitit",
                     len(indices), params.get("partition") or "(default)",
                     count if count is not None else params.get("gpus_per_node") or 0,
                     params.get("timeout_min"), sweep_dir)
            for i, job in zip(indices, executor.map_array(self, *zip(*[args[i] for i in indices]))):
                jobs[i] = job
        return [_result(job, list(o)) for job, o in zip(jobs, job_overrides)]

    def gpus_per_job(self, job_overrides: Sequence[Sequence[str]], params: dict) -> list[int | None]:
        """GPUs per Slurm job, from each job's own ``device`` (its composed config: ``device=cpu,cuda``
        gives the cpu job none); all None when the launcher's ``gpus_per_node``, ``gres`` or
        ``gpus_per_task`` is set (that request serves every job)."""
        if params.get("gpus_per_node") is not None or params.get("gres") or params.get("gpus_per_task"):
            return [None] * len(job_overrides)
        partition = params.get("partition")
        has_gpus: list[bool] = []  # sinfo once, and only when some job's device depends on it

        def partition_gpus(_: str | None) -> bool:
            if not has_gpus:
                has_gpus.append(partition_has_gpus(partition))
            return has_gpus[0]

        loader = self.hydra_context.config_loader
        return [gpus_for(loader.load_sweep_config(self.config, list(o)).device, partition, partition_gpus)
                for o in job_overrides]


def arrays(gpus: Sequence[int | None]) -> dict[int | None, list[int]]:
    """The job indices of each GPU count, counts in order of first appearance."""
    out: dict[int | None, list[int]] = {}
    for i, count in enumerate(gpus):
        out.setdefault(count, []).append(i)
    return out


def _result(job, overrides: list[str]) -> JobReturn:
    """The job's Hydra result: for a job that raised (its task function, or the job around it), an
    ``error`` result (`_errored`); for a job that ended without a result, a ``killed`` one,
    its run closed."""
    from submitit.core.utils import FailedJobError

    try:
        ret = job.results()[0]
    except FailedJobError as e:  # the job raised: a traceback came back
        trace = [line for line in str(e).splitlines() if line.strip() and set(line.strip()) != {"-"}]
        if not any("UncompletedJobError" in line for line in trace):  # not: out of requeues (run_job)
            return _errored(job, overrides, trace[-1].strip() if trace else type(e).__name__)
        return _lost(job, overrides, e)
    except Exception as e:  # UncompletedJobError: nothing came back from the job
        return _lost(job, overrides, e)
    if ret.status == JobStatus.FAILED:  # its task function raised: bad input found on the node (UsageError)
        exc = ret._return_value
        return _errored(job, overrides, brief(exc, 500) if isinstance(exc, UsageError) else describe(exc, 500))
    return ret


def _lost(job, overrides: list[str], e: Exception) -> JobReturn:
    """A ``killed`` result for a job that ended without a result, its run closed."""
    state = job.state
    first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
    log.warning("Slurm job %s ended %s without a result (%s)", job.job_id, state, first[:200])
    _close_lost_run(job.job_id, state)
    ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
    ret.return_value = names.KILLED
    return ret


def _errored(job, overrides: list[str], line: str) -> JobReturn:
    """An ``error`` result for a job that raised before (or outside) its run: one line on stderr, a
    ``slurm.error.<job id>`` tag on the parent run (left open: the other jobs go on), and the
    sweep's exit status 1."""
    line = line[:500]
    print(f"sweeps: error: Slurm job {job.job_id} ({' '.join(overrides)}): {line}", file=sys.stderr, flush=True)
    outcome.note(names.ERROR)
    sweep_run, uri = parent_run.get("parent_run_id"), parent_run.get("tracking_uri")
    if sweep_run and uri:
        try:
            from mlflow import MlflowClient

            MlflowClient(uri).set_tag(sweep_run, f"{JOB_ERROR_TAG_PREFIX}{job.job_id}", f"{' '.join(overrides)}: {line}")
        except Exception as e:  # the exit status and stderr say it already
            log.warning("MLflow: could not tag the sweep run %s with job %s's error (%s)", sweep_run, job.job_id,
                        describe(e))
    ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
    ret.return_value = names.ERROR
    return ret


def _close_lost_run(job_id: str, state: str) -> None:
    """Close the run of Slurm job ``job_id`` as killed if its process died with it RUNNING, and say in
    ``error`` that a run closed to be requeued will not go on after all."""
    from mlflow import MlflowClient

    sweep_run, uri = parent_run.get("parent_run_id"), parent_run.get("tracking_uri")
    if not sweep_run or not uri:
        return
    client = MlflowClient(uri)
    query = f"tags.`{names.SLURM_JOB_TAG}` = '{job_id}' and attributes.status != 'FINISHED'"
    for run in client.search_runs([client.get_run(sweep_run).info.experiment_id], query):
        error = run.data.tags.get(names.ERROR_TAG, "")
        if run.info.status == "RUNNING":  # its process died without closing it
            client.set_tag(run.info.run_id, names.OUTCOME_TAG, names.KILLED)
            client.set_terminated(run.info.run_id, "KILLED")
        elif "requeued as Slurm job" not in error:  # closed by its job, saying why: leave it
            continue
        client.set_tag(run.info.run_id, names.ERROR_TAG, f"Slurm job {job_id} ended {state} without finishing "
                       "its run; rerun the sweep to resume it from its checkpoint")


def gpus_for(device, partition: str | None, has_gpus: Callable[[str | None], bool] | None = None) -> int:
    """GPUs per job for ``device`` (a config node): cpu 0, cuda 1, ddp ``device.gpus`` (0 with gloo),
    auto 1 — where the partition has GPUs (``has_gpus``, by default `partition_has_gpus`:
    ``sinfo``), else 0 for auto and ddp with backend auto."""
    name = device.name
    if name == "cpu" or (name == "ddp" and device.backend == "gloo"):
        return 0
    if name == "cuda" or (name == "ddp" and device.backend == "nccl"):
        return 1 if name == "cuda" else int(device.gpus)
    if not (has_gpus or partition_has_gpus)(partition):
        return 0
    return int(device.gpus) if name == "ddp" else 1


def partition_has_gpus(partition: str | None) -> bool:
    """Whether ``sinfo`` lists a ``gpu`` GRES on the partition's nodes (False when sinfo fails)."""
    cmd = ["sinfo", "--noheader", "--format=%G", *(["--partition", partition] if partition else [])]
    try:
        return "gpu" in subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False


def _squeue_watcher():
    """A submitit job-state watcher that asks ``squeue`` (polls at most every 30 s)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueWatcher(SlurmInfoWatcher):
        def update(self) -> None:
            ids = sorted({j.split("_")[0] for j in self._registered - self._finished})
            if not ids:
                return
            self._num_calls += 1
            cmd = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%N", "--jobs", ",".join(ids)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.SubprocessError) as e:
                proc = None
                log.debug("squeue failed: %s", e)
            # "Invalid job id": every job asked for is gone (squeue fails only when all are)
            if proc is not None and (proc.returncode == 0 or "Invalid job id" in proc.stderr):
                info = self.read_info("JobID|State|NodeList\n" + proc.stdout)
                for job_id in self._registered - self._finished - set(info):
                    if job_id in self._info_dict:  # listed before, not now: ended and forgotten (MinJobAge)
                        info[job_id] = {"JobID": job_id, "State": "GONE"}
                self._info_dict.update(info)
            self._last_status_check = time.time()
            for job_id in self._registered - self._finished:
                if self.is_done(job_id, mode="cache"):
                    self._finished.add(job_id)

        def is_done(self, job_id: str, mode: str = "standard") -> bool:
            # only final states: squeue also shows CONFIGURING, SIGNALING, REQUEUE_HOLD, ... for live jobs
            return self.get_state(job_id, mode=mode).split(" ")[0].upper() in FINAL_STATES

    return SqueueWatcher(delay_s=30)
