"""How many concurrent jobs one `mlflow server --workers 4` carries, each through a journal and follower.

N simulated jobs, each logging 15 metric values per 1-s epoch as a training job does — appended
to its run's journal and shipped by a follower of its own (the real
:class:`sweeps.tracking.writer.run_writer.RunWriter`, :class:`~sweeps.tracking.journal.journal.EpochLog` and
:mod:`sweeps.tracking.follower.follower`), spread over several client processes — send to a real
`mlflow server` on 127.0.0.1 that this script starts — with a sqlite backend (a file on local
disk in WAL mode, as docs/devices.md advises a server's sqlite; ``--sqlite-journal delete`` for
sqlite's default rollback journal), and with a PostgreSQL backend from a cluster it creates in a
temp dir (Debian's `postgresql`, psycopg2 from `pip install -e .[bench]`) — and stops, with every
process it started.

For each N it prints, over ``--repeats`` trials (median [min, max]): p50/p99 latency of a
``log_batch`` call and sends per second in the steady-state window (after ``--warmup-s``), the
followers' beat at the end (s), and the values in the store vs the values expected, read back
from the database (each (run, key, step) once: lost and duplicated must be 0), and the values the
server ingested in the window ÷ the values the jobs logged meanwhile (< 1: a backlog grows). A
trial *carries* N when nothing is lost or duplicated, p99 latency < ``--p99-bound-s`` (default
the cadence cap, 30 s) and the server kept up (ingested >= 95% of what was logged).

    python scripts/bench_server.py --backend sqlite postgres --jobs 60 120 250 500 750 --repeats 3
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

KEYS = [f"bench/m{i:02d}" for i in range(15)]  # ~15 values per epoch, as a real job logs
EPOCH_S = 1.0
POOL = 80  # DB connections per server worker: 2 x the 40 threads a worker serves requests with


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen) -> None:
    """End ``proc`` and every process it started (uvicorn workers, MLflow's job consumers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(1)


@contextmanager
def postgres_store(tmp: Path):
    """A throw-away PostgreSQL cluster on a loopback port (as user ``postgres`` when run as root)."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not bins:
        sys.exit("bench_server: no /usr/lib/postgresql/*/bin; install Debian's `postgresql` or pass --backend sqlite")
    pg = bins[-1]
    data, port = tmp / "pg", _free_port()
    data.mkdir()
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(tmp, "postgres")
        shutil.chown(data, "postgres")
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    run(str(pg / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    run(str(pg / "pg_ctl"), "-D", str(data), "-l", str(tmp / "pg.log"), "-w", "-t", "120", "start", "-o",
        f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c max_connections=400")
    try:
        run(str(pg / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "mlflow")
        version = run(str(pg / "postgres"), "--version").stdout.strip()
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow", version
    finally:
        subprocess.run([*as_user, str(pg / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)


@contextmanager
def sqlite_store(tmp: Path, journal: str = "wal"):
    """A new sqlite file in ``journal`` mode. WAL (https://sqlite.org/wal.html) is persistent in
    the file, so the server's every connection uses it: a commit appends to the log instead of
    rewriting pages through a rollback journal — a server's choice for a DB on its local disk
    (WAL needs shared memory, so not on a network filesystem)."""
    import sqlite3
    db = tmp / "mlflow.db"
    with sqlite3.connect(db) as conn:
        mode = conn.execute(f"PRAGMA journal_mode = {journal}").fetchone()[0]
    conn.close()
    yield f"sqlite:///{db}", f"sqlite {sqlite3.sqlite_version}, journal_mode {mode}"


@contextmanager
def mlflow_server(store_uri: str, tmp: Path, workers: int):
    """`mlflow server --workers N` on a free loopback port; yields its URL once /health answers."""
    import requests
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logf = open(tmp / "server.log", "w")
    # MLflow's log_batch holds one pooled DB connection while _log_metrics checks out a second: with
    # more requests in flight in a worker (up to its 40 threads) than its pool holds (5 + 10 by
    # default), every thread holds one and waits for another until the pool's 30-s timeout — the
    # "QueuePool limit" errors that capped a default server at ~60 jobs. A pool of 2 x 40 cannot
    # deadlock so.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no GenAI job runners (7 idle processes)
           "MLFLOW_SQLALCHEMYSTORE_POOL_SIZE": str(POOL // 2), "MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW": str(POOL // 2)}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers), "--backend-store-uri", store_uri,
                             "--artifacts-destination", str(tmp / "artifacts")],
                            cwd=tmp, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"bench_server: mlflow server did not start; its log:\n{(tmp / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        _kill_group(proc)
        logf.close()


def client_process(url: str, exp_id: str, jobs: int, start_at: float, warmup_s: float, window_s: float,
                   out: mp.Queue) -> None:
    """One client process: ``jobs`` simulated jobs, each as a training job logs to MLflow — a
    :class:`~sweeps.tracking.writer.run_writer.RunWriter` whose epochs are appended to the run's journal
    (:class:`~sweeps.tracking.journal.journal.EpochLog`, 15 values an epoch, one epoch a second from
    ``start_at``, time.time(), for warm-up + window) and shipped by a follower of its own
    (:mod:`sweeps.tracking.follower.follower`, on the cadence a job's follower keeps); then each job's
    end: its run drained through its last epoch, and closed."""
    os.environ["MLFLOW_HTTP_POOL_MAXSIZE"] = str(max(10, jobs))  # one connection per job's follower
    sys.stdout = open(os.devnull, "w")  # MLflow prints a "View run" line per ended run
    from mlflow import MlflowClient

    from sweeps.tracking.follower import delivery, priority
    from sweeps.tracking.journal.journal import JOURNAL, EpochLog
    from sweeps.tracking.writer.run_writer import RunWriter

    calls: list[tuple[float, float, int]] = []  # (start, time.time(); latency, s; values)
    failed = [0]

    class TimedClient(MlflowClient):
        def log_batch(self, run_id, metrics=(), **kw):
            t0, p0 = time.time(), time.perf_counter()
            try:
                return super().log_batch(run_id, metrics=metrics, **kw)
            except Exception:
                failed[0] += 1
                raise
            finally:
                if metrics:
                    calls.append((t0, time.perf_counter() - p0, len(metrics)))

    # Each simulated job stands for a job on a machine of its own, whose follower yields only to
    # that job's training. Here there is no training to yield to, and the server shares these 2
    # cores: a follower at the lowest priority (nice 19 under SCHED_IDLE, sweeps.tracking.follower.priority)
    # would get CPU only while the server's workers idle, and the figures would be this
    # co-location's (sqlite at 500 jobs: 4.2 sends/s, p99 562 s, 2026-11-27). So the followers keep
    # normal priority; and each job has a client of its own, so a follower (a thread) of its own.
    priority.lowest = lambda thread=0: None
    folders = Path(tempfile.mkdtemp(prefix="sweeps-bench-server-"))
    jobs_: list[tuple[RunWriter, EpochLog]] = []
    for i in range(jobs):
        writer = _retry(lambda: RunWriter(TimedClient(url), exp_id, f"job{i}", None, {}))
        folder = folders / writer.run_id
        writer.keep_in(folder)
        jobs_.append((writer, EpochLog(writer, folder / JOURNAL, regression=False, log_every_s=3600)))
        writer.follow()
    epochs = int((warmup_s + window_s) / EPOCH_S)
    time.sleep(max(0.0, start_at - time.time()))
    for epoch in range(1, epochs + 1):  # every job's epoch ends once a second
        for _, journal in jobs_:
            journal.append({"epoch": epoch, **{k: epoch + i / 100 for i, k in enumerate(KEYS)}})
        time.sleep(max(0.0, start_at + epoch * EPOCH_S - time.time()))
    beats = [delivery.sender(w.client).cadence.beat_s for w, _ in jobs_]

    def end(job: tuple[RunWriter, EpochLog]) -> int:
        writer, journal = job
        journal.close()
        writer.drain(epochs)
        lost = writer.drained()
        _retry(lambda: writer.end("FINISHED"))  # the run's end retried when the server is busy
        return lost

    with ThreadPoolExecutor(16) as pool:  # the jobs' ends, many at once
        lost = sum(pool.map(end, jobs_))
    shutil.rmtree(folders, ignore_errors=True)
    window = (start_at + warmup_s, start_at + warmup_s + window_s)
    out.put({"latencies": [lat for t0, lat, _ in calls if window[0] <= t0 < window[1]],
             "values_in_window": sum(n for t0, lat, n in calls if window[0] <= t0 + lat < window[1]),
             "runs": [w.run_id for w, _ in jobs_], "epochs": epochs, "beats": beats,
             "lost": lost, "failed": failed[0]})


def _retry(call, tries: int = 10):
    """``call()``, again after 1, 2, 4... s (capped at 8 s) while the server is too busy to answer."""
    for i in range(tries):
        try:
            return call()
        except Exception:  # busy pool, timeout: the server is saturated, not the request bad
            if i == tries - 1:
                raise
            time.sleep(min(8, 2 ** i))


def stored(store_uri: str, run_ids: list[str]) -> tuple[int, int]:
    """(distinct (run, key, step) values in the store, extra copies of any) for ``run_ids``."""
    import sqlalchemy as sa
    engine = sa.create_engine(store_uri)
    ids = set(run_ids)
    distinct = extra = 0
    with engine.connect() as con:
        rows = con.execute(sa.text("SELECT run_uuid, COUNT(*) FROM metrics GROUP BY run_uuid, key, step"))
        for run_uuid, n in rows:
            if run_uuid in ids:
                distinct += 1
                extra += n - 1
    engine.dispose()
    return distinct, extra


class Unfinished(Exception):
    """A trial whose jobs had not all ended ``end_s`` after its window (the server's backlog)."""


def trial(url: str, store_uri: str, n: int, procs: int, warmup_s: float, window_s: float, end_s: float) -> dict:
    """One trial of ``n`` simulated jobs in ``procs`` client processes. Raises :class:`Unfinished`
    (the client processes killed, the values stored by then counted) when they have not all
    reported ``end_s`` after the window."""
    from mlflow import MlflowClient
    exp_id = MlflowClient(url).create_experiment(f"bench-{n}-{time.time_ns()}")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    sizes = [n // procs + (i < n % procs) for i in range(procs)]
    start_at = time.time() + 15 + n / 25  # room for every client to import mlflow and create its runs
    workers = [ctx.Process(target=client_process, args=(url, exp_id, s, start_at, warmup_s, window_s, out))
               for s in sizes if s]
    for p in workers:
        p.start()
    deadline = start_at + warmup_s + window_s + end_s
    parts = None
    try:
        parts = [out.get(timeout=max(0.0, deadline - time.time())) for _ in workers]
    except queue.Empty:
        pass
    finally:
        if parts is None:  # not all ended, or Ctrl-C / kill: else they go on retrying against a server stopped next
            for p in workers:
                p.kill()
    if parts is None:
        import sqlalchemy as sa  # the database itself: the server may still be too busy to answer
        engine = sa.create_engine(store_uri)
        with engine.connect() as con:
            runs = [r for (r,) in con.execute(sa.text("SELECT run_uuid FROM runs WHERE experiment_id = :e"),
                                                {"e": int(exp_id)})]
        engine.dispose()
        distinct, _ = stored(store_uri, runs)
        expected = len(runs) * int((warmup_s + window_s) / EPOCH_S) * len(KEYS)
        raise Unfinished(f"not all jobs had ended {end_s:g} s after the window; {distinct} of {expected} values "
                         f"stored by then") from None
    for p in workers:
        p.join()
    lat = sorted(x for p in parts for x in p["latencies"])
    runs = [r for p in parts for r in p["runs"]]
    expected = len(runs) * parts[0]["epochs"] * len(KEYS)
    distinct, extra = stored(store_uri, runs)
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] if lat else float("nan")  # noqa: E731
    produced = len(runs) * len(KEYS) / EPOCH_S  # values/s the jobs log
    return {"p50": q(0.50), "p99": q(0.99), "sends_per_s": len(lat) / window_s,
            "kept_up": sum(p["values_in_window"] for p in parts) / window_s / produced,
            "beat": statistics.median(b for p in parts for b in p["beats"]), "expected": expected,
            "stored": distinct, "lost": expected - distinct, "dup": extra,
            "failed": sum(p["failed"] for p in parts), "unsent": sum(p["lost"] for p in parts)}


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    ap.add_argument("--jobs", nargs="+", type=int, default=[60, 120, 250, 500, 750])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup-s", type=float, default=60.0, help="s of epochs before the measured window")
    ap.add_argument("--window-s", type=float, default=120.0, help="s of steady state measured: several send cycles (up to 30 s + latency each)")
    ap.add_argument("--jobs-per-process", type=int, default=125, help="simulated jobs per client process")
    ap.add_argument("--workers", type=int, default=4, help="mlflow server --workers")
    ap.add_argument("--sqlite-journal", default="wal", choices=["wal", "delete"],
                    help="the sqlite store's journal mode (sqlite's own default: delete)")
    ap.add_argument("--end-s", type=float, default=600.0,
                    help="s after the window for every job's end flush; a trial not ended by then is not carried")
    ap.add_argument("--p99-bound-s", type=float, default=30.0,
                    help="a trial carries N when p99 latency is under this (s; default: the cadence cap)")
    a = ap.parse_args()
    # `kill` (SIGTERM) ends it as Ctrl-C does: the server and PostgreSQL it started are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from mlflow import __version__ as mlflow_version
    from sweeps.tracking.follower.cadence import CAP_S, FLOOR_S, K
    print(f"# {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()}; mlflow {mlflow_version}; "
          f"cadence clamp({K:g} x latency, {FLOOR_S:g} s, {CAP_S:g} s); {a.workers} server workers; "
          f"warm-up {a.warmup_s:g} s, window {a.window_s:g} s, {a.repeats} repeats; carried = 0 lost, 0 duplicated, "
          f"p99 < {a.p99_bound_s:g} s, values ingested in the window >= 95% of those logged", flush=True)
    for backend in a.backend:
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-server-{backend}-"))
        tmp.chmod(0o755)
        try:
            store = postgres_store(tmp) if backend == "postgres" else sqlite_store(tmp, a.sqlite_journal)
            with store as (store_uri, version):
                with mlflow_server(store_uri, tmp, a.workers) as url:
                    print(f"## {backend} ({version}); server {url}", flush=True)
                    print("N | p50 latency s | p99 latency s | sends/s | ingested / logged | beat s | values stored / expected | lost | dup"
                          " | carried", flush=True)
                    largest = 0
                    for n in a.jobs:
                        rs = []
                        try:
                            for _ in range(a.repeats):
                                rs.append(trial(url, store_uri, n, math.ceil(n / a.jobs_per_process), a.warmup_s,
                                                a.window_s, a.end_s))
                                print(f"  trial N={n}: " + ", ".join(f"{k} {v:.3g}" for k, v in rs[-1].items()),
                                      flush=True)
                        except Unfinished as e:
                            print(f"{n} | not carried: {e} (load {os.getloadavg()[0]:.1f})", flush=True)
                            break  # a larger N would not end either
                        ok = all(r["lost"] == 0 and r["dup"] == 0 and r["p99"] < a.p99_bound_s and r["kept_up"] >= 0.95
                                 for r in rs)
                        largest = n if ok and n > largest else largest
                        print(f"{n} | {spread([r['p50'] for r in rs], '{:.3f}')} | {spread([r['p99'] for r in rs])} | "
                              f"{spread([r['sends_per_s'] for r in rs], '{:.1f}')} | {spread([r['kept_up'] for r in rs])} | "
                              f"{spread([r['beat'] for r in rs])} | "
                              f"{min(r['stored'] for r in rs)}..{max(r['stored'] for r in rs)} / "
                              f"{rs[0]['expected']} | {max(r['lost'] for r in rs)} | {max(r['dup'] for r in rs)} | "
                              f"{'yes' if ok else 'no'}  (failed calls {sum(r['failed'] for r in rs)}, load "
                              f"{os.getloadavg()[0]:.1f})", flush=True)
                    print(f"largest N carried on {backend}: {largest}", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
