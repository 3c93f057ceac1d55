"""The CUDA paths a review found wrong (issue #15, items 1-9), each shown on this CPU machine:
reproduced for real where a CPU can (torch.compile's recompile limit, an allocator never
initialised), faked at the hardware boundary where only a GPU can (torch.cuda functions, NVML via
tests/fake_nvml.py, CUDA error texts); ``@pytest.mark.gpu`` tests for what only hardware shows."""
from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import TensorDataset

import gpu_helpers
from conftest import runs
from fake_nvml import Clock, FakeNVML
from sweeps.data.datasets import DataSpec
from sweeps.data.loaders import TensorBatches, make_loaders
from sweeps.errors import DeviceUnavailable, UsageError
from sweeps import state
from sweeps import launchers
from sweeps.job import ddp, rank
from sweeps.placement import gpu_pool
from sweeps.placement import device as device_mod
from sweeps.job import outcome
from sweeps.job.lifecycle import Job
from sweeps.tasks import inference
from sweeps.telemetry import nvml as telemetry_nvml
from sweeps.telemetry.sampler import for_job
from sweeps.provenance import machine
from sweeps.train import builder, memory, speed
from sweeps.train.builder import COMPILE_BACKEND_ENV

CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)
TINY = ["dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.test_size=8", "epochs=1", "telemetry.figure=false",
        "telemetry.interval_s=0"]


@pytest.fixture
def lost_context(monkeypatch):
    """This process's CUDA context as the test leaves it (lost or not, the GPUs it is on): restored afterwards."""
    monkeypatch.setattr(state.current(), "cuda_lost", "")
    monkeypatch.setattr(state.current(), "cuda_contexts", set())


def _fake_gpus(monkeypatch, n: int, names=None) -> None:
    """torch.cuda as a machine with ``n`` GPUs shows it (UUIDs fake-<k>, as FakeNVML's). The
    machine's cached fingerprint is dropped now and when the test ends, so no fake GPU stays."""
    names = names or [f"Fake GPU {k}" for k in range(n)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(
        name=names[i], uuid=f"fake-{i}", total_memory=80 * 2**30, major=9, minor=0, multi_processor_count=132))
    machine.fingerprint.cache_clear()
    _CLEAR_AFTER.append(machine.fingerprint.cache_clear)


_CLEAR_AFTER: list = []


@pytest.fixture(autouse=True)
def _no_fake_gpu_outlives_its_test():
    yield
    while _CLEAR_AFTER:
        _CLEAR_AFTER.pop()()


# 1. events on the job's GPU ----------------------------------------------------------------------
class _Stream:
    def __init__(self, device=None):
        self.device = torch.device(device) if device is not None else CUDA0


class _Event:
    def __init__(self, enable_timing=False):
        self.stream = None

    def record(self, stream=None):
        self.stream = stream or _Stream()  # no stream: the current device's, cuda:0

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 1.0


class _Nothing:
    """A model whose forward pass does nothing (no tensor can live on a GPU here)."""

    def eval(self):
        pass

    def __call__(self, x):
        return x


def test_inference_events_are_recorded_on_the_batchs_gpu(monkeypatch):
    made = []
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: made.append(_Event()) or made[-1])
    monkeypatch.setattr(torch.cuda, "current_stream", _Stream)
    monkeypatch.setattr(inference, "synchronize", lambda device: None)
    out = inference.time_forward(_Nothing(), SimpleNamespace(device=CUDA1), "events", 0, 3)
    assert out["times_ms"] == [1.0] * 3 and {str(e.stream.device) for e in made} == {"cuda:1"}


def test_a_one_gpu_job_makes_its_gpu_current(monkeypatch, lost_context):
    _fake_gpus(monkeypatch, 2)
    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    assert device_mod.resolve_device(OmegaConf.create({"name": "cuda", "index": 1})) == CUDA1
    assert current == [1]


# 2. and 8: compile in a sweep of jobs in one process; inference compiles and goes NHWC ----------
def _lower_recompile_limit(monkeypatch, limit: int) -> None:
    """Dynamo's per-code-object graph limit, lowered for this test: ``recompile_limit``, called
    ``cache_size_limit`` in torch releases before the rename (kept there as an alias)."""
    import torch._dynamo

    config = torch._dynamo.config
    monkeypatch.setattr(config, "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit", limit)


