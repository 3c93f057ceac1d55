"""The task interface and its registry: ``task=NAME`` → one :class:`Task` subclass.

A task is driven by the job context (:class:`sweeps.launch.job.JobRun`) in three steps:

1. :meth:`Task.prepare` — before any device is claimed or run opened: build the data and derive
   the global batch size and the scaled learning rate (bad input raises ``UsageError`` here);
2. :meth:`Task.run` — on the claimed device, logging through the job (``job.writer`` for
   metrics and tags, ``job.epochs`` for per-epoch records, ``job.checkpoints`` and
   ``job.resume_state`` for resume, ``job.telemetry`` for the sampler);
3. :meth:`Task.summarise` — the job-level metrics from the per-epoch records, on every ending.

A new task is one module in this package that defines a subclass decorated with
:func:`register`, and its name in :data:`sweeps.names.GROUP_OPTIONS` ``["task"]``.
"""
from __future__ import annotations

import importlib
import logging
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from sweeps import names
from sweeps.config import batch_size, scaled_lr
from sweeps.data import build_datasets
from sweeps.errors import UsageError
from sweeps.train.builder import JobData

log = logging.getLogger("sweeps")
REGISTRY: dict[str, type["Task"]] = {}


def register(cls: type["Task"]) -> type["Task"]:
    """Class decorator: make ``cls`` the task called ``cls.name``."""
    REGISTRY[cls.name] = cls
    return cls


def create(cfg: DictConfig) -> "Task":
    """The task ``cfg.task`` names, for ``cfg``.

    Raises:
        UsageError: no such task.
    """
    name = str(cfg.task)
    if name not in names.GROUP_OPTIONS["task"]:
        raise UsageError(f"task={name!r} is unknown: use one of {', '.join(names.GROUP_OPTIONS['task'])}")
    importlib.import_module(f"sweeps.tasks.{name}")  # registers itself
    return REGISTRY[name](cfg)


def settings_of_other_tasks(task: str) -> set[str]:
    """Top-level config nodes only other tasks read (``timing`` for a training job): they are
    neither logged as params nor part of the job's identity."""
    for name in names.GROUP_OPTIONS["task"]:
        importlib.import_module(f"sweeps.tasks.{name}")
    own = set(REGISTRY[task].settings) if task in REGISTRY else set()
    return {s for cls in REGISTRY.values() for s in cls.settings} - own


class Task:
    """One kind of job. Subclasses set :attr:`name` (the ``task=`` value) and :attr:`settings`
    (the top-level config nodes only this task reads), and implement :meth:`run`."""

    name: ClassVar[str] = ""
    settings: ClassVar[tuple[str, ...]] = ()
    needs_train_data: ClassVar[bool] = True  # False: only the shapes (and a test batch) matter

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.data: JobData | None = None
        self.other_settings: tuple[str, ...] = ()  # other tasks' config nodes (settings_of_other_tasks)

    @property
    def regression(self) -> bool:
        return self.data is not None and self.data.spec.task == "regression"

    def prepare(self) -> JobData:
        """Build the datasets; the global batch (``batch=full``: the training set) and the lr
        scaled for it (``lr_scaling``).

        Raises:
            DataUnavailable: the files are missing (``dataset.if_missing=skip`` turns this into
                an ``unavailable`` job). UsageError: any other bad input.
        """
        cfg = self.cfg
        train, test, spec = build_datasets(cfg.dataset, cfg.seed)
        batch = batch_size(cfg, len(train))
        if batch > len(train) and self.needs_train_data:  # a step can hold no more than the data
            log.warning("batch=%d is larger than the %d training examples: clamped to batch=%d (logged, and the "
                        "learning rate scaled, for the batch that runs)", batch, len(train), len(train))
            batch = len(train)
        lr = scaled_lr(cfg.optimizer.base_lr, batch, cfg.lr_scaling.base_batch, cfg.lr_scaling.rule)
        self.data = JobData(train, test, spec, batch, lr)
        return self.data

    def run(self, job: Any, device: torch.device) -> None:
        """Do the work on ``device`` (see the module docstring). Raises whatever the work
        raises (OOM, ...): the job context turns it into an outcome."""
        raise NotImplementedError

    def summarise(self, records: list[dict]) -> dict[str, float]:
        """Job-level metrics from the per-epoch records (none by default)."""
        return {}
