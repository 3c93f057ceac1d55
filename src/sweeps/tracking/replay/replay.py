"""Replay: a later start closes the runs nobody closed, with what their jobs left in the run's
folder — the journal's epochs and the records (params, tags, texts) MLflow lacks, and how a job
ended where the store did not let it close its run (`keep_unclosed`).

A run is stale when it is RUNNING and the process its tags name (``sweeps.pid`` on
``sweeps.host``) is gone: SIGKILL, power loss, a store that went away at the job's end.
`mark_stale` runs at every start, before any job looks for a run to resume.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from sweeps import names
from sweeps.errors import brief
from sweeps.names import DONE, HASH_TAG, HOST_TAG, PID_TAG
from sweeps.tracking.journal import cursor
from sweeps.tracking.writer import records
from sweeps.tracking.follower import series
from sweeps.tracking.journal.cursor import Cursor
from sweeps.tracking.journal.journal import JOURNAL, read_journal
from sweeps.tracking.writer.run_writer import RunWriter

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("sweeps")


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
    loss): status KILLED, ``outcome=killed`` — or, where the job ended but the store did not let
    it close the run (a tracking server gone away) or the process died between its outcome and the
    run's status, as the job ended (`keep_unclosed`, `_ended_done`): a rerun then skips
    it. Runs of other hosts are left alone. Returns the count.

    Write-ahead all the way: before a stale run is closed, what its journal
    (``<checkpoint_dir>/<config hash>/<run id>/epochs.jsonl``) holds that never reached MLflow
    — the epochs the dead process had printed but not yet sent — is replayed into it, each
    (metric, epoch) once (`RunWriter.replay`: from the run's cursor, what the run lacks), and so are
    the params, tags and texts it had journaled but the store never took
    (`sweeps.tracking.writer.records`: ``run.jsonl`` beside the journal). It first waits for the run's
    ship lock (`wait_for_shipper`): a dead job's store process that
    still ingests what the job had sent it finishes before the replay reads what the run lacks."""
    host = socket.gethostname()
    stale = ended = 0
    for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get(HOST_TAG) != host or not tags.get(PID_TAG, "").isdigit():
            continue
        pid = int(tags[PID_TAG])
        if pid == os.getpid() or _alive(pid):
            continue
        folder = Path(checkpoint_dir) / tags[HASH_TAG] / run.info.run_id if checkpoint_dir and tags.get(HASH_TAG) else None
        if folder is not None:
            cursor.wait_for_shipper(folder, run.info.run_id)  # its dead job's store process may still ingest
            _replay_records(client, run, folder)
            _replay_journal(client, run, folder / JOURNAL)
            if _close_ended(client, run.info.run_id, folder):
                ended += 1
                continue
        if _ended_done(client, run.info.run_id, folder):
            ended += 1
            continue
        client.set_tag(run.info.run_id, names.OUTCOME_TAG, names.KILLED)
        client.set_tag(run.info.run_id, names.ERROR_TAG,
                       f"process {pid} on {host} ended without closing the run (SIGKILL or power loss)")
        client.set_terminated(run.info.run_id, "KILLED")
        stale += 1
    if stale:
        log.info("marked %d run(s) left RUNNING by dead processes as killed", stale)
    return stale + ended


ENDED = "ended.json"  # in a run's folder: how its job ended, where the store let it not close the run
UNSENT = "unsent"  # in a run's folder: the artifacts its job's end could not log


def keep_unclosed(folder: str | Path, outcome: str, error: str, status: str, metrics: dict[str, float],
                  artifacts: dict[str, str | bytes], tags: dict[str, str] | None = None) -> Path | None:
    """Keep in the run's ``folder`` (beside its journal) what its job's end could not give a store
    that went away: `ENDED` (``outcome``, one-line ``error``, run ``status``, the job-level
    ``metrics`` logged at step 0, the ``tags`` never sent) and ``artifacts`` (name → text or bytes)
    under `UNSENT`. `mark_stale` closes the run with them on a later start. Returns
    ``folder``, or None where nothing could be written (never raises)."""
    folder = Path(folder)
    try:
        (folder / UNSENT).mkdir(parents=True, exist_ok=True)
        for name, data in artifacts.items():
            target = folder / UNSENT / name
            target.write_bytes(data) if isinstance(data, bytes) else target.write_text(data, encoding="utf-8")
        (folder / ENDED).write_text(json.dumps({"outcome": outcome, "error": error, "status": status,
                                                "metrics": metrics, "tags": tags or {}}), encoding="utf-8")
    except OSError:
        return None
    return folder


