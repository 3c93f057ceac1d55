"""``task=train``: timed training epochs, the study's main job.

The training job comes from `sweeps.train.builder.build_training` (the same for one device and for
each rank of a data-parallel job); this module adds what happens around the epochs: FLOPs and
MFU, compilation kept out of the timer, resume from a checkpoint, a checkpoint when one is due
(outside the timed epoch), and the job-level summary.

Under ``device=ddp`` every rank runs `TrainTask.run` with a rank-side job
(`sweeps.job.rank.RankJob`): the ranks' epoch records are gathered and reduced after
each epoch (`sweeps.train.distributed.gather_epoch`), so every rank sees the same record and
takes the same decisions (a diverged loss); only rank 0's job logs, journals and checkpoints.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import torch

from sweeps import names
from sweeps.state import current, said_once
from sweeps.data import resident_loader
from sweeps.data.loaders import default_workers, describe_workers, process_threads
from sweeps.errors import Diverged, describe, signal_exception
from sweeps.models import count_parameters
from sweeps.tasks.base import Task, register
from sweeps.train import distributed, flops
from sweeps.train.builder import build_training
from sweeps.train.loop import summarize
from sweeps.train.optim import describe as describe_optimizer
from sweeps.train.speed import one_thread_for_small_steps, threads_held_for_sweep
from sweeps.time_to_target import met, to_target
from sweeps.tracking.store.store import PARENT_RUN_ENV

log = logging.getLogger("sweeps")


@register
class TrainTask(Task):
    """Train ``epochs`` epochs; one record per epoch to ``job.epochs`` (see
    `sweeps.train.loop.Trainer.fit` for its keys)."""

    name = "train"

    def run(self, job, device: torch.device) -> None:
        cfg, data = self.cfg, self.data
        training = build_training(cfg, data, device, monitor=job.telemetry)
        job.writer.log_metrics({names.PARAMS: count_parameters(training.model)})
        with_perf, per_example = flops.tracker(job.writer, training.model, data.spec, device, cfg.precision.name,
                                               devices=distributed.world_size(), example=flops.first_input(data.train))
        if distributed.world_size() == 1:  # a rank has its share already
            choose_threads(job, cfg, data, device, per_example and per_example * data.batch)
        # after the thread choice: the tag states the count the job trains with
        job.writer.queue_tags({names.LOADER_TAG: describe_workers(
            cfg.dataset, device, data.train, resident_loader(cfg.dataset.loader, data.train)),
            names.OPTIMIZER_TAG: describe_optimizer(training.trainer.optimizer)})
        if cfg.compile:  # compiled and warmed up here, out of the epoch times
            job.measured_s = training.compile()  # measured work: not in time/overhead_s
            # a resumed run keeps its first part's figure: a second value at step 0 would break
            # "each (metric, step) once" (the parts compile alike; each part's own is not overhead)
            job.writer.log_summary({names.COMPILE_S: job.measured_s})
            job.writer.set_tags({names.COMPILED_TAG: training.compiled})
        start, elapsed = 1, 0.0
        state = job.resume_state
        if state is not None:
            training.load_state_dict(state)
            start, elapsed = state["epoch"] + 1, state.get("elapsed_s", 0.0)
            job.log.info("resuming from the checkpoint of epoch %d", state["epoch"])

        target = cfg.target if cfg.target.metric is not None else None
        earlier = getattr(job.epochs, "records", [])  # a resumed job's earlier parts (ranks > 0 keep none)
        reached = [target is not None and any(met(r, target) for r in earlier)]

        def after_epoch(rec: dict) -> None:  # outside the timed epoch: nothing here bends epoch times
            rec = distributed.gather_epoch(rec)  # all ranks' record, reduced (one device: rec itself)
            with_perf(rec)
            job.epochs.append(rec)
            if target is not None and not reached[0] and met(rec, target):
                reached[0] = True
                job.writer.set_tags({names.TARGET_TAG: names.TARGET_REACHED})
                job.log.info("target %s %s %g reached in epoch %d", target.metric, "≥" if target.mode == "max" else "≤",
                             target.value, rec["epoch"])
                if target.stop:  # every rank saw the same reduced record: all stop here
                    raise TargetReached
            if not math.isfinite(rec[names.TRAIN_LOSS]):
                raise Diverged(f"non-finite training loss ({rec[names.TRAIN_LOSS]}) in epoch {rec['epoch']}: "
                               f"lower the learning rate (lr={data.lr:g})")
            if job.epochs.off and not job.checkpoints.off:  # resume needs the journal up to its checkpoint
                job.checkpoints.off = f"no checkpoints without the epoch journal ({job.epochs.off})"
            if job.checkpoints.due(rec["epoch"]):
                job.checkpoints.save(rec["epoch"], {**training.state_dict(), "elapsed_s": rec[names.ELAPSED_S]})
                if job.checkpoints.off:  # the disk refused it: said once, the job goes on
                    try:
                        job.writer.set_tags({names.CHECKPOINTS_TAG: f"off: {job.checkpoints.off}"})
                    except Exception as e:  # the store may sit on the same full disk
                        job.log.warning("could not tag the run with it (%s)", describe(e))
            if current().signals:  # its exception was swallowed (a finalizer, a library's except): stop now
                raise signal_exception(current().signals[0])

        try:
            training.trainer.fit(training.train_loader, training.test_loader, cfg.epochs, after_epoch,
                                 start_epoch=start, elapsed_s=elapsed, eval_every=cfg.eval.every_epochs)
        except TargetReached:  # target.stop: the job's work is done at that epoch
            diagnose(job, cfg, data, training, getattr(job.epochs, "records", []))
            return
        if target is not None and not reached[0]:  # every epoch ran without reaching it; the job is still ok
            job.writer.set_tags({names.TARGET_TAG: names.TARGET_MISSED})
        diagnose(job, cfg, data, training, getattr(job.epochs, "records", []))

    def summarize(self, records: list[dict]) -> dict[str, float]:
        return {**summarize(records, self.regression), **to_target(records, self.cfg.target)}


def diagnose(job, cfg, data, training, records: list[dict]) -> None:
    """Where the job's step goes and what holds it back, after its timed epochs
    (`sweeps.train.profile_window`, `sweeps.bottleneck`): ``diag/*`` metrics, tags
    ``diag.bottleneck``, ``diag.evidence``, ``diag.advice`` and the trace artifact. Every rank of a
    data-parallel job runs the window (its collectives need them all); rank 0 logs it. A window
    that fails costs the diagnosis, never the job: one line, and ``diag.bottleneck`` says why."""
    if cfg.diag.steps <= 0:
        return
    from sweeps import bottleneck
    from sweeps.data.device_loader import can_reside
    from sweeps.tracking.store.store import flatten
    from sweeps.train import profile_window

    trace = Path(tempfile.mkdtemp(prefix="sweeps-diag-")) / Path(names.DIAG_TRACE).name
    try:
        timed = [sum(r[names.phase_ms(p)] for p in names.PHASES) for r in records[1:] or records
                 if all(r.get(names.phase_ms(p)) is not None for p in names.PHASES)]  # epochs 2 on: warm
        found = profile_window.measure(training.trainer, training.train_loader, int(cfg.diag.steps),
                                       int(cfg.diag.warmup_steps), trace, statistics.median(timed) if timed else None)
        mfus = [r[names.MFU] for r in records if r.get(names.MFU) is not None]
        facts = {"convolutional": any(isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d))
                                      for m in training.model.modules()),
                 "can_reside": can_reside(data.train), "cores": os.cpu_count() or 1,
                 "workers": getattr(training.train_loader, "num_workers", None)}  # None: served from the device
        diag = bottleneck.diagnose(found, flatten(cfg), statistics.median(mfus) if mfus else None, **facts)
    except Exception as e:  # noqa: BLE001 (the measurement is done: a failed window costs its diagnosis only)
        job.log.warning("no diagnosis: the profiled window failed (%s)", describe(e))
        job.writer.set_tags({names.BOTTLENECK_TAG: f"unknown ({describe(e)})"})
        shutil.rmtree(trace.parent, ignore_errors=True)
        return
    job.writer.log_summary(found.metrics())
    job.writer.set_tags({names.BOTTLENECK_TAG: diag.bottleneck, names.DIAG_EVIDENCE_TAG: diag.evidence,
                         names.DIAG_ADVICE_TAG: "; ".join(diag.advice)})
    try:
        job.writer.log_file(trace, str(Path(names.DIAG_TRACE).parent))
    except Exception as e:  # noqa: BLE001 (the figures are logged; the trace is a convenience)
        job.log.warning("the profiled window's trace was not logged (%s)", describe(e))
    finally:
        shutil.rmtree(trace.parent, ignore_errors=True)
    advice = f"; try {', '.join(diag.advice)} (python -m sweeps.advise)" if diag.advice else ""
    job.log.info("%s: %s%s", diag.bottleneck, diag.evidence, advice)


def choose_threads(job, cfg, data, device: torch.device, flops_per_step: float | None) -> None:
    """torch's intra-op threads for a one-process training job, set before its first step, and
    its ``torch.threads`` tag. ``device.threads`` set: exactly that count (set by the job's
    ``cpu_threads`` context); nothing else follows from it, which a CPU job says once per model ×
    dataset × device on the console. Null: a single run decides from its own steps
    (`one_thread_for_small_steps`); a sweep's job takes the choice held
    for its model × dataset × device, made by the first such job of the sweep
    (`threads_held_for_sweep`). ``flops_per_step``: FLOPs of one
    training step (None: not counted)."""
    choices = getattr(job, "choices", {})  # a data-parallel rank's job names none (and is no sweep's)
    model = choices.get("model") or str(cfg.model.get("_target_"))
    dataset = choices.get("dataset") or str(cfg.dataset.get("_target_"))
    if cfg.device.threads is not None:
        if device.type == "cpu" and said_once(("device.threads", model, dataset, device.type)):
            workers = ("DataLoader workers stay at their default, "
                       f"{default_workers(cfg.dataset, device, data.train)} (from the cores and torch's default "
                       f"{process_threads()} thread(s))" if cfg.dataset.num_workers is None
                       else "DataLoader workers as dataset.num_workers says")
            log.info("  torch threads: %d (device.threads) for %s on %s (%s); nothing else follows from it: %s",
                     torch.get_num_threads(), model, dataset, device.type, workers)
        return
    if getattr(job, "multirun", False):
        sweep = current().sweep.get("parent_run_id") or os.environ.get(PARENT_RUN_ENV) or ""
        tag = threads_held_for_sweep(sweep, model, dataset, device, flops_per_step, data.batch)
    else:
        tag = one_thread_for_small_steps(flops_per_step, device)
    if tag:
        job.writer.queue_tags({names.THREADS_TAG: tag})


class TargetReached(Exception):
    """Raised after the epoch that reached ``target`` when ``target.stop``: ends the epochs."""
