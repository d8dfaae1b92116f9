"""GPU: ``quantize_q=True`` (a 16-bit q with an e4m3 K/V cache, quantised on the device per request
and KV head for the Hopper FP8 tensor-core variant; ``kernelgen.launch.quant_q``) through
``kernelgen.varlen_attention`` and ``AttentionPlan(quantize_q=True)`` under a CUDA graph.

The kernel reads the e4m3 q and the power-of-two ``q_descale`` that ``quant_q.quantize`` writes
(deterministic torch ops, so the test recomputes the same values), so the outputs are checked
against the float64 reference on those dequantised inputs within the FP8 tensor-core variant's
derived per-element bounds (``attention_reference(..., fp8_mma_bounds=True)``; ``check_mma`` of
test_fp8_mma_gpu.py), and the quantisation itself against the 16-bit q (e4m3's rounding only).
Outputs and LSE are NaN-poisoned; rows past the batch must stay unwritten."""
import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.front.plan import AttentionPlan
from kernelgen.jit import runtime
from kernelgen.launch import quant_q

from gpu_helpers import capture, check, draw_lengths, plan_buffers, prepared, replay, write_lengths  # noqa: E402
from test_fp8_mma_gpu import check_mma, quantize  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = pytest.mark.gpu
E4M3, BF16, FP16 = torch.float8_e4m3fn, torch.bfloat16, torch.float16


def inputs(qlens, klens, hq, hkv, d, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(sum(qlens), hq, d, generator=g, device="cuda")
    q[:, : hq // hkv] *= 8                                  # KV head 0's query heads: larger values
    q = q.to(dtype)
    k8, ks = quantize(torch.randn(sum(klens), hkv, d, generator=g, device="cuda"))
    v8, vs = quantize(torch.randn(sum(klens), hkv, d, generator=g, device="cuda"))
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
    return q, k8, v8, cu_q, cu_k, ks.reshape(1, 1), vs.reshape(1, 1)


@pytest.mark.parametrize("d,causal,dtype,num_splits", [
    (64, True, BF16, 0), (128, True, BF16, 0), (128, False, FP16, 0), (128, True, BF16, 3), (256, True, BF16, 1),
    (256, False, FP16, 1),   # (d 256: the tensor-core variant takes no split-KV)
])
def test_varlen_prefill_quantised_within_the_fp8_bounds(d, causal, dtype, num_splits):
    qlens, klens = [600, 129, 0, 1, 300], [600, 400, 10, 70, 300]
    hq, hkv = 16, 4
    batch = len(qlens)
    q, k8, v8, cu_q, cu_k, kd, vd = inputs(qlens, klens, hq, hkv, d, dtype, 11 + d)
    q8, qd = quant_q.quantize(q, cu_q, batch, hkv)
    # the quantisation: e4m3's rounding of q 2^k only (relative 2^-4 where q 2^k is normal, >= 2^-6)
    req = torch.repeat_interleave(torch.arange(batch, device="cuda"), torch.tensor(qlens, device="cuda"))
    scale = qd.double()[req][:, :, None, None].expand(-1, -1, hq // hkv, d).flatten(1, 2)   # each element's 2^-k
    deq = q8.double() * scale
    big = q.double().abs() >= 2 ** -6 * scale
    assert big.float().mean() > 0.9
    assert ((deq - q.double()).abs()[big] <= 2 ** -4 * q.double().abs()[big]).all()
    assert ((deq - q.double()).abs()[~big] <= 2 ** -10 * scale[~big]).all()
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=causal, q_descale=qd, k_descale=kd,
                                                  v_descale=vd, fp8_mma_bounds=True)
    for _ in range(2):                                  # validating path, then the prepared call (new quantisation)
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=dtype, device="cuda")
        o, lse = kernelgen.varlen_attention(q, k8, v8, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                            num_splits=num_splits, k_descale=kd, v_descale=vd, quantize_q=True,
                                            return_lse=True, out=out)
        torch.cuda.synchronize()
        assert o.dtype == dtype
        p = prepared()
        assert "_fp8mma" in p.attn.name and p.q_quant == (batch, hkv), p.attn.name
        assert p.q_quant_kernel is not None and p.q_quant_kernel.spec.kind == "quant"   # the kernel, not torch ops
        check_mma(o, lse, ref, ref_lse, bound, lb)


@pytest.mark.parametrize("k_form,v_form", [("b1", "1h"), ("T", "expand"), ("1h", "b1"), ("full", "full")])
def test_quantised_with_each_descale_form(k_form, v_form):
    """Per-request / per-KV-head descales in each broadcast form the API takes ((batch, 1), (1, hkv), a
    transposed (batch, hkv) view, an expanded (1, hkv)) next to the quantised q's own (batch, hkv)
    descale (the sixty-sixth session's probe ran these against an unquantised reference; this one
    quantises like the kernel)."""
    qlens, klens = [300, 200, 129], [300, 400, 129]
    hq, hkv, d, batch = 8, 2, 128, 3
    q, k8, v8, cu_q, cu_k, ks, vs = inputs(qlens, klens, hq, hkv, d, BF16, 7)
    g = torch.Generator(device="cuda").manual_seed(70)

    def forms(scale):   # the tensor's own scale (K, V of unit size) times a factor in [0.5, 1.5) each
        full = scale * (0.5 + torch.rand(batch, hkv, generator=g, device="cuda"))
        return {"full": full, "T": full.t().contiguous().t(), "b1": full[:, :1].contiguous(),
                "1h": full[:1].contiguous(), "expand": full[:1].expand(batch, hkv)}
    kd, vd = forms(ks)[k_form], forms(vs)[v_form]
    q8, qd = quant_q.quantize(q, cu_q, batch, hkv)
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=True, q_descale=qd, k_descale=kd,
                                                  v_descale=vd, fp8_mma_bounds=True)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k8, v8, cu_q, cu_k, max(qlens), max(klens), causal=True, k_descale=kd,
                                        v_descale=vd, quantize_q=True, return_lse=True, out=out)
    torch.cuda.synchronize()
    p = prepared()
    assert "_fp8mma" in p.attn.name and p.q_quant == (batch, hkv), p.attn.name
    check_mma(o, lse, ref, ref_lse, bound, lb)


