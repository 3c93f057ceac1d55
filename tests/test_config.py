"""Composition of every option of every group, presets (every job of their sweeps), per-option
schemas (what a run logs and hashes), typos and wrong types, and the lr scaling rule."""
from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import MISSING, OmegaConf, open_dict

from sweeps import config, names
from sweeps.config.options import OPTION_SCHEMAS, OWN_KEYS
from sweeps.errors import UsageError
from sweeps.tracking.replay.resume import config_hash
from sweeps.tracking.store.store import flatten

config.register()
GROUPS = sorted(p.name for p in config.CONF_DIR.iterdir() if p.is_dir())
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((config.CONF_DIR / g).glob("*.yaml"))]


def _compose(overrides=(), return_hydra_config=False):
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def test_every_group_of_the_contract_exists():
    assert {"model", "dataset", "device", "optimizer", "lr_scaling", "schedule", "precision",
            "experiment"} <= set(GROUPS)


def _option_rounds() -> list[list[tuple[str, str]]]:
    """Every option of every group, in as few compositions as compose apart: round i takes the
    i-th option of each group in the defaults list (they do not interact at composition; each
    composition is ~0.25 s of Hydra's work on 2 cores), and each ``case`` (added with ``+``, which
    sets other groups itself) composes alone. Presets (group experiment) compose in
    test_every_job_of_every_preset_composes_and_validates below, with their jobs' values."""
    per_group = {g: [o for gg, o in OPTIONS if gg == g] for g in GROUPS if g not in ("experiment", "case")}
    per_group = {g: opts for g, opts in per_group.items() if opts}
    rounds = [[(g, opts[i]) for g, opts in per_group.items() if i < len(opts)]
              for i in range(max(map(len, per_group.values())))]
    return rounds + [[("case", o)] for g, o in OPTIONS if g == "case"]


@pytest.mark.parametrize("options", _option_rounds(), ids=lambda opts: " ".join(f"{g}={o}" for g, o in opts))
def test_every_option_composes(options):
    cfg = _compose([f"+{g}={o}" if g == "case" else f"{g}={o}" for g, o in options])
    for group, option in options:
        where = f"{group}={option}"
        if group != "case":  # not in the defaults list: added with +
            assert cfg[group] is not None, where
        if group in OPTION_SCHEMAS:  # the YAML extends schema/<group>/<option>: its own fields, no others
            schema = OPTION_SCHEMAS[group][option]
            assert OmegaConf.get_type(cfg[group]) is schema, where
            assert set(cfg[group]) == {f.name for f in dataclasses.fields(schema)}, where  # what a run logs
        if group in OWN_KEYS:  # a _target_ option: sweeps' own keys on it (config.yaml), its target named
            assert {f.name for f in dataclasses.fields(OWN_KEYS[group])} - {"base_lr"} <= set(cfg[group]), where
            assert "_target_" in cfg[group] and (cfg[group]._target_ or group == "loss"), where
    OmegaConf.to_container(cfg, resolve=False)  # the whole tree is well formed


def test_hydra_copies_its_config_sources_but_shares_the_config_store():
    """Hydra copies its config repository for every composition (126 times for ``--help``);
    sweeps makes the copies share the ConfigStore instead of copying every stored schema
    (sweeps.config.schema). The copy's source list is still its own, and a schema a user's code
    stores after that copy was made is composed."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    store = ConfigStore.instance()
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        repository = GlobalHydra.instance().hydra.config_loader.repository
        copied = copy.deepcopy(repository)
        assert copied.sources is not repository.sources
        assert [(type(s), s.path) for s in copied.sources] == [(type(s), s.path) for s in repository.sources]
        assert all(a is not b for a, b in zip(copied.sources, repository.sources))
        assert copied.get_schema_source().store is store  # not a copy of every schema
        snapshot, snapshot_repository = copy.deepcopy([store, repository])  # as Singleton.get_state() copies
        assert snapshot is not store and snapshot_repository.get_schema_source().store is snapshot
        assert "model" not in store.repo  # the options of group model are files
        store.store(group="model", name="late", node={"_target_": "torch.nn.Identity", "x": 3})
        try:
            assert copied.load_config("model/late").config.x == 3
            assert compose("config", overrides=["model=late"]).model.x == 3
        finally:
            del store.repo["model"]


def test_the_option_rounds_take_every_option_once():
    assert sorted(o for rnd in _option_rounds() for o in rnd) == sorted(o for o in OPTIONS if o[0] != "experiment")


@pytest.mark.parametrize("group", sorted(OWN_KEYS))
def test_config_yaml_gives_every_target_option_the_own_keys_defaults(group):
    """conf/config.yaml puts sweeps' own keys on every option (a user's too), with the defaults
    of their schema: the two never disagree."""
    block = OmegaConf.load(config.CONF_DIR / "config.yaml")[group]
    defaults = {f.name: f.default for f in dataclasses.fields(OWN_KEYS[group]) if f.default is not MISSING}
    assert dict(block) == defaults


@pytest.mark.parametrize("group", sorted(OPTION_SCHEMAS))
def test_every_option_has_a_schema_and_every_schema_an_option(group):
    files = {f.stem for f in (config.CONF_DIR / group).glob("*.yaml")}
    assert files == set(OPTION_SCHEMAS[group]) == set(names.GROUP_OPTIONS[group])


def _preset_jobs():
    """``(preset, overrides)`` for every job of every preset's own sweep (``hydra.sweeper.params``:
    plain comma-separated choices, as the presets write them). The default run takes each
    preset's first job; the others run in the slow step (~0.3 s of Hydra composition each: the
    34 jobs of a covering set were ~5 s of the default run's wall on 2 cores)."""
    for path in sorted((config.CONF_DIR / "experiment").glob("*.yaml")):
        params = OmegaConf.load(path).get("hydra", {}).get("sweeper", {}).get("params", {})
        axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in params.items()]
        for i, job in enumerate(itertools.product(*axes)):  # a preset without a sweep of its own: one job
            yield pytest.param(path.stem, list(job), marks=() if i == 0 else pytest.mark.slow,
                               id=" ".join((path.stem, *job)))


