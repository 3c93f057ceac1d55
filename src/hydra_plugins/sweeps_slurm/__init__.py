"""``hydra/launcher=slurm`` (conf/hydra/launcher/slurm.yaml): Hydra instantiates launchers only
from the ``hydra_plugins`` namespace, so the class it names lives here; all of it is
:class:`sweeps.launchers.slurm.launcher.SlurmLauncher`."""
from sweeps.launchers.slurm.launcher import SlurmLauncher as _SweepsSlurmLauncher


class SlurmLauncher(_SweepsSlurmLauncher):
    """See :class:`sweeps.launchers.slurm.launcher.SlurmLauncher`."""
