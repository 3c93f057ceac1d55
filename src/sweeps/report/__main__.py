"""``python -m sweeps.report``: a sweep's MLflow runs → the reference tables, comparisons and plots,
as one Markdown file (also logged to the sweep's parent run under ``report/``).

    python -m sweeps.report                       # the latest sweep in ./mlruns
    python -m sweeps.report --experiment offline_mnist   # an MLflow experiment, or a preset's name
    python -m sweeps.report --run-id <parent run id> --out reports/study1
    python -m sweeps.report --experiment batch_lr_grid --target 0.88 --cost-per-hour 2.5
    python -m sweeps.report --compare --experiment phase_times          # machine A vs machine B
    python -m sweeps.report --compare --sweep <id> --sweep <id> --by precision --baseline fp32
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from mlflow import MlflowClient

from sweeps import names
from sweeps.report import best_lr, compare, compare_tables, cost, plots, verdict, verdict_text
from sweeps.report.runs import find_sweep, history, load_jobs, max_batches, resolve_experiment, varied_keys
from sweeps.report.tables import (COMPARE_KEYS, comparison, inference_table, max_batch_table, reference_tables,
                                  scaling_efficiency)
from sweeps.report.selection import Selection, select_jobs
from sweeps.tracking.store.store import open_client, resolve_uri


def write_report(client: MlflowClient, parent, out: Path, args: argparse.Namespace | None = None) -> Path:
    """Write ``out/report.md`` and its figures for the sweep ``parent``; returns the report path.
    ``args``: the command line's ``--target`` (re-target from the logged curves,
    `sweeps.report.retarget`) and ``--cost-per-hour`` (price the logged times,
    `sweeps.report.cost.with_price`); either one leaves the parent run's verdict tags as the
    sweep set them."""
    out.mkdir(parents=True, exist_ok=True)
    jobs = load_jobs(client, parent)
    adjusted = []
    if args is not None and args.target is not None:
        from sweeps.report import retarget

        jobs = retarget.retarget(client, jobs, args.target, args.target_metric, args.target_mode)
        metric, mode = retarget.default_metric(jobs)
        adjusted.append(f"re-targeted from the logged curves: {metric} {'≥' if mode == 'max' else '≤'} {args.target:g}")
    if args is not None and args.cost_per_hour is not None:
        jobs = cost.with_price(jobs, args.cost_per_hour, args.currency)
        adjusted.append(f"priced at --cost-per-hour {args.cost_per_hour}")
    swept = varied_keys(jobs)
    tags = jobs[0].tags if jobs else parent.data.tags
    tag = lambda key: tags.get(key, "?")  # noqa: E731
    lines = [f"# Sweep report: {parent.info.run_name}", "",
             f"- experiment id {parent.info.experiment_id}, sweep run `{parent.info.run_id}`, {len(jobs)} jobs",
             f"- command: `{parent.data.tags.get(names.COMMAND_TAG, '?')}`",
             f"- machine: {tag(names.ENV_CPU)} ({tag(names.ENV_CORES)} cores, {tag(names.ENV_RAM_GB)} GB),"
             f" GPUs: {tag(names.ENV_GPUS)}; torch {tag(names.ENV_TORCH)}, commit {tag(names.ENV_GIT_COMMIT)[:12]}",
             f"- generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
             *(f"- {a} (the sweep's own verdict stays on its run)" for a in adjusted), ""]
    fits = max_batches(client, parent.info.experiment_id)
    findings = verdict.findings(jobs, fits)
    lines += verdict_text.markdown(findings)
    if not adjusted:
        verdict_text.log_to_parent(client, parent.info.run_id, findings)
    for label, table in reference_tables(jobs, fits):
        lines += [f"## {label}", "", table, ""]
    if (table := max_batch_table(jobs)) is not None:
        lines += ["## Largest batch that fits", "", table, ""]
    if (table := inference_table(jobs)) is not None:
        lines += ["## Inference timing", "", "`naive` times the host enqueueing CUDA work, not the work: "
                  "shown only to show its error.", "", table, ""]
    for key in (k for k in COMPARE_KEYS if k in swept):
        lines += [f"## Comparison over {key}", "", comparison(jobs, key), ""]
    if (table := scaling_efficiency(jobs)) is not None:
        lines += ["## Data-parallel scaling", "", "throughput on N processes / (N × throughput on 1)", "", table, ""]
    figures = [
        ("Epoch time vs batch size", plots.versus_batch(jobs, names.MEDIAN_EPOCH_S, "median epoch time [s]",
                                                        out / "epoch_time_vs_batch.png", logy=True)),
        ("Accuracy vs batch size", plots.versus_batch(jobs, names.FINAL_ACC, "test accuracy",
                                                      out / "accuracy_vs_batch.png")),
        ("Steps and examples to target vs batch size", _to_target(jobs, out / "to_target.png")),
        ("Best learning rate vs batch size", best_lr.figure(jobs, out / "best_lr_vs_batch.png")),
        ("Phase breakdown per iteration", plots.phase_breakdown(jobs, out / "phases.png")),
        ("Where a step goes (the diagnosis)", plots.step_diagnosis(jobs, out / "diagnosis.png")),
        ("Energy per epoch", plots.per_epoch(jobs, lambda r, k: history(client, r, k), names.GPU_ENERGY_J,
                                             "energy per epoch [J]", out / "energy_per_epoch.png")),
        ("Mean GPU power per epoch", plots.per_epoch(jobs, lambda r, k: history(client, r, k), names.GPU_POWER_W,
                                                     "mean power [W]", out / "power_per_epoch.png")),
        ("Inference time by timing method", plots.inference_by_method(jobs, out / "inference_timing.png")),
    ]
    for title, path in figures:
        if path is not None:
            lines += [f"## {title}", "", f"![{title}]({path.name})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    client.log_artifacts(parent.info.run_id, str(out), "report")
    return report


def _to_target(jobs, path: Path) -> Path | None:
    """The steps-to-target figure, each batch at its best lr where the sweep varies the lr."""
    if not best_lr.varies_lr(jobs):
        return plots.to_target(jobs, path)
    kept, marks = best_lr.tuned(jobs)
    return plots.to_target(kept, path, best_lr.EXCLUDE, marks)


def _compare(client: MlflowClient, args: argparse.Namespace) -> int:
    """``--compare``: select, group, write ``compare.md``; warnings on stderr, one line each.

    Raises:
        LookupError, ValueError: bad input (`select_jobs`, `compare.compare`).
    """
    selection = Selection(args.experiment, [*args.sweep, *([args.run_id] if args.run_id else [])], args.tag,
                          args.filter)
    jobs = select_jobs(client, selection)
    result = compare.compare(jobs, args.by or [names.COMPARE_DEFAULT_BY], args.baseline)
    out = args.out or Path("reports") / f"compare-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    report = compare_tables.write_comparison(result, f"{selection.describe()} in {client.tracking_uri}", out)
    print(report.read_text())
    for warning in result.warnings:
        print(f"sweeps.report: warning: {warning}", file=sys.stderr)
    print(f"\ncomparison: {report}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2: bad input or nothing to report, one line on
    stderr naming it)."""
    ap = argparse.ArgumentParser(prog="python -m sweeps.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", action="append", default=[], metavar="NAME",
                    help="an MLflow experiment, or a preset (+experiment=NAME) for the experiment it logs to "
                         "(default: the latest sweep of any); --compare takes several")
    ap.add_argument("--config-dir", metavar="DIR", help="your --config-dir, where --experiment names a preset of yours")
    ap.add_argument("--run-id", help="the sweep's parent run id")
    ap.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlruns/mlflow.db")
    ap.add_argument("--out", type=Path, help="output folder (default: reports/<first 12 characters of the sweep run id>, "
                                             "reports/compare-<UTC time> with --compare)")
    again = ap.add_argument_group("asking the logged runs another question (nothing is trained again)")
    again.add_argument("--target", type=float, metavar="VALUE",
                       help="time and steps to this quality instead of the sweep's target, from each job's "
                            "epochs.csv (e.g. --target 0.88)")
    again.add_argument("--target-metric", metavar="METRIC",
                       help="the metric --target reads (default: the sweep's target.metric, else test/acc or "
                            "test/rmse)")
    again.add_argument("--target-mode", choices=names.TARGET_MODES,
                       help="max: reached when the metric is >= VALUE; min: <= (default: the sweep's, else by "
                            "the metric)")
    again.add_argument("--cost-per-hour", metavar="PRICE",
                       help="price of a device-hour for the money figures: 2.5 for every device, or cpu=0.1,cuda=2.5")
    again.add_argument("--currency", help="a label for the money figures, e.g. USD")
    group = ap.add_argument_group("comparing runs across sweeps and machines")
    group.add_argument("--compare", action="store_true",
                       help="the selected runs side by side, a column per --by value (default: machine)")
    group.add_argument("--sweep", action="append", default=[], metavar="ID",
                       help="a sweep's parent run id (repeat it)")
    group.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                       help="runs with this tag (repeat it)")
    group.add_argument("--filter", metavar="FILTER", help="MLflow search filter, e.g. \"tags.`env.host` = 'gpu-a'\"")
    group.add_argument("--by", action="append", metavar="KEY",
                       help=f"group by this tag or param, or {', '.join(names.COMPARE_BY)} (repeat it)")
    group.add_argument("--baseline", metavar="VALUE", help="the group ratios are taken to (default: the first)")
    args = ap.parse_args(argv)
    try:
        client = open_client(resolve_uri(args.tracking_uri, create=False))  # a sweep may be creating it
        for i, name in enumerate(args.experiment):
            args.experiment[i], note = resolve_experiment(client, name, args.config_dir)
            if note:
                print(f"sweeps.report: {note}", file=sys.stderr)
        if args.compare:
            return _compare(client, args)
        given = [f for f in ("sweep", "tag", "filter", "by", "baseline") if getattr(args, f)]
        if given:
            raise ValueError(f"--{given[0]} is for comparing runs: add --compare")
        if args.cost_per_hour is not None:
            args.cost_per_hour = cost.parse_price(args.cost_per_hour)
        if args.target is None and (args.target_metric or args.target_mode):
            raise ValueError("--target-metric and --target-mode go with --target VALUE, e.g. --target 0.88")
        if len(args.experiment) > 1:
            raise ValueError("a sweep report reads one --experiment; several go with --compare")
        parent = find_sweep(client, args.experiment[0] if args.experiment else None, args.run_id)
    except (LookupError, ValueError) as e:
        print(f"sweeps.report: error: {e}", file=sys.stderr)
        return 2
    report = write_report(client, parent, args.out or Path("reports") / parent.info.run_id[:12], args)
    print(report.read_text())
    print(f"\nreport: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