@pytest.mark.parametrize("preset, job", list(_preset_jobs()))
def test_every_job_of_every_preset_composes_and_validates(preset, job):
    """A preset that sets a key its jobs' options lack (``dataset.download`` on synthetic data)
    would stop its sweep at that job."""
    cfg = _compose([f"+experiment={preset}", *job])
    config.validate(cfg)
    OmegaConf.to_container(cfg, resolve=True)


def test_a_run_logs_only_its_options_params():
    """An MNIST job on the CPU with Adam and no schedule logs no synthetic, imagefolder, diabetes,
    cuda, ddp, SGD or multistep fields."""
    params = flatten(_compose(["model=mlp", "dataset=mnist", "device=cpu", "optimizer=adam", "schedule=constant"]))
    absent = ["dataset.shape", "dataset.num_classes", "dataset.regression", "dataset.test_fraction",
              "dataset.channels", "dataset.image_size", "device.index", "device.gpus", "device.backend",
              "device.timeout_s", "optimizer.momentum", "optimizer.nesterov", "schedule.milestones", "schedule.gamma"]
    assert not set(absent) & set(params)
    for key in ("dataset.root", "dataset.download", "dataset.augment", "dataset.train_size", "optimizer.betas",
                "optimizer.base_lr", "lr_scaling.base_batch", "precision.name"):
        assert key in params
    assert {k for k in params if k.startswith("device.")} == {"device.name", "device.threads", "device.malloc_trim_mb"}


def test_config_hash_covers_only_the_options_fields():
    """An MNIST job's identity moves with what MNIST reads and with nothing MNIST ignores."""
    mnist = _compose(["dataset=mnist"])
    assert config_hash(_compose(["dataset=mnist", "dataset.augment=true"])) != config_hash(mnist)
    assert config_hash(_compose(["dataset=mnist", "dataset.root=/elsewhere"])) == config_hash(mnist)  # IGNORED
    priced = _compose(["dataset=mnist", "cost.per_hour={cuda:2.5,cpu:0.1}", "cost.currency=USD"])
    assert config_hash(priced) == config_hash(mnist)  # a price changes no measurement: a done job stays done
    legacy = copy.deepcopy(mnist)  # what the single dataset schema left on it: synthetic's shape
    with open_dict(legacy.dataset):
        legacy.dataset.shape = [3, 32, 32]
    assert config_hash(legacy) != config_hash(mnist)  # it would count, so it must not be there
    assert "shape" not in mnist.dataset
    with pytest.raises(ConfigCompositionException):
        _compose(["dataset=mnist", "dataset.shape=[3,32,32]"])


@pytest.mark.parametrize("node, key, other", [("device", "threads", "1"), ("device", "malloc_trim_mb", "null"),
                                             ("optimizer", "lr", "0.05")])
def test_a_key_added_later_left_at_its_default_keeps_earlier_runs_identity(node, key, other):
    """``device.threads``, ``device.malloc_trim_mb`` and ``optimizer.lr`` came after runs were
    stored: at their default a job hashes as it did before the key existed (a done job is still
    skipped after the upgrade); set otherwise, it is a different job."""
    job = _compose(["dataset=mnist"])
    before_the_key = copy.deepcopy(job)
    with open_dict(before_the_key[node]):
        del before_the_key[node][key]
    assert config_hash(job) == config_hash(before_the_key)
    assert config_hash(_compose(["dataset=mnist", f"{node}.{key}={other}"])) != config_hash(job)


