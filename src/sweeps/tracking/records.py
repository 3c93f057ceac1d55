"""A run's params, tags, small texts and dataset inputs, journaled: each call that logs them appends one JSON line to the
run's :data:`RECORDS` file (beside its epoch journal, in the run's checkpoint folder) before it is
sent, and a later start replays what the run lacks (:func:`replay`, from
:func:`sweeps.tracking.resume.mark_stale`).

Why: through a store process a job does not wait for a tag or a param to be stored
(:meth:`~sweeps.tracking.writer.RunWriter.set_tags`), and :meth:`RunWriter.queue_tags
<sweeps.tracking.writer.RunWriter.queue_tags>` holds tags until the next batch of metric values.
A job killed (SIGKILL, the OOM killer) between the call and the store taking it lost them; the
line written first survives the process, as the epoch journal does. Replaying is idempotent: a
param MLflow already holds is not sent again (a param's value never changes), a tag only where
the run's value differs, a text only where the run has no artifact of its name, so a dead job's
store process that still ingests its last call stores nothing twice. Texts are journaled up to
:data:`TEXT_MAX` characters (the config and the machine's fingerprint, a short job's CSVs); a long
job's ``epochs.csv`` is not copied: its epochs are in the epoch journal. Dataset inputs are
journaled as the arguments of :func:`sweeps.tracking.inputs.log_datasets` and replayed where the
run has none.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sweeps.tracking import entities, inputs
from sweeps.tracking.store_client import in_store

log = logging.getLogger("sweeps")
RECORDS = "run.jsonl"  # in a run's folder: {"params"/"tags"/"texts": {name: value}} or {"inputs": [args]} per line, in call order
PER_CALL = 100  # MLflow's log_batch limit on params, and on tags, per call
TEXT_MAX = 64 * 1024  # characters: a longer text is sent, not journaled


class RecordLog:
    """Appends a run's params, tags and texts to ``path`` (:data:`RECORDS`), one JSON line per call,
    written to the OS before the call returns (it survives the process, not a power loss). Never
    raises: a folder that cannot be written (read-only, full) switches the log off, and the run's
    values still go to MLflow as before — only without this copy."""

    def __init__(self, path: str | Path):
        self.path, self.off = Path(path), False

    def append(self, kind: str, values: dict[str, Any]) -> None:
        """One line ``{kind: values}`` (``kind``: ``"params"``, ``"tags"`` or ``"texts"``: artifact
        name → text, left out above :data:`TEXT_MAX` characters; values as strings)."""
        if kind == "texts":
            values = {k: v for k, v in values.items() if len(v) <= TEXT_MAX}
        if values:
            self._write({kind: {k: str(v) for k, v in values.items()}})

    def append_inputs(self, args: list) -> None:
        """One line ``{"inputs": args}``: the arguments of
        :func:`~sweeps.tracking.inputs.log_datasets` after its client and run id (JSON values)."""
        self._write({"inputs": list(args)})

    def _write(self, record: dict) -> None:
        if self.off:
            return
        line = json.dumps(record) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as e:
            self.off = True
            log.debug("the run's params and tags are not journaled (%s): %s", self.path, e)


def read(path: str | Path) -> dict[str, Any]:
    """``{"params": …, "tags": …, "texts": …, "inputs": …}`` that :data:`RECORDS` at ``path``
    holds, a tag or text logged twice at its last value, ``inputs`` the last dataset inputs'
    arguments (None: none); empty where there is no file. A torn last line (the process died
    writing it) is skipped."""
    out: dict[str, Any] = {"params": {}, "tags": {}, "texts": {}, "inputs": None}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        for kind in ("params", "tags", "texts"):
            out[kind].update(record.get(kind) or {})
        out["inputs"] = record.get("inputs", out["inputs"])
    return out


def replay(client: Any, run: Any, folder: str | Path) -> int:
    """Send run ``run`` (an MLflow run as ``search_runs`` returns it) the params, tags, texts and
    dataset inputs its :data:`RECORDS` in ``folder`` holds and the run lacks: a param it has not,
    a tag whose value differs, a text with no artifact of its name, the dataset inputs where it
    has none. Returns how many were sent (the inputs count one). Raises what MLflow raises."""
    held = read(Path(folder) / RECORDS)
    params = {k: v for k, v in held["params"].items() if k not in run.data.params}
    tags = {k: v for k, v in held["tags"].items() if run.data.tags.get(k) != v}
    texts = held["texts"]
    if texts:
        stored = {a.path for a in client.list_artifacts(run.info.run_id)}
        texts = {k: v for k, v in texts.items() if k not in stored}
    for name, text in texts.items():
        client.log_text(run.info.run_id, text, name)
    _, Param, RunTag = entities.classes(client)
    items = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(items), PER_CALL):
        client.log_batch(run.info.run_id, params=items[i:i + PER_CALL])
    items = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, len(items), PER_CALL):
        client.log_batch(run.info.run_id, tags=items[i:i + PER_CALL])
    sent_inputs = 0
    run_inputs = getattr(run, "inputs", None)
    if held["inputs"] is not None and not getattr(run_inputs, "dataset_inputs", None):
        in_store(client, inputs.log_datasets, run.info.run_id, *held["inputs"])
        sent_inputs = 1
    return len(params) + len(tags) + len(texts) + sent_inputs