@pytest.mark.slow  # two compiled in-process jobs: ~4 s
def test_every_compiled_job_of_a_sweep_runs_compiled(in_process, monkeypatch, tmp_path):
    """Two compiled jobs at two batch sizes in one process (as a sweep runs them). Dynamo's
    recompile limit is lowered from 8 to 2 so two tiny jobs reach it (2 graphs a job: training and
    evaluation shape); without a fresh cache per job the second job's forward ran eager."""
    monkeypatch.setenv(COMPILE_BACKEND_ENV, "aot_eager")
    _lower_recompile_limit(monkeypatch, 2)
    gpu_helpers.EagerProbe.eager.clear()
    for batch in (8, 16):
        assert in_process(["model=eager_probe", *TINY, "dataset.train_size=32", f"batch={batch}", "device=cpu",
                           "compile=true"]) == "ok"
    assert [b for (training, b) in gpu_helpers.EagerProbe.eager if training] == []  # no eager training pass
    jobs = runs(tmp_path)
    assert [r.data.tags.get("job.compiled") for r in jobs] == ["true", "true"]
    assert all(r.data.metrics["time/compile_s"] > 0 for r in jobs)


@pytest.mark.slow  # compiles every inference job (~4 s); the compile path stays in the tests above
def test_inference_jobs_of_a_sweep_compile_and_feed_channels_last(in_process, monkeypatch, tmp_path):
    """Two inference jobs in one process, at two batch sizes (one graph each: the limit lowered to
    1 shows what 8 shows after a few more jobs): both run compiled, on NHWC batches and weights."""
    monkeypatch.setenv(COMPILE_BACKEND_ENV, "aot_eager")
    _lower_recompile_limit(monkeypatch, 1)
    gpu_helpers.EagerProbe.eager.clear()
    nhwc, time_forward = [], inference.time_forward
    monkeypatch.setattr(inference, "time_forward", lambda model, x, *a: nhwc.append(
        (x.is_contiguous(memory_format=torch.channels_last), model.conv.weight.is_contiguous(
            memory_format=torch.channels_last))) or time_forward(model, x, *a))
    for batch in (4, 8):
        assert in_process(["model=eager_probe", "model.conv=true", *TINY, f"batch={batch}", "device=cpu",
                           "task=inference", "compile=true", "channels_last=true", "timing.warmup=1",
                           "timing.iters=3"]) == "ok"
    assert sum(gpu_helpers.EagerProbe.eager.values()) == 0  # every timed pass ran the compiled graph
    assert nhwc == [(True, True)] * 2  # the batch and the model
    for run in runs(tmp_path):
        assert run.data.tags["job.compiled"] == "true" and run.data.metrics["time/compile_s"] > 0


# 3. the GPU pool: slots by UUID, device.index logged as pinned, DDP holds its GPUs, sticky workers
@pytest.fixture
def pool(monkeypatch, tmp_path):
    """A gpu_pool launcher of 2 jobs on a machine with GPUs GPU-a, GPU-b, GPU-c (fresh process state)."""
    locks = tmp_path / "locks"
    locks.mkdir()
    monkeypatch.setattr(gpu_pool, "lock_dir", lambda: locks)
    monkeypatch.setattr(state.current(), "cuda_contexts", set())  # no CUDA context made yet
    monkeypatch.setattr(gpu_pool, "POLL_S", 0.01)
    _fake_gpus(monkeypatch, 3)
    monkeypatch.setattr(gpu_pool, "gpu_keys", lambda: ["GPU-a", "GPU-b", "GPU-c"])
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    return lambda key: gpu_pool._lock("gpu-", key)


def test_pool_locks_gpus_by_uuid_and_logs_the_pinned_index(in_process, monkeypatch, pool, lost_context, tmp_path):
    """Another sweep (another CUDA_VISIBLE_DEVICES numbering) holds GPU-a: this job runs on GPU-b,
    cuda:1, and its run's device.index param says 1. (The job itself then fails: no real GPU.)"""
    monkeypatch.setenv(launchers.POOL_ENV, "2")
    other = pool("GPU-a")
    other.acquire()
    try:
        in_process(["model=mlp", *TINY, "dataset.train_size=16", "device=cuda"])
    finally:
        other.release()
    (run,) = runs(tmp_path)
    assert run.data.params["device.index"] == "1"


