"""Config schema: the top-level `Config` and its fixed nodes, registered in Hydra's
ConfigStore with every group option's schema (`sweeps.config.options`).

The YAML files under ``conf/`` are merged into these typed nodes, so a misspelt key
(``dataset.rooot=x``) or a wrong type (``epochs=abc``) fails at composition with Hydra's own
message. What a type cannot say (``batch`` is a positive int *or* ``full``; ``batch`` ≤ 0) is
checked by `sweeps.config.checks.validate`, which raises [`sweeps.errors.UsageError`][sweeps.errors.UsageError]
with one line.

Config groups (``model``, ``dataset``, ``device``, ...) are ``Any`` here: an option of a closed
group (device, lr_scaling, precision) extends its own schema (``schema/<group>/<option>``); an
option of a ``_target_`` group (model, dataset, optimizer, schedule, loss) is its target's
arguments plus sweeps' own keys, filled and checked by [`sweeps.config.targets.complete`][sweeps.config.targets.complete].
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.config_source import ConfigSource
from omegaconf import MISSING, OmegaConf

from sweeps.config import catalog, presets
from sweeps.config.options import KIND_SCHEMA, OPTION_SCHEMAS
from sweeps.config.catalog import CONF_DIR  # noqa: F401 — sweeps.config.CONF_DIR, where users and tests find it


@dataclass
class MLflowConfig:
    tracking_uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite under ./mlruns
    # None: the preset's name (+experiment=NAME), else "sweeps"; filled as Hydra composes (sweeps.config.presets)
    experiment: Optional[str] = None
    log_every_epochs: int = 1  # per-epoch metrics to MLflow every this many epochs (1: each); all in epochs.csv
    series_points: Optional[int] = 320  # at most ~this many points a series (a round stride); None: no cap


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
class TargetConfig:
    """Time to a target quality (MLPerf Training's time-to-train; see `sweeps.time_to_target`)."""

    metric: Optional[str] = None  # a per-epoch metric, e.g. test/acc or test/rmse (None: no target)
    value: Optional[float] = None  # the quality to reach
    mode: str = "max"  # max: reached when metric ≥ value | min: when metric ≤ value
    stop: bool = False  # true: the job ends at the epoch that reached it; false: it runs all epochs


@dataclass
class DiagConfig:
    """Where a step's time goes: a profiled window after the timed epochs (`sweeps.train.profile_window`)."""

    steps: int = 20  # training steps profiled after the timed epochs (0: no window, no diagnosis)
    warmup_steps: int = 3  # steps run first, not recorded


@dataclass
class CostConfig:
    # price of one hour of a device: a number for every device, or {cpu: 0.1, cuda: 2.5} per device type;
    # None: no money figures (sweeps.report.cost). Checked by sweeps.config.checks.validate.
    per_hour: Any = None
    currency: Optional[str] = None  # a label shown after sums of money, e.g. USD (None: none shown)


@dataclass
class Config:
    # Groups: a closed group's option brings its own schema (schema/<group>/<option>); a _target_
    # group's node is its target's arguments plus sweeps' own keys (sweeps.config.targets). A type
    # here would force one set of fields on every option, and runs would log fields never read.
    model: Any = MISSING
    dataset: Any = MISSING
    device: Any = MISSING
    optimizer: Any = MISSING
    lr_scaling: Any = MISSING
    schedule: Any = MISSING
    precision: Any = MISSING
    loss: Any = MISSING
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
    target: TargetConfig = field(default_factory=TargetConfig)
    deterministic: bool = False  # deterministic kernels (slower on GPU); CPU runs are deterministic anyway
    task: str = "train"  # train | inference | max_batch
    compile: bool = False  # torch.compile the model; compilation + warm-up logged as time/compile_s
    compile_mode: str = "default"  # default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
    channels_last: bool = False  # NHWC memory format for convolutional models (and their input batches)
    max_batch: MaxBatchConfig = field(default_factory=MaxBatchConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    diag: DiagConfig = field(default_factory=DiagConfig)


def _copy_sharing_the_store(source: ConfigSource, memo: dict) -> ConfigSource:
    """A deep copy of a config source that shares the ConfigStore it may hold — unless that store
    was already copied in the same deep copy (``Singleton.get_state()`` copies the store, then
    the sources: its snapshot stays one consistent set, as with Hydra's own copy). That relies on
    the store coming first in ``Singleton._instances`` — made when Hydra is imported, before any
    source — which tests/test_config.py checks through a copy of ``[store, repository]``."""
    new = memo[id(source)] = copy.copy(source)
    for key, value in vars(source).items():
        shared = isinstance(value, ConfigStore) and id(value) not in memo
        setattr(new, key, value if shared else copy.deepcopy(value, memo))
    return new


def _share_the_store_in_copies() -> None:
    """Copies of Hydra's config sources share its ConfigStore singleton, as upstream Hydra's do
    since facebookresearch/hydra#2928 (its structured source no longer holds the store; not in a
    1.3 release). Hydra 1.3 deep-copies its config repository — and with it the whole store,
    every schema Hydra and sweeps registered, ~13 ms on 2 cores — each time it builds one:
    once per composition, and 126 times for ``--help`` (its group listing: 1.3-1.8 of --help's
    2.1-2.7 s: docs/benchmarks.md). The copy is only there so that re-initialising its sources leaves the
    original's list alone (``CachingConfigRepository``); nothing changes the store through a
    source. A copy of the whole Singleton state (``Singleton.get_state()``, which launchers send
    to their workers) still copies the store once and points the copied sources at that copy.
    Set on the base class: Hydra's plugin scan re-executes the module of the structured source,
    so a method set on that class would be lost. Idempotent; a Hydra whose sources already
    define their own copy is left as it is."""
    if getattr(ConfigSource, "__deepcopy__", _copy_sharing_the_store) is _copy_sharing_the_store:
        ConfigSource.__deepcopy__ = _copy_sharing_the_store


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent); see also
    `_share_the_store_in_copies` and `sweeps.config.presets.name_the_experiment`."""
    _share_the_store_in_copies()
    presets.name_the_experiment()
    if not OmegaConf.has_resolver("repo_dir"):  # ${repo_dir:}: the checkout holding src/sweeps/conf
        OmegaConf.register_new_resolver("repo_dir", lambda: str(CONF_DIR.resolve().parents[2]))
    if not OmegaConf.has_resolver("sweeps_help"):  # ${sweeps_help:groups}: --help's lists (conf/hydra/help)
        OmegaConf.register_new_resolver("sweeps_help", catalog.help_section)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, options in OPTION_SCHEMAS.items():
        for name, node in options.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
    group, name, node = KIND_SCHEMA  # a device option of the user's own kind
    cs.store(group=f"schema/{group}", name=name, node=node)
