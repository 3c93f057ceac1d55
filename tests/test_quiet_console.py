"""A quiet console on a CPU, as a new user reads it: every line of a sweep's summary within 100
columns, each machine or data notice once per sweep and only where it applies (no energy notice
where no energy is read, nothing of NVML for a job on the CPU), one line naming what the first
seconds go to, and a single run's job named as a job of a sweep is (its overrides joined by
spaces, read back pair by pair)."""
from __future__ import annotations

import logging
import re

import pytest
import torch
from pynvml import NVMLError_LibraryNotFound

from conftest import TEST_CONF, cli_in_process, runs, seed_store
from fake_nvml import FakeNVML
from sweeps import names, state
from sweeps.console import WIDTH, summary_table
from sweeps.telemetry import nvml as telemetry_nvml
from sweeps.telemetry.sampler import EDGE_GAP_S, Telemetry, for_job

CIFAR = ("CIFAR-10 is not under dataset.root=data (/tmp/qs/data) and dataset.download=false; put the python "
         "version (cifar-10-batches-py/) from https://www.cs.toronto.edu/~kriz/cifar.html there, or run once "
         "with network access and dataset.download=true")


@pytest.fixture
def fresh_state():
    """A state of its own (what a new command starts from): notices said in it are its own."""
    before = state.replace(state.ProcessState())
    yield state.current()
    state.replace(before)


def _ok(job: str, **figures) -> dict:
    return {"job": job, "outcome": "ok", "first_s": 4.39, "median_s": 4.42, "total_s": 10.0, "job_s": 12.0,
            "overhead_s": 2.4, "overhead_frac": 0.2, "final": "acc 0.1250", **figures}


def test_the_smoke_presets_summary_keeps_every_line_within_100_columns():
    """The smoke preset's eight names (the longest 28 characters), an unavailable job and a noisy
    timing on a loaded machine: each line ≤ 100 columns, the note whole in a footnote."""
    noisy = "other processes used 51% of the CPU"
    rows = [_ok("+case=cnn10_synthetic", note=noisy), _ok("+case=wrn_synthetic", note=noisy),
            _ok("+case=resnet50_synthetic", note="epochs spread 46% (p90/p10)"),
            _ok("+case=mlp_tabular_regression", final="rmse 144.93", job_s=1.0, overhead_s=0.1),
            {"job": "+case=mlp_cifar10", "outcome": "unavailable", "error": CIFAR}]
    text = summary_table(rows)
    lines = text.splitlines()
    assert all(len(line) <= WIDTH for line in lines), [line for line in lines if len(line) > WIDTH]
    by_job = {line.split()[0]: line for line in lines[2:7]}  # one line per job: none was too long for it
    assert by_job["+case=cnn10_synthetic"].split()[3:5] == ["4.42", "[a]"]
    assert by_job["+case=wrn_synthetic"].split()[3:5] == ["4.42", "[a]"]  # the same note: one footnote
    assert by_job["+case=resnet50_synthetic"].split()[3:5] == ["4.42", "[b]"]
    assert re.fullmatch(r"\+case=mlp_cifar10 +unavailable +UNAVAILABLE +see \[1\]", by_job["+case=mlp_cifar10"])
    assert f"[a] timed noisily: {noisy}" in lines and "[b] timed noisily: epochs spread 46% (p90/p10)" in lines
    assert " ".join(text.split("\n[1] ", 1)[1].split("\n[a]")[0].split()) == CIFAR  # the reason whole
    assert lines[0].split("  ")[0] == "job" and "first epoch s" in lines[0] and "note" not in lines[0]


def test_a_job_name_too_long_for_the_line_gets_a_line_of_its_own():
    long = "model=cnn10 batch=128 optimizer=adam lr_scaling=sqrt precision=bf16 schedule=cosine seed=1 repeat=2"
    rows = [_ok("batch=32"), _ok(long, final="fits up to 1024", job_s=3700.0, overhead_s=36.0, overhead_frac=0.01),
            {"job": "batch=64", "outcome": "oom", "error": "CUDA out of memory"}]
    lines = summary_table(rows).splitlines()
    assert all(len(line) <= WIDTH for line in lines), [line for line in lines if len(line) > WIDTH]
    at = next(i for i, line in enumerate(lines) if line.startswith("model=cnn10"))
    name = [lines[at]] + [line for line in lines[at + 1:at + 3] if line.startswith("  ") and "=" in line]
    assert " ".join(" ".join(name).split()) == long  # whole, wrapped between overrides
    figures = lines[at + len(name)]
    assert figures.startswith(" ") and figures.split()[:2] == ["ok", "4.39"] and "fits up to 1024" in figures
    assert lines[2].startswith("batch=32  ") and lines[at + len(name) + 1].split()[:3] == ["batch=64", "oom", "OOM"]


