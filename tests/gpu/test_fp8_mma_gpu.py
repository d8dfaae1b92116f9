"""GPU: an FP8 q (``torch.float8_e4m3fn`` with an FP8 K/V cache and ``q_descale``; FlashAttention-3's
FP8 forward) through ``kernelgen.varlen_attention`` and ``AttentionPlan(q_dtype=)``.

Prefill-shaped calls at head dims 64 and 128 run the Hopper kernel's FP8 tensor-core variant
(``AttentionSpec.fp8_mma``: S = Q K^T and P V on FP8 wgmma, V transposed by the producer warps,
P rounded to e4m3).  Its outputs are checked against the float64 reference on the dequantised inputs
within the per-element bounds ``attention_reference(..., fp8_mma_bounds=True)`` derives
(docs/dev/fp8_hopper_design.md section 8), and the mean error within a quarter of the mean bound
(no systematic error), and the LSE within its bound (the logits' FP8 accumulation) plus
``gpu_helpers.check``'s tolerance.  One-hot rows pin the layouts exactly.  Every other call (decode-shaped, head dim 96,
``arch="sm_80"``) converts q exactly to the output dtype and must meet ``tolerance(dtype, kv_dtype)``.
Outputs and LSE are NaN-poisoned; rows past the batch must stay unwritten."""
import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import OUT_ROUNDING_FLOOR, attention_reference, gather_paged
from kernelgen.front.plan import AttentionPlan

from gpu_helpers import capture, draw_lengths, plan_buffers, prepared, replay, write_lengths  # noqa: E402
from gpu_helpers import check as check_converted  # noqa: E402 (tests/gpu is on sys.path)
from test_paged_decode_gpu import make_paged  # noqa: E402

pytestmark = pytest.mark.gpu
E4M3, E5M2, BF16, FP16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16


def quantize(t, dtype=E4M3):
    """Per-tensor FP8 quantisation: (values, float32 () descale)."""
    top = 448.0 if dtype == E4M3 else 57344.0
    s = (t.abs().amax().float() / top).clamp(min=1e-12)
    return (t.float() / s).to(dtype), s


def packed(qlens, klens, hq, hkv, d, seed, kv_dtype=E4M3):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q8, qs = quantize(torch.randn(sum(qlens), hq, d, generator=g, device="cuda"))
    k8, ks = quantize(torch.randn(sum(klens), hkv, d, generator=g, device="cuda"), kv_dtype)
    v8, vs = quantize(torch.randn(sum(klens), hkv, d, generator=g, device="cuda"), kv_dtype)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
    return q8, k8, v8, cu_q, cu_k, qs, ks, vs


def per_head(s, batch, hkv, seed):
    """A (batch, hkv) descale: ``s`` times factors in [0.5, 2)."""
    g = torch.Generator().manual_seed(seed)
    return (s.cpu() * (0.5 + 1.5 * torch.rand((batch, hkv), generator=g))).float().cuda()


def call(q8, k8, v8, cu_q, cu_k, maxq, maxk, dv, out_dtype=BF16, **kw):
    out = torch.full((q8.shape[0], q8.shape[1], dv), float("nan"), dtype=out_dtype, device="cuda")
    o, lse = kernelgen.varlen_attention(q8, k8, v8, cu_q, cu_k, maxq, maxk, return_lse=True, out=out, **kw)
    torch.cuda.synchronize()
    assert o.dtype == out_dtype
    return o, lse


def check_mma(out, lse, ref, ref_lse, bound, lse_bound, rows=None):
    """The FP8 tensor-core variant's bounds (per element, and the mean error within a quarter of the
    mean bound), exact zeros and -inf for rows that see no key, the LSE within its bound plus
    gpu_helpers.check's tolerance."""
    out, lse = out[:rows], lse[:, :rows]
    assert not torch.isnan(out).any(), "unwritten or NaN output rows"
    assert not torch.isnan(lse).any(), "unwritten or NaN lse"
    err = (out.double() - ref).abs()
    ratio = float((err / bound.clamp(min=1e-300)).max())
    assert (err <= bound).all(), f"max err / bound {ratio:.3f} (max err {err.max().item():.3e})"
    # the mean error above fp16's subnormal rounding (reference.OUT_ROUNDING_FLOOR: no systematic part)
    e_sys = (err - OUT_ROUNDING_FLOOR).clamp(min=0)
    assert float(e_sys.mean()) <= 0.25 * float(bound.mean()), f"mean err {e_sys.mean():.3e} vs bound {bound.mean():.3e}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), "rows with no visible key must have lse = -inf exactly"
    assert torch.all(out.transpose(0, 1)[empty] == 0)
    fin = ~empty
    lerr = (lse.double()[fin] - ref_lse[fin]).abs()
    tol = 2e-3 + 1e-4 * ref_lse[fin].abs() + lse_bound[fin]
    assert lerr.numel() == 0 or (lerr <= tol).all(), f"lse err {lerr.max().item():.3e}, worst / tol {(lerr / tol).max():.3f}"
    return ratio


