"""The job's host heap: glibc's malloc keeps what a training step frees for the next step, instead
of giving it back to the kernel and faulting it in again (``device.malloc_trim_mb``).

Why: glibc gives the free top of its heap back to the kernel once it exceeds ``M_TRIM_THRESHOLD``
and serves blocks above ``M_MMAP_THRESHOLD`` with an ``mmap`` of their own, unmapped when freed.
Both start at 128 KiB and rise only after a large mapped block is freed (man 3 mallopt,
"M_MMAP_THRESHOLD": the dynamic threshold). A training step allocates and frees the same
activations and gradients every step; where that swing exceeds the trim threshold, every step
returns the memory and page-faults it in again. Measured on study 4's CPU job (MLP
784-1000-1000-10, batch 100): its heap top moved ~17 MB up and down every step (``strace -e
trace=memory``: ``brk``), 35,000 minor page faults a second, while a hand loop whose set-up
happened to free a 31-MB temporary (raising both thresholds) made none after its second epoch;
the job's epochs were ~9 % slower (study 4 on 2 cores; `scripts/bench_job_overhead.py
--study4-glibc-default` measures it). PyTorch's Performance Tuning Guide ("CPU specific optimizations", "Switch Memory
allocator") recommends an allocator that reuses memory (jemalloc, TCMalloc, preloaded); this
makes glibc's own do so for the job, with nothing to install.

Both thresholds are process-wide and glibc has no call that reads them back or returns them to
the dynamic mode, so `retained` sets them for a job and puts glibc's initial values back
afterwards (static from then on: the dynamic rise is off for good in this process), then gives the
free heap back (``malloc_trim``). A no-op on other C libraries (musl, macOS, Windows).
"""
from __future__ import annotations

import ctypes
import functools
import os
from contextlib import contextmanager
from typing import Iterator

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
INITIAL = 128 * 1024  # both thresholds' start value (bytes; man 3 mallopt)
MMAP_MAX = 32 * 2**20  # the largest M_MMAP_THRESHOLD glibc accepts on 64-bit (4 MiB × sizeof(long))
MB = 2**20
_static = False  # whether this process set the thresholds (from then on static: see the module docstring)


def glibc_version() -> str | None:
    """This process's glibc as ``"glibc 2.36"``, or None where the C library is another."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or None  # only glibc knows this name
    except (AttributeError, ValueError, OSError):
        return None


@functools.lru_cache(maxsize=1)
def _glibc() -> tuple[ctypes.CDLL, str] | None:
    """This process's C library and `glibc_version`, or None where it is not glibc."""
    version = glibc_version()
    return (ctypes.CDLL(None), version) if version else None


def _retain(trim_mb: int | None) -> tuple[bool, str]:
    """(whether the thresholds were set, the tag text): see `retain`."""
    global _static
    libc = _glibc()
    if libc is None:
        return False, "not glibc: the C library's default"
    lib, version = libc
    if trim_mb is None:
        if _static:  # said, so that a comparison with the default is not read as glibc's own behaviour
            return False, (f"{version}: 128 KiB static (an earlier job of this process kept its heap; glibc's "
                           "dynamic thresholds cannot come back: compare in a process of its own)")
        return False, f"{version} default"
    if not lib.mallopt(M_MMAP_THRESHOLD, MMAP_MAX):
        return False, f"{version} default (mallopt refused)"
    _static = True
    lib.mallopt(M_TRIM_THRESHOLD, min(trim_mb * MB, 2**31 - 1))  # an int in C
    return True, f"{version}: keeps {trim_mb} MB (trim), heap blocks up to {MMAP_MAX // MB} MB"


def retain(trim_mb: int | None) -> str:
    """Set this process's malloc to keep up to ``trim_mb`` MB of freed heap at its top, and to
    serve blocks up to 32 MiB from the heap (larger ones are still mapped and unmapped one by one).
    ``None``: leave glibc as it is. Returns what the job runs with, the run's ``host.malloc`` tag:
    ``"glibc 2.36: keeps 1024 MB (trim), heap blocks up to 32 MB"``, ``"glibc 2.36 default"``,
    ``"not glibc: the C library's default"``, or, for ``None`` in a process where an earlier job
    set them, ``"glibc 2.36: 128 KiB static (...)"``. Never raises."""
    return _retain(trim_mb)[1]


def trim() -> None:
    """Give the free heap back to the kernel (``malloc_trim(0)``: its top and the whole free pages
    inside), so a process RSS read afterwards holds what is in use. No-op where not glibc."""
    libc = _glibc()
    if libc is not None:
        libc[0].malloc_trim(0)


def restore() -> None:
    """Both thresholds back at glibc's initial 128 KiB (static: see the module docstring), then
    `trim`. No-op where not glibc."""
    global _static
    libc = _glibc()
    if libc is not None:
        _static = True
        libc[0].mallopt(M_MMAP_THRESHOLD, INITIAL)
        libc[0].mallopt(M_TRIM_THRESHOLD, INITIAL)
        trim()


@contextmanager
def retained(trim_mb: int | None) -> Iterator[str]:
    """`retain` for one job (yields its tag text), then `restore` where it set
    anything, so the next job of the process starts from a heap given back."""
    changed, text = _retain(trim_mb)
    try:
        yield text
    finally:
        if changed:
            restore()
