"""The end of a job, on every path: stop the sampler, log what was measured, close the run.

Called once per job by `sweeps.job.lifecycle.Job` with signals held back. Each step is
independent: one that fails (a full disk, a store that went away) is reported in one line and
the others still run, so the outcome tag and the run status are always written last.
"""
from __future__ import annotations

import logging
import shlex
import time

from sweeps import names, state
from sweeps.job.summary import describe_run
from sweeps.job import outcome as oc
from sweeps.telemetry import plot
from sweeps.tracking.replay import replay, resume
from sweeps.tracking.store import store
from sweeps.errors import describe
from sweeps.train.memory import release_memory

log = logging.getLogger("sweeps")
# telemetry.png needs a curve: a job with fewer samples (under ~5 s at the default 1 s interval)
# has them all in telemetry.csv, and drawing would cost it ~0.1-0.2 s plus matplotlib's import
FIGURE_MIN_SAMPLES = 5


def overhead(job, records: list[dict]) -> dict[str, float]:
    """``time/job_s`` (this process's wall clock from the job's start to now, s) and
    ``time/overhead_s`` = job − (training passes + evaluations of the epochs this process ran +
    the task's other measured work: compilation, inference passes, max-batch trials), with ``time/overhead_frac`` (÷ job): what sweeps itself, data loading and start-up
    cost around the measured work."""
    job_s = time.perf_counter() - job.started_at
    mine = [r for r in records if r["epoch"] >= job.first_epoch]
    measured = sum(r.get(names.EPOCH_S, 0.0) + r.get(names.EVAL_S, 0.0) for r in mine) + job.measured_s
    out = {names.JOB_S: job_s, names.OVERHEAD_S: max(0.0, job_s - measured)}
    if job_s > 0:
        out[names.OVERHEAD_FRAC] = out[names.OVERHEAD_S] / job_s
    return out


