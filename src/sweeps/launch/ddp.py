"""Data-parallel training (``device=ddp``): N worker processes started from inside the job with
torch's own launcher (:func:`torch.distributed.launcher.api.elastic_launch`, torchrun's
``--standalone`` semantics), NCCL on GPUs, Gloo on the CPU.

- ``batch`` is the global batch: each rank takes ``batch / N`` examples per step from a
  :class:`DistributedSampler` (``set_epoch`` every epoch), and DDP averages the gradients, so a
  step sees the same examples and the same mean gradient as one process at ``batch``.
- Only rank 0 reports: per-epoch records are gathered once per epoch (outside the steps) and
  reduced — ``phase/<p>_ms`` is the mean over ranks, ``phase/<p>_max_ms`` the slowest rank,
  ``time/epoch_s`` the slowest rank, ``perf/samples_per_s`` all ranks' samples over that time.
  Rank 0 returns them and the job process logs them to its one MLflow run.
- An OOM on any rank is agreed across ranks (one all-reduce of a flag per training step, before
  backward), so every rank stops and the job ends ``outcome=oom`` instead of hanging in the
  gradient all-reduce; ``device.timeout_s`` bounds every collective of the process group.
"""
from __future__ import annotations

import datetime
import os
import signal
import socket
import uuid

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sweeps.errors import DeviceUnavailable, Terminated

WORLD_SIZE_METRIC = "device.world_size"


def backend(cfg: DictConfig) -> str:
    """``device.backend``: ``auto`` → ``nccl`` where CUDA is present, else ``gloo``."""
    if cfg.backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return cfg.backend


def resolve(cfg: DictConfig) -> torch.device:
    """The device rank 0 uses (``cuda:0`` for NCCL, else ``cpu``), after checking the machine.

    Raises:
        DeviceUnavailable: NCCL without CUDA, or more processes (``device.gpus``) than GPUs.
    """
    if backend(cfg) != "nccl":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceUnavailable("device=ddp with device.backend=nccl needs CUDA and none is visible here; "
                                "use device.backend=gloo to run the processes on the CPU")
    if cfg.gpus > torch.cuda.device_count():
        raise DeviceUnavailable(f"device=ddp: device.gpus={cfg.gpus} processes but this machine has "
                                f"{torch.cuda.device_count()} CUDA device(s); use device.gpus<={torch.cuda.device_count()}")
    return torch.device("cuda", 0)


class OOMAgreement(nn.Module):
    """Wraps the DDP model: in training, every forward ends with an all-reduce (MAX) of an
    "out of memory here" flag, so when one rank's forward runs out of memory all ranks raise
    :class:`torch.OutOfMemoryError` together, before backward (where a missing rank would leave
    the others waiting in the gradient all-reduce until the timeout)."""

    def __init__(self, module: nn.Module, device: torch.device):
        super().__init__()
        self.module, self.flag = module, torch.zeros((), device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return self.module(x)
        out, error = None, None
        try:
            out = self.module(x)
        except torch.OutOfMemoryError as e:
            error = e
        self.flag.fill_(1.0 if error is not None else 0.0)
        dist.all_reduce(self.flag, op=dist.ReduceOp.MAX)
        # The one host sync inside a step, on purpose: the ranks must agree to stop before backward.
        if self.flag.item() > 0:
            raise torch.OutOfMemoryError(
                f"out of memory on rank {dist.get_rank()}: {error}" if error is not None
                else "out of memory on another rank (agreed across ranks)")
        return out


class _EpochSampling:
    """A loader whose DistributedSampler is told the epoch (``set_epoch``) at each pass."""

    def __init__(self, loader, sampler):
        self.loader, self.sampler, self.epoch = loader, sampler, 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)


def reduce_records(recs: list[dict]) -> dict:
    """One record from the ranks' records of an epoch (see the module docstring)."""
    out = dict(recs[0])  # test metrics: every rank evaluates the whole test set
    for key in recs[0]:
        values = [r[key] for r in recs if isinstance(r.get(key), (int, float))]
        if key.startswith("phase/") and key.endswith("_ms") and values:
            out[key] = sum(values) / len(values)
            out[key[:-3] + "_max_ms"] = max(values)
        elif key in ("train/loss", "train/acc", "phase/sum_s") and values:
            out[key] = sum(values) / len(values)  # equal samples per rank: the global mean
        elif key in ("time/epoch_s", "mem/epoch_peak_mb") and values:
            out[key] = max(values)
        elif key == "samples":
            out[key] = sum(values)
    out["perf/samples_per_s"] = out["samples"] / out["time/epoch_s"]
    return out


