"""Training: the loop and everything that makes its numbers right — phase timing (CUDA events /
perf_counter), precision, speed knobs (channels_last, compile, fused optimizers), FLOPs and MFU,
checkpoints, data parallelism inside a step, and the one builder that assembles a training job
for any device (`sweeps.train.builder`).

Imports: `sweeps.data`, `sweeps.models`, `sweeps.devices` (what differs per device kind),
`sweeps.config`, `sweeps.names`,
[`sweeps.errors`][sweeps.errors]; never tracking, tasks or launch (a trainer reports through callbacks).
"""
