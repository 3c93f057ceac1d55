"""The dataset contract: a ``dataset._target_`` returns ``(train, test)`` map-style datasets of
``(input, target)`` pairs; [`build_datasets`][sweeps.data.datasets.build_datasets] calls it, checks what came back, infers the
[`DataSpec`][sweeps.data.spec.DataSpec] and cuts seeded subsets.

The target is any callable (the built-ins are in `sweeps.data.builtin`): it gets the
option's keys but sweeps' own (`sweeps.config.options.DatasetKeys`), plus ``root``,
``seed``, ``num_classes``, ``regression``, ``train_size``, ``test_size`` where its signature
names them. It may return a third element, a [`DataSpec`][sweeps.data.spec.DataSpec], to state the shape, classes and a
regression target's scale exactly; otherwise they are read from the first training example: an
integer target (a Python ``int`` or an integer tensor) is a class index — classification with the
largest label + 1 classes, unless the option says ``num_classes: N`` — and a float target is
regression (``regression: true`` says so up front).
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from omegaconf import DictConfig
from torch.utils.data import Dataset, Subset, TensorDataset

from sweeps.config import call_target
from sweeps.config.targets import option_name
from sweeps.data.spec import DataSpec
from sweeps.errors import UsageError, describe

log = logging.getLogger("sweeps")


def build_datasets(cfg: DictConfig, seed: int) -> tuple[Dataset, Dataset, DataSpec]:
    """Training and test datasets for ``cfg`` (the ``dataset`` node) and their [`DataSpec`][sweeps.data.spec.DataSpec].

    Raises:
        DataUnavailable: files missing under the option's ``root`` (and not downloadable).
        UsageError: the target does not import, rejects its arguments, raises (with its own
            exception as the cause, in one line), or returns something other than two datasets
            of ``(input, target)`` pairs; a subset larger than the data.
    """
    where = f"dataset={option_name(cfg, 'dataset')}: {cfg._target_}"
    try:
        out = call_target(cfg, "dataset", supplied={"root": None, "seed": seed, "num_classes": None,
                                                     "regression": False, "train_size": cfg.train_size,
                                                     "test_size": cfg.test_size})
    except UsageError:
        raise
    except Exception as e:  # a wrong value the target chokes on (shape=abc): no job can run on it
        raise UsageError(f"{where} failed ({describe(e)}); check the option's values") from None
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 3):
        raise UsageError(f"{where} returned {_kind(out)}: return (train, test), two map-style datasets of "
                         "(input, target) pairs")
    train, test = out[0], out[1]
    for split, ds in (("train", train), ("test", test)):
        if not (hasattr(ds, "__getitem__") and hasattr(ds, "__len__")):
            raise UsageError(f"{where} returned {_kind(ds)} as its {split} set: return a map-style dataset "
                             "(__getitem__ and __len__), e.g. torch.utils.data.TensorDataset")
        if len(ds) == 0:
            raise UsageError(f"{where} returned an empty {split} set")
    spec = out[2] if len(out) == 3 else infer_spec(train, cfg, where)
    if not isinstance(spec, DataSpec):
        raise UsageError(f"{where} returned {_kind(spec)} as its third element: return a sweeps.data.DataSpec "
                         "or only (train, test)")
    return _subset(train, cfg.train_size, seed, "train_size"), _subset(test, cfg.test_size, seed + 1, "test_size"), spec


def infer_spec(train: Dataset, cfg: DictConfig, where: str = "dataset") -> DataSpec:
    """The [`DataSpec`][sweeps.data.spec.DataSpec] of ``train`` from its first example and the option's ``num_classes``
    or ``regression`` keys (see the module docstring).

    Raises:
        UsageError: the first example is not an ``(input, target)`` pair of tensors or numbers.
    """
    example = train[0]
    if not isinstance(example, (tuple, list)) or len(example) != 2:
        raise UsageError(f"{where}: an example is {_kind(example)}, not an (input, target) pair")
    x, y = (torch.as_tensor(v) if not isinstance(v, torch.Tensor) else v for v in example)
    if cfg.get("regression") or y.is_floating_point():
        return DataSpec(tuple(x.shape), max(1, y.numel()), "regression")
    if y.numel() != 1:
        raise UsageError(f"{where}: a class target must be one integer, got shape {tuple(y.shape)}; "
                         "float targets are regression")
    classes = cfg.get("num_classes") or _largest_label(train) + 1
    return DataSpec(tuple(x.shape), int(classes))


def _largest_label(ds: Dataset) -> int:
    """The largest class index in ``ds``: from its label tensor or ``targets`` where it has one,
    else by reading every example once (``num_classes: N`` in the option skips that pass)."""
    if isinstance(ds, TensorDataset):
        return int(ds.tensors[1].max())
    if getattr(ds, "targets", None) is not None:
        return int(torch.as_tensor(ds.targets).max())
    log.info("dataset: counting classes over %d training examples (set num_classes in the option to skip it)", len(ds))
    return max(int(ds[i][1]) for i in range(len(ds)))


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}" if value is not None else "None"


def _subset(ds: Dataset, n: int | None, seed: int, key: str) -> Dataset:
    if n is None or n == len(ds):
        return ds
    if n > len(ds):
        raise UsageError(f"dataset.{key}={n} is larger than the data ({len(ds)} examples): "
                         f"use at most {len(ds)}, or null for all")
    idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    if isinstance(ds, TensorDataset):  # stay a tensor dataset: TensorBatches can slice it
        return TensorDataset(*(t[idx] for t in ds.tensors))
    return Subset(ds, idx.tolist())
