"""Decode kernels one by one (GPU): where a decode call's time goes, per kernel, for the bench's
decode shapes of a model preset (docs/dev/perf-log.md, "One KV head a GPU").

For each shape (``--shapes``; paged, pages of 16, one query token a request, causal) the automatic
call (or ``--splits N`` forced) runs ``--iters`` times under ``torch.profiler`` (CUDA activity);
prints each kernel's mean time (scheduler, attention, combine), their sum and the call's time
from CUDA events (the launch gaps are the difference), and the schedule the scheduler wrote for
the launch's config (``metadata.reference_schedule``: tiles, waves of the persistent grid,
splits per request, key blocks per tile).

Usage: PYTHONPATH=$PWD python benchmarks/experiments/decode_profile.py [--model llama3-70b-tp8]
       [--shapes decode_long_b8_128k,...] [--splits 0] [--iters 30] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3-70b-tp8")
    ap.add_argument("--shapes", default="decode_trace_b128_paged16,decode_trace_b32_paged16,decode_long_b8_128k")
    ap.add_argument("--splits", type=int, default=0)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelgen import varlen_attention
    from kernelgen.apps.bench import suites
    from kernelgen.apps.bench.models import PRESETS
    from kernelgen.front import api
    from kernelgen.kernels import metadata

    if not torch.cuda.is_available():
        print("decode_profile: needs a GPU", file=sys.stderr)
        return 2
    m = PRESETS[a.model]
    report = {"model": a.model, "splits": a.splits, "shapes": {}}
    for shape in [s for s in a.shapes.split(",") if s]:
        ctx = suites.decode_contexts(suites.Settings(), shape)
        q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, m)
        out = torch.empty(len(ctx), m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)

        def call():
            varlen_attention(q, kc, vc, cu_q, None, 1, max(ctx), seqused_k=used, page_table=pt, causal=True,
                             window_size=m.window_size, softcap=m.softcap, num_splits=a.splits, out=out)

        for _ in range(5):
            call()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        ev[0].record()
        for _ in range(a.iters):
            call()
        ev[1].record()
        torch.cuda.synchronize()
        call_us = ev[0].elapsed_time(ev[1]) * 1e3 / a.iters
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.iters):
                call()
            torch.cuda.synchronize()
        per = defaultdict(list)
        for e in prof.events():
            if e.device_type.name == "CUDA":
                per[e.name].append(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
        kernels = {k: {"n": len(v), "mean_us": float(np.mean(v))} for k, v in per.items()}
        cfg = api._CALLS._last[1].config
        buf = metadata.reference_schedule(cu_q.cpu().numpy(), None, len(ctx), len(ctx), cfg, "soa",
                                          seqused_k=used.cpu().numpy())
        d = metadata.decode(buf, "soa", len(ctx))
        splits = (d["splits_nheads"][:len(ctx)] & 0xFFFF).astype(int)
        order = d["batch_idx"][:len(ctx)].astype(int)
        nblk = np.array([-(-ctx[i] // cfg.block_n) for i in order])
        per_tile = -(-nblk // splits)
        sched = {"tiles": int(d["total_tiles"]), "grid": cfg.wave_ctas, "num_ctas": cfg.num_ctas,
                 "max_splits": cfg.max_splits, "waves": d["total_tiles"] / max(cfg.wave_ctas, 1),
                 "splits_max": int(splits.max()), "splits_mean": float(splits.mean()),
                 "blocks_per_tile_max": int(per_tile.max()), "blocks_per_tile_mean": float(per_tile.mean())}
        nbytes = sum(ctx) * m.kv_bytes_per_token
        report["shapes"][shape] = {"call_us": call_us, "gb_s": nbytes / call_us / 1e3, "kernels": kernels,
                                   "schedule": sched}
        print(f"\n{shape} ({m.name}, {len(ctx)} requests): call {call_us:.1f} us, {nbytes / call_us / 1e3:.0f} GB/s")
        tot = 0.0
        for k, v in sorted(kernels.items(), key=lambda kv: -kv[1]["mean_us"] * kv[1]["n"]):
            if v["n"] >= a.iters:
                tot += v["mean_us"] * v["n"] / a.iters
            print(f"  {v['mean_us']:9.1f} us x{v['n'] / a.iters:.0f}  {k[:100]}")
        print(f"  kernels {tot:.1f} us, gaps {call_us - tot:.1f} us; schedule {sched}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
