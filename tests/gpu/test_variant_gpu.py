"""GPU: user attention variants (``kernelgen.Variant``) against the float64 reference, which takes the
same variant as Python callables (``attention_reference(..., score_mod=, mask_mod=)``).  The five
examples of kernelgen.apps.variant_examples: ALiBi as a score_mod (also equal to the built-in
``alibi_slopes``), soft-cap as a score_mod (also equal to the built-in ``softcap``), a T5-style
bucketed bias from a (heads, buckets) table, a document mask from per-token document ids with a
kv_range, and a prefix-LM mask (``causal=False`` plus mask_mod, with a kv_range); each on varlen
prefill, paged decode (automatic and forced split-KV), a mixed prefill + decode step (the classes
in turn on sm_90a, one class elsewhere: no fused kernel takes a variant), on the Hopper mainloop
(sm_90a) and the sm_80 one (forced ``arch=``); pack-GQA decode (the head of each packed row); rows
whose keys are all masked (out 0, lse -inf, through the split-KV combine too); a too-narrow
kv_range (the key blocks outside it skipped); every example in AttentionPlans (decode, decode with
forced splits, mixed) captured in a CUDA graph and replayed with new tensor values; pack-GQA on the
Hopper kernel (``pack_gqa=True``: each packed row's own head and position); and a never-seen
variant's first call (the sm_80 kernel while the Hopper kernel builds) and the call after
``kernelgen.wait_for_compiles()`` (the Hopper kernel).  Outputs and LSE are
NaN-poisoned; tolerances from ``reference.tolerance``.

    pytest -q -p no:xdist tests/gpu/test_variant_gpu.py
"""
import dataclasses
import re

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps import variant_examples as X
from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.front.plan import AttentionPlan
from kernelgen.launch import fused
from kernelgen.selection import heuristics

from gpu_helpers import (HOPPER, capture, check, decode_lengths, draw_lengths, make_packed,  # noqa: E402
                         plan_buffers, prepared, replay, write_lengths)
from test_fused_gpu import mixed_lengths  # noqa: E402 (tests/gpu is on sys.path)
from test_paged_decode_gpu import make_paged  # noqa: E402

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
ARCHS = ["sm_80", "sm_90a"]


def _arch(arch):
    if arch == "sm_90a" and not HOPPER:
        pytest.skip("the Hopper mainloop needs an sm_90a device")
    return arch


