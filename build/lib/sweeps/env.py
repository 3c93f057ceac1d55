"""The machine and software a number was measured on, as MLflow tags (``env.*``)."""
from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from pathlib import Path

import psutil
import torch
import torchvision

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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


def _nvidia_driver() -> str:
    try:
        import pynvml  # from the nvidia-ml-py package

        pynvml.nvmlInit()
        try:
            return str(pynvml.nvmlSystemGetDriverVersion())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver / no library: NVMLError_LibraryNotFound and friends
        return "none"


@functools.lru_cache(maxsize=1)
def environment_tags() -> dict[str, str]:
    """Host, CPU model, cores, RAM (GB), GPU names, driver, CUDA, torch/torchvision versions and
    the project's git commit (``-dirty`` when tracked files differ from it). Cached per process."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {
        "env.host": socket.gethostname(),
        "env.cpu": _cpu_model(),
        "env.cores": str(os.cpu_count()),
        "env.ram_gb": f"{psutil.virtual_memory().total / 1e9:.1f}",
        "env.gpus": ", ".join(gpus) or "none",
        "env.driver": _nvidia_driver() if gpus else "none",
        "env.cuda": str(torch.version.cuda),
        "env.torch": torch.__version__,
        "env.torchvision": torchvision.__version__,
        "env.python": platform.python_version(),
        "env.git_commit": _git_commit(),
    }
