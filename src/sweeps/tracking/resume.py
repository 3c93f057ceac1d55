"""Resume: a stable hash per job config, what an earlier run of it left, and runs nobody closed.

Re-running a sweep skips jobs whose hash already has a finished run (outcome ``ok`` or ``oom``) in
the experiment; a job whose last run was killed goes on from its checkpoint in that same run.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from sweeps import names
from sweeps.names import DONE, HASH_TAG, HOST_TAG, PID_TAG, RESUMED_TAG  # noqa: F401 (re-exported)
from sweeps.tracking import series
from sweeps.tracking.epochs import JOURNAL, read_journal

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("sweeps")

# Keys that do not change what a job measures: where things are logged or stored, how the
# console looks, and whether to resume. Everything else (num_workers too: it changes timings) counts.
IGNORED = ("mlflow", "log_every_s", "telemetry", "resume", "checkpoint", "dataset.root",
           "dataset.download", "dataset.if_missing")
# Keys added after runs were stored, at their default: not hashed, so an upgrade does not make a
# done job look new (it is still skipped or resumed); set to anything else they count.
# device.threads' null behaves as before it existed; device.malloc_trim_mb's 1024 changes how fast
# a CPU step's memory comes back, not what the job computes.
ADDED_LATER = {"device.threads": None, "device.malloc_trim_mb": 1024}


def config_hash(cfg: DictConfig, ignore: tuple[str, ...] = (), identity: dict[str, str] | None = None) -> str:
    """16 hex digits of SHA-256 over the resolved config minus :data:`IGNORED` and ``ignore``
    keys (and :data:`ADDED_LATER` keys at their default), plus ``identity`` (the data's
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


def owner_tags() -> dict[str, str]:
    """Tags that say which process owns a run, so a later start can tell if it died."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def mark_stale(client: MlflowClient, experiment_id: str, checkpoint_dir: str | Path | None = None) -> int:
    """Close runs left RUNNING by a process of this host that no longer exists (SIGKILL, power
    loss): status KILLED, ``outcome=killed``. Runs of other hosts are left alone. Returns the count.

    Write-ahead all the way: before a stale run is closed, what its journal
    (``<checkpoint_dir>/<config hash>/<run id>/epochs.jsonl``) holds that never reached MLflow
    — the epochs the dead process had printed but not yet sent — is replayed into it, each
    (metric, epoch) once (:meth:`RunWriter.replay` checks the run's history first)."""
    host = socket.gethostname()
    stale = 0
    for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get(HOST_TAG) != host or not tags.get(PID_TAG, "").isdigit():
            continue
        pid = int(tags[PID_TAG])
        if pid == os.getpid() or _alive(pid):
            continue
        if checkpoint_dir is not None and tags.get(HASH_TAG):
            _replay_journal(client, run, Path(checkpoint_dir) / tags[HASH_TAG] / run.info.run_id / JOURNAL)
        client.set_tag(run.info.run_id, names.OUTCOME_TAG, names.KILLED)
        client.set_tag(run.info.run_id, names.ERROR_TAG,
                       f"process {pid} on {host} ended without closing the run (SIGKILL or power loss)")
        client.set_terminated(run.info.run_id, "KILLED")
        stale += 1
    if stale:
        log.info("marked %d run(s) left RUNNING by dead processes as killed", stale)
    return stale


def _replay_journal(client: MlflowClient, run, journal: Path) -> None:
    """Send what ``journal`` holds and ``run`` lacks, on the run's own series stride (from its
    params: :func:`~sweeps.tracking.series.stride_of_run`; never raises: the run is closed anyway)."""
    from sweeps.tracking.writer import RunWriter

    run_id = run.info.run_id
    records = read_journal(journal)
    if not records:
        return
    writer = RunWriter.attach(client, run_id, reopen=False)
    writer.every_epochs = series.stride_of_run(run.data.params)
    try:
        sent = writer.replay(records)
    finally:
        writer.close()
    if sent:
        log.info("run %s: %d metric value(s) of epochs its dead process had not sent, replayed from %s",
                 run_id, sent, journal)


def clear_finished(checkpoint_dir: str | Path, config_hash: str, client: MlflowClient, keep: str) -> None:
    """Remove the folders (checkpoints, journal) of the earlier runs of ``config_hash`` once its
    run ``keep`` ended done (``ok``/``oom``): a killed run's folder serves no resume after that.
    A folder whose run is still RUNNING (another process) is left alone."""
    import shutil

    root = Path(checkpoint_dir) / config_hash
    for folder in root.glob("*") if root.is_dir() else []:
        if folder.name == keep or not folder.is_dir():
            continue
        try:
            if client.get_run(folder.name).info.status == "RUNNING":
                continue
        except Exception:  # noqa: BLE001 (not a run of this store, or the store refuses: keep it)
            continue
        shutil.rmtree(folder, ignore_errors=True)
