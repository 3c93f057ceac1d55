"""Run in the store process by tests (``RemoteClient.run``; the process finds this folder through
``PYTHONPATH``): what the thread that answers a call runs at. No torch: the store process never
imports it."""
from __future__ import annotations

import os
from typing import Any


def scheduling(client: Any) -> tuple[int, int]:
    """(scheduling policy, nice value) of the calling thread (Linux: both are per thread)."""
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


def answering(client: Any) -> tuple[int, int, int]:
    """(scheduling policy, nice value, process id) of the calling thread."""
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0), os.getpid()


def hold_the_store(client: Any, db: str, run_id: str, key: str) -> tuple[int, int]:
    """Log ``key`` = 1.0 at step 0 to run ``run_id``, then return :func:`scheduling`; run at the
    lowest priority (a background call), first take sqlite's write lock on ``db`` and never let
    it go: a background batch that a busy machine starves mid-transaction."""
    if os.sched_getscheduler(0) == os.SCHED_IDLE:
        import sqlite3
        import time

        held = sqlite3.connect(db, isolation_level=None)
        held.execute("BEGIN IMMEDIATE")
        while held:
            time.sleep(60)
    client.log_metric(run_id, key, 1.0, step=0)
    return scheduling(client)
