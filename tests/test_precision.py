"""precision=fp32|tf32|bf16|fp16, channels_last, optimizer.impl and compile: what each sets, the
step it runs, and a real job with them. Modes this torch cannot run on this device skip."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from conftest import TEST_CONF, cli_in_process, runs, store
from sweeps import config
from sweeps.data.datasets import DataSpec
from sweeps.train.precision import apply_precision, autocast_supported
from sweeps.errors import UsageError
from sweeps.models import CNN10
from sweeps.train.optim import make_optimizer, optimizer_kwargs
from sweeps.train.speed import batch_sizes, compile_and_warm, use_channels_last
from sweeps.train.loop import Trainer
from test_config import _compose

CPU = torch.device("cpu")
SPEC = DataSpec((1, 6, 6), 3)


@pytest.fixture(autouse=True)
def restore_tf32():
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def _needs(dtype: torch.dtype, device: torch.device = CPU) -> None:
    if not autocast_supported(device, dtype):
        pytest.skip(f"{dtype} autocast is not supported on {device} by torch {torch.__version__}")


def _batches(n: int = 3, b: int = 8, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, *SPEC.in_shape, generator=g), torch.randint(0, 3, (b,), generator=g)) for _ in range(n)]


class Probe(nn.Module):
    """A small MLP that records the dtype its first layer computes in."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(36, 16), nn.Linear(16, 3)
        self.seen: list[torch.dtype] = []

    def forward(self, x):
        h = self.fc1(x.flatten(1))
        self.seen.append(h.dtype)
        return self.fc2(torch.relu(h))


def _trainer(model, name: str, **kw) -> Trainer:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **kw.pop("impl", {}))
    return Trainer(model, SPEC, opt, None, CPU, precision=apply_precision(OmegaConf.create({"name": name}), CPU), **kw)


@pytest.mark.parametrize("name, tf32", [("fp32", False), ("tf32", True), ("bf16", False), ("fp16", False)])
def test_tf32_switches(name, tf32):
    if name in ("bf16", "fp16"):
        _needs(torch.bfloat16 if name == "bf16" else torch.float16)
    p = apply_precision(OmegaConf.create({"name": name}), CPU)
    assert torch.backends.cudnn.allow_tf32 is tf32 and torch.backends.cuda.matmul.allow_tf32 is tf32
    assert p.name == name and p.scaled is (name == "fp16")


