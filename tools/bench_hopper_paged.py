"""Chunked prefill on a paged K/V cache: the Hopper path (TMA pages or gathered rows) against the
sm_80 path (``arch="sm_80"``: the fused mixed-batch launch the dispatcher takes for such a call,
and the single-class sm_80 kernel with ``short_query_tokens=0``).

Shape: ``--batch`` requests, each a ``--chunk``-token query chunk at the end of ``--ctx`` keys
(causal), 32 query / 8 KV heads, head dim ``--head-dim`` (128), bf16, pages of each ``--page-sizes`` entry in a
shuffled page table.  GPU time: median of CUDA-event timed calls with the L2 flushed before each
(``kernelgen.apps.bench.measure.time_gpu``); TFLOP/s count 4 * d * (visible query-key pairs) per head.
Prints one ``BENCH`` line per (page size, path) with the largest |difference| from the Hopper
output.

Paths: ``hopper`` (the dispatcher's choice: TMA boxes where they fit the pages, else gathered
rows), ``hopper_gather`` (option "g" forced where TMA would fit), ``sm80_fused``, ``sm80_single``.

Usage: python tools/bench_hopper_paged.py [--batch 4] [--chunk 2048] [--ctx 8192] [--page-sizes 1,16,256]
       [--head-dim 128]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--page-sizes", default="1,16,256")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args(argv)

    import torch

    import kernelgen
    from kernelgen.apps.bench.measure import time_gpu
    from kernelgen.front import api
    from kernelgen.selection import heuristics

    hq, hkv, d, dt = 32, 8, args.head_dim, torch.bfloat16
    b, qn, kn = args.batch, args.chunk, args.ctx
    pairs = b * (qn * (kn - qn) + qn * (qn + 1) // 2)
    flops = 4 * d * pairs * hq
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b * qn, hq, d, generator=g, device="cuda", dtype=dt)
    cu_q = torch.arange(0, b * qn + 1, qn, dtype=torch.int32, device="cuda")
    used = torch.full((b,), kn, dtype=torch.int32, device="cuda")
    saved = heuristics.SM90_OPTS
    for ps in (int(x) for x in args.page_sizes.split(",")):
        npg = -(-kn // ps)
        kc = torch.randn(b * npg, ps, hkv, d, generator=g, device="cuda", dtype=dt)
        vc = torch.randn_like(kc)
        pt = torch.randperm(b * npg, generator=g.manual_seed(ps), device="cuda").to(torch.int32).view(b, npg)
        ref = None
        for label, kw in (("hopper", {}), ("hopper_gather", {}), ("sm80_fused", {"arch": "sm_80"}),
                          ("sm80_single", {"arch": "sm_80", "short_query_tokens": 0})):
            def fn(kw=kw):
                return kernelgen.varlen_attention(q, kc, vc, cu_q, None, qn, kn, seqused_k=used, page_table=pt,
                                                  causal=True, **kw)
            if label == "hopper_gather":       # option "g" forced: rows gathered on any page size
                if not heuristics.sm90_paged_tma_fits(ps, heuristics.sm90_tile(d, d, True).block_n):
                    continue
                heuristics.SM90_OPTS = "g" + saved
                api.clear_signature_cache()
            try:
                out = fn()
            finally:
                heuristics.SM90_OPTS = saved
            torch.cuda.synchronize()
            name = api._CALLS._last[1].attn.name
            us = time_gpu(fn, repeat=args.repeat)      # a cached signature: the prepared call
            if ref is None:
                ref = out
            diff = (out.float() - ref.float()).abs().max().item()
            print(f"BENCH paged_chunked_prefill d{d} b{b} q{qn} k{kn} ps{ps} {label}: {us:.1f} us "
                  f"{flops / us / 1e6:.0f} TFLOP/s maxdiff {diff:.2e} [{name}]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
