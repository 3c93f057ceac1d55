"""One job: config → task → `Job` (its MLflow run, signals, outcome) → device → work.

A job never raises for a failure of its own (OOM, a crash, a missing device, a diverged loss): the
job context logs the outcome and the sweep goes on. Bad input ([`UsageError`][sweeps.errors.UsageError]) stops the
sweep before the job's run is opened. SIGINT/SIGTERM end the job ``killed`` and then the sweep.
"""
from __future__ import annotations

import json
import logging
import time
import traceback
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from sweeps import devices, names
from sweeps.errors import DataUnavailable, UsageError, describe, signal_exception
from sweeps.job import identity, progress
from sweeps.job.finish import finish
from sweeps.job.summary import print_summary
from sweeps.job import ddp
from sweeps.placement import gpu_pool
from sweeps.placement.device import cpu_threads, job_devices, preflight, resolve_device
from sweeps.job import outcome as oc
from sweeps.job import parent_run, signals
from sweeps.state import current
from sweeps.tasks.base import Task, create, settings_of_other_tasks
from sweeps.telemetry.sampler import for_job
from sweeps.tracking.writer import inputs, naming
from sweeps.tracking.replay import replay, resume
from sweeps.tracking.follower import series
from sweeps.tracking.store import store
from sweeps.tracking.service import registry
from sweeps.provenance.machine import environment_tags, fingerprint_json
from sweeps.tracking.journal.journal import JOURNAL, EpochLog, read_journal
from sweeps.tracking.writer.run_writer import RunWriter
from sweeps.train import host_heap
from sweeps.train.checkpoint import Checkpoints

log = logging.getLogger("sweeps")


