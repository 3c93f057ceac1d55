"""The job context writes one outcome and a matching run status on every way a job ends: a signal
during training, during evaluation, during the checkpoint write, during the job's own finishing,
and a second Ctrl-C while it finishes. What stderr would say matches what MLflow says."""
from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import runs, store
from sweeps import names
from sweeps.sweep import command as cli
from sweeps.job import signals
from sweeps.state import current
from sweeps.tracking.journal.journal import EpochLog
from sweeps.train import checkpoint
from sweeps.train.builder import COMPILE_BACKEND_ENV
from sweeps.train.loop import Trainer

TINY = ["model=mlp", "model.hidden=[16]", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64",
        "dataset.test_size=16", "batch=16", "epochs=3", "device=cpu", "telemetry.interval_s=0",
        "checkpoint.every_epochs=1"]


@pytest.fixture(autouse=True)
def sweep_signals():
    """The handlers a sweep process installs (SIGTERM raises Terminated), restored afterwards."""
    saved = {s: signal.getsignal(s) for s in signals.SIGNALS}
    signals.install()
    current().last_job.clear()
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def _signal_on(monkeypatch, owner, attr, sig, when=lambda *a, **k: True, before=True):
    """Make ``owner.attr`` send ``sig`` to this process when ``when(*args)`` holds, before (or
    after) doing its work."""
    original = getattr(owner, attr)

    def wrapped(*args, **kwargs):
        if before and when(*args, **kwargs):
            os.kill(os.getpid(), sig)
        out = original(*args, **kwargs)
        if not before and when(*args, **kwargs):
            os.kill(os.getpid(), sig)
        return out
    monkeypatch.setattr(owner, attr, wrapped)


def _the_run(tmp_path):
    (run,) = runs(tmp_path)
    return run


def _assert_killed(tmp_path, sig_name):
    run = _the_run(tmp_path)
    assert run.info.status == "KILLED" and run.data.tags["outcome"] == "killed", run.data.tags
    assert sig_name in run.data.tags["error"]
    assert current().last_job["outcome"] == "killed"
    assert "is KILLED" in cli.interrupted_message(sig_name)
    return run


