"""Compile the Hopper (sm_90a) kernels of the GPU tests into the kernel cache, in parallel and without
a GPU, so that a GPU run (tools/gpu_check.sh) spends its time on the tests instead of compiling one
kernel after another inside them.

The specs come from the dispatcher's own functions (``heuristics.choose``, ``choose_fused_hopper``,
``choose_pair``) called with the parameters of the tests in tests/gpu/test_hopper_gpu.py,
tests/gpu/test_fused_gpu.py, tests/gpu/test_alibi_gpu.py, tests/gpu/test_sinks_gpu.py and
tests/gpu/test_variant_gpu.py (with its packed variant calls and their spill twins), tests/gpu/test_fp8_gpu.py and
tests/gpu/test_hopper_pack_gqa_gpu.py; a spec that a test ends up not using costs only its compile.
``kernelgen warmup --serving`` (run before this by gpu_check.sh) covers the serving shapes.

    python tools/warm_gpu_tests.py [--jobs N] [--cache-dir DIR] [--list]

``--jobs``: worker processes (default: the CPU count); ``--cache-dir``: the cache (default:
``$KERNELGEN_CACHE_DIR``, as ``kernelgen cache path`` prints); ``--list``: print the specs' names
and compile nothing; ``--only fp8,alibi``: those groups only.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelgen.selection import heuristics  # noqa: E402
from kernelgen.selection.settings import Settings  # noqa: E402
from kernelgen.kernels.spec import AttentionSpec, SchedulerSpec, TileConfig  # noqa: E402

ARCH = "sm_90a"
#: (head_dim, head_dim_v) pairs of the head-dim matrix
PAIRS = [(64, 64), (96, 96), (128, 128), (192, 192), (192, 128), (256, 256)]


def _opts():
    """The Hopper options the dispatcher takes in this environment: ``KERNELGEN_SM90_OPTS`` when set
    (a tuning run of the GPU tests), else None (``heuristics.SM90_OPTS``)."""
    return Settings.from_env().sm90_opts


def _all_row_warps(group):
    """A group's specs with every ``CombineSpec.row_warps`` of each combine kernel: a call's combine
    takes the warps a row its query tokens give (``heuristics.combine_row_warps``), which the
    groups' ``choose`` calls (no ``total_q``) leave at the default."""
    @functools.wraps(group)
    def wrapped() -> list:
        out = []
        for s in group():
            out.append(s)
            if s.kind == "combine":
                out += [dataclasses.replace(s, row_warps=r) for r in s.ROW_WARPS if r != s.row_warps]
        return out
    return wrapped


def _choose(dt, d, dv=None, *, hq=8, hkv=2, causal=True, window=(-1, -1), cap=0.0, layout="soa", max_q=700,
            max_k=9000, paged=False, page_size=0, num_splits=0, mainloop="sm90a", alibi=False, pack_gqa=None,
            variant=None, kv_dtype="", q_dtype="", sm90_pack=None, mean_q=0):
    mask = "local" if window != (-1, -1) else ("causal" if causal else "none")
    v = heuristics.choose(ARCH, dt, d, d if dv is None else dv, num_heads_q=hq, num_heads_kv=hkv, mask=mask,
                          layout=layout, max_seqlen_q=max_q, max_seqlen_k=max_k, paged=paged, softcap=cap > 0,
                          num_splits=num_splits, num_sms=132, mainloop=mainloop, page_size=page_size,
                          sm90_opts=_opts(), alibi=alibi, pack_gqa=pack_gqa, sm90_pack=sm90_pack, mean_q=mean_q,
                          **({"variant": variant} if variant is not None else {}),
                          **({"kv_dtype": kv_dtype} if kv_dtype else {}), **({"q_dtype": q_dtype} if q_dtype else {}))
    return [s for s in (v.scheduler, v.attention, v.combine) if s is not None]


def _mixed(dt, d, **kw) -> list:
    """The fused Hopper launch's specs and the classes-in-turn pair's (the tests run both)."""
    out = []
    fv = heuristics.choose_fused_hopper(ARCH, dt, d, d, sm90_opts=_opts(), **kw)
    if fv is not None:
        out += [x for x in (fv.scheduler, fv.fused, fv.combine) if x is not None]
    pv = heuristics.choose_pair(ARCH, dt, d, d, sm90_opts=_opts(), **kw)
    if pv is not None:
        out += [x for x in (pv.long.scheduler, pv.long.attention, pv.short.attention, pv.short.combine)
                if x is not None]
    return out


