"""Which device a job runs on: ``auto``, ``cpu``, ``cuda`` (``device.index``), ``ddp``, or a kind
of the user's (``device._target_``), each placed on its kind of `sweeps.devices`; and the
checks that turn a machine that cannot run a job into one line instead of a deep traceback:

- the NVIDIA driver against the CUDA major version torch was built for (a too-old driver makes
  ``torch.cuda.is_available()`` False with a warning, so ``device=auto`` would silently train on
  the CPU of a GPU machine): ``outcome=unavailable`` naming both versions — for jobs that would
  use CUDA only (`uses_cuda`: not ``device=cpu``, not ``device=ddp`` on Gloo);
- ``compile=true`` with the inductor backend needs, on the CPU, a C++ compiler (inductor's C++
  kernels: ``$CXX``, else ``g++``), on CUDA a C compiler (Triton's launcher: ``$CC``, else ``gcc``
  or ``clang``), and the Python headers (``Python.h``): `preflight` stops the sweep with a
  [`UsageError`][sweeps.errors.UsageError] before any job runs;
- a process whose CUDA context a sticky error has lost runs no more CUDA jobs
  (`sweeps.job.outcome`).

Also ``device=ddp``'s backend and rank 0's device (`ddp_backend`, `resolve_ddp`): the
GPU pool and the data-parallel launcher (`sweeps.job.ddp`) both read them here,
so neither imports the other back.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from omegaconf import DictConfig

from sweeps import devices
from sweeps.errors import DeviceUnavailable, UsageError
from sweeps.state import current

# Minimum Linux driver per CUDA major version of the torch wheel (NVIDIA, CUDA Toolkit Release
# Notes, table "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility": CUDA 13.x >= 580, 12.x >= 525.60.13, 11.x >= 450.80.02).
MIN_DRIVER = {13: (580,), 12: (525, 60, 13), 11: (450, 80, 2)}
# What compile=true runs (torch 2.x, Triton 3.x, as their sources read): inductor's CPU kernels are
# C++, built by $CXX split like a shell command ("ccache g++" runs ccache), else g++ (clang++ on
# macOS; torch._inductor.config.cpp.cxx); Triton (CUDA) builds its launcher with $CC, run as one
# program name (no arguments), else gcc, else clang (triton.runtime.build._find_compiler).
CXX_DEFAULT = "clang++" if sys.platform == "darwin" else "g++"
CC_DEFAULTS = ("gcc", "clang")

# CUDA indices where resolve_device made a context: this process's state (ProcessState.cuda_contexts)


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


def compiler_problem(cpu: bool = True, cuda: bool | None = None) -> str:
    """What ``compile=true`` (inductor) lacks here ("" when nothing): for ``cpu`` jobs a C++
    compiler, for ``cuda`` jobs (default: where CUDA is available) Triton's C compiler, and the
    Python headers (see `CXX_DEFAULT`)."""
    missing = []
    if cpu:
        cxx = os.environ.get("CXX")
        try:
            program = shlex.split(cxx)[0] if cxx else CXX_DEFAULT
        except (ValueError, IndexError):  # unbalanced quotes, blank
            program = ""
        if not (program and shutil.which(program)):
            why = f"$CXX={cxx!r}: {program or 'no program'}" if cxx else f"$CXX unset: {CXX_DEFAULT}"
            missing.append(f"a C++ compiler ({why} is not on PATH)")
    if cuda if cuda is not None else torch.cuda.is_available():
        cc = os.environ.get("CC")
        if cc and not shutil.which(cc):
            missing.append(f"a C compiler for Triton ($CC={cc!r} is not a program on PATH: Triton runs $CC "
                           f"as one program name, without arguments)")
        elif not cc and not any(shutil.which(c) for c in CC_DEFAULTS):
            missing.append(f"a C compiler for Triton ($CC unset: neither {' nor '.join(CC_DEFAULTS)} is on PATH)")
    include = sysconfig.get_paths().get("include") or ""
    if not (Path(include) / "Python.h").is_file():
        missing.append(f"the Python headers ({include}/Python.h)")
    return " and ".join(missing)


def preflight(cfg: DictConfig) -> None:
    """Checks of the machine that fail every job alike, before any job runs.

    Raises:
        UsageError: ``compile=true`` with the inductor backend where the compiler its jobs need
            (`compiler_problem`) or the Python headers are not installed.
    """
    from sweeps.train.builder import compile_backend

    if not cfg.get("compile") or compile_backend() != "inductor":
        return
    cuda = uses_cuda(cfg.device) and torch.cuda.is_available()
    cpu = not cuda and cfg.device.name != "cuda"  # device=cuda without CUDA: unavailable, it compiles nothing
    if missing := compiler_problem(cpu=cpu, cuda=cuda):
        raise UsageError(f"compile=true: torch.compile's inductor backend needs {missing}; install them "
                         f"(Debian/Ubuntu: apt install build-essential python3-dev) or set compile=false")


def uses_cuda(cfg: DictConfig) -> bool:
    """Whether a job on device config ``cfg`` runs on CUDA where CUDA works: all but ``device=cpu``
    and ``device=ddp`` with ``device.backend=gloo`` (``auto`` backends and devices count: they would);
    a kind of the user's (``_target_``) where its torch device type is ``cuda``."""
    if cfg.get("_target_"):
        return devices.from_config(cfg).type == "cuda"
    if cfg.name == "cpu":
        return False
    return cfg.name != "ddp" or cfg.get("backend", "auto") != "gloo"


