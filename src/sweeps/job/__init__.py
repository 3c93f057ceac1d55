"""One job: one composed config → one MLflow run, opened and closed exactly once.

``lifecycle`` (`Job`, `run`),
``identity`` (the config hash and the earlier run it names), ``finish`` (what is logged on every
ending), ``summary`` and ``progress`` (what the console says of it), ``outcome`` and ``signals``
(how a job ends), ``parent_run`` (the sweep it belongs to), ``ddp`` and ``rank`` (a data-parallel
job's processes).

Imports `sweeps.placement`, `sweeps.tasks` and below, and `sweeps.tracking`;
never `sweeps.sweep` or `sweeps.launchers` (the launcher is handed in).
"""
