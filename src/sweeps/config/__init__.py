"""Configuration: the typed schemas Hydra composes ``conf/`` into, and the checks types cannot say.

Owns: `CONF_DIR`, `register` (the ConfigStore schemas: `.schema` for the
top level, `.options` for the group options), `.targets` (the one extension mechanism:
every part of a job is a Hydra ``_target_``; [`complete`][sweeps.config.targets.complete], [`call_target`][sweeps.config.targets.call_target]), `validate`,
`batch_size`, `.lr` (`describe_lr`, `scaled_lr`). Imports: omegaconf/hydra,
`sweeps.names`, [`sweeps.errors`][sweeps.errors] — nothing else of the package (it is the bottom layer).
"""
from sweeps.config.checks import batch_size, validate
from sweeps.config.lr import describe_lr, scaled_lr
from sweeps.config.schema import CONF_DIR, register
from sweeps.config.targets import call_target, check_target, complete

__all__ = ["CONF_DIR", "register", "validate", "batch_size", "scaled_lr", "describe_lr", "complete", "call_target", "check_target"]
