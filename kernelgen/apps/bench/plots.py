"""PNG plots of ``kernelgen bench`` results (matplotlib, Agg; no display, no pyplot state).

* ``<suite>.png``: grouped bars per entry, kernelgen first, then each peer.  Entries with a rate
  are drawn as the fraction of the roof measured in the run (peer rate = kernelgen rate x
  kernelgen µs / peer µs); entries without one (scheduler, compile, overhead) as µs on a log
  axis.  A peer that could not run the entry is marked with a grey "x" on the axis.  Every
  implementation has its own colour (``COLORS``); kernelgen's variants are solid bars, peers
  hatched ones.
* ``peers.png``: kernelgen against FlashAttention-3, FlashAttention-4 and cuDNN: achieved TFLOP/s
  per prefill shape and TB/s per decode batch (FA3 on a paged entry is ``fa3_unpaged``: the same
  contexts gathered into packed K/V), titled with the device and commit.
* ``roofline.png``: achieved TFLOP/s against arithmetic intensity (FLOP per compulsory byte) of
  every entry that has both counts, for kernelgen and each peer, under the measured roofs
  min(matmul rate, intensity x copy bandwidth); the entry labels are placed so that none
  overlaps another (``place_labels``).

Every chart's title names the device and the commit (``write_plots``' ``title``).

Works from finalized entries (``report.finalize``), so it runs on synthetic results without a GPU.
"""
from __future__ import annotations

from pathlib import Path

from . import SUITES
from .report import entry_ratios

KERNELGEN = "kernelgen"
_MARKERS = "osD^v<>PX*hp"


def available() -> bool:
    """True when matplotlib can be imported."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _figure(width, height, rows=1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    return fig, axes


#: One colour per implementation in every plot, each distinct (tests/test_bench_cpu.py checks a
#: minimum distance).  kernelgen's own variants (``KERNELGEN_FAMILY``: the default call, its
#: forced mainloops, layout / sort switches and split modes) are drawn solid; every peer is
#: hatched (``PEER_HATCH``), so a kernelgen variant never reads as a peer and vice versa.
COLORS = {
    # kernelgen and its variants: solid
    KERNELGEN: "#1f77b4", "kernelgen_sm90a": "#17becf", "kernelgen_sm80": "#9467bd",
    "kernelgen_aos": "#8c564b", "kernelgen_nosort": "#e377c2", "serial": "#7f7f7f", "two_streams": "#bcbd22",
    # peers: hatched
    "fa3": "#ff7f0e", "fa3_unpaged": "#ffbb78", "fa4": "#d62728", "cudnn_sdpa": "#2ca02c",
    "torch_fa2": "#f0e442", "torch_fa2_varlen": "#000000", "mem_efficient_sdpa": "#98df8a",
    "flex_attention": "#aec7e8", "flex_attention_paged": "#dbdb8d",
}
KERNELGEN_FAMILY = frozenset({KERNELGEN, "kernelgen_sm90a", "kernelgen_sm80", "kernelgen_aos", "kernelgen_nosort",
                              "serial", "two_streams"})
PEER_HATCH = "///"
_SPARE = ["#393b79", "#637939", "#8c6d31", "#843c39", "#5254a3", "#b5cf6b", "#e7969c", "#de9ed6"]


def is_kernelgen(name: str) -> bool:
    """True for kernelgen's own variants (drawn solid), False for a peer (hatched)."""
    return name in KERNELGEN_FAMILY or name.startswith("kernelgen")


def _colors(names) -> dict:
    out, spare = {}, iter(_SPARE * 4)
    for n in names:
        out[n] = COLORS.get(n) or next(spare)
    return out


def styles(names) -> dict:
    """{implementation: {"color", "hatch"}} as the bar charts draw them: kernelgen's variants solid
    (hatch None), peers hatched."""
    colors = _colors(names)
    return {n: {"color": colors[n], "hatch": None if is_kernelgen(n) else PEER_HATCH} for n in names}


