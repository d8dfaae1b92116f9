"""The generated part of docs/performance.md: kernelgen against its peers, from a GPU report's JSON.

    python tools/perf_page.py                    # print the tables of docs/benchmarks/h200.json
    python tools/perf_page.py --write            # put them into docs/performance.md
    python tools/perf_page.py --check            # exit 1 when docs/performance.md is not up to date
    python tools/perf_page.py --plots DIR        # also draw the suites' bar charts (needs matplotlib)
    python tools/perf_page.py --report F --page P

The report is what tools/gpu_report.py writes (``docs/benchmarks/h200.json``): ``benchmarks`` rows
``{"name", "us", "tflops", "tbps", "peers": {peer: us}, "ratios": {peer: peer us / us}}``, and
``extra.unavailable_peers`` ``{entry: {peer: reason}}``.  The page's text between the lines
``<!-- perf_page:begin -->`` and ``<!-- perf_page:end -->`` is replaced; everything else on the
page is written by hand.

Peers are the other implementations measured on the same inputs in the same run.  kernelgen's own
configurations (``kernelgen_*`` switches and forced paths, and ``serial`` / ``two_streams``, which
are kernelgen calls too) are not peers: they get their own column.  Ratios are peer time /
kernelgen time: above 1 kernelgen is faster, below 1 it is slower.  The table needs the standard
library and kernelgen's light bench modules (no torch); the first-call summary is rendered by
``kernelgen.apps.bench.report`` and the charts by ``kernelgen.apps.bench.plots`` (matplotlib).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "docs" / "benchmarks" / "h200.json"
PAGE = REPO / "docs" / "performance.md"
BEGIN, END = "<!-- perf_page:begin -->", "<!-- perf_page:end -->"
#: kernelgen calls that are reported as peers of an entry (the mixed entry's two-call baselines)
OWN = ("serial", "two_streams")
#: peers every report should have once issue 20 is in (a note says when a report lacks them)
EXPECTED_PEERS = ("fa3", "fa4")
sys.path.insert(0, str(REPO))
#: the suites in the order of the page and the plots: the bench's own list (kernelgen.apps.bench,
#: which imports no torch); an entry's suite: kernelgen's report.suite_of
from kernelgen.apps.bench import SUITES  # noqa: E402


def suite_of(name: str):
    """The bench suite of a report row by its name (the report keeps no suite); None for the demo's
    entry, which gpu_report.py adds beside the bench's own (it has no plot of its own)."""
    if name.startswith("demo_"):
        return None
    from kernelgen.apps.bench.report import suite_of as of

    return of(name)


def is_own(peer: str) -> bool:
    """True for kernelgen's own configurations (not a peer implementation)."""
    return peer.startswith("kernelgen") or peer in OWN


def ratio(row: dict, peer: str) -> float:
    """Peer time / kernelgen time: the bench's own ratio when it has one (its switch columns
    divide by the default call's time from their interleaved measurement), else peer us / the
    time the peer was compared with (``peer_base_by_peer``, then ``peer_base_us``, then us)."""
    r = (row.get("ratios") or {}).get(peer)
    if r is not None:
        return r
    base = (row.get("peer_base_by_peer") or {}).get(peer) or row.get("peer_base_us") or row["us"]
    return row["peers"][peer] / base


def _rows(report: dict) -> list:
    """Benchmark rows, without the aliases gpu_report adds (``same_as``) and rows without a time."""
    return [b for b in report.get("benchmarks", []) if not b.get("same_as") and b.get("us")]


def _rate(b: dict) -> str:
    if b.get("tflops"):
        return f"{b['tflops']:.0f} TFLOP/s"
    if b.get("tbps"):
        return f"{b['tbps']:.2f} TB/s"
    return ""


def _us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e4:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.1f} us" if us < 100 else f"{us:.0f} us"


def _x(r: float) -> str:
    """A ratio with two decimals, or three where two would round it to 1.00x and hide its side of 1."""
    return f"{r:.3f}x" if f"{r:.2f}" == "1.00" and r != 1.0 else f"{r:.2f}x"


def _own(b: dict) -> str:
    return ", ".join(f"`{p}` {_x(ratio(b, p))}" for p in (b.get("peers") or {}) if is_own(p))


