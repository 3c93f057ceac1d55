"""The processes and faults of ``scripts/chaos.py``: a sweep started as a user starts it, a wait
for a random moment (a time, an epoch, the end of a job), and the faults themselves — signals,
a killed ``mlflow server``, a full tmpfs, an immutable journal, a busy neighbour core."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from chaos_checks import Ended

REPO = Path(__file__).resolve().parent.parent
POLL_S = 0.005  # how often the journals are read while waiting for a moment (s)


def sweeps_env() -> dict:
    """The environment of a sweep: this checkout's code, no MLFLOW_/HYDRA_/SWEEPS_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


class Sweep:
    """``python -m sweeps ARGS`` in ``cwd``, its output in files there (``<tag>.out``/``.err``)."""

    def __init__(self, args: list[str], cwd: Path, tag: str):
        self.cwd, self.tag = cwd, tag
        self._out, self._err = open(cwd / f"{tag}.out", "w"), open(cwd / f"{tag}.err", "w")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=cwd, env=sweeps_env(),
                                     stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL)
        self.started = time.monotonic()
        self.orphans: list[tuple[int, str]] = []  # set by kill()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> Ended:
        hung = False
        try:
            self.proc.wait(timeout=max(timeout - (time.monotonic() - self.started), 1))
        except subprocess.TimeoutExpired:
            hung = True
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        self._err.close()
        return Ended(self.proc.returncode, (self.cwd / f"{self.tag}.out").read_text(errors="replace"),
                     (self.cwd / f"{self.tag}.err").read_text(errors="replace"), hung)

    def descendants(self) -> list[int]:
        """Pids of every process below the sweep's, alive now: its job processes, store processes
        and their helpers."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        out, todo = [], [self.proc.pid]
        while todo:
            below = children.get(todo.pop(), [])
            todo += below
            out += below
        return out

    def workers(self) -> list[int]:
        """Pids of the sweep's job processes: its descendants that are loky workers (joblib's
        process pool, ``hydra/launcher=gpu_pool``), not its resource trackers."""
        out = []
        for c in self.descendants():
            try:
                if b"popen_loky" in Path(f"/proc/{c}/cmdline").read_bytes():
                    out.append(c)
            except OSError:
                continue
        return out

    def kill(self) -> None:
        """SIGKILL the sweep's process (a crash: nothing of it runs again) and reap it. ``orphans``:
        the processes below it at that moment, as (pid, start time), which live on until they
        notice (a store process first answers what it had read)."""
        left = [(pid, _started(pid)) for pid in self.descendants()]
        self.proc.kill()
        self.proc.wait()
        self.orphans = [(pid, t) for pid, t in left if t]


def journals(root: Path) -> list[Path]:
    """The ``<hash>/<run>/epochs.jsonl`` files under ``root`` now. pathlib's glob raises
    FileNotFoundError for a folder removed while it lists (a sweep removes a finished job's
    folder at any moment): such a listing is taken again."""
    for _ in range(50):
        try:
            return list(root.glob("*/*/epochs.jsonl")) if root.is_dir() else []
        except FileNotFoundError:
            continue
    return []


class Progress:
    """Epochs journaled so far by a sweep (``checkpoints/<hash>/<run>/epochs.jsonl``), counted
    even after a finished job's folder is removed; and how many jobs reached their last epoch."""

    def __init__(self, checkpoints: Path, epochs: int):
        self.root, self.epochs = checkpoints, epochs
        self.lines: dict[Path, int] = {}
        self.finished: set[Path] = set()

    def poll(self) -> None:
        present = set()
        for path in journals(self.root):
            present.add(path)
            try:
                n = path.read_bytes().count(b"\n")
            except OSError:
                continue
            self.lines[path] = max(self.lines.get(path, 0), n)
            if n >= self.epochs:
                self.finished.add(path)
        self.finished |= set(self.lines) - present  # removed: the job ended

    def total(self) -> int:
        return sum(self.lines.values())


