"""A job's data as MLflow dataset inputs (the run page's "Datasets used", the run list's
Dataset column) and as params: what was read, where from, how many examples, what shape.

Each job logs two inputs, ``<dataset>/train`` (context ``train``) and ``<dataset>/test``
(context ``eval``), in one ``log_inputs`` call when its run opens. Their digest hashes the data
fingerprint (`sweeps.data.fingerprint`: the same files anywhere give the same digest; kept
whole in the source) with the split, example count and shape actually used, their
schema a tensor spec of one batch (``-1`` × the input shape, float32; targets int64 class
indices or float32 values), their profile the example count. Files on disk are a ``local``
source (the folder), data made from the config a ``code`` source naming its generator.
Torch-free: the caller passes plain values.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from sweeps import names
from sweeps.errors import brief

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Dataset

log = logging.getLogger("sweeps")
GENERATED = "generated:"  # the fingerprint's prefix for data made from the config


def shape_text(in_shape: Sequence[int]) -> str:
    """``(3, 32, 32)`` → ``3x32x32`` (the ``data.input_shape`` param)."""
    return "x".join(str(int(d)) for d in in_shape)


def example_params(in_shape: Sequence[int], train_n: int | None, test_n: int) -> dict[str, str]:
    """``data.train_examples`` / ``data.test_examples`` (examples actually used, after
    ``dataset.train_size``/``test_size``; no train count when the task reads no training data)
    and ``data.input_shape``."""
    out = {names.TEST_EXAMPLES: str(test_n), names.INPUT_SHAPE: shape_text(in_shape)}
    if train_n is not None:
        out[names.TRAIN_EXAMPLES] = str(train_n)
    return out


def dataset(name: str, split: str, fingerprint: str, root: str | None, in_shape: Sequence[int], rows: int,
            regression: bool) -> Dataset:
    """One MLflow dataset entity (see the module docstring); ``root`` is the folder the files are
    read from, None for generated data."""
    from mlflow.data.schema import TensorDatasetSchema
    from mlflow.entities import Dataset
    from mlflow.types import Schema, TensorSpec

    features = Schema([TensorSpec(np.dtype(np.float32), (-1, *map(int, in_shape)), "input")])
    targets = Schema([TensorSpec(np.dtype(np.float32 if regression else np.int64), (-1,), "target")])
    schema = TensorDatasetSchema(features, targets).to_dict()
    if fingerprint.startswith(GENERATED) or root is None:
        generator = fingerprint.removeprefix(GENERATED) or name
        source_type, source = "code", {"tags": {names.DATASET_GENERATOR_TAG: generator}}
    else:
        source_type, source = "local", {"uri": str(Path(root).expanduser().resolve())}
    profile = {"num_rows": rows, "features_shape": [rows, *map(int, in_shape)]}
    # MLflow keeps one dataset row per (experiment, name, digest) and reuses its schema and profile:
    # the digest covers what this job read of the data (subset size, shape, targets), not the files only;
    # it starts with the fingerprint so the UI's "name (digest)" stays readable (36 characters at most)
    digest = hashlib.sha256(json.dumps([fingerprint, split, rows, list(map(int, in_shape)), regression]).encode())
    if source_type == "code":
        source["tags"][names.DATASET_FINGERPRINT_TAG] = fingerprint
    else:
        source["fingerprint"] = fingerprint
    return Dataset(name=f"{name}/{split}", digest=f"{fingerprint[:27]}-{digest.hexdigest()[:8]}", source_type=source_type,
                   source=json.dumps(source), schema=json.dumps(schema), profile=json.dumps(profile))


def log_datasets(client: MlflowClient, run_id: str, name: str, fingerprint: str, root: str | None,
                 in_shape: Sequence[int], train_n: int | None, test_n: int, regression: bool) -> None:
    """Log the job's train (when ``train_n`` is not None) and eval inputs to ``run_id``: one call
    (where ``client`` is: `in_store`).

    Raises:
        mlflow.exceptions.MlflowException: the store refused them (the caller decides).
    """
    from mlflow.entities import DatasetInput, InputTag

    inputs = []
    for split, context, rows in (("train", "train", train_n), ("test", "eval", test_n)):
        if rows is not None:
            entity = dataset(name, split, fingerprint, root, in_shape, rows, regression)
            inputs.append(DatasetInput(entity, [InputTag(names.MLFLOW_DATASET_CONTEXT, context)]))
    client.log_inputs(run_id, datasets=inputs)


def log_job_data(writer, dataset_cfg, fingerprint: str, in_shape: Sequence[int], train_n: int | None, test_n: int,
                 regression: bool) -> None:
    """A job's `example_params` and `log_datasets` through its
    `RunWriter` (two calls, once per job; through a store process
    neither is waited for), journaled first where the writer journals
    (`sweeps.tracking.writer.records`). Never raises: a store that refuses the inputs is reported in one line
    and the job goes on."""
    try:
        writer.log_params(example_params(in_shape, train_n, test_n))
        root = dataset_cfg.get("root")
        args = [str(dataset_cfg.name), fingerprint, None if root is None else str(root), [int(d) for d in in_shape], train_n,
                test_n, regression]
        if writer.records:  # journaled first: a job killed before the store took them has them sent by the next start
            writer.records.append_inputs(args)
        writer.post(f"dataset inputs of run {writer.run_id}", log_datasets, writer.run_id, *args)
    except Exception as e:  # noqa: BLE001 (inputs describe the job; they never stop it)
        log.warning("MLflow: dataset inputs and example counts of run %s not logged (%s: %s)", writer.run_id,
                    type(e).__name__, brief(e))
