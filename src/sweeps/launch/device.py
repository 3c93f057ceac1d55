"""Which device a job runs on: ``auto``, ``cpu``, ``cuda`` (``device.index``) or ``ddp``; and the
checks that turn a machine that cannot run a job into one line instead of a deep traceback:

- the NVIDIA driver against the CUDA major version torch was built for (a too-old driver makes
  ``torch.cuda.is_available()`` False with a warning, so ``device=auto`` would silently train on
  the CPU of a GPU machine): ``outcome=unavailable`` naming both versions;
- ``compile=true`` with the inductor backend needs a C compiler and the Python headers (inductor
  builds C++ kernels and Triton its launcher against ``Python.h``): :func:`preflight` stops the
  sweep with a :class:`~sweeps.errors.UsageError` before any job runs;
- a process whose CUDA context a sticky error has lost runs no more CUDA jobs
  (:mod:`sweeps.launch.outcome`).
"""
from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

import torch
from omegaconf import DictConfig

from sweeps.errors import DeviceUnavailable, UsageError
from sweeps.train import memory

# Minimum Linux driver per CUDA major version of the torch wheel (NVIDIA, CUDA Toolkit Release
# Notes, table "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility": CUDA 13.x >= 580, 12.x >= 525.60.13, 11.x >= 450.80.02).
MIN_DRIVER = {13: (580,), 12: (525, 60, 13), 11: (450, 80, 2)}
COMPILERS = ("cc", "gcc", "clang")  # what inductor's C++ builder and Triton look for when $CC is unset


def driver_problem(nvml=None, cuda: str | None = None) -> str:
    """Why this machine's NVIDIA driver cannot run torch's CUDA build ("" when it can, or when no
    driver or no CUDA build is there to compare). ``nvml``: the NVML module (default nvidia-ml-py);
    ``cuda``: the build's CUDA version (default ``torch.version.cuda``)."""
    cuda = cuda if cuda is not None else torch.version.cuda
    if not cuda:
        return ""
    if nvml is None:
        from sweeps.telemetry.nvml import pynvml as nvml
    try:
        nvml.nvmlInit()
        try:
            driver = nvml.nvmlSystemGetDriverVersion()
        finally:
            nvml.nvmlShutdown()
    except Exception:  # no NVML, no driver: nothing to compare
        return ""
    driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    need = MIN_DRIVER.get(int(cuda.split(".")[0]))
    have = tuple(int(p) for p in driver.split(".") if p.isdigit())
    if need is None or have >= need:
        return ""
    return (f"torch {torch.__version__} is built for CUDA {cuda}, which needs NVIDIA driver >= "
            f"{'.'.join(map(str, need))}, and this machine has {driver}: update the driver, or install the "
            f"torch wheel for an older CUDA (https://pytorch.org/get-started/locally/)")


def compiler_problem() -> str:
    """What inductor (``compile=true``) lacks here: a C compiler, the Python headers ("" when neither)."""
    missing = []
    cc = os.environ.get("CC")
    if not (shutil.which(cc) if cc else any(shutil.which(c) for c in COMPILERS)):
        missing.append(f"a C compiler (${'CC=' + cc if cc else 'CC unset'}; none of {', '.join(COMPILERS)} on PATH)")
    include = sysconfig.get_paths().get("include") or ""
    if not (Path(include) / "Python.h").is_file():
        missing.append(f"the Python headers ({include}/Python.h)")
    return " and ".join(missing)


def preflight(cfg: DictConfig) -> None:
    """Checks of the machine that fail every job alike, before any job runs.

    Raises:
        UsageError: ``compile=true`` with the inductor backend where no C compiler or no Python
            headers are installed.
    """
    from sweeps.train.builder import compile_backend

    if cfg.get("compile") and compile_backend() == "inductor" and (missing := compiler_problem()):
        raise UsageError(f"compile=true: torch.compile's inductor backend needs {missing}; install them "
                         f"(Debian/Ubuntu: apt install build-essential python3-dev) or set compile=false")


def resolve_device(cfg: DictConfig) -> torch.device:
    """``auto`` → ``cuda:<index>`` when CUDA is present, else ``cpu``. A one-GPU device is made this
    process's current device (``torch.cuda.set_device``): whatever uses the current device
    (cuBLAS handles, Triton, CUDA graphs, events recorded without a stream) then uses the job's.

    Raises:
        DeviceUnavailable: ``cuda`` asked for where there is none, the index is out of range, the
            driver is too old for torch's CUDA (``auto`` too), or a sticky error lost this
            process's CUDA context.
    """
    if cfg.name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available() and (problem := driver_problem()):
        raise DeviceUnavailable(problem)
    if cfg.name == "auto" and not torch.cuda.is_available():
        return torch.device("cpu")
    if cfg.name == "ddp":  # rank 0's device; the checks live with the launcher (ranks: fresh processes)
        from sweeps.launch import ddp

        return ddp.resolve(cfg)
    if memory.cuda_lost:
        raise DeviceUnavailable(f"an earlier job's sticky CUDA error lost this process's CUDA context "
                                f"({memory.cuda_lost[:200]}); rerun the sweep to run this job in a fresh process")
    if not torch.cuda.is_available():
        raise DeviceUnavailable("device=cuda but no CUDA device is visible here "
                                "(torch.cuda.is_available() is False); use device=cpu or device=auto")
    if not 0 <= cfg.index < torch.cuda.device_count():
        raise DeviceUnavailable(f"device.index={cfg.index} but this machine has "
                                f"{torch.cuda.device_count()} CUDA device(s): use 0..{torch.cuda.device_count() - 1}")
    torch.cuda.set_device(cfg.index)
    return torch.device("cuda", cfg.index)


def job_devices(cfg: DictConfig, device: torch.device) -> list:
    """Every device the job uses, for its telemetry: ``[device]``, or for ``device=ddp`` on GPUs the
    ranks' GPUs — the pool's UUIDs it holds, else ``cuda:0``…``cuda:<gpus-1>``."""
    if cfg.name != "ddp" or device.type != "cuda":
        return [device]
    from sweeps.launch import gpu_pool

    return gpu_pool.held() or [torch.device("cuda", r) for r in range(cfg.gpus)]