def test_a_ddp_job_holds_its_gpus(monkeypatch, pool):
    monkeypatch.setenv(launchers.POOL_ENV, "2")
    ddp_cfg = OmegaConf.create({"name": "ddp", "gpus": 2, "backend": "nccl", "timeout_s": 10})
    other = pool("GPU-b")
    other.acquire()
    with gpu_pool.claim(ddp_cfg, 2):
        assert gpu_pool.held() == ["GPU-a", "GPU-c"]
        with pytest.raises(TimeoutError):  # nobody else gets them meanwhile
            gpu_pool.acquire_many(["GPU-a", "GPU-c"], 1, "gpu-", timeout_s=0.1)
    assert gpu_pool.held() == []
    other.release()


def _no_waiting_for_ever(monkeypatch) -> None:
    """A claim that would wait (for a lock this test holds) fails within 0.3 s instead."""
    real = gpu_pool.acquire_many
    monkeypatch.setattr(gpu_pool, "acquire_many", lambda *a, **k: real(*a, **{**k, "timeout_s": 0.3}))


def test_cuda_initialised_without_a_context_ties_a_worker_to_no_gpu(monkeypatch, pool):
    """gpu_keys asks CUDA for the GPUs' UUIDs, which initialises CUDA (torch.cuda.is_initialized()
    is then True) but makes no context: a job that never got to make one (it failed before its
    device was resolved) leaves its worker free to take any GPU. Before, the worker waited for
    GPU-a while GPU-b and GPU-c idled."""
    monkeypatch.setenv(launchers.POOL_ENV, "2")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    _no_waiting_for_ever(monkeypatch)
    one = OmegaConf.create({"name": "cuda", "index": 0})
    with gpu_pool.claim(one, 2):
        assert one.index == 0
    other = pool("GPU-a")
    other.acquire()
    try:
        with gpu_pool.claim(one, 2):
            assert one.index == 1 and gpu_pool.held() == ["GPU-b"]
    finally:
        other.release()


def test_a_worker_prefers_the_gpus_it_made_contexts_on_but_never_waits_beside_a_free_gpu(monkeypatch, pool,
                                                                                          lost_context):
    """A reused worker's job made its CUDA context on GPU-c (resolve_device): its later jobs take
    GPU-c when it is free, even with GPU-a free too; when GPU-c is busy, a free GPU (a second
    context) rather than a wait while that GPU idles; then both are its preferred GPUs."""
    monkeypatch.setenv(launchers.POOL_ENV, "2")
    _no_waiting_for_ever(monkeypatch)
    one = OmegaConf.create({"name": "cuda", "index": 0})
    a, b, c = pool("GPU-a"), pool("GPU-b"), pool("GPU-c")
    a.acquire(), b.acquire()
    with gpu_pool.claim(one, 2):
        assert device_mod.resolve_device(one) == torch.device("cuda", 2)  # its context: on GPU-c
    a.release(), b.release()
    with gpu_pool.claim(one, 2):
        assert one.index == 2
    c.acquire()
    try:
        with gpu_pool.claim(one, 2):
            assert one.index == 0
            device_mod.resolve_device(one)  # a second context, on GPU-a
        with gpu_pool.claim(one, 2):
            assert one.index == 0  # GPU-a, where it has a context, before GPU-b
    finally:
        c.release()
    with gpu_pool.claim(one, 2):  # ordered by GPU: both are its own
        assert one.index == 0


# 4. DDP telemetry over every GPU of the job ----------------------------------------------------
def test_ddp_telemetry_adds_up_the_jobs_gpus(monkeypatch):
    fake = FakeNVML(time.monotonic, gpus=2)
    monkeypatch.setattr(telemetry_nvml, "pynvml", fake)
    _fake_gpus(monkeypatch, 2)
    monkeypatch.setattr(state.current(), "pool_held", [])
    job = SimpleNamespace(cfg=OmegaConf.create({"telemetry": {"interval_s": 1000},
                                                "device": {"name": "ddp", "gpus": 2}}))
    Job.start_telemetry(job, CUDA0)  # the job process
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    ranks = rank.job_gpus(CUDA0)  # rank 0's own sampler
    for tel in (job.telemetry, for_job(1000, ranks)):
        tel.stop()
        assert tel.names == ["Fake GPU 0", "Fake GPU 1"], tel.tags()


