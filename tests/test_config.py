"""Composition of every option of every group, presets, and the lr scaling rule."""
from __future__ import annotations

import math

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sweeps import config
from sweeps.errors import UsageError

config.register()
GROUPS = sorted(p.name for p in config.CONF_DIR.iterdir() if p.is_dir())
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((config.CONF_DIR / g).glob("*.yaml"))]


def _compose(overrides=(), return_hydra_config=False):
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def test_every_group_of_the_contract_exists():
    assert {"model", "dataset", "device", "optimizer", "lr_scaling", "schedule", "precision",
            "experiment"} <= set(GROUPS)


@pytest.mark.parametrize("group, option", OPTIONS)
def test_every_option_composes(group, option):
    added = group in ("experiment", "case")  # not in the defaults list: added with +
    cfg = _compose([f"+{group}={option}" if added else f"{group}={option}"])
    if not added:
        assert cfg[group] is not None
    OmegaConf.to_container(cfg, resolve=False)  # the whole tree is well formed


def test_defaults_are_study_1_reference_run():
    cfg = _compose()
    assert cfg.model._target_.endswith("CNN10") and cfg.dataset.name == "cifar10"
    assert cfg.device.name == "auto" and cfg.batch == 128 and cfg.epochs == 100
    assert (cfg.optimizer.name, cfg.optimizer.base_lr, cfg.optimizer.momentum) == ("sgd", 0.1, 0.9)
    assert (cfg.lr_scaling.rule, cfg.lr_scaling.base_batch) == ("linear", 128)
    assert (cfg.schedule.name, list(cfg.schedule.milestones)) == ("multistep", [0.5, 0.8])
    assert cfg.precision.name == "fp32" and cfg.mlflow.experiment == "sweeps"


def test_presets_declare_their_sweep():
    cfg = _compose(["+experiment=offline_mnist"], return_hydra_config=True)
    assert dict(cfg.hydra.sweeper.params) == {"model": "mlp,cnn10", "batch": "64,256"}
    assert cfg.dataset.name == "imagefolder" and cfg.dataset.root.endswith("mnist-10k-imagefolder")


@pytest.mark.parametrize("rule, expected", [("linear", 0.1 * 4), ("sqrt", 0.1 * 2), ("none", 0.1)])
def test_lr_scaling_rules(rule, expected):
    assert math.isclose(config.scaled_lr(0.1, 512, 128, rule), expected)


def test_batch_full_is_the_training_set():
    cfg = _compose(["batch=full"])
    assert config.batch_size(cfg, 354) == 354
    cfg = _compose(["batch=256"])
    assert config.batch_size(cfg, 354) == 256


@pytest.mark.parametrize("override", ["batch=0", "batch=-3", "batch=abc", "batch=1.5", "epochs=0",
                                      "optimizer.base_lr=0", "lr_scaling.base_batch=0", "dataset.test_size=0"])
def test_validate_rejects_with_one_line(override):
    with pytest.raises(UsageError) as e:
        config.validate(_compose([override]))
    key = override.split("=")[0]
    assert key in str(e.value) and "\n" not in str(e.value)
