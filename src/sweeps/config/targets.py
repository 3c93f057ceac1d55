"""The one extension mechanism: every part a job is built from — model, dataset, optimizer,
schedule, loss — is a Hydra ``_target_`` (Hydra docs, "Instantiating objects with
hydra.utils.instantiate"), so a new part is one class or function and one YAML file.

Each group's node mixes two kinds of keys: sweeps' own (`OWN_KEYS`: ``dataset.train_size``,
``optimizer.base_lr``, ...), which sweeps reads and never passes on, and the target's arguments
(everything else). [`complete`][sweeps.config.targets.complete] fills the own keys a user's YAML leaves out with their
defaults (so ``conf/dataset/waves.yaml`` with only ``_target_`` and its own arguments composes
like a built-in option); [`call_target`][sweeps.config.targets.call_target] calls the target with its arguments plus what sweeps
supplies, and turns a target that does not import or rejects its arguments into one line.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from sweeps.config.lr import LR_KEYS, NOTE_KEY, settle
from sweeps.config.options import OPTION_SCHEMAS, OWN_KEYS
from sweeps.errors import UsageError, brief
from sweeps.names import TARGET_GROUPS

HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")


def complete(cfg: DictConfig, overrides: list[str] | None = None) -> DictConfig:
    """Fill the own keys each group's node lacks (`OWN_KEYS`'s defaults), check their
    types, name the option (``<group>.name``: the option ``overrides`` choose, else the one Hydra
    chose, else the target's last component, lowercased), and leave one of ``optimizer.lr`` /
    ``base_lr`` set (`sweeps.config.lr.settle`, told what the optimizer option's own YAML
    sets where both are set; ``overrides``: the job's command-line overrides, by default Hydra's
    for the running job). Idempotent; changes ``cfg`` in place and returns it.

    Raises:
        UsageError: a group node that is not an option (a preset's ``device: cpu``), a group
            node without ``_target_`` (where one is required), an own key of the wrong type, or
            both or neither of ``optimizer.lr`` / ``base_lr`` — one line naming the key.
    """
    overrides = _overrides() if overrides is None else list(overrides)
    typed = chosen_on_command_line(overrides)
    choices = {**_choices(), **typed}
    preset = f"experiment/{choices['experiment']}" if "experiment" in choices else "a preset"
    for group in (*OPTION_SCHEMAS, *TARGET_GROUPS):  # each an option's node, not a plain value
        if not isinstance(cfg.get(group), DictConfig):
            raise UsageError(group_as_key(group, cfg.get(group), preset))
    for group, schema in OWN_KEYS.items():
        node = cfg.get(group)
        if group != "loss" and not node.get("_target_"):
            raise UsageError(f"{group}={choices.get(group, '?')} has no _target_: name the class or function that "
                             f"builds it (e.g. _target_: mypackage.{'make_' if group == 'dataset' else ''}Thing)")
        defaults = {f.name: None for f in dataclasses.fields(schema)}
        given = {k: node[k] for k in defaults if k in node and not OmegaConf.is_missing(node, k)}
        try:  # the own keys through their dataclass: "batch=abc"-style type errors in one line
            checked = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(schema), given))
        except OmegaConfBaseException as e:
            raise UsageError(f"{group}: {brief(e).split(' full_key:')[0]}") from None
        if checked.get("name") is None:
            target = str(node.get("_target_") or "auto")
            checked["name"] = choices.get(group) or target.rsplit(".", 1)[-1].lower()
        with open_dict(cfg):
            for key, value in checked.items():
                if key not in node or node[key] != value:
                    node[key] = value
    optimizer, option = cfg.optimizer, option_name(cfg.optimizer, "optimizer")
    written, file = None, ""
    if all(optimizer.get(k) is not None for k in LR_KEYS) and choices.get("optimizer"):
        written, file = option_file("optimizer", choices["optimizer"])
    settle(optimizer, option, overrides, written=written, file=file, chosen="optimizer" in typed,
           preset=preset if "experiment" in choices else "")
    return cfg


def chosen_on_command_line(overrides: list[str]) -> dict[str, str]:
    """{group: option} that ``overrides`` choose (``optimizer=mysgd``, ``+experiment=diabetes``):
    keys without a dot whose value is one plain name (a sweep's list is its jobs' business)."""
    chosen = {}
    for override in overrides:
        key, sep, value = str(override).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key.startswith("~") or not value or any(c in value for c in ",[]{}()= "):
            continue
        key = key.lstrip("+")
        if key and "." not in key and "@" not in key and "/" not in key and not key.startswith("hydra"):
            chosen[key] = value
    return chosen


def option_file(group: str, option: str) -> tuple[DictConfig | None, str]:
    """The body of ``<group>/<option>.yaml`` as the running command's search path finds it
    (Hydra's config loader where one is initialized, else the job's ``hydra.runtime.config_sources``),
    and where it is (``/home/me/conf/optimizer/mysgd.yaml``); ``(None, "")`` where there is no
    Hydra context or no such file."""
    try:
        repository = _repository()
        found = repository.load_config(f"{group}/{option}") if repository is not None else None
    except Exception:  # noqa: BLE001 (a file Hydra cannot read: the composition has said so already)
        return None, ""
    if found is None:
        return None, ""
    where = str(found.path).split("://", 1)[-1]
    return found.config, f"{where}/{group}/{option}.yaml" if where else f"{group}/{option}.yaml"


def _repository():
    """Hydra's config repository of the running command, or None outside Hydra."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    if GlobalHydra.instance().is_initialized():
        return getattr(GlobalHydra.instance().config_loader(), "repository", None)
    if not HydraConfig.initialized():
        return None
    from sweeps import compat

    return compat.config_repository([(str(source.provider), f"{source.schema}://{source.path}")
                                     for source in HydraConfig.get().runtime.config_sources])


def group_as_key(group: str, value: Any, where: str = "a preset") -> str:
    """The one line for a config group written as a plain key in a config file's body
    (``device: cpu`` in a preset): that merges the value into the group's node instead of
    choosing the option. ``where``: the file, as Hydra names it (``experiment/mine``)."""
    if not isinstance(value, (str, int, float, bool)):
        return f"{group} is not a config group option here ({value!r}): choose one, e.g. {group}=NAME"
    return (f"`{group}: {value}` in {where} sets a config group: write `- override /{group}: {value}` under "
            f"its `defaults:` ({group}={value} on the command line)")


def option_name(node: DictConfig, group: str) -> str:
    """The option's name for messages: ``<group>.name``, else the option Hydra chose, else ``?``."""
    return str(node.get("name") or _choices().get(group) or "?")


def _overrides() -> list[str]:
    """The running job's command-line overrides (a sweep's swept values included), where a
    Hydra context exists."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def _choices() -> dict[str, str]:
    """{group: option} Hydra chose for this job, where a Hydra context exists."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items() if v is not None}


def arguments(node: DictConfig, group: str) -> dict[str, Any]:
    """The target's own arguments in ``node``: every key but sweeps' own and Hydra's, as plain
    Python values (lists, dicts), resolved."""
    own = set(dataclasses.asdict(OWN_KEYS[group]())) if group in OWN_KEYS else set()
    own |= RESERVED.get(group, set()) | NOTES.get(group, set())
    plain = OmegaConf.to_container(node, resolve=True)
    return {k: v for k, v in plain.items() if k not in own and k not in HYDRA_KEYS}


# Keys sweeps supplies to a target, passed only where its signature declares them; the option
# may set them too (root, num_classes, regression), and then its value is passed.
RESERVED = {"dataset": {"root", "seed", "num_classes", "regression", "train_size", "test_size"},
            "schedule": {"epochs"}}
# Keys sweeps writes into a node to explain it (the lr that applies, `sweeps.config.lr.NOTE_KEY`):
# never passed to its target.
NOTES = {"optimizer": {NOTE_KEY}}


def locate(node: DictConfig, group: str) -> Callable:
    """The callable ``node._target_`` names.

    Raises:
        UsageError: it does not import — one line naming the option, the target and the cause.
    """
    from hydra.utils import get_object

    target = str(node.get("_target_"))
    try:
        return get_object(target)
    except Exception as e:  # ImportError, AttributeError, or whatever the user's module raises on import
        cause = brief(e.__cause__ or e)
        raise UsageError(f"{group}={option_name(node, group)}: _target_ {target} cannot be imported ({cause}); "
                         "check the module is on the path (run from the folder holding it) and the name") from None


def accepts(fn: Callable, name: str) -> bool:
    """Whether ``fn`` declares a parameter ``name`` (or takes ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: assume not
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def declares(fn: Callable, name: str) -> bool:
    """Whether ``fn`` names a parameter ``name`` explicitly (``**kwargs`` does not count)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def check_target(node: DictConfig, group: str, *args: Any, supplied: dict[str, Any] | None = None,
          **kwargs: Any) -> tuple[Callable, dict[str, Any]]:
    """What [`call_target`][sweeps.config.targets.call_target] would call, checked without calling it: the target and its keyword
    arguments (the option's keys, plus ``supplied`` where the signature names them).

    Raises:
        UsageError: the target does not import, or its signature rejects these arguments (a
            misspelt or missing argument) — one line naming option, target and cause.
    """
    fn = locate(node, group)
    call = arguments(node, group)
    for key, value in (supplied or {}).items():
        if declares(fn, key):
            call[key] = node[key] if key in node else value
    try:
        inspect.signature(fn).bind(*args, **kwargs, **call)
    except TypeError as e:
        raise UsageError(f"{group}={option_name(node, group)}: {node._target_} rejects its arguments ({e}); "
                         f"its arguments are {_signature(fn)}") from None
    except ValueError:  # no signature to check against (a C builtin): the call will say
        pass
    return fn, call


def call_target(node: DictConfig, group: str, *args: Any, supplied: dict[str, Any] | None = None,
          **kwargs: Any) -> Any:
    """Call ``node._target_(*args, **kwargs, **option keys, **supplied-where-declared)``.

    ``kwargs`` always go (``in_shape``, ``num_outputs`` for a model; ``lr`` for an optimizer);
    ``supplied`` (``root``, ``seed``, ``epochs``) only where the target's signature names them —
    an option's own value for such a key wins over the supplied one. An argument that is itself
    a node with ``_target_`` is built by Hydra first.

    Raises:
        UsageError: as [`check_target`][sweeps.config.targets.check_target]. Anything the target itself raises (a ValueError inside a
            user's constructor, an OOM) goes on up unchanged: the job records it as its outcome.
    """
    fn, call = check_target(node, group, *args, supplied=supplied, **kwargs)
    return fn(*args, **kwargs, **{k: _nested(v) for k, v in call.items()})


def bind_target(node: DictConfig, group: str, positional: int) -> Callable:
    """``node._target_`` with the option's keys bound (`functools.partial`), to be called
    later with ``positional`` positional arguments (a loss function: ``output, target`` per batch).

    Raises:
        UsageError: as [`check_target`][sweeps.config.targets.check_target], for a call with that many positional arguments.
    """
    fn, call = check_target(node, group, *([None] * positional))
    return functools.partial(fn, **{k: _nested(v) for k, v in call.items()})


def _nested(value: Any) -> Any:
    """An argument that is itself a ``_target_`` node (a user's sub-module, a transform) built
    by Hydra; any other value as it is."""
    if isinstance(value, dict) and "_target_" in value:
        from hydra.utils import instantiate

        return instantiate(value)
    return value


def _signature(fn: Callable) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(unknown)"
