"""Inference benchmark (``task=inference``): warm-up, then N timed forward passes on one batch.

Three ways to time it (``timing.mode``), so study 3 of the design notes can show why only two are
right:

- ``naive``: a host clock around each forward, no synchronize inside the reading. On CUDA this
  measures how long the host took to *enqueue* the kernels, not to run them — kept only to show
  its error (0.01 s naive vs 0.32 s true for ResNet-50, batch 128, on a T4; 4 ms vs 39 ms on an
  H100, fp32). Each reading starts on an idle GPU (a synchronize before it, outside the reading),
  as in a script that times one call: back to back, the launch queue fills after a few passes
  and the host then waits for the GPU at each launch, so the naive clock reads the true time by
  accident (measured on an H100: 5.5 ms for the first five passes, 39 ms from the seventh).
- ``sync``: a host clock with ``torch.cuda.synchronize()`` before reading it: true, but each
  iteration pays a host round trip.
- ``events``: a pair of CUDA events per iteration, resolved once at the end: true, and no sync
  inside the loop.

On a CPU there is no asynchronous work: all three are the same host clock. Events are recorded
on the stream of the batch's device (a job on cuda:k, k ≥ 1, is timed on its own GPU). The model
is built as for training (`sweeps.train.builder.build_model`: precision, ``channels_last``
for the model and its batch), and with ``compile=true`` compiled as a training job is (backend
``$SWEEPS_COMPILE_BACKEND``, a fresh dynamo cache per job: see
`CompileWatch`) by one forward pass before the warm-up, timed apart
as ``time/compile_s``; the ``compiled`` tag says whether it really ran compiled.
"""
from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from sweeps import devices, names
from sweeps.tasks.base import Task, register
from sweeps.train.builder import CompileWatch, build_model, compile_backend
from sweeps.train.timing import record, synchronize, wall_clock

MODES = names.TIMING_MODES


def time_forward(model: nn.Module, x: torch.Tensor, mode: str, warmup: int, iters: int) -> dict:
    """Time ``iters`` forward passes of ``model`` on the batch ``x`` after ``warmup`` untimed ones.

    Returns:
        ``times_ms`` (list, per iteration, ms), ``warmup_s`` (s, synchronized), ``wall_s`` (the
        timed loop's wall time with a synchronize at its end, s).

    Raises:
        ValueError: unknown ``mode``.
    """
    if mode not in MODES:
        raise ValueError(f"timing.mode={mode!r} is unknown: use one of {', '.join(MODES)}")
    device = x.device
    events = devices.of(device).events  # the kind's own event timing (CUDA)
    model.eval()
    with torch.inference_mode():
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(warmup):  # cuDNN autotuning, allocator growth, lazy init stay out
            model(x)
        synchronize(device)
        warmup_s = time.perf_counter() - t0
        times: list[float] = []
        start = time.perf_counter()
        if events and mode == "events":
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(iters)]
            for a, b in pairs:
                record(a, device)  # on the batch's GPU, whatever the current device is
                model(x)
                record(b, device)
            pairs[-1][1].synchronize()  # the one sync: after the loop
            times = [a.elapsed_time(b) for a, b in pairs]
        else:
            for _ in range(iters):
                if mode == "naive":
                    synchronize(device)  # an idle GPU, outside the reading (see the module's docstring)
                t = time.perf_counter()
                model(x)
                if mode == "sync":
                    synchronize(device)  # note: a CPU-GPU sync point on every iteration
                times.append((time.perf_counter() - t) * 1e3)
        synchronize(device)
        wall_s = time.perf_counter() - start
    return {"times_ms": times, "warmup_s": warmup_s, "wall_s": wall_s}


def summarize(result: dict, batch: int) -> dict[str, float]:
    """Median and spread of the per-iteration times (ms), throughput (samples/s, from the median)
    and the times themselves (``infer/iter_ms``, a list)."""
    t = sorted(result["times_ms"])
    q = statistics.quantiles(t, n=10) if len(t) > 1 else [t[0]] * 9
    median = statistics.median(t)
    return {names.INFER_ITER_MS: result["times_ms"], names.INFER_MEDIAN_MS: median,
            names.INFER_MEAN_MS: statistics.fmean(t), names.INFER_MIN_MS: t[0], names.INFER_P10_MS: q[0],
            names.INFER_P90_MS: q[-1], names.INFER_STD_MS: statistics.pstdev(t),
            names.INFER_WALL_S: result["wall_s"], names.WARMUP_S: result["warmup_s"],
            names.SAMPLES_PER_S: batch / (median / 1e3) if median > 0 else 0.0}


def first_batch(dataset, batch: int, device: torch.device) -> torch.Tensor:
    """``batch`` inputs from ``dataset`` (cycled when it is smaller), on ``device``."""
    xs = [dataset[i % len(dataset)][0] for i in range(batch)]
    return torch.stack(xs).to(device)


@register
class InferenceTask(Task):
    """``task=inference``: `time_forward` on one batch of the test set; logs the
    ``infer/*`` summaries, ``infer/iter_ms`` per iteration, ``perf/samples_per_s``, ``time/warmup_s``."""

    name = "inference"
    settings = ("timing",)
    needs_train_data = False  # one batch of the test set, cycled when smaller: any batch runs

    def run(self, job, device: torch.device) -> None:
        cfg, data = self.cfg, self.data
        model, precision, channels_last = build_model(cfg, data.spec, device)
        job.writer.log_metrics({names.PARAMS: sum(p.numel() for p in model.parameters())})
        x = first_batch(data.test, data.batch, device)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        compile_s = 0.0
        if cfg.compile:
            compile_s = self._compile(job, model, x, precision, device)
        with precision.autocast(device):  # bf16/fp16: every forward pass under autocast
            stats = summarize(time_forward(model, x, cfg.timing.mode, cfg.timing.warmup, cfg.timing.iters), data.batch)
        job.measured_s = compile_s + stats[names.WARMUP_S] + stats[names.INFER_WALL_S]
        job.writer.log_series(names.INFER_ITER_MS, stats.pop(names.INFER_ITER_MS))
        job.writer.log_metrics(stats)
        job.log.info("inference, timing.mode=%s: median %.3f ms per batch of %d", cfg.timing.mode,
                     stats[names.INFER_MEDIAN_MS], data.batch)

    def _compile(self, job, model, x, precision, device: torch.device) -> float:
        """Compile ``model`` and run one forward pass on ``x`` as the timed passes will (eval,
        inference mode, autocast), which compiles it; logs ``time/compile_s`` and the
        ``compiled`` tag. Returns the seconds (device synchronized at both ends)."""
        cfg = self.cfg
        watch = CompileWatch()
        model.eval()
        with wall_clock(device) as clock, torch.inference_mode(), precision.autocast(device):
            model.compile(mode=cfg.compile_mode, dynamic=False, backend=compile_backend())
            model(x)
        job.writer.log_metrics({names.COMPILE_S: clock["s"]})
        job.writer.set_tags({names.COMPILED_TAG: watch.state()})
        return clock["s"]
