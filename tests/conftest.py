"""Shared fixtures: run the real CLI in a subprocess and read the real sqlite MLflow store.

Nothing heavy at import: pytest-xdist's controlling process imports this file too, before it
starts the workers, and torch and mlflow there (~3.5 s) only delayed them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sweeps.tracking.store.store import open_client

if TYPE_CHECKING:
    from mlflow import MlflowClient

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SHARED_DATA = REPO.parent / "shared" / "data"  # used where present, never needed
MNIST_RAW = REPO / "examples" / "data" / "mnist-t10k" / "raw"  # the published MNIST test split, in the repo
TEST_CONF = f"hydra.searchpath=[file://{TESTS / 'conf'}]"  # test models (tests/conf/model)


def run_cli(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m sweeps ARGS`` in ``cwd`` (so ./mlruns lands there), test models importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def store(cwd: Path) -> MlflowClient:
    """Client on the default store a run in ``cwd`` writes: sqlite:///<cwd>/mlruns/mlflow.db,
    opened the way a reader opens it while a sweep may be creating it (polling a sweep that runs
    in the background once raced its creation of the DB: "table spans already exists")."""
    return open_client(f"sqlite:///{cwd / 'mlruns' / 'mlflow.db'}")


def runs(cwd: Path, experiment: str = "sweeps") -> list:
    """All runs of ``experiment`` in the default store under ``cwd``, oldest first."""
    client = store(cwd)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"experiment {experiment!r} not in the store under {cwd}"
    return client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


def table_block(text: str, heading: str) -> list[str]:
    """The lines of the first Markdown table under ``## heading`` in a report's text."""
    after = text.split(f"## {heading}\n", 1)[1]
    return [line for line in after.split("\n## ", 1)[0].splitlines() if line.startswith("|")]


def table_rows(text: str, heading: str) -> list[list[str]]:
    """That table's body rows, each a list of stripped cells."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in table_block(text, heading)[2:]]


@pytest.fixture
def tiny(tmp_path) -> list[str]:
    """Overrides for a tiny, fast CPU job on synthetic 1×8×8 images."""
    return ["dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=128", "dataset.test_size=32",
            "epochs=2", "device=cpu", TEST_CONF]


@pytest.fixture(scope="session")
def mnist_folder() -> Path:
    """The ImageFolder of the repo's 10,000 MNIST digits (``dataset=mnist10k``): ../shared's copy
    where present (the same files, already written), else written once (~10 s) where
    ``dataset=mnist10k`` writes it by default, the repo's gitignored ``examples/data/mnist-t10k/imagefolder``."""
    shared = SHARED_DATA / "mnist-10k-imagefolder"
    if (shared / "train").is_dir() and (shared / "val").is_dir():
        return shared
    from sweeps.data import mnist_folder as folder

    return folder.ensure(MNIST_RAW, MNIST_RAW.parent / "imagefolder")


def compose(overrides: list[str]):
    """The real config composed in-process with Hydra's compose API (no subprocess): the project's
    conf/ plus the test models of tests/conf (``TEST_CONF``-style search path)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    import sweeps.config

    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        return hydra_compose("config", overrides=[o for o in overrides if not o.startswith("hydra.searchpath")]
                             + [f"hydra.searchpath=[file://{TESTS / 'conf'}]"])


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    """Run one job in-process as ``python -m sweeps`` (no ``-m``) would — its values checked, then
    :func:`sweeps.job.lifecycle.run` — in ``tmp_path`` (its
    ./mlruns store and ./checkpoints): ``in_process(overrides) -> outcome``. Each call is a
    command of its own: a signal an earlier call was interrupted by is forgotten (a rerun is a
    new process), and the sweep's handlers are installed again where it had replaced them."""
    from sweeps.job import signals

    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("MLFLOW_", "SWEEPS_"))]:
        monkeypatch.delenv(key)

    def run(overrides: list[str]) -> str:
        if signals.received():
            signals.install()
        return run_job(overrides)
    return run


