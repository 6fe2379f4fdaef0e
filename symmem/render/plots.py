"""Figures: where the memory goes. Matplotlib (Agg), deterministic files (no timestamps or version strings).

Each `figure_*` function returns (matplotlib Figure, data), so that tests check what is drawn, not only that a
file exists.
"""

from __future__ import annotations

import io

from symmem.units import GIB

_PNG_META = {"Software": None}
_PDF_META = {"CreationDate": None, "Producer": None, "Creator": None}

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "overheads (high)")
COLORS = ("#4477aa", "#66ccee", "#228833", "#ee6677", "#bbbbbb")
POLICIES = ("none", "selective", "deepseek", "full")
# line style and marker per policy: `none` and `deepseek` nearly coincide, so they differ in both
_STYLES = {"none": ("-", "o", 6), "selective": ("-", "^", 6), "deepseek": ("--", "x", 8), "full": ("-", "s", 5)}


def defer_font_subsetter() -> None:
    """Load `fontTools.subset` on first use rather than with matplotlib's PDF backend.

    matplotlib 3.11's `backends/_backend_pdf_ps.py:13` imports `fontTools.subset` when the PDF backend loads
    (about 0.15 s of CPU, a tenth of `symmem paper`), but only `embedTTFType42` (`backend_pdf.py:1248`) uses it:
    our figures embed their text as Type 3 fonts, matplotlib's default `pdf.fonttype`, and never touch it. The
    standard library's `importlib.util.LazyLoader` (the "lazy imports" recipe of the importlib documentation)
    registers the module and executes it on its first attribute access, so a Type 42 run still gets it whole.
    """
    import importlib.util
    import sys

    if "fontTools.subset" in sys.modules:
        return
    spec = importlib.util.find_spec("fontTools.subset")
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fontTools.subset"] = module
    spec.loader.exec_module(module)
    sys.modules["fontTools"].subset = module


def load_matplotlib() -> None:
    """Import what the figures use (the Figure class and the PDF backend, not pyplot), the font subsetter
    deferred, with the one-shot program's collector paused (`symmem._gc`)."""
    from symmem import _gc

    defer_font_subsetter()
    _gc.settle(load=("matplotlib.figure", "matplotlib.backends.backend_pdf"))


def _figure(**kw):
    # The object-oriented API without pyplot: no GUI backend, no global figure registry, faster to import.
    load_matplotlib()
    import matplotlib
    from matplotlib.figure import Figure

    matplotlib.rcParams.update({"svg.hashsalt": "symmem", "font.size": 9})
    return Figure(**kw)


def _null():
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def _plain_log_ticks(ax) -> None:
    """Label only the major ticks, as plain numbers; no minor ticks (drawing them costs most of the time)."""
    from matplotlib.ticker import FuncFormatter

    ax.minorticks_off()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(_null())
    ax.yaxis.set_minor_formatter(_null())


def stage_components(scn) -> list[dict]:
    from symmem.accounting.analysis import memory

    rows = []
    for m in memory(scn):
        rows.append({"stage": m.stage.index, "weights": m.states.weights, "gradients": m.states.gradients,
                     "optimizer": m.states.optimizer, "activations": m.activations,
                     "overheads (high)": m.fragmentation[1] + m.comm_buffers[1]})
    return rows


def _bars(ax, x: list, heights: list, bottom: list, color: str, label: str, width: float = 0.8) -> None:
    """What `ax.bar` draws (bars of `width` centred on `x`, no edges, the y axis starting at 0), as one collection
    rather than one Rectangle artist per bar: a stage figure has 160 bars, and each artist costs its own setup and
    draw call (a third of the figure's time)."""
    from matplotlib.collections import PolyCollection

    verts = [[(xi - width / 2, b), (xi - width / 2, b + h), (xi + width / 2, b + h), (xi + width / 2, b)]
             for xi, h, b in zip(x, heights, bottom, strict=True)]
    bars = PolyCollection(verts, facecolors=color, edgecolors="none", linewidths=0, label=label)
    bars.sticky_edges.y.append(0)
    ax.add_collection(bars)
    ax.autoscale_view()


