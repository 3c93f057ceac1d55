"""task=max_batch: doubling then bisection finds the exact boundary, every trial runs the real
training step, a failed trial leaves no memory behind, and the report says "fits up to N"."""
from __future__ import annotations

import gc
import math
import re
import warnings
import weakref

import pytest
import torch
from torch import nn

from conftest import TEST_CONF, cli_in_process, runs, store
from helpers import OOMAbove
from sweeps.report import __main__ as report
from sweeps.data.datasets import DataSpec
from sweeps.train.precision import Precision
from sweeps.tasks.max_batch import Trial, search, step_trial
from sweeps.train.memory import warm_cublas

CPU = torch.device("cpu")
SPEC = DataSpec((1, 8, 8), 10)


def _fake(n: int, calls: list):
    def trial(b: int) -> Trial:
        calls.append(b)
        return Trial(b, b <= n, float(b) if b <= n else None)
    return trial


@pytest.mark.parametrize("n", [1, 2, 3, 37, 64, 65, 1000, 4097])
def test_search_finds_the_exact_boundary(n):
    calls: list[int] = []
    r = search(_fake(n, calls), start=1, limit=1 << 20)
    assert (r.max_batch, r.bound, r.peak_mb) == (n, "exact", float(n))
    assert calls[:3] == [1, 2, 4][:len(calls[:3])]  # doubling first
    assert len(calls) <= 2 * math.ceil(math.log2(n + 1)) + 1 and len(set(calls)) == len(calls)


def test_search_limits_and_nothing_fits():
    calls: list[int] = []
    r = search(_fake(10**9, calls), start=3, limit=100)
    assert (r.max_batch, r.bound) == (100, "limit") and calls == [3, 6, 12, 24, 48, 96, 100]
    r = search(_fake(0, []), start=1, limit=100)
    assert (r.max_batch, r.bound) == (0, "none")
    calls = []  # a start that does not fit: bisect below it
    r = search(_fake(5, calls), start=16, limit=100)
    assert (r.max_batch, r.bound) == (5, "exact") and calls[0] == 16


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


@pytest.mark.parametrize("kind", ["torch", "cpu"])
def test_real_steps_against_a_model_that_ooms_above_37(kind):
    """OOMAbove raises torch.OutOfMemoryError (``torch``) or the CPU allocator's own error
    (``cpu``: 2**60 bytes) above batch 37: the search through real Trainer steps finds 37."""
    model = OOMAbove(SPEC.in_shape, 10, max_batch=37, kind=kind)
    r = search(step_trial(model, SPEC, CPU, Precision(), False, _optimizer), start=1, limit=4096)
    assert (r.max_batch, r.bound) == (37, "exact")
    assert [t.batch for t in r.trials if not t.fits] == [64, 48, 40, 38]
    assert r.peak_mb > 0 and all(p.grad is None for p in model.parameters())


class HoldThenOOM(nn.Module):
    """Computes (and so allocates) its activations, then runs out of memory in the backward pass
    above ``max_batch`` examples; keeps weak references to every activation it made."""

    made: list = []

    def __init__(self, max_batch: int):
        super().__init__()
        self.max_batch = max_batch
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        big = x.flatten(1).repeat(1, 256)  # (B, 16384): a real allocation per trial
        HoldThenOOM.made.append(weakref.ref(big))
        out = self.fc(big[:, :64])
        if len(x) > self.max_batch and self.training:
            return _OOMInBackward.apply(out)
        return out


class _OOMInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise torch.OutOfMemoryError("CUDA out of memory (test: in the backward pass)")


def _live_tensors() -> int:
    gc.unfreeze()  # release_memory freezes survivors, and get_objects() does not list frozen ones
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on torch.distributed's deprecated aliases warns
        warnings.simplefilter("ignore")
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


@pytest.mark.slow  # a dozen search trials and a full gc scan (~5 s)
def test_failed_trials_leave_no_memory_behind():
    """Every tensor a trial allocated — also those held by the frames of a trial that failed in
    its backward pass — is gone when the search ends; gradients and optimizer state too."""
    HoldThenOOM.made.clear()
    model = HoldThenOOM(max_batch=20)
    tensors_before = _live_tensors()
    r = search(step_trial(model, SPEC, CPU, Precision(), False, _optimizer), start=1, limit=1024)
    assert r.max_batch == 20 and any(not t.fits for t in r.trials)
    assert len(HoldThenOOM.made) >= len(r.trials) and all(ref() is None for ref in HoldThenOOM.made)
    assert all(p.grad is None for p in model.parameters())
    assert _live_tensors() <= tensors_before


@pytest.mark.gpu
def test_cuda_search_returns_memory():
    """On a GPU: a real CUDA OOM boundary is found and the allocator is back to the baseline —
    taken once cuBLAS has its workspace (allocated by the first matmul and kept: taken before
    it, the baseline is lower than anything the search can return to)."""
    dev = torch.device("cuda", 0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(dev)
    warm_cublas(dev)
    baseline = torch.cuda.memory_allocated(dev)
    r = search(step_trial(model, SPEC, dev, Precision(), False, _optimizer), start=1024, limit=1 << 26)
    assert r.max_batch > 1024 and r.bound in ("exact", "limit") and r.peak_mb > 0
    assert torch.cuda.memory_allocated(dev) == baseline


@pytest.fixture(scope="module")
def oom_and_search(tmp_path_factory):
    """One sweep: training at batch 64 (OOM: the model fits up to 32) and task=max_batch."""
    cwd = tmp_path_factory.mktemp("max_batch")
    proc = cli_in_process(["-m", "task=train,max_batch", "model=oom_above", "batch=64", "dataset=synthetic",
                           "dataset.shape=[1,8,8]", "dataset.train_size=128", "dataset.test_size=32", "epochs=1",
                           "device=cpu", "telemetry.figure=false", TEST_CONF], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd, proc


def test_max_batch_job_logs_the_boundary(oom_and_search):
    cwd, proc = oom_and_search
    jobs = {r.data.tags["sweeps.overrides"]: r for r in runs(cwd) if "mlflow.parentRunId" in r.data.tags}
    job = jobs["task=max_batch"]
    m = job.data.metrics
    assert job.data.tags["outcome"] == "ok" and job.data.tags["job.max_batch_bound"] == "exact"
    assert m["mem/max_batch"] == 32 and m["mem/max_batch_peak_mb"] > 0 and m["max_batch/trials"] >= 7
    steps = store(cwd).get_metric_history(job.info.run_id, "max_batch/batch")
    assert [s.value for s in sorted(steps, key=lambda s: s.step)][:7] == [1, 2, 4, 8, 16, 32, 64]
    assert "fits up to 32" in proc.stdout


def test_report_says_fits_up_to(oom_and_search, tmp_path):
    cwd, _ = oom_and_search
    assert report.main(["--tracking-uri", store(cwd).tracking_uri, "--out", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert re.search(r"\| 64 \| 0/1 \| [\d.e-]+ \| OOM \(fits up to 32\) \[1\] \|", text)  # lr, then the outcome
    assert "## Largest batch that fits" in text and "| task=max_batch | ok | 32 |" in text
