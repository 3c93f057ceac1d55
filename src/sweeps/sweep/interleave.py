"""The sweep's job order: repeats interleaved, round-robin over the configurations.

Hydra's basic sweeper launches the cartesian product of the swept values with the last override
varying fastest, so ``batch=32,64 repeat=0,1`` runs every repeat of batch 32 before batch 64: a
machine that slows down half-way (another process starts, the GPU heats up) then poses as a
batch-size effect. `InterleavingSweeper` (``conf/hydra/sweeper/sweeps.yaml``, the default)
launches the same jobs with the sweep key ``repeat`` varying slowest, wherever it is written (the
command line or a preset's ``hydra.sweeper.params``): every configuration's repeat 0, then every
configuration's repeat 1, and so on — Google Benchmark's random interleaving of repetitions
(``--benchmark_enable_random_interleaving``) and the interleaving asked of hyperfine (its issue
#21), so a slowdown hits all configurations alike.

Within a round the configurations run in the basic sweeper's order, reversed on every second
round (``A B C``, ``C B A``, ``A B C``, …: an ABBA design). A steady drift then adds the same
amount to every configuration over each pair of rounds, where a fixed order would always run the
first configuration earliest in each round. The order is deterministic: a rerun of the sweep
(resume) launches the same jobs under the same numbers.

Contract:

- the jobs launched are exactly the basic sweeper's, each job's overrides in the same order;
  only the order of the jobs differs, and only where ``repeat`` is swept over two values or more;
- ``hydra.sweeper.interleave=false`` launches them in the basic sweeper's order;
- `job_lists` is the one expansion: the sweep check and the job count
  (`sweeps.sweep.check`) list the jobs with it, in the order launched, so the
  console's ``[k/N]`` counts 1..N in launch order;
- ``max_batch_size`` and ``params`` mean what they mean to Hydra's basic sweeper.

Public Hydra API only (``hydra.plugins.sweeper.Sweeper``, the override parser, ``Plugins``);
Hydra instantiates a sweeper only from the ``hydra_plugins`` namespace, so the class it names
is ``hydra_plugins.sweeps_sweeper.InterleavingSweeper``, a thin subclass of this one.
"""
from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from sweeps.errors import UsageError

log = logging.getLogger("sweeps")
SWEEPER = "hydra_plugins.sweeps_sweeper.InterleavingSweeper"  # hydra.sweeper._target_ of conf/hydra/sweeper/sweeps.yaml
REPEAT_KEY = "repeat"  # the sweep key that runs slowest
OPT_OUT = "hydra.sweeper.interleave"  # =false: the basic sweeper's order


def job_lists(overrides: Sequence[Override], interleave: bool = True) -> list[list[str]]:
    """Every job's override list, in launch order, for the sweep's parsed ``overrides`` (its
    ``hydra.sweeper.params`` first, then the command line's).

    The jobs are the basic sweeper's cartesian product (a key given twice keeps its first place
    and takes its last values; a plain value is a one-value list). With ``interleave`` and a
    swept ``repeat``, the rounds run one after another, ``repeat``'s values in their order, the
    other keys' product in the basic order within even rounds (0, 2, …) and reversed within odd
    ones; without, the basic order (the last key varies fastest).

    Raises:
        HydraException: a sweep that is not a list of values (``interval(0,1)``), as the basic
            sweeper raises.
    """
    lists: dict[str, list[str]] = {}  # key element → its "key=value" lines; insertion order as Hydra's OrderedDict
    repeat: str | None = None
    for o in overrides:
        key = o.get_key_element()
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                raise HydraException(f"the sweeper does not support sweep type {o.value_type.name} ({o.input_line}):"
                                     " list the values (key=a,b,c), or use range() or choice()")
            lists[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            lists[key] = [f"{key}={o.get_value_element_as_str()}"]
        if o.key_or_group == REPEAT_KEY and o.package is None:
            repeat = key
    keys = list(lists)
    if not interleave or repeat is None or len(lists[repeat]) < 2:
        return [list(job) for job in itertools.product(*lists.values())]
    at = keys.index(repeat)
    inner = list(itertools.product(*(lists[k] for k in keys if k != repeat)))
    jobs = []
    for round_, value in enumerate(lists[repeat]):
        for others in (inner if round_ % 2 == 0 else inner[::-1]):
            jobs.append([*others[:at], value, *others[at:]])
    return jobs


def interleaving(sweeper: Any) -> bool:
    """``hydra.sweeper.interleave`` of the sweeper config ``sweeper`` (true where unset).

    Raises:
        UsageError: a value other than true or false.
    """
    value = sweeper.get("interleave", True) if sweeper is not None else True
    if not isinstance(value, bool):
        raise UsageError(f"{OPT_OUT}={value} is not valid: true (repeats interleaved) or false (the basic order)")
    return value


def parse(config: DictConfig, arguments: Sequence[str], config_loader: Any = None) -> list[Override]:
    """The sweep's overrides parsed as its sweeper parses them: ``hydra.sweeper.params`` of
    ``config`` (the sweep's config) first, then ``arguments`` (the command line's)."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    return OverridesParser.create(config_loader=config_loader).parse_overrides([*params, *arguments])


def chunks(jobs: list[list[str]], max_batch_size: int | None) -> Iterator[list[list[str]]]:
    """``jobs`` in launch batches of ``max_batch_size`` (None or -1: one batch), as the basic sweeper splits them."""
    n = len(jobs) if max_batch_size in (None, -1) else int(max_batch_size)
    if n <= 0 and jobs:
        raise UsageError(f"hydra.sweeper.max_batch_size={max_batch_size} is not valid: a positive number, or null")
    for i in range(0, len(jobs), max(n, 1)):
        yield jobs[i:i + n]


class InterleavingSweeper(Sweeper):
    """A sweep of the cartesian product of its values, repeats interleaved (module docstring).

    Args:
        max_batch_size: jobs handed to the launcher at a time (None: all of them).
        params: the preset's sweep, ``{key: "a,b,c"}`` (``hydra.sweeper.params``).
        interleave: False: the basic sweeper's order.
    """

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None,
                 interleave: bool = True) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.interleave = interleave
        self.hydra_context: Any = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        """Launch every job, batch by batch, after Hydra's check that each batch composes; the
        sweep's config saved as ``multirun.yaml`` in its folder first, as the basic sweeper does."""
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        params = [f"{k}={v}" for k, v in self.params.items()]
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        jobs = job_lists(parser.parse_overrides([*params, *arguments]), interleaving({"interleave": self.interleave}))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns, first = [], 0
        for batch in chunks(jobs, self.max_batch_size):
            started = time.perf_counter()
            self.validate_batch_is_legal(batch)
            log.debug("validated the configs of %d jobs in %.2f s", len(batch), time.perf_counter() - started)
            results = self.launcher.launch(batch, initial_job_idx=first)
            for r in results:
                _ = r.return_value  # a job that raised raises here, as with the basic sweeper
            first += len(batch)
            returns.append(results)
        return returns
