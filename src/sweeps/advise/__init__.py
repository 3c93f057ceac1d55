"""``python -m sweeps.advise``: a diagnosis's advice checked, not only given.

Each diagnosed job (tag ``diag.bottleneck``, its advice in ``diag.advice``: `sweeps.bottleneck`)
gets each advised override run as a paired A/B beside its own configuration: one multirun of the
job's own overrides with ``KEY=ORIGINAL,ADVISED`` and ``repeat=`` swept, which the project's sweeper
interleaves (every configuration at one repeat before the next, every second round reversed).
The measured gain is the ratio of the two arms' median epoch times (``time/median_epoch_s``) with
its range from the repeats' min and max; the verdict on it is the report's own rule
(`sweeps.report.pick.beats`): a gain counts only where the ranges do not overlap.

The command (`sweeps.advise.__main__`) answers ``--help`` and bad arguments before torch or
MLflow load; `sweeps.advise.check` selects the jobs, builds and runs the A/B sweeps and tags the
results; `sweeps.advise.gain` is the arithmetic and its wording.
"""
