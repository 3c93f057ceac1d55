"""Import: a bundle's runs created in a target MLflow store, each run and each (metric, step) once.

The bundle is checked whole first (`sweeps.bundle.layout.open_verified`): a refused file leaves the
target store as it was — not even created. Then, under an import lock on the store (a file beside
an sqlite store; for a tracking server, one per server URI on this machine), for each run of the
bundle, parents first:

- Identity. An imported run carries the tag `sweeps.import.source_run`: the source run's MLflow
  run id (a random 128-bit uuid, so the same run whichever store or machine it is exported from;
  a run that was itself imported keeps its first source's id). The target experiment is searched
  for it before a run is created, and the run is created with that tag in the same call
  (`MlflowClient.create_run`: one transaction), so a run is never created twice. A run whose id
  the target store holds itself (a bundle imported back where it was exported) is left alone.
- Completion. The tag `sweeps.import.digest` (the run's content digest from the manifest) is set
  last, after its params, metrics, artifacts, tags and status. A run that carries the digest of
  the bundle being imported is skipped whole; one without it (an import stopped by Ctrl-C or
  `kill -9`), or with another digest (a later export of the same run, with more epochs), gets
  what it lacks: the params it has not, the (metric, step) pairs it does not hold (asked with
  `sweeps.tracking.follower.held.held_steps`, the question a replay asks), the artifacts missing
  or of another size, the tags whose value differs, the status.
- Values go through `sweeps.tracking.follower.delivery.Sender` (`log_batch`, 1,000 a call, with
  its retries on a busy store), each with its source timestamp and step. A large import
  (`_auto_workers`) shares the second pass between two spawned processes, each completing runs
  of its own; they die with the importing process (`PR_SET_PDEATHSIG`), so a
  rerun after a `kill -9` never races one of them, and the import lock stays with the importer.

Tag values that name a run of the bundle (`mlflow.parentRunId`, a sweep's `sweeps.skipped.*`)
are rewritten to the run's id in the target store; `sweeps.imported_from` says where a run came
from (host, store URI and run id of its source).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from sweeps import names
from sweeps.bundle import layout
from sweeps.bundle.progress import Progress

if TYPE_CHECKING:
    from mlflow import MlflowClient

PER_CALL = 100  # MLflow's log_batch limit on params, and on tags, per call
LOCK_TIMEOUT_S = 600  # s an import waits for another import into the same store
WORKERS_FROM = 100_000  # metric values to import from which two worker processes share the work ...
WORKERS_FROM_RUNS = 20  # ... where there are this many runs to complete, or more


@dataclass
class Imported:
    """What `import_bundle` did in experiment ``experiment`` of store ``tracking_uri``: runs
    ``created``, ``completed`` (found from an earlier import, given what they lacked),
    ``skipped`` (held whole already), ``native`` (the store's own runs); metric ``values`` and
    ``artifacts`` written; the ``hosts`` the bundle's runs were measured on; ``seconds`` of wall time."""

    experiment: str
    tracking_uri: str
    created: int = 0
    completed: int = 0
    skipped: int = 0
    native: int = 0
    values: int = 0
    artifacts: int = 0
    hosts: list[str] = field(default_factory=list)
    seconds: float = 0.0


def import_bundle(path: str | Path, tracking_uri: str | None = None, experiment: str | None = None,
                  progress: Progress | None = None, workers: int | None = None) -> Imported:
    """Import bundle ``path`` into the store at ``tracking_uri`` (default: `$MLFLOW_TRACKING_URI`,
    else ./mlruns/mlflow.db, created where missing), into experiment ``experiment`` (default: the
    one it was exported from; created where missing). Idempotent, and a rerun after an interrupted
    import completes it (see the module docstring). ``workers``: processes that share the runs'
    values (default `_auto_workers`: 2 for a large import on Linux, else 1: this process).

    Raises:
        BundleError: the file is refused (checked before the store is opened: nothing written).
        UsageError: the target store cannot be opened (one line).
        filelock.Timeout: another import into the store held its lock for `LOCK_TIMEOUT_S`.
        mlflow.exceptions.MlflowException: the store refused a write (a rerun completes the import).
        RuntimeError: a worker process failed or died (a rerun completes the import).
    """
    started = time.monotonic()
    with layout.open_verified(path) as bundle:
        records = _records(bundle)
        try:
            hosts = sorted(bundle.json(layout.MACHINES))
        except (KeyError, ValueError, TypeError):
            hosts = []
        from sweeps.tracking.store.store import open_store, resolve_uri

        source = bundle.manifest.get("source") or {}
        experiment = experiment or source.get("experiment") or "sweeps"
        uri = resolve_uri(tracking_uri)
        client, exp_id = open_store(uri, experiment)
        result = Imported(experiment, uri, hosts=hosts)
        progress = progress or Progress("import", len(records))
        progress.total = len(records)
        try:
            with _import_lock(uri):
                _import_runs(client, exp_id, bundle, records, source, result, progress, workers)
        finally:
            progress.done()
    result.seconds = time.monotonic() - started
    return result


def _records(bundle: layout.Bundle) -> list[tuple[dict, dict]]:
    """``(manifest entry, run.json)`` of each run, parents first, read before the store is opened.

    Raises:
        BundleError: a run.json that is not the record export writes.
    """
    out = []
    for entry in bundle.runs():
        try:
            if not re.fullmatch(r"[0-9A-Za-z_-]+", entry["run_id"]):
                raise ValueError(entry["run_id"])
            record = bundle.json(layout.run_member(entry["run_id"], layout.RUN_JSON))
            artifacts = record.get("artifacts") or []
            if not (isinstance(record["params"], dict) and isinstance(record["tags"], dict)
                    and record["run_id"] == entry["run_id"] and isinstance(entry["digest"], str)
                    and all(isinstance(a["path"], str) and isinstance(a["bytes"], int) for a in artifacts)):
                raise ValueError(entry["run_id"])
        except (KeyError, ValueError, TypeError, AttributeError):
            raise layout.BundleError(f"{bundle.path}: the record of run {entry.get('run_id')!r} cannot be read: "
                                     "export the sweep again") from None
        bad = next((a["path"] for a in artifacts if layout.unsafe(a["path"])), None)
        if bad is not None:
            raise layout.BundleError(f"{bundle.path}: run {entry['run_id']} names an artifact whose path leaves the "
                                     f"folder it unpacks into ({bad!r}): refused, nothing imported")
        members = bundle.manifest["members"]
        needed = [layout.run_member(entry["run_id"], layout.METRICS_JSONL),
                  *(layout.run_member(entry["run_id"], layout.ARTIFACTS, a["path"]) for a in artifacts)]
        if missing := next((m for m in needed if m not in members), None):
            raise layout.BundleError(f"{bundle.path}: run {entry['run_id']} needs {missing!r}, which the bundle "
                                     "lacks: the file was altered; export the sweep again")
        out.append((entry, record))
    return out


@contextmanager
def _import_lock(uri: str) -> Iterator[None]:
    """Hold the import lock of the store at ``uri``: beside an sqlite store's file, else in the
    temporary folder, one per URI (imports into one tracking server from this machine)."""
    from filelock import FileLock

    if uri.startswith("sqlite:///"):
        lock = uri[len("sqlite:///"):].split("?", 1)[0] + ".import.lock"
    else:
        lock = os.path.join(tempfile.gettempdir(), f"sweeps-import-{hashlib.sha256(uri.encode()).hexdigest()[:16]}.lock")
    with FileLock(lock, timeout=LOCK_TIMEOUT_S):
        yield


def _imported(client: MlflowClient, exp_id: str) -> dict[str, Any]:
    """The experiment's imported runs by their source run id (`sweeps.import.source_run`)."""
    found, token = {}, None
    while True:
        page = client.search_runs([exp_id], f"tags.`{names.IMPORT_SOURCE_RUN_TAG}` LIKE '%'", max_results=1000,
                                  page_token=token)
        for run in page:
            found.setdefault(run.data.tags[names.IMPORT_SOURCE_RUN_TAG], run)
        token = page.token
        if not token:
            return found


def _native(client: MlflowClient, run_id: str) -> bool:
    """Whether the store holds run ``run_id`` itself (the bundle came from this store)."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(run_id)
        return True
    except MlflowException:
        return False


def _import_runs(client: MlflowClient, exp_id: str, bundle: layout.Bundle, records: list[tuple[dict, dict]],
                 source: dict, result: Imported, progress: Progress, workers: int | None) -> None:
    """Two passes: every run found or created (so that every tag naming a run of the bundle can
    be rewritten, a parent's naming its children too), then each run given what it lacks and
    marked whole (see the module docstring), here or by `_worker` processes."""
    existing = _imported(client, exp_id)
    ids: dict[str, str] = {}  # source run id → the run's id in the target store
    todo: list[dict] = []  # what pass 2 does, one task a run (plain data: a worker process may do it)
    for entry, record in records:
        source_id = record["run_id"]
        identity = record["tags"].get(names.IMPORT_SOURCE_RUN_TAG) or source_id
        target = existing.get(identity)
        if target is None and _native(client, identity):
            ids[source_id] = identity
            result.native += 1
            progress.step(runs=1)
            continue
        if target is not None and target.data.tags.get(names.IMPORT_DIGEST_TAG) == entry["digest"]:
            ids[source_id] = target.info.run_id
            result.skipped += 1
            progress.step(runs=1)
            continue
        fresh = target is None
        if fresh:
            tags = _tags(record, identity, source, ids)
            run_name = tags.pop("mlflow.runName", None) or record.get("run_name")
            target = client.create_run(exp_id, start_time=record.get("start_time"), tags=tags, run_name=run_name)
            result.created += 1
        else:
            result.completed += 1
        ids[source_id] = target.info.run_id
        todo.append({"entry": entry, "record": record, "identity": identity, "run_id": target.info.run_id,
                     "fresh": fresh, "held_tags": dict(target.data.tags), "held_params": dict(target.data.params)})
    if workers is None:
        workers = _auto_workers(todo)
    if workers > 1 and len(todo) > 1:
        _in_workers(bundle.path, client.tracking_uri, todo, ids, source, result, progress, workers)
        return
    for task in todo:
        values, artifacts = _complete(client, bundle, task, ids, source)
        result.values += values
        result.artifacts += artifacts
        progress.step(runs=1, values=values)


def _complete(client: MlflowClient, bundle: layout.Bundle, task: dict, ids: dict[str, str],
              source: dict) -> tuple[int, int]:
    """Give run ``task["run_id"]`` what it lacks of its bundle record, then its digest (last);
    returns the metric values and artifacts logged."""
    record, tid, fresh = task["record"], task["run_id"], task["fresh"]
    _params(client, tid, record["params"], {} if fresh else task["held_params"])
    values = _metrics(client, tid, bundle, record["run_id"], fresh)
    artifacts = _artifacts(client, tid, bundle, record, fresh)
    tags = _tags(record, task["identity"], source, ids)
    tags.pop("mlflow.runName", None)
    _set_tags(client, tid, {k: v for k, v in tags.items() if task["held_tags"].get(k) != v})
    if record.get("status") and record["status"] != "RUNNING":
        client.set_terminated(tid, record["status"], end_time=record.get("end_time"))
    client.set_tag(tid, names.IMPORT_DIGEST_TAG, task["entry"]["digest"])  # last: the run is whole
    return values, artifacts


def _auto_workers(todo: list[dict]) -> int:
    """2 where this is Linux with 2 or more cores and there are `WORKERS_FROM_RUNS` runs or more
    to complete, holding `WORKERS_FROM` values or more, else 1. Measured on 2 cores
    (docs/bundle.md): 100 runs import ~1.4× as fast in two processes (each run's own calls
    overlap); 10 runs of 16,000 values each import slower (the two wait on the sqlite write lock,
    and each worker costs ~2 s of imports)."""
    if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2 or len(todo) < WORKERS_FROM_RUNS:
        return 1
    return 2 if sum(int(t["entry"].get("values") or 0) for t in todo) >= WORKERS_FROM else 1


def _in_workers(path: Path, uri: str, todo: list[dict], ids: dict[str, str], source: dict, result: Imported,
                progress: Progress, workers: int) -> None:
    """Pass 2 shared by ``workers`` spawned processes (`_worker`), the runs dealt by their
    values so each gets about as many; each worker dies with this process (``kill -9``
    included), so a rerun never races one. Waits for them all.

    Raises:
        RuntimeError: a worker failed or died (its error named; a rerun completes the import).
    """
    import multiprocessing

    shares: list[list[dict]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for task in sorted(todo, key=lambda t: -int(t["entry"].get("values") or 0)):
        i = loads.index(min(loads))
        shares[i].append(task)
        loads[i] += int(task["entry"].get("values") or 0) + 1
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(path), uri, share, ids, source, os.getpid(), queue), daemon=True)
             for share in shares if share]
    for proc in procs:
        proc.start()
    ended, error = 0, None
    try:
        while ended < len(procs) and error is None:
            try:
                message = queue.get(timeout=1.0)
            except Exception:  # queue.Empty: is every worker still there?
                if any(p.exitcode not in (None, 0) for p in procs):
                    error = "an import worker process died (exit status " + ", ".join(
                        str(p.exitcode) for p in procs if p.exitcode not in (None, 0)) + ")"
                continue
            if message[0] == "done":
                result.values += message[1]
                result.artifacts += message[2]
                progress.step(runs=1, values=message[1])
            elif message[0] == "end":
                ended += 1
            else:
                error = message[1]
        if error is not None:
            raise RuntimeError(f"{error}; run the same import again to complete it (nothing is stored twice)")
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=30)


def _worker(path: str, uri: str, tasks: list[dict], ids: dict[str, str], source: dict, parent: int, queue) -> None:
    """A worker process of `_in_workers`: complete ``tasks`` in the store at ``uri`` from the
    bundle at ``path`` (verified again), saying ``("done", values, artifacts)`` per run, then
    ``("end",)``, or ``("error", text)``."""
    _die_with(parent)
    from sweeps.errors import describe
    from sweeps.tracking.store.store import open_client

    try:
        client = open_client(uri)
        with layout.open_verified(path) as bundle:
            for task in tasks:
                queue.put(("done", *_complete(client, bundle, task, ids, source)))
        queue.put(("end",))
    except BaseException as e:  # noqa: BLE001 (said to the parent, which stops the import)
        queue.put(("error", describe(e)))
        raise SystemExit(1) from None


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux ``PR_SET_PDEATHSIG``), and
    end it now where the parent is gone already."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _tags(record: dict, identity: str, source: dict, ids: dict[str, str]) -> dict[str, str]:
    """The run's tags for the target store: the source's, values naming a run of the bundle
    rewritten to its id there, the identity and origin tags added, the digest left for last."""
    tags = {k: (ids.get(v, v) if isinstance(v, str) else str(v)) for k, v in record["tags"].items()}
    tags.pop(names.IMPORT_DIGEST_TAG, None)
    tags[names.IMPORT_SOURCE_RUN_TAG] = identity
    tags.setdefault(names.IMPORTED_FROM_TAG, f"{source.get('host', '?')}: {source.get('tracking_uri', '?')}, "
                                             f"run {record['run_id']}")
    return tags


def _params(client: MlflowClient, run_id: str, params: dict[str, str], held: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(k, str(v)) for k, v in params.items() if k not in held]
    for i in range(0, len(items), PER_CALL):
        client.log_batch(run_id, params=items[i:i + PER_CALL])


def _set_tags(client: MlflowClient, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, len(items), PER_CALL):
        client.log_batch(run_id, tags=items[i:i + PER_CALL])


def _metrics(client: MlflowClient, run_id: str, bundle: layout.Bundle, source_id: str, fresh: bool) -> int:
    """Log the run's metric values the target run lacks (all where ``fresh``: it was created now);
    returns how many were logged.

    Raises:
        Exception: what the store raised after the sender's retries.
    """
    from sweeps.tracking.follower import delivery
    from sweeps.tracking.follower.held import held_steps

    series = [json.loads(line) for line in bundle.read(layout.run_member(source_id, layout.METRICS_JSONL)).splitlines()
              if line.strip()]
    held: dict[str, list[int]] = {}
    if not fresh and series:
        held = held_steps(client, run_id, {s["key"]: sorted(set(s["steps"])) for s in series})
    values: list[delivery.Value] = []
    for s in series:
        skip = set(held.get(s["key"], ()))
        values += [(s["key"], float(v), int(t), int(st)) for st, v, t in zip(s["steps"], s["values"], s["timestamps"])
                   if st not in skip]
    if values:
        error = delivery.sender(client).send(client, run_id, values, say=False)
        if error is not None:
            raise error
    return len(values)


def _artifacts(client: MlflowClient, run_id: str, bundle: layout.Bundle, record: dict, fresh: bool) -> int:
    """Log the run's artifacts the target run lacks or holds at another size; returns how many."""
    wanted = record.get("artifacts") or []
    if not wanted:
        return 0
    held = {} if fresh else _listed(client, run_id)
    todo = [a for a in wanted if held.get(a["path"]) != a["bytes"]]
    if not todo:
        return 0
    with tempfile.TemporaryDirectory(prefix="sweeps-import-") as tmp:
        root = Path(tmp)
        for a in todo:
            # a safe relative path: _records refused any other before the store was opened
            bundle.extract(layout.run_member(record["run_id"], layout.ARTIFACTS, a["path"]), root / a["path"])
        client.log_artifacts(run_id, tmp)
    return len(todo)


def _listed(client: MlflowClient, run_id: str, path: str | None = None) -> dict[str, int | None]:
    """Every artifact file of run ``run_id`` under ``path``: relative path → size in bytes."""
    out: dict[str, int | None] = {}
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            out.update(_listed(client, run_id, info.path))
        else:
            out[info.path] = info.file_size
    return out
