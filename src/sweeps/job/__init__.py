"""One job: one composed config → one MLflow run, opened and closed exactly once.

``lifecycle`` (:class:`~sweeps.job.lifecycle.JobRun`, :func:`~sweeps.job.lifecycle.run`),
``identity`` (the config hash and the earlier run it names), ``finish`` (what is logged on every
ending), ``summary`` and ``progress`` (what the console says of it), ``outcome`` and ``signals``
(how a job ends), ``parent_run`` (the sweep it belongs to), ``ddp`` and ``rank`` (a data-parallel
job's processes).

Imports :mod:`sweeps.placement`, :mod:`sweeps.tasks` and below, and :mod:`sweeps.tracking`;
never :mod:`sweeps.sweep` or :mod:`sweeps.launchers` (the launcher is handed in).
"""
