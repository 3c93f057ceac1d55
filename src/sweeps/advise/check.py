"""The jobs to check, their A/B sweeps, running them and reading the gain back.

A job's own overrides (`job_overrides`): a sweep's job is its parent's command (tag
``sweeps.command``: the fixed overrides) with the job's swept values (tag ``sweeps.overrides``) put
over it; a single run is its ``sweeps.overrides`` alone. An A/B sweep (`Check.overrides`) is those
overrides less the advised key, the repeat, the resume switch, the sweep's folder and the sweeper's
order, then ``KEY=ORIGINAL,ADVISED repeat=R+1,...,R+N resume=false`` and the store and experiment of
the diagnosed run: repeats after the original sweep's own, run afresh, so nothing is skipped as
already done, interleaved by the project's sweeper.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sweeps import names
from sweeps.advise.gain import Gain
from sweeps.report.runs import resolve_experiment, sweep_runs
from sweeps.tracking.writer.naming import parse_overrides

if TYPE_CHECKING:
    from mlflow import MlflowClient

# keys of the job's command the A/B sweep sets itself (or leaves to its defaults)
_OWN_KEYS = {"repeat", "resume", "hydra.sweep.dir", "hydra.run.dir", "hydra.sweeper.interleave", "hydra/sweeper",
             "mlflow.tracking_uri", "mlflow.experiment"}
_CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


class BadInput(Exception):
    """Bad input: one line naming the option and what exists (exit status 2)."""


@dataclass
class Check:
    """One advised override of one diagnosed job, and the A/B sweep that measures it.

    Attributes:
        run: the diagnosed job's MLflow ``Run``.
        override: the advice, ``key=value``.
        original: the job's own value of the key, as an override writes it (``false``, ``null``, ``32``).
        base: the job's own overrides, as typed (``+`` and ``~`` kept).
        config_dir: the job's ``--config-dir`` (None: none).
        repeats: the A/B sweep's repeat numbers.
        tracking_uri, experiment: where the diagnosed run is, and the A/B runs go.
    """

    run: object
    override: str
    original: str
    base: list[str]
    config_dir: str | None
    repeats: list[int]
    tracking_uri: str
    experiment: str
    gain: Gain | None = field(default=None)

    @property
    def key(self) -> str:
        return self.override.split("=", 1)[0]

    @property
    def advised(self) -> str:
        return self.override.split("=", 1)[1]

    def overrides(self) -> list[str]:
        """The A/B multirun's overrides (what follows ``python -m sweeps -m``)."""
        kept = [w for w in self.base if _key(w) not in _OWN_KEYS | {self.key}]
        prefix = next((w[: len(w) - len(w.lstrip("+~"))] for w in self.base if _key(w) == self.key), "")
        return [*kept, f"{prefix}{self.key}={self.original},{self.advised}",
                f"repeat={','.join(map(str, self.repeats))}", "resume=false",
                f"mlflow.tracking_uri={self.tracking_uri}", f"mlflow.experiment={self.experiment}"]

    def command(self) -> str:
        """The A/B sweep as one command line."""
        cd = ["--config-dir", self.config_dir] if self.config_dir else []
        return " ".join(shlex.quote(w) for w in ["python", "-m", "sweeps", *cd, "-m", *self.overrides()])


def _key(word: str) -> str:
    return word.split("=", 1)[0].lstrip("+~")


def _words(text: str) -> list[str]:
    """The overrides in ``text``, each as typed: a word that holds one override stays as it is
    (``+experiment=x``, ``batch=32,64``); Hydra's comma-joined form is split
    (`sweeps.tracking.writer.naming.parse_overrides`)."""
    out = []
    for word in text.split():
        pairs = parse_overrides(word)
        out += [word] if len(pairs) == 1 else [f"{k}={v}" for k, v in pairs]
    return out