@_all_row_warps
def head_dim_specs() -> list:
    """test_hopper_matrix / _wide_head_dims (every head-dim pair, both dtypes, masks and layouts),
    test_hopper_mainloop_options (the mainloop variants at d 128), test_hopper_three_warpgroups (d 64's
    192-row tile with each option), the d-256 tiles, and the sm_80
    path's kernels of the causal 2 x 16 x 4096 shape at each head-dim pair (the sm_80 comparisons
    of the tests and of the bench's ``kernelgen_sm80`` column)."""
    out = [SchedulerSpec(ARCH, lay) for lay in ("soa", "aos")]
    for (d, dv), dt, mask, lay in itertools.product(PAIRS, ("bf16", "fp16"), ("none", "causal"), ("soa", "aos")):
        tile = heuristics.sm90_tile(d, dv)
        opts = heuristics.without_tileinfo(heuristics.sm90_options(False, 0, tile.block_n, _opts(), max(d, dv)),
                                           d, dv, lay, mask, False, False, False)
        out.append(AttentionSpec(ARCH, dt, d, dv, mask, lay, tile, mainloop="sm90a", sm90_opts=opts))
    t = heuristics.SM90_TILE
    for opts, tile in [("", t), ("h", t), ("s", t), ("hp", t), ("pr", t), ("p", TileConfig(128, 128, 8, 3, 1)),
                       ("p", TileConfig(128, 192, 8, 2, 1))]:
        for mask in ("none", "causal"):
            out.append(AttentionSpec(ARCH, "bf16", 128, 128, mask, "soa", tile, mainloop="sm90a", sm90_opts=opts))
    # test_hopper_three_warpgroups: d 64's 192-row tile with each option (ragged(23): 300 / 443 tokens at most)
    for opts, mask in itertools.product(("", "p", "pr", "s"), ("none", "causal")):
        v = heuristics.choose(ARCH, "bf16", 64, 64, num_heads_q=8, num_heads_kv=2, mask=mask, max_seqlen_q=300,
                              max_seqlen_k=443, num_sms=132, mainloop="sm90a", sm90_opts=opts)
        out += [s for s in (v.attention, v.combine) if s is not None]
    t256 = heuristics.sm90_tile(256, 256)
    for opts, tile in [("", t256), ("p", TileConfig(128, 64, 8, 2, 1))]:
        out.append(AttentionSpec(ARCH, "bf16", 256, 256, "causal", "soa", tile, mainloop="sm90a", sm90_opts=opts))
    for d, dv in ((256, 256), (128, 128), (128, 64), (192, 192), (192, 128), (96, 96)):
        v = heuristics.choose(ARCH, "bf16", d, dv, num_heads_q=16, num_heads_kv=16, mask="causal",
                              max_seqlen_q=4096, max_seqlen_k=4096, mainloop="sm80")
        out.append(v.attention)
    return out


@_all_row_warps
def window_softcap_specs() -> list:
    """test_hopper_window_softcap_*: both dtypes, head dims 64 and 128, both layouts, every mask with
    and without soft-cap (8 query / 2 KV heads)."""
    out = []
    for dt, d, lay, mask, cap in itertools.product(("bf16", "fp16"), (64, 128), ("soa", "aos"),
                                                   ("none", "causal", "local"), (False, True)):
        v = heuristics.choose(ARCH, dt, d, d, num_heads_q=8, num_heads_kv=2, mask=mask, softcap=cap, layout=lay,
                              max_seqlen_q=4096, max_seqlen_k=4096, mainloop="sm90a", sm90_opts=_opts())
        out += [v.attention, v.scheduler]
    return out


