"""Which epochs make a run's per-epoch MLflow series (``mlflow.log_every_epochs``,
``mlflow.series_points``).

MLflow's SQL store ingests ~80-160 µs a value on a 2-core VM (``log_batch``, mostly its ORM) and
a job logs ~15 values an epoch: for sub-millisecond epochs (study 5: 10,000 full-batch epochs of
a tiny MLP) storing every epoch costs more CPU than training it, on the same cores.
``mlflow.log_every_epochs: N`` thins the series the run shows — 10,000 epochs at N = 10 still draw
a 1,000-point curve — and ``mlflow.series_points: P`` caps it at about P points whatever the
number of epochs; the journal and ``epochs.csv`` keep every epoch and the job's summary is
computed from all of them.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

# strides a capped series takes: 1, 2, 5, 10, 20, 50, … so its epochs are round numbers, and an
# evaluation every 100 epochs (study 5's) lands on any stride up to 100: no points beside the stride's
_NICE = (1, 2, 5, 10)  # × the power of ten at or below the stride needed


def in_series(rec: dict, every: int) -> bool:
    """Whether epoch record ``rec`` goes to the run's MLflow series under ``mlflow.log_every_epochs``
    = ``every``: each epoch when ``every`` ≤ 1, else the first, every ``every``-th and each one
    that evaluated (its ``test/…`` values are the curve a reader compares). The job's last epoch is
    added by whoever ends the run (:meth:`~sweeps.tracking.epochs.EpochLog.close`,
    :meth:`~sweeps.tracking.writer.RunWriter.replay`). A pure function of the record: the
    training process, the writer process and a replay agree on it, so every point is logged once."""
    epoch = rec.get("epoch", 0)
    return every <= 1 or epoch == 1 or epoch % every == 0 or any(k.startswith("test/") for k in rec)


def stride(log_every_epochs: int, series_points: int | None, epochs: int) -> int:
    """The series' stride in epochs (the ``every`` of :func:`in_series`): ``log_every_epochs``, or
    where ``series_points`` is set and ``epochs`` ÷ it is larger, the smallest of 1, 2, 5, 10, 20,
    50, … that is at least ``epochs / series_points`` — so a series holds at most ~``series_points``
    points on the stride (plus the first, the last and the evaluated epochs), on round epochs.

    Why a cap: the MLflow UI draws a run's metric from a sample of 320 points
    (``maxResults`` 320 of its ``get-history-bulk-interval`` request, mlflow/server/js) and
    TensorBoard keeps 1,000 scalars a tag by default (``--samples_per_plugin``): a series longer
    than that costs the job its ingestion and shows nothing more.

    Raises:
        ValueError: ``log_every_epochs`` < 1 or ``series_points`` < 1 (config validation says so first).
    """
    if log_every_epochs < 1 or (series_points is not None and series_points < 1):
        raise ValueError(f"series stride: log_every_epochs={log_every_epochs}, series_points={series_points}: "
                         "use 1 or more (series_points may be None)")
    if series_points is None or epochs <= series_points * log_every_epochs:
        return log_every_epochs
    need = epochs / series_points  # > log_every_epochs ≥ 1
    decade = 10 ** math.floor(math.log10(need))
    return next(m * decade for m in _NICE if m * decade >= need)


def stride_of_config(cfg: Any) -> int:
    """:func:`stride` of a job's composed config (its ``mlflow`` node and ``epochs``)."""
    return stride(cfg.mlflow.log_every_epochs, cfg.mlflow.series_points, cfg.epochs)


def stride_of_run(params: Mapping[str, str]) -> int:
    """:func:`stride` from a run's params (``mlflow.log_every_epochs``, ``mlflow.series_points``,
    ``epochs``, as the job logged its config): what a replay after the job's death uses, so it
    sends the points the job would have. A param missing or unreadable counts as its default
    (every epoch, no cap)."""
    def number(key: str) -> int | None:
        value = params.get(key, "")
        return int(value) if value.isdigit() and int(value) >= 1 else None

    return stride(number("mlflow.log_every_epochs") or 1, number("mlflow.series_points"), number("epochs") or 0)
