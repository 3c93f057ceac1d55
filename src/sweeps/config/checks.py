"""Checks of a composed config that its types cannot express, and the global batch size derived
from it (the learning rate: :mod:`sweeps.config.lr`). Every failure is a :class:`UsageError` with
one line that names the key and says what would work."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from sweeps import names
from sweeps.config.lr import LR_KEYS
from sweeps.errors import UsageError


def batch_size(cfg: DictConfig, train_len: int) -> int:
    """The global batch size in examples: ``cfg.batch``, or ``train_len`` when it is ``full``.

    Raises:
        UsageError: ``batch`` is not a positive integer or ``full``.
    """
    raw = cfg.batch
    if isinstance(raw, str) and raw.strip().lower() == "full":
        return train_len
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise UsageError(f"batch={raw!r} is not valid: use a positive integer (e.g. batch=128) or batch=full")
    return raw


def validate(cfg: DictConfig) -> None:
    """Check what the schema's types cannot; raise UsageError with one line naming the key.

    Group keys read here are on every option of their group (the base classes of
    :mod:`sweeps.config.options`), except ``device=ddp``'s own, read only for ddp.
    """
    batch_size(cfg, 1)
    if cfg.task not in names.GROUP_OPTIONS["task"]:
        raise UsageError(f"task={cfg.task!r} is unknown: use one of {', '.join(names.GROUP_OPTIONS['task'])}")
    if cfg.timing.mode not in names.TIMING_MODES:
        raise UsageError(f"timing.mode={cfg.timing.mode!r} is unknown: use events, sync or naive")
    if cfg.timing.iters <= 0 or cfg.timing.warmup < 0:
        raise UsageError(f"timing.iters={cfg.timing.iters}, timing.warmup={cfg.timing.warmup}: "
                         "use iters ≥ 1 and warmup ≥ 0")
    if cfg.dataset.loader not in names.LOADERS:
        raise UsageError(f"dataset.loader={cfg.dataset.loader!r} is unknown: use auto, dataloader or device")
    if cfg.precision.name not in names.GROUP_OPTIONS["precision"]:
        raise UsageError(f"precision.name={cfg.precision.name!r} is unknown: use fp32, tf32, bf16 or fp16")
    if cfg.optimizer.impl not in names.OPTIMIZER_IMPLS:
        raise UsageError(f"optimizer.impl={cfg.optimizer.impl!r} is unknown: use auto, fused, foreach or loop")
    if cfg.compile_mode not in names.COMPILE_MODES:
        raise UsageError(f"compile_mode={cfg.compile_mode!r} is unknown: use default, reduce-overhead, "
                         "max-autotune or max-autotune-no-cudagraphs")
    if not 1 <= cfg.max_batch.start <= cfg.max_batch.limit:
        raise UsageError(f"max_batch.start={cfg.max_batch.start}, max_batch.limit={cfg.max_batch.limit}: "
                         "use 1 ≤ start ≤ limit")
    if cfg.dataset.if_missing not in ("stop", "skip"):
        raise UsageError(f"dataset.if_missing={cfg.dataset.if_missing!r} is unknown: use stop or skip")
    if cfg.telemetry.interval_s < 0:
        raise UsageError(f"telemetry.interval_s={cfg.telemetry.interval_s} is not valid: "
                         "use seconds ≥ 0 (0 turns telemetry off)")
    if cfg.device.threads is not None and cfg.device.threads < 1:
        raise UsageError(f"device.threads={cfg.device.threads} is not valid: use 1 or more torch threads, or null "
                         "(torch's default: one per core)")
    trim_mb = cfg.device.get("malloc_trim_mb")
    if trim_mb is not None and not 1 <= trim_mb <= 2047:
        raise UsageError(f"device.malloc_trim_mb={trim_mb} is not valid: use 1 to 2047 MB of freed heap to keep, "
                         "or null (glibc's own default)")
    if cfg.device.name == "ddp":  # data parallel: see sweeps.launch.placement.ddp
        _validate_ddp(cfg)
    checkpoints = Path(str(cfg.checkpoint.dir)).expanduser()
    if checkpoints.exists() and not checkpoints.is_dir():
        raise UsageError(f"checkpoint.dir={cfg.checkpoint.dir} is a file, not a folder: remove it or set "
                         "checkpoint.dir=<a folder>")
    if cfg.repeat < 0:
        raise UsageError(f"repeat={cfg.repeat} is not valid: use 0, 1, 2, … (sweep repeat=0,1,2 to run a config 3 times)")
    if cfg.eval.every_epochs < 1:
        raise UsageError(f"eval.every_epochs={cfg.eval.every_epochs} is not valid: use 1 (every epoch) or more")
    if cfg.mlflow.log_every_epochs < 1:
        raise UsageError(f"mlflow.log_every_epochs={cfg.mlflow.log_every_epochs} is not valid: use 1 (every epoch "
                         "in the run's series) or more (epochs.csv keeps every epoch)")
    if cfg.mlflow.series_points is not None and cfg.mlflow.series_points < 1:
        raise UsageError(f"mlflow.series_points={cfg.mlflow.series_points} is not valid: use null (no cap on the "
                         "run's series) or 1 or more points (epochs.csv keeps every epoch)")
    if cfg.checkpoint.every_s < 0 or cfg.checkpoint.every_epochs < 0:
        raise UsageError(f"checkpoint.every_s={cfg.checkpoint.every_s}, checkpoint.every_epochs="
                         f"{cfg.checkpoint.every_epochs}: use values ≥ 0 (0 turns that trigger off)")
    if cfg.epochs <= 0:
        raise UsageError(f"epochs={cfg.epochs} is not valid: use a positive integer (e.g. epochs=10)")
    for key in LR_KEYS:
        value = cfg.optimizer.get(key)
        if value is not None and value <= 0:
            raise UsageError(f"optimizer.{key}={value} is not valid: use a positive number")
    if cfg.lr_scaling.base_batch <= 0:
        raise UsageError(f"lr_scaling.base_batch={cfg.lr_scaling.base_batch} is not valid: use a positive integer")
    _validate_target(cfg.target)
    _validate_cost(cfg.cost)
    for key in ("train_size", "test_size"):
        value = cfg.dataset[key]
        if value is not None and value <= 0:
            raise UsageError(f"dataset.{key}={value} is not valid: use a positive integer or null (all)")


def _validate_target(target: DictConfig) -> None:
    """``target``: both metric and value or neither; a per-epoch metric; mode max or min."""
    if target.metric is None and target.value is None:
        return
    example = "e.g. target.metric=test/acc target.value=0.9"
    if target.metric is None or target.value is None:
        raise UsageError(f"target.metric={target.metric}, target.value={target.value}: set both ({example}), "
                         "or neither for no target")
    epoch_metrics = (*names.EPOCH_METRICS, *names.TELEMETRY_EPOCH_METRICS)
    if target.metric not in epoch_metrics:
        raise UsageError(f"target.metric={target.metric} is not a per-epoch metric: use test/acc, test/rmse, "
                         f"test/loss, train/loss, ... ({example})")
    if target.mode not in names.TARGET_MODES:
        raise UsageError(f"target.mode={target.mode!r} is unknown: use max (reached when ≥ value) or min (≤ value)")


def _validate_cost(cost: DictConfig) -> None:
    """``cost.per_hour``: null, a positive number, or a mapping of device types (cpu, cuda) to one."""
    per_hour, example = cost.per_hour, "e.g. cost.per_hour=2.5 or cost.per_hour={cuda:2.5,cpu:0.1}"
    prices = dict(per_hour) if isinstance(per_hour, DictConfig) else {"": per_hour}
    for device, price in prices.items():
        key = f"cost.per_hour.{device}" if device else "cost.per_hour"
        if device and device not in ("cpu", "cuda"):
            raise UsageError(f"{key}: {device!r} is not a device type: price cpu and/or cuda ({example})")
        if price is None and not device:
            return
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
            raise UsageError(f"{key}={price!r} is not valid: use a price ≥ 0 per device-hour ({example}), "
                             "or null for no money figures")


def _validate_ddp(cfg: DictConfig) -> None:
    """``device=ddp``: the global batch splits evenly over ``device.gpus`` processes; train only."""
    n = cfg.device.gpus
    if n < 1 or cfg.device.backend not in ("auto", "nccl", "gloo") or cfg.device.timeout_s <= 0:
        raise UsageError(f"device.gpus={n}, device.backend={cfg.device.backend!r}, device.timeout_s="
                         f"{cfg.device.timeout_s}: use gpus ≥ 1, backend auto, nccl or gloo, and timeout_s > 0")
    if cfg.task != "train":
        raise UsageError(f"device=ddp runs task=train only (task={cfg.task}): use device=cuda or device=cpu")
    if isinstance(cfg.batch, int) and cfg.batch % n:
        raise UsageError(f"batch={cfg.batch} is the global batch and does not divide over device.gpus={n} "
                         f"processes: use a multiple of {n} (e.g. batch={cfg.batch // n * n or n})")
