"""The invariants ``scripts/chaos.py`` checks after each fault, on the real MLflow store (read
with :class:`mlflow.MlflowClient`) and on what the sweep processes printed.

Each check returns the violations it found (one line each) and adds the number of invariants it
checked to a :class:`Tally`; the driver prefixes every violation with the seed and the fault
that reproduce it.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from sweeps import names

TRACEBACK = "Traceback (most recent call last)"
SKIPPED = re.compile(r"^(\d+) job\(s\) skipped: already done", re.M)
SUMMARY = re.compile(r"^\d+ job\(s\):", re.M)  # the sweep's closing summary line


@dataclass
class Tally:
    """Invariants checked and violations found (one line each)."""
    checked: int = 0
    violations: list[str] = field(default_factory=list)

    def check(self, holds: bool, what: str) -> bool:
        self.checked += 1
        if not holds:
            self.violations.append(what)
        return holds


@dataclass
class Ended:
    """What a ``python -m sweeps`` process left: exit status (negative: killed by that signal),
    stdout, stderr."""
    rc: int
    out: str
    err: str
    hung: bool = False  # still running at the time limit (then SIGKILLed)

    def last_line(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def snapshot_journals(checkpoints: Path) -> dict[str, list[dict]]:
    """Every journal under ``checkpoints`` (``<hash>/<run id>/epochs.jsonl``, and the params and
    tags journaled in ``run.jsonl`` beside it) as {run id: records}; a torn last line (the
    process died writing it) is not a record."""
    out: dict[str, list[dict]] = {}
    try:  # a sweep ending as it is read removes a finished job's folder: that journal is in MLflow
        paths = [*checkpoints.glob("*/*/epochs.jsonl"), *checkpoints.glob("*/*/run.jsonl")] if checkpoints.is_dir() else []
    except FileNotFoundError:
        paths = []
    for path in paths:
        records = []
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        out.setdefault(path.parent.name, []).extend(records)
    return out


def journaled_ok(journals: dict[str, list[dict]]) -> set[str]:
    """The run ids whose journal (:func:`snapshot_journals`) holds the tag ``outcome=ok`` last:
    their job's end had logged it, whether or not it closed the run."""
    out = set()
    for run_id, records in journals.items():
        outcomes = [r["tags"][names.OUTCOME_TAG] for r in records if names.OUTCOME_TAG in (r.get("tags") or {})]
        if outcomes and outcomes[-1] == names.OK:
            out.add(run_id)
    return out


