r"""Where two attention kernels spend their warps' time, from ncu's per-instruction source view.

Input: ``ncu --section SourceCounters ... -o REP`` of one kernel, exported with
``ncu -i REP.ncu-rep --page source --csv --print-source sass > X_sass.csv`` (gzip allowed), for
kernelgen and for a peer on the same shape (docs/dev/benchmarks/s42/src.sh makes both).  Each SASS
instruction carries its warp-level execution count and its warp stall samples (all samples: a
sample is one warp seen at that instruction, issuing or stalled, so samples add up to warp time).

The kernels are warp-specialised: the consumer warpgroups' code comes first and ends in an EXIT
before the producer's first TMA load (``UTMALDG``; ``LDGSTS`` / ``UBLKCP`` for other loaders).
Consumer instructions are grouped by how often they run:

- ``block``: once per key block (the loop body, executed M times, and the masked iterations);
- ``tile_blocks``: about once per tile (within 1.2x the count that the most consumer instructions
  share below M / 4) and between the consumers' first and last ``HGMMA``: the key blocks peeled
  out of the loop (the first, masked one and the last P V), GEMM and softmax work;
- ``tile``: the other per-tile instructions: the tile start (its coordinates), the prologue before
  the first GEMM, the epilogue (normalisation, stores);
- ``spin``: far more often than the loop body, or sampled but never counted as executed (try-wait
  retries).

Samples are reported as fractions of the peer's consumer samples, so ``block`` + ``tile`` +
``spin`` of kernelgen minus the peer's is the gap in consumer warp time, split by where it is and
by stall reason.  The producer is idle in both kernels on the profiled shapes (it waits for free
slots), so it is reported only as a share.  The buckets follow execution counts and code order, not
the source: a kernel that peels other work out of its loop moves it between ``block`` and
``tile_blocks``, so compare their sum as well.

    python benchmarks/experiments/sass_regions.py docs/dev/benchmarks/s42 \
        --shapes dense_causal_h256,dense_causal_h96,chunked_p128,dense_causal_16k --json out.json
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
LOADS = ("UTMALDG", "LDGSTS", "UBLKCP")
REGIONS = ("block", "tile_blocks", "tile", "spin")


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def load(path: Path) -> tuple[list[str], list[dict]]:
    """(header, rows) of an exported source page; each row gains ``c`` (executions), ``s``
    (samples) and ``op`` (the opcode without predicate or modifiers)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr = rows[1]
    data = [dict(zip(hdr, r)) for r in rows[2:] if len(r) >= len(hdr) - 1]
    for r in data:
        r["c"], r["s"] = int(_num(r["Instructions Executed"])), _num(r[SAMPLES])
        words = r["Source"].strip().split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0] if words else "?"
        r["op"] = op.split(".")[0]
    return hdr, data


def consumer_end(data: list[dict]) -> int:
    """Index of the consumers' last EXIT: the last EXIT before the producer's first load."""
    first_load = min((i for i, r in enumerate(data) if r["op"] in LOADS), default=len(data))
    exits = [i for i, r in enumerate(data[:first_load]) if r["op"] == "EXIT"]
    if not exits:
        raise ValueError("no EXIT before the first TMA load: not a warp-specialised kernel")
    return exits[-1]


def regions(hdr: list[str], data: list[dict]) -> dict:
    """Consumer samples, warp instructions and stall reasons per region, and the producer's samples."""
    cut = consumer_end(data)
    cons, prod = data[:cut + 1], data[cut + 1:]
    counts = collections.Counter(r["c"] for r in cons)
    loop = max((c for c, n in counts.items() if n >= 300), default=max(counts))
    tile = max(((n, c) for c, n in counts.items() if 0 < c < loop / 4), default=(0, 0))[1]
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    mma = [i for i, r in enumerate(cons) if r["op"] == "HGMMA"]
    lo, hi = (mma[0], mma[-1]) if mma else (len(cons), -1)
    out = {k: {"samples": 0.0, "warp_instructions": 0, "stalls": collections.Counter()} for k in REGIONS}
    for i, r in enumerate(cons):
        k = ("spin" if r["c"] > 1.5 * loop or (r["c"] == 0 and r["s"] > 0) else "block" if r["c"] > 1.2 * tile
             else "tile_blocks" if lo <= i <= hi else "tile")
        out[k]["samples"] += r["s"]
        out[k]["warp_instructions"] += r["c"]
        for h in stalls:
            out[k]["stalls"][h[len("stall_"):]] += _num(r[h])
    return {"regions": out, "loop_executions": loop, "tile_executions": tile,
            "consumer_samples": sum(r["s"] for r in cons), "producer_samples": sum(r["s"] for r in prod)}


def compare(a: dict, b: dict) -> dict:
    """kernelgen (``a``) against the peer (``b``), in fractions of the peer's consumer samples."""
    base = b["consumer_samples"] or 1.0
    out = {"consumer_samples_ratio": round(a["consumer_samples"] / base, 4),
           "loop_executions": [a["loop_executions"], b["loop_executions"]],
           "tile_executions": [a["tile_executions"], b["tile_executions"]],
           "producer_share": [round(x["producer_samples"] / (x["producer_samples"] + x["consumer_samples"]), 3)
                              for x in (a, b)]}
    for k in REGIONS:
        ra, rb = a["regions"][k], b["regions"][k]
        out[k] = {"kernelgen": round(ra["samples"] / base, 4), "peer": round(rb["samples"] / base, 4),
                  "delta": round((ra["samples"] - rb["samples"]) / base, 4),
                  "warp_instructions": [ra["warp_instructions"], rb["warp_instructions"]],
                  "top_stalls": {name: {s: round(v / base, 4) for s, v in r["stalls"].most_common(5)}
                                 for name, r in (("kernelgen", ra), ("peer", rb))}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="folder of <impl>_<shape>_sass.csv[.gz] files")
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--peer", default="fa3")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    d, result = Path(a.dir), {}
    for shape in a.shapes.split(","):
        got = {}
        for impl in ("kernelgen", a.peer):
            path = next((p for p in (d / f"{impl}_{shape}_sass.csv.gz", d / f"{impl}_{shape}_sass.csv") if p.exists()),
                        None)
            if path is None:
                raise SystemExit(f"no source export for {impl} {shape} in {d}")
            got[impl] = regions(*load(path))
        c = result[shape] = compare(got["kernelgen"], got[a.peer])
        print(f"{shape}: consumer warp time kernelgen / {a.peer} {c['consumer_samples_ratio']:.3f} "
              f"(loop body runs {c['loop_executions'][0]} / {c['loop_executions'][1]})")
        for k in REGIONS:
            r = c[k]
            print(f"  {k:11s} kernelgen {r['kernelgen']:.3f}  {a.peer} {r['peer']:.3f}  delta {r['delta']:+.3f}  "
                  f"stalls kernelgen {dict(list(r['top_stalls']['kernelgen'].items())[:3])}  "
                  f"{a.peer} {dict(list(r['top_stalls']['peer'].items())[:3])}")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
