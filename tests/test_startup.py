"""Lazy start: the command line answers ``--help``, ``--cfg job``, a composition error and a bad
value (in a single run or anywhere in a sweep list) without importing torch, torchvision or
mlflow — the imports that made ``--help`` take 7 s. Real processes: the import graph of a fresh
interpreter is the point. How fast it answers is measured by scripts/bench_startup.py."""
from __future__ import annotations

import subprocess
import time
import sys

import pytest

from conftest import REPO, TEST_CONF
from sweeps import names
from sweeps.config import catalog

HEAVY = ("torch", "torchvision", "mlflow")


def _imports(args: list[str], cwd) -> tuple[subprocess.CompletedProcess, set[str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sweeps", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, loaded


@pytest.mark.parametrize("args, code, says", [
    (["--help"], 0, "Usage: python -m sweeps [-m] [+experiment=PRESET]"),
    (["--cfg", "job"], 0, "_target_"),
    (["batch=abc"], 2, "batch='abc' is not valid"),
    (["-m", "batch=128,abc", "epochs=5"], 2, "job batch=abc"),
    (["modle=mlp"], 2, "Key 'modle' not in"),
    (["model=resnet5"], 2, "Could not find 'model/resnet5'"),
    (["+experiment=nope"], 2, "Could not find 'experiment/nope'"),
    (["model=mlp", "batch=33", "device=ddp", "device.gpus=2"], 2, "batch=33 is the global batch and does not "
     "divide over device.gpus=2 processes: use a multiple of 2"),
])
def test_the_command_line_answers_without_the_heavy_imports(tmp_path, args, code, says):
    """Bad input (exit 2) is one line on stderr, ``sweeps: error: ...``, no traceback."""
    proc, loaded = _imports([*args, TEST_CONF], tmp_path)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert says in proc.stdout + proc.stderr and "Traceback" not in proc.stdout + proc.stderr
    if code == 2:
        (line,) = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
        assert line.startswith("sweeps: error: ") and says in line
    assert not loaded & set(HEAVY), f"{' '.join(args)} imported {sorted(loaded & set(HEAVY))}"
    assert not (tmp_path / "mlruns").exists()  # nothing was opened either


def test_help_lists_the_groups_options_and_presets_with_their_descriptions(tmp_path):
    """sweeps' own --help: the usage line, the commands, each group a user chooses from with every
    option and the first comment line of its YAML (a user's --config-dir options too), the
    presets with theirs; no schema/*, case or Hydra groups; --cfg job named for the full config."""
    own = tmp_path / "conf"
    (own / "model").mkdir(parents=True)
    (own / "model" / "mine.yaml").write_text("# my own net, described here\n_target_: mynets.Net\n")
    (own / "experiment").mkdir()
    (own / "experiment" / "my_study.yaml").write_text("# @package _global_\n# my study in one line\nepochs: 1\n")
    proc, loaded = _imports(["--help", "--config-dir", str(own), "model=mine"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    page = proc.stdout
    for command in ("python -m sweeps -m +experiment=smoke",
                    "python -m sweeps -m model=cnn10,wrn28_10 batch=128,256,512,1024,2048",
                    "python -m sweeps --config-dir DIR model=mine", "python -m sweeps.report --experiment NAME",
                    "python -m sweeps.report --compare", "python -m sweeps --cfg job"):
        assert command in page
    rows, group = {}, None  # (group, option) -> description: a group's line, then its options' rows
    for line in page.split("Groups (", 1)[1].split("Presets (", 1)[0].splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            group = line.split(":")[0].strip()
        elif line.startswith("    ") and not line.startswith("     "):  # an option (* in use), its description
            name, _, text = line.strip().partition(" ")
            rows[group, name.rstrip("*")] = (name.endswith("*"), text.strip())
    for group in ("model", "dataset", "device", "optimizer", "lr_scaling", "schedule", "precision", "loss"):
        assert f"\n  {group}: " in page
        for path in sorted((REPO / "src" / "sweeps" / "conf" / group).glob("*.yaml")):
            description = catalog.first_comment(path.read_text())
            row = rows.get((group, path.stem), (False, ""))[1]
            assert description and row.startswith(description[:40]), (group, path.stem, row)
    assert rows["model", "mine"] == (True, "my own net, described here")  # the option in use, from --config-dir
    presets = page.split("Presets (+experiment=PRESET):\n", 1)[1]
    assert "  smoke " in presets and "Does the install work?" in presets and "my_study" in presets
    assert "my study in one line" in presets
    assert "schema/" not in page and "mlp_tabular_diabetes" not in page and "case" not in page
    assert "Powered by Hydra" not in page and "launcher" not in page


@pytest.mark.slow  # a whole job under -X importtime: ~13 s (~16 s as a sweep)
@pytest.mark.parametrize("sweep", [False, True], ids=["one job", "one-job sweep"])
def test_a_tabular_job_imports_neither_torchvision_nor_mlflow(tmp_path, sweep):
    """torchvision (whose import pulls in torch._dynamo's 1.2 s) is imported only by the jobs
    that use it: image datasets and ResNet-50; the run still records its version. mlflow (1.2 s,
    and 0.9 s to open its store) only by the store's own process (sweeps.tracking.service.connection):
    the job's run is whole all the same — and with ``-m`` the sweep's parent run too (its summary,
    shared params and verdict go through the same store process)."""
    proc, loaded = _imports(["-m"] * sweep + ["+experiment=diabetes", "batch=full", "epochs=1",
                                              "telemetry.figure=false", TEST_CONF], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert "torch" in loaded and "mlflow" not in loaded and "torchvision" not in loaded, said
    assert not loaded & {"sqlalchemy", "alembic"}
    from conftest import runs

    found = runs(tmp_path, "diabetes")  # the preset's experiment
    if sweep:
        (parent,) = [r for r in found if r.data.tags.get(names.KIND_TAG) == "sweep"]
        found = [r for r in found if r is not parent]
        assert parent.info.status == "FINISHED" and parent.data.tags[names.VERDICT_TAG]
        assert parent.data.params["model"] == "mlp_tabular" and "1 job(s): 1 ok" in proc.stdout
    (run,) = found
    assert run.info.status == "FINISHED" and names.FINAL_RMSE in run.data.metrics
    assert run.data.params[names.TRAIN_EXAMPLES] and run.inputs.dataset_inputs
    assert run.data.tags["env.torchvision"].startswith(__import__("torchvision").__version__.split("+")[0])


def test_a_native_crash_prints_the_python_stack_instead_of_nothing(tmp_path):
    # chaos.py (seed 1124, fault 120) saw a rerun die of SIGSEGV with empty stdout and stderr
    code = ("import atexit, ctypes, sys\n"
            "from sweeps.__main__ import main\n"
            "atexit.register(ctypes.string_at, 0)  # a read of address 0 as the process ends, as a crashing native library does\n"
            "sys.argv = ['sweeps', '--help']\n"
            "main()\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -11, (proc.returncode, proc.stderr[-2000:])
    assert "Fatal Python error: Segmentation fault" in proc.stderr and 'File "<string>", line 5' in proc.stderr


_ENDING = """
import atexit, sys, threading, time
from sweeps.__main__ import exit_now

class Held:
    def __del__(self):
        print("finalized in the teardown")

held = Held()  # a module global: only the interpreter's teardown finalizes it
atexit.register(print, "the user's exit hook ran")
print("buffered, not yet flushed", end="; ")  # stdout is a pipe here: block-buffered
if sys.argv[1] == "thread":  # a thread that is not a daemon: Python waits for it, and so must the exit
    threading.Thread(target=lambda: (time.sleep(0.5), print("the thread finished"))).start()
exit_now(SystemExit({"int": 3, "str": "a message", "none": None, "thread": 4}[sys.argv[1]]))
"""


@pytest.mark.parametrize("how, code", [("int", 3), ("str", 1), ("none", 0), ("thread", 4)])
def test_the_process_ends_after_its_exit_hooks_without_the_interpreters_teardown(tmp_path, how, code):
    """python -m sweeps ends with os._exit once its atexit hooks have run (1.2-1.6 s less for a
    one-epoch job): the exit status and everything printed are as sys.exit leaves them; only the
    finalizers of what is still alive are skipped; a running thread that is not a daemon is
    waited for, with the usual exit."""
    proc = subprocess.run([sys.executable, "-c", _ENDING, how], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert proc.stdout.startswith("buffered, not yet flushed; ") and "the user's exit hook ran" in proc.stdout
    assert ("a message" in proc.stderr) == (how == "str")
    if how == "thread":
        assert "the thread finished" in proc.stdout and "finalized in the teardown" in proc.stdout
    else:
        assert "finalized in the teardown" not in proc.stdout


_POOL_ENDING = """
import time
from joblib.externals.loky import get_reusable_executor
from sweeps.__main__ import exit_now

pool = get_reusable_executor(max_workers=2)
pool.submit(time.sleep, 2)  # a worker started
time.sleep(2.5)
stuck = pool.submit(time.sleep, 90)  # outlasts the test's 60 s, as one blocked for good on a dead worker's lock
print("pool up", flush=True)
exit_now(SystemExit(0))
"""


@pytest.mark.slow  # a pool of worker processes, one of them waited for POOL_EXIT_S (5 s): ~15 s
def test_a_sweep_whose_pool_worker_never_finishes_still_exits(tmp_path):
    """A sweep through joblib's pool (``hydra/launcher=gpu_pool``) ends once its jobs are done: the
    pool's workers are told to stop, and one that does not within POOL_EXIT_S is killed, never
    waited for (one blocked on a lock its SIGKILLed sibling held kept a sweep from exiting, chaos
    seed 2919, fault 42)."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _POOL_ENDING], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # without the kill: waits out the worker's 90 s
    assert proc.returncode == 0 and "pool up" in proc.stdout, proc.stderr[-2000:]
    assert time.monotonic() - start < 30
