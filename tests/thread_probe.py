"""Run in the store process by tests (``RemoteClient.run``; the process finds this folder through
``PYTHONPATH``): what the thread that answers a call runs at. No torch: the store process never
imports it."""
from __future__ import annotations

import os
from typing import Any


def scheduling(client: Any) -> tuple[int, int]:
    """(scheduling policy, nice value) of the calling thread (Linux: both are per thread)."""
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)
