"""Configuration: the typed schemas Hydra composes ``conf/`` into, and the checks types cannot say.

Owns: :data:`CONF_DIR`, :func:`register` (the ConfigStore schemas: :mod:`.schema` for the
top level and models, :mod:`.options` for every other group option), :func:`validate`,
:func:`batch_size`, :func:`scaled_lr`. Imports: omegaconf/hydra, :mod:`sweeps.names`,
:mod:`sweeps.errors` — nothing else of the package (it is the bottom layer).
"""
from sweeps.config.checks import batch_size, scaled_lr, validate
from sweeps.config.schema import CONF_DIR, register

__all__ = ["CONF_DIR", "register", "validate", "batch_size", "scaled_lr"]
