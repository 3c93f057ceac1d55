"""A job's identity (``sweeps.config_hash``): its config, the data's fingerprint, the hardware
measured and the user's own code — and the earlier run it names, where the job is done already.

A job whose user code changed since its last run gets a new hash, so it runs again; the hash of
the same job without the code (``sweeps.config_hash_without_code``) finds the run it would
otherwise have reused, so the console can say which files changed.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from omegaconf import DictConfig

from sweeps import names
from sweeps.data.fingerprint import data_fingerprint
from sweeps.tracking.replay import resume
from sweeps.provenance.machine import hardware
from sweeps.provenance.user_code import UserCode, changes, user_code

log = logging.getLogger("sweeps")


@dataclass
class Identity:
    """``config_hash`` (16 hex), ``tags`` (its parts and the user's code, tagged on the run),
    ``without_code`` (the hash without the user's code; None where the job runs none) and
    ``code`` (`UserCode`)."""

    config_hash: str
    tags: dict[str, str]
    without_code: str | None
    code: UserCode


def of_job(cfg: DictConfig, ignore: tuple[str, ...] = ()) -> Identity:
    """The identity of the job ``cfg``; ``ignore``: keys left out of the hash (other tasks' settings).

    Raises:
        UsageError: the dataset's ``_target_`` does not import.
    """
    parts = {names.DATA_TAG: data_fingerprint(cfg.dataset), names.HARDWARE_TAG: hardware(cfg.device.name)}
    code = user_code(cfg)
    if code.fingerprint is None:  # built-in targets only: the hash is what it was before code counted
        return Identity(resume.config_hash(cfg, ignore, parts), parts, None, code)
    without = resume.config_hash(cfg, ignore, parts)
    parts[names.CODE_TAG] = code.fingerprint
    tags = {**parts, **code.tags(), names.CODELESS_HASH_TAG: without}
    return Identity(resume.config_hash(cfg, ignore, parts), tags, without, code)


def previous_run(client, experiment_id: str, identity: Identity, name: str):
    """`sweeps.tracking.replay.resume.previous_run` for ``identity``; where there is none but the
    same job ran with other code, one line names the files that changed since that run
    (``job batch=32: mynets/model.py changed since run 8387… (ok): running again``)."""
    previous = resume.previous_run(client, experiment_id, identity.config_hash)
    if previous is not None or identity.without_code is None:
        return previous
    before = resume.run_before_code_change(client, experiment_id, identity.without_code, identity.config_hash)
    if before is not None:
        try:
            files = json.loads(before.data.tags[names.CODE_FILES_TAG])
        except (KeyError, ValueError):  # not kept (too many files to list in a tag)
            files = None
        what = changes(files, identity.code.files) if isinstance(files, dict) else "the code changed"
        log.info("job %s: %s since run %s (%s): running again", name, what, before.info.run_id,
                 before.data.tags.get(names.OUTCOME_TAG))
    return None
