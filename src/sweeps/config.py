"""Config schema: dataclasses registered in Hydra's ConfigStore and checks Hydra cannot express.

The YAML files under ``conf/`` are merged into these typed nodes, so a misspelt key
(``dataset.rooot=x``) or a wrong type (``epochs=abc``) fails at composition with Hydra's own
message. What a type cannot say (``batch`` is a positive int *or* ``full``; ``batch`` ≤ 0) is
checked by :func:`validate`, which raises :class:`sweeps.errors.UsageError` with one line.

Models are the exception: each model option has its own schema (``model/base_<name>``) because
their fields differ and the node is passed to the model's constructor through ``_target_``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from sweeps.errors import UsageError

TASKS = ("train", "inference", "max_batch")
LOADERS = ("dataloader", "device")
DEVICE_LOADER_DATASETS = ("cifar10", "mnist", "diabetes", "synthetic")  # in memory: see sweeps.device_data

# The project's config directory; @hydra.main and the tests compose from it.
CONF_DIR = Path(__file__).resolve().parent / "conf"  # a link to the repo's conf/ (see pyproject)


@dataclass
class DatasetConfig:
    name: str = MISSING  # cifar10 | mnist | imagefolder | diabetes | synthetic
    root: str = "data"  # where the files live (relative paths: to the directory sweeps runs in)
    download: bool = True  # let torchvision fetch the files when they are missing
    train_size: Optional[int] = None  # seeded subset of N training examples (None: all)
    test_size: Optional[int] = None  # seeded subset of N test examples (None: all)
    augment: bool = False  # random crop (pad 4) + horizontal flip on training images
    num_workers: Optional[int] = None  # DataLoader worker processes (None: chosen per dataset)
    channels: Optional[int] = None  # imagefolder: 1 or 3 (None: from the first image's mode)
    image_size: Optional[int] = None  # imagefolder: resize to N×N (None: keep)
    shape: List[int] = field(default_factory=lambda: [3, 32, 32])  # synthetic: one sample's shape
    num_classes: int = 10  # synthetic: number of classes
    regression: bool = False  # synthetic: a regression target (scikit-learn make_regression)
    test_fraction: float = 0.2  # diabetes: share of rows held out for test
    if_missing: str = "stop"  # files missing: stop (the sweep, one line) | skip (outcome=unavailable)
    loader: str = "dataloader"  # dataloader (host) | device (whole dataset on the device; in-memory sets only)


@dataclass
class DeviceConfig:
    name: str = MISSING  # auto | cpu | cuda | ddp
    index: int = 0  # cuda: which GPU
    gpus: int = 1  # ddp: number of processes (one per GPU with nccl; any number on the CPU with gloo)
    backend: str = "auto"  # ddp: auto (nccl where CUDA is present, else gloo) | nccl | gloo
    timeout_s: float = 300.0  # ddp: bound on every collective (and the rendezvous), seconds


@dataclass
class OptimizerConfig:
    name: str = MISSING  # sgd | adam
    base_lr: float = 0.1  # learning rate at lr_scaling.base_batch examples per step
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    impl: str = "auto"  # auto (fused on CUDA, else torch default) | fused | foreach | loop


@dataclass
class LRScalingConfig:
    rule: str = MISSING  # linear | sqrt | none
    base_batch: int = 128  # the batch size at which optimizer.base_lr applies


@dataclass
class ScheduleConfig:
    name: str = MISSING  # multistep | constant | cosine
    milestones: List[float] = field(default_factory=lambda: [0.5, 0.8])  # fractions of epochs
    gamma: float = 0.1  # multistep: lr factor at each milestone


@dataclass
class PrecisionConfig:
    name: str = MISSING  # fp32 | tf32 | bf16 | fp16 (see sweeps.device.PRECISIONS)


@dataclass
class MLflowConfig:
    tracking_uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite under ./mlruns
    experiment: str = "sweeps"


@dataclass
class TelemetryConfig:
    interval_s: float = 1.0  # s between samples of the job's GPUs (NVML) and host (psutil); 0: off
    figure: bool = True  # log telemetry.png (clocks, utilisation, memory, temperature, power over time)


@dataclass
class MaxBatchConfig:
    start: int = 1  # task=max_batch: first batch tried (examples); doubled until one does not fit
    limit: int = 65536  # largest batch tried (examples); reaching it ends the search (bound: limit)


@dataclass
class TimingConfig:
    mode: str = "events"  # task=inference: events | sync | naive (naive only to show its error)
    warmup: int = 10  # untimed forward passes first
    iters: int = 50  # timed forward passes


@dataclass
class CheckpointConfig:
    every_epochs: int = 1  # save after every N-th epoch (0: never); a killed job resumes from it
    dir: str = "checkpoints"  # one folder per job config hash below it
    keep: int = 2  # newest files kept; all are removed once the job ends ok or oom


@dataclass
class Config:
    model: Any = MISSING
    dataset: DatasetConfig = MISSING
    device: DeviceConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    lr_scaling: LRScalingConfig = MISSING
    schedule: ScheduleConfig = MISSING
    precision: PrecisionConfig = MISSING
    mlflow: MLflowConfig = field(default_factory=MLflowConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    batch: Any = 128  # global batch size (examples per optimizer step), or "full"
    epochs: int = 100
    seed: int = 0
    log_every_s: float = 2.0  # show a progress bar for epochs that take longer than this (s)
    resume: bool = True  # skip jobs already done (ok/oom) in the experiment; resume killed ones
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    deterministic: bool = False  # deterministic kernels (slower on GPU); CPU runs are deterministic anyway
    task: str = "train"  # train | inference | max_batch
    compile: bool = False  # torch.compile the model; compilation + warm-up logged as time/compile_s
    compile_mode: str = "default"  # default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
    channels_last: bool = False  # NHWC memory format for convolutional models (and their input batches)
    max_batch: MaxBatchConfig = field(default_factory=MaxBatchConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)


@dataclass
class CNN10Config:
    _target_: str = "sweeps.models.CNN10"
    widths: List[int] = field(default_factory=lambda: [64, 128, 256])
    convs_per_stage: int = 3


@dataclass
class WideResNetConfig:
    _target_: str = "sweeps.models.WideResNet"
    depth: int = 28
    width: int = 10
    dropout: float = 0.0


@dataclass
class MLPConfig:
    _target_: str = "sweeps.models.MLP"
    hidden: List[int] = field(default_factory=lambda: [1000, 1000])
    dropout: float = 0.0


@dataclass
class ResNet50Config:
    _target_: str = "sweeps.models.resnet50"


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent)."""
    if not OmegaConf.has_resolver("repo_dir"):  # ${repo_dir:}: the checkout holding conf/
        OmegaConf.register_new_resolver("repo_dir", lambda: str(CONF_DIR.resolve().parent))
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for name, node in [("cnn10", CNN10Config), ("wrn", WideResNetConfig), ("mlp", MLPConfig),
                       ("resnet50", ResNet50Config)]:
        cs.store(group="schema/model", name=name, node=node)


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


