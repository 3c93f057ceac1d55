"""Noisy waves of three shapes (sine, square, sawtooth) at random frequency and phase: a
sequence classification problem made from its arguments."""
from __future__ import annotations

import math

import torch
from torch.utils.data import Dataset

SHAPES = 3  # sine, square, sawtooth


class Waves(Dataset):
    """``n`` examples: ``x`` float ``(1, length)``, ``y`` an int class in 0..2."""

    def __init__(self, n: int, length: int, noise: float, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, SHAPES, (n,), generator=g)
        t = torch.linspace(0, 1, length)
        freq = 2 + 6 * torch.rand(n, 1, generator=g)
        phase = 2 * math.pi * torch.rand(n, 1, generator=g)
        arg = 2 * math.pi * freq * t + phase
        waves = torch.stack([torch.sin(arg), torch.sign(torch.sin(arg)),
                             2 * (arg / (2 * math.pi) % 1) - 1], dim=1)  # (n, 3, length)
        x = waves[torch.arange(n), self.labels]
        self.x = (x + noise * torch.randn(x.shape, generator=g)).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.x[i], int(self.labels[i])


def make_waves(n_train: int = 2048, n_test: int = 512, length: int = 128, noise: float = 0.5, seed: int = 0):
    """sweeps' dataset contract: return ``(train, test)`` map-style datasets of (input, target)
    pairs. ``seed`` is passed by sweeps because this signature names it."""
    return Waves(n_train, length, noise, seed), Waves(n_test, length, noise, seed + 1)
