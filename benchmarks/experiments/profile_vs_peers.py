"""kernelgen and a peer (FlashAttention-3 or -4) on the same bench shapes, for a profiler, side by side.

For each shape: the inputs are built, the implementation is called ``--warm`` times (kernels
compiled and loaded, clocks up), then one call runs between ``cudaProfilerStart`` and
``cudaProfilerStop``, so that ``ncu --profile-from-start off`` profiles exactly that call's
kernels (kernelgen: scheduler, attention and, with split-KV, combine; FA3: its prepare kernel,
the forward and its combine).  A line ``SHAPE <name> <impl>`` precedes each profiled call, in
the order ncu lists the kernels.  For example::

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats --csv \\
        python benchmarks/experiments/profile_vs_peers.py --impl fa3 --shapes dense_causal_16k,decode_b32_tp8

Shapes (the bench's entries, bf16 or with ``--dtype fp16`` fp16): ``dense_causal_16k`` (1 x 32 x 16384,
d 128, causal), ``dense_4k`` (4 x 32 x 4096, d 128), ``dense_causal_h64`` / ``dense_h64`` (8 x 32 x 2048,
d 64, causal / not), ``dense_causal_h256`` / ``dense_h256`` (2 x 16 x 4096, d 256), ``dense_causal_gqa``
(4 x 4096, 32 / 8 heads, d 128, causal), ``dense_causal_h96`` (4 x 32 x 4096, d 96),
``dense_causal_h192`` and ``dense_causal_h192x128`` (2 x 16 x 4096, d 192, value dim 192 / 128),
``varlen_trace`` (``prefill_varlen_trace``: the causal trace batch, 32 / 8 heads, d 128), ``chunked_p16`` (4 chunks of 2048 on 8192
keys, pages of 16, 32/8 heads; ``chunked_p64`` / ``chunked_p128`` on pages of 64 / 128, ``chunked_packed``
kernelgen on the same keys gathered into packed K/V, FA3's input), ``decode_b32_tp8`` (32 Mooncake decodes, 8/1 heads, pages of
16), ``decode_b128`` (128 Mooncake decodes, 32/8 heads, pages of 16), ``decode_b128_tp8`` (the same on 8/1 heads),
``decode_long`` / ``decode_long_tp8`` (``decode_long_b8_128k``: 8 x 131072 keys, pages of 16; ``--impl cudnn`` runs
torch SDPA's cuDNN backend on them), ``decode_azure`` (``decode_azure_b128_paged16``); ``fp8_decode_b128``,
``fp8_decode_b128_tp8``, ``fp8_decode_long``: those batches on an e4m3 cache (kernelgen only); ``fp8_causal_16k``, ``fp8_causal_h64``,
``fp8_causal_h256``: the causal dense shapes with q, k and v in e4m3 (per-tensor descales; FA3's FP8
forward, kernelgen's FP8 tensor-core variant); ``fp8_causal_16k_gqa`` / ``fp8_dense_4k_gqa``: the FP8
bench entries' shapes (1 x 16384 causal / 4 x 4096 non-causal, 32 / 8 heads, d 128); ``fp8_gemma2_4k``:
``fp8_prefill_s4k_b4_gemma2-9b``'s (4 x 4096 non-causal, 16 / 8 heads, d 256, soft-cap 50); ``gptoss_causal_16k`` (1 x 16384, gpt-oss's 64 / 8 heads,
d 64, causal) and ``gptoss_softcap_16k`` (the same with the soft-cap 50 as a score_mod, tanh.approx:
kernelgen's ``VARIANT_SOFTCAP_APPROX_SCORE_MOD``, FA4's ``fa4_softcap_score_mod``; FA3 refuses it),
``gptoss_alibi_16k`` (built-in ALiBi, Press et al.'s slopes; kernelgen only), ``fp8_gptoss_16k`` (q, k and v
in e4m3 on those heads).  ``KERNELGEN_SM90_PACK_GQA=1`` / ``0`` in the environment profiles kernelgen packed / unpacked.  FA3 reads paged shapes'
caches gathered into packed K/V (``fa3_unpaged``), as in the bench.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = ("dense_causal_16k", "dense_4k", "dense_causal_h64", "dense_causal_h256", "dense_h64", "dense_h256",
          "dense_causal_gqa", "dense_causal_h96", "dense_causal_h192", "dense_causal_h192x128", "varlen_trace",
          "chunked_p16", "chunked_p64",
          "chunked_p128", "chunked_packed", "decode_b32_tp8",
          "decode_b128", "decode_b128_tp8", "decode_long", "decode_long_tp8", "decode_azure",
          "fp8_decode_b128", "fp8_decode_b128_tp8", "fp8_decode_long", "fp8_causal_16k", "fp8_causal_16k_gqa", "fp8_dense_4k_gqa", "fp8_gemma2_4k", "fp8_causal_h64",
          "fp8_causal_h256", "gptoss_causal_16k",
          "gptoss_softcap_16k", "gptoss_alibi_16k", "fp8_gptoss_16k")


#: The decode shapes' bench batches (``suites.decode_contexts``); ``*_tp8``: llama3-70b-tp8's 8 / 1 heads.
DECODE_BENCH_SHAPES = {"decode_b32": "decode_trace_b32_paged16", "decode_b128": "decode_trace_b128_paged16",
                       "decode_long": "decode_long_b8_128k", "decode_azure": "decode_azure_b128_paged16"}


def build(shape: str, impl: str, dtype: str = "bf16"):
    """A zero-argument call of ``impl`` on ``shape``'s inputs (``dtype``: the 16-bit shapes' bf16 or fp16)."""
    import torch

    import kernelgen
    from kernelgen.apps.bench import peers, suites
    from kernelgen.apps.bench.models import PRESETS, ModelPreset
    from kernelgen.apps.reference import gather_paged

    # (batch, heads, seqlen, head dim, causal[, KV heads, value head dim]): the bench's DENSE_SHAPES
    dense = {"dense_causal_16k": (1, 32, 16384, 128, True), "dense_4k": (4, 32, 4096, 128, False),
             "dense_causal_h64": (8, 32, 2048, 64, True), "dense_causal_h256": (2, 16, 4096, 256, True),
             "dense_h64": (8, 32, 2048, 64, False), "dense_h256": (2, 16, 4096, 256, False),
             "dense_causal_gqa": (4, 32, 4096, 128, True, 8), "dense_causal_h96": (4, 32, 4096, 96, True),
             "dense_causal_h192": (2, 16, 4096, 192, True), "dense_causal_h192x128": (2, 16, 4096, 192, True, 16, 128)}
    td = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    fp8 = {"fp8_causal_16k": "dense_causal_16k", "fp8_causal_h64": "dense_causal_h64",
           "fp8_causal_h256": "dense_causal_h256"}
    gqa = {"fp8_causal_16k_gqa": (1, 16384, True), "fp8_dense_4k_gqa": (4, 4096, False),
           "fp8_gemma2_4k": (4, 4096, False), "fp8_gptoss_16k": (1, 16384, True)}
    if shape in fp8 or shape in gqa:   # q, k and v in e4m3, per-tensor descales (FA3's FP8 forward; kernelgen's fp8_mma)
        cap = 50.0 if shape == "fp8_gemma2_4k" else 0.0
        if cap:            # Gemma 2's heads (16 / 8, d 256) and soft-cap
            (b, s, causal), h, hkv, d = gqa[shape], 16, 8, 256
        elif shape == "fp8_gptoss_16k":   # gpt-oss's heads (64 / 8, d 64), no sinks
            (b, s, causal), h, hkv, d = gqa[shape], 64, 8, 64
        elif shape in gqa:   # the bench entries' Llama 3 heads (32 / 8)
            (b, s, causal), h, hkv, d = gqa[shape], 32, 8, 128
        else:
            b, h, s, d, causal = dense[fp8[shape]]
            hkv = h
        g = torch.Generator(device="cuda").manual_seed(0)
        (q, qs), (k, ks), (v, vs) = (suites.quantize_e4m3(torch.randn(b * s, n, d, generator=g, device="cuda",
                                                                      dtype=torch.bfloat16)) for n in (h, hkv, hkv))
        qd, kd, vd = (x.reshape(1, 1).expand(b, hkv).contiguous() for x in (qs, ks, vs))
        cu = torch.arange(0, b * s + 1, s, dtype=torch.int32, device="cuda")
        if impl == "kernelgen":
            return lambda: kernelgen.varlen_attention(q, k, v, cu, cu, s, s, causal=causal, q_descale=qd,
                                                      k_descale=kd, v_descale=vd, softcap=cap)
        return peers.fa3(q, k, v, causal, cu_q=cu, cu_k=cu, max_q=s, max_k=s, softcap=cap,
                         descales=(qd, kd, vd))().fn
    if shape.startswith("gptoss_"):
        s, cap, alibi = 16384, shape == "gptoss_softcap_16k", shape == "gptoss_alibi_16k"
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(s, h, 64, generator=g, device="cuda", dtype=torch.bfloat16) for h in (64, 8, 8))
        cu = torch.tensor([0, s], dtype=torch.int32, device="cuda")
        if alibi and impl != "kernelgen":
            raise SystemExit("gptoss_alibi_16k: kernelgen only (built-in ALiBi)")
        if impl == "kernelgen":
            var = kernelgen.Variant(score_mod=suites.VARIANT_SOFTCAP_APPROX_SCORE_MOD) if cap else None
            slopes = (2.0 ** (-8.0 * torch.arange(1, 65, device="cuda") / 64)).float() if alibi else None
            return lambda: kernelgen.varlen_attention(q, k, v, cu, cu, s, s, causal=True, variant=var,
                                                      alibi_slopes=slopes)
        mod = (lambda: peers.fa4_softcap_score_mod(suites.VARIANT_SOFTCAP)) if cap else None
        if impl == "fa4":
            return peers.fa4(q, k, v, True, cu_q=cu, cu_k=cu, max_q=s, max_k=s, score_mod=mod)().fn
        if cap:
            raise SystemExit("FA3 takes no score_mod: profile gptoss_softcap_16k with --impl kernelgen or fa4")
        return peers.fa3(q, k, v, True, cu_q=cu, cu_k=cu, max_q=s, max_k=s)().fn
    if shape in dense:
        b, h, s, d, causal, hkv, dv = (dense[shape] + (None, None))[:7]
        hkv, dv = hkv or h, dv or d
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b * s, n, dd, generator=g, device="cuda", dtype=td) for n, dd in ((h, d), (hkv, d), (hkv, dv)))
        cu = torch.arange(0, b * s + 1, s, dtype=torch.int32, device="cuda")
        if impl == "kernelgen":
            return lambda: kernelgen.varlen_attention(q, k, v, cu, cu, s, s, causal=causal)
        return getattr(peers, impl)(q, k, v, causal, dense_batch=b)().fn
    settings = suites.Settings()
    if shape == "varlen_trace":   # prefill_varlen_trace: the bench's causal trace batch on Llama 3's 32 / 8 heads
        lens = suites.prefill_lengths(settings)
        m, g = PRESETS["llama3-8b"], torch.Generator(device="cuda").manual_seed(5)
        q, k, v = (torch.randn(sum(lens), n, m.head_dim, generator=g, device="cuda", dtype=td)
                   for n in (m.num_heads_q, m.num_heads_kv, m.num_heads_kv))
        cu, mx = suites._cu(lens, "cuda"), max(lens)
        if impl == "kernelgen":
            return lambda: kernelgen.varlen_attention(q, k, v, cu, cu, mx, mx, causal=True)
        return getattr(peers, impl)(q, k, v, True, cu_q=cu, cu_k=cu, max_q=mx, max_k=mx)().fn
    if shape.startswith("chunked_"):
        m, (b, qn, kn) = PRESETS["llama3-8b"], suites.CHUNKED_SHAPE
        qlens, klens = [qn] * b, [kn] * b
        page = 16 if shape == "chunked_packed" else int(shape[len("chunked_p"):])
    else:
        m = PRESETS["llama3-70b-tp8" if shape.endswith("_tp8") else "llama3-8b"]
        base = shape.replace("_tp8", "").replace("fp8_", "")
        klens = suites.decode_contexts(settings, DECODE_BENCH_SHAPES[base])
        qlens, page = [1] * len(klens), 16
    assert isinstance(m, ModelPreset)
    q, kc, vc, pt, used, cu_q = suites.paged_batch(qlens, klens, m, page, seed=7, dtype=dtype)
    mq, mk = max(qlens), max(klens)
    if shape.startswith("fp8_decode"):   # the same batch on an e4m3 cache (per-tensor descales), kernelgen only
        if impl != "kernelgen":
            raise SystemExit(f"{shape}: kernelgen only (FA3's FP8 decode takes FP8 queries)")
        (kc, ks), (vc, vs) = suites.quantize_e4m3(kc), suites.quantize_e4m3(vc)
        return lambda: kernelgen.varlen_attention(q, kc, vc, cu_q, None, mq, mk, seqused_k=used, page_table=pt,
                                                  causal=True, k_descale=ks, v_descale=vs)
    if impl == "kernelgen" and shape == "chunked_packed":   # the same batch's K/V gathered (FA3's input)
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        return lambda: kernelgen.varlen_attention(q, k, v, cu_q, cu_k, mq, mk, causal=True)
    if impl == "kernelgen":
        return lambda: kernelgen.varlen_attention(q, kc, vc, cu_q, None, mq, mk, seqused_k=used, page_table=pt,
                                                  causal=True)
    if impl == "fa4":
        return peers.fa4(q, kc, vc, True, cu_q=cu_q, max_q=mq, max_k=mk, page_table=pt, seqused_k=used)().fn
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    if impl == "cudnn":   # torch SDPA's cuDNN backend on the gathered cache viewed dense (uniform contexts only)
        return suites.decode_sdpa_builders(q, k, v, klens, m)["cudnn_sdpa"]().fn
    return peers.fa3(q, k, v, True, cu_q=cu_q, cu_k=cu_k, max_q=mq, max_k=mk)().fn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=("kernelgen", "fa3", "fa4", "cudnn"), default="kernelgen",
                    help="cudnn: torch SDPA's cuDNN backend, decode shapes of uniform contexts (decode_long*)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list (default: all)")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="the 16-bit shapes' dtype")
    ap.add_argument("--flush", choices=("none", "write", "read"), default="none",
                    help="before the profiled call, outside the profiled range: write (the bench's default: "
                         "L2 left full of dirty lines) or read the bench's 256 MB buffer; pair with ncu "
                         "--cache-control none")
    ap.add_argument("--templates", default=None, help="render kernelgen's kernels from this templates folder")
    a = ap.parse_args(argv)
    # a user variant's first call on a cold cache runs the sm_80 kernel while its Hopper kernel builds in
    # the background (the tiered first call): the profiled call would be that one (the fifty-fifth
    # session's first profile of gptoss_softcap_16k was), so the Hopper kernel is built on the first call
    os.environ.setdefault("KERNELGEN_TIERED_COMPILE", "0")
    import torch
    if a.templates:
        from kernelgen.jit import render
        folder = Path(a.templates).resolve()
        render.templates_dir = lambda: folder
        render.environment.cache_clear()
    from kernelgen.apps.bench import measure
    flush_buf = measure.flush_buffer() if a.flush != "none" else None

    for shape in a.shapes.split(","):
        if shape not in SHAPES:
            raise SystemExit(f"unknown shape {shape!r} (choose from {', '.join(SHAPES)})")
        fn = build(shape, a.impl, a.dtype)
        for _ in range(a.warm):
            fn()
        torch.cuda.synchronize()
        print(f"SHAPE {shape} {a.impl}", flush=True)
        if flush_buf is not None:
            measure.flush_l2(flush_buf, a.flush)
            torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
