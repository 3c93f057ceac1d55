"""One job per GPU: a pool of slots, one lock file each, that concurrent jobs claim.

``hydra/launcher=gpu_pool`` (conf/hydra/launcher/gpu_pool.yaml: Hydra's joblib launcher with
process workers; plain ``hydra/launcher=joblib`` too) runs ``hydra.launcher.n_jobs`` jobs at once
(``SWEEPS_GPU_POOL=N`` in the environment does the same for other launchers); how many is the
launcher's to say (`sweeps.launchers.Launcher.pool_slots`), and the job passes it to
`claim`. A job then holds its slots while it runs:

- on a machine with GPUs the slots are the visible GPUs, each locked under its NVML UUID (not
  its CUDA index, which ``CUDA_VISIBLE_DEVICES`` renumbers per process; MIG instances are slots
  of their own), so no two jobs of any sweep on this machine share a GPU (a job waits for a
  free one). A one-GPU job's ``device.index`` becomes its slot before its run is opened (the
  logged ``device.index`` is the GPU it ran on); a ``device=ddp`` job (NCCL) holds
  ``device.gpus`` GPUs at once and its ranks see only those (``CUDA_VISIBLE_DEVICES``);
- a joblib worker is reused for later jobs and keeps each CUDA context its GPU jobs made
  (~0.5 GB each that no one else can use): its later one-GPU jobs take a free GPU it already has
  a context on first, and another free GPU only when all of those are busy (never waiting while
  a GPU idles); see `claim`;
- without GPUs there are ``SWEEPS_GPU_POOL`` slots and each job limits torch to its share of the
  cores (cores ÷ slots threads), so N jobs in parallel do not oversubscribe the CPU.

Locks are `filelock.FileLock` files under ``$TMPDIR/sweeps-gpu-pool-<uid>/`` (released
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
from typing import Iterator, Sequence

import torch
from filelock import FileLock, Timeout
from omegaconf import DictConfig

from sweeps.placement.device import ddp_backend, uses_cuda
from sweeps.state import current
from sweeps.telemetry.nvml import device_uuid

POLL_S = 0.2  # how often a waiting job tries the locks again (s)

log = logging.getLogger("sweeps")
# the running job's GPUs (UUIDs) and the latest claim's wait (s): ProcessState.pool_held, .pool_waited_s


def lock_dir() -> Path:
    """Where the slot locks live: one folder per user, shared by every sweep on this machine."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = Path(tempfile.gettempdir()) / f"sweeps-gpu-pool-{uid}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def gpu_keys() -> list[str]:
    """The visible GPUs in this process's numbering (list position = CUDA index), named by NVML
    UUID (``GPU-…``, ``MIG-…``): the same GPU has the same lock in every process, whatever its
    ``CUDA_VISIBLE_DEVICES``; two MIG instances of one GPU are two slots."""
    return [device_uuid(i) or f"index{i}" for i in range(torch.cuda.device_count())]


