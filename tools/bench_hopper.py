"""Benchmark of the Hopper attention path against the sm_80 path, cuDNN SDPA and torch's FA2.

Shapes (bf16): ``prefill_dense_causal_h128_s16k`` (1 x 32 heads x 16384, d 128, causal),
``prefill_dense_h128_s4k`` (4 x 32 x 4096, d 128, no mask), ``prefill_dense_causal_h256_s4k`` (2 x
16 x 4096, d 256, causal; the report's entry) and the same 2 x 16 x 4096 causal shape at head dims
192, 192 x 128 (head_dim_v 128) and 96, picked with ``--shapes`` (default: the two d 128).  kernelgen
runs as one varlen batch of equal requests; the SDPA peers get dense (B, H, S, D) copies.  GPU time
is the median of CUDA-event timed calls with the L2 flushed before each
(``kernelgen.apps.bench.measure.time_gpu``); TFLOP/s count 2 * (d + dv) * (visible query-key pairs) per
head.  Each kernelgen entry's output is compared with cuDNN's (largest |difference|).  Also prints
each Hopper kernel's registers, spills and shared memory.

Usage: python tools/bench_hopper.py [--json FILE] [--repeat N] [--variants OPTS:STAGES[:BLOCK_N],...]
       [--shapes NAME,...]
A variant without BLOCK_N keeps the head dim's own block_n (heuristics.sm90_tile).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (name, batch, heads, seqlen, causal, head dim, head_dim_v)
SHAPES = [("prefill_dense_causal_h128_s16k", 1, 32, 16384, True, 128, 128),
          ("prefill_dense_h128_s4k", 4, 32, 4096, False, 128, 128),
          ("prefill_dense_causal_h256_s4k", 2, 16, 4096, True, 256, 256),
          ("prefill_dense_causal_h192_s4k", 2, 16, 4096, True, 192, 192),
          ("prefill_dense_causal_h192x128_s4k", 2, 16, 4096, True, 192, 128),
          ("prefill_dense_causal_h96_s4k", 2, 16, 4096, True, 96, 96)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--variants", default="p:2,_:2,pr:2,r:2,p:3",
                    help="Hopper mainloop variants (opts:stages[:block_n])")
    ap.add_argument("--shapes", default="prefill_dense_causal_h128_s16k,prefill_dense_h128_s4k",
                    help="comma-separated shape names (%(default)s); also prefill_dense_causal_h256_s4k")
    args = ap.parse_args(argv)
    wanted = args.shapes.split(",")
    unknown = set(wanted) - {sh[0] for sh in SHAPES}
    if unknown:
        ap.error(f"unknown shapes {sorted(unknown)}")

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import kernelgen
    from kernelgen.apps.bench.measure import time_gpu
    from kernelgen.apps.demo import visible_pairs
    from kernelgen.front import api
    from kernelgen.jit import runtime
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics

    rows, report = [], {"device": torch.cuda.get_device_name(0), "entries": []}
    default_opts, default_tile, default_tiles = heuristics.SM90_OPTS, heuristics.SM90_TILE, dict(heuristics.SM90_TILES)
    for name, b, h, s, causal, d, dv in [sh for sh in SHAPES if sh[0] in wanted]:
        torch.manual_seed(0)
        q = torch.randn(b * s, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn_like(q)
        v = torch.randn(b * s, h, dv, device="cuda", dtype=torch.bfloat16)
        cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device="cuda")
        flops = 2 * (d + dv) * h * b * visible_pairs(s, s, causal=causal)
        q4, k4, v4 = (t.view(b, s, h, t.shape[-1]).transpose(1, 2).contiguous() for t in (q, k, v))
        entry = {"name": name, "flops": flops, "us": {}, "max_diff_vs_cudnn": {}, "kernels": {}}
        ref = None

        def sdpa(backend):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

        for peer, backend in (("cudnn_sdpa", SDPBackend.CUDNN_ATTENTION), ("torch_fa2", SDPBackend.FLASH_ATTENTION)):
            try:
                o = sdpa(backend)
                torch.cuda.synchronize()
                if ref is None:
                    ref = o.transpose(1, 2).reshape(b * s, h, dv).float()
                entry["us"][peer] = time_gpu(lambda: sdpa(backend), repeat=args.repeat, warmup=2)
            except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported
                entry["us"][peer] = None
                entry.setdefault("errors", {})[peer] = str(e)[:200]
        runs = [("kernelgen_sm80", "sm_80", None)]
        runs += [(f"kernelgen_sm90a[{vv}]", "sm_90a", vv) for vv in args.variants.split(",") if vv]
        out = v.new_empty(b * s, h, dv)
        for label, arch, variant in runs:
            if variant is not None:
                parts = variant.split(":")
                heuristics.SM90_OPTS = "" if parts[0] == "_" else parts[0]
                base = default_tiles.get((d, dv), default_tile)
                tile = TileConfig(128, int(parts[2]) if len(parts) > 2 else base.block_n, 8, int(parts[1]), 1)
                heuristics.SM90_TILE = tile
                heuristics.SM90_TILES = {**default_tiles, (d, dv): tile} if (d, dv) in default_tiles else default_tiles
            api.clear_signature_cache()

            def call():
                return kernelgen.varlen_attention(q, k, v, cu, cu, s, s, causal=causal, out=out, arch=arch)

            try:
                call()
                torch.cuda.synchronize()
                prep = api._CALLS._last[1]
                entry["kernels"][label] = prep.attn.name
                if ref is not None:
                    entry["max_diff_vs_cudnn"][label] = float((out.float() - ref).abs().max())
                entry["us"][label] = time_gpu(call, repeat=args.repeat, warmup=2)
                for kern in runtime.loaded_kernels():
                    if kern.spec.name == prep.attn.name:
                        entry.setdefault("resources", {})[label] = {**kern.resources, "smem": kern.smem_bytes,
                                                                   "ctas": kern.persistent_grid}
            except Exception as e:  # noqa: BLE001
                entry["us"][label] = None
                entry.setdefault("errors", {})[label] = f"{type(e).__name__}: {str(e)[:300]}"
                if "CUDA" in str(e) or "cuda" in str(e):
                    break  # a sticky CUDA error: later entries would fail too
        heuristics.SM90_OPTS, heuristics.SM90_TILE, heuristics.SM90_TILES = default_opts, default_tile, default_tiles
        report["entries"].append(entry)
        for label, us in entry["us"].items():
            tf = flops / (us * 1e-6) / 1e12 if us else None
            rows.append((name, label, us, tf, entry["max_diff_vs_cudnn"].get(label)))
        del q, k, v, q4, k4, v4, out, ref
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"{'shape':32s} {'impl':26s} {'us':>9s} {'TFLOP/s':>8s} {'maxdiff':>8s}")
    for name, label, us, tf, md in rows:
        print(f"{name:32s} {label:26s} {us if us else float('nan'):9.0f} {tf if tf else float('nan'):8.1f} "
              f"{md if md is not None else float('nan'):8.4f}")
    for e in report["entries"]:
        for label, r in e.get("resources", {}).items():
            print("resources", e["name"], label, r)
        for label, err in e.get("errors", {}).items():
            print("error", e["name"], label, err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