@_all_row_warps
def paged_split_mixed_specs() -> list:
    """The paged, split-KV and combined-slice tests of test_hopper_gpu.py and the sm_90a mixed
    batches of test_fused_gpu.py."""
    out = []
    # test_hopper_paged_matrix: page sizes x (head dim, dtype, causal, GQA, layout)
    for ps in (1, 8, 16, 24, 64, 128, 256):
        for hd, dt, causal, gqa, lay in ((128, "bf16", True, 4, "soa"), (64, "fp16", False, 1, "aos"),
                                         (128, "fp16", False, 8, "aos"), (64, "bf16", True, 2, "soa")):
            out += _choose(dt, hd, hq=2 * gqa, causal=causal, layout=lay, max_q=300, max_k=1000, paged=True,
                           page_size=ps)
    # paged long chunks (automatic dispatch) and the paged slices together
    for ps in (1, 16, 256):
        for causal in (False, True):
            out += _choose("bf16", 128, hq=32, hkv=8, causal=causal, max_q=2048, max_k=8000, paged=True,
                           page_size=ps, mainloop=None)
        for n, causal, window, cap in ((3, True, (-1, -1), 0.0), (0, True, (700, -1), 0.0),
                                       (2, False, (300, 200), 30.0), (0, True, (-1, -1), 15.0)):
            out += _choose("bf16", 128, causal=causal, window=window, cap=cap, max_q=600, max_k=9000, paged=True,
                           page_size=ps, num_splits=n)
    # paged wide head dims (test_hopper_paged_wide_head_dims*)
    for d, ps, causal in itertools.product((96, 192, 256), (1, 16, 24, 256), (True, False)):
        out += _choose("bf16" if ps in (1, 256) else "fp16", d, causal=causal, max_q=300, max_k=1000, paged=True,
                       page_size=ps)
    for d, ps in ((96, 16), (192, 16), (256, 1), (256, 64)):
        for n, causal, window, cap in ((3, True, (-1, -1), 0.0), (0, False, (300, 200), 30.0)):
            out += _choose("bf16", d, causal=causal, window=window, cap=cap, max_q=600, max_k=9000, paged=True,
                           page_size=ps, num_splits=n)
    for d in (96, 256):
        kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=900, max_seqlen_k=4000, paged=True,
                  page_size=16)
        fv = heuristics.choose_fused_hopper(ARCH, "bf16", d, d, sm90_opts=_opts(), **kw)
        if fv is not None:
            out += [x for x in (fv.scheduler, fv.fused, fv.combine) if x is not None]
        else:
            out += _mixed("bf16", d, **kw)
    # forced splits (fp16 for 3 splits), automatic splits on long contexts
    for n, causal, hd, lay in itertools.product((2, 3, 7), (False, True), (64, 128), ("soa", "aos")):
        out += _choose("fp16" if n == 3 else "bf16", hd, causal=causal, layout=lay, num_splits=n)
    for qlens, klens, hq, hkv in (([256], [65536], 8, 2), ([2048], [8192], 4, 1), ([512, 1024], [32768, 16384], 8, 2),
                                  ([300, 0, 1024, 257], [20000, 5000, 8192, 0], 8, 2)):
        for (lay, dt, hd), causal in itertools.product((("soa", "bf16", 128), ("aos", "fp16", 64)), (False, True)):
            out += _choose(dt, hd, hq=hq, hkv=hkv, causal=causal, layout=lay, max_q=max(qlens), max_k=max(klens),
                           mainloop=None)
    for n in (3, 0):
        for causal, window, cap in ((True, (2000, -1), 0.0), (False, (700, 300), 30.0), (True, (-1, -1), 20.0)):
            out += _choose("bf16", 128, causal=causal, window=window, cap=cap, max_q=512, max_k=24000, num_splits=n,
                           mainloop=None)
    for d, dv in ((96, 96), (192, 128), (256, 256)):
        out += _choose("bf16", d, dv, causal=True, max_q=300, max_k=9000, num_splits=3)
        out += _choose("bf16", d, dv, causal=False, window=(600, 100), cap=25.0, max_q=300, max_k=9000, mainloop=None)
    # mixed batches on sm_90a (test_fused_gpu.py): the fused kernel, and the classes in turn
    for hq, hkv, d, dt, causal in ((32, 8, 128, "bf16", True), (8, 1, 128, "fp16", True), (16, 16, 64, "bf16", False),
                                   (28, 4, 128, "bf16", True)):
        for lay, (window, cap) in itertools.product(("soa", "aos"), (((-1, -1), 0.0), ((300, 0), 0.0),
                                                                     ((-1, -1), 30.0))):
            mask = "local" if window != (-1, -1) else ("causal" if causal else "none")
            out += _mixed(dt, d, num_heads_q=hq, num_heads_kv=hkv, mask=mask, layout=lay, max_seqlen_q=900,
                          max_seqlen_k=6000, paged=True, softcap=cap > 0, page_size=16)
    return out


