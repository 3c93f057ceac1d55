"""The telemetry figure of a job (PNG): the curves the reference study read from its GPU
monitor's CSV — clocks, utilisation, memory, temperature, power — and the host's CPU % and RSS,
over time, with the training epochs shaded. Host panels only where no GPU was sampled.

Drawn with matplotlib's Agg canvas on a `matplotlib.figure.Figure` (no pyplot, no display,
no global state), so jobs that run one after another in one process do not share figures. A job
draws it at its end while its store process ingests its last metric values (matplotlib's import,
~0.65 s, and the drawing, ~0.35 s, on the other core of two: docs/benchmarks.md).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from sweeps.telemetry.sampler import Telemetry

# (y label, [(sample field, line label)]) per panel
GPU_PANELS = [
    ("GPU clock [MHz]", [("sm_clock_mhz", "SM"), ("mem_clock_mhz", "memory")]),
    ("GPU utilisation [%]", [("util_pct", "")]),
    ("GPU memory used [MB]", [("mem_used_mb", "")]),
    ("GPU temperature [°C]", [("temp_c", "")]),
    ("GPU power [W]", [("power_w", "")]),
]
HOST_PANELS = [
    ("process CPU [%]", [("cpu_pct", "")]),  # 100 = one core
    ("process RSS [MB]", [("rss_mb", "")]),
]
RATES = ("util_pct", "cpu_pct")  # a value describes the interval before its sample: drawn as steps
# Above this many epochs (a 10-inch, 100-dpi figure is ~900 pixels wide) the shades and edges of
# single epochs would be sub-pixel and cost ~0.5 s of drawing at 10,000 epochs: one band instead.
MAX_SHADED_EPOCHS = 300
ARTIFACT = "telemetry.png"


@dataclass(frozen=True)
class FigureData:
    """What the figure draws, as plain values (a snapshot of a `Telemetry`).

    ``columns`` and ``rows`` are `Telemetry.columns` and ``rows`` (``t_s`` first);
    ``gpus`` the number of GPUs sampled; ``edges`` ``(epoch, first sample's t_s, last sample's
    t_s)`` per training epoch — one band ``(first epoch, its start, the last epoch's end)`` where
    there are more than `MAX_SHADED_EPOCHS`; ``epochs`` ``(count, first, last)`` epoch
    numbers; ``interval_s`` the sampling interval (s)."""

    columns: list[str]
    rows: list[tuple]
    gpus: int
    edges: list[tuple[int, float, float]]
    epochs: tuple[int, int, int]
    interval_s: float

    @classmethod
    def of(cls, tel: "Telemetry") -> "FigureData":
        edges = [(w.epoch, tel.rows[w.first][0], tel.rows[w.last][0]) for w in tel.windows]
        if len(edges) > MAX_SHADED_EPOCHS:  # thinner than a pixel each: one band from the first epoch to the last
            edges = [(edges[0][0], edges[0][1], edges[-1][2])]
        ends = (len(tel.windows), tel.windows[0].epoch, tel.windows[-1].epoch) if tel.windows else (0, 0, 0)
        return cls(list(tel.columns), list(tel.rows), len(tel.handles), edges, ends, tel.interval_s)


Drawable = Union["Telemetry", FigureData]


def _data(tel: Drawable) -> FigureData:
    return tel if isinstance(tel, FigureData) else FigureData.of(tel)


def _lines(tel: FigureData, field: str, label: str) -> list[tuple[str, str, list, list]]:
    """``[(legend label, field, t, values)]``: one line per GPU for a GPU field, one for a host field."""
    out = []
    for i, c in enumerate(tel.columns):
        gpu = c.startswith("gpu") and c.split("_", 1)[1] == field
        if c != field and not gpu:
            continue
        pts = [(r[0], r[i]) for r in tel.rows if r[i] is not None]
        if pts:
            name = " ".join(filter(None, [c.split("_", 1)[0] if gpu and tel.gpus > 1 else "", label]))
            out.append((name, field, [t for t, _ in pts], [v for _, v in pts]))
    return out


def render(tel: Drawable, title: str = "") -> bytes:
    """The figure as PNG bytes (empty when there are no samples)."""
    if not tel.rows:
        return b""
    buf = io.BytesIO()
    figure(tel, title).savefig(buf, format="png")
    return buf.getvalue()


def figure(tel: Drawable, title: str = "") -> "Figure":
    """The telemetry figure of ``tel`` (at least one sample): a panel per field, time in s on x."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # ~0.65 s: only where a figure is drawn
    from matplotlib.figure import Figure

    tel = _data(tel)
    panels = []
    for ylabel, fields in (GPU_PANELS if tel.gpus else []) + HOST_PANELS:
        lines = [line for f, label in fields for line in _lines(tel, f, label)]
        if lines:
            panels.append((ylabel, lines))
    height = 1.7 * len(panels) + 0.8  # inches
    fig = Figure(figsize=(10, height), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    edges = tel.edges
    for ax, (ylabel, lines) in zip(axes, panels):
        # training epochs shaded, evaluation and setup left white: one artist per shade and one for
        # the edges, whatever the number of epochs (an artist per epoch made 10,000 epochs take minutes)
        band = ax.get_xaxis_transform()  # x in data, y in axes fraction
        for parity, shade in ((1, "0.88"), (0, "0.94")):
            spans = [(t0, t1 - t0) for epoch, t0, t1 in edges if epoch % 2 == parity]
            if spans:
                ax.broken_barh(spans, (0, 1), transform=band, color=shade, lw=0, zorder=0)
        if edges:
            ax.vlines([t0 for _, t0, _ in edges], 0, 1, transform=band, color="0.6", lw=0.6, zorder=1)
        for name, field, t, v in lines:
            ax.plot(t, v, lw=1.1, marker="." if len(t) < 40 else None, label=name or None, zorder=2,
                    drawstyle="steps-pre" if field in RATES else "default")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if any(line[0] for line in lines):
            ax.legend(loc="best", fontsize="small", framealpha=0.7)
    top = axes[0]
    if len(edges) <= 40:  # epoch numbers above the first panel
        for epoch, t0, t1 in edges:
            top.annotate(str(epoch), ((t0 + t1) / 2, 1.0), xycoords=("data", "axes fraction"),
                         ha="center", va="bottom", fontsize="x-small", color="0.3")
    count, first, last = tel.epochs
    shaded = ("training epochs (numbered)" if count <= MAX_SHADED_EPOCHS else
              f"epochs {first}-{last} (too many to shade one by one)")
    axes[-1].set_xlabel(f"time since the sampler started [s]; shaded: {shaded}")
    what = "GPU and host" if tel.gpus else "host (no GPU sampled)"
    title = title if len(title) <= 90 else title[:87] + "..."
    fig.suptitle("\n".join(filter(None, [title, f"telemetry: {what}, every {tel.interval_s:g} s"])),
                 fontsize="medium")
    # fixed margins in inches (title and epoch numbers above, the x label below, y labels of up
    # to 6 digits left): tight_layout measured every text to find them, 10-30 % of a job's figure
    fig.subplots_adjust(left=0.85 / 10, right=1 - 0.2 / 10, top=1 - 0.8 / height, bottom=0.55 / height, hspace=0.22)
    return fig
