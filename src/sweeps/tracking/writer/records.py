"""A run's params, tags, small texts and dataset inputs, journaled: each call that logs them appends one JSON line to the
run's `RECORDS` file (beside its epoch journal, in the run's checkpoint folder) before it is
sent, and a later start replays what the run lacks (`replay`, from
`sweeps.tracking.replay.replay.mark_stale`).

Why: through a store process a job does not wait for a tag or a param to be stored
(`set_tags`), and `RunWriter.queue_tags`
holds tags until the job's next job-level values.
A job killed (SIGKILL, the OOM killer) between the call and the store taking it lost them; the
line written first survives the process, as the epoch journal does. Replaying is idempotent: a
param MLflow already holds is not sent again (a param's value never changes), a tag only where
the run's value differs, a text only where the run has no artifact of its name, so a dead job's
store process that still ingests its last call stores nothing twice. Texts up to
`TEXT_MAX` characters (the config, the machine's fingerprint, a short job's CSVs) are
journaled in their line; a longer one (a long job's ``epochs.csv`` or ``telemetry.csv``) is
written whole to a file of its own under `TEXTS` first (temporary file + rename: a kill
mid-write leaves no torn copy) and its line names that file. Dataset inputs are journaled as the
arguments of `sweeps.tracking.writer.inputs.log_datasets` and replayed where the run has none.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sweeps.tracking.store import entities
from sweeps.tracking.writer import inputs
from sweeps.tracking.service.client import in_store

log = logging.getLogger("sweeps")
RECORDS = "run.jsonl"  # in a run's folder: {"params"/"tags"/"texts": {name: value}} or {"inputs": [args]} per line, in call order
PER_CALL = 100  # MLflow's log_batch limit on params, and on tags, per call
TEXT_MAX = 64 * 1024  # characters: a longer text is journaled as a file of its own under TEXTS
TEXTS = "texts"  # in a run's folder, beside RECORDS: the texts longer than TEXT_MAX, one file each


class RecordLog:
    """Appends a run's params, tags and texts to ``path`` (`RECORDS`), one JSON line per call,
    written to the OS before the call returns (it survives the process, not a power loss). Never
    raises: a folder that cannot be written (read-only, full) switches the log off, and the run's
    values still go to MLflow as before — only without this copy."""

    def __init__(self, path: str | Path):
        self.path, self.off = Path(path), False

    def append(self, kind: str, values: dict[str, Any]) -> None:
        """One line ``{kind: values}`` (``kind``: ``"params"``, ``"tags"`` or ``"texts"``: artifact
        name → text; values as strings). A text over `TEXT_MAX` characters goes to a file
        under `TEXTS` and the line ``{"text_files": {name: file}}`` names it."""
        if kind == "texts":
            files = {k: self._text_file(k, v) for k, v in values.items() if len(v) > TEXT_MAX}
            if any(files.values()):
                self._write({"text_files": {k: f for k, f in files.items() if f}})
            values = {k: v for k, v in values.items() if len(v) <= TEXT_MAX}
        if values:
            self._write({kind: {k: str(v) for k, v in values.items()}})

    def _text_file(self, name: str, text: str) -> str | None:
        """Write ``text`` whole to ``TEXTS/<name>`` beside the journal (``/`` in ``name`` as ``_``);
        its path relative to the journal's folder, None where it could not be written."""
        if self.off:
            return None
        relative = f"{TEXTS}/{name.replace('/', '_')}"
        target = self.path.parent / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, target)
        except OSError as e:
            log.debug("the run's text %s is not journaled (%s): %s", name, target, e)
            return None
        return relative

    def append_inputs(self, args: list) -> None:
        """One line ``{"inputs": args}``: the arguments of
        `log_datasets` after its client and run id (JSON values)."""
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
    """``{"params": …, "tags": …, "texts": …, "inputs": …}`` that `RECORDS` at ``path``
    holds, a tag or text logged twice at its last value (a long text read from its file under
    `TEXTS`; one whose file is gone is left out), ``inputs`` the last dataset inputs'
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
        for name, relative in (record.get("text_files") or {}).items():
            try:
                out["texts"][name] = (Path(path).parent / relative).read_text(encoding="utf-8")
            except OSError:
                out["texts"].pop(name, None)
        out["inputs"] = record.get("inputs", out["inputs"])
    return out


def replay(client: Any, run: Any, folder: str | Path) -> int:
    """Send run ``run`` (an MLflow run as ``search_runs`` returns it) the params, tags, texts and
    dataset inputs its `RECORDS` in ``folder`` holds and the run lacks: a param it has not,
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