def job_runs(client, experiment: str) -> tuple[list, list]:
    """(the sweep parent runs, the job runs) of ``experiment``; both empty when it does not exist."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return [], []
    every = client.search_runs([exp.experiment_id], max_results=5000)
    parents = [r for r in every if r.data.tags.get(names.KIND_TAG) == "sweep"]
    return parents, [r for r in every if r.data.tags.get(names.KIND_TAG) != "sweep"]


def ok_by_config(jobs: list) -> dict[str, list[str]]:
    """{config hash: run ids whose outcome is ok}."""
    out: dict[str, list[str]] = {}
    for r in jobs:
        if r.data.tags.get(names.OUTCOME_TAG) == names.OK:
            out.setdefault(r.data.tags.get(names.HASH_TAG, "?"), []).append(r.info.run_id)
    return out


def faulted_run(t: Tally, ended: Ended, signal_name: str | None, jobs: list, planned: int) -> None:
    """The faulted process: no traceback; after SIGINT/SIGTERM exit 130/143 with one
    ``sweeps: interrupted by …`` line that names the right job and whether work was left (or 0
    with the summary printed, when the signal came after the sweep had decided to exit 0); no
    process killed by its own signal (-2, -15)."""
    t.check(TRACEBACK not in ended.err, f"traceback on stderr of the faulted run: {_tb(ended.err)}")
    if signal_name not in ("SIGINT", "SIGTERM"):
        return
    code = 130 if signal_name == "SIGINT" else 143
    if ended.rc == 0:
        t.check(bool(SUMMARY.search(ended.out)), f"exit 0 after {signal_name} without the sweep's summary")
        return
    if not t.check(ended.rc == code, f"exit {ended.rc} after {signal_name} (expected {code}); "
                                     f"last line {ended.last_line()!r}"):
        return
    said = [ln for ln in ended.err.splitlines() if ln.startswith("sweeps: interrupted by")]
    t.check(len(said) == 1, f"{len(said)} 'interrupted' lines on stderr (expected 1)")
    line = ended.last_line()
    if not t.check(line.startswith(f"sweeps: interrupted by {signal_name}"), f"last stderr line {line!r}"):
        return
    outcome = {r.data.tags.get(names.OVERRIDES_TAG): r.data.tags.get(names.OUTCOME_TAG) for r in jobs}
    done = sum(1 for v in ok_by_config(jobs).values() if v)
    named = re.search(r"job '(.*?)' (is KILLED|ended (\w+))", line)
    if "before any job ran" in line:
        t.check(not any(o in (names.OK, names.KILLED) for o in outcome.values()),
                f"says 'before any job ran' but job outcomes are {outcome}")
    elif named:
        want = "killed" if named.group(2) == "is KILLED" else named.group(3)
        t.check(outcome.get(named.group(1)) == want,
                f"names job {named.group(1)!r} {named.group(2)}; MLflow has {outcome}")
    if "no job was left to run" in line:
        t.check(done == planned, f"says 'no job was left to run' with {done} of {planned} configs ok")
    elif "rerun it to run the remaining jobs" in line:
        t.check(done < planned, f"says 'rerun it to run the remaining jobs' with all {planned} configs ok")


def rerun(t: Tally, ended: Ended, ok_before: dict[str, list[str]]) -> None:
    """The rerun: exit 0, no traceback, the summary printed, and as many jobs skipped as were
    ``ok`` before it."""
    t.check(ended.rc == 0, f"rerun exit {ended.rc}: {ended.last_line()!r}")
    t.check(TRACEBACK not in ended.err, f"traceback on stderr of the rerun: {_tb(ended.err)}")
    t.check(bool(SUMMARY.search(ended.out)), "rerun printed no summary")
    m = SKIPPED.search(ended.out)
    skipped = int(m.group(1)) if m else 0
    t.check(skipped == len(ok_before), f"rerun skipped {skipped} job(s); {len(ok_before)} were ok before it")


def store(t: Tally, client, experiment: str, planned: int, journals: dict[str, list[dict]],
          ok_before: dict[str, list[str]], errors_allowed: bool = False) -> None:
    """The store after the rerun: no run RUNNING; every planned config ok exactly once, the runs
    that were ok before the rerun still its ok runs; no outcome but ok/killed (``error`` allowed
    only where the fault was the store itself); no (metric, step) twice; every epoch a journal
    held (snapshots taken after the fault and after the rerun) in its run, and every param (at
    its value), tag and text it journaled."""
    parents, jobs = job_runs(client, experiment)
    for r in parents + jobs:
        t.check(r.info.status != "RUNNING", f"run {r.info.run_id} ({r.info.run_name}) left RUNNING")
        t.check(r.data.tags.get(names.OUTCOME_TAG) != names.RUNNING, f"run {r.info.run_id} has outcome=running")
    ok = ok_by_config(jobs)
    t.check(len(ok) == planned, f"{len(ok)} of {planned} configs ok after the rerun")
    for h, ids in ok.items():
        t.check(len(ids) == 1, f"config {h} ok {len(ids)} times (runs {ids})")
    for h, ids in ok_before.items():
        t.check(ok.get(h) == ids, f"config {h} was ok in {ids} before the rerun, after it in {ok.get(h)}")
    allowed = {names.OK, names.KILLED} | ({names.ERROR} if errors_allowed else set())
    for r in jobs:
        o = r.data.tags.get(names.OUTCOME_TAG)
        t.check(o in allowed, f"run {r.info.run_id} outcome {o!r}: {r.data.tags.get(names.ERROR_TAG, '')[:200]}")
    history: dict[tuple[str, str], list[int]] = {}
    for r in jobs:
        for key in r.data.metrics:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
            history[r.info.run_id, key] = steps
            dup = sorted({s for s in steps if steps.count(s) > 1})
            t.check(not dup, f"run {r.info.run_id} metric {key}: step(s) {dup[:5]} logged twice")
    for run_id, records in journals.items():
        missing: list[str] = []
        for rec in records:
            for key, value in rec.items():
                if "/" not in key or not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                if (run_id, key) not in history:
                    history[run_id, key] = [m.step for m in client.get_metric_history(run_id, key)]
                t.checked += 1
                if rec["epoch"] not in history[run_id, key]:
                    missing.append(f"{key}@{rec['epoch']}")
        if missing:
            t.violations.append(f"run {run_id}: {len(missing)} journal value(s) not in MLflow, e.g. {missing[:4]}")
    by_id = {r.info.run_id: r for r in jobs}
    for run_id, records in journals.items():
        run = by_id.get(run_id)
        for rec in records:
            for key, value in (rec.get("params") or {}).items():
                t.check(run is not None and run.data.params.get(key) == value,
                        f"run {run_id}: journaled param {key}={value!r} not on the run")
            for key in rec.get("tags") or {}:  # its value may be a later owner's (outcome, resumed)
                t.check(run is not None and key in run.data.tags, f"run {run_id}: journaled tag {key} not on the run")
            if (rec.get("texts") or rec.get("text_files")) and run is not None:
                stored = {a.path for a in client.list_artifacts(run_id)}
                for name in {**(rec.get("texts") or {}), **(rec.get("text_files") or {})}:
                    t.check(name in stored, f"run {run_id}: journaled text {name} not among its artifacts")
            if rec.get("inputs") is not None:
                t.check(run is not None and bool(run.inputs.dataset_inputs),
                        f"run {run_id}: journaled dataset inputs not on the run")


def folders_cleared(t: Tally, checkpoints: Path) -> None:
    """Once every config ended ok, no checkpoint folder (checkpoints, journal) is left."""
    left = [str(p.relative_to(checkpoints)) for p in checkpoints.glob("*/*") if p.is_dir()]
    t.check(not left, f"checkpoint folder(s) left after every config ended ok: {left[:3]}")


def _tb(err: str) -> str:
    """The traceback's last line, for the violation line."""
    tail = err[err.rfind(TRACEBACK):].strip().splitlines()
    return tail[-1][:200] if tail else ""
