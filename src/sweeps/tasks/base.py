"""The task interface and its registry: ``task=NAME`` → one `Task` subclass.

A task is driven by the job context (`sweeps.job.lifecycle.Job`) in three steps:

1. `Task.prepare` — before any device is claimed or run opened: build the data and derive
   the global batch size and the scaled learning rate (bad input raises ``UsageError`` here);
2. `Task.run` — on the claimed device, logging through the job (``job.writer`` for
   metrics and tags, ``job.epochs`` for per-epoch records, ``job.checkpoints`` and
   ``job.resume_state`` for resume, ``job.telemetry`` for the sampler);
3. `Task.summarize` — the job-level metrics from the per-epoch records, on every ending.

A new task is one module in this package that defines a subclass decorated with
`register`, and its name in `sweeps.names.GROUP_OPTIONS` ``["task"]``.
"""
from __future__ import annotations

import importlib
import logging
import math
import warnings
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from sweeps import names
from sweeps.config import batch_size, describe_lr
from sweeps.config.targets import check_target, option_name
from sweeps.data import DataSpec, build_datasets
from sweeps.data.device_loader import can_reside
from sweeps.errors import UsageError, describe
from sweeps.train.builder import JobData
from sweeps.train.losses import make_loss
from sweeps.train.optim import make_optimizer, make_schedule

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


def check_parts(cfg: DictConfig, spec: DataSpec, train) -> None:
    """Bad input in the parts a job is built from, found before its run opens (so no run is left
    logged for it): the model's ``_target_`` imports and its signature takes the arguments it will
    get, and its output on a batch of 2 fits the dataset's targets (`check_model_output`);
    the optimizer, schedule and loss are built once on a one-element dummy parameter (cheap, and
    a wrong value such as ``optimizer.betas=abc`` fails here, not after the run opened);
    ``dataset.loader=device`` gets tensors it can hold.

    Raises:
        UsageError: one line naming the option, the target and the cause.
    """
    check_target(cfg.model, "model", in_shape=spec.in_shape, num_outputs=spec.num_outputs)
    check_model_output(cfg, spec, train)
    dummy = [torch.zeros(1, requires_grad=True)]
    for group, make in (("optimizer", lambda: make_optimizer(cfg.optimizer, dummy, 1.0, torch.device("cpu"))),
                        ("schedule", lambda: _step_through(make_schedule(cfg.schedule, torch.optim.SGD(dummy, lr=1.0),
                                                                         cfg.epochs), cfg.epochs)),
                        ("loss", lambda: _on_dummy_batch(make_loss(cfg.loss, spec), spec))):
        try:
            make()
        except UsageError:
            raise
        except Exception as e:  # the target's own check of a value (Adam: "Invalid beta parameter")
            node = cfg[group]
            raise UsageError(f"{group}={option_name(node, group)}: {node.get('_target_')} fails with these "
                             f"arguments ({describe(e)})") from None
    if cfg.dataset.loader == "device" and not can_reside(train):
        raise UsageError(f"dataset.loader=device needs tensors in memory (a TensorDataset, CIFAR-10, MNIST), not "
                         f"{type(train).__name__}: use dataset.loader=auto or dataloader")


def check_model_output(cfg: DictConfig, spec: DataSpec, train) -> None:
    """The model's output on a batch of 2 examples fits the targets the loss compares it with:
    regression ``[2, num_outputs]``-many values per example as the targets hold (``[2, 1]`` for
    ``[2, 1]`` or ``[2]`` targets), classification ``[2, classes]`` for ``[2]`` integer labels
    (a user's own loss: any ``[2, …]``). The model is built on the ``meta`` device (shapes only,
    no memory, no arithmetic), else — a model that reads a tensor's value while it builds or runs
    — on the CPU from zeros; torch's random state is left as it was. A model that cannot be built
    or run here this way is left to the job, which records what it raises.

    Raises:
        UsageError: the output does not fit — one line naming the model option and both shapes.
    """
    try:
        n = min(2, len(train))
    except TypeError:  # a dataset without a length: its examples are the job's to read
        return
    out = _output_shape(cfg, spec, train, n)
    if out is None:
        return
    try:
        target = tuple(torch.as_tensor(train[0][1]).shape)
    except Exception:  # noqa: BLE001 (the dataset's own check has said what an example must be)
        return
    targets = [n, *target]
    regression = spec.problem == "regression"
    if regression:
        fits = len(out) >= 1 and out[0] == n and math.prod(out) == math.prod(targets)
        wanted = f"[{n}, {max(1, math.prod(target))}]"
        kind = "regression"
    elif cfg.loss.get("_target_"):  # the user's loss decides what it compares: a batch's worth of outputs
        fits, wanted, kind = len(out) >= 1 and out[0] == n, f"[{n}, …]", "classification"
    else:
        fits = out == (n, spec.num_outputs)
        wanted, kind = f"[{n}, {spec.num_outputs}]", f"classification, {spec.num_outputs} classes"
    if fits:
        return
    option = option_name(cfg.model, "model")
    raise UsageError(f"model={option} outputs {list(out)} per batch of {n}, the dataset's targets are {targets} "
                     f"({kind}): output (N, num_outputs), here {wanted}, using the num_outputs={spec.num_outputs} "
                     "the model is given")


