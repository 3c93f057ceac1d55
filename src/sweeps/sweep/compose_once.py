"""The command's own config composed by Hydra once, not twice.

Hydra 1.3's command line (Hydra's ``_run_hydra``) composes the whole config to read
one key, ``hydra.mode`` (``Hydra.get_mode``), then composes it again for the run or the multirun
(``Hydra.run`` / ``Hydra.multirun`` → ``ConfigLoaderImpl.load_configuration``): ~0.1-0.35 s on 2
cores, before any job starts, for every ``python -m sweeps`` command. `composed_once` keeps
the first composition for the second, which is the same call with three differences, all handled:

- the second checks the command line's sweep values (``batch=1,2`` without ``-m``): done here with
  Hydra's own ``validate_sweep_overrides_legal``, its error unchanged;
- the second has one more override, ``hydra.mode=RUN`` (or ``MULTIRUN``), that Hydra's ``_run_app``
  appends where no config set the mode: applied to the kept config as Hydra applies a ``hydra.*``
  override given last (its value set, its line appended to ``hydra.overrides.hydra``);
- ``get_mode`` composes as for a multirun, where a config group left ``???`` in the defaults is
  skipped; a single run must raise Hydra's "You must specify" instead. Such a group shows in the
  composed ``hydra.runtime.choices`` as ``???``: then the run composes afresh.

Anything else (other overrides, a second lookup) composes as Hydra does.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf


@contextlib.contextmanager
def composed_once() -> Iterator[None]:
    """While in this block, ``Hydra.get_mode`` composes the config as Hydra's does and leaves it
    with that Hydra's config loader for the run's own composition (module docstring); Hydra's
    method is put back after. A Hydra without ``get_mode`` is left alone."""
    from hydra.types import RunMode

    from sweeps import compat

    Hydra = compat.hydra_class()

    hydra_get_mode = getattr(Hydra, "get_mode", None)
    if hydra_get_mode is None:
        yield
        return

    def get_mode(self: Any, config_name: str | None, overrides: list[str]) -> Any:
        try:  # exactly Hydra's get_mode
            cfg = self.config_loader.load_configuration(config_name=config_name, overrides=overrides,
                                                        run_mode=RunMode.MULTIRUN, validate_sweep_overrides=False)
        except Exception:
            return None
        try:
            _keep(self.config_loader, config_name, list(overrides), cfg)
        except Exception:  # noqa: BLE001 (nothing kept: the run composes as Hydra does)
            pass
        return cfg.hydra.mode

    Hydra.get_mode = get_mode
    try:
        yield
    finally:
        Hydra.get_mode = hydra_get_mode


def _keep(loader: Any, config_name: str | None, overrides: list[str], cfg: DictConfig) -> None:
    """Serve ``cfg`` to ``loader``'s next ``load_configuration`` of the same config and
    overrides — plus the ``hydra.mode=RUN`` or ``=MULTIRUN`` that Hydra's ``_run_app`` appends
    when no config set the mode, applied here as Hydra applies it — once; the loader's own method
    is back after that call, whatever it asked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    from sweeps import compat

    load = loader.load_configuration
    choices = cfg.hydra.runtime.choices
    skipped_group = any(OmegaConf.is_missing(choices, group) for group in choices)

    def load_configuration(config_name: str | None, overrides: list[str], run_mode: Any, from_shell: bool = True,
                           validate_sweep_overrides: bool = True) -> DictConfig:
        del loader.load_configuration  # the instance attribute: Hydra's method from here on
        overrides = list(overrides)
        added = overrides[len(kept_overrides):]
        same = (config_name == kept_name and overrides[:len(kept_overrides)] == kept_overrides
                and added in ([], ["hydra.mode=RUN"], ["hydra.mode=MULTIRUN"]))
        if not same or (run_mode == RunMode.RUN and skipped_group):
            return load(config_name=config_name, overrides=overrides, run_mode=run_mode, from_shell=from_shell,
                        validate_sweep_overrides=validate_sweep_overrides)
        try:
            parsed = OverridesParser.create(config_loader=loader).parse_overrides(overrides=overrides)
            if validate_sweep_overrides:
                loader.validate_sweep_overrides_legal(overrides=parsed, run_mode=run_mode, from_shell=from_shell)
            if added:  # the last override, as _load_configuration_impl applies and records a hydra.* one
                compat.apply_overrides(parsed[-1:], cfg)
                cfg.hydra.overrides.hydra.append(added[0])
        except OmegaConfBaseException as e:  # as load_configuration wraps it
            raise ConfigCompositionException().with_traceback(e.__traceback__) from e
        return cfg

    kept_name, kept_overrides = config_name, list(overrides)
    loader.load_configuration = load_configuration
