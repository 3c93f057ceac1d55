"""sweeps.models: published parameter counts, every model option built through Hydra from the
real config and trained a few steps, and clear errors for inputs a model cannot take."""
from __future__ import annotations

import math

import hydra.utils
import pytest
import torch
from hydra import compose, initialize_config_dir
from torch.nn import functional as F

import sweeps.config
from sweeps.data.datasets import build_datasets
from sweeps.models import CNN10, MLP, WideResNet, count_parameters

MODEL_OPTIONS = sorted(p.stem for p in (sweeps.config.CONF_DIR / "model").glob("*.yaml"))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # These tests check behaviour, not speed; two OpenMP threads on a shared 2-core machine
    # spin against other processes and make a 0.2 s step take seconds.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def compose_cfg(*overrides: str):
    """The project's real config composed with ``overrides``."""
    sweeps.config.register()
    with initialize_config_dir(config_dir=str(sweeps.config.CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def build(model: str, in_shape, num_outputs: int, *overrides: str) -> torch.nn.Module:
    cfg = compose_cfg(f"model={model}", *overrides)
    return hydra.utils.instantiate(cfg.model, in_shape=tuple(in_shape), num_outputs=num_outputs)


def conv_bn(cin: int, cout: int) -> int:
    """3×3 conv without bias + BatchNorm weight and bias."""
    return cin * cout * 9 + 2 * cout


def linear(a: int, b: int) -> int:
    return a * b + b


# --------------------------------------------------------------------------- parameter counts

def test_wrn28_10_parameter_count():
    """model=wrn28_10 is WRN-28-10 as published: 36,479,194 parameters for 10 classes
    (Zagoruyko & Komodakis' reference implementation)."""
    assert count_parameters(build("wrn28_10", (3, 32, 32), 10)) == 36_479_194


def test_resnet50_parameter_count():
    """model=resnet50 is torchvision's ResNet-50: 25,557,032 parameters at 3 channels, 1000 classes;
    a 1-channel dataset only changes the first conv (64×7×7 weights per input channel)."""
    assert count_parameters(build("resnet50", (3, 224, 224), 1000)) == 25_557_032
    assert count_parameters(build("resnet50", (1, 224, 224), 1000)) == 25_557_032 - 2 * 64 * 7 * 7


def test_mlp_parameter_count():
    """model=mlp on MNIST is study 4's 784-1000-1000-10: 1,796,010 parameters."""
    expected = linear(784, 1000) + linear(1000, 1000) + linear(1000, 10)
    assert expected == 1_796_010
    assert count_parameters(build("mlp", (1, 28, 28), 10)) == expected


def test_mlp_tabular_parameter_count():
    """model=mlp_tabular on diabetes is study 5's 10-16-32-16-1 regressor."""
    expected = linear(10, 16) + linear(16, 32) + linear(32, 16) + linear(16, 1)
    assert count_parameters(build("mlp_tabular", (10,), 1)) == expected


def test_cnn10_parameter_count():
    """model=cnn10 on CIFAR-10: nine 3×3 conv-BN layers (64/128/256 channels, three per stage)
    plus one linear layer, the design's "~1.9 M" parameters; channels follow the dataset."""
    convs = [(3, 64), (64, 64), (64, 64), (64, 128), (128, 128), (128, 128),
             (128, 256), (256, 256), (256, 256)]
    expected = sum(conv_bn(a, b) for a, b in convs) + linear(256, 10)
    model = build("cnn10", (3, 32, 32), 10)
    assert count_parameters(model) == expected == 1_923_914
    assert 1.85e6 < expected < 1.95e6
    assert sum(isinstance(m, torch.nn.Conv2d) for m in model.modules()) == 9
    assert sum(isinstance(m, torch.nn.Linear) for m in model.modules()) == 1
    assert count_parameters(build("cnn10", (1, 28, 28), 10)) == expected - 2 * 64 * 9


# --------------------------------------------------------------------------- every option trains

# model option → (dataset overrides, model overrides, learning rate); image models see 3-channel
# inputs (16 px: their global pooling takes any size, and 32 px took 4× the CPU; CIFAR-10's 32 px
# are checked by the parameter counts above), mlp MNIST-sized ones, mlp_tabular the diabetes rows.
CASES = {
    "cnn10": (["dataset=synthetic", "dataset.shape=[3,16,16]"], [], 0.05),
    "cnn10_narrow": (["dataset=synthetic", "dataset.shape=[1,28,28]"], [], 0.05),
    "wrn28_10": (["dataset=synthetic", "dataset.shape=[3,16,16]"], ["model.depth=10", "model.width=1"], 0.05),
    "resnet50": (["dataset=synthetic", "dataset.shape=[3,32,32]"], [], 0.01),
    "mlp": (["dataset=synthetic", "dataset.shape=[1,28,28]"], [], 0.05),
    "mlp_tabular": (["dataset=diabetes"], [], 0.05),
}


def test_every_model_option_has_a_case():
    """Each conf/model/*.yaml is covered by the training smoke test below."""
    assert MODEL_OPTIONS and set(MODEL_OPTIONS) == set(CASES), \
        f"add the new model option(s) {set(MODEL_OPTIONS) ^ set(CASES)} to CASES"


# ResNet-50's 20 steps take ~6 s on 2 cores: a slow test; its config and size are checked above
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "resnet50" else n
                                  for n in MODEL_OPTIONS])
