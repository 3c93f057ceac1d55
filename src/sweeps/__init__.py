"""sweeps: Hydra-configured sweeps that time deep-learning training correctly and log it to MLflow.

In Python: ``sweeps.run(overrides, config_dir=None, multirun=True)`` runs a sweep in-process as
``python -m sweeps`` does and returns one record per job; ``sweeps.results(experiment)`` returns
a ``pandas.DataFrame``, one row per job, and ``sweeps.verdict(experiment)`` the report's verdict,
one row per model × dataset × device (:mod:`sweeps.api`). They are imported on first use, so
``import sweeps`` loads neither torch nor MLflow.
"""

__version__ = "0.1.0"
__all__ = ["run", "results", "verdict"]


def __getattr__(name: str):
    if name in __all__:
        from sweeps import api

        return getattr(api, name)
    raise AttributeError(f"module 'sweeps' has no attribute {name!r}")
