"""``python -m sweeps.report --compare``: the same configurations side by side across groups of
runs — machines by default (tag ``sweeps.hardware``: host and the device model measured), or any
tag or param (``--by precision``, ``--by code``) — with each group's ratio to a baseline group.

A *configuration* is what a job ran with (its params) except the grouping key and bookkeeping
that does not change what is measured (paths, the repeat index and its seed, logging cadence): the jobs of one
configuration in one group are repeats, shown as median [min, max]. `compare` does the
grouping and raises on bad input; `sweeps.report.compare_tables` writes tables and figures."""
from __future__ import annotations

from dataclasses import dataclass

from sweeps import names
from sweeps.report.runs import JobRecord

# Params that say how a job was run, not what it measured; paths differ between machines.
# device.index: which GPU of a machine (a pool slot) — the same GPU model measures the same thing;
# seed: repeats with a seed each ('seed=${repeat}') are still repeats of one configuration.
_BOOKKEEPING = ("repeat", "seed", "resume", "experiment", "log_every_s", "telemetry.interval_s", "telemetry.figure",
                "dataset.root", "dataset.download", "dataset.if_missing", "device.index")
_BOOKKEEPING_PREFIXES = ("mlflow.", "checkpoint.")


@dataclass
class Comparison:
    """Selected jobs grouped: ``configs[configuration][group]`` = that group's runs of it."""

    by: list[str]  # the tags or params grouped by (aliases resolved)
    asked: str  # --by as given, with what it stands for: "machine (sweeps.hardware)"
    groups: list[str]  # group labels: the baseline, then the others in the order their first run started
    baseline: str
    configs: dict[str, dict[str, list[JobRecord]]]
    label_keys: list[str]  # the params that tell configurations apart
    warnings: list[str]


def _value(job: JobRecord, key: str) -> str:
    return job.tags.get(key, job.params.get(key, "-"))


def _measured(job: JobRecord, by: list[str]) -> dict[str, str]:
    """The job's params that define its configuration: all but bookkeeping and ``by`` (with its
    sub-keys: ``--by precision`` also drops ``precision.name``)."""
    return {k: v for k, v in job.params.items()
            if k not in _BOOKKEEPING and not k.startswith(_BOOKKEEPING_PREFIXES)
            and not any(k == b or k.startswith(b + ".") for b in by)}


def _differing(jobs: list[JobRecord]) -> list[str]:
    """Tags naming machine and software, then params, that take more than one value in ``jobs``."""
    tags = [*names.MACHINE_TAGS, *names.SOFTWARE_TAGS, names.LOADER_TAG]
    params = sorted({k for j in jobs for k in _measured(j, [])})
    return [k for k in (*tags, *params) if len({_value(j, k) for j in jobs}) > 1]


def resolve_by(jobs: list[JobRecord], by: list[str]) -> list[str]:
    """``--by`` keys as tag or param names (`sweeps.names.COMPARE_BY` aliases resolved).

    Raises:
        LookupError: a key that no selected run has as a tag or param.
    """
    keys = []
    for b in by:
        key = names.COMPARE_BY.get(b, b)
        if not any(key in j.tags or key in j.params for j in jobs):
            raise LookupError(f"unknown --by key {b!r}: no tag or param of the {len(jobs)} selected runs has "
                              f"that name; use one of {', '.join(names.COMPARE_BY)} or a tag/param that differs here: "
                              f"{', '.join(_differing(jobs)[:8]) or 'none'}")
        keys.append(key)
    return keys


def _label_keys(jobs: list[JobRecord], by: list[str]) -> list[str]:
    """Params that tell the configurations apart, in command-line order: a sub-key (``model.hidden``)
    is left out where its group's value (``model=mlp``) already says it."""
    measured = [_measured(j, by) for j in jobs]
    # a param some runs lack (logged only by a newer sweeps) tells nothing apart: only the values
    # of the runs that have it count, so older and newer runs of one configuration stay together
    differ = [k for k in sorted({k for m in measured for k in m}) if len({m[k] for m in measured if k in m}) > 1]

    def implied(key: str) -> bool:
        head = key.split(".")[0]
        if head == key or head not in differ:
            return False
        seen: dict = {}
        return all(seen.setdefault(m.get(head), m.get(key)) == m.get(key) for m in measured)

    swept = list(dict.fromkeys(k for j in jobs for k in j.swept))
    shown = [k for k in differ if not implied(k)]
    return sorted(shown, key=lambda k: (swept.index(k) if k in swept else len(swept), k))


