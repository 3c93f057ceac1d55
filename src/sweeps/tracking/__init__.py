"""Tracking: how a job's numbers reach MLflow, in six boxes, one sub-package each, flowing one way
(``pyproject.toml``'s import-linter contract holds it):

- `replay` — a later start: ``resume`` (a job's config hash and its earlier
  run), ``replay`` (runs nobody closed, closed with what their jobs left);
- `writer` — the job's side: ``run_writer``
  (`RunWriter`, the job's MLflow run), ``records``
  (params, tags, texts journaled: ``run.jsonl``), ``naming`` and ``inputs`` (how a run reads in
  the MLflow UI);
- `service` — the store in a process of its own: ``registry`` (which
  commands start one) → ``connection`` (the job's pipe to it) → ``server`` (the process),
  ``client`` (the client a job holds);
- `follower` — ships each run's journal from its cursor at the lowest
  priority: ``follower``, ``shipping``, ``delivery`` (``log_batch`` with retries), ``held``,
  ``series``, ``cadence``, ``priority``;
- `journal` — ``journal`` (each epoch, one line of ``epochs.jsonl``) and
  ``cursor`` (``shipped.json`` and the run's ship lock);
- `store` — ``store`` (opening it safely), ``create``, ``http_policy``,
  ``entities``.

What a number was measured on (the ``env.*`` tags, the user's code) is `sweeps.provenance`'s;
the console's lines and tables are `sweeps.console`'s.

Imports: mlflow, `sweeps.names`, [`sweeps.errors`][sweeps.errors]; never training code (a forbidden
contract in pyproject.toml checks it). Importing this package loads nothing heavy.
"""
