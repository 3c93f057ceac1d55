"""Errors that point at what the user wrote, and the rate the user chose wins: each case a real
sweep (``python -m sweeps`` through its entry point, in-process) from a user's ``--config-dir``
folder written under tmp_path, against a real sqlite store.

- an optimizer option that sets both ``lr`` and ``base_lr`` is named by the option the user chose;
- the user's optimizer option with ``lr:`` under a preset whose ``base_lr`` was for the preset's
  own optimizer trains at the user's rate, and the job's lr line says why;
- a data root without its folders stops the sweep in its pre-flight, before any run opens;
- a model whose output does not fit the targets stops before training, naming both shapes;
- a misspelt ``DataSpec.task`` is one line naming what works.
"""
from __future__ import annotations

import math
import time

import pytest

from conftest import cli_in_process, runs, store

TINY = ["device=cpu", "epochs=1"]


def _lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("sweeps: error:")]


def _one_line(proc) -> str:
    """The sweep's single error line; asserts exit 2, no traceback."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = _lines(proc)
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _no_runs(cwd, experiment: str = "sweeps") -> None:
    client = store(cwd)
    exp = client.get_experiment_by_name(experiment)
    assert exp is None or not client.search_runs([exp.experiment_id])


MYNET = """
    import math
    from torch import nn

    class MyNet(nn.Module):
        def __init__(self, in_shape, num_outputs, outputs=3):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(in_shape), outputs))

        def forward(self, x):
            return self.net(x)
