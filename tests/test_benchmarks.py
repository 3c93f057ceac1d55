"""The benchmark scripts still run the code they measure: a script of ``scripts/`` whose figures
docs/benchmarks.md reports is run on its smallest setting, through the real path it benchmarks,
and what it prints is checked where it says what was stored. (The figures themselves are the
benchmarks' to print, not a test's to assert.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

JOBS, WARMUP_S, WINDOW_S = 3, 2, 4


def _bench(tmp_path, script: str, *args: str) -> str:
    """What ``scripts/<script>`` printed, run as a user runs it (from another folder), once it exited 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_bench_server_stores_every_simulated_jobs_epochs_once_through_journal_and_follower(tmp_path):
    """``scripts/bench_server.py`` starts a real ``mlflow server`` on a new sqlite file, runs
    :data:`JOBS` simulated jobs — each a run whose epochs (15 values, one a second) are appended to
    its journal and shipped by its follower — ends them as a job ends, and reads the database back:
    its table row says every (run, key, step) is there once. (Whether the server kept pace, its
"carried" column, is a figure of the machine's load: not asserted.)"""
    out = _bench(tmp_path, "bench_server.py", "--backend", "sqlite", "--jobs", str(JOBS), "--repeats", "1",
                 "--warmup-s", str(WARMUP_S), "--window-s", str(WINDOW_S), "--end-s", "120")
    row = next((line for line in out.splitlines() if line.startswith(f"{JOBS} | ")), None)
    assert row is not None, out
    cells = [c.strip() for c in row.split("|")]
    expected = JOBS * (WARMUP_S + WINDOW_S) * 15
    assert cells[6] == f"{expected}..{expected} / {expected}", row  # values stored / expected
    assert (cells[7], cells[8]) == ("0", "0"), row  # lost, duplicated


@pytest.mark.slow
def test_bench_epoch_append_times_a_jobs_journal_append_on_the_real_epoch_log(tmp_path):
    """``scripts/bench_epoch_append.py`` times a job's per-epoch work on the real
    :class:`~sweeps.tracking.journal.journal.EpochLog` of a real run: each of its rows prints a time."""
    out = _bench(tmp_path, "bench_epoch_append.py", "--repeats", "1", "--epochs", "50")
    row = next((line for line in out.splitlines() if "a job's append (journal line)" in line), None)
    assert row is not None, out
    assert float(row.split()[-3]) > 0, row  # µs per epoch, median [min, max]


@pytest.mark.slow
def test_bench_fixed_cost_breaks_a_jobs_fixed_cost_down_by_the_steps_the_code_has(tmp_path):
    """``scripts/bench_fixed_cost.py --only items`` profiles a real 10-job ``python -m sweeps -m``
    sweep and finds each step it names in the profile: a step renamed in the code (0 calls) or a
    profile that was never written would make its table say nothing."""
    out = _bench(tmp_path, "bench_fixed_cost.py", "--repeats", "1", "--only", "items")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("step "))
    table = lines[header + 1:next(i for i, line in enumerate(lines) if line.startswith("(whole sweep"))]
    calls = {line[:72].strip(): int(line.split()[-1]) for line in table}  # step → calls in the 10 jobs
    assert len(calls) >= 10, out
    assert all(n >= 1 for step, n in calls.items() if "telemetry.png" not in step), out  # (no plot for tiny jobs)


@pytest.mark.slow
def test_bench_epoch_stalls_reads_each_modes_epochs_from_the_jobs_run(tmp_path):
    """``scripts/bench_epoch_stalls.py`` runs study 5's job as one job and as a sweep's and reads
    each run's every epoch back from its ``epochs.csv``: each mode's row gives its epochs' median."""
    out = _bench(tmp_path, "bench_epoch_stalls.py", "--repeats", "1", "--epochs", "200", "--hogs", "0",
                 "--only", "one,sweep")
    rows = [line for line in out.splitlines() if "epoch ms: median" in line]
    assert {("one job" in r, "sweep (-m)" in r) for r in rows} == {(True, False), (False, True)}, out
    assert all(float(r.split("median ")[1].split()[0]) > 0 for r in rows), out


@pytest.mark.slow
def test_bench_helper_starvation_times_a_jobs_end_quiet_and_beside_a_busy_loop(tmp_path):
    """``scripts/bench_helper_starvation.py`` runs a real job quietly and beside a busy loop and
    prints, for each, its wall and the time its end waited on its helper processes."""
    out = _bench(tmp_path, "bench_helper_starvation.py", "--repeats", "1", "--hogs", "1")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("quiet ", "busy "))}
    assert set(rows) == {"quiet", "busy"}, out
    assert all(float(row[1]) > 0 for row in rows.values()), out  # wall, s


@pytest.mark.slow
def test_bench_server_killed_stops_the_server_it_started(tmp_path):
    """``kill`` (SIGTERM) of ``scripts/bench_server.py`` while its simulated jobs run ends the script
    as Ctrl-C does: the server it started stops with it, its port freed, and so do its client
    processes — none left running in its folder, retrying against a server that is gone (and
    loading the machine the next trial measures), as after a plain SIGTERM once."""
    import signal
    import socket
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "bench_server.py"), "--backend", "sqlite", "--jobs",
                             "2", "--repeats", "1", "--warmup-s", "60", "--window-s", "60"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = None
        for line in proc.stdout:  # "## sqlite (...); server http://127.0.0.1:PORT" once it answers /health
            if "server http://" in line:
                url = line.rsplit("server ", 1)[1].strip()
                break
        assert url is not None, "the script ended before its server answered"
        time.sleep(2)  # its simulated jobs are running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) != 0
    finally:
        proc.kill()
        proc.wait()
    port = int(url.rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, f"{url} still answers"
    deadline = time.monotonic() + 30
    while _working_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _working_in(tmp_path) == []  # its client processes (started in its folder) are gone


def _working_in(folder) -> list[int]:
    """Processes whose working directory is ``folder``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(folder):
                found.append(int(pid))
        except OSError:  # gone meanwhile
            pass
    return found
