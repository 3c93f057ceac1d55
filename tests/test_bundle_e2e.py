"""python -m sweeps.bundle end to end: a real sweep on 'machine A' and on 'machine B' (two stores, two
hostnames: B runs in a UTS namespace of its own, ``unshare --uts``, as root), B exported, imported
into A twice, and ``--compare --by machine`` on A; and an import killed half-way (SIGKILL) then run
again. Real processes where the process is the point (a hostname, a kill)."""
from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from conftest import cli_in_process, store
from sweeps import names
from sweeps.bundle import __main__ as bundle_cli
from sweeps.bundle import export_bundle

pytestmark = pytest.mark.slow
TINY = ["model=mlp", "dataset=diabetes", "epochs=2", "device=cpu", "telemetry.interval_s=0"]
HOST_B = "machine-b"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}


def _main(module, args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main(args)
    return code, out.getvalue(), err.getvalue()


def _rows(db: Path) -> list[tuple]:
    """(run, key, step, count) of the sqlite store ``db``: one row per (run, metric, step)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT run_uuid, key, step, count(*) FROM metrics GROUP BY run_uuid, key, step").fetchall()


def _can_unshare() -> bool:
    if not shutil.which("unshare") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare --uts (a second hostname)")
def test_a_sweep_from_machine_b_imported_twice_into_machine_a_compares_by_machine(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    proc = cli_in_process(["-m", "batch=32,64", *TINY], a)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bundle = b / "b.zip"
    script = (f"hostname {HOST_B} && {sys.executable} -m sweeps -m batch=32,64 {' '.join(TINY)} && "
              f"{sys.executable} -m sweeps.bundle export --experiment sweeps -o {bundle}")
    done = subprocess.run(["unshare", "--uts", "sh", "-c", script], cwd=b, env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exported 3 run(s) of 1 sweep(s)" in done.stdout
    uri = store(a).tracking_uri
    for attempt in range(2):
        code, out, err = _main(bundle_cli, ["import", str(bundle), "--tracking-uri", uri])
        assert code == 0, err
        assert ("3 run(s) created" if attempt == 0 else "3 already there; 0 metric values") in out, out
        assert HOST_B in out

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sweeps").experiment_id
    every = client.search_runs([exp])
    imported = [r for r in every if names.IMPORT_SOURCE_RUN_TAG in r.data.tags]
    assert len(every) == 6 and len(imported) == 3
    rows = _rows(a / "mlruns" / "mlflow.db")
    assert {count for *_, count in rows} == {1}  # every (run, metric, step) once
    source_rows = _rows(b / "mlruns" / "mlflow.db")
    mine = {r.info.run_id for r in imported}
    assert len([r for r in rows if r[0] in mine]) == len(source_rows)
    job = next(r for r in imported if r.data.tags.get(names.PARENT_RUN_TAG))
    assert job.data.tags[names.ENV_HOST] == HOST_B and job.info.status == "FINISHED"
    assert job.data.tags[names.IMPORTED_FROM_TAG].startswith(f"{HOST_B}: sqlite:///{b}")
    csv_path = client.download_artifacts(job.info.run_id, "epochs.csv", str(tmp_path / "dl"))
    with open(csv_path, newline="") as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == [1, 2]  # artifacts open

    from sweeps.report import __main__ as report

    code, out, err = _main(report, ["--compare", "--by", "machine", "--experiment", "sweeps", "--tracking-uri", uri,
                                    "--out", str(tmp_path / "cmp")])
    assert code == 0, err
    assert f"{HOST_B} / " in out and f"{socket.gethostname()} / " in out
    assert "×" in out  # each machine's ratio to the baseline


def _big_source(folder: Path, runs: int = 24, epochs: int = 400) -> Path:
    """A store with one sweep of ``runs`` jobs × ``epochs`` epochs × 16 metrics, exported."""
    from mlflow.entities import Metric

    from sweeps.tracking.store.store import open_store

    client, exp = open_store(f"sqlite:///{folder / 'mlflow.db'}", "big")
    parent = client.create_run(exp, run_name="sweep", tags={names.KIND_TAG: "sweep"}).info.run_id
    for r in range(runs):
        rid = client.create_run(exp, run_name=f"job {r}", tags={names.PARENT_RUN_TAG: parent}).info.run_id
        values = [Metric(f"train/m{i}", float(e * i), 1_700_000_000_000 + e, e) for e in range(1, epochs + 1)
                  for i in range(16)]
        for i in range(0, len(values), 1000):
            client.log_batch(rid, metrics=values[i:i + 1000])
        client.log_text(rid, f"job {r}\n" * 100, "notes/job.txt")
        client.set_terminated(rid, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    bundle = folder / "big.zip"
    export_bundle("big", bundle, tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    return bundle


def _whole_runs(db: Path) -> int:
    """How many runs of ``db`` carry their import digest (imported whole) now."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5)) as conn:
            return conn.execute("SELECT count(*) FROM tags WHERE key = ?", (names.IMPORT_DIGEST_TAG,)).fetchone()[0]
    except sqlite3.Error:  # not made yet, or locked by the import this instant
        return 0


def test_an_import_killed_half_way_is_completed_by_a_rerun_and_stores_nothing_twice(tmp_path):
    src, target = tmp_path / "src", tmp_path / "target"
    src.mkdir()
    target.mkdir()
    bundle = _big_source(src)
    db = target / "mlflow.db"
    cmd = [sys.executable, "-m", "sweeps.bundle", "import", str(bundle), "--tracking-uri", f"sqlite:///{db}"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while _whole_runs(db) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the import ended before it could be killed half-way"
        workers = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert len(workers) >= 2  # a large import: two worker processes share it
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == []  # they died with it: nothing writes beside the rerun
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("big").experiment_id
    half = client.search_runs([exp])
    assert 0 < len(half) and sum(names.IMPORT_DIGEST_TAG in r.data.tags for r in half) < 25  # not whole
    again = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    runs = client.search_runs([exp])
    assert len(runs) == 25 and all(names.IMPORT_DIGEST_TAG in r.data.tags for r in runs)
    assert len({r.data.tags[names.IMPORT_SOURCE_RUN_TAG] for r in runs}) == 25
    rows = _rows(db)
    assert len(rows) == 24 * 400 * 16 and {count for *_, count in rows} == {1}
    for run in runs:
        if run.data.tags.get(names.PARENT_RUN_TAG):
            assert client.download_artifacts(run.info.run_id, "notes/job.txt", str(tmp_path / run.info.run_id))


def test_the_benchmark_script_runs_on_its_smallest_setting(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(repo / "scripts" / "bench_bundle.py"), "--runs", "2", "--epochs", "5,10",
                           "--repeats", "1", "--work", str(tmp_path)], env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and all("export" in line and "import" in line and "us/value" in line for line in lines)
