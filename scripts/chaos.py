"""Fault injection: real sweeps, faults at random moments, invariants checked on the real store.

    python scripts/chaos.py --faults 200                # seed printed; --seed S reproduces the plan
    python scripts/chaos.py --faults 20 --kinds sigint sigkill --seed 7 --out /tmp/chaos

Each fault runs a sweep of its own in a fresh folder (``<out>/fault-NNNN``: ./mlruns, checkpoints),
either the tabular preset (``+experiment=diabetes``, full batch, 100-300 epochs of a few ms) or the
MNIST MLP on the offline ImageFolder (256 images, 20-50 epochs), 2-3 jobs, and injects one fault
at a random moment — a time after start, the N-th epoch journaled, or just as a job reaches its
last epoch (mid-close, between jobs):

- ``sigint``: a burst of 1-50 SIGINTs, 0-100 ms apart; ``sigterm``: 1-5 SIGTERMs;
- ``sigkill``: SIGKILL of the sweep process; ``sigkill_job``: of a job's own process
  (``hydra/launcher=gpu_pool``, 2 jobs at a time);
- ``kill9_quick_rerun``: SIGKILL of the sweep process with a busy loop spinning beside it, and the
  rerun started 0.1-0.5 s after the kill, before the store is read: the dead sweep's store process
  may still be ingesting what the job had sent while the rerun replays its journal. The store is
  checked once every process the dead sweep left behind has exited;
- ``mlflow_server``: the sweep logs to a local ``mlflow server``, which is SIGKILLed and restarted
  after 0.2-8 s;
- ``disk_full``: the checkpoint folder is a tmpfs of 16 KB-48 MB (``mount -t tmpfs``) that fills up;
  skipped with one line where mount is not permitted;
- ``ro_journal``: ``chattr +i`` on the running job's journal and folder (writes refused, also to
  root and through the open file), or on a SIGKILLed job's before the rerun resumes it.

Then the same sweep runs again to completion (it skips finished jobs and resumes killed ones),
after the store was read (seconds later) except for ``kill9_quick_rerun``, and the invariants of
:mod:`chaos_checks` are checked. The plan of fault i (kind, workload, moment,
counts) comes from ``random.Random(f"{seed}:{i}")``: ``--seed S --only I`` replays one fault.
Moments measured in time or epochs land where a loaded machine puts them, so a replay aims at the
same moment, not always the same instruction. A plan drawn before ``kill9_quick_rerun`` existed
replays with ``--kinds`` naming the seven others. Exit status 1 when any invariant was violated.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "src")]

import chaos_checks as checks  # noqa: E402
import chaos_faults as faults  # noqa: E402
from sweeps import names  # noqa: E402

KINDS = ("sigint", "sigterm", "sigkill", "sigkill_job", "mlflow_server", "disk_full", "ro_journal",
         "kill9_quick_rerun")
# how often each kind is drawn: signals are the cheap, common faults; a job process of its own
# (2 pool workers importing torch) and a server start cost ~2x a plain sweep
WEIGHTS = {"sigint": 3, "sigterm": 2, "sigkill": 2, "sigkill_job": 1, "mlflow_server": 1, "disk_full": 1,
           "ro_journal": 2, "kill9_quick_rerun": 2}
MNIST_ROOT = faults.REPO.parent / "shared" / "data" / "mnist-10k-imagefolder"
RUN_TIMEOUT_S = 600  # a sweep that has not ended by then is a violation (it hangs)
# a killed sweep's store process exits once it has answered what it had read (seconds; 29-88 s
# beside a busy core before it stopped spinning on the dead job's pipe): still running after this
# long, its late writes would escape the checks, so that is a violation
ORPHANS_S = 120


def plan(seed: int, i: int, kinds: list[str], mnist: bool) -> dict:
    """Fault ``i`` of run ``seed``: every random choice it makes, drawn here, up front."""
    rng = random.Random(f"{seed}:{i}")
    p = {"i": i, "kind": rng.choices(kinds, [WEIGHTS[k] for k in kinds])[0]}
    p["workload"] = "mnist" if mnist and rng.random() < 0.35 else "tabular"
    p["jobs"] = rng.choice([2, 2, 3])
    p["epochs"] = rng.randint(10, 30) if p["workload"] == "mnist" else rng.randint(50, 200)
    p["seeds"] = rng.sample(range(1000), p["jobs"])
    p["every_epochs"] = rng.choice([5, 10]) if p["workload"] == "mnist" else rng.choice([1, 10, 25])
    p["telemetry_s"] = rng.choice([0, 1.0])
    at = rng.choice(["time", "epoch", "epoch", "job_end"])
    if at == "time":
        p["moment"] = {"at": at, "s": rng.uniform(0.5, 12.0)}
    elif at == "epoch":
        p["moment"] = {"at": at, "n": rng.randint(1, p["jobs"] * p["epochs"]), "delay_s": rng.uniform(0, 0.01)}
    else:
        p["moment"] = {"at": at, "n": rng.randint(1, p["jobs"]), "delay_s": rng.uniform(0, 0.3)}
    count = {"sigint": rng.randint(1, 50), "sigterm": rng.choice([1, 1, 2, 5])}.get(p["kind"], 1)
    p["gaps"] = [rng.uniform(0, 0.1) for _ in range(count - 1)]
    p["down_s"] = rng.uniform(0.2, 8.0)
    p["disk_kb"] = rng.randint(16, 48 * 1024) if p["workload"] == "mnist" else rng.randint(16, 1024)
    p["ro_mode"] = rng.choice(["live", "resume"])
    p["victim"] = rng.random()
    p["rerun_after_s"] = rng.uniform(0.1, 0.5)  # drawn last: the draws above stay those of older plans
    return p


def describe(p: dict) -> str:
    m = p["moment"]
    where = {"time": f"{m.get('s', 0):.1f} s", "epoch": f"epoch {m.get('n')} of {p['jobs'] * p['epochs']}",
             "job_end": f"job {m.get('n')}'s last epoch + {m.get('delay_s', 0) * 1000:.0f} ms"}[m["at"]]
    extra = {"sigint": f" x{len(p['gaps']) + 1}", "sigterm": f" x{len(p['gaps']) + 1}",
             "mlflow_server": f" down {p['down_s']:.1f} s", "disk_full": f" {p['disk_kb']} KB",
             "ro_journal": f" {p['ro_mode']}",
             "kill9_quick_rerun": f" (busy core, rerun +{p['rerun_after_s'] * 1000:.0f} ms)"}.get(p["kind"], "")
    return f"{p['kind']}{extra} at {where}, {p['workload']} {p['jobs']}x{p['epochs']} epochs"


def sweep_args(p: dict, ckpt: Path, uri: str | None) -> tuple[list[str], str]:
    """(the sweep's command-line overrides, its MLflow experiment)."""
    seeds = ",".join(map(str, p["seeds"]))
    if p["workload"] == "mnist":
        args, experiment = ["-m", "dataset=imagefolder", f"dataset.root={MNIST_ROOT}", "model=mlp", "device=cpu",
                            "dataset.train_size=256", "dataset.test_size=64", "dataset.num_workers=0", "batch=64",
                            "mlflow.experiment=chaos_mnist"], "chaos_mnist"
    else:
        args, experiment = ["-m", "+experiment=diabetes", "batch=full"], "diabetes"
    args += [f"epochs={p['epochs']}", f"seed={seeds}", f"telemetry.interval_s={p['telemetry_s']}", "log_every_s=1",
             "checkpoint.every_s=0", f"checkpoint.every_epochs={p['every_epochs']}", f"checkpoint.dir={ckpt}"]
    if p["kind"] == "sigkill_job":
        args += ["hydra/launcher=gpu_pool", "hydra.launcher.n_jobs=2"]
    if uri:
        args.append(f"mlflow.tracking_uri={uri}")
    return args, experiment


def inject(p: dict, sweep: faults.Sweep, ckpt: Path, server) -> tuple[bool, str | None, str]:
    """The fault itself, at the moment: (injected, the signal name checked for, what was done)."""
    kind = p["kind"]
    if kind in ("sigint", "sigterm"):
        sig = signal.SIGINT if kind == "sigint" else signal.SIGTERM
        sent = faults.signals(sweep, sig, p["gaps"])
        return sent > 0, sig.name, f"{sent} {sig.name}"
    if kind in ("sigkill", "kill9_quick_rerun") or (kind == "ro_journal" and p["ro_mode"] == "resume"):
        sweep.kill()
        if kind != "ro_journal":  # a sweep that exited on its own just before was not hit
            return sweep.proc.returncode == -signal.SIGKILL, None, f"SIGKILL (exit {sweep.proc.returncode})"
        targets = faults.journals(ckpt)
        why = faults.immutable(targets + [j.parent for j in targets], True)
        return not why and bool(targets), None, f"SIGKILL, then {len(targets)} journal(s) immutable {why}".strip()
    if kind == "sigkill_job":
        workers = [w for w in sweep.workers() if w != sweep.proc.pid]
        if not workers:
            return False, None, "no job process found"
        victim = workers[int(p["victim"] * len(workers))]
        os.kill(victim, signal.SIGKILL)
        return True, None, f"SIGKILL of job process {victim} (1 of {len(workers)})"
    if kind == "mlflow_server":
        server.kill()
        time.sleep(p["down_s"])
        server.start()
        return True, None, f"server down {p['down_s']:.1f} s"
    if kind == "ro_journal":
        targets = faults.journals(ckpt)
        why = faults.immutable(targets + [j.parent for j in targets], True)
        return not why and bool(targets), None, f"{len(targets)} live journal(s) immutable {why}".strip()
    return True, None, "disk fills as the jobs write"  # disk_full: the tmpfs was set up before the start


def run_fault(p: dict, folder: Path, t: checks.Tally) -> tuple[bool, str]:
    """One fault, its rerun and the checks; returns (injected, what happened)."""
    from mlflow import MlflowClient

    faults.remove(folder)
    folder.mkdir(parents=True)
    ckpt, server, busy, second = folder / "checkpoints", None, None, None
    quick = p["kind"] == "kill9_quick_rerun"
    try:
        if p["kind"] == "disk_full":
            why = faults.mount_tmpfs(ckpt, p["disk_kb"])
            if why:
                raise PermissionError(why)
        if p["kind"] == "mlflow_server":
            server = faults.Server(folder)
            server.start()
        uri = server.uri if server else f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}"
        args, experiment = sweep_args(p, ckpt, server.uri if server else None)
        busy = faults.busy_core() if quick else None
        sweep = faults.Sweep(args, folder, "fault")
        landed = faults.wait_for(sweep, faults.Progress(ckpt, p["epochs"]), p["moment"])
        injected, sig, did = inject(p, sweep, ckpt, server) if landed else (False, None, "the sweep ended first")
        if quick and injected:  # the rerun first (journals are local files); the store is read after it
            killed_at, killed_ms, journals = time.monotonic(), time.time() * 1000, checks.snapshot_journals(ckpt)
            time.sleep(max(0.0, p["rerun_after_s"] - (time.monotonic() - killed_at)))
            second = faults.Sweep(args, folder, "rerun")
            did += f", rerun {second.started - killed_at:.2f} s later"
        ended = sweep.wait(RUN_TIMEOUT_S)
        t.check(not ended.hung, f"the faulted sweep did not end within {RUN_TIMEOUT_S} s")
        if p["kind"] in ("mlflow_server", "sigkill_job", "disk_full") or (p["kind"] == "ro_journal" and ended.rc != -9):
            t.check(ended.rc >= 0 and (ended.rc == 0 or ended.last_line().startswith("sweeps: ")),
                    f"faulted sweep exit {ended.rc}, last line {ended.last_line()!r}")
        if p["kind"] == "disk_full":
            t.check(ended.rc == 0, f"a full checkpoint disk ended the sweep {ended.rc}: {ended.last_line()!r}")
        planned = p["jobs"]
        if second is None:
            client = MlflowClient(uri)  # opens the store (creates it if the sweep had not)
            jobs = checks.job_runs(client, experiment)[1]
            if p["kind"] == "disk_full":
                injected = any(r.data.tags.get(names.CHECKPOINTS_TAG, "").startswith("off") for r in jobs)
                did = "the disk filled" if injected else "the disk did not fill"
            ok_before, journals = checks.ok_by_config(jobs), checks.snapshot_journals(ckpt)
            second = faults.Sweep(args, folder, "rerun")
        again = second.wait(RUN_TIMEOUT_S)
        t.check(not again.hung, f"the rerun did not end within {RUN_TIMEOUT_S} s")
        faults.stop(busy)
        if quick and injected:  # a store process of the dead sweep still writing would write after the checks
            left = faults.wait_gone(sweep.orphans, ORPHANS_S - (time.monotonic() - killed_at))
            t.check(not left, f"process(es) {[pid for pid, _ in left]} of the killed sweep still ran "
                              f"{ORPHANS_S} s after the kill")
            faults.kill_left(left)
            did += f", its {len(sweep.orphans)} orphan(s) gone {time.monotonic() - killed_at:.1f} s after it"
            # ok before the rerun: the runs that ended ok before the kill (the rerun's own end after it),
            # and those whose end had journaled outcome=ok, killed before they closed the run (the
            # rerun's start closes them as they ended, and skips their jobs)
            client = MlflowClient(uri)
            jobs = checks.job_runs(client, experiment)[1]
            ended_ok = checks.journaled_ok(journals)
            ok_before = checks.ok_by_config([r for r in jobs if (r.info.end_time or killed_ms) < killed_ms
                                             or r.info.run_id in ended_ok])
        checks.faulted_run(t, ended, sig if injected else None, jobs, planned)
        checks.rerun(t, again, ok_before)
        for run_id, records in checks.snapshot_journals(ckpt).items():
            journals.setdefault(run_id, []).extend(records)
        checks.store(t, client, experiment, planned, journals, ok_before, errors_allowed=p["kind"] == "mlflow_server")
        if p["kind"] != "ro_journal":
            checks.folders_cleared(t, ckpt)
        return injected, f"{did}; exit {ended.rc}, rerun {again.rc}"
    finally:
        if server is not None:
            server.kill()
        faults.stop(busy)
        if p["kind"] == "disk_full":
            faults.umount(ckpt)
        faults.release(folder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=200, help="how many faults (each: a sweep, its rerun, the checks)")
    ap.add_argument("--seed", type=int, default=None, help="reproduce a run's plan (default: a new seed, printed)")
    ap.add_argument("--out", type=Path, default=None, help="working folder (default /tmp/sweeps-chaos-<seed>)")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="faults to draw from")
    ap.add_argument("--only", type=int, nargs="+", default=None, help="run only these fault numbers of the plan")
    ap.add_argument("--minutes", type=float, default=None, help="start no fault after this many minutes (a CI budget)")
    ap.add_argument("--keep", action="store_true", help="keep every fault's folder (default: only those with a violation)")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 10**6)
    out = a.out or Path(f"/tmp/sweeps-chaos-{seed}")
    out.mkdir(parents=True, exist_ok=True)
    kinds, mnist = list(a.kinds), MNIST_ROOT.is_dir()
    print(f"chaos: seed {seed}, {a.faults} faults of {', '.join(kinds)}, in {out}"
          + ("" if mnist else f" (no {MNIST_ROOT}: tabular sweeps only)"), flush=True)
    injected, missed, violations, t0 = Counter(), Counter(), [], time.monotonic()
    tally = checks.Tally()
    for i in a.only if a.only is not None else range(a.faults):
        if a.minutes is not None and time.monotonic() - t0 > a.minutes * 60:
            print(f"stopped after {a.minutes:g} minutes: {i} of {a.faults} faults run", flush=True)
            break
        p = plan(seed, i, kinds, mnist)
        folder, start = out / f"fault-{i:04d}", time.monotonic()
        before = len(tally.violations)
        try:
            hit, what = run_fault(p, folder, tally)
        except PermissionError as e:  # mount not permitted here: that kind is skipped from now on
            print(f"  {p['kind']}: skipped ({e})", flush=True)
            kinds = [k for k in kinds if k != p["kind"]] or kinds
            continue
        except Exception as e:  # noqa: BLE001 (the store or a check broke: that is a finding, not the end)
            hit, what = True, f"the checks failed ({type(e).__name__}; traceback in {folder / 'checks.err'})"
            tally.violations.append(f"checking failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            if folder.is_dir():  # where the checker broke, kept with the fault's folder
                (folder / "checks.err").write_text(traceback.format_exc())
        (injected if hit else missed)[p["kind"]] += 1
        new = tally.violations[before:]
        for v in new:
            violations.append(f"seed {seed} fault {i} ({describe(p)}): {v}; "
                              f"reproduce: python scripts/chaos.py --seed {seed} --only {i}")
        print(f"{i:4d} {describe(p)}: {what}; {len(new)} violation(s) ({time.monotonic() - start:.1f} s)", flush=True)
        if not new and not a.keep:
            faults.remove(folder)
    took = time.monotonic() - t0
    n = sum(injected.values()) + sum(missed.values())
    print(f"\nfaults injected: {sum(injected.values())} ({', '.join(f'{k} {v}' for k, v in sorted(injected.items()))})")
    if missed:
        print(f"faults not landed (the sweep ended first, or nothing to hit): "
              f"{', '.join(f'{k} {v}' for k, v in sorted(missed.items()))}")
    print(f"invariants checked: {tally.checked}")
    print(f"violations: {len(violations)}")
    for v in violations:
        print(f"  {v}")
    print(f"total time: {took:.0f} s ({took / max(n, 1):.1f} s per fault), seed {seed}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
