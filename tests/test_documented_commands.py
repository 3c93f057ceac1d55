"""Every ``python -m sweeps …`` command the README and the docs pages show composes as written: a
renamed key, group or option, or a preset that is gone, fails here before a user meets it. Each
value of a command's sweep lists is composed in a job with Hydra's compose API in this process (the
lists stepped together: job i takes each list's i-th value, a shorter list starting over), as
``--cfg job`` would: every value is checked in as few compositions as the longest list."""
import re
import shlex

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

import sweeps.config
from conftest import REPO

# The measurement records are not instructions; every other page is
RECORDS = {"benchmarks.md", "methodology.md", "gpu_selfcheck.md"}
COMMAND = re.compile(r"python -m sweeps(?![.\w])")
OWN_CONF = REPO / "examples" / "own_model" / "conf"  # what --config-dir conf means in the docs' own-model steps
FLAGS = {"-m", "--multirun", "--help", "-h", "--cfg", "job", "--info"}


def documented_commands() -> list[tuple[str, str]]:
    """``(pages, the arguments after python -m sweeps)`` for every command line on the pages (the
    pages that show it, comma-separated); placeholders (``[-m] key=value ...``) left out."""
    pages = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in RECORDS)]
    found = []
    for page in pages:
        text = re.sub(r"\\\n\s*", " ", page.read_text())  # a command continued on the next line
        for line in text.splitlines():
            for match in COMMAND.finditer(line):
                rest = line[match.end():]
                if line[:match.start()].count("`") % 2:  # inline code: the command ends at its backtick
                    rest = rest.split("`")[0]
                rest = re.split(r"\s+#\s", rest)[0].strip()
                if not re.search(r"\[|\.\.\.|…|<", rest):
                    found.append((page.name, rest))
    pages: dict[str, set] = {}
    for page, command in found:
        pages.setdefault(command, set()).add(page)
    return sorted((",".join(sorted(where)), command) for command, where in pages.items())


def jobs(overrides: list[str]) -> list[list[str]]:
    """The sweep's lists stepped together: job i takes the i-th value of each comma-separated list
    (a shorter list starting over), so every value is composed at least once, beside values of the
    other lists (``device=cuda,ddp device.gpus=2`` fails for its cuda job)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = []
    for text, override in zip(overrides, parsed):
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([text])
    return [[c[i % len(c)] for c in choices] for i in range(max(map(len, choices), default=0))]


def test_the_pages_show_commands_to_check():
    commands = documented_commands()
    pages = {page for where, _ in commands for page in where.split(",")}
    assert {"README.md", "getting-started.md", "own-model.md", "devices.md"} <= pages
    assert "-m model=cnn10,wrn28_10 batch=128,256,512,1024,2048" in {command for _, command in commands}
    assert jobs(["model=a,b", "batch=1,2,3", "seed=0"]) == [["model=a", "batch=1", "seed=0"], ["model=b", "batch=2", "seed=0"],
                                                          ["model=a", "batch=3", "seed=0"]]


@pytest.fixture(scope="module")
def hydra_conf():
    """sweeps' config directory initialised once for the module's commands (each test's Hydra
    state is put back after it, conftest's process_state, to this one)."""
    sweeps.config.register()
    with initialize_config_dir(version_base="1.3", config_dir=str(sweeps.config.CONF_DIR)):
        yield


@pytest.mark.parametrize("page, command", documented_commands())
def test_a_documented_command_composes(page, command, hydra_conf):
    args = shlex.split(command)
    searchpath = []
    if "--config-dir" in args:
        at = args.index("--config-dir")
        assert args[at + 1] == "conf", f"{page}: a --config-dir the test does not know: {command}"
        searchpath = [f"hydra.searchpath=[file://{OWN_CONF}]"]
        del args[at:at + 2]
    overrides = [a for a in args if a not in FLAGS]
    assert all("=" in o for o in overrides), f"{page}: not an override in {command!r}"
    for job in jobs(overrides) or [[]]:
        try:
            compose("config", overrides=job + searchpath)
        except Exception as exc:  # noqa: BLE001 — the message names the page and the job
            pytest.fail(f"{page}: python -m sweeps {command}\n  job {job}: {type(exc).__name__}: {exc}")
