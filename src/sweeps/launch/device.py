"""Which device a job runs on: ``auto``, ``cpu``, ``cuda`` (``device.index``) or ``ddp``."""
from __future__ import annotations

import torch
from omegaconf import DictConfig

from sweeps.errors import DeviceUnavailable


def resolve_device(cfg: DictConfig) -> torch.device:
    """``auto`` → ``cuda:<index>`` when CUDA is present, else ``cpu``.

    Raises:
        DeviceUnavailable: ``cuda`` asked for where there is none, or the index is out of range.
    """
    if cfg.name == "cpu" or (cfg.name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if cfg.name == "ddp":  # rank 0's device; the checks live with the launcher
        from sweeps.launch import ddp

        return ddp.resolve(cfg)
    if not torch.cuda.is_available():
        raise DeviceUnavailable("device=cuda but no CUDA device is visible here "
                                "(torch.cuda.is_available() is False); use device=cpu or device=auto")
    if not 0 <= cfg.index < torch.cuda.device_count():
        raise DeviceUnavailable(f"device.index={cfg.index} but this machine has "
                                f"{torch.cuda.device_count()} CUDA device(s): use 0..{torch.cuda.device_count() - 1}")
    return torch.device("cuda", cfg.index)
