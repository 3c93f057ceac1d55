"""Resume: a stable hash per job config, and what an earlier run of it left.

Re-running a sweep skips jobs whose hash already has a finished run (outcome ``ok`` or ``oom``) in
the experiment; a job whose last run was killed goes on from its checkpoint in that same run (whose
dead job's journal `sweeps.tracking.replay.replay` has replayed first). A config that another live
process is running is not run again: `claim` (one process per config and machine, a lock
file) and `running_run` (a RUNNING run of it in the store, from another host) say so.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from sweeps import names
from sweeps.names import CLAIM_FILE, DONE, HASH_TAG, HOST_TAG, PID_TAG

if TYPE_CHECKING:
    from mlflow import MlflowClient

# Keys that do not change what a job measures: where things are logged or stored, how the
# console looks, whether to resume, and the price the report puts on device time. Everything else
# (num_workers too: it changes timings) counts.
IGNORED = ("mlflow", "log_every_s", "telemetry", "resume", "checkpoint", "cost", "diag", "dataset.root",
           "dataset.download", "dataset.if_missing")
# Keys added after runs were stored, at their default: not hashed, so an upgrade does not make a
# done job look new (it is still skipped or resumed); set to anything else they count.
# device.threads' null behaves as before it existed; device.malloc_trim_mb's 1024 changes how fast
# a CPU step's memory comes back, not what the job computes. optimizer.lr's null: base_lr scaled, as before.
ADDED_LATER = {"device.threads": None, "device.malloc_trim_mb": 1024, "optimizer.lr": None}


def config_hash(cfg: DictConfig, ignore: tuple[str, ...] = (), identity: dict[str, str] | None = None) -> str:
    """16 hex digits of SHA-256 over the resolved config minus `IGNORED` and ``ignore``
    keys (and `ADDED_LATER` keys at their default), plus ``identity`` (the data's
    fingerprint and the hardware measured), as sorted JSON."""
    data: Any = OmegaConf.to_container(cfg, resolve=True)
    data["_identity"] = identity or {}
    for key in (*IGNORED, *ignore):
        node, *rest = key.split(".")
        if rest:
            data.get(node, {}).pop(rest[0], None)
        else:
            data.pop(node, None)
    for key, default in ADDED_LATER.items():
        node, leaf = key.split(".")
        if isinstance(data.get(node), dict) and data[node].get(leaf, default) == default:
            data[node].pop(leaf, None)
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def previous_run(client: MlflowClient, experiment_id: str, config_hash_: str):
    """The newest earlier run of this config that is done (ok/oom) or resumable (killed), or None."""
    runs = client.search_runs([experiment_id], f"tags.`{HASH_TAG}` = '{config_hash_}'",
                              order_by=["attributes.start_time DESC"], max_results=50)
    for run in runs:
        outcome = run.data.tags.get(names.OUTCOME_TAG)
        if outcome in DONE or outcome == names.KILLED:
            return run
    return None


def run_before_code_change(client: MlflowClient, experiment_id: str, without_code: str, config_hash_: str):
    """The newest earlier run, done (ok/oom) or resumable (killed), of the same job with other user
    code — same ``sweeps.config_hash_without_code``, another ``sweeps.config_hash`` — or None: the
    run `previous_run` would have found had the code not changed."""
    runs = client.search_runs([experiment_id], f"tags.`{names.CODELESS_HASH_TAG}` = '{without_code}'",
                              order_by=["attributes.start_time DESC"], max_results=50)
    for run in runs:
        outcome = run.data.tags.get(names.OUTCOME_TAG)
        if run.data.tags.get(HASH_TAG) != config_hash_ and (outcome in DONE or outcome == names.KILLED):
            return run
    return None


def owner_tags() -> dict[str, str]:
    """Tags that say which process owns a run, so a later start can tell if it died."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def clear_finished(checkpoint_dir: str | Path, config_hash: str, client: MlflowClient, keep: str | None) -> None:
    """Remove the folders (checkpoints, journal) of the earlier runs of ``config_hash`` once its
    run ``keep`` ended done (``ok``/``oom``): a killed run's folder serves no resume after that.
    ``keep=None``: a rerun skips the config as done, and every folder goes, the done run's own
    too (its job was killed after it closed the run, before it removed the folder). A folder
    whose run is still RUNNING (another process) is left alone, unless the run is deleted (a
    done run of its config has replaced it)."""
    root = Path(checkpoint_dir) / config_hash
    for folder in root.glob("*") if root.is_dir() else []:
        if folder.name == keep or not folder.is_dir():
            continue
        try:
            info = client.get_run(folder.name).info
            if info.status == "RUNNING" and info.lifecycle_stage != "deleted":
                continue
        except Exception:  # noqa: BLE001 (not a run of this store, or the store refuses: keep it)
            continue
        shutil.rmtree(folder, ignore_errors=True)


