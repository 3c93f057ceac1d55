"""Export: a sweep's runs read back from an MLflow store (its public API alone) into one bundle file.

For each sweep (a parent run; the latest of the experiment where none is named) the bundle holds
the parent run and its jobs as `sweeps.report.runs.sweep_runs` lists them (its child runs and the
runs it reused), each with its name, status, start and end times, params, tags, every value of
every metric (`MlflowClient.get_metric_history`, each value with its step and timestamp), its
artifacts (`MlflowClient.download_artifacts`), and — where the run's folder is still on this machine
(`<checkpoint.dir>/<config hash>/<run id>/`, a run whose job has not ended done) — its journal and
records as they are. The machines the runs were measured on (`env.*` tags, `sweeps.hardware`,
fingerprint.json) go into machines.json. Nothing of the store is changed.

Cost: one `get_metric_history` call per run and metric key, linear in the values stored
(docs/bundle.md gives the measured figures, scripts/bench_bundle.py measures them).
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from sweeps import names
from sweeps.bundle import layout
from sweeps.bundle.progress import Progress

if TYPE_CHECKING:
    from mlflow import MlflowClient

PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"  # MLflow's switch for its download bars
JOURNAL_FILES = ("epochs.jsonl", "run.jsonl", "shipped.json")  # what a run's folder holds of its journal and records


@dataclass
class Exported:
    """What `export_bundle` wrote: the bundle's ``path``, its sweeps' parent run ids, and how many
    ``runs``, metric ``values`` and ``artifacts`` it holds; ``seconds`` of wall time it took."""

    path: Path
    sweeps: list[str]
    runs: int
    values: int
    artifacts: int
    seconds: float


def export_bundle(experiment: str, out: str | Path, sweeps: Sequence[str] = (), tracking_uri: str | None = None,
                  progress: Progress | None = None, client: MlflowClient | None = None) -> Exported:
    """Write the runs of ``sweeps`` (parent run ids; none: the experiment's latest sweep) of
    experiment ``experiment`` in the store at ``tracking_uri`` (default: `$MLFLOW_TRACKING_URI`,
    else ./mlruns/mlflow.db) to the bundle file ``out`` (a zip; written whole or not at all: a
    partial file beside it is renamed into place at the end). A ``--sweep`` id that names a run
    that is not a sweep's parent exports that run alone.

    Raises:
        LookupError: no such store, experiment or sweep, or a sweep of another experiment (one line).
        OSError: ``out`` cannot be written.
    """
    from sweeps.tracking.store.store import open_client, resolve_uri

    started = time.monotonic()
    uri = resolve_uri(tracking_uri, create=False)
    if client is None:
        client = open_client(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        known = sorted(e.name for e in client.search_experiments())
        raise LookupError(f"no experiment named {experiment!r} in {uri}; --experiment takes one of: "
                          f"{', '.join(known) or 'none (run a sweep first)'}")
    runs, parents = _select(client, exp.experiment_id, experiment, list(sweeps))
    with _no_download_bars():
        return _write(client, uri, experiment, runs, parents, out, progress, started)


@contextmanager
def _no_download_bars() -> Iterator[None]:
    """MLflow's per-download progress bar off (a bar per run would drown the export's own line);
    the environment put back after."""
    saved = os.environ.get(PROGRESS_BAR_ENV)
    os.environ[PROGRESS_BAR_ENV] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(PROGRESS_BAR_ENV, None)
        else:
            os.environ[PROGRESS_BAR_ENV] = saved


def _write(client: MlflowClient, uri: str, experiment: str, runs: list, parents: list[str], out: str | Path,
           progress: Progress | None, started: float) -> Exported:
    progress = progress or Progress("export", len(runs))
    progress.total = len(runs)
    writer = layout.Writer(out)
    entries, machines, values, artifacts = [], {}, 0, 0
    ids = {r.info.run_id for r in runs}
    try:
        for run in runs:
            entry, n_values, n_artifacts = _export_run(client, writer, run, ids, machines)
            entries.append(entry)
            values += n_values
            artifacts += n_artifacts
            progress.step(runs=1, values=n_values)
        writer.add(layout.MACHINES, json.dumps(machines, indent=1, sort_keys=True).encode())
        path = writer.close({
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": {"host": socket.gethostname(), "tracking_uri": _public_uri(uri), "experiment": experiment},
            "sweeps": parents, "runs": entries, "values": values,
        })
    except BaseException:
        writer.abort()
        raise
    finally:
        progress.done()
    return Exported(path, parents, len(entries), values, artifacts, time.monotonic() - started)


def _public_uri(uri: str) -> str:
    """``uri`` without a user name or password in it (a tracking server's ``https://user:pw@host``)."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _select(client: MlflowClient, experiment_id: str, experiment: str, sweeps: list[str]) -> tuple[list, list[str]]:
    """The runs to export, parents first and each once, and the sweeps' parent ids.

    Raises:
        LookupError: a sweep id that is no run of the experiment, or an experiment without a sweep.
    """
    from sweeps.report.runs import find_sweep, sweep_runs

    parents = []
    if not sweeps:
        parents.append(find_sweep(client, experiment))
    for sweep_id in sweeps:
        parent = find_sweep(client, run_id=sweep_id)
        if parent.info.experiment_id != experiment_id:
            raise LookupError(f"--sweep {sweep_id} is a run of another experiment (id {parent.info.experiment_id}), "
                              f"not of {experiment!r}: give that experiment's --experiment")
        parents.append(parent)
    runs, seen = [], set()
    for parent in parents:
        family = [parent]
        if parent.data.tags.get(names.KIND_TAG) == "sweep":
            family += [job.run for job in sweep_runs(client, parent)]
        for run in family:
            if run.info.run_id not in seen:
                seen.add(run.info.run_id)
                runs.append(run)
    by_id = {r.info.run_id: r for r in runs}
    return _parents_first(runs, by_id), [p.info.run_id for p in parents]


def _parents_first(runs: list, by_id: dict[str, Any]) -> list:
    """``runs`` ordered so that each run's parent (where it is among them) comes before it."""
    out, placed = [], set()

    def place(run, depth: int = 0) -> None:
        rid = run.info.run_id
        if rid in placed:
            return
        parent = run.data.tags.get(names.PARENT_RUN_TAG)
        if parent in by_id and depth < 100:
            place(by_id[parent], depth + 1)
        placed.add(rid)
        out.append(run)

    for run in runs:
        place(run)
    return out


def _export_run(client: MlflowClient, writer: layout.Writer, run, ids: set[str],
                machines: dict[str, dict]) -> tuple[dict, int, int]:
    """Add one run's members; returns its manifest entry, its metric values and artifacts."""
    info, data = run.info, run.data
    rid = info.run_id
    series: dict[str, list[tuple[int, float, int]]] = {}  # key → [(step, value, timestamp ms)]
    for key in sorted(data.metrics):
        series[key] = [(m.step, m.value, m.timestamp) for m in client.get_metric_history(rid, key)]
    journal_files = _journal_files(run)
    unshipped = _unshipped(run, series, next((f for f in journal_files if f.name == JOURNAL_FILES[0]), None))
    lines, values = [], 0
    for key in sorted(series):
        history = sorted(series[key])
        values += len(history)
        lines.append(json.dumps({"key": key, "steps": [h[0] for h in history], "values": [h[1] for h in history],
                                 "timestamps": [h[2] for h in history]}))
    shas = [writer.add(layout.run_member(rid, layout.METRICS_JSONL), ("\n".join(lines) + "\n").encode())]
    artifact_list = []
    with tempfile.TemporaryDirectory(prefix="sweeps-export-") as tmp:
        if client.list_artifacts(rid):
            root = Path(client.download_artifacts(rid, "", tmp))
            for file in sorted(p for p in root.rglob("*") if p.is_file()):
                rel = file.relative_to(root).as_posix()
                shas.append(writer.add_file(layout.run_member(rid, layout.ARTIFACTS, rel), file))
                artifact_list.append({"path": rel, "bytes": file.stat().st_size})
                if rel == "fingerprint.json":
                    _machine(machines, data.tags, file)
    _machine(machines, data.tags, None)
    journal = []
    for file in journal_files:
        shas.append(writer.add_file(layout.run_member(rid, layout.JOURNAL, file.name), file))
        journal.append(file.name)
    record = {"run_id": rid, "run_name": info.run_name, "experiment_id": info.experiment_id, "status": info.status,
              "start_time": info.start_time, "end_time": info.end_time, "params": dict(data.params),
              "tags": dict(data.tags), "artifacts": artifact_list, "journal": journal}
    shas.insert(0, writer.add(layout.run_member(rid, layout.RUN_JSON), json.dumps(record, sort_keys=True).encode()))
    parent = data.tags.get(names.PARENT_RUN_TAG)
    entry = {"run_id": rid, "name": info.run_name, "parent": parent if parent in ids else None,
             "values": values, "from_journal": unshipped, "digest": layout.digest("".join(shas).encode())}
    return entry, values, len(artifact_list)


def _machine(machines: dict[str, dict], tags: dict[str, str], fingerprint: Path | None) -> None:
    """Note the machine a run's tags name in ``machines`` (host → its env tags, hardware and,
    once read, its fingerprint.json)."""
    host = tags.get(names.ENV_HOST)
    if not host:
        return
    entry = machines.setdefault(host, {"env": {k: v for k, v in tags.items() if k.startswith(names.ENV_TAG_PREFIX)},
                                       "hardware": [], "fingerprint": None})
    hardware = tags.get(names.HARDWARE_TAG)
    if hardware and hardware not in entry["hardware"]:
        entry["hardware"] = sorted({*entry["hardware"], hardware})
    if fingerprint is not None and entry["fingerprint"] is None:
        try:
            entry["fingerprint"] = json.loads(fingerprint.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass


def _unshipped(run, series: dict[str, list[tuple[int, float, int]]], journal: Path | None) -> int:
    """Add to ``series`` the values of ``journal`` (the run's epochs.jsonl) that the store lacks
    and a replay of the run would send (`sweeps.tracking.follower.series.in_series` on the run's
    own stride, and the journal's last epoch), each with its record's timestamp; returns how many.
    A (metric, epoch) the store holds is never added: the bundle holds each once."""
    if journal is None:
        return 0
    from sweeps.tracking.follower import series as stride
    from sweeps.tracking.journal.journal import read_journal

    records = read_journal(journal)
    every, evaluated = stride.of_run(run.data.params)
    held = {key: {h[0] for h in history} for key, history in series.items()}
    added = 0
    for i, rec in enumerate(records):
        epoch = rec.get("epoch")
        if not isinstance(epoch, int) or not (i == len(records) - 1 or stride.in_series(rec, every, evaluated)):
            continue
        ts = int(rec.get(names.TIMESTAMP_MS) or 0)
        for key, value in rec.items():
            if "/" in key and isinstance(value, (int, float)) and epoch not in held.setdefault(key, set()):
                series.setdefault(key, []).append((epoch, float(value), ts))
                held[key].add(epoch)
                added += 1
    return added


def _journal_files(run) -> list[Path]:
    """The journal and records of ``run``'s folder (`<checkpoint.dir>/<config hash>/<run id>/`,
    ``checkpoint.dir`` from its params, relative to this working directory where it is relative),
    where that folder is here; [] otherwise (the usual case: a job that ended done removed it)."""
    base, chash = run.data.params.get("checkpoint.dir"), run.data.tags.get(names.HASH_TAG)
    if not base or not chash:
        return []
    folder = Path(base) / chash / run.info.run_id
    try:
        return [folder / f for f in JOURNAL_FILES if (folder / f).is_file()]
    except OSError:
        return []
