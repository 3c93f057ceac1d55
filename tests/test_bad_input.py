"""Bad input stops with one clear line that names the key or path and says what would work.

Most cases run the job in-process (``in_process``): bad input raises :class:`UsageError`, whose
message is the one line the CLI prints (``sweeps: error: ...``, exit 2), and a composition error
raises Hydra's exception, whose text is what the CLI prints (exit 2 as well). The real process of
each way the CLI stops on bad input (a bad value, a composition error, an unknown preset: exit
status, one line on stderr, no traceback, no heavy import) is in tests/test_startup.py; the design
card's sweep offline (a slow test) is here."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from conftest import StartedCli, cli_in_process, store
from sweeps.sweep.check import one_line
from sweeps.errors import UsageError


def _one_error_line(proc) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sweeps: error:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


def _usage_error(in_process, overrides: list[str]) -> str:
    """The one line the CLI would print after ``sweeps: error:`` (then exit 2): the UsageError's
    message. Nothing was started: no job run in the store."""
    with pytest.raises(UsageError) as caught:
        in_process(overrides)
    line = str(caught.value)
    assert line and "\n" not in line, line
    cwd = Path.cwd()  # in_process runs in tmp_path
    if (cwd / "mlruns" / "mlflow.db").exists():
        client = store(cwd)
        exp = client.get_experiment_by_name("sweeps")
        assert exp is None or not client.search_runs([exp.experiment_id]), "a job run was started"
    return line


@pytest.mark.parametrize("override, names, hint", [
    ("batch=0", "batch=0", "positive integer"),
    ("batch=abc", "batch='abc'", "batch=full"),
    ("epochs=0", "epochs=0", "positive integer"),
    ("optimizer.base_lr=-0.1", "optimizer.base_lr=-0.1", "positive"),
    ("device.threads=0", "device.threads=0", "1 or more torch threads, or null"),
    ("device.malloc_trim_mb=0", "device.malloc_trim_mb=0", "1 to 2047 MB of freed heap to keep, or null"),
    ("cost.per_hour=cheap", "cost.per_hour='cheap'", "a price ≥ 0 per device-hour"),
    ("cost.per_hour={cuda:-1}", "cost.per_hour.cuda=-1", "a price ≥ 0 per device-hour"),
    ("cost.per_hour={gpu:2.5}", "cost.per_hour.gpu: 'gpu' is not a device type", "cpu and/or cuda"),
])
def test_bad_values(in_process, tiny, override, names, hint):
    line = _usage_error(in_process, ["model=mlp", *tiny, override])
    assert names in line and hint in line


def test_subset_larger_than_the_data(in_process):
    line = _usage_error(in_process, ["model=mlp_tabular", "dataset=diabetes", "dataset.train_size=5000",
                                     "device=cpu", "epochs=1"])
    assert "dataset.train_size=5000" in line and "at most 354" in line


def test_unknown_model_fails_at_composition_with_the_options(tmp_path):
    """The CLI's line for a composition error: Hydra's message with the options, exit 2, nothing
    started (the real process, its one line and its imports: tests/test_startup.py)."""
    proc = cli_in_process(["model=resnet5"], tmp_path, fresh_store=True)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert line == ("sweeps: error: In 'config': Could not find 'model/resnet5'; Available options in 'model': "
                    "cnn10, cnn10_narrow, mlp, mlp_tabular, resnet50, wrn28_10")
    assert not (tmp_path / "mlruns").exists()  # nothing started


@pytest.mark.fresh_store
def test_composition_error_in_a_multirun_leaves_no_parent_run(tmp_path):
    """Every job of a sweep is composed and checked before the first runs (and before the sweep's
    parent run opens): a typo in the second job's values stops the sweep in one line, exit 2,
    naming that job, and the store holds no run at all."""
    from mlflow.entities import ViewType

    proc = cli_in_process(["-m", "model=mlp,resnet5", "dataset=synthetic", "device=cpu"], tmp_path, fresh_store=True)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "Could not find 'model/resnet5'" in line and "job model=resnet5" in line
    if (tmp_path / "mlruns" / "mlflow.db").exists():
        client = store(tmp_path)
        exp = client.get_experiment_by_name("sweeps")
        assert exp is None or client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL) == []


def test_a_bad_value_anywhere_in_a_sweep_stops_it_before_the_first_job(tmp_path):
    """``-m batch=128,abc``: the ``batch=128`` job does not run first; one line naming the bad
    job, exit 2, nothing in the store."""
    proc = cli_in_process(["-m", "model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64",
                           "dataset.test_size=16", "device=cpu", "epochs=1", "batch=128,abc"], tmp_path,
                          fresh_store=True)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert line.startswith("sweeps: error: job ") and "batch=abc" in line and "positive integer" in line
    assert "#0 :" not in proc.stdout + proc.stderr  # Hydra's "launching job #0" line: no job started
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


@pytest.mark.fresh_store
@pytest.mark.parametrize("override, key", [("model.widht=3", "widht"), ("epochs=abc", "epochs"),
                                           ("dataset.rooot=x", "rooot")])
def test_typos_and_types_fail_at_composition(tmp_path, in_process, override, key):
    """What the CLI prints for these (exit 2): Hydra's message in one line, naming the key."""
    with pytest.raises(ConfigCompositionException) as caught:
        in_process([override])
    line = one_line(caught.value)  # what the CLI prints after "sweeps: error:"
    assert "\n" not in line and key in line and "full_key" not in line
    assert not (tmp_path / "mlruns").exists()  # nothing started


