"""``python -m sweeps``: see `sweeps.sweep`.

The signal handlers go in before anything heavy is imported: Hydra and the config package take
a second to import, and a SIGINT in that time (Ctrl-C, or ``kill -INT`` of a background job,
which inherits SIGINT ignored) must stop the process, not be lost. It is noted here and acted on
once the command line is loaded (`sweeps.sweep.command.cli`: one line, 130 or 143),
not raised into the imports: an exception raised there can land in a finalizer, where Python
swallows it ("Exception ignored in …"), and the process went on with half-built objects
(seen as ``'NoneType' object has no attribute '_invalidate_flags_cache'``, exit 2). A crash in
native code (torch, a BLAS, sqlite, a driver) prints every thread's Python stack on stderr
(`faulthandler`) instead of ending the sweep with signal 11 and not a word.

The process ends without the interpreter's teardown (`exit_now`): once the command is done
and every ``atexit`` hook has run, freeing torch's, MLflow's and scikit-learn's modules object by
object and unloading their native libraries only delays the shell's prompt — by 1.2-1.6 s for a
one-epoch tabular job, and by 0.7 s after a bare ``import torch``, on 2 CPU cores.
"""
import faulthandler
import os
import signal
import sys
import threading

_EARLY: list[int] = []  # SIGINT/SIGTERM received while the command line was importing, in order
POOL_EXIT_S = 5.0  # s the pool's workers get to stop once the sweep is done, before they are killed


def _noted_early(signum, frame):
    _EARLY.append(signum)


def main() -> None:
    """Entry point (also the ``sweeps`` console script)."""
    faulthandler.enable()  # SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL: the stacks, then the usual death
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _noted_early)  # until the CLI installs the sweep's own handlers
    from sweeps.sweep.command import cli

    try:
        cli(early=_EARLY, process_exits=True)
    except SystemExit as e:
        exit_now(e)
    exit_now(SystemExit(0))


def exit_now(end: SystemExit) -> None:
    """End this process as ``raise end`` would, less the interpreter's teardown: the ``atexit``
    hooks run (the store processes' close, logging's flush, MLflow's, coverage's, a user's own),
    stdout and stderr are flushed, and `os._exit` ends it with ``end``'s status (``None``
    → 0; anything but an int printed on stderr → 1, as Python does). What is skipped is only the
    teardown: module globals cleared and ``__del__`` finalizers of objects still alive, C++ static
    destructors, native libraries unloaded. Code that must run when a job's process ends registers
    with `atexit.register`. Where a thread that is not a daemon still runs, Python would wait
    for it: so does this, by raising ``end`` for the usual exit (joblib's process pool, where the
    sweep ran one, is ended first: `_stop_pool`). The same choice as mypy's
    (python/mypy#5569, "Call os._exit() for faster shut down in the normal case"); measured in
    ``scripts/bench_fixed_cost.py --only tabular``."""
    _stop_pool()
    waiting = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    from sweeps import compat

    run_hooks = compat.exit_hooks()  # CPython's; runs each hook once, then forgets them
    if waiting or run_hooks is None:
        raise end
    code = end.code
    if code is not None and not isinstance(code, int):  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
    run_hooks()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or stream: nothing left to say
            pass
    os._exit(0 if code is None else code if isinstance(code, int) else 1)


def _stop_pool() -> None:
    """End the workers of joblib's process pool where this process has one
    (`sweeps.compat.stop_process_pool`, each waited for up to `POOL_EXIT_S`). Never raises."""
    from sweeps import compat

    compat.stop_process_pool(POOL_EXIT_S)


if __name__ == "__main__":
    main()
