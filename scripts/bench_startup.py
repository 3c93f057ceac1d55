#!/usr/bin/env python
"""How fast the command line answers before any job runs: ``--help``, ``--cfg job``, a bad value
in a single run, a bad value in the middle of a sweep list and a misspelt key, each as users run it
(``python -m sweeps ...`` in a subprocess, in an empty folder). Prints the wall time's min /
median / max over ``--repeats`` and which heavy modules (torch, torchvision, mlflow) the process
imported (``python -X importtime``); asserts nothing. Targets (2-core machine):
``--help`` ≤ 1.5 s, a bad value ≤ 2 s, none of the three imported. A bare ``python -c pass`` is
timed beside them as the floor.

    python scripts/bench_startup.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HEAVY = ("torch", "torchvision", "mlflow")
COMMANDS = {
    "python -c pass (floor)": ["-c", "pass"],
    "--help": ["-m", "sweeps", "--help"],
    "--cfg job": ["-m", "sweeps", "--cfg", "job"],
    "batch=abc": ["-m", "sweeps", "batch=abc"],
    "-m batch=128,abc epochs=5": ["-m", "sweeps", "-m", "batch=128,abc", "epochs=5"],
    "modle=mlp (typo)": ["-m", "sweeps", "modle=mlp"],
}


def heavy_imports(args: list[str], cwd: str) -> list[str]:
    """The modules of :data:`HEAVY` that ``python ARGS`` imports (its ``-X importtime`` lines)."""
    err = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=cwd, capture_output=True,
                         text=True).stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    return [m for m in HEAVY if m in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"{args.repeats} repeats each")
    print(f"{'command':34} {'min s':>7} {'median s':>9} {'max s':>7}  exit  heavy imports")
    with tempfile.TemporaryDirectory() as cwd:
        for title, command in COMMANDS.items():
            walls, code = [], 0
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                code = subprocess.run([sys.executable, *command], cwd=cwd, capture_output=True).returncode
                walls.append(time.perf_counter() - t0)
            heavy = heavy_imports(command, cwd)
            print(f"{title:34} {min(walls):7.2f} {statistics.median(walls):9.2f} {max(walls):7.2f}  {code:4}  "
                  f"{', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
