"""Tracking: where measurements go — the MLflow store and a job's run (writer), resume look-up
by config hash, the machine's fingerprint (``env.*`` tags), and the console (per-epoch rows,
the sweep's summary table).

Imports: mlflow, :mod:`sweeps.names`, :mod:`sweeps.errors`; never training code (a forbidden
contract in pyproject.toml checks it). Importing this package loads nothing heavy.
"""