# 5. pinned host batches ------------------------------------------------------------------------
def test_in_memory_batches_of_a_cuda_job_are_pinned(monkeypatch):
    """Faked pinning (no driver here): each batch the trainer copies is a pinned tensor."""
    pins = set()

    def pin(t):
        out = t.clone()
        pins.add(out.data_ptr())
        return out

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda t: t.data_ptr() in pins)
    data = TensorDataset(torch.randn(10, 3), torch.randn(10, 1))
    cpu_train, _ = make_loaders(data, data, 4, torch.device("cpu"), 0, 0)
    assert not any(t.is_pinned() for b in cpu_train for t in b)  # a CPU job copies nothing
    for batch, sizes in ((4, [4, 4, 2]), (10, [10])):
        loader, test_loader = make_loaders(data, data, batch, CUDA0, 0, 1)
        assert isinstance(loader, TensorBatches) and len(loader) == len(sizes)
        got = list(loader)
        assert [len(x) for x, _ in got] == sizes and all(t.is_pinned() for b in got for t in b)
        assert all(t.is_pinned() for b in test_loader for t in b)
    same = [x for x, _ in TensorBatches(data, 4, True, seed=1)]  # the same order as unpinned
    assert all(torch.equal(a, b) for a, b in zip(same, [x for x, _ in make_loaders(data, data, 4, CUDA0, 0, 1)[0]]))


# 6. compile: peak memory after the warm-up; CUDA-graph capture before epoch 1 ------------------
@pytest.mark.slow  # a compiled job on the faked CUDA path: ~2 s
def test_compile_resets_peak_memory_and_captures_cuda_graphs_before_epoch_1(monkeypatch):
    reset = []
    monkeypatch.setattr(builder, "compile_and_warm", lambda *a, **k: 1.5)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset.append)
    training = builder.Training(SimpleNamespace(device=CUDA0), None, None, None, OmegaConf.create({"compile_mode": "default"}))
    assert training.compile() == 1.5 and reset == [CUDA0]
    assert speed.warm_passes("reduce-overhead") == 3 and speed.warm_passes("max-autotune") == 3
    assert speed.warm_passes("default") == speed.warm_passes("max-autotune-no-cudagraphs") == 1