def _worker(cfg_dict: dict, batch: int, lr: float) -> dict:
    """One rank (entry point of :func:`elastic_launch`; env has RANK, WORLD_SIZE, ...).
    Returns ``{"records": [...]}`` (rank 0's are the reduced ones), or ``{"error": (kind, text)}``."""
    from sweeps.data import build_datasets, make_loaders
    from sweeps.train.precision import apply_precision
    from hydra.utils import instantiate
    from torch.utils.data import DataLoader, DistributedSampler
    from sweeps.train.loop import Trainer
    from sweeps.train.optim import make_optimizer, make_schedule

    cfg = OmegaConf.create(cfg_dict)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    kind = backend(cfg.device)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if kind == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:  # N processes share the cores: without this each one starts a thread per core (oversubscribed)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group(kind, timeout=datetime.timedelta(seconds=cfg.device.timeout_s))
    try:
        train_set, test_set, spec = build_datasets(cfg.dataset, cfg.seed)
        precision = apply_precision(cfg.precision, device)
        torch.manual_seed(cfg.seed)  # the same initial weights as one process (and DDP broadcasts rank 0's)
        model = instantiate(cfg.model, in_shape=spec.in_shape, num_outputs=spec.num_outputs).to(device)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = make_optimizer(cfg.optimizer, ddp.parameters(), lr)
        trainer = Trainer(OOMAgreement(ddp, device), spec, optimizer, make_schedule(cfg.schedule, optimizer, cfg.epochs),
                          device, cfg.log_every_s, precision=precision)
        sampler = DistributedSampler(train_set, world, rank, shuffle=True, seed=cfg.seed)
        train_loader = DataLoader(train_set, batch_size=batch // world, sampler=sampler,
                                  pin_memory=device.type == "cuda")
        test_loader = make_loaders(train_set, test_set, batch, device, 0, cfg.seed)[1]
        reduced: list[dict] = []

        def on_epoch(rec: dict) -> None:  # once per epoch, after evaluation: not inside a step
            gathered = [None] * world
            dist.all_gather_object(gathered, rec)
            if rank == 0:
                reduced.append(reduce_records(gathered))

        trainer.fit(_EpochSampling(train_loader, sampler), test_loader, cfg.epochs, on_epoch)
        return {"records": reduced}
    except Exception as e:  # reported to the job process, which classifies it (oom, error)
        return {"error": ("oom" if isinstance(e, torch.OutOfMemoryError) else type(e).__name__,
                          str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__)}
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cfg: DictConfig, batch: int, lr: float) -> list[dict]:
    """Train ``cfg`` on ``device.gpus`` processes; returns rank 0's reduced per-epoch records.

    Raises:
        torch.OutOfMemoryError: any rank ran out of memory (agreed across ranks).
        RuntimeError: a rank failed otherwise (its message), or died / timed out.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    world = cfg.device.gpus
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=f"sweeps-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{_free_port()}", max_restarts=0,
                          rdzv_configs={"timeout": int(cfg.device.timeout_s)}, monitor_interval=0.1,
                          start_method="spawn")
    # the launcher installs its own SIGINT/SIGTERM/... handlers and leaves them: keep the job's
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    try:
        results = elastic_launch(config, _worker)(OmegaConf.to_container(cfg, resolve=True), batch, lr)
    except SignalException as e:  # the workers are stopped; the job ends killed as without ddp
        raise (Terminated() if e.sigval == signal.SIGTERM else KeyboardInterrupt()) from None
    finally:
        for s, handler in saved.items():
            try:
                signal.signal(s, handler)
            except (ValueError, TypeError):  # not the main thread, or a handler set outside Python
                pass
    # the rank that ran out of memory first: its message names it
    errors = sorted((r["error"] for r in results.values() if "error" in r), key=lambda e: "another rank" in e[1])
    for kind, text in errors:
        if kind == "oom":
            raise torch.OutOfMemoryError(text if "rank" in text else f"out of memory: {text}")
    if errors:
        raise RuntimeError(f"{errors[0][0]} on a rank: {errors[0][1]}")
    return results[0]["records"]