def job_overrides(client: MlflowClient, run) -> tuple[list[str], str | None, object | None]:
    """``(overrides, config_dir, parent)`` of the job ``run``: its parent's command (tag
    ``sweeps.command``, its flags left out but ``--config-dir``) with the job's own swept values
    (tag ``sweeps.overrides``) put over the same keys; for a run of its own, its
    ``sweeps.overrides`` alone. ``parent``: the sweep's parent ``Run`` (None for a single run)."""
    own = _words(run.data.tags.get(names.OVERRIDES_TAG, ""))
    parent_id = run.data.tags.get(names.PARENT_RUN_TAG)
    if not parent_id:
        return own, None, None
    parent = client.get_run(parent_id)
    words = parent.data.tags.get(names.COMMAND_TAG, "").split()
    words = words[3:] if words[:3] == ["python", "-m", "sweeps"] else words
    base, config_dir, skip = [], None, False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in _CONFIG_DIR_FLAGS and i + 1 < len(words):
            config_dir, skip = words[i + 1], True
        elif word.startswith("--config-dir="):
            config_dir = word.split("=", 1)[1]
        elif not word.startswith("-"):
            base += _words(word)
    swept = {_key(w): w for w in own}
    out = [swept.pop(_key(w), w) for w in base]
    return out + list(swept.values()), config_dir, parent


def override_value(text: str | None) -> str:
    """A run's param as an override writes it: ``False`` → ``false``, ``None`` → ``null``."""
    return {"False": "false", "True": "true", "None": "null", None: "null"}.get(text, text)


def advice_of(run) -> list[str]:
    """The run's advised overrides (tag ``diag.advice``, "; "-joined)."""
    return [a.strip() for a in run.data.tags.get(names.DIAG_ADVICE_TAG, "").split(";") if "=" in a]


def _label(run) -> str:
    return f"{run.info.run_id} ({run.info.run_name})"


def diagnosed(client: MlflowClient, experiment_id: str) -> list:
    """The experiment's runs with advice (tag ``diag.advice``), newest first, A/B runs left out."""
    found = client.search_runs([experiment_id], f"tags.`{names.DIAG_ADVICE_TAG}` LIKE '%=%'",
                               order_by=["attributes.start_time DESC"], max_results=1000)
    return [r for r in found if names.DIAG_CHECKS_TAG not in r.data.tags]


def select(client: MlflowClient, experiment: str, run_ids: list[str], sweep_ids: list[str]) -> tuple[str, list]:
    """``(experiment name, runs)``: the diagnosed runs to check — ``run_ids``, the jobs of the
    sweeps ``sweep_ids``, or by default the newest diagnosed job's sweep (its jobs with advice;
    a single run alone), A/B sweeps passed over.

    Raises:
        BadInput: no such experiment, run or sweep, or none of them has advice.
    """
    try:
        name, _ = resolve_experiment(client, experiment)
    except LookupError as e:
        raise BadInput(f"--experiment {experiment}: {e}") from None
    exp = client.get_experiment_by_name(name)
    candidates = diagnosed(client, exp.experiment_id)
    listed = ", ".join(_label(r) for r in candidates[:5]) or "none"
    chosen = []
    for run_id in run_ids:
        run = _get(client, run_id)
        if run is None or run.info.experiment_id != exp.experiment_id:
            raise BadInput(f"--run {run_id}: no such run in experiment {name!r} of {client.tracking_uri} "
                           f"(its runs with advice: {listed})")
        if not advice_of(run):
            raise BadInput(f"--run {run_id}: no advice to check (diag.bottleneck: "
                           f"{run.data.tags.get(names.BOTTLENECK_TAG, 'not diagnosed')}); its runs with advice: {listed}")
        chosen.append(run)
    for sweep_id in sweep_ids:
        parent = _get(client, sweep_id)
        if parent is None or parent.info.experiment_id != exp.experiment_id \
                or parent.data.tags.get(names.KIND_TAG) != "sweep":
            sweeps = client.search_runs([exp.experiment_id], f"tags.`{names.KIND_TAG}` = 'sweep'",
                                        order_by=["attributes.start_time DESC"], max_results=5)
            raise BadInput(f"--sweep {sweep_id}: no such sweep in experiment {name!r} (its sweeps: "
                           f"{', '.join(_label(s) for s in sweeps) or 'none'})")
        jobs = [j.run for j in sweep_runs(client, parent) if advice_of(j.run)]
        if not jobs:
            raise BadInput(f"--sweep {sweep_id}: none of its jobs has advice (diag.advice); the experiment's "
                           f"runs with advice: {listed}")
        chosen += jobs
    if not run_ids and not sweep_ids:
        if not candidates:
            raise BadInput(f"--experiment {experiment}: no diagnosed job with advice (tag diag.advice) in "
                           f"experiment {name!r} of {client.tracking_uri}")
        newest = candidates[0]
        parent = newest.data.tags.get(names.PARENT_RUN_TAG)
        chosen = [r for r in reversed(candidates) if parent and r.data.tags.get(names.PARENT_RUN_TAG) == parent] \
            or [newest]
    seen: set[str] = set()
    return name, [r for r in chosen if not (r.info.run_id in seen or seen.add(r.info.run_id))]


