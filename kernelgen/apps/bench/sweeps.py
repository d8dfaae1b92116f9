"""Tile sweeps (moved from tools/bench.py): kernelgen's candidate tiles on one shape, no peers.

* :func:`tile_sweep`: the head-dim-128 prefill candidates (``heuristics.CANDIDATE_TILES``) on the
  causal 1 x 32 x 16384 shape (``tools/bench.py --sweep``);
* :func:`decode_sweep`: decode tiles and split granularities on the two decode shapes
  (``tools/bench.py --only-decode-sweep``).
"""
from __future__ import annotations

import json


def tile_sweep(seqlen=16384, heads=32, d=128, causal=True) -> list:
    import torch

    from ...jit import runtime
    from ...kernels import metadata
    from ...launch import launch, oneoff, prepared
    from ...selection import decide, heuristics
    from ..demo import visible_pairs
    from ..timing import time_cuda

    torch.manual_seed(1)
    q = torch.randn(seqlen, heads, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    cu = torch.tensor([0, seqlen], dtype=torch.int32, device="cuda")
    flops = 4 * heads * d * visible_pairs(seqlen, seqlen, causal=True)
    from ...selection.settings import allow_untested_arch

    arch = runtime.device_arch(0, allow_untested_arch())
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
        cfg = decide.scheduler_plan(attn_spec, device=runtime.device(0), num_heads_q=heads,
                                    num_heads_kv=heads).config(attn.persistent_grid)

        def run():
            s = prepared.current_stream(0)
            oneoff.launch_scheduler(sched, s, cu, cu, None, md, 1, 1, cfg)
            launch.launch_kernel(attn, attn.persistent_grid, s,
                                 oneoff.attention_params(q, k, v, out, None, cu, cu, md, 1, d ** -0.5))
        us = time_cuda(run, repeat=8, warmup=2)
        if ref is None:
            ref = out.clone()
        rows.append({"tile": tile.tag, "us": us, "tflops": flops / (us * 1e-6) / 1e12,
                     "registers": attn.resources.get("registers"), "spills": attn.resources.get("spill_stores"),
                     "ctas_per_sm": attn.persistent_grid // runtime.device(0).num_sms,
                     "max_diff_vs_first": float((out.float() - ref.float()).abs().max())})
    return rows


def decode_sweep(settings=None) -> list:
    """Decode tile candidates for head dim 128 on the two decode shapes (no peers), llama3-8b."""
    from ...kernels.spec import TileConfig
    from ...selection import heuristics
    from .models import PRESETS
    from .suites import Settings, decode_contexts, decode_measure

    settings = settings or Settings()
    model = PRESETS["llama3-8b"]
    ctx = decode_contexts(settings, "decode_trace_b128_paged16")
    saved = heuristics._DECODE[128], heuristics.SPLIT_GRANULARITY["decode"]
    out = []
    try:
        for t, gran in (((16, 16, 1, 2, 8), 1), ((16, 16, 1, 2, 8), 2), ((16, 16, 1, 2, 8), 4),
                        ((16, 16, 1, 3, 8), 2)):
            heuristics._DECODE[128] = TileConfig(*t)
            heuristics.SPLIT_GRANULARITY["decode"] = gran
            for name, c in (("b128_paged16", ctx), ("long_b8_128k", [131072] * 8)):
                e = decode_measure(settings, name, c, model, with_peers=False)
                out.append({"tile": TileConfig(*t).tag, "granularity": gran, "shape": name, "us": e["us"],
                            "tbps": e["bytes"] / (e["us"] * 1e-6) / 1e12})
                print("decode tile", json.dumps(out[-1]), flush=True)
    finally:
        heuristics._DECODE[128], heuristics.SPLIT_GRANULARITY["decode"] = saved
    return out


def fp8_stage_sweep(stages=(2, 3, 4), min_blocks=(8, 12)) -> list:
    """The FP8 decode (``fp8_decode_b128_paged16``: 128 paged decodes, e4m3 cache against the same
    call on the bf16 cache) at each pair of ``heuristics.FP8_DECODE_STAGES`` and
    ``heuristics.FP8_DECODE_MIN_BLOCKS``: rows of {"stages", "min_blocks", "us", "us_bf16",
    "fp8_speedup", "tbps"} (``tools/bench.py --fp8-stage-sweep``)."""
    from ...front import api
    from ...selection import heuristics
    from . import suites
    from .models import PRESETS, DEFAULT_MODEL

    settings = suites.Settings()
    keep, rows = (heuristics.FP8_DECODE_STAGES, heuristics.FP8_DECODE_MIN_BLOCKS), []
    try:
        for s in stages:
            for mb in min_blocks:
                heuristics.FP8_DECODE_STAGES, heuristics.FP8_DECODE_MIN_BLOCKS = s, mb
                api.clear_signature_cache()
                e = suites.fp8_entry(settings, "fp8_decode_b128_paged16", PRESETS[DEFAULT_MODEL])
                rows.append({"stages": s, "min_blocks": mb, "us": e["us"], "us_bf16": e["us_bf16"],
                             "fp8_speedup": e["fp8_speedup"], "tbps": e["bytes"] / e["us"] / 1e6})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        heuristics.FP8_DECODE_STAGES, heuristics.FP8_DECODE_MIN_BLOCKS = keep
        api.clear_signature_cache()
    return rows


#: Shapes of ``fp8_prefill_mainloops``: (name, batch, q tokens a request, keys a request, query heads,
#: KV heads, head dim, causal, page size (0: packed K/V)).
FP8_PREFILL_SHAPES = (
    ("causal_s16k_d128", 1, 16384, 16384, 32, 8, 128, True, 0),
    ("noncausal_b4_s4k_d128", 4, 4096, 4096, 32, 8, 128, False, 0),
    ("causal_b8_s2k_d64", 8, 2048, 2048, 32, 8, 64, True, 0),
    ("causal_b2_s4k_d256", 2, 4096, 4096, 16, 4, 256, True, 0),
    ("chunked_b4_q2k_k8k_paged16", 4, 2048, 8192, 32, 8, 128, True, 16),
    ("chunked_b4_q2k_k8k_paged64", 4, 2048, 8192, 32, 8, 128, True, 64),
)


def fp8_prefill_mainloops(shapes=FP8_PREFILL_SHAPES) -> list:
    """FP8 (e4m3) prefill on each path against the bf16 call and FlashAttention-3's FP8 forward
    (``tools/bench.py --fp8-prefill-sweep``): per shape, interleaved graph replays of the FP8 K/V
    call with a bf16 q as dispatched (``fp8_auto``: the Hopper kernel on an H200), forced to
    ``arch="sm_80"`` (``fp8_sm80``), the call with q in e4m3 too (``fp8_q``: the FP8 tensor-core
    variant where it applies, per-tensor ``q_descale``), the bf16 call (``bf16``) and, on packed K/V
    when fa3-fwd is installed, FA3 on the same e4m3 q/k/v with the same descales (``fa3_fp8``); rows
    of {"shape", "us": {...}, "tflops": {...}, "kernel": the automatic FP8 K/V kernel's name,
    "kernel_fp8_q": the FP8-q call's, "fa3_fp8": null or why FA3 did not run}."""
    import torch

    from ...front import api
    from . import peers, suites

    settings = suites.Settings()
    rows = []
    for name, b, lq, lk, hq, hkv, d, causal, ps in shapes:
        torch.manual_seed(3)
        q = torch.randn(b * lq, hq, d, device="cuda", dtype=torch.bfloat16)
        cu_q = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * lq
        kw = dict(causal=causal)
        if ps:
            pages = -(-lk // ps)
            k = torch.randn(b * pages, ps, hkv, d, device="cuda", dtype=torch.bfloat16)
            kw.update(page_table=torch.randperm(b * pages, device="cuda", dtype=torch.int32).view(b, pages),
                      seqused_k=torch.full((b,), lk, device="cuda", dtype=torch.int32))
            cu_k = None
        else:
            k = torch.randn(b * lk, hkv, d, device="cuda", dtype=torch.bfloat16)
            cu_k = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * lk
        v = torch.randn_like(k)
        k8, ks = suites.quantize_e4m3(k)
        v8, vs = suites.quantize_e4m3(v)
        kd, vd = (s.reshape(1, 1).expand(b, hkv).contiguous() for s in (ks, vs))
        out = torch.empty_like(q)

        q8, qs = suites.quantize_e4m3(q)
        qd = qs.reshape(1, 1).expand(b, hkv).contiguous()

        def call(kk, vv, qq=q, **extra):
            return lambda: api.varlen_attention(qq, kk, vv, cu_q, cu_k, lq, lk, out=out, **kw, **extra)
        fns = {"fp8_auto": call(k8, v8, k_descale=kd, v_descale=vd),
               "fp8_sm80": call(k8, v8, k_descale=kd, v_descale=vd, arch="sm_80"),
               "fp8_q": call(k8, v8, q8, q_descale=qd, k_descale=kd, v_descale=vd),
               "bf16": call(k, v)}
        fns["fp8_q"]()
        kernel_q = api._CALLS._last[1].attn.name
        fns["fp8_auto"]()
        kernel = api._CALLS._last[1].attn.name
        fa3_why = "paged K/V (FA3 would run on a gathered copy)" if ps else None
        if not ps:
            try:
                fns["fa3_fp8"] = peers.fa3(q8, k8, v8, causal, cu_q=cu_q, cu_k=cu_k, max_q=lq, max_k=lk,
                                           descales=(qd, kd, vd))().fn
                fns["fa3_fp8"]()
            except Exception as e:  # noqa: BLE001 - peers.Unavailable, an import or launch failure
                fns.pop("fa3_fp8", None)
                fa3_why = f"{type(e).__name__}: {e}"[:300]
        times = {n: r["us"] for n, r in settings.time_interleaved(fns).items()}
        pairs = b * (lq * lk - (lq * (lq - 1) // 2 if causal else 0)) if causal else b * lq * lk
        flops = 4 * hq * d * pairs
        rows.append({"shape": name, "us": times, "tflops": {n: flops / t / 1e6 for n, t in times.items()},
                     "kernel": kernel, "kernel_fp8_q": kernel_q, "fa3_fp8": fa3_why})
        print(json.dumps(rows[-1]), flush=True)
        del q, k, v, k8, v8, q8, fns
    return rows
