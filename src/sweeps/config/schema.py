"""Config schema: dataclasses registered in Hydra's ConfigStore and checks Hydra cannot express.

The YAML files under ``conf/`` are merged into these typed nodes, so a misspelt key
(``dataset.rooot=x``) or a wrong type (``epochs=abc``) fails at composition with Hydra's own
message. What a type cannot say (``batch`` is a positive int *or* ``full``; ``batch`` ≤ 0) is
checked by :func:`validate`, which raises :class:`sweeps.errors.UsageError` with one line.

Models are the exception: each model option has its own schema (``model/base_<name>``) because
their fields differ and the node is passed to the model's constructor through ``_target_``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


# The project's config directory; @hydra.main and the tests compose from it.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # a link to the repo's conf/ (see pyproject)


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
    name: str = MISSING  # fp32 | tf32 | bf16 | fp16 (see sweeps.train.precision.PRECISIONS)


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
    every_s: float = 60.0  # save when this many s (wall clock) passed since the last save (0: not by time)
    every_epochs: int = 0  # also save after every N-th epoch (0: not by count); a killed job resumes from it
    dir: str = "checkpoints"  # <dir>/<config hash>/<run id>/: checkpoints and the run's epoch journal
    keep: int = 2  # newest files kept; all are removed once the job ends ok or oom


@dataclass
class EvalConfig:
    every_epochs: int = 1  # evaluate on the test set after every N-th epoch (and after the last)


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
    log_every_s: float = 2.0  # at most one console row per this many s; progress bar for longer epochs
    resume: bool = True  # skip jobs already done (ok/oom) in the experiment; resume killed ones
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
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
