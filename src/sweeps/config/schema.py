"""Config schema: the top-level :class:`Config` and its fixed nodes, registered in Hydra's
ConfigStore with every group option's schema (:mod:`sweeps.config.options`).

The YAML files under ``conf/`` are merged into these typed nodes, so a misspelt key
(``dataset.rooot=x``) or a wrong type (``epochs=abc``) fails at composition with Hydra's own
message. What a type cannot say (``batch`` is a positive int *or* ``full``; ``batch`` ≤ 0) is
checked by :func:`sweeps.config.checks.validate`, which raises :class:`sweeps.errors.UsageError`
with one line.

Config groups (``model``, ``dataset``, ``device``, ...) are ``Any`` here: each option's YAML
extends its own schema (``schema/<group>/<option>``), whose fields differ from option to option.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from sweeps.config.options import OPTION_SCHEMAS


# The project's config directory; @hydra.main and the tests compose from it.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # a link to the repo's conf/ (see pyproject)


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
    # Groups: each option's YAML brings its own schema (schema/<group>/<option>); a type here would
    # force one set of fields on every option, and runs would log fields their option never reads.
    model: Any = MISSING
    dataset: Any = MISSING
    device: Any = MISSING
    optimizer: Any = MISSING
    lr_scaling: Any = MISSING
    schedule: Any = MISSING
    precision: Any = MISSING
    mlflow: MLflowConfig = field(default_factory=MLflowConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    batch: Any = 128  # global batch size (examples per optimizer step), or "full"
    epochs: int = 100
    seed: int = 0
    repeat: int = 0  # run the same configuration again (repeat=0,1,2); not part of any seed
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


# Models: the node is also the model constructor's keyword arguments (``_target_``), so a schema
# is named by architecture and several options can share it (mlp, mlp_tabular).
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


MODEL_SCHEMAS = {"cnn10": CNN10Config, "wrn": WideResNetConfig, "mlp": MLPConfig, "resnet50": ResNet50Config}


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent)."""
    if not OmegaConf.has_resolver("repo_dir"):  # ${repo_dir:}: the checkout holding conf/
        OmegaConf.register_new_resolver("repo_dir", lambda: str(CONF_DIR.resolve().parent))
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, options in {**OPTION_SCHEMAS, "model": MODEL_SCHEMAS}.items():
        for name, node in options.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
