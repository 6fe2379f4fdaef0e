"""The feasible region of a sweep as a figure: micro-batch size against TP·PP, one cell per pair, coloured by the
best verdict any configuration of that pair reaches (over EP, ETP, ZeRO, recomputation, schedule, M and s).

Deterministic: matplotlib's Agg canvas, no pyplot state, fixed metadata (no software version or date).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from symmem.errors import SymmemError
from symmem.units import GB, GIB

FORMATS = {"png": {"Software": None}, "pdf": {"CreationDate": None}, "svg": {"Date": None}}
STATUS = ("no valid configuration", "does not fit", "fits only at the low end of overheads", "fits")
COLOURS = ("#d9d9d9", "#d7301f", "#fdae61", "#1a9850")


def plot_format(path: str) -> str:
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise SymmemError(f"--plot = {path!r}: unknown figure format; write .png, .pdf or .svg")
    return fmt


def region_grid(summary) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(TP·PP values, status per (b, TP·PP), best headroom at the high end in bytes per (b, TP·PP))."""
    space = summary.space
    xs = sorted({t * p for t in space.tp for p in space.pp if space.gpus % (t * p) == 0} | set(summary.region))
    sentinel = np.iinfo(np.int64).min
    status = np.zeros((len(space.b), len(xs)), dtype=np.int64)
    head = np.full((len(space.b), len(xs)), sentinel, dtype=np.int64)
    for j, x in enumerate(xs):
        if x not in summary.region:
            continue
        high, low = summary.region[x]
        valid = high != sentinel
        status[:, j] = np.where(~valid, 0, np.where(high >= 0, 3, np.where(low >= 0, 2, 1)))
        head[:, j] = high
    return xs, status, head


def render_region(summary, fmt: str) -> bytes:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    space = summary.space
    xs, status, head = region_grid(summary)
    nb, nx = status.shape
    with matplotlib.rc_context({"svg.hashsalt": "symmem", "font.size": 9}):
        fig = Figure(figsize=(min(14.0, max(6.0, 0.7 * nx + 3)), min(12.0, max(4.0, 0.25 * nb + 2.5))))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.imshow(status, cmap=ListedColormap(COLOURS), vmin=-0.5, vmax=3.5, origin="lower", aspect="auto",
                  interpolation="nearest")
        ax.set_xticks(range(nx), [str(x) for x in xs])
        step = max(1, -(-nb // 24))
        ax.set_yticks(range(0, nb, step), [str(space.b[i]) for i in range(0, nb, step)])
        ax.set_xlabel(f"TP × PP (GPUs per model replica; DP = {space.gpus} / (TP × PP))")
        ax.set_ylabel("micro-batch size b (sequences per micro-batch)")
        cap = space.capacity
        annotate = nb * nx <= 300
        ax.set_title(f"{space.base.model.name} on {space.gpus} GPUs of {cap / GB:.2f} GB ({cap / GIB:.2f} GiB): "
                     "best configuration per cell"
                     + ("\n(numbers: largest headroom, capacity − high estimate, in GiB)" if annotate else ""),
                     fontsize=9)
        if annotate:
            for i in range(nb):
                for j in range(nx):
                    if status[i, j] == 3:
                        ax.text(j, i, f"{head[i, j] / GIB:.1f}", ha="center", va="center", fontsize=7,
                                color="white")
        handles = [Patch(facecolor=c, label=s) for c, s in zip(COLOURS, STATUS, strict=True)]
        fig.legend(handles=handles, loc="lower center", ncol=2, frameon=False, fontsize=8)
        fig.tight_layout(rect=(0, 0.09 * 4.0 / fig.get_figheight(), 1, 1))
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, metadata=FORMATS[fmt])
    return buf.getvalue()


def write_region(summary, path: str) -> None:
    """Render, then place atomically: nothing half-written."""
    from symmem.output import write_file

    # symmem.output.write_file: renamed over a regular file, written through a device or FIFO, never replacing one
    write_file(path, render_region(summary, plot_format(path)), "--plot")
