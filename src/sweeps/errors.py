"""Exceptions that end a job or a sweep with one line instead of a traceback."""
import signal


def brief(exc: BaseException, limit: int = 200) -> str:
    """``exc``'s text on one line (every run of whitespace, newlines included, one space), at most
    ``limit`` characters: how a library's multi-line message goes into a log line or a tag."""
    return " ".join(str(exc).split())[:limit]


def describe(exc: BaseException, limit: int = 200) -> str:
    """``"<type>: <text on one line>"`` ([`brief`][sweeps.errors.brief]; just the type where the text is empty): how
    every log line, tag and message names a failure that is not the user's to fix."""
    text = brief(exc, limit)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class UsageError(Exception):
    """Bad input the user must fix (a value, a path, missing data).

    The sweep stops at once: its message — one line naming the key or path and what would
    work — is printed and the process exits with status 2. Runs already logged stay logged.
    """


class DataUnavailable(UsageError):
    """The dataset's files are not where ``dataset.root`` says and cannot be downloaded."""


class DeviceUnavailable(Exception):
    """The requested device does not exist here; the job ends with ``outcome=unavailable``."""


class RankFailed(RuntimeError):
    """A data-parallel rank (another process) failed, or died without saying why: raised in the job
    process by `sweeps.job.ddp.first_failure`, its text the rank's own error. A CUDA error
    in that text, sticky or not, happened in the rank's process: the job process's CUDA is fine."""


class Diverged(Exception):
    """The training loss became NaN or infinite; the job ends with ``outcome=diverged``."""


class Interrupted(KeyboardInterrupt):
    """SIGINT as sweeps' handler raises it; the process then exits 130.

    A subclass, so every ``except KeyboardInterrupt`` catches it, but not KeyboardInterrupt
    itself: when exactly that type leaves an ``exec``/``eval`` of source text (dataclasses and
    namedtuple do that while a module imports), CPython sets its "unhandled KeyboardInterrupt"
    flag even where the exception is caught further up, and ``python -m`` then ends the process
    by SIGINT itself (status -2) instead of the 130 it exits with (CPython Python/pythonrun.c
    ``run_eval_code_obj`` compares the type exactly; Modules/main.c ``Py_RunMain`` reads the
    flag; seen in scripts/chaos.py, 1 in ~10 SIGINTs during a job's imports)."""

    signal_name = "SIGINT"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the same cleanup runs; the process then exits 143."""

    signal_name = "SIGTERM"


def signal_exception(signum: int) -> KeyboardInterrupt:
    """The exception SIGINT or SIGTERM is raised as: [`Interrupted`][sweeps.errors.Interrupted] or [`Terminated`][sweeps.errors.Terminated]."""
    return Terminated() if signum == signal.SIGTERM else Interrupted()