def make(name, hq, qlens, klens, seed=0):
    """(variant, score_mod, mask_mod, causal) of example ``name`` for a batch of these lengths,
    with CUDA tensors (random values from ``seed``)."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    if name == "alibi":
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)])[torch.randperm(hq, generator=g)]
        return (*X.alibi(slopes.contiguous().cuda()), True)
    if name == "softcap":
        return (*X.softcap(30.0), True)
    if name == "t5_bias":
        return (*X.t5_bias((torch.randn(hq, 32, generator=g) * 2).cuda(), X.t5_buckets().cuda()), True)
    if name == "document_mask":
        docs = []
        for n in klens:
            lens, left = [], n
            while left > 0:
                x = int(min(left, rng.integers(1, max(2, n // 2) + 1)))
                lens.append(x)
                left -= x
            docs.append(lens)
        return (*X.document_mask(*X.document_ids(docs)), True)
    if name == "index_arith":
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)])
        return (*X.index_arith(slopes.cuda()), True)
    if name == "prefix_lm":
        pl = torch.tensor([int(rng.integers(0, n + 1)) if n else 0 for n in klens], dtype=torch.int32)
        return (*X.prefix_lm(pl.cuda()), False)
    raise AssertionError(name)


def _builtin_kw(name, variant):
    """The built-in arguments an example equals (None for the others)."""
    if name == "alibi":
        return {"alibi_slopes": variant.tensors["slopes"]}
    if name == "softcap":
        return {"softcap": 30.0}
    return None


@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_varlen_prefill(name, arch, num_splits):
    """Varlen prefill (16/4 heads, d 128; a request with seqlen_q < seqlen_k, an empty one, and one of
    queries with no key, whose tiles still run the variant's kv_range: zero output, -inf LSE)."""
    arch = _arch(arch)
    qlens, klens = [600, 300, 0, 450, 77, 5], [600, 500, 10, 450, 77, 0]
    hq, hkv, d = 16, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 7)
    var, sm, mm, causal = make(name, hq, qlens, klens, seed=1)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=sm, mask_mod=mm)
    for _ in range(2):                                  # validating path, then the prepared call
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
        o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                            return_lse=True, out=out, arch=arch, num_splits=num_splits,
                                            variant=var)
        torch.cuda.synchronize()
        check(o, lse, ref, ref_lse, BF16)
        name_ = prepared().attn.name
        assert "_var" in name_ and ("_wgmma" in name_) == (arch == "sm_90a"), name_
        if num_splits:
            assert prepared().combine is not None
    builtin = _builtin_kw(name, var)
    if builtin is not None:   # the same attention as the built-in argument (other kernels: not bitwise)
        ob, lb = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                            return_lse=True, arch=arch, num_splits=num_splits, **builtin)
        # the built-in soft-cap is tanh.approx, the example kg_tanh: their difference within its bound
        _, _, bound, lbound = attention_reference(q, k, v, cu_q, cu_k, causal=causal, error_bounds=True, **builtin)
        check(o, lse, ob.double(), lb.double(), BF16, bound=bound, lse_bound=lbound)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_d64_three_warpgroups(name, num_splits, monkeypatch):
    """Head dim 64 ("variant" in heuristics.SM90_THREE_WG_EXTRAS): each example on the Hopper path's
    192-row tile (three consumer warpgroups of 160 registers) where that kernel builds without
    spills and the snippets call no MUFU function, else on two warpgroups (selection.spills,
    heuristics.sm90_heavy); GQA 16/4 heads, a request with seqlen_q <
    seqlen_k and an empty one; one split and three (split-KV and the combine)."""
    if not HOPPER:
        pytest.skip("the three-warpgroup tile is the Hopper path's")
    from kernelgen.jit import cache
    from kernelgen.selection import spills
    monkeypatch.setenv("KERNELGEN_TIERED_COMPILE", "0")
    qlens, klens = [700, 300, 0, 451], [700, 520, 10, 451]
    hq, hkv, d = 16, 4, 64
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 17)
    var, sm, mm, causal = make(name, hq, qlens, klens, seed=2)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=sm, mask_mod=mm)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                        return_lse=True, out=out, num_splits=num_splits, variant=var)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, BF16)
    from kernelgen.jit import runtime
    spec = next(x.spec for x in runtime.loaded_kernels() if x.spec.name == prepared().attn.name)
    assert "_var" in spec.name and "_wgmma" in spec.name, spec.name
    assert ("_split" in spec.name) == (num_splits > 1), spec.name
    # the three-warpgroup kernel as the dispatcher builds it (a snippet of MUFU functions with option
    # "m", heuristics.with_mask_split); two warpgroups where that build spills (the soft-cap example's
    # kg_tanh: 4-8 bytes, NVRTC 13.0)
    three = dataclasses.replace(spec, tile=dataclasses.replace(spec.tile, block_m=192, num_warps=12),
                                sm90_opts=heuristics.with_mask_split(spec.sm90_opts, spec.softcap, spec.variant, 12))
    off = var.code.transcendental and "transcendental" not in heuristics.SM90_THREE_WG_EXTRAS   # (a test's switch)
    assert spec.tile.num_warps == (8 if off or spills.spills(three, build=True) else 12), spec.name
    assert cache.get_cache().lookup(spec) is not None


