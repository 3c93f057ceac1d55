"""Which epochs make a run's per-epoch MLflow series (``mlflow.log_every_epochs``,
``mlflow.series_points``).

MLflow's SQL store ingests ~80-160 µs a value on 2 cores (``log_batch``, mostly its ORM) and
a job logs ~15 values an epoch: for sub-millisecond epochs (study 5: 10,000 full-batch epochs of
a tiny MLP) storing every epoch costs more CPU than training it, on the same cores.
``mlflow.log_every_epochs: N`` thins the series the run shows — 10,000 epochs at N = 10 still draw
a 1,000-point curve — and ``mlflow.series_points: P`` (320 by default) caps it at about P points
whatever the number of epochs, the evaluated epochs included; the journal and ``epochs.csv`` keep
every epoch and the job's summary is computed from all of them. A job of at most P epochs (at
N = 1) logs every one.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

# strides a capped series takes: 1, 2, 5, 10, 20, 50, … so its epochs are round numbers, and an
# evaluation every 100 epochs (study 5's) lands on any stride up to 100: no points beside the stride's
_NICE = (1, 2, 5, 10)  # × the power of ten at or below the stride needed


def in_series(rec: dict, every: int, evaluated: bool = True) -> bool:
    """Whether epoch record ``rec`` goes to the run's MLflow series of stride ``every`` (epochs):
    each epoch when ``every`` ≤ 1, else the first, every ``every``-th and, where ``evaluated``,
    each one that evaluated (its ``test/…`` values are the curve a reader compares: what
    ``mlflow.log_every_epochs`` alone keeps). ``evaluated`` is False where ``mlflow.series_points``
    set the stride (`of_config`): an evaluated epoch off the stride then stays out too, so
    a job that evaluates every epoch still logs ~``series_points`` points. The job's last epoch is
    added by whoever ends the run (the drain of `sweeps.tracking.follower.follower`, a replay). A pure
    function of its arguments: the follower and a replay agree on it, so every point is logged once."""
    epoch = rec.get("epoch", 0)
    return (every <= 1 or epoch == 1 or epoch % every == 0
            or (evaluated and any(k.startswith("test/") for k in rec)))


def stride(log_every_epochs: int, series_points: int | None, epochs: int, eval_every: int = 1) -> int:
    """The series' stride in epochs (the ``every`` of `in_series`): ``log_every_epochs``, or
    where ``series_points`` is set and ``epochs`` ÷ it is larger, the smallest of 1, 2, 5, 10, 20,
    50, … that is at least ``epochs / series_points`` — so a series holds at most ~``series_points``
    points on the stride (plus the first and the last), on round epochs. Where that stride and
    ``eval_every`` (``eval.every_epochs``) are neither of them a multiple of the other, the
    smallest ``eval_every`` × 1, 2, 5, 10, … that is at least ``epochs / series_points`` instead:
    the stride lands on evaluated epochs, so the ``test/…`` curve keeps ~as many points as the
    training curve (a stride of 50 at ``eval_every`` = 7 would keep one evaluation in 350 epochs).

    Why a cap: the MLflow UI draws a run's metric from a sample of 320 points
    (``maxResults`` 320 of its ``get-history-bulk-interval`` request, mlflow/server/js) and
    TensorBoard keeps 1,000 scalars a tag by default (``--samples_per_plugin``): a series longer
    than that costs the job its ingestion and shows nothing more.

    Raises:
        ValueError: ``log_every_epochs``, ``series_points`` or ``eval_every`` < 1 (config
            validation says so first).
    """
    if log_every_epochs < 1 or (series_points is not None and series_points < 1) or eval_every < 1:
        raise ValueError(f"series stride: log_every_epochs={log_every_epochs}, series_points={series_points}, "
                         f"eval_every={eval_every}: use 1 or more (series_points may be None)")
    if series_points is None or epochs <= series_points * log_every_epochs:
        return log_every_epochs
    need = epochs / series_points  # > log_every_epochs ≥ 1
    every = _round_up(need)
    if every % eval_every and eval_every % every:  # off the evaluations: on a multiple of them instead
        every = eval_every * _round_up(need / eval_every)
    return every


def _round_up(x: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … that is at least ``x`` (> 0)."""
    if x <= 1:
        return 1
    decade = 10 ** math.floor(math.log10(x))
    return next(m * decade for m in _NICE if m * decade >= x)


def stride_of_config(cfg: Any) -> int:
    """`stride` of a job's composed config (its ``mlflow`` node, ``epochs`` and ``eval.every_epochs``)."""
    return stride(cfg.mlflow.log_every_epochs, cfg.mlflow.series_points, cfg.epochs, cfg.eval.every_epochs)


def of_config(cfg: Any) -> tuple[int, bool]:
    """The ``every`` and ``evaluated`` arguments of `in_series` for a job's composed config:
    its stride, and whether each evaluated epoch joins the series (only where the cap left
    ``mlflow.log_every_epochs`` as the stride)."""
    every = stride_of_config(cfg)
    return every, every <= cfg.mlflow.log_every_epochs


def stride_of_run(params: Mapping[str, str]) -> int:
    """`stride` from a run's params (``mlflow.log_every_epochs``, ``mlflow.series_points``,
    ``epochs``, ``eval.every_epochs``, as the job logged its config): what a replay after the
    job's death uses, so it sends the points the job would have. A param missing or unreadable
    counts as every epoch and no cap (``None``, as a job logs ``series_points: null``, is no cap)."""
    return of_run(params)[0]


def of_run(params: Mapping[str, str]) -> tuple[int, bool]:
    """`of_config` from a run's params (see `stride_of_run`)."""
    def number(key: str) -> int | None:
        value = params.get(key, "")
        return int(value) if value.isdigit() and int(value) >= 1 else None

    log_every = number("mlflow.log_every_epochs") or 1
    every = stride(log_every, number("mlflow.series_points"), number("epochs") or 0, number("eval.every_epochs") or 1)
    return every, every <= log_every


def console_line(cfg: Any) -> str | None:
    """The job's one console line on its MLflow series where that leaves epochs out, saying where
    every epoch is; None where the series holds every epoch. ``cfg``: the composed config."""
    every, evaluated = of_config(cfg)
    if every <= 1 or (evaluated and cfg.eval.every_epochs == 1):  # each epoch evaluated: each one logged
        return None
    why = (f"mlflow.log_every_epochs={cfg.mlflow.log_every_epochs} + evaluated" if evaluated
           else f"mlflow.series_points={cfg.mlflow.series_points}")  # ≤ 100 columns (a capped series: up to 10⁸ epochs)
    return f"  MLflow series: 1 in {every} of {cfg.epochs} epochs ({why}); all in epochs.csv"
