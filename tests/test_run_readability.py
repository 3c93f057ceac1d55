"""How runs read in the MLflow UI, checked in the real sqlite store two real sweeps (in-process)
and a one-job run write: names, statuses, descriptions, the parent's shared params, MLflow's
source/user tags, dataset inputs, example counts and the system/ metrics."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import TEST_CONF, TESTS, cli_in_process, compose, runs
from fake_nvml import Clock, FakeNVML
from sweeps import names
from test_telemetry import _script
from sweeps.tracking.writer import inputs, naming

TINY = ["dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64", "dataset.test_size=16", "epochs=1",
        "device=cpu", TEST_CONF]


@pytest.fixture(scope="module")
def store_of_two_sweeps(tmp_path_factory):
    """The same two jobs (ok at batch 16, oom at 64) swept twice into one store (resume=false: the
    second sweep runs them again), then a one-job run whose data is missing (unavailable), and
    the oom job once more: resume skips it (it reads the outcome tag, not the FAILED status)."""
    cwd = tmp_path_factory.mktemp("readable")
    for extra in ([], ["resume=false"]):
        proc = cli_in_process(["-m", "model=oom_above", "batch=16,64", *TINY, *extra], cwd)
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = cli_in_process(["model=mlp", "batch=16", "dataset=mnist", f"dataset.root={cwd / 'no-mnist'}",
                           "dataset.download=false", "dataset.if_missing=skip", "epochs=1", "device=cpu"], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = runs(cwd)
    parents = [r for r in found if r.data.tags.get(names.KIND_TAG) == "sweep"]
    jobs = [r for r in found if names.PARENT_RUN_TAG in r.data.tags]
    (single,) = [r for r in found if r not in parents and r not in jobs]
    again = cli_in_process(["model=oom_above", "batch=64", *TINY], cwd)  # resume: the FAILED oom job is done
    assert again.returncode == 0 and "(outcome oom): skipped" in again.stdout + again.stderr, again.stderr[-3000:]
    assert len(runs(cwd)) == len(found)
    return parents, jobs, single


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_child_names_are_readable_and_unique_across_sweeps(store_of_two_sweeps):
    parents, jobs, single = store_of_two_sweeps
    assert len(parents) == 2 and len(jobs) == 4
    assert len({j.info.run_name for j in jobs}) == 4
    for job in jobs:
        sweep_id = job.data.tags[names.PARENT_RUN_TAG][:6]
        batch = job.data.params["batch"]
        assert job.info.run_name == f"oom_above b{batch} cpu #{sweep_id}"
    for parent in parents:
        assert parent.info.run_name == f"sweep #{parent.info.run_id[:6]} batch"  # what it varies
    assert single.info.run_name == f"mlp b16 cpu #{single.info.run_id[:6]}"  # its own id: no sweep


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_the_status_shows_the_outcome(store_of_two_sweeps):
    _, jobs, single = store_of_two_sweeps
    seen = {(j.data.tags["outcome"], j.info.status) for j in jobs} | {(single.data.tags["outcome"], single.info.status)}
    assert seen == {("ok", "FINISHED"), ("oom", "FAILED"), ("unavailable", "KILLED")}


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_descriptions_say_the_outcome_and_the_command(store_of_two_sweeps):
    parents, jobs, single = store_of_two_sweeps
    oom = next(j for j in jobs if j.data.tags["outcome"] == "oom")
    note = oom.data.tags["mlflow.note.content"]
    assert note.startswith("**oom** — OutOfMemoryError: CUDA out of memory (test model: batch 64 > 32)")
    assert "    batch=64  oom" in note  # its summary row
    assert single.data.tags["mlflow.note.content"].startswith("**unavailable** — ")
    for parent in parents:
        note = parent.data.tags["mlflow.note.content"]
        assert "    python -m sweeps -m model=oom_above batch=16,64" in note
        assert "2 job(s): 1 ok, 1 oom" in note and "Varies: `batch`." in note


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_the_parent_has_what_its_jobs_share_as_params(store_of_two_sweeps):
    parents, jobs, _ = store_of_two_sweeps
    for parent in parents:
        mine = [j for j in jobs if j.data.tags[names.PARENT_RUN_TAG] == parent.info.run_id]
        shared = {k: v for k, v in mine[0].data.params.items() if all(j.data.params.get(k) == v for j in mine)}
        assert parent.data.params == shared
        assert parent.data.params["model"] == "oom_above" and "batch" not in parent.data.params
        assert parent.data.params[names.TRAIN_EXAMPLES] == "64"


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_mlflow_source_and_user_tags(store_of_two_sweeps):
    parents, jobs, single = store_of_two_sweeps
    for run in (*parents, *jobs, single):
        tags = run.data.tags
        assert tags["mlflow.source.name"] == "python -m sweeps" and tags["mlflow.source.type"] == "LOCAL"
        assert tags["mlflow.user"]
        commit = tags["env.git_commit"].removesuffix("-dirty")
        if names.CODE_DIRTY_TAG in tags:  # a job of the user's code (a test model) in a git work tree: its commit
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=TESTS, capture_output=True, text=True).stdout.strip()
        assert tags.get("mlflow.source.git.commit") == (commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None)


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_dataset_inputs_and_example_counts(store_of_two_sweeps):
    _, jobs, single = store_of_two_sweeps
    for job in jobs:
        params, fingerprint = job.data.params, job.data.tags[names.DATA_TAG]
        assert params[names.TRAIN_EXAMPLES] == "64" and params[names.TEST_EXAMPLES] == "16"
        assert params[names.INPUT_SHAPE] == "1x8x8"
        by_context = {i.tags[0].value: i.dataset for i in job.inputs.dataset_inputs}
        assert set(by_context) == {"train", "eval"}
        train = by_context["train"]
        assert train.name == "synthetic/train" and fingerprint == "generated:synthetic"
        assert train.source_type == "code" and json.loads(train.profile)["num_rows"] == 64
        assert json.loads(train.source)["tags"]["sweeps.fingerprint"] == fingerprint
        spec = json.loads(json.loads(train.schema)["mlflow_tensorspec"]["features"])[0]["tensor-spec"]
        assert spec == {"dtype": "float32", "shape": [-1, 1, 8, 8]}
        assert json.loads(by_context["eval"].profile)["num_rows"] == 16
    assert not single.inputs.dataset_inputs  # its data was never read


def test_files_on_disk_are_a_local_source(tmp_path):
    ds = inputs.dataset("imagefolder", "train", "0123456789abcdef", str(tmp_path), (3, 28, 28), 8000, False)
    assert ds.source_type == "local"
    assert json.loads(ds.source) == {"uri": str(tmp_path), "fingerprint": "0123456789abcdef"}


def test_the_same_data_read_differently_keeps_its_own_shape_and_count(tmp_path):
    """MLflow stores one dataset per (experiment, name, digest) and reuses it: two jobs on the same
    generated data with other subset sizes and shapes must not share one."""
    from mlflow import MlflowClient

    from conftest import seed_store

    seed_store(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    exp = client.create_experiment("inputs")
    logged = {}
    for shape, rows in (((1, 8, 8), 64), ((3, 32, 32), 1000), ((1, 8, 8), 64)):
        run = client.create_run(exp)
        inputs.log_datasets(client, run.info.run_id, "synthetic", "generated:synthetic", None, shape, rows, 16, False)
        (train,) = [i.dataset for i in client.get_run(run.info.run_id).inputs.dataset_inputs
                    if i.tags[0].value == "train"]
        assert json.loads(train.profile) == {"num_rows": rows, "features_shape": [rows, *shape]}
        logged.setdefault((shape, rows), set()).add(train.digest)
    assert [len(d) for d in logged.values()] == [1, 1] and len(set.union(*logged.values())) == 2


@pytest.mark.slow  # three sweeps and a rerun in one store: ~6 s on 2 cores
def test_host_telemetry_is_also_a_system_metric(store_of_two_sweeps):
    _, jobs, _ = store_of_two_sweeps
    ok = next(j for j in jobs if j.data.tags["outcome"] == "ok")
    m = ok.data.metrics
    assert 0 <= m[names.SYSTEM_CPU_PCT] <= 100
    assert m[names.SYSTEM_MEM_MB] == pytest.approx(m["system/host/sys_mem_used_max_mb"] * 2**20 / 1e6, rel=0.5)


def test_gpu_telemetry_is_also_a_system_metric_in_mlflow_units():
    clock = Clock()
    _, m = _script(FakeNVML(clock), clock)  # one epoch with two GPU samples (tests/test_telemetry.py)
    assert m["system/gpu_0_utilization_percentage"] == pytest.approx(m["system/gpu/util_pct"])
    assert m["system/gpu_0_power_usage_watts"] == pytest.approx(m["system/gpu/power_w"])
    assert 0 < m["system/gpu_0_memory_usage_megabytes"] <= m["system/gpu/mem_used_max_mb"] * 2**20 / 1e6


def test_swept_values_beyond_model_batch_device_are_named_compactly():
    cfg = compose(["model=mlp", "batch=64", "device=cuda", "device.index=1", "precision=bf16"])
    title = naming.job_title(cfg, {"model": "mlp"}, "model=mlp batch=64 device.index=1 precision=bf16 "
                                                    "optimizer.base_lr=0.05 repeat=2", multirun=True)
    assert title == "mlp b64 cuda:1 bf16 base_lr=0.05 repeat=2"
    assert naming.with_id("x" * 200, "abcdef0123") == "x" * 111 + "… #abcdef"


def test_a_long_sweeps_description_keeps_its_head_and_counts_within_a_tags_limit():
    rows = ["job  outcome", "---  -------", *(f"batch={i}  ok  {'x' * 150}" for i in range(1000)), "1000 job(s): 1000 ok"]
    note = naming.sweep_note("python -m sweeps -m batch=...", ["batch"], "multirun/x", "abcdef0123", "\n".join(rows))
    assert len(note) <= 8000 and "    batch=0  ok" in note and note.endswith("    1000 job(s): 1000 ok")
    shown = note.count("  ok  ")
    assert f"… {1000 - shown} more job(s): artifact summary.txt has them all" in note
