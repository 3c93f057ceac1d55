"""A job's identity covers its data, the hardware it measures and the user's own code: different
data is never taken for done, the same data under another path is; an edited model runs again;
the identity's parts are tags of the run."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
from PIL import Image

from conftest import cli_in_process, compose, runs
from sweeps import names
from sweeps.provenance import user_code

TINY = ["model=mlp", "model.hidden=[8]", "dataset=imagefolder", "epochs=1", "batch=8", "device=cpu",
        "telemetry.interval_s=0"]


def _folder(root, seed: int, per_class: int = 6):
    """A real ImageFolder (PNG files, train/ and val/, two classes) whose pixels depend on ``seed``."""
    rng = np.random.default_rng(seed)
    for split in ("train", "val"):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(per_class + seed):  # another seed: other files, not just other pixels
                Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(root / split / cls / f"{i}.png")
    return root


def test_other_data_is_never_skipped_and_the_same_data_moved_is(tmp_path, in_process):
    a, b = _folder(tmp_path / "a", 0), _folder(tmp_path / "b", 1)
    assert in_process([*TINY, f"dataset.root={a}"]) == "ok"
    assert in_process([*TINY, f"dataset.root={b}"]) == "ok"  # other files: a job of its own
    moved = tmp_path / "moved"
    shutil.copytree(a, moved)
    assert in_process([*TINY, f"dataset.root={moved}"]) == "skipped"  # the same data: already done
    first, second = runs(tmp_path)
    assert first.data.tags[names.DATA_TAG] != second.data.tags[names.DATA_TAG]
    assert first.data.tags[names.HASH_TAG] != second.data.tags[names.HASH_TAG]
    assert first.data.tags[names.HARDWARE_TAG].endswith(first.data.tags["env.cpu"])


def test_generated_data_is_named_by_its_generator(tmp_path, in_process):
    overrides = ["model=mlp", "model.hidden=[8]", "dataset=synthetic", "dataset.shape=[4]", "dataset.train_size=32",
                 "dataset.test_size=8", "epochs=1", "device=cpu", "telemetry.interval_s=0"]
    assert in_process(overrides) == "ok"
    (run,) = runs(tmp_path)
    assert run.data.tags[names.DATA_TAG] == "generated:synthetic"
    assert names.CODE_TAG not in run.data.tags  # built-in targets only: no user code in the identity



USER_NET = {  # a user's package: the model imports its activation from a helper module beside it
    "userpkg_edit/__init__.py": "from userpkg_edit.model import Net\n",
    "userpkg_edit/model.py": """\
        from torch import nn

        from userpkg_edit.layers import act

        class Net(nn.Module):
            def __init__(self, in_shape, num_outputs):
                super().__init__()
                self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_shape[-1], 8), act(), nn.Linear(8, num_outputs))

            def forward(self, x):
                return self.body(x)
        """,
    "userpkg_edit/layers.py": "from torch import nn\n\n\ndef act():\n    return nn.ReLU()\n",
    "conf/model/net.yaml": "_target_: userpkg_edit.Net\n",
}
USER_ARGS = ["--config-dir", "conf", "model=net", "dataset=synthetic", "dataset.shape=[4]", "dataset.train_size=32",
             "dataset.test_size=8", "batch=8", "epochs=1", "device=cpu", "telemetry.interval_s=0"]


def _git(folder, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=folder,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_an_edited_user_model_runs_again_and_says_which_file_changed(tmp_path, user_folder):
    """The same command after an edit of the user's helper module (not the target's own file)
    runs the job again with one line naming that file; an unedited rerun is skipped. The runs
    carry the code's fingerprint, its files and, in a git work tree, the commit and whether the
    tree was dirty."""
    user_folder(USER_NET)
    has_git = shutil.which("git") is not None
    if has_git:
        _git(tmp_path, "init", "-q")
        _git(tmp_path, "add", "userpkg_edit", "conf")
        _git(tmp_path, "commit", "-q", "-m", "my model")
    assert cli_in_process(USER_ARGS, tmp_path).returncode == 0
    (first,) = runs(tmp_path)
    layers = tmp_path / "userpkg_edit" / "layers.py"
    layers.write_text(layers.read_text().replace("nn.ReLU()", "nn.GELU()"))
    edited = cli_in_process(USER_ARGS, tmp_path)
    assert edited.returncode == 0, edited.stderr[-3000:]
    said = " ".join((edited.stdout + edited.stderr).split())  # the console wraps its lines at 100 columns
    assert said.count("changed since") == 1 and (
        f"userpkg_edit/layers.py changed since run {first.info.run_id} (ok): running again") in said, said
    first, second = runs(tmp_path)
    assert second.data.tags[names.OUTCOME_TAG] == "ok"
    assert first.data.tags[names.HASH_TAG] != second.data.tags[names.HASH_TAG]
    assert first.data.tags[names.CODELESS_HASH_TAG] == second.data.tags[names.CODELESS_HASH_TAG]
    files = [json.loads(run.data.tags[names.CODE_FILES_TAG]) for run in (first, second)]
    assert set(files[0]) == {"userpkg_edit/__init__.py", "userpkg_edit/model.py", "userpkg_edit/layers.py"}
    assert [p for p in files[0] if files[0][p] != files[1][p]] == ["userpkg_edit/layers.py"]
    assert first.data.tags[names.CODE_TAG] != second.data.tags[names.CODE_TAG]
    if has_git:
        head = _git(tmp_path, "rev-parse", "HEAD")
        assert first.data.tags[names.MLFLOW_GIT_COMMIT] == second.data.tags[names.MLFLOW_GIT_COMMIT] == head
        assert (first.data.tags[names.CODE_DIRTY_TAG], second.data.tags[names.CODE_DIRTY_TAG]) == ("false", "true")
    rerun = cli_in_process(USER_ARGS, tmp_path)  # unedited since: skipped, and no line about the code
    assert f"already done in run {second.info.run_id}" in rerun.stdout + rerun.stderr
    assert "changed since" not in rerun.stdout + rerun.stderr and len(runs(tmp_path)) == 2


def test_a_files_hash_is_read_again_only_when_its_mtime_or_size_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(user_code, "_cache", {})
    source = tmp_path / "model.py"
    source.write_text("act = 'relu'\n")
    before = user_code.file_hash(source)
    st = source.stat()
    source.write_text("act = 'gelu'\n")  # the same size ...
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and mtime: the cached hash stands, unread
    assert user_code.file_hash(source) == before
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert user_code.file_hash(source) == hashlib.sha256(b"act = 'gelu'\n").hexdigest() != before


def test_only_code_outside_the_installed_packages_is_the_users():
    """torch, sweeps' own targets: no user code. A test model (``helpers.Slow``, a top-level module
    beside the tests): that one file."""
    assert user_code.user_code(compose(["model=mlp", "dataset=synthetic", "optimizer=sgd"])).files == {}
    assert set(user_code.user_code(compose(["model=slow", "dataset=synthetic"])).files) == {"helpers.py"}


def test_the_changed_files_line_names_a_few_and_counts_the_rest():
    before = {"a.py": "1", "b.py": "2", "c.py": "3"}
    assert user_code.changes(before, {"a.py": "9", "b.py": "2", "c.py": "3"}) == "a.py changed"
    assert user_code.changes(before, {"a.py": "9", "d.py": "4", "e.py": "5"}) == \
        "a.py changed, d.py added, e.py added and 2 more"
    assert user_code.changes(before, before) == "the code changed"
