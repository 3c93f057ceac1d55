"""docs/configuration.md, the configuration reference, is generated from the config
(scripts/config_reference.py): the committed page is what the config says now, and it names every
key a default job is composed with and every key of every closed group's options."""
import dataclasses
import importlib.util
import re

from omegaconf import OmegaConf

from conftest import REPO, compose


def _script():
    spec = importlib.util.spec_from_file_location("config_reference", REPO / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_the_generated_one():
    page = (REPO / "docs" / "configuration.md").read_text()
    assert _script().render() == page, "docs/configuration.md is out of date: python scripts/config_reference.py"


def test_the_reference_has_a_row_with_a_meaning_for_every_key_of_the_default_config():
    from sweeps.config.options import OPTION_SCHEMAS

    page = (REPO / "docs" / "configuration.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| .*? \| .*? \| (.*) \|$", page, re.M)}
    flat = _script().flatten(OmegaConf.to_container(compose([]), resolve=False))
    keys = {k for k in flat if not k.startswith("hydra.")}
    assert len(keys) > 50
    assert keys - set(rows) == set(), "keys of the default config missing from docs/configuration.md"
    assert {k for k in keys if not rows[k].strip()} == set(), "keys without a meaning"
    for group, options in OPTION_SCHEMAS.items():
        for option, cls in options.items():
            assert f"### `{group}={option}`" in page
            assert {f"{group}.{f.name}" for f in dataclasses.fields(cls)} <= set(rows), (group, option)
