"""The console of a sweep, as a newcomer reads it: a header before the first job, ``[k/N]`` per
job with the time left, epoch rows without a logging prefix and within 100 columns, a machine
notice once per sweep, reasons wrapped rather than cut, the summary, then the next commands with
this sweep's real paths; no empty folder left behind. Pinned on a terminal (a pty) and off one."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS, cli_in_process, runs

WIDE = 100


def _sweep_args() -> list[str]:
    from conftest import TEST_CONF

    return ["-m", "model=mlp", "batch=16,32", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64",
            "dataset.test_size=32", "epochs=2", "device=cpu", "log_every_s=0", TEST_CONF]


def _check_shape(out: str, cwd: Path) -> None:
    """The console's shape: what each test below pins, on and off a terminal."""
    lines = out.splitlines()
    assert lines[0] == "sweeps: 2 jobs → MLflow experiment 'sweeps'", lines[:3]
    assert lines[1] == f"  store: sqlite:///{cwd / 'mlruns' / 'mlflow.db'}"
    first = lines.index("[1/2] batch=16")
    second = next(i for i, line in enumerate(lines) if line.startswith("[2/2] batch=32"))
    assert re.fullmatch(r"\[2/2\] batch=32  \(about \d:\d\d:\d\d left\)", lines[second]), lines[second]
    assert lines[first + 1].startswith("  batch 16, lr 0.0125 = base_lr 0.1 × 16/128 (linear), 64 train / 32 test")
    header = next(line for line in lines if line.strip().startswith("epoch"))
    assert header.split() == ["epoch", "train", "loss", "test", "loss", "train", "acc", "test", "acc", "epoch", "s",
                              "eval", "s", "elapsed", "s"]
    assert sum("telemetry: host only" in line for line in lines) == 1  # a machine's trait: once per sweep
    assert not any(re.match(r"\[\d{4}-\d\d-\d\d ", line) or "[HYDRA]" in line or "Launching" in line for line in lines)
    table = lines.index(next(line for line in lines if line.startswith("job ") and "outcome" in line))
    assert "2 job(s): 2 ok" in lines
    long = [line for line in lines[:table] if len(line) > WIDE and str(cwd) not in line]  # a path stays whole
    assert not long, long
    parent = next(r for r in runs(cwd) if "mlflow.parentRunId" not in r.data.tags)
    assert lines[-4:] == [
        "Next:",
        f"  report     python -m sweeps.report --experiment sweeps --run-id {parent.info.run_id}",
        f"  MLflow UI  mlflow ui --backend-store-uri sqlite:///{cwd / 'mlruns' / 'mlflow.db'}",
        f"             then open http://127.0.0.1:5000/#/experiments/{parent.info.experiment_id}/runs"]
    # the jobs ended ok: their checkpoint folders went, and with them the folders that held them
    assert not (cwd / "checkpoints").exists(), sorted(map(str, (cwd / "checkpoints").rglob("*")))


@pytest.mark.slow  # a real sweep's console: ~3 s on 2 cores
def test_a_sweeps_console_off_a_terminal(tmp_path):
    proc = cli_in_process(_sweep_args(), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_shape(proc.stdout, tmp_path)
    assert proc.stderr.strip() == "", proc.stderr[-2000:]


def test_a_job_that_did_not_run_has_its_whole_reason_wrapped_under_the_summary():
    from sweeps.console import summary_table

    reason = ("MNIST is not under dataset.root=data (/home/someone/projects/bench/data) and dataset.download=false; "
              "put the four idx files in <root>/MNIST/raw/, or run once with network access and dataset.download=true")
    rows = [{"job": "model=mlp", "outcome": "ok", "first_s": 1.0, "median_s": 1.0, "total_s": 2.0, "job_s": 3.5,
             "overhead_s": 1.5, "overhead_frac": 0.43, "final": "acc 0.9"},
            {"job": "model=mlp dataset=mnist", "outcome": "unavailable", "error": reason},
            {"job": "model=cnn10 dataset=mnist", "outcome": "unavailable", "error": reason},
            {"job": "model=cnn10", "outcome": "ok", "job_s": 3600.0, "overhead_s": 36.0, "overhead_frac": 0.01}]
    lines = summary_table(rows).splitlines()
    assert lines[3].split()[-2:] == ["see", "[1]"] and lines[4].split()[-2:] == ["see", "[1]"]  # one reason, one note
    notes = "\n".join(lines[6:])
    assert " ".join(notes.split()).startswith(f"[1] {reason}")  # whole, never cut
    assert all(len(line) <= WIDE for line in lines[6:])
    assert "1.5 s *" in lines[2] and "36.0 s (1%)" in lines[5]  # a share only where the job is long enough
    assert lines[-2].startswith("* overhead of a job under 30 s")


@pytest.mark.slow  # a real `python -m sweeps` on a pseudo-terminal: ~15 s
def test_a_sweeps_console_on_a_terminal(tmp_path):
    """On a terminal (a pty 200 columns wide) the console has the same shape: the progress bar tqdm
    draws for a long epoch keeps within 100 columns and leaves no line behind."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "SWEEPS_"))}
    env.update(PYTHONPATH=str(TESTS), COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "sweeps", *_sweep_args()], cwd=tmp_path, env=env,
                            stdin=child, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=600) == 0
    os.close(main)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    bars = [seg for line in text.split("\n") for seg in line.split("\r")[:-1] if seg.strip()]
    assert all(len(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", seg)) <= WIDE for seg in bars)
    plain = "\n".join(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line.split("\r")[-1]) for line in text.split("\n"))
    _check_shape(plain.strip("\n") + "\n", tmp_path)


def test_a_command_to_copy_stays_on_one_line_however_long_while_prose_is_wrapped():
    """A warning's prose is wrapped at 100 columns between words; a line indented by four spaces
    (a command the user pastes into a shell, ``MLFLOW_TRACKING_URI=… mlflow runs restore …``)
    stays whole: broken at a space, its first half would set a shell variable and its second run
    against another store."""
    from sweeps.console import wrap

    command = "    MLFLOW_TRACKING_URI=sqlite:///" + "/deep" * 20 + "/mlflow.db mlflow runs restore --run-id 0123abcd"
    text = wrap("warning: " + "the run was deleted while the job ran, " * 5 + "restore it:\n" + command)
    *prose, last = text.splitlines()
    assert last == command
    assert len(prose) > 1 and all(len(line) <= WIDE for line in prose)