def finite_codes(n, seed):
    """n e4m3 values with distinct-ish finite codes of moderate size."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n,), generator=g, dtype=torch.int32)
    raw = (raw & 0x87) | 0x30        # exponent field 6..7 (values 0.5 .. 1.875), any sign / mantissa
    return raw.to(torch.uint8).view(E4M3)


@pytest.mark.parametrize("causal", [True, False])
def test_one_hot_rows_give_the_chosen_value_exactly(causal):
    """Every query row aims at one key (q_r = +-8 e_a, keys +-e_a) with a logit gap that makes every
    other probability round to 0 in e4m3 and P = 256 exactly, so O_r must equal v_j(r) exactly: pins
    the layouts of Q8/K8 (64-byte swizzle descriptors), P's fragments, V^T's key relabelling and the
    ldmatrix/stmatrix transpose.  On a mismatch the message names the key whose value came back."""
    d, hq, hkv = 128, 2, 1
    lq = lk = 256                                   # two 128-key blocks
    k = torch.zeros(lk, hkv, d)
    for j in range(lk):                             # key j: +e_j (j < 128) or -e_(j-128): 256 directions
        k[j, 0, j % d] = 1.0 if j < d else -1.0
    q = torch.zeros(lq, hq, d)
    target = torch.zeros(lq, hq, dtype=torch.long)
    for r in range(lq):
        for h in range(hq):
            j = (r * 37 + 11 * h) % ((r + 1) if causal else lk)
            q[r, h, j % d] = 8.0 if j < d else -8.0
            target[r, h] = j
    q8, k8 = q.to(E4M3).cuda(), k.to(E4M3).cuda()
    v8 = finite_codes(lk * hkv * d, 5).view(lk, hkv, d).cuda()
    cu = torch.tensor([0, lq], dtype=torch.int32, device="cuda")
    kd = torch.full((1, hkv), 32.0, device="cuda")      # the target's logit 22.6 (32.6 in log2 units), others 0
    out, _ = call(q8, k8, v8, cu, cu, lq, lk, d, causal=causal, k_descale=kd, arch="sm_90a")
    assert "_fp8mma" in prepared().attn.name, prepared().attn.name
    want = torch.stack([v8.float()[target[:, h].cuda(), 0] for h in range(hq)], dim=1).to(BF16)
    bad = (out.float() != want.float()).any(dim=-1)
    if bad.any():
        vals = v8.float()[:, 0].to(BF16).float()                       # (lk, d)
        notes = []
        for r, h in bad.nonzero()[:12].tolist():
            hits = (vals == out[r, h].float()).all(dim=-1).nonzero().flatten().tolist()
            notes.append(f"row {r} head {h}: want key {int(target[r, h])}, got key(s) {hits[:3] or 'none'}")
        pytest.fail(f"{int(bad.sum())} of {bad.numel()} rows differ:\n" + "\n".join(notes))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_splits", [0, 3])
def test_varlen_prefill_within_the_fp8_p_bound(d, causal, num_splits):
    qlens, klens = [600, 129, 0, 1, 300], [600, 400, 10, 70, 300]
    hq, hkv = 16, 4
    q8, k8, v8, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, 3 + d + num_splits)
    batch = len(qlens)
    qd, kd, vd = per_head(qs, batch, hkv, 1), per_head(ks, batch, hkv, 2), vs.reshape(1, 1)
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=causal, q_descale=qd, k_descale=kd,
                                              v_descale=vd, fp8_mma_bounds=True)
    for _ in range(2):                                  # validating path, then the prepared call
        o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, causal=causal, num_splits=num_splits,
                      q_descale=qd, k_descale=kd, v_descale=vd)
        name = prepared().attn.name
        assert "_fp8mma" in name and prepared().q_convert is None and ("m192n128w12" in name) == (d == 64), name
        ratio = check_mma(o, lse, ref, ref_lse, bound, lb)
    print(f"fp8_mma d {d} causal {causal} splits {num_splits}: worst err / bound {ratio:.3f}")


@pytest.mark.parametrize("causal", [True, False])
def test_head_dim_256_with_128_key_blocks(causal):
    """d 256 on the FP8 tensor-core variant with 128-key blocks (``heuristics.SM90_FP8_MMA_TILES``;
    24 / 240 registers, 230,656 B of shared memory).  One split: the automatic bound would split this
    batch, and a split call keeps its usual tile (``heuristics.SM90_FP8_MMA_TILE_LIMITS``)."""
    qlens, klens = [300, 1, 257, 129], [700, 64, 257, 129]
    hq, hkv, d = 16, 4, 256
    q8, k8, v8, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, 13)
    qd = per_head(qs, len(qlens), hkv, 7)
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=causal, q_descale=qd, k_descale=ks,
                                                  v_descale=vs, fp8_mma_bounds=True)
    o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, causal=causal, q_descale=qd, k_descale=ks,
                  v_descale=vs, num_splits=1)
    assert "_fp8mma" in prepared().attn.name and "n128" in prepared().attn.name, prepared().attn.name
    check_mma(o, lse, ref, ref_lse, bound, lb)


@pytest.mark.parametrize("kv_dtype", [E4M3, E5M2])
def test_window_softcap_sinks_and_fp16_output(kv_dtype):
    qlens, klens = [300, 1, 257], [700, 64, 257]
    hq, hkv, d = 16, 4, 128
    q8, k8, v8, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, 9, kv_dtype)
    sinks = torch.linspace(-2.0, 3.0, hq, device="cuda")
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, window_size=(200, 50), softcap=30.0,
                                              q_descale=qs, k_descale=ks, v_descale=vs, sinks=sinks,
                                              fp8_mma_bounds=True)
    o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, out_dtype=FP16, window_size=(200, 50),
                  softcap=30.0, q_descale=qs, k_descale=ks, v_descale=vs, sinks=sinks)
    assert "_fp8mma" in prepared().attn.name, prepared().attn.name
    check_mma(o, lse, ref, ref_lse, bound, lb)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("kv_dtype", [E4M3, E5M2])
def test_sinks_on_causal_rows_that_see_one_or_two_keys(d, kv_dtype):
    """Sinks where most rows of a request see no key and its last rows one or two (chunks far longer
    than their keys, causal: the shape of fuzz seed 35's batch 1436, replay seed 14176579, at d 64
    with an e5m2 cache, 8 / 1 heads, q scaled by 2.5).  A row that sees one key has P = 256
    exactly, so its output is v_0 times the sink's share up to the logit's and the output's
    roundings; the sinks (-3 .. 3) put that share mid-range, where an error in the row's logit or
    LSE shows.  (That batch's one element past the bound was an fp16 subnormal, rounded right: the
    bound lacked the output's absolute rounding there, now its 2^-25 term.)"""
    qlens, klens = [995, 300, 60, 257, 34], [2, 9, 1, 257, 2]
    hq, hkv = 8, 1
    g = torch.Generator(device="cuda").manual_seed(35)
    q8, qs = quantize(2.5 * torch.randn(sum(qlens), hq, d, generator=g, device="cuda"))
    k8, ks = quantize(torch.randn(sum(klens), hkv, d, generator=g, device="cuda"), kv_dtype)
    v8, vs = quantize(torch.randn(sum(klens), hkv, d, generator=g, device="cuda"), kv_dtype)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
    sinks = torch.linspace(-3.0, 3.0, hq, device="cuda")
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=True, q_descale=qs, k_descale=ks,
                                                  v_descale=vs, sinks=sinks, fp8_mma_bounds=True)
    o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, out_dtype=FP16, causal=True, q_descale=qs,
                  k_descale=ks, v_descale=vs, sinks=sinks)
    assert "_fp8mma" in prepared().attn.name and "_sinks" in prepared().attn.name, prepared().attn.name
    check_mma(o, lse, ref, ref_lse, bound, lb)


