"""Every wrong input is one line, first, exit 2, before anything starts: naming the user's own
option and what would work. Real processes (``python -m sweeps ...`` in an empty folder): the
whole output, stdout and stderr together, is that one line; no ``mlruns/`` is created; a key the
config lacks gets the nearest keys, never Hydra's advice to append it with ``+`` (which runs with
the value ignored)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import compose, run_cli
from sweeps.config.checks import close_keys

HINT = "python -m sweeps --cfg job lists every key"


def _the_one_line(args: list[str], cwd) -> str:
    """The command's whole output, which must be one ``sweeps: error:`` line, exit 2, nothing created."""
    proc = run_cli(args, cwd, timeout=120)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 1, lines
    assert lines[0].startswith("sweeps: error: ")
    assert not (cwd / "mlruns").exists()  # nothing was opened
    return lines[0]


@pytest.mark.parametrize("args, line", [
    (["-m", "epoch=3"], f"sweeps: error: no key epoch; did you mean epochs? (Key 'epoch' not in 'Config'; {HINT})"),
    (["-m", "epoch=3,4"], f"sweeps: error: job epoch=3: no key epoch; did you mean epochs? (Key 'epoch' not in "
                          f"'Config'; {HINT})"),
    (["epoch=3"], f"sweeps: error: no key epoch; did you mean epochs? (Key 'epoch' not in 'Config'; {HINT})"),
    (["dataset.train_sizes=3"], "sweeps: error: no key dataset.train_sizes; did you mean dataset.train_size? "
                                f"(Key 'train_sizes' is not in struct; {HINT})"),
    (["datset.root=x"], "sweeps: error: no key datset.root; did you mean dataset.root? (Key 'datset' not in "
                        f"'Config'; {HINT})"),
    (["lr=0.5"], f"sweeps: error: no key lr; did you mean optimizer.lr? (Key 'lr' not in 'Config'; {HINT})"),
    (["~epoch"], f"sweeps: error: no key epoch; did you mean epochs? ('epoch' does not exist; {HINT})"),
], ids=["sweep-epoch", "sweep-epochs-swept", "epoch", "dataset-train-sizes", "datset-root", "lr", "delete-epoch"])
def test_a_key_the_config_lacks_names_the_nearest_key(tmp_path, args, line):
    assert _the_one_line(args, tmp_path) == line  # and never "To append to your config use +epoch=3"


def test_an_unknown_key_of_a_models_target_says_how_to_pass_it(tmp_path):
    """Under a ``_target_`` part, a key with no near match is an argument of the target: the line
    says ``+model.depth=3`` passes it (that is what works), not that the schema owns it."""
    line = _the_one_line(["model.depth=3"], tmp_path)
    assert line == ("sweeps: error: no key model.depth (Key 'depth' is not in struct; +model.depth=3 passes depth "
                    f"to model's _target_ as an argument; {HINT})")


@pytest.mark.parametrize("args, line", [
    (["+epoch=3"], f"sweeps: error: no key epoch, so nothing reads +epoch=3; did you mean epochs? ({HINT})"),
    (["-m", "+epoch=3"], "sweeps: error: job +epoch=3: no key epoch, so nothing reads +epoch=3; did you mean "
                         f"epochs? ({HINT})"),
    (["+dataset.train_sizes=8"], "sweeps: error: no key dataset.train_sizes, so nothing reads "
                                 f"+dataset.train_sizes=8; did you mean dataset.train_size? ({HINT})"),
], ids=["add-epoch", "sweep-add-epoch", "add-dataset-train-sizes"])
def test_appending_a_near_miss_of_a_key_is_refused_not_ignored(tmp_path, args, line):
    """Hydra's own advice for ``epoch=3``, ``+epoch=3``, ran the job with the value ignored."""
    assert _the_one_line(args, tmp_path) == line


@pytest.mark.parametrize("args, says", [
    (["-m", "batch=abc"], "sweeps: error: job batch=abc: batch='abc' is not valid: use a positive integer "
                          "(e.g. batch=128) or batch=full"),
    (["-m", "batch=-5"], "sweeps: error: job batch=-5: batch=-5 is not valid"),
    (["-m", "optimizer.lr=0.1", "optimizer.base_lr=0.1"], "keep one"),
], ids=["batch-abc", "batch-negative", "lr-and-base-lr"])
def test_a_bad_value_in_a_sweep_is_the_only_line(tmp_path, args, says):
    """No sweep header, no ``store:`` line before it: the values are checked first."""
    line = _the_one_line(args, tmp_path)
    assert line.startswith(says) or says in line


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_a_target_that_does_not_import_is_sweeps_line_alone(tmp_path, multirun):
    """Not Hydra's three lines ("Error getting object at ...", "Are you sure ...") first; found
    before the store is opened."""
    args = ["model._target_=nope.Nope", "dataset=synthetic", "device=cpu"]
    line = _the_one_line(["-m", *args] if multirun else args, tmp_path)
    assert line.endswith("model=cnn10: _target_ nope.Nope cannot be imported (No module named 'nope'); check "
                         "the module is on the path (run from the folder holding it) and the name")


@pytest.mark.parametrize("args", [["-m", "batch=abc"], ["-m", "epoch=3"], ["-m", "+epoch=3"],
                                  ["-m", "model._target_=nope.Nope"]], ids=lambda a: a[-1])
def test_bad_input_imports_neither_torch_nor_mlflow(tmp_path, args):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sweeps", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not loaded & {"torch", "mlflow"}
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("overrides, key, near", [
    ([], "epoch", ["epochs"]),
    ([], "dataset.train_sizes", ["dataset.train_size"]),
    ([], "datset.root", ["dataset.root"]),
    ([], "modle", ["model"]),
    (["dataset=synthetic"], "dataset.shap", ["dataset.shape"]),
    ([], "foo", []),
])
def test_close_keys(overrides, key, near):
    assert close_keys(compose(overrides), key) == near


@pytest.mark.parametrize("args", [["dataset=imagefolder", "dataset.root=/no/such/dir", "device=cpu"],
                                  ["-m", "dataset=imagefolder", "dataset.root=/no/such/dir", "device=cpu"]],
                         ids=["single-run", "sweep"])
def test_a_missing_imagefolder_root_is_one_line_before_anything_starts(tmp_path, args):
    line = _the_one_line(args, tmp_path)  # no mlruns/: said before the store opened, not by the job's data loading
    assert "dataset.root=/no/such/dir (/no/such/dir) does not exist; ImageFolder layout is <root>/train/" in line
