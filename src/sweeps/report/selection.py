"""Pick the job runs that ``python -m sweeps.report --compare`` compares, from one store or
server: by experiment, sweep (parent run) id, tag and MLflow search filter, in any combination
(all must hold). Sweeps from several machines meet here when they log to one tracking server."""
from __future__ import annotations

from dataclasses import dataclass, field

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from sweeps import names
from sweeps.report.runs import JobRecord, job_from_run


@dataclass
class Selection:
    """What to compare; empty fields select everything (every experiment of the store)."""

    experiments: list[str] = field(default_factory=list)  # experiment names
    sweeps: list[str] = field(default_factory=list)  # parent run ids
    tags: list[str] = field(default_factory=list)  # KEY=VALUE
    filter: str | None = None  # MLflow search syntax, e.g. "params.model = 'mlp'"

    def describe(self) -> str:
        """One phrase naming the selection, for messages and the report's header."""
        parts = [f"experiment {', '.join(self.experiments)}" if self.experiments else "every experiment"]
        parts += [f"sweep {', '.join(self.sweeps)}"] if self.sweeps else []
        parts += [f"tag {t}" for t in self.tags]
        parts += [f"filter {self.filter!r}"] if self.filter else []
        return ", ".join(parts)

    def filter_string(self) -> str:
        """``--tag`` and ``--filter`` as one MLflow filter string.

        Raises:
            ValueError: a ``--tag`` that is not ``KEY=VALUE``.
        """
        clauses = []
        for tag in self.tags:
            key, sep, value = tag.partition("=")
            if not sep or not key:
                raise ValueError(f"--tag {tag!r} is not KEY=VALUE; e.g. --tag env.host=gpu-a")
            clauses.append(f"tags.`{key}` = '{value}'")
        if self.filter:
            clauses.append(self.filter)
        return " and ".join(clauses)


def _search(client: MlflowClient, experiment_ids: list[str], filter_string: str) -> list:
    """Every run matching ``filter_string``, oldest first (MLflow pages its answers)."""
    runs, token = [], None
    while True:
        try:
            page = client.search_runs(experiment_ids, filter_string, order_by=["attributes.start_time ASC"],
                                      max_results=1000, page_token=token)
        except MlflowException as e:
            raise ValueError(f"MLflow cannot search with {filter_string!r}: {str(e.message).splitlines()[0]}; "
                             "e.g. --filter \"tags.`env.host` = 'gpu-a'\" or \"params.model = 'mlp'\"") from None
        runs += list(page)
        token = page.token
        if not token:
            return runs


def _experiment_ids(client: MlflowClient, wanted: list[str]) -> list[str]:
    """Ids of the experiments named ``wanted`` (all experiments when empty).

    Raises:
        LookupError: an experiment that does not exist (the message lists those that do).
    """
    every = client.search_experiments()
    if not wanted:
        return [e.experiment_id for e in every]
    by_name = {e.name: e.experiment_id for e in every}
    missing = [w for w in wanted if w not in by_name]
    if missing:
        raise LookupError(f"no experiment named {missing[0]!r} in {client.tracking_uri}; "
                          f"experiments there: {', '.join(sorted(by_name)) or 'none'}")
    return [by_name[w] for w in wanted]


def _sweep(client: MlflowClient, run_id: str):
    """The parent run ``run_id``.

    Raises:
        LookupError: no such run, or a run that is not a sweep's parent (then its sweep is named).
    """
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise LookupError(f"no run {run_id!r} in {client.tracking_uri}; a sweep id is the parent run's full id "
                          f"(tag {names.PARENT_RUN_TAG} of its jobs)") from None
    if run.data.tags.get(names.KIND_TAG) != "sweep":
        parent = run.data.tags.get(names.PARENT_RUN_TAG)
        raise LookupError(f"run {run_id!r} is not a sweep (a parent run of python -m sweeps -m)"
                          + (f"; its sweep is {parent}" if parent else "; select single runs with --filter"))
    return run


def select_jobs(client: MlflowClient, selection: Selection) -> list[JobRecord]:
    """The job runs (not sweeps' parent runs) the selection names, oldest first.

    Raises:
        LookupError: an unknown experiment or sweep, or no job run matches (the message says what
            the store holds instead).
        ValueError: a filter MLflow cannot parse, or a malformed ``--tag``.
    """
    exp_ids = _experiment_ids(client, selection.experiments)
    where = selection.filter_string()
    if selection.sweeps:
        runs = []
        for sweep_id in dict.fromkeys(selection.sweeps):  # a sweep named twice counts once
            sweep = _sweep(client, sweep_id)
            if sweep.info.experiment_id not in exp_ids:
                raise LookupError(f"sweep {sweep_id} is in experiment id {sweep.info.experiment_id}, not in "
                                  f"--experiment {', '.join(selection.experiments)}: drop one of the two")
            children = f"tags.`{names.PARENT_RUN_TAG}` = '{sweep_id}'"
            runs += _search(client, [sweep.info.experiment_id], f"{children} and {where}" if where else children)
    else:
        runs = _search(client, exp_ids, where) if exp_ids else []
    jobs = [job_from_run(r) for r in runs
            if names.OUTCOME_TAG in r.data.tags and r.data.tags.get(names.KIND_TAG) != "sweep"]
    if not jobs:
        names_here = sorted(e.name for e in client.search_experiments())
        raise LookupError(f"no job runs match {selection.describe()} in {client.tracking_uri}; experiments there: "
                          f"{', '.join(names_here) or 'none'} (select with --experiment, --sweep, --tag KEY=VALUE, "
                          "--filter)")
    return jobs
