"""A sweep's jobs as a table for Python users: [`results`][sweeps.report.results.results] (a ``pandas.DataFrame``, one row
per job, the report's columns), [`verdict`][sweeps.report.results.verdict] (the report's verdict, one row per model × dataset
× device) and [`job_record`][sweeps.report.results.job_record] (one row as a dict), from the same MLflow runs the report reads."""
from __future__ import annotations

from typing import Any

from mlflow import MlflowClient

from sweeps import names
from sweeps.report.runs import JobRecord, find_sweep, job_from_run, load_jobs, max_batches, sweep_runs
from sweeps.report.selection import Selection, select_jobs
from sweeps.tracking.store import store

# The report's figures per job (reference table, inference and max_batch tables), in its order.
COLUMNS = (names.FIRST_EPOCH_S, names.MEDIAN_EPOCH_S, names.TOTAL_S, names.FINAL_ACC, names.FINAL_RMSE,
           names.PEAK_MB, names.OVERHEAD_S, names.JOB_S, names.SAMPLES_PER_S, names.INFER_MEDIAN_MS,
           names.MAX_BATCH, names.ENERGY_J_PER_SAMPLE, names.TO_TARGET_S, names.TARGET_EPOCHS,
           names.TARGET_SAMPLES, names.TARGET_STEPS)


def job_record(job: JobRecord) -> dict[str, Any]:
    """One job as a flat dict: ``run_id``, ``name``, ``outcome``, ``error``, ``model``,
    ``dataset``, ``device``, ``batch`` (examples per step, a number: the logged metric ``batch``),
    ``lr``, ``target`` (``reached``, ``missed`` or None), every swept key (its value as typed; a
    single run's overrides but its preset),
    then the report's figures (`COLUMNS`,
    units in their names; ``None`` where the job logged none), and the diagnosis: ``bottleneck``
    (tag ``diag.bottleneck``), ``advice`` ("; "-joined overrides) and the ``diag/*`` metrics."""
    row: dict[str, Any] = {"run_id": job.run_id, "name": job.name, "outcome": job.outcome, "error": job.error,
                           "sweep": job.tags.get(names.PARENT_RUN_TAG, "")}
    for key in ("model", "dataset", "device", "optimizer", "precision", "task"):
        row[key] = job.params.get(key)
    # a single run's overrides stand for its swept keys; its preset (+experiment=NAME) is no column:
    # a sweep's row has none either, unless the sweep varies the preset
    single = names.PARENT_RUN_TAG not in job.tags
    row.update({k: v for k, v in job.swept.items() if k not in row and not (single and k == "experiment")})
    row["batch"] = job.batch if job.batch is not None else job.params.get("batch")
    row["lr"] = job.metrics.get(names.LR)
    row["target"] = job.tags.get(names.TARGET_TAG)  # reached | missed | None (no target)
    row.update({key: job.metrics.get(key) for key in COLUMNS})
    # the diagnosis (sweeps.bottleneck): the named bottleneck, its advice, where a step goes
    row["bottleneck"] = job.tags.get(names.BOTTLENECK_TAG)
    row["advice"] = job.tags.get(names.DIAG_ADVICE_TAG)
    row.update({key: job.metrics.get(key) for key in names.DIAG_METRICS})
    return row


def results(experiment: str, *, tracking_uri: str | None = None, sweep: str | None = None):
    """The jobs of ``experiment`` in the store at ``tracking_uri`` (default:
    ``$MLFLOW_TRACKING_URI``, else ``./mlruns``), oldest first, as a ``pandas.DataFrame`` — one
    row per job, the columns of [`job_record`][sweeps.report.results.job_record]. With ``sweep`` (a parent run id): every job of
    that sweep in its order, those it reused without running them included — the earlier run of a
    job it skipped as done, the run of one another process ran
    (`sweeps.report.runs.sweep_runs`).

    Raises:
        LookupError: no such store, experiment or sweep, or no job in it (one line saying what exists).
    """
    import pandas as pd

    return pd.DataFrame([job_record(j) for j in _jobs(experiment, tracking_uri, sweep)[1]])


