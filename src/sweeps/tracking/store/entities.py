"""MLflow's entities as a job's process builds and reads them without importing mlflow.

A job whose store is opened by the store's own process (`sweeps.tracking.service.connection`)
never imports mlflow (~1.2 s of imports, docs/benchmarks.md): it builds the values it logs as the
light `Metric`, `Param` and `RunTag` below, which pickle as MLflow's own
classes (so the store's process receives real entities), and reads what the store returns as
`Mirror` objects with the same attributes (``run.info.run_id``, ``run.data.tags``,
``metric.step``). Where a process holds an `mlflow.MlflowClient` itself,
`classes` gives MLflow's classes.
"""
from __future__ import annotations

from typing import Any, NamedTuple


def _mlflow_entity(kind: str, fields: tuple) -> Any:
    """MLflow's entity ``kind`` made from ``fields``: what a light entity unpickles as."""
    import mlflow.entities

    return getattr(mlflow.entities, kind)(*fields)


class Metric(NamedTuple):
    """`mlflow.entities.Metric`: ``value`` at ``step``, ``timestamp`` in ms since the epoch."""

    key: str
    value: float
    timestamp: int
    step: int

    def __reduce__(self):
        return _mlflow_entity, ("Metric", tuple(self))


class Param(NamedTuple):
    """`mlflow.entities.Param`."""

    key: str
    value: str

    def __reduce__(self):
        return _mlflow_entity, ("Param", tuple(self))


class RunTag(NamedTuple):
    """`mlflow.entities.RunTag`."""

    key: str
    value: str

    def __reduce__(self):
        return _mlflow_entity, ("RunTag", tuple(self))


def classes(client: Any) -> tuple[type, type, type]:
    """``(Metric, Param, RunTag)`` for ``client``: the light ones above for a client whose calls
    are pickled to the store's process (``client.remote``), MLflow's own for an
    `mlflow.MlflowClient` (which validates them itself)."""
    if getattr(client, "remote", False):
        return Metric, Param, RunTag
    import mlflow.entities as e

    return e.Metric, e.Param, e.RunTag


class Mirror:
    """A read-only copy of an MLflow entity's properties (nested entities mirrored too), made in the
    store's process: unpickling it needs no mlflow."""

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Mirror({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


def mirror(value: Any) -> Any:
    """``value`` with every MLflow entity in it (a run, its info and data, a metric, an experiment,
    a page of runs) replaced by a `Mirror` of its properties; other values as they are."""
    from mlflow.entities._mlflow_object import _MlflowObject

    if isinstance(value, _MlflowObject):
        return Mirror(**{k: mirror(v) for k, v in value})
    if isinstance(value, (list, tuple)):  # PagedList (search_runs) is a list: its pages are not followed here
        return [mirror(v) for v in value]
    if isinstance(value, dict):
        return {k: mirror(v) for k, v in value.items()}
    return value
