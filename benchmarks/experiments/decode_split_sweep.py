"""Decode split counts (GPU): the automatic split-KV count against forced ones on the bench's
decode shapes, to check how the scheduler's split quantum and the host's split bound fill the
persistent grid (docs/dev/perf-log.md, "decode_long_b8_128k").

For each shape (``--shapes``, the bench's decode shapes of the ``--model`` preset: paged, pages of
16, one query token a request, causal) the same batch runs as ``auto`` (the dispatcher's choice)
and ``s{N}`` for each ``--splits`` N (``varlen_attention(num_splits=N)``: every request gets
min(N, its key blocks) splits), timed as interleaved CUDA-graph replays
(``kernelgen.apps.bench.measure.time_interleaved``, L2 flushed before each replay); the peers are the
bench's job.  Every output is compared with ``auto``'s.  Prints us, GB/s of K/V read and the
ratio to ``auto``.

``--kv-dtype e4m3``: the same batches on an e4m3 copy of the cache (per-tensor scales, the bench's
``fp8_decode_*`` entries' quantisation), GB/s then counted at one byte an element.

Usage: PYTHONPATH=$PWD python benchmarks/experiments/decode_split_sweep.py [--shapes decode_long_b8_128k]
       [--splits 49,55,64,74,90,99] [--model llama3-8b] [--kv-dtype e4m3] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="decode_long_b8_128k,decode_trace_b128_paged16")
    ap.add_argument("--splits", default="49,55,64,74,90,99")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kv-dtype", default="bf16", choices=("bf16", "e4m3"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    from kernelgen import varlen_attention
    from kernelgen.apps.bench import measure, suites
    from kernelgen.apps.bench.models import PRESETS

    if not torch.cuda.is_available():
        print("decode_split_sweep: needs a GPU", file=sys.stderr)
        return 2
    settings = suites.Settings()
    m = PRESETS[a.model]
    report = {"model": a.model, "kv_dtype": a.kv_dtype, "shapes": {}}
    for shape in [s for s in a.shapes.split(",") if s]:
        ctx = suites.decode_contexts(settings, shape)
        q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, m)
        maxk = max(ctx)
        fp8 = {}
        if a.kv_dtype == "e4m3":
            kc, ks = suites.quantize_e4m3(kc)
            vc, vs = suites.quantize_e4m3(vc)
            fp8 = {"k_descale": ks.reshape(1, 1).expand(len(ctx), m.num_heads_kv).contiguous(),
                   "v_descale": vs.reshape(1, 1).expand(len(ctx), m.num_heads_kv).contiguous()}
        outs, calls = {}, {}
        for label, ns in [("auto", 0)] + [(f"s{n}", int(n)) for n in a.splits.split(",") if n]:
            o = torch.full((len(ctx), m.num_heads_q, m.head_dim_v), float("nan"), device="cuda", dtype=torch.bfloat16)
            outs[label] = o
            calls[label] = (lambda o=o, ns=ns: varlen_attention(
                q, kc, vc, cu_q, None, 1, maxk, seqused_k=used, page_table=pt, causal=True,
                window_size=m.window_size, softcap=m.softcap, num_splits=ns, out=o, **fp8))
        times = measure.time_interleaved(calls, rounds=a.rounds, repeat=a.repeat)
        for f in calls.values():
            f()
        torch.cuda.synchronize()
        nbytes = sum(ctx) * m.kv_bytes_per_token // (2 if fp8 else 1)
        ref = outs["auto"].float()
        rows = {}
        for label, t in times.items():
            rows[label] = {"us": t["us"], "rounds": t["rounds"], "gb_s": nbytes / t["us"] / 1e3,
                           "ratio_to_auto": t["us"] / times["auto"]["us"],
                           "max_abs_diff_vs_auto": float((outs[label].float() - ref).abs().max())}
        report["shapes"][shape] = {"requests": len(ctx), "keys": sum(ctx), "rows": rows}
        print(f"\n{shape}: {len(ctx)} requests, {sum(ctx)} keys, {m.name}")
        print(f"{'config':>8} {'us':>9} {'GB/s':>8} {'x auto':>7} {'max diff':>9}")
        for label, r in rows.items():
            print(f"{label:>8} {r['us']:>9.1f} {r['gb_s']:>8.0f} {r['ratio_to_auto']:>7.3f} "
                  f"{r['max_abs_diff_vs_auto']:>9.2e}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
