"""GPU and host telemetry: a background sampler, per-epoch summaries, energy, the raw samples.

GPU fields come from NVML through nvidia-ml-py (``import pynvml``, NVIDIA's bindings of the NVML C
API, "Device Queries" in the NVML API reference), host fields from psutil;
`sweeps.telemetry.nvml` gives each one's call and unit (MHz, %, MB, °C, W, J). No library,
no driver or no GPU in use: GPU telemetry is off and the ``telemetry`` tag says why. A query a
GPU does not support (``NVMLError_NotSupported``) drops that field only. Telemetry never fails a
job.

A thread samples every ``interval_s``; the trainer also takes a sample at each edge of a training
epoch, where the device is synchronized, so each epoch window has exact ends and the energy
counter is read with the GPU's queue empty. Those edge samples run on the training thread, so
their cost is bounded: the edge gap (`Telemetry.edge_gap_s`) is `EDGE_GAP_S`, or
`EDGE_COST_RATIO` times what an edge sample took where that is more (on an H200
``nvmlDeviceGetTotalEnergyConsumption`` takes ~3.6 ms a call: docs/benchmarks.md): two samples per
gap, ≤ 2 % of the training time. An epoch that follows one shorter than the gap (epochs of a few
ms) gets no edges, except with a GPU once the last sample is a gap old (on the host alone there is
no energy to read at them): such an epoch's metrics come from the samples inside it, if any, and
it has no energy figure (``energy/train_j`` is then omitted). After an epoch at least a gap long
the next one always gets its edges, however soon it starts (a short evaluation between them).
One summary per epoch, never a log call per sample.
"""
from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psutil

from sweeps import names
from sweeps.errors import describe
from sweeps.state import said_once
from sweeps.telemetry import nvml as nvml_api
from sweeps.telemetry.nvml import GPU_FIELDS, HOST_FIELDS, MB, PERMANENT, gpu_ids, nvml_problem
from sweeps.telemetry.stats import busy_pct, energy, epoch_metrics, reasons_seen, samples_csv

log = logging.getLogger("sweeps")
META = ("t_s", "unix_s", "epoch", "mark")  # seconds since start, Unix time, training epoch, edge
EDGE_GAP_S = 0.05  # epoch edges are sampled only when the last sample is at least this old (s)
# ... or this many times an edge sample's own cost, if more: two per gap then take ≤ 2 % of the time
EDGE_COST_RATIO = 100
EDGE_COSTS_KEPT = 5  # that cost is the median of the last few edge samples' (one stalled sample moves nothing)


@dataclass
class Window:
    """One training epoch: rows ``first``..``last`` (its edge samples) of `Telemetry.rows`."""
    epoch: int
    first: int
    last: int = -1
    energy_j: float | None = None
    exact: bool = True  # both edges sampled (energy and the window's ends are exact)
    opened_s: float = 0.0  # the monotonic clock at epoch_start (s)