def _check_classes(out, lse, q, q8, qd, k, v, cu_q, cu_k, qlens, thr, kd, vd, dtype=BF16, window=(-1, -1)):
    """A mixed step on the fused kernel with quantize_q: rows of requests above ``thr`` query tokens
    (the long class, the FP8 tensor-core variant on the quantised q) against the float64 reference
    on the dequantised q within that variant's bounds; the others (the short class, the FP8 decode
    tile on q itself) against the reference on q within ``tolerance(dtype, e4m3)``."""
    batch = len(qlens)
    ref8, lse8, bound, lb = attention_reference(q8, k, v, cu_q, cu_k, causal=True, window_size=window, q_descale=qd,
                                                k_descale=kd, v_descale=vd, fp8_mma_bounds=True)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, window_size=window, k_descale=kd,
                                       v_descale=vd)
    req = torch.repeat_interleave(torch.arange(batch), torch.tensor(qlens))
    short = torch.tensor(qlens)[req] <= thr                       # each row: its request is short

    def rows(t, idx, dim=0):
        return t.index_select(dim, idx.to(t.device))
    lg, sh = (~short).nonzero().flatten(), short.nonzero().flatten()
    if lg.numel():
        check_mma(rows(out, lg), rows(lse, lg, 1), rows(ref8, lg), rows(lse8, lg, 1), rows(bound, lg), rows(lb, lg, 1))
    if sh.numel():
        check(rows(out, sh), rows(lse, sh, 1), rows(ref, sh), rows(ref_lse, sh, 1), dtype, E4M3)
    return int(lg.numel()), int(sh.numel())


def test_plan_quantised_in_a_cuda_graph():
    """AttentionPlan(quantize_q=True) captured once (the quantisation is captured too), replayed
    with new 16-bit q and cache values and new lengths written in place; padded requests and
    rows of q past the step's tokens change no factor.  Its steps mix two prefill requests with
    decodes: the Hopper fused kernel, the long class on the quantised q, the decodes on q itself
    (``_check_classes``)."""
    from kernelgen.selection.heuristics import short_query_tokens
    cap, hq, hkv, d, ps = 4, 16, 4, 128, 64
    max_ctx, max_tq = 2048, 2 * 250 + 4
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=max_tq, max_seqlen_q=250, max_seqlen_k=max_ctx, paged=True, page_size=ps,
                         causal=True, kv_dtype="e4m3", quantize_q=True)
    assert plan.q_quant and "_fp8mma" in plan.attn.spec.name and plan._q_kernel is not None
    assert plan.recipe.kind == "fused" and plan._q_short
    kc, vc, q, cu_q, used, pt, out, lse = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, kv_dtype=E4M3)
    kd, vd = (torch.ones(cap, hkv, device="cuda") for _ in range(2))
    rng = np.random.default_rng(31)

    def new_step():
        batch, lq, ctx = draw_lengths(rng, cap, max_ctx, prefill=True)
        lengths.append(lq[:batch].tolist())
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        q.copy_(torch.randn(q.shape, device="cuda") * float(rng.uniform(0.1, 10)))
        for t in (kc, vc):
            t.copy_(quantize(torch.randn(t.shape, device="cuda"))[0])
        kd.fill_(float(rng.uniform(0.005, 0.02)))
        vd.fill_(float(rng.uniform(0.005, 0.02)))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return batch, int(lq.sum())

    def run():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse, k_descale=kd, v_descale=vd)

    lengths, rows = [], [0, 0]
    new_step()
    graph = capture(run)
    for _ in range(3):
        batch, tq = new_step()
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        q8, qd = quant_q.quantize(q[:tq], cu_q[: batch + 1], batch, hkv)
        n_long, n_short = _check_classes(out[:tq], lse[:, :tq], q[:tq], q8, qd, k, v, cu_q[: batch + 1], cu_k,
                                         lengths[-1], short_query_tokens(hq, hkv), kd[:batch], vd[:batch])
        rows = [rows[0] + n_long, rows[1] + n_short]
        assert torch.isnan(out[tq:]).all(), "rows past the batch's tokens must not be written"
        assert torch.isnan(lse[:, tq:]).all(), "lse rows past the batch must not be written"
    assert rows[0] >= 30 and rows[1] >= 1, rows      # (both classes ran; a step may hold prefills only)


