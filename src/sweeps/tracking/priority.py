"""The lowest CPU priority for sweeps' own helper processes (the store process, the writer
process), so their work takes cores the training leaves idle.

``nice 19`` alone is not enough where the kernel groups processes by session (Linux's autogroup,
``/proc/sys/kernel/sched_autogroup_enabled``, on by default in desktop and many server kernels):
CPU time is shared between sessions first, and a nice value only counts inside its own session.
A helper started in a session of its own (so a Ctrl-C in the terminal does not reach it) would
then get as much CPU as the whole training process, nice 19 or not; so its session's group gets
nice 19 too (``/proc/self/autogroup``; man 7 sched, "The autogroup feature"). Measured on study 5:
the job's late epochs cost 1.15× its early ones with the store process at nice 19 in its own
autogroup (docs/benchmarks.md).
"""
from __future__ import annotations

import os

LOWEST = 19


def lowest() -> None:
    """Put this process (every thread it starts later too) at nice 19, and its session's autogroup
    too where this process leads that session (started with ``start_new_session``: the group is
    its own, never the terminal's). Never raises: where either is not there or not allowed, it
    stays as it was."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, LOWEST)
    except (AttributeError, OSError):
        pass
    if os.getsid(0) != os.getpid():  # a shared session: its group holds the user's other programs
        return
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(LOWEST))
    except OSError:  # no autogroup (other kernels, other OSes), or not permitted
        pass
