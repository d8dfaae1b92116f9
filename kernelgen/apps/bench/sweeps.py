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