def _hydra_context() -> tuple[str, dict[str, str], bool]:
    """(job name from its overrides, {group: chosen option}, whether this is a multirun). The name
    is what a sweep's job is named by: its ``key=value`` overrides as typed, joined by spaces
    (`sweeps.tracking.writer.naming.parse_overrides` reads them back) — in a sweep the swept ones,
    else (a single run) all but those ``hydra.job.config.override_dirname.exclude_keys`` leaves
    out (paths, tracking settings); with none, the model and dataset chosen."""
    if not HydraConfig.initialized():
        return "job", {}, False
    hc = HydraConfig.get()
    choices = {k: str(v) for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
    multirun = hc.mode == RunMode.MULTIRUN
    swept = set(filter(None, (parent_run.get("swept_keys") or "").split(","))) if multirun else set()
    key = lambda o: o.split("=", 1)[0].lstrip("+~")  # noqa: E731
    name = " ".join(o for o in hc.overrides.task if key(o) in swept)
    excluded = set(hc.job.config.override_dirname.exclude_keys or ())
    name = name or " ".join(o for o in hc.overrides.task if key(o) not in excluded)
    name = name or " ".join(f"{g}={choices[g]}" for g in ("model", "dataset") if g in choices)
    return name, choices, multirun


class Job:
    """The context of one job (``with Job(...) as job:``): it opens the job's MLflow run (or
    reopens a killed one to resume it), and on every way out of the block — ok, oom, diverged,
    error, unavailable, SIGINT/SIGTERM anywhere, a second signal while finishing — flushes what
    was measured and writes the outcome and the run status exactly once
    (`sweeps.job.finish.finish`). Opening and finishing hold signals back, so a run is
    never left half-written or RUNNING by a process that exits.

    What a task uses: `writer` (metrics, tags), `epochs` (per-epoch records),
    `checkpoints`, `resume_state` (a checkpoint to go on from, or None),
    `telemetry` (the sampler, once `start_telemetry` ran), `log`.
    After the block: `outcome`, `error`, `run_id`.
    """

    log = log

    def __init__(self, cfg: DictConfig, task: Task, client, experiment_id: str, name: str,
                 choices: dict[str, str], multirun: bool, config_hash: str, previous=None,
                 started_at: float | None = None, identity: dict[str, str] | None = None):
        self.cfg, self.task, self.client, self.experiment_id = cfg, task, client, experiment_id
        self.name, self.choices, self.multirun, self.config_hash = name, choices, multirun, config_hash
        self.previous = previous
        self.identity = identity or {}  # data fingerprint, hardware, the user's code: tags beside the hash
        self.writer: RunWriter | None = None
        self.telemetry = self.device = self.resume_state = None
        self.epochs: EpochLog | None = None
        self.outcome: str | None = None
        self.error = ""
        self.started_at = time.perf_counter() if started_at is None else started_at  # time/job_s
        self.first_epoch = 1  # the first epoch this process runs (past the checkpoint when resuming)
        self.measured_s = 0.0  # measured work outside epochs (compilation, inference): not overhead

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    def __enter__(self) -> "Job":
        with signals.held() as pending:
            self._open()
        if pending:  # the run exists: close it as killed, then stop as the signal asked
            self.__exit__(KeyboardInterrupt, signal_exception(pending[0]), None)
            raise signal_exception(pending[0])
        return self

    def _open(self) -> None:
        cfg, data = self.cfg, self.task.data
        tags = {names.OUTCOME_TAG: names.RUNNING, names.HASH_TAG: self.config_hash, **self.identity,
                **resume.owner_tags()}
        root = Path(cfg.checkpoint.dir) / self.config_hash
        records: list[dict] = []
        logged_through = 0
        if self.previous is not None and cfg.task == "train":  # killed earlier: go on in its run
            run_dir = root / self.previous.info.run_id
            self.resume_state = Checkpoints(run_dir, 0, cfg.checkpoint.keep).load_latest()
        if self.resume_state is not None:
            self.writer = RunWriter.attach(self.client, self.previous.info.run_id)
            self.writer.keep_in(run_dir)  # params, tags, texts journaled before they are sent; the cursor
            self.writer.every_epochs, self.writer.every_evaluated = series.of_config(cfg)  # before the replay below
            self.writer.set_tags({**tags, names.RESUMED_TAG: "true", names.ERROR_TAG: ""})
            parent, before = parent_run.get("parent_run_id") if self.multirun else None, self.previous.data.tags.get(names.PARENT_RUN_TAG)
            if parent and parent != before:  # the sweep that resumed it owns it now: its summary and report count it
                self.writer.set_tags({names.PARENT_RUN_TAG: parent, names.PREVIOUS_PARENT_TAG: before or ""})
                self.client.update_run(self.writer.run_id, name=naming.with_id(self._title(), parent))
            self.first_epoch = self.resume_state["epoch"] + 1
            records = read_journal(run_dir / JOURNAL, self.resume_state["epoch"])  # EpochLog cuts the rest
            self.writer.replay(records)  # what the killed process still had queued
            logged_through = max((m.step for m in self.client.get_metric_history(self.writer.run_id, names.EPOCH_S)),
                                 default=0)
            self.writer.cursor.write(logged_through)  # their re-run is journaled anew, never sent again
        else:
            parent = parent_run.get("parent_run_id") if self.multirun else None
            title = self._title()  # "mlp b64 cpu #<sweep id>" (sweeps.tracking.writer.naming)
            self.writer = RunWriter(self.client, self.experiment_id, naming.with_id(title, parent) if parent else title,
                                    parent, {**environment_tags(), names.OVERRIDES_TAG: self.name, **tags})
            self.writer.every_epochs, self.writer.every_evaluated = series.of_config(cfg)
            run_dir = root / self.writer.run_id
            self.writer.keep_in(run_dir)  # params, tags, texts journaled before they are sent; the cursor
            if not parent:  # a run of its own is named by its own id, known only now
                self.client.update_run(self.writer.run_id, name=naming.with_id(title, self.writer.run_id))
            self.writer.log_params({**store.flatten(cfg, self.task.other_settings), **self.choices})
            self.writer.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
            self.writer.log_text(fingerprint_json(), "fingerprint.json")
        self.checkpoints = Checkpoints(run_dir, cfg.checkpoint.every_epochs, cfg.checkpoint.keep,
                                       cfg.checkpoint.every_s)
        self.epochs = EpochLog(self.writer, run_dir / JOURNAL, self.task.regression, cfg.log_every_s,
                               cfg.epochs, records, logged_through, rewrite=self.resume_state is not None)
        self.writer.follow()  # the follower ships the journal from the run's cursor, from now on
        self.launcher.on_open(self)  # under Slurm: its job id tags, requeue time lost, checkpoint-then-requeue
        if data is not None:
            self.writer.log_metrics({names.BATCH: data.batch, names.LR: data.lr})
            self.writer.queue_tags({names.LR_TAG: data.lr_source})
            log.info("  batch %d, %s, %d train / %d test examples", data.batch, data.lr_source,
                     len(data.train), len(data.test))
            if cfg.task == "train" and (line := series.console_line(cfg)):  # where every epoch is, once a job
                log.info(line)
            if self.resume_state is None:  # MLflow dataset inputs and example counts: a resumed run has them
                inputs.log_job_data(self.writer, cfg.dataset, self.identity.get(names.DATA_TAG, "unknown"),
                                    data.spec.in_shape, len(data.train) if self.task.needs_train_data else None,
                                    len(data.test), self.task.regression)
                if not self.task.regression:  # the verdict tells a run stuck at chance accuracy by it
                    self.writer.log_params({names.CLASSES_PARAM: str(data.spec.num_outputs)})
        elif isinstance(cfg.batch, int):
            self.writer.log_metrics({names.BATCH: cfg.batch})

    def _title(self) -> str:
        return naming.job_title(self.cfg, self.choices, self.name, self.multirun)

    def start_telemetry(self, device: torch.device) -> None:
        """Note the job's device and start sampling it (stopped when the job ends)."""
        self.device = device
        self.telemetry = for_job(self.cfg.telemetry.interval_s, job_devices(self.cfg.device, device))  # ddp: all its GPUs

    def __exit__(self, exc_type, exc, tb) -> bool:
        with signals.held() as pending:
            if self.outcome is None:
                outcome, error = self._classify(exc)
                peak = None
                if outcome == names.OOM and self.device is not None \
                        and self.cfg.device.name != "ddp":  # ddp: the ranks measured it; no context on cuda:0 here
                    peak = devices.of(self.device).peak_mb(self.device)  # CUDA's: higher than any epoch's (CPU: none)
                if tb is not None:  # free the failed frames' tensors before memory is released
                    traceback.clear_frames(tb)
                finish(self, outcome, error, peak)
                current().last_job.update(name=self.name, outcome=outcome, run_id=self.writer.run_id if self.writer else "",
                                tracking_uri=self.client.tracking_uri)
        if pending and not isinstance(exc, KeyboardInterrupt):  # arrived while finishing: the job is closed
            raise signal_exception(pending[0])
        return isinstance(exc, Exception)  # failures are outcomes; signals and exits go on up

    def _work_done(self) -> bool:
        """Whether a training job's last epoch (``epochs``) had ended and been recorded."""
        records = self.epochs.records if self.epochs is not None else []
        return self.cfg.task == "train" and bool(records) and records[-1].get("epoch", 0) >= self.cfg.epochs

    def _classify(self, exc: BaseException | None) -> tuple[str, str]:
        if exc is None:
            return names.OK, ""
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            how = getattr(exc, "signal_name", "SIGINT") if isinstance(exc, KeyboardInterrupt) else "exit"
            if self._work_done():  # every epoch ended before the signal: the job's result stands
                log.info("job %s: %s arrived after its last epoch: outcome ok", self.name, how)
                return names.OK, ""
            return names.KILLED, f"interrupted by {how}; rerun the sweep to resume from the last checkpoint"
        outcome, error = oc.classify(exc)
        if outcome == names.ERROR:
            log.error("job %s failed", self.name, exc_info=(type(exc), exc, exc.__traceback__))
        else:
            log.warning("job %s: %s (%s)", self.name, outcome, error)
        return outcome, error


def run(cfg: DictConfig, launcher) -> str:
    """Run the job ``cfg`` describes (completed and checked by the caller: ``sweeps.config.complete``,
    ``sweeps.config.validate``), under ``launcher`` (the `sweeps.launchers.Launcher` of
    the Hydra launcher running this process: it is asked for pool slots and told once the run is
    open); returns its outcome (see `sweeps.names.OUTCOMES`), or
    ``skipped`` when an earlier run of the same config is done, or another live process is
    running it (`sweeps.tracking.replay.resume.claim`, `running_run`).

    Raises:
        UsageError: bad input (config value, data path) — the caller stops the sweep.
        KeyboardInterrupt: SIGINT/SIGTERM (after the job's run is closed ``killed``).
    """
    started_at = time.perf_counter()
    signals.stop_if_received()  # the sweep was interrupted: no job starts after that
    preflight(cfg)  # what this machine lacks for every such job (compile=true without a C compiler)
    if HydraConfig.initialized() and HydraConfig.get().job.chdir:
        raise UsageError("hydra.job.chdir=true runs each job in its own folder, so ./mlruns and ./checkpoints would "
                         "scatter per job: leave it false (paths are resolved from where sweeps starts)")
    name, choices, multirun = _hydra_context()
    log.info(progress.job_line(name, HydraConfig.get().job.num + 1 if multirun else None,
                               list(HydraConfig.get().overrides.task) if multirun else ()))
    task = create(cfg)
    client, experiment_id = registry.prepare(cfg, hold=signals.held)  # a new store is created whole
    signals.stop_if_received()  # a signal held while the store was created: raised now
    if not multirun:  # a sweep does this once, in its callback
        replay.mark_stale(client, experiment_id, cfg.checkpoint.dir)
    task.other_settings = tuple(settings_of_other_tasks(cfg.task))  # neither params nor identity
    ident = identity.of_job(cfg, task.other_settings)  # config, data, hardware, the user's code
    chash = ident.config_hash
    try:  # one process per config: of two that start it at once, one runs it (held for the job's life)
        held = resume.claim(cfg.checkpoint.dir, chash)
    except resume.ClaimHeld as e:
        previous = identity.previous_run(client, experiment_id, ident, name) if cfg.resume else None
        if previous is not None and previous.data.tags.get(names.OUTCOME_TAG) in names.DONE:
            return _skip(cfg, client, chash, previous, multirun, clear=False)  # its holder only skips it too
        return _elsewhere(cfg, client, experiment_id, name, chash, multirun, holder=e.holder)
    with held:  # released on every way out (the kernel drops it at a kill -9)
        previous = identity.previous_run(client, experiment_id, ident, name) if cfg.resume else None
        if previous is not None and previous.data.tags.get(names.OUTCOME_TAG) in names.DONE:
            return _skip(cfg, client, chash, previous, multirun)
        other = resume.running_run(client, experiment_id, chash) if cfg.resume else None  # another host's
        if other is not None:
            return _elsewhere(cfg, client, experiment_id, name, chash, multirun, run=other)
        return _run_job(cfg, task, client, experiment_id, name, choices, multirun, chash, previous, started_at,
                        ident.tags, launcher)


def _reused_tags(cfg: DictConfig, chash: str) -> dict[str, str]:
    """The parent run's ``sweeps.reused_job.<hash>`` tag of a job this sweep reuses instead of
    running it: its place in the sweep and, where the sweep gave ``cost.per_hour``, its price."""
    price = {f"cost.{k}": v for k, v in store.flatten(cfg.cost).items()} if cfg.cost.per_hour is not None else {}
    return {f"{names.REUSED_JOB_TAG_PREFIX}{chash}": json.dumps({"job": HydraConfig.get().job.num, "params": price})}


def _tag_parent(client, tags: dict[str, str]) -> None:
    parent = parent_run.get("parent_run_id")
    for key, value in tags.items():
        client.set_tag(parent, key, value)


def _skip(cfg: DictConfig, client, chash: str, previous, multirun: bool, clear: bool = True) -> str:
    """A job done already in run ``previous``: one line, its leftover folders removed (``clear``:
    this process holds the config's claim), and in a sweep the parent run tagged with that run
    (the sweep reports it). Returns ``skipped``."""
    log.info("  already done in run %s (outcome %s): skipped; resume=false runs it again",
             previous.info.run_id, previous.data.tags.get(names.OUTCOME_TAG))
    oc.note(names.SKIPPED)
    if clear:
        try:  # a job killed after its run was closed, before its folder was removed
            resume.clear_finished(cfg.checkpoint.dir, chash, client, keep=None)
        except Exception as e:  # noqa: BLE001 (a leftover folder costs disk, not a result)
            log.warning("  its folders under %s not cleared (%s)", cfg.checkpoint.dir, describe(e))
    if multirun and parent_run.get("parent_run_id"):  # counted by the sweep from MLflow (jobs may run elsewhere)
        _tag_parent(client, {f"{names.SKIPPED_TAG_PREFIX}{chash}": previous.info.run_id, **_reused_tags(cfg, chash)})
    return names.SKIPPED


def _elsewhere(cfg: DictConfig, client, experiment_id: str, name: str, chash: str, multirun: bool,
               holder: dict | None = None, run=None, wait_s: float = 5.0) -> str:
    """A job another live process is running (it holds the config's claim, ``holder``, or its
    RUNNING ``run`` is another host's): one line naming that run, host and process, and in a sweep
    the parent run tagged with it, so its result joins this sweep's report once it ends. The
    holder's run is waited for up to ``wait_s`` (it may not have opened it yet). Returns ``skipped``."""
    deadline = time.monotonic() + wait_s
    while run is None and holder:
        run = resume.running_run(client, experiment_id, chash, holder)
        if run is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    tags = run.data.tags if run is not None else {}
    host = (holder or {}).get("host") or tags.get(names.HOST_TAG, "?")
    pid = (holder or {}).get("pid") or tags.get(names.PID_TAG, "?")
    since = (holder or {}).get("since") or (run.info.start_time / 1000 if run is not None else None)
    where = f"in run {run.info.run_id[:8]}… " if run is not None else "(its run not open yet) "
    when = f" since {time.strftime('%H:%M', time.localtime(since))}" if since else ""
    log.info("job %s: running %son host %s (pid %s)%s: not run again here; its result joins this sweep's report",
             name, where, host, pid, when)
    if multirun and parent_run.get("parent_run_id"):
        _tag_parent(client, {f"{names.RUNNING_ELSEWHERE_TAG_PREFIX}{chash}": run.info.run_id if run is not None else "",
                             **_reused_tags(cfg, chash)})
    return names.SKIPPED


def _run_job(cfg: DictConfig, task: Task, client, experiment_id: str, name: str, choices: dict[str, str],
             multirun: bool, chash: str, previous, started_at: float, identity_tags: dict[str, str],
             launcher) -> str:
    """Run the job in its own MLflow run (``previous``: a killed run of it to resume, or None);
    returns its outcome."""
    missing = None
    try:
        task.prepare()
    except DataUnavailable as e:
        if cfg.dataset.if_missing != "skip":
            raise
        missing = e
    # hydra/launcher=gpu_pool: a GPU (or CPU share) of its own, held before the run opens (its
    # logged device.index is the GPU it runs on); the wait for it is not the job's overhead
    job = Job(cfg, task, client, experiment_id, name, choices, multirun, chash, previous,
                 started_at, identity_tags)
    job.launcher = launcher
    try:
        with (gpu_pool.claim(cfg.device, launcher.pool_slots()),
              cpu_threads(cfg.device.threads) as threads,
              host_heap.retained(cfg.device.malloc_trim_mb) as heap, job):
            job.started_at += gpu_pool.waited_s()
            job.writer.queue_tags({names.THREADS_TAG: threads, names.HEAP_TAG: heap})
            if missing is not None:  # dataset.if_missing=skip: an unavailable job, logged as such
                raise missing
            device = resolve_device(cfg.device)
            job.start_telemetry(device)
            if cfg.device.name == "ddp":  # N ranks, each running task.run; rank 0 logs into this run
                job.writer.log_metrics({names.WORLD_SIZE: cfg.device.gpus})
                ddp.launch(job, job.checkpoints.directory / JOURNAL)
            else:
                task.run(job, device)
    except KeyboardInterrupt as e:
        # Python checks for signals as a function starts: the first one may land as __exit__ (or the
        # end of __enter__) begins, before it holds signals — then the run is still open here. Later
        # signals are only noted (sweeps.job.signals), so this close is not cut short.
        if job.writer is not None and job.outcome is None:
            job.__exit__(type(e), e, None)
        raise
    progress.job_ended(time.perf_counter() - started_at)
    if not multirun and not job.writer.lost:  # a sweep prints its summary once, at its end (sweeps.sweep.callback)
        try:
            run = client.get_run(job.run_id)
        except Exception as e:  # the store went away: the job's own lines above say how it ended
            log.warning("job %s: no summary table (the store did not answer: %s)", name, describe(e))
        else:
            print_summary(client, [run])
            print(progress.next_steps(str(cfg.mlflow.experiment), client.tracking_uri, experiment_id, None), flush=True)
    return job.outcome
