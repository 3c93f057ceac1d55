"""``python -m sweeps``: see :mod:`sweeps.launch.cli`.

The signal handlers go in before anything heavy is imported: torch, Hydra and MLflow take
seconds to import, and a SIGINT in that time (Ctrl-C, or ``kill -INT`` of a background job,
which inherits SIGINT ignored) must stop the process, not be lost. A crash in native code
(torch, a BLAS, sqlite, a driver) prints every thread's Python stack on stderr
(:mod:`faulthandler`) instead of ending the sweep with signal 11 and not a word (seen once in a
fault-injection run: scripts/chaos.py seed 1124, fault 120).
"""
import faulthandler
import signal
import sys


def _interrupted_early(signum, frame):
    name = signal.Signals(signum).name
    print(f"sweeps: interrupted by {name} before any job ran", file=sys.stderr)
    sys.exit(143 if signum == signal.SIGTERM else 130)


def main() -> None:
    """Entry point (also the ``sweeps`` console script)."""
    faulthandler.enable()  # SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL: the stacks, then the usual death
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _interrupted_early)  # until the CLI installs the sweep's own handlers
    from sweeps.launch.cli.command import cli

    cli()


if __name__ == "__main__":
    main()
