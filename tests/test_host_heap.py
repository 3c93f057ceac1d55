"""The job's host heap (``device.malloc_trim_mb``): with glibc, a training step's freed memory is
kept for the next step instead of being given back and page-faulted in again (study 4's CPU job
made 35,000 faults a second without it); the run says how its heap was kept; the next job of the
process starts from glibc's own thresholds and a heap given back.

glibc has no call that reads its thresholds, so the tests watch what they are for: minor page
faults of this thread (``RUSAGE_THREAD``) while blocks above glibc's initial 128-KiB thresholds are
allocated, touched and freed, step after step. glibc cannot be put back in its dynamic mode: a test
leaves the static initial values (:func:`sweeps.train.host_heap.restore`), as a job does."""
from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from sweeps.train import host_heap

pytestmark = pytest.mark.skipif(host_heap.glibc_version() is None, reason="glibc's malloc only")

BLOCKS, BLOCK_MB, STEPS = 6, 3, 10  # a step's swing: 18 MB, as study 4's MLP (~17 MB)


def faults_per_step() -> float:
    """Minor page faults of this thread per step of allocating, touching and freeing BLOCKS blocks
    of BLOCK_MB MB (torch's CPU allocator: posix_memalign), after 3 warm-up steps (a kept heap
    settles in 1-3: measured 768, 0, 0 faults; another thread's arena 2306, 1152, 768, 0)."""
    import torch

    def step() -> None:
        blocks = [torch.ones(BLOCK_MB * 2**20 // 4) for _ in range(BLOCKS)]  # ones: every page touched
        del blocks
    for _ in range(3):
        step()
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(STEPS):
        step()
    return (resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before) / STEPS


def test_a_retained_heap_serves_each_step_without_page_faults():
    host_heap.restore()  # glibc's initial thresholds, whatever earlier tests left
    given_back = faults_per_step()
    assert given_back >= BLOCKS  # each block mapped afresh: at least one fault (a 4-KiB page each without THP)
    with host_heap.retained(1024) as text:
        assert text.startswith("glibc ") and ": keeps 1024 MB (trim), heap blocks up to 32 MB" in text
        kept = faults_per_step()
    assert kept <= given_back / 10, (kept, given_back)  # the same memory, reused step after step
    assert faults_per_step() >= BLOCKS  # after the job: given back again


def test_null_leaves_glibc_as_it_is_and_says_when_an_earlier_job_did_not():
    """In a fresh process null is glibc's own (dynamic) default; where an earlier job of the
    process kept its heap, the thresholds are static from then on, and null's tag says so (a
    comparison with it belongs in a process of its own)."""
    fresh = subprocess.run([sys.executable, "-c", "from sweeps.train import host_heap; print(host_heap.retain(None))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert fresh == f"{host_heap.glibc_version()} default"
    host_heap.restore()
    with host_heap.retained(None) as text:
        assert text.startswith(f"{host_heap.glibc_version()}: 128 KiB static (an earlier job of this process")
        assert faults_per_step() >= BLOCKS  # nothing kept