def _bar_style(impl, colors) -> dict:
    if is_kernelgen(impl):
        return {"color": colors[impl]}
    return {"color": colors[impl], "hatch": PEER_HATCH, "edgecolor": "white", "linewidth": 0}


def _bar_panel(ax, entries, impls, colors, mode: str) -> set:
    """Draw one panel of horizontal grouped bars (one group per entry, top to bottom); returns the
    implementations that got at least one bar."""
    n, k = len(entries), max(1, len(impls))
    height = 0.8 / k
    drawn = set()
    log = mode != "roof" and _spread(entries) > 20
    floor = _log_floor(entries)
    for j, impl in enumerate(impls):
        ys, vals, missing = [], [], []
        for i, e in enumerate(entries):
            y = i - 0.4 + height * (j + 0.5)
            if impl == KERNELGEN:
                val = e.get("roof_fraction") if mode == "roof" else e.get("us")
            else:
                r = entry_ratios(e).get(impl)
                if r is None:
                    if impl in e.get("unavailable", {}):
                        missing.append(y)
                    continue
                # kernelgen's switches were timed against the default call in their own measurement:
                # drawn at the entry's time scaled by that ratio
                val = e["roof_fraction"] / r if mode == "roof" else e["us"] * r
            if val is not None:
                ys.append(y)
                vals.append(val)
        if ys:
            ax.barh(ys, vals, height, label=impl, **_bar_style(impl, colors))
            drawn.add(impl)
        if missing:
            ax.plot([floor if log else 0] * len(missing), missing, "x", color="#777777", markersize=4, clip_on=False)
    ax.set_yticks(range(n))
    ax.set_yticklabels([e["name"] for e in entries], fontsize=7)
    ax.set_ylim(n - 0.5, -0.5)  # first entry on top
    if mode == "roof":
        ax.set_xlabel("fraction of the roof measured in the run (higher is better)")
        ax.set_xlim(0, max(1.0, max([_max_roof(e) for e in entries] + [0])) * 1.05)
        ax.axvline(1.0, color="#444444", lw=0.6, ls="--")
    else:
        if log:
            ax.set_xscale("log")
        ax.set_xlabel("µs" + (" (log)" if log else "") + " (lower is better)")
    ax.grid(axis="x", alpha=0.3)
    return drawn


def _spread(entries) -> float:
    vals = [v for e in entries for v in [e["us"]] + list(e.get("peers", {}).values()) if v and v > 0]
    return max(vals) / min(vals) if vals else 1.0


def _max_roof(e) -> float:
    f = e.get("roof_fraction") or 0.0
    r = entry_ratios(e)
    return max([f] + [f / x for x in r.values() if x > 0])


def _log_floor(entries) -> float:
    vals = [e["us"] for e in entries] + [t for e in entries for t in e.get("peers", {}).values()]
    return min(v for v in vals if v and v > 0) if vals else 1.0


def _measured(entries) -> list:
    """kernelgen and the peers that have a time on at least one of the entries."""
    names = [KERNELGEN]
    for e in entries:
        for p in e.get("peers", {}):
            if p not in names:
                names.append(p)
    return names


