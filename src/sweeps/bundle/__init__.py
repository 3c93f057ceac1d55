"""Bundles: a sweep's runs carried between MLflow stores as one file (``python -m sweeps.bundle``).

- `export` — `export_bundle`: a sweep's runs, their metrics (every value), params, tags,
  artifacts, journals where still there, and the machines they ran on, read from a store through
  MLflow's public API into one zip;
- `importer` — `import_bundle`: the runs created in another store, each run and each (metric,
  step) once however often (and however interrupted) the import runs;
- `layout` — the file's members and manifest, and `open_verified`, which refuses a file that is
  cut short, altered, of a newer format or names a path outside its folder (`BundleError`);
- `progress` — the one line of progress on a terminal.

Imports: `sweeps.tracking`, `sweeps.report` (the sweep's runs), `sweeps.names`; never torch or
training code, and nothing imports it (import-linter contracts in pyproject.toml). Importing this
package loads nothing heavy: `export_bundle` and `import_bundle` import mlflow when called.
"""
from __future__ import annotations

from typing import Any

from sweeps.bundle.layout import VERSION, BundleError

__all__ = ["VERSION", "BundleError", "export_bundle", "import_bundle"]


def export_bundle(*args: Any, **kwargs: Any):
    """`sweeps.bundle.export.export_bundle` (imported when called)."""
    from sweeps.bundle.export import export_bundle as run

    return run(*args, **kwargs)


def import_bundle(*args: Any, **kwargs: Any):
    """`sweeps.bundle.importer.import_bundle` (imported when called)."""
    from sweeps.bundle.importer import import_bundle as run

    return run(*args, **kwargs)
