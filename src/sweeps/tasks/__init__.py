"""Tasks: what a job does once its device, data and run are ready. ``task=NAME`` picks one class
from `REGISTRY`; each has one interface (``prepare``, ``run``,
``summarize``). A new task is one module here and one entry in `sweeps.names.GROUP_OPTIONS`.

- ``train`` (`sweeps.tasks.train`): timed epochs through `sweeps.train.builder`;
- ``inference`` (`sweeps.tasks.inference`): N timed forward passes, three timing modes;
- ``max_batch`` (`sweeps.tasks.max_batch`): the largest batch that fits.

Imports: `sweeps.train`, `sweeps.data`, `sweeps.models`, `sweeps.devices`, `sweeps.telemetry`,
`sweeps.tracking` (the run writer and console), `sweeps.config`; never the launching packages (`sweeps.sweep`, `sweeps.launchers`, `sweeps.job`, `sweeps.placement`).
"""