def finish(job, outcome: str, error: str, oom_peak_mb: float | None = None) -> None:
    """Close ``job`` (a `Job`) with ``outcome`` and the one-line
    ``error``: job-level metrics (`Task.summarize` of its records, telemetry), artifacts
    (``epochs.csv``, ``telemetry.csv``/``.png``), the ``outcome``/``error`` tags and the run
    status, then the run's folder (checkpoints, journal) cleared once done and every value sent, or
    once unavailable (no epoch ran; a rerun starts a new run).
    A run the store did not let it close keeps its folder, with the outcome
    (`keep_unclosed`), for the next start to close it. The run's
    last epochs are drained first (`RunWriter.drain`): the follower ships them while this
    process draws the figure and builds the tables. Never raises."""
    job.outcome, job.error = outcome, error
    records = job.epochs.records if getattr(job, "epochs", None) is not None else []
    tel = job.telemetry

    # a killed job goes on in this same run when resumed: its job-level summary (step 0) is logged
    # once, when the run really ends, never twice (its epochs and epochs.csv are all there meanwhile)
    final = outcome != names.KILLED

    logged: dict[str, float] = {}  # the job-level values: kept for a later start where the store went away

    def summary() -> None:
        if not final:
            return
        metrics = job.task.summarize(records)
        if oom_peak_mb is not None:  # an OOM's peak is higher than any finished epoch's
            metrics[names.PEAK_MB] = max(oom_peak_mb, metrics.get(names.PEAK_MB, 0.0))
        logged.update({**metrics, **overhead(job, records)})
        job.writer.log_summary(logged)

    texts: dict[str, str] = {}  # artifact name → text, built before any store call
    png: list[bytes] = []

    def send() -> None:  # first: the store process ships the last epochs while this process does the rest
        epochs = getattr(job, "epochs", None)
        job.writer.drain(records[-1]["epoch"] if records else 0,
                         records if epochs is not None and epochs.unjournaled() else None)

    def figure() -> None:  # matplotlib's import and the drawing, ~1 s, here while the store ingests
        if tel is not None and job.cfg.telemetry.figure and len(tel.rows) >= FIGURE_MIN_SAMPLES:
            png.append(plot.render(tel, job.name))

    def tables() -> None:  # ~0.2 s for 10,000 epochs
        if tel is not None and tel.rows:
            texts["telemetry.csv"] = tel.csv()
        if records:
            texts["epochs.csv"] = job.epochs.csv()

    def telemetry() -> None:
        if tel is None:
            job.writer.queue_tags({names.TELEMETRY_TAG: "off (the job ended before its device was ready)"})
            return
        if final:
            values = tel.summary(sum(r.get("samples", 0) for r in records))
            logged.update(values)
            job.writer.log_summary(values)
        job.writer.queue_tags(tel.tags())
        if "telemetry.csv" in texts:
            job.writer.log_text(texts["telemetry.csv"], "telemetry.csv")

    def artifacts() -> None:
        job.epochs.close()
        if "epochs.csv" in texts:
            job.writer.log_text(texts["epochs.csv"], "epochs.csv")
        if png and png[0]:
            job.writer.log_bytes(png[0], plot.ARTIFACT)

    def free() -> None:  # for the next job in this process: a command that exits after its one job has none
        if not (state.current().exits_after_command and state.current().planned_jobs is None):
            release_memory(job.device)  # ~0.2-0.3 s: the first full collection of a process holding torch

    # this process's own work (the figure, the tables, the garbage collection) comes between the
    # post of the last metric values and the first store call, which waits for them: the two
    # overlap on two cores (a 10,000-epoch study 5 job's end: 3.2 s -> 1.8-2.6 s, docs/benchmarks.md)
    for step in (lambda: tel is not None and tel.stop(), summary, send, figure, tables, free, telemetry, artifacts):
        try:
            step()
        except Exception as e:  # one failed step never stops the run from being closed
            log.warning("job %s: %s while finishing (%s)", job.name, getattr(step, "__name__", "step"), describe(e))
    oc.note(outcome)
    status = names.RUN_STATUS.get(outcome, "FAILED")
    try:
        if job.writer.drained():  # refused after every retry: kept for the next start, late, not never
            raise ConnectionError(f"the store refused {job.writer.lost} value(s) after every retry")
        job.writer.set_tags({names.OUTCOME_TAG: outcome, **({names.ERROR_TAG: error} if error else {})})
        job.writer.end(status)
    except Exception as e:  # the store went away: the run's folder keeps what a later start closes it with
        unsent = {**texts, **({plot.ARTIFACT: png[0]} if png and png[0] else {})}
        folder = getattr(getattr(job, "checkpoints", None), "directory", None)
        kept = folder and replay.keep_unclosed(folder, outcome, error, status,
                                               {k: float(v) for k, v in logged.items() if v is not None}, unsent,
                                               job.writer.unsent_tags)
        if kept and store.deleted(job.client, job.writer.run_id):  # someone deleted it: not the store's failure
            log.warning("job %s (%s): its MLflow run %s was deleted while the job ran, so its last values and "
                        "outcome were not logged; they are kept in %s. To keep the run, restore it, and the next "
                        "`python -m sweeps` on this store and host completes and closes it (else a rerun runs "
                        "the job again):\n    MLFLOW_TRACKING_URI=%s mlflow runs restore --run-id %s", job.name,
                        outcome, job.writer.run_id, kept, shlex.quote(store.tracking_uri(job.cfg)), job.writer.run_id)
            return
        log.error("job %s: its MLflow run %s could not be closed (%s); %s", job.name, job.writer.run_id,
                  describe(e), f"its journal and outcome are kept in {kept}: the next `python -m sweeps` on this "
                  "store and host sends the missing epochs and closes it" if kept else "nothing could be kept")
        return
    if outcome in names.DONE and not job.writer.lost:  # kept otherwise: the journal holds what never arrived
        job.checkpoints.clear()  # and the folders of this config's earlier, killed runs
        try:
            resume.clear_finished(job.cfg.checkpoint.dir, job.config_hash, job.client, job.writer.run_id)
        except Exception as e:  # noqa: BLE001 (a leftover folder costs disk, not a result)
            log.warning("job %s: earlier runs' folders not cleared (%s)", job.name, describe(e))
    elif outcome == names.UNAVAILABLE and getattr(job, "checkpoints", None) is not None:
        job.checkpoints.clear()  # no epoch ran and a rerun starts a new run: its folder would only pile up
    try:  # the description last and apart: a store refusing it costs the description, not the outcome
        job.writer.post(f"the description of run {job.writer.run_id}", describe_run, job.writer.run_id,
                        outcome, error)  # where the store is: the next job starts meanwhile
    except Exception as e:
        log.warning("job %s: no description for run %s (%s)", job.name, job.writer.run_id, describe(e))