@pytest.mark.parametrize("case", ["d128", "d64_split", "paged_split", "d128_window_sinks_fp16"])
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_hopper_pack_gqa(name, case, monkeypatch):
    """Pack-GQA on the Hopper kernel with a user variant (``pack_gqa=True``): a tile's rows are
    (token, query head) pairs of one KV head, and each row's snippets see its own query head and
    position (common/user_mod.cuh), its kv_range the tile's positions (mainloop_sm90.cuh).  GQA 16/4
    heads, a request with seqlen_q < seqlen_k, an empty one and one whose keys outnumber its queries
    27 to 1; head dim 128 unsplit, head dim 64 (three warpgroups where the variant's kernel does not
    spill) with three splits, paged K/V (pages of 64 tokens) with three splits, and fp16 with a
    sliding window of 200 keys and sinks at head dim 128 (a kernel that spills packed takes its
    unpacked twin, selection.spills: then the name has no "_pack_")."""
    if not HOPPER:
        pytest.skip("pack-GQA with a user variant is the Hopper path's")
    monkeypatch.setenv("KERNELGEN_TIERED_COMPILE", "0")   # the Hopper kernel on the first call
    qlens, klens = [700, 300, 0, 451, 33], [700, 520, 10, 451, 900]
    hq, hkv = 16, 4
    d, num_splits = (64, 3) if case == "d64_split" else (128, 3 if case == "paged_split" else 1)
    if case == "paged_split":
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 64, 23)
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        args, kw = (q, kc, vc, cu_q, None), dict(seqused_k=used, page_table=pt)
    else:
        q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 23)
        args, kw = (q, k, v, cu_q, cu_k), {}
    dt = torch.float16 if case.endswith("fp16") else BF16
    if dt != BF16:
        q, k, v = (x.to(dt) for x in (q, k, v))
        args = (q, k, v, *args[3:])
    var, sm, mm, causal = make(name, hq, qlens, klens, seed=3)
    extra = {}
    if "window" in case:
        extra = dict(window_size=(200, -1 if not causal else 0),
                     sinks=torch.randn(hq, generator=torch.Generator().manual_seed(5)).cuda())
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=sm, mask_mod=mm, **extra)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=dt, device="cuda")
    o, lse = kernelgen.varlen_attention(*args, max(qlens), max(klens), causal=causal, return_lse=True, out=out,
                                        num_splits=num_splits, pack_gqa=True, variant=var, **kw, **extra)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, dt)
    name_ = prepared().attn.name
    assert "_wgmma" in name_ and "_var" in name_, name_
    assert "_pack_" in name_ or "window" in case, name_   # (a windowed packed kernel may spill: its twin)
    assert ("_split" in name_) == (num_splits > 1), name_


@pytest.mark.parametrize("num_splits", [0, 4])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_paged_decode(name, arch, num_splits):
    """Paged decode (32/8 heads, pages of 16), automatic and forced splits, requests with no key."""
    arch = _arch(arch)
    n = 20
    qlens, klens = decode_lengths(n, seed=5)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=9)
    var, sm, mm, causal = make(name, hq, qlens, klens, seed=2)
    out = torch.full((n, hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, max(klens), seqused_k=used, page_table=pt,
                                        causal=causal, return_lse=True, out=out, arch=arch, num_splits=num_splits,
                                        variant=var)
    torch.cuda.synchronize()
    assert "_var" in prepared().attn.name
    if num_splits:
        assert prepared().combine is not None
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=sm, mask_mod=mm)
    check(o, lse, ref, ref_lse, BF16)
    assert torch.all(o[3] == 0) and torch.all(o[10] == 0)


@pytest.mark.parametrize("max_q", [1, 4])
@pytest.mark.parametrize("name", ["alibi", "t5_bias", "document_mask"])
def test_decode_pack_gqa(name, max_q):
    """Packed K/V, decode-shaped, pack-GQA tiles (each packed row has its own query head)."""
    n = 12
    rng = np.random.default_rng(3)
    qlens = [max_q] * n
    klens = [int(x) + max_q for x in rng.integers(0, 2000, size=n)]
    hq, hkv, d = 32, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 5)
    var, sm, mm, causal = make(name, hq, qlens, klens, seed=3)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max_q, max(klens), causal=causal, return_lse=True,
                                        out=out, pack_gqa=True, variant=var)
    torch.cuda.synchronize()
    assert "_pack" in prepared().attn.name and "_var" in prepared().attn.name, prepared().attn.name
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=sm, mask_mod=mm)
    check(o, lse, ref, ref_lse, BF16)


