"""What a job's model was, named from its run's params alone: the option's name where it ran at
the option's own values, else the sizes that ran (``WRN-10-1``) — the label the verdict and the
report put on a model. Torch-free: it reads the option's YAML file, never builds the model."""
from __future__ import annotations


# Models whose option names a family member ("wrn28_10": WRN-28-10): a run at other sizes is named
# as the family names its members, from these model.* params (sweeps.models.WideResNet: depth, width)
_FAMILY_LABELS = {"sweeps.models.WideResNet": ("WRN-{depth}-{width}", ("depth", "width"))}


def model_label(params: dict[str, str]) -> str:
    """What a job's model was, from its run's params alone (``model``: the option chosen,
    ``model.<key>``: its values); torch-free.

    The rule: the option's name (``wrn28_10``, ``mlp``) where every key its YAML file sets
    (``conf/model/<option>.yaml``, with the options it extends through ``defaults``) has that
    value in the run; else the sizes that ran — a family's own name for them (WideResNet:
    ``WRN-<depth>-<width>``, so wrn28_10 at depth 10, width 1 is ``WRN-10-1``) and, for any other
    key that differs, ``<option>(<key>=<value>, ...)`` with lists joined by ``-``
    (``mlp(hidden=256-256)``; ``WRN-16-4(dropout=0.3)``). Keys the file does not set are not
    compared; an option not among the built-in ones (a ``--config-dir`` of the user's own), or
    whose ``_target_`` differs from the file's, is named by its option alone. ``?`` without a
    ``model`` param."""
    option = params.get("model") or "?"
    own = {k.removeprefix("model."): v for k, v in params.items() if k.startswith("model.")}  # the option's keys
    defaults = _model_defaults(option)
    if defaults is None or own.get("_target_", defaults.get("_target_")) != defaults.get("_target_"):
        return option
    changed = {k: own[k] for k, v in defaults.items() if k != "_target_" and k in own and _value(own[k]) != v}
    if not changed:
        return option
    family = _FAMILY_LABELS.get(str(defaults.get("_target_")))
    label = option
    if family is not None and any(k in changed for k in family[1]):
        label = family[0].format(**{k: own.get(k, defaults.get(k)) for k in family[1]})
        changed = {k: v for k, v in changed.items() if k not in family[1]}
    if changed:
        label += "(" + ", ".join(f"{k}={_shown(v)}" for k, v in changed.items()) + ")"
    return label


def _model_defaults(option: str, seen: tuple[str, ...] = ()) -> dict | None:
    """The keys of the built-in model option ``option`` as its YAML file sets them, the options
    it extends (``defaults: [cnn10, _self_]``) merged in; None where there is no such file."""
    import yaml

    from sweeps.config.catalog import CONF_DIR

    path = CONF_DIR / "model" / f"{option}.yaml"
    if option in seen or not option.replace("_", "").replace("-", "").isalnum() or not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    merged: dict = {}
    for entry in data.pop("defaults", None) or []:
        if isinstance(entry, str) and entry != "_self_":
            merged.update(_model_defaults(entry, (*seen, option)) or {})
    merged.update(data)
    return merged


def _value(text: str):
    """A param's string (``str`` of the config value) back to a value, to compare with a YAML one."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _shown(text: str) -> str:
    value = _value(text)
    return "-".join(map(str, value)) if isinstance(value, list) else str(value)
