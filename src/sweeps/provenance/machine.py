"""The machine and software a number was measured on: MLflow tags (``env.*``) and the fuller
`fingerprint` (logged as ``fingerprint.json``) — what a reader needs to trust a number
measured on another machine.

GPU details come from torch (the GPUs this process can see) joined by UUID with NVML through
nvidia-ml-py (driver, CUDA version the driver supports, power limit); a machine without NVML
simply has fewer fields."""
from __future__ import annotations

import functools
import getpass
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import torch

from sweeps import names
from sweeps.names import SOURCE_NAME

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _torchvision_version() -> str | None:
    """torchvision's ``__version__`` (with its build tag, e.g. ``0.29.1+cu130``) without importing
    it where no job did (the import pulls in torch._dynamo, ~1.2 s): read from its ``version.py``,
    else the distribution's metadata (no build tag); None when it is not installed."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"].__version__
    try:
        spec = importlib.util.find_spec("torchvision")
        if spec is not None and spec.submodule_search_locations:
            text = (Path(spec.submodule_search_locations[0]) / "version.py").read_text()
            found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
            if found:
                return found.group(1)
        return importlib.metadata.version("torchvision")
    except (OSError, ImportError, ValueError):
        return None


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_DIR, capture_output=True,
                             text=True, timeout=5)
        commit = out.stdout.strip() if out.returncode == 0 else "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_DIR,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit + ("-dirty" if dirty and commit != "unknown" else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _nvml(nvml=None) -> dict:
    """Driver, CUDA driver version and per-GPU details (by UUID) from NVML; {} without NVML."""
    try:
        n = nvml or __import__("pynvml")  # from the nvidia-ml-py package
        n.nvmlInit()
    except Exception as e:  # no driver / no library: NVMLError_LibraryNotFound and friends
        return {"problem": f"{type(e).__name__}: {e}"}
    try:
        out: dict = {"driver": _str(_ask(n.nvmlSystemGetDriverVersion)), "gpus": {}}
        cuda = _ask(n.nvmlSystemGetCudaDriverVersion)  # e.g. 12040 → "12.4"
        out["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
        for i in range(_ask(n.nvmlDeviceGetCount) or 0):
            h = n.nvmlDeviceGetHandleByIndex(i)
            limit = _ask(n.nvmlDeviceGetEnforcedPowerLimit, h)  # mW
            mem = _ask(n.nvmlDeviceGetMemoryInfo, h)
            out["gpus"][_str(_ask(n.nvmlDeviceGetUUID, h))] = {
                "name": _str(_ask(n.nvmlDeviceGetName, h)),
                "memory_gb": round(mem.total / 1e9, 1) if mem else None,
                "power_limit_w": limit / 1e3 if limit else None,
                "max_sm_clock_mhz": _ask(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
                "max_mem_clock_mhz": _ask(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM),
                "pci_bus_id": _str(getattr(_ask(n.nvmlDeviceGetPciInfo, h), "busId", None)),
            }
        return out
    except Exception:
        return {}
    finally:
        n.nvmlShutdown()


def _ask(fn, *args):
    """``fn(*args)``, or None where the query fails (e.g. NVMLError_NotSupported)."""
    try:
        return fn(*args)
    except Exception:
        return None


def _str(v) -> str | None:
    return v.decode() if isinstance(v, bytes) else (None if v is None else str(v))


def _cudnn() -> str | None:
    """cuDNN version as ``9.10.2`` (torch encodes 9.x as 91002, 8.x as 8902)."""
    try:
        v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        v = None
    if not v:
        return None
    major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _torch_gpus(nv: dict) -> list[dict]:
    """The GPUs torch can see (``CUDA_VISIBLE_DEVICES`` applies), with NVML's details joined."""
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = str(getattr(p, "uuid", ""))
        extra = nv.get("gpus", {}).get(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}", {})
        gpus.append({"index": i, "name": p.name, "memory_gb": round(p.total_memory / 1e9, 1),
                     "compute_capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
                     **{k: v for k, v in extra.items() if k not in ("name", "memory_gb")}})
    return gpus


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict:
    """Host, OS, CPU (model, logical and physical cores, max MHz), RAM (GB), GPUs (name, memory
    GB, compute capability, SMs, power limit W, max clocks MHz, PCI bus), NVIDIA driver, CUDA (the
    driver's and torch's), cuDNN, torch, torchvision, numpy, python and the project's git commit.
    Cached per process."""
    import numpy

    nv = _nvml()
    freq = _ask(psutil.cpu_freq)
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu": {"model": _cpu_model(), "cores": os.cpu_count(), "physical_cores": psutil.cpu_count(logical=False),
                "max_mhz": round(freq.max) if freq and freq.max else None},
        "ram_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "gpus": _torch_gpus(nv),
        "nvml": nv.get("problem", "ok"),  # why NVML could not be asked, when it could not
        "nvidia_driver": nv.get("driver"),
        "cuda_driver": nv.get("cuda_driver"),  # the newest CUDA the driver supports
        "cuda_runtime": torch.version.cuda,  # the CUDA torch was built with
        "cudnn": _cudnn(),
        "torch": str(torch.__version__),  # a plain str: TorchVersion would unpickle by importing torch
        "torchvision": _torchvision_version(),
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "git_commit": _git_commit(),
    }


