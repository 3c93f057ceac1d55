"""Tasks: what a job does once its device, data and run are ready. ``task=NAME`` picks one class
from :data:`~sweeps.tasks.base.REGISTRY`; each has one interface (``prepare``, ``run``,
``summarize``). A new task is one module here and one entry in :data:`sweeps.names.GROUP_OPTIONS`.

- ``train`` (:mod:`sweeps.tasks.train`): timed epochs through :mod:`sweeps.train.builder`;
- ``inference`` (:mod:`sweeps.tasks.inference`): N timed forward passes, three timing modes;
- ``max_batch`` (:mod:`sweeps.tasks.max_batch`): the largest batch that fits.

Imports: :mod:`sweeps.train`, :mod:`sweeps.data`, :mod:`sweeps.models`, :mod:`sweeps.telemetry`,
:mod:`sweeps.tracking` (the run writer and console), :mod:`sweeps.config`; never the launching packages (:mod:`sweeps.sweep`, :mod:`sweeps.launchers`, :mod:`sweeps.job`, :mod:`sweeps.placement`).
"""
