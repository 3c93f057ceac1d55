"""The learning rate a job trains at: ``optimizer.lr`` as written at every batch size,
``optimizer.base_lr`` scaled by ``lr_scaling``, never both (sweeps.config.lr). Configs come from
Hydra's compose API over the real conf/ plus the user's folder; one sweep runs for real."""
from __future__ import annotations

import math

import pytest
from hydra import compose, initialize_config_dir

from conftest import cli_in_process, runs, store
from sweeps import config
from sweeps.config import complete, describe_lr
from sweeps.errors import UsageError

RMS_LR = "_target_: torch.optim.RMSprop\n_partial_: true\nlr: 0.05\n"


def _compose(overrides: list[str], user_conf=None):
    """The job's config as the command line ``overrides`` compose it, with the user's
    ``user_conf`` folder (``--config-dir``) searched too; its own keys completed as a job does,
    with ``overrides`` as the job's command line."""
    config.register()
    search = [f"hydra.searchpath=[file://{user_conf}]"] if user_conf else []
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, *search])
    return complete(cfg, overrides)


def _user_optimizer(tmp_path, text: str):
    (tmp_path / "optimizer").mkdir()
    (tmp_path / "optimizer" / "mine.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize("overrides, lr, text", [
    (["batch=32"], 0.1 * 32 / 128, "lr 0.025 = base_lr 0.1 × 32/128 (linear)"),
    (["batch=512", "lr_scaling=sqrt"], 0.2, "lr 0.2 = base_lr 0.1 × √(512/128) (sqrt)"),
    (["batch=32", "lr_scaling=none", "optimizer.base_lr=0.01"], 0.01, "lr 0.01 = base_lr 0.01 (none)"),
    (["batch=32", "optimizer.lr=0.05"], 0.05, "lr 0.05 (as written, no scaling)"),
    (["batch=1024", "optimizer.lr=0.05"], 0.05, "lr 0.05 (as written, no scaling)"),
], ids=["linear", "sqrt", "none", "lr-at-32", "lr-at-1024"])
def test_the_lr_and_where_it_came_from(overrides, lr, text):
    """sgd's ``base_lr: 0.1`` scaled by each rule; ``optimizer.lr=0.05`` on the command line
    replaces it and is the lr at every batch size."""
    cfg = _compose(overrides)
    assert describe_lr(cfg, cfg.batch) == (pytest.approx(lr), text)


def test_lr_in_the_users_optimizer_is_the_lr_at_every_batch(tmp_path):
    cfg = _compose(["optimizer=mine", "batch=64"], _user_optimizer(tmp_path, RMS_LR))
    assert cfg.optimizer.base_lr is None and describe_lr(cfg, 64)[0] == describe_lr(cfg, 4096)[0] == 0.05


@pytest.mark.parametrize("yaml, overrides, says", [
    (RMS_LR + "base_lr: 0.1\n", ["optimizer=mine"], ["optimizer=mine", "both lr: 0.05 and base_lr: 0.1"]),
    (None, ["optimizer.lr=0.05", "optimizer.base_lr=0.2"], ["optimizer=sgd", "both lr: 0.05 and base_lr: 0.2"]),
    ("_target_: torch.optim.RMSprop\n_partial_: true\n", ["optimizer=mine"], ["optimizer=mine", "no learning rate"]),
    (None, ["optimizer.lr=-1"], ["optimizer.lr=-1", "positive"]),
], ids=["both-in-the-yaml", "both-on-the-command-line", "neither", "negative"])
def test_an_ambiguous_or_missing_lr_is_one_line(tmp_path, yaml, overrides, says):
    with pytest.raises(UsageError) as e:
        config.validate(_compose(overrides, _user_optimizer(tmp_path, yaml) if yaml else None))
    assert "\n" not in str(e.value)
    for part in says:
        assert part in str(e.value)


@pytest.mark.slow  # a sweep over batch: ~3 s on 2 cores
def test_a_sweep_over_batch_trains_at_the_lr_as_written(tmp_path):
    """``lr: 0.05`` in the user's RMSprop YAML, batch 32 and 64 under the default linear rule:
    both jobs log ``lr`` 0.05, their optimizer's lr (``train/lr``, each epoch) is 0.05, and tag
    ``lr.source`` says it was taken as written."""
    (tmp_path / "conf").mkdir()
    _user_optimizer(tmp_path / "conf", RMS_LR)
    proc = cli_in_process(["--config-dir", "conf", "-m", "batch=32,64", "optimizer=mine", "schedule=constant",
                           "model=mlp", "model.hidden=[8]", "dataset=synthetic", "dataset.shape=[1,4,4]",
                           "dataset.train_size=64", "dataset.test_size=16", "device=cpu", "epochs=2",
                           "telemetry.interval_s=0"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = [r for r in runs(tmp_path) if r.data.tags.get("sweeps.kind") != "sweep"]
    assert sorted(r.data.metrics["batch"] for r in jobs) == [32, 64]
    for run in jobs:
        assert run.data.metrics["lr"] == 0.05 and run.data.tags["job.lr_source"] == "lr 0.05 (as written, no scaling)"
        history = store(tmp_path).get_metric_history(run.info.run_id, "train/lr")
        assert len(history) == 2 and all(math.isclose(m.value, 0.05) for m in history)


def test_a_base_lr_job_logs_no_param_for_the_lr_it_does_not_set():
    """A job whose lr comes from ``optimizer.base_lr`` logs that param, and no ``optimizer.lr``
    param reading "None"; a job that sets ``optimizer.lr`` logs it."""
    from sweeps.tracking.store.store import flatten

    scaled = flatten(_compose(["optimizer=sgd", "batch=64"]))
    assert "optimizer.lr" not in scaled and scaled["optimizer.base_lr"] == "0.1"
    fixed = flatten(_compose(["optimizer=sgd", "optimizer.lr=0.05", "optimizer.base_lr=null"]))
    assert fixed["optimizer.lr"] == "0.05" and "optimizer.base_lr" not in fixed
