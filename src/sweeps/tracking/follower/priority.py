"""The lowest CPU priority for sweeps' own background work (the follower, which ships the runs'
journals to MLflow: :mod:`sweeps.tracking.follower.follower`), so it takes cores the training leaves idle.

``nice 19`` alone is not enough where the kernel groups processes by session (Linux's autogroup,
``/proc/sys/kernel/sched_autogroup_enabled``, on by default in desktop and many server kernels):
CPU time is shared between sessions first, and a nice value only counts inside its own session.
A helper started in a session of its own (so a Ctrl-C in the terminal does not reach it) would
then get as much CPU as the whole training process, nice 19 or not. So helpers start in the job's
session, in a process group of their own (:func:`own_group`: still out of the terminal's
Ctrl-C), where their nice 19 counts against the training's threads and the job's share goes to
them while the job waits for them; one that leads a session of its own (Python 3.10) puts that
session's group at nice 19 too (``/proc/self/autogroup``; man 7 sched, "The autogroup feature").
Measured on study 5: the job's late epochs cost 1.15× its early ones with the store process at
nice 19 in its own autogroup (docs/benchmarks.md).

On Linux the process is also put under ``SCHED_IDLE`` (man 7 sched: "for running very low
priority background jobs"): a nice-19 task that the scheduler has picked may run on until its
time slice ends while a training thread that wakes up waits for the core (EEVDF's
run-to-parity), whereas any normal task that wakes preempts a ``SCHED_IDLE`` one at once
(kernel/sched/fair.c, ``check_preempt_wakeup_fair``). Torch's OpenMP worker threads sleep and
wake at every parallel region of a sub-millisecond step, so that wake-up latency is what a
helper's ingestion cost the training (measured on a 2-core VM).

Work that a job waits for is not background: a helper at this priority on a machine whose cores
other programs keep busy gets well under 1% of a core, and the job then waits for everyone (a small job's
end took 9–12 s instead of ~0.7 s beside two busy loops: docs/benchmarks.md, "A job
beside busy programs"). An unprivileged process cannot raise itself back (RLIMIT_NICE, 0 by default), so
the lowest priority belongs to a process (or thread) that does background work alone: the
follower (:mod:`sweeps.tracking.follower.follower`), never the store process that answers the job.
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
    """:class:`subprocess.Popen` keyword arguments for a helper process: a process group of its
    own (a Ctrl-C in the terminal reaches the job, not the helper, which ends with the job) in the
    job's session, so Linux's autogroup counts the helper with the job: when the job waits for
    it, the job's share of the CPU goes to the helper, not a share of its own at nice 19 beside
    every other program (docs/benchmarks.md, "A job beside busy programs"). Python 3.10,
    which lacks ``process_group``: a session of its own."""
    return {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
