"""What a test may change for the whole process, saved before it and put back after it
(:func:`saved`, used by the autouse fixtures in conftest.py and by ``cli_in_process``).

In-process jobs and CLI runs set torch's global knobs (precision=fp32 turns TF32 off,
deterministic=true turns deterministic algorithms on, a data-parallel or pool worker lowers the
thread count), compile (dynamo's caches and config are process-wide), add log handlers, export
variables, install signal handlers, fill Hydra's singletons and count outcomes in the process state
(:mod:`sweeps.state`: one object, swapped for a copy around each test).
Without this, what one test left behind decided whether a later one passed: a test passed alone
and failed in some random orders. Only what differs is written back (about 1 ms per test).
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import sys
from typing import Any, Callable, Iterator

import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from sweeps import state

# torch's process-wide knobs as (name, read, write). The TF32 ones exist twice in recent torch:
# the legacy allow_tf32 booleans and the fp32_precision strings that replace them; either may be
# missing in a given version, so each is kept only where this torch has it. Legacy first: writing
# a legacy flag rewrites the new strings, which are then put back exactly.
_Knob = tuple[str, Callable[[], Any], Callable[[Any], None]]


def _attr(owner: Any, path: str, name: str) -> list[_Knob]:
    """A knob for ``owner.name`` when this torch has it (``path``: how it is shown)."""
    if owner is None or not hasattr(owner, name):
        return []
    return [(f"{path}.{name}", lambda: getattr(owner, name), lambda v: setattr(owner, name, v))]


def _torch_knobs() -> list[_Knob]:
    b = torch.backends
    knobs: list[_Knob] = [
        ("default_dtype", torch.get_default_dtype, torch.set_default_dtype),
        ("num_threads", torch.get_num_threads, torch.set_num_threads),
        ("grad_enabled", torch.is_grad_enabled, torch.set_grad_enabled),
        ("deterministic", lambda: (torch.are_deterministic_algorithms_enabled(),
                                   torch.is_deterministic_algorithms_warn_only_enabled()),
         lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        ("anomaly", lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
         lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1])),
        ("float32_matmul_precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    ]
    if hasattr(torch, "get_default_device"):
        knobs.append(("default_device", torch.get_default_device, torch.set_default_device))
    for name in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        knobs += _attr(b.cudnn, "cudnn", name)
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        knobs += _attr(b.cuda.matmul, "cuda.matmul", name)
    knobs += _attr(b, "backends", "fp32_precision")
    knobs += _attr(b.cuda.matmul, "cuda.matmul", "fp32_precision")
    knobs += _attr(b.cudnn, "cudnn", "fp32_precision")
    for part in ("conv", "rnn"):
        knobs += _attr(getattr(b.cudnn, part, None), f"cudnn.{part}", "fp32_precision")
    return knobs


_KNOBS = _torch_knobs()
# torch.compile's configs: ConfigModules holding every value set on them (monkeypatch included)
_CONFIGS = ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config")
_SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
_PYTEST_ENV = "PYTEST_CURRENT_TEST"  # pytest's own, rewritten for every phase of every test


def _pytest_own(handler: logging.Handler) -> bool:
    """pytest's capture handlers: pytest adds and removes them around each phase itself."""
    return type(handler).__module__.startswith("_pytest")


def _loggers() -> dict[str, tuple]:
    out = {}
    for name in ("", "sweeps"):
        lg = logging.getLogger(name)
        out[name] = ([h for h in lg.handlers if not _pytest_own(h)], lg.level, lg.propagate, lg.disabled)
    return out


def _restore_logger(name: str, state: tuple) -> None:
    lg = logging.getLogger(name)
    handlers, lg.level, lg.propagate, lg.disabled = state
    for h in lg.handlers[:]:
        if not _pytest_own(h) and h not in handlers:
            lg.removeHandler(h)
            h.close()  # a job's file handler: its file stays open otherwise
    for h in handlers:
        if h not in lg.handlers:
            lg.addHandler(h)


def _hidden(config: Any) -> set[str]:
    """Entries deleted from a ConfigModule (mock.patch's, or monkeypatch's undo of an attribute it
    took for new): they read as missing until set again. A private flag, absent in some torch."""
    return {k for k, entry in getattr(config, "_config", {}).items() if getattr(entry, "hide", False)}


def _config_values() -> dict[str, tuple]:
    """The values (and hidden entries) of every loaded compile config; one not imported yet has
    nothing to restore."""
    return {name: (sys.modules[name].get_config_copy(), _hidden(sys.modules[name]))
            for name in _CONFIGS if name in sys.modules}


def _restore_configs(before: dict[str, tuple]) -> None:
    for name, (values, hidden) in before.items():
        config = sys.modules[name]
        for key in _hidden(config) - hidden:
            config._config[key].hide = False
        now = config.get_config_copy()
        for key, value in values.items():
            if key in now and now[key] != value:
                setattr(config, key, value)


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != _PYTEST_ENV}


def _compiled_graphs() -> int:
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@contextlib.contextmanager
def saved() -> Iterator[None]:
    """Run the block, then put back everything the module docstring lists that it changed."""
    knobs = [(read, write, read()) for _, read, write in _KNOBS]
    configs, graphs = _config_values(), _compiled_graphs()
    env, cwd, argv, args = _environment(), os.getcwd(), sys.argv, sys.argv[:]
    hydra = (GlobalHydra.instance().is_initialized(), HydraConfig.instance().cfg)
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    loggers, disabled = _loggers(), logging.root.manager.disable
    project = state.replace(copy.deepcopy(state.current()))  # the test changes a copy; the original comes back
    state.current().said.clear()  # machine notices: each test hears them as a new command would
    try:
        yield
    finally:
        for read, write, value in knobs:
            if read() != value:
                write(value)
        _restore_configs(configs)
        if _compiled_graphs() != graphs:  # the test compiled: its graphs and guards go with it
            import torch._dynamo

            torch._dynamo.reset()
        if _environment() != env:
            pytest_own = os.environ.get(_PYTEST_ENV)
            os.environ.clear()
            os.environ.update(env)
            if pytest_own is not None:
                os.environ[_PYTEST_ENV] = pytest_own
        try:
            moved = os.getcwd() != cwd
        except FileNotFoundError:  # the test removed the folder it left the process in
            moved = True
        if moved:
            os.chdir(cwd)
        sys.argv = argv  # the list itself: a test may rebind sys.argv or change the list
        argv[:] = args
        if HydraConfig.instance().cfg is not hydra[1]:  # a run's config (Hydra's singleton)
            HydraConfig.instance().cfg = hydra[1]
        if not hydra[0] and GlobalHydra.instance().is_initialized():
            GlobalHydra.instance().clear()
        for s, handler in handlers.items():
            if handler is not None and signal.getsignal(s) != handler:  # None: set outside Python
                signal.signal(s, handler)
        for name, logger_state in loggers.items():
            _restore_logger(name, logger_state)
        logging.disable(disabled)
        state.replace(project)
