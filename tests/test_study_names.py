"""One name for a study: a preset logs to the MLflow experiment of its own name unless it names
another, and ``python -m sweeps.report --experiment NAME`` takes either name. Real composition
(Hydra's compose API) and a real sqlite MLflow store."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, compose, seed_store, store
from sweeps import names
from sweeps.config import CONF_DIR, presets

OWN_CONF = REPO / "examples" / "own_model" / "conf"


def _declared(preset_file: Path) -> str | None:
    """The ``mlflow.experiment`` a preset file (or a preset it includes) writes down, if any."""
    from omegaconf import OmegaConf

    node = OmegaConf.load(preset_file)
    return OmegaConf.select(node, "mlflow.experiment")


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_preset_logs_to_its_own_name_or_the_one_it_declares(preset):
    declared = _declared(CONF_DIR / "experiment" / f"{preset}.yaml")
    assert compose([f"+experiment={preset}"]).mlflow.experiment == (declared or preset)
    assert declared in (None, "cifar10_batch_scaling")  # only study 1b names another: study 1's


def test_without_a_preset_the_experiment_is_sweeps_and_the_command_line_wins():
    assert compose([]).mlflow.experiment == "sweeps"
    assert compose(["+experiment=smoke", "mlflow.experiment=mine"]).mlflow.experiment == "mine"
    assert compose(["+experiment=cifar10_batch_scaling_warmup"]).mlflow.experiment == "cifar10_batch_scaling"


@pytest.fixture
def client(tmp_path):
    """A real sqlite store holding one sweep (a parent run) in each of two experiments."""
    seed_store(tmp_path)
    client = store(tmp_path)
    for experiment in ("cifar10_batch_scaling", "waves"):
        run = client.create_run(client.create_experiment(experiment), tags={names.KIND_TAG: "sweep"})
        client.set_terminated(run.info.run_id)
    return client


def test_the_report_takes_an_experiment_or_a_preset_name(client):
    from sweeps.report.runs import find_sweep, resolve_experiment

    assert resolve_experiment(client, "cifar10_batch_scaling") == ("cifar10_batch_scaling", "")
    experiment, note = resolve_experiment(client, "cifar10_batch_scaling_warmup")  # study 1b logs beside study 1
    assert experiment == "cifar10_batch_scaling" and "'cifar10_batch_scaling_warmup' logs to" in note
    assert resolve_experiment(client, "waves_batch", str(OWN_CONF))[0] == "waves"  # a user's preset
    assert find_sweep(client, experiment).info.experiment_id == client.get_experiment_by_name(experiment).experiment_id
    with pytest.raises(LookupError, match=r"no experiment or preset named 'waves_batch'.*add --config-dir DIR"):
        resolve_experiment(client, "waves_batch")
    with pytest.raises(LookupError, match=r"preset 'smoke' logs to experiment 'smoke', which is not in .* "
                                          r"run python -m sweeps -m \+experiment=smoke first"):
        resolve_experiment(client, "smoke")


def test_the_report_command_says_which_experiment_a_preset_name_read(client, tmp_path, capsys):
    from sweeps.report import __main__ as report

    uri = client.tracking_uri
    assert report.main(["--tracking-uri", uri, "--experiment", "nope", "--out", str(tmp_path / "r")]) == 2
    assert "sweeps.report: error: no experiment or preset named 'nope'" in capsys.readouterr().err
    assert report.main(["--tracking-uri", uri, "--experiment", "cifar10_batch_scaling_warmup",
                        "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "preset 'cifar10_batch_scaling_warmup' logs to experiment 'cifar10_batch_scaling'" in err
    (sweep,) = client.search_runs([client.get_experiment_by_name("cifar10_batch_scaling").experiment_id])
    assert f"sweep run `{sweep.info.run_id}`" in (tmp_path / "r" / "report.md").read_text()
    assert report.main(["--tracking-uri", uri, "--compare", "--experiment", "cifar10_batch_scaling_warmup",
                        "--out", str(tmp_path / "c")]) == 2  # the sweep has no job runs to compare
    assert "no job runs match experiment cifar10_batch_scaling in" in capsys.readouterr().err


def test_preset_names_include_a_users_own():
    from sweeps.report import runs

    assert "smoke" in presets.preset_names() and "waves_batch" not in presets.preset_names()
    assert "waves_batch" in presets.preset_names(OWN_CONF)
    assert runs.experiment_of("nope") is None
