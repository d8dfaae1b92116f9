"""Short GPU benchmark of the vertical slice (run by tools/gpu_check.sh).

Entries (same run, same inputs for every peer):
* roofs: device-to-device copy bandwidth and a bf16 matmul rate, measured here;
* prefill_dense_causal_h128_s16k: 1 x 32 heads x 16384 tokens, d 128, bf16, causal; peers
  torch_fa2 (SDPA flash backend) and cudnn_sdpa (SDPA cuDNN backend);
* prefill_dense_h128_s4k: 4 x 32 x 4096, not causal (same peers);
* a tile sweep of kernelgen's head-dim-128 candidates on the causal 16k shape.

FLOPs count only the (row, key) pairs the mask lets through: 4 * heads * d * pairs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernelgen  # noqa: E402
from kernelgen import api, heuristics, metadata, runtime  # noqa: E402
from kernelgen.timing import time_cuda  # noqa: E402


def roofs() -> dict:
    x = torch.empty(2 * 1024 ** 3 // 2, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    us = time_cuda(lambda: y.copy_(x), repeat=20, warmup=3)
    copy_tbps = 2 * x.numel() * 2 / (us * 1e-6) / 1e12
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us_mm = time_cuda(lambda: a @ b, repeat=20, warmup=3)
    return {"copy_tbps": copy_tbps, "bf16_matmul_tflops": 2 * 8192 ** 3 / (us_mm * 1e-6) / 1e12}


def causal_pairs(lq: int, lk: int) -> int:
    from kernelgen.demo import visible_pairs

    return visible_pairs(lq, lk, causal=True)


def sdpa_peer(backend, q4, k4, v4, causal):
    from torch.nn.attention import sdpa_kernel

    def run():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
    try:
        run()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not dropped
        return None, f"{type(e).__name__}: {str(e)[:120]}"
    return time_cuda(run, repeat=10, warmup=2), None


def dense_entry(name, batch, heads, seqlen, d, causal) -> dict:
    from torch.nn.attention import SDPBackend

    torch.manual_seed(0)
    q4 = torch.randn(batch, heads, seqlen, d, device="cuda", dtype=torch.bfloat16)
    k4, v4 = torch.randn_like(q4), torch.randn_like(q4)
    # kernelgen takes the packed (tokens, heads, d) layout: the same data, transposed once outside timing
    q, k, v = (t.transpose(1, 2).reshape(batch * seqlen, heads, d).contiguous() for t in (q4, k4, v4))
    cu = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * seqlen
    out = torch.empty_like(q)
    run = lambda: kernelgen.varlen_attention(q, k, v, cu, cu, seqlen, seqlen, causal=causal, out=out)  # noqa: E731
    us = time_cuda(run, repeat=10, warmup=2)
    pairs = batch * (causal_pairs(seqlen, seqlen) if causal else seqlen * seqlen)
    flops = 4 * heads * d * pairs
    entry = {"name": name, "us": us, "tflops": flops / (us * 1e-6) / 1e12, "tbps": None, "peers": {}, "unavailable": {}}
    for peer, backend in (("torch_fa2", SDPBackend.FLASH_ATTENTION), ("cudnn_sdpa", SDPBackend.CUDNN_ATTENTION)):
        t, why = sdpa_peer(backend, q4, k4, v4, causal)
        if t is None:
            entry["unavailable"][peer] = why
        else:
            entry["peers"][peer] = t
    # agreement with the flash peer on this shape (a sanity check, not the correctness test)
    ref = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
    entry["max_diff_vs_sdpa"] = float((out.view(batch, seqlen, heads, d).transpose(1, 2) - ref).abs().max())
    return entry


def tile_sweep(seqlen=16384, heads=32, d=128, causal=True) -> list:
    torch.manual_seed(1)
    q = torch.randn(seqlen, heads, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    cu = torch.tensor([0, seqlen], dtype=torch.int32, device="cuda")
    flops = 4 * heads * d * causal_pairs(seqlen, seqlen)
    arch = api.device_arch(0)
    rows = []
    ref = None
    for tile in heuristics.CANDIDATE_TILES[d]:
        try:
            sched_spec, attn_spec = heuristics.specs_for(arch, "bf16", d, d, causal, "soa", tile)
            sched, attn = runtime.get_kernel(sched_spec, 0), runtime.get_kernel(attn_spec, 0)
        except Exception as e:  # noqa: BLE001
            rows.append({"tile": tile.tag, "error": str(e)[:160]})
            continue
        out = torch.empty_like(q)
        md = torch.empty(metadata.buffer_ints(1), dtype=torch.int32, device="cuda")
        cfg = api.scheduler_config(attn_spec, attn, heads, heads)

        def run():
            s = api._current_stream(0)
            api.launch_scheduler(sched, s, cu, cu, None, md, 1, 1, cfg)
            attn.launch(attn.persistent_grid, s, api.attention_params(q, k, v, out, None, cu, cu, md, 1, d ** -0.5))
        us = time_cuda(run, repeat=8, warmup=2)
        if ref is None:
            ref = out.clone()
        rows.append({"tile": tile.tag, "us": us, "tflops": flops / (us * 1e-6) / 1e12,
                     "registers": attn.resources.get("registers"), "spills": attn.resources.get("spill_stores"),
                     "ctas_per_sm": attn.persistent_grid // runtime.device_properties(0)["num_sms"],
                     "max_diff_vs_first": float((out.float() - ref.float()).abs().max())})
    return rows


def scheduler_entries() -> list:
    """scheduler_b{8,128,1024,4096}: one scheduler launch (sort + splits + swizzle on), timed as
    the mean of 20 launches replayed from one CUDA graph (launch overhead excluded)."""
    from kernelgen.compare_layouts import trace_batch
    from kernelgen.plan import AttentionPlan
    from kernelgen.traces import load_trace

    rows = load_trace()
    out = []
    for b in (8, 128, 1024, 4096):
        lq, lk = trace_batch(rows, b)
        cu_q = torch.tensor([0] + list(np.cumsum(lq)), dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0] + list(np.cumsum(lk)), dtype=torch.int32, device="cuda")
        entry = {"name": f"scheduler_b{b}", "tflops": None, "tbps": None, "peers": {}}
        for layout, srt in (("soa", True), ("aos", True), ("soa_nosort", False)):
            plan = AttentionPlan(max_batch=b, num_heads_q=32, num_heads_kv=8, head_dim=128, causal=True,
                                 metadata_layout=layout[:3], sort=srt)
            plan.schedule(cu_q, cu_k)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(20):
                    plan.schedule(cu_q, cu_k)
            us = time_cuda(g.replay, repeat=20, warmup=3) / 20
            if layout == "soa":
                entry["us"] = us
            entry[f"us_{layout}"] = us
        out.append(entry)
    return out


def trace_sort_entries(batch: int = 512) -> list:
    """varlen_trace_sorted / varlen_trace_unsorted: the same skewed trace batch (every 8th request a
    prefill, the rest decodes; 32/8 heads, d 128, bf16, causal) with the scheduler's sort on / off."""
    from kernelgen.compare_layouts import trace_batch
    from kernelgen.traces import load_trace

    lq, lk = trace_batch(load_trace(), batch)
    torch.manual_seed(3)
    q = torch.randn(sum(lq), 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lk), 8, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    cu_q = torch.tensor([0] + list(np.cumsum(lq)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(lk)), dtype=torch.int32, device="cuda")
    flops = 4 * 32 * 128 * sum(causal_pairs(a, b) for a, b in zip(lq, lk))
    out = []
    for name, srt in (("varlen_trace_sorted", True), ("varlen_trace_unsorted", False)):
        o = torch.empty_like(q)
        us = time_cuda(lambda: kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True,
                                                          out=o, sort=srt), repeat=20, warmup=3)
        out.append({"name": name, "us": us, "tflops": flops / (us * 1e-6) / 1e12, "tbps": None, "peers": {}})
    return out


