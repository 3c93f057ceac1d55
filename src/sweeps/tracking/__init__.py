"""Tracking: how a job's numbers reach MLflow, in four boxes — job → journal → follower → MLflow.

The modules by role:

- the job's side: ``run`` (:class:`~sweeps.tracking.run.RunWriter`, the job's MLflow run),
  ``journal`` (each epoch, one line of ``epochs.jsonl``), ``records`` (params, tags, texts:
  ``run.jsonl``), ``series`` (which epochs make the MLflow series), ``naming`` and ``inputs``
  (how a run reads in the MLflow UI);
- the follower: ``follower`` (tails a run's journal and ships it from the run's cursor),
  ``shipping`` (where runs are shipped from, and a job's end draining its run), ``cursor``
  (``shipped.json`` and the run's ship lock), ``batches`` (``log_batch`` with retries),
  ``held`` (which epochs the store holds), ``cadence``, ``priority``;
- the store: ``store`` (opening it safely), ``new_store``, ``http_policy``, ``entities``, and the
  store's own process: ``store_processes`` (which commands start one) → ``store_service`` (the
  job's pipe to it) → ``store_process`` (the process), ``store_client`` (the client a job holds);
- a later start: ``resume`` (a job's config hash and its earlier run), ``replay`` (runs nobody
  closed, closed with what their jobs left).

What a number was measured on (the ``env.*`` tags, the user's code) is :mod:`sweeps.provenance`'s;
the console's lines and tables are :mod:`sweeps.console`'s.

Imports: mlflow, :mod:`sweeps.names`, :mod:`sweeps.errors`; never training code (a forbidden
contract in pyproject.toml checks it). Importing this package loads nothing heavy.
"""
