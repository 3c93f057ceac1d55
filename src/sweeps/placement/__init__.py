"""Where a job runs: ``device`` (device resolution onto a kind of `sweeps.devices`, driver and
compiler preflight, the data-parallel backend) and ``gpu_pool`` (one job per GPU, claimed by lock files)."""
