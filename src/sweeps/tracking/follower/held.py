"""Which of a run's epochs the store holds: asked by a shipper that may be behind the store
(`sweeps.tracking.follower.follower`: a replay, a restarted follower, after a failed send), so that it
sends only what the run lacks — a value sent twice costs MLflow's SQL store a lookup per value.
"""
from __future__ import annotations

from typing import Any

from sweeps.tracking.store import http_policy

STEPS_PER_QUERY = 500  # steps asked of an SQL store at once (sqlite allows 32,766 bound values a query)


def held_steps(client: Any, run_id: str, wanted: dict[str, list[int]]) -> dict[str, list[int]]:
    """For each metric key of ``wanted``, the steps among its list at which run ``run_id`` holds
    a value, asked for those steps alone (reading a 10,000-epoch metric's whole history takes
    ~1 s): an SQL store by step (`STEPS_PER_QUERY` at a time), a tracking server by range
    (`_held_on_server`); many steps, another store, or a server without that route: the
    whole history. Raises what MLflow raises."""
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    out: dict[str, list[int]] = {}
    for key, steps in wanted.items():
        found: list[int] | None = None
        if isinstance(store, SqlAlchemyStore) and len(steps) <= 4 * STEPS_PER_QUERY:
            found = []
            for i in range(0, len(steps), STEPS_PER_QUERY):
                chunk = steps[i:i + STEPS_PER_QUERY]
                found += [m.step for m in store.get_metric_history_bulk_interval_from_steps(
                    run_id, key, chunk, max_results=4 * len(chunk))]
        elif isinstance(store, RestStore):
            found = _held_on_server(store, run_id, key, min(steps), max(steps))
        if found is None:
            found = [m.step for m in client.get_metric_history(run_id, key)]
        out[key] = sorted(set(found) & set(steps))
    return out


SERVER_ROWS = 2500  # the most rows the server's get-history-bulk-interval answers (its MAX_RESULTS_PER_RUN)
ROUTE = "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval"


def _held_on_server(store: Any, run_id: str, key: str, first: int, last: int) -> list[int] | None:
    """The steps from ``first`` to ``last`` at which run ``run_id`` of the tracking server behind
    ``store`` (a RestStore) holds ``key``, from the route MLflow's UI draws charts with
    (`ROUTE`); None where the route is missing or refuses the question (an older server, a
    ``--static-prefix``) or the range holds `SERVER_ROWS` rows or more (it would answer a sample).

    Raises:
        Exception: the server did not answer, or answered busy (5xx, 429): the whole history
            would only add to its load.
    """
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    try:
        response = http_request(store.get_host_creds(), ROUTE, "GET", params={
            "run_ids": run_id, "metric_key": key, "start_step": first, "end_step": last, "max_results": SERVER_ROWS})
        if response.status_code >= 500 or response.status_code == 429:
            verify_rest_response(response, ROUTE)  # raises: a busy or failing server, asked again later
        rows = response.json().get("metrics", []) if response.status_code == 200 else None
    except Exception as e:
        if http_policy.transient(e):  # not answered now: the whole history would not be either
            raise
        return None
    return [int(m.get("step", 0)) for m in rows] if rows is not None and len(rows) < SERVER_ROWS else None