@pytest.mark.parametrize("d,window,dtype", [(128, (-1, -1), BF16), (64, (300, 0), FP16), (128, (200, 0), BF16)])
def test_mixed_step_quantises_for_the_long_class_only(d, window, dtype):
    """A paged mixed step (prefill chunks, decodes, a 3-token speculative request, an empty-context
    decode) with an e4m3 cache and quantize_q: the Hopper fused kernel, whose long class runs the FP8
    tensor-core variant on the quantised q (its rows checked against the float64 reference on the
    dequantised q within that variant's bounds) and whose short class runs the FP8 decode tile on the
    16-bit q itself (its rows against the reference on q, ``tolerance(dtype, e4m3)``), then the
    combine (split decodes) or none (a window under 256 keys keeps them whole).  The validating call,
    then the prepared one with a new q."""
    from kernelgen.selection.heuristics import short_query_tokens
    from test_paged_decode_gpu import make_paged
    qlens, klens = [300, 1, 1, 3, 900, 1, 1], [900, 40, 3000, 7, 2048, 1, 6000]
    hq, hkv, batch = 32, 8, len(qlens)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, 9, dtype=dtype)
    kc, kd = quantize(kc.float())
    vc, vd = quantize(vc.float())
    kd, vd = kd.reshape(1, 1), vd.reshape(1, 1)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    thr = short_query_tokens(hq, hkv)
    assert thr >= 3
    for step in range(2):
        if step:
            q = q * 4 + 1
        q8, qd = quant_q.quantize(q, cu_q, batch, hkv)
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=dtype, device="cuda")
        o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                            page_table=pt, causal=True, window_size=window, k_descale=kd,
                                            v_descale=vd, quantize_q=True, return_lse=True, out=out)
        torch.cuda.synchronize()
        p = prepared()
        assert type(p).__name__ == "PreparedFusedCall" and p.q_short and p.q_quant == (batch, hkv)
        assert "_fp8mma" in p.pair.name and "__m8n16w1" in p.pair.name, p.pair.name
        assert (p.combine is None) == (window[0] == 200), p.pair.name
        assert _check_classes(o, lse, q, q8, qd, k, v, cu_q, cu_k, qlens, thr, kd, vd, dtype, window) == (1200, 7)


def _kernel_and_reference(q, cu, batch, hkv):
    kernel = runtime.quant_kernel(q.device, q.dtype)
    assert kernel is not None and kernel.spec.dtype == ("bf16" if q.dtype == BF16 else "fp16")
    got8, got_d = quant_q.quantize(q, cu, batch, hkv, kernel=kernel)
    want8, want_d = quant_q.quantize_reference(q, cu, batch, hkv)
    torch.cuda.synchronize()
    return got8.view(torch.uint8), got_d, want8.view(torch.uint8), want_d


