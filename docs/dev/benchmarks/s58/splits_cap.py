"""FA3's num_splits as vLLM's full-CUDA-graph mode passes it (16 on every captured call): kernelgen's
old reading (num_splits=16 forced) against the new (max_num_splits=16, a cap on the automatic count)
and the automatic choice (num_splits=0), on paged batches in CUDA-graph replays, interleaved.
Prints a table; writes $OUT/splits_cap.json.  Usage: python splits_cap.py [rounds]"""
import json
import os
import sys

import numpy as np
import torch

import kernelgen

HQ, HKV, D, PS = 32, 8, 128, 16
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
REPS = 20


def batch(qlens, ctx, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    need = [-(-c // PS) for c in ctx]
    kc = torch.randn(sum(need) + 1, PS, HKV, D, generator=g, device="cuda").to(torch.bfloat16)
    vc = torch.randn_like(kc)
    pt = torch.zeros(len(ctx), max(need), dtype=torch.int32)
    at = 0
    for i, n in enumerate(need):
        pt[i, :n] = torch.arange(at, at + n)
        at += n
    q = torch.randn(sum(qlens), HQ, D, generator=g, device="cuda").to(torch.bfloat16)
    cu = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    used = torch.tensor(ctx, dtype=torch.int32, device="cuda")
    return q, kc, vc, cu, used, pt.cuda()


def graph_of(fn):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_us(g):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(REPS):
        g.replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000 / REPS


rng = np.random.default_rng(0)
CASES = {
    "decode128_ctx1k-16k": ([1] * 128, [int(x) for x in rng.integers(1000, 16000, size=128)]),
    "decode128_ctx256-2k": ([1] * 128, [int(x) for x in rng.integers(256, 2048, size=128)]),
    "decode16_ctx8k-32k": ([1] * 16, [int(x) for x in rng.integers(8000, 32000, size=16)]),
    "mixed_4x512+124dec": ([512] * 4 + [1] * 124, [int(x) for x in rng.integers(512, 8000, size=128)]),
}
MODES = {"auto": dict(num_splits=0), "cap16": dict(max_num_splits=16), "forced16": dict(num_splits=16)}
res = {}
for name, (qlens, ctx) in CASES.items():
    q, kc, vc, cu, used, pt = batch(qlens, ctx, 1)
    outs, graphs = {}, {}
    for m, kw in MODES.items():
        out = torch.empty_like(q)
        outs[m] = out
        graphs[m] = graph_of(lambda kw=kw, out=out: kernelgen.varlen_attention(
            q, kc, vc, cu, None, max(qlens), max(ctx), seqused_k=used, page_table=pt, causal=True, out=out, **kw))
    for m in MODES:
        graphs[m].replay()
    torch.cuda.synchronize()
    err = {m: (outs[m].float() - outs["auto"].float()).abs().max().item() for m in MODES}
    t = {m: [] for m in MODES}
    for r in range(ROUNDS):
        order = list(MODES) if r % 2 == 0 else list(MODES)[::-1]
        for m in order:
            t[m].append(time_us(graphs[m]))
    med = {m: float(np.median(v)) for m, v in t.items()}
    res[name] = dict(us=med, rounds=t, max_abs_diff_vs_auto=err)
    print(f"{name:24s} " + "  ".join(f"{m} {med[m]:8.1f} us" for m in MODES)
          + f"  forced16/cap16 {med['forced16'] / med['cap16']:.3f}  cap16/auto {med['cap16'] / med['auto']:.3f}"
          + f"  diff {max(err.values()):.2e}", flush=True)
os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
json.dump(dict(device=torch.cuda.get_device_name(), cases=res), open(os.path.join(os.environ.get("OUT", "."),
                                                                                  "splits_cap.json"), "w"), indent=1)
