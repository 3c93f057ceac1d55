"""The job's host heap (``device.malloc_trim_mb``): with glibc, a training step's freed memory is
kept for the next step instead of being given back and page-faulted in again (study 4's CPU job
made 35,000 faults a second without it); the next job of the process starts from a heap given
back; null leaves glibc as it is, and says so where an earlier job set its thresholds.

glibc has no call that reads its thresholds, so the test watches what they are for: minor page
faults while blocks above glibc's initial 128-KiB thresholds are allocated, touched and freed, step
after step. It runs in a fresh process with one torch thread: in a process with many threads (a
test worker) another thread's allocation can sit above the freed blocks in a shared arena, and
the heap top is then kept whatever the thresholds (seen in a CI run: 0 faults after a restore)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sweeps.train import host_heap

pytestmark = pytest.mark.skipif(host_heap.glibc_version() is None, reason="glibc's malloc only")

BLOCKS, BLOCK_MB, STEPS = 6, 3, 10  # a step's swing: 18 MB, as study 4's MLP (~17 MB)

PROBE = f"""
import json, resource, torch
from sweeps.train import host_heap
torch.set_num_threads(1)  # every page touched by this thread

def faults_per_step():  # after 3 warm-up steps: a kept heap settles in 1-3 (measured 768, 0, 0)
    def step():
        blocks = [torch.ones({BLOCK_MB} * 2**20 // 4) for _ in range({BLOCKS})]  # ones: every page touched
        del blocks
    for _ in range(3):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range({STEPS}):
        step()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / {STEPS}

out = {{"fresh null": host_heap.retain(None)}}
with host_heap.retained(1024) as text:
    out["kept"], out["kept text"] = faults_per_step(), text
out["after"] = faults_per_step()
with host_heap.retained(None) as text:
    out["null after"], out["null after text"] = faults_per_step(), text
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh interpreter importing torch: ~8 s (the default run keeps the job-level check)
def test_a_kept_heap_serves_each_step_without_page_faults_and_is_given_back_after_the_job():
    out = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                    check=True).stdout)
    version = host_heap.glibc_version()
    assert out["fresh null"] == f"{version} default"  # glibc's own, untouched
    assert out["kept text"] == f"{version}: keeps 1024 MB (trim), heap blocks up to 32 MB"
    # after the job: each block mapped afresh, at least one fault each (a 4-KiB page each without THP)
    assert out["after"] >= BLOCKS and out["null after"] >= BLOCKS, out
    assert out["kept"] <= out["after"] / 10, out  # the same memory, reused step after step
    assert out["null after text"].startswith(f"{version}: 128 KiB static (an earlier job of this process")
