"""A sweep checked whole before its first job: every job the sweeper will launch is composed and
its values checked (``sweeps.config.complete`` and ``validate``), so ``-m batch=128,abc`` stops
with one line before ``batch=128`` runs — not after it, with a half-done sweep behind it.

A dataset whose files must already be there (`DATA_FOLDERS`: ``dataset=imagefolder``'s
``<root>/train`` and ``<root>/val``) has them looked for too (`check_data_root`, no torch),
unless ``dataset.if_missing=skip``. What only a job can check (the files' contents, its parts'
constructors) is still found by the job itself, before its run opens."""
from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Callable

from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from sweeps import compat
from sweeps.config import complete, validate
from sweeps.config.checks import check_added_keys, check_importable, no_key_line
from sweeps.config.options import OPTION_SCHEMAS
from sweeps.config.targets import group_as_key
from sweeps.sweep import interleave
from sweeps.sweep.compose import JobComposer
from sweeps.errors import UsageError

log = logging.getLogger("sweeps")
BASIC_SWEEPER = compat.BASIC_SWEEPER  # hydra/sweeper=basic: named, not imported
LISTED_SWEEPERS = (interleave.SWEEPER, BASIC_SWEEPER)  # the sweepers whose jobs `job_overrides` lists
REUSE_MAX = 1024  # jobs whose composed config is kept for Hydra's later compositions (~100 KB each)
REMOTE_LAUNCHERS = ("slurm", "submitit")  # launchers whose jobs run on other machines (words of their _target_)
# dataset _target_ → the folders under its dataset.root that must exist (never downloaded), and the layout
DATA_FOLDERS = {"sweeps.data.builtin.imagefolder": (("train", "val"), "ImageFolder layout is "
                                                    "<root>/train/<class>/<image> and <root>/val/<class>/<image>")}


def job_overrides(config: DictConfig) -> list[list[str]]:
    """The override lists of every job the sweeper of ``config`` (the sweep's own config) will
    launch, in launch order: its ``hydra.sweeper.params`` and the command line's overrides,
    expanded by `sweeps.sweep.interleave.job_lists` — repeats interleaved for sweeps'
    sweeper unless ``hydra.sweeper.interleave=false``, the basic sweeper's order for Hydra's.

    Raises:
        UsageError: ``hydra.sweeper.interleave`` is neither true nor false.
    """
    sweeper = config.hydra.sweeper
    interleaved = str(sweeper.get("_target_")) == interleave.SWEEPER and interleave.interleaving(sweeper)
    return interleave.job_lists(interleave.parse(config, list(config.hydra.overrides.task)), interleaved)


def planned_jobs(config: DictConfig) -> int:
    """How many jobs the sweep ``config`` launches, from its overrides alone (nothing composed);
    0 when the sweeper is neither sweeps' nor Hydra's basic one (`LISTED_SWEEPERS`)."""
    return len(job_overrides(config)) if str(config.hydra.sweeper.get("_target_")) in LISTED_SWEEPERS else 0


def check_sweep(config: DictConfig) -> int:
    """Compose and check every job of the sweep ``config``, in launch order; returns how many were
    checked (0 when the sweeper is not one of `LISTED_SWEEPERS`, whose jobs cannot be listed
    in advance).

    Raises:
        UsageError: the first job whose config is bad — one line naming the job's overrides and
            what is wrong (``sweeps.config.validate``'s or Hydra's message, or a data root that
            lacks its folders: `check_data_root`, for jobs this machine runs).
    """
    if str(config.hydra.sweeper.get("_target_")) not in LISTED_SWEEPERS:
        return 0
    from hydra.errors import HydraException

    loader = GlobalHydra.instance().config_loader()
    started = time.perf_counter()
    jobs = job_overrides(config)
    composer = JobComposer(loader, config, jobs)
    composed: dict[tuple[str, ...], DictConfig] = {}
    local = not any(word in str(config.hydra.launcher.get("_target_", "")).lower() for word in REMOTE_LAUNCHERS)
    for overrides in jobs:
        try:
            cfg = composer.compose(list(overrides))
            if len(composed) < REUSE_MAX:
                composed[tuple(overrides)] = cfg
            own = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])  # a job's own config, as the job sees it
            validate(complete(own, list(overrides)))
            check_importable(own, dict(cfg.hydra.runtime.choices))
            check_added_keys(own, list(overrides), list(cfg.hydra.runtime.choices))
            if local:  # jobs on other machines (Slurm) read their own disks: the job checks there
                check_data_root(own.dataset)
        except HydraException as e:
            line = unknown_key_line(e, list(overrides), lambda rest: loader.load_sweep_config(config, rest))
            raise UsageError(f"job {' '.join(overrides)}: {line or one_line(e)}") from None
        except UsageError as e:
            raise UsageError(f"job {' '.join(overrides)}: {e}") from None
    log.debug("checked the configs of %d jobs in %.2f s (%d derived from a shared composition)", len(jobs),
              time.perf_counter() - started, composer.derived)
    _reuse(loader, config, composed)
    return len(jobs)