@pytest.mark.parametrize("d,tile,window", [(64, "m192n128w12", (-1, -1)), (256, "m128n128w8", (-1, -1)),
                                           (256, "m128n128w8", (300, 0))])
def test_softcap_on_the_tensor_core_tiles(d, tile, window):
    """A soft-cap (tanh.approx) on the FP8 tensor-core variant's own tiles at d 64 (192 rows in three
    consumer warpgroups) and d 256 (128-key blocks, which spill in the consumers with a soft-cap or
    a window and still ran 2.8-2.9x the usual tile: ``heuristics.SM90_FP8_MMA_TILE_LIMITS``), at d 256
    with a window too, within the reference's bounds (the FP8 accumulation's and the tanh's)."""
    qlens, klens = [300, 1, 257, 129], [700, 64, 257, 129]
    hq, hkv = 16, 4
    q8, k8, v8, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, 17 + d + window[0])
    qd = per_head(qs, len(qlens), hkv, 8)
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=True, window_size=window,
                                                  softcap=20.0, q_descale=qd, k_descale=ks, v_descale=vs,
                                                  fp8_mma_bounds=True)
    o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, causal=True, window_size=window, softcap=20.0,
                  q_descale=qd, k_descale=ks, v_descale=vs, num_splits=1)
    name = prepared().attn.name
    assert "_fp8mma" in name and "_softcap" in name and tile in name, name
    assert ("_local" in name) == (window[0] >= 0), name
    check_mma(o, lse, ref, ref_lse, bound, lb)