def _output_shape(cfg: DictConfig, spec: DataSpec, train, n: int) -> tuple[int, ...] | None:
    """The shape of the model's output for ``n`` examples of ``train``'s input shape and type,
    built and run on meta tensors, else on CPU zeros; None where it cannot be found that way
    (the model raises, returns no tensor, or takes inputs of another kind)."""
    from sweeps.config.targets import call_target

    try:
        x = torch.as_tensor(train[0][0])
    except Exception:  # noqa: BLE001 (as above)
        return None
    dtype = torch.long if not x.is_floating_point() and x.dtype not in (torch.uint8, torch.bool) else torch.float32
    for device in ("meta", "cpu"):
        try:
            with torch.random.fork_rng(devices=[]), torch.device(device), torch.no_grad():
                model = call_target(cfg.model, "model", in_shape=spec.in_shape, num_outputs=spec.num_outputs)
                out = model(torch.zeros(n, *spec.in_shape, dtype=dtype))
        except UsageError:
            raise
        except Exception:  # noqa: BLE001 (meta: a value read; cpu: the model's own error, the job's to record)
            continue
        return tuple(out.shape) if isinstance(out, torch.Tensor) else None
    return None


def _on_dummy_batch(loss, spec: DataSpec) -> None:
    """The loss on two zero outputs and targets of the data's kind: a wrong value used only in
    the call (``loss.label_smoothing=lots``) fails here."""
    if spec.problem == "regression":
        loss(torch.zeros(2, spec.num_outputs), torch.zeros(2, spec.num_outputs))
    else:
        loss(torch.zeros(2, spec.num_outputs), torch.zeros(2, dtype=torch.long))


def _step_through(schedule, epochs: int) -> None:
    """Step a dummy schedule through the job's epochs: values used only at a milestone
    (``schedule.gamma``) fail here too. ~10 µs a step."""
    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": no training here
        warnings.simplefilter("ignore")
        for _ in range(epochs):
            schedule.step()


class Task:
    """One kind of job. Subclasses set `name` (the ``task=`` value) and `settings`
    (the top-level config nodes only this task reads), and implement `run`."""

    name: ClassVar[str] = ""
    settings: ClassVar[tuple[str, ...]] = ()
    needs_train_data: ClassVar[bool] = True  # False: only the shapes (and a test batch) matter

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.data: JobData | None = None
        self.other_settings: tuple[str, ...] = ()  # other tasks' config nodes (settings_of_other_tasks)

    @property
    def regression(self) -> bool:
        return self.data is not None and self.data.spec.problem == "regression"

    def prepare(self) -> JobData:
        """Build the datasets; the global batch (``batch=full``: the training set) and the lr
        for it (``optimizer.lr`` as written, or ``base_lr`` scaled by ``lr_scaling``).

        Raises:
            DataUnavailable: the files are missing (``dataset.if_missing=skip`` turns this into
                an ``unavailable`` job). UsageError: any other bad input.
        """
        cfg = self.cfg
        train, test, spec = build_datasets(cfg.dataset, cfg.seed)
        check_parts(cfg, spec, train)
        batch = batch_size(cfg, len(train))
        if batch > len(train) and self.needs_train_data:  # a step can hold no more than the data
            log.warning("batch=%d is larger than the %d training examples: clamped to batch=%d (logged, and the "
                        "learning rate scaled, for the batch that runs)", batch, len(train), len(train))
            batch = len(train)
        lr, lr_source = describe_lr(cfg, batch)
        self.data = JobData(train, test, spec, batch, lr, lr_source)
        return self.data

    def run(self, job: Any, device: torch.device) -> None:
        """Do the work on ``device`` (see the module docstring). Raises whatever the work
        raises (OOM, ...): the job context turns it into an outcome."""
        raise NotImplementedError

    def summarize(self, records: list[dict]) -> dict[str, float]:
        """Job-level metrics from the per-epoch records (none by default)."""
        return {}
