"""Checks of a composed config that its types cannot express, and the global batch size derived
from it (the learning rate: `sweeps.config.lr`). Every failure is a [`UsageError`][sweeps.errors.UsageError] with
one line that names the key and says what would work."""
from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig

from sweeps import names
from sweeps.config.lr import LR_KEYS
from sweeps.config.options import OWN_KEYS
from sweeps.config.targets import locate, option_name
from sweeps.errors import UsageError

KEYS_HINT = "python -m sweeps --cfg job lists every key"


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
    `sweeps.config.options`), except ``device=ddp``'s own, read only for ddp.
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
    if cfg.device.name == "ddp":  # data parallel: see sweeps.job.ddp
        _validate_ddp(cfg)
    if cfg.device.get("_target_"):  # a device kind of the user's: it imports (sweeps.devices.from_config)
        locate(cfg.device, "device")
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


def check_importable(cfg: DictConfig, choices: dict[str, Any] | None = None) -> None:
    """Every ``_target_`` of the job's parts (`sweeps.names.TARGET_GROUPS`, nested ones
    included) whose top-level module is nowhere on the path: the job would fail to import it.
    Found without importing anything (`importlib.util.find_spec` of the top-level name), so
    the check costs no torch; a module that exists but lacks the name is the job's to say
    (`sweeps.config.targets.locate`), with the same line. ``choices``: the options Hydra
    chose (``hydra.runtime.choices``), where no Hydra context names them.

    Raises:
        UsageError: ``<group>=<option>: _target_ X cannot be imported (No module named 'x'); ...``.
    """
    for group in names.TARGET_GROUPS:
        node = cfg.get(group)
        if not isinstance(node, DictConfig):
            continue
        for target in _targets(node):
            top = target.split(".", 1)[0]
            if not top or top in sys.modules:
                continue
            try:
                found = importlib.util.find_spec(top) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                option = (choices or {}).get(group) or option_name(node, group)
                raise UsageError(f"{group}={option}: _target_ {target} cannot be imported "
                                 f"(No module named {top!r}); check the module is on the path (run from the "
                                 "folder holding it) and the name")


def _targets(node: Any) -> list[str]:
    """The ``_target_`` strings in ``node`` and the nodes under it; a value that does not resolve
    is left to the job."""
    found: list[str] = []
    if isinstance(node, DictConfig):
        items = [(k, node._get_node(k)) for k in node.keys()]
    elif isinstance(node, ListConfig):
        items = [(None, node._get_node(i)) for i in range(len(node))]
    else:
        return found
    for key, child in items:
        if key == "_target_":
            try:
                value = node.get("_target_")
            except Exception:  # noqa: BLE001 (an interpolation that does not resolve: the job says)
                continue
            if isinstance(value, str):
                found.append(value)
        elif isinstance(child, (DictConfig, ListConfig)):
            found += _targets(child)
    return found


def config_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Every dotted key of ``cfg`` (``epochs``, ``dataset``, ``dataset.train_size``, ...), its
    nodes' and their values', without resolving anything."""
    keys: list[str] = []
    for key in cfg.keys():
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            keys += config_keys(child, f"{dotted}.")
    return keys


def close_keys(cfg: DictConfig | None, key: str) -> list[str]:
    """The keys of ``cfg`` nearest to ``key``, best first (`nearest`): under a parent the
    config has, its children (``dataset.train_sizes`` → ``dataset.train_size``); under one it
    lacks, any dotted key (``datset.root`` → ``dataset.root``); failing those, a key whose last
    part is near (``lr`` → ``optimizer.lr``). ``hydra.*`` keys only for a ``hydra.*`` key; never
    ``key`` itself."""
    if cfg is None:
        return []
    every = [k for k in config_keys(cfg) if k != key and (key.startswith("hydra.") or not
                                                           (k == "hydra" or k.startswith("hydra.")))]
    parent, _, last = key.rpartition(".")
    if not parent or parent in every:
        siblings = {k.rpartition(".")[2]: k for k in every if k.rpartition(".")[0] == parent}
        near = [siblings[k] for k in nearest(last, list(siblings))]
    else:
        near = nearest(key, every)
    if near:
        return near
    lasts: dict[str, list[str]] = {}
    for k in every:
        lasts.setdefault(k.rpartition(".")[2], []).append(k)
    return [k for name in nearest(last, list(lasts))[:1] for k in lasts[name]][:3]


def nearest(word: str, choices: list[str], cutoff: float = 0.6, margin: float = 0.1) -> list[str]:
    """The ``choices`` like ``word`` (`difflib.SequenceMatcher` ratio ≥ ``cutoff``, as
    `difflib.get_close_matches`), best first, only those within ``margin`` of the best: a
    clear best match comes alone (``train_sizes`` → ``train_size``, not also ``test_size``)."""
    scored = sorted(((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in choices), reverse=True)
    scored = [(r, c) for r, c in scored if r >= cutoff]
    return [c for r, c in scored if r >= scored[0][0] - margin][:3] if scored else []


def no_key_line(key: str, cfg: DictConfig | None, said: str = "", value: str | None = None) -> str:
    """The one line for a key the config does not have (``epoch=3``): the nearest keys
    (`close_keys`) or, under a part that is a ``_target_`` (``model.depth=3``), how to pass
    it to the target; ``said``: Hydra's own words for it (``Key 'epoch' not in 'Config'``)."""
    near = close_keys(cfg, key)
    notes = [n for n in (said.strip().rstrip("."), KEYS_HINT) if n]
    group = key.split(".", 1)[0]
    if not near and "." in key and group in names.TARGET_GROUPS and value is not None:
        notes.insert(-1, f"+{key}={value} passes {key.split('.', 1)[1]} to {group}'s _target_ as an argument")
    mean = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"no key {key}{mean} ({'; '.join(notes)})"


def check_added_keys(cfg: DictConfig, overrides: list[str], groups: list[str] | tuple[str, ...] = ()) -> None:
    """A ``+key=value`` that adds a key nothing reads where the config has a key nearly like it
    (``+epoch=3`` beside ``epochs``; ``+dataset.train_sizes=8`` beside the dataset's own
    ``train_size``): the value would be ignored, the job run as if it were not given. A key under
    a ``_target_`` part is its target's argument (``+model.depth=3``) unless it nearly matches
    one of sweeps' own keys of that part; ``groups``: the config groups chosen (``+experiment=NAME``).

    Raises:
        UsageError: ``no key epoch, so nothing reads +epoch=3; did you mean epochs? (...)``.
    """
    for override in overrides:
        raw, _, value = str(override).partition("=")
        if not raw.startswith("+") or raw.startswith("++"):
            continue  # ++key may set a key the config has: Hydra's force-add
        key = raw[1:]
        group, _, rest = key.partition(".")
        if not key or "/" in key or "@" in key or key in groups or group == "hydra":
            continue
        if group in names.TARGET_GROUPS:
            own = [f.name for f in dataclasses.fields(OWN_KEYS[group])] if group in OWN_KEYS else []
            near = [f"{group}.{k}" for k in nearest(rest, own) if k != rest] if rest else []
        else:
            near = close_keys(cfg, key)
        if near:
            raise UsageError(f"no key {key}, so nothing reads {override}; did you mean {' or '.join(near)}? "
                             f"({KEYS_HINT})")


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
