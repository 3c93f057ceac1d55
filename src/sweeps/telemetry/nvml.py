"""The hardware boundary of telemetry: what is asked of NVML (through nvidia-ml-py) per sample,
which NVML errors drop a field for good, how a job's CUDA device is found in NVML, and whether
NVML can be used here at all.

nvidia-ml-py is NVIDIA's own Python binding of the NVML C API (``import pynvml``; the separate,
deprecated ``pynvml`` package is not used). Function names, units and error classes follow the
NVML API reference ("Device Queries", "Error reporting"); the energy counter is in mJ, power in mW.
"""
from __future__ import annotations

from typing import Any, Callable

from sweeps.errors import describe

try:
    import pynvml  # from the nvidia-ml-py package
except ImportError:  # pragma: no cover - a dependency of sweeps
    pynvml = None

MB = 2**20


def _clock_events(n: Any, h: Any) -> int:  # renamed from "throttle reasons" in NVML 12
    fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(h))


# sample field → query (n: the NVML module, h: a device handle); GPU columns are "gpu<k>_<field>"
GPU_FIELDS: dict[str, Callable[[Any, Any], float]] = {
    "sm_clock_mhz": lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),  # MHz
    "mem_clock_mhz": lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),  # MHz
    "util_pct": lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu,  # % of the last 1/6–1 s busy
    "mem_used_mb": lambda n, h: n.nvmlDeviceGetMemoryInfo(h).used / MB,  # bytes → MB (2**20)
    "temp_c": lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),  # °C
    "power_w": lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1e3,  # mW → W
    "fan_pct": lambda n, h: n.nvmlDeviceGetFanSpeed(h),  # % of maximum (none on passive boards)
    "throttle_reasons": _clock_events,  # bitmask, see telemetry_stats.REASONS
    # mJ since the driver loaded (Volta and newer) → J since the sampler started
    "energy_j": lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,
}
# psutil: process CPU % (100 = one core, over the time since the previous sample), process RSS
# (MB), memory in use machine-wide, total − available (MB), and the whole machine's CPU % (100 =
# every core busy, over the time since the previous sample: MLflow's system/cpu_utilization_percentage)
HOST_FIELDS = ("cpu_pct", "rss_mb", "sys_mem_used_mb", "sys_cpu_pct")
# Errors that mean "this GPU cannot answer this query", for good: the field is dropped.
PERMANENT = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")


def nvml_problem(nvml: Any = None) -> str:
    """Why NVML cannot be used here ("" when it can): no nvidia-ml-py, no library, no driver."""
    n = nvml or pynvml
    if n is None:
        return "nvidia-ml-py is not installed"
    try:
        n.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return f"no NVML ({describe(e)})"
    n.nvmlShutdown()
    return ""


def handle(n: Any, ident: int | str) -> Any:
    """NVML's handle of a GPU by index or UUID; a ``GPU-`` UUID NVML does not know is tried as
    ``MIG-`` (a MIG instance whose name did not say so)."""
    if not isinstance(ident, str):
        return n.nvmlDeviceGetHandleByIndex(ident)
    try:
        return n.nvmlDeviceGetHandleByUUID(ident)
    except Exception:
        if not ident.startswith("GPU-"):
            raise
        return n.nvmlDeviceGetHandleByUUID("MIG-" + ident[4:])


def device_uuid(index: int) -> str | None:
    """NVML's UUID of CUDA device ``index`` (this process's numbering): ``GPU-…`` for a whole GPU,
    ``MIG-…`` for a MIG instance — CUDA gives both as the same bare 16 bytes, and NVML (like
    ``CUDA_VISIBLE_DEVICES``) finds a MIG instance only under its ``MIG-`` name; CUDA names a MIG
    instance "<GPU name> MIG <profile>" (e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb"). Two MIG
    instances of one GPU share the name and differ only here. None where CUDA cannot say."""
    import torch

    try:
        props = torch.cuda.get_device_properties(index)
        uuid = str(props.uuid)
    except Exception:
        return None
    if uuid.startswith(("GPU-", "MIG-")):
        return uuid
    return f"{'MIG' if ' MIG ' in f' {props.name} ' else 'GPU'}-{uuid}"


def gpu_ids(device: Any) -> list[int | str]:
    """NVML identifiers of the GPUs a job on ``device`` uses — a torch.device, or a sequence of
    torch.devices and UUID strings (a data-parallel job's GPUs): each CUDA device's UUID (robust
    to ``CUDA_VISIBLE_DEVICES`` and CUDA's device order), else its index."""
    if isinstance(device, (list, tuple)):
        return [i for d in device for i in ([d] if isinstance(d, str) else gpu_ids(d))]
    import torch

    from sweeps.devices import of

    if of(device).telemetry != "nvml":  # the device's kind: sampled through NVML (CUDA), or host only
        return []
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = device_uuid(index)
    return [uuid if uuid is not None else index]