def contexts() -> set[int]:
    """CUDA devices (indices, this process's numbering) on which `resolve_device` made this
    process's CUDA context (``torch.cuda.set_device``, which creates it): it lives as long as the
    process. Initialising CUDA alone (device count, properties: `sweeps.placement.gpu_pool.gpu_keys`)
    makes none."""
    return set(current().cuda_contexts)


def resolve_device(cfg: DictConfig) -> torch.device:
    """``auto`` → ``cuda:<index>`` when CUDA is present, else ``cpu``; a device option with a
    ``_target_`` → the device of that kind (`sweeps.devices.from_config`). The job is placed on
    the kind (`sweeps.devices.place`: `sweeps.devices.of` answers with it from now on). A one-GPU
    device is made this process's current device (``torch.cuda.set_device``): whatever uses the
    current device (cuBLAS handles, Triton, CUDA graphs, events recorded without a stream) then
    uses the job's.

    Raises:
        DeviceUnavailable: ``cuda`` asked for where there is none, the index is out of range, the
            driver is too old for torch's CUDA (``auto`` too), or a sticky error lost this
            process's CUDA context; a user's kind that is not available here.
        UsageError: ``_target_`` does not import or is not a `sweeps.devices.DeviceKind`.
    """
    if cfg.get("_target_"):  # a kind of the user's: its own module says where it runs
        return devices.place(devices.from_config(cfg), cfg.get("index"))
    if not uses_cuda(cfg):  # device=cpu, ddp on Gloo: the CPU needs no driver
        return devices.place(devices.builtin("cpu"))
    if not torch.cuda.is_available() and (problem := driver_problem()):  # ddp: auto/nccl would use the GPUs
        raise DeviceUnavailable(problem)
    if cfg.name == "auto" and not torch.cuda.is_available():
        return devices.place(devices.builtin("cpu"))
    if cfg.name == "ddp":  # rank 0's device (the ranks are fresh processes)
        return resolve_ddp(cfg)
    return devices.place(devices.builtin("cuda"), cfg.index)  # sweeps.devices.cuda: lost context, index, set_device


def ddp_backend(cfg: DictConfig) -> str:
    """``device.backend`` of ``device=ddp``: ``auto`` → ``nccl`` where CUDA is present, else ``gloo``."""
    if cfg.backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return cfg.backend


def resolve_ddp(cfg: DictConfig) -> torch.device:
    """The device rank 0 of ``device=ddp`` uses (``cuda:0`` for NCCL, else ``cpu``), after checking
    the machine.

    Raises:
        DeviceUnavailable: NCCL without CUDA, or more processes (``device.gpus``) than GPUs.
    """
    if ddp_backend(cfg) != "nccl":
        return devices.place(devices.builtin("cpu"))
    if not torch.cuda.is_available():
        raise DeviceUnavailable("device=ddp with device.backend=nccl needs CUDA and none is visible here; "
                                "use device.backend=gloo to run the processes on the CPU")
    if cfg.gpus > torch.cuda.device_count():
        raise DeviceUnavailable(f"device=ddp: device.gpus={cfg.gpus} processes but this machine has "
                                f"{torch.cuda.device_count()} CUDA device(s); use device.gpus<={torch.cuda.device_count()}")
    current().device_kind = devices.builtin("cuda")  # no context made here: the ranks make theirs
    return torch.device("cuda", 0)


def job_devices(cfg: DictConfig, device: torch.device) -> list:
    """Every device the job uses, for its telemetry: ``[device]``, or for ``device=ddp`` on GPUs the
    ranks' GPUs — the pool's UUIDs it holds (`sweeps.state.ProcessState.pool_held`), else
    ``cuda:0``…``cuda:<gpus-1>``."""
    if cfg.name != "ddp" or device.type != "cuda":
        return [device]
    return list(current().pool_held) or [torch.device("cuda", r) for r in range(cfg.gpus)]


@contextmanager
def cpu_threads(threads: int | None) -> Iterator[str]:
    """torch's intra-op CPU threads for one job: ``threads`` (``device.threads``) or, when None,
    what the process has (torch's default: one per core; a GPU pool's CPU slot: its share), which a
    training job whose steps are small then lowers to one — a single run by its own steps
    (`sweeps.train.speed.one_thread_for_small_steps`), a sweep's job by the choice held for
    its model × dataset × device (`sweeps.train.speed.threads_held_for_sweep`). Put back
    afterwards: the next job of the process starts from the same count. Yields the value of the
    run's ``torch.threads`` tag, e.g. ``"1 (device.threads; 2 cores)"`` (a training job with
    ``threads`` None replaces it with its own choice's).

    Why a job may want fewer threads than cores: torch's CPU kernels split an op over all its
    threads and wait for the slowest, so a thread that shares its core with anything else (the
    store process's background work, telemetry, another program) stalls every op. On 2 cores
    study 5's 0.7-ms epochs ran 1.3-3× slower with 2 threads than with 1 while another process was
    busy (quiet: 0.67 ms a step with 1 thread, 0.92 ms with 2 at 1,000 rows; 2 threads 1.4×
    faster at 1,000,000)."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        who = "device.threads" if threads else "torch default"
        yield f"{torch.get_num_threads()} ({who}; {os.cpu_count()} cores)"
    finally:
        torch.set_num_threads(before)