def fingerprint_json() -> str:
    """`fingerprint` as indented JSON (the ``fingerprint.json`` artifact)."""
    return json.dumps(fingerprint(), indent=2) + "\n"


@functools.lru_cache(maxsize=1)
def environment_tags() -> dict[str, str]:
    """Host, CPU model, cores, RAM (GB), GPU names, driver, CUDA, torch/torchvision versions and
    the project's git commit (``-dirty`` when tracked files differ from it), plus physical cores,
    OS, GPU memory (GB), power limit (W), the driver's CUDA version and cuDNN — the
    `fingerprint` flattened to ``env.*`` strings (``none`` where absent) — and MLflow's
    source and user tags (`source_tags`). Cached per process."""
    fp = fingerprint()
    gpus = fp["gpus"]

    def each(key: str) -> str:
        return ", ".join(str(g.get(key) if g.get(key) is not None else "?") for g in gpus) or "none"

    return {
        names.ENV_HOST: fp["host"],
        names.ENV_CPU: fp["cpu"]["model"],
        names.ENV_CORES: str(fp["cpu"]["cores"]),
        names.ENV_PHYSICAL_CORES: str(fp["cpu"]["physical_cores"]),
        names.ENV_RAM_GB: f"{fp['ram_gb']:.1f}",
        names.ENV_OS: fp["os"],
        names.ENV_GPUS: each("name"),
        names.ENV_GPU_MEMORY_GB: each("memory_gb"),
        names.ENV_POWER_LIMIT_W: each("power_limit_w"),
        names.ENV_DRIVER: (fp["nvidia_driver"] or "none") if gpus else "none",
        names.ENV_CUDA: str(fp["cuda_runtime"]),
        names.ENV_CUDA_DRIVER: str(fp["cuda_driver"] or "none"),
        names.ENV_CUDNN: str(fp["cudnn"] or "none"),
        names.ENV_TORCH: fp["torch"],
        names.ENV_TORCHVISION: fp["torchvision"],
        names.ENV_PYTHON: fp["python"],
        names.ENV_GIT_COMMIT: fp["git_commit"],
        **source_tags(fp["git_commit"]),
    }


def source_tags(git_commit: str) -> dict[str, str]:
    """MLflow's own run-source tags, which its UI shows as the Source and User columns:
    ``mlflow.source.name`` (the command, `sweeps.names.SOURCE_NAME`), ``mlflow.source.type``
    (``LOCAL``), ``mlflow.user`` (the login name, else ``$USER``, else ``unknown``) and
    ``mlflow.source.git.commit`` (``git_commit`` without ``-dirty``; left out where unknown:
    the UI would link a commit that does not exist)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid (containers) and no $USER
        user = os.environ.get("USER") or "unknown"
    tags = {names.MLFLOW_SOURCE_NAME: SOURCE_NAME, names.MLFLOW_SOURCE_TYPE: "LOCAL", names.MLFLOW_USER: user}
    commit = git_commit.removesuffix("-dirty")
    if commit and commit != "unknown":
        tags[names.MLFLOW_GIT_COMMIT] = commit
    return tags


def hardware(device_type: str) -> str:
    """What a timing measures, for a job's identity (``sweeps.hardware``): this host and the
    device model — its CPU model for CPU jobs, the GPU names for GPU jobs (``auto`` counts as GPU
    where CUDA is present). Two machines on one tracking server never take each other's figures."""
    gpus = ""
    if device_type != "cpu" and torch.cuda.is_available():
        gpus = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}))
    return f"{socket.gethostname()} / {gpus or _cpu_model()}"