@pytest.mark.parametrize("page_size,causal,block_n", [(16, True, 224), (64, True, 192), (32, False, 224),
                                                     (56, True, 224), (96, False, 192)])
def test_chunked_paged_prefill(page_size, causal, block_n):
    """Chunked prefill on an FP8 paged cache: pages TMA boxes at 224 keys (16, 32, 56 tokens), and
    pages it cannot (64, 96: the 192-key fallback, heuristics.SM90_FP8_MMA_PAGED_BLOCKS), with and
    without the causal mask."""
    qlens, klens = [700, 129, 300], [3000, 129, 1000]
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, page_size, 41 + page_size)
    (q8, qs), (kc8, ks), (vc8, vs) = quantize(q), quantize(kc), quantize(vc)
    qd = per_head(qs, len(qlens), hkv, 4)
    k, v, cu_k = gather_paged(kc8, vc8, pt, used)
    ref, ref_lse, bound, lb = attention_reference(q8, k, v, cu_q, cu_k, causal=causal, q_descale=qd, k_descale=ks,
                                              v_descale=vs, fp8_mma_bounds=True)
    o, lse = call(q8, kc8, vc8, cu_q, None, max(qlens), max(klens), d, seqused_k=used, page_table=pt, causal=causal,
                  q_descale=qd, k_descale=ks, v_descale=vs)
    name = prepared().attn.name
    assert "_fp8mma" in name and f"n{block_n}w8" in name, name
    check_mma(o, lse, ref, ref_lse, bound, lb)


@pytest.mark.parametrize("case", ["decode_paged", "d96", "sm_80"])
def test_other_kernels_take_q_converted_exactly(case):
    """Calls the FP8 tensor-core variant does not take get q converted to the output dtype (exact)
    and the FP8 K/V kernels: the 16-bit tolerance holds against the dequantised reference."""
    hq, hkv = 16, 4
    if case == "decode_paged":
        klens = [3000, 1, 0, 777]
        qlens = [1] * len(klens)
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, 128, 128, 16, 6)
        (q8, qs), (kc8, ks), (vc8, vs) = quantize(q), quantize(kc), quantize(vc)
        k, v, cu_k = gather_paged(kc8, vc8, pt, used)
        qd = per_head(qs, len(klens), hkv, 5)
        ref, ref_lse = attention_reference(q8, k, v, cu_q, cu_k, causal=True, q_descale=qd, k_descale=ks, v_descale=vs)
        o, lse = call(q8, kc8, vc8, cu_q, None, 1, max(klens), 128, seqused_k=used, page_table=pt, causal=True,
                      q_descale=qd, k_descale=ks, v_descale=vs)
    else:
        d = 96 if case == "d96" else 128
        qlens, klens = [300, 1, 257], [700, 64, 257]
        q8, k8, v8, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, 11)
        qd = per_head(qs, len(qlens), hkv, 6)
        ref, ref_lse = attention_reference(q8, k8, v8, cu_q, cu_k, causal=True, q_descale=qd, k_descale=ks,
                                           v_descale=vs)
        o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, causal=True, q_descale=qd, k_descale=ks,
                      v_descale=vs, **({"arch": "sm_80"} if case == "sm_80" else {}))
    p = prepared()
    assert "_fp8mma" not in p.attn.name and p.q_convert == BF16, p.attn.name
    check_converted(o, lse, ref, ref_lse, BF16, E4M3)
    o2, lse2 = call(q8, *((kc8, vc8, cu_q, None, 1, max(klens), 128) if case == "decode_paged" else
                          (k8, v8, cu_q, cu_k, max(qlens), max(klens), 96 if case == "d96" else 128)),
                    **({"seqused_k": used, "page_table": pt} if case == "decode_paged" else {}), causal=True,
                    q_descale=qd, k_descale=ks, v_descale=vs, **({"arch": "sm_80"} if case == "sm_80" else {}))
    assert torch.equal(o2, o) and torch.equal(lse2, lse), "the prepared call (fast path) must convert q the same way"


