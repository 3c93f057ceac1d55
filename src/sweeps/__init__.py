"""sweeps: Hydra-configured sweeps that time deep-learning training correctly and log it to MLflow.

In Python: ``sweeps.run(overrides, config_dir=None, multirun=True)`` runs a sweep in-process as
``python -m sweeps`` does and returns one record per job; ``sweeps.results(experiment)`` returns
a ``pandas.DataFrame``, one row per job, and ``sweeps.verdict(experiment)`` the report's verdict,
one row per model × dataset × device (`sweeps.api`). They are imported on first use, so
``import sweeps`` loads neither torch nor MLflow.
"""

import os

__version__ = "0.1.0"
__all__ = ["run", "results", "verdict"]

# MLflow's usage telemetry off in sweeps' processes unless the user set it (MLFLOW_DISABLE_TELEMETRY=false
# turns it back on), before any of them imports mlflow. Why: where its config cannot be fetched (no
# internet, as on most cluster nodes) MLflow 3.x's telemetry thread removes _MLFLOW_TELEMETRY_SESSION_ID
# from os.environ while requests iterates os.environ for proxies, and that HTTP call to a tracking
# server fails with KeyError('_MLFLOW_TELEMETRY_SESSION_ID'): the sweep cannot open its parent run. A timing tool also wants no network thread of its own.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def __getattr__(name: str):
    if name in __all__:
        from sweeps import api

        return getattr(api, name)
    raise AttributeError(f"module 'sweeps' has no attribute {name!r}")