def figure_stage_memory(scenarios: list[tuple[str, object]]):
    """Per-stage stacked bars of one GPU's memory, one panel per scenario, with the GPU capacity line."""
    fig = _figure(figsize=(5.2 * len(scenarios), 3.8))
    axes = fig.subplots(1, len(scenarios), squeeze=False)
    data = {}
    for ax, (title, scn) in zip(axes[0], scenarios, strict=True):
        rows = stage_components(scn)
        data[title] = rows
        bottom = [0.0] * len(rows)
        x = [r["stage"] for r in rows]
        for comp, color in zip(COMPONENTS, COLORS, strict=True):
            vals = [r[comp] / GIB for r in rows]
            _bars(ax, x, vals, bottom, color, comp)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        cap = scn.gpu_memory / GIB
        # the capacity is named in the legend, never by a text on the plot, where it would sit on the bars
        line = ax.axhline(cap, color="black", linestyle="--", linewidth=1,
                          label=f"capacity {scn.gpu_memory / 1e9:.0f} GB")
        if ax is not axes[0][0]:
            ax.legend(handles=[line], fontsize=7, loc="center right")
        ax.set_xlabel("pipeline stage")
        ax.set_ylabel("states + saved activations in flight\n+ overheads (high), per GPU (GiB)")
        ax.set_title(f"{title}\n{scn.schedule.label}, M = {scn.m}, b = {scn.b}, s = {scn.s}", fontsize=9, y=1.0)
        ax.set_xticks(x)
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.84, wspace=0.2)
    return fig, data


def _stage_sum(scn) -> int:
    # The sum (model states + saved activations in flight) of the stage with the most, not the timeline's peak:
    # the peak of 44 scenarios x 16 stages costs about 2 s, 50 times the sum (`symmem memory` shows both).
    from symmem.accounting.analysis import memory, peak

    return peak(memory(scn)).allocated


def figure_memory_sweep(scn, axis: str, values: list[int]):
    """Per-GPU memory of the stage with the most (model states + saved activations in flight: the sum, not the
    timeline's peak) against b or s, one line per policy."""
    fig = _figure(figsize=(7.6, 3.8))
    ax = fig.subplots()
    data = {}
    for policy in POLICIES:
        data[policy] = [_stage_sum(scn.replace(recompute_name=policy, **{axis: v})) for v in values]
    for policy in POLICIES:
        ys = data[policy]
        label = f"recompute {policy}"
        if policy == "deepseek" and "none" in data:
            below = [100 * (1 - d / n) for d, n in zip(ys, data["none"], strict=True)]
            lo, hi = f"{min(below):.0f}", f"{max(below):.0f}"
            label += f"\n(dashed: {lo if lo == hi else lo + '-' + hi} % below none,\nnearly the same line)"
        style, marker, size = _STYLES[policy]
        ax.plot(values, [y / GIB for y in ys], linestyle=style, marker=marker, markersize=size, label=label)
    ax.axhline(scn.gpu_memory / GIB, color="black", linestyle="--", linewidth=1,
               label=f"capacity {scn.gpu_memory / 1e9:.0f} GB")
    ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch size b" if axis == "b" else "sequence length s (tokens)")
    ax.set_ylabel("states + saved activations\nper GPU (GiB, log scale)")
    ax.set_title(f"{scn.model.name}, {scn.parallel.describe().split(' (')[0]}\nZeRO {int(scn.zero)}, "
                 f"{scn.schedule.label}, M = {scn.m}" + (f", s = {scn.s}" if axis == "b" else f", b = {scn.b}"),
                 fontsize=9, y=1.0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)  # beside, off the lines
    _plain_log_ticks(ax)
    fig.subplots_adjust(left=0.12, right=0.7, bottom=0.13, top=0.86)
    return fig, data