def suite_bars(entries: list, suite: str, path, title: str = "") -> bool:
    """Write the bar chart of one suite; False when the suite has no timed entry.  Only peers
    with a time somewhere in a panel get a bar slot; where such a peer could not run an entry, a
    grey "x" marks it (reasons: the table)."""
    rows = [e for e in entries if e.get("suite") == suite and e.get("us") is not None]
    if not rows:
        return False
    with_roof = [e for e in rows if e.get("roof_fraction") is not None]
    plain = [e for e in rows if e.get("roof_fraction") is None]
    panels = [(p, m, _measured(p)) for p, m in ((with_roof, "roof"), (plain, "us")) if p]
    colors = _colors(_measured(rows))
    heights = [0.6 + 0.14 * len(p) * len(impls) for p, _, impls in panels]
    fig, axes = _figure(10.0, max(3.0, sum(heights) + 0.8), rows=len(panels))
    if len(panels) > 1:  # panel heights proportional to their bars
        fig.clear()
        gs = fig.add_gridspec(len(panels), 1, height_ratios=heights)
        axes = [fig.add_subplot(gs[i, 0]) for i in range(len(panels))]
    drawn: set = set()
    for ax, (p, mode, impls) in zip(axes, panels):
        drawn |= _bar_panel(ax, p, impls, colors, mode)
    # the figure's title (above the legend, which sits outside the axes on the right: an axes title
    # ran under the legend)
    fig.suptitle(f"kernelgen bench: {suite}{' (' + title + ')' if title else ''}", fontsize=10)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colors[i], label=i, **({} if is_kernelgen(i) else {"hatch": PEER_HATCH,
                                                                                  "edgecolor": "white"}))
               for i in _measured(rows) if i in drawn]
    if any(set(e.get("unavailable", {})) & set(_measured(rows)) for e in rows):
        handles.append(Line2D([], [], marker="x", color="#777777", ls="", label="peer could not run (see table)"))
    try:  # outside the axes, right of them (matplotlib >= 3.7)
        fig.legend(handles=handles, fontsize=7, loc="outside right upper")
    except (ValueError, TypeError):
        axes[0].legend(handles=handles, fontsize=7, loc="lower right")
    fig.savefig(path, dpi=120)
    return True


#: The series of peers.png: (label, the peer names that feed it, first found wins).
PEER_SERIES = (("kernelgen", (KERNELGEN,)), ("FA3", ("fa3", "fa3_unpaged")), ("FA4", ("fa4",)),
               ("cuDNN", ("cudnn_sdpa",)))
#: The implementation whose colour and style each series of peers.png takes.
PEER_SERIES_NAMES = {lab: names[0] for lab, names in PEER_SERIES}


def peer_rates(entry: dict) -> dict:
    """{series label: rate} of an entry with a rate (TFLOP/s or TB/s as its metric): kernelgen's
    own and each peer series' (the entry's rate x the peer's ratio, ``report.entry_ratios``: its
    time over kernelgen's time the peers' way, ``report.peer_base_for``)."""
    from .report import entry_ratios

    metric = entry.get("metric")
    rate = entry.get(metric) if metric in ("tflops", "tbps") else None
    if not rate or not entry.get("us"):
        return {}
    ratios = entry_ratios(entry)
    out = {}
    for label, names in PEER_SERIES:
        for n in names:
            if n == KERNELGEN:
                out[label] = rate
                break
            r = ratios.get(n)
            if r and r > 0:
                out[label] = rate / r
                break
    return out


