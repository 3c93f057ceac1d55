"""What a sweep does not vary is the same in every job it compares: the torch thread count the
small-step rule picks is decided once per sweep for each model × dataset × device and held at every
batch size, said once on the console and logged on every job; the DataLoader's default workers do
not move with ``device.threads``; the ``data.loader`` tag names the thread count the job trained
with. The sweep is the README's own-model example, run for real in-process against a real sqlite
store."""
from __future__ import annotations

import logging
import shutil

import torch

from conftest import REPO, cli_in_process, compose, runs

SWEEP = ["--config-dir", "conf", "-m", "+experiment=waves_batch", "epochs=1", "dataset.n_train=256",
         "dataset.n_test=64"]


def dataset_cfg_for_test(*overrides: str):
    """The ``dataset`` node of the project's real config composed with ``overrides``."""
    return compose(list(overrides)).dataset


LINE = "torch threads: 1 for every batch of conv1d on waves (cpu)"


def test_the_readme_waves_sweep_trains_both_batches_on_the_same_threads(tmp_path, user_folder, monkeypatch):
    """``python -m sweeps --config-dir conf -m +experiment=waves_batch``: conv1d's steps are ~17
    MFLOP at batch 32 and ~34 at 64, across the 20-MFLOP line; both jobs train on the one count
    the batch-32 job decided, log the same ``torch.threads`` and ``data.loader`` tags (naming
    that count), and the choice is said once."""
    from sweeps.train.loop import Trainer

    shutil.copytree(REPO / "examples" / "own_model", tmp_path, dirs_exist_ok=True)
    user_folder({})
    seen, train_epoch = [], Trainer.train_epoch

    def observed(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return train_epoch(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train_epoch", observed)
    torch.set_num_threads(2)  # a process on two threads (tests/process_state.py puts its own back)
    proc = cli_in_process(SWEEP, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(seen) == {1} and torch.get_num_threads() == 2
    jobs = [r for r in runs(tmp_path, "waves") if r.data.tags.get("sweeps.kind") != "sweep"]
    assert sorted(r.data.params["batch"] for r in jobs) == ["32", "64"]
    assert [r.data.tags["outcome"] for r in jobs] == ["ok", "ok"]
    threads = {r.data.tags["job.threads"] for r in jobs}
    loader = {r.data.tags["job.loader"] for r in jobs}
    assert len(threads) == 1 and len(loader) == 1, (threads, loader)
    (threads,), (loader,) = threads, loader
    assert threads.startswith("1 (held for the sweep: conv1d × waves × cpu, decided at batch 32: ")
    assert "MFLOP steps, under 20; device.threads to choose" in threads
    assert loader.endswith("; trains on 1 torch thread(s)"), loader
    text = " ".join((proc.stdout + proc.stderr).split())  # the console wraps long lines
    assert text.count(LINE) == 1, text[-3000:]
    assert "the first job's steps are 17 MFLOP, under 20; device.threads=N to choose" in text


def test_the_held_choice_is_said_once_per_key_and_reused_whatever_the_later_steps(caplog):
    """Within one sweep: the first job of each model × dataset × device decides; later jobs of
    the key get its count and tag even where their own steps would decide otherwise; another
    key, or another sweep, decides anew; a GPU job is left alone."""
    from sweeps.train.speed import SMALL_STEP_FLOPS, threads_held_for_sweep

    cpu = torch.device("cpu")
    torch.set_num_threads(2)
    caplog.set_level(logging.INFO, logger="sweeps")
    small, large = SMALL_STEP_FLOPS / 2, SMALL_STEP_FLOPS * 2
    first = threads_held_for_sweep("s1", "conv1d", "waves", cpu, small, 32)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)  # the job's cpu_threads context puts the count back after it
    assert threads_held_for_sweep("s1", "conv1d", "waves", cpu, large, 64) == first
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    other = threads_held_for_sweep("s1", "mlp", "waves", cpu, large, 32)  # another key: its own choice
    assert torch.get_num_threads() == 2
    assert other.startswith("2 (torch default, held for the sweep: mlp × waves × cpu, decided at batch 32: "
                            "40 MFLOP steps, not under 20")
    assert threads_held_for_sweep("s1", "mlp", "waves", cpu, small, 64) == other and torch.get_num_threads() == 2
    assert threads_held_for_sweep("s1", "conv1d", "waves", torch.device("cuda"), small, 32) is None
    lines = [r.getMessage() for r in caplog.records if "torch threads:" in r.getMessage()]
    assert lines == [
        "  torch threads: 1 for every batch of conv1d on waves (cpu): the first job's steps are 10 MFLOP, "
        "under 20; device.threads=N to choose",
        "  torch threads: 2 (torch default) for every batch of mlp on waves (cpu): the first job's steps are "
        "40 MFLOP, not under 20; device.threads=N to choose"]
    threads_held_for_sweep("s2", "conv1d", "waves", cpu, large, 64)  # a new sweep decides again
    assert torch.get_num_threads() == 2 and len([r for r in caplog.records if "torch threads:" in r.getMessage()]) == 3


def test_device_threads_does_not_move_the_default_workers(monkeypatch):
    """On a CPU the default DataLoader workers come from the cores and torch's default thread
    count for the process, not from the job's count: ``device.threads=1`` (the job's
    ``cpu_threads`` context) leaves them as they are without it; ``dataset.num_workers`` stays
    as written. The tag names the thread count the job trains with."""
    import os

    from sweeps.data import loaders
    from sweeps.placement.device import cpu_threads

    cpu = torch.device("cpu")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(loaders, "_PROCESS_THREADS", 2, raising=False)  # a 2-core process on 2 threads
    torch.set_num_threads(2)
    files = dataset_cfg_for_test("dataset=cifar10")  # decoded files: workers are chosen
    without = loaders.default_workers(files, cpu)
    described = loaders.describe_workers(files, cpu)
    with cpu_threads(1):
        assert loaders.default_workers(files, cpu) == without == 0
        assert loaders.describe_workers(files, cpu).replace("trains on 1 torch", "trains on 2 torch") == described
        assert "trains on 1 torch thread(s)" in loaders.describe_workers(files, cpu)
        assert loaders.default_workers(dataset_cfg_for_test("dataset=cifar10", "dataset.num_workers=3"), cpu) == 3
