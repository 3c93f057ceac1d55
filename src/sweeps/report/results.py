"""A sweep's jobs as a table for Python users: :func:`results` (a ``pandas.DataFrame``, one row
per job, the report's columns), :func:`verdict` (the report's verdict, one row per model × dataset
× device) and :func:`job_record` (one row as a dict), from the same MLflow runs the report reads."""
from __future__ import annotations

from typing import Any

from mlflow import MlflowClient

from sweeps import names
from sweeps.report.runs import JobRecord, job_from_run, max_batches
from sweeps.report.selection import Selection, select_jobs
from sweeps.tracking import store

# The report's figures per job (reference table, inference and max_batch tables), in its order.
COLUMNS = (names.FIRST_EPOCH_S, names.MEDIAN_EPOCH_S, names.TOTAL_S, names.FINAL_ACC, names.FINAL_RMSE,
           names.PEAK_MB, names.OVERHEAD_S, names.JOB_S, names.SAMPLES_PER_S, names.INFER_MEDIAN_MS,
           names.MAX_BATCH, names.ENERGY_J_PER_SAMPLE, names.TO_TARGET_S, names.TARGET_EPOCHS,
           names.TARGET_SAMPLES, names.TARGET_STEPS)


def job_record(job: JobRecord) -> dict[str, Any]:
    """One job as a flat dict: ``run_id``, ``name``, ``outcome``, ``error``, ``model``,
    ``dataset``, ``device``, ``batch`` (examples per step, a number: the logged ``batch_size``),
    ``lr``, ``target`` (``reached``, ``missed`` or None), every swept key (its value as typed),
    then the report's figures (:data:`COLUMNS`,
    units in their names; ``None`` where the job logged none)."""
    row: dict[str, Any] = {"run_id": job.run_id, "name": job.name, "outcome": job.outcome, "error": job.error,
                           "sweep": job.tags.get(names.PARENT_RUN_TAG, "")}
    for key in ("model", "dataset", "device", "optimizer", "precision", "task"):
        row[key] = job.params.get(key)
    row.update({k: v for k, v in job.swept.items() if k not in row})
    row["batch"] = job.batch if job.batch is not None else job.params.get("batch")
    row["lr"] = job.metrics.get(names.LR)
    row["target"] = job.tags.get(names.TARGET_TAG)  # reached | missed | None (no target)
    row.update({key: job.metrics.get(key) for key in COLUMNS})
    return row


def results(experiment: str, *, tracking_uri: str | None = None, sweep: str | None = None):
    """The jobs of ``experiment`` (only those of the sweep whose parent run id is ``sweep``, when
    given) in the store at ``tracking_uri`` (default: ``$MLFLOW_TRACKING_URI``, else
    ``./mlruns``), oldest first, as a ``pandas.DataFrame`` — one row per job, the columns of
    :func:`job_record`.

    Raises:
        LookupError: no such store, experiment or sweep, or no job in it (one line saying what exists).
    """
    import pandas as pd

    return pd.DataFrame([job_record(j) for j in _jobs(experiment, tracking_uri, sweep)[1]])


def _jobs(experiment: str, tracking_uri: str | None, sweep: str | None) -> tuple[MlflowClient, list[JobRecord]]:
    client = store.open_client(store.resolve_uri(tracking_uri, create=False))  # a sweep may be creating it
    try:
        return client, select_jobs(client, Selection(experiments=[experiment], sweeps=[sweep] if sweep else []))
    except ValueError as e:  # the selection's own one-line message
        raise LookupError(str(e)) from None


def verdict(experiment: str, *, tracking_uri: str | None = None, sweep: str | None = None):
    """The report's verdict on the jobs :func:`results` returns, as a ``pandas.DataFrame``: one row
    per model × dataset (× ``dataset.train_size``, and every other swept key but batch, repeat, lr
    and device: column ``group``) × device, with ``batches`` (how many ran ok), ``best_batch`` and
    its ``best_lr`` (the lr that reached the target in the fewest steps), ``by`` (``time to target``
    or ``samples/s``), ``time_to_target_s``, ``samples_per_s``, ``lr_per_batch`` (the best lr of
    each batch, where the sweep varied the lr), ``knee`` (the smallest batch past which doubling
    gains < 10 % samples/s) and ``last_gain`` (the gain per doubling to the largest batch), ``fits`` (largest batch that fits) and ``fits_how``, ``energy_per_epoch_j``,
    ``energy_to_target_j``, ``cost_per_epoch``, ``cost_to_target`` and ``currency`` (where
    ``cost.per_hour`` was given), ``wins`` and ``speedup`` (beside the other devices),
    ``crossover_rows`` (the data size from which the other device wins), ``note`` (why a pick was
    not made, or noise) and ``verdict`` (the sentence the report prints); None where there is
    nothing to say it (:class:`sweeps.report.verdict.Finding`).

    Raises:
        LookupError: no such store, experiment or sweep, or no job in it (one line saying what exists).
    """
    from sweeps.report import verdict as findings, verdict_text

    client, jobs = _jobs(experiment, tracking_uri, sweep)
    fits = max_batches(client, client.get_experiment_by_name(experiment).experiment_id)
    return verdict_text.frame(findings.findings(jobs, fits))


def sweep_records(tracking_uri: str, parent_run_id: str) -> list[dict[str, Any]]:
    """One :func:`job_record` per job of the sweep ``parent_run_id``, in the order they ran;
    jobs skipped as already done appear with ``outcome`` ``skipped`` and the figures of the run
    that did them."""
    client = MlflowClient(tracking_uri)
    parent = client.get_run(parent_run_id)
    rows = [job_record(job_from_run(r)) for r in store.child_runs(client, parent.info.experiment_id, parent_run_id)]
    for key, run_id in parent.data.tags.items():
        if key.startswith(names.SKIPPED_TAG_PREFIX):
            rows.append({**job_record(job_from_run(client.get_run(run_id))), "outcome": names.SKIPPED})
    return rows


def single_record(tracking_uri: str, run_id: str) -> dict[str, Any]:
    """:func:`job_record` of the one run ``run_id`` (a job run without ``-m``)."""
    return job_record(job_from_run(MlflowClient(tracking_uri).get_run(run_id)))
