"""Write docs/configuration.md, the configuration reference, from the config itself: the default
config as Hydra composes it (every key, its default), the comments beside each key in
src/sweeps/conf/config.yaml and in the default options' YAML files, the typed schemas of the closed groups
(sweeps.config.schema, sweeps.config.options: field defaults and comments) and each option's
first comment line. Nothing is written by hand, so the page cannot drift from the config;
tests/test_config_reference.py renders it again and compares.

    python scripts/config_reference.py           # writes docs/configuration.md
    python scripts/config_reference.py --check   # exit 1 where the committed page differs
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "configuration.md"
CONF = REPO / "src" / "sweeps" / "conf"

# The unit of a key, by its last part or its suffix: where a number means seconds, examples, ...
UNITS_BY_NAME = {
    "batch": "examples", "train_size": "examples", "test_size": "examples", "base_batch": "examples",
    "start": "examples", "limit": "examples", "epochs": "epochs", "every_epochs": "epochs",
    "log_every_epochs": "epochs", "warmup": "forward passes", "iters": "forward passes",
    "num_workers": "processes", "gpus": "processes", "threads": "threads", "keep": "files",
    "series_points": "points", "lr": "—", "base_lr": "—", "value": "the metric's unit",
    "interval_s": "s", "every_s": "s", "timeout_s": "s", "log_every_s": "s",
    "malloc_trim_mb": "MB", "steps": "steps", "warmup_steps": "steps",
}
UNITS_BY_SUFFIX = (("_s", "s"), ("_mb", "MB"), ("_pct", "%"))
# What a key the files leave uncommented means, by its last part (sweeps' own keys of every option)
GENERIC = {
    "_target_": "the class or function the option builds, by import path (null: chosen by sweeps)",
    "_partial_": "true: sweeps calls it later with what only the job knows",
    "name": "the option's name (null: the option Hydra chose)",
}
KEY = re.compile(r"^(\s*)([A-Za-z_]\w*):\s*(.*)$")
COMMENT = re.compile(r"\s+#\s?(.*)$")
DEFAULT = re.compile(r"^\s*-\s+(optional\s+)?(\w+):\s*(\S+)\s*(?:#\s?(.*))?$")


def yaml_comments(path: Path) -> dict[str, str]:
    """``{dotted key: its comment}`` of a YAML file: the comment on a key's line, with the
    comment-only lines indented past the key that follow it (a comment carried on)."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last = None
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            indent = len(line) - len(line.lstrip())
            if last and indent > last[1]:
                out[last[0]] = (out.get(last[0], "") + " " + line.strip().lstrip("#").strip()).strip()
            else:
                last = None
            continue
        match = KEY.match(line)
        if not match:
            last = None
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        comment = COMMENT.search(" " + rest) if "#" in rest else None
        if comment:
            out[dotted] = comment.group(1).strip()
        last = (dotted, indent)
    return out


def field_comments(cls: type) -> dict[str, str]:
    """``{field: its comment}`` of a dataclass and its bases: the comment on the field's line or the
    comment lines just above it."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        above: list[str] = []
        for line in inspect.getsource(klass).splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                above.append(stripped.lstrip("#").strip())
                continue
            match = re.match(r"^(\w+):\s*[^=]+(?:=\s*(.*?))?$", stripped)
            if match and not stripped.startswith(("class", "def")):
                inline = COMMENT.search(line)
                out[match.group(1)] = inline.group(1).strip() if inline else " ".join(above)
            above = []
    return out


def compose_default():
    """The default config (no overrides), composed in-process with Hydra's compose API."""
    from hydra import compose, initialize_config_dir

    import sweeps.config

    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        return compose("config")


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of a nested container; ``_target_`` and ``_partial_`` kept."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def unit(key: str) -> str:
    name = key.rsplit(".", 1)[-1]
    if name in UNITS_BY_NAME:
        return UNITS_BY_NAME[name]
    return next((u for suffix, u in UNITS_BY_SUFFIX if name.endswith(suffix)), "—")


def shown(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, dict)):
        return f"`{json.dumps(value)}`"
    return f"`{value}`" if str(value) != "" else "`''`"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _options(group: str) -> list[tuple[str, str]]:
    from sweeps.config.catalog import first_comment

    return [(p.stem, first_comment(p.read_text())) for p in sorted((CONF / group).glob("*.yaml"))]


