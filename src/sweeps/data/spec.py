"""What a model needs to know about the data: [`DataSpec`][sweeps.data.spec.DataSpec]."""
from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass

from sweeps.errors import UsageError

PROBLEMS = ("classification", "regression")  # what DataSpec.problem takes


@dataclass(frozen=True)
class DataSpec:
    """What a model needs to know about the data.

    Attributes:
        in_shape: one example's shape, ``(C, H, W)`` for images, ``(F,)`` for tabular rows,
            ``(C, L)`` for sequences — whatever the model's ``in_shape`` argument expects.
        num_outputs: classes, or 1 for regression.
        problem: ``classification`` or ``regression`` (`PROBLEMS`); anything else is refused
            when the spec is made (a ``UsageError`` naming both).
        target_scale: regression: std of the raw target, so RMSE is reported in target units
            (1.0: the targets are already in their units).
        task: the former name of ``problem`` (a ``task=`` keyword still works, with a
            ``DeprecationWarning``: ``task`` is the job's kind, ``task=train|inference|max_batch``).
    """

    in_shape: tuple[int, ...]
    num_outputs: int
    problem: str = "classification"
    target_scale: float = 1.0
    task: InitVar[str | None] = None

    def __post_init__(self, task: str | None) -> None:
        if task is not None:
            warnings.warn("DataSpec(task=...) is now DataSpec(problem=...)", DeprecationWarning, stacklevel=3)
            object.__setattr__(self, "problem", task)
        if self.problem not in PROBLEMS:
            raise UsageError(f"DataSpec(problem={self.problem!r}) is unknown: use problem='classification' or "
                             "problem='regression'")
