"""Configuration: the typed schemas Hydra composes ``conf/`` into, and the checks types cannot say.

Owns: :data:`CONF_DIR`, :func:`register` (the ConfigStore schemas: :mod:`.schema` for the
top level, :mod:`.options` for the group options), :mod:`.targets` (the one extension mechanism:
every part of a job is a Hydra ``_target_``; :func:`complete`, :func:`call_target`), :func:`validate`,
:func:`batch_size`, :mod:`.lr` (:func:`describe_lr`, :func:`scaled_lr`). Imports: omegaconf/hydra,
:mod:`sweeps.names`, :mod:`sweeps.errors` — nothing else of the package (it is the bottom layer).
"""
from sweeps.config.checks import batch_size, validate
from sweeps.config.lr import describe_lr, scaled_lr
from sweeps.config.schema import CONF_DIR, register
from sweeps.config.targets import call_target, check_target, complete

__all__ = ["CONF_DIR", "register", "validate", "batch_size", "scaled_lr", "describe_lr", "complete", "call_target", "check_target"]