class ClaimHeld(Exception):
    """Another live process holds the claim on a config (`claim`); ``holder``: what it wrote
    in the claim file — ``pid`` (int), ``host``, ``since`` (s since the epoch) — or {} where it
    had written nothing yet."""

    def __init__(self, path: Path, holder: dict):
        super().__init__(f"{path} is held by {holder or 'another process'}")
        self.path, self.holder = path, holder


class Claim:
    """A held claim on one config: ``<checkpoint.dir>/<config hash>/claim.lock``, ``flock``-ed
    (exclusive) by this process until `release` (or the process's end, kill -9 included:
    the kernel drops the lock with the process). ``held`` is False where the file could not be
    made or locked (a read-only or full disk, a file system without locks): the job then runs
    unclaimed, as before claims existed. A context manager: released on every way out."""

    def __init__(self, path: Path, fd: int | None):
        self.path, self.fd = path, fd

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        """Remove the claim file and drop the lock (in that order: a process that opened the file
        meanwhile finds it replaced, `claim`); then the config's folder and
        ``checkpoint.dir`` where that left them empty. Never raises; a second call does nothing."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                self.path.unlink()
        except OSError:  # already gone, or not ours to remove: the lock below is what counts
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        for folder in (self.path.parent, self.path.parent.parent):
            try:
                folder.rmdir()
            except OSError:  # not empty (a run's folder), or not ours to remove
                break

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim(checkpoint_dir: str | Path, config_hash_: str) -> Claim:
    """Claim config ``config_hash_`` for this process, atomically: of two processes that try at
    the same moment on one machine (or on hosts sharing ``checkpoint_dir`` with working
    ``flock``), exactly one gets it. The holder writes its pid, host and start time into the
    file (JSON) for the others' message. Call before the job's run opens; release at its end.

    Raises:
        ClaimHeld: another live process holds it.
    """
    path = Path(checkpoint_dir) / config_hash_ / CLAIM_FILE
    for _ in range(50):  # each retry: the holder released (and removed) the file as we opened it
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # its folder was removed by a holder's release meanwhile
            continue
        except OSError:  # read-only, full, or no such disk: no claim, the job runs as before
            return Claim(path, None)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ClaimHeld(path, _holder(path)) from None
        except OSError:  # a file system without locks
            os.close(fd)
            return Claim(path, None)
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if not current:  # we locked a file its holder had just removed: try the one there now
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({**_owner(), "since": time.time()}).encode(), 0)
        except OSError:  # a full disk: the lock holds without the note
            pass
        return Claim(path, fd)
    return Claim(path, None)


def _owner() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname()}


def _holder(path: Path, wait_s: float = 1.0) -> dict:
    """What the holder of claim file ``path`` wrote ({} where it wrote nothing within ``wait_s``:
    it locks the file before it writes)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            found = json.loads(path.read_text() or "null")
        except (OSError, ValueError):
            found = None
        if isinstance(found, dict) or time.monotonic() >= deadline:
            return found if isinstance(found, dict) else {}
        time.sleep(0.05)


def running_run(client: MlflowClient, experiment_id: str, config_hash_: str, holder: dict | None = None):
    """The RUNNING run of config ``config_hash_`` owned by another process, or None: with
    ``holder`` (a `ClaimHeld`'s), the run of that pid on that host; without, the newest one
    whose ``sweeps.host`` is another host (this host's own are covered by `claim`, and its
    dead ones closed by `sweeps.tracking.replay.replay.mark_stale`)."""
    runs = client.search_runs([experiment_id], f"tags.`{HASH_TAG}` = '{config_hash_}' and attributes.status = 'RUNNING'",
                              order_by=["attributes.start_time DESC"], max_results=50)
    host = socket.gethostname()
    for run in runs:
        tags = run.data.tags
        if holder:
            if tags.get(PID_TAG) == str(holder.get("pid")) and tags.get(HOST_TAG) == holder.get("host"):
                return run
        elif tags.get(HOST_TAG) not in (None, host):
            return run
    return None
