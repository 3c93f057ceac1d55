"""The one place a training job is assembled from its config, for every device: model, precision,
speed knobs, optimizer, schedule, loaders and the `Trainer`.

Single-device jobs and every rank of a data-parallel job (``device=ddp``) go through
`build`, so an option (``dataset.num_workers``, ``optimizer.impl``, ``channels_last``,
``compile``, ``deterministic``, ``dataset.loader``) means the same thing everywhere.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn
from torch.utils.data import Dataset

from sweeps.config import call_target
from sweeps.data import DataSpec, default_workers, device_loaders, make_loaders, resident_loader
from sweeps.train import distributed
from sweeps.train.checkpoint import rng_state, set_rng_state
from sweeps.train.loop import Trainer
from sweeps.train.memory import reset_peak
from sweeps.train.losses import make_loss
from sweeps.train.optim import make_optimizer, make_schedule
from sweeps.train.precision import Precision, apply_precision, set_determinism
from sweeps.train.speed import compile_and_warm, use_channels_last

COMPILE_BACKEND_ENV = "SWEEPS_COMPILE_BACKEND"  # torch.compile backend (default inductor; tests: aot_eager)


def compile_backend() -> str:
    """torch.compile's backend: ``$SWEEPS_COMPILE_BACKEND``, default ``inductor``."""
    return os.environ.get(COMPILE_BACKEND_ENV, "inductor")


class CompileWatch:
    """One job's compilation, started from a clean dynamo state; afterwards `state` says
    whether it really compiled (the ``compiled`` tag).

    Why the reset: dynamo keeps every compiled graph of a function (the model's forward) in one
    cache per code object, across jobs, and after ``torch._dynamo.config.recompile_limit`` (8)
    entries it stops compiling that code and runs it eagerly, silently. A sweep of compiled
    jobs in one process (batch sizes, models) fills the cache within two or three jobs; later
    jobs then ran eager while logged ``compile=true``. The previous job's graphs are of no use
    to this one (other shapes, other parameters), so each job starts from an empty cache.
    """

    def __init__(self):
        import torch._dynamo

        torch._dynamo.reset()
        self._before = self._counts()

    @staticmethod
    def _counts() -> tuple[int, int]:
        """(graphs compiled, times a recompile limit made dynamo give up) so far in this process."""
        from torch._dynamo.utils import counters

        limits = sum(n for k, n in counters["unimplemented"].items()
                     if "recompile limit" in k.lower() or "recompile_limit" in k.lower())
        return counters["stats"]["unique_graphs"], limits

    def state(self) -> str:
        """``true``, or ``false (why)``: no graph compiled, or a recompile limit was hit."""
        graphs, limits = (a - b for a, b in zip(self._counts(), self._before))
        if limits:
            return "false (dynamo's recompile limit was hit: parts of the model ran eager)"
        if graphs == 0:
            return "false (no graph was compiled: the model ran eager)"
        return "true"


@dataclass
class JobData:
    """What a job trains on: the two datasets, their [`DataSpec`][sweeps.data.spec.DataSpec], the global batch size
    (examples per optimizer step, all ranks together) and the learning rate for it, with where
    that came from (`sweeps.config.describe_lr`: ``lr 0.025 = base_lr 0.1 × 32/128 (linear)``)."""

    train: Dataset
    test: Dataset
    spec: DataSpec
    batch: int
    lr: float
    lr_source: str = ""


def build_model(cfg: DictConfig, spec: DataSpec, device: torch.device) -> tuple[nn.Module, Precision, bool]:
    """The model of ``cfg.model`` for ``spec`` on ``device``, seeded by ``cfg.seed``, with the
    precision and determinism switches set.

    Returns:
        ``(model, precision, channels_last)`` — ``channels_last`` is True when the model was
        converted to NHWC (only models with a ``Conv2d`` are).

    Raises:
        UsageError: unknown precision; the model's ``_target_`` does not import or rejects its
            arguments. DeviceUnavailable: the device cannot run it.
    """
    precision = apply_precision(cfg.precision, device)
    set_determinism(cfg.deterministic)
    torch.manual_seed(cfg.seed)  # every rank the same initial weights (DDP also broadcasts rank 0's)
    model = call_target(cfg.model, "model", in_shape=spec.in_shape, num_outputs=spec.num_outputs).to(device)
    channels_last = bool(cfg.channels_last) and use_channels_last(model)
    return model, precision, channels_last


@dataclass
class Training:
    """A ready training job: the trainer, its loaders, and the model it was built around."""

    trainer: Trainer
    train_loader: Any
    test_loader: Any
    model: nn.Module  # the bare model (FLOP counting); the trainer may hold it wrapped (DDP)
    cfg: DictConfig
    compiled: str = "false (compile=false)"  # the ``compiled`` tag: see CompileWatch.state

    def compile(self) -> float:
        """``torch.compile`` (backend ``$SWEEPS_COMPILE_BACKEND``, default ``inductor``) and warm up
        every batch shape before the first epoch; seconds spent (``time/compile_s``), kept out of
        the epoch times. Under DDP every rank warms up the same shapes (its own batch / world).
        Sets `compiled`. The warm-up's memory is not the training's: CUDA peak statistics
        are reset afterwards, so ``mem/epoch_peak_mb`` is the epochs' own."""
        watch = CompileWatch()
        seconds = compile_and_warm(self.trainer, self.train_loader, self.test_loader, self.cfg.compile_mode,
                                   backend=compile_backend())
        self.compiled = watch.state()
        reset_peak(self.trainer.device)
        return seconds

    def state_dict(self) -> dict:
        """What a checkpoint needs: trainer state and every RNG (the loader's shuffle included)."""
        return {**self.trainer.state_dict(), "rng": rng_state(self.train_loader)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` saved."""
        self.trainer.load_state_dict(state)
        set_rng_state(state["rng"], self.train_loader)
        if hasattr(self.train_loader, "set_epoch"):  # a DistributedSampler's permutation follows the epoch
            self.train_loader.set_epoch(state["epoch"])


def build_training(cfg: DictConfig, data: JobData, device: torch.device, monitor=None) -> Training:
    """Assemble the training job ``cfg`` describes on ``device``.

    Under an initialised process group (a ``device=ddp`` rank) the model is wrapped in
    `DistributedDataParallel` and each rank loads ``batch / world``
    examples per step from its own shard (see `sweeps.train.distributed`).

    Raises:
        UsageError: an option this data or device cannot take (e.g. ``dataset.loader=device``
            with files to decode).
    """
    model, precision, channels_last = build_model(cfg, data.spec, device)
    net = distributed.wrap(model, device)  # the model itself outside a process group
    optimizer = make_optimizer(cfg.optimizer, net.parameters(), data.lr, device, precision.scaled)
    trainer = Trainer(net, data.spec, optimizer, make_schedule(cfg.schedule, optimizer, cfg.epochs), device,
                      cfg.log_every_s, monitor=monitor, precision=precision, channels_last=channels_last,
                      loss_fn=make_loss(cfg.loss, data.spec))
    if resident_loader(cfg.dataset.loader, data.train):
        loaders = device_loaders(data.train, data.test, data.batch, device,
                                 cfg.dataset.get("augment", False), cfg.seed)  # tensors: no augment field
    else:
        loaders = make_loaders(data.train, data.test, data.batch, device, default_workers(cfg.dataset, device, data.train),
                               cfg.seed)
    train_loader, test_loader = distributed.shard(loaders, data.batch, cfg.seed)
    return Training(trainer, train_loader, test_loader, model, cfg)
