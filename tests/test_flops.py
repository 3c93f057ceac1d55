"""sweeps.train.flops: FlopCounterMode's training FLOPs match the analytic counts of the study models,
the datasheet peak table, and MFU arithmetic."""
from __future__ import annotations

import pytest
import torch

from sweeps.data.datasets import DataSpec
from sweeps.train.flops import (PEAK_TFLOPS, first_input, gpu_model, peak_flops, perf_metrics,
                                training_flops_per_example)
from sweeps.models import CNN10, MLP, WideResNet

CIFAR = DataSpec((3, 32, 32), 10)


def conv(cin: int, cout: int, k: int, out_hw: int) -> int:
    """Multiply-adds of a k×k convolution producing ``cout`` maps of out_hw × out_hw."""
    return cin * cout * k * k * out_hw * out_hw


def cnn10_macs() -> int:
    """Study 1's cnn10 forward: three stages of three 3×3 convs at 32, 16, 8 px, then 256 → 10."""
    macs, cin = 0, 3
    for width, hw in [(64, 32), (128, 16), (256, 8)]:
        for _ in range(3):
            macs += conv(cin, width, 3, hw)
            cin = width
    return macs + 256 * 10


def wrn_macs(depth: int = 28, k: int = 10) -> int:
    """WRN-depth-k forward (Zagoruyko & Komodakis 2016): a 3×3 stem to 16 channels, then three
    groups of (depth-4)/6 basic blocks (two 3×3 convs; a 1×1 projection in each group's first
    block) at 16k / 32k / 64k channels and 32 / 16 / 8 px, then 64k → 10."""
    n = (depth - 4) // 6
    macs, cin = conv(3, 16, 3, 32), 16
    for width, hw in [(16 * k, 32), (32 * k, 16), (64 * k, 8)]:
        for i in range(n):
            macs += conv(cin, width, 3, hw) + conv(width, width, 3, hw)
            if i == 0:
                macs += conv(cin, width, 1, hw)
            cin = width
    return macs + 64 * k * 10


@pytest.mark.parametrize("model, macs", [(lambda: CNN10(CIFAR.in_shape, 10), cnn10_macs),
                                         (lambda: WideResNet(CIFAR.in_shape, 10), wrn_macs)],
                         ids=["cnn10", "wrn28_10"])
def test_training_flops_match_the_analytic_count(model, macs):
    """Training ≈ 3 forward passes (forward; input and weight gradients) × 2 FLOPs per
    multiply-add: FlopCounterMode's count is within 1 % of it."""
    analytic = 3 * 2 * macs()
    counted = training_flops_per_example(model(), CIFAR)
    assert counted == pytest.approx(analytic, rel=0.01)


def test_wrn28_10_is_the_published_figure():
    """5.25 G multiply-adds forward per 32×32 image (the WRN paper's CIFAR count) → ×3 for
    training → ~1.57 PFLOP per CIFAR-10 epoch of 50,000 images; cnn10: ~0.27 G."""
    assert wrn_macs() == pytest.approx(5.25e9, rel=0.01)
    assert cnn10_macs() == pytest.approx(0.266e9, rel=0.01)
    epoch = training_flops_per_example(WideResNet(CIFAR.in_shape, 10), CIFAR) * 50_000
    assert epoch == pytest.approx(1.57e15, rel=0.01)


def test_mlp_count_is_exact_and_leaves_the_model_alone():
    """784-1000-1000-10: forward 2·Σ(in·out), weight gradients the same again, input gradients
    for every layer but the first — exact. The count runs on a meta copy: the model's weights,
    gradients and BatchNorm statistics are untouched."""
    spec = DataSpec((1, 28, 28), 10)
    model = MLP(spec.in_shape, 10)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    layers = [(784, 1000), (1000, 1000), (1000, 10)]
    fwd = sum(2 * a * b for a, b in layers)
    assert training_flops_per_example(model, spec) == 3 * fwd - 2 * 784 * 1000
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None and p.device.type == "cpu" for p in model.parameters())
    cnn = CNN10(CIFAR.in_shape, 10)
    stats = cnn.features[1].running_mean.clone()
    training_flops_per_example(cnn, CIFAR)
    assert torch.equal(cnn.features[1].running_mean, stats)


