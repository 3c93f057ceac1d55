"""``python -m sweeps.bundle``: carry a sweep's MLflow runs to another store as one file.

    python -m sweeps.bundle export --experiment NAME [--sweep ID]... -o FILE [--tracking-uri URI]
    python -m sweeps.bundle import FILE [--tracking-uri URI] [--experiment NAME]

Exit status: 0 done; 1 the import failed (run it again to complete it); 2 bad input (a bad option, no such experiment or sweep, a bundle refused:
one line on stderr, nothing written); 130 interrupted (an import: run it again to complete it).
Arguments are checked before mlflow is imported: ``--help`` and a bad option answer at once.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

PROG = "python -m sweeps.bundle"


class _Parser(argparse.ArgumentParser):
    """argparse with its error as one line: ``python -m sweeps.bundle: error: ...`` and what works."""

    def error(self, message: str) -> NoReturn:
        hint = f"; see {self.prog} --help"
        self.exit(2, f"{PROG}: error: {message}{hint}\n")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description="Carry a sweep's MLflow runs to another store as one file.")
    sub = ap.add_subparsers(dest="command", metavar="{export,import}", parser_class=_Parser)
    ex = sub.add_parser("export", help="a sweep's runs from a store into one bundle file",
                        description="Write the runs of a sweep (its parent and job runs, every metric value, params, "
                                    "tags, artifacts, the machines) to one zip file.")
    ex.add_argument("--experiment", required=True, metavar="NAME", help="the MLflow experiment the sweep logged to")
    ex.add_argument("--sweep", action="append", default=[], metavar="ID",
                    help="a sweep's parent run id (repeat it; default: the experiment's latest sweep)")
    ex.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle file to write (a zip)")
    ex.add_argument("--tracking-uri", metavar="URI", help="the store to read (default: $MLFLOW_TRACKING_URI, "
                                                          "else sqlite:///./mlruns/mlflow.db)")
    im = sub.add_parser("import", help="a bundle's runs into a store, each once",
                        description="Create a bundle's runs in a store: names, params, tags, every metric value, "
                                    "artifacts, statuses; running it again stores nothing twice and completes an "
                                    "interrupted import.")
    im.add_argument("file", metavar="FILE", help="a bundle written by python -m sweeps.bundle export")
    im.add_argument("--tracking-uri", metavar="URI", help="the store to write (default: $MLFLOW_TRACKING_URI, "
                                                          "else sqlite:///./mlruns/mlflow.db, created where missing)")
    im.add_argument("--experiment", metavar="NAME", help="the experiment to import into (default: the one it was "
                                                         "exported from)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (see the module docstring)."""
    ap = _parser()
    args = ap.parse_args(argv)
    if args.command is None:
        ap.error("say what to do: export or import")
    if args.command == "export" and not args.output.strip():
        ap.error("-o FILE is empty: give the bundle file to write, e.g. -o sweep.zip")
    from sweeps.bundle.layout import BundleError
    from sweeps.errors import UsageError

    try:
        if args.command == "export":
            from sweeps.bundle.export import export_bundle

            done = export_bundle(args.experiment, args.output, args.sweep, args.tracking_uri)
            print(f"exported {done.runs} run(s) of {len(done.sweeps)} sweep(s), {done.values:,} metric values, "
                  f"{done.artifacts} artifact(s) to {done.path} in {done.seconds:.1f} s")
            return 0
        from sweeps.bundle.importer import import_bundle

        done = import_bundle(args.file, args.tracking_uri, args.experiment)
    except (BundleError, UsageError, LookupError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # an import worker failed: the rerun completes it
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.command == "import":
            print(f"{PROG}: interrupted: run the same import again to complete it (nothing is stored twice)",
                  file=sys.stderr)
        return 130
    print(f"imported {args.file} into experiment {done.experiment!r} of {done.tracking_uri}: {done.created} run(s) "
          f"created, {done.completed} completed, {done.skipped} already there"
          + (f", {done.native} this store's own" if done.native else "")
          + f"; {done.values:,} metric values, {done.artifacts} artifact(s) in {done.seconds:.1f} s; "
          f"machines: {', '.join(done.hosts) or '?'}")
    if len(done.hosts) and done.created + done.completed + done.skipped:
        print(f"compare: python -m sweeps.report --compare --by machine --experiment {done.experiment} "
              f"--tracking-uri {done.tracking_uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