@_all_row_warps
def alibi_specs() -> list:
    """tests/gpu/test_alibi_gpu.py: the ALiBi variants of its prefill (causal GQA, non-causal,
    soft-cap + window, d 64 MHA; automatic and forced splits), pack-GQA decode, paged decode (forced
    and automatic splits), mixed steps (the classes in turn) and plans, on both mainloops."""
    out = []
    for mainloop in (None, "sm80"):
        for n in (0, 3):
            out += _choose("bf16", 128, hq=32, hkv=8, causal=True, max_q=600, max_k=600, num_splits=n,
                           mainloop=mainloop, alibi=True)
        for hq, hkv, d, window, cap in ((16, 4, 128, (-1, -1), 0.0), (16, 4, 128, (200, 50), 30.0),
                                        (8, 8, 64, (-1, -1), 0.0)):
            out += _choose("bf16", d, hq=hq, hkv=hkv, causal=False, window=window, cap=cap, max_q=700, max_k=700,
                           mainloop=mainloop, alibi=True)
        for n in (0, 4):
            out += _choose("bf16", 128, hq=32, hkv=8, causal=True, max_q=1, max_k=3000, paged=True, page_size=16,
                           num_splits=n, mainloop=mainloop, alibi=True)
    for max_q in (1, 4):
        out += _choose("bf16", 128, hq=32, hkv=4, causal=True, max_q=max_q, max_k=2100, pack_gqa=True,
                       mainloop=None, alibi=True)
    for max_q, max_k in ((900, 3000), (256, 2048)):
        pv = heuristics.choose_pair(ARCH, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                    max_seqlen_q=max_q, max_seqlen_k=max_k, paged=True, page_size=16,
                                    sm90_opts=_opts(), alibi=True)
        if pv is not None:
            out += [x for x in (pv.long.scheduler, pv.long.attention, pv.short.attention, pv.short.combine)
                    if x is not None]
        out += _choose("bf16", 128, hq=32, hkv=8, causal=True, max_q=max_q, max_k=max_k, paged=True, page_size=16,
                       mainloop="sm80", alibi=True)
    # test_d64_three_warpgroups: "alibi" in heuristics.SM90_THREE_WG_EXTRAS
    saved = heuristics.SM90_THREE_WG_EXTRAS
    heuristics.SM90_THREE_WG_EXTRAS = saved | {"alibi"}
    try:
        for dt in ("bf16", "fp16"):
            for causal, window in ((True, (-1, -1)), (False, (-1, -1)), (True, (150, 0))):
                for n in (1, 3):
                    for pack in (False, None):   # unpacked, and packed (its requests average 319 tokens)
                        out += _choose(dt, 64, hq=16, hkv=4, causal=causal, window=window, max_q=777, max_k=777,
                                       num_splits=n, mainloop=None, alibi=True, pack_gqa=pack, mean_q=319)
    finally:
        heuristics.SM90_THREE_WG_EXTRAS = saved
    return out


def variant_codes() -> dict:
    """The ``VariantCode`` of each variant tests/gpu/test_variant_gpu.py runs (the six examples of
    kernelgen.apps.variant_examples with its parameters, and its fully-masked-rows mask), with the
    test's mask choice (causal or not): the code depends on the snippets and dtypes only."""
    import torch

    from kernelgen.apps import variant_examples as X
    from kernelgen.front.variant import Variant

    i32 = torch.zeros(1, dtype=torch.int32)
    return {
        "alibi": (X.alibi(torch.zeros(16))[0].code, True),
        "softcap": (X.softcap(30.0)[0].code, True),
        "t5_bias": (X.t5_bias(torch.zeros(16, 32), X.t5_buckets())[0].code, True),
        "document_mask": (X.document_mask(i32, i32, i32, i32)[0].code, True),
        "prefix_lm": (X.prefix_lm(i32)[0].code, False),
        "index_arith": (X.index_arith(torch.zeros(16))[0].code, True),
        "masked_rows": (Variant(mask_mod="q_idx % 2 == 0").code, True),
    }


@_all_row_warps
def variant_specs() -> list:
    """tests/gpu/test_variant_gpu.py: each variant's kernels for its varlen prefill (16/4 heads,
    automatic and forced splits), paged decode (automatic and forced splits), pack-GQA decode, mixed
    steps (the classes in turn on sm_90a, one class on sm_80) and decode plans, on both mainloops;
    and the built-in ALiBi / soft-cap kernels its prefill compares with."""
    out = []
    codes = variant_codes()
    for name, (code, causal) in codes.items():
        for mainloop in ("sm90a", "sm80"):
            for n in ((0, 3) if name != "masked_rows" else (1, 5)):
                hq, hkv = (16, 4) if name != "masked_rows" else (8, 2)
                out += _choose("bf16", 128, hq=hq, hkv=hkv, causal=causal, max_q=600 if hq == 16 else 300,
                               max_k=600 if hq == 16 else 900, num_splits=n, mainloop=mainloop, variant=code)
                if name in ("alibi", "softcap"):
                    out += _choose("bf16", 128, hq=16, hkv=4, causal=True, max_q=600, max_k=600, num_splits=n,
                                   mainloop=mainloop, alibi=name == "alibi", cap=30.0 if name == "softcap" else 0.0)
            if name == "masked_rows":
                continue
            for n in (0, 4):
                out += _choose("bf16", 128, hq=32, hkv=8, causal=causal, max_q=1, max_k=3000, paged=True,
                               page_size=16, num_splits=n, mainloop=mainloop, variant=code)
        if name == "masked_rows":
            continue
        if name in ("alibi", "t5_bias", "document_mask"):
            for max_q in (1, 4):
                out += _choose("bf16", 128, hq=32, hkv=4, causal=causal, max_q=max_q, max_k=2100, pack_gqa=True,
                               mainloop=None, variant=code)
        for max_q, max_k in ((900, 3000),):
            pv = heuristics.choose_pair(ARCH, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8,
                                        mask="causal" if causal else "none", max_seqlen_q=max_q, max_seqlen_k=max_k,
                                        paged=True, page_size=16, sm90_opts=_opts(), variant=code)
            if pv is not None:
                out += [x for x in (pv.long.scheduler, pv.long.attention, pv.short.attention, pv.short.combine)
                        if x is not None]
            out += _choose("bf16", 128, hq=32, hkv=8, causal=causal, max_q=max_q, max_k=max_k, paged=True,
                           page_size=16, mainloop="sm80", variant=code)
        # the captured plans (no page size: gathered rows on Hopper): decode, automatic and 4 splits, and mixed
        for n in (0, 4):
            out += _choose("bf16", 128, hq=32, hkv=8, causal=causal, max_q=1, max_k=2048, paged=True,
                           mainloop=None, num_splits=n, variant=code)
        pv = heuristics.choose_pair(ARCH, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8,
                                    mask="causal" if causal else "none", max_seqlen_q=256, max_seqlen_k=2048,
                                    paged=True, sm90_opts=_opts(), variant=code)
        if pv is not None:
            out += [x for x in (pv.long.scheduler, pv.long.attention, pv.short.attention, pv.short.combine)
                    if x is not None]
    # test_kv_range_skips_the_key_blocks_outside_it: prefill and paged decode, both mainloops, splits 0 / 3
    from kernelgen.front.variant import Variant

    narrow = Variant(mask_mod="true", kv_range="kv_lo = kg_max(kv_lo, 128); kv_hi = kg_min(kv_hi, 256);").code
    for mainloop, n in itertools.product(("sm90a", "sm80"), (0, 3)):
        out += _choose("bf16", 128, hq=16, hkv=4, causal=False, max_q=500, max_k=700, num_splits=n,
                       mainloop=mainloop, variant=narrow)
        out += _choose("bf16", 128, hq=16, hkv=4, causal=False, max_q=1, max_k=1367, paged=True, page_size=16,
                       num_splits=n, mainloop=mainloop, variant=narrow)
    return out


