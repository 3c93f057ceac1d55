"""A job's identity covers its data and the hardware it measures: different data is never taken
for done, the same data under another path is; the identity's parts are tags of the run."""
from __future__ import annotations

import shutil

import numpy as np
from PIL import Image

from conftest import runs
from sweeps import names

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
