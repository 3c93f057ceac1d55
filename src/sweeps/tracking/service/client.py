"""What a job's code holds of its store process: `RemoteClient`, the
`mlflow.MlflowClient` methods sweeps calls, answered by the store's process
(`sweeps.tracking.service.connection`), and `in_store`, a sweeps function run where a client's
store is; `execute`, how the store's process runs a call, and `StoreError`, how its
errors come back. Imports neither mlflow nor the pipe's module.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

_errors: dict[str, type] = {}


class StoreError(Exception):
    """An exception raised by the store's process; the subclass is named like the original."""


def remote_error(kind: str, text: str) -> StoreError:
    """A `StoreError` subclass named ``kind`` (one class per name) carrying ``text``."""
    cls = _errors.get(kind) or _errors.setdefault(kind, type(kind, (StoreError,), {}))
    return cls(text)


def execute(client: Any, kind: str, name: str, args: tuple, kwargs: dict) -> Any:
    """Run one call on ``client`` (an `mlflow.MlflowClient`): its method ``name``
    (``kind`` ``client``), or the function ``module:qualname`` given the client first
    (``kind`` ``function``, `run`)."""
    if kind == "client":
        return getattr(client, name)(*args, **kwargs)
    module, _, qualname = name.partition(":")
    fn: Any = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    return fn(client, *args, **kwargs)


class RemoteClient:
    """The `mlflow.MlflowClient` methods sweeps calls, run by the store's process: each
    attribute is a method taking MlflowClient's arguments (light entities for entities,
    `sweeps.tracking.store.entities`) and returning its result with entities as
    `Mirror` objects."""

    remote = True  # sweeps.tracking.store.entities.classes: build light entities for this client

    def __init__(self, service: Any):
        """``service``: the `StoreService` that answers
        (not imported here: the service's module builds its clients)."""
        self._service, self.tracking_uri = service, service.uri

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._service.call("client", name, args, kwargs)

    def run(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(client, *args, **kwargs)`` in the store's process: a module-level sweeps function
        that builds MLflow objects (dataset inputs) where mlflow is imported anyway."""
        return self._service.call("function", f"{fn.__module__}:{fn.__qualname__}", args, kwargs)

    def post(self, what: str, fn: Callable, *args: Any, on_error: Callable[[], None] | None = None) -> None:
        """`run` without waiting for it
        (`post`): once its answer is read, a
        failure is logged as a warning naming ``what`` and ``on_error()`` is called."""
        self._service.post(what, "function", f"{fn.__module__}:{fn.__qualname__}", args, {}, on_error)

    def post_call(self, what: str, name: str, *args: Any, **kwargs: Any) -> None:
        """The `mlflow.MlflowClient` method ``name`` without waiting for it
        (`post`): a failure is a warning
        naming ``what``."""
        self._service.post(what, "client", name, args, kwargs)

    def settle(self) -> None:
        """Wait for the answers of the calls `post` sent."""
        self._service.settle()


def in_store(client: Any, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(client, *args, **kwargs)`` where the client's store is: in the store's process for a
    `RemoteClient`, here for an `mlflow.MlflowClient`."""
    return client.run(fn, *args, **kwargs) if getattr(client, "remote", False) else fn(client, *args, **kwargs)
