"""``hydra/sweeper=sweeps`` (conf/hydra/sweeper/sweeps.yaml, the default): Hydra instantiates
sweepers only from the ``hydra_plugins`` namespace, so the class it names lives here; all of it
is :class:`sweeps.sweep.interleave.InterleavingSweeper`."""
from sweeps.sweep.interleave import InterleavingSweeper as _InterleavingSweeper


class InterleavingSweeper(_InterleavingSweeper):
    """See :class:`sweeps.sweep.interleave.InterleavingSweeper`."""
