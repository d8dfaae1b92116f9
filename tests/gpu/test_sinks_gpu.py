"""GPU: attention sinks (``sinks=``, gpt-oss semantics) on every path against the float64 reference
(which computes the sink logit directly, ``attention_reference(..., sinks=)``): varlen prefill
(causal, GQA, forced split-KV, the sm_80 mainloop and the automatic Hopper one), paged decode
(pack-GQA, split-KV, rows with no key: lse = the sink), the fused mixed step, and an
AttentionPlan captured in a CUDA graph and replayed with new sink values.  The single-class calls
(prefill, decode, split-KV) run the sink kernels (AttentionSpec.sinks: the epilogue and the combine
add the sink); the fused mixed step and the plan keep the rescale after the kernels.  Outputs and LSE are
NaN-poisoned; rows past the batch must stay unwritten."""
import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.front import api
from kernelgen.front.plan import AttentionPlan

from gpu_helpers import (HOPPER, capture, check, check_rows, decode_lengths, draw_lengths,  # noqa: E402
                         make_packed, plan_buffers, replay, write_lengths)
from test_fused_gpu import expect_mixed_launch, mixed_lengths  # noqa: E402 (tests/gpu is on sys.path)
from test_paged_decode_gpu import make_paged  # noqa: E402

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def make_sinks(hq, seed):
    """Per-head sinks: moderate values, one head without a sink (-inf), one large one."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = torch.randn(hq, generator=g, device="cuda") * 2 + 1
    s[0] = float("-inf")
    s[-1] = 12.0
    return s.float()


def prepared_name():
    return api._CALLS._last[1].attn.name


@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("arch", ["sm_80", None])
def test_varlen_prefill_causal_gqa(arch, num_splits):
    """Prefill-shaped GQA batch (32/8 heads, d 128): arch None takes the Hopper path on sm_90a."""
    qlens, klens = [600, 300, 0, 450], [600, 500, 10, 450]
    hq, hkv, d = 32, 8, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 7)
    sinks = make_sinks(hq, 1)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, sinks=sinks)
    for _ in range(2):                                  # validating path, then the prepared call
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
        o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True,
                                            return_lse=True, out=out, arch=arch, num_splits=num_splits, sinks=sinks)
        torch.cuda.synchronize()
        check(o, lse, ref, ref_lse, BF16)
        assert ("_wgmma" in prepared_name()) == (arch is None and HOPPER), prepared_name()
        # the sinks are fused in the kernels (epilogue, combine): no rescale after them
        assert "_sinks" in prepared_name() and api._CALLS._last[1].sinks_fused, prepared_name()
        if num_splits:
            assert api._CALLS._last[1].combine is not None
        o2 = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, arch=arch,
                                        num_splits=num_splits, sinks=sinks)       # no lse asked for
        assert torch.equal(o2, o)
    # the sinks change the result (and -inf everywhere is no sink)
    plain = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, arch=arch,
                                       num_splits=num_splits)
    none = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, arch=arch,
                                      num_splits=num_splits, sinks=torch.full_like(sinks, float("-inf")))
    assert torch.equal(plain, none) and not torch.equal(plain, o)


@pytest.mark.parametrize("num_splits", [0, 4])
@pytest.mark.parametrize("arch", ["sm_80", None])
def test_paged_decode(arch, num_splits):
    """Paged decode (32/8 heads, pages of 16), requests with no key (out 0, lse = the sink)."""
    n = 24
    qlens, klens = decode_lengths(n, seed=5)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=9)
    sinks = make_sinks(hq, 2)
    out = torch.full((n, hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, max(klens), seqused_k=used, page_table=pt,
                                        causal=True, return_lse=True, out=out, arch=arch, num_splits=num_splits,
                                        sinks=sinks)
    torch.cuda.synchronize()
    if num_splits:
        assert api._CALLS._last[1].combine is not None
    assert "_sinks" in prepared_name() and api._CALLS._last[1].sinks_fused, prepared_name()
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, sinks=sinks)
    check(o, lse, ref, ref_lse, BF16)
    assert torch.all(o[3] == 0) and torch.all(o[10] == 0)
    assert torch.equal(lse[:, 3], sinks) and torch.equal(lse[:, 10], sinks)


@pytest.mark.parametrize("arch", ["sm_80", None])
def test_fused_mixed_step(arch):
    rng = np.random.default_rng(13)
    qlens, klens = mixed_lengths(rng, n_decode=24, n_prefill=2, max_ctx=3000)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=13)
    sinks = make_sinks(hq, 3)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                        page_table=pt, causal=True, return_lse=True, out=out, arch=arch,
                                        sinks=sinks)
    torch.cuda.synchronize()
    expect_mixed_launch(arch)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, sinks=sinks)
    check(o, lse, ref, ref_lse, BF16)


@pytest.mark.parametrize("kind", ["decode_with_lse", "decode_sink_kernels", "mixed_scratch"])
def test_plan_graph_replays_with_new_sinks(kind):
    """One captured step replayed with new lengths *and new sink values* in the same tensor: the
    sinks are read on the device at replay.  decode_with_lse: a paged decode plan writing the
    caller's lse (plain kernels, the rescale after them); decode_sink_kernels: the same plan made
    with sinks=True, which runs the sink kernels (the sinks' address in the captured parameters);
    mixed_scratch: a mixed prefill + decode plan (fused launch) whose LSE goes to the plan's scratch
    (sinks=True).  Rows past the batch stay NaN (out and lse)."""
    hq, hkv, d, ps, cap = 32, 8, 128, 16, 16
    max_ctx = 2048
    max_tq = cap if kind.startswith("decode") else 640
    kc, vc, q, cu_q, used, pt, out, lse = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, cache_seed=21)
    sinks = torch.empty(hq, device="cuda", dtype=torch.float32)
    decode = kind.startswith("decode")
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=max_tq, max_seqlen_q=1 if decode else 256, max_seqlen_k=max_ctx, paged=True,
                         causal=True, sinks=kind != "decode_with_lse")
    if not decode:
        assert plan.fused is not None and not plan.sinks_fused
    assert plan.sinks_fused == (kind == "decode_sink_kernels")
    rng = np.random.default_rng(17)

    def new_step(seed):
        batch, lq, ctx = draw_lengths(rng, cap, max_ctx, prefill=not decode)
        ctx[1] = 0 if decode else ctx[1]                  # a decode row with no key
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        q.copy_(torch.randn(max_tq, hq, d, device="cuda").to(BF16))
        sinks.copy_(make_sinks(hq, seed))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return batch, int(lq.sum())

    def run():
        if decode:
            plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse, sinks=sinks)
        else:
            plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, sinks=sinks)

    new_step(100)
    graph = capture(run)                           # warm (validate, prepare, compile; the fast path), capture
    for i in range(4):
        batch, tq = new_step(200 + i)
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        ref, ref_lse = attention_reference(q[:tq], k, v, cu_q[: batch + 1], cu_k, causal=True, sinks=sinks)
        check_rows(out, ref, tq, 1.6e-2)
        if decode:
            fin = torch.isfinite(ref_lse)
            assert torch.equal(torch.isneginf(lse[:, :tq]), ~fin)
            assert torch.allclose(lse[:, :tq][fin].double(), ref_lse[fin], atol=2e-3, rtol=1e-4)
            assert torch.equal(lse[:, 1], sinks)           # request 1 sees no key: lse = its sink
            assert torch.isnan(lse[:, tq:]).all(), "lse rows past the batch must not be written"