@pytest.mark.parametrize("decode", [False, True])
def test_plan_captured_in_a_cuda_graph(decode):
    """AttentionPlan(q_dtype='e4m3') captured once, replayed with new q/K/V and new q/k/v descale
    values written in place; a prefill plan runs the FP8 tensor-core variant, a decode plan the
    converted q (the conversion is captured too)."""
    cap, hq, hkv, d, ps = 4, 16, 4, 128, 64
    max_ctx = 2048
    max_tq = cap if decode else 2 * 250 + cap
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=max_tq, max_seqlen_q=1 if decode else 250, max_seqlen_k=max_ctx, paged=True,
                         page_size=ps, causal=True, kv_dtype="e4m3", q_dtype="e4m3")
    assert ("_fp8mma" in plan.attn.spec.name) == (not decode) and (plan.q_convert is None) == (not decode)
    kc, vc, q, cu_q, used, pt, out, lse = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, kv_dtype=E4M3,
                                                       q_dtype=E4M3)
    qd, kd, vd = (torch.ones(cap, hkv, device="cuda") for _ in range(3))
    rng = np.random.default_rng(29)

    def new_step(seed):
        batch, lq, ctx = draw_lengths(rng, cap, max_ctx, prefill=not decode)
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        for t, x in ((q, torch.randn(q.shape, device="cuda")), (kc, torch.randn(kc.shape, device="cuda")),
                     (vc, torch.randn(vc.shape, device="cuda"))):
            t.copy_(quantize(x)[0])
        for i, t in enumerate((qd, kd, vd)):
            t.copy_(per_head(torch.tensor(0.01), cap, hkv, seed + i))    # in place: the graph reads these
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return batch, int(lq.sum())

    def run():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse, q_descale=qd, k_descale=kd,
                 v_descale=vd)

    new_step(100)
    graph = capture(run)
    for i in range(2):
        batch, tq = new_step(200 + 10 * i)
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        got = attention_reference(q[:tq], k, v, cu_q[: batch + 1], cu_k, causal=True, q_descale=qd[:batch],
                                  k_descale=kd[:batch], v_descale=vd[:batch], fp8_mma_bounds=not decode)
        if decode:
            check_converted(out[:tq], lse[:, :tq], got[0], got[1], BF16, E4M3)
        else:
            check_mma(out[:tq], lse[:, :tq], *got)
        assert torch.isnan(out[tq:]).all(), "rows past the batch's tokens must not be written"
        assert torch.isnan(lse[:, tq:]).all(), "lse rows past the batch must not be written"


@pytest.mark.parametrize("causal,window,cap,splits,page_size", [
    (True, (-1, -1), 0.0, 1, 0), (False, (-1, -1), 0.0, 1, 0), (True, (150, 0), 0.0, 1, 0),
    (True, (-1, -1), 20.0, 1, 0), (True, (-1, -1), 0.0, 3, 0), (True, (-1, -1), 0.0, 1, 16),
    (False, (-1, -1), 0.0, 3, 64)])
