"""What a model needs to know about the data: [`DataSpec`][sweeps.data.spec.DataSpec]."""
from __future__ import annotations

from dataclasses import dataclass

from sweeps.errors import UsageError

TASKS = ("classification", "regression")  # what DataSpec.task takes


@dataclass(frozen=True)
class DataSpec:
    """What a model needs to know about the data.

    Attributes:
        in_shape: one example's shape, ``(C, H, W)`` for images, ``(F,)`` for tabular rows,
            ``(C, L)`` for sequences — whatever the model's ``in_shape`` argument expects.
        num_outputs: classes, or 1 for regression.
        task: ``classification`` or ``regression`` (`TASKS`); anything else is refused
            when the spec is made (a ``UsageError`` naming both).
        target_scale: regression: std of the raw target, so RMSE is reported in target units
            (1.0: the targets are already in their units).
    """

    in_shape: tuple[int, ...]
    num_outputs: int
    task: str = "classification"
    target_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise UsageError(f"DataSpec(task={self.task!r}) is unknown: use task='classification' or "
                             "task='regression'")
