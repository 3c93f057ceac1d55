"""Speed knobs of a training job: ``channels_last``, ``torch.compile`` with its warm-up kept
out of the epoch times, and one torch thread for small CPU steps (the optimizer implementation is
in `sweeps.train.optim`).

- ``channels_last``: NHWC memory format for convolutional models (what cuDNN's tensor-core
  kernels read natively; PyTorch tutorial "Channels Last Memory Format"); models without a
  ``Conv2d`` are left as they are.
- ``compile``: `torch.nn.Module.compile` in place (so ``state_dict`` keys do not change),
  static shapes. Every batch shape a job will use (full and remainder batch, training and
  evaluation) is compiled before the first epoch by running those steps once on random inputs;
  model, optimizer, loss scale and RNG states are restored afterwards, so the warm-up does not
  change the training — it only moves compilation out of the timer (``time/compile_s``).
- torch threads (``device.threads`` null): one intra-op thread for small CPU steps
  (`one_thread_for_small_steps`, a single run), decided once per sweep for each model ×
  dataset × device and held at every batch size (`threads_held_for_sweep`), so a sweep over
  ``batch`` compares batch sizes, not thread counts.
"""
from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass

import torch
from torch import nn

from sweeps.names import COMPILE_MODES
from sweeps.state import current
from sweeps.train.timing import wall_clock

log = logging.getLogger("sweeps")
# a CPU training step under this many FLOPs runs on one torch thread when device.threads is null
SMALL_STEP_FLOPS = 20e6


def use_channels_last(model: nn.Module) -> bool:
    """Convert a convolutional ``model`` to channels_last in place; False (and no change) for a
    model without ``Conv2d`` layers, where the format means nothing."""
    if not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        log.info("channels_last ignored: the model has no Conv2d layer")
        return False
    model.to(memory_format=torch.channels_last)
    return True


def batch_sizes(loader) -> list[int]:
    """The distinct batch sizes ``loader`` yields: the full batch and the remainder, if any."""
    n = getattr(loader, "n", None) or len(loader.dataset)
    b = min(loader.batch_size, n)
    return [b] + ([n % b] if n % b else [])


def random_batch(spec, size: int, device: torch.device):
    """``(x, y)``: ``size`` random inputs of ``spec.in_shape`` and targets (classes or values) on ``device``."""
    x = torch.randn(size, *spec.in_shape, device=device)
    if spec.problem == "regression":
        return x, torch.randn(size, spec.num_outputs, device=device)
    return x, torch.randint(0, spec.num_outputs, (size,), device=device)


def warm_passes(mode: str) -> int:
    """Warm-up passes per shape: 3 where the mode uses CUDA graphs (``reduce-overhead``,
    ``max-autotune``): inductor's CUDA-graph trees run a function eagerly once, record its graph on
    the next call and replay from the third, so with one pass the capture landed in epoch 1."""
    return 3 if mode in ("reduce-overhead", "max-autotune") else 1