def scaled_lr(base_lr: float, batch: int, base_batch: int, rule: str) -> float:
    """Learning rate for ``batch`` from ``base_lr`` at ``base_batch``.

    ``linear``: lr = base_lr × batch / base_batch (Goyal et al. 2017, "Accurate, Large Minibatch
    SGD"; Smith et al. 2017, "Don't Decay the Learning Rate, Increase the Batch Size");
    ``sqrt``: lr = base_lr × √(batch / base_batch) (Krizhevsky 2014, "One weird trick");
    ``none``: lr = base_lr.

    Raises:
        UsageError: unknown rule.
    """
    ratio = batch / base_batch
    factors = {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}
    if rule not in factors:
        raise UsageError(f"lr_scaling.rule={rule!r} is unknown: use one of {', '.join(factors)}")
    return base_lr * factors[rule]


def validate(cfg: DictConfig) -> None:
    """Check what the schema's types cannot; raise UsageError with one line naming the key."""
    batch_size(cfg, 1)
    if cfg.task not in TASKS:
        raise UsageError(f"task={cfg.task!r} is unknown: use one of {', '.join(TASKS)}")
    if cfg.timing.mode not in ("events", "sync", "naive"):
        raise UsageError(f"timing.mode={cfg.timing.mode!r} is unknown: use events, sync or naive")
    if cfg.timing.iters <= 0 or cfg.timing.warmup < 0:
        raise UsageError(f"timing.iters={cfg.timing.iters}, timing.warmup={cfg.timing.warmup}: "
                         "use iters ≥ 1 and warmup ≥ 0")
    if cfg.dataset.loader not in LOADERS:
        raise UsageError(f"dataset.loader={cfg.dataset.loader!r} is unknown: use dataloader or device")
    if cfg.dataset.loader == "device" and cfg.dataset.name not in DEVICE_LOADER_DATASETS:
        raise UsageError(f"dataset.loader=device needs an in-memory dataset ({', '.join(DEVICE_LOADER_DATASETS)}); "
                         f"{cfg.dataset.name} is decoded from files: use dataset.loader=dataloader")
    if cfg.precision.name not in ("fp32", "tf32", "bf16", "fp16"):
        raise UsageError(f"precision.name={cfg.precision.name!r} is unknown: use fp32, tf32, bf16 or fp16")
    if cfg.optimizer.impl not in ("auto", "fused", "foreach", "loop"):
        raise UsageError(f"optimizer.impl={cfg.optimizer.impl!r} is unknown: use auto, fused, foreach or loop")
    if cfg.compile_mode not in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
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
    if cfg.device.name == "ddp":  # data parallel: see sweeps.ddp
        _validate_ddp(cfg)
    if cfg.epochs <= 0:
        raise UsageError(f"epochs={cfg.epochs} is not valid: use a positive integer (e.g. epochs=10)")
    if cfg.optimizer.base_lr <= 0:
        raise UsageError(f"optimizer.base_lr={cfg.optimizer.base_lr} is not valid: use a positive number")
    if cfg.lr_scaling.base_batch <= 0:
        raise UsageError(f"lr_scaling.base_batch={cfg.lr_scaling.base_batch} is not valid: use a positive integer")
    for key in ("train_size", "test_size"):
        value = cfg.dataset[key]
        if value is not None and value <= 0:
            raise UsageError(f"dataset.{key}={value} is not valid: use a positive integer or null (all)")


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
