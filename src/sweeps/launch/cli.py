"""``python -m sweeps [-m] key=value ...``: compose the config with Hydra and run the job(s)."""
from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from sweeps import config
from sweeps.errors import UsageError
from sweeps.launch import job, outcome, signals, sweep

config.register()


@hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> str:
    """Hydra's task function: one job. Bad input stops the whole sweep with one line."""
    try:
        return job.run(cfg)
    except UsageError as e:
        sweep.stop(e)


def interrupted_message(signal_name: str) -> str:
    """What stderr says after a signal: the same as the MLflow runs say."""
    last = job.LAST_JOB
    if last.get("outcome") == outcome.KILLED:
        return f"sweeps: interrupted by {signal_name}: job {last['name']!r} is KILLED; rerun to resume it"
    if last:
        return (f"sweeps: interrupted by {signal_name} after job {last['name']!r} ended {last['outcome']}; "
                "the sweep is KILLED; rerun it to run the remaining jobs")
    return f"sweeps: interrupted by {signal_name} before any job ran"


def cli() -> None:
    """Entry point: exit 1 when any job ended in ``error`` (after every job has run); on SIGINT
    or SIGTERM close the runs as KILLED, flush the logs and exit 130 or 143."""
    signals.install()
    try:
        main()
    except SystemExit as e:  # Hydra reports a composition error (typo, wrong type) and exits 1
        if e.code == 1 and not job.LAST_JOB:  # before any job ran: bad input, the documented 2
            sys.exit(2)
        raise
    except KeyboardInterrupt as e:  # Terminated too
        name = getattr(e, "signal_name", "SIGINT")
        with signals.held():  # a second Ctrl-C does not cut the sweep's closing short
            sweep.interrupted(name)
            print(interrupted_message(name), file=sys.stderr)
            logging.shutdown()
        sys.exit(143 if name == "SIGTERM" else 130)
    sys.exit(outcome.exit_status())
