"""Launch: turning a composed config into a finished job — the Hydra entry point, the job
context that owns the MLflow run, signals and the outcome (:class:`~sweeps.launch.job.JobRun`),
device placement (one device, the GPU pool, data-parallel processes), Slurm (``slurm_launcher``,
``slurm``) and the sweep callback (parent run, one-screen summary).

The top layer: it may import every other package; none imports it.
"""
