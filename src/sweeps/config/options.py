"""Per-option schemas: one dataclass for each option of the groups dataset, device, optimizer,
lr_scaling, schedule and precision (models: :mod:`sweeps.config.schema`).

Each ``conf/<group>/<option>.yaml`` starts with ``defaults: [/schema/<group>/<option>@_here_,
_self_]``, so its node holds exactly the fields that option reads. A run then logs (and hashes)
only what applies to it — no ``dataset.shape`` on an MNIST run — and a key the chosen option
lacks fails at composition like any typo, naming the option's class (``device=cpu
device.gpus=2``: "Key 'gpus' not in 'CpuDevice'"). Fields several options truly share live in
small base classes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from omegaconf import MISSING


# ── dataset ─────────────────────────────────────────────────────────────────────────────────
@dataclass
class Dataset:
    """What every dataset takes: subsets, how batches are served, what to do without files."""

    name: str = MISSING  # cifar10 | mnist | imagefolder | diabetes | synthetic
    train_size: Optional[int] = None  # seeded subset of N training examples (None: all)
    test_size: Optional[int] = None  # seeded subset of N test examples (None: all)
    num_workers: Optional[int] = None  # DataLoader worker processes (None: chosen per dataset)
    loader: str = "dataloader"  # dataloader (host) | device (whole dataset on the device; in-memory sets only)
    # On every dataset, not only file ones: presets set it once for sweeps that mix datasets (smoke).
    if_missing: str = "stop"  # files missing: stop (the sweep, one line) | skip (outcome=unavailable)


@dataclass
class FileDataset(Dataset):
    """Images read from files under ``root``."""

    root: str = "data"  # where the files live (relative paths: to the directory sweeps runs in)
    augment: bool = False  # random crop (pad 4) + horizontal flip on training images


@dataclass
class TorchvisionDataset(FileDataset):
    """Files that torchvision can fetch."""

    download: bool = True  # let torchvision fetch the files when they are missing


@dataclass
class Cifar10Dataset(TorchvisionDataset):
    """dataset=cifar10."""


@dataclass
class MnistDataset(TorchvisionDataset):
    """dataset=mnist."""


@dataclass
class ImageFolderDataset(FileDataset):
    """dataset=imagefolder: the user's own ``<root>/train/<class>/``, ``<root>/val/<class>/``
    tree; never downloaded, so no ``download``."""

    root: str = MISSING  # no sensible default: the user's own folder
    channels: Optional[int] = None  # 1 or 3 (None: from the first image's mode)
    image_size: Optional[int] = None  # resize to N×N (None: keep)


@dataclass
class DiabetesDataset(Dataset):
    """dataset=diabetes: bundled with scikit-learn (no files to find), split here."""

    test_fraction: float = 0.2  # share of rows held out for test


@dataclass
class SyntheticDataset(Dataset):
    """dataset=synthetic: random tensors, generated per job."""

    shape: List[int] = field(default_factory=lambda: [3, 32, 32])  # one example's shape
    num_classes: int = 10  # classification targets drawn from 0..num_classes-1
    regression: bool = False  # a regression target instead (scikit-learn make_regression)


# ── device ──────────────────────────────────────────────────────────────────────────────────
@dataclass
class Device:
    name: str = MISSING  # auto | cpu | cuda | ddp


@dataclass
class CpuDevice(Device):
    """device=cpu: nothing to choose."""


@dataclass
class OneGPUDevice(Device):
    index: int = 0  # which GPU; the gpu_pool launcher sets it per job


@dataclass
class AutoDevice(OneGPUDevice):
    """device=auto: cuda:<index> where a GPU is visible, else the CPU."""


@dataclass
class CudaDevice(OneGPUDevice):
    """device=cuda: one GPU (outcome=unavailable where there is none)."""


@dataclass
class DDPDevice(Device):
    """device=ddp: N processes, one device each (rank r on cuda:r), so no single ``index``."""

    gpus: int = 1  # number of processes (one per GPU with nccl; any number on the CPU with gloo)
    backend: str = "auto"  # auto (nccl where CUDA is present, else gloo) | nccl | gloo
    timeout_s: float = 300.0  # bound on every collective (and the rendezvous), seconds


# ── optimizer ───────────────────────────────────────────────────────────────────────────────
@dataclass
class Optimizer:
    name: str = MISSING  # sgd | adam
    base_lr: float = 0.1  # learning rate at lr_scaling.base_batch examples per step
    weight_decay: float = 0.0
    impl: str = "auto"  # auto (fused on CUDA, else torch default) | fused | foreach | loop


@dataclass
class SGDOptimizer(Optimizer):
    """optimizer=sgd."""

    momentum: float = 0.0
    nesterov: bool = False


@dataclass
class AdamOptimizer(Optimizer):
    """optimizer=adam."""

    base_lr: float = 0.001
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])


# ── lr_scaling: lr = optimizer.base_lr × f(batch / base_batch), see sweeps.config.scaled_lr ──
@dataclass
class LRScaling:
    rule: str = MISSING  # linear | sqrt | none
    base_batch: int = 128  # the batch size at which optimizer.base_lr applies


@dataclass
class LinearScaling(LRScaling):
    """lr_scaling=linear."""


@dataclass
class SqrtScaling(LRScaling):
    """lr_scaling=sqrt."""


@dataclass
class NoScaling(LRScaling):
    """lr_scaling=none: base_batch is kept, so switching rules changes one key only."""


# ── schedule ────────────────────────────────────────────────────────────────────────────────
@dataclass
class Schedule:
    name: str = MISSING  # multistep | constant | cosine


@dataclass
class MultiStepSchedule(Schedule):
    """schedule=multistep."""

    milestones: List[float] = field(default_factory=lambda: [0.5, 0.8])  # fractions of epochs
    gamma: float = 0.1  # lr factor at each milestone


@dataclass
class ConstantSchedule(Schedule):
    """schedule=constant."""


@dataclass
class CosineSchedule(Schedule):
    """schedule=cosine: anneals to 0 over all epochs, nothing to choose."""


# ── precision (see sweeps.train.precision.PRECISIONS) ──────────────────────────────────────
@dataclass
class Precision:
    name: str = MISSING  # fp32 | tf32 | bf16 | fp16


@dataclass
class FP32Precision(Precision):
    """precision=fp32."""


@dataclass
class TF32Precision(Precision):
    """precision=tf32."""


@dataclass
class BF16Precision(Precision):
    """precision=bf16."""


@dataclass
class FP16Precision(Precision):
    """precision=fp16."""


# ConfigStore entries schema/<group>/<option>; every conf/<group>/<option>.yaml of these groups
# extends the entry of its own name (tests/test_config.py checks both ways).
OPTION_SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": {"cifar10": Cifar10Dataset, "mnist": MnistDataset, "imagefolder": ImageFolderDataset,
                "diabetes": DiabetesDataset, "synthetic": SyntheticDataset},
    "device": {"auto": AutoDevice, "cpu": CpuDevice, "cuda": CudaDevice, "ddp": DDPDevice},
    "optimizer": {"sgd": SGDOptimizer, "adam": AdamOptimizer},
    "lr_scaling": {"linear": LinearScaling, "sqrt": SqrtScaling, "none": NoScaling},
    "schedule": {"multistep": MultiStepSchedule, "constant": ConstantSchedule, "cosine": CosineSchedule},
    "precision": {"fp32": FP32Precision, "tf32": TF32Precision, "bf16": BF16Precision, "fp16": FP16Precision},
}
