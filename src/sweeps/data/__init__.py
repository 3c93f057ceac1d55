"""Data: the dataset contract (any ``dataset._target_``; the built-ins: torchvision, scikit-learn,
synthetic), seeded subsets, and the loaders that serve them — host-side (DataLoader, `TensorBatches`) or resident on
the device (`sweeps.data.device_loader`).

Owns: [`DataSpec`][sweeps.data.spec.DataSpec] (what a model needs to know of the data), [`build_datasets`][sweeps.data.datasets.build_datasets],
`make_loaders`, `device_loaders`. Imports: torch, torchvision, scikit-learn,
`sweeps.devices` (pinning), `sweeps.config`, `sweeps.names`, [`sweeps.errors`][sweeps.errors].
"""
from sweeps.data.datasets import build_datasets
from sweeps.data.spec import DataSpec
from sweeps.data.device_loader import device_loaders, resident_loader
from sweeps.data.loaders import default_workers, make_loaders

__all__ = ["DataSpec", "build_datasets", "make_loaders", "default_workers", "device_loaders", "resident_loader"]
