"""Exceptions that end a job or a sweep with one line instead of a traceback."""


def brief(exc: BaseException, limit: int = 200) -> str:
    """``exc``'s text on one line (every run of whitespace, newlines included, one space), at most
    ``limit`` characters: how a library's multi-line message goes into a log line or a tag."""
    return " ".join(str(exc).split())[:limit]


def describe(exc: BaseException, limit: int = 200) -> str:
    """``"<type>: <text on one line>"`` (:func:`brief`; just the type where the text is empty): how
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
    process by :func:`sweeps.launch.placement.ddp.first_failure`, its text the rank's own error. A CUDA error
    in that text, sticky or not, happened in the rank's process: the job process's CUDA is fine."""


class Diverged(Exception):
    """The training loss became NaN or infinite; the job ends with ``outcome=diverged``."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the same cleanup runs; the process then exits 143."""

    signal_name = "SIGTERM"