def slots(requested: int) -> tuple[list[str], bool]:
    """``(slot names, whether they are GPUs)``: the visible GPUs (`gpu_keys`), else
    ``requested`` CPU slots ``0``…``requested-1``."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return gpu_keys(), True
    return [str(i) for i in range(max(1, requested))], False


def _lock(prefix: str, key: str) -> FileLock:
    return FileLock(str(lock_dir() / f"{prefix}{key.replace('/', '_')}.lock"))  # old MIG names hold "/"


def acquire_many(keys: Sequence[str], count: int, prefix: str, timeout_s: float | None = None,
                 prefer: Sequence[str] = ()) -> list[tuple[int, FileLock]]:
    """Claim ``count`` free slots of ``keys`` at once, those in ``prefer`` first (then in the order
    of ``keys``), waiting until that many are free; never holds some while waiting for the rest
    (two data-parallel jobs could otherwise each hold half of what both need).

    Returns:
        ``[(position in keys, held lock)]`` — release the locks when done.
    Raises:
        TimeoutError: not that many slots freed within ``timeout_s`` (None: wait for ever).
    """
    start = time.monotonic()
    order = sorted(range(len(keys)), key=lambda i: keys[i] not in prefer)  # stable: preferred, then the rest
    while True:
        held: list[tuple[int, FileLock]] = []
        for i in order:
            key = keys[i]
            lock = _lock(prefix, key)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            held.append((i, lock))
            if len(held) == count:
                return held
        for _, lock in held:
            lock.release()
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise TimeoutError(f"no {count} free slot(s) of {len(keys)} ({prefix}*) within {timeout_s} s")
        time.sleep(POLL_S)


def acquire(n: int, prefix: str, timeout_s: float | None = None) -> tuple[int, FileLock]:
    """Claim the first free of ``n`` slots named ``<prefix><i>.lock``, waiting for one.

    Returns:
        ``(slot index, the held lock)`` — release the lock when done.
    Raises:
        TimeoutError: no slot freed within ``timeout_s`` (None: wait for ever).
    """
    return acquire_many([str(i) for i in range(n)], 1, prefix, timeout_s)[0]


def waited_s() -> float:
    """Seconds the latest `claim` in this process waited for its slots (0 outside the pool)."""
    return current().pool_waited_s


def held() -> list[str]:
    """UUIDs of the GPUs this process's running job holds (a data-parallel job's ranks run on
    them: `sweeps.job.ddp.launch`); empty outside the pool."""
    return list(current().pool_held)


@contextmanager
def claim(device: DictConfig, requested: int | None) -> Iterator[int | None]:
    """Hold slots for the body (see the module docstring); yields the first one's index, or None
    when ``requested`` (the launcher's concurrent jobs, `pool_slots`)
    is None — jobs run one at a time, no pool — or the job needs no GPU slot (``device=cpu`` on a GPU
    machine, ``device=ddp`` on Gloo keep their own settings). A ``device=ddp`` job on GPUs holds
    ``device.gpus`` of them; a one-GPU job in a process that already made CUDA contexts on pool
    GPUs takes a free one of those first (see the module docstring)."""
    state = current()
    state.pool_waited_s = 0.0
    if requested is None:
        yield None
        return
    keys, gpus = slots(requested)
    ddp = device.name == "ddp"
    on_cpu = device.name == "cpu" or (device.get("_target_") and not uses_cuda(device))  # a user's kind: its type
    if (gpus and on_cpu) or (ddp and (not gpus or ddp_backend(device) != "nccl")) \
            or (ddp and device.gpus > len(keys)):  # the last: ddp.resolve says why it cannot run
        yield None
        return
    # A reused worker's contexts (device.contexts: made by resolve_device's set_device, not by the
    # CUDA initialisation gpu_keys does) are a preference, not a tie: waiting for its own busy GPU
    # while another idles costs a whole GPU's time, a second context ~0.5 GB of one (each worker
    # holds at most one per GPU). Two workers with contexts on the same GPU would otherwise take
    # turns on it for the rest of the sweep.
    prefer = [keys[i] for i in sorted(state.cuda_contexts) if i < len(keys)] if gpus and not ddp else []
    t0 = time.monotonic()
    picked = acquire_many(keys, device.gpus if ddp else 1, "gpu-" if gpus else "cpu", prefer=prefer)
    state.pool_waited_s = time.monotonic() - t0
    index = picked[0][0]
    try:
        if gpus:
            state.pool_held[:] = [keys[i] for i, _ in picked]
            if not ddp:
                device.index = index  # this job's own GPU
            log.info("gpu pool: job pinned to %s", ", ".join(f"cuda:{i} ({keys[i]})" for i, _ in picked))
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // len(keys)))
        yield index
    finally:
        state.pool_held.clear()
        for _, lock in picked:
            lock.release()
