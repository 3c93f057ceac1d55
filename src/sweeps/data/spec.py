"""What a model needs to know about the data: :class:`DataSpec`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataSpec:
    """What a model needs to know about the data.

    Attributes:
        in_shape: one example's shape, ``(C, H, W)`` for images, ``(F,)`` for tabular rows,
            ``(C, L)`` for sequences — whatever the model's ``in_shape`` argument expects.
        num_outputs: classes, or 1 for regression.
        task: ``classification`` or ``regression``.
        target_scale: regression: std of the raw target, so RMSE is reported in target units
            (1.0: the targets are already in their units).
    """

    in_shape: tuple[int, ...]
    num_outputs: int
    task: str = "classification"
    target_scale: float = 1.0