def run_job(overrides: list[str]) -> str:
    """One job of ``overrides`` in this process, as ``python -m sweeps`` runs it: composed, its
    values checked (``sweeps.config.complete`` and ``validate``), then
    :func:`sweeps.job.lifecycle.run`; returns its outcome."""
    from sweeps import config, launchers
    from sweeps.job import lifecycle

    cfg = compose(overrides)
    config.validate(config.complete(cfg))
    return lifecycle.run(cfg, launchers.current())


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """``write(files)`` puts the user's files under tmp_path (``conf/...`` and modules) and makes
    the folder importable, as ``python -m sweeps`` run from it would; the modules are forgotten
    afterwards (every test's package has a name of its own)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)

    def write(files: dict[str, str]) -> Path:
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        return tmp_path

    yield write
    for name in set(sys.modules) - before:
        if name.startswith("userpkg_") or name.startswith("mynets"):
            del sys.modules[name]


def cli_in_process(args: list[str], cwd: Path, fresh_store: bool = False) -> subprocess.CompletedProcess:
    """``python -m sweeps ARGS`` through the real entry point (:func:`sweeps.sweep.command.cli`: Hydra's
    argument parsing, composition, multirun, sweep callback, exit status) but in this process, in
    ``cwd``: the stdout, stderr and exit status :func:`run_cli` would give, without a new
    interpreter's ~5 s of imports. Everything the run changes in this process is put back: working
    directory, argv, environment, signal handlers, root logging, Hydra's singletons, the outcome
    counters. Use :func:`run_cli` where the process itself is the point (exit status of a real
    interpreter, signals, SIGKILL, several processes). Unless ``fresh_store``, a ``cwd`` without
    ./mlruns gets an empty store with its tables made (:func:`seed_store`)."""
    import contextlib
    import io

    from sweeps.api import call_cli, command_state
    from sweeps.sweep import command as cli

    if not fresh_store:
        seed_store(cwd)
    saved_cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(cwd)
        with command_state(["sweeps", *args]):
            for key in [k for k in os.environ if k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))]:
                del os.environ[key]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = call_cli(cli.cli)
    finally:
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(["python", "-m", "sweeps", *args], code, out.getvalue(), err.getvalue())


def seed_store(cwd: Path) -> None:
    """Give ``cwd`` the default store ./mlruns/mlflow.db, unless ./mlruns exists, the way a job
    creates it (:func:`sweeps.tracking.store.create.ensure`: a copy of MLflow's migrated schema, kept
    in the user's cache), without a job's store-opening around it; the real processes
    (``run_cli``) and tests marked ``fresh_store`` go through the job's own opening."""
    from sweeps.tracking.store import create

    mlruns = cwd / "mlruns"
    if mlruns.exists():
        return
    mlruns.mkdir(parents=True)
    create.ensure(str(mlruns / "mlflow.db"))


@pytest.fixture(autouse=True)
def _process_state_restored():
    """Every test leaves the process as it found it (tests/process_state.py): set up before and
    torn down after the test's own fixtures, monkeypatch included."""
    import process_state  # torch: imported by the worker that runs tests, not by xdist's controller

    with process_state.saved():
        yield


@pytest.fixture(autouse=True, scope="module")
def _process_state_restored_per_module():
    """The same around a module: its module-scoped fixtures run jobs before any test begins."""
    import process_state

    with process_state.saved():
        yield


@pytest.fixture(autouse=True)
def _seeded_store_for_in_process(request):
    """A test that runs jobs with ``in_process`` starts with an empty store in tmp_path/mlruns
    (:func:`seed_store`); ``@pytest.mark.fresh_store`` opts out (a test of a missing or brand-new
    store)."""
    if "in_process" in request.fixturenames and request.node.get_closest_marker("fresh_store") is None:
        seed_store(request.getfixturevalue("tmp_path"))


class StartedCli:
    """``python -m sweeps ARGS`` started now in ``cwd`` (as :func:`run_cli` runs it) and awaited
    later with :meth:`result`, so a test module's real processes run side by side (and beside its
    in-process tests) instead of one after another. Output goes to files, not pipes: a chatty
    process never blocks on a full pipe while nobody reads it."""

    def __init__(self, args: list[str], cwd: Path, timeout: float = 600):
        import tempfile

        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.args, self.cwd, self.timeout = [sys.executable, "-m", "sweeps", *args], cwd, timeout
        self._out, self._err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(self.args, cwd=cwd, env=env, stdout=self._out, stderr=self._err, text=True)
        self._result: subprocess.CompletedProcess | None = None

    def result(self) -> subprocess.CompletedProcess:
        """Wait for the process (killed after ``timeout`` s from now) and return what run_cli would."""
        if self._result is None:
            try:
                self.proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
            outputs = []
            for f in (self._out, self._err):
                f.seek(0)
                outputs.append(f.read())
                f.close()
            self._result = subprocess.CompletedProcess(self.args, self.proc.returncode, *outputs)
        return self._result

    def stop(self) -> None:
        """Kill it if it still runs (a failed test's leftover); a no-op once it has ended."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.gpu`` tests skip, one line each, where no CUDA device is visible."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_tests:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none visible here)")
    for item in gpu_tests:
        item.add_marker(skip)