def best_peer(b: dict):
    """(peer, us, ratio) of the fastest peer of a row, or None when no peer ran: the bench's own
    choice (``best_peer``, kernelgen.apps.bench.report.best_peer) when the row has one, else the fastest
    row peer that is not kernelgen's own (reports made before the bench chose)."""
    if b.get("best_peer"):
        p = b["best_peer"]
        return p, b["peers"][p], ratio(b, p)
    peers = [(p, u) for p, u in (b.get("peers") or {}).items() if not is_own(p) and u]
    if not peers:
        return None
    p, u = min(peers, key=lambda x: ratio(b, x[0]))
    return p, u, ratio(b, p)


def _tests_at(t: dict, report: dict) -> str:
    """" (full suite at `X`)" when the GPU suite's counts come from another commit than the report's."""
    c = str(t.get("commit") or "")[:7]
    return f" (full suite at `{c}`)" if c and c != str(report.get("commit", ""))[:7] else ""


def render(report: dict, source: str = "docs/benchmarks/h200.json") -> str:
    """The generated Markdown: header line, the peers table, kernelgen-only entries, the peers that
    could not run an entry."""
    rows = _rows(report)
    t = report.get("tests") or {}
    out = [f"- Report: `{source}`, commit `{str(report.get('commit', 'unknown'))[:10]}`, "
           f"{report.get('date', 'date unknown')}, {report.get('device', 'unknown device')}"
           + (f"; GPU tests{_tests_at(t, report)} {t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
              f"{t.get('skipped', 0)} skipped." if t else ".")]
    measured = sorted({p for b in rows for p in (b.get("peers") or {}) if not is_own(p)})
    tried = measured + sorted({p for d in ((report.get("extra") or {}).get("unavailable_peers") or {}).values()
                               for p in d if not is_own(p)} - set(measured))
    out.append("- Peers measured: " + (", ".join(f"`{p}`" for p in measured) or "none") + ".")
    roofs = (report.get("extra") or {}).get("roofs") or {}
    if roofs.get("copy_tbps") and roofs.get("bf16_matmul_tflops"):
        out.append(f"- Roofs measured in the same run: copy {roofs['copy_tbps']:.2f} TB/s (read + write), "
                   f"bf16 matmul {roofs['bf16_matmul_tflops']:.0f} TFLOP/s.")
    missing = [p for p in EXPECTED_PEERS if p not in tried]
    if missing:
        out.append("- Not in this report: " + ", ".join(f"`{p}`" for p in missing) + " (FlashAttention-3 / -4: "
                   "they come with the next report).")
    vs = [(b, best_peer(b)) for b in rows]
    vs = [(b, bp) for b, bp in vs if bp]
    slower = [(b["name"], bp) for b, bp in vs if bp[2] < 1.0]
    out.append("")
    out.append(f"kernelgen is slower than the fastest peer on **{len(slower)} of {len(vs)}** entries with a peer"
               + (": " + "; ".join(f"`{n}` ({_x(bp[2])} `{bp[0]}`)" for n, bp in slower) if slower else "") + ".")
    out += ["", "| entry | kernelgen | rate | fastest peer | fastest peer / kernelgen | every peer (peer / kernelgen) "
            "| kernelgen's other paths (their time / default's) |",
            "| --- | ---: | ---: | --- | ---: | --- | --- |"]
    for b, (p, u, r) in vs:
        every = ", ".join(f"`{q}` {_x(ratio(b, q))}" for q in b["peers"] if not is_own(q))
        rr = f"**{_x(r)}** (slower)" if r < 1.0 else _x(r)
        out.append(f"| `{b['name']}` | {_us(b['us'])} | {_rate(b)} | `{p}` {_us(u)} | {rr} | {every} | {_own(b)} |")
    alone = [b for b in rows if not best_peer(b)]
    if alone:
        out += ["", "Entries without a peer (kernelgen's own costs and switches):", "",
                "| entry | kernelgen | rate | kernelgen's other paths (their time / default's) |",
                "| --- | ---: | ---: | --- |"]
        out += [f"| `{b['name']}` | {_us(b['us'])} | {_rate(b)} | {_own(b)} |" for b in alone]
    first = (report.get("extra") or {}).get("first_call")
    if first:
        sys.path.insert(0, str(REPO))
        from kernelgen.apps.bench.report import first_call_text

        out += ["", first_call_text(first).replace("### first calls", "First calls").replace(
            "(s: build + first call, in this process)\n", "(seconds from building a peer to its first call's end, in "
            "the bench's process: a JIT peer compiles there):\n")]
    unavailable = (report.get("extra") or {}).get("unavailable_peers") or {}
    by_reason: dict = {}  # reason -> peer -> entries
    for entry, d in unavailable.items():
        for p, why in d.items():
            if not is_own(p):
                why = " ".join(str(why).split())
                why = why if len(why) <= 140 else why[:137] + "..."
                by_reason.setdefault(why, {}).setdefault(p, []).append(entry)
    if by_reason:
        out += ["", "Peers that could not run an entry, and why:", ""]
        for why, by_peer in by_reason.items():
            groups: dict = {}  # entries -> peers (peers refused on the same entries share a line)
            for p, es in by_peer.items():
                groups.setdefault(tuple(es), []).append(p)
            who = "; ".join(f"{', '.join(f'`{p}`' for p in ps)} on {', '.join(f'`{e}`' for e in es)}"
                            for es, ps in groups.items())
            out.append(f"- {who}: {why}")
    return "\n".join(out) + "\n"