def _ended_done(client: MlflowClient, run_id: str, folder: Path | None) -> bool:
    """Close run ``run_id`` as FINISHED (``ok``) or FAILED (``oom``) where its job's end had already
    logged that outcome: the tag is the end's last call before the status, after every value and
    artifact (`sweeps.job.finish.finish`), so only a kill between the two leaves it on
    a RUNNING run. Closed as killed, the run would be resumed and its last epochs trained again.
    Its folder is removed, as the job's end would have. False for any other outcome tag."""
    outcome = client.get_run(run_id).data.tags.get(names.OUTCOME_TAG)  # after the replay of its journaled tags
    if outcome not in DONE:
        return False
    client.set_terminated(run_id, names.RUN_STATUS[outcome])
    log.info("run %s: closed as %s, as its job had ended (killed before it closed the run)", run_id, outcome)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return True


def _close_ended(client: MlflowClient, run_id: str, folder: Path) -> bool:
    """Close run ``run_id`` as its job ended (`keep_unclosed`'s `ENDED` in ``folder``):
    its metrics, artifacts, outcome and status; a done run's folder is then removed. False where
    ``folder`` has no readable `ENDED` (a job that died: closed as killed instead)."""
    try:
        ended = json.loads((folder / ENDED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    writer = RunWriter.attach(client, run_id, reopen=False)
    try:
        writer.log_metrics(ended.get("metrics") or {})
        writer.queue_tags(ended.get("tags") or {})
    finally:
        writer.close()
    if writer.lost:  # left RUNNING: the next start tries again
        log.warning("run %s: its job's last values were refused again; it stays open until the next start", run_id)
        return True
    if (folder / UNSENT).is_dir() and any((folder / UNSENT).iterdir()):
        client.log_artifacts(run_id, str(folder / UNSENT))
    client.set_tag(run_id, names.OUTCOME_TAG, ended["outcome"])
    if ended.get("error"):
        client.set_tag(run_id, names.ERROR_TAG, ended["error"])
    client.set_terminated(run_id, ended["status"])
    log.info("run %s: closed as %s, as its job had ended (the store did not take its end then)", run_id, ended["outcome"])
    if ended["outcome"] in DONE:
        shutil.rmtree(folder, ignore_errors=True)
    return True


def _replay_records(client: MlflowClient, run, folder: Path) -> None:
    """Send the params, tags and texts ``run``'s dead process journaled and the store lacks
    (`sweeps.tracking.writer.records.replay`; never raises: the run is closed anyway)."""
    try:
        sent = records.replay(client, run, folder)
    except Exception as e:  # noqa: BLE001 — a store that refuses them still gets the run closed
        log.warning("run %s: its journaled params, tags and texts could not be replayed: %s", run.info.run_id, brief(e))
        return
    if sent:
        log.info("run %s: %d param(s), tag(s) and text(s) its dead process had not sent, replayed from %s",
                 run.info.run_id, sent, folder / records.RECORDS)


def _replay_journal(client: MlflowClient, run, journal: Path) -> None:
    """Send what ``journal`` holds and ``run`` lacks, on the run's own series stride (from its
    params: `of_run`; never raises: the run is closed anyway)."""
    run_id = run.info.run_id
    records = read_journal(journal)
    if not records:
        return
    writer = RunWriter.attach(client, run_id, reopen=False)
    writer.every_epochs, writer.every_evaluated = series.of_run(run.data.params)
    writer.cursor = Cursor(journal.parent)
    try:
        sent = writer.replay(records)
    finally:
        writer.close()
    if sent:
        log.info("run %s: %d metric value(s) of epochs its dead process had not sent, replayed from %s",
                 run_id, sent, journal)
