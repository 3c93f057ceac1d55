"""Report: read sweeps back from MLflow and write tables and figures (``python -m sweeps.report``).

Imports: mlflow, matplotlib, `sweeps.tracking`, `sweeps.names`; never torch training
code (a forbidden contract in pyproject.toml checks it).
"""