def variant_pack_specs() -> list:
    """tests/gpu/test_variant_gpu.py's ``test_hopper_pack_gqa``: the six examples packed on the Hopper
    kernel (16 / 4 heads, requests of up to 700 / 900 tokens) at head dim 128, head dim 64 with three
    splits, paged (pages of 64) with three splits, and fp16 with a window of 200 keys and sinks; each
    call's recipe as the dispatcher decides it and its spill twins (``selection.spills.twin_recipes``:
    which one a call runs is known only once the kernels are built)."""
    from kernelgen.kernels.device import Device
    from kernelgen.selection import decide, spills

    dev = Device("H100", (9, 0), 132, 50 * 2 ** 20, 232448)
    out = []
    for name, (code, causal) in variant_codes().items():
        if name == "masked_rows":
            continue
        for case in ("d128", "d64_split", "paged_split", "d128_window_sinks_fp16"):
            d, n = (64, 3) if case == "d64_split" else (128, 3 if case == "paged_split" else 1)
            window = "window" in case
            mask = "local" if window else ("causal" if causal else "none")
            sig = decide.CallSignature(
                dtype="fp16" if case.endswith("fp16") else "bf16", head_dim=d, head_dim_v=d, num_heads_q=16,
                num_heads_kv=4, mask=mask, window_left=200 if window else -1, layout="soa", max_seqlen_q=700,
                max_seqlen_k=900, paged=case == "paged_split", page_size=64 if case == "paged_split" else 0,
                softcap=False, pack_gqa=True, num_splits=n, short_query_tokens=None, arch=None, tma_ok=True,
                batch=5, rows=1484, variant=code, sinks=window, window_right=(0 if causal else -1) if window else -1)
            st = Settings.from_env()
            r = decide.decide(sig, dev, st)
            for rec in (r, *spills.twin_recipes(r, sig, dev, st)):
                out += [x for x in rec.specs if x is not None and getattr(x, "kind", None) != "quant"]
    return out


def _with_sinks(specs: list) -> list:
    """The sink variants the decider gives a single-class call (``AttentionSpec.sinks``,
    ``CombineSpec.sinks``; the scheduler is shared)."""
    import dataclasses
    return [dataclasses.replace(s, sinks=True) if s.kind in ("attention", "combine") else s for s in specs]


@_all_row_warps
def sinks_specs() -> list:
    """tests/gpu/test_sinks_gpu.py: the sink variants of its causal GQA prefill (automatic and forced
    splits) and paged decode (forced and automatic splits), on both mainloops (the mixed step and
    the plans run the plain kernels, covered above)."""
    out = []
    for mainloop in (None, "sm80"):
        for n in (0, 3):
            out += _with_sinks(_choose("bf16", 128, hq=32, hkv=8, causal=True, max_q=600, max_k=600, num_splits=n,
                                       mainloop=mainloop))
        for n in (0, 4):
            out += _with_sinks(_choose("bf16", 128, hq=32, hkv=8, causal=True, max_q=1, max_k=3000, paged=True,
                                       page_size=16, num_splits=n, mainloop=mainloop))
    return out


