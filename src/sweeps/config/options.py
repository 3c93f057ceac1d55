"""Schemas of the group options: one dataclass for each option of the closed groups device,
lr_scaling and precision (sweeps' code branches on them), and for the ``_target_`` groups
(dataset, optimizer, schedule, loss) the keys sweeps reads itself (`OWN_KEYS`; the rest of
such a node is its target's arguments, see `sweeps.config.targets`).

Each ``conf/<group>/<option>.yaml`` of a closed group starts with ``defaults: [/schema/<group>/<option>@_here_,
_self_]``, so its node holds exactly the fields that option reads. A run then logs (and hashes)
only what applies to it — no ``dataset.shape`` on an MNIST run — and a key the chosen option
lacks fails at composition like any typo, naming the option's class (``device=cpu
device.gpus=2``: "Key 'gpus' not in 'CpuDevice'"). Fields several options truly share live in
small base classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING


# ── the _target_ groups: sweeps' own keys (the rest of each node goes to its target) ─────────
@dataclass
class DatasetKeys:
    """Keys of every ``dataset`` option that sweeps reads itself (see `sweeps.config.targets`);
    ``root``, ``seed``, ``num_classes``, ``regression``, ``train_size`` and ``test_size`` also go to
    the target where its signature names them."""

    name: Optional[str] = None  # the option's name (None: the option Hydra chose)
    train_size: Optional[int] = None  # seeded subset of N training examples (None: all)
    test_size: Optional[int] = None  # seeded subset of N test examples (None: all)
    num_workers: Optional[int] = None  # DataLoader worker processes (None: chosen per dataset)
    # auto: tensors in memory are held on the job's device (batches cut there), anything else
    # goes through a DataLoader | device | dataloader
    loader: str = "auto"
    # On every dataset, not only file ones: presets set it once for sweeps that mix datasets (smoke).
    if_missing: str = "stop"  # files missing: stop (the sweep, one line) | skip (outcome=unavailable)


@dataclass
class OptimizerKeys:
    """Keys of every ``optimizer`` option that sweeps reads itself; the others go to the
    ``torch.optim`` class (or the user's) that ``_target_`` names, with the ``lr`` of
    `sweeps.config.lr.describe_lr`. One of ``lr`` and ``base_lr`` is set."""

    name: Optional[str] = None
    lr: Optional[float] = None  # the learning rate at every batch size, as written (no scaling)
    base_lr: Optional[float] = None  # the learning rate at lr_scaling.base_batch examples, scaled by lr_scaling
    impl: str = "auto"  # auto (fused on CUDA where the class has it, else torch default) | fused | foreach | loop


@dataclass
class ScheduleKeys:
    """``schedule``: a ``torch.optim.lr_scheduler`` (or the user's) by ``_target_``, stepped once
    per epoch; ``epochs`` goes to a target that names it."""

    name: Optional[str] = None


@dataclass
class LossKeys:
    """``loss``: ``_target_`` null (``loss=auto``) picks cross-entropy for classification and MSE
    for regression."""

    name: Optional[str] = None


OWN_KEYS: dict[str, type] = {"dataset": DatasetKeys, "optimizer": OptimizerKeys, "schedule": ScheduleKeys,
                             "loss": LossKeys}


# ── device ──────────────────────────────────────────────────────────────────────────────────
@dataclass
class Device:
    name: str = MISSING  # auto | cpu | cuda | ddp
    # torch's intra-op CPU threads for the job (torch.set_num_threads); null: one where a CPU
    # training step is under 20 MFLOP, else torch's default, one per core — in a sweep decided by
    # the first job of each model × dataset × device and held at every batch (a GPU pool's CPU
    # slot or a Gloo rank: its share of the cores)
    threads: Optional[int] = None
    # glibc malloc keeps up to this much freed heap (MB) for the next step instead of giving it
    # back to the kernel and page-faulting it in again (sweeps.train.host_heap); null: glibc's default
    malloc_trim_mb: Optional[int] = 1024


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


@dataclass
class KindDevice(Device):
    """A device option of a kind of the user's own (docs/architecture.md, "Adding a device"): its
    YAML extends ``schema/device/kind`` and names the kind's class, a subclass of
    ``sweeps.devices.DeviceKind``, by ``_target_`` (`sweeps.devices.from_config`)."""

    _target_: str = MISSING  # the kind's class, built with no arguments
    index: Optional[int] = None  # which device of a kind of many (None: its only one)


# Stored as schema/device/kind beside OPTION_SCHEMAS (no option of sweeps' own conf/ extends it).
KIND_SCHEMA = ("device", "kind", KindDevice)


# ── lr_scaling: lr = optimizer.base_lr × f(batch / base_batch), see sweeps.config.lr ──
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
    "device": {"auto": AutoDevice, "cpu": CpuDevice, "cuda": CudaDevice, "ddp": DDPDevice},
    "lr_scaling": {"linear": LinearScaling, "sqrt": SqrtScaling, "none": NoScaling},
    "precision": {"fp32": FP32Precision, "tf32": TF32Precision, "bf16": BF16Precision, "fp16": FP16Precision},
}
