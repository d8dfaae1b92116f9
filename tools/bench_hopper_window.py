"""Quick timing of sliding-window and soft-cap prefill on the Hopper path against the sm_80 path.

Shapes (bf16, head dim 128, 32 query / 8 KV heads, equal-length requests as one varlen batch):
``prefill_window_causal_h128_s16k`` (2 x 16384, causal with window_size=(4095, 0), Mistral's
4096-token window), the same without the window (``prefill_dense_causal_h128_s16k_gqa``, for the
ratio) and ``prefill_softcap_causal_h128_s4k`` (4 x 4096, causal, softcap 50, Gemma-2 style).
GPU time: median of CUDA-event timed calls with the L2 flushed before each
(``kernelgen.apps.bench.measure.time_gpu``), in microseconds; TFLOP/s count 4 * d * (visible
query-key pairs) per query head.  ``max_diff`` is the largest |difference| of the two paths'
outputs.  Prints one line per shape; ``--json`` writes the numbers.

``--warm-only``: compile, in a process pool and without a GPU, the Hopper kernels of the window /
soft-cap GPU tests (tests/gpu/test_hopper_gpu.py: both dtypes, head dims 64 and 128, both
layouts, every mask with and without soft-cap) into ``$KERNELGEN_CACHE_DIR``, then exit.

Usage: python tools/bench_hopper_window.py [--json FILE] [--repeat N] [--warm-only [--jobs N]]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (name, requests, tokens per request, window_size, softcap); all causal
SHAPES = [("prefill_window_causal_h128_s16k", 2, 16384, (4095, 0), 0.0),
          ("prefill_dense_causal_h128_s16k_gqa", 2, 16384, (-1, -1), 0.0),
          ("prefill_softcap_causal_h128_s4k", 4, 4096, (-1, -1), 50.0)]


def window_pairs(s: int, left: int) -> int:
    """Visible (query, key) pairs of one causal request of s tokens with a left window (-1: none):
    row r sees min(r + 1, left + 1) keys."""
    if left < 0 or left + 1 >= s:
        return s * (s + 1) // 2
    w = left + 1
    return w * (w + 1) // 2 + (s - w) * w


def warm_specs() -> list:
    """The scheduler and Hopper attention specs of the window / soft-cap GPU tests (8/2 heads)."""
    import itertools

    from kernelgen.selection import heuristics
    specs = set()
    for dt, d, lay, mask, cap in itertools.product(("bf16", "fp16"), (64, 128), ("soa", "aos"),
                                                   ("none", "causal", "local"), (False, True)):
        v = heuristics.choose("sm_90a", dt, d, d, num_heads_q=8, num_heads_kv=2, mask=mask, softcap=cap, layout=lay,
                              max_seqlen_q=4096, max_seqlen_k=4096, mainloop="sm90a")
        specs.update((v.attention, v.scheduler))
    return sorted(specs, key=lambda s: s.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warm-only", action="store_true")
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args(argv)
    if args.warm_only:
        from kernelgen.jit import cache, warmup
        specs = warm_specs()
        compiled, cached = warmup.warmup(specs, cache.default_cache_dir(), jobs=args.jobs, progress=False)
        print(f"WARM {len(specs)} specs: {compiled} compiled, {cached} already cached")
        return 0

    import torch

    import kernelgen
    from kernelgen.apps.bench.measure import time_gpu
    from kernelgen.front import api

    hq, hkv, d = 32, 8, 128
    report = {"device": torch.cuda.get_device_name(0), "entries": []}
    for name, b, s, window, cap in SHAPES:
        torch.manual_seed(0)
        q = torch.randn(b * s, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b * s, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device="cuda")
        flops = 4 * d * hq * b * window_pairs(s, window[0])
        entry = {"name": name, "window_size": list(window), "softcap": cap, "flops": flops, "us": {}, "kernels": {}}
        outs = {}
        for arch in ("sm_90a", "sm_80"):
            def call(arch=arch):
                return kernelgen.varlen_attention(q, k, v, cu, cu, s, s, causal=True, window_size=window,
                                                  softcap=cap, arch=arch)
            outs[arch] = call()
            entry["kernels"][arch] = api._CALLS._last[1].attn.name
            entry["us"][arch] = time_gpu(call, repeat=args.repeat, warmup=2)
        entry["max_diff"] = (outs["sm_90a"].float() - outs["sm_80"].float()).abs().max().item()
        t90, t80 = entry["us"]["sm_90a"], entry["us"]["sm_80"]
        print(f"WINDOW_BENCH {name}: sm90a {t90:.0f} us ({flops / t90 / 1e6:.0f} TFLOP/s), sm80 {t80:.0f} us "
              f"({flops / t80 / 1e6:.0f} TFLOP/s), {t80 / t90:.2f}x, max_diff {entry['max_diff']:.2e}")
        report["entries"].append(entry)
        del q, k, v, outs
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
