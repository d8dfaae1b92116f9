"""PNG plots of ``kernelgen bench`` results (matplotlib, Agg; no display, no pyplot state).

* ``<suite>.png``: grouped bars per entry, kernelgen first, then each peer.  Entries with a rate
  are drawn as the fraction of the roof measured in the run (peer rate = kernelgen rate x
  kernelgen µs / peer µs); entries without one (scheduler, compile, overhead) as µs on a log
  axis.  A peer that could not run the entry is marked with a grey "x" on the axis.
* ``peers.png``: kernelgen against FlashAttention-3, FlashAttention-4 and cuDNN: achieved TFLOP/s
  per prefill shape and TB/s per decode batch (FA3 on a paged entry is ``fa3_unpaged``: the same
  contexts gathered into packed K/V), titled with the device and commit.
* ``roofline.png``: achieved TFLOP/s against arithmetic intensity (FLOP per compulsory byte) of
  every entry that has both counts, for kernelgen and each peer, under the measured roofs
  min(matmul rate, intensity x copy bandwidth).

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


#: One colour per implementation in every plot (others take the spare colours in order).
COLORS = {KERNELGEN: "#1f77b4", "torch_fa2": "#ff7f0e", "cudnn_sdpa": "#2ca02c", "mem_efficient_sdpa": "#bcbd22",
          "torch_fa2_varlen": "#d62728", "flex_attention": "#9467bd", "flex_attention_paged": "#c5b0d5",
          "kernelgen_aos": "#7fb3dd", "kernelgen_nosort": "#aec7e8", "kernelgen_sm90a": "#08306b", "kernelgen_sm80": "#6baed6",
          "serial": "#8c564b", "two_streams": "#e377c2", "fa3": "#e6ab02", "fa3_unpaged": "#a6761d",
          "fa4": "#c51b7d"}
_SPARE = ["#7f7f7f", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#5254a3", "#b5cf6b"]


def _colors(names) -> dict:
    out, spare = {}, iter(_SPARE * 4)
    for n in names:
        out[n] = COLORS.get(n) or next(spare)
    return out


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
            ax.barh(ys, vals, height, color=colors[impl])
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


def suite_bars(entries: list, suite: str, path) -> bool:
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
    axes[0].set_title(f"kernelgen bench: {suite}", fontsize=10)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colors[i], label=i) for i in _measured(rows) if i in drawn]
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


def peer_rates(entry: dict) -> dict:
    """{series label: rate} of an entry with a rate (TFLOP/s or TB/s as its metric): kernelgen's
    own and each peer series' (the entry's rate x kernelgen µs / peer µs)."""
    metric = entry.get("metric")
    rate = entry.get(metric) if metric in ("tflops", "tbps") else None
    if not rate or not entry.get("us"):
        return {}
    out = {}
    for label, names in PEER_SERIES:
        for n in names:
            t = entry["us"] if n == KERNELGEN else (entry.get("peers") or {}).get(n)
            if t and t > 0:
                out[label] = rate * entry["us"] / t
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
    colors = {"kernelgen": COLORS[KERNELGEN], "FA3": COLORS["fa3"], "FA4": COLORS["fa4"],
              "cuDNN": COLORS["cudnn_sdpa"]}
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
                ax.barh(ys, vals, h, color=colors[lab], label=lab)
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


def roofline(entries: list, roofs: dict | None, path) -> bool:
    """Write the roofline chart; False when no entry has FLOP and byte counts."""
    pts = [e for e in entries if e.get("us") and e.get("flops") and e.get("bytes")]
    if not pts:
        return False
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
            ax.scatter(xs, ys, marker=_MARKERS[j % len(_MARKERS)], s=36 if impl == KERNELGEN else 22,
                       color=colors[impl], label=impl, zorder=3 if impl == KERNELGEN else 2,
                       facecolors=colors[impl] if impl == KERNELGEN else "none")
    for e, ai in zip(pts, ais):
        ax.annotate(e["name"], (ai, e["flops"] / (e["us"] * 1e-6) / 1e12), fontsize=5, xytext=(3, 2),
                    textcoords="offset points", color="#333333")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("kernelgen bench: roofline (measured roofs)")
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=120)
    return True


def write_plots(entries: list, roofs: dict | None, outdir, title: str = "") -> list:
    """Every suite's bars, the peers chart and the roofline into ``outdir`` (created); returns the
    written paths.  ``title``: the device and commit, shown on the peers chart.

    Raises ImportError when matplotlib is missing (the runner reports it and goes on).
    """
    if not available():
        raise ImportError('matplotlib is not installed (pip install -e ".[plots]" or pip install matplotlib)')
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s in SUITES:
        p = out / f"{s}.png"
        if suite_bars(entries, s, p):
            written.append(p)
    p = out / "peers.png"
    if peer_bars(entries, p, title):
        written.append(p)
    p = out / "roofline.png"
    if roofline(entries, roofs, p):
        written.append(p)
    return written
