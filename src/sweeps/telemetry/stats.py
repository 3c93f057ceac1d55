"""Summaries of telemetry samples: per-epoch means and maxima, energy, clock-event reasons.

Pure functions of sample rows — tuples aligned with `sweeps.telemetry.sampler.Telemetry.columns`,
time in seconds first, ``None`` where a sample lacks a value.

Two kinds of mean. A *level* (clock, power, fan, memory) is read at the sample's instant; its mean
over a window is the trapezoid integral divided by the window's length. A *rate* (process CPU %,
GPU utilisation %) describes the interval that ends at the sample; its mean weights each sample by
that interval, and the first sample of a window (which describes the time before it) is left out.
"""
from __future__ import annotations

import csv
import io
from typing import Sequence

from sweeps import names
from sweeps.telemetry.nvml import MB

# nvmlClocksEventReason* bits of nvmlDeviceGetCurrentClocksEventReasons (NVML API reference,
# "Clocks Event Reasons"; pynvml exports the same values under those names).
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
SLOWDOWN = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # reasons that hold the clocks below what the load asks for

# per-epoch metric: (sample column, how GPUs combine, statistic over the window)
GPU_METRICS = {
    names.GPU_SM_CLOCK_MHZ: ("sm_clock_mhz", "mean", "level"),  # MHz, mean
    names.GPU_MEM_CLOCK_MHZ: ("mem_clock_mhz", "mean", "level"),  # MHz, mean
    names.GPU_UTIL_PCT: ("util_pct", "mean", "rate"),  # %, mean
    names.GPU_MEM_USED_MAX_MB: ("mem_used_mb", "sum", "max"),  # MB, peak of all GPUs together
    names.GPU_TEMP_MAX_C: ("temp_c", "max", "max"),  # °C, hottest GPU's peak
    names.GPU_POWER_W: ("power_w", "sum", "level"),  # W, mean draw of all GPUs together
    names.GPU_FAN_PCT: ("fan_pct", "mean", "level"),  # %, mean
    names.GPU_THROTTLE_FRAC: ("throttle_reasons", "slowdown", "share"),  # share of samples slowed down
}
HOST_METRICS = {
    names.HOST_CPU_PCT: ("cpu_pct", "sum", "rate"),  # %, 100 = one core busy, mean
    names.HOST_RSS_MAX_MB: ("rss_mb", "sum", "max"),  # MB, peak resident set of this process
    names.HOST_SYS_MEM_USED_MAX_MB: ("sys_mem_used_mb", "sum", "max"),  # MB, peak in use machine-wide
}

# The same windows under MLflow's system-metric names, so the run page's System metrics tab shows
# them (mlflow/system_metrics/metrics/cpu_monitor.py, gpu_monitor.py): metric → (sample column,
# statistic, scale). MLflow's megabytes are 1e6 bytes, ours 2**20; its GPU index is the k-th
# GPU this job samples.
TO_MLFLOW_MB = MB / 1e6
SYSTEM_HOST = {names.SYSTEM_CPU_PCT: ("sys_cpu_pct", "rate", 1.0),  # %, all cores = 100, mean
               names.SYSTEM_MEM_MB: ("sys_mem_used_mb", "level", TO_MLFLOW_MB)}  # 1e6 B, mean in use
SYSTEM_GPU = {"utilization_percentage": ("util_pct", "rate", 1.0),  # %, mean
              "memory_usage_megabytes": ("mem_used_mb", "level", TO_MLFLOW_MB),  # 1e6 B, mean in use
              "power_usage_watts": ("power_w", "level", 1.0)}  # W, mean


def series(rows: Sequence[tuple], columns: Sequence[str], field: str, across: str = "mean") -> list[tuple]:
    """``[(t_s, value)]`` of ``field`` (a host column, or a GPU field of every ``gpu<k>_`` column)
    with the GPUs combined by ``across``: ``mean``, ``max``, ``sum`` (only when all GPUs have a
    value) or ``slowdown`` (1.0 when any GPU's clock-event bitmask has a `SLOWDOWN` bit)."""
    idx = [i for i, c in enumerate(columns) if c == field or (c.startswith("gpu") and c.split("_", 1)[1] == field)]
    out = []
    for r in rows:
        vals = [r[i] for i in idx if r[i] is not None]
        if not vals or (across == "sum" and len(vals) < len(idx)):
            continue
        if across == "slowdown":
            v = float(any(int(x) & SLOWDOWN for x in vals))
        else:
            v = {"mean": lambda: sum(vals) / len(vals), "max": lambda: max(vals), "sum": lambda: sum(vals)}[across]()
        out.append((r[0], v))
    return out


