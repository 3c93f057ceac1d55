"""Repeats run interleaved (sweeps.sweep.interleave, the default sweeper of conf/config.yaml):
the sweep key ``repeat`` varies slowest wherever it is written, the configurations reversed on
every second round; ``hydra.sweeper.interleave=false`` keeps Hydra's basic order; the sweep check
and the job count list the jobs in launch order; ``'seed=${repeat}'`` gives each repeat its seed.

Real Hydra multiruns through the CLI's entry point in this process (``cli_in_process``) with a
real sqlite MLflow store under tmp_path; the order is read from the runs' start times and from
the console's ``[k/N]`` lines."""
from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from conftest import TEST_CONF, cli_in_process, runs
from sweeps import config
from sweeps.sweep import interleave
from sweeps.sweep.check import job_overrides, planned_jobs

TINY = ["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=32", "dataset.test_size=16",
        "device=cpu", "epochs=1", "telemetry.interval_s=0", TEST_CONF]


def _parse(lines: list[str]):
    return OverridesParser.create().parse_overrides(lines)


def _basic(lines: list[str]) -> list[list[str]]:
    """Hydra's own basic sweeper's job list for ``lines`` (a private class: here, in a test, only
    to hold sweeps' expansion to it)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(_parse(lines), None) for job in batch]


SWEEPS = [
    ["batch=16,32", "repeat=0,1"],
    ["repeat=0,1,2", "model=mlp,cnn10", "batch=16,32,64"],
    ["batch=16,32", "epochs=1", "repeat=0,1", "optimizer.lr=0.01,0.1"],
    ["batch=16,32", "repeat=0,1", "batch=64,128"],  # a key given twice: its first place, its last values
    ["batch=range(16,80,16)", "optimizer.lr=choice(0.1,0.3)", "repeat=3"],
    ["batch=16,32", "optimizer.lr=0.1"],
]


@pytest.mark.parametrize("lines", SWEEPS)
def test_without_interleaving_the_jobs_are_hydras_basic_sweepers(lines):
    # fails when a Hydra upgrade changes the basic sweeper's expansion: sweeps' must follow it
    assert interleave.job_lists(_parse(lines), interleave=False) == _basic(lines)


@pytest.mark.parametrize("lines", SWEEPS)
def test_interleaving_launches_the_same_jobs_with_repeat_slowest(lines):
    basic, jobs = _basic(lines), interleave.job_lists(_parse(lines))
    assert sorted(jobs) == sorted(basic) and len(jobs) == len(basic)
    repeats = [next((o for o in job if o.startswith("repeat=")), None) for job in jobs]
    values = list(dict.fromkeys(repeats))
    if len(values) < 2:  # repeat not swept: the basic order
        assert jobs == basic
        return
    per_round = len(jobs) // len(values)
    assert repeats == [v for v in values for _ in range(per_round)]  # every configuration at 0, then at 1, ...
    first = [[o for o in job if not o.startswith("repeat=")] for job in jobs[:per_round]]
    assert first == [[o for o in job if not o.startswith("repeat=")] for job in basic if f"{values[0]}" in job]
    for r in range(1, len(values)):
        this = [[o for o in job if not o.startswith("repeat=")] for job in jobs[r * per_round:(r + 1) * per_round]]
        assert this == (first[::-1] if r % 2 else first)  # odd rounds reversed (ABBA)


def test_the_order_of_the_brief():
    jobs = interleave.job_lists(_parse(["batch=16,32", "repeat=0,1"]))
    assert jobs == [["batch=16", "repeat=0"], ["batch=32", "repeat=0"], ["batch=32", "repeat=1"],
                    ["batch=16", "repeat=1"]]


@pytest.mark.parametrize("size", [None, -1, 1, 3, 4, 10])
def test_launch_batches_split_the_launch_order_as_the_basic_sweeper_splits_it(size):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    jobs = interleave.job_lists(_parse(["batch=16,32", "repeat=0,1,2"]))
    assert list(interleave.chunks(jobs, size)) == list(BasicSweeper.split_overrides_to_chunks(jobs, size))


def test_a_sweep_that_is_not_a_list_is_refused_as_hydra_refuses_it():
    from hydra.errors import HydraException

    with pytest.raises(HydraException, match="INTERVAL_SWEEP"):
        interleave.job_lists(_parse(["optimizer.lr=interval(0.1,1)", "repeat=0,1"]))


def test_hydra_finds_the_sweeper_through_its_public_plugin_api():
    # fails when Hydra's Sweeper interface or its basic sweeper's options change: sweeps' sweeper
    # implements the one and takes the other
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeperConf
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    assert interleave.SWEEPER in {f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(Sweeper)}
    assert {name for name, m in inspect.getmembers(Sweeper) if getattr(m, "__isabstractmethod__", False)} == {
        "setup", "sweep"}
    options = set(inspect.signature(interleave.InterleavingSweeper).parameters)
    assert {f.name for f in dataclasses.fields(BasicSweeperConf)} - {"_target_"} == options - {"interleave"}
    yaml = OmegaConf.load(config.CONF_DIR / "hydra" / "sweeper" / "sweeps.yaml")
    assert yaml._target_ == interleave.SWEEPER and set(yaml) - {"_target_"} == options


def _sweep_config(overrides: list[str], task: list[str]):
    """The sweep's own config as Hydra composes it (hydra node included), with the command line's
    sweep overrides ``task`` in ``hydra.overrides.task`` (the compose API refuses sweeps)."""
    config.register()
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = [*overrides, *task]
    return cfg


def test_the_default_sweeper_interleaves_a_presets_params_and_the_command_lines_repeat():
    cfg = _sweep_config(["+experiment=diabetes"], ["repeat=0,1"])
    assert cfg.hydra.sweeper._target_ == interleave.SWEEPER and cfg.hydra.sweeper.interleave is True
    assert dict(cfg.hydra.sweeper.params) == {"batch": "full,32"}  # the preset's sweep is kept
    jobs = job_overrides(cfg)
    assert [[o for o in j if o.split("=")[0] in ("batch", "repeat")] for j in jobs] == [
        ["batch=full", "repeat=0"], ["batch=32", "repeat=0"], ["batch=32", "repeat=1"], ["batch=full", "repeat=1"]]
    assert planned_jobs(cfg) == 4


@pytest.mark.parametrize("opt_out", [["hydra.sweeper.interleave=false"], ["hydra/sweeper=basic"]])
def test_opting_out_lists_the_basic_order(opt_out):
    cfg = _sweep_config(["+experiment=diabetes", *opt_out], ["repeat=0,1"])
    jobs = [[o for o in j if o.split("=")[0] in ("batch", "repeat")] for j in job_overrides(cfg)]
    assert jobs == [["batch=full", "repeat=0"], ["batch=full", "repeat=1"], ["batch=32", "repeat=0"],
                    ["batch=32", "repeat=1"]]
    assert planned_jobs(cfg) == 4


def test_a_bad_opt_out_value_is_one_line():
    from sweeps.errors import UsageError

    with pytest.raises(UsageError, match=r"hydra.sweeper.interleave=sometimes is not valid: true .* or false"):
        job_overrides(_sweep_config(["hydra.sweeper.interleave=sometimes"], ["repeat=0,1"]))


def _jobs_in_order(cwd, experiment: str = "sweeps") -> list:
    """The sweep's job runs by start time (``conftest.runs``: oldest first)."""
    return [r for r in runs(cwd, experiment) if "mlflow.parentRunId" in r.data.tags]


