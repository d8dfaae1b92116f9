"""Split-KV on the Hopper path: few-request long-context prefill timed three ways.

For each shape (bf16, head dim 128, GQA 4:1): the Hopper kernel with the dispatcher's automatic
split (``num_splits=0``), the Hopper kernel without split (``num_splits=1``), and the sm_80 path
with its automatic split (``arch="sm_80"``).  GPU time is the median of CUDA-event timed calls
with the L2 flushed before each (``kernelgen.apps.bench.measure.time_gpu``), in microseconds, the
scheduler and combine launches included; TFLOP/s count 4 * d * (visible query-key pairs) per
head.  Each entry's output is compared with the unsplit Hopper output (largest |difference|).

Usage: python tools/bench_hopper_split.py [--json FILE] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (name, query lengths, key lengths, query heads, KV heads, causal)
SHAPES = [
    ("long_ctx_1x512_k64k_h8kv2_causal", [512], [65536], 8, 2, True),
    ("long_ctx_2x1024_k32k_h8kv2", [1024, 1024], [32768, 32768], 8, 2, False),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)

    import torch

    import kernelgen
    from kernelgen.apps.bench.measure import time_gpu
    from kernelgen.apps.demo import visible_pairs
    from kernelgen.front import api

    d = 128
    report = {"device": torch.cuda.get_device_name(0), "entries": []}
    for name, qlens, klens, hq, hkv, causal in SHAPES:
        torch.manual_seed(0)
        q = torch.randn(sum(qlens), hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(sum(klens), hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        cu_q = torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, *torch.tensor(klens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        flops = 4 * d * hq * sum(visible_pairs(a, b, causal=causal) for a, b in zip(qlens, klens))
        entry = {"name": name, "flops": flops, "us": {}, "tflops": {}, "max_diff": {}, "kernel": {}, "max_splits": {}}
        base = None
        for label, kw in (("sm90_nosplit", dict(num_splits=1, arch="sm_90a")),
                          ("sm90_split", dict(num_splits=0, arch="sm_90a")),
                          ("sm80_split", dict(num_splits=0, arch="sm_80"))):
            out = torch.empty_like(q)

            def fn():
                return kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal, out=out,
                                                  **kw)
            fn()
            torch.cuda.synchronize()
            prep = api._CALLS._last[1]
            entry["kernel"][label] = prep.attn.name
            entry["max_splits"][label] = prep.config.max_splits
            us = time_gpu(fn, repeat=args.repeat)
            entry["us"][label] = round(us, 1)
            entry["tflops"][label] = round(flops / us / 1e6, 1)
            if base is None:
                base = out.clone()
            entry["max_diff"][label] = float((out.float() - base.float()).abs().max())
        report["entries"].append(entry)
        u = entry["us"]
        print(f"{name}: sm90 split {u['sm90_split']:.1f} us (max_splits {entry['max_splits']['sm90_split']}, "
              f"{entry['tflops']['sm90_split']} TFLOP/s) | sm90 no split {u['sm90_nosplit']:.1f} us "
              f"({u['sm90_nosplit'] / u['sm90_split']:.2f}x) | sm80 split {u['sm80_split']:.1f} us "
              f"(max_splits {entry['max_splits']['sm80_split']}, {u['sm80_split'] / u['sm90_split']:.2f}x) | "
              f"max diff {max(entry['max_diff'].values()):.2e}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