def test_packed_gqa_on_the_head_dim_64_tile(causal, window, cap, splits, page_size):
    """Pack-GQA on the FP8 tensor-core tile at head dim 64 (192 rows: 24 tokens x 8 query heads of
    one KV head; ``heuristics.SM90_FP8_PACK_MAX_HEAD_DIM``): per-(request, KV head) q, k
    and v descales, which a packed tile reads at its KV head, per-query-head sinks, ragged requests whose ends fall
    inside tiles, a request with no queries; causal, non-causal, a window, a soft-cap, split-KV and
    pages of 16 / 64.  Within the reference's FP8 bounds; with one split the packed call equals the
    unpacked one bit for bit (packing changes which rows share a tile, not a row's arithmetic)."""
    qlens, klens = [500, 23, 0, 700, 191], [500, 60, 40, 900, 191]
    hq, hkv, d = 32, 4, 64
    batch = len(qlens)
    seed = 61 + page_size + splits + int(causal) + int(cap)
    if page_size:
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, page_size, seed)
        (q8, qs), (k8, ks), (v8, vs) = quantize(q), quantize(kc), quantize(vc)
        k, v, cu_k = gather_paged(k8, v8, pt, used)
        kv_args = (k8, v8, cu_q, None)
        extra = {"seqused_k": used, "page_table": pt}
    else:
        q8, k, v, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, seed)
        k8, v8 = k, v
        kv_args = (k8, v8, cu_q, cu_k)
        extra = {}
    qd, kd = per_head(qs, batch, hkv, seed + 1), per_head(ks, batch, hkv, seed + 2)
    vd = per_head(vs, batch, hkv, seed + 3)   # (a packed tile reads v_descale at its KV head too)
    sinks = torch.linspace(-2.0, 2.5, hq, device="cuda")
    kw = dict(causal=causal, window_size=window, softcap=cap, q_descale=qd, k_descale=kd, v_descale=vd, sinks=sinks,
              num_splits=splits, **extra)
    ref, ref_lse, bound, lb = attention_reference(q8, k, v, cu_q, cu_k, causal=causal, window_size=window,
                                                  softcap=cap, q_descale=qd, k_descale=kd, v_descale=vd, sinks=sinks,
                                                  fp8_mma_bounds=True)
    runs = {}
    for pack in (True, False):
        o, lse = call(q8, *kv_args, max(qlens), max(klens), d, pack_gqa=pack, **kw)
        name = prepared().attn.name
        assert "_fp8mma" in name and "m192n128w12" in name and ("_pack_" in name) == pack, name
        assert ("_split" in name) == (splits > 1), name
        check_mma(o, lse, ref, ref_lse, bound, lb)
        runs[pack] = (o, lse)
    if splits == 1:   # (with splits the two tiles' key ranges are shared out differently)
        assert torch.equal(runs[True][0], runs[False][0]) and torch.equal(runs[True][1], runs[False][1])


@pytest.mark.parametrize("causal,splits", [(True, 1), (False, 1), (True, 3)])
def test_packed_gqa_on_the_head_dim_128_tile(causal, splits):
    """Pack-GQA on d 128's FP8 tensor-core tile (128 rows: 16 tokens x 8
    query heads), per-(request, KV head) q / k / v descales, sinks; within the bounds, bit-equal unpacked at one split."""
    qlens, klens = [500, 23, 0, 700, 191], [500, 60, 40, 900, 191]
    hq, hkv, d = 16, 2, 128
    batch = len(qlens)
    q8, k8, v8, cu_q, cu_k, qs, ks, vs = packed(qlens, klens, hq, hkv, d, 71 + splits + int(causal))
    qd, kd, vd = per_head(qs, batch, hkv, 3), per_head(ks, batch, hkv, 4), per_head(vs, batch, hkv, 5)
    sinks = torch.linspace(-2.0, 2.5, hq, device="cuda")
    kw = dict(causal=causal, q_descale=qd, k_descale=kd, v_descale=vd, sinks=sinks, num_splits=splits)
    ref, ref_lse, bound, lb = attention_reference(q8, k8, v8, cu_q, cu_k, causal=causal, q_descale=qd, k_descale=kd,
                                                  v_descale=vd, sinks=sinks, fp8_mma_bounds=True)
    runs = {}
    for pack in (True, False):
        o, lse = call(q8, k8, v8, cu_q, cu_k, max(qlens), max(klens), d, pack_gqa=pack, **kw)
        name = prepared().attn.name
        assert "_fp8mma" in name and ("_pack_" in name) == pack, name
        check_mma(o, lse, ref, ref_lse, bound, lb)
        runs[pack] = (o, lse)
    if splits == 1:
        assert torch.equal(runs[True][0], runs[False][0]) and torch.equal(runs[True][1], runs[False][1])