@pytest.mark.parametrize("arch", ["sm_80", None])
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_mixed_step(name, arch, monkeypatch):
    """A paged step mixing prefill chunks and decodes: the classes in turn on sm_90a (arch None),
    else one class; never a fused kernel.  (The decision itself: no tiered first call, which would
    run one sm_80 class while the Hopper kernel builds; test_first_call_of_a_new_variant.)"""
    monkeypatch.setenv("KERNELGEN_TIERED_COMPILE", "0")
    rng = np.random.default_rng(13)
    qlens, klens = mixed_lengths(rng, n_decode=24, n_prefill=2, max_ctx=3000)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=13)
    var, sm, mm, causal = make(name, hq, qlens, klens, seed=4)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                        page_table=pt, causal=causal, return_lse=True, out=out, arch=arch,
                                        variant=var)
    torch.cuda.synchronize()
    prep = prepared()
    assert not isinstance(prep, fused.PreparedFusedCall)
    if arch is None and HOPPER:
        assert isinstance(prep, fused.PreparedPairCall) or "_wgmma" in prep.attn.name, type(prep)
    else:
        assert not isinstance(prep, fused.PreparedPairCall) and "_var" in prep.attn.name, prep.attn.name
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=sm, mask_mod=mm)
    check(o, lse, ref, ref_lse, BF16)


def test_first_call_of_a_new_variant(monkeypatch):
    """A never-seen variant (a random constant in its snippet, so no cache has its kernels) on the
    automatic arch: its first call (on an H200 the sm_80 kernel, while the Hopper kernel builds in
    the background: docs/variants.md, "First call") equals the float64 reference; after
    ``wait_for_compiles()`` the call runs the Hopper kernel, equal to the reference too."""
    from kernelgen.jit import runtime
    from kernelgen.selection import tiered

    monkeypatch.delenv("KERNELGEN_TIERED_COMPILE", raising=False)
    monkeypatch.delenv("KERNELGEN_ARCH", raising=False)
    c = 0.5 + float(np.random.default_rng().integers(1, 10 ** 9)) * 1e-9
    var = kernelgen.Variant(score_mod=f"score * {c:.9f}f")
    qlens, klens = [600, 300, 450], [600, 500, 450]
    hq, hkv, d = 16, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 11)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True,
                                       score_mod=lambda s, b, h, qi, kj, lq, lk: s * float(f"{c:.9f}"))
    before = {id(x) for x in runtime.loaded_kernels()}
    for i in range(2):
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
        o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True,
                                            return_lse=True, out=out, variant=var)
        torch.cuda.synchronize()
        check(o, lse, ref, ref_lse, BF16)
        if i == 0:
            first = [x.spec for x in runtime.loaded_kernels() if id(x) not in before and x.spec.kind == "attention"]
            built = kernelgen.wait_for_compiles()
            if HOPPER:   # the sm_80 kernel ran, the Hopper kernel was built behind it
                assert first and not any(tiered.is_slow(s) for s in first), [s.name for s in first]
                assert any("_wgmma" in n and "_var" in n for n in built), built
    hopper = [x.spec for x in runtime.loaded_kernels() if tiered.is_slow(x.spec) and x.spec.variant == var.code]
    assert hopper if HOPPER else not hopper
    if HOPPER:
        assert "_wgmma" in prepared().attn.name and "_var" in prepared().attn.name, prepared().attn.name


@pytest.mark.parametrize("num_splits", [1, 5])
@pytest.mark.parametrize("arch", ARCHS)
def test_fully_masked_rows(arch, num_splits):
    """A mask_mod that hides every key of the odd query rows: out 0 and lse -inf there, also when
    the split-KV combine merges the partials (every split's lse is -inf)."""
    arch = _arch(arch)
    qlens, klens = [300, 129, 1], [700, 129, 900]
    hq, hkv, d = 8, 2, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 8)
    var = kernelgen.Variant(mask_mod="q_idx % 2 == 0")
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, return_lse=True,
                                        out=out, arch=arch, num_splits=num_splits, variant=var)
    torch.cuda.synchronize()
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True,
                                       mask_mod=lambda b, h, qi, kj, lq, lk: (qi % 2 == 0) & (kj >= 0))
    check(o, lse, ref, ref_lse, BF16)
    assert torch.isneginf(lse[:, 1]).all() and torch.all(o[1] == 0)


