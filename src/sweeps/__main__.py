"""``python -m sweeps``: see :mod:`sweeps.launch.cli`.

The signal handlers go in before anything heavy is imported: Hydra and the config package take
a second to import, and a SIGINT in that time (Ctrl-C, or ``kill -INT`` of a background job,
which inherits SIGINT ignored) must stop the process, not be lost. It is noted here and acted on
once the command line is loaded (:func:`sweeps.launch.cli.command.cli`: one line, 130 or 143),
not raised into the imports: an exception raised there can land in a finalizer, where Python
swallows it ("Exception ignored in …"), and the process went on with half-built objects
(seen as ``'NoneType' object has no attribute '_invalidate_flags_cache'``, exit 2). A crash in
native code (torch, a BLAS, sqlite, a driver) prints every thread's Python stack on stderr
(:mod:`faulthandler`) instead of ending the sweep with signal 11 and not a word (seen once in a
fault-injection run: scripts/chaos.py seed 1124, fault 120).
"""
import faulthandler
import signal

_EARLY: list[int] = []  # SIGINT/SIGTERM received while the command line was importing, in order


def _noted_early(signum, frame):
    _EARLY.append(signum)


def main() -> None:
    """Entry point (also the ``sweeps`` console script)."""
    faulthandler.enable()  # SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL: the stacks, then the usual death
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _noted_early)  # until the CLI installs the sweep's own handlers
    from sweeps.launch.cli.command import cli

    cli(early=_EARLY, process_exits=True)


if __name__ == "__main__":
    main()
