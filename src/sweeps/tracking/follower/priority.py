"""The lowest CPU priority for sweeps' own background work (the follower, which ships the runs'
journals to MLflow: `sweeps.tracking.follower.follower`), so it takes cores the training leaves idle.

`lowest` sets nice 19 (any POSIX OS), puts the process's own session autogroup at nice 19
where it leads that session (Linux, ``/proc/self/autogroup``; man 7 sched) and, on Linux, moves it
under ``SCHED_IDLE``, so any normal task that wakes preempts it at once. `own_group` gives the Popen
arguments for a helper in the job's session, in a process group of its own (out of the terminal's
Ctrl-C; Python 3.10: a session of its own), so the autogroup counts it with the job. Where a setting is missing or not permitted (other OSes,
other kernels) it is left as it was; nothing raises. An unprivileged process cannot raise itself
back, so this is only for work nothing waits on: never the store process that answers the job
(docs/benchmarks.md, "A job beside busy programs").
"""
from __future__ import annotations

import os
import sys
from typing import Any

LOWEST = 19


def lowest(thread: int = 0) -> None:
    """Put this process (every thread it starts later too) at nice 19 under ``SCHED_IDLE``, and its
    session's autogroup at nice 19 too where this process leads that session (started with
    ``start_new_session``: the group is its own, never the terminal's or the job's). ``thread``: a native
    thread id (``threading.get_native_id()``) to lower that thread alone instead (Linux; its
    process's group is left as it is). Never raises: where any of these is not there or not
    allowed, it stays as it was."""
    try:
        os.setpriority(os.PRIO_PROCESS, thread, LOWEST)
    except (AttributeError, OSError):
        pass
    if not thread and os.getsid(0) == os.getpid():  # a shared session's group holds the user's other programs
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(LOWEST))
        except OSError:  # no autogroup (other kernels, other OSes), or not permitted
            pass
    try:  # Linux: preempted at once by any normal task that wakes (module docstring); set last, so
        os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))  # seeing it means all is set
    except (AttributeError, OSError):
        pass


def own_group() -> dict[str, Any]:
    """`subprocess.Popen` keyword arguments for a helper process: a process group of its
    own (a Ctrl-C in the terminal reaches the job, not the helper, which ends with the job) in the
    job's session, so Linux's autogroup counts the helper with the job: when the job waits for
    it, the job's share of the CPU goes to the helper, not a share of its own at nice 19 beside
    every other program (docs/benchmarks.md, "A job beside busy programs"). Python 3.10,
    which lacks ``process_group``: a session of its own."""
    return {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