def _sort_key(values: list[str]) -> tuple:
    """A configuration's label values, numbers as numbers (batch 16 before 128, params are text)."""
    out = []
    for value in values:
        try:
            out.append((0, float(value), ""))
        except ValueError:
            out.append((1, 0.0, value))
    return tuple(out)


def mismatches(configs: dict[str, dict[str, list[JobRecord]]], by: list[str], shown_by: str) -> list[str]:
    """One line per software tag whose value differs among the runs of one configuration, and one
    line for the machine tags (unless grouping by machine: they differ together): what else,
    besides ``by``, the comparison compares — each value with the groups that ran with it (the
    verdict's device comparison says it too, `sweeps.report.verdict`)."""
    def where(key: str) -> dict[str, set[str]]:  # value → the groups that ran with it
        found: dict[str, set[str]] = {}
        for by_group in configs.values():
            if len({_value(j, key) for js in by_group.values() for j in js}) > 1:
                for group, js in by_group.items():
                    for j in js:
                        found.setdefault(_value(j, key), set()).add(group)
        return found

    def line(what: str, values: dict[str, set[str]]) -> str:
        return (f"compared runs differ in {what}, not only in {shown_by}: "
                + "; ".join(f"{v} ({', '.join(sorted(gs))})" for v, gs in values.items()))

    out = [line(k, w) for k in names.SOFTWARE_TAGS if k not in by and (w := where(k))]
    if not any(k in names.MACHINE_TAGS for k in by):
        differ = {k: w for k in names.MACHINE_TAGS if k not in by and (w := where(k))}
        if differ:  # the machine: named by sweeps.hardware where it differs
            key = names.HARDWARE_TAG if names.HARDWARE_TAG in differ else next(iter(differ))
            out.append(line(f"machine ({', '.join(differ)})", differ[key]))
    return out


def compare(jobs: list[JobRecord], by: list[str], baseline: str | None = None) -> Comparison:
    """Group ``jobs`` by configuration and by the values of ``by`` (tag or param names, or aliases).

    Raises:
        LookupError: an unknown ``by`` key, a single group (nothing to compare: the message names
            keys that do differ), or a ``baseline`` that is no group's label (or its unique prefix).
    """
    keys = resolve_by(jobs, by)
    group_of = {j.run_id: ", ".join(_value(j, k) for k in keys) for j in jobs}
    groups = list(dict.fromkeys(group_of[j.run_id] for j in jobs))
    if len(groups) < 2:
        raise LookupError(f"all {len(jobs)} selected runs have {'/'.join(by)} = {groups[0]!r}: nothing to compare; "
                          f"--by a key that differs among them: {', '.join(_differing(jobs)[:8]) or 'none'}")
    if baseline is not None and baseline not in groups:
        hits = [g for g in groups if g.startswith(baseline)]
        if len(hits) != 1:
            raise LookupError(f"--baseline {baseline!r} is not one of the groups by {'/'.join(by)}: "
                              + ", ".join(repr(g) for g in groups))
        baseline = hits[0]
    baseline = baseline or groups[0]
    groups = [baseline, *(g for g in groups if g != baseline)]  # the baseline's column first
    label_keys = _label_keys(jobs, keys)
    configs: dict[str, dict[str, list[JobRecord]]] = {}
    order: dict[str, tuple] = {}
    for j in jobs:
        values = [_measured(j, keys).get(k, "-") for k in label_keys]
        label = " ".join(f"{k}={v}" for k, v in zip(label_keys, values)) or "all"
        order[label] = _sort_key(values)
        configs.setdefault(label, {}).setdefault(group_of[j.run_id], []).append(j)
    configs = {c: configs[c] for c in sorted(configs, key=order.__getitem__)}
    asked = ", ".join(b if b == k else f"{b} ({k})" for b, k in zip(by, keys))
    return Comparison(keys, asked, groups, baseline, configs, label_keys,
                      mismatches(configs, keys, "/".join(by)))