@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shape", ["prefill", "decode"])
def test_kv_range_skips_the_key_blocks_outside_it(shape, arch, num_splits):
    """``kv_range`` is a promise (docs/variants.md): key blocks outside [kv_lo, kv_hi) are not loaded.
    A deliberately too-narrow range, [128, 256) for every tile, with a mask_mod that keeps every key:
    the output is attention over keys 128-255 only (128 is a block edge of every tile, 16 to 128
    keys), not over all keys; so the blocks outside the range were skipped, on both mainloops, with
    and without split-KV (a split left without blocks gives an empty partial)."""
    arch = _arch(arch)
    hq, hkv, d = 16, 4, 128
    var = kernelgen.Variant(mask_mod="true", kv_range="kv_lo = kg_max(kv_lo, 128); kv_hi = kg_min(kv_hi, 256);")

    def in_range(batch, head, q_idx, kv_idx, q_len, kv_len):
        return (kv_idx >= 128) & (kv_idx < 256)

    if shape == "prefill":
        qlens, klens = [300, 77, 500], [700, 400, 500]
        q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 11)
        o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), return_lse=True, arch=arch,
                                            num_splits=num_splits, variant=var)
    else:
        qlens, klens = [1] * 12, [300 + 97 * i for i in range(12)]
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=12)
        o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, max(klens), seqused_k=used, page_table=pt,
                                            return_lse=True, arch=arch, num_splits=num_splits, variant=var)
        k, v, cu_k = gather_paged(kc, vc, pt, used)
    torch.cuda.synchronize()
    name = prepared().attn.name
    block_n = int(re.search(r"n(\d+)w", name).group(1))
    assert "_var" in name and 128 % block_n == 0, name   # 128 a block edge of the tile the call ran
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=False, mask_mod=in_range)
    check(o, lse, ref, ref_lse, BF16)
    full, _ = attention_reference(q, k, v, cu_q, cu_k, causal=False)
    assert (o.double() - full.to(BF16).double()).abs().max() > 0.05   # not the attention over every key


#: The captured plans of ``test_plan_graph_replays_with_new_tensor_values``: (max_seqlen_q, num_splits).
GRAPH_PLANS = {"decode": (1, 0), "decode_split4": (1, 4), "mixed": (256, 0)}


@pytest.mark.parametrize("kind", list(GRAPH_PLANS))
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_plan_graph_replays_with_new_tensor_values(name, kind):
    """Each example in an AttentionPlan captured in a CUDA graph and replayed with new lengths and new
    values in the variant's same tensors (new slopes, bias table, document ids, prefix lengths): the
    kernels read them at replay.  decode: a paged decode plan (automatic splits); decode_split4: the
    same with four forced splits (the combine after the variant's partials); mixed: a mixed prefill
    + decode plan (two requests of 5-249 query tokens, the classes in turn on sm_90a).  A tensor
    sized by the step's keys (the document ids) is allocated for the plan's capacity and each step
    writes its prefix, as a serving engine would.  Rows past the batch stay NaN."""
    hq, hkv, d, ps, cap = 32, 8, 128, 16, 16
    max_ctx = 2048
    max_q, splits = GRAPH_PLANS[kind]
    decode = max_q == 1
    max_tq = cap if decode else 640
    kc, vc, q, cu_q, used, pt, out, lse = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, cache_seed=21)
    var, _, _, causal = make(name, hq, [1] * cap, [max_ctx] * cap, seed=5)   # capacity-sized tensors
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=max_tq, max_seqlen_q=max_q, max_seqlen_k=max_ctx, paged=True, causal=causal,
                         num_splits=splits, variant=var)
    attn = [s for s in plan.recipe.specs if getattr(s, "kind", "") == "attention"]
    assert attn and all(s.variant == var.code for s in attn)
    if splits:
        assert any(s.split for s in attn)
    rng = np.random.default_rng(17)

    def new_step(seed):
        batch, lq, ctx = draw_lengths(rng, cap, max_ctx, prefill=not decode, ctx_high=max_ctx - 256)
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        q.copy_(torch.randn(max_tq, hq, d, device="cuda").to(BF16))
        fresh, sm, mm, _ = make(name, hq, list(lq), list(ctx), seed=seed)   # new values, same tensors
        for tname, t in var.tensors.items():
            f = fresh.tensors[tname].reshape(-1)
            assert f.numel() <= t.numel(), (tname, f.numel(), t.numel())
            t.reshape(-1)[: f.numel()].copy_(f)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return batch, int(lq.sum()), sm, mm

    def run():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse)

    new_step(100)
    graph = capture(run)                           # warm (validate, prepare, compile; the fast path), capture
    for i in range(3):
        batch, tq, sm, mm = new_step(200 + i)
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        ref, ref_lse = attention_reference(q[:tq], k, v, cu_q[: batch + 1], cu_k, causal=causal, score_mod=sm,
                                           mask_mod=mm)
        check(out[:tq], lse[:, :tq], ref, ref_lse, BF16)
        assert torch.isnan(out[tq:]).all()


