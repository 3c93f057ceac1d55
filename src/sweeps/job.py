"""One job: config → data → device → model → timed training → outcome → MLflow run.

A job never raises for a failure of its own (OOM, a crash, a missing device): it logs the
outcome and returns, so the sweep goes on. Bad input (:class:`UsageError`) stops the sweep.
"""
from __future__ import annotations

import logging
import os

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from sweeps import inference
from sweeps import outcome as oc
from sweeps import telemetry, tracking
from sweeps.config import batch_size, scaled_lr, validate
from sweeps.console import EpochTable
from sweeps.data import build_datasets, default_workers, make_loaders
from sweeps.device import apply_precision, resolve_device
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


def _open_run(cfg: DictConfig, name: str, choices: dict, multirun: bool, tags: dict):
    """The job's MLflow run, nested under the sweep's parent in a multirun, with the resolved
    config (params and config.yaml), the machine (env.* tags and fingerprint.json) and ``tags``."""
    client, experiment_id = tracking.prepare(cfg)
    job = tracking.JobRun(client, experiment_id, name, tracking.parent_run_id() if multirun else None,
                          {**environment_tags(), tracking.OVERRIDES_TAG: name, **tags})
    job.log_params({**tracking.flatten(cfg), **choices})
    job.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    job.log_text(fingerprint_json(), "fingerprint.json")
    return client, job


def _skip(cfg: DictConfig, name: str, choices: dict, multirun: bool, why: str) -> str:
    """Log a job whose data is missing as ``outcome=unavailable`` (``dataset.if_missing=skip``)."""
    log.warning("job %s: unavailable: %s", name, why)
    _, job = _open_run(cfg, name, choices, multirun, {tracking.OUTCOME_TAG: oc.UNAVAILABLE, tracking.ERROR_TAG: why})
    if isinstance(cfg.batch, int):
        job.log_metrics({"batch_size": cfg.batch})
    job.end("FINISHED")
    return oc.UNAVAILABLE


def _execute(cfg: DictConfig, job: tracking.JobRun, data: tuple, batch: int, lr: float,
             device: torch.device, tel, on_epoch) -> None:
    """Build the model on ``device`` and run the task: training epochs, or timed inference.
    ``data`` is ``(train_set, test_set, spec)``. Raises whatever the work raises (OOM, ...);
    everything it allocates is local, so it is freed when this frame is gone."""
    train_set, test_set, spec = data
    apply_precision(cfg.precision)
    torch.manual_seed(cfg.seed)
    model = instantiate(cfg.model, in_shape=spec.in_shape, num_outputs=spec.num_outputs).to(device)
    job.log_metrics({"model/params": count_parameters(model)})
    if cfg.task == "inference":
        x = inference.first_batch(test_set, batch, device)
        stats = inference.summarize(inference.time_forward(model, x, cfg.timing.mode, cfg.timing.warmup,
                                                           cfg.timing.iters), batch)
        job.log_series("infer/iter_ms", stats.pop("infer/iter_ms"))
        job.log_metrics(stats)
        log.info("inference, timing.mode=%s: median %.3f ms per batch of %d", cfg.timing.mode,
                 stats["infer/median_ms"], batch)
        return
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), lr)
    trainer = Trainer(model, spec, optimizer, make_schedule(cfg.schedule, optimizer, cfg.epochs),
                      device, cfg.log_every_s, monitor=tel)
    loaders = make_loaders(train_set, test_set, batch, device, default_workers(cfg.dataset, device), cfg.seed)
    trainer.fit(*loaders, cfg.epochs, on_epoch)


def run(cfg: DictConfig) -> str:
    """Run the job ``cfg`` describes; returns its outcome (``ok``, ``oom``, ``error``, ``unavailable``).

    Raises:
        UsageError: bad input (config value, data path) — the caller stops the sweep.
    """
    validate(cfg)
    name, choices, multirun = _hydra_context()
    try:
        train_set, test_set, spec = build_datasets(cfg.dataset, cfg.seed)
    except DataUnavailable as e:
        if cfg.dataset.if_missing != "skip":
            raise
        return _skip(cfg, name, choices, multirun, str(e))
    batch = batch_size(cfg, len(train_set))
    lr = scaled_lr(cfg.optimizer.base_lr, batch, cfg.lr_scaling.base_batch, cfg.lr_scaling.rule)
    client, job = _open_run(cfg, name, choices, multirun, {tracking.OUTCOME_TAG: "running"})
    job.log_metrics({"batch_size": batch, "lr": lr})
    log.info("job %s: batch %d, lr %.4g, %d train / %d test examples", name, batch, lr,
             len(train_set), len(test_set))

    table = EpochTable(spec.task == "regression")
    records: list[dict] = []

    def on_epoch(rec: dict) -> None:
        if not records:
            log.info(table.header())
        records.append(rec)
        log.info(table.row(rec))
        job.log_metrics({k: v for k, v in rec.items() if "/" in k}, step=rec["epoch"])

    outcome, error, device, peak, tel = oc.OK, "", None, {}, None
    try:
        device = resolve_device(cfg.device)
        tel = telemetry.for_job(cfg.telemetry.interval_s, device)  # stopped in the finally below
        _execute(cfg, job, (train_set, test_set, spec), batch, lr, device, tel, on_epoch)
    except (KeyboardInterrupt, SystemExit):
        _close_telemetry(job, tel, records, cfg.telemetry.figure, name)
        job.set_tags({tracking.OUTCOME_TAG: oc.KILLED, tracking.ERROR_TAG: "interrupted"})
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
    job.set_tags({tracking.OUTCOME_TAG: outcome, **({tracking.ERROR_TAG: error} if error else {})})
    job.end("FAILED" if outcome == oc.ERROR else "FINISHED")
    if not multirun:  # a sweep prints its summary once, at its end (sweeps.sweep)
        print_summary(client, [client.get_run(job.run_id)])
    return outcome
