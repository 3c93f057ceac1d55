"""``python -m sweeps [-m] key=value ...``: compose the config with Hydra and run the job(s)."""
from __future__ import annotations

import logging
import signal
import sys

import hydra
from omegaconf import DictConfig

from sweeps import config, job, outcome, sweep
from sweeps.errors import Terminated, UsageError

config.register()


@hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra's task function: one job. Bad input stops the whole sweep with one line."""
    try:
        return job.run(cfg)
    except UsageError as e:
        sweep.stop(e)


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def cli() -> None:
    """Entry point: exit 1 when any job ended in ``error`` (after every job has run); on SIGINT
    or SIGTERM close the runs as KILLED, flush the logs and exit 130 or 143."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    # a process started in the background by a non-interactive shell inherits SIGINT ignored:
    # restore Python's handler so `kill -INT` still ends the sweep cleanly
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main()
    except KeyboardInterrupt as e:  # Terminated too
        name = getattr(e, "signal_name", "SIGINT")
        sweep.interrupted(name)
        print(f"sweeps: interrupted by {name}; the job's run is KILLED, rerun to resume", file=sys.stderr)
        logging.shutdown()
        sys.exit(143 if name == "SIGTERM" else 130)
    sys.exit(outcome.exit_status())


if __name__ == "__main__":
    cli()
