"""A sweep's job configs derived from one Hydra composition per family of plain-value jobs
(sweeps.sweep.compose): each the config Hydra itself composes for that job, with real
Hydra on the project's conf/; Hydra's own composition wherever deriving would differ or fails."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import TESTS
from sweeps.sweep.compose import JobComposer

SEARCH = f"hydra.searchpath=[file://{TESTS / 'conf'}]"
BASE = ["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "device=cpu"]


@pytest.fixture(scope="module")
def hydra_loader():
    """(Hydra's config loader, a multirun's master config) as a ``-m`` command has them (Hydra's
    global state put back after the module)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    import sweeps.config

    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", [SEARCH, "hydra.mode=MULTIRUN", *BASE, "batch=8,16", "seed=1,2"],
                                           RunMode.MULTIRUN)
        yield loader, master


def _same(a, b) -> bool:
    return OmegaConf.to_container(a) == OmegaConf.to_container(b)


def test_jobs_that_differ_in_values_are_derived_and_equal_hydras_own_composition(hydra_loader):
    loader, master = hydra_loader
    # values of every kind a sweep varies or fixes: a changed value, a list, an added key, a removed
    # one, an interpolation; with a group choice, and a job of another group choice beside them
    jobs = [[*BASE, f"batch={b}", f"seed={s}", "+notes=x", "~model.dropout", "dataset.train_size=${batch}",
             "model.hidden=[32,16]"] for b in (8, 16) for s in (1, 2)]
    jobs.append([*[o for o in BASE if o != "model=mlp"], "model=cnn10", "batch=8", "seed=1", "+notes=x",
                 "dataset.train_size=${batch}", "model.widths=[8,16,32]"])
    composer = JobComposer(loader, master, jobs)
    derived = [composer.compose(job) for job in jobs]
    assert composer.derived == 3  # the family's first job is composed by Hydra (and checked), the lone cnn10 too
    for job, cfg in zip(jobs, derived):
        hydra = loader.load_sweep_config(master, job)
        assert _same(cfg, hydra), job
        assert OmegaConf.to_container(cfg.hydra.overrides.task) == job  # unresolved, as Hydra keeps them
        assert OmegaConf.is_struct(cfg) and cfg.dataset.train_size == cfg.batch and cfg.notes == "x"
    assert all("dropout" not in cfg.model for cfg in derived[:4])
    assert len({id(c) for c in derived}) == len(jobs)  # each job its own object: the launcher sets its number
    derived[1].seed = 99
    assert derived[2].seed == 1 and derived[3].seed == 2


def test_a_bad_value_in_a_derived_family_gets_hydras_own_error(hydra_loader):
    from hydra.errors import HydraException

    loader, master = hydra_loader
    jobs = [[*BASE, f"seed={s}"] for s in (1, 2, 3)] + [[*BASE, "+seed=4"]]
    composer = JobComposer(loader, master, [[*BASE, f"seed={s}"] for s in (1, 2, 3, 4)])
    for job in jobs[:3]:
        composer.compose(job)
    with pytest.raises(HydraException) as derived:
        composer.compose([*BASE, "+seed=4"])  # seed exists: "+" cannot add it
    with pytest.raises(HydraException) as hydra:
        loader.load_sweep_config(master, [*BASE, "+seed=4"])
    assert str(derived.value) == str(hydra.value)


def test_where_deriving_would_differ_hydra_composes_every_job(hydra_loader):
    """The check of a family's first job is the safety net for a Hydra whose composition changes:
    it then costs time, never a wrong config."""
    loader, master = hydra_loader
    jobs = [[*BASE, f"seed={s}"] for s in (1, 2, 3)]
    composer = JobComposer(loader, master, jobs)
    apply = composer._apply

    def off_by_one(values, cfg):  # a derivation that no longer matches Hydra's
        apply(values, cfg)
        cfg.epochs += 1
    composer._apply = off_by_one
    configs = [composer.compose(job) for job in jobs]
    assert composer.derived == 0
    assert all(_same(cfg, loader.load_sweep_config(master, job)) for cfg, job in zip(configs, jobs))
