"""Devices: what differs per kind of device — placement, timing, memory peak and out-of-memory,
autocast, fused optimizers, pinning, telemetry — behind one interface,
`DeviceKind`, one module per kind (`cpu`, `cuda`). A job's kind
is its device option's: ``device=cpu`` and ``device=cuda`` the built-in ones, ``device=auto`` one
of them, ``device=ddp`` ranks on either; a user's own kind is one module and one YAML naming it by
``_target_`` (docs/architecture.md, "Adding a device").

Owns: `DeviceKind`, `of` (the kind of a torch device), `place`, `builtin`, `from_config`.
Imports: torch, `sweeps.config`, [`sweeps.errors`][sweeps.errors], `sweeps.state`; every
package that runs a job imports it (data, models, train, telemetry, tasks, placement).
"""
from sweeps.devices.base import DeviceKind, is_oom
from sweeps.devices.registry import builtin, from_config, of, place

__all__ = ["DeviceKind", "builtin", "from_config", "is_oom", "of", "place"]