def _jobs(experiment: str, tracking_uri: str | None, sweep: str | None) -> tuple[MlflowClient, list[JobRecord]]:
    client = store.open_client(store.resolve_uri(tracking_uri, create=False))  # a sweep may be creating it
    if sweep:
        return client, _sweep_jobs(client, experiment, sweep)
    try:
        return client, select_jobs(client, Selection(experiments=[experiment]))
    except ValueError as e:  # the selection's own one-line message
        raise LookupError(str(e)) from None


def _sweep_jobs(client: MlflowClient, experiment: str, sweep: str) -> list[JobRecord]:
    """The jobs of sweep ``sweep`` of ``experiment`` (`sweeps.report.runs.load_jobs`).

    Raises:
        LookupError: no such experiment, run or sweep there, or a sweep without a job.
    """
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise LookupError(f"no experiment named {experiment!r} in {client.tracking_uri}")
    parent = find_sweep(client, run_id=sweep)
    if parent.data.tags.get(names.KIND_TAG) != "sweep" or parent.info.experiment_id != exp.experiment_id:
        raise LookupError(f"run {sweep!r} is not a sweep (a parent run of python -m sweeps -m) of experiment "
                          f"{experiment!r}")
    jobs = load_jobs(client, parent)
    if not jobs:
        raise LookupError(f"sweep {sweep} of experiment {experiment!r} has no job runs yet")
    return jobs


def verdict(experiment: str, *, tracking_uri: str | None = None, sweep: str | None = None):
    """The report's verdict on the jobs [`results`][sweeps.report.results.results] returns, as a ``pandas.DataFrame``: one row
    per model × dataset (× ``dataset.train_size``, and every other swept key but batch, repeat, lr
    and device: column ``group``) × device, the fields of [`sweeps.report.verdict.Finding`][sweeps.report.verdict.Finding]
    as columns — among them ``target_batch`` (fastest to target) with ``best_lr`` and
    ``time_to_target_s`` (s), ``throughput_batch`` (highest samples/s) with ``samples_per_s``,
    ``best_batch`` (the first of the two where a batch reached the target, else the second),
    ``runs`` (the runs behind it), ``target_tie`` and ``throughput_tie`` (batches that tie, and
    why), ``quality`` and ``quality_warning`` (without a target), ``target_missed``,
    ``lr_per_batch`` and ``grid`` (lr ties, edges, diverged and chance-level lrs), ``knee``,
    ``last_gain``, ``fits``, energy (J) and money, ``wins`` and ``speedup`` (beside the other
    devices), ``crossover_rows``, ``held`` (un-swept conditions that differ: no comparison made),
    ``drift``, ``note`` — and ``verdict`` (the sentence the report prints); None where there is
    nothing to say it.

    Raises:
        LookupError: no such store, experiment or sweep, or no job in it (one line saying what exists).
    """
    from sweeps.report import verdict as findings, verdict_text

    client, jobs = _jobs(experiment, tracking_uri, sweep)
    fits = max_batches(client, client.get_experiment_by_name(experiment).experiment_id)
    return verdict_text.frame(findings.findings(jobs, fits))


def sweep_records(tracking_uri: str, parent_run_id: str) -> list[dict[str, Any]]:
    """One [`job_record`][sweeps.report.results.job_record] per job of the sweep ``parent_run_id``, in the sweep's order
    (`sweeps.report.runs.sweep_runs`); jobs it did not run itself — skipped as already
    done, or run by another process meanwhile — appear with ``outcome`` ``skipped``, the
    ``run_id`` and figures of the run that did them."""
    client = MlflowClient(tracking_uri)
    return [{**job_record(j.job()), "outcome": names.SKIPPED} if j.reused else job_record(j.job())
            for j in sweep_runs(client, client.get_run(parent_run_id))]


def single_record(tracking_uri: str, run_id: str) -> dict[str, Any]:
    """[`job_record`][sweeps.report.results.job_record] of the one run ``run_id`` (a job run without ``-m``)."""
    return job_record(job_from_run(MlflowClient(tracking_uri).get_run(run_id)))