# 7. peak-memory reset where CUDA was never initialised ---------------------------------------
def test_release_memory_leaves_an_uninitialised_cuda_alone(monkeypatch, lost_context):
    """A CPU job on a GPU machine: CUDA is there but this process never initialised it, and
    resetting the statistics of its allocator raises as torch does."""
    def uninitialised(device):
        raise RuntimeError(f"Invalid device argument {device}: did you call init?")

    _fake_gpus(monkeypatch, 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", uninitialised)
    memory.release_memory(torch.device("cpu"))


# 8. a sticky CUDA error; MIG instances ---------------------------------------------------------
@pytest.mark.slow  # three jobs after a faked sticky error: ~2 s
def test_a_sticky_cuda_error_ends_later_cuda_jobs_with_one_line(in_process, monkeypatch, lost_context, tmp_path):
    assert in_process(["model=sticky_cuda_error", *TINY, "dataset.train_size=16", "device=cpu"]) == "error"
    _fake_gpus(monkeypatch, 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    assert in_process(["model=mlp", *TINY, "dataset.train_size=16", "device=cuda"]) == "unavailable"
    assert in_process(["model=mlp", *TINY, "dataset.train_size=16", "device=cpu"]) == "ok"  # the CPU still runs
    first, second, _ = runs(tmp_path)
    assert "illegal memory access" in first.data.tags["error"] and "sticky CUDA error" in first.data.tags["error"]
    line = second.data.tags["error"]
    assert "sticky CUDA error lost this process's CUDA context" in line and "fresh process" in line
    assert "\n" not in line


@pytest.mark.slow  # jobs after a rank's faked sticky error: ~2 s
def test_a_ranks_sticky_cuda_error_leaves_the_job_processs_cuda_alone(in_process, monkeypatch, lost_context,
                                                                     tmp_path):
    """A data-parallel rank (another process) hit an illegal memory access: the job ends error
    naming the rank, and this process, whose CUDA the ranks never touched, still runs its later
    CUDA jobs (before: every later one-GPU job of the process ended unavailable)."""
    work = tmp_path / "ranks"
    work.mkdir()
    (work / "rank1.json").write_text(json.dumps({
        "rank": 1, "kind": "error", "type": "AcceleratorError", "time": 1.0,
        "text": "CUDA error: an illegal memory access was encountered"}))

    def launch(job, journal):  # what ddp.launch raises once the ranks have ended
        raise ddp.first_failure(work, RuntimeError("child failed"))

    monkeypatch.setattr(ddp, "launch", launch)
    assert in_process(["model=mlp", *TINY, "dataset.train_size=16", "device=ddp", "device.backend=gloo"]) == "error"
    assert state.current().cuda_lost == ""
    _fake_gpus(monkeypatch, 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    assert in_process(["model=mlp", *TINY, "dataset.train_size=16", "device=cuda"]) == "error"  # no real GPU here
    first, second = runs(tmp_path)
    line = first.data.tags["error"]
    assert "AcceleratorError on rank 1: CUDA error: an illegal memory access" in line and "context is lost" not in line
    assert "sticky" not in second.data.tags["error"]
    kind, line = outcome.classify(ddp.first_failure(tmp_path / "none", RuntimeError("rank 1 died: CUDA error: "
                                                                                     "unspecified launch failure")))
    assert kind == "error" and state.current().cuda_lost == ""


def test_mig_instances_are_told_apart(monkeypatch):
    mig = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    _fake_gpus(monkeypatch, 2, names=[mig, mig])
    assert gpu_pool.gpu_keys() == ["MIG-fake-0", "MIG-fake-1"]
    assert telemetry_nvml.gpu_ids(CUDA1) == ["MIG-fake-1"]
    _fake_gpus(monkeypatch, 1, names=["NVIDIA H100 80GB HBM3"])
    assert telemetry_nvml.gpu_ids(CUDA0) == ["GPU-fake-0"]


# 9. driver vs the wheel's CUDA; a C compiler and Python headers for compile -------------------
def test_a_driver_too_old_for_the_wheel_is_one_line(monkeypatch):
    old = FakeNVML(Clock())
    old.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    line = device_mod.driver_problem(old, "13.0")
    assert "CUDA 13.0" in line and ">= 580" in line and "550.54.15" in line and "\n" not in line
    assert device_mod.driver_problem(FakeNVML(Clock()), "13.0") == ""  # 580.65.06
    assert device_mod.driver_problem(old, "12.8") == ""
    monkeypatch.setattr(telemetry_nvml, "pynvml", old)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("auto", "cuda"):  # auto would have trained on the CPU of a GPU machine, silently
        with pytest.raises(DeviceUnavailable, match="needs NVIDIA driver >= 580"):
            device_mod.resolve_device(OmegaConf.create({"name": name, "index": 0}))
    ddp_cfg = {"name": "ddp", "gpus": 2, "timeout_s": 10}
    for backend in ("auto", "nccl"):  # would run on the GPUs: the driver is why they cannot
        with pytest.raises(DeviceUnavailable, match="needs NVIDIA driver >= 580"):
            device_mod.resolve_device(OmegaConf.create({**ddp_cfg, "backend": backend}))
    # the CPU needs no driver: a DDP job on gloo (and device=cpu) runs on this machine
    assert device_mod.resolve_device(OmegaConf.create({**ddp_cfg, "backend": "gloo"})) == torch.device("cpu")
    assert device_mod.resolve_device(OmegaConf.create({"name": "cpu"})) == torch.device("cpu")


def test_compile_without_a_c_compiler_stops_with_one_line(in_process, monkeypatch):
    monkeypatch.setattr(device_mod.shutil, "which", lambda name: None)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(UsageError) as e:
        in_process(["model=mlp", *TINY, "dataset.train_size=16", "device=cpu", "compile=true"])
    assert "compile=true" in str(e.value) and "C++ compiler" in str(e.value) and "\n" not in str(e.value)


def test_compile_checks_the_compilers_inductor_and_triton_run(monkeypatch):
    """CPU jobs: inductor builds C++ kernels with $CXX (split like a shell: ``ccache g++``), else
    g++; CUDA jobs: Triton builds its launcher with $CC (run as one program name), else gcc or
    clang. A machine with gcc alone (``cc`` too) cannot compile a CPU job."""
    on_path = {"cc", "gcc", "ccache"}
    monkeypatch.setattr(device_mod.shutil, "which", lambda name: f"/usr/bin/{name}" if name in on_path else None)
    for var in ("CC", "CXX", COMPILE_BACKEND_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = OmegaConf.create({"compile": True, "device": {"name": "cpu"}})
    gloo = OmegaConf.create({"compile": True, "device": {"name": "ddp", "gpus": 2, "backend": "gloo"}})
    for cfg in (cpu, gloo):
        with pytest.raises(UsageError, match=r"C\+\+ compiler \(\$CXX unset: g\+\+ is not on PATH\)"):
            device_mod.preflight(cfg)
    assert device_mod.compiler_problem(cpu=False, cuda=True) == ""  # gcc: Triton has its C compiler
    monkeypatch.setenv("CXX", "ccache g++")  # a command with arguments: its first word is the program
    device_mod.preflight(cpu)
    monkeypatch.setenv("CXX", "distcc g++")
    assert "C++ compiler ($CXX='distcc g++': distcc is not on PATH)" in device_mod.compiler_problem(cpu=True)
    monkeypatch.setenv("CC", "ccache gcc")  # Triton runs $CC as one program name
    assert "$CC='ccache gcc'" in device_mod.compiler_problem(cpu=False, cuda=True)
    monkeypatch.setenv("CC", "gcc")
    assert device_mod.compiler_problem(cpu=False, cuda=True) == ""
    _fake_gpus(monkeypatch, 1)  # a GPU job needs Triton's C compiler, not a C++ one
    monkeypatch.delenv("CC")
    on_path.discard("gcc")
    for name in ("cuda", "auto"):
        with pytest.raises(UsageError, match=r"a C compiler for Triton \(\$CC unset: neither gcc nor clang"):
            device_mod.preflight(OmegaConf.create({"compile": True, "device": {"name": name, "index": 0}}))


def test_sticky_errors_are_recognised(lost_context):
    kind, line = outcome.classify(RuntimeError("CUDA error: uncorrectable ECC error encountered"))
    assert kind == "error" and "sticky CUDA error" in line and state.current().cuda_lost
    assert outcome.classify(RuntimeError("CUDA error: invalid argument"))[1].endswith("invalid argument")


# what only hardware shows -------------------------------------------------------------------
@pytest.mark.gpu
def test_events_time_the_jobs_own_gpu():
    """On cuda:1 with cuda:0 current: the phase timer reads cuda:1's work (~20 ms of sleep)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    from sweeps.train.timing import PhaseTimer

    torch.cuda.set_device(0)
    timer = PhaseTimer(CUDA1)
    with torch.cuda.device(1):
        timer.start()
        cycles = int(torch.cuda.get_device_properties(1).clock_rate * 1e3 * 0.020)  # kHz → cycles in 20 ms
        timer.mark()
        torch.cuda._sleep(cycles)
        timer.mark(); timer.mark(); timer.mark()
    assert 15 < timer.summary()["forward"] < 30


@pytest.mark.gpu
def test_after_compile_the_peak_is_the_current_memory(monkeypatch):
    """A compiled job's warm-up peak is gone from the statistics its epochs report."""
    from sweeps.train.loop import Trainer

    monkeypatch.setenv(COMPILE_BACKEND_ENV, "aot_eager")
    dev = torch.device("cuda", 0)
    spec = DataSpec((64,), 10)
    model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).to(dev)
    trainer = Trainer(model, spec, torch.optim.SGD(model.parameters(), lr=0.1), None, dev)
    loader = TensorBatches(TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,))), 2048, True)
    builder.Training(trainer, loader, loader, model, OmegaConf.create({"compile_mode": "default"})).compile()
    assert torch.cuda.max_memory_allocated(dev) == torch.cuda.memory_allocated(dev)


@pytest.mark.gpu
def test_in_memory_batches_are_really_pinned():
    data = TensorDataset(torch.randn(10, 3), torch.randn(10, 1))
    for batch in (4, 10):
        assert all(t.is_pinned() for b in make_loaders(data, data, batch, CUDA0, 0, 0)[0] for t in b)


@pytest.mark.gpu
def test_a_real_device_side_assert_ends_the_processs_later_cuda_jobs(tmp_path):
    from conftest import TEST_CONF, run_cli

    proc = run_cli(["-m", "model=device_assert,mlp", "dataset=synthetic", "dataset.shape=[1,8,8]",
                    "dataset.train_size=64", "dataset.test_size=16", "epochs=1", "device=cuda", TEST_CONF], tmp_path)
    outcomes = [(r.data.tags["outcome"], r.data.tags.get("error", "")) for r in runs(tmp_path)
                if "mlflow.parentRunId" in r.data.tags]
    assert [o for o, _ in outcomes] == ["error", "unavailable"], proc.stderr[-2000:]
    assert "sticky CUDA error" in outcomes[0][1] and "fresh process" in outcomes[1][1]
