"""A sweep as a whole: the Hydra callback that opens the MLflow parent run before the jobs, and
closes it after them with the one-screen summary; and the stop on bad input.

MLflow (and the tracking modules that import it) are imported where a run is written, not here:
Hydra loads this callback before the sweep is checked, and a bad value answers without them."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from sweeps import names
from sweeps.console import wrap
from sweeps.errors import UsageError, describe, signal_exception
from sweeps import launchers
from sweeps.sweep.check import check_sweep, job_overrides, planned_jobs
from sweeps.job import progress
from sweeps.job.summary import print_summary
from sweeps.job import outcome, parent_run, signals
from sweeps.state import current
from sweeps.tracking.store import store
from sweeps.tracking.service import registry

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("sweeps")


def swept_keys(config: DictConfig) -> list[str]:
    """Keys the sweep varies: command-line sweep overrides (``batch=64,256``) and the preset's
    ``hydra.sweeper.params``. Job names show only these."""
    overrides = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    keys = [o.key_or_group for o in overrides if o.is_sweep_override()]
    params = [k.lstrip("+~") for k in (config.hydra.sweeper.get("params") or {})]
    return keys + [k for k in params if k not in keys]


def record_verdict(client: MlflowClient, parent_run_id: str, experiment_id: str, children: list) -> None:
    """Set the report's verdict on the parent run (tags ``sweeps.verdict``, ``sweeps.verdict.<group>``:
    `sweeps.report.verdict`), so the MLflow UI's run table shows it without a report, and print
    it under the summary. ``children``: the sweep's jobs, as MLflow runs or as
    `JobRecord` (with the sweep's price put on the runs it reused:
    `job`). Never raises: the sweep's result stands without it,
    and ``python -m sweeps.report`` writes it again."""
    try:
        from sweeps.report import runs, verdict, verdict_text

        jobs = [r if isinstance(r, runs.JobRecord) else runs.job_from_run(r) for r in children]
        findings = verdict.findings(jobs, runs.max_batches(client, experiment_id))
        verdict_text.log_to_parent(client, parent_run_id, findings)
        found = verdict_text.paragraphs(findings)
    except Exception as e:  # noqa: BLE001 (a verdict is never worth failing the sweep)
        log.warning("MLflow: the sweep run %s got no verdict (%s)", parent_run_id, describe(e))
        return
    if found:
        text = "\n".join(wrap(paragraph.replace("**", ""), indent="  ") for _, paragraph in found)
        print(f"\nVerdict (tag {names.VERDICT_TAG} on the sweep's run):\n{text}", flush=True)


def describe_sweep(client: MlflowClient, parent_run_id: str, children: list, summary: str, swept: list[str]) -> None:
    """Give the parent run what its jobs share as params (`sweeps.tracking.writer.naming.shared_params`,
    in batches of 100, MLflow's limit per call) and its summary in the description. Never raises:
    a store that refuses is reported in one line, the sweep's result stands."""

    from sweeps.tracking.store import entities
    from sweeps.tracking.writer import naming

    try:
        tags = client.get_run(parent_run_id).data.tags
        _, param, _ = entities.classes(client)  # MLflow's, or light ones for the store process's client
        params = [param(k, v) for k, v in naming.shared_params([dict(r.data.params) for r in children]).items()]
        for i in range(0, len(params), 100):
            client.log_batch(parent_run_id, params=params[i:i + 100])
        note = naming.sweep_note(tags.get(names.COMMAND_TAG, ""), swept, tags.get(names.SWEEP_DIR_TAG, ""),
                                 parent_run_id, summary)
        client.set_tag(parent_run_id, names.MLFLOW_RUN_NOTE, note)
    except Exception as e:  # noqa: BLE001 (a description is never worth failing the sweep)
        log.warning("MLflow: the sweep run %s got no params or description (%s)", parent_run_id, describe(e))


def _preset(config: DictConfig) -> str | None:
    """The ``+experiment=NAME`` of the command line, if any."""
    for item in config.hydra.overrides.task:
        key, _, value = str(item).partition("=")
        if key.lstrip("+~") == "experiment":
            return value
    return None


def stop(error: UsageError) -> None:
    """End the sweep on bad input: one line on stderr, exit 2. The parent run is closed FAILED
    with the reason in ``sweeps.stopped`` when jobs of it were logged; a parent with no job (the
    input was rejected before any ran) is deleted, so no empty run is left behind.

    Raises:
        SystemExit: always (status 2). Hydra lets it through, so no other job starts.
    """
    message = str(error)
    print(f"sweeps: error: {message}", file=sys.stderr, flush=True)
    sweep_run, uri = parent_run.close()
    if sweep_run and uri:
        from mlflow import MlflowClient

        client = MlflowClient(uri)
        client.set_tag(sweep_run, names.STOPPED_TAG, message[:5000])
        client.set_terminated(sweep_run, "FAILED")
        if not store.child_runs(client, client.get_run(sweep_run).info.experiment_id, sweep_run):
            client.delete_run(sweep_run)  # nothing was measured: leave no empty sweep in the UI
    raise SystemExit(2)


def _import_job_meanwhile() -> None:
    """Import the job module — torch and the training code, a few seconds — in a thread of its own
    while this one waits for the store process to open the store (its own imports: ~2-3 s on
    2 cores) and opens the parent run, as a one-job command overlaps the two; the first job's
    import then finds it done, or waits for the rest (Python's module lock). Only after the
    sweep's values were checked: bad input answers without torch. A signal is handled by the main
    thread alone, so it never lands inside these imports (see ``command._import_job``); the thread
    is a daemon: a sweep stopped meanwhile does not wait for it. An import that fails here is
    dropped without a word: a Ctrl-C storm that breaks an import the main thread shares can end
    this one in torch's half-built state (``operator prims::pow does not exist``), and a real
    failure raises again, in the first job, where it is reported."""
    import threading

    threading.Thread(target=_import_quietly, name="sweeps-import-job", daemon=True).start()


def _import_quietly(module: str = "sweeps.job.lifecycle") -> None:
    import importlib

    try:
        importlib.import_module(module)
    except BaseException:  # noqa: BLE001 — a head start only: the first job imports it again
        pass


def interrupted(signal_name: str) -> None:
    """Close the sweep's parent run KILLED after SIGINT/SIGTERM (the job's run is closed by the job)."""
    sweep_run, uri = parent_run.close()
    if sweep_run and uri:
        from mlflow import MlflowClient

        client = MlflowClient(uri)
        client.set_tag(sweep_run, names.OUTCOME_TAG, names.KILLED)
        client.set_tag(sweep_run, names.STOPPED_TAG, f"interrupted by {signal_name}")
        client.set_terminated(sweep_run, "KILLED")


class SweepCallback(Callback):
    """Registered in ``conf/config.yaml`` under ``hydra.callbacks``; active with ``-m``."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            jobs = planned_jobs(config)  # counted from the overrides alone
            checked = check_sweep(config)  # every job's values first: bad input is the one line, no header before it
            where = store.resolve_uri(config.mlflow.tracking_uri, create=False)  # made once the values are checked
            print(progress.header(jobs, _preset(config), str(config.mlflow.experiment), where), flush=True)
            progress.begin_sweep(jobs, job_overrides(config) if jobs else ())  # each job's kind: the time left
            current().planned_jobs = checked  # before the parent run opens and any job starts
            if checked:  # each job's values are checked once, here: the job does not check them again
                parent_run.note(checked_jobs=str(checked))
            if not launchers.runs_jobs_in_this_process(config):  # a pool's, Slurm's: the store process would idle
                registry.discard_spare()
            else:  # the parent run through the store process its jobs use: this process imports no mlflow
                registry.start(store.tracking_uri(config), str(config.mlflow.experiment))
                _import_job_meanwhile()
            client, experiment_id = registry.prepare(config, hold=signals.held)  # a new store is created whole
        except UsageError as e:
            stop(e)
        signals.stop_if_received()  # a signal held while the store was created: raised now
        with signals.held() as pending:  # the parent run is opened whole: a signal is raised after
            try:
                self._open_parent(config, client, experiment_id)
            except Exception as e:  # Hydra would shrink it to a warning and run the jobs without a parent
                stop(UsageError(f"cannot open the sweep's parent run in {client.tracking_uri} ({describe(e)}): "
                                "check the store, or set mlflow.tracking_uri=..."))
        if pending:
            raise signal_exception(pending[0])

    def _open_parent(self, config: DictConfig, client: MlflowClient, experiment_id: str) -> None:
    
        from sweeps.tracking.writer import naming
        from sweeps.tracking.replay import replay, resume
        from sweeps.provenance.machine import environment_tags

        replay.mark_stale(client, experiment_id, config.checkpoint.dir)
        name = "/".join(Path(str(config.hydra.sweep.dir)).parts[-2:]) or "sweep"
        command = " ".join(["python -m sweeps", *sys.argv[1:]])[:5000]
        tags = {**environment_tags(), **resume.owner_tags(), names.KIND_TAG: "sweep", names.SWEEP_DIR_TAG: str(config.hydra.sweep.dir),
                names.COMMAND_TAG: command}
        run = client.create_run(experiment_id, run_name=f"sweep {name}", tags=tags)
        # now: a failure below closes (deletes) this run
        parent_run.note(parent_run_id=run.info.run_id, tracking_uri=client.tracking_uri)
        swept = swept_keys(config)
        run_id = run.info.run_id  # the name and description carry its short id: known only now
        client.update_run(run_id, name=naming.sweep_title(swept, _preset(config), run_id))
        client.set_tag(run_id, names.MLFLOW_RUN_NOTE, naming.sweep_note(command, swept, str(config.hydra.sweep.dir), run_id))
        parent_run.note(swept_keys=",".join(swept))
        log.debug("MLflow: sweep run %s in experiment '%s' (id %s) at %s", run.info.run_id, config.mlflow.experiment,
                  experiment_id, client.tracking_uri)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        with signals.held() as pending:  # the summary and the parent's status are written whole
            self._end(config)
        if pending:  # after every job ended: the CLI says so and exits 130/143
            raise signal_exception(pending[0])

    def _end(self, config: DictConfig) -> None:
        sweep_run, uri = parent_run.close()
        if not sweep_run or not uri:
            return
        opened = registry.opened(uri, str(config.mlflow.experiment))  # the one the jobs used
        if opened is not None:
            client = opened[0]
        else:
            from mlflow import MlflowClient

            client = MlflowClient(uri)
        try:
            self._close_parent(config, client, sweep_run)
        except Exception as e:  # the jobs' runs are closed already: say so in one line, keep the exit status honest
            log.error("the sweep's summary could not be written to its parent run %s (%s); the jobs' runs are "
                      "complete: python -m sweeps.report --run-id %s reads them", sweep_run, describe(e), sweep_run)
            outcome.note_sweep_errors(1)
            try:
                client.set_terminated(sweep_run, "FAILED")
            except Exception:
                pass  # the store is gone: the next sweep marks the run stale

    def _close_parent(self, config: DictConfig, client: MlflowClient, parent: str) -> None:
        from sweeps.report import runs

        parent_run_ = client.get_run(parent)  # read now: its jobs tagged the runs they reused on it
        experiment_id = parent_run_.info.experiment_id
        jobs = runs.sweep_runs(client, parent_run_)  # ran here, skipped as done, run by another process
        every = [j.run for j in jobs]
        text = print_summary(client, every, parent, {j.run.info.run_id: j.reused for j in jobs if j.reused})
        describe_sweep(client, parent, every, text, swept_keys(config))
        record_verdict(client, parent, experiment_id, [j.job() for j in jobs])
        # from MLflow, not this process's counters: with joblib/submitit the jobs ran elsewhere;
        # only the jobs it ran itself (a reused run is done, or another sweep's to count)
        outcome.note_sweep_errors(sum(j.run.data.tags.get(names.OUTCOME_TAG) == outcome.ERROR for j in jobs
                                      if not j.reused))
        tags = client.get_run(parent).data.tags
        skipped = max(outcome.count(outcome.SKIPPED), sum(k.startswith(names.SKIPPED_TAG_PREFIX) for k in tags))
        if skipped:
            print(f"{skipped} job(s) skipped: already done (ok/oom) in this experiment; resume=false runs them again")
            client.set_tag(parent, f"{names.OUTCOMES_TAG_PREFIX}{names.SKIPPED}", str(skipped))
        client.set_terminated(parent, "FINISHED")
        print(progress.next_steps(str(config.mlflow.experiment), client.tracking_uri, experiment_id, parent), flush=True)
