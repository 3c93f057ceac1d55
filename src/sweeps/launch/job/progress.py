"""The sweep as its console tells it: a header before the first job, one line per job with its
place in the sweep and the time left, and the closing lines that say where the results are and
what to run next (in the manner of tqdm/rich: a counter and an estimate per unit of work).

Lines are plain text, the same on a terminal and in a log file (CI, Slurm), ≤ 100 columns but
for a job's own name. Imports neither torch nor mlflow: the header comes before either loads."""
from __future__ import annotations

import shlex

from sweeps.console import hms, wrap
from sweeps.launch.process import parent_run
from sweeps.state import current


def header(jobs: int, preset: str | None, experiment: str, uri: str) -> str:
    """The sweep's first line(s): how many jobs, which preset, and where the results go."""
    what = f"{jobs} job{'s' * (jobs != 1)}" if jobs else "a sweep"
    of = f" of preset {preset}" if preset else ""
    return "\n".join([wrap(f"sweeps: {what}{of} → MLflow experiment '{experiment}'"), f"  store: {uri}"])


def begin_sweep(jobs: int) -> None:
    """Note the sweep's start and size (jobs launched elsewhere read the size from the environment)."""
    current().job_times = []
    parent_run.note(planned_jobs=str(jobs))


def job_line(name: str, number: int | None) -> str:
    """``[k/N] name`` with the time the rest of the sweep should take, from the jobs done so far in
    this process (their mean wall time × the jobs left, this one included); ``name`` alone in a
    single run. ``number``: the job's place in the sweep, from 1 (None: unknown)."""
    planned = int(parent_run.get("planned_jobs") or 0)
    if number is None:
        return f"job {name}"
    place = f"[{number}/{planned}]" if planned else f"[{number}]"
    done = current().job_times
    left = ""
    if done and planned:
        left = f"  (about {hms(sum(done) / len(done) * (planned - number + 1))} left)"
    return f"{place} {name}{left}"


def job_ended(seconds: float) -> None:
    """Count a job's wall time (s) into the estimate of the time left."""
    current().job_times.append(seconds)


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

