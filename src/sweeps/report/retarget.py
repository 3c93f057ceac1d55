"""Re-target a sweep from its logged curves: time and steps to another quality than the one the
jobs ran with (``python -m sweeps.report --target 0.88``), without training again.

Each ok training job's ``epochs.csv`` artifact holds every epoch's record (the MLflow series may
keep only every Nth epoch); `sweeps.time_to_target.to_target` — the rule the jobs themselves used —
turns those records into ``time/to_target_s``, ``target/epochs``, ``target/samples`` and
``target/steps`` for the new target. A target is checked only where the runs evaluated
(``eval.every_epochs``).
"""
from __future__ import annotations

import csv
import io
import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from sweeps import names
from sweeps.report.runs import JobRecord
from sweeps.time_to_target import to_target

if TYPE_CHECKING:
    from mlflow import MlflowClient

TARGET_METRICS = (names.TARGET_EPOCHS, names.TARGET_SAMPLES, names.TARGET_STEPS, names.TO_TARGET_S)


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def records(client: MlflowClient, run_id: str) -> list[dict]:
    """The run's per-epoch records from its ``epochs.csv`` artifact, numbers as floats, a record's
    missing cells left out ([] where the run has no such artifact)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, "epochs.csv", tmp)
        except Exception:  # noqa: BLE001 (a run without the artifact: nothing to re-target from)
            return []
        text = Path(path).read_text()
    return [{k: _number(v) for k, v in row.items() if v != ""} for row in csv.DictReader(io.StringIO(text))]


def default_metric(jobs: list[JobRecord]) -> tuple[str, str]:
    """``(metric, mode)`` for ``--target`` without ``--target-metric``: the one the jobs ran with,
    else ``test/acc`` (max) for classification, ``test/rmse`` (min) for regression jobs."""
    for j in jobs:
        metric = j.params.get(names.TARGET_METRIC_PARAM)
        if metric not in (None, "None", "null", ""):
            return metric, j.params.get(names.TARGET_MODE_PARAM, "max")
    if any(names.FINAL_RMSE in j.metrics for j in jobs):
        return names.TEST_RMSE, "min"
    return names.TEST_ACC, "max"


def retarget(client: MlflowClient, jobs: list[JobRecord], value: float, metric: str | None = None,
             mode: str | None = None) -> list[JobRecord]:
    """``jobs`` with their target figures recomputed for ``metric`` reaching ``value`` (``mode``
    ``max``: ≥, ``min``: ≤; both default to `default_metric`): for ok training jobs the
    target metrics and the ``sweeps.target`` tag replaced, and the target params rewritten; the
    others as they were. The store is only read.

    Raises:
        ValueError: ``mode`` is neither ``max`` nor ``min``.
    """
    default = default_metric(jobs)
    metric = metric or default[0]
    mode = mode or (default[1] if metric == default[0] else "min" if metric.endswith(("rmse", "loss")) else "max")
    if mode not in names.TARGET_MODES:
        raise ValueError(f"--target-mode {mode!r}: use max (reached when the metric is ≥ the value) or min")
    target = SimpleNamespace(metric=metric, value=value, mode=mode)
    out = []
    for j in jobs:
        if j.outcome != names.OK or j.params.get("task", "train") != "train":
            out.append(j)
            continue
        reached = to_target(records(client, j.run_id), target)
        metrics = {k: v for k, v in j.metrics.items() if k not in TARGET_METRICS} | reached
        tags = {**j.tags, names.TARGET_TAG: names.TARGET_REACHED if reached else names.TARGET_MISSED}
        params = {**j.params, names.TARGET_METRIC_PARAM: metric, names.TARGET_VALUE_PARAM: f"{value:g}",
                  names.TARGET_MODE_PARAM: mode}
        out.append(replace(j, metrics=metrics, tags=tags, params=params))
    return out
