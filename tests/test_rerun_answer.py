"""The answer survives a rerun: a sweep whose jobs were skipped as done reports them from their
earlier runs (summary, verdict, ``python -m sweeps.report``, ``sweeps.results``), in the sweep's
order and at the sweep's price; and the same sweep started twice at once runs each configuration
once (a claim per config hash, :func:`sweeps.tracking.replay.resume.claim`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

from conftest import TESTS, cli_in_process, runs

TINY = ["model=mlp", "dataset=diabetes", "epochs=2", "device=cpu", "telemetry.interval_s=0"]


def _parent_id(stdout: str) -> str:
    """The sweep's parent run id, from its ``Next:`` report line."""
    return stdout.split("--run-id ", 1)[1].split()[0]


def test_a_rerun_reports_every_job_from_its_earlier_run_in_the_sweeps_order(tmp_path):
    import sweeps
    from sweeps.report.__main__ import main as report

    first = cli_in_process(["-m", "batch=32,64", *TINY], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    done = {r.data.tags["sweeps.overrides"]: r.info.run_id for r in runs(tmp_path) if "mlflow.parentRunId" in r.data.tags}
    assert set(done) == {"batch=32", "batch=64"}

    # the same sweep with one new batch in the middle, and a price given afterwards
    again = cli_in_process(["-m", "batch=32,16,64", "cost.per_hour=0.1", *TINY], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    out = again.stdout
    assert "3 job(s): 3 ok (2 from earlier runs: not run again here)" in out, out
    assert f"batch=32 (earlier run {done['batch=32'][:8]}…)" in out and f"(earlier run {done['batch=64'][:8]}…)" in out
    assert "Verdict (tag sweeps.verdict" in out
    assert "2 job(s) skipped: already done" in out
    parent = _parent_id(out)
    parents = [r for r in runs(tmp_path) if r.data.tags.get("sweeps.kind") == "sweep"]
    assert parent in {p.info.run_id for p in parents} and len(parents) == 2

    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    frame = sweeps.results("sweeps", tracking_uri=uri, sweep=parent)
    assert list(frame["batch"]) == [32, 16, 64]  # the sweep's order, not the runs' start times
    assert frame["run_id"][0] == done["batch=32"] and frame["run_id"][2] == done["batch=64"]
    assert set(frame["outcome"]) == {"ok"}
    # the rerun's price on the reused runs: every job is priced, the verdict's pick at its price
    import pandas as pd
    from mlflow import MlflowClient
    from sweeps.report import cost
    from sweeps.report.runs import find_sweep, load_jobs

    client = MlflowClient(uri)
    priced = {j.batch: cost.per_epoch(j) for j in load_jobs(client, find_sweep(client, run_id=parent))}
    assert set(priced) == {16, 32, 64} and all(c is not None and c > 0 for c in priced.values()), priced
    (row,) = sweeps.verdict("sweeps", tracking_uri=uri, sweep=parent).to_dict("records")
    if pd.notna(row["best_batch"]):  # timings on a loaded machine may tie: no pick, no headline price
        assert row["cost_per_epoch"] == pytest.approx(priced[row["best_batch"]])
    assert sweeps.verdict("sweeps", tracking_uri=uri, sweep=_parent_id(first.stdout)).iloc[0]["cost_per_epoch"] is None

    # all skipped: the parent is kept, and reports every job right after
    third = cli_in_process(["-m", "batch=32,16,64", *TINY], tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "0 job(s)" not in third.stdout and "3 job(s): 3 ok (3 from earlier runs" in third.stdout
    assert "Verdict" in third.stdout
    last = _parent_id(third.stdout)
    assert report(["--experiment", "sweeps", "--tracking-uri", uri, "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"sweep run `{last}`, 3 jobs" in text
    table = [line for line in text.splitlines() if line.startswith(("| 16 ", "| 32 ", "| 64 "))]
    assert len(table) == 3, text
    assert len(sweeps.results("sweeps", tracking_uri=uri, sweep=last)) == 3


def _sweep(cwd) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    env["PYTHONPATH"] = str(TESTS)
    return subprocess.Popen([sys.executable, "-m", "sweeps", "-m", "+experiment=diabetes", "batch=32,64", "epochs=50",
                             "telemetry.interval_s=0"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # two interpreters side by side on a fresh store: ~20 s
def test_the_same_sweep_started_twice_at_once_runs_each_configuration_once(tmp_path):
    import sweeps

    procs = [_sweep(tmp_path), _sweep(tmp_path)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "2 job(s): 2 ok" in out or "2 job(s): 1 ok, 1 running" in out, out
    jobs = [r for r in runs(tmp_path, "diabetes") if "mlflow.parentRunId" in r.data.tags]
    per_config = Counter(r.data.tags["sweeps.config_hash"] for r in jobs)
    assert len(per_config) == 2 and set(per_config.values()) == {1}, per_config
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    for out, _ in outs:  # once both ended, each sweep's report holds both jobs, each once, ok
        frame = sweeps.results("diabetes", tracking_uri=uri, sweep=_parent_id(out))
        assert sorted(frame["run_id"]) == sorted(r.info.run_id for r in jobs)
        assert set(frame["outcome"]) == {"ok"}
    assert not (tmp_path / "checkpoints").exists()  # the claims went with their jobs


HOLDER = textwrap.dedent("""
    import sys, time
    from sweeps.tracking.replay import resume
    held = resume.claim(sys.argv[1], "abc123")
    print("held" if held.held else "unclaimed", flush=True)
    time.sleep(120)
""")


def test_a_claim_is_held_once_and_freed_when_its_holder_dies(tmp_path):
    from sweeps.tracking.replay import resume

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "checkpoints")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(resume.ClaimHeld) as held:
            resume.claim(tmp_path / "checkpoints", "abc123")
        assert held.value.holder["pid"] == holder.pid and held.value.holder["since"] <= time.time()
        other = resume.claim(tmp_path / "checkpoints", "def456")  # another config: free
        assert other.held
        other.release()
    finally:
        holder.send_signal(signal.SIGKILL)  # no release: the kernel drops the lock with the process
        holder.wait(timeout=30)
        holder.stdout.close()
    with resume.claim(tmp_path / "checkpoints", "abc123") as mine:
        assert mine.held
        with pytest.raises(resume.ClaimHeld):  # a second claim in the same process fails too
            resume.claim(tmp_path / "checkpoints", "abc123")
    assert not (tmp_path / "checkpoints").exists()  # released: its file and the empty folders removed
    with resume.claim(tmp_path / "checkpoints", "abc123") as again:
        assert again.held
