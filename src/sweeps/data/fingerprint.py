"""A cheap fingerprint of the data a job reads, for the job's identity (``sweeps.data_fingerprint``).

Files (an option with ``root``: cifar10, mnist, imagefolder, a user's folder): the relative path
and size of every file under ``root`` that the dataset reads — the folders its target's ``reads``
attribute names (``cifar10.reads = ("cifar-10-batches-py",)``), else all of ``root`` — hashed; no
file content is read, so a 10,000-image folder costs one directory walk (~20 ms). The path of the
root itself is not part of it: the same files moved to another folder give the same fingerprint
(a resumed job finds its run), while a folder with other files, or the same names with other
sizes, never does. Data generated from the config (a target marked ``generated = True``:
synthetic, diabetes) is named by its generator: the config already covers it. A user's target
with neither is ``config-only``: the sweep warns once that changed data will not be noticed.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from sweeps.config.targets import locate, option_name
from sweeps.state import said_once

log = logging.getLogger("sweeps")
CONFIG_ONLY = "config-only"  # no files named and not generated: identity from the config alone


def data_fingerprint(cfg: DictConfig) -> str:
    """16 hex digits naming the data ``cfg`` (the ``dataset`` node) reads; ``generated:<name>``
    for data made from the config, ``missing`` when the folder is not there, ``config-only``
    when the option names no files (with a warning, once per sweep for each such option).

    Raises:
        UsageError: the option's ``_target_`` does not import.
    """
    target = locate(cfg, "dataset")
    if getattr(target, "generated", False):
        return f"generated:{cfg.get('name') or target.__name__}"
    if cfg.get("root") is None:
        option = option_name(cfg, "dataset")  # the option's trait, not a job's: said once per sweep
        log.log(logging.WARNING if said_once(("names no files", option)) else logging.DEBUG,
                "dataset=%s names no files (no root): its runs are identified by the config alone, so changed "
                "data will not be noticed on resume; set root: <folder> in the option to fingerprint it", option)
        return CONFIG_ONLY
    root = Path(str(cfg.root)).expanduser()
    entries = []
    for sub in getattr(target, "reads", None) or (".",):
        for dirpath, dirnames, filenames in os.walk(root / sub):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = Path(dirpath) / name
                try:
                    size = path.stat().st_size
                except OSError:
                    continue
                entries.append(f"{path.relative_to(root).as_posix()}\t{size}")
    if not entries:
        return "missing"
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]