def _console(proc) -> list[str]:
    return re.findall(r"^\[(\d+)/(\d+)\] (.+?)(?:  \(about .*)?$", proc.stdout, re.M)


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    """batch=16,32 × repeat=0,1 with a seed per repeat, the default sweeper."""
    cwd = tmp_path_factory.mktemp("interleaved")
    return cwd, cli_in_process(["-m", *TINY, "batch=16,32", "repeat=0,1", "seed=${repeat}"], cwd)


def test_a_multirun_runs_its_repeats_interleaved(interleaved):
    cwd, proc = interleaved
    assert proc.returncode == 0, proc.stderr[-3000:]
    order = ["batch=16 repeat=0", "batch=32 repeat=0", "batch=32 repeat=1", "batch=16 repeat=1"]
    assert [r.data.tags["sweeps.overrides"] for r in _jobs_in_order(cwd)] == order  # by the runs' start times
    assert "sweeps: 4 jobs" in proc.stdout
    assert _console(proc) == [(str(k), "4", name) for k, name in enumerate(order, 1)]


def test_seed_per_repeat_gives_each_repeat_its_seed_and_nothing_else(interleaved):
    cwd, proc = interleaved
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {r.data.tags["sweeps.overrides"]: r for r in _jobs_in_order(cwd)}
    for batch in (16, 32):
        r0, r1 = (jobs[f"batch={batch} repeat={k}"] for k in (0, 1))
        assert (r0.data.params["seed"], r1.data.params["seed"]) == ("0", "1")
        differ = {k for k in set(r0.data.params) | set(r1.data.params) if r0.data.params.get(k) != r1.data.params.get(k)}
        assert differ == {"seed", "repeat"}
        assert r0.data.tags["sweeps.config_hash"] != r1.data.tags["sweeps.config_hash"]
    parent = next(r for r in runs(cwd) if "mlflow.parentRunId" not in r.data.tags)
    assert "seed" not in parent.data.tags.get("sweeps.verdict", "")  # one paragraph: seed is not a swept key
    assert not [k for k in parent.data.tags if k.startswith("sweeps.verdict.") and "seed" in k]


def test_opting_out_runs_the_basic_order(tmp_path):
    proc = cli_in_process(["-m", *TINY, "batch=16,32", "repeat=0,1", "hydra.sweeper.interleave=false"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    order = ["batch=16 repeat=0", "batch=16 repeat=1", "batch=32 repeat=0", "batch=32 repeat=1"]
    assert [r.data.tags["sweeps.overrides"] for r in _jobs_in_order(tmp_path)] == order
    assert _console(proc) == [(str(k), "4", name) for k, name in enumerate(order, 1)]


def test_a_presets_repeat_is_interleaved_too(tmp_path):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "twice.yaml").write_text(textwrap.dedent("""\
        # @package _global_
        hydra:
          sweeper:
            params:
              repeat: 0,1
              batch: 16,32,64
        seed: ${repeat}
        """))
    cwd = tmp_path / "run"
    cwd.mkdir()
    proc = cli_in_process(["--config-dir", str(tmp_path / "conf"), "-m", "+experiment=twice", *TINY], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    order = ["repeat=0 batch=16", "repeat=0 batch=32", "repeat=0 batch=64",
             "repeat=1 batch=64", "repeat=1 batch=32", "repeat=1 batch=16"]
    assert [r.data.tags["sweeps.overrides"] for r in _jobs_in_order(cwd, "twice")] == order
    assert "sweeps: 6 jobs of preset twice" in proc.stdout
    assert [(k, n) for k, n, _ in _console(proc)] == [(str(k), "6") for k in range(1, 7)]
    assert [r.data.params["seed"] for r in _jobs_in_order(cwd, "twice")] == ["0", "0", "0", "1", "1", "1"]
