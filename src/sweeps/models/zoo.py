"""Models of the reference studies. Every constructor takes the dataset's ``in_shape`` and
``num_outputs`` first (classes, or 1 for regression), so a model config never repeats them.

Inputs: images ``(N, C, H, W)`` float, tabular ``(N, F)`` float. Outputs: ``(N, num_outputs)``.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


def _conv_bn_relu(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class CNN10(nn.Module):
    """VGG-style CNN of study 1 (``cnn10``): 3 stages of ``convs_per_stage`` 3×3 conv-BN-ReLU
    with ``widths`` channels (64/128/256 at 32/16/8 px), 2×2 max-pool between stages, global
    average pool, one linear layer: 9 convs + 1 linear = 10 layers, 1,923,914 parameters for
    CIFAR-10 (the design notes' "~1.9 M").
    """

    def __init__(self, in_shape: Sequence[int], num_outputs: int,
                 widths: Sequence[int] = (64, 128, 256), convs_per_stage: int = 3):
        super().__init__()
        if len(in_shape) != 3:
            raise ValueError(f"cnn10 needs image input (C, H, W), got shape {tuple(in_shape)}")
        layers: list[nn.Module] = []
        cin = in_shape[0]
        for stage, width in enumerate(widths):
            if stage:
                layers.append(nn.MaxPool2d(2))
            for _ in range(convs_per_stage):
                layers += _conv_bn_relu(cin, width)
                cin = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class _WideBlock(nn.Module):
    """Pre-activation basic block (BN-ReLU-conv ×2) with a 1×1 projection when shapes change."""

    def __init__(self, cin: int, cout: int, stride: int, dropout: float):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut = None if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = torch.relu(self.bn1(x))
        # the projection takes the pre-activated input, as in the authors' code
        shortcut = x if self.shortcut is None else self.shortcut(o)
        o = self.conv1(o)
        o = self.conv2(self.dropout(torch.relu(self.bn2(o))))
        return o + shortcut


class WideResNet(nn.Module):
    """WRN-``depth``-``width`` (Zagoruyko & Komodakis 2016, "Wide Residual Networks",
    arXiv:1605.07146): 3 groups of (depth-4)/6 blocks at 16·width, 32·width, 64·width channels.
    WRN-28-10 on CIFAR-10 has 36,479,194 parameters, as in the authors' implementation.
    """

    def __init__(self, in_shape: Sequence[int], num_outputs: int, depth: int = 28,
                 width: int = 10, dropout: float = 0.0):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6n+4 (e.g. 16, 22, 28, 40), got {depth}")
        if len(in_shape) != 3:
            raise ValueError(f"wrn needs image input (C, H, W), got shape {tuple(in_shape)}")
        n = (depth - 4) // 6
        channels = [16, 16 * width, 32 * width, 64 * width]
        self.conv = nn.Conv2d(in_shape[0], channels[0], 3, 1, 1, bias=False)
        blocks: list[nn.Module] = []
        for group in range(3):
            for i in range(n):
                cin = channels[group] if i == 0 else channels[group + 1]
                stride = 2 if group > 0 and i == 0 else 1
                blocks.append(_WideBlock(cin, channels[group + 1], stride, dropout))
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(channels[3])
        self.fc = nn.Linear(channels[3], num_outputs)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = torch.relu(self.bn(self.blocks(self.conv(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(o, 1), 1))


class MLP(nn.Module):
    """Fully connected ReLU network: flattened input → ``hidden`` → ``num_outputs``.

    ``hidden=[1000, 1000]`` on MNIST is study 4's 784-1000-1000-10 (1,796,010 parameters);
    ``hidden=[16, 32, 16]`` is study 5's tabular regressor.
    """

    def __init__(self, in_shape: Sequence[int], num_outputs: int,
                 hidden: Sequence[int] = (1000, 1000), dropout: float = 0.0):
        super().__init__()
        sizes = [int(torch.tensor(in_shape).prod())] + list(hidden)
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(sizes[-1], num_outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def resnet50(in_shape: Sequence[int], num_outputs: int) -> nn.Module:
    """torchvision's ResNet-50 (He et al. 2015), untrained, with the first conv adapted to
    ``in_shape[0]`` channels; 25,557,032 parameters at 3 channels and 1000 classes.
    """
    if len(in_shape) != 3:
        raise ValueError(f"resnet50 needs image input (C, H, W), got shape {tuple(in_shape)}")
    import torchvision  # here: only this model needs it (its import pulls in torch._dynamo, ~1.2 s)

    model = torchvision.models.resnet50(weights=None, num_classes=num_outputs)
    if in_shape[0] != 3:
        model.conv1 = nn.Conv2d(in_shape[0], 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
