r"""The bench's chunked prefill (4 x 2048 queries at the end of 8192 keys, llama3-8b heads, causal, bf16) on a
paged cache at several page sizes (``--pages``; ``packed``: the same keys gathered into packed K/V), with
Hopper configurations of head dim 128 side by side as interleaved graph replays (``measure.time_interleaved``,
``--passes`` measurements).  A configuration ``name=block_m:block_n:stages[:sm90_opts[:templates[:defines]]]``
patches ``heuristics.SM90_TILES[(128, 128)]`` and the Hopper options while its call is prepared
(``tile_ab.patched``): ``opts`` ``gp`` forces the row gather of option "g" where TMA boxes would fit;
``templates`` renders that configuration from another template folder (e.g. ``git archive`` of an
older commit), so two versions of a kernel run in one process; ``defines`` (NAME=VALUE joined by
'+') are compiled into that configuration's kernels (``tile_ab.patched``).  Prints one JSON row per page size and
pass, then each configuration's time over the first one's.  ``--seed`` shuffles the pages (default 13,
the bench entry's; the thirty-eighth session's calls used 7).  For example (perf log, thirty-eighth
session)::

    python benchmarks/experiments/paged_prefill_ab.py --pages 16,8,32 \
        --configs tma=128:128:2:p,gather=128:128:2:gp,old=128:128:2:gp:/tmp/base/templates
"""
import argparse, json, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2])); sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
from tile_ab import patched
from kernelgen.apps.bench import measure, suites
from kernelgen.apps.bench.models import PRESETS
from kernelgen.apps.reference import gather_paged
from kernelgen.front import api
from kernelgen.kernels.spec import TileConfig

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--pages", default="16,32,64,128,packed")
ap.add_argument("--configs", default="s2=128:128:2,s3=128:128:3",
                help="name=block_m:block_n:stages[:sm90_opts[:templates dir[:defines]]],...")
ap.add_argument("--passes", type=int, default=2)
ap.add_argument("--seed", type=int, default=13, help="page shuffle (suites.paged_batch's seed)")
ap.add_argument("--settle-ms", type=float, default=0.0)
a = ap.parse_args()
m = PRESETS["llama3-8b"]
b, qn, kn = suites.CHUNKED_SHAPE
qlens, klens = [qn] * b, [kn] * b
pairs = sum(q * (k - q) + q * (q + 1) // 2 for q, k in zip(qlens, klens))
flops = 4 * m.num_heads_q * m.head_dim * pairs
rows = []
for pg in a.pages.split(","):
    page = 16 if pg == "packed" else int(pg)
    q, kc, vc, pt, used, cu_q = suites.paged_batch(qlens, klens, m, page, seed=a.seed)
    if pg == "packed":
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        args = (q, k, v, cu_q, cu_k, None, None)
    else:
        args = (q, kc, vc, cu_q, None, used, pt)
    fns, kern, outs = {}, {}, {}
    for c in a.configs.split(","):
        name, spec = c.split("=", 1)
        f = spec.split(":")
        bm, bn, st = (int(x) for x in f[:3])
        opts = f[3] if len(f) > 3 else "p"
        tdir = f[4] if len(f) > 4 else ""
        defs = f[5] if len(f) > 5 else ""
        out = torch.full_like(q, float("nan"))
        def prepare(out=out):
            api.varlen_attention(args[0], args[1], args[2], args[3], args[4], qn, kn, seqused_k=args[5],
                                 page_table=args[6], causal=True, out=out)
            return api._CALLS._last[1]
        prep = patched("bf16", 128, TileConfig(bm, bn, bm // 16, st, 1), opts, prepare, defines=defs, templates=tdir)
        kern[name] = prep.attn.name
        outs[name] = out.clone()
        fns[name] = lambda prep=prep, out=out: prep.run(args[0], args[1], args[2], args[3], args[4], args[5], args[6], out, None)
    first = next(iter(outs.values()))
    diffs = {n: float((o.float() - first.float()).abs().nan_to_num(float("inf")).max()) for n, o in outs.items()}
    for p in range(a.passes):
        t = measure.time_interleaved(fns, rounds=5, repeat=10, settle_ms=a.settle_ms)
        row = {"page": pg, "pass": p, "us": {n: round(r["us"], 1) for n, r in t.items()},
               "tflops": {n: round(flops / r["us"] / 1e6, 1) for n, r in t.items()},
               "rounds": {n: [round(x, 1) for x in r["rounds"]] for n, r in t.items()}, "kernels": kern,
               "max_abs_diff_vs_first": diffs}
        print(json.dumps(row), flush=True)
        rows.append(row)
for r in rows:
    base = next(iter(r["us"].values()))
    print(f"{r['page']:>7} pass {r['pass']}  " + "  ".join(f"{n} {u:8.1f} us {r['tflops'][n]:6.1f} TF {u / base:.3f}" for n, u in r["us"].items()))