@pytest.mark.parametrize("name, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_autocast_step_on_cpu(name, dtype):
    """The forward runs in the autocast dtype; weights, gradients' targets and the loss stay fp32;
    the model learns; fp16 goes through an enabled GradScaler."""
    _needs(dtype)
    torch.manual_seed(0)
    model = Probe()
    t = _trainer(model, name)
    assert t.scaler.is_enabled() is (name == "fp16")
    data = _batches(n=4)
    first = t.train_epoch(data, "e1")
    for _ in range(4):
        last = t.train_epoch(data, "e")
    assert set(model.seen) == {dtype}
    assert all(p.dtype == torch.float32 and p.grad is None for p in model.parameters())
    assert last["train/loss"] < first["train/loss"] and torch.isfinite(torch.tensor(last["train/loss"]))
    ev = t.evaluate(data)
    assert model.seen[-1] == dtype and 0 <= ev["test/acc"] <= 1


def test_fp16_scaler_skips_an_overflowing_step():
    """An inf in the batch makes inf gradients: the scaled step is skipped (weights unchanged,
    no NaN) and the loss scale backs off — without the training loop reading anything back."""
    _needs(torch.float16)
    model = Probe()
    t = _trainer(model, "fp16")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scale = t.scaler.get_scale()
    x, y = _batches(n=1)[0]
    x[0, 0, 0, 0] = float("inf")
    t.train_epoch([(x, y)], "overflow")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert t.scaler.get_scale() == scale * 0.5


def test_fp32_matches_plain_pytorch_bit_for_bit():
    """precision=fp32 through the Trainer (disabled scaler, no autocast) is the plain step."""
    torch.manual_seed(0)
    a = Probe()
    b = Probe()
    b.load_state_dict(a.state_dict())
    t = _trainer(a, "fp32")
    opt = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    data = _batches()
    t.train_epoch(data, "e")
    for x, y in data:
        nn.functional.cross_entropy(b(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_channels_last_cnn_trains_like_contiguous():
    """channels_last converts a CNN and its batches to NHWC; the numbers match NCHW; an MLP is
    left alone."""
    spec = DataSpec((3, 8, 8), 4)
    torch.manual_seed(0)
    a = CNN10(spec.in_shape, 4, widths=(4, 8, 8), convs_per_stage=1)
    b = CNN10(spec.in_shape, 4, widths=(4, 8, 8), convs_per_stage=1)
    b.load_state_dict(a.state_dict())
    assert use_channels_last(a) and not use_channels_last(Probe())
    assert a.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    data = [(torch.randn(6, 3, 8, 8), torch.randint(0, 4, (6,))) for _ in range(2)]
    ta = Trainer(a, spec, torch.optim.SGD(a.parameters(), lr=0.1), None, CPU, channels_last=True)
    tb = Trainer(b, spec, torch.optim.SGD(b.parameters(), lr=0.1), None, CPU)
    assert ta._input(data[0][0]).is_contiguous(memory_format=torch.channels_last)
    ra, rb = ta.train_epoch(data, "a"), tb.train_epoch(data, "b")
    assert ra["train/loss"] == pytest.approx(rb["train/loss"], rel=1e-5)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_optimizer_impl_kwargs():
    cuda = torch.device("cuda")
    assert optimizer_kwargs("auto", cuda) == {"fused": True}  # sync-free GradScaler steps
    assert optimizer_kwargs("auto", CPU) == {"fused": True}  # one kernel per step, not ~10 per parameter
    assert optimizer_kwargs("auto", torch.device("mps")) == {}  # untested here: torch's own default
    assert optimizer_kwargs("fused", CPU) == {"fused": True}
    assert optimizer_kwargs("foreach", CPU) == {"foreach": True}
    assert optimizer_kwargs("loop", CPU) == {"foreach": False}
    with pytest.raises(ValueError):
        optimizer_kwargs("fast", CPU)
    model = Probe()  # fused and foreach SGD step like the loop
    t = _trainer(model, "fp32", impl={"fused": True})
    t.train_epoch(_batches(), "fused")
    assert t.optimizer.defaults["fused"] is True


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_auto_optimizer_is_fused_on_cpu_unless_a_parameter_is_complex(name):
    cfg = _compose([f"optimizer={name}"]).optimizer
    net = nn.Linear(3, 2)
    opt = make_optimizer(cfg, net.parameters(), 0.01, CPU)
    assert opt.defaults["fused"] is True and len(opt.param_groups[0]["params"]) == 2
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    z = nn.Parameter(torch.randn(3, dtype=torch.complex64))  # a user's model can hold one
    opt = make_optimizer(cfg, [z], 0.01, CPU)
    assert not opt.defaults["fused"]
    z.grad = torch.ones_like(z)
    opt.step()  # torch's own implementation steps it
    assert z.grad is not None
    asked = make_optimizer(OmegaConf.merge(cfg, {"impl": "fused"}), [z], 0.01, CPU)
    with pytest.raises(RuntimeError, match="fused"):  # asked for by name: torch's own error, no quiet fallback
        asked.step()


@pytest.mark.parametrize("override", ["precision.name=fp8", "optimizer.impl=fast", "compile_mode=fastest",
                                      "max_batch.start=0", "dataset.loader=gpu"])
def test_validate_rejects_with_one_line(override):
    config.register()
    with pytest.raises(UsageError) as e:
        config.validate(_compose([override]))
    assert override.split("=")[0] in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow  # two compiled trainings (~5 s); test_gpu_paths keeps a compiled job in the default suite
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_warm_up_leaves_training_unchanged(backend):
    """compile=true: every batch shape is compiled before the first epoch and the warm-up's
    effects are undone — the compiled run's first epoch trains like the eager one. (aot_eager
    traces forward and backward like inductor but skips code generation: ~1 s instead of ~15.)"""
    torch.manual_seed(0)
    eager, compiled = Probe(), Probe()
    compiled.load_state_dict(eager.state_dict())
    data, test = _batches(n=3, b=8) + _batches(n=1, b=5, seed=1), _batches(n=1, b=4, seed=2)
    te, tc = _trainer(eager, "fp32"), _trainer(compiled, "fp32")

    class Loader(list):
        batch_size, n = 8, 29

    test_loader = Loader(test)
    test_loader.batch_size, test_loader.n = 4, 4
    assert batch_sizes(Loader(data)) == [8, 5] and batch_sizes(test_loader) == [4]
    seconds = compile_and_warm(tc, Loader(data), test_loader, backend=backend)
    assert seconds > 0
    assert all(torch.equal(p, q) for p, q in zip(eager.parameters(), compiled.parameters()))
    assert not tc.optimizer.state  # momentum buffers of the warm-up are gone
    re, rc = te.train_epoch(data, "eager"), tc.train_epoch(data, "compiled")
    assert rc["train/loss"] == pytest.approx(re["train/loss"], rel=1e-5)
    for p, q in zip(eager.parameters(), compiled.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def precision_sweep(tmp_path_factory):
    """fp32 and bf16 jobs (tf32 where bf16 autocast is missing) with the device loader."""
    cwd = tmp_path_factory.mktemp("precision")
    names = "fp32,bf16" if autocast_supported(CPU, torch.bfloat16) else "fp32,tf32"
    proc = cli_in_process(["-m", f"precision={names}", "model=mlp", "model.hidden=[16]", "dataset=synthetic",
                           "dataset.shape=[1,8,8]", "dataset.train_size=96", "dataset.test_size=32", "batch=32",
                           "dataset.loader=device", "epochs=2", "device=cpu", "telemetry.figure=false", TEST_CONF], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd, {r.data.tags["sweeps.overrides"]: r for r in runs(cwd) if "mlflow.parentRunId" in r.data.tags}


def test_precision_jobs_run_and_log_throughput(precision_sweep):
    """Each job ends ok with the device loader; FLOPs per example are logged once, achieved
    FLOP/s per epoch, and no MFU on a CPU (no peak to compare with; the tag says so)."""
    cwd, jobs = precision_sweep
    assert jobs and all(r.data.tags["outcome"] == "ok" for r in jobs.values())
    client = store(cwd)
    for name, r in jobs.items():
        m = r.data.metrics
        # mlp 64-16-3... here 64→16→10: forward 2·(64·16 + 16·10) FLOPs, backward twice that less
        # the first layer's input gradient (2·64·16)
        assert m["perf/flops_per_example"] == 3 * 2 * (64 * 16 + 16 * 10) - 2 * 64 * 16
        history = client.get_metric_history(r.info.run_id, "perf/flops_per_s")
        assert sorted(h.step for h in history) == [1, 2] and all(h.value > 0 for h in history)
        assert "perf/mfu" not in m and "MFU omitted" in r.data.tags["job.peak"]
        assert r.data.params["dataset.loader"] == "device" and r.data.params["precision"] == name.split("=")[1]


@pytest.mark.parametrize("impl, tag", [("auto", "Adam, fused"), ("loop", "Adam, loop")])
def test_a_job_says_which_optimizer_implementation_it_stepped(in_process, tiny, tmp_path, impl, tag):
    """The same config can step another kernel under another sweeps or torch version (auto became
    fused on the CPU): the run's ``torch.optimizer`` tag says which one ran."""
    from sweeps import names as tag_names

    assert in_process(["model=mlp", "model.hidden=[8]", "optimizer=adam", f"optimizer.impl={impl}",
                       "telemetry.interval_s=0", *tiny]) == "ok"
    (run,) = runs(tmp_path)
    assert run.data.tags[tag_names.OPTIMIZER_TAG] == tag


def test_only_a_small_cpu_step_is_moved_to_one_thread():
    """``device.threads`` null: a CPU step under 20 MFLOP gets one torch thread (and the tag says
    so); a larger or uncounted step, or a GPU job (its CPU threads feed the GPU), keeps the count."""
    from sweeps.train.speed import SMALL_STEP_FLOPS, one_thread_for_small_steps

    torch.set_num_threads(2)  # tests/process_state.py puts the process's own count back
    for flops_per_step, device in ((SMALL_STEP_FLOPS, CPU), (None, CPU), (1e6, torch.device("cuda"))):
        assert one_thread_for_small_steps(flops_per_step, device) is None
        assert torch.get_num_threads() == 2
    tag = one_thread_for_small_steps(SMALL_STEP_FLOPS / 2, CPU)
    assert torch.get_num_threads() == 1
    assert tag.startswith("1 (small steps: 10 MFLOP each, under 20; device.threads to choose; ")
    assert one_thread_for_small_steps(1e6, CPU) is None  # already on one thread: nothing to say


def test_a_checkpoint_of_the_loop_adam_resumes_into_the_fused_one():
    """A job checkpointed while ``optimizer.impl=auto`` meant torch's loop on a CPU resumes under
    the fused default: the same optimizer state, and the step count goes on from it."""
    cfg = _compose(["optimizer=adam"]).optimizer
    net = nn.Linear(3, 2)
    before = make_optimizer(OmegaConf.merge(cfg, {"impl": "loop"}), net.parameters(), 0.01, CPU)
    for _ in range(3):
        net(torch.randn(4, 3)).sum().backward()
        before.step()
    after = make_optimizer(cfg, net.parameters(), 0.01, CPU)
    after.load_state_dict(before.state_dict())
    net(torch.randn(4, 3)).sum().backward()
    after.step()
    assert after.defaults["fused"] is True
    assert [float(s["step"]) for s in after.state.values()] == [4.0, 4.0]