def plot_entries(report: dict) -> list:
    """The report's rows as ``kernelgen.apps.bench.plots`` takes them: with ``suite`` (from the name),
    ``roof_fraction`` (rate over the roof measured in the same run) and ``unavailable``."""
    extra = report.get("extra") or {}
    roofs = extra.get("roofs") or {}
    unavailable = extra.get("unavailable_peers") or {}
    out = []
    for b in _rows(report):
        suite = suite_of(b["name"])
        if suite is None:
            continue
        from kernelgen.apps.bench.report import roof_fraction

        metric = "tflops" if b.get("tflops") else "tbps" if b.get("tbps") else None
        frac = roof_fraction(b.get(metric), metric, roofs, b) if metric else None
        out.append({**b, "suite": suite, "metric": metric, "roof_fraction": frac, "peers": dict(b.get("peers") or {}),
                    "unavailable": dict(unavailable.get(b["name"], {}))})
    return out


def write_plots(report: dict, outdir: Path) -> list:
    """One bar chart per suite (``kernelgen.apps.bench.plots.suite_bars``), kernelgen against FA3,
    FA4 and cuDNN (``peer_bars``: peers.png) and the roofline (roofline.png, when the report's
    entries carry FLOP and byte counts) into outdir, each titled with the device and commit; the
    written paths."""
    sys.path.insert(0, str(REPO))
    from kernelgen.apps.bench import plots

    if not plots.available():
        raise ImportError('matplotlib is not installed (pip install -e ".[plots]")')
    entries = plot_entries(report)
    outdir.mkdir(parents=True, exist_ok=True)
    title = f"{report.get('device', '?')}, commit {str(report.get('commit', '?'))[:10]}"
    written = []
    for suite in SUITES:
        path = outdir / f"{suite}.png"
        if plots.suite_bars(entries, suite, path, title=title):
            written.append(path)
    path = outdir / "peers.png"
    if plots.peer_bars(entries, path, title=title):
        written.append(path)
    path = outdir / "roofline.png"  # reports from before gpu_report kept FLOP/byte counts have none
    if plots.roofline(entries, (report.get("extra") or {}).get("roofs"), path, title=title):
        written.append(path)
    return written


def splice(page: str, generated: str) -> str:
    """The page with the text between the markers replaced (ValueError without both markers)."""
    i, j = page.find(BEGIN), page.find(END)
    if i < 0 or j < i:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    return page[:i + len(BEGIN)] + "\n" + generated + page[j:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, default=REPORT, help="report JSON (default: docs/benchmarks/h200.json)")
    ap.add_argument("--page", type=Path, default=PAGE, help="page to update (default: docs/performance.md)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="replace the page's generated block")
    g.add_argument("--check", action="store_true", help="exit 1 when the page's block differs from the report's")
    ap.add_argument("--plots", type=Path, default=None, metavar="DIR",
                    help="also draw one bar chart per suite into DIR (docs/benchmarks/plots; needs matplotlib)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "tools"))
    import gpu_report

    try:
        report = gpu_report.read_report(a.report)
    except (ValueError, OSError) as e:
        print(f"perf_page: {e}", file=sys.stderr)
        return 2
    if a.plots:
        for path in write_plots(report, a.plots):
            print(f"wrote {path}", file=sys.stderr)
    try:
        source = a.report.resolve().relative_to(REPO).as_posix()
    except ValueError:
        source = a.report.name
    generated = render(report, source)
    if not (a.write or a.check):
        sys.stdout.write(generated)
        return 0
    page = a.page.read_text(encoding="utf-8")
    new = splice(page, generated)
    if a.check:
        if new != page:
            print(f"{a.page} is not up to date with {a.report}: run python tools/perf_page.py --write",
                  file=sys.stderr)
            return 1
        print(f"{a.page} is up to date with {a.report}")
        return 0
    a.page.write_text(new, encoding="utf-8")
    print(f"wrote {a.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