def trapz(pts: Sequence[tuple]) -> float:
    """∫ v dt over ``[(t, v)]`` by the trapezoid rule (W over s → J)."""
    return sum((t1 - t0) * (a + b) / 2 for (t0, a), (t1, b) in zip(pts, pts[1:]))


def statistic(pts: Sequence[tuple], how: str) -> float:
    """``max``, ``share`` (plain mean of the samples), ``level`` or ``rate`` mean of ``pts``."""
    values = [v for _, v in pts]
    if how == "max":
        return max(values)
    if how == "level" and pts[-1][0] > pts[0][0]:
        return trapz(pts) / (pts[-1][0] - pts[0][0])
    if how == "rate" and len(pts) > 1:
        spans = [(t1 - t0, v) for (t0, _), (t1, v) in zip(pts, pts[1:])]
        total = sum(dt for dt, _ in spans)
        return sum(dt * v for dt, v in spans) / total if total > 0 else values[-1]
    return sum(values) / len(values)


def epoch_metrics(rows: Sequence[tuple], columns: Sequence[str], gpus: int) -> dict[str, float]:
    """The ``system/host/…`` and (with ``gpus`` > 0) ``system/gpu/…`` metrics of one window, and
    their copies under MLflow's own names, see the tables above; a metric whose field no sample of
    the window has is left out."""
    out = {}
    table = {**HOST_METRICS, **(GPU_METRICS if gpus else {})}
    for name, (field, across, how) in table.items():
        pts = series(rows, columns, field, across)
        if pts:
            out[name] = statistic(pts, how)
    system = {**SYSTEM_HOST, **{names.system_gpu(k, what): (f"gpu{k}_{field}", how, scale)
                                for k in range(gpus) for what, (field, how, scale) in SYSTEM_GPU.items()}}
    for name, (field, how, scale) in system.items():
        if pts := series(rows, columns, field):
            out[name] = statistic(pts, how) * scale
    return out


def energy(rows: Sequence[tuple], columns: Sequence[str], gpus: int) -> tuple[float | None, set[str]]:
    """Energy of the window ``rows`` (its first and last sample are its edges) in J, summed over
    the GPUs, and how it was measured: ``counter`` (difference of the NVML energy counter at the
    edges) or, where a GPU has no counter, ``power_integration`` (mean power, trapezoid rule,
    × the window's length). None when a GPU has neither."""
    if not gpus or not rows:
        return None, set()
    total, methods = 0.0, set()
    span = rows[-1][0] - rows[0][0]
    for k in range(gpus):
        e, p = columns.index(f"gpu{k}_energy_j"), columns.index(f"gpu{k}_power_w")
        if rows[0][e] is not None and rows[-1][e] is not None:
            total += rows[-1][e] - rows[0][e]
            methods.add("counter")
            continue
        pts = [(r[0], r[p]) for r in rows if r[p] is not None]
        if not pts:
            return None, methods
        total += statistic(pts, "level") * span
        methods.add("power_integration")
    return total, methods


def reasons_seen(rows: Sequence[tuple], columns: Sequence[str]) -> str:
    """The clock-event reasons any GPU reported in any sample, comma-separated ("" for none)."""
    idx = [i for i, c in enumerate(columns) if c.endswith("_throttle_reasons")]
    bits = 0
    for r in rows:
        for i in idx:
            bits |= int(r[i] or 0)
    return ", ".join(name for bit, name in REASONS.items() if bits & bit)


def samples_csv(rows: Sequence[tuple], columns: Sequence[str], dropped: dict) -> str:
    """``rows`` as CSV under ``columns``, without the ``gpu<k>_<field>`` columns whose (k, field)
    is in ``dropped`` (queries that GPU does not support); floats to 4 decimals, None empty."""
    keep = [i for i, c in enumerate(columns)
            if not (c.startswith("gpu") and (int(c[3:c.index("_")]), c[c.index("_") + 1:]) in dropped)]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([columns[i] for i in keep])
    for row in rows:
        w.writerow(["" if row[i] is None else (row[i] if isinstance(row[i], (int, str)) else round(row[i], 4))
                    for i in keep])
    return buf.getvalue()


def busy_pct(before, after) -> float:
    """The machine's CPU busy % between two ``psutil.cpu_times()`` (100 = every core busy), as
    ``psutil.cpu_percent`` computes it: a field that went backwards counts 0; guest time is already
    in user time (Linux); idle and iowait are not busy. 0.0 when no time passed."""
    d = {f: max(0.0, getattr(after, f) - getattr(before, f)) for f in after._fields}
    total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
    busy = total - d["idle"] - d.get("iowait", 0.0)
    return round(100 * busy / total, 1) if total > 0 else 0.0