def _telemetry_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "telemetry" in r.getMessage()]


def test_a_cpu_job_says_host_only_in_one_short_line_once_and_nothing_of_nvml(fresh_state, monkeypatch, caplog):
    """Where NVML is missing (no driver), a job on the CPU says in one line that its telemetry is
    host only, once per sweep; why NVML cannot be used stays in the run's tag."""
    monkeypatch.setattr(telemetry_nvml, "pynvml", FakeNVML(lambda: 0.0, init_error=NVMLError_LibraryNotFound()))
    with caplog.at_level(logging.DEBUG, logger="sweeps"):
        for _ in range(3):  # three jobs of one sweep
            tel = for_job(1000, torch.device("cpu"))
            tel.stop()
    said = _telemetry_lines(caplog)
    assert said == ["telemetry: host only (psutil, every 1000 s); GPU off: the job runs on cpu"], said
    assert "NVML" not in " ".join(said) and all(len(line) <= WIDTH for line in said)
    assert tel.tags()["job.telemetry"] == ("host only (psutil, every 1000 s); GPU off: the job runs on cpu; no NVML "
                                       "(NVMLError_LibraryNotFound: NVML Shared Library Not Found)")


class _SlowClock:
    """A monotonic clock that moves 5 ms each time it is read: every sample costs ~10 ms."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.005
        return self.t


def test_no_energy_notice_where_no_energy_is_read(fresh_state, caplog):
    """A host-only sampler whose edge samples are slow widens its edge gap, but there is no energy
    figure to lose on the host alone: nothing to say about it."""
    tel = Telemetry(1000, [], clock=_SlowClock(), gpu_off_reason="the job runs on cpu")
    with caplog.at_level(logging.DEBUG, logger="sweeps"):
        tel.start()
        for epoch in range(1, 6):
            tel.epoch_start(epoch)
            tel.epoch_end(epoch)
        tel.stop()
    assert tel.edge_gap_s() > EDGE_GAP_S  # the gap did widen
    assert not [m for m in _telemetry_lines(caplog) if "energy" in m or "epoch-edge" in m]


def test_a_dataset_that_names_no_files_is_said_once_per_sweep(fresh_state, caplog):
    from omegaconf import OmegaConf

    from sweeps.data.fingerprint import CONFIG_ONLY, data_fingerprint

    cfg = OmegaConf.create({"_target_": "collections.OrderedDict", "name": "waves", "root": None})
    with caplog.at_level(logging.DEBUG, logger="sweeps"):
        assert [data_fingerprint(cfg) for _ in range(4)] == [CONFIG_ONLY] * 4  # four jobs, skipped ones too
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "names no files" in r.getMessage()]
    assert len(warned) == 1 and warned[0].getMessage().startswith("dataset=waves names no files")
    state.replace(state.ProcessState())  # the next sweep says it again
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="sweeps"):
        data_fingerprint(cfg)
    assert sum(r.levelno >= logging.WARNING and "names no files" in r.getMessage() for r in caplog.records) == 1


USER_DATA = {"userpkg_quiet/__init__.py": """\
    import torch
    from torch.utils.data import TensorDataset

    def make(n_train, seed=0):
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(n_train + 32, 1, 8, 8, generator=g), torch.randint(0, 3, (n_train + 32,), generator=g)
        return TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:])
    """, "conf/dataset/waves.yaml": """\
    _target_: userpkg_quiet.make
    n_train: 64
    """}


def test_a_cpu_sweeps_console_is_quiet_and_within_100_columns(tmp_path, user_folder):
    """Two CPU jobs on a user's dataset without files, then the same sweep again (both skipped):
    each time the header, the line naming the first seconds, one telemetry line without NVML, no
    energy notice, the names-no-files warning once, and no line over 100 columns."""
    user_folder(USER_DATA)
    args = ["--config-dir", "conf", "-m", "model=mlp", "model.hidden=[16]", "dataset=waves", "batch=16,32",
            "epochs=2", "device=cpu", "log_every_s=0", TEST_CONF]
    for rerun in (False, True):
        proc = cli_in_process(args, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = proc.stdout + proc.stderr
        lines = out.splitlines()
        assert lines[2] == "  starting: the store and torch load (a few seconds)", lines[:4]
        assert sum(line.strip().startswith("starting:") for line in lines) == 1
        long = [line for line in lines if len(line) > WIDTH and str(tmp_path) not in line]
        assert not long, long
        assert out.count("names no files") == 1, out
        assert "NVML" not in out and "epoch-edge" not in out and "energy" not in out
        assert sum(line.startswith("telemetry: ") for line in lines) == (0 if rerun else 1)
        if not rerun:
            assert "telemetry: host only (psutil, every 1 s); GPU off: the job runs on cpu" in lines
    jobs = [r for r in runs(tmp_path) if names.PARENT_RUN_TAG in r.data.tags]
    assert sorted(r.data.tags[names.OVERRIDES_TAG] for r in jobs) == ["batch=16", "batch=32"]


def test_a_single_runs_job_reads_like_a_job_of_a_sweep(tmp_path, monkeypatch):
    """``sweeps.run([...], multirun=False)``: its overrides as typed, joined by spaces, in the
    ``sweeps.overrides`` tag, the console and the summary; ``sweeps.results`` reads each pair."""
    import sweeps

    monkeypatch.chdir(tmp_path)
    seed_store(tmp_path)
    (record,) = sweeps.run(["+experiment=diabetes", "batch=64", "epochs=3", "telemetry.interval_s=1"], multirun=False)
    assert record["outcome"] == "ok"
    (run,) = runs(tmp_path, "diabetes")
    # as typed, joined by spaces; telemetry.interval_s left out (hydra.job.config.override_dirname.exclude_keys)
    assert run.data.tags[names.OVERRIDES_TAG] == "+experiment=diabetes batch=64 epochs=3"
    assert "," not in run.info.run_name
    table = sweeps.results("diabetes", tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    assert "experiment" not in table.columns and table["batch"].tolist() == [64]  # as a sweep's job reads
    assert str(table["epochs"].tolist()[0]) == "3"


@pytest.mark.slow  # the smoke preset's eight jobs, ResNet-50 among them: ~10 s idle, ~40 s on 2 busy cores
def test_the_smoke_presets_console_is_quiet_and_within_100_columns(tmp_path):
    """``python -m sweeps -m +experiment=smoke`` in an empty folder, as the README's quick start runs
    it: no line over 100 columns (a path stays whole), one telemetry line that names no NVML, no
    energy notice, the first seconds named once, each job's summary on one line."""
    proc = cli_in_process(["-m", "+experiment=smoke"], tmp_path, fresh_store=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    lines = out.splitlines()
    long = [line for line in lines if len(line) > WIDTH and str(tmp_path) not in line]
    assert not long, long
    assert lines[2] == "  starting: the store and torch load (a few seconds)", lines[:4]
    assert [line for line in lines if line.startswith("telemetry: ")] == [
        "telemetry: host only (psutil, every 1 s); GPU off: the job runs on cpu"]
    assert "NVML" not in out and "epoch-edge" not in out
    header = next(i for i, line in enumerate(lines) if line.startswith("job ") and "outcome" in line)
    table = lines[header + 2:next(i for i in range(header + 2, len(lines)) if lines[i].startswith(("[", "*", "8 job")))]
    # a row per job; where slow figures widen the columns past 100, a name keeps a line of its own
    # and its figures follow on the next (sweeps.console.summary_table)
    named = [row.split()[0] for row in table if row.startswith("+case=")]
    assert named == [f"+case={c}" for c in (
        "cnn10_synthetic", "wrn_synthetic", "resnet50_synthetic", "mlp_imagefolder", "mlp_tabular_diabetes",
        "mlp_tabular_regression", "mlp_cifar10", "mlp_mnist")], table
    for i, row in enumerate(table):
        if row.startswith("+case="):
            figures = row if len(row.split()) > 1 else table[i + 1]
            assert figures.split()[0] in ("ok", "unavailable") or figures.split()[1] in ("ok", "unavailable"), table


def test_overrides_read_back_pair_by_pair_joined_by_spaces_or_by_hydras_commas():
    from sweeps.tracking.writer.naming import parse_overrides

    pairs = [("experiment", "diabetes"), ("batch", "64")]
    assert parse_overrides("+experiment=diabetes batch=64") == pairs
    assert parse_overrides("+experiment=diabetes,batch=64") == pairs  # hydra.job.override_dirname's form
    assert parse_overrides("model.hidden=[16,32],batch=8") == [("model.hidden", "[16,32]"), ("batch", "8")]
