"""The training loop: epochs of timed steps, evaluation timed apart, one record per epoch.

Nothing inside a step reads a value back to the host: loss and accuracy are summed on the device
and read once per epoch, and the phase timer records events without synchronizing.
"""
from __future__ import annotations

import math
import shutil
import statistics
import sys
import time
from typing import Callable

import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from sweeps import devices, names
from sweeps.data import DataSpec
from sweeps.train.noise import MIN_WINDOW_S, HostLoad, spread
from sweeps.train.precision import Precision
from sweeps.train.timing import PHASES, PhaseTimer, synchronize, wall_clock


class Trainer:
    """Trains ``model`` on ``train_loader`` for ``epochs``, evaluating on ``test_loader`` after each.

    Per epoch it calls ``on_epoch(record)`` with a dict of the contract's metric names (units in
    the name: ``_s`` seconds, ``_ms`` milliseconds per iteration) — see `fit`. A ``monitor``
    (e.g. `sweeps.telemetry.sampler.Telemetry`) is told the edges of each training pass, where the
    device is synchronized, and its ``epoch_end`` metrics join the record.
    """

    def __init__(self, model: nn.Module, spec: DataSpec, optimizer, schedule, device: torch.device,
                 progress_after_s: float = 2.0, monitor=None, precision: Precision | None = None,
                 channels_last: bool = False, loss_fn=None):
        self.model, self.spec, self.device = model, spec, device
        self.precision = precision or Precision()  # autocast dtype and loss scaling (sweeps.train.precision)
        self.scaler = self.precision.grad_scaler(device)  # disabled (pass-through) unless fp16
        self.channels_last = channels_last  # NHWC image batches for a channels_last model
        self.optimizer, self.schedule = optimizer, schedule
        self.regression = spec.problem == "regression"
        # the job's loss (sweeps.train.losses); without one the task kind's usual loss
        self.loss_fn = loss_fn or (nn.MSELoss() if self.regression else nn.CrossEntropyLoss())
        self.kind = devices.of(device)  # what differs per device: timer, peak memory (sweeps.devices)
        self.timer = PhaseTimer(device)
        self.progress_after_s = progress_after_s
        self.tty = sys.stderr.isatty()
        self.bar_columns = min(100, shutil.get_terminal_size().columns)  # the console's width, as its lines
        self.monitor = monitor  # epoch_start(epoch), epoch_end(epoch) -> {metric: value}
        # Module.train() walks every submodule (~40 µs for study 5's MLP, 4 % of its 1-ms epoch):
        # called for the first epoch and after each evaluation, the only places the mode changes
        self._train_mode = False
        self._flags: tuple | None = None  # (model, its modules or None): see _set_mode

    def train_epoch(self, loader: DataLoader, desc: str, resolved: bool = True):
        """One pass over ``loader``; returns train loss/acc, phase times and the sample count —
        or, with ``resolved=False``, a function that returns them, for a caller that times the
        pass: it calls the function once its clock has stopped (after the closing synchronize),
        so reading the phase events and the device-side sums back is not part of the epoch."""
        model, dev, timer = self.model, self.device, self.timer
        if not (self._train_mode and model.training):
            self._set_mode(True)
            self._train_mode = True
        # device-side sums, started from the first mini-batch's values: two torch.zeros an epoch cost
        # ~5 % of a 1-ms epoch (study 5)
        loss_sum = correct = None
        seen = 0
        # a progress bar only on a terminal: building one per epoch costs ~0.1 ms, a 10th of a tiny epoch
        scaled = self.scaler.is_enabled()
        bar = tqdm(loader, desc=desc, leave=False, delay=self.progress_after_s, ncols=self.bar_columns) if self.tty else loader
        timer.start()
        for x, y in bar:
            x, y = self._input(x), y.to(dev, non_blocking=True)
            timer.mark()  # data: waiting for the mini-batch, and its copy to the device
            with self.precision.autocast(dev):
                out = model(x)
                if self.regression:
                    y = regression_target(out, y)
                loss = self.loss_fn(out, y)
            part = loss.detach().float() * len(x)  # a new fp32 tensor: summing into it in place is safe
            loss_sum = part if loss_sum is None else loss_sum.add_(part)
            if not self.regression:
                hits = (out.detach().argmax(1) == y).sum()
                correct = hits if correct is None else correct.add_(hits)
            seen += len(x)
            timer.mark()  # forward (and the running loss/accuracy sums)
            # fp16 scales the loss; otherwise the disabled scaler is bypassed (~20 µs a step at 1-ms epochs)
            (self.scaler.scale(loss) if scaled else loss).backward()
            timer.mark()  # backward
            if scaled:
                self.scaler.step(self.optimizer)  # skipped on inf/NaN gradients
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            timer.mark()  # optimizer
        if self.tty:
            bar.close()
        if resolved:  # nobody synchronized the device yet: the timer's resolution does (CUDA)
            return self._epoch_result(loss_sum, correct, seen, synchronized=False)
        return lambda: self._epoch_result(loss_sum, correct, seen, synchronized=True)

    def _epoch_result(self, loss_sum: torch.Tensor | None, correct: torch.Tensor | None, seen: int,
                      synchronized: bool) -> dict[str, float]:
        """The epoch's figures from its phase marks and device-side sums (see `train_epoch`;
        None: the loader gave no mini-batch)."""
        phases = self.timer.summary(synchronized=synchronized)
        out = {names.TRAIN_LOSS: (0.0 if loss_sum is None else loss_sum.item()) / max(seen, 1), "samples": seen,
               names.PHASE_SUM_S: phases["total_ms"] / 1e3, "steps": phases["steps"]}
        if not self.regression:
            out[names.TRAIN_ACC] = (0 if correct is None else correct.item()) / max(seen, 1)
        out.update({names.phase_ms(p): phases[p] for p in PHASES})
        return out

    @torch.no_grad()
    def evaluate(self, loader: DataLoader) -> dict[str, float]:
        """Test loss and accuracy (classification) or RMSE in target units (regression).

        Run after every epoch by default, so its own work counts at small epochs (a 1-ms diabetes
        epoch: the evaluation's bookkeeping cost ~0.15 ms beside its ~0.15-ms forward pass on 2
        cores): sums start from the first batch's values (no zeros), and loss=auto's MSE is the mean
        squared error itself, so its RMSE needs no second sum; one value read back per figure."""
        self._set_mode(False)
        self._train_mode = False
        dev, regression = self.device, self.regression
        # the RMSE from the loss's own sum where the loss is the mean squared error, in fp32
        from_loss = regression and self.precision.dtype is None and getattr(self.loss_fn, "mean_squared_error", False)
        loss_sum = other = None  # other: Σ squared error (regression), correct predictions (classification)
        seen = 0
        for x, y in loader:
            x, y = self._input(x), y.to(dev, non_blocking=True)
            with self.precision.autocast(dev):
                out = self.model(x)
                if regression:
                    y = regression_target(out, y)
                part = self.loss_fn(out, y).float() * len(x)  # a new tensor: summing into it in place is safe
            loss_sum = part if loss_sum is None else loss_sum.add_(part)
            if not regression:
                hits = (out.argmax(1) == y).sum()
                other = hits if other is None else other.add_(hits)
            elif not from_loss:  # whatever the loss, RMSE is the root of the mean squared error
                sq = (out.float() - y.float()).square().sum() / max(out[0].numel(), 1)
                other = sq if other is None else other.add_(sq)
            seen += len(x)
        loss = (0.0 if loss_sum is None else loss_sum.item()) / max(seen, 1)
        if regression:  # on the standardised target; RMSE back in target units
            sq_mean = loss if from_loss else (0.0 if other is None else other.item()) / max(seen, 1)
            return {names.TEST_LOSS: loss, names.TEST_RMSE: math.sqrt(sq_mean) * self.spec.target_scale}
        return {names.TEST_LOSS: loss, names.TEST_ACC: (0 if other is None else other.item()) / max(seen, 1)}

    def _set_mode(self, training: bool) -> None:
        """``model.train(training)``. Where every module keeps ``nn.Module``'s own ``train`` and
        ``__setattr__`` (the built-in models, most users'), each module's flag is set directly, as
        ``Module.train`` would: its recursive walk through ``Module.__setattr__`` costs ~30 µs a
        call for study 5's MLP, twice an epoch when every epoch evaluates (the default). The
        modules are listed once per model (a model does not grow modules between epochs)."""
        model = self.model
        if self._flags is None or self._flags[0] is not model:
            modules = list(model.modules())
            plain = all(type(m).train is nn.Module.train and type(m).__setattr__ is nn.Module.__setattr__
                        for m in modules)
            self._flags = (model, modules if plain else None)
        if self._flags[1] is None:
            model.train(training)
            return
        for m in self._flags[1]:
            m.__dict__["training"] = training

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        """A batch on the device (no-op for device-resident data), NHWC when channels_last."""
        if self.channels_last and x.dim() == 4:
            return x.to(self.device, non_blocking=True, memory_format=torch.channels_last)
        return x.to(self.device, non_blocking=True)

    def state_dict(self) -> dict:
        """Model, optimizer, schedule and loss-scaler state (for a checkpoint)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` saved."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        if state.get("scaler"):  # fp16: the loss scale goes on where it was
            self.scaler.load_state_dict(state["scaler"])

    def fit(self, train_loader: DataLoader, test_loader: DataLoader, epochs: int,
            on_epoch: Callable[[dict], None], start_epoch: int = 1, elapsed_s: float = 0.0,
            eval_every: int = 1) -> None:
        """Run epochs ``start_epoch``..``epochs`` (a resumed job starts past its checkpoint, with
        ``elapsed_s`` already spent), calling ``on_epoch(record)`` after each.

        Each record has ``epoch`` (from 1), ``time/epoch_s`` (training pass, wall clock synchronized
        at both edges), ``time/eval_s``, ``time/elapsed_s`` (since fit started), ``phase/sum_s``
        (Σ phase times, to compare with the epoch time), ``phase/{data,forward,backward,optimizer}_ms``
        (mean per iteration), ``perf/samples_per_s``, ``train/lr``, ``train/loss``, ``train/acc``,
        ``mem/epoch_peak_mb``, ``system/host/other_cpu_pct`` (other processes' share of all cores during the
        training pass, % — see `sweeps.train.noise`), the monitor's metrics for the training pass, and the test metrics of
        `evaluate` on epochs that evaluate: every ``eval_every``-th and the last
        (``time/eval_s`` is 0 on the others).
        """
        synchronize(self.device)
        t0 = time.perf_counter() - elapsed_s
        peak_rss, peak_mb, process, host = 0, 0.0, psutil.Process(), HostLoad()
        mem_at = -MIN_WINDOW_S  # when the peak memory was last read (perf_counter s)
        for epoch in range(start_epoch, epochs + 1):
            lr = self.optimizer.param_groups[0]["lr"]
            if self.monitor is not None:  # the device is idle here: the last evaluation (or fit) ended synchronized
                self.monitor.epoch_start(epoch)
            host.start()
            with wall_clock(self.device) as train_clock:  # ends with the epoch's one synchronize (CUDA)
                result = self.train_epoch(train_loader, f"epoch {epoch}/{epochs}", resolved=False)
            rec = result()  # events and sums read back after the clock stopped: not timed
            rec[names.OTHER_CPU_PCT] = host.stop()  # noise: other processes' share of the cores
            if self.monitor is not None:  # outside the timed block, after its closing synchronize
                rec.update(self.monitor.epoch_end(epoch))
            eval_s = 0.0
            if epoch % max(1, eval_every) == 0 or epoch == epochs:
                with wall_clock(self.device) as eval_clock:
                    rec.update(self.evaluate(test_loader))
                eval_s = eval_clock["s"]
            self.schedule.step()
            now = time.perf_counter()
            rec.update({"epoch": epoch, names.TRAIN_LR: lr, names.EPOCH_S: train_clock["s"],
                        names.EVAL_S: eval_s, names.ELAPSED_S: now - t0,
                        names.SAMPLES_PER_S: rec["samples"] / train_clock["s"]})
            # at most every 0.1 s and after the last epoch: the process RSS costs ~13 µs a read, and
            # CUDA's peak (memory_stats flattens ~160 allocator figures into a dict) 0.4 ms on an
            # H200 under cProfile: 17 % of study 5's 2.4-ms GPU epochs, read every epoch
            if now - mem_at >= MIN_WINDOW_S or epoch == epochs:
                if self.kind.host_memory:
                    peak_rss = max(peak_rss, process.memory_info().rss)
                peak_mb, mem_at = self.peak_memory_mb(peak_rss), now
            rec[names.EPOCH_PEAK_MB] = peak_mb
            on_epoch(rec)

    def peak_memory_mb(self, peak_rss: int) -> float:
        """The device kind's peak (`sweeps.devices.DeviceKind.peak_mb`; CUDA: peak allocated by
        tensors on the device, MB); where the kind keeps none (CPU), ``peak_rss``, the process
        RSS's peak (bytes) → MB. `fit` reads it at epoch ends, at most every ``MIN_WINDOW_S`` =
        0.1 s and after the last epoch (a running peak: an epoch between reads shows the last one)."""
        peak = self.kind.peak_mb(self.device)
        return peak_rss / 2**20 if peak is None else peak


def regression_target(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A regression batch's targets ``y`` shaped as the model's outputs ``out`` ((B,) → (B, 1))
    and in their float type, at least fp32 (bf16/fp16 outputs under autocast keep fp32 targets).

    Why: a user's dataset that returns Python floats reaches the loop as float64 ``(B,)``
    (``default_collate``). ``MSELoss`` would broadcast ``(B, 1)`` against ``(B,)`` to ``(B, B)``,
    a wrong loss with only a warning, and torch 2.11's backward refuses float64 targets
    ("Found dtype Double but expected Float"). A no-op (two attribute
    reads) when the data already match, as the built-in datasets do.

    Raises:
        RuntimeError: the targets do not have as many values as the outputs (torch's reshape).
    """
    dtype = torch.promote_types(out.dtype, torch.float32)
    if y.dtype != dtype or y.shape != out.shape:
        y = y.to(dtype).reshape(out.shape)
    return y


