"""Launch: turning a composed config into a finished job. Its sub-packages, top to bottom (each
imports only those below it; ``pyproject.toml``'s import-linter contract holds it):

- :mod:`~sweeps.launch.cli` — the command line, the sweep callback (parent run), the sweep check;
- :mod:`~sweeps.launch.job` — one job's lifecycle (:class:`~sweeps.launch.job.lifecycle.JobRun`),
  its finish and its summary row;
- :mod:`~sweeps.launch.launchers` — what the Hydra launcher running this process asks of a job
  (pool slots, Slurm hooks): one interface, one implementation per launcher;
- :mod:`~sweeps.launch.placement` (device, GPU pool, data-parallel ranks) and
  :mod:`~sweeps.launch.slurm` (requeue inside a Slurm job, the Slurm launcher);
- :mod:`~sweeps.launch.process` — how a process's jobs end: signals and outcomes.

The top layer of the package: it may import every other package; none imports it.
"""
