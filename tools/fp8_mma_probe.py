"""Time the FP8 prefill paths of the Hopper kernel through ``kernelgen.varlen_attention`` (GPU,
sm_90a): FP8 q/K/V on the FP8 tensor-core variant (``AttentionSpec.fp8_mma``) with each tile of
``--tiles`` for the shape's head dim (``head_dim:block_n:stages``, set as
``heuristics.SM90_FP8_MMA_TILES``), the FP8 K/V variant with a bf16 q (design
variant A) and the bf16 call, on the shapes of issue 24 (``--shapes``).  CUDA events around
``--calls`` calls after ``--warm`` warm-up calls, median; prints µs and TFLOP/s (causal FLOPs
halved) per path, and one JSON line per shape when ``--json`` is given.

    python tools/fp8_mma_probe.py --shapes causal16k,dense4k,h64_2k,h256_4k --tiles 64:256:2,128:128:2,256:128:2
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: name: (batch, heads_q, heads_kv, seqlen, head_dim, causal)
SHAPES = {"causal16k": (1, 32, 8, 16384, 128, True), "dense4k": (4, 32, 8, 4096, 128, False),
          "h64_2k": (8, 32, 8, 2048, 64, True), "h256_4k": (2, 16, 16, 4096, 256, True)}


def quant(t):
    import torch
    s = t.abs().amax().float() / 448
    return (t.float() / s).to(torch.float8_e4m3fn), s.reshape(1, 1)


def time_call(fn, warm: int, calls: int) -> float:
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000)
    return sorted(ts)[len(ts) // 2]


def probe(shape: str, tiles, warm: int, calls: int) -> dict:
    import torch

    import kernelgen
    from kernelgen.front import api
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics

    b, hq, hkv, s, d, causal = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b * s, h, d, generator=g, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv))
    (q8, qs), (k8, ks), (v8, vs) = quant(q), quant(k), quant(v)
    cu = torch.arange(0, b * s + 1, s, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    flops = 4 * b * hq * d * (s * (s + 1) // 2 if causal else s * s)
    res = {"shape": shape}

    def run(name, qq, kk, vv, **kw):
        api.clear_signature_cache()
        fn = lambda: kernelgen.varlen_attention(qq, kk, vv, cu, cu, s, s, causal=causal, out=out, **kw)  # noqa: E731
        us = time_call(fn, warm, calls)
        res[name] = {"us": round(us, 1), "tflops": round(flops / us / 1e6, 1), "kernel": api._CALLS._last[1].attn.name
                     if hasattr(api._CALLS, "_last") else ""}
        print(f"{shape} {name}: {us:.0f} us {flops / us / 1e6:.0f} TFLOP/s {res[name]['kernel']}", flush=True)

    saved = dict(heuristics.SM90_FP8_MMA_TILES)
    try:
        for td, bn, st in tiles:
            if td != d:
                continue
            heuristics.SM90_FP8_MMA_TILES[(d, d)] = TileConfig(128, bn, 8, st, 1)
            run(f"fp8_mma_n{bn}_s{st}", q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs)
    finally:
        heuristics.SM90_FP8_MMA_TILES.clear()
        heuristics.SM90_FP8_MMA_TILES.update(saved)
    run("fp8_kv_bf16_q", q, k8, v8, k_descale=ks, v_descale=vs)
    run("bf16", q, k, v)
    api.clear_signature_cache()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="causal16k")
    ap.add_argument("--tiles", default="64:128:2,64:256:2,128:128:2,256:128:2",
                    help="head_dim:block_n:stages,... (FP8 tensor-core tiles to time)")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    tiles = [tuple(int(x) for x in t.split(":")) for t in a.tiles.split(",")]
    rows = [probe(sh, tiles, a.warm, a.calls) for sh in a.shapes.split(",")]
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