def _get(client: MlflowClient, run_id: str):
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    return None if run.info.lifecycle_stage == "deleted" else run


def plan(client: MlflowClient, experiment: str, runs: list, repeats: int, only: list[str]) -> list[Check]:
    """One `Check` per advised override of each run in ``runs`` (only the keys ``only`` where
    given), each with ``repeats`` repeats numbered after the original sweep's.

    Raises:
        BadInput: ``only`` names no key any of the runs was advised on.
    """
    checks = []
    for run in runs:
        base, config_dir, parent = job_overrides(client, run)
        used = [run.data.params.get("repeat", "0")]
        if parent is not None:
            used += [j.run.data.params.get("repeat", "0") for j in sweep_runs(client, parent)]
        start = max((int(r) for r in used if r.lstrip("-").isdigit()), default=0) + 1
        for override in advice_of(run):
            key = override.split("=", 1)[0]
            if only and key not in only:
                continue
            checks.append(Check(run, override, override_value(run.data.params.get(key)), base, config_dir,
                                list(range(start, start + repeats)), client.tracking_uri, experiment))
    if only and not checks:
        advised = sorted({a.split("=", 1)[0] for r in runs for a in advice_of(r)})
        raise BadInput(f"--only {','.join(only)}: no advice on that key (advised keys: {', '.join(advised)})")
    return checks


def measure(client: MlflowClient, check: Check, run_ids: list[str]) -> Gain:
    """The `Gain` of ``check`` from its A/B runs ``run_ids``: each run's ``time/median_epoch_s``
    in the arm its value of the key puts it (the original's value, or the advice's)."""
    original, advised, failed = [], [], []
    for run_id in run_ids:
        run = client.get_run(run_id)
        arm = original if override_value(run.data.params.get(check.key)) == check.original else advised
        t = run.data.metrics.get(names.MEDIAN_EPOCH_S)
        outcome = run.data.tags.get(names.OUTCOME_TAG, "?")
        if outcome == names.OK and t is not None:
            arm.append(t)
        else:
            which = "original" if arm is original else "advised"
            error = run.data.tags.get(names.ERROR_TAG, "")
            failed.append(f"{which} run {outcome}" + (f" ({error})" if error else ""))
    return Gain(check.override, tuple(original), tuple(advised), "; ".join(dict.fromkeys(failed)))


def run_check(client: MlflowClient, check: Check) -> Gain:
    """Run ``check``'s A/B sweep in this process (`sweeps.api.run`, the command line's own
    entry), read its runs back, tag the diagnosed run with the result (``diag.checked.<key>``) and
    the A/B runs with the run they check (``diag.checks``).

    Raises:
        sweeps.errors.UsageError: the sweep refused its overrides (its one line).
        KeyboardInterrupt: Ctrl-C.
    """
    from sweeps.api import run

    records = run(check.overrides(), config_dir=check.config_dir, multirun=True)
    ids = [r["run_id"] for r in records if r.get("run_id") and r.get("outcome") != names.SKIPPED]
    gain = measure(client, check, ids)
    sweep = next((r.get("sweep") for r in records if r.get("sweep")), "")
    for run_id in [*ids, *([sweep] if sweep else [])]:
        client.set_tag(run_id, names.DIAG_CHECKS_TAG, check.run.info.run_id)
    value = f"{gain.text()}; A/B sweep {sweep or '?'}"
    client.set_tag(check.run.info.run_id, names.diag_checked(check.key), value[: names.MAX_TAG_VAL_LENGTH])
    check.gain = gain
    return gain