@_all_row_warps
def pack_specs() -> list:
    """tests/gpu/test_hopper_pack_gqa_gpu.py: the packed Hopper variants (KERNELGEN_SM90_PACK_GQA=1) of
    its matrix (head dims 64 / 128 in both dtypes, causal and not, qpk 2 / 4 / 8; 96 and 192), its
    split / window / soft-cap calls on one KV head, its paged calls and its sinks call."""
    out = []
    for d, dt, causal, (hq, hkv) in itertools.product((64, 128), ("bf16", "fp16"), (False, True),
                                                      ((8, 4), (8, 2), (8, 1))):
        for n in (1, 3):
            out += _choose(dt, d, hq=hq, hkv=hkv, causal=causal, max_q=400, max_k=520, num_splits=n, sm90_pack=True)
    for n in (1, 3):
        out += _choose("bf16", 96, causal=True, max_q=400, max_k=520, num_splits=n, sm90_pack=True)
        out += _choose("bf16", 192, hq=8, hkv=4, causal=True, max_q=400, max_k=520, num_splits=n, sm90_pack=True)
    for n in (3, 0):
        for causal, window, cap in ((True, (-1, -1), 0.0), (True, (300, -1), 0.0), (False, (200, 100), 30.0)):
            out += _choose("bf16", 128, hq=8, hkv=1, causal=causal, window=window, cap=cap, max_q=1300, max_k=4000,
                           num_splits=n, sm90_pack=True)
    for ps in (1, 16, 64, 256):
        out += _choose("bf16", 128, causal=True, max_q=300, max_k=1000, paged=True, page_size=ps, sm90_pack=True)
    out += _with_sinks(_choose("bf16", 64, hq=64, hkv=8, causal=True, max_q=700, max_k=900, sm90_pack=True))
    for pack in (True, None):   # test_packed_equals_unpacked: both kernels
        out += _choose("bf16", 128, hq=32, hkv=8, causal=True, max_q=1000, max_k=1000, sm90_pack=pack)
    for (hq, hkv, d), (causal, window) in itertools.product(   # test_packed_alibi_per_row_slopes (mean 282)
            ((64, 8, 64), (8, 1, 128)), ((True, (-1, -1)), (False, (-1, -1)), (True, (150, 0)))):
        for pack in (None, False):
            out += _choose("bf16", d, hq=hq, hkv=hkv, causal=causal, window=window, max_q=700, max_k=900,
                           num_splits=1, mainloop=None, alibi=True, pack_gqa=pack, mean_q=282)
    return out


def _with_kv(kv: str, *args, **kw) -> list:
    """The FP8 K/V (``kv``) variants the decider gives an FP8 call of ``_choose``'s arguments, automatic
    (the Hopper kernel for prefill-shaped calls it takes) and forced to the sm_80 mainloop."""
    return _choose(*args, kv_dtype=kv, mainloop=None, **kw) + _choose(*args, kv_dtype=kv, mainloop="sm80", **kw)


