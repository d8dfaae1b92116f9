"""GPU: ALiBi (``alibi_slopes=``, FlashAttention-2's convention) on every path against the float64
reference (which adds ``-slope * |i + seqlen_k - seqlen_q - j|`` to the scaled, soft-capped logits
directly, ``attention_reference(..., alibi_slopes=)``): varlen prefill (causal and not, GQA,
forced split-KV, the sm_80 mainloop and the automatic Hopper one, soft-cap and a window
combined), pack-GQA decode, paged decode with forced splits (the sm_80 decode tiles; the
keys-as-rows tile's ALiBi code is compiled by the CPU tests but no dispatch reaches it: only the
Hopper fused kernel uses that tile), a mixed prefill + decode step (the classes in turn on
sm_90a, one class elsewhere: no fused kernel has ALiBi), the (batch, heads) slopes shape, and an AttentionPlan captured in a CUDA
graph and replayed with new slope values.  Outputs and LSE are NaN-poisoned; rows past the batch
must stay unwritten."""
import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.launch import fused
from kernelgen.front.plan import AttentionPlan

from gpu_helpers import (HOPPER, capture, check, check_rows, decode_lengths, draw_lengths,  # noqa: E402
                         make_packed, plan_buffers, prepared, replay, write_lengths)
from test_fused_gpu import mixed_lengths  # noqa: E402 (tests/gpu is on sys.path)
from test_paged_decode_gpu import make_paged  # noqa: E402

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def alibi_slopes(hq, batch=None, seed=0):
    """Press et al.'s geometric slopes 2^(-8 h / H) (h = 1..H), shuffled a little per seed; with
    ``batch`` one row per request (scaled differently per request)."""
    base = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)], dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    base = base[torch.randperm(hq, generator=g)]
    if batch is not None:
        base = base[None, :] * (0.5 + torch.rand(batch, 1, generator=g))
    return base.contiguous().cuda()


@pytest.mark.parametrize("per_request", [False, True])
@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("arch", ["sm_80", None])
def test_varlen_prefill_causal_gqa(arch, num_splits, per_request):
    """Varlen causal prefill (32/8 heads, d 128, seqlen_q < seqlen_k in one request): arch None
    takes the Hopper path on sm_90a; (batch, heads) slopes with ``per_request``."""
    qlens, klens = [600, 300, 0, 450], [600, 500, 10, 450]
    hq, hkv, d = 32, 8, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 7)
    slopes = alibi_slopes(hq, len(qlens) if per_request else None, seed=1)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, alibi_slopes=slopes)
    for _ in range(2):                                  # validating path, then the prepared call
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
        o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True,
                                            return_lse=True, out=out, arch=arch, num_splits=num_splits,
                                            alibi_slopes=slopes)
        torch.cuda.synchronize()
        check(o, lse, ref, ref_lse, BF16)
        name = prepared().attn.name
        assert "_alibi" in name and ("_wgmma" in name) == (arch is None and HOPPER), name
        if num_splits:
            assert prepared().combine is not None
    plain = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, arch=arch,
                                       num_splits=num_splits)
    assert not torch.equal(plain, o)
    # zero slopes are no ALiBi (the ALiBi kernel may have another tile or split bound: not bitwise)
    ref0, ref0_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o0, lse0 = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, arch=arch,
                                          num_splits=num_splits, return_lse=True, out=out,
                                          alibi_slopes=torch.zeros_like(slopes))
    torch.cuda.synchronize()
    check(o0, lse0, ref0, ref0_lse, BF16)