def peer_bars(entries: list, path, title: str = "") -> bool:
    """Write peers.png: one panel of prefill entries (TFLOP/s) and one of decode entries (TB/s),
    kernelgen, FA3, FA4 and cuDNN side by side; False when no entry has a peer series."""
    panels = []
    for suite, unit in (("prefill", "TFLOP/s"), ("decode", "TB/s")):
        rows = [e for e in entries if e.get("suite") == suite and len(peer_rates(e)) > 1]
        if rows:
            panels.append((suite, unit, rows))
    if not panels:
        return False
    labels = [lab for lab, _ in PEER_SERIES]
    colors = {lab: COLORS[name] for lab, name in PEER_SERIES_NAMES.items()}
    heights = [0.8 + 0.32 * len(rows) for _, _, rows in panels]
    fig, axes = _figure(10.0, sum(heights) + 0.9, rows=len(panels))
    if len(panels) > 1:
        fig.clear()
        gs = fig.add_gridspec(len(panels), 1, height_ratios=heights)
        axes = [fig.add_subplot(gs[i, 0]) for i in range(len(panels))]
    h = 0.8 / len(labels)
    for ax, (suite, unit, rows) in zip(axes, panels):
        for j, lab in enumerate(labels):
            ys, vals = [], []
            for i, e in enumerate(rows):
                v = peer_rates(e).get(lab)
                if v is not None:
                    ys.append(i - 0.4 + h * (j + 0.5))
                    vals.append(v)
            if ys:
                ax.barh(ys, vals, h, label=lab, **_bar_style(PEER_SERIES_NAMES[lab], {PEER_SERIES_NAMES[lab]: colors[lab]}))
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([e["name"] for e in rows], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel(f"{unit} (higher is better)")
        ax.set_title(suite, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"kernelgen vs FlashAttention-3, FlashAttention-4, cuDNN{': ' + title if title else ''}",
                 fontsize=10)
    fig.savefig(path, dpi=120)
    return True


#: Gaps (pixels) between a roofline point and its label that ``place_labels`` tries, nearest first.
_LABEL_GAPS = (3, 8, 16, 28, 44, 64, 90, 120, 160)


def _overlaps(a, b, pad: float = 2.0) -> bool:
    return a[0] < b[2] + pad and b[0] < a[2] + pad and a[1] < b[3] + pad and b[1] < a[3] + pad


def _place_one(point, size, taken, others, bounds) -> tuple:
    x, y = point
    w, h = size
    marks = [(px - 2, py - 2, px + 2, py + 2) for px, py in others]
    for inside in ((True, False) if bounds else (False,)):
        for g in _LABEL_GAPS:
            for bx, by in ((x + g, y - h / 2), (x + g, y + g / 2), (x + g, y - g / 2 - h), (x - g - w, y - h / 2),
                           (x - w / 2, y + g), (x - w / 2, y - g - h), (x - g - w, y + g / 2),
                           (x - g - w, y - g / 2 - h)):
                box = (bx, by, bx + w, by + h)
                if inside and not (bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1]
                                   and box[3] <= bounds[3]):
                    continue
                if not any(_overlaps(box, t) for t in taken) and not any(_overlaps(box, m, 0) for m in marks):
                    return box
    low = min([t[1] for t in taken] + [y]) - h - 2  # nothing free nearby: below everything placed
    return (x + 3, low, x + 3 + w, low + h)


def place_labels(points, sizes, bounds=None, taken=()) -> list:
    """Boxes (x0, y0, x1, y1) for labels of the given sizes (w, h) next to their points (x, y), in
    one pixel space, none overlapping another label, a box in ``taken`` (the legend) or another
    label's point: for each label in turn the nearest free spot of eight around its point (right,
    left, above, below and the diagonals) at growing gaps (``_LABEL_GAPS``), inside ``bounds``
    (x0, y0, x1, y1) when one is free there; past the largest gap the label goes below the lowest
    box placed so far."""
    placed = list(taken)
    out = []
    for i, (pt, size) in enumerate(zip(points, sizes)):
        box = _place_one(pt, size, placed, [p for j, p in enumerate(points) if j != i], bounds)
        placed.append(box)
        out.append(box)
    return out


