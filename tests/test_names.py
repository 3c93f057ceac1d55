"""The names module is the one list of what users type and read: the README with the docs site's
pages, conf/ and the code agree with it."""
import ast
import re
import subprocess
import sys
from pathlib import Path

from sweeps import names

REPO = Path(__file__).resolve().parents[1]
# Where a user reads the names: the README and the docs site's pages (not the measurement records)
RECORDS = {"benchmarks.md", "methodology.md", "gpu_selfcheck.md"}


def documented() -> str:
    pages = sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in RECORDS)
    return "\n".join(p.read_text() for p in [REPO / "README.md", *pages])


METRIC = re.compile(r"`((?:time|train|test|phase|perf|mem|energy|infer|max_batch|model|system|target|diag)(?:/[a-z0-9_]+)+)`")


def test_the_docs_list_exactly_the_metrics_of_the_names_module():
    readme = documented()
    in_readme = set(METRIC.findall(readme))
    assert in_readme - names.ALL_METRICS == set(), "README or docs/ name metrics the names module lacks"
    assert names.ALL_METRICS - in_readme - {names.BATCH, names.LR, names.WORLD_SIZE} == set(), \
        "the names module has metrics neither README nor docs/ document"
    for plain in (names.BATCH, names.LR, names.WORLD_SIZE):
        assert f"`{plain}`" in readme


def test_machine_figures_sit_where_mlflows_ui_shows_system_metrics():
    """MLflow's run page shows the metrics under its system-metric prefix in the "System metrics"
    tab and every other in "Model metrics": the host and GPU figures go to the first, so the second
    opens on the training (loss, accuracy, time)."""
    import inspect

    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    assert re.search(r'_metrics_prefix = "([^"]+)"', inspect.getsource(SystemMetricsMonitor)).group(1) \
        == names.SYSTEM_PREFIX
    machine = {*names.TELEMETRY_EPOCH_METRICS, *names.SYSTEM_METRICS, names.OTHER_CPU_PCT, names.OTHER_CPU_MEAN_PCT}
    assert {m for m in names.ALL_METRICS if m.startswith(names.SYSTEM_PREFIX)} == machine
    assert not any(m.startswith(("host/", "gpu/")) for m in names.ALL_METRICS)
    moved = {k: v for k, v in names.FORMER_NAMES.items() if k.startswith(names.SYSTEM_PREFIX)}
    assert set(moved.values()) == {m.removeprefix("system/") for m in machine - {*names.SYSTEM_METRICS}}


def test_the_docs_list_every_outcome():
    readme = documented()
    for outcome in names.OUTCOMES:
        assert f"`{outcome}`" in readme, outcome


def test_config_groups_offer_exactly_the_options_of_the_names_module():
    for group, options in names.GROUP_OPTIONS.items():
        if group == "task":  # a key, not a group: its options are the modules of sweeps.tasks
            tasks_dir = REPO / "src" / "sweeps" / "tasks"
            assert {p.stem for p in tasks_dir.glob("*.py")} - {"__init__", "base"} == set(options)
            continue
        assert {p.stem for p in (REPO / "src" / "sweeps" / "conf" / group).glob("*.yaml")} == set(options), group


def test_no_metric_is_both_a_per_epoch_series_and_a_summary():
    assert set(names.EPOCH_METRICS) & set(names.SUMMARY_METRICS) == {names.SAMPLES_PER_S}  # inference jobs only
    assert names.PEAK_MB not in names.EPOCH_METRICS


def test_the_names_module_loads_without_torch():
    code = "import sys, sweeps.names; assert 'torch' not in sys.modules, 'torch loaded'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_comments_that_list_options_in_config_yaml_name_exactly_the_options():
    listed = {}
    for line in (REPO / "src" / "sweeps" / "conf" / "config.yaml").read_text().splitlines():
        m = re.match(r"\s*-\s*(\w+):\s*\w+\s*#\s*([\w ]+(?:\|[\w ]+)+)", line)
        if m:
            listed[m.group(1)] = {o.strip().split()[0] for o in m.group(2).split("|")}
        m = re.match(r"task:\s*\w+\s*#\s*(.*)", line)
        if m:
            listed["task"] = {o.strip().split()[0] for o in m.group(1).split("|")}
    assert set(listed) == set(names.GROUP_OPTIONS)
    for group, options in listed.items():
        assert options == set(names.GROUP_OPTIONS[group]), group


# A string shaped like a metric or tag key: a known family, then "/" (metrics) or "." (tags).
KEY = re.compile(r"^(time|train|test|phase|perf|mem|infer|energy|gpu|host|system|target|data|env|sweeps|slurm"
                 r"|max_batch|model)[/.][a-z0-9_./]+$")
SRC = REPO / "src" / "sweeps"


def _strings(tree: ast.AST):
    """(line, text) of every string literal; an f-string reads with ``x`` for each placeholder,
    so ``f"phase/{p}_ms"`` is caught as ``phase/x_ms``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)


def _module_path(text: str) -> bool:
    """``sweeps.tasks.train``, ``sweeps.models.resnet50``: a module of this package, imported by
    name (tasks register on import, a model's target class), not a key."""
    parts = text.split(".")
    return parts[0] == "sweeps" and len(parts) > 1 and ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file())


def test_every_metric_and_tag_key_in_the_code_comes_from_the_names_module():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "names.py":
            continue
        for line, text in _strings(ast.parse(path.read_text(), str(path))):
            if KEY.match(text) and not _module_path(text):
                found.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
    assert found == [], "keys spelled out instead of taken from sweeps.names:\n" + "\n".join(found)


def test_mlflow_names_written_out_here_are_mlflows():
    """A job's process uses these without importing mlflow (its store calls run in the store's
    own process): an MLflow release that renames one must fail here, not in the UI."""
    from mlflow.utils import mlflow_tags, validation

    for name in ("MLFLOW_RUN_NOTE", "MLFLOW_SOURCE_NAME", "MLFLOW_SOURCE_TYPE", "MLFLOW_USER", "MLFLOW_GIT_COMMIT",
                 "MLFLOW_DATASET_CONTEXT"):
        assert getattr(names, name) == getattr(mlflow_tags, name), name
    assert (names.MAX_PARAM_VAL_LENGTH, names.MAX_TAG_VAL_LENGTH) == (validation.MAX_PARAM_VAL_LENGTH,
                                                                      validation.MAX_TAG_VAL_LENGTH)
