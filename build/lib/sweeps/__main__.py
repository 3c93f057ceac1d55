"""``python -m sweeps [-m] key=value ...``: compose the config with Hydra and run the job(s)."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from sweeps import config, job, outcome, sweep
from sweeps.errors import UsageError

config.register()


@hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra's task function: one job. Bad input stops the whole sweep with one line."""
    try:
        return job.run(cfg)
    except UsageError as e:
        sweep.stop(e)


def cli() -> None:
    """Entry point: exit 1 when any job ended in ``error`` (after every job has run)."""
    main()
    sys.exit(outcome.exit_status())


if __name__ == "__main__":
    cli()