def test_regression_models_count_too():
    spec = DataSpec((13,), 1, "regression")
    model = MLP(spec.in_shape, 1, hidden=[16, 32, 16])
    fwd = 2 * (13 * 16 + 16 * 32 + 32 * 16 + 16 * 1)
    assert training_flops_per_example(model, spec) == 3 * fwd - 2 * 13 * 16


class TokenBag(torch.nn.Module):
    """Token ids (N, L) int64 → embedding (N, L, 16) → mean over L → 16 → classes."""

    def __init__(self, num_outputs: int, vocab: int = 50, dim: int = 16):
        super().__init__()
        self.emb, self.head = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, num_outputs)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


def test_an_embedding_model_is_counted_on_its_real_input_dtype():
    """Integer token ids, as the dataset's first example holds them: the lookup and the mean
    count zero, the head 2·16·3 forward and twice that backward — exact. A float dummy input is
    what an embedding refuses (the reason the count takes a real example)."""
    spec = DataSpec((12,), 3)
    tokens = torch.utils.data.TensorDataset(torch.randint(0, 50, (4, 12)), torch.zeros(4, dtype=torch.long))
    before = torch.random.get_rng_state()
    example = first_input(tokens)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert example.dtype == torch.int64 and example.shape == (12,)
    assert training_flops_per_example(TokenBag(3), spec, example=example) == 3 * 2 * 16 * 3
    with pytest.raises(RuntimeError, match="indices"):
        training_flops_per_example(TokenBag(3), spec)


@pytest.mark.parametrize("name, key", [("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
                                       ("NVIDIA H100 NVL", None), ("NVIDIA H200", "H200 SXM"),
                                       ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"),
                                       ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla T4", "T4"),
                                       ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA A10G", None),
                                       ("NVIDIA GeForce RTX 4090", None)])
def test_gpu_names_map_to_the_table(name, key):
    assert gpu_model(name) == key


def test_peak_table_is_the_datasheets():
    """Dense peaks (TFLOP/s): H100 SXM bf16 989, tf32 495, fp32 67; A100 312 / 156 / 19.5."""
    h100, a100 = PEAK_TFLOPS["H100 SXM"], PEAK_TFLOPS["A100"]
    assert (round(h100["bf16"]), round(h100["tf32"]), h100["fp32"]) == (990, 494, 67.0)
    assert (a100["bf16"], a100["tf32"], a100["fp32"]) == (312.0, 156.0, 19.5)
    for gpu, peaks in PEAK_TFLOPS.items():  # tensor cores are never slower than the fp32 units
        assert peaks["fp32"] <= peaks["tf32"] <= peaks["fp16"], gpu
    peak, about = peak_flops(torch.device("cpu"), "fp32")
    assert peak is None and "MFU omitted" in about


def test_perf_metrics():
    """1.57e15 FLOP in 10 s on a 989.5 TFLOP/s device: 157 TFLOP/s achieved, MFU 0.159."""
    m = perf_metrics(31.4e9, 989.5e12, 50_000, 10.0)
    assert m["perf/flops_per_s"] == pytest.approx(1.57e14)
    assert m["perf/mfu"] == pytest.approx(1.57e14 / 989.5e12)
    assert perf_metrics(31.4e9, None, 50_000, 10.0).keys() == {"perf/flops_per_s"}
    assert perf_metrics(None, 989.5e12, 50_000, 10.0) == {}


@pytest.mark.gpu
def test_peak_known_for_this_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    name = torch.cuda.get_device_name(0)
    peak, about = peak_flops(torch.device("cuda", 0), "bf16")
    assert (peak is None) == (gpu_model(name) is None or "bf16" not in PEAK_TFLOPS.get(gpu_model(name), {})), about
