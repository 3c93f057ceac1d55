"""One name for a study: a preset (``+experiment=NAME``, ``conf/experiment/NAME.yaml``) logs to
the MLflow experiment ``NAME`` unless it sets ``mlflow.experiment`` itself (study 1's warm-up
recipe logs beside study 1), so ``+experiment=NAME`` and the report's ``--experiment NAME``
agree. Without a preset the experiment is ``sweeps``; ``mlflow.experiment=`` on the command line
wins over both.

The name is filled in as Hydra composes (`name_the_experiment`), where the preset Hydra
chose is known (``hydra.runtime.choices``): every composition — the command line, each job of a
sweep, ``--cfg job``, Hydra's compose API — sees the final name, and no key reads it unset.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from sweeps.config import catalog

DEFAULT_EXPERIMENT = "sweeps"  # the MLflow experiment of a command without a preset


def fill_experiment(cfg: DictConfig) -> None:
    """Set ``cfg.mlflow.experiment`` where it is null: the preset's name (from ``cfg.hydra``'s
    choices), else `DEFAULT_EXPERIMENT`. A config without ``mlflow`` or ``hydra`` is left
    as it is."""
    if "mlflow" not in cfg or cfg.mlflow.get("experiment") is not None or "hydra" not in cfg:
        return
    preset = cfg.hydra.runtime.choices.get(catalog.PRESET_GROUP)
    cfg.mlflow.experiment = str(preset) if preset else DEFAULT_EXPERIMENT


def name_the_experiment() -> None:
    """Hydra's config loader fills ``mlflow.experiment`` (`fill_experiment`) at the end of
    each composition. Hydra 1.3 has no hook for it (``Callback.on_compose_config`` is not in a
    1.3 release), so its ``load_configuration`` is wrapped, as `sweeps.config.schema` and
    `sweeps.sweep.compose_once` adapt other parts of it. Idempotent."""
    from sweeps import compat

    compat.wrap_load_configuration(fill_experiment, "fills_experiment")


def preset_names(config_dir: str | Path | None = None) -> list[str]:
    """The presets of ``conf/experiment/`` and of ``config_dir/experiment/`` (a user's
    ``--config-dir``), sorted."""
    sources = [{"path": str(catalog.CONF_DIR), "schema": "file"}]
    if config_dir is not None:
        sources.append({"path": str(Path(config_dir).resolve()), "schema": "file"})
    return [o.name for o in catalog.options(sources) if o.group == catalog.PRESET_GROUP]
