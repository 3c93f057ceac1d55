"""One job: config → data → device → model → timed training → outcome → MLflow run.

A job never raises for a failure of its own (OOM, a crash, a missing device): it logs the
outcome and returns, so the sweep goes on. Bad input (:class:`UsageError`) stops the sweep.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from sweeps import inference
from sweeps import outcome as oc
from sweeps import ddp, flops, gpu_pool, max_batch, resume, speed, telemetry, tracking
from sweeps.checkpoint import Checkpoints, rng_state, set_rng_state
from sweeps.config import batch_size, scaled_lr, validate
from sweeps.console import EpochTable
from sweeps.data import build_datasets, default_workers, make_loaders
from sweeps.device_data import device_loaders
from sweeps.device import apply_precision, resolve_device, set_determinism
from sweeps.env import environment_tags, fingerprint_json
from sweeps.errors import DataUnavailable
from sweeps.models import count_parameters
from sweeps.sweep import print_summary
from sweeps.train import Trainer, make_optimizer, make_schedule, summarize

log = logging.getLogger("sweeps")


def _hydra_context() -> tuple[str, dict[str, str], bool]:
    """(job name from its overrides, {group: chosen option}, whether this is a multirun)."""
    if not HydraConfig.initialized():
        return "job", {}, False
    hc = HydraConfig.get()
    choices = {k: str(v) for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
    multirun = hc.mode == RunMode.MULTIRUN
    swept = set(filter(None, os.environ.get(tracking.SWEPT_KEYS_ENV, "").split(","))) if multirun else set()
    name = " ".join(o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept)
    name = name or hc.job.override_dirname or " ".join(f"{g}={choices[g]}" for g in ("model", "dataset") if g in choices)
    return name, choices, multirun


def _close_telemetry(job: tracking.JobRun, tel: telemetry.Telemetry | None, records: list[dict],
                     figure: bool, title: str) -> None:
    """Stop the sampler; log its job-level metrics, its tags and telemetry.csv/.png. Never raises."""
    if tel is None:
        job.set_tags({"telemetry": "off (the job ended before its device was ready)"})
        return
    try:
        tel.stop()
        job.log_metrics(tel.summary(sum(r.get("samples", 0) for r in records)))
        job.set_tags(tel.tags())
        if tel.rows:
            job.log_text(tel.csv(), "telemetry.csv")
            if figure:
                from sweeps.telemetry_plot import render  # matplotlib: only when drawing

                job.log_bytes(render(tel, title), "telemetry.png")
    except Exception as e:  # telemetry never fails a job
        log.warning("job %s: telemetry not logged (%s: %s)", title, type(e).__name__, e)


def _open_run(cfg: DictConfig, store: tuple, name: str, choices: dict, multirun: bool,
              tags: dict) -> tracking.JobRun:
    """The job's MLflow run in ``store`` = ``(client, experiment_id)``, nested under the sweep's
    parent in a multirun, with the resolved config (params and config.yaml), the machine (env.*
    tags and fingerprint.json) and ``tags``."""
    client, experiment_id = store
    job = tracking.JobRun(client, experiment_id, name, tracking.parent_run_id() if multirun else None,
                          {**environment_tags(), tracking.OVERRIDES_TAG: name, **tags})
    job.log_params({**tracking.flatten(cfg), **choices})
    job.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    job.log_text(fingerprint_json(), "fingerprint.json")
    return job


def _skip(cfg: DictConfig, store: tuple, name: str, choices: dict, multirun: bool, why: str) -> str:
    """Log a job whose data is missing as ``outcome=unavailable`` (``dataset.if_missing=skip``)."""
    log.warning("job %s: unavailable: %s", name, why)
    job = _open_run(cfg, store, name, choices, multirun,
                    {tracking.OUTCOME_TAG: oc.UNAVAILABLE, tracking.ERROR_TAG: why})
    if isinstance(cfg.batch, int):
        job.log_metrics({"batch_size": cfg.batch})
    job.end("FINISHED")
    return oc.UNAVAILABLE


def _execute(cfg: DictConfig, job: tracking.JobRun, data: tuple, batch: int, lr: float,
             device: torch.device, tel, on_epoch, ckpt: Checkpoints, state: dict | None,
             records: list[dict]) -> None:
    """Build the model on ``device`` and run the task: training epochs, or timed inference.
    ``data`` is ``(train_set, test_set, spec)``; ``state`` a checkpoint to resume from. Raises
    whatever the work raises (OOM, ...); everything it allocates is local, so it is freed when
    this frame is gone."""
    train_set, test_set, spec = data
    if cfg.device.name == "ddp":  # N processes (sweeps.ddp); rank 0's reduced records are logged here
        job.log_metrics({ddp.WORLD_SIZE_METRIC: cfg.device.gpus})
        for rec in ddp.launch(cfg, batch, lr):
            on_epoch(rec)
        return
    precision = apply_precision(cfg.precision, device)
    set_determinism(cfg.deterministic)
    torch.manual_seed(cfg.seed)
    model = instantiate(cfg.model, in_shape=spec.in_shape, num_outputs=spec.num_outputs).to(device)
    job.log_metrics({"model/params": count_parameters(model)})
    if cfg.task == "inference":
        x = inference.first_batch(test_set, batch, device)
        with precision.autocast(device):  # bf16/fp16: every forward pass under autocast
            stats = inference.summarize(inference.time_forward(model, x, cfg.timing.mode, cfg.timing.warmup,
                                                               cfg.timing.iters), batch)
        job.log_series("infer/iter_ms", stats.pop("infer/iter_ms"))
        job.log_metrics(stats)
        log.info("inference, timing.mode=%s: median %.3f ms per batch of %d", cfg.timing.mode,
                 stats["infer/median_ms"], batch)
        return
    channels_last = cfg.channels_last and speed.use_channels_last(model)
    impl = speed.optimizer_kwargs(cfg.optimizer.impl, device, precision.scaled)
    if cfg.task == "max_batch":
        max_batch.run_task(cfg.max_batch, job, model, spec, device, precision, channels_last,
                           lambda params: make_optimizer(cfg.optimizer, params, lr, **impl))
        return
    on_epoch = flops.tracker(job, model, spec, device, cfg.precision.name, on_epoch)  # + perf/flops_per_s, perf/mfu
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), lr, **impl)
    trainer = Trainer(model, spec, optimizer, make_schedule(cfg.schedule, optimizer, cfg.epochs),
                      device, cfg.log_every_s, monitor=tel, precision=precision, channels_last=channels_last)
    if cfg.dataset.loader == "device":
        loaders = device_loaders(train_set, test_set, batch, device, cfg.dataset.augment, cfg.seed)
    else:
        loaders = make_loaders(train_set, test_set, batch, device, default_workers(cfg.dataset, device), cfg.seed)
    if cfg.compile:  # compiled and warmed up here, out of the epoch times
        job.log_metrics({"time/compile_s": speed.compile_and_warm(trainer, *loaders, cfg.compile_mode)})
    start, elapsed = 1, 0.0
    if state is not None:
        trainer.load_state_dict(state)
        set_rng_state(state["rng"], loaders[0])
        start, elapsed = state["epoch"] + 1, records[-1]["time/elapsed_s"] if records else 0.0
        log.info("resuming from the checkpoint of epoch %d", state["epoch"])

    def after_epoch(rec: dict) -> None:
        on_epoch(rec)
        if ckpt.due(rec["epoch"]):  # outside the timed epoch: it does not bend epoch times
            ckpt.save(rec["epoch"], {**trainer.state_dict(), "rng": rng_state(loaders[0]), "records": records})

    trainer.fit(*loaders, cfg.epochs, after_epoch, start_epoch=start, elapsed_s=elapsed)


def run(cfg: DictConfig) -> str:
    """Run the job ``cfg`` describes; returns its outcome (``ok``, ``oom``, ``error``, ``unavailable``).

    Raises:
        UsageError: bad input (config value, data path) — the caller stops the sweep.
    """
    validate(cfg)
    name, choices, multirun = _hydra_context()
    client, experiment_id = tracking.prepare(cfg)
    if not multirun:  # a sweep does this once, in its callback
        resume.mark_stale(client, experiment_id)
    chash = resume.config_hash(cfg)
    previous = resume.previous_run(client, experiment_id, chash) if cfg.resume else None
    if previous is not None and previous.data.tags.get(tracking.OUTCOME_TAG) in resume.DONE:
        log.info("job %s: already done in run %s (outcome %s): skipped; resume=false runs it again", name,
                 previous.info.run_id, previous.data.tags.get(tracking.OUTCOME_TAG))
        oc.note(oc.SKIPPED)
        if multirun and tracking.parent_run_id():  # counted by the sweep from MLflow (jobs may run elsewhere)
            client.set_tag(tracking.parent_run_id(), f"{tracking.SKIPPED_TAG_PREFIX}{chash}", previous.info.run_id)
        return oc.SKIPPED
    ckpt = Checkpoints(Path(cfg.checkpoint.dir) / chash, cfg.checkpoint.every_epochs, cfg.checkpoint.keep)
    state = ckpt.load_latest() if previous is not None and cfg.task == "train" else None
    try:
        train_set, test_set, spec = build_datasets(cfg.dataset, cfg.seed)
    except DataUnavailable as e:
        if cfg.dataset.if_missing != "skip":
            raise
        return _skip(cfg, (client, experiment_id), name, choices, multirun, str(e))
    batch = batch_size(cfg, len(train_set))
    lr = scaled_lr(cfg.optimizer.base_lr, batch, cfg.lr_scaling.base_batch, cfg.lr_scaling.rule)
    run_tags = {tracking.OUTCOME_TAG: "running", resume.HASH_TAG: chash, **resume.owner_tags()}
    if state is not None:  # go on in the killed run: its metrics continue
        job = tracking.JobRun.attach(client, previous.info.run_id)
        job.set_tags({**run_tags, resume.RESUMED_TAG: "true", tracking.ERROR_TAG: ""})
    else:
        job = _open_run(cfg, (client, experiment_id), name, choices, multirun, run_tags)
    job.log_metrics({"batch_size": batch, "lr": lr})
    log.info("job %s: batch %d, lr %.4g, %d train / %d test examples", name, batch, lr,
             len(train_set), len(test_set))

    table = EpochTable(spec.task == "regression")
    records: list[dict] = list(state["records"]) if state is not None else []

    def on_epoch(rec: dict) -> None:
        if not records:
            log.info(table.header())
        records.append(rec)
        log.info(table.row(rec))
        job.log_metrics({k: v for k, v in rec.items() if "/" in k}, step=rec["epoch"])

    outcome, error, device, peak, tel = oc.OK, "", None, {}, None
    try:
        with gpu_pool.claim(cfg.device):  # hydra/launcher=gpu_pool: a GPU (or CPU share) of its own
            device = resolve_device(cfg.device)
            tel = telemetry.for_job(cfg.telemetry.interval_s, device)  # stopped in the finally below
            _execute(cfg, job, (train_set, test_set, spec), batch, lr, device, tel, on_epoch, ckpt, state, records)
    except (KeyboardInterrupt, SystemExit) as e:
        _close_telemetry(job, tel, records, cfg.telemetry.figure, name)
        if records:
            job.log_text(table.csv(records), "epochs.csv")
        why = f"interrupted by {getattr(e, 'signal_name', 'SIGINT')}; rerun the sweep to resume from the last checkpoint"
        job.set_tags({tracking.OUTCOME_TAG: oc.KILLED, tracking.ERROR_TAG: why})
        job.end("KILLED")
        raise
    except Exception as e:  # an outcome, not a crash: the sweep goes on
        outcome, error = oc.classify(e)
        if device is not None and device.type == "cuda":
            peak = {"mem/peak_mb": torch.cuda.max_memory_allocated(device) / 2**20}
        if outcome == oc.ERROR:
            log.exception("job %s failed", name)
        else:
            log.warning("job %s: %s (%s)", name, outcome, error)
    finally:
        if tel is not None:  # on every path: ok, oom, error, killed (idempotent)
            tel.stop()
    # out of the except block: the failed frames (and their tensors) are gone now
    oc.release_memory(device)
    oc.note(outcome)
    summary = summarize(records, spec.task == "regression")
    if peak:  # an OOM's peak is higher than any finished epoch's
        summary["mem/peak_mb"] = max(peak["mem/peak_mb"], summary.get("mem/peak_mb", 0.0))
    job.log_metrics(summary)
    _close_telemetry(job, tel, records, cfg.telemetry.figure, name)
    if records:
        job.log_text(table.csv(records), "epochs.csv")
    if outcome in resume.DONE:
        ckpt.clear()
    job.set_tags({tracking.OUTCOME_TAG: outcome, **({tracking.ERROR_TAG: error} if error else {})})
    job.end("FAILED" if outcome == oc.ERROR else "FINISHED")
    if not multirun:  # a sweep prints its summary once, at its end (sweeps.sweep)
        print_summary(client, [client.get_run(job.run_id)])
    return outcome