def decode_entry(name: str, contexts, page_size: int = 16, hq: int = 32, hkv: int = 8, d: int = 128,
                 peers: bool = True) -> dict:
    """Paged decode: one query token per request against its context; tbps = K+V bytes read / time.
    Peer: torch's FA2 varlen kernel on the same contexts, unpaged."""
    b = len(contexts)
    need = [-(-c // page_size) for c in contexts]
    g = torch.Generator(device="cuda").manual_seed(7)
    num_pages = sum(need)
    kc = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda", dtype=torch.bfloat16)
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    pt = torch.zeros(b, max(need), dtype=torch.int32, device="cuda")
    at = 0
    for i, n in enumerate(need):
        pt[i, :n] = perm[at:at + n]
        at += n
    used = torch.tensor(contexts, dtype=torch.int32, device="cuda")
    q = torch.randn(b, hq, d, generator=g, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    maxk = max(contexts)
    run = lambda: kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, maxk, seqused_k=used, page_table=pt,  # noqa: E731
                                             causal=True, out=out)
    us = time_cuda(run, repeat=20, warmup=3)
    nbytes = sum(contexts) * hkv * 2 * d * 2
    e = {"name": name, "us": us, "tflops": None, "tbps": nbytes / (us * 1e-6) / 1e12, "peers": {}, "unavailable": {}}
    # peer: FA2 varlen on the same contexts, unpaged (packed k/v)
    from kernelgen.reference import gather_paged

    if not peers:
        return e
    k, v, cu_k = gather_paged(kc, vc, pt, used)

    def fa2():
        return torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, 1, maxk, 0.0, True, False, scale=None)
    try:
        ref = fa2()[0]
        torch.cuda.synchronize()
        e["peers"]["torch_fa2_varlen"] = time_cuda(fa2, repeat=20, warmup=3)
        e["max_diff_vs_fa2"] = float((out.float() - ref.float()).abs().max())
    except Exception as ex:  # noqa: BLE001
        e["unavailable"]["torch_fa2_varlen"] = f"{type(ex).__name__}: {str(ex)[:120]}"
    return e


def decode_entries() -> list:
    from kernelgen.traces import load_trace

    rows = load_trace(Path(kernelgen.__file__).parent / "data" / "mooncake_conv_sample.csv")
    ctx = [min(int(r[0]), 131072) for r in rows]
    out = [decode_entry("decode_trace_b128_paged16", ctx[:128]), decode_entry("decode_trace_b32_paged16", ctx[128:160]),
           decode_entry("decode_long_b8_128k", [131072] * 8)]
    torch.cuda.empty_cache()
    return out


def _paged_batch(qlens, ctx, page_size=16, hq=32, hkv=8, d=128, seed=11):
    g = torch.Generator(device="cuda").manual_seed(seed)
    need = [-(-c // page_size) for c in ctx]
    kc = torch.randn(sum(need), page_size, hkv, d, generator=g, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    perm = torch.randperm(sum(need), device="cuda", generator=g).to(torch.int32)
    pt = torch.zeros(len(ctx), max(need), dtype=torch.int32, device="cuda")
    at = 0
    for i, n in enumerate(need):
        pt[i, :n] = perm[at:at + n]
        at += n
    q = torch.randn(sum(qlens), hq, d, generator=g, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    return q, kc, vc, pt, torch.tensor(ctx, dtype=torch.int32, device="cuda"), cu_q


def serving_entries() -> list:
    """graph_decode_step_b128: one paged decode step (128 requests, Mooncake contexts capped at 32k)
    replayed from a CUDA graph through an AttentionPlan.  mixed_trace: 3 chunked prefills (512-4096
    tokens) + 192 decodes at trace contexts in one uniform call; peers: serial (prefill-only call
    then decode-only call) and two_streams (the two calls on two streams)."""
    from kernelgen.plan import AttentionPlan
    from kernelgen.traces import load_trace

    rows = load_trace(Path(kernelgen.__file__).parent / "data" / "mooncake_conv_sample.csv")
    ctx = [min(int(r[0]), 32768) for r in rows]
    out = []
    q, kc, vc, pt, used, cu_q = _paged_batch([1] * 128, ctx[:128])
    plan = AttentionPlan(max_batch=128, num_heads_q=32, num_heads_kv=8, head_dim=128, max_total_q=128, max_seqlen_q=1,
                         max_seqlen_k=32768, paged=True, causal=True)
    o = torch.empty_like(q)
    plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=o)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=o)
    us = time_cuda(g.replay, repeat=20, warmup=3)
    nbytes = sum(ctx[:128]) * 8 * 2 * 128 * 2
    out.append({"name": "graph_decode_step_b128", "us": us, "tflops": None, "tbps": nbytes / (us * 1e-6) / 1e12,
                "peers": {}})
    del kc, vc, pt
    # mixed: prefills first in the batch, then decodes
    pre_q = [512, 2048, 4096]
    pre_k = [c + q_ for c, q_ in zip(ctx[200:203], pre_q)]
    dec_k = ctx[300:492]
    qlens, klens = pre_q + [1] * len(dec_k), pre_k + dec_k
    q, kc, vc, pt, used, cu_q = _paged_batch(qlens, klens, seed=12)
    o = torch.empty_like(q)
    n_pre, t_pre = len(pre_q), sum(pre_q)
    cu_pre, cu_dec = cu_q[: n_pre + 1], cu_q[n_pre:] - t_pre
    q_pre, q_dec = q[:t_pre], q[t_pre:]
    o_pre, o_dec = o[:t_pre], o[t_pre:]
    run_all = lambda: kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,  # noqa: E731
                                                 page_table=pt, causal=True, out=o)

    def prefill():
        kernelgen.varlen_attention(q_pre, kc, vc, cu_pre, None, max(pre_q), max(pre_k), seqused_k=used[:n_pre],
                                   page_table=pt[:n_pre], causal=True, out=o_pre)

    def decode():
        kernelgen.varlen_attention(q_dec, kc, vc, cu_dec, None, 1, max(dec_k), seqused_k=used[n_pre:],
                                   page_table=pt[n_pre:], causal=True, out=o_dec)

    def serial():
        prefill()
        decode()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def two_streams():
        cur = torch.cuda.current_stream()
        s1.wait_stream(cur)
        s2.wait_stream(cur)
        with torch.cuda.stream(s1):
            prefill()
        with torch.cuda.stream(s2):
            decode()
        cur.wait_stream(s1)
        cur.wait_stream(s2)
    flops = 4 * 32 * 128 * sum(causal_pairs(a, b) for a, b in zip(qlens, klens))
    e = {"name": "mixed_trace", "us": time_cuda(run_all, repeat=10, warmup=2), "tbps": None, "peers": {}}
    e["tflops"] = flops / (e["us"] * 1e-6) / 1e12
    e["peers"]["serial"] = time_cuda(serial, repeat=10, warmup=2)
    e["peers"]["two_streams"] = time_cuda(two_streams, repeat=10, warmup=2)
    out.append(e)
    return out


def decode_sweep() -> list:
    """Decode tile candidates for head dim 128 on the two decode shapes (no peers)."""
    from kernelgen.spec import TileConfig
    from kernelgen.traces import load_trace

    rows = load_trace(Path(kernelgen.__file__).parent / "data" / "mooncake_conv_sample.csv")
    ctx = [min(int(r[0]), 131072) for r in rows][:128]
    saved = heuristics._DECODE[128], heuristics.SPLIT_GRANULARITY["decode"]
    out = []
    for t, gran in (((16, 16, 1, 2, 8), 1), ((16, 16, 1, 2, 8), 2), ((16, 16, 1, 2, 8), 4), ((16, 16, 1, 3, 8), 2)):
        heuristics._DECODE[128] = TileConfig(*t)
        heuristics.SPLIT_GRANULARITY["decode"] = gran
        for name, c in (("b128_paged16", ctx), ("long_b8_128k", [131072] * 8)):
            e = decode_entry(name, c, peers=False)
            out.append({"tile": TileConfig(*t).tag, "granularity": gran, "shape": name, "us": e["us"], "tbps": e["tbps"]})
            print("decode tile", json.dumps(out[-1]), flush=True)
    heuristics._DECODE[128], heuristics.SPLIT_GRANULARITY["decode"] = saved
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sweep", action="store_true", help="also sweep the head-dim-128 prefill tiles")
    ap.add_argument("--only-scheduler", action="store_true", help="only the scheduler entries")
    ap.add_argument("--only-decode-sweep", action="store_true", help="only the decode tile sweep")
    args = ap.parse_args(argv)
    res = {"device": runtime.device_properties(0)["name"], "benchmarks": []}
    if args.only_decode_sweep:
        decode_sweep()
        return 0
    if args.only_scheduler:
        for e in scheduler_entries():
            print(e["name"], {k: round(v, 2) for k, v in e.items() if k.startswith("us")}, flush=True)
        return 0
    res["roofs"] = roofs()
    print("roofs:", json.dumps(res["roofs"]))
    for spec in (("prefill_dense_causal_h128_s16k", 1, 32, 16384, 128, True),
                 ("prefill_dense_h128_s4k", 4, 32, 4096, 128, False)):
        e = dense_entry(*spec)
        res["benchmarks"].append(e)
        peers = " ".join(f"{p}={t:.0f}us({t / e['us']:.2f}x)" for p, t in e["peers"].items())
        print(f"{e['name']}: {e['us']:.0f} us {e['tflops']:.0f} TFLOP/s  {peers}  diff={e['max_diff_vs_sdpa']:.3g}"
              f"  {e['unavailable'] or ''}", flush=True)
    for e in scheduler_entries() + trace_sort_entries():
        res["benchmarks"].append(e)
        print(f"{e['name']}: {e['us']:.2f} us" + (f" {e['tflops']:.0f} TFLOP/s" if e.get("tflops") else "")
              + "".join(f" {k}={v:.2f}" for k, v in e.items() if k.startswith("us_")), flush=True)
    for e in decode_entries() + serving_entries():
        res["benchmarks"].append(e)
        peers = " ".join(f"{p}={t:.0f}us({t / e['us']:.2f}x)" for p, t in e["peers"].items())
        rate = f"{e['tbps']:.2f} TB/s" if e.get("tbps") else f"{e.get('tflops') or 0:.0f} TFLOP/s"
        print(f"{e['name']}: {e['us']:.0f} us {rate}  {peers}  {e.get('unavailable') or ''}"
              f"  diff={e.get('max_diff_vs_fa2')}", flush=True)
    if args.sweep:
        res["tile_sweep_causal_h128_s16k"] = tile_sweep()
        for r in res["tile_sweep_causal_h128_s16k"]:
            print("tile", json.dumps(r), flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