def check_data_root(dataset: DictConfig) -> None:
    """The folders a dataset option of `DATA_FOLDERS` reads under its ``root`` exist
    (relative to where sweeps starts, ``~`` expanded); nothing for other datasets, a ``root`` not
    given yet (``???``: the composition says so), or ``if_missing=skip`` (the job is then logged
    ``unavailable``).

    Raises:
        UsageError: one line naming ``dataset.root``, the folders it lacks and the layout wanted.
    """
    wanted = DATA_FOLDERS.get(str(dataset.get("_target_")))
    if wanted is None or dataset.get("if_missing") == "skip" or OmegaConf.is_missing(dataset, "root"):
        return
    folders, layout = wanted
    root = dataset.get("root")
    if root is None:
        raise UsageError(f"dataset={dataset.get('name')} needs dataset.root=DIR; {layout}")
    base = Path(str(root)).expanduser()
    lacking = [f"{name}/" for name in folders if not (base / name).is_dir()]
    if lacking:
        what = "does not exist" if not base.exists() else f"has no {' and no '.join(lacking)} folder" + \
            ("s" if len(lacking) > 1 else "")
        raise UsageError(f"dataset.root={root} ({base.resolve()}) {what}; {layout} (dataset.if_missing=skip logs "
                         "such jobs unavailable instead)")


def _reuse(loader, master: DictConfig, composed: dict[tuple[str, ...], DictConfig]) -> None:
    """Let Hydra's own later compositions of these jobs take the check's.

    Hydra composes every job of a listed sweep twice more after the check (the sweeper's
    ``validate_batch_is_legal``, then the launcher), ~0.1 s each on 2 cores: two thirds of a tiny
    job's fixed cost. ``load_sweep_config`` is a pure function of the sweep's config and the
    job's overrides, so the check's config is the same config. The sweeper's check only composes
    (it keeps nothing) and the launcher's use comes second: so a job's first lookup gets the
    config as it is, its second takes it out of the memo (the launcher then sets the job's
    number and runs it); no deep copy (~10 ms each). A lookup after those composes afresh. Only
    this sweep's config object, and each job's exact overrides, hit the memo; the loader is
    Hydra's per-invocation instance, gone with the sweep.
    """
    compose = loader.load_sweep_config
    looked_up: set[tuple[str, ...]] = set()

    def load_sweep_config(master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = tuple(sweep_overrides)
        if master_config is master and key in composed:
            if key not in looked_up:
                looked_up.add(key)
                return composed[key]
            return composed.pop(key)
        return compose(master_config, sweep_overrides)

    loader.load_sweep_config = load_sweep_config


_NO_KEY = (re.compile(r"Could not override '([^']+)'\.\s*To append to your config use \+"),
           re.compile(r"Could not delete from config\. '([^']+)' does not exist"))


def override_key(override: str) -> str:
    """The key an override names: ``+epoch=3`` → ``epoch``, ``~seed`` → ``seed``."""
    return str(override).partition("=")[0].lstrip("+~")


def unknown_key_line(exc: BaseException, overrides: list[str],
                     compose: Callable[[list[str]], DictConfig]) -> str | None:
    """The one line for Hydra's error about a key the config lacks (``epoch=3``, ``~epoch``):
    ``no key epoch; did you mean epochs? (...)`` (`sweeps.config.checks.no_key_line`), the
    nearest keys read from ``compose(overrides without that key)`` — never Hydra's advice to
    append it with ``+``, which runs with the value ignored. None for any other error (or where
    the key is not one of ``overrides``')."""
    text = str(exc)
    found = next((m for m in (p.search(text) for p in _NO_KEY) if m), None)
    if found is None:
        return None
    key = found.group(1)
    given = [o for o in overrides if override_key(o) == key]
    if not given:
        return None
    cause = exc.__cause__
    said = (str(cause).splitlines() or [""])[0] if cause is not None else f"'{key}' does not exist"
    try:
        cfg = compose([o for o in overrides if override_key(o) != key])
    except Exception:  # noqa: BLE001 (another error too: the line names no near key)
        cfg = None
    value = str(given[0]).partition("=")[2] or None
    return no_key_line(key, cfg, said, value)


def one_line(exc: BaseException) -> str:
    """Hydra's multi-line message for a composition error as one line: its sentences joined, the
    options it lists comma-separated, without the config search path and OmegaConf's
    ``full_key``/``object_type`` lines (the key is already named). The cause is appended when
    the message does not hold it (a type conversion). A closed group written as a plain key in a
    preset (``device: cpu``: "Merge error: str is not a subclass of AutoDevice") gets the line
    that shows the ``- override /device: cpu`` form instead."""
    parts: list[str] = []
    text = str(exc)
    plain = _group_as_key(text)
    if plain:
        return plain
    if exc.__cause__ is not None and (str(exc.__cause__).splitlines() or [""])[0] not in text:
        text += "\n" + str(exc.__cause__)
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Config search path"):
            break
        if not line or line.startswith(("full_key:", "object_type=", "reference_type=")):
            continue
        if raw.startswith("\t") and parts and parts[-1].endswith(":"):
            parts[-1] += " " + line  # the first option under "Available options in 'model':"
        elif raw.startswith("\t") and parts:
            parts[-1] += ", " + line
        else:
            parts.append(line.rstrip("."))
    return "; ".join(parts)


def _group_as_key(text: str) -> str | None:
    """`sweeps.config.targets.group_as_key`'s line for Hydra's message about a plain value
    merged into a closed group's schema (``device``, ``lr_scaling``, ``precision``), else None."""
    merge = re.search(r"Merge error: \w+ is not a subclass of (\w+)\. value: (.*)", text)
    groups = {cls.__name__: group for group, options in OPTION_SCHEMAS.items() for cls in options.values()}
    if not merge or merge.group(1) not in groups:
        return None
    where = re.search(r"In '([^']+)'", text)
    return group_as_key(groups[merge.group(1)], merge.group(2).strip(), where.group(1) if where else "a preset")