def compile_and_warm(trainer, train_loader, test_loader, mode: str = "default", backend: str = "inductor") -> float:
    """Compile ``trainer.model`` in place and run one training step and one evaluation batch at
    every batch shape of the two loaders, then restore every state the steps touched.
    ``backend``: torch.compile's (``inductor`` generates Triton/C++ kernels; tests use ``aot_eager``).

    Returns:
        seconds spent (wall clock, device synchronized at both ends): compilation plus the
        warm-up steps — ``time/compile_s``.
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode={mode!r} is unknown: use one of {', '.join(COMPILE_MODES)}")
    model, optimizer, device = trainer.model, trainer.optimizer, trainer.device
    saved_model = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    with wall_clock(device) as clock:
        model.compile(mode=mode, dynamic=False, backend=backend)
        cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            train = [random_batch(trainer.spec, b, device) for b in batch_sizes(train_loader)]
            test = [random_batch(trainer.spec, b, device) for b in batch_sizes(test_loader)]
            for _ in range(warm_passes(mode)):
                trainer.train_epoch(train, "compile")
                trainer.evaluate(test)
    model.load_state_dict(saved_model)  # copies into the same parameters: the compiled graphs stay valid
    optimizer.load_state_dict(saved_optimizer)
    trainer.scaler = trainer.precision.grad_scaler(device)  # a fresh loss scale, as before the warm-up
    log.info("compiled (mode %s) and warmed up %d training and %d evaluation shapes in %.1f s", mode,
             len(train), len(test), clock["s"])
    return clock["s"]


def one_thread_for_small_steps(flops_per_step: float | None, device: torch.device) -> str | None:
    """A single run's thread choice (a sweep holds one per model × dataset × device:
    `threads_held_for_sweep`): with ``device.threads`` null, a CPU job whose training step
    (``flops_per_step``: FLOPs of one step, None where not counted) is under
    `SMALL_STEP_FLOPS` runs on one torch thread: sets it and returns the run's
    ``torch.threads`` tag; None (nothing changed) for a larger or uncounted step, a GPU job, or a
    process already on one thread. The job's ``cpu_threads`` context puts the count back after it.

    Why: torch splits an op over every intra-op thread and waits for the slowest (fused optimizer
    kernels split every parameter, whatever its size), so small ops pay the split and, beside the
    job's own background work (its store process, telemetry), every thread that shares its core.
    On 2 cores (docs/benchmarks.md; MLP 13-16-32-16-1, fused Adam, quiet process):
    0.7 and 7 MFLOP steps were 4-6 % faster on one thread, 71 MFLOP steps 23 % slower, 700 MFLOP
    and study 4's 914 MFLOP 32-45 % slower; as a job, study 5's 7-MFLOP steps took 1.12 ms an
    epoch on one thread against 1.61 ms on two, and the diabetes default job 1.18 against 1.76."""
    if device.type != "cpu" or flops_per_step is None or flops_per_step >= SMALL_STEP_FLOPS:
        return None
    if torch.get_num_threads() == 1:
        return None
    torch.set_num_threads(1)
    return (f"1 (small steps: {flops_per_step / 1e6:.3g} MFLOP each, under {SMALL_STEP_FLOPS / 1e6:.0f}; "
            f"device.threads to choose; {os.cpu_count()} cores)")


@dataclass(frozen=True)
class HeldThreads:
    """A sweep's torch-thread choice for one model × dataset × device: ``threads`` is the count
    every job of the key sets (None: the process's own count is left as it is), ``tag`` the
    ``torch.threads`` tag every one of them logs."""

    threads: int | None
    tag: str


def threads_held_for_sweep(sweep: str, model: str, dataset: str, device: torch.device,
                           flops_per_step: float | None, batch: int | str) -> str | None:
    """The torch thread count of a sweep's job with ``device.threads`` null, the same for every
    job of ``model`` × ``dataset`` × ``device.type`` in the sweep ``sweep`` (its parent run id),
    whatever its batch size or training-set size.

    The first job of a key in this process decides by the rule of `one_thread_for_small_steps`
    from its own step (``flops_per_step``: FLOPs of one training step, None where not counted;
    ``batch``: its batch size, named in the tag): one thread under `SMALL_STEP_FLOPS`, else
    the process's count. The choice is kept in `sweeps.state.ProcessState.held` and said
    once on the console (``  torch threads: 1 for every batch of conv1d on waves (cpu): the first
    job's steps are 17 MFLOP, under 20; device.threads=N to choose``); every later job of the key
    sets the same count, whatever its own steps. The job's ``cpu_threads`` context puts the count
    back after it.

    Returns:
        the run's ``torch.threads`` tag (the same text for every job of the key, e.g. ``"1 (held
        for the sweep: conv1d × waves × cpu, decided at batch 32: 17 MFLOP steps, under 20;
        device.threads to choose; 2 cores)"``); None for a GPU job, whose count nothing changes.
    """
    if device.type != "cpu":
        return None
    key = (sweep, model, dataset, device.type)
    held = current().held.get(key)
    if held is None:
        count = torch.get_num_threads()
        small = flops_per_step is not None and flops_per_step < SMALL_STEP_FLOPS
        if flops_per_step is None:
            steps, line = "steps not counted", "the first job's steps were not counted"
        else:
            under = "under" if small else "not under"
            mflop = (f"{flops_per_step / 1e6:.3g} MFLOP" if flops_per_step < 1e9  # 51 GFLOP, not 5.1e+04 MFLOP
                     else f"{flops_per_step / 1e9:,.3g} GFLOP")
            steps, line = f"{mflop} steps, {under} {SMALL_STEP_FLOPS / 1e6:.0f}", \
                f"the first job's steps are {mflop}, {under} {SMALL_STEP_FLOPS / 1e6:.0f}"
        shown = "1" if small else f"{count} (torch default)"
        who = "held" if small else "torch default, held"
        held = HeldThreads(1 if small else None,
                           f"{1 if small else count} ({who} for the sweep: {model} × {dataset} × {device.type}, "
                           f"decided at batch {batch}: {steps}; device.threads to choose; {os.cpu_count()} cores)")
        current().held[key] = held
        log.info("  torch threads: %s for every batch of %s on %s (%s): %s; device.threads=N to choose",
                 shown, model, dataset, device.type, line)
    if held.threads is not None and torch.get_num_threads() != held.threads:
        torch.set_num_threads(held.threads)
    return held.tag