def roofline_figure(entries: list, roofs: dict | None, title: str = ""):
    """The roofline chart as a matplotlib Figure (drawn), or None when no entry has FLOP and byte
    counts.  Each kernelgen point is labelled with its entry's name, the labels placed so that none
    overlaps another (``place_labels``; a thin line joins a label set off from its point)."""
    pts = [e for e in entries if e.get("us") and e.get("flops") and e.get("bytes")]
    if not pts:
        return None
    impls = _measured(pts)
    colors = _colors(impls)
    fig, (ax,) = _figure(9, 6)
    ais = [e["flops"] / e["bytes"] for e in pts]
    lo, hi = min(ais) / 2, max(ais) * 2
    if roofs and roofs.get("copy_tbps") and roofs.get("bf16_matmul_tflops"):
        bw, peak = roofs["copy_tbps"], roofs["bf16_matmul_tflops"]
        ridge = peak / bw
        lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
        xs = [lo, ridge, hi]
        ax.plot(xs, [min(peak, x * bw) for x in xs], color="#222222", lw=1.2,
                label=f"roof: {bw:.2f} TB/s copy, {peak:.0f} TFLOP/s bf16 matmul")
    for j, impl in enumerate(impls):
        xs, ys = [], []
        for e, ai in zip(pts, ais):
            r = entry_ratios(e).get(impl)
            us = e["us"] if impl == KERNELGEN else e["us"] * r if r else None
            if us:
                xs.append(ai)
                ys.append(e["flops"] / (us * 1e-6) / 1e12)
        if xs:
            solid = is_kernelgen(impl)
            ax.scatter(xs, ys, marker=_MARKERS[j % len(_MARKERS)], s=36 if impl == KERNELGEN else 22,
                       color=colors[impl], label=impl, zorder=3 if impl == KERNELGEN else 2,
                       facecolors=colors[impl] if solid else "none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"kernelgen bench: roofline (measured roofs){' (' + title + ')' if title else ''}", fontsize=10)
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.canvas.draw()  # the layout fixed: data -> pixel positions are final from here
    ax.set_ylim(ax.get_ylim())
    renderer = fig.canvas.get_renderer()
    anchors = [tuple(ax.transData.transform((ai, e["flops"] / (e["us"] * 1e-6) / 1e12))) for e, ai in zip(pts, ais)]
    sizes = []
    for e in pts:
        t = ax.text(0, 0, e["name"], fontsize=5)
        bb = t.get_window_extent(renderer)
        sizes.append((bb.width, bb.height))
        t.remove()
    legend = ax.get_legend().get_window_extent(renderer)
    ab = ax.get_window_extent(renderer)
    boxes = place_labels(anchors, sizes, bounds=(ab.x0, ab.y0, ab.x1, ab.y1),
                         taken=[(legend.x0, legend.y0, legend.x1, legend.y1)])
    to_fig = fig.transFigure.inverted()
    for e, ai, (ax_x, ax_y), box in zip(pts, ais, anchors, boxes):
        dx, dy = box[0] - ax_x, box[1] - ax_y
        far = max(abs(dx), abs(dy)) > 12 and not (box[0] <= ax_x <= box[2] or box[1] <= ax_y <= box[3])
        # figure fractions, not pixels: savefig's dpi rescales the figure and the labels with it
        a = ax.annotate(e["name"], (ai, e["flops"] / (e["us"] * 1e-6) / 1e12), xytext=tuple(to_fig.transform(box[:2])),
                        textcoords="figure fraction", fontsize=5, color="#333333", ha="left", va="bottom",
                        annotation_clip=False,
                        arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.4, "shrinkA": 0, "shrinkB": 2}
                        if far else None)
        a.set_in_layout(False)
    fig.set_layout_engine("none")  # keep the positions the labels were placed for
    return fig


def roofline(entries: list, roofs: dict | None, path, title: str = "") -> bool:
    """Write the roofline chart (``roofline_figure``); False when no entry has FLOP and byte counts."""
    fig = roofline_figure(entries, roofs, title)
    if fig is None:
        return False
    fig.savefig(path, dpi=120)
    return True


def write_plots(entries: list, roofs: dict | None, outdir, title: str = "") -> list:
    """Every suite's bars, the peers chart and the roofline into ``outdir`` (created); returns the
    written paths.  ``title``: the device and commit (``runner.plot_title``), named in every chart's title.

    Raises ImportError when matplotlib is missing (the runner reports it and goes on).
    """
    if not available():
        raise ImportError('matplotlib is not installed (pip install -e ".[plots]" or pip install matplotlib)')
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s in SUITES:
        p = out / f"{s}.png"
        if suite_bars(entries, s, p, title):
            written.append(p)
    p = out / "peers.png"
    if peer_bars(entries, p, title):
        written.append(p)
    p = out / "roofline.png"
    if roofline(entries, roofs, p, title):
        written.append(p)
    return written
