"""Read a sweep back from MLflow for the report: the parent run, its jobs, what was swept.

A sweep's jobs (`sweep_runs`) are its child runs plus the runs it reused without running
them: the earlier done run of a job it skipped (tag ``sweeps.skipped.<config hash>`` on the
parent) and the run of a job another live process was running (``sweeps.running_elsewhere.<config
hash>``), each where it stood in the sweep. The sweep-end summary and verdict, the report and
[`sweeps.results`][sweeps.report.results.results] all read them from here.

MLflow params are strings and sort as text ("1024" < "128"), so every number the report sorts or
plots by comes from a metric (``batch``, ``lr``), never from a param.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sweeps import names
from sweeps.tracking.store import store
from sweeps.tracking.writer.naming import parse_overrides

if TYPE_CHECKING:  # a sweep's end reads its jobs through its store process's client: no mlflow import there
    from mlflow import MlflowClient


@dataclass
class JobRecord:
    """One job of a sweep as the report sees it."""

    run_id: str
    name: str
    outcome: str
    error: str
    swept: dict[str, str]  # the swept key=value pairs of this job, in command-line order
    params: dict[str, str]
    metrics: dict[str, float]  # the latest value of each metric
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def batch(self) -> float | None:
        return self.metrics.get(names.BATCH)

    def epoch_time(self) -> tuple[float | None, bool]:
        """``(seconds, first)``: the median epoch time from epoch 2 (``time/median_epoch_s``), or
        for a 1-epoch job, which has no epochs 2+, its first epoch's time (``first`` True: that
        epoch holds warm-up, so the report marks it); ``(None, False)`` when neither was logged."""
        if names.MEDIAN_EPOCH_S in self.metrics:
            return self.metrics[names.MEDIAN_EPOCH_S], False
        if names.FIRST_EPOCH_S in self.metrics:
            return self.metrics[names.FIRST_EPOCH_S], True
        return None, False

    def label(self, exclude: tuple[str, ...] = ()) -> str:
        """``key=value`` of the swept keys other than ``exclude`` (``all`` when none are left)."""
        return " ".join(f"{k}={v}" for k, v in self.swept.items() if k not in exclude) or "all"


def resolve_experiment(client: MlflowClient, name: str, config_dir: str | None = None) -> tuple[str, str]:
    """``(experiment, note)``: ``name`` itself where the store has an MLflow experiment of that
    name, else the experiment the preset ``name`` logs to (``conf/experiment/`` or
    ``config_dir/experiment/``; `experiment_of`) with a one-line
    ``note`` saying so ('' for an experiment's own name).

    Raises:
        LookupError: neither an experiment nor a preset of that name, or a preset whose
            experiment has no runs in the store yet (message names what would work).
    """
    if client.get_experiment_by_name(name) is not None:
        return name, ""
    from sweeps.config import presets

    experiment = experiment_of(name, config_dir)
    if experiment is None:
        known = sorted(e.name for e in client.search_experiments())
        mine = "" if config_dir else "; a preset of your own: add --config-dir DIR"
        raise LookupError(f"no experiment or preset named {name!r} in {client.tracking_uri} (experiments: "
                          f"{', '.join(known) or 'none yet'}; presets: {', '.join(presets.preset_names(config_dir))}"
                          f"{mine})")
    if client.get_experiment_by_name(experiment) is None:
        raise LookupError(f"preset {name!r} logs to experiment {experiment!r}, which is not in {client.tracking_uri}"
                          f" yet: run python -m sweeps -m +experiment={name} first")
    return experiment, f"preset {name!r} logs to experiment {experiment!r}"


def find_sweep(client: MlflowClient, experiment: str | None = None, run_id: str | None = None):
    """The parent run of a sweep: ``run_id`` if given, else the latest sweep in ``experiment``
    (or in any experiment) that has a job (`sweep_runs`; a sweep stopped before its first
    job, or one still starting, is passed over; where none has one, the latest sweep).

    Raises:
        LookupError: no such run or no sweep at all (message names what was searched).
    """
    if run_id:
        from mlflow.exceptions import MlflowException

        try:
            return client.get_run(run_id)
        except MlflowException:
            raise LookupError(f"no run {run_id!r} in {client.tracking_uri}; --run-id takes a sweep's full "
                              "parent run id, or leave it out for the latest sweep") from None
    if experiment:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise LookupError(f"no experiment named {experiment!r} in {client.tracking_uri}")
        ids = [exp.experiment_id]
    else:
        ids = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(ids, f"tags.`{names.KIND_TAG}` = 'sweep'", order_by=["attributes.start_time DESC"],
                               max_results=20) if ids else []
    if not found:
        where = f"experiment {experiment!r}" if experiment else "any experiment"
        raise LookupError(f"no sweep (a run of python -m sweeps -m ...) in {where} of {client.tracking_uri}")
    return next((run for run in found if _has_job(client, run)), found[0])


def _has_job(client: MlflowClient, parent) -> bool:
    if any(k.startswith((names.SKIPPED_TAG_PREFIX, names.RUNNING_ELSEWHERE_TAG_PREFIX)) for k in parent.data.tags):
        return True
    return bool(client.search_runs([parent.info.experiment_id], f"tags.`{names.PARENT_RUN_TAG}` = '{parent.info.run_id}'",
                                   max_results=1))


def job_from_run(run) -> JobRecord:
    """A job run (an MLflow ``Run``) as the report sees it."""
    tags, metrics = run.data.tags, dict(run.data.metrics)
    for name, former in names.FORMER_NAMES.items():  # a run logged under a metric's former name
        if name not in metrics and former in metrics:
            metrics[name] = metrics[former]
    tags = dict(tags)
    for name, former in names.FORMER_TAGS.items():  # a run tagged under a tag's former name
        if name not in tags and former in tags:
            tags[name] = tags[former]
    return JobRecord(run.info.run_id, run.info.run_name, tags.get(names.OUTCOME_TAG, "?"), tags.get(names.ERROR_TAG, ""),
               dict(parse_overrides(tags.get(names.OVERRIDES_TAG, ""))), dict(run.data.params), metrics, tags)


@dataclass
class SweepRun:
    """One job of a sweep: its MLflow ``run``; ``reused``: '' where the sweep ran it,
    `EARLIER` where it skipped it as done in that earlier run, `ELSEWHERE` where
    another live process was running it; ``params``: the sweep's own values put over the run's
    params (its ``cost.*``, where it gave ``cost.per_hour`` and reused the run)."""

    run: object
    reused: str = ""
    params: dict[str, str] = field(default_factory=dict)

    def job(self) -> JobRecord:
        """The run as the report sees it, the sweep's ``params`` applied."""
        job = job_from_run(self.run)
        job.params.update(self.params)
        return job


EARLIER, ELSEWHERE = "earlier", "elsewhere"


def sweep_runs(client: MlflowClient, parent) -> list[SweepRun]:
    """Every job of the sweep whose parent run is ``parent`` (a ``Run``, read after its jobs
    tagged it): its child runs, oldest first, with the runs it reused put where their jobs
    stood in the sweep (tag ``sweeps.reused_job.<hash>``; at the end where that is missing), each
    run once. A reused run that is deleted or gone is left out; a job another process was
    running before it had opened a run is that config's newest run.

    Raises:
        mlflow.exceptions.MlflowException: the store refused a search.
    """
    tags, exp = parent.data.tags, parent.info.experiment_id
    jobs = [SweepRun(r) for r in store.child_runs(client, exp, parent.info.run_id)]
    seen = {j.run.info.run_id for j in jobs}
    reused = []
    for key, value in tags.items():
        for prefix, how in ((names.SKIPPED_TAG_PREFIX, EARLIER), (names.RUNNING_ELSEWHERE_TAG_PREFIX, ELSEWHERE)):
            if key.startswith(prefix):
                chash = key[len(prefix):]
                run = _reused_run(client, exp, value, chash)
                if run is None or run.info.run_id in seen:
                    continue
                seen.add(run.info.run_id)
                place, params = _reused_job(tags.get(f"{names.REUSED_JOB_TAG_PREFIX}{chash}"))
                reused.append((place, SweepRun(run, how, params)))
    for place, job in sorted(reused, key=lambda r: r[0]):  # ascending: each lands at its own index
        jobs.insert(min(place, len(jobs)), job)
    return jobs


def _reused_run(client: MlflowClient, experiment_id: str, run_id: str, config_hash: str):
    """The run ``run_id`` (for '': the newest run of ``config_hash``), or None where it is
    deleted or gone."""
    if not run_id:
        found = client.search_runs([experiment_id], f"tags.`{names.HASH_TAG}` = '{config_hash}'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        return found[0] if found else None
    try:
        run = client.get_run(run_id)
    except Exception:  # noqa: BLE001 (deleted for good, or another store's: the rest still reports)
        return None
    return None if run.info.lifecycle_stage == "deleted" else run


def _reused_job(text: str | None) -> tuple[float, dict[str, str]]:
    """(the job's index in the sweep, the sweep's params for it) from a ``sweeps.reused_job.*``
    tag; (inf, {}) where it is missing or unreadable."""
    try:
        data = json.loads(text or "")
        return int(data["job"]), {str(k): str(v) for k, v in (data.get("params") or {}).items()}
    except (ValueError, KeyError, TypeError):
        return float("inf"), {}


def load_jobs(client: MlflowClient, parent) -> list[JobRecord]:
    """The sweep's jobs (`sweep_runs`) in the sweep's order, as the report sees them."""
    return [job.job() for job in sweep_runs(client, parent)]


def varied_keys(jobs: list[JobRecord]) -> list[str]:
    """Keys that take more than one value across the jobs, in command-line order."""
    keys: list[str] = []
    for job in jobs:
        keys += [k for k in job.swept if k not in keys]
    return [k for k in keys if len({j.swept.get(k) for j in jobs}) > 1]


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """``[(step, value)]`` of a metric, by step (under its former name where the run predates it)."""
    found = client.get_metric_history(run_id, key)
    if not found and key in names.FORMER_NAMES:
        found = client.get_metric_history(run_id, names.FORMER_NAMES[key])
    return sorted((m.step, m.value) for m in found)


# Params that change how much memory a training step needs (the batch aside), and the machine.
_MEMORY_KEYS = ("precision", "channels_last", "optimizer", "optimizer.impl", "dataset", "dataset.shape",
                "dataset.image_size", "dataset.channels", "device.index")


def used_device(params: dict[str, str], tags: dict[str, str]) -> str:
    """``cuda`` or ``cpu``: the device type a job's run trained on, from its ``device`` param (the
    option chosen) and, for ``auto`` and ``ddp`` (backend ``auto``), whether its machine has a GPU
    (tag ``env.gpus``: ``none`` where it has none; the job resolved ``auto`` the same way). A
    ``ddp`` job on the Gloo backend runs on the CPU. Unknown params count as ``cpu``."""
    device = params.get("device", params.get("device.name", "cpu"))
    if device == "ddp":
        device = {"nccl": "cuda", "gloo": "cpu"}.get(params.get("device.backend", "auto"), "auto")
    if device == "auto":  # auto is cuda where the machine has a GPU
        device = "cpu" if tags.get(names.ENV_GPUS, "none") == "none" else "cuda"
    return "cuda" if device == "cuda" else "cpu"


def memory_key(params: dict[str, str], tags: dict[str, str]) -> tuple:
    """What a ``task=max_batch`` result depends on: model (and every ``model.*`` param), input
    shape, precision, channels_last, optimizer, the device actually used and the machine."""
    device = params.get("device", "?")
    if device == "auto":
        device = used_device(params, tags)
    model = tuple(sorted((k, v) for k, v in params.items() if k == "model" or k.startswith("model.")))
    return (model, device, tags.get(names.ENV_HOST), tags.get(names.ENV_GPUS),
            *(params.get(k) for k in _MEMORY_KEYS if not (device == "cpu" and k == "device.index")))


def max_batches(client: MlflowClient, experiment_id: str) -> dict[tuple, int]:
    """``{memory_key: mem/max_batch}`` from the experiment's finished ``task=max_batch`` jobs
    (the newest one per key)."""
    found: dict[tuple, int] = {}
    runs = client.search_runs([experiment_id], "params.task = 'max_batch' and tags.outcome = 'ok'",
                              order_by=["attributes.start_time DESC"], max_results=1000)
    for run in runs:
        if names.MAX_BATCH in run.data.metrics:
            key = memory_key(dict(run.data.params), dict(run.data.tags))
            found.setdefault(key, int(run.data.metrics[names.MAX_BATCH]))
    return found


def experiment_of(preset: str, config_dir: str | Path | None = None) -> str | None:
    """The MLflow experiment the preset ``preset`` logs to, composed as ``python -m sweeps
    [--config-dir config_dir] +experiment=preset`` would (~0.3 s; no torch); None where there is
    no such preset.

    Raises:
        LookupError: the preset exists but does not compose (its one-line reason).
    """
    from sweeps.config import catalog, presets, register

    if preset not in presets.preset_names(config_dir):
        return None
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    register()
    overrides = [f"+{catalog.PRESET_GROUP}={preset}"]
    if config_dir is not None:
        overrides.append(f"hydra.searchpath=[file://{Path(config_dir).resolve()}]")
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(catalog.CONF_DIR)):
            return str(compose("config", overrides=overrides).mlflow.experiment)
    except HydraException as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LookupError(f"preset {preset!r} does not compose: {reason}") from None
