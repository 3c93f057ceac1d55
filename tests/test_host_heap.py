"""The job's host heap (``device.malloc_trim_mb``): glibc accepts the thresholds a job asks for
(``mallopt`` returns success, or the tag would say "refused"), a job's tag says what it ran with,
null leaves a fresh process's glibc as it is and says so where an earlier job set the thresholds.

What the thresholds buy (no page faults when a step's memory is allocated again) is a speed figure
and depends on the process around it — in a test worker another thread's allocation can pin a
shared arena's top, and a loaded CI machine gave a fresh interpreter 230 faults a step kept and 0
after — so it is measured by ``scripts/bench_job_overhead.py --only study4 --study4-glibc-default``
and recorded in docs/benchmarks.md ("Overhead against a hand loop"), not asserted here."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sweeps.train import host_heap

pytestmark = pytest.mark.skipif(host_heap.glibc_version() is None, reason="glibc's malloc only")

PROBE = """
import json
from sweeps.train import host_heap
out = {"fresh null": host_heap.retain(None)}
with host_heap.retained(1024) as text:
    out["kept"] = text
out["largest"] = host_heap.retain(2047)
host_heap.restore()
with host_heap.retained(None) as text:
    out["null after a job"] = text
print(json.dumps(out))
"""


def test_glibc_takes_the_thresholds_and_null_says_what_an_earlier_job_left():
    out = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                    check=True).stdout)  # a fresh process: glibc as it starts
    version = host_heap.glibc_version()
    assert out["fresh null"] == f"{version} default"  # glibc's own dynamic thresholds, untouched
    assert out["kept"] == f"{version}: keeps 1024 MB (trim), heap blocks up to 32 MB"  # mallopt took them
    assert out["largest"] == f"{version}: keeps 2047 MB (trim), heap blocks up to 32 MB"
    # glibc cannot go back to its dynamic thresholds: a later null job is told, not shown "default"
    assert out["null after a job"].startswith(f"{version}: 128 KiB static (an earlier job of this process")