"""


# ── 1, 2: the learning rate ─────────────────────────────────────────────────────────────────
def test_both_rates_in_the_users_option_are_named_by_that_option(tmp_path, user_folder):
    """``conf/optimizer/miniadam_both.yaml`` sets lr and base_lr: the line names the option the
    user chose (not the class's name) and its file."""
    user_folder({"conf/optimizer/miniadam_both.yaml": """
        _target_: torch.optim.Adam
        _partial_: true
        lr: 0.001
        base_lr: 0.01
    """})
    proc = cli_in_process(["--config-dir", "conf", "-m", "optimizer=miniadam_both", "batch=16,64",
                           "dataset=synthetic", "dataset.shape=[1,8,8]", *TINY], tmp_path)
    line = _one_line(proc)
    assert "optimizer=miniadam_both sets both lr: 0.001 and base_lr: 0.01" in line, line
    assert "miniadam_both.yaml" in line and "keep one" in line, line
    _no_runs(tmp_path)


def test_both_rates_on_the_command_line_name_the_command_line(tmp_path):
    proc = cli_in_process(["-m", "optimizer.lr=0.1", "optimizer.base_lr=0.2", "batch=16,64", "dataset=synthetic",
                           "dataset.shape=[1,8,8]", *TINY], tmp_path)
    line = _one_line(proc)
    assert "optimizer=sgd: the command line sets both lr: 0.1 and base_lr: 0.2" in line, line


def test_the_users_optimizer_under_a_preset_trains_at_its_own_lr(tmp_path, user_folder):
    """``+experiment=diabetes optimizer=mysgd``: the preset's ``optimizer.base_lr: 0.01`` was for
    its own Adam; mysgd's ``lr: 0.003`` is the rate of both jobs, and each job's lr line says so."""
    user_folder({"conf/optimizer/mysgd.yaml": """
        _target_: torch.optim.SGD
        _partial_: true
        lr: 0.003
    """})
    proc = cli_in_process(["--config-dir", "conf", "-m", "+experiment=diabetes", "optimizer=mysgd", "batch=16,64",
                           "epochs=1", "dataset.train_size=64", "dataset.test_size=16"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = "lr 0.003 (optimizer=mysgd's lr, as written; the preset's base_lr 0.01 was for its own optimizer)"
    jobs = [r for r in runs(tmp_path, "diabetes") if r.data.tags.get("sweeps.kind") != "sweep"]
    assert sorted(int(r.data.metrics["batch"]) for r in jobs) == [16, 64]
    for run in jobs:
        assert run.data.tags["outcome"] == "ok"
        assert math.isclose(run.data.metrics["lr"], 0.003)
        assert run.data.params["optimizer._target_"] == "torch.optim.SGD"
        assert run.data.tags["job.lr_source"] == line  # the console's "batch 16, lr ..." line prints the same text


def test_a_presets_own_optimizer_keeps_its_rate(tmp_path):
    """The preset's base_lr applies to the preset's own optimizer: nothing set aside, no note."""
    from conftest import compose
    from sweeps.config import complete, describe_lr

    cfg = complete(compose(["+experiment=diabetes"]), [])
    assert cfg.optimizer.base_lr == 0.01 and cfg.optimizer.get("lr") is None
    assert describe_lr(cfg, 32) == (0.01, "lr 0.01 = base_lr 0.01 (none)")


# ── 3: data roots, checked before any job ──────────────────────────────────────────────────
def test_a_missing_imagefolder_root_stops_the_sweep_before_any_run(tmp_path):
    started = time.monotonic()
    proc = cli_in_process(["-m", "dataset=imagefolder", "dataset.root=/no/such/dir", "batch=16,32", *TINY], tmp_path)
    elapsed = time.monotonic() - started
    line = _one_line(proc)
    assert line.startswith("sweeps: error: job dataset=imagefolder dataset.root=/no/such/dir"), line
    assert "dataset.root=/no/such/dir" in line and "does not exist" in line and "train/" in line, line
    assert elapsed < 5, elapsed
    _no_runs(tmp_path)


def test_an_imagefolder_root_without_val_names_what_it_lacks(tmp_path):
    (tmp_path / "imgs" / "train" / "a").mkdir(parents=True)
    proc = cli_in_process(["-m", "dataset=imagefolder", "dataset.root=imgs", "batch=16,32", *TINY], tmp_path)
    line = _one_line(proc)
    assert "dataset.root=imgs" in line and "has no val/ folder" in line, line
    _no_runs(tmp_path)


def test_the_data_root_check_respects_if_missing_skip_and_other_datasets():
    from omegaconf import OmegaConf

    from sweeps.errors import UsageError
    from sweeps.sweep.check import check_data_root

    folder = {"_target_": "sweeps.data.builtin.imagefolder", "root": "/no/such/dir", "name": "imagefolder"}
    check_data_root(OmegaConf.create({**folder, "if_missing": "skip"}))
    check_data_root(OmegaConf.create({**folder, "_target_": "mypkg.make_data"}))
    check_data_root(OmegaConf.create({**folder, "root": "???"}))
    with pytest.raises(UsageError, match="does not exist"):
        check_data_root(OmegaConf.create({**folder, "if_missing": "stop"}))


# ── 4: the model's output against the targets ──────────────────────────────────────────────
def test_a_regression_model_with_too_many_outputs_stops_before_training(tmp_path, user_folder):
    user_folder({"mynets/__init__.py": MYNET, "conf/model/mynet.yaml": "_target_: mynets.MyNet\noutputs: 3\n"})
    proc = cli_in_process(["--config-dir", "conf", "-m", "model=mynet", "dataset=diabetes", "batch=16,32", *TINY],
                          tmp_path)
    line = _one_line(proc)
    assert ("model=mynet outputs [2, 3] per batch of 2, the dataset's targets are [2, 1] (regression)") in line, line
    assert "num_outputs=1" in line, line
    exp = store(tmp_path).get_experiment_by_name("sweeps")
    assert exp is None or not [r for r in store(tmp_path).search_runs([exp.experiment_id])
                               if r.data.tags.get("sweeps.kind") != "sweep"]


def test_a_classifier_with_the_wrong_class_count_stops_before_training(tmp_path, user_folder):
    user_folder({"mynets/__init__.py": MYNET, "conf/model/mynet.yaml": "_target_: mynets.MyNet\noutputs: 3\n"})
    proc = cli_in_process(["--config-dir", "conf", "model=mynet", "dataset=synthetic", "dataset.shape=[1,8,8]",
                           "batch=16", *TINY], tmp_path)
    line = _one_line(proc)
    assert ("model=mynet outputs [2, 3] per batch of 2, the dataset's targets are [2] (classification, 10 classes)"
            in line), line
    _no_runs(tmp_path)


def test_a_misspelt_dataspec_problem_is_one_line(tmp_path, user_folder):
    user_folder({
        "userpkg_spec/__init__.py": """
            import torch
            from torch.utils.data import TensorDataset
            from sweeps.data import DataSpec

            def make(seed=0):
                x, y = torch.randn(64, 4), torch.randn(64, 1)
                return TensorDataset(x, y), TensorDataset(x[:16], y[:16]), DataSpec((4,), 1, problem="regresion")
        """,
        "conf/dataset/myspec.yaml": "_target_: userpkg_spec.make\n",
    })
    proc = cli_in_process(["--config-dir", "conf", "dataset=myspec", "model=mlp_tabular", "batch=16", *TINY],
                          tmp_path)
    line = _one_line(proc)
    assert "DataSpec(problem='regresion') is unknown" in line and "'classification'" in line and "'regression'" in line, \
        line


def test_dataspec_takes_its_documented_problems():
    from sweeps.data import DataSpec
    from sweeps.errors import UsageError

    assert DataSpec((4,), 1, "regression").problem == "regression"
    assert DataSpec((1, 8, 8), 10).problem == "classification"
    with pytest.raises(UsageError, match="use problem='classification' or problem='regression'"):
        DataSpec((4,), 1, "Regression")
    with pytest.warns(DeprecationWarning, match="problem="):  # the field's former name still works
        assert DataSpec((4,), 1, task="regression") == DataSpec((4,), 1, "regression")
