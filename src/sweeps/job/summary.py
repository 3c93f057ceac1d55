"""A job's summary row and the one-screen summary of a sweep's (or a single run's) jobs, read from
their MLflow runs: what the job prints once it closes, and the sweep callback at its end."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from sweeps import names
from sweeps.console import summary_table
from sweeps.report.runs import EARLIER
from sweeps.report.timing_noise import unreliable
from sweeps.tracking.writer import naming
from sweeps.tracking.store.entities import classes

if TYPE_CHECKING:
    from mlflow import MlflowClient


def summary_row(run: Any) -> dict:
    """One summary row (see `sweeps.console.summary_table`) from a job's MLflow run."""
    m, tags = run.data.metrics, run.data.tags
    row = {"job": tags.get(names.OVERRIDES_TAG, run.info.run_name), "outcome": tags.get(names.OUTCOME_TAG, "?"),
           "error": tags.get(names.ERROR_TAG, ""), "first_s": m.get(names.FIRST_EPOCH_S),
           "median_s": m.get(names.MEDIAN_EPOCH_S), "total_s": m.get(names.TOTAL_S), "job_s": m.get(names.JOB_S),
           "overhead_s": m.get(names.OVERHEAD_S), "overhead_frac": m.get(names.OVERHEAD_FRAC),
           "note": unreliable(m.get(names.EPOCH_P10_S), m.get(names.EPOCH_P90_S), m.get(names.OTHER_CPU_MEAN_PCT))}
    if names.FINAL_ACC in m:
        row["final"] = f"acc {m[names.FINAL_ACC]:.4f}"
    elif names.FINAL_RMSE in m:
        row["final"] = f"rmse {m[names.FINAL_RMSE]:.2f}"
    elif names.INFER_MEDIAN_MS in m:
        row["final"] = f"{m[names.INFER_MEDIAN_MS]:.2f} ms/batch"
    elif names.MAX_BATCH in m:  # task=max_batch
        row["final"] = f"fits up to {m[names.MAX_BATCH]:.0f}"
    return row


def describe_run(client: MlflowClient, run_id: str, outcome: str, error: str) -> None:
    """Set run ``run_id``'s description (``mlflow.note.content``): its outcome line and its summary
    row, from the run as the store holds it once its job closed it (one read, one write; run where
    the store is, `post`).

    Raises:
        mlflow.exceptions.MlflowException: the store refused the read or the write.
    """
    row = {**summary_row(client.get_run(run_id)), "outcome": outcome, "error": error}
    client.set_tag(run_id, names.MLFLOW_RUN_NOTE, naming.job_note(outcome, error, summary_table([row])))


def reused_mark(run: Any, how: str) -> str:
    """What the job cell of a job the sweep did not run itself adds: ``(earlier run 3f2a1b0c…)``
    (``how`` ``earlier``: skipped as done there) or ``(run 3f2a1b0c… of pid 123 on h)``
    (``elsewhere``: another process ran it, or still runs it: its outcome says which)."""
    tags, short = run.data.tags, f"{run.info.run_id[:8]}…"
    if how == EARLIER:
        return f"(earlier run {short})"
    return f"(run {short} of pid {tags.get(names.PID_TAG, '?')} on {tags.get(names.HOST_TAG, '?')})"


def print_summary(client: MlflowClient, runs: list, parent_run_id: str | None = None,
                  reused: dict[str, str] | None = None) -> str:
    """Print the summary of ``runs``; log it to the parent run when there is one. ``reused``:
    ``{run id: how}`` of the runs the sweep reused instead of running them (``earlier``,
    ``elsewhere``: `sweeps.report.runs.sweep_runs`): their job cell names the run
    (`reused_mark`) and the count line says how many."""
    reused = reused or {}
    rows = []
    for r in runs:
        row = summary_row(r)
        if r.info.run_id in reused:
            row["job"] = f"{row['job']} {reused_mark(r, reused[r.info.run_id])}"
        rows.append(row)
    table = summary_table(rows)
    counts = Counter(r.data.tags.get(names.OUTCOME_TAG, "?") for r in runs)
    text = f"{table}\n{len(runs)} job(s): " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    earlier = sum(how == EARLIER for how in reused.values())
    elsewhere = len(reused) - earlier
    notes = ([f"{earlier} from earlier runs"] if earlier else []) + ([f"{elsewhere} run by another process"]
                                                                       if elsewhere else [])
    if notes:
        text += f" ({', '.join(notes)}: not run again here)"
    print(f"\n{text}", flush=True)
    if parent_run_id:
        client.log_text(parent_run_id, text + "\n", "summary.txt")
        RunTag = classes(client)[2]
        client.log_batch(parent_run_id, tags=[RunTag(f"{names.OUTCOMES_TAG_PREFIX}{k}", str(n)) for k, n in counts.items()])
    return text
