"""The study presets: each expands (by Hydra's own sweeper logic) to the study's job list (the smoke
preset runs end to end in tests/test_readme_quickstart.py, as the README's quick start)."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from sweeps import config

config.register()


def expand(preset: str) -> list[list[str]]:
    """The job list ``-m +experiment=PRESET`` launches, from Hydra's BasicSweeper."""
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={preset}"], return_hydra_config=True)
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    overrides = OverridesParser.create().parse_overrides(params)
    (batch,) = BasicSweeper.split_arguments(overrides, None)
    return batch


def test_cifar10_batch_scaling_is_study_1():
    jobs = expand("cifar10_batch_scaling")
    assert len(jobs) == 10
    assert ["model=cnn10", "batch=128"] in jobs and ["model=wrn28_10", "batch=2048"] in jobs
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=cifar10_batch_scaling", "model=wrn28_10", "batch=1024"])
    assert cfg.epochs == 100 and cfg.optimizer.momentum == 0.9 and cfg.optimizer.base_lr == 0.1
    assert config.scaled_lr(cfg.optimizer.base_lr, 1024, cfg.lr_scaling.base_batch, cfg.lr_scaling.rule) == 0.8
    assert [round(f * cfg.epochs) for f in cfg.schedule.milestones] == [50, 80]


@pytest.mark.parametrize("preset, n_jobs, keys", [
    ("phase_times", 3, {"model"}),
    ("timing_methods", 6, {"device", "timing.mode"}),
    ("mnist_devices", 2, {"device"}),
    ("tabular_cpu_vs_gpu", 8, {"device", "dataset.train_size"}),
    ("smoke", 8, {"+case"}),
    ("offline_mnist", 4, {"model", "batch"}),
    ("batch_lr_grid", 12, {"batch", "optimizer.lr"}),
    ("diabetes", 2, {"batch"}),
])
def test_preset_expansion(preset, n_jobs, keys):
    jobs = expand(preset)
    assert len(jobs) == n_jobs and len({tuple(j) for j in jobs}) == n_jobs
    assert {o.split("=")[0] for j in jobs for o in j} == keys


def test_timing_methods_is_resnet50_inference_at_batch_128():
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=timing_methods"])
    assert cfg.task == "inference" and cfg.batch == 128 and cfg.model._target_.endswith("resnet50")
    assert list(cfg.dataset.shape) == [3, 224, 224]