def test_sigint_during_training_ends_the_run_killed_and_keeps_the_epochs(tmp_path, in_process, monkeypatch):
    calls = iter(range(100))
    _signal_on(monkeypatch, Trainer, "train_epoch", signal.SIGINT, when=lambda *a, **k: next(calls) == 1)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    run = _assert_killed(tmp_path, "SIGINT")
    assert [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")] == [1]


def test_sigterm_during_evaluation(tmp_path, in_process, monkeypatch):
    _signal_on(monkeypatch, Trainer, "evaluate", signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as caught:
        in_process(TINY)
    assert getattr(caught.value, "signal_name", "") == "SIGTERM"
    _assert_killed(tmp_path, "SIGTERM")


def test_a_signal_whose_exception_was_swallowed_stops_the_job_after_that_epoch(tmp_path, in_process, monkeypatch):
    """Where the exception a signal raised is swallowed (in a finalizer Python prints "Exception
    ignored in ..." and goes on; a library's bare except), the signal was still noted: the job
    stops at the end of that epoch, killed with its epochs, instead of training on (and a second
    Ctrl-C, only noted, could not stop it either)."""
    calls = iter(range(100))
    original = Trainer.train_epoch

    def swallowing(*args, **kwargs):
        if next(calls) == 1:  # epoch 2
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises here
            except KeyboardInterrupt:
                pass
        return original(*args, **kwargs)
    monkeypatch.setattr(Trainer, "train_epoch", swallowing)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    run = _assert_killed(tmp_path, "SIGINT")
    assert [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")] == [1, 2]


def test_sigint_during_the_checkpoint_write_leaves_no_partial_file(tmp_path, in_process, monkeypatch):
    real_save = checkpoint.torch.save

    def save_then_interrupt(obj, f):
        real_save(obj, f)
        f.flush()
        os.kill(os.getpid(), signal.SIGINT)  # the file is written but not yet renamed into place
    monkeypatch.setattr(checkpoint.torch, "save", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    _assert_killed(tmp_path, "SIGINT")
    assert not list((tmp_path / "checkpoints").rglob(".tmp-*")), "a half-written checkpoint was left behind"


def test_sigterm_inside_torch_save_ends_the_job_killed_not_error(tmp_path, in_process, monkeypatch):
    """The signal lands while torch.save is writing (found by scripts/chaos.py, seed 2311 fault
    15): torch wraps the raised exception in its own RuntimeError ('enforce fail at
    inline_container.cc'), which must still read as the kill it is."""
    real_save = checkpoint.torch.save

    class Interrupting:
        def __init__(self, f):
            self.f, self.writes = f, 0

        def write(self, data):
            self.writes += 1
            if self.writes == 2:  # in the middle of the archive
                os.kill(os.getpid(), signal.SIGTERM)
            return self.f.write(data)

        def flush(self):
            self.f.flush()

    monkeypatch.setattr(checkpoint.torch, "save", lambda obj, f: real_save(obj, Interrupting(f)))
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    _assert_killed(tmp_path, "SIGTERM")
    assert not list((tmp_path / "checkpoints").rglob(".tmp-*"))


def test_signal_while_the_job_finishes_keeps_its_real_outcome(tmp_path, in_process, monkeypatch):
    _signal_on(monkeypatch, EpochLog, "csv", signal.SIGINT)  # epochs.csv is written while finishing
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    run = _the_run(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "ok"  # it had ended: not killed
    assert "ended ok" in cli.interrupted_message("SIGINT")
    assert [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]


def test_a_second_ctrl_c_while_finishing_does_not_cut_the_close_short(tmp_path, in_process, monkeypatch):
    calls = iter(range(100))
    _signal_on(monkeypatch, Trainer, "train_epoch", signal.SIGINT, when=lambda *a, **k: next(calls) == 1)
    _signal_on(monkeypatch, EpochLog, "csv", signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    run = _assert_killed(tmp_path, "SIGINT")
    artifacts = {a.path for a in store(tmp_path).list_artifacts(run.info.run_id)}
    assert "epochs.csv" in artifacts  # the close ran to its end despite the second signal
    assert "killed" in run.data.tags["mlflow.note.content"]  # its description, written last, too
    assert "time/first_epoch_s" not in run.data.metrics  # a killed run's summary comes once, when a resume ends it


@pytest.mark.parametrize("model, outcome, status", [(["model=oom_above", "model.max_batch=8"], "oom", "FAILED"),
                                                   (["model=broken"], "error", "FAILED")])
def test_failures_are_outcomes_with_their_status(tmp_path, in_process, model, outcome, status):
    overrides = [o for o in TINY if not o.startswith("model")] + model
    assert in_process(overrides) == outcome
    run = _the_run(tmp_path)
    assert run.info.status == status and run.data.tags["outcome"] == outcome and run.data.tags["error"]
    assert "\n" not in run.data.tags["error"]


def test_non_finite_loss_ends_the_job_diverged(tmp_path, in_process):
    assert in_process([*TINY, "optimizer.base_lr=1e12"]) == "diverged"
    run = _the_run(tmp_path)
    assert run.data.tags["outcome"] == "diverged" and "learning rate" in run.data.tags["error"]


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)],  # two compilations: ~5 s
                         ids=["eager", "compile"])
def test_resume_from_an_older_checkpoint_never_logs_a_step_twice(tmp_path, in_process, monkeypatch, compiled):
    """A killed job resumed from an older checkpoint logs each epoch and each summary once; with
    compile=true each part compiles, and the run keeps one time/compile_s (the first part's)."""
    train_epoch = Trainer.train_epoch
    _signal_on(monkeypatch, Trainer, "train_epoch", signal.SIGINT, when=lambda self, loader, desc, **k: desc == "epoch 5/6")
    overrides = [*[o for o in TINY if not o.startswith("epochs")], "epochs=6", "checkpoint.keep=5"]
    if compiled:  # aot_eager: a real compilation without a C compiler (inductor's CPU code needs one)
        monkeypatch.setenv(COMPILE_BACKEND_ENV, "aot_eager")
        overrides.append("compile=true")
    with pytest.raises(KeyboardInterrupt):
        in_process(overrides)  # epochs 1-4 logged and checkpointed, killed in epoch 5
    files = sorted((tmp_path / "checkpoints").rglob("epoch_*.pt"))
    assert [f.name for f in files] == [f"epoch_000{e}.pt" for e in (1, 2, 3, 4)]
    files[-1].write_bytes(b"truncated")  # the newest is unreadable: resume falls back to epoch 3
    monkeypatch.setattr(Trainer, "train_epoch", train_epoch)  # no more signals
    assert in_process(overrides) == "ok"
    run = _the_run(tmp_path)
    assert run.data.tags["job.resumed"] == "true"
    for key in ("train/loss", "time/epoch_s"):
        steps = [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == [1, 2, 3, 4, 5, 6], key  # epoch 4 ran twice, is logged once
    for key in run.data.metrics:  # the summaries too (step 0): logged once, when the job really ended
        steps = [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)
    if compiled:
        assert run.data.tags["job.compiled"] == "true" and run.data.metrics["time/compile_s"] > 0


def test_a_storm_of_signals_while_closing_is_noted_never_raised(tmp_path, in_process, monkeypatch):
    """Ctrl-C held down: the first SIGINT (in epoch 2) kills the job, 30 more arrive while its run
    is closed — none is raised into the close, the run holds its epochs and artifacts, and the
    process knows it was interrupted (the CLI exits 130)."""
    calls = iter(range(100))
    _signal_on(monkeypatch, Trainer, "train_epoch", signal.SIGINT, when=lambda *a, **k: next(calls) == 1)
    real_csv = EpochLog.csv

    def csv_in_a_storm(self):
        for _ in range(30):
            os.kill(os.getpid(), signal.SIGINT)
        return real_csv(self)
    monkeypatch.setattr(EpochLog, "csv", csv_in_a_storm)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    run = _assert_killed(tmp_path, "SIGINT")
    assert "epochs.csv" in {a.path for a in store(tmp_path).list_artifacts(run.info.run_id)}
    assert [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")] == [1]
    assert len(signals.received()) == 31
    os.kill(os.getpid(), signal.SIGINT)  # and any later one: noted, not raised
    assert len(signals.received()) == 32


def test_a_signal_after_the_last_epoch_keeps_the_job_ok(tmp_path, in_process, monkeypatch):
    """The signal lands after the job's last epoch was recorded, before its run is closed: every
    epoch ran, so the outcome is ok (a rerun skips it), and the sweep still stops."""
    _signal_on(monkeypatch, EpochLog, "append", signal.SIGINT, before=False,
               when=lambda self, rec: rec["epoch"] == 3)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)
    run = _the_run(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "ok", run.data.tags
    assert [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]
    assert "no job was left to run" in cli.interrupted_message("SIGINT")  # a single run: nothing to rerun


@pytest.mark.slow  # a store created, interrupted, created again: ~3 s
def test_a_signal_while_the_store_is_created_leaves_a_store_the_next_start_opens(tmp_path, monkeypatch):
    """Ctrl-C in the middle of MLflow's migration of a brand-new sqlite store (found by
    scripts/chaos.py, seed 2311 fault 10): the store is still created whole and the signal raised
    right after (130, one line), so the next start opens it — a cut-short migration left one that
    every later start refused ('table … already exists')."""
    import mlflow.store.db.utils as db_utils
    from sqlalchemy import event

    from conftest import cli_in_process

    real = db_utils._upgrade_db

    def upgrade_cut_short(engine):
        statements = iter(range(10**6))

        def after(*args):
            if next(statements) == 20:  # a few tables in
                os.kill(os.getpid(), signal.SIGINT)
        event.listen(engine, "after_cursor_execute", after)
        try:
            return real(engine)
        finally:
            event.remove(engine, "after_cursor_execute", after)
    monkeypatch.setattr(db_utils, "_upgrade_db", upgrade_cut_short)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no template: the migrations run
    first = cli_in_process(TINY, tmp_path, fresh_store=True)
    assert first.returncode == 130, first.stderr[-2000:]
    assert first.stderr.strip().splitlines()[-1] == "sweeps: interrupted by SIGINT before any job ran"
    monkeypatch.setattr(db_utils, "_upgrade_db", real)
    again = cli_in_process(TINY, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]


def test_resume_onto_an_immutable_journal_goes_on_without_it(tmp_path, in_process, monkeypatch):
    """Found by scripts/chaos.py (seed 2311, fault 20): a killed run's journal made immutable
    (``chattr +i``) before its resume ended the rerun in a traceback with the run left RUNNING.
    Now the journal is switched off with one warning and the tag, and the job ends ok with every
    epoch logged once."""
    import subprocess

    calls, train_epoch = iter(range(100)), Trainer.train_epoch
    _signal_on(monkeypatch, Trainer, "train_epoch", signal.SIGINT, when=lambda *a, **k: next(calls) == 2)
    with pytest.raises(KeyboardInterrupt):
        in_process(TINY)  # epochs 1-2 logged and checkpointed, killed in epoch 3
    (journal,) = (tmp_path / "checkpoints").rglob("epochs.jsonl")
    if subprocess.run(["chattr", "+i", str(journal)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here (needs root on a filesystem with attributes)")
    try:
        monkeypatch.setattr(Trainer, "train_epoch", train_epoch)
        assert in_process(TINY) == "ok"
    finally:
        subprocess.run(["chattr", "-i", str(journal)], check=True)
    run = _the_run(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["job.resumed"] == "true"
    assert run.data.tags["sweeps.checkpoints"].startswith("off: cannot append to"), run.data.tags
    steps = [m.step for m in store(tmp_path).get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == [1, 2, 3]


def test_device_threads_and_heap_are_set_for_the_job_alone_and_are_tagged(tmp_path, in_process, monkeypatch):
    """``device.threads=1``: the training ran with 1 torch thread, the run says so, and the next
    job of the process (basic launcher, one process) starts from the count it had before; null:
    one thread for a step under 20 MFLOP, torch's own count for a larger one, each said.
    ``device.malloc_trim_mb`` (default 1024; glibc): the run says how its heap was kept; null
    leaves glibc be and says that an earlier job of the process set its thresholds
    (tests/test_host_heap.py; what keeping the heap buys is a speed figure: docs/benchmarks.md)."""
    import torch

    from sweeps.train import host_heap

    glibc = host_heap.glibc_version()
    seen, train_epoch = [], Trainer.train_epoch

    def observed(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return train_epoch(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train_epoch", observed)
    torch.set_num_threads(2)
    assert in_process([*TINY, "device.threads=1"]) == "ok"
    assert set(seen) == {1} and torch.get_num_threads() == 2
    tags = runs(tmp_path)[-1].data.tags
    assert tags["job.threads"] == f"1 (device.threads; {os.cpu_count()} cores)"
    if glibc:
        assert tags[names.HEAP_TAG] == f"{glibc}: keeps 1024 MB (trim), heap blocks up to 32 MB"
    seen.clear()
    assert in_process([*TINY, "seed=1", "device.malloc_trim_mb=null"]) == "ok"  # null: ~0.1 MFLOP steps, one thread
    assert set(seen) == {1} and torch.get_num_threads() == 2
    tags = runs(tmp_path)[-1].data.tags
    assert tags["job.threads"].startswith("1 (small steps: ")
    assert tags["job.threads"].endswith(f"MFLOP each, under 20; device.threads to choose; {os.cpu_count()} cores)")
    if glibc:  # static since the first job: said, so it is not read as glibc's own default
        assert tags[names.HEAP_TAG].startswith(f"{glibc}: 128 KiB static")
    seen.clear()
    assert in_process([*TINY, "seed=2", "model.hidden=[1024,1024]"]) == "ok"  # ~110 MFLOP steps: torch's count
    assert set(seen) == {2} and torch.get_num_threads() == 2
    assert runs(tmp_path)[-1].data.tags["job.threads"] == f"2 (torch default; {os.cpu_count()} cores)"