def _row_part_forms(hq, kmax):
    """Snippets whose results have a per-row part (kg_rowcol: an index's float copy times a float)
    or a causal distance under kg_abs, with their float64 references: the forms apply_user's
    HOIST / NONNEG take apart (the first two fold, the others take the exact fallbacks)."""
    g = torch.Generator().manual_seed(21)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)])[torch.randperm(hq, generator=g)]
    w = torch.rand(kmax, generator=g) * 0.02
    temp = 0.5 + torch.rand(hq, generator=g)
    sl, wd, td = slopes.double(), w.double(), temp.double()
    d_ = lambda qi, kj, lq, lk: qi + lk - lq - kj   # noqa: E731  (bottom-right distance)
    return {
        # linear ALiBi: equal to the built-in under a causal mask (the distance is never negative there)
        "linear": ("score - slopes[head] * (q_idx + kv_len - q_len - kv_idx)",
                   lambda s, b, h, qi, kj, lq, lk: s - sl.to(s.device)[h] * d_(qi, kj, lq, lk)),
        "negated_distance": ("score - kg_abs(kv_idx - q_idx + q_len - kv_len) * slopes[head] * 0.5f",
                             lambda s, b, h, qi, kj, lq, lk: s - d_(qi, kj, lq, lk).abs() * sl.to(s.device)[h] * 0.5),
        # a per-key float times an index: the row parts differ from key to key (added back)
        "per_key_factor": ("score - w[kv_idx] * (q_idx - kv_idx) + 0.25f",
                           lambda s, b, h, qi, kj, lq, lk: s - wd.to(s.device)[kj] * (qi - kj) + 0.25),
        # two returns: a row's keys mix a score and a kg_rowcol
        "two_returns": ("if (q_idx & 1) return score;\n"
                        "return score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx);",
                        lambda s, b, h, qi, kj, lq, lk: torch.where((qi & 1) == 1, s,
                                                                    s - sl.to(s.device)[h] * d_(qi, kj, lq, lk).abs())),
        # kept parts through auto locals, compound assignment and a plain float in between
        "auto_locals": ("auto bias = slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx);\n"
                        "bias *= 2.f; bias += 0.125f;\n"
                        "return score - bias;",
                        lambda s, b, h, qi, kj, lq, lk: s - (sl.to(s.device)[h] * d_(qi, kj, lq, lk).abs() * 2 + 0.125)),
        # a score of another scale: a constant cap (folded into the exponent), a per-head factor
        # (positive only at run time), a negative factor (the scores convert to natural units)
        "tanh_cap": ("4.f * tanhf(score * 0.25f)", lambda s, b, h, qi, kj, lq, lk: 4.0 * torch.tanh(s * 0.25)),
        "head_factor": ("score * temp[head]", lambda s, b, h, qi, kj, lq, lk: s * td.to(s.device)[h]),
        "negated": ("return -score * 0.5f;", lambda s, b, h, qi, kj, lq, lk: -s * 0.5),
    }, {"slopes": slopes.cuda(), "w": w.cuda(), "temp": temp.cuda()}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("form", ["linear", "negated_distance", "per_key_factor", "two_returns", "auto_locals",
                                  "tanh_cap", "head_factor", "negated"])
