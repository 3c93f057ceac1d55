"""What a bundle file holds, and reading one back only once it is whole and untouched.

A bundle is one zip file (stdlib `zipfile`, deflated):

    manifest.json                     format name and version, source, runs, every other member's sha256 and size
    machines.json                     per source host: its `env.*` tags, `sweeps.hardware`, its fingerprint.json
    runs/<run id>/run.json            name, status, start and end times (ms), params, tags, artifact list
    runs/<run id>/metrics.jsonl       one line per metric key: its whole history (steps, values, timestamps in ms)
    runs/<run id>/artifacts/<path>    the run's artifacts, byte for byte
    runs/<run id>/journal/<file>      the run's journal and records (epochs.jsonl, run.jsonl) where its folder was there

`open_verified` refuses a file (one line, `BundleError`) before anything is written anywhere: not a
zip or cut short, a format newer than `VERSION`, a member name that would leave the folder it is
unpacked into (`../`, an absolute path), a member missing from the manifest or the manifest naming
one that is missing, a size or sha256 that differs from the manifest's. Nothing here imports
mlflow: the command line checks a file before the store is opened.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "sweeps-bundle"  # the manifest's "format"
VERSION = 1  # the manifest's "version": the newest this sweeps reads (and the one it writes)
MANIFEST = "manifest.json"
MACHINES = "machines.json"
RUNS = "runs"
RUN_JSON, METRICS_JSONL, ARTIFACTS, JOURNAL = "run.json", "metrics.jsonl", "artifacts", "journal"
CHUNK = 1 << 20  # bytes read at a time while hashing a member


class BundleError(ValueError):
    """A bundle file that cannot be read as one: its message is one line naming the file and what
    is wrong with it (the command line prints it and exits 2)."""


def run_member(run_id: str, *parts: str) -> str:
    """The member name of ``parts`` under run ``run_id``'s folder (``runs/<run id>/...``)."""
    return "/".join((RUNS, run_id, *parts))


def unsafe(name: str) -> bool:
    """Whether member ``name`` would land outside the folder it is unpacked into: an absolute
    path, a drive, a backslash, or a ``..`` part (checked before normalizing, so ``a/../../b``
    is caught as well as ``../b``)."""
    if not name or name.startswith("/") or "\\" in name or ":" in name.split("/", 1)[0]:
        return True
    parts = name.split("/")
    return ".." in parts or posixpath.normpath(name).startswith("..")


