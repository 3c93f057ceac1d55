"""The study presets: each expands (by Hydra's own sweeper logic) to the study's job list, and
the smoke preset runs end to end (``-m slow``)."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import run_cli, runs
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


@pytest.mark.slow  # the install check, every model and dataset family: ~40 s here
def test_smoke_preset_runs_every_family(tmp_path):
    proc = run_cli(["-m", "+experiment=smoke"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {r.data.tags["sweeps.overrides"]: r for r in runs(tmp_path, "smoke") if "mlflow.parentRunId" in r.data.tags}
    assert len(jobs) == 8
    outcomes = {name: r.data.tags["outcome"] for name, r in jobs.items()}
    # offline: the torchvision sets without files are skipped as unavailable, everything else trains
    assert outcomes.pop("+case=mlp_cifar10") in ("ok", "unavailable")
    assert outcomes.pop("+case=mlp_mnist") in ("ok", "unavailable")
    assert set(outcomes.values()) == {"ok"}
    assert "test/final_rmse" in jobs["+case=mlp_tabular_diabetes"].data.metrics
