"""The device seam (`sweeps.devices`): a kind of device is one module and one YAML. A toy kind
(tests/toy_device.py, tests/conf/device/toy.yaml) runs a real job in-process, and what the job
measured came from the kind: its clock timed the phases, its synchronize bounded the epochs, its
peak is the epochs' memory, and the run's params and tags name it."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from conftest import TEST_CONF, runs
from sweeps import devices, names, state
from sweeps.devices.cpu import CPU
from sweeps.devices.cuda import CUDA
from sweeps.errors import UsageError
from sweeps.placement.device import resolve_device
from toy_device import Toy

TINY = ["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32", "dataset.test_size=8",
        "batch=8", "epochs=2", "telemetry.figure=false", TEST_CONF]


def test_a_toy_kind_runs_a_job_through_the_seam(in_process, tmp_path):
    Toy.calls.clear()
    assert in_process([*TINY, "device=toy"]) == "ok"
    (run,) = runs(tmp_path)
    assert run.data.params["device.name"] == "toy" and run.data.params["device._target_"] == "toy_device.Toy"
    assert "the job runs on toy" in run.data.tags[names.TELEMETRY_TAG]  # "GPU off: the job runs on toy"
    assert Toy.calls["torch_device"] == 1  # placed once, by resolve_device
    steps = 2 * 32 // 8  # two epochs of 4 steps
    assert Toy.calls["clock"] >= steps * len(names.PHASES)  # its clock marked every phase of every step
    assert Toy.calls["synchronize"] >= 2 * 2  # each epoch's wall clock, synchronized at both edges
    assert Toy.calls["peak_mb"] >= 1
    assert run.data.metrics[names.EPOCH_PEAK_MB] == Toy.PEAK_MB  # the kind's peak, not the process RSS
    assert run.data.metrics[names.EPOCH_S] > 0


def test_max_batch_reads_the_kinds_peak(in_process, tmp_path):
    """task=max_batch on the toy kind: each trial's peak is the kind's (its reset before each)."""
    Toy.calls.clear()
    assert in_process([*TINY, "device=toy", "task=max_batch", "max_batch.limit=4"]) == "ok"
    (run,) = runs(tmp_path)
    assert run.data.metrics[names.MAX_BATCH] == 4 and run.data.metrics[names.MAX_BATCH_PEAK_MB] == Toy.PEAK_MB
    assert Toy.calls["reset_peak"] >= 3  # trials at 1, 2 and 4 examples


def test_the_built_in_kinds_answer_outside_a_job():
    """Where no job was placed (or another type's), `of` is the built-in kind of the device's type;
    a type sweeps has no module for gets the plain kind: nothing fused, pinned or timed by events."""
    assert isinstance(devices.of(torch.device("cpu")), CPU)
    assert isinstance(devices.of(torch.device("cuda", 1)), CUDA)
    plain = devices.of(torch.device("mps"))
    assert (plain.name, plain.supports_fused_optimizer(), plain.pin_memory(), plain.events) == ("mps", False, False,
                                                                                                 False)
    assert devices.of(torch.device("cpu")).peak_mb(torch.device("cpu")) is None  # the host's RSS is the CPU's peak


def test_placing_a_job_makes_its_kind_the_devices(monkeypatch):
    monkeypatch.setattr(state.current(), "device_kind", None)
    device = resolve_device(OmegaConf.create({"name": "toy", "_target_": "toy_device.Toy", "index": None}))
    assert device == torch.device("cpu") and isinstance(devices.of(device), Toy)
    assert isinstance(devices.of(torch.device("cuda", 0)), CUDA)  # another type: still the built-in
    resolve_device(OmegaConf.create({"name": "cpu"}))
    assert type(devices.of(device)) is CPU


@pytest.mark.parametrize("target, says", [("toy_device.Nope", "cannot be imported"),
                                          ("collections.Counter", "is not a device kind")])
def test_a_target_that_is_no_kind_is_one_line(target, says):
    with pytest.raises(UsageError, match=says) as e:
        resolve_device(OmegaConf.create({"name": "mine", "_target_": target}))
    assert "\n" not in str(e.value)