def summarize(records: list[dict], regression: bool) -> dict[str, float]:
    """Job-level metrics from the per-epoch records: first, median (epochs 2 on: the first carries
    warm-up — cuDNN autotuning, allocator growth, worker start — so a 1-epoch job has none) and
    total time, the spread of epochs 2+ (`sweeps.train.noise.spread`), other processes' mean
    CPU share over them (``system/host/other_cpu_mean_pct``), peak memory and the last evaluation's score.

    ``perf/median_samples_per_s`` (samples/s): the training examples an epoch passes over (the
    records' ``samples``, their median over epochs 2+) ÷ ``time/median_epoch_s``; for a 1-epoch
    job, its one epoch's examples ÷ its time. The job's throughput, one figure: the per-epoch
    series ``perf/samples_per_s`` is each epoch's own, and its latest value the last epoch's."""
    if not records:
        return {}
    times = [r[names.EPOCH_S] for r in records]
    last = records[-1]
    out = {names.FIRST_EPOCH_S: times[0], names.TOTAL_S: last[names.ELAPSED_S],
           names.PEAK_MB: max(r[names.EPOCH_PEAK_MB] for r in records)}
    steady = records[1:] or records  # epochs 2 on; a 1-epoch job has only its first
    samples = [r["samples"] for r in steady if "samples" in r]
    epoch_s = statistics.median(r[names.EPOCH_S] for r in steady)
    if samples and epoch_s > 0:
        out[names.MEDIAN_SAMPLES_PER_S] = statistics.median(samples) / epoch_s
    if len(times) > 1:
        out[names.MEDIAN_EPOCH_S] = statistics.median(times[1:])
        out.update(spread(times[1:]))
        loads = [r[names.OTHER_CPU_PCT] for r in records[1:] if names.OTHER_CPU_PCT in r]
        if loads:
            out[names.OTHER_CPU_MEAN_PCT] = statistics.fmean(loads)
    evaluated = [r for r in records if (names.TEST_RMSE if regression else names.TEST_ACC) in r]
    if evaluated:
        final, score = (names.FINAL_RMSE, names.TEST_RMSE) if regression else (names.FINAL_ACC, names.TEST_ACC)
        out[final] = evaluated[-1][score]
    return out
