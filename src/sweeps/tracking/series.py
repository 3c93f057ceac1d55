"""Which epochs make a run's per-epoch MLflow series (``mlflow.log_every_epochs``).

MLflow's SQL store ingests ~50 µs a value and a job logs ~15 values an epoch: for sub-millisecond
epochs (study 5: 10,000 full-batch epochs of a tiny MLP) storing every epoch costs more CPU than
training it, on the same cores. ``mlflow.log_every_epochs: N`` thins the series the run shows —
10,000 epochs at N = 10 still draw a 1,000-point curve — while the journal and ``epochs.csv`` keep
every epoch and the job's summary is computed from all of them.
"""
from __future__ import annotations


def in_series(rec: dict, every: int) -> bool:
    """Whether epoch record ``rec`` goes to the run's MLflow series under ``mlflow.log_every_epochs``
    = ``every``: each epoch when ``every`` ≤ 1, else the first, every ``every``-th and each one
    that evaluated (its ``test/…`` values are the curve a reader compares). The job's last epoch is
    added by whoever ends the run (:meth:`~sweeps.tracking.epochs.EpochLog.close`,
    :meth:`~sweeps.tracking.writer.RunWriter.replay`). A pure function of the record: the
    training process, the writer process and a replay agree on it, so every point is logged once."""
    epoch = rec.get("epoch", 0)
    return every <= 1 or epoch == 1 or epoch % every == 0 or any(k.startswith("test/") for k in rec)
