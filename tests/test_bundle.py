"""python -m sweeps.bundle: export a sweep's runs from a store into one file, import it into another,
each run and each (metric, step) once; refused files change nothing. A real sqlite MLflow store
holding a sweep as a sweep leaves it (a parent run and job runs with epochs, params, tags, artifacts),
built through MLflow's client in a second (the real sweeps end to end: tests/test_bundle_e2e.py)."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import socket
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from sweeps import names
from sweeps.bundle import __main__ as cli
from sweeps.bundle import export_bundle, import_bundle, layout
from sweeps.tracking.store.store import open_store

EPOCHS = 6
KEYS = (names.TRAIN_LOSS, names.EPOCH_S, names.TEST_RMSE)


def _uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def _job(client: MlflowClient, exp: str, parent: str, name: str, host: str, epochs: range, folder: Path,
         torch: str = "2.9.0") -> str:
    tags = {names.PARENT_RUN_TAG: parent, names.ENV_HOST: host, names.HARDWARE_TAG: f"{host} / cpu x",
            names.OUTCOME_TAG: names.OK, names.ENV_TORCH: torch}
    rid = client.create_run(exp, run_name=name, tags=tags).info.run_id
    client.log_batch(rid, params=[Param("model", "mlp"), Param("batch", name.split()[-1])])
    _epochs(client, rid, epochs)
    client.log_batch(rid, metrics=[Metric(names.MEDIAN_EPOCH_S, 0.5, 1_000, 0)])
    art = folder / f"art-{name.replace(' ', '_')}"
    (art / "sub").mkdir(parents=True)
    (art / "epochs.csv").write_text("epoch,loss\n" + "".join(f"{e},{1 / e}\n" for e in epochs))
    (art / "fingerprint.json").write_text(json.dumps({"host": host}))
    (art / "sub" / "blob.bin").write_bytes(bytes(range(256)) * 10)
    client.log_artifacts(rid, str(art))
    client.set_terminated(rid, "FINISHED")
    return rid


def _epochs(client: MlflowClient, rid: str, epochs: range) -> None:
    client.log_batch(rid, metrics=[Metric(k, 1.0 / e + i, 1_700_000_000_000 + e, e) for e in epochs
                                   for i, k in enumerate(KEYS)])


def _source(folder: Path, host: str = "machine-b", torch: str = "2.9.0") -> tuple[MlflowClient, str, list[str]]:
    """A store under ``folder`` with one sweep: (client, parent run id, job run ids)."""
    folder.mkdir(parents=True, exist_ok=True)
    client, exp = open_store(_uri(folder), "study")
    parent = client.create_run(exp, run_name="sweep #1", tags={names.KIND_TAG: "sweep", names.ENV_HOST: host}).info.run_id
    jobs = [_job(client, exp, parent, f"mlp b{b}", host, range(1, EPOCHS + 1), folder, torch) for b in (16, 32)]
    client.set_tag(parent, f"{names.SKIPPED_TAG_PREFIX}abc", jobs[0])  # a tag naming a run of the bundle
    client.set_terminated(parent, "FINISHED")
    return client, parent, jobs


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(folder, client, parent id, job ids, bundle path) of a source store exported once."""
    folder = tmp_path_factory.mktemp("source")
    client, parent, jobs = _source(folder / "store")
    bundle = folder / "sweep.zip"
    done = export_bundle("study", bundle, tracking_uri=_uri(folder / "store"))
    assert (done.runs, done.sweeps, done.artifacts) == (3, [parent], 6)
    return folder, client, parent, jobs, bundle


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(args)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _rows(db: Path) -> list[tuple]:
    """(run, key, step, count) of every metric row of the sqlite store ``db``, one per (run, key, step)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT run_uuid, key, step, count(*) FROM metrics GROUP BY run_uuid, key, step").fetchall()


def _imported(client: MlflowClient, experiment: str = "study") -> dict[str, object]:
    exp = client.get_experiment_by_name(experiment)
    return {r.data.tags[names.IMPORT_SOURCE_RUN_TAG]: r for r in client.search_runs([exp.experiment_id])}


def test_import_creates_the_sweep_with_everything_and_twice_stores_nothing_twice(source, tmp_path):
    folder, src, parent, jobs, bundle = source
    code, out, err = _main(["import", str(bundle), "--tracking-uri", _uri(tmp_path)])
    assert code == 0, err
    assert "3 run(s) created" in out and "machine-b" in out
    client = MlflowClient(_uri(tmp_path))
    got = _imported(client)
    assert set(got) == {parent, *jobs}
    for rid in jobs:
        mine, theirs = got[rid], src.get_run(rid)
        assert mine.info.run_id != rid
        assert mine.info.run_name == theirs.info.run_name and mine.info.status == "FINISHED"
        assert mine.info.start_time == theirs.info.start_time and mine.info.end_time == theirs.info.end_time
        assert mine.data.params == theirs.data.params
        assert mine.data.tags[names.PARENT_RUN_TAG] == got[parent].info.run_id  # the parent's id here
        assert mine.data.tags[names.IMPORTED_FROM_TAG].startswith(f"{socket.gethostname()}: {_uri(folder / 'store')}, run {rid}")
        for key in KEYS:
            assert [(m.step, m.value, m.timestamp) for m in client.get_metric_history(mine.info.run_id, key)] == \
                   [(m.step, m.value, m.timestamp) for m in src.get_metric_history(rid, key)]
        blob = Path(client.download_artifacts(mine.info.run_id, "sub/blob.bin", str(tmp_path / "dl" / rid)))
        assert blob.read_bytes() == bytes(range(256)) * 10  # artifacts open, byte for byte
    assert got[parent].data.tags[f"{names.SKIPPED_TAG_PREFIX}abc"] == got[jobs[0]].info.run_id
    rows = _rows(tmp_path / "mlflow.db")
    assert len(rows) == 2 * (EPOCHS * len(KEYS) + 1)

    code, out, err = _main(["import", str(bundle), "--tracking-uri", _uri(tmp_path)])
    assert code == 0, err
    assert "0 run(s) created, 0 completed, 3 already there; 0 metric values" in out
    assert _rows(tmp_path / "mlflow.db") == rows
    assert len(client.search_runs([client.get_experiment_by_name("study").experiment_id])) == 3


def test_two_bundles_that_share_runs_store_each_run_and_step_once(tmp_path):
    src, parent, jobs = _source(tmp_path / "src")
    first, second = tmp_path / "1.zip", tmp_path / "2.zip"
    export_bundle("study", first, tracking_uri=_uri(tmp_path / "src"))
    _epochs(src, jobs[1], range(EPOCHS + 1, EPOCHS + 4))  # the job went on: three more epochs
    export_bundle("study", second, tracking_uri=_uri(tmp_path / "src"))
    target = tmp_path / "target"
    target.mkdir()
    a = import_bundle(first, tracking_uri=_uri(target))
    b = import_bundle(second, tracking_uri=_uri(target))
    assert (a.created, b.created, b.completed, b.skipped) == (3, 0, 1, 2)
    assert b.values == 3 * len(KEYS)  # only the new epochs
    rows = _rows(target / "mlflow.db")
    assert {count for *_, count in rows} == {1}
    mine = _imported(MlflowClient(_uri(target)))[jobs[1]].info.run_id
    assert [m.step for m in MlflowClient(_uri(target)).get_metric_history(mine, KEYS[0])] == list(range(1, EPOCHS + 4))


def test_an_interrupted_import_rerun_completes_it_and_stores_nothing_twice(source, tmp_path, monkeypatch):
    from sweeps.tracking.follower import delivery

    *_, parent, jobs, bundle = source
    real, calls = delivery.Sender.send, []

    def send(self, client, run_id, values, tags=None, say=True):
        calls.append(run_id)
        if len(calls) == 2:  # Ctrl-C half-way through the second job's values, the first job whole
            real(self, client, run_id, values[:len(values) // 2], tags, say)
            raise KeyboardInterrupt
        return real(self, client, run_id, values, tags, say)

    with monkeypatch.context() as mp:
        mp.setattr(delivery.Sender, "send", send)
        code, out, err = _main(["import", str(bundle), "--tracking-uri", _uri(tmp_path)])
    assert code == 130 and "run the same import again" in err
    client = MlflowClient(_uri(tmp_path))
    half = _imported(client)
    assert len(half) == 3 and names.IMPORT_DIGEST_TAG not in half[jobs[1]].data.tags  # the second job half made
    assert client.list_artifacts(half[jobs[1]].info.run_id) == []
    code, out, err = _main(["import", str(bundle), "--tracking-uri", _uri(tmp_path)])
    assert code == 0, err
    assert "0 run(s) created, 1 completed, 2 already there" in out
    rows = _rows(tmp_path / "mlflow.db")
    assert len(rows) == 2 * (EPOCHS * len(KEYS) + 1) and {c for *_, c in rows} == {1}
    assert all(r.data.tags.get(names.IMPORT_DIGEST_TAG) for r in _imported(client).values())


def test_a_bundle_imported_where_it_was_exported_adds_nothing(source):
    folder, src, parent, jobs, bundle = source
    before = _rows(folder / "store" / "mlflow.db")
    done = import_bundle(bundle, tracking_uri=_uri(folder / "store"))
    assert (done.created, done.native) == (0, 3)
    assert _rows(folder / "store" / "mlflow.db") == before


def test_after_import_compare_by_machine_sets_both_machines_side_by_side_and_warns_of_other_software(source, tmp_path):
    from sweeps.report import __main__ as report

    _source(tmp_path / "a", host="machine-a", torch="2.8.0")  # machine A's own sweep, another torch
    import_bundle(source[-1], tracking_uri=_uri(tmp_path / "a"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report.main(["--compare", "--by", "machine", "--experiment", "study", "--tracking-uri",
                            _uri(tmp_path / "a"), "--out", str(tmp_path / "cmp")])
    assert code == 0, err.getvalue()
    text = out.getvalue()
    assert "machine-a / cpu x" in text and "machine-b / cpu x" in text and "1.00×" in text
    assert "differ in env.torch" in err.getvalue() and "2.8.0" in err.getvalue() and "2.9.0" in err.getvalue()


def _timed(folder: Path, host: str, torch: str, epoch_s: float) -> str:
    """A store under ``folder`` with one sweep of two CPU jobs (batch 32 at a median epoch of
    ``epoch_s``, batch 64 at half that; 8,000 examples an epoch) as ``host`` with torch ``torch``
    logs it; its tracking URI."""
    folder.mkdir(parents=True, exist_ok=True)
    client, exp = open_store(_uri(folder), "study")
    machine = {names.ENV_HOST: host, names.HARDWARE_TAG: f"{host} / cpu x", names.ENV_TORCH: torch,
               names.ENV_GPUS: "none"}
    parent = client.create_run(exp, run_name="sweep", tags={names.KIND_TAG: "sweep", **machine}).info.run_id
    for batch in (32, 64):
        tags = {**machine, names.PARENT_RUN_TAG: parent, names.OVERRIDES_TAG: f"batch={batch}",
                names.OUTCOME_TAG: names.OK}
        rid = client.create_run(exp, run_name=f"mlp b{batch}", tags=tags).info.run_id
        params = {"model": "mlp", "dataset": "synthetic", "device": "cpu", "task": "train", "batch": batch,
                  names.TRAIN_EXAMPLES: 8000}
        metrics = {names.BATCH: batch, names.LR: 0.1, names.MEDIAN_EPOCH_S: epoch_s * 32 / batch}
        client.log_batch(rid, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                         params=[Param(k, str(v)) for k, v in params.items()])
        client.set_terminated(rid, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    return _uri(folder)


def test_after_import_the_verdict_sets_each_machine_s_device_apart_and_warns_of_other_software(tmp_path):
    import sweeps
    from sweeps.report import verdict, verdict_text
    from sweeps.report.selection import Selection, select_jobs

    b = _timed(tmp_path / "b", "machine-b", "2.9.0", epoch_s=0.5)  # twice machine A's samples/s
    alone = sweeps.verdict("study", tracking_uri=b)  # one machine: the verdict reads as it always did
    assert list(alone.device) == ["cpu"] and not alone.note.str.contains("differ in").any()
    export_bundle("study", tmp_path / "b.zip", tracking_uri=b)
    a = _timed(tmp_path / "a", "machine-a", "2.8.0", epoch_s=1.0)
    import_bundle(tmp_path / "b.zip", tracking_uri=a)

    df = sweeps.verdict("study", tracking_uri=a)
    rows = {r.device: r for r in df.itertuples()}
    assert sorted(rows) == ["cpu on machine-a", "cpu on machine-b"]
    assert (rows["cpu on machine-b"].wins, rows["cpu on machine-a"].wins) == (True, False)
    assert rows["cpu on machine-b"].speedup == pytest.approx(2.0)  # 32,000 vs 16,000 samples/s at batch 64
    assert rows["cpu on machine-a"].samples_per_s == pytest.approx(16_000)
    for r in rows.values():  # the words of --compare (sweeps.report.compare), each value with its machine's device
        warning = r.note.split("compared runs differ in env.torch, not only in machine: ", 1)[1]
        assert sorted(warning.split("; ")) == ["2.8.0 (cpu on machine-a)", "2.9.0 (cpu on machine-b)"]
    client = MlflowClient(a)
    ((_, text),) = verdict_text.paragraphs(verdict.findings(select_jobs(client, Selection(experiments=["study"]))))
    assert "cpu on machine-b wins: 2.00× cpu on machine-a (samples/s)." in text
    assert "differ in env.torch" in text.split("cpu on machine-a: ", 1)[1]


# ── refused files: one line, exit 2, the target store unchanged ──────────────────────────────

def _rewrite(bundle: Path, out: Path, change) -> Path:
    """A copy of ``bundle`` with ``change(members: dict, manifest: dict)`` applied."""
    with zipfile.ZipFile(bundle) as zf:
        members = {n: zf.read(n) for n in zf.namelist() if n != layout.MANIFEST}
        manifest = json.loads(zf.read(layout.MANIFEST))
    change(members, manifest)
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(layout.MANIFEST, json.dumps(manifest))
    return out


def _tampered(members: dict, manifest: dict) -> None:
    name = next(n for n in members if n.endswith(layout.METRICS_JSONL) and len(members[n]) > 10)
    data = bytearray(members[name])
    at = next(i for i, c in enumerate(data) if chr(c).isdigit())
    data[at] = ord("9") if data[at] != ord("9") else ord("8")  # one digit of one value: same size, other bytes
    members[name] = bytes(data)


def _escaping(members: dict, manifest: dict) -> None:
    members["../evil.txt"] = b"x"
    manifest["members"]["../evil.txt"] = {"sha256": hashlib.sha256(b"x").hexdigest(), "bytes": 1}


def _newer(members: dict, manifest: dict) -> None:
    manifest["version"] = layout.VERSION + 1


def _artifact_escaping(members: dict, manifest: dict) -> None:
    name = next(n for n in members if n.endswith(layout.RUN_JSON) and b'"artifacts": [{' in members[n])
    record = json.loads(members[name])
    record["artifacts"][0]["path"] = "../../outside.txt"
    members[name] = json.dumps(record).encode()
    manifest["members"][name] = {"sha256": hashlib.sha256(members[name]).hexdigest(), "bytes": len(members[name])}


@pytest.mark.parametrize("case, words", [
    ("truncated", "not a whole bundle"),
    ("checksum", "does not match its checksum"),
    ("escaping", "leaves the folder"),
    ("newer", f"newer than this sweeps reads (up to {layout.VERSION})"),
    ("artifact_escaping", "leaves the folder"),
    ("missing", "no bundle file"),
])
def test_a_refused_file_is_one_line_exit_2_and_the_store_unchanged(source, tmp_path, case, words):
    bundle = source[-1]
    bad = tmp_path / f"{case}.zip"
    if case == "truncated":
        data = bundle.read_bytes()
        bad.write_bytes(data[:len(data) * 2 // 3])
    elif case == "missing":
        bad = tmp_path / "nowhere.zip"
    else:
        _rewrite(bundle, bad, {"checksum": _tampered, "escaping": _escaping, "newer": _newer,
                               "artifact_escaping": _artifact_escaping}[case])
    target = tmp_path / "target"
    target.mkdir()
    client, _ = open_store(_uri(target), "mine")  # a store with a run of its own
    client.set_terminated(client.create_run(client.get_experiment_by_name("mine").experiment_id).info.run_id)
    before = (target / "mlflow.db").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "sweeps.bundle", "import", str(bad), "--tracking-uri", _uri(target)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert (target / "mlflow.db").read_bytes() == before
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "outside.txt").exists()


def test_a_refused_file_does_not_create_a_missing_store(source, tmp_path):
    bad = _rewrite(source[-1], tmp_path / "newer.zip", _newer)
    code, out, err = _main(["import", str(bad), "--tracking-uri", _uri(tmp_path / "new")])
    assert code == 2 and not (tmp_path / "new").exists()


# ── the command line ──────────────────────────────────────────────────────────────────────────

def test_help_and_bad_arguments_answer_before_mlflow_is_imported():
    code = ("import sys, contextlib, io\nfrom sweeps.bundle.__main__ import main\n"
            "for argv in (['--help'], ['export', '--help'], ['export', '-o', 'x.zip'], ['frob'], []):\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):\n"
            "        try: main(argv)\n"
            "        except SystemExit as e: rc = e.code\n"
            "    print(rc, len(err.getvalue().strip().splitlines()))\n"
            "assert 'mlflow' not in sys.modules and 'torch' not in sys.modules, 'imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:5] == ["0 0", "0 0", "2 1", "2 1", "2 1"]


def test_export_names_what_works_for_an_unknown_experiment_or_sweep(source, tmp_path):
    folder = source[0]
    code, out, err = _main(["export", "--experiment", "nope", "-o", str(tmp_path / "x.zip"),
                            "--tracking-uri", _uri(folder / "store")])
    assert code == 2 and "--experiment takes one of: " in err and "study" in err and len(err.splitlines()) == 1
    code, out, err = _main(["export", "--experiment", "study", "--sweep", "0" * 32, "-o", str(tmp_path / "x.zip"),
                            "--tracking-uri", _uri(folder / "store")])
    assert code == 2 and "no run" in err and len(err.splitlines()) == 1
    code, out, err = _main(["export", "--experiment", "study", "-o", str(tmp_path / "x.zip"),
                            "--tracking-uri", _uri(tmp_path / "absent")])
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "x.zip").exists() and not (tmp_path / "x.zip.partial").exists()


def test_export_of_a_named_sweep_holds_its_runs_and_machines(source, tmp_path):
    folder, src, parent, jobs, _ = source
    code, out, err = _main(["export", "--experiment", "study", "--sweep", parent, "-o", str(tmp_path / "s.zip"),
                            "--tracking-uri", _uri(folder / "store")])
    assert code == 0, err
    assert "exported 3 run(s) of 1 sweep(s)" in out
    with layout.open_verified(tmp_path / "s.zip") as b:
        assert [r["run_id"] for r in b.runs()][0] == parent  # the parent first
        assert b.json(layout.MACHINES)["machine-b"]["fingerprint"] == {"host": "machine-b"}
        assert b.manifest["version"] == layout.VERSION and b.manifest["source"]["experiment"] == "study"


def test_unsafe_member_names():
    assert all(layout.unsafe(n) for n in ("../x", "a/../../x", "/etc/passwd", "a\\..\\x", "C:/x", "", "a/.."))
    assert not any(layout.unsafe(n) for n in ("runs/abc/run.json", "runs/abc/artifacts/sub/x..y"))


def test_export_adds_the_epochs_a_run_s_journal_holds_and_its_store_lacks(tmp_path):
    """A run whose job died before its last epochs reached the store: its folder is still there
    (``<checkpoint.dir>/<config hash>/<run id>/``), and the bundle holds what a replay would send."""
    src, parent, jobs = _source(tmp_path / "src")
    rid = jobs[0]
    checkpoints = tmp_path / "checkpoints"
    src.log_batch(rid, params=[Param("checkpoint.dir", str(checkpoints))])
    src.set_tag(rid, names.HASH_TAG, "0123abcd")
    folder = checkpoints / "0123abcd" / rid
    folder.mkdir(parents=True)
    lines = [{"epoch": e, names.TIMESTAMP_MS: 1_700_000_000_000 + e, **{k: 1.0 / e + i for i, k in enumerate(KEYS)}}
             for e in range(1, EPOCHS + 3)]
    (folder / "epochs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"epoch": 99, "tor')
    bundle = tmp_path / "b.zip"
    export_bundle("study", bundle, tracking_uri=_uri(tmp_path / "src"))
    with layout.open_verified(bundle) as b:
        entry = next(r for r in b.runs() if r["run_id"] == rid)
        assert entry["from_journal"] == 2 * len(KEYS)
        assert layout.run_member(rid, layout.JOURNAL, "epochs.jsonl") in b.manifest["members"]
    target = tmp_path / "target"
    target.mkdir()
    import_bundle(bundle, tracking_uri=_uri(target))
    client = MlflowClient(_uri(target))
    mine = _imported(client)[rid].info.run_id
    assert [m.step for m in client.get_metric_history(mine, KEYS[0])] == list(range(1, EPOCHS + 3))
    assert {c for *_, c in _rows(target / "mlflow.db")} == {1}


def test_progress_is_one_line_rewritten_on_a_terminal_and_nothing_elsewhere():
    from sweeps.bundle.progress import Progress

    quiet = io.StringIO()
    p = Progress("import", 3, stream=quiet)
    p.step(runs=1, values=10)
    p.done()
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    p = Progress("import", 3, stream=shown, force=True)
    for _ in range(3):
        p.step(runs=1, values=1000)
    p.done()
    assert shown.getvalue().startswith("\rimport: [1/3 runs] 1,000 values")
    assert shown.getvalue().endswith("\rimport: [3/3 runs] 3,000 values \n")


def test_an_import_shared_by_two_worker_processes_stores_each_run_and_step_once(source, tmp_path):
    *_, parent, jobs, bundle = source
    done = import_bundle(bundle, tracking_uri=_uri(tmp_path), workers=2)
    assert (done.created, done.values, done.artifacts) == (3, 2 * (EPOCHS * len(KEYS) + 1), 6)
    rows = _rows(tmp_path / "mlflow.db")
    assert len(rows) == 2 * (EPOCHS * len(KEYS) + 1) and {c for *_, c in rows} == {1}
    got = _imported(MlflowClient(_uri(tmp_path)))
    assert all(r.data.tags.get(names.IMPORT_DIGEST_TAG) for r in got.values())
    assert got[jobs[1]].data.tags[names.PARENT_RUN_TAG] == got[parent].info.run_id
    again = import_bundle(bundle, tracking_uri=_uri(tmp_path), workers=2)
    assert (again.created, again.skipped, again.values) == (0, 3, 0)
