"""The report's Markdown tables: study 1's reference table per model, max-batch results,
inference timings, side-by-side comparisons and data-parallel scaling efficiency."""
from __future__ import annotations

from typing import Sequence

from sweeps.report.runs import Job, memory_key
from sweeps.tracking.console import hms


COMPARE_KEYS = ("device", "device.index", "device.gpus", "precision")  # side-by-side columns


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _score(job: Job) -> str:
    m = job.metrics
    if "test/final_acc" in m:
        return f"{m['test/final_acc']:.4f}"
    return _f(m.get("test/final_rmse"))


def reference_tables(jobs: list[Job], fits: dict[tuple, int] | None = None) -> list[tuple[str, str]]:
    """Study 1's table per group (every swept key but batch): batch | first epoch [s] | median
    epoch from 2 [s] | total time | accuracy or RMSE | peak MB. Rows by numeric batch size; jobs
    that did not finish show their outcome in place of the times — an OOM as ``OOM (fits up to
    N)`` when ``fits`` (:func:`sweeps.report.runs.max_batches`) knows the largest batch that fits."""
    groups: dict[str, list[Job]] = {}
    for j in jobs:
        if "infer/median_ms" not in j.metrics and j.params.get("task") != "max_batch":
            groups.setdefault(j.label(exclude=("batch",)), []).append(j)
    regression = any("test/final_rmse" in j.metrics for j in jobs)
    headers = ["batch", "first epoch [s]", "median epoch from 2 [s]", "total time",
               "RMSE" if regression else "accuracy", "peak MB"]
    out = []
    for label, members in groups.items():
        rows = []
        for j in sorted(members, key=lambda j: (j.batch is None, j.batch or 0)):
            batch = "-" if j.batch is None else f"{j.batch:.0f}"
            if j.outcome == "ok":
                m = j.metrics
                rows.append([batch, _f(m.get("time/first_epoch_s")), _f(m.get("time/median_epoch_s")),
                             hms(m.get("time/total_s")), _score(j), _f(m.get("mem/peak_mb"), 0)])
            else:
                n = (fits or {}).get(memory_key(j.params, j.tags)) if j.outcome == "oom" else None
                shown = j.outcome.upper() + (f" (fits up to {n})" if n else "")
                rows.append([batch, shown, "", "", "", _f(j.metrics.get("mem/peak_mb"), 0)])
        out.append((label, md_table(headers, rows)))
    return out


def max_batch_table(jobs: list[Job]) -> str | None:
    """Per ``task=max_batch`` job: the largest batch that fits, the peak memory at it, whether the
    search found the boundary (``exact``) or stopped at ``max_batch.limit``, and its trial count."""
    rows = [[j.label(), j.outcome, _f(j.metrics.get("mem/max_batch"), 0), _f(j.metrics.get("mem/max_batch_peak_mb"), 0),
             j.tags.get("max_batch.bound", "-"), _f(j.metrics.get("max_batch/trials"), 0)]
            for j in jobs if j.params.get("task") == "max_batch"]
    if not rows:
        return None
    return md_table(["job", "outcome", "max batch", "peak MB at it", "bound", "trials"], rows)


def inference_table(jobs: list[Job]) -> str | None:
    """Per inference job: median, p10, p90 ms per batch and throughput."""
    rows = [[j.label(), j.outcome, _f(j.metrics.get("infer/median_ms"), 3), _f(j.metrics.get("infer/p10_ms"), 3),
             _f(j.metrics.get("infer/p90_ms"), 3), _f(j.metrics.get("perf/samples_per_s"), 1)]
            for j in jobs if "infer/median_ms" in j.metrics or j.params.get("task") == "inference"]
    if not rows:
        return None
    return md_table(["job", "outcome", "median ms/batch", "p10 ms", "p90 ms", "samples/s"], rows)


def comparison(jobs: list[Job], key: str) -> str:
    """Side by side over the values of ``key`` (e.g. device=cpu vs cuda): median epoch time (or
    inference median) per remaining label, and the speedup of each column over the first."""
    values = list(dict.fromkeys(j.swept[key] for j in jobs if key in j.swept))
    cells: dict[str, dict[str, Job]] = {}
    for j in jobs:
        if key in j.swept:
            cells.setdefault(j.label(exclude=(key,)), {})[j.swept[key]] = j

    def time_of(j: Job | None) -> float | None:
        if j is None or j.outcome != "ok":
            return None
        m = j.metrics
        return m.get("time/median_epoch_s", m.get("time/first_epoch_s", m.get("infer/median_ms")))

    headers = ["job", *(f"{key}={v}" for v in values), *(f"speedup {v}" for v in values[1:])]
    rows = []
    for label, row in cells.items():
        times = [time_of(row.get(v)) for v in values]
        shown = [_f(t, 3) if t is not None else (row[v].outcome.upper() if v in row else "-")
                 for t, v in zip(times, values)]
        speed = [f"{times[0] / t:.2f}×" if times[0] and t else "-" for t in times[1:]]
        rows.append([label, *shown, *speed])
    return md_table(headers, rows)


def scaling_efficiency(jobs: list[Job]) -> str | None:
    """Data-parallel scaling: for each config run on 1 and on N processes (metric
    ``device.world_size``, 1 where absent), ``perf/scaling_efficiency`` = throughput_N / (N ×
    throughput_1), throughput = ``perf/samples_per_s`` (last epoch). None when no pair exists."""
    cells: dict[str, dict[int, float]] = {}
    for j in jobs:
        if j.outcome == "ok" and "perf/samples_per_s" in j.metrics:
            world = int(j.metrics.get("device.world_size", 1))
            cells.setdefault(j.label(exclude=("device", "device.gpus", "device.backend")), {})[world] = \
                j.metrics["perf/samples_per_s"]
    rows = [[label, f"{n}", _f(by[1], 1), _f(by[n], 1), f"{by[n] / (n * by[1]):.2f}"]
            for label, by in cells.items() if 1 in by for n in sorted(by) if n > 1]
    if not rows:
        return None
    return md_table(["job", "processes", "samples/s on 1", "samples/s on N", "perf/scaling_efficiency"], rows)