def params_by_block(model) -> dict[str, int]:
    from symmem.accounting.evaluate import evaluate
    from symmem.accounting.params import weight_uses
    from symmem.model import model_parts

    names = {"embedding": "embedding", "head": "head + final norm", "mla": "attention (MLA)",
             "mlp": "dense FFN"}
    out: dict[str, int] = {}
    subs = model.substitutions()
    from symmem.graph import global_size

    for use in weight_uses(model_parts(model, "paper"), unique=True):
        g = use.weight.group
        key = {"router": "routers", "routed_expert": "routed experts", "shared_expert": "shared experts"}.get(
            g, names.get(use.block, use.block))
        if g == "dense" and use.block == "moe":
            key = "FFN norms (MoE)"
        out[key] = out.get(key, 0) + use.count * int(evaluate(global_size(use.weight.dims), subs))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def figure_params_by_block(model):
    data = params_by_block(model)
    fig = _figure(figsize=(6, 3.4))
    ax = fig.subplots()
    labels = list(data)[::-1]
    vals = [data[k] / 1e9 for k in labels]
    ax.barh(labels, vals, color="#4477aa")
    ax.set_xscale("log")
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v:,.2f}B" if v >= 0.01 else f" {v * 1000:,.2f}M", va="center", fontsize=7)
    ax.set_xlabel("parameters (billions, log scale)")
    ax.set_title(f"{model.name}: {sum(data.values()):,} parameters by block", fontsize=9, y=1.0)
    ax.minorticks_off()
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    fig.subplots_adjust(left=0.27, right=0.93, bottom=0.15, top=0.9)
    return fig, data


def grouped_bars(series: list[tuple[list[float], str]], ticks: list[str], *, width: float, figsize: tuple,
                 ylabel: str, title: str, tick_size: float, rotation: float, margins: tuple[float, float],
                 zero_line: bool = False, formats: tuple[str, ...] = ("png", "pdf")) -> dict[str, bytes]:
    """One group of bars per row, one bar per series (values, label) centred on the row: the measured-run figures
    of derivations/ (measured against symmem and the peer). `margins`: the left and bottom figure fractions (fixed
    margins instead of tight_layout, which draws the whole figure once more to measure it)."""
    fig = _figure(figsize=figsize)
    ax = fig.add_subplot()
    xs = range(len(ticks))
    for i, (values, label) in enumerate(series):
        # the values to 1e-9 (far below a pixel): a fitted error's last bit differs from CPU to CPU (BLAS), and
        # through the autoscaled axis it moved tick labels 1e-10 pt, so the figure's bytes with it
        ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], [round(v, 9) for v in values], width,
               label=label)
    if zero_line:
        ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(list(xs), ticks, fontsize=tick_size, rotation=rotation, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.subplots_adjust(left=margins[0], right=0.99, bottom=margins[1], top=0.92)
    return save(fig, formats)


def save(fig, formats: tuple[str, ...] = ("png", "pdf")) -> dict[str, bytes]:
    """The figure's bytes in each format (PNG, PDF), free of timestamps and version strings. Each format draws
    the whole figure once more: ask only for what is needed."""
    out = {}
    for fmt in formats:
        buf = io.BytesIO()
        if fmt == "png":
            fig.savefig(buf, format="png", dpi=100, metadata=_PNG_META)
        else:
            fig.savefig(buf, format=fmt, metadata=_PDF_META if fmt == "pdf" else None)
        out[fmt] = buf.getvalue()
    return out


PAPER_FIGURES = ("stage_memory", "memory_vs_microbatch", "memory_vs_seqlen", "params_by_block")


def paper_figures(scn, names: tuple[str, ...] = PAPER_FIGURES,
                  formats: tuple[str, ...] = ("png", "pdf")) -> dict[str, tuple[dict[str, bytes], object]]:
    """The paper scenario's figures (all, or those named): name -> ({format: bytes}, data)."""
    from symmem.accounting.states import ZeroStage

    zero3 = scn.replace(zero=ZeroStage.OS_G_P)
    makers = {
        "stage_memory": lambda: figure_stage_memory([
            ("paper case, no recomputation, ZeRO 0", scn),
            ("full recomputation, ZeRO 3", scn.replace(recompute_name="full", zero=ZeroStage.OS_G_P)),
        ]),
        "memory_vs_microbatch": lambda: figure_memory_sweep(zero3, "b", [1, 2, 4, 8, 16]),
        "memory_vs_seqlen": lambda: figure_memory_sweep(zero3, "s", [1024, 2048, 4096, 8192, 16384, 32768]),
        "params_by_block": lambda: figure_params_by_block(scn.model),
    }
    out = {}
    for name in names:
        fig, data = makers[name]()
        out[name] = (save(fig, formats), data)
    return out