class Telemetry:
    """Samples the GPUs ``gpus`` (NVML UUID strings or indices) and this process's host side.

    ``interval_s`` ≤ 0 turns it off: every method is then a no-op. ``nvml`` is the NVML module
    (default: nvidia-ml-py's ``pynvml``); ``clock`` the monotonic clock in seconds.
    ``gpu_off_reason``: why no GPU is sampled, where ``gpus`` is empty; ``gpu_off_detail``: more
    of it that the ``telemetry`` tag keeps and the console leaves out (no NVML here, for a job
    that uses no GPU anyway).
    Lifecycle: `start`, per epoch `epoch_start` / `epoch_end`, `stop`,
    then `summary`, `tags`, `csv`.
    """

    def __init__(self, interval_s: float, gpus: Sequence[int | str] = (), *, nvml: Any = None,
                 clock: Callable[[], float] = time.monotonic, gpu_off_reason: str = "no GPU in use",
                 gpu_off_detail: str = ""):
        self.interval_s, self.enabled = float(interval_s), interval_s > 0
        self.gpu_ids, self.gpu_reason, self.gpu_detail = list(gpus), gpu_off_reason, gpu_off_detail
        self._nvml, self._clock = nvml, clock
        self.handles: list = []
        self.names: list[str] = []
        self.dropped: dict[tuple[int, str], str] = {}  # (gpu, field) → why
        self._noted: set = set()
        self.rows: list[tuple] = []
        self.windows: list[Window] = []
        self.columns: list[str] = []
        self._open: Window | None = None
        self._lock = threading.RLock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._stopped = self._nvml_open = False
        self._energy_base: dict[int, float] = {}
        self._cpu_times: Any = None  # psutil.cpu_times() at the previous sample (machine-wide CPU %)
        self._methods: set[str] = set()  # how energy was measured: counter, power_integration
        self._last_epoch_s = 0.0  # the previous epoch's length (s): a long one earns the next its edges
        self._edge_costs: deque = deque(maxlen=EDGE_COSTS_KEPT)  # what the last edge samples took (s)

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> "Telemetry":
        """Open NVML for the GPUs, take the first sample, start the sampler thread. Never raises."""
        if not self.enabled or self._started:
            return self
        self._started = True
        try:
            self._open_gpus()
            self._proc = psutil.Process()
            self._proc.cpu_percent(None)  # the first call only sets the reference point (kept per object)
            gpu_cols = [f"gpu{k}_{f}" for k in range(len(self.handles)) for f in GPU_FIELDS]
            self.columns = [*META, *HOST_FIELDS, *gpu_cols]
            self._t0 = self._clock()
            self.sample("start")
            self._thread = threading.Thread(target=self._run, name="sweeps-telemetry", daemon=True)
            self._thread.start()
        except Exception as e:  # telemetry never fails a job
            self.enabled, self.gpu_reason = False, f"failed to start ({describe(e)})"
        what = self._what(detail=False)  # the same for every job of a sweep on one machine: said once
        log.log(logging.INFO if said_once(("telemetry", what)) else logging.DEBUG, "telemetry: %s", what)
        return self

    def _open_gpus(self) -> None:
        if not self.gpu_ids:
            return
        n = self._nvml = self._nvml or nvml_api.pynvml
        try:
            n.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound (no driver), NVMLError_DriverNotLoaded, ...
            self.gpu_reason = f"no NVML ({describe(e)})" if n else "nvidia-ml-py is not installed"
            return
        self._nvml_open = True
        for ident in self.gpu_ids:
            try:
                h = nvml_api.handle(n, ident)
                name = n.nvmlDeviceGetName(h)
            except Exception as e:
                self.handles, self.names = [], []
                self.gpu_reason = f"GPU {ident} not found in NVML ({describe(e)})"
                return
            self.handles.append(h)
            self.names.append(name.decode() if isinstance(name, bytes) else str(name))

    def _run(self) -> None:
        due = self._clock()
        while True:  # on a fixed cadence; after a stall, one sample and on again (no burst)
            due = max(due + self.interval_s, self._clock())
            if self._halt.wait(max(0.0, due - self._clock())):
                return
            try:
                self.sample()
            except Exception as e:  # keep sampling; say so once
                self._note(("sample", type(e)), f"telemetry: a sample failed ({describe(e)})")

    def stop(self) -> None:
        """Stop the thread, take a last sample and close NVML. Idempotent; never raises."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=10 + self.interval_s)
        try:
            if self.enabled:
                self.sample("stop")
            if self._nvml_open:
                self._nvml.nvmlShutdown()
        except Exception as e:
            log.info("telemetry: stopping: %s", describe(e))

    # sampling --------------------------------------------------------------------------------
    def sample(self, mark: str = "") -> tuple:
        """Take one sample now (any thread) and append it to `rows`. The CPU figures cover the
        time since the previous row, whichever thread took it: the process's from its own
        ``psutil.Process`` (its reference point is per object), the machine's from the CPU times
        kept here (``psutil.cpu_percent(None)`` keeps its reference point per thread)."""
        with self._lock:
            p = self._proc
            vm = psutil.virtual_memory()
            before, self._cpu_times = self._cpu_times, psutil.cpu_times()
            row = [self._clock() - self._t0, time.time(), self._open.epoch if self._open else None, mark,
                   p.cpu_percent(None) if mark != "start" else None,  # no interval before the first
                   p.memory_info().rss / MB, (vm.total - vm.available) / MB,
                   busy_pct(before, self._cpu_times) if before is not None else None]
            for k, h in enumerate(self.handles):
                row += [self._query(k, h, f, q) for f, q in GPU_FIELDS.items()]
            self.rows.append(tuple(row))
            return self.rows[-1]

    def _query(self, k: int, h: Any, field: str, query: Callable) -> float | None:
        if (k, field) in self.dropped:
            return None
        try:
            v = query(self._nvml, h)
        except Exception as e:
            if type(e).__name__ in PERMANENT:
                self.dropped[(k, field)] = type(e).__name__
                log.info("telemetry: gpu%d %s is not available on %s (%s): left out", k, field, self.names[k],
                         describe(e))
            else:  # a transient failure: this sample lacks the value
                self._note((k, field, type(e)), f"telemetry: gpu{k} {field}: {describe(e)}")
            return None
        if field == "energy_j":  # the counter runs since the driver loaded: count from our start
            v -= self._energy_base.setdefault(k, v)
        return v

    def _note(self, key: Any, message: str) -> None:
        """Say ``message`` once per job, and at INFO once per sweep (a machine's trait, not a job's)."""
        if key not in self._noted:
            self._noted.add(key)
            log.log(logging.INFO if said_once(("telemetry", key)) else logging.DEBUG, message)

    # epochs ----------------------------------------------------------------------------------
    def epoch_start(self, epoch: int) -> None:
        """Mark the start of training epoch ``epoch`` (call where the device is synchronized)."""
        if not self.enabled or not self._started or self._stopped:
            return
        with self._lock:
            # the first epoch always has its edges; after a long epoch, so has the next (measured on
            # an H100: a 2-epoch job's evaluation took < EDGE_GAP_S, and its energy/train_j was lost).
            # A short epoch gets them every EDGE_GAP_S only where there is a GPU's energy counter to
            # read at them: on the host alone they bought nothing but 2 samples (~0.25 ms) every 50 ms,
            # ~2 % of study 5's 1-ms epochs (py-spy); its host figures come from the sampler's rows
            gap = self.edge_gap_s()
            edge = not self.windows or self._last_epoch_s >= gap or (bool(self.handles) and self._edge_due(gap))
            self._open = Window(epoch, len(self.rows), exact=edge, opened_s=self._clock())
            if edge:
                self._edge_sample("epoch_start")

    def edge_gap_s(self) -> float:
        """The edge gap (s): `EDGE_GAP_S`, or `EDGE_COST_RATIO` × an edge sample's
        measured cost where that is longer (a 1-ms epoch must not pay two samples; where NVML's
        energy read takes ms, neither may a 50-ms one). The cost is the median of the last
        `EDGE_COSTS_KEPT` edge samples': a sample stalled once (a page fault, a busy
        core) neither widens the gap nor takes the next long epoch's energy figure."""
        cost = statistics.median(self._edge_costs) if self._edge_costs else 0.0
        return max(EDGE_GAP_S, EDGE_COST_RATIO * cost)

    def _edge_due(self, gap: float) -> bool:
        """Whether an epoch edge gets its own sample because the last sample is ``gap`` s old."""
        return not self.rows or self._clock() - self._t0 - self.rows[-1][0] >= gap

    def _edge_sample(self, mark: str) -> None:
        """An edge sample, its cost kept for `edge_gap_s`."""
        t = self._clock()
        self.sample(mark)
        took = self._clock() - t
        self._edge_costs.append(took)
        if self.handles and self.edge_gap_s() > EDGE_GAP_S:  # on the host alone no energy is read at edges
            self._note("edge gap", f"telemetry: an epoch-edge sample takes {1e3 * took:.1f} ms here: epoch edges "
                       f"at most every {self.edge_gap_s():.2f} s; epochs shorter than that have no energy figure")

    def epoch_end(self, epoch: int) -> dict[str, float]:
        """Close the epoch (device synchronized); its summary metrics (``system/gpu/…``, ``system/host/…``)."""
        if self._open is None or self._open.epoch != epoch or self._stopped:
            return {}
        with self._lock:
            w = self._open
            self._last_epoch_s = self._clock() - w.opened_s
            w.exact = w.exact and self._edge_due(0.0)
            if w.exact:
                self._edge_sample("epoch_end")  # still inside the window: the row carries its epoch
            self._open = None
            w.last = len(self.rows) - 1
            rows = self.rows[w.first:w.last + 1]
        self.windows.append(w)
        if not rows:  # a short epoch between two samples: nothing measured in it
            return {}
        out = epoch_metrics(rows, self.columns, len(self.handles))
        # energy needs both edges; a window whose edges were skipped has none
        w.energy_j, methods = energy(rows, self.columns, len(self.handles)) if w.exact else (None, set())
        self._methods.update(methods)
        if w.energy_j is not None:
            out[names.GPU_ENERGY_J] = w.energy_j
        return out

    # results ---------------------------------------------------------------------------------
    def summary(self, train_samples: int = 0) -> dict[str, float]:
        """Job-level ``energy/total_j`` (all GPUs, start to stop: setup, training and evaluation),
        ``energy/train_j`` (Σ of the epochs' ``system/gpu/energy_j``) and ``energy/j_per_sample``
        (``energy/train_j`` ÷ ``train_samples``, the training examples of those epochs)."""
        if not self.handles or not self.rows:
            return {}
        out = {}
        total, methods = energy(self.rows, self.columns, len(self.handles))
        self._methods.update(methods)
        if total is not None:
            out[names.ENERGY_TOTAL_J] = total
        per_epoch = [w.energy_j for w in self.windows]
        if per_epoch and None not in per_epoch:
            out[names.ENERGY_TRAIN_J] = sum(per_epoch)
            if train_samples > 0:
                out[names.ENERGY_J_PER_SAMPLE] = out[names.ENERGY_TRAIN_J] / train_samples
        return out

    def tags(self) -> dict[str, str]:
        """``job.telemetry`` (what was sampled, or why not), ``job.energy_method`` (``counter``,
        ``power_integration``, both joined by ``+``, or ``none``) and ``job.throttle_reasons``
        (the clock-event reasons seen, see `sweeps.telemetry.stats.REASONS`)."""
        tags = {names.TELEMETRY_TAG: self._what(detail=True)}
        if not self.enabled or not self.handles:
            return tags
        tags[names.ENERGY_METHOD_TAG] = "+".join(sorted(self._methods)) or "none"
        if any((k, "throttle_reasons") not in self.dropped for k in range(len(self.handles))):
            tags[names.THROTTLE_REASONS_TAG] = reasons_seen(self.rows, self.columns) or "none"
        return tags

    def _what(self, detail: bool) -> str:
        """What is sampled, or why not: the ``telemetry`` tag (``detail``), the console's line (without
        `gpu_detail`)."""
        if not self.enabled:
            return f"off ({self.gpu_reason if self._started else 'telemetry.interval_s=0'})"
        every = f"every {self.interval_s:g} s"
        if not self.handles:
            more = f"; {self.gpu_detail}" if detail and self.gpu_detail else ""
            return f"host only (psutil, {every}); GPU off: {self.gpu_reason}{more}"
        text = f"GPU and host (NVML + psutil, {every}): {', '.join(self.names)}"
        if self.dropped:
            text += "; not supported: " + ", ".join(f"gpu{k} {f}" for k, f in sorted(self.dropped))
        return text

    def csv(self) -> str:
        """The samples, one row each (fields a GPU does not support left out)."""
        return samples_csv(self.rows, self.columns, self.dropped)


def for_job(interval_s: float, device: Any) -> Telemetry:
    """A started sampler for a job on ``device`` (a torch.device, or the sequence of devices and
    UUIDs a data-parallel job uses: power, energy and memory then add up over them): its GPUs
    on CUDA, host only elsewhere. A job that uses no GPU says so in one line, once per sweep
    (``telemetry: host only (…); GPU off: the job runs on cpu``); why NVML cannot be used here,
    if it cannot, goes to its ``telemetry`` tag only."""
    ids = gpu_ids(device)
    first = device[0] if isinstance(device, (list, tuple)) and device else device
    reason = "" if ids else f"the job runs on {_kind_name(first)}"
    problem = nvml_problem() if not ids and interval_s > 0 else ""  # on the tag: why auto may have chosen the CPU
    return Telemetry(interval_s, ids, gpu_off_reason=reason, gpu_off_detail=problem).start()


def _kind_name(device: Any) -> str:
    """What the console calls the kind of ``device`` (`sweeps.devices.DeviceKind.name`: ``cpu``)."""
    if not hasattr(device, "type"):
        return "cpu"
    from sweeps.devices import of

    return of(device).name