@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("hq,hkv,d", [(16, 4, 128), (8, 8, 64), (16, 2, 96), (16, 8, 256), (64, 8, 64), (4, 1, 192)])
def test_the_kernel_equals_the_reference_bit_for_bit(dtype, hq, hkv, d):
    """templates/quant/quant_q.cu.j2 against ``quantize_reference`` (torch ops): every byte of q8
    and every descale, on requests of 0, 1, 63, 64, 65 and thousands of rows (row blocks shared
    by many requests and requests over many blocks), values over many binades (outliers, a
    request of tiny values: fp16's clamp of k at 15, bf16 values far below fp16's range), an
    all-zero request, and rows past the batch."""
    qlens = [1, 0, 63, 64, 65, 1, 1, 1, 2500, 3, 130, 1]
    batch, total = len(qlens), sum(qlens) + 37                       # 37 rows past the batch
    cu = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(hq * d + hkv)
    x = torch.randn(total, hq, d, generator=g, device="cuda")
    x *= torch.exp2(torch.randint(-6, 7, (total, hq, 1), generator=g, device="cuda").float())
    x[70:75, : hq // hkv] *= 2000 if dtype == BF16 else 100          # outliers in one request's first KV head (finite)
    x[int(cu[10]):int(cu[11])] *= 1e-6 if dtype == FP16 else 1e-30   # tiny values: k clamps (fp16) / near 2^-100
    x[int(cu[9]):int(cu[10])] = 0                                    # an all-zero request: factor 1
    x[-37:] *= 1e4                                                   # past the batch: unscaled
    q = x.to(dtype)
    g8, gd, w8, wd = _kernel_and_reference(q, cu, batch, hkv)
    assert torch.equal(gd, wd), (gd - wd).abs().max()
    n = int(cu[-1])
    assert torch.equal(g8[:n], w8[:n]), int((g8[:n] != w8[:n]).sum())
    # past the batch (factor 1): the same bytes within e4m3's range; beyond it the kernel saturates
    # (cvt.rn.satfinite), torch's cast only from 2.12 on (NaN before)
    inside = q[n:].float().abs() <= 448
    assert inside.any() and (~inside).any()
    assert torch.equal(g8[n:][inside], w8[n:][inside])
    assert torch.all(g8[n:].view(E4M3).float().abs()[~inside] == 448)
    assert torch.all(wd[9] == 1.0)
    if dtype == FP16:
        assert torch.all(wd[10] == 2.0 ** -15)
    else:
        assert float(wd[10].max()) < 2.0 ** -90


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_the_kernel_on_strided_q_and_non_finite_groups(dtype):
    """A q whose rows are further apart than its heads (a view of a wider buffer: read in place),
    one with strided heads and a contiguous one at a misaligned address (both copied first); a (request, KV head) with inf or NaN keeps factor
    1: its NaN stays NaN and its finite values within e4m3's range equal the reference's."""
    qlens, hq, hkv, d = [100, 3, 500], 8, 2, 128
    cu = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    wide = (3 * torch.randn(sum(qlens), 12, d, device="cuda")).to(dtype)
    flat = torch.empty(sum(qlens) * hq * d + 8, dtype=dtype, device="cuda")
    odd = flat[1:1 + sum(qlens) * hq * d].view(sum(qlens), hq, d)   # contiguous, 2 bytes past 16: copied
    odd.copy_(wide[:, :hq])
    for q in (wide[:, :hq], wide[:, ::1][:, 2:10], torch.randn(sum(qlens), 2 * hq, d, device="cuda").to(dtype)[:, ::2],
              odd):
        g8, gd, w8, wd = _kernel_and_reference(q, cu, 3, hkv)
        assert torch.equal(gd, wd) and torch.equal(g8, w8)
    q = wide[:, :hq].clone()
    q[5, 0, 7] = float("inf")
    q[200, 5, 9] = float("nan")
    g8, gd, w8, wd = _kernel_and_reference(q, cu, 3, hkv)
    assert torch.equal(gd, wd) and gd[0, 0] == 1 and gd[2, 1] == 1
    assert torch.isnan(g8.view(E4M3)[200, 5, 9].float())
    fin = torch.isfinite(q) & (q.float().abs() <= 448)
    assert torch.equal(g8[fin], w8[fin])
    assert float(g8.view(E4M3)[5, 0, 7].float()) == 448.0           # inf saturates (cvt.rn.satfinite)


def test_the_kernel_in_a_cuda_graph():
    """Captured once, replayed with new values and lengths written in place: the amax words are
    zeroed inside the graph, so every replay quantises its own q."""
    hq, hkv, d, total = 16, 4, 128, 700
    q = torch.zeros(total, hq, d, dtype=BF16, device="cuda")
    cu = torch.tensor([0, 300, 650], dtype=torch.int32, device="cuda")
    off, n = quant_q.buffer_bytes(total, hq, d, 2, hkv)
    buf = torch.empty(n, dtype=torch.uint8, device="cuda")
    kernel = runtime.quant_kernel(q.device, q.dtype)
    quant_q.quantize(q, cu, 2, hkv, buffer=buf, kernel=kernel)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q8, qd = quant_q.quantize(q, cu, 2, hkv, buffer=buf, kernel=kernel)
    for scale, split in ((1.0, 10), (50.0, 400), (0.01, 1)):
        q.copy_(torch.randn(total, hq, d, device="cuda") * scale)
        cu[1] = split
        replay(graph)
        w8, wd = quant_q.quantize_reference(q, cu, 2, hkv)
        assert torch.equal(qd, wd) and torch.equal(q8.view(torch.uint8), w8.view(torch.uint8))