@pytest.mark.parametrize("variant", ["none", "softcap_window", "d64_mha"])
@pytest.mark.parametrize("arch", ["sm_80", None])
def test_varlen_prefill_non_causal(arch, variant):
    """Non-causal (|distance| on both sides of the diagonal), with soft-cap and a window (the bias
    goes after the cap), and MHA at head dim 64."""
    qlens, klens = [333, 1, 700], [400, 257, 700]
    hq, hkv, d = (8, 8, 64) if variant == "d64_mha" else (16, 4, 128)
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 11)
    slopes = alibi_slopes(hq, seed=2)
    kw = dict(softcap=30.0, window_size=(200, 50)) if variant == "softcap_window" else {}
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, alibi_slopes=slopes, error_bounds=True, **kw)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), return_lse=True, out=out,
                                        arch=arch, alibi_slopes=slopes, **kw)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, BF16, bound=bound, lse_bound=lb)


@pytest.mark.parametrize("pack_gqa", [False, None])
@pytest.mark.parametrize("dtype", [BF16, torch.float16])
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("mask", ["causal", "none", "local"])
def test_d64_three_warpgroups(mask, num_splits, dtype, pack_gqa, monkeypatch):
    """Head dim 64 ("alibi" in heuristics.SM90_THREE_WG_EXTRAS): the ALiBi kernels on the 192-row
    tile (three consumer warpgroups of 160 registers; causal starts its accumulators from the bias),
    GQA 16/4 heads, a request with seqlen_q < seqlen_k, a sliding window; one split and three
    (split-KV and the combine); unpacked (``pack_gqa=False``: the kernel requests of 6144 tokens and
    more take, ``heuristics.SM90_ALIBI_PACK_MAX_MEAN_Q``) and automatic (these short requests pack
    GQA: 48 rows of 4 query heads a tile, each row with its own head's slope)."""
    monkeypatch.delenv("KERNELGEN_SM90_PACK_GQA", raising=False)
    if not HOPPER:
        pytest.skip("the three-warpgroup tile is the Hopper path's")
    qlens, klens = [500, 1, 0, 777], [620, 300, 9, 777]
    hq, hkv, d = 16, 4, 64
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 13, dtype=dtype)
    slopes = alibi_slopes(hq, seed=4)
    kw = {"causal": mask != "none"}
    if mask == "local":
        kw["window_size"] = (150, 0)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, alibi_slopes=slopes, **kw)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=dtype, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), return_lse=True, out=out,
                                        alibi_slopes=slopes, num_splits=num_splits, pack_gqa=pack_gqa, **kw)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, dtype)
    name = prepared().attn.name
    assert "_alibi" in name and "_wgmma" in name and "m192n128w12" in name, name
    assert ("_split" in name) == (num_splits > 1), name
    assert ("_pack_" in name) == (pack_gqa is None), name


@pytest.mark.parametrize("max_q", [1, 4])
def test_decode_pack_gqa(max_q):
    """Packed K/V, decode-shaped: pack-GQA tiles (rows of a tile belong to different query heads,
    each with its own slope); max_q 4 = speculative decode (several positions per request)."""
    n = 12
    rng = np.random.default_rng(3)
    qlens = [max_q] * n
    klens = [int(x) + max_q for x in rng.integers(0, 2000, size=n)]
    hq, hkv, d = 32, 4, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 5)
    slopes = alibi_slopes(hq, seed=3)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max_q, max(klens), causal=True, return_lse=True,
                                        out=out, pack_gqa=True, alibi_slopes=slopes)
    torch.cuda.synchronize()
    assert "_pack" in prepared().attn.name and "_alibi" in prepared().attn.name, prepared().attn.name
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, alibi_slopes=slopes)
    check(o, lse, ref, ref_lse, BF16)


@pytest.mark.parametrize("per_request", [False, True])
@pytest.mark.parametrize("num_splits", [0, 4])
@pytest.mark.parametrize("arch", ["sm_80", None])
def test_paged_decode(arch, num_splits, per_request):
    """Paged decode (32/8 heads, pages of 16), forced and automatic splits, requests with no key
    (out 0, lse -inf)."""
    n = 24
    qlens, klens = decode_lengths(n, seed=5)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=9)
    slopes = alibi_slopes(hq, n if per_request else None, seed=4)
    out = torch.full((n, hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, max(klens), seqused_k=used, page_table=pt,
                                        causal=True, return_lse=True, out=out, arch=arch, num_splits=num_splits,
                                        alibi_slopes=slopes)
    torch.cuda.synchronize()
    assert "_alibi" in prepared().attn.name
    if num_splits:
        assert prepared().combine is not None
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, alibi_slopes=slopes)
    check(o, lse, ref, ref_lse, BF16)
    assert torch.all(o[3] == 0) and torch.all(o[10] == 0)