def render() -> str:
    """The page's Markdown."""
    from omegaconf import OmegaConf

    from sweeps.config import options, schema

    cfg = compose_default()
    choices = {m.group(2): (m.group(3), m.group(4) or ("optional: none where no such option exists" if m.group(1) else ""))
               for m in
               map(DEFAULT.match, (CONF / "config.yaml").read_text().splitlines()) if m}
    groups = [g for g in choices if (CONF / g).is_dir()]
    top = yaml_comments(CONF / "config.yaml")
    comments = dict(top)
    for group in groups:  # the default option's own keys, commented in its file
        option = CONF / group / f"{choices[group][0]}.yaml"
        if option.exists():
            for key, text in yaml_comments(option).items():
                comments.setdefault(f"{group}.{key}", text)
    schemas = {"": schema.Config, "mlflow": schema.MLflowConfig, "telemetry": schema.TelemetryConfig,
               "max_batch": schema.MaxBatchConfig, "timing": schema.TimingConfig,
               "checkpoint": schema.CheckpointConfig, "eval": schema.EvalConfig, "target": schema.TargetConfig,
               **{g: cls for g, cls in options.OWN_KEYS.items()},
               **{g: opts[choices[g][0]] for g, opts in options.OPTION_SCHEMAS.items()}}
    for prefix, cls in schemas.items():
        for name, text in field_comments(cls).items():
            if text:
                comments.setdefault(f"{prefix}.{name}" if prefix else name, text)

    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python scripts/config_reference.py` from src/sweeps/conf/ and src/sweeps/config/:",
        "     edit those, then run it again (tests/test_config_reference.py compares). -->",
        "",
        "`python -m sweeps [-m] [+experiment=PRESET] key=value ...` sets any key below; `-m` sweeps",
        "comma-separated values (`batch=128,256`). `python -m sweeps --cfg job` prints the composed",
        "config; `python -m sweeps --help` lists the groups and presets. A misspelt key or a value of",
        "the wrong type stops at composition, in one line, before anything runs.",
        "",
        "## Config groups",
        "",
        "A group is chosen whole (`model=wrn28_10`); its option's keys are then set as",
        "`group.key=value` (`dataset.train_size=1000`). Options of your own join these from",
        "`--config-dir` (see [Your own model and data](own-model.md)).",
        "",
        "| group | default | options |",
        "|---|---|---|",
    ]
    for group in groups:
        default, text = choices[group]
        opts = "<br>".join(f"`{name}`: {cell(desc)}" if desc else f"`{name}`" for name, desc in _options(group))
        lines.append(f"| `{group}` | `{default}` — {cell(text)} | {opts} |")
    lines += ["", "Presets (`+experiment=NAME`, see [The studies](studies.md)):", ""]
    lines += [f"- `{name}`: {desc}" for name, desc in _options("experiment")]
    lines += [
        "",
        "## Every key of the default config",
        "",
        "The default config (`python -m sweeps --cfg job` with no overrides): each key, its default,",
        "its unit and what it means. Keys of a group (`model.*`, `dataset.*`, ...) are those of the",
        "group's default option; another option has its own (its YAML file under `src/sweeps/conf/<group>/`).",
        "",
        "| key | default | unit | meaning |",
        "|---|---|---|---|",
    ]
    flat = flatten(OmegaConf.to_container(cfg, resolve=False))
    for key, value in flat.items():
        lines.append(f"| `{key}` | {shown(value)} | {unit(key)} | {cell(comments.get(key) or GENERIC.get(key.rsplit('.', 1)[-1], ''))} |")
    lines += [
        "",
        "## Options of the closed groups",
        "",
        "`device`, `lr_scaling` and `precision` have a typed schema per option",
        "(`sweeps.config.options`): an option holds exactly these keys, so a key of another option",
        "(`device.gpus=2` with `device=cpu`) fails at composition.",
    ]
    for group, opts in options.OPTION_SCHEMAS.items():
        for name, cls in opts.items():
            doc = (inspect.getdoc(cls) or "").replace("\n", " ") if cls.__doc__ else ""
            notes = field_comments(cls)
            lines += ["", f"### `{group}={name}`", ""] + ([doc, ""] if doc else [])
            lines += ["| key | default | unit | meaning |", "|---|---|---|---|"]
            for f in dataclasses.fields(cls):
                default = f.default if f.default is not dataclasses.MISSING else None
                default = name if str(default) == "???" else default
                lines.append(f"| `{group}.{f.name}` | {shown(default)} | {unit(f.name)} | {cell(notes.get(f.name, ''))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where docs/configuration.md differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("docs/configuration.md is " + ("current" if same else "out of date: python scripts/config_reference.py"))
        return 0 if same else 1
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(REPO)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
