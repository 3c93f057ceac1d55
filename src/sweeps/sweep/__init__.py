"""The sweep: the multirun as a whole, before and around its jobs.

``command`` (the ``python -m sweeps`` entry point and Hydra's task function), ``callback`` (the
Hydra callback: the parent run, the console's progress, the summary, the stop on bad input),
``check`` (every job composed and checked before the first runs), ``compose`` and
``compose_once`` (Hydra's composition, once per choice of groups), ``interleave`` (the job order).

Imports every package below it; none imports it. Hands each job its launcher
(`sweeps.launchers`).
"""
