"""The training pass users' figures come from: its loss and accuracy are the sample-weighted means
over the epoch's batches, and the model is in training mode for every pass after an evaluation,
however the pass avoids re-setting the mode each epoch."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from sweeps.data.spec import DataSpec
from sweeps.train.loop import Trainer

CPU = torch.device("cpu")
SPEC = DataSpec((4,), 3)


def _batches(sizes, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, 4, generator=g), torch.randint(0, 3, (b,), generator=g)) for b in sizes]


class Recorder(nn.Module):
    """A classifier that records, per forward, whether it and its dropout were in training mode."""

    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(4, 3), nn.Dropout(0.5)
        self.modes: list[tuple[bool, bool]] = []

    def forward(self, x):
        self.modes.append((self.training, self.drop.training))
        return self.fc(self.drop(x))


def _trainer(model: nn.Module) -> Trainer:
    return Trainer(model, SPEC, torch.optim.SGD(model.parameters(), lr=0.0), None, CPU)  # lr 0: the weights stay


def test_the_epoch_loss_and_accuracy_are_weighted_by_batch_size():
    model = Recorder()
    model.drop.p = 0.0
    data = _batches([5, 2, 7])
    rec = _trainer(model).train_epoch(data, "t")
    with torch.no_grad():
        losses = [nn.functional.cross_entropy(model.fc(x), y).item() * len(x) for x, y in data]
        hits = [(model.fc(x).argmax(1) == y).sum().item() for x, y in data]
    assert rec["samples"] == 14
    assert rec["train/loss"] == pytest.approx(sum(losses) / 14, rel=1e-6)
    assert rec["train/acc"] == pytest.approx(sum(hits) / 14)


def test_an_epoch_without_batches_reports_zero_samples():
    rec = _trainer(Recorder()).train_epoch([], "t")
    assert rec["samples"] == 0 and rec["train/loss"] == 0.0 and rec["train/acc"] == 0.0


def test_every_training_pass_runs_in_training_mode_after_an_evaluation():
    model = Recorder().eval()  # built, then left in eval mode by the user's own code
    trainer = _trainer(model)
    data = _batches([3])
    trainer.train_epoch(data, "t")
    trainer.train_epoch(data, "t")
    trainer.evaluate(data)
    trainer.train_epoch(data, "t")
    model.eval()  # someone else switched it: the next pass still trains
    trainer.train_epoch(data, "t")
    assert model.modes == [(True, True), (True, True), (False, False), (True, True), (True, True)]


def test_a_model_with_its_own_train_method_is_switched_through_it():
    class FrozenNorm(nn.Module):  # a fine-tuning idiom: its batch norm stays in eval mode when trained
        def __init__(self):
            super().__init__()
            self.norm, self.fc = nn.BatchNorm1d(4), nn.Linear(4, 3)

        def train(self, mode: bool = True):
            super().train(mode)
            self.norm.eval()
            return self

        def forward(self, x):
            return self.fc(self.norm(x))

    model = FrozenNorm()
    trainer = _trainer(model)
    trainer.train_epoch(_batches([3]), "t")
    assert model.training and model.fc.training and not model.norm.training
    trainer.evaluate(_batches([3]))
    assert not model.training and not model.fc.training


def test_regression_targets_from_python_floats_train_against_the_outputs_shape():
    """A user's dataset returning Python floats gives float64 targets of shape (B,): the loss is
    the mean squared error against (B, 1) outputs, not MSELoss's (B, B) broadcast, and the backward
    runs on any torch (torch 2.11 refused float64 targets)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    spec = DataSpec((4,), 1, "regression")
    x = torch.randn(6, 4)
    y = torch.randn(6, dtype=torch.float64)
    trainer = Trainer(model, spec, torch.optim.SGD(model.parameters(), lr=0.0), None, CPU)
    with torch.no_grad():
        right = nn.functional.mse_loss(model(x), y.float().unsqueeze(1)).item()
        broadcast = ((model(x) - y.float()) ** 2).mean().item()  # the (B, B) mistake
    rec = trainer.train_epoch([(x, y)], "t")
    assert rec["train/loss"] == pytest.approx(right, rel=1e-6) and right != pytest.approx(broadcast, rel=1e-3)
    assert trainer.evaluate([(x, y)])["test/loss"] == pytest.approx(right, rel=1e-6)


@pytest.mark.parametrize("loss", [None, "torch.nn.L1Loss"])  # loss=auto's MSE, and a loss that is not the MSE
def test_the_test_rmse_is_the_root_of_the_mean_squared_error_over_unequal_batches(loss):
    from omegaconf import OmegaConf

    from sweeps.train.losses import make_loss

    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    spec = DataSpec((4,), 2, "regression", target_scale=3.0)
    data = [(torch.randn(b, 4), torch.randn(b, 2)) for b in (5, 2, 7)]
    trainer = Trainer(model, spec, torch.optim.SGD(model.parameters(), lr=0.0), None, CPU,
                      loss_fn=make_loss(OmegaConf.create({"_target_": loss}), spec))
    with torch.no_grad():
        errors = torch.cat([model(x) - y for x, y in data])
        losses = [trainer.loss_fn(model(x), y).item() * len(x) for x, y in data]
    out = trainer.evaluate(data)
    assert out["test/rmse"] == pytest.approx(errors.square().mean().sqrt().item() * 3.0, rel=1e-6)
    assert out["test/loss"] == pytest.approx(sum(losses) / 14, rel=1e-6)


def test_peak_memory_is_read_at_most_every_tenth_of_a_second_and_exactly_after_the_last_epoch():
    """``mem/epoch_peak_mb`` is a running peak: reading it costs (CUDA's memory_stats builds a dict
    of ~160 figures, 0.4 ms an epoch on an H200 VM beside 2.4-ms epochs), so fit reads it at most
    every 0.1 s — each epoch carries the latest read — and always after the last epoch, which is
    what the job's ``mem/peak_mb`` takes."""
    import time

    from sweeps.train.noise import MIN_WINDOW_S

    model = Recorder()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    trainer = Trainer(model, SPEC, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0), CPU)
    reads = []

    def peak_memory_mb(peak_rss: int) -> float:
        reads.append(time.perf_counter())
        return float(len(reads))  # a peak that grows with every read

    trainer.peak_memory_mb = peak_memory_mb
    records = []
    data, test = _batches([4]), _batches([4], seed=1)
    t0 = time.perf_counter()
    trainer.fit(data, test, 400, records.append, eval_every=100)
    took = time.perf_counter() - t0
    assert len(records) == 400 and records[-1]["mem/epoch_peak_mb"] == len(reads)  # the last epoch read it
    assert len(reads) <= took / MIN_WINDOW_S + 2, (len(reads), took)
    # apart, but the last read, on the trainer's own clock: the epoch's elapsed time where the peak
    # changed (the reads' own timestamps come a preemption later, by a varying amount, on a busy machine)
    read_at = [r["time/elapsed_s"] for i, r in enumerate(records)
               if r["mem/epoch_peak_mb"] != (records[i - 1]["mem/epoch_peak_mb"] if i else 0)]
    assert len(read_at) == len(reads)
    assert all(b - a >= MIN_WINDOW_S - 1e-9 for a, b in zip(read_at, read_at[1:-1]))  # 1e-9: t0 subtracted
    assert [r["mem/epoch_peak_mb"] for r in records] == sorted(r["mem/epoch_peak_mb"] for r in records)
