"""Failures become outcomes: OOM of any allocator, unavailable devices, plain errors."""
from __future__ import annotations

import torch

from sweeps.job import outcome
from sweeps.errors import DeviceUnavailable


def test_real_cpu_allocator_failure_is_oom():
    try:
        torch.empty(2**60, dtype=torch.uint8)
    except RuntimeError as e:
        assert outcome.classify(e)[0] == outcome.OOM
    else:
        raise AssertionError("the CPU allocator accepted 2**60 bytes")


def test_torch_oom_and_memoryerror_are_oom():
    assert outcome.classify(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))[0] == "oom"
    assert outcome.classify(MemoryError())[0] == "oom"
    assert outcome.classify(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))[0] == "oom"


def test_errors_are_one_line_with_type():
    kind, message = outcome.classify(ValueError("bad shape\n  at layer 3"))
    assert kind == "error" and message == "ValueError: bad shape"
    assert outcome.classify(DeviceUnavailable("device=cuda but none"))[0] == "unavailable"


def test_model_construction_error_is_unwrapped_from_hydra():
    from hydra.errors import InstantiationException

    try:
        try:
            raise ValueError("cnn10 needs image input (C, H, W), got shape (10,)")
        except ValueError as inner:
            raise InstantiationException("Error in call to target 'sweeps.models.CNN10':\nValueError(...)") from inner
    except InstantiationException as e:
        assert outcome.classify(e) == ("error", "ValueError: cnn10 needs image input (C, H, W), got shape (10,)")