@_all_row_warps
def fp8_specs() -> list:
    """tests/gpu/test_fp8_gpu.py: the FP8 K/V variants (automatic: the Hopper kernel for prefill-shaped
    calls; and forced to the sm_80 mainloop) of its causal GQA prefill (bf16 and fp16, e4m3 and e5m2,
    automatic and forced splits), the head-dim / window / soft-cap prefill, paged decode (pages of 16
    and 1 tokens, automatic and forced splits), the mixed steps (the Hopper fused kernel, the classes
    in turn, the sm_80 fused kernel), chunked paged prefill
    (pages of 16, 64, 128 and 5 tokens), the small packed calls, every code through both mainloops and
    the CUDA-graph plans (paged decode, e4m3; mixed prefill + decode, e5m2, without and e4m3 with a
    page size)."""
    out = []
    for dt, kv, n in itertools.product(("bf16", "fp16"), ("e4m3", "e5m2"), (0, 3)):
        out += _with_kv(kv, dt, 128, hq=32, hkv=8, causal=True, max_q=600, max_k=600, num_splits=n)
    for (d, dv), (causal, window, cap) in itertools.product(((64, 64), (96, 96), (192, 128), (256, 256)),
                                                            ((True, (-1, -1), 0.0), (False, (200, 50), 30.0))):
        out += _with_kv("e4m3", "bf16", d, dv, hq=16, hkv=4, causal=causal, window=window, cap=cap, max_q=300,
                        max_k=700)
    for kv, n, ps in itertools.product(("e4m3", "e5m2"), (0, 4), (16, 1)):
        out += _with_kv(kv, "bf16", 128, hq=32, hkv=8, causal=True, max_q=1, max_k=3000, paged=True,
                        page_size=ps, num_splits=n)
    out += _with_kv("e4m3", "bf16", 128, hq=32, hkv=8, causal=True, max_q=900, max_k=3000, paged=True, page_size=16)
    for kv, n, ps in itertools.product(("e4m3", "e5m2"), (0, 3), (16, 64, 128, 5)):   # chunked paged prefill
        out += _with_kv(kv, "bf16", 128, hq=32, hkv=8, causal=True, max_q=700, max_k=3000, paged=True, page_size=ps,
                        num_splits=n)
    # the register-conversion decode tile with a window / soft-cap, head dims 64-256, small pages
    for (d, dv, ps), (window, cap) in itertools.product(((64, 64, 16), (96, 96, 8), (128, 128, 5), (128, 64, 16),
                                                         (192, 128, 16), (256, 256, 8)),
                                                        (((-1, -1), 0.0), ((300, 0), 20.0))):
        out += _with_kv("e4m3", "bf16", d, dv, hq=16, hkv=4, causal=True, window=window, cap=cap, max_q=1,
                        max_k=2500, paged=True, page_size=ps)
    out += _with_kv("e4m3", "fp16", 128, hq=16, hkv=2, causal=False, max_q=40, max_k=900)
    out += _with_kv("e4m3", "bf16", 64, hq=8, hkv=2, causal=False, max_q=9, max_k=100)
    for kv, max_q, ps in (("e4m3", 1, 0), ("e5m2", 256, 0), ("e4m3", 256, 16)):   # test_plan_graph_replays_...
        out += _with_kv(kv, "bf16", 128, hq=32, hkv=8, causal=True, max_q=max_q, max_k=2048, paged=True, page_size=ps)
    out += _with_sinks(_with_kv("e4m3", "bf16", 64, hq=16, hkv=4, causal=True, max_q=300, max_k=700, num_splits=1)
                       + _with_kv("e4m3", "bf16", 64, hq=16, hkv=4, causal=True, max_q=1, max_k=2000, paged=True,
                                  page_size=16, num_splits=3))          # test_sinks_with_an_fp8_cache
    for dt, kv in itertools.product(("bf16", "fp16"), ("e4m3", "e5m2")):   # every code, forced to the Hopper kernel
        out += _choose(dt, 128, hq=2, hkv=2, causal=True, max_q=1, max_k=1, kv_dtype=kv)
    # the mixed steps' Hopper fused kernel and classes in turn (test_mixed_prefill_decode_step, the mixed_hopper plan)
    for kv, d, mask, max_q in (("e4m3", 128, "causal", 900), ("e5m2", 64, "local", 900), ("e4m3", 256, "causal", 900),
                               ("e4m3", 128, "causal", 256)):
        out += _mixed("bf16", d, num_heads_q=32, num_heads_kv=8, mask=mask, max_seqlen_q=max_q,
                      max_seqlen_k=6000 if max_q == 900 else 2048, paged=True, page_size=16, kv_dtype=kv)
    # ... and the sm_80 fused kernel's (the mixed step forced to sm_80; the mixed plan without a page size)
    for kv, max_k in (("e4m3", 6000), ("e5m2", 2048)):
        fv = heuristics.choose_fused(ARCH, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                     max_seqlen_k=max_k, paged=True, num_sms=132, kv_dtype=kv)
        out += [x for x in (fv.scheduler, fv.fused, fv.combine) if x is not None]
    return out


@_all_row_warps
def fp8_q_specs() -> list:
    """tests/gpu/test_fp8_mma_gpu.py: an e4m3 q (automatic choice: the FP8 tensor-core variant for its
    prefill calls at d 64 and 128, causal and not, automatic and 3 splits; window + soft-cap + sinks
    with e4m3 and e5m2 caches; chunked paged prefill at pages of 16, 32, 56, 64 and 96; the prefill plan) and the
    converted-q calls (paged decode, d 96, forced sm_80; the decode plan); d 256's tensor-core tile."""
    out = []
    kw = dict(kv_dtype="e4m3", q_dtype="e4m3", mainloop=None)
    for d, causal, n in itertools.product((64, 128), (True, False), (0, 3)):
        out += _choose("bf16", d, hq=16, hkv=4, causal=causal, max_q=600, max_k=600, num_splits=n, **kw)
    for causal, n in itertools.product((True, False), (1, 3)):   # the packed tests at d 64 and 128, both ways
        for pack in (True, False):
            out += _with_sinks(_choose("bf16", 128, hq=16, hkv=2, causal=causal, max_q=700, max_k=900,
                                       num_splits=n, pack_gqa=pack, **kw))
            out += _with_sinks(_choose("bf16", 64, hq=32, hkv=4, causal=causal, max_q=700, max_k=900,
                                       num_splits=n, pack_gqa=pack, **kw))
    out += _choose("bf16", 128, hq=2, hkv=1, causal=True, max_q=256, max_k=256, kv_dtype="e4m3", q_dtype="e4m3")
    out += _choose("bf16", 128, hq=2, hkv=1, causal=False, max_q=256, max_k=256, kv_dtype="e4m3", q_dtype="e4m3")
    for kv in ("e4m3", "e5m2"):
        for dt in ("bf16", "fp16"):
            out += _with_sinks(_choose(dt, 128, hq=16, hkv=4, causal=False, window=(200, 50), cap=30.0, max_q=300,
                                       max_k=700, kv_dtype=kv, q_dtype="e4m3", mainloop=None))
    for ps, causal in ((16, True), (64, True), (32, False), (56, True), (96, False)):
        out += _choose("bf16", 128, hq=32, hkv=8, causal=causal, max_q=700, max_k=3000, paged=True, page_size=ps, **kw)
    out += _choose("bf16", 128, hq=16, hkv=4, causal=True, max_q=1, max_k=3000, paged=True, page_size=16, **kw)
    for causal in (True, False):    # d 256: the tensor-core variant's 128-key tile (one split: see the test)
        out += _choose("bf16", 256, hq=16, hkv=4, causal=causal, max_q=300, max_k=700, num_splits=1, **kw)
    out += _choose("bf16", 96, hq=16, hkv=4, causal=True, max_q=300, max_k=700, **kw)   # q converted
    out += _choose("bf16", 128, hq=16, hkv=4, causal=True, max_q=300, max_k=700, kv_dtype="e4m3", mainloop="sm80")
    for max_q in (250, 1):   # test_plan_captured_in_a_cuda_graph
        out += _choose("bf16", 128, hq=16, hkv=4, causal=True, max_q=max_q, max_k=2048, paged=True, page_size=64, **kw)
    return out


