"""Slurm: requeue on time limit or preemption inside a job, and the launcher that submits the sweep."""
