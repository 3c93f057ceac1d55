"""Resume is bit-exact with DataLoader workers: a job killed mid-run and resumed from its
checkpoint logs the same loss curve as one that was never stopped, with random augmentation done
in two persistent worker processes (whose RNG a checkpoint cannot hold)."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from PIL import Image

from conftest import run_job, runs, store
from sweeps.job import signals
from sweeps.train.loop import Trainer


def _folder(root) -> None:
    rng = np.random.default_rng(0)
    for split, n in (("train", 24), ("val", 8)):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(n // 2):
                Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(root / split / c / f"{i}.png")


def _curve(cwd, overrides) -> list[float]:
    (run,) = runs(cwd)
    assert run.data.tags["outcome"] == "ok", run.data.tags
    history = store(cwd).get_metric_history(run.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, 6))  # every epoch once
    return [m.value for m in sorted(history, key=lambda m: m.step)], run


@pytest.mark.slow  # two DataLoader worker processes, twice (~5 s)
def test_resume_with_workers_reproduces_the_loss_curve(tmp_path, monkeypatch):
    workers = 2
    _folder(tmp_path / "data")
    overrides = ["model=mlp", "model.hidden=[16]", "dataset=imagefolder", f"dataset.root={tmp_path / 'data'}",
                 "dataset.augment=true", f"dataset.num_workers={workers}", "batch=8", "epochs=5", "device=cpu",
                 "telemetry.interval_s=0", "checkpoint.every_epochs=1", "optimizer.base_lr=0.05"]
    for key in [k for k in os.environ if k.startswith(("MLFLOW_", "SWEEPS_"))]:
        monkeypatch.delenv(key)
    saved = {s: signal.getsignal(s) for s in signals.SIGNALS}
    signals.install()
    try:
        straight, killed = tmp_path / "straight", tmp_path / "killed"
        straight.mkdir(), killed.mkdir()
        monkeypatch.chdir(straight)
        assert run_job(overrides) == "ok"
        expected, _ = _curve(straight, overrides)

        monkeypatch.chdir(killed)
        calls, train_epoch = iter(range(100)), Trainer.train_epoch

        def interrupted(self, *args, **kwargs):
            if next(calls) == 3:  # in epoch 4: epochs 1-3 checkpointed
                os.kill(os.getpid(), signal.SIGINT)
            return train_epoch(self, *args, **kwargs)
        monkeypatch.setattr(Trainer, "train_epoch", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_job(overrides)
        monkeypatch.setattr(Trainer, "train_epoch", train_epoch)
        signals.install()  # the rerun: a new command, whose handlers have not seen a signal
        assert run_job(overrides) == "ok"
        resumed, run = _curve(killed, overrides)
        assert run.data.tags["job.resumed"] == "true"
        assert resumed == expected  # bit for bit, epochs 4 and 5 included
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