def test_model_option_builds_and_trains(name):
    """model=<option> composes from the real config, takes its input shape and outputs from the
    dataset, returns (N, num_outputs), and SGD overfits a fixed batch of 8 in 20 steps."""
    data_overrides, model_overrides, lr = CASES[name]
    cfg = compose_cfg(f"model={name}", *data_overrides, *model_overrides,
                      "dataset.train_size=8", "dataset.test_size=8")
    train, _, spec = build_datasets(cfg.dataset, seed=0)
    torch.manual_seed(0)
    model = hydra.utils.instantiate(cfg.model, in_shape=spec.in_shape, num_outputs=spec.num_outputs)
    x, y = next(iter(torch.utils.data.DataLoader(train, batch_size=8)))
    assert x.shape == (8, *spec.in_shape)
    loss_fn = F.mse_loss if spec.problem == "regression" else F.cross_entropy
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    model.train()
    losses = []
    for _ in range(20):
        opt.zero_grad()
        out = model(x)
        assert out.shape == (8, spec.num_outputs)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0], f"{name} did not fit a fixed batch: {losses}"
    model.eval()
    with torch.no_grad():
        assert model(x[:3]).shape == (3, spec.num_outputs)


def test_image_models_take_one_channel_images():
    """cnn10, wrn and resnet50 adapt their first layer to MNIST's 1×28×28 images."""
    x = torch.randn(2, 1, 28, 28)
    for model in (build("cnn10", (1, 28, 28), 10), build("wrn28_10", (1, 28, 28), 10, "model.depth=10", "model.width=1"),
                  build("resnet50", (1, 28, 28), 10)):
        assert model.eval()(x).shape == (2, 10)


# --------------------------------------------------------------------------- bad inputs

def test_cnn10_rejects_tabular_input():
    """cnn10 on tabular rows fails at construction with a message naming the model and shape."""
    with pytest.raises(ValueError, match=r"cnn10.*\(10,\)"):
        CNN10((10,), 1)


def test_wrn_rejects_tabular_input():
    """wrn on tabular rows fails at construction with a message naming the model and shape."""
    with pytest.raises(ValueError, match=r"wrn.*\(10,\)"):
        WideResNet((10,), 1, depth=10, width=1)


@pytest.mark.parametrize("depth", [27, 12, 3])
def test_wrn_depth_must_be_6n_plus_4(depth):
    """A WRN depth that is not 6n+4 is refused with the rule and the depth in the message."""
    with pytest.raises(ValueError, match=rf"6n\+4.*{depth}"):
        WideResNet((3, 32, 32), 10, depth=depth, width=1)


def test_bad_model_dataset_pair_through_hydra():
    """model=cnn10 with dataset=diabetes: the error raised through Hydra still says why."""
    cfg = compose_cfg("model=cnn10", "dataset=diabetes")
    _, _, spec = build_datasets(cfg.dataset, seed=0)
    with pytest.raises(Exception) as e:
        hydra.utils.instantiate(cfg.model, in_shape=spec.in_shape, num_outputs=spec.num_outputs)
    assert "cnn10 needs image input" in str(e.value) + str(e.value.__cause__)


def test_mlp_flattens_any_input_shape():
    """The MLP sizes its first layer from the whole example and accepts images or rows."""
    assert MLP((3, 8, 8), 4, hidden=[5]).eval()(torch.randn(2, 3, 8, 8)).shape == (2, 4)
    assert MLP((7,), 1, hidden=[]).eval()(torch.randn(2, 7)).shape == (2, 1)