@pytest.mark.parametrize("arch", ["sm_80", None])
def test_mixed_step(arch):
    """A paged step mixing prefill chunks and decodes: on sm_90a (arch None) the classes in turn
    (Hopper long class + sm_80 decode class, both ALiBi), else one class; never a fused kernel."""
    rng = np.random.default_rng(13)
    qlens, klens = mixed_lengths(rng, n_decode=24, n_prefill=2, max_ctx=3000)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=13)
    slopes = alibi_slopes(hq, len(qlens), seed=5)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                        page_table=pt, causal=True, return_lse=True, out=out, arch=arch,
                                        alibi_slopes=slopes)
    torch.cuda.synchronize()
    prep = prepared()
    assert not isinstance(prep, fused.PreparedFusedCall)
    if arch is None and HOPPER:   # the classes in turn (or, for long mean queries, one Hopper launch)
        assert isinstance(prep, fused.PreparedPairCall) or "_wgmma" in prep.attn.name, type(prep)
    else:
        assert not isinstance(prep, fused.PreparedPairCall) and "_alibi" in prep.attn.name, prep.attn.name
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, alibi_slopes=slopes)
    check(o, lse, ref, ref_lse, BF16)


@pytest.mark.parametrize("kind", ["decode", "mixed"])
def test_plan_graph_replays_with_new_slopes(kind):
    """One captured step replayed with new lengths *and new slope values* in the same tensor: the
    slopes are read on the device at replay.  decode: a paged decode plan, (heads,) slopes; mixed:
    a mixed prefill + decode plan with (batch, heads) slopes.  Rows past the batch stay NaN."""
    hq, hkv, d, ps, cap = 32, 8, 128, 16, 16
    max_ctx = 2048
    decode = kind == "decode"
    max_tq = cap if decode else 640
    kc, vc, q, cu_q, used, pt, out, lse = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, cache_seed=21)
    slopes = torch.empty((hq,) if decode else (cap, hq), device="cuda", dtype=torch.float32)
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=max_tq, max_seqlen_q=1 if decode else 256, max_seqlen_k=max_ctx, paged=True,
                         causal=True, alibi=True)
    assert all(getattr(s, "alibi", False) for s in plan.recipe.specs if getattr(s, "kind", "") == "attention")
    rng = np.random.default_rng(17)

    def new_step(seed):
        batch, lq, ctx = draw_lengths(rng, cap, max_ctx, prefill=not decode)
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        q.copy_(torch.randn(max_tq, hq, d, device="cuda").to(BF16))
        slopes.copy_(alibi_slopes(hq, None if decode else cap, seed=seed))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return batch, int(lq.sum())

    def run():   # a (batch, heads) tensor has a row per request of the step: all cap (padding included)
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse, alibi_slopes=slopes)

    new_step(100)
    graph = capture(run)                           # warm (validate, prepare, compile; the fast path), capture
    for i in range(4):
        batch, tq = new_step(200 + i)
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        s = slopes if decode else slopes[:batch]
        ref, ref_lse = attention_reference(q[:tq], k, v, cu_q[: batch + 1], cu_k, causal=True, alibi_slopes=s)
        check_rows(out, ref, tq, 1.6e-2)
        fin = torch.isfinite(ref_lse)
        assert torch.allclose(lse[:, :tq][fin].double(), ref_lse[fin], atol=2e-3, rtol=1e-4)
        assert torch.isnan(lse[:, tq:]).all(), "lse rows past the batch must not be written"