def test_row_parts_and_the_causal_distance(form, num_splits, causal):
    """A score_mod's per-row part leaves the scores (the Hopper softmax takes it out of the max and
    the exponent), a score's factor stays in the exponent when it is one positive value, and kg_abs
    of the causal distance is the distance below the diagonal (common/user_mod.cuh,
    apply_user_hoist, kg_sym's nn): the output and the LSE equal the float64
    reference for each form, on varlen requests with seqlen_q < seqlen_k, several key blocks below
    the diagonal, split or not; with a kg_abs in the mask_mod too (a window written as a mask)."""
    _arch("sm_90a")
    qlens, klens = [600, 300, 0, 450, 77], [600, 500, 10, 450, 77]
    hq, hkv, d = 16, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 8)
    forms, tensors = _row_part_forms(hq, max(klens))
    snippet, ref_mod = forms[form]
    masked = form == "auto_locals"
    mask_mod = "kg_abs(q_idx + kv_len - q_len - kv_idx) < 200" if masked else None
    ref_mask = (lambda b, h, qi, kj, lq, lk: (qi + lk - lq - kj).abs() < 200) if masked else None
    var = kernelgen.Variant(score_mod=snippet, mask_mod=mask_mod, tensors=tensors, name=f"rowpart_{form}")
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=ref_mod, mask_mod=ref_mask)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                        return_lse=True, out=out, arch="sm_90a", num_splits=num_splits, variant=var)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, BF16)
    assert "_wgmma" in prepared().attn.name


@pytest.mark.parametrize("arch", ARCHS)
def test_an_index_product_in_a_mask_is_the_float_product(arch):
    """``kv_idx * 0.01f`` in a mask_mod is the float product (the index's exact float copy times
    0.01f, rounded once), as with int indices: a chunked-attention mask written with floorf keeps
    exactly the keys of the query's chunk of 100 positions (the reference computes the same float32
    products; the row / key parts of a kg_rowcol would round differently at chunk borders)."""
    arch = _arch(arch)
    qlens, klens = [600, 300, 450], [600, 500, 450]
    hq, hkv, d = 16, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 9)
    var = kernelgen.Variant(mask_mod="floorf(kv_idx * 0.01f) == floorf((q_idx + kv_len - q_len) * 0.01f)", name="chunk100")
    c = torch.tensor(0.01, dtype=torch.float32)

    def chunk(x):
        return torch.floor(x.to(torch.float32) * c.to(x.device))

    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True,
                                       mask_mod=lambda b, h, qi, kj, lq, lk: chunk(kj) == chunk(qi + lk - lq))
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, return_lse=True,
                                        out=out, arch=arch, variant=var)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, BF16)


@pytest.mark.parametrize("num_splits", [0, 3])
def test_a_per_key_factor_on_the_score(num_splits):
    """``score * temp[kv_idx]`` with temp 1 but for a few keys: the lanes of one query row hold
    different keys, some all at factor 1 (raw units) and some not; apply_user_hoist takes one unit
    for the warp (softmax_scores reduces the row max over the quad before each lane applies its
    factor), so every row matches the float64 reference."""
    _arch("sm_90a")
    qlens, klens = [300, 150, 0, 77], [300, 233, 10, 77]
    hq, hkv, d = 16, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 9)
    temp = torch.ones(max(klens), dtype=torch.float32)
    temp[[5, 37, 101, 200]] = torch.tensor([0.5, 1.5, 2.0, 0.25])
    td = temp.double()
    var = kernelgen.Variant(score_mod="score * temp[kv_idx]", tensors={"temp": temp.cuda()}, name="per_key_factor")
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True,
                                       score_mod=lambda s, b, h, qi, kj, lq, lk: s * td.to(s.device)[kj])
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True,
                                        return_lse=True, out=out, arch="sm_90a", num_splits=num_splits, variant=var)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, BF16)