def digest(data: bytes) -> str:
    """sha256 of ``data``, hex."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Bundle:
    """A verified bundle, open for reading: ``manifest`` (the parsed manifest.json), ``zip`` (the
    open `zipfile.ZipFile`). Close it (or use it as a context manager)."""

    path: Path
    manifest: dict[str, Any]
    zip: zipfile.ZipFile
    _cache: dict[str, bytes] = field(default_factory=dict)

    def read(self, name: str) -> bytes:
        """Member ``name``'s bytes (verified by `open_verified`, so no check is repeated here).

        Raises:
            KeyError: no such member.
        """
        return self.zip.read(name)

    def extract(self, name: str, target: Path) -> None:
        """Write member ``name`` to the file ``target`` (its folder made), streamed.

        Raises:
            KeyError: no such member.
            OSError: ``target`` cannot be written.
        """
        target.parent.mkdir(parents=True, exist_ok=True)
        with self.zip.open(name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)

    def json(self, name: str) -> Any:
        return json.loads(self.read(name))

    def runs(self) -> list[dict[str, Any]]:
        """The manifest's runs, parents before their children: each ``{"run_id", "parent",
        "name", "members", "digest"}``."""
        return list(self.manifest["runs"])

    def close(self) -> None:
        self.zip.close()

    def __enter__(self) -> "Bundle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_verified(path: str | Path) -> Bundle:
    """Open bundle ``path`` and check all of it (see the module docstring) before returning it.

    Raises:
        BundleError: the file is missing, not a bundle, cut short, of a newer format, has an unsafe
            member name or a member whose size or sha256 differs from the manifest's (one line).
    """
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise BundleError(f"no bundle file {where}: give the path python -m sweeps.bundle export -o wrote")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise BundleError(f"{where} is not a whole bundle ({e}): it was cut short or is not one; "
                          "copy it again from where it was exported") from None
    try:
        return _verified(path, zf)
    except BaseException:
        zf.close()
        raise


def _verified(path: Path, zf: zipfile.ZipFile) -> Bundle:
    where = str(path)
    names = zf.namelist()
    bad = next((n for n in names if unsafe(n)), None)
    if bad is not None:
        raise BundleError(f"{where} has a member whose path leaves the folder it unpacks into ({bad!r}): "
                          "refused, nothing imported; export the sweep again with python -m sweeps.bundle export")
    if MANIFEST not in names:
        raise BundleError(f"{where} has no {MANIFEST}: it is not a sweeps bundle (python -m sweeps.bundle export "
                          "writes one)")
    try:
        manifest = json.loads(zf.read(MANIFEST))
    except (ValueError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise BundleError(f"{where}: its {MANIFEST} cannot be read ({type(e).__name__}): the file is damaged; "
                          "copy it again from where it was exported") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{where} is not a sweeps bundle (its {MANIFEST} lacks format {FORMAT!r})")
    version = manifest.get("version")
    if not isinstance(version, int) or version < 1:
        raise BundleError(f"{where}: bundle format version {version!r} is not one this sweeps knows (1 to {VERSION})")
    if version > VERSION:
        raise BundleError(f"{where} is bundle format {version}, newer than this sweeps reads (up to {VERSION}): "
                          "upgrade sweeps where you import (pip install -U sweeps), or export with the older one")
    listed = manifest.get("members")
    if not isinstance(listed, dict) or not isinstance(manifest.get("runs"), list):
        raise BundleError(f"{where}: its {MANIFEST} lists no members or runs: the file is damaged")
    present = set(names) - {MANIFEST}
    if extra := sorted(present - set(listed)):
        raise BundleError(f"{where} holds {extra[0]!r}, which its manifest does not list: the file was altered; "
                          "export it again")
    if missing := sorted(set(listed) - present):
        raise BundleError(f"{where} lacks {missing[0]!r}, which its manifest lists: the file was cut short or "
                          "altered; copy it again")
    for name in sorted(listed):
        want = listed[name]
        try:
            got, size = _hash_member(zf, name)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            raise BundleError(f"{where}: member {name!r} cannot be read ({type(e).__name__}: {e}): the file was cut "
                              "short or damaged; copy it again") from None
        if not isinstance(want, dict) or got != want.get("sha256") or size != want.get("bytes"):
            raise BundleError(f"{where}: member {name!r} does not match its checksum in the manifest (sha256 "
                              f"{got[:12]}…, {size} bytes): the file was altered or damaged; copy it again")
    return Bundle(path, manifest, zf)


def _hash_member(zf: zipfile.ZipFile, name: str) -> tuple[str, int]:
    """sha256 (hex) and size of member ``name``, read in chunks. Raises what `zipfile` raises
    on a damaged member (its own CRC check included)."""
    h, size = hashlib.sha256(), 0
    with zf.open(name) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


class Writer:
    """Writes a bundle to ``path`` through ``path.partial``, renamed into place by `close` (a
    process stopped mid-export leaves no file that looks whole). Members are added with `add`;
    `close` writes the manifest with their checksums last."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self.zip = zipfile.ZipFile(self.partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1)
        self.members: dict[str, dict[str, Any]] = {}

    def add(self, name: str, data: bytes) -> str:
        """Add member ``name`` (refused where `unsafe`); returns its sha256 (hex).

        Raises:
            ValueError: an unsafe name or one added already.
        """
        if unsafe(name) or name in self.members or name == MANIFEST:
            raise ValueError(f"bundle member name {name!r} refused (unsafe or twice)")
        self.zip.writestr(name, data)
        sha = digest(data)
        self.members[name] = {"sha256": sha, "bytes": len(data)}
        return sha

    def add_file(self, name: str, source: Path) -> str:
        """Add the file ``source`` as member ``name`` (see `add`), streamed: a large artifact is
        never held in memory whole."""
        if unsafe(name) or name in self.members or name == MANIFEST:
            raise ValueError(f"bundle member name {name!r} refused (unsafe or twice)")
        h, size = hashlib.sha256(), 0
        with open(source, "rb") as src, self.zip.open(name, "w", force_zip64=True) as dst:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                size += len(chunk)
                dst.write(chunk)
        self.members[name] = {"sha256": h.hexdigest(), "bytes": size}
        return self.members[name]["sha256"]

    def close(self, manifest: dict[str, Any]) -> Path:
        """Write ``manifest`` (with ``format``, ``version`` and ``members`` filled in), close the
        zip and rename it into place; returns the bundle's path."""
        manifest = {"format": FORMAT, "version": VERSION, **manifest, "members": self.members}
        self.zip.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        self.zip.close()
        self.partial.replace(self.path)
        return self.path

    def abort(self) -> None:
        """Close and remove the partial file. Never raises."""
        try:
            self.zip.close()
        except Exception:  # noqa: BLE001 (a half-written zip: it is removed anyway)
            pass
        self.partial.unlink(missing_ok=True)
