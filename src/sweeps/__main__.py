"""``python -m sweeps``: see :mod:`sweeps.launch.cli`."""
from sweeps.launch.cli import cli

if __name__ == "__main__":
    cli()
