"""Tracking: where measurements go — the MLflow store and a job's run (writer), resume look-up
by config hash, and the console (per-epoch rows, the sweep's summary table). What a number was
measured on (the ``env.*`` tags, the user's code) is :mod:`sweeps.provenance`'s.

Imports: mlflow, :mod:`sweeps.names`, :mod:`sweeps.errors`; never training code (a forbidden
contract in pyproject.toml checks it). Importing this package loads nothing heavy.
"""
