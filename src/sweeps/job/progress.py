"""The sweep as its console tells it: a header before the first job, one line per job with its
place in the sweep and the time left, and the closing lines that say where the results are and
what to run next (in the manner of tqdm/rich: a counter and an estimate per unit of work).

Lines are plain text, the same on a terminal and in a log file (CI, Slurm), ≤ 100 columns but
for a job's own name. Imports neither torch nor mlflow: the header comes before either loads."""
from __future__ import annotations

import shlex
from typing import Iterable

from sweeps.console import hms, wrap
from sweeps.job import parent_run
from sweeps.state import current, said_once


def header(jobs: int, preset: str | None, experiment: str, uri: str) -> str:
    """The sweep's first line(s): how many jobs, which preset, and where the results go."""
    what = f"{jobs} job{'s' * (jobs != 1)}" if jobs else "a sweep"
    of = f" of preset {preset}" if preset else ""
    return "\n".join([wrap(f"sweeps: {what}{of} → MLflow experiment '{experiment}'"), f"  store: {uri}"])


# Keys whose value changes how long a job takes: what is trained, on what data, on which device, how
# much of it (epochs, dataset.train_size, timing.iters), how (task, precision, compile, a target
# that stops early), and a smoke case (a model × dataset pair). Any other key (batch, lr, seed,
# repeat, optimizer, schedule, ...) leaves a job of the same kind.
KIND_KEYS = ("model", "dataset", "device", "epochs", "case", "task", "precision", "compile", "timing", "target",
             "experiment")


def job_kind(overrides: Iterable[str]) -> str:
    """A job's kind, from its Hydra overrides: those whose key (``+``/``~``/``++`` dropped) is in
    `KIND_KEYS` or under one of them (``model.depth=10``, ``dataset.train_size=64``),
    sorted and joined by spaces ("" when none are)."""
    kept = []
    for item in overrides:
        text = str(item).lstrip("+~")
        key = text.split("=", 1)[0]
        if key.split(".", 1)[0].split("/", 1)[0] in KIND_KEYS:
            kept.append(text)
    return " ".join(sorted(kept))


# what the seconds before the first job's line go to (the store process, torch's import): said once
STARTING = "  starting: the store and torch load (a few seconds)"


def begin_sweep(jobs: int, plan: Iterable[Iterable[str]] = ()) -> None:
    """Note the sweep's start and size (jobs launched elsewhere read the size from the environment)
    and, where the sweep's jobs are known in advance (``plan``: each job's overrides, in launch
    order: sweeps' sweeper, Hydra's basic one), each one's kind (`job_kind`) for the time left.
    Prints `STARTING` once per sweep: the header's next line, so the seconds before the
    first job's line are not silent."""
    if said_once("starting"):
        print(STARTING, flush=True)
    current().job_times = []
    current().job_kinds = {"plan": [job_kind(o) for o in plan], "times": {}}
    parent_run.note(planned_jobs=str(jobs))


def job_line(name: str, number: int | None, overrides: Iterable[str] = ()) -> str:
    """``[k/N] name`` and the time the rest of the sweep should take (this job included); ``name``
    alone in a single run. ``number``: the job's place in the sweep, from 1 (None: unknown);
    ``overrides``: the job's Hydra overrides, which give its kind (`job_kind`).

    The time left is Σ over the jobs left of the mean wall time (s) of the jobs of their kind that
    this process ran in this sweep: ``(about 0:00:13 left)``. Where a job left is of a kind not
    run yet, it says ``(time left unknown: …)`` instead; before any job ran, or where the sweep's
    jobs are not known here (another sweeper, a pool's or Slurm's worker), nothing."""
    planned = int(parent_run.get("planned_jobs") or 0)
    if number is None:
        return f"job {name}"
    place = f"[{number}/{planned}]" if planned else f"[{number}]"
    kinds = current().job_kinds
    kinds["running"] = job_kind(overrides)
    return f"{place} {name}{time_left(kinds.get('plan') or [], kinds.get('times') or {}, number)}"


def time_left(plan: list[str], times: dict[str, list[float]], number: int) -> str:
    """The console's words for the time left at the start of job ``number`` (from 1) of the jobs
    whose kinds are ``plan``, given the wall times (s) of the jobs run so far by kind: "" before
    any ran or without a plan; see `job_line`."""
    left = plan[number - 1:] if 0 < number <= len(plan) else []
    if not left or not any(times.values()):
        return ""
    untimed = sum(1 for kind in left if not times.get(kind))
    if untimed:
        return f"  (time left unknown: {untimed} job{'s' * (untimed != 1)} left of a kind not run yet)"
    return f"  (about {hms(sum(sum(times[k]) / len(times[k]) for k in left))} left)"


def job_ended(seconds: float) -> None:
    """Count a job's wall time (s) into the estimate of the time left, under the kind of the job
    `job_line` last announced."""
    current().job_times.append(seconds)
    kinds = current().job_kinds
    kinds.setdefault("times", {}).setdefault(kinds.get("running", ""), []).append(seconds)


def next_steps(experiment: str, uri: str, experiment_id: str | None, parent_run_id: str | None) -> str:
    """The sweep's last lines: the report and the MLflow UI commands with this sweep's real store,
    and the run table's address in the UI."""
    report = f"python -m sweeps.report --experiment {shlex.quote(experiment)}"
    if not uri.startswith(("sqlite:", "postgresql", "mysql", "file:")) and "://" in uri:  # a tracking server
        ui, base = f"(the tracking server at {uri})", uri.rstrip("/")
    else:
        ui, base = f"mlflow ui --backend-store-uri {shlex.quote(uri)}", "http://127.0.0.1:5000"
    table = f"{base}/#/experiments/{experiment_id}/runs" if experiment_id else base
    if parent_run_id:  # the report's default is the experiment's latest sweep: this one, until another runs
        report += f" --run-id {parent_run_id}"
    return "\n".join(["", "Next:", f"  report     {report}", f"  MLflow UI  {ui}", f"             then open {table}"])

