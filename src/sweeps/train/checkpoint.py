"""Checkpoints: everything a killed job needs to go on where it stopped.

One file per saved epoch (``epoch_0007.pt``) in the run's own folder
(``checkpoint.dir/<config hash>/<run id>/``), of constant size — model, optimizer, schedule, loss
scaler and RNG states; the per-epoch records live in the run's journal beside it — written
atomically (a temp file in the same folder, then ``os.replace``: a reader never sees half a
file), the newest ``keep`` kept. A corrupt file is reported in one line and the previous one is
tried, then a fresh start.
"""
from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from sweeps.data.loaders import shuffle_generator
from sweeps.errors import describe

log = logging.getLogger("sweeps")


def rng_state(loader=None) -> dict:
    """RNG states of torch (CPU and every CUDA device), Python, NumPy and the loader's shuffle."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if shuffle_generator(loader) is not None:
        state["loader"] = shuffle_generator(loader).get_state()
    return state


def set_rng_state(state: dict, loader=None) -> None:
    """Restore what `rng_state` saved."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "loader" in state and shuffle_generator(loader) is not None:
        shuffle_generator(loader).set_state(state["loader"])


class Checkpoints:
    """The checkpoints of one run.

    Args:
        directory: the run's folder (created on the first save).
        every_epochs: save after every N-th epoch (0: not by epoch count).
        keep: how many of the newest files to keep.
        every_s: save when at least this many seconds (wall clock) passed since the last save or
            since this object was made (0: not by time). A checkpoint is due when either says so.
    """

    def __init__(self, directory: Path, every_epochs: int, keep: int = 2, every_s: float = 0.0):
        self.directory, self.every_epochs, self.keep = Path(directory), every_epochs, max(1, keep)
        self.every_s, self._saved_at = every_s, time.monotonic()
        self.off = ""  # why saving stopped (a full disk): the job goes on without checkpoints

    def due(self, epoch: int) -> bool:
        """Whether to save after ``epoch`` (O(1): a clock read and a modulo); never once `off`."""
        if self.off:
            return False
        if self.every_epochs > 0 and epoch % self.every_epochs == 0:
            return True
        return self.every_s > 0 and time.monotonic() - self._saved_at >= self.every_s

    def files(self) -> list[Path]:
        """Saved checkpoints, oldest first."""
        return sorted(self.directory.glob("epoch_*.pt")) if self.directory.is_dir() else []

    def save(self, epoch: int, state: dict) -> Path | None:
        """Write ``state`` (``torch.save``-able) for ``epoch`` atomically; prune old files.

        A write the file system refuses (no space left, a quota, a read-only mount) does not end
        the job — a checkpoint is insurance, the measurement goes on: it is reported in one line
        naming the folder, saving stops (`off` says why) and None is returned.
        """
        final = self.directory / f"epoch_{epoch:04d}.pt"
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".pt")
            with os.fdopen(fd, "wb") as f:
                try:
                    torch.save({**state, "epoch": epoch}, f)
                except BaseException as e:
                    # free torch's zip writer now, while the file is open: a signal landing just
                    # before its end-of-file record leaves it unfinished, and its destructor writes
                    # that record; into a closed file the write raises inside C++ and aborts the
                    # process (SIGABRT, no outcome logged) when the traceback is freed
                    traceback.clear_frames(e.__traceback__)
                    raise
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except (OSError, RuntimeError) as e:
            # torch.save reports a write that fails past its buffer as RuntimeError ("enforce fail
            # at inline_container.cc … unexpected pos") with the OSError as its context
            cause = e if isinstance(e, OSError) else e.__context__
            if isinstance(cause, KeyboardInterrupt):  # a signal landed inside torch.save: a kill, not an error
                _discard(tmp)
                raise cause from None
            if not isinstance(cause, OSError):
                raise
            _discard(tmp)
            self.off = f"cannot write checkpoints to {self.directory} ({cause.strerror or cause})"
            log.warning("%s: the job goes on without them (a kill now cannot resume past the last one); "
                        "free space or set checkpoint.dir=...", self.off)
            return None
        except BaseException:
            _discard(tmp)
            raise
        for old in self.files()[:-self.keep]:
            _discard(old)
        self._saved_at = time.monotonic()
        return final

    def load_latest(self) -> dict | None:
        """The newest readable checkpoint (``epoch`` key included), or None.

        A file that fails to load is reported in one warning line and the next older one is tried.
        """
        for path in reversed(self.files()):
            try:
                # weights_only=False: the state holds RNG states (our own files)
                return torch.load(path, map_location="cpu", weights_only=False)
            except Exception as e:  # truncated, corrupt, or from an incompatible version
                log.warning("checkpoint %s is unreadable (%s); trying an older one", path, describe(e))
        return None

    def clear(self) -> None:
        """Remove the run's folder: checkpoints and journal (once it ended ok or oom they serve no
        resume); then its config's folder and ``checkpoint.dir`` where that left them empty, so a
        sweep whose jobs all ended leaves no empty folders behind."""
        shutil.rmtree(self.directory, ignore_errors=True)
        for folder in (self.directory.parent, self.directory.parent.parent):
            try:
                folder.rmdir()
            except OSError:  # not empty (another run's folder), or not ours to remove
                break


def _discard(path: str | Path | None) -> None:
    """Remove ``path`` if it can be: a folder made immutable or read-only mid-job (found by
    scripts/chaos.py, seed 1124 fault 7: ``chattr +i`` between the write and its rename) refuses
    the clean-up too, and that must not turn a refused checkpoint into a failed job."""
    if path is None:
        return
    try:
        Path(path).unlink(missing_ok=True)
    except OSError:
        pass