@pytest.mark.parametrize("overrides, schema", [
    (["dataset.rooot=x"], None),
    (["dataset=mnist", "dataset.shape=[1,8,8]"], None),
    (["dataset=synthetic", "dataset.root=x"], None),
    (["dataset=diabetes", "dataset.augment=true"], None),
    (["device=cpu", "device.gpus=2"], "CpuDevice"),
    (["device=cpu", "device.index=1"], "CpuDevice"),
    (["device=ddp", "device.index=1"], "DDPDevice"),
    (["device=cuda", "device.backend=gloo"], "CudaDevice"),
    (["optimizer.momentun=0.5"], None),
    (["optimizer=adam", "optimizer.momentum=0.9"], None),
    (["lr_scaling.base_bach=64"], "LinearScaling"),
    (["schedule=cosine", "schedule.gamma=0.5"], None),
    (["precision=bf16", "precision.nme=fp16"], "BF16Precision"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_a_key_the_option_lacks_fails_at_composition(overrides, schema):
    """Typos and keys of other options: Hydra's message names the key (a closed group's cause also
    its option's schema); a _target_ option holds exactly its YAML's keys, so the same holds."""
    with pytest.raises(ConfigCompositionException) as e:
        _compose(overrides)
    assert overrides[-1].split("=")[0] in str(e.value)
    assert schema is None or schema in str(e.value.__cause__)


@pytest.mark.parametrize("overrides", [
    ["epochs=abc"], ["device=cuda", "device.index=abc"], ["device=ddp", "device.gpus=two"],
    ["lr_scaling=sqrt", "lr_scaling.base_batch=abc"],
], ids=" ".join)
def test_a_wrong_type_fails_at_composition(overrides):
    with pytest.raises(ConfigCompositionException) as e:
        _compose(overrides)
    assert overrides[-1] in str(e.value)  # "Error merging override <key>=<value>"


@pytest.mark.parametrize("overrides, named", [
    (["dataset.train_size=abc"], "dataset"), (["optimizer.base_lr=abc"], "optimizer"),
    (["optimizer=adam", "optimizer.betas=abc"], "optimizer=adam: torch.optim.Adam"),
    (["schedule.gamma=abc"], "schedule=multistep"),
    (["dataset=synthetic", "dataset.shape=abc"], "dataset=synthetic"),
    (["dataset=synthetic", "+dataset.colour=red"], "dataset=synthetic"),
    (["dataset=diabetes", "dataset.test_fraction=half"], "dataset=diabetes"),
    (["+model.widht=3"], "model=mlp: sweeps.models.MLP rejects its arguments"),
    (["loss=cross_entropy", "loss.label_smoothing=lots"], "loss=cross_entropy"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_a_wrong_value_of_a_target_option_stops_before_the_run_opens(overrides, named):
    """Without per-option schemas a target's argument reaches its target: a wrong one is one line
    naming the option and target, raised while the job prepares (before its run opens)."""
    from sweeps.tasks.base import create

    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["model=mlp", "dataset=synthetic", "dataset.train_size=64",
                                           "dataset.test_size=16", "device=cpu", "epochs=3", *overrides],
                      return_hydra_config=True)
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(cfg)  # the option names Hydra chose, as in a real job
        try:
            with pytest.raises(UsageError) as e:
                config.complete(cfg)
                create(cfg).prepare()
        finally:
            HydraConfig.instance().cfg = None
    assert named in str(e.value) and "\n" not in str(e.value)


def test_defaults_are_study_1_reference_run():
    cfg = _compose()
    config.complete(cfg)
    assert cfg.model._target_.endswith("CNN10") and cfg.dataset.name == "cifar10"
    assert cfg.device.name == "auto" and cfg.batch == 128 and cfg.epochs == 100
    assert (cfg.optimizer.name, cfg.optimizer.base_lr, cfg.optimizer.momentum) == ("sgd", 0.1, 0.9)
    assert (cfg.lr_scaling.rule, cfg.lr_scaling.base_batch) == ("linear", 128)
    assert (cfg.schedule.name, list(cfg.schedule.milestones)) == ("multistep", [0.5, 0.8])
    assert cfg.precision.name == "fp32" and cfg.mlflow.experiment == "sweeps"


def test_presets_declare_their_sweep():
    cfg = _compose(["+experiment=offline_mnist"], return_hydra_config=True)
    assert dict(cfg.hydra.sweeper.params) == {"model": "mlp,cnn10_narrow", "batch": "64,256"}
    assert cfg.dataset._target_.endswith(".mnist10k")  # the MNIST digits the repo holds: no ../shared, no network
    assert (Path(cfg.dataset.root) / "raw" / "t10k-images-idx3-ubyte.gz").is_file()


@pytest.mark.parametrize("rule, expected", [("linear", 0.1 * 4), ("sqrt", 0.1 * 2), ("none", 0.1)])
def test_lr_scaling_rules(rule, expected):
    assert math.isclose(config.scaled_lr(0.1, 512, 128, rule), expected)


def test_batch_full_is_the_training_set():
    cfg = _compose(["batch=full"])
    assert config.batch_size(cfg, 354) == 354
    cfg = _compose(["batch=256"])
    assert config.batch_size(cfg, 354) == 256


@pytest.mark.parametrize("override", ["batch=0", "batch=-3", "batch=abc", "batch=1.5", "epochs=0",
                                      "optimizer.base_lr=0", "lr_scaling.base_batch=0", "dataset.test_size=0"])
def test_validate_rejects_with_one_line(override):
    with pytest.raises(UsageError) as e:
        config.validate(_compose([override]))
    key = override.split("=")[0]
    assert key in str(e.value) and "\n" not in str(e.value)
