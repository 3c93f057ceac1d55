"""One job per GPU: a pool of slots, one lock file each, that concurrent jobs claim.

``hydra/launcher=gpu_pool`` (conf/hydra/launcher/gpu_pool.yaml: Hydra's joblib launcher with
process workers; plain ``hydra/launcher=joblib`` too) runs ``hydra.launcher.n_jobs`` jobs at once
(``SWEEPS_GPU_POOL=N`` in the environment does the same for other launchers). A job then holds
one slot while it runs:

- on a machine with GPUs the slots are the visible GPUs: the job's ``device.index`` becomes its
  slot, so no two jobs of any sweep on this machine share a GPU (a job waits for a free one);
- without GPUs there are ``SWEEPS_GPU_POOL`` slots and each job limits torch to its share of the
  cores (cores ÷ slots threads), so N jobs in parallel do not oversubscribe the CPU.

Locks are :class:`filelock.FileLock` files under ``$TMPDIR/sweeps-gpu-pool-<uid>/`` (released
when the job ends, or by the OS when its process dies). Otherwise nothing happens: single runs
and the basic launcher keep ``device.index`` as given.
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from filelock import FileLock, Timeout
from omegaconf import DictConfig

POOL_ENV = "SWEEPS_GPU_POOL"  # concurrent jobs of the launcher (slots where there is no GPU)
POLL_S = 0.2  # how often a waiting job tries the locks again (s)

log = logging.getLogger("sweeps")


def lock_dir() -> Path:
    """Where the slot locks live: one folder per user, shared by every sweep on this machine."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = Path(tempfile.gettempdir()) / f"sweeps-gpu-pool-{uid}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def requested_slots() -> int | None:
    """Concurrent jobs: ``$SWEEPS_GPU_POOL``, else ``hydra.launcher.n_jobs`` under the joblib
    launcher (-1: one per core), else None (jobs run one at a time: no pool)."""
    if os.environ.get(POOL_ENV, "").lstrip("-").isdigit():
        n = int(os.environ[POOL_ENV])
    else:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized() or "joblib" not in str(HydraConfig.get().launcher.get("_target_", "")):
            return None
        n = int(HydraConfig.get().launcher.n_jobs)
    return n if n >= 1 else (os.cpu_count() or 1)


def slots(requested: int) -> tuple[int, bool]:
    """``(number of slots, whether they are GPUs)``: the visible GPUs, else ``requested`` CPU slots."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return torch.cuda.device_count(), True
    return max(1, requested), False


def acquire(n: int, prefix: str, timeout_s: float | None = None) -> tuple[int, FileLock]:
    """Claim the first free of ``n`` slots named ``<prefix><i>.lock``, waiting for one.

    Returns:
        ``(slot index, the held lock)`` — release the lock when done.
    Raises:
        TimeoutError: no slot freed within ``timeout_s`` (None: wait for ever).
    """
    start = time.monotonic()
    while True:
        for i in range(n):
            lock = FileLock(str(lock_dir() / f"{prefix}{i}.lock"))
            try:
                lock.acquire(timeout=0)
                return i, lock
            except Timeout:
                continue
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise TimeoutError(f"no free slot of {n} ({prefix}*) within {timeout_s} s")
        time.sleep(POLL_S)


@contextmanager
def claim(device: DictConfig) -> Iterator[int | None]:
    """Hold a slot for the body (see the module docstring); yields its index, or None when the job
    is not run by the pool launcher or is not a one-device job (``device=ddp``, ``device=cpu`` on a
    GPU machine keep their own settings)."""
    requested = requested_slots()
    if requested is None or device.name == "ddp":
        yield None
        return
    n, gpus = slots(requested)
    if gpus and device.name == "cpu":
        yield None
        return
    index, lock = acquire(n, "gpu" if gpus else "cpu")
    try:
        if gpus:
            device.index = index  # this job's own GPU
            log.info("gpu pool: job pinned to cuda:%d", index)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
        yield index
    finally:
        lock.release()
