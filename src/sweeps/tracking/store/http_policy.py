"""How long a call to a tracking server that stopped answering may wait: MLflow's HTTP retries
bounded, and one try per call once a call has waited out all of them.

MLflow's own HTTP client retries a call 7 times, 2 × 2ⁿ s apart: a refused connection fails after
~250 s (measured: 254 s), and a job's end makes a dozen calls. sweeps sets 5 retries, 0-2-4-8-16 s
apart (`HTTP_RETRIES`, ~30-35 s with urllib3's jitter), so a server restarting within that
is not noticed. Once a call has failed all of them for want of an answer, the store counts as
down in this process (`execute_guarded`): each later call is tried once until one is
answered, so the rest of a job's end costs seconds, not ~30 s a call. The run writer retries its
shipments itself (`sweeps.tracking.follower.delivery.DOWN_S`), journal-first: nothing is lost either way.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

RETRIES_ENV = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
HTTP_RETRIES = {RETRIES_ENV: "5", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
_down: list[float] = []  # monotonic s of the call that found the store down, until a call is answered


def bound_http_retries() -> None:
    """Set `HTTP_RETRIES` in this process's environment where the user has not set them
    (the store process this process starts, and its follower process, inherit them; MLflow reads
    them at each request). Call once at a command's start."""
    for key, value in HTTP_RETRIES.items():
        os.environ.setdefault(key, value)


def quiet_retries() -> None:
    """Mute urllib3's line per retried request (a helper process's stderr is the job's console;
    the run writer says once that the store is busy or down). For sweeps' own helper processes."""
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def unanswered(e: BaseException) -> bool:
    """Whether ``e`` says the server did not answer at all (refused, reset, timed out after every
    retry), not that it answered with an error."""
    return "Max retries exceeded" in str(e) or "Connection" in type(e).__name__


def transient(e: BaseException) -> bool:
    """Whether a failed call is worth retrying: the server or network is busy (unanswered, 5xx, a
    busy server's "QueuePool limit" 400, sqlite's "database is locked"), not the request bad."""
    text = str(e)
    return (unanswered(e) or "QueuePool limit" in text or "database is locked" in text
            or any(f" {code}" in text for code in ("500", "502", "503", "504")))


def gone(e: BaseException | str) -> bool:
    """Whether a failed call (or its error text) says the run or its experiment is deleted: MLflow
    refuses every write to it ("The run … must be in the 'active' state", the SQL store's
    ``_check_run_is_active``, passed on by a tracking server) until someone restores it. Nothing is
    retried, and the job's end says it once (`sweeps.job.finish.finish`)."""
    return "must be in the 'active' state" in str(e)


def execute_guarded(call: Callable[[], Any]) -> Any:
    """``call()`` (one MLflow client call), with MLflow's retries switched off while the store is
    down in this process: from a call that failed `unanswered` until one is answered (or
    refused with an answer). Raises what ``call`` raises. For a process that makes its calls one
    at a time (the store process's loop): the switch is this process's environment."""
    if not _down:
        try:
            return call()
        except Exception as e:
            if unanswered(e):
                _down.append(time.monotonic())
            raise
    saved = os.environ.get(RETRIES_ENV)
    os.environ[RETRIES_ENV] = "0"
    try:
        result = call()
    except Exception as e:
        if not unanswered(e):
            _down.clear()
        raise
    finally:
        if saved is None:
            os.environ.pop(RETRIES_ENV, None)
        else:
            os.environ[RETRIES_ENV] = saved
    _down.clear()
    return result
