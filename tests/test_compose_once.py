"""The command's config composed by Hydra once, not twice (sweeps.sweep.compose_once): the
kept composition is the one Hydra would make for the run or multirun, Hydra's errors are kept,
and Hydra's own get_mode is back after the command. Real Hydra on the project's conf/."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import TEST_CONF, cli_in_process, runs
from sweeps import config
from sweeps.sweep.compose_once import composed_once

TINY = ["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64", "dataset.test_size=16",
        "device=cpu", "epochs=1", TEST_CONF]


def _hydra(conf_dir):
    """A Hydra as ``python -m sweeps`` creates one (``_run_hydra``), GlobalHydra's one."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    return Hydra.create_main_hydra2("sweeps", create_config_search_path(str(conf_dir)))


@pytest.fixture(autouse=True)
def global_hydra():
    """GlobalHydra's Hydra put back after the test (other tests of this process may hold one)."""
    from hydra.core.global_hydra import GlobalHydra

    held = GlobalHydra.instance().hydra
    yield
    GlobalHydra.instance().hydra = held


@pytest.fixture
def compositions(monkeypatch):
    """How many times Hydra composes a whole config (``_load_configuration_impl``) from here on."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    made = []
    impl = ConfigLoaderImpl._load_configuration_impl

    def counted(self, *args, **kwargs):
        made.append(1)
        return impl(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "_load_configuration_impl", counted)
    return made


@pytest.mark.parametrize("mode, overrides", [("RUN", ["batch=16", "+notes=x"]), ("MULTIRUN", ["batch=16,32"])])
def test_the_run_gets_get_modes_composition_equal_to_hydras_own(compositions, mode, overrides):
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    config.register()
    overrides = [*TINY, *overrides]
    ran = [*overrides, f"hydra.mode={mode}"]  # what Hydra's _run_app adds where no config sets the mode
    own = _hydra(config.CONF_DIR).config_loader.load_configuration("config", ran, RunMode[mode])
    hydra_get_mode = Hydra.get_mode
    with composed_once():
        hydra = _hydra(config.CONF_DIR)
        assert hydra.get_mode("config", overrides) is None  # nothing in conf/ sets hydra.mode
        kept = hydra.config_loader.load_configuration("config", ran, RunMode[mode])
        again = hydra.config_loader.load_configuration("config", ran, RunMode[mode])  # only once
    assert Hydra.get_mode is hydra_get_mode
    assert len(compositions) == 3  # Hydra's own, get_mode's (kept by the run), the second lookup's
    assert OmegaConf.to_container(kept) == OmegaConf.to_container(own) == OmegaConf.to_container(again)
    assert kept.hydra.mode == RunMode[mode] and list(kept.hydra.overrides.hydra)[-1] == f"hydra.mode={mode}"
    assert kept is not again


def test_hydras_errors_of_the_runs_composition_are_kept(tmp_path, compositions):
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode

    (tmp_path / "db").mkdir()
    (tmp_path / "config.yaml").write_text("defaults:\n  - db: ???\n  - _self_\nx: 1\n")
    (tmp_path / "db" / "mysql.yaml").write_text("port: 3306\n")
    with composed_once():
        hydra = _hydra(tmp_path)
        hydra.get_mode("config", ["x=2"])
        with pytest.raises(ConfigCompositionException, match="You must specify 'db'"):  # as a single run
            hydra.config_loader.load_configuration("config", ["x=2", "hydra.mode=RUN"], RunMode.RUN)
        hydra.get_mode("config", ["db=mysql", "x=1,2"])
        with pytest.raises(ConfigCompositionException, match="Ambiguous value for argument 'x=1,2'"):
            hydra.config_loader.load_configuration("config", ["db=mysql", "x=1,2", "hydra.mode=RUN"], RunMode.RUN)
        hydra.get_mode("config", ["db=mysql", "x=1,2"])
        cfg = hydra.config_loader.load_configuration("config", ["db=mysql", "x=1,2", "hydra.mode=MULTIRUN"],
                                                     RunMode.MULTIRUN)
    assert cfg.db.port == 3306 and cfg.hydra.mode == RunMode.MULTIRUN
    assert len(compositions) == 4  # get_mode's three, and the "???" run's own (raising)


def test_a_single_run_composes_its_config_once(tmp_path, compositions):
    proc = cli_in_process([*TINY, "batch=16"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(compositions) == 1
    (run,) = runs(tmp_path)
    assert run.data.params["batch"] == "16" and run.data.tags["outcome"] == "ok"