@_all_row_warps
def quant_q_specs() -> list:
    """tests/gpu/test_quant_q_gpu.py: a 16-bit q quantised for the FP8 tensor-core variant (the
    variant an e4m3 q of the same call gets: its output dtype is q's), its parametrised prefills and
    the captured prefill plan."""
    out = []
    kw = dict(kv_dtype="e4m3", q_dtype="e4m3", mainloop=None)
    for d, causal, dt, n in ((64, True, "bf16", 0), (128, True, "bf16", 0), (128, False, "fp16", 0),
                             (128, True, "bf16", 3), (256, True, "bf16", 1), (256, False, "fp16", 1)):
        out += _choose(dt, d, hq=16, hkv=4, causal=causal, max_q=600, max_k=600, num_splits=n, **kw)
    out += _choose("bf16", 128, hq=16, hkv=4, causal=True, max_q=250, max_k=2048, paged=True, page_size=64, **kw)
    return out


def sanitize_specs() -> list:
    """tools/sanitize.sh's subset (``fuzz.sanitize_cases``, each under its own environment): the
    kernels its plain run and the sanitizers launch (``fuzz.case_specs``)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import fuzz
    out = []
    for _, c in fuzz.sanitize_cases():
        with fuzz.case_environment(c.pop("env", {})):
            out += fuzz.case_specs(c, ARCH, 132)
    return out


#: the groups above by name (``--only``)
GROUPS = {"head_dim": head_dim_specs, "window_softcap": window_softcap_specs,
          "paged_split_mixed": paged_split_mixed_specs, "alibi": alibi_specs, "sinks": sinks_specs,
          "variant": variant_specs, "fp8": fp8_specs, "fp8_q": fp8_q_specs, "quant_q": quant_q_specs,
          "pack": pack_specs, "variant_pack": variant_pack_specs, "sanitize": sanitize_specs}


def specs(only=None) -> list:
    """Every spec of the groups named in ``only`` (default: all of ``GROUPS``), first-seen order,
    duplicates removed."""
    return list(dict.fromkeys(s for g in (only or GROUPS) for s in GROUPS[g]()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPU count)")
    ap.add_argument("--cache-dir", default=None, help="kernel cache (default: $KERNELGEN_CACHE_DIR or the user cache)")
    ap.add_argument("--list", action="store_true", help="print the specs' names, compile nothing")
    ap.add_argument("--only", default=None, help="comma-separated groups of " + ", ".join(GROUPS) + " (default: all)")
    a = ap.parse_args(argv)
    if a.only is not None and not a.only.strip():   # (an empty list meant every group)
        ap.error("--only: name at least one group (" + ", ".join(GROUPS) + ")")
    only = a.only.split(",") if a.only else None
    unknown = sorted(set(only or ()) - set(GROUPS))
    if unknown:
        ap.error(f"--only: unknown group(s) {unknown}; known: {sorted(GROUPS)}")
    s = specs(only)
    if a.list:
        print("\n".join(x.name for x in s))
        return 0
    from kernelgen.jit import cache, warmup

    compiled, cached = warmup.warmup(s, a.cache_dir or cache.default_cache_dir(), jobs=a.jobs, progress=False)
    print(f"warm: {len(s)} specs, {compiled} compiled, {cached} cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
