"""Bad input stops with one clear line that names the key or path and says what would work."""
from __future__ import annotations

import pytest

from conftest import run_cli, store


def _one_error_line(proc) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sweeps: error:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("override, names, hint", [
    ("batch=0", "batch=0", "positive integer"),
    ("batch=abc", "batch='abc'", "batch=full"),
    ("epochs=0", "epochs=0", "positive integer"),
    ("optimizer.base_lr=-0.1", "optimizer.base_lr=-0.1", "positive"),
])
def test_bad_values(tmp_path, tiny, override, names, hint):
    line = _one_error_line(run_cli(["model=mlp", *tiny, override], tmp_path))
    assert names in line and hint in line


def test_subset_larger_than_the_data(tmp_path):
    line = _one_error_line(run_cli(["model=mlp_tabular", "dataset=diabetes", "dataset.train_size=5000",
                                    "device=cpu", "epochs=1"], tmp_path))
    assert "dataset.train_size=5000" in line and "at most 354" in line


def test_unknown_model_fails_at_composition_with_the_options(tmp_path):
    proc = run_cli(["model=resnet5"], tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == "In 'config': Could not find 'model/resnet5'"
    assert "resnet50" in proc.stderr and "cnn10" in proc.stderr


@pytest.mark.parametrize("override, key", [("model.widht=3", "widht"), ("epochs=abc", "epochs"),
                                           ("dataset.rooot=x", "rooot")])
def test_typos_and_types_fail_at_composition(tmp_path, override, key):
    proc = run_cli([override], tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert key in proc.stderr.splitlines()[0] or key in proc.stderr.splitlines()[1]
    assert not (tmp_path / "mlruns").exists()  # nothing started


def test_missing_imagefolder_root(tmp_path):
    line = _one_error_line(run_cli(["model=mlp", "dataset=imagefolder", f"dataset.root={tmp_path}/nowhere",
                                    "device=cpu", "epochs=1"], tmp_path))
    assert "dataset.root=" in line and "nowhere" in line and "train/" in line


def test_design_card_sweep_without_cifar_stops_at_once(tmp_path):
    """The design card's command, offline and without files: one line, no ten failed runs."""
    proc = run_cli(["-m", "model=cnn10,wrn28_10", "batch=128,256,512,1024,2048"], tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "CIFAR-10 is not under dataset.root=data" in line and "cifar-10-batches-py" in line
    client = store(tmp_path)
    exp = client.get_experiment_by_name("sweeps")
    (parent,) = client.search_runs([exp.experiment_id])  # the parent only: no job run was started
    assert parent.info.status == "FAILED" and "CIFAR-10" in parent.data.tags["sweeps.stopped"]
