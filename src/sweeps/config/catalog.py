"""The groups, options and presets a user chooses from, each described by its YAML's first
comment line: the lists ``python -m sweeps --help`` prints (Hydra's help template calls
`help_section` through the ``${sweeps_help:NAME}`` resolver), read from the same files the
composition reads, so the page cannot drift from ``conf/`` or from a user's ``--config-dir``.

Hidden: the schemas (``schema/*``, structured configs only), the smoke preset's ``case``
pairs, Hydra's own groups. Nothing here imports more than the standard library and Hydra's
config (the page answers without torch or mlflow).
"""
from __future__ import annotations

import importlib.resources
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# The project's config directory; @hydra.main and the tests compose from it.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # a link to the repo's conf/ (see pyproject)
PRESET_GROUP = "experiment"  # +experiment=NAME: a preset (conf/experiment/NAME.yaml)
HIDDEN_GROUPS = ("schema", "case", "hydra")  # these and their subgroups: not chosen by a user
WIDTH = 100  # columns of the help page (wrapped, never cut)

# What each built-in group chooses; a group of the user's own shows without one.
GROUP_PURPOSE = {
    "model": "the network trained: a _target_ called as (in_shape, num_outputs, **its keys)",
    "dataset": "the training and test data",
    "device": "where each job trains",
    "optimizer": "the optimizer: a torch.optim class (or your own) and its arguments",
    "lr_scaling": "how the learning rate follows the batch size",
    "schedule": "how the learning rate changes over the epochs",
    "precision": "the number format of training",
    "loss": "the loss minimised",
    "target": "the quality whose time to reach is recorded (time/to_target_s); chosen by itself as "
              "<dataset>_<model> where such an option exists",
}
GROUP_ORDER = tuple(GROUP_PURPOSE)


@dataclass(frozen=True)
class Option:
    """One ``<group>/<name>.yaml`` on the search path: ``description`` its first comment line
    ('' where it has none)."""

    group: str
    name: str
    description: str


def first_comment(text: str) -> str:
    """The first line of a YAML file's leading comment block, without ``#`` (Hydra's ``# @package``
    directive and blank lines skipped); '' where the file starts with a key."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("# @package"):
            continue
        if not stripped.startswith("#"):
            return ""
        comment = stripped.lstrip("#").strip()
        if comment:
            return comment
    return ""


def _roots(sources: Iterable[dict]) -> list:
    """The folders of Hydra's config sources (``hydra.runtime.config_sources``: file and pkg
    ones; a structured source has no files), in search-path order."""
    roots = []
    for source in sources:
        path, schema = str(source["path"]), str(source["schema"])
        if schema == "file":
            roots.append(Path(path))
        elif schema == "pkg" and path:
            module, _, sub = path.replace("/", ".").partition(".")
            try:
                root = importlib.resources.files(module)
            except (ModuleNotFoundError, TypeError):
                continue
            for part in sub.split(".") if sub else ():
                root = root / part
            roots.append(root)
    return roots


def options(sources: Iterable[dict]) -> list[Option]:
    """Every option on the search path, one per ``(group, name)`` — the first source's, as in
    Hydra's own lookup — sorted by group, then name. Groups nest (``hydra/launcher``)."""
    found: dict[tuple[str, str], Option] = {}

    def walk(folder, group: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and not entry.name.startswith(("_", ".")):
                walk(entry, f"{group}/{entry.name}" if group else entry.name)
            elif group and entry.name.endswith(".yaml"):
                key = (group, entry.name[:-len(".yaml")])
                if key not in found:
                    found[key] = Option(*key, first_comment(entry.read_text(encoding="utf-8")))

    for root in _roots(sources):
        if root.is_dir():
            walk(root, "")
    return sorted(found.values(), key=lambda o: (o.group, o.name))


def _hidden(group: str) -> bool:
    return group.split("/")[0] in HIDDEN_GROUPS


def _rows(items: list[tuple[str, str]], indent: int, name_width: int = 0) -> list[str]:
    """``name  description`` rows, the descriptions aligned (at ``name_width`` at least) and
    wrapped to `WIDTH`."""
    name_width = max([name_width, *(len(n) for n, _ in items)]) + 2
    rows = []
    for name, text in items:
        head = " " * indent + name.ljust(name_width)
        rows += textwrap.wrap(text, WIDTH, initial_indent=head, subsequent_indent=" " * len(head)) or [head.rstrip()]
    return rows


def groups_text(sources: Iterable[dict], choices: dict) -> str:
    """The groups a user chooses from (``group=option``), each with its purpose and its options,
    ``*`` marking the option in use (``choices``: ``hydra.runtime.choices``)."""
    by_group: dict[str, list[Option]] = {}
    for option in options(sources):
        if not _hidden(option.group) and option.group != PRESET_GROUP:
            by_group.setdefault(option.group, []).append(option)
    order = sorted(by_group, key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g))
    lines = []
    for group in order:
        purpose = GROUP_PURPOSE.get(group)
        lines += textwrap.wrap(f"{group}: {purpose}" if purpose else f"{group}:", WIDTH, initial_indent="  ",
                               subsequent_indent="      ")
        lines += _rows([(o.name + ("*" if choices.get(group) == o.name else ""), o.description)
                        for o in by_group[group]], 4)
    return "\n".join(lines)


def presets_text(sources: Iterable[dict]) -> str:
    """The presets (``+experiment=NAME``), each with its purpose."""
    return "\n".join(_rows([(o.name, o.description) for o in options(sources) if o.group == PRESET_GROUP], 2))


def help_section(name: str) -> str:
    """``groups`` or ``presets`` of the running command's search path (Hydra's ``HydraConfig``,
    set while Hydra prints ``--help``), ``$`` doubled for Hydra's ``string.Template``.

    Raises:
        ValueError: another ``name``.
    """
    from hydra.core.hydra_config import HydraConfig

    runtime = HydraConfig.get().runtime
    sources = [dict(s) for s in runtime.config_sources]
    if name == "groups":
        text = groups_text(sources, dict(runtime.choices))
    elif name == "presets":
        text = presets_text(sources)
    else:
        raise ValueError(f"sweeps_help:{name}: no such section; use groups or presets")
    return text.replace("$", "$$")
