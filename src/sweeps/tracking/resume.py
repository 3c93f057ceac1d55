"""Resume: a stable hash per job config, and what an earlier run of it left.

Re-running a sweep skips jobs whose hash already has a finished run (outcome ``ok`` or ``oom``) in
the experiment; a job whose last run was killed goes on from its checkpoint in that same run (whose
dead job's journal :mod:`sweeps.tracking.replay` has replayed first).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from sweeps import names
from sweeps.names import DONE, HASH_TAG, HOST_TAG, PID_TAG

if TYPE_CHECKING:
    from mlflow import MlflowClient

# Keys that do not change what a job measures: where things are logged or stored, how the
# console looks, whether to resume, and the price the report puts on device time. Everything else
# (num_workers too: it changes timings) counts.
IGNORED = ("mlflow", "log_every_s", "telemetry", "resume", "checkpoint", "cost", "dataset.root",
           "dataset.download", "dataset.if_missing")
# Keys added after runs were stored, at their default: not hashed, so an upgrade does not make a
# done job look new (it is still skipped or resumed); set to anything else they count.
# device.threads' null behaves as before it existed; device.malloc_trim_mb's 1024 changes how fast
# a CPU step's memory comes back, not what the job computes. optimizer.lr's null: base_lr scaled, as before.
ADDED_LATER = {"device.threads": None, "device.malloc_trim_mb": 1024, "optimizer.lr": None}


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


def run_before_code_change(client: MlflowClient, experiment_id: str, without_code: str, config_hash_: str):
    """The newest earlier run, done (ok/oom) or resumable (killed), of the same job with other user
    code — same ``sweeps.config_hash_without_code``, another ``sweeps.config_hash`` — or None: the
    run :func:`previous_run` would have found had the code not changed."""
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
