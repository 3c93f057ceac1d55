"""How the code that runs a job finds the kind of its device (`of`).

The code that runs a job passes a `torch.device` around; what it asks of that device's kind it
asks `of(device)`: the kind the job was placed on (`place`, called by
`sweeps.placement.device.resolve_device`) where that kind's torch device type is the device's,
else the built-in kind of that type (`builtin`: `sweeps.devices.cpu.CPU`,
`sweeps.devices.cuda.CUDA`), else a plain `DeviceKind` of that type (a device torch has and
sweeps has no module for, e.g. ``mps``: no fused optimizer, no pinning, host clocks, no peak).
A device option of the user's names its kind by ``_target_`` (`from_config`).
"""
from __future__ import annotations

import torch

from sweeps.config.targets import locate
from sweeps.devices.base import DeviceKind
from sweeps.devices.cpu import CPU
from sweeps.devices.cuda import CUDA
from sweeps.errors import UsageError
from sweeps.state import current

BUILTIN: dict[str, type[DeviceKind]] = {"cpu": CPU, "cuda": CUDA}  # torch device type → sweeps' kind
_BUILTIN: dict[str, DeviceKind] = {}


def builtin(type: str) -> DeviceKind:  # noqa: A002
    """The built-in kind of torch device type ``type`` (one object a process): `sweeps.devices.cpu.CPU`,
    `sweeps.devices.cuda.CUDA`, else a plain `DeviceKind` of that type."""
    kind = _BUILTIN.get(type)
    if kind is None:
        made = BUILTIN.get(type)
        kind = _BUILTIN[type] = made() if made is not None else DeviceKind(type)
    return kind


def of(device: torch.device) -> DeviceKind:
    """The kind of ``device``: the kind this process placed its latest job on (`place`) where its
    torch type is ``device``'s, else the built-in kind of that type (`builtin`)."""
    kind = current().device_kind
    if kind is not None and kind.type == device.type:
        return kind
    return builtin(device.type)


def place(kind: DeviceKind, index: int | None = None) -> torch.device:
    """Place this process's job on ``kind``: its device (`DeviceKind.torch_device`), which `of`
    then answers with ``kind``.

    Raises:
        DeviceUnavailable: as `DeviceKind.torch_device`.
    """
    device = kind.torch_device(index)
    current().device_kind = kind
    return device


def from_config(cfg) -> DeviceKind:
    """The kind a device option names by ``_target_`` (``device._target_: mymodule.MyKind``),
    built with no arguments.

    Raises:
        UsageError: the target does not import, or is not a `DeviceKind` — one line naming it.
    """
    target = locate(cfg, "device")
    kind = target() if callable(target) else None
    if not isinstance(kind, DeviceKind):
        raise UsageError(f"device={cfg.get('name', '?')}: _target_ {cfg._target_} is not a device kind: name a "
                         f"subclass of sweeps.devices.DeviceKind (docs/architecture.md, 'Adding a device')")
    return kind
