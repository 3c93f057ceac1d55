"""``python -m sweeps.advise``: run each diagnosed job's advice as a paired A/B beside the job and
say what it gained.

    python -m sweeps.advise --experiment NAME                 # the newest diagnosed job's sweep
    python -m sweeps.advise --experiment NAME --run RUN_ID --only batch --repeats 3
    python -m sweeps.advise --experiment NAME --sweep PARENT_ID --dry-run

Prints one line per advice (``dataset.num_workers=1: 1.80× [1.50, 2.10] per epoch, 3 repeats each
...``, or ``...: no gain beyond noise``) and a final line; tags the diagnosed run
``diag.checked.<key>``. Exit status: 0 done; 1 an A/B sweep ended without a measurement;
2 bad input (one line on stderr naming the option and what exists); 130 interrupted. Arguments are
checked before torch or MLflow are imported: ``--help`` and a bad option answer at once.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

PROG = "python -m sweeps.advise"


class _Parser(argparse.ArgumentParser):
    """argparse with its error as one line: ``python -m sweeps.advise: error: ...`` and what works."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message}; see {PROG} --help\n")


def _repeats(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ≥ 1 (3 makes a pick a rank test at p = 0.05)")
    return value


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description="Run each diagnosed job's advice (tag diag.advice) as a paired A/B "
                 "beside the job's own configuration, interleaved repeats, and report the measured gain in "
                 "median epoch time with its range.")
    ap.add_argument("--experiment", required=True, metavar="NAME", help="the MLflow experiment (or a preset's name)")
    ap.add_argument("--run", action="append", default=[], metavar="RUN_ID",
                    help="a diagnosed job's run id (repeat it; default: the newest diagnosed job's sweep)")
    ap.add_argument("--sweep", action="append", default=[], metavar="PARENT_ID",
                    help="a sweep's parent run id: each of its jobs with advice (repeat it)")
    ap.add_argument("--only", action="append", default=[], metavar="KEY",
                    help="check only the advice on this key, e.g. batch (repeat it; default: every advice)")
    ap.add_argument("--repeats", type=_repeats, default=3, metavar="N", help="repeats of each arm (default 3)")
    ap.add_argument("--tracking-uri", metavar="URI", help="the store (default: $MLFLOW_TRACKING_URI, else "
                                                          "sqlite:///./mlruns/mlflow.db)")
    ap.add_argument("--dry-run", action="store_true", help="print the A/B sweeps it would run, run nothing")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    from sweeps import names
    from sweeps.advise import check, gain
    from sweeps.errors import UsageError
    from sweeps.tracking.store.store import open_client, resolve_uri

    try:
        client = open_client(resolve_uri(args.tracking_uri, create=False))
        experiment, runs = check.select(client, args.experiment, args.run, args.sweep)
        checks = check.plan(client, experiment, runs, args.repeats, args.only)
    except check.BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"{PROG}: error: --tracking-uri {args.tracking_uri or '(default)'}: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        for c in checks:
            print(f"{c.override} for run {c.run.info.run_id} ({c.run.info.run_name}): would run\n  {c.command()}")
        print(f"{len(checks)} A/B sweep(s) of {2 * args.repeats} jobs each; nothing run (--dry-run)")
        return 0
    gains = []
    try:
        for i, c in enumerate(checks, 1):
            print(f"advise [{i}/{len(checks)}] {c.override} for run {c.run.info.run_id} ({c.run.info.run_name}):\n"
                  f"  {c.command()}", flush=True)
            gains.append(check.run_check(client, c))
    except UsageError as e:
        print(f"{PROG}: error: the A/B sweep of {checks[len(gains)].override} refused its overrides: {e}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted: {len(gains)} of {len(checks)} advice checked (their tags are written)",
              file=sys.stderr)
        return 130
    print()
    for c, g in zip(checks, gains):
        print(g.line() + (f"  [run {c.run.info.run_id[:12]}]" if len(runs) > 1 else ""))
    print(gain.summary(gains) + f"; tags {names.DIAG_CHECKED_TAG_PREFIX}<key> on the diagnosed run{'s' * (len(runs) > 1)}")
    return 1 if any(g.verdict == gain.UNMEASURED for g in gains) else 0


if __name__ == "__main__":
    sys.exit(main())