def test_missing_imagefolder_root(tmp_path, in_process):
    line = _usage_error(in_process, ["model=mlp", "dataset=imagefolder", f"dataset.root={tmp_path}/nowhere",
                                     "device=cpu", "epochs=1"])
    assert "dataset.root=" in line and "nowhere" in line and "train/" in line


@pytest.mark.slow  # ~6-9 s: the job imports torch before it finds the data missing
def test_design_card_sweep_without_cifar_stops_at_once(tmp_path):
    """The design card's command, offline and without files: one line, no ten failed runs."""
    proc = StartedCli(["-m", "model=cnn10,wrn28_10", "batch=128,256,512,1024,2048"], tmp_path).result()
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "CIFAR-10 is not under dataset.root=data" in line and "cifar-10-batches-py" in line
    client = store(tmp_path)
    exp = client.get_experiment_by_name("sweeps")
    assert client.search_runs([exp.experiment_id]) == []  # no job ran: no run, not even an empty parent
    from mlflow.entities import ViewType

    (parent,) = client.search_runs([exp.experiment_id], run_view_type=ViewType.DELETED_ONLY)  # kept, deleted
    assert parent.info.status == "FAILED" and "CIFAR-10" in parent.data.tags["sweeps.stopped"]


def test_unknown_preset_lists_the_presets(in_process):
    with pytest.raises(MissingConfigException) as caught:
        in_process(["+experiment=nope"])
    assert "experiment/nope" in str(caught.value).splitlines()[0] and "smoke" in str(caught.value)


def test_empty_imagefolder(tmp_path, in_process):
    for split in ("train", "val"):
        (tmp_path / "imgs" / split).mkdir(parents=True)
    line = _usage_error(in_process, ["model=mlp", "dataset=imagefolder", f"dataset.root={tmp_path / 'imgs'}",
                                     "device=cpu", "epochs=1"])
    assert "dataset.root=" in line and "class folder" in line.lower()


def test_corrupt_image_is_named_in_one_line(tmp_path, in_process):
    from PIL import Image

    for split in ("train", "val"):
        for cls in ("a", "b"):
            d = tmp_path / "imgs" / split / cls
            d.mkdir(parents=True)
            for i in range(4):
                Image.new("L", (8, 8), color=40 * i).save(d / f"{i}.png")
    (tmp_path / "imgs" / "train" / "b" / "3.png").write_bytes(b"\x89PNG broken")
    line = _usage_error(in_process, ["model=mlp", "dataset=imagefolder", f"dataset.root={tmp_path / 'imgs'}",
                                     "batch=4", "device=cpu", "epochs=1"])
    assert "cannot read image" in line and "b/3.png" in line


def test_corrupt_image_met_in_a_loader_worker_is_named():
    """Past the sampled images a corrupt file surfaces in a DataLoader worker: the job's one-line
    error is the worker's last line (the file), not "Caught ... in DataLoader worker"."""
    from sweeps.job.outcome import classify

    text = ("Caught UnidentifiedImageError in DataLoader worker process 0.\nOriginal Traceback (most recent call"
            " last):\n  File \"x.py\", line 1\nPIL.UnidentifiedImageError: cannot identify image file 'a/3.png'")
    assert classify(OSError(text)) == ("error", "PIL.UnidentifiedImageError: cannot identify image file 'a/3.png'")


@pytest.mark.fresh_store
def test_unwritable_mlruns(tmp_path, tiny, in_process):
    (tmp_path / "mlruns").write_text("a file where the store's folder should be")
    line = _usage_error(in_process, ["model=mlp", *tiny])
    assert "mlruns" in line and "mlflow.tracking_uri" in line


def test_unreachable_tracking_server_fails_fast(tmp_path, tiny, in_process):
    import time

    t0 = time.monotonic()
    line = _usage_error(in_process, ["model=mlp", *tiny, "mlflow.tracking_uri=http://127.0.0.1:9"])
    assert "http://127.0.0.1:9" in line and "does not answer" in line
    assert time.monotonic() - t0 < 60  # seconds, not MLflow's minutes of retries


def test_cuda_index_out_of_range(monkeypatch):
    """Faked at the hardware boundary: a machine with 2 GPUs asked for the third."""
    import torch
    from omegaconf import OmegaConf

    from sweeps.placement.device import resolve_device
    from sweeps.errors import DeviceUnavailable

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DeviceUnavailable) as e:
        resolve_device(OmegaConf.create({"name": "cuda", "index": 2}))
    assert str(e.value) == "device.index=2 but this machine has 2 CUDA device(s): use 0..1"


@pytest.mark.parametrize("override, names", [("timing.mode=fast", "timing.mode='fast'"),
                                             ("dataset.if_missing=ignore", "dataset.if_missing='ignore'"),
                                             ("task=serve", "task='serve'")])
def test_unknown_values(in_process, tiny, override, names):
    line = _usage_error(in_process, ["model=mlp", *tiny, override])
    assert names in line and "use" in line
