"""Telemetry: a background sampler of the job's GPUs (NVML, through nvidia-ml-py) and host
(psutil), summarised per epoch (clocks, utilisation, memory, power, energy), with the raw samples
and a figure.

Owns: `Telemetry`, `for_job`.
Imports: psutil, nvidia-ml-py, matplotlib (figure only), `sweeps.names`, `sweeps.devices`
(which kinds NVML samples); never training code.
"""
