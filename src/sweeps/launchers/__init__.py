"""Launchers plug in here: what the Hydra launcher running this process asks of a job, behind one
interface (`Launcher`) with one implementation per launcher, picked by `current`
from the launcher's ``_target_``. The job (`sweeps.job.lifecycle`) and the command
line ask it — how many pool slots, what to do once a run is open, whether bad input ends this job
alone — and never look at a launcher's name themselves.

- `Launcher` — Hydra's basic launcher (one job at a time, in this process) and any other
  not registered: ``$SWEEPS_GPU_POOL`` slots if set;
- `JoblibPool` — ``hydra/launcher=gpu_pool`` or ``joblib``: ``hydra.launcher.n_jobs``
  concurrent jobs, one GPU each (`sweeps.placement.gpu_pool`);
- `SlurmArray` — ``hydra/launcher=slurm``: requeue on time limit or preemption, bad input
  ends its Slurm job alone (`sweeps.launchers.slurm`).

A launcher of one's own plugs in with `register`.
"""
from __future__ import annotations

import os

from sweeps.launchers.slurm import requeue

POOL_ENV = "SWEEPS_GPU_POOL"  # concurrent jobs for launchers that do not say (slots where there is no GPU)


class Launcher:
    """The basic launcher: jobs one at a time, in this process. The base of every implementation."""

    def pool_slots(self) -> int | None:
        """How many jobs run at once, each claiming a pool slot (a GPU, or a share of the cores):
        ``$SWEEPS_GPU_POOL`` (-1: one per core), else None — one at a time, no pool."""
        if os.environ.get(POOL_ENV, "").lstrip("-").isdigit():
            return _positive(int(os.environ[POOL_ENV]))
        return None

    def on_open(self, job) -> None:
        """Called by the job (a `Job`) once its run is open.
        A run inside any Slurm job (``sbatch``, ``srun``) gets its Slurm tags
        (`sweeps.launchers.slurm.requeue.on_open`; outside Slurm it does nothing)."""
        requeue.on_open(job)

    def ends_job_alone(self) -> bool:
        """Whether bad input found by a job ends that job alone (True: the sweep runs in another
        process, which records it) instead of the whole sweep."""
        return False


class JoblibPool(Launcher):
    """Hydra's joblib launcher (``hydra/launcher=gpu_pool``, ``joblib``): concurrent jobs in worker
    processes, one pool slot each."""

    def pool_slots(self) -> int | None:
        """``$SWEEPS_GPU_POOL``, else ``hydra.launcher.n_jobs`` (-1: one per core)."""
        from hydra.core.hydra_config import HydraConfig

        explicit = super().pool_slots()
        if explicit is not None or not HydraConfig.initialized():
            return explicit
        return _positive(int(HydraConfig.get().launcher.n_jobs))


class SlurmArray(Launcher):
    """``hydra/launcher=slurm``: each job in a Slurm job of its own, under the requeue protocol of
    `sweeps.launchers.slurm.requeue` (its `on_open`)."""

    def ends_job_alone(self) -> bool:
        """In the Slurm job's process (`sweeps.launchers.slurm.requeue.run_job`): yes — the
        sweep's process records the job ``error`` and keeps its parent run."""
        return requeue.in_job()


# (part of the launcher's _target_, implementation): the first match wins
_REGISTRY: list[tuple[str, Launcher]] = [("sweeps_slurm", SlurmArray()), ("joblib", JoblibPool())]


def register(target_part: str, launcher: Launcher) -> None:
    """Use ``launcher`` for every Hydra launcher whose ``_target_`` contains ``target_part``
    (checked before the built-in ones)."""
    _REGISTRY.insert(0, (target_part, launcher))


def current() -> Launcher:
    """The implementation for the Hydra launcher of this process's config (the basic one outside
    Hydra, and for launchers not registered)."""
    from hydra.core.hydra_config import HydraConfig

    target = str(HydraConfig.get().launcher.get("_target_", "")) if HydraConfig.initialized() else ""
    return next((launcher for part, launcher in _REGISTRY if part in target), Launcher())


def runs_jobs_in_this_process(config) -> bool:
    """Whether the Hydra launcher of ``config`` (a sweep's config, with its ``hydra`` node) runs
    the sweep's jobs in the sweep's process, one after another: Hydra's basic launcher, and the
    joblib launcher at ``n_jobs=1`` (joblib then runs them in the calling process); not a pool's
    workers, Slurm's or submitit's."""
    launcher = config.hydra.launcher
    target = str(launcher.get("_target_", ""))
    return target.endswith(".BasicLauncher") or ("joblib" in target and launcher.get("n_jobs") == 1)


def _positive(n: int) -> int:
    return n if n >= 1 else (os.cpu_count() or 1)
