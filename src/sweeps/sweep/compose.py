"""A sweep's job configs composed by Hydra once per choice of config groups, not once per job.

Hydra composes each job from scratch (``ConfigLoaderImpl.load_sweep_config``: the defaults list,
every YAML file merged, then the command line's values), ~80-200 ms on 2 cores: the largest
part of a tiny job's fixed cost (docs/benchmarks.md, "Start-up and fixed cost"). Jobs that differ only
in plain values (``seed=0,1,2``, ``batch=128,256``, ``optimizer.lr=...``) share everything up to
the values. `JobComposer` composes such a family's *base* once — the jobs' group choices
and Hydra overrides, no values — and derives each job from a deep copy of it the way Hydra's
``_load_configuration_impl`` finishes a composition: the values applied in order by Hydra's own
``_apply_overrides_to_config``, then ``hydra.overrides``, ``hydra.job.env_set`` and
``hydra.job.override_dirname`` set as Hydra sets them.

A family is derived only once its first job, composed both ways, gives the same config (content,
including ``hydra.*``); where it does not, or a derivation raises, Hydra composes every job of that
family itself (and raises its own error for a bad one). Jobs of a family share their overrides'
order and kinds, so the first one's check covers how the others are built; a family of fewer
than `MIN_FAMILY` jobs is composed by Hydra alone (deriving would save nothing).
"""
from __future__ import annotations

import copy
import os
from collections import Counter
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

MIN_FAMILY = 3  # jobs a family needs before its base is composed: the base and the check cost one job's composition


class JobComposer:
    """Compose the jobs of the sweep ``master`` (its Hydra config) through Hydra's ``loader``
    (``GlobalHydra.instance().config_loader()``), deriving families of plain-value jobs from a
    shared base (module docstring). ``jobs``: every job's override list, to size the families."""

    def __init__(self, loader: Any, master: DictConfig, jobs: list[list[str]]):
        from sweeps import compat

        self._apply, self._dirname = compat.job_composer_hooks()
        self.loader, self.master = loader, master
        self.hydra = [str(o) for o in OmegaConf.to_container(master.hydra.overrides.hydra)]
        self._parser = OverridesParser.create()
        self._hydra_parsed = self._parser.parse_overrides(self.hydra)  # Hydra's grammar: ~0.3 ms a line
        self._parsed: dict[tuple[str, ...], list] = {}  # each job's, parsed once
        self._groups: dict[str, bool] = {}  # key → whether it names a config group
        self._bases: dict[tuple, DictConfig | None] = {}  # family → its base; None: Hydra composes its jobs
        try:
            self._sizes = Counter(self._family(self._parse(job))[0] for job in jobs)
        except Exception:  # noqa: BLE001 (an override Hydra's parser refuses: its composition says so)
            self._sizes = Counter()
        self.derived = 0  # jobs composed from a base (tests, the debug log)

    def compose(self, overrides: list[str]) -> DictConfig:
        """The config Hydra's ``load_sweep_config(master, overrides)`` returns, for a new object.

        Raises:
            hydra.errors.HydraException: what Hydra raises for a job it cannot compose.
        """
        try:
            parsed = self._parse(overrides)
            family, values = self._family(parsed)
        except Exception:  # noqa: BLE001 (as above)
            return self.loader.load_sweep_config(self.master, list(overrides))
        if self._sizes[family] < MIN_FAMILY or self._bases.get(family, False) is None:
            return self.loader.load_sweep_config(self.master, list(overrides))
        if family not in self._bases:
            full = self.loader.load_sweep_config(self.master, list(overrides))
            self._bases[family] = self._checked_base(parsed, values, full)
            return full
        try:
            cfg = self._derive(self._bases[family], parsed, values)
        except Exception:  # noqa: BLE001 (a bad value: Hydra's own composition says what is wrong)
            return self.loader.load_sweep_config(self.master, list(overrides))
        self.derived += 1
        return cfg

    def _parse(self, overrides: list[str]) -> list:
        """The sweep's Hydra overrides and then ``overrides``, parsed (Hydra's ``Override`` objects)."""
        key = tuple(overrides)
        if key not in self._parsed:
            self._parsed[key] = [*self._hydra_parsed, *self._parser.parse_overrides(list(overrides))]
        return self._parsed[key]

    def _family(self, parsed: list) -> tuple[tuple, list]:
        """(the family's key, the job's plain-value overrides): the key holds every other override
        whole and the keys of the values, in order."""
        key, values = [], []
        for o in parsed:
            if self._plain_value(o):
                key.append(("value", o.key_or_group))
                values.append(o)
            else:
                key.append(o.input_line)
        return tuple(key), values

    def _plain_value(self, o: Any) -> bool:
        """A job's own value override (Hydra's ``Overrides`` rule: not a config group, not a
        dict), not one of ``hydra.*`` (which may move the search path)."""
        if o.is_hydra_override() or o.is_sweep_override() or o.package is not None or isinstance(o.value(), dict):
            return False
        if o.key_or_group not in self._groups:
            self._groups[o.key_or_group] = self.loader.repository.group_exists(o.key_or_group)
        return not self._groups[o.key_or_group]

    def _checked_base(self, parsed: list, values: list, full: DictConfig) -> DictConfig | None:
        """The family's base, or None where deriving its first job does not give Hydra's ``full``."""
        try:
            rest = [o.input_line for o in parsed[len(self.hydra):] if all(o is not v for v in values)]
            base = self.loader.load_sweep_config(self.master, rest)
            same = OmegaConf.to_container(self._derive(base, parsed, values)) == OmegaConf.to_container(full)
        except Exception:  # noqa: BLE001 (no base: Hydra composes each job)
            return None
        return base if same else None

    def _derive(self, base: DictConfig, parsed: list, values: list) -> DictConfig:
        """``base`` finished as Hydra's ``_load_configuration_impl`` finishes a composition."""
        cfg = copy.deepcopy(base)
        self._apply(values, cfg)
        task = [o for o in parsed if not o.is_hydra_override()]
        cfg.hydra.overrides.task = [o.input_line for o in task]
        cfg.hydra.overrides.hydra = [o.input_line for o in parsed if o.is_hydra_override()]
        with open_dict(cfg.hydra):
            for key in cfg.hydra.job.env_copy:
                cfg.hydra.job.env_set[key] = os.environ[key]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = self._dirname(overrides=task, kv_sep=dirname.kv_sep,
                                                       item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg
