"""What holds a job back: the named bottleneck of a step's breakdown (`classify`), the figures
behind it, and the overrides that follow from it (`advice`) — which ``python -m sweeps.advise``
runs beside the job to measure.

The rules, first match wins (shares of the profiled step, `sweeps.train.profile_window`):

1. ``input-bound``: waiting for data (``data``) is at least `INPUT_PCT` % of the step. The
   PyTorch Performance Tuning Guide puts data loading first ("enable asynchronous data loading
   and augmentation": workers, pinned memory); TensorBoard's profiler reports the same share
   ("% of step time waiting for input") as its input-pipeline verdict.
2. ``communication-bound``: collectives (data-parallel all-reduce) are at least `COMM_PCT` % of
   the step (Holistic Trace Analysis' temporal breakdown counts communication apart from
   compute for this reason).
3. ``host-bound``: the device waits on the host. On a GPU: it is idle for at least
   `IDLE_PCT` % of the step (HTA's idle-time breakdown, "host wait"), with the kernel count and
   median kernel duration as evidence — many kernels of a few µs each are launch overhead
   (PyTorch Performance Tuning Guide: CUDA graphs, ``torch.compile``, larger batches). On a CPU:
   Python and dispatch between operators (``host``) are at least `HOST_PCT` % of the step — the
   operators are a minority of it.
4. ``compute-bound``: operators (``compute`` + ``optimizer``) are at least `COMPUTE_PCT` % of
   the step (with MFU where a peak is known: how far from the device's datasheet peak).
5. ``balanced``: none of the above.

The thresholds are this tool's choice, not the sources': the sources name what to measure.
A class near a threshold is said with its figures, so a reader can weigh it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sweeps import names

PARTS = names.DIAG_PARTS  # a step's parts, as diag/<part>_pct
INPUT_PCT, COMM_PCT, IDLE_PCT, HOST_PCT, COMPUTE_PCT = 25.0, 25.0, 50.0, 50.0, 60.0
CLASSES = ("input-bound", "communication-bound", "host-bound", "compute-bound", "balanced")


@dataclass
class Breakdown:
    """Where a profiled window's steps went.

    Attributes:
        step_ms: the mean step the parts make up (ms): the profiled step less the profiler's own
            cost (`sweeps.train.profile_window.breakdown`).
        wall_step_ms: the profiled steps on the host clock, synchronized (ms; None: not measured).
        steps: recorded steps.
        parts_pct: {part: % of the step} for each of `PARTS` (they sum to 100).
        device: ``cpu`` or ``cuda``.
        profiled_step_ms: the profiled step from the trace, the profiler's cost in it (ms).
        events_per_step: operators and annotations the profiler recorded a step.
        kernels_per_step, median_kernel_us, device_idle_pct: on a GPU, the device's view (None on a CPU).
    """

    step_ms: float
    wall_step_ms: float | None
    steps: int
    parts_pct: dict[str, float]
    device: str
    profiled_step_ms: float | None = None
    events_per_step: float | None = None
    kernels_per_step: float | None = None
    median_kernel_us: float | None = None
    device_idle_pct: float | None = None

    def metrics(self) -> dict[str, float]:
        """The breakdown as the run's ``diag/*`` metrics (step 0)."""
        out = {names.diag_pct(p): round(v, 2) for p, v in self.parts_pct.items()}
        out[names.DIAG_STEP_MS] = self.step_ms
        if self.wall_step_ms is not None:
            out[names.DIAG_WALL_STEP_MS] = self.wall_step_ms
        for key, value in ((names.DIAG_KERNELS_PER_STEP, self.kernels_per_step),
                           (names.DIAG_MEDIAN_KERNEL_US, self.median_kernel_us),
                           (names.DIAG_DEVICE_IDLE_PCT, self.device_idle_pct)):
            if value is not None:
                out[key] = value
        return out


@dataclass
class Diagnosis:
    """A named bottleneck (one of `CLASSES`), the rule and figures behind it in one line, and
    the overrides that follow from it (each a ``key=value`` the tool can run)."""

    bottleneck: str
    evidence: str
    advice: list[str] = field(default_factory=list)


def _ms(ms: float) -> str:
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def classify(b: Breakdown, mfu: float | None = None) -> tuple[str, str]:
    """``(class, evidence)`` of breakdown ``b`` by the module's rules; ``mfu`` (0-1) joins a
    compute-bound verdict where a peak is known."""
    p = b.parts_pct
    ops = p["compute"] + p["optimizer"]
    step = f"{_ms(b.step_ms)} ms a step"
    if p["data"] >= INPUT_PCT:
        return "input-bound", f"{p['data']:.0f} % of each step waits for data (rule: ≥ {INPUT_PCT:.0f} %; {step})"
    if p["communication"] >= COMM_PCT:
        return ("communication-bound", f"{p['communication']:.0f} % of each step is all-reduce and other "
                f"collectives (rule: ≥ {COMM_PCT:.0f} %; {step})")
    if b.device_idle_pct is not None and b.device_idle_pct >= IDLE_PCT:
        kernels = (f"; {b.kernels_per_step:.0f} kernels a step, median {b.median_kernel_us:.1f} µs"
                   if b.kernels_per_step is not None and b.median_kernel_us is not None else "")
        return ("host-bound", f"the GPU is idle {b.device_idle_pct:.0f} % of each step (rule: ≥ {IDLE_PCT:.0f} %"
                f"{kernels}; {step})")
    if b.device_idle_pct is None and p["host"] >= HOST_PCT:
        return ("host-bound", f"{p['host']:.0f} % of each step is Python and dispatch between operators, "
                f"operators {ops:.0f} % (rule: host ≥ {HOST_PCT:.0f} %; {step})")
    if ops >= COMPUTE_PCT:
        at = f", MFU {100 * mfu:.0f} %" if mfu is not None else ""
        return "compute-bound", f"operators are {ops:.0f} % of each step (rule: ≥ {COMPUTE_PCT:.0f} %{at}; {step})"
    shares = ", ".join(f"{k} {v:.0f} %" for k, v in p.items())
    return "balanced", f"no part dominates ({shares}; {step})"


def advice(bottleneck: str, params: dict[str, str], *, convolutional: bool = False, can_reside: bool = False,
           workers: int | None = None, cores: int = 1) -> list[str]:
    """The overrides that follow from ``bottleneck`` for a job with ``params`` (its resolved
    config flattened, text: `sweeps.tracking.store.store.flatten`), each one the tool can run;
    [] where none does (a compute-bound job on a CPU: a faster device, or a smaller model).
    What the job was: a ``convolutional`` model; training data that ``can_reside`` on the
    device (in-memory tensors, not files to decode); ``workers``, its DataLoader's worker
    processes (None: the data were served from the device); ``cores`` on the machine."""
    device = params.get("device.name", params.get("device", ""))
    batch = params.get("batch", "")
    doubled = f"batch={int(batch) * 2}" if batch.isdigit() else None
    out: list[str] = []
    if bottleneck == "input-bound":
        if can_reside and workers is not None:
            out.append("dataset.loader=device")
        if workers is not None and workers < max(1, cores - 1):  # a core left to the training
            out.append(f"dataset.num_workers={max(1, cores - 1)}")
    elif bottleneck == "host-bound":
        out += [o for o in (doubled, "compile=true" if params.get("compile") != "True" else None) if o]
        if device == "cuda":
            out.append("device=cpu")
    elif bottleneck == "communication-bound":
        out += [doubled] if doubled else []
        gpus = params.get("device.gpus", "")
        if gpus.isdigit() and int(gpus) > 1:
            out.append(f"device.gpus={int(gpus) // 2}")
    elif bottleneck == "compute-bound" and device in ("cuda", "ddp") and params.get("device.backend") != "gloo":
        if params.get("precision.name", params.get("precision")) in ("fp32", None):
            out.append("precision=bf16")
        if params.get("channels_last") != "True" and convolutional:
            out.append("channels_last=true")
    return out


def diagnose(b: Breakdown, params: dict[str, str], mfu: float | None = None, **facts) -> Diagnosis:
    """`classify` and `advice` together (``facts``: `advice`'s keyword arguments)."""
    bottleneck, evidence = classify(b, mfu)
    return Diagnosis(bottleneck, evidence, advice(bottleneck, params, **facts))