def wait_for(sweep: Sweep, progress: Progress, moment: dict, timeout: float = 600) -> bool:
    """Wait until ``moment`` — {"at": "time", "s": S} (S s after start), {"at": "epoch", "n": N}
    (N epochs journaled in all), {"at": "job_end", "n": K} (K jobs at their last epoch) — then
    its ``delay_s``. False when the process ended first."""
    deadline = sweep.started + timeout
    while sweep.alive() and time.monotonic() < deadline:
        progress.poll()
        if moment["at"] == "time" and time.monotonic() - sweep.started >= moment["s"]:
            break
        if moment["at"] == "epoch" and progress.total() >= moment["n"]:
            break
        if moment["at"] == "job_end" and len(progress.finished) >= moment["n"]:
            break
        time.sleep(POLL_S)
    time.sleep(moment.get("delay_s", 0.0))
    return sweep.alive()


def signals(sweep: Sweep, sig: int, gaps: list[float]) -> int:
    """Send ``sig`` once, then once after each gap (s) while the process lives; returns how many
    were sent."""
    sent = 0
    for gap in [0.0, *gaps]:
        time.sleep(gap)
        if not sweep.alive():
            break
        try:
            os.kill(sweep.proc.pid, sig)
            sent += 1
        except ProcessLookupError:
            break
    return sent


def _started(pid: int) -> str:
    """The start time of ``pid`` in clock ticks since boot ('' when gone or a zombie): with the pid,
    it names one process even after the pid is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return "" if fields[0] in "ZX" else fields[19]


def wait_gone(procs: list[tuple[int, str]], timeout: float) -> list[tuple[int, str]]:
    """Wait until every (pid, start time) of ``procs`` has exited, at most ``timeout`` s; returns
    those still running then."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [(pid, t) for pid, t in procs if _started(pid) == t]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def kill_left(procs: list[tuple[int, str]]) -> None:
    """SIGKILL each (pid, start time) of ``procs`` that is still that process."""
    for pid, t in procs:
        if _started(pid) == t:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def busy_core() -> subprocess.Popen:
    """A process that spins at normal priority until :func:`stop`: a neighbour on a shared
    machine, which starves the SCHED_IDLE helpers of a sweep's store process."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)


def stop(proc: subprocess.Popen | None) -> None:
    """Kill and reap ``proc`` (None, or ended already: nothing to do)."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A local ``mlflow server`` (1 worker, sqlite under ``cwd``) that can be killed and restarted
    on the same port and store. Started in a session of its own: killing its group ends uvicorn
    and MLflow's helper processes too."""

    def __init__(self, cwd: Path):
        self.cwd, self.port = cwd, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.cwd / 'server.db'}", "--artifacts-destination",
             str(self.cwd / "artifacts")], cwd=self.cwd, env=env, stdout=subprocess.DEVNULL,
            stderr=open(self.cwd / "server.err", "a"), start_new_session=True)  # noqa: SIM115
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"mlflow server on port {self.port} did not answer /health within {timeout} s")

    def kill(self) -> None:
        """SIGKILL the server's whole process group (a crash, not a shutdown)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None


def mount_tmpfs(path: Path, size_kb: int) -> str:
    """Mount a tmpfs of ``size_kb`` KB at ``path``; '' when done, else why not (one line)."""
    path.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
                       capture_output=True, text=True)
    return "" if p.returncode == 0 else (p.stderr.strip() or f"mount exit {p.returncode}").splitlines()[0]


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def immutable(paths: list[Path], on: bool) -> str:
    """``chattr +i`` (or ``-i``) on ``paths``: the kernel refuses every write, also through a file
    already open for appending, and to root. '' when done, else why not (one line)."""
    if not paths:
        return ""
    p = subprocess.run(["chattr", "+i" if on else "-i", *map(str, paths)], capture_output=True, text=True)
    return "" if p.returncode == 0 else (p.stderr.strip() or f"chattr exit {p.returncode}").splitlines()[0]


def release(folder: Path) -> None:
    """Undo every ``chattr +i`` under ``folder`` so it can be removed."""
    if folder.is_dir():
        subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True)


def remove(folder: Path) -> None:
    release(folder)
    shutil.rmtree(folder, ignore_errors=True)
