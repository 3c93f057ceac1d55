"""The user's own code as part of a job's identity (``sweeps.code_fingerprint``).

Every ``_target_`` of a job names a module; where that module's top-level package lies outside
the installed distributions (the standard library, site-packages, sweeps itself) it is the
user's, and every ``.py`` file of that package is hashed — the whole package, since a model file
imports its helpers from beside it. Built-in targets (``torch.*``, ``sweeps.*``) add nothing:
their code changes with an installed version, and the identity of their jobs stays what it was.

Cheap on purpose: module files are found with `importlib.util.find_spec` on the top-level
name (nothing is imported), and a file is read again only when its mtime or size changed
(`file_hash`'s in-process cache), so a sweep of many jobs reads each file once.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import site
import subprocess
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sweeps import names

FILE_HASH_CHARS = 8  # per file in sweeps.code_files: enough to tell an edit, short enough for ~250 files
_cache: dict[str, tuple[int, int, str]] = {}  # resolved path -> (mtime_ns, size, content hash)


def file_hash(path: str | Path) -> str:
    """64 hex digits of SHA-256 over the file's bytes; read again only when its mtime (ns) or size
    differs from the last call's in this process.

    Raises:
        OSError: the file cannot be stat'ed or read.
    """
    key = os.fspath(path)
    st = os.stat(key)
    hit = _cache.get(key)
    if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return hit[2]
    with open(key, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    _cache[key] = (st.st_mtime_ns, st.st_size, digest)
    return digest


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[Path, ...]:
    """Folders whose modules are installed code, not the user's: the standard library, every
    site-packages, and the sweeps package (an editable install lives in a checkout)."""
    found = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    found.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    found.add(site.getusersitepackages())
    found.add(str(Path(names.__file__).parent))
    return tuple(Path(p).resolve() for p in found if p)


def _is_installed(path: Path) -> bool:
    return any(path == root or root in path.parents for root in _installed())


def _walk(top: Path) -> list[Path]:
    """The ``.py`` files under ``top`` (a package folder), hidden folders and caches left out."""
    files = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return files


def user_files(top_level: str) -> dict[str, Path]:
    """{path relative to the folder that holds it (``mynets/model.py``): absolute path} of the
    user's top-level module or package ``top_level``; {} where it is installed code, built in,
    or not found (a target that does not import is reported where it is built)."""
    try:
        spec = importlib.util.find_spec(top_level)
    except (ImportError, ValueError):
        return {}
    if spec is None:
        return {}
    if spec.submodule_search_locations:  # a package (a namespace package may have several folders)
        folders = [Path(p).resolve() for p in spec.submodule_search_locations]
        return {f.relative_to(folder.parent).as_posix(): f
                for folder in folders if not _is_installed(folder) for f in _walk(folder)}
    if spec.origin and spec.has_location and spec.origin.endswith(".py"):
        path = Path(spec.origin).resolve()
        return {} if _is_installed(path) else {path.name: path}
    return {}  # built in, frozen, or an extension module


def _targets(node: Any) -> list[str]:
    """Every ``_target_`` string in a config container, in document order."""
    if isinstance(node, dict):
        found = [node["_target_"]] if isinstance(node.get("_target_"), str) else []
        return found + [t for v in node.values() for t in _targets(v)]
    if isinstance(node, list):
        return [t for v in node for t in _targets(v)]
    return []


@dataclass
class UserCode:
    """What a job runs of the user's own code: ``files`` ({relative path: short hash}) and the
    git work tree they sit in (``commit``, ``dirty``; None outside git or without git)."""

    files: dict[str, str] = field(default_factory=dict)
    commit: str | None = None
    dirty: bool | None = None

    @property
    def fingerprint(self) -> str | None:
        """16 hex digits over the files' paths and hashes; None where the job runs no user code."""
        if not self.files:
            return None
        text = "\n".join(f"{path}\t{digest}" for path, digest in sorted(self.files.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def tags(self) -> dict[str, str]:
        """The run's tags: ``sweeps.code_fingerprint``, ``sweeps.code_files`` (the per-file map as
        JSON; left out where it would pass MLflow's tag length), and, in a git work tree,
        ``mlflow.source.git.commit`` (MLflow's own tag, here the user's code's commit) and
        ``sweeps.code_dirty`` (``true`` where tracked files differ from it). {} without user code."""
        if not self.files:
            return {}
        tags = {names.CODE_TAG: self.fingerprint}
        listing = json.dumps(self.files, sort_keys=True, separators=(",", ":"))
        if len(listing) <= names.MAX_TAG_VAL_LENGTH:
            tags[names.CODE_FILES_TAG] = listing
        if self.commit:
            tags[names.MLFLOW_GIT_COMMIT] = self.commit
            tags[names.CODE_DIRTY_TAG] = "true" if self.dirty else "false"
        return tags


def user_code(cfg: DictConfig) -> UserCode:
    """The user's code the job ``cfg`` runs: every ``.py`` file of each top-level package a
    ``_target_`` names outside the installed distributions, hashed (`file_hash`), and the
    git commit of the first such package's folder. Empty for built-in targets only. Never raises:
    a file that vanished while being read is left out."""
    files: dict[str, Path] = {}
    seen: set[str] = set()
    for target in _targets(OmegaConf.to_container(cfg, resolve=True)):
        top = target.split(".", 1)[0]
        if top and top not in seen:
            seen.add(top)
            files.update(user_files(top))
    hashed = {}
    for rel, path in files.items():
        try:
            hashed[rel] = file_hash(path)[:FILE_HASH_CHARS]
        except OSError:
            continue
    code = UserCode(hashed)
    if hashed:  # a file's own folder is in the same work tree as its package
        code.commit, code.dirty = _git_state_of(next(iter(files.values())).parent, code.fingerprint)
    return code


@functools.lru_cache(maxsize=8)
def _git_state_of(folder: Path, fingerprint: str | None) -> tuple[str | None, bool | None]:
    """`git_state` once per folder and code fingerprint in a process (two git calls, ~10 ms)."""
    return git_state(folder)


def git_state(folder: Path) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files differ from it) of the git work tree ``folder`` is
    in; (None, None) where it is in none, or git is missing or slow (2 s)."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=2)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None, None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None


def changes(before: dict[str, str], now: dict[str, str], most: int = 3) -> str:
    """The files that differ between two ``sweeps.code_files`` maps, for one console line:
    ``mynets/model.py changed``, ``mynets/a.py changed, mynets/b.py added`` — at most ``most``
    names, then ``and N more``; ``the code changed`` where the maps are the same or unknown."""
    words = [f"{p} changed" for p in sorted(now) if p in before and before[p] != now[p]]
    words += [f"{p} added" for p in sorted(now) if p not in before]
    words += [f"{p} removed" for p in sorted(before) if p not in now]
    if not words:
        return "the code changed"
    more = f" and {len(words) - most} more" if len(words) > most else ""
    return ", ".join(words[:most]) + more
