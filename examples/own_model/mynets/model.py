"""A small 1-D CNN for sequences: input (N, C, L) → logits (N, num_outputs)."""
from __future__ import annotations

from torch import nn


class TinyConv1d(nn.Module):
    """Two conv-BN-ReLU blocks of ``channels`` filters (``kernel`` wide, max-pool 2 between),
    global average pool, one linear layer. sweeps calls it as ``TinyConv1d(in_shape,
    num_outputs, **the YAML's keys)``: ``in_shape`` is one example's ``(C, L)``."""

    def __init__(self, in_shape, num_outputs: int, channels: int = 16, kernel: int = 5):
        super().__init__()
        c = in_shape[0]
        pad = kernel // 2
        self.features = nn.Sequential(
            nn.Conv1d(c, channels, kernel, padding=pad), nn.BatchNorm1d(channels), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(channels, channels, kernel, padding=pad), nn.BatchNorm1d(channels), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1))
        self.head = nn.Linear(channels, num_outputs)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))
