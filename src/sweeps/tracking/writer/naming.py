"""How runs read in the MLflow run list: names, descriptions, the sweep's shared config.

A job's run is named ``<model> b<batch> <device> <other swept values> #<sweep id>`` — e.g.
``mlp b64 cpu adam #3fa2c1`` — where the sweep id is the first `SWEEP_ID_CHARS`
characters of the sweep's parent run id (a one-job run without a sweep uses its own run id), so
the same job in two sweeps never shares a name and the name says where to find its sweep. The
swept ``key=value`` pairs stay in the ``sweeps.overrides`` tag. Descriptions are MLflow's
``mlflow.note.content`` tag (markdown, shown on the run page).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from sweeps import names

MAX_NAME = 120  # characters: MLflow allows 250, the run list shows far fewer
MAX_NOTE = names.MAX_TAG_VAL_LENGTH  # characters of a description (8,000: a tag value's limit)
# keys that name the run already (model, batch, device) or are housekeeping, never in the name
_NAMED = ("model", "batch", "device")
# swept groups whose option reads well alone ("bf16", "adam"); other keys keep their last part: "base_lr=0.05"
_BARE = ("precision", "optimizer", "dataset", "task", "schedule")


def short_id(run_id: str) -> str:
    """``run_id`` cut to `SWEEP_ID_CHARS` characters (hex, so 16.7 M values)."""
    return run_id[:names.SWEEP_ID_CHARS]


# a comma that starts another override (``,batch=64``), not one inside a value (``[16,32]``)
_NEXT_OVERRIDE = re.compile(r",(?=[+~]*[A-Za-z_][\w.\-/@]*=)")


def parse_overrides(text: str) -> list[tuple[str, str]]:
    """``"model=mlp batch=64"`` → ``[("model", "mlp"), ("batch", "64")]`` (``+``/``~`` dropped).
    Hydra's comma-joined form (``hydra.job.override_dirname``: ``"+experiment=diabetes,batch=64"``)
    reads the same; a comma inside a value (``model.hidden=[16,32]``) stays in it."""
    pairs = []
    for word in text.split():
        for item in _NEXT_OVERRIDE.split(word):
            key, _, value = item.partition("=")
            if value:
                pairs.append((key.lstrip("+~"), value))
    return pairs


def device_label(device: Any) -> str:
    """``cpu``, ``cuda``, ``cuda:1`` (an index), ``ddp×2`` (processes) from the ``device`` node."""
    label = str(device.get("name", "?"))
    if device.get("index") is not None:
        label += f":{device.get('index')}"
    if label == "ddp" and device.get("gpus") is not None:
        label += f"×{device.get('gpus')}"
    return label


def job_title(cfg: Any, choices: dict[str, str], overrides: str, multirun: bool) -> str:
    """The run name without its id: model, batch, device, then (in a sweep) the other swept
    values, compact, in the order given; a task other than ``train`` is named too."""
    batch = cfg.get("batch")
    # the model option chosen; without Hydra's choices (compose API) its class's name
    model = choices.get("model") or str(cfg.model.get("_target_", "?")).rsplit(".", 1)[-1].lower()
    parts = [model, "full-batch" if batch == "full" else f"b{batch}", device_label(cfg.device)]
    task = str(cfg.get("task", "train"))
    if task != "train":
        parts.append(task)
    for key, value in parse_overrides(overrides) if multirun else ():
        top = key.split(".")[0]
        if top in _NAMED or key == "task":
            continue
        parts.append(value if key in _BARE else f"{key.rsplit('.', 1)[-1]}={value}")
    return " ".join(parts)


def with_id(title: str, run_id: str) -> str:
    """``title #<short id>``, the title cut so the name stays under `MAX_NAME`."""
    tag = f" #{short_id(run_id)}"
    if len(title) + len(tag) > MAX_NAME:
        title = title[:MAX_NAME - len(tag) - 1] + "…"
    return title + tag


def sweep_title(swept: Iterable[str], preset: str | None, run_id: str) -> str:
    """A parent run's name: ``sweep #3fa2c1 cifar10_batch_scaling: model × batch``."""
    keys = " × ".join(swept) or "one job each"
    return f"sweep #{short_id(run_id)} " + (f"{preset}: " if preset else "") + keys


def sweep_note(command: str, swept: Iterable[str], sweep_dir: str, run_id: str, summary: str = "") -> str:
    """The parent run's description: the command line, what varies, the job naming, and — once
    the sweep has ended — its summary table (`sweeps.job.summary.print_summary`)."""
    swept = list(swept)
    lines = ["Command:", "", f"    {command}", "",
             f"Varies: {', '.join(f'`{k}`' for k in swept) or 'nothing'}. Jobs are nested below, named "
             f"`<model> b<batch> <device> … #{short_id(run_id)}`; their shared config is this run's params.",
             "", f"Hydra sweep dir: `{sweep_dir}`"]
    if summary:
        rows = summary.splitlines()
        lines += ["", "Summary:", ""]
        room = MAX_NOTE - len("\n".join(lines)) - 200  # what the table may take: a long sweep keeps its head
        shown = [f"    {line}" for line in rows[:2]]  # header and rule; the last line (the counts) always
        used = sum(len(x) + 1 for x in shown) + len(rows[-1]) + 5
        for line in rows[2:-1]:
            used += len(line) + 5
            if used > room:
                shown.append(f"    … {len(rows) - len(shown) - 1} more job(s): artifact summary.txt has them all")
                break
            shown.append(f"    {line}")
        lines += [*shown, f"    {rows[-1]}"] if len(rows) > 2 else shown
    return _cap("\n".join(lines))


def job_note(outcome: str, error: str, table: str) -> str:
    """A job run's description: its outcome line (``**oom** — CUDA out of memory …``, the error
    whole) and its row of the sweep summary (swept overrides, times, final score) as a table."""
    head = f"**{outcome}**" + (f" — {error}" if error else "")
    return _cap("\n".join([head, "", *(f"    {line}" for line in table.splitlines())]))


def shared_params(param_sets: list[dict[str, str]]) -> dict[str, str]:
    """The params every one of ``param_sets`` has with the same value (a sweep's fixed config),
    sorted by key; ``{}`` for no sets."""
    if not param_sets:
        return {}
    first, rest = param_sets[0], param_sets[1:]
    return {k: v for k, v in sorted(first.items()) if all(p.get(k) == v for p in rest)}


def _cap(text: str) -> str:
    return text if len(text) <= MAX_NOTE else text[:MAX_NOTE - 1] + "…"
