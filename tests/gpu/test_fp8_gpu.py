"""GPU: FP8 K/V caches (``k``/``v`` float8_e4m3fn or float8_e5m2 with fp16/bf16 ``q``,
``k_descale`` / ``v_descale`` of shape (batch, num_heads_kv) or broadcast; issue 24's first slice)
against the float64 reference, which dequantises the same FP8 values exactly
(``attention_reference(..., k_descale=, v_descale=)``), within ``tolerance(dtype, kv_dtype)``
(the compute dtype's: see its derivation).  Prefill-shaped calls run on the Hopper kernel on an H200
(TMA into FP8 landing stages, converted by the producer warps; ``arch="sm_80"`` forces the sm_80
mainloop, decode-shaped calls take it anyway): varlen prefill (causal GQA, forced and automatic
split-KV, head dims 64 to 256 and 192 x 128, soft-cap and a window; both mainloops), chunked paged
prefill with TMA page boxes (pages of 16, 64 and 128 tokens) and with pages TMA cannot box (5: the
sm_80 mainloop), paged decode (pack-GQA, splits, pages of 16 and 1 tokens: the
per-row page lookup), a mixed prefill + decode step (on the H200 the Hopper fused kernel, or the
classes in turn; the sm_80 fused kernel forced onto sm_80),
per-tensor and absent descales, new descale values read by a repeated (graph-launched) call, and
an ``AttentionPlan(kv_dtype=)`` captured in a CUDA graph and replayed with new inputs and new descale
values written in place (padded batches).  Outputs and LSE are NaN-poisoned; rows past the batch
must stay unwritten.  Part of the GPU suite (tools/gpu_check.sh) on the H200."""
import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.front.plan import AttentionPlan

from gpu_helpers import (capture, check, draw_lengths, make_packed, plan_buffers, prepared,  # noqa: E402
                         replay, write_lengths)
from test_paged_decode_gpu import make_paged  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = pytest.mark.gpu
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP16 = torch.bfloat16, torch.float16


def descales(batch, hkv, seed, per_tensor=False):
    """k_descale, v_descale: factors in [0.5, 2) per (request, KV head), or one per tensor."""
    g = torch.Generator().manual_seed(seed)
    shape = () if per_tensor else (batch, hkv)
    return tuple((0.5 + 1.5 * torch.rand(shape, generator=g)).float().cuda() for _ in range(2))


def _run(q, k, v, cu_q, cu_k, maxq, maxk, kd, vd, dv, **kw):
    out = torch.full((q.shape[0], q.shape[1], dv), float("nan"), dtype=q.dtype, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, maxq, maxk, return_lse=True, out=out, k_descale=kd,
                                        v_descale=vd, **kw)
    torch.cuda.synchronize()
    return o, lse


@pytest.mark.parametrize("kv_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("arch", [None, "sm_80"])
def test_varlen_prefill_causal_gqa(arch, num_splits, dtype, kv_dtype):
    qlens, klens = [600, 300, 0, 450], [600, 500, 10, 450]
    hq, hkv, d = 32, 8, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 7, dtype=dtype, kv_dtype=kv_dtype)
    kd, vd = descales(len(qlens), hkv, 1)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, k_descale=kd, v_descale=vd)
    for _ in range(2):                                  # validating path, then the prepared call
        o, lse = _run(q, k, v, cu_q, cu_k, max(qlens), max(klens), kd, vd, d, causal=True, arch=arch,
                      num_splits=num_splits)
        check(o, lse, ref, ref_lse, dtype, kv_dtype)
        name = prepared().attn.name
        assert "_kve" in name and ("_wgmma" in name) == (arch is None), name
        if num_splits:
            assert prepared().combine is not None


@pytest.mark.parametrize("arch", [None, "sm_80"])
@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (192, 128), (256, 256)])
@pytest.mark.parametrize("causal,window,softcap", [(True, (-1, -1), 0.0), (False, (200, 50), 30.0)])
def test_varlen_prefill_head_dims_window_softcap(d, dv, causal, window, softcap, arch):
    qlens, klens = [300, 1, 257], [700, 64, 257]
    hq, hkv = 16, 4
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, d, dv=dv, kv_dtype=E4M3)
    kd, vd = descales(len(qlens), hkv, 2)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=causal, window_size=window,
                                                  softcap=softcap, k_descale=kd, v_descale=vd, error_bounds=True)
    o, lse = _run(q, k, v, cu_q, cu_k, max(qlens), max(klens), kd, vd, dv, causal=causal, window_size=window,
                  softcap=softcap, arch=arch)
    check(o, lse, ref, ref_lse, BF16, E4M3, bound=bound, lse_bound=lb)
    assert ("_wgmma" in prepared().attn.name) == (arch is None), prepared().attn.name


@pytest.mark.parametrize("page_size,hopper", [(16, True), (64, True), (128, True), (5, False)])
@pytest.mark.parametrize("kv_dtype,num_splits", [(E4M3, 0), (E5M2, 3)])
def test_chunked_paged_prefill(page_size, hopper, kv_dtype, num_splits):
    """Chunked prefill on a paged FP8 cache: TMA boxes of whole pages (16: eight a 128-key block;
    64; 128: one) into the Hopper kernel's landing stages; pages of 5 tokens cannot be boxed, so
    the call runs on the sm_80 mainloop.  Contexts end mid-page and mid-block."""
    qlens, klens = [700, 129, 300], [3000, 129, 1000]
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, page_size, 31 + page_size)
    kc, vc = kc.to(kv_dtype), vc.to(kv_dtype)
    kd, vd = descales(len(klens), hkv, 8)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, k_descale=kd, v_descale=vd)
    o, lse = _run(q, kc, vc, cu_q, None, max(qlens), max(klens), kd, vd, d, seqused_k=used, page_table=pt,
                  causal=True, num_splits=num_splits)
    check(o, lse, ref, ref_lse, BF16, kv_dtype)
    name = prepared().attn.name
    assert "_kve" in name and ("_wgmma" in name) == hopper, name


@pytest.mark.parametrize("page_size", [16, 1])
@pytest.mark.parametrize("num_splits", [0, 4])
@pytest.mark.parametrize("kv_dtype", [E4M3, E5M2])
def test_paged_decode_pack_gqa(kv_dtype, num_splits, page_size):
    klens = [3000, 1, 0, 777, 64]
    qlens = [1] * len(klens)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, page_size, 5)
    kc, vc = kc.to(kv_dtype), vc.to(kv_dtype)
    kd, vd = descales(len(klens), hkv, 3)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, k_descale=kd, v_descale=vd)
    for _ in range(2):
        o, lse = _run(q, kc, vc, cu_q, None, 1, max(klens), kd, vd, d, seqused_k=used, page_table=pt, causal=True,
                      num_splits=num_splits)
        check(o, lse, ref, ref_lse, BF16, kv_dtype)
        assert "_kve" in prepared().attn.name


@pytest.mark.parametrize("dtype,d,dv,kv_dtype", [(FP16, 128, 128, E4M3), (FP16, 128, 128, E5M2), (BF16, 192, 128, E4M3),
                                               (FP16, 192, 128, E5M2)])
def test_paged_decode_unsplit_without_a_mask(dtype, d, dv, kv_dtype):
    """Paged FP8 decode with no mask and no splits (``num_splits=1``, the FA3 drop-in's varlen default):
    the one-warp tiles where NVRTC 13.0's ptxas gave the L2-hinted copies an odd descriptor register,
    which now copy without the hint (variant_sm80.cuh KV_EVICT_FIRST; tests/test_l2_hint_cpu.py)."""
    klens = [3000, 1, 0, 777, 64]
    qlens = [1] * len(klens)
    hq, hkv = 32, 8
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, dv, 16, d + dv, dtype=dtype)
    kc, vc = kc.to(kv_dtype), vc.to(kv_dtype)
    kd, vd = descales(len(klens), hkv, 13)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=False, k_descale=kd, v_descale=vd)
    for _ in range(2):
        o, lse = _run(q, kc, vc, cu_q, None, 1, max(klens), kd, vd, dv, seqused_k=used, page_table=pt,
                      causal=False, num_splits=1)
        check(o, lse, ref, ref_lse, dtype, kv_dtype)
        name = prepared().attn.name
        assert "_kve" in name and "_none_" in name and "_split" not in name and "_m16n16w1" in name, name


@pytest.mark.parametrize("d,dv,page_size", [(64, 64, 16), (96, 96, 8), (128, 128, 5), (128, 64, 16), (192, 128, 16),
                                             (256, 256, 8)])
@pytest.mark.parametrize("window,softcap", [((-1, -1), 0.0), ((300, 0), 20.0)])
def test_register_conversion_decode_tile_window_softcap_head_dims(d, dv, page_size, window, softcap):
    """The 16-row decode tile that converts FP8 in registers (AttentionSpec.fp8_in_registers: keys
    inside a block permuted, the mask following them, O's columns permuted back) with a sliding
    window (which masks inside blocks), a soft-cap, head dims 64 / 96 / 128 (Q in registers), 192 x 128
    and 256 (Q's fragments in shared memory), head_dim_v != head_dim, and pages of 5 and 8 tokens (the
    per-row page lookup), split-KV automatic."""
    klens = [2500, 1, 301, 0, 47, 1200]
    qlens = [1] * len(klens)
    hq, hkv = 16, 4
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, dv, page_size, d + page_size)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd, vd = descales(len(klens), hkv, 6)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=True, window_size=window,
                                                  softcap=softcap, k_descale=kd, v_descale=vd, error_bounds=True)
    o, lse = _run(q, kc, vc, cu_q, None, 1, max(klens), kd, vd, dv, seqused_k=used, page_table=pt, causal=True,
                  window_size=window, softcap=softcap)
    check(o, lse, ref, ref_lse, BF16, E4M3, bound=bound, lse_bound=lb)
    name = prepared().attn.name
    assert "_kve4m3" in name and "_m16n16w1" in name, name      # the 16-row one-warp tile: FP8 in registers
    # FP8 in registers: the FP8 stages only, and above head dim 128 Q's fragments (no 16-bit K/V tile)
    assert prepared().attn.smem == (2 * 16 * d if d > 128 else 0) + 2 * 16 * (d + dv), (name, prepared().attn.smem)


@pytest.mark.parametrize("arch,kv_dtype,d,window,launch", [
    (None, E4M3, 128, (-1, -1), "fused"), (None, E5M2, 64, (300, 0), "fused"), (None, E4M3, 64, (200, 0), "fused_whole"),
    (None, E4M3, 128, (-1, -1), "fused_kt"), (None, E5M2, 64, (300, 0), "fused_kt"),
    (None, E4M3, 128, (200, 0), "fused_kt_whole"),
    (None, E4M3, 128, (-1, -1), "pair"),
    (None, E4M3, 256, (-1, -1), "pair"), ("sm_80", E4M3, 128, (-1, -1), "fused_sm80"),
    ("sm_80", E4M3, 256, (-1, -1), "fused_sm80")])
def test_mixed_prefill_decode_step(arch, kv_dtype, d, window, launch, monkeypatch):
    """A paged mixed step (prefill chunks, decodes, a 3-token speculative request, an empty-context
    decode) on an FP8 cache: on the H200 the Hopper fused kernel (the Hopper FP8 variant for the long
    requests, recording row_splits, and the split FP8 decode tile for the short ones in one launch;
    the combine), with a window too (a window under 256 keys, ``heuristics.MIN_SPLIT_KEYS``, keeps the
    decodes whole: no combine); the same two variants in turn with ``KERNELGEN_FP8_FUSED=0`` and
    at head dim 256; forced onto sm_80, the sm_80 fused kernel (its FP8 prefill tile and the FP8
    decode tile; at head dim 256 the decode tile with Q's fragments in shared memory, which made that
    fused kernel fit).  ``fused_kt``: the Hopper fused kernel with its default decode tile, the
    keys-as-rows one (FP8 converted in registers on 8 query rows, keys and head dims permuted as the
    16-row tile's), split and whole; ``fused`` / ``fused_whole`` with the 16-row one
    (``KERNELGEN_SM90_SHORT_ROWS=16``)."""
    from kernelgen.front import api
    if launch == "pair" and d == 128:
        monkeypatch.setenv("KERNELGEN_FP8_FUSED", "0")
    # "fused" / "fused_whole": the 16-row FP8 decode tile inside the Hopper fused kernel (the default is
    # the keys-as-rows one: "fused_kt")
    monkeypatch.setenv("KERNELGEN_SM90_SHORT_ROWS", "8" if launch.startswith("fused_kt") else "16")
    api.clear_signature_cache()
    qlens, klens = [300, 1, 1, 3, 900, 1, 1], [900, 40, 3000, 7, 2048, 1, 6000]
    hq, hkv = 32, 8
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, 9)
    kc, vc = kc.to(kv_dtype), vc.to(kv_dtype)
    kd, vd = descales(len(klens), hkv, 4)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, window_size=window, k_descale=kd,
                                       v_descale=vd)
    o, lse = _run(q, kc, vc, cu_q, None, max(qlens), max(klens), kd, vd, d, seqused_k=used, page_table=pt,
                  causal=True, window_size=window, arch=arch)
    check(o, lse, ref, ref_lse, BF16, kv_dtype)
    call = prepared()
    kind = {"fused": "PreparedFusedCall", "fused_whole": "PreparedFusedCall", "pair": "PreparedPairCall",
            "fused_sm80": "PreparedFusedCall", "fused_kt": "PreparedFusedCall",
            "fused_kt_whole": "PreparedFusedCall"}[launch]
    assert type(call).__name__ == kind
    if launch.startswith("fused_kt"):
        assert "fused_attn_sm_90a_wgmma" in call.pair.name and "__m8n16w1" in call.pair.name, call.pair.name
        assert (call.combine is None) == (launch == "fused_kt_whole"), call.pair.name
    elif launch in ("fused", "fused_whole"):
        assert "__m16n16w1" in call.pair.name, call.pair.name
    if launch == "fused_whole":
        assert call.combine is None and "fused_attn_sm_90a_wgmma" in call.pair.name and "_split" not in call.pair.name
    elif launch == "fused":
        assert call.combine is not None and "fused_attn_sm_90a_wgmma" in call.pair.name and "_kve" in call.pair.name
    elif launch == "fused_sm80":
        assert call.combine is not None and "_wgmma" not in call.pair.name and "_kve" in call.pair.name
    elif launch == "pair":
        assert call.combine is not None
        assert "_wgmma" in call.attn_long.name and "_rowsplits" in call.attn_long.name, call.attn_long.name
        assert "_m16n16w1" in call.attn_short.name and "_kve" in call.attn_short.name, call.attn_short.name
    api.clear_signature_cache()


@pytest.mark.parametrize("d,dtype,softcap,window,page_size", [
    (96, BF16, 0.0, (-1, -1), 8), (128, BF16, 30.0, (-1, -1), 64), (64, FP16, 0.0, (200, 0), 16),
    (128, FP16, 20.0, (-1, -1), 32)])
def test_keys_as_rows_fp8_decode_tile_in_the_fused_kernel(d, dtype, softcap, window, page_size):
    """The Hopper fused kernel's default FP8 decode tile (keys as the MMA's M, 8 query rows, K / V
    converted in registers: templates/attention/tile_kt_sm80.cuh) at head dim 96 (8-byte word loads),
    with a soft-cap (its per-column scale), fp16 q (no row scaling) and bf16 q whose rows differ in
    magnitude by powers of two (2^-3 .. 2^3: each column's own fp16 shift and unscale, on softmaxes neither
    flat nor one-hot, so a column scaled by another's factor shows), 16 / 2 heads (8 query heads a KV head
    fill the tile's rows; a 3-token request takes three tiles), split, and whole under a 200-key window;
    pages of 8 keys (half a key block: the per-row page lookup), 16, 32 and 64 (whole blocks a page: the
    page id read a block ahead, at slots 0, 16, 32, 48 of a page)."""
    from kernelgen.front import api
    api.clear_signature_cache()
    qlens, klens = [300, 1, 1, 3, 700, 1, 1], [900, 40, 3000, 7, 1500, 1, 5000]
    hq, hkv = 16, 2
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, page_size, 11 + d, dtype=dtype)
    g = torch.Generator(device="cuda").manual_seed(d)
    scale = torch.exp2(torch.randint(-3, 4, (q.shape[0], hq, 1), generator=g, device="cuda").to(q.dtype))
    q = (q * scale).to(dtype)                           # rows at 2^-3 .. 2^3 (exact: powers of two)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd, vd = descales(len(klens), hkv, 5)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=True, window_size=window,
                                                  softcap=softcap, k_descale=kd, v_descale=vd, error_bounds=True)
    o, lse = _run(q, kc, vc, cu_q, None, max(qlens), max(klens), kd, vd, d, seqused_k=used, page_table=pt,
                  causal=True, window_size=window, softcap=softcap)
    check(o, lse, ref, ref_lse, dtype, E4M3, bound=bound, lse_bound=lb)
    call = prepared()
    assert type(call).__name__ == "PreparedFusedCall" and "__m8n16w1" in call.pair.name, call.pair.name
    assert (call.combine is None) == (window != (-1, -1)), call.pair.name
    api.clear_signature_cache()


@pytest.mark.parametrize("kind", ["prefill", "decode_split"])
def test_sinks_with_an_fp8_cache(kind):
    """Attention sinks (gpt-oss) on an FP8 cache: a prefill on the Hopper kernel (the sink in its
    epilogue) and a split paged decode on the sm_80 mainloop (the sink in the combine kernel)."""
    from test_sinks_gpu import make_sinks
    hq, hkv, d = 16, 4, 64
    if kind == "prefill":
        qlens, klens = [300, 129], [300, 700]
        q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 41, kv_dtype=E4M3)
        kw, maxq = dict(num_splits=1), max(qlens)
    else:
        klens = [2000, 35, 900]
        qlens = [1] * len(klens)
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, 43)
        k, v = kc.to(E4M3), vc.to(E4M3)
        kw, maxq, cu_k = dict(seqused_k=used, page_table=pt, num_splits=3), 1, None
    sinks = make_sinks(hq, 2)
    kd, vd = descales(len(klens), hkv, 9)
    if kind == "prefill":
        ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, k_descale=kd, v_descale=vd, sinks=sinks)
    else:
        kk, vv, ck = gather_paged(k, v, pt, used)
        ref, ref_lse = attention_reference(q, kk, vv, cu_q, ck, causal=True, k_descale=kd, v_descale=vd, sinks=sinks)
    o, lse = _run(q, k, v, cu_q, cu_k, maxq, max(klens), kd, vd, d, causal=True, sinks=sinks, **kw)
    check(o, lse, ref, ref_lse, BF16, E4M3)
    name = prepared().attn.name
    assert "_kve4m3" in name and "_sinks" in name and ("_wgmma" in name) == (kind == "prefill"), name


def test_per_tensor_and_absent_descales_and_new_values_each_call():
    qlens, klens = [5, 1, 40], [900, 300, 40]
    hq, hkv, d = 16, 2, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 11, dtype=FP16, kv_dtype=E4M3)
    kd, vd = descales(len(qlens), hkv, 5, per_tensor=True)
    for kk, vv in ((kd, vd), (None, None), (kd.expand(3, 2), None)):
        ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, k_descale=kk, v_descale=vv)
        o, lse = _run(q, k, v, cu_q, cu_k, max(qlens), max(klens), kk, vv, d)
        check(o, lse, ref, ref_lse, FP16, E4M3)
    for step in range(3):               # the same tensors, new values: read on the device at every launch
        kd.fill_(0.5 + step)
        vd.fill_(2.0 - 0.5 * step)
        ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, k_descale=kd, v_descale=vd)
        o, lse = _run(q, k, v, cu_q, cu_k, max(qlens), max(klens), kd, vd, d)
        check(o, lse, ref, ref_lse, FP16, E4M3)


def test_rows_past_the_batch_stay_unwritten():
    qlens, klens = [7, 9], [100, 9]
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, 8, 2, 64, 13, kv_dtype=E4M3)
    q = torch.cat([q, torch.randn(5, 8, 64, device="cuda").to(BF16)])     # 5 rows no request owns
    kd, vd = descales(2, 2, 6)
    out = torch.full((q.shape[0], 8, 64), float("nan"), dtype=BF16, device="cuda")
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 9, 100, k_descale=kd, v_descale=vd, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out[16:]).all() and not torch.isnan(out[:16]).any()


@pytest.mark.parametrize("arch", ["sm_90a", None])
def test_bf16_q_rows_of_any_magnitude_on_the_fp16_gemms(arch):
    """An FP8 cache with a bf16 q runs its GEMMs on fp16 (the Hopper kernel's MMA_F16, the decode
    tile's FP8_REGS), each q row moved into fp16's range by its own power of two.  Rows of 2^-30 to
    2^16 times N(0, 1) (outside fp16's range both ways: its subnormals end at 2^-24, its largest
    value is 65504; each next to rows of the other extreme in the same warp and quad) must match the
    float64 reference as ordinary rows do, and an inf in one row must leave the other rows, its
    warp's included, exact: its own row is NaN in the reference and is not compared.  Rows up to
    2^40 (logits beyond 2^45) must come out finite: each exponent is taken against the row max's
    product rounded up, so none exceeds 0 and P (fp16 here) cannot overflow.  (Not accurate there:
    the Hopper kernel applies the logit's scale in the same FFMA that subtracts that max, as
    FlashAttention-3 does, so beyond 2^27 in log2 units the row's common factor, up to one ulp of
    the max below 1, underflows fp16's P; rounded to nearest it overflowed instead, and rows at 2^29
    came out NaN.)  Prefill-shaped (``sm_90a``: the Hopper kernel) and decode-shaped (``None`` with
    one query a request: the decode tile) calls."""
    if arch == "sm_90a":
        qlens, klens = [150, 70], [300, 70]
    else:
        qlens, klens = [1] * 6, [300, 70, 1000, 5, 64, 2000]
    hq, hkv, d = 8, 2, 128
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 21, kv_dtype=E4M3)
    g = torch.Generator(device="cuda").manual_seed(22)
    e = torch.randint(-30, 41, (q.shape[0], hq, 1), generator=g, device="cuda").float()
    q = (q.float() * torch.exp2(e)).to(BF16)
    bad_t, bad_h = 5, 3
    q[bad_t, bad_h, 7] = float("inf")
    kd, vd = descales(len(qlens), hkv, 3)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, k_descale=kd, v_descale=vd)
    o, lse = _run(q, k, v, cu_q, cu_k, max(qlens), max(klens), kd, vd, d, causal=True, arch=arch)
    name = prepared().attn.name
    assert "_kve4m3" in name and ("_wgmma" in name) == (arch == "sm_90a"), name
    keep = torch.ones(q.shape[0], hq, dtype=torch.bool, device="cuda")
    keep[bad_t, bad_h] = False
    assert torch.isfinite(o[keep]).all(), "a finite row came out inf / NaN"
    exact = keep & (e.squeeze(-1) <= 16)
    assert exact.sum() > q.shape[0] * hq // 2
    atol, rtol = tolerance(BF16, E4M3)
    r = ref.to(BF16).double()[exact]
    err = (o.double()[exact] - r).abs()
    assert (err <= atol + rtol * r.abs()).all(), f"max err {err.max().item():.3e}"
    lerr = (lse.transpose(0, 1).double()[exact] - ref_lse.transpose(0, 1)[exact]).abs()
    assert (lerr <= 2e-3 + 1e-4 * ref_lse.transpose(0, 1)[exact].abs()).all(), f"lse err {lerr.max().item():.3e}"


@pytest.mark.parametrize("arch", [None, "sm_90a"])
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("kv_dtype", [E4M3, E5M2])
def test_every_fp8_code_converts_exactly(dtype, kv_dtype, arch):
    """One key per request: the softmax weight is exactly 1, so the output is V converted to the
    16-bit dtype (v_descale 1).  V holds all 256 codes (over 2 heads x 128 lanes), so every value's
    conversion (subnormals included) is checked exactly (-0 reads as +0: the P V sum starts at +0,
    and +0 + -0 = +0); the codes of
    non-finite values (e4m3fn's NaN, e5m2's inf / NaN: outside what a cache holds) are replaced by 0.
    ``arch="sm_90a"``: through the Hopper kernel's landing stages and producer conversion."""
    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    raw[~torch.isfinite(raw.view(kv_dtype).float())] = 0
    codes = raw.view(kv_dtype)
    v = codes.view(1, 2, 128).cuda()
    k = torch.zeros(1, 2, 128, dtype=kv_dtype, device="cuda")
    q = torch.randn(1, 2, 128, dtype=dtype, device="cuda")
    cu = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    out = torch.full((1, 2, 128), float("nan"), dtype=dtype, device="cuda")
    kernelgen.varlen_attention(q, k, v, cu, cu, 1, 1, causal=True, out=out, arch=arch)
    torch.cuda.synchronize()
    assert ("_wgmma" in prepared().attn.name) == (arch == "sm_90a")
    want = v.float().to(dtype)
    assert torch.equal(out.float(), want.float()), "a code converted inexactly"
    assert torch.count_nonzero(want) == 254 - (~torch.isfinite(torch.arange(256, dtype=torch.int32).to(
        torch.uint8).view(kv_dtype).float())).sum()   # every nonzero finite code is there


@pytest.mark.parametrize("kind,kv_dtype", [("decode", E4M3), ("mixed", E5M2), ("mixed_hopper", E4M3)])
def test_plan_graph_replays_with_new_descales(kind, kv_dtype):
    """An AttentionPlan made with kv_dtype, one step captured in a CUDA graph and replayed with new
    lengths, page tables, queries, cache contents *and new descale values written in place* into
    the same tensors (the kernels read them at replay).  decode: a paged decode plan with (batch,
    num_heads_kv) descales (a row per request slot, padding included); mixed: a mixed prefill +
    decode plan (the sm_80 fused kernel: no page size, so no Hopper kernel) with per-tensor
    descales; mixed_hopper: the same with the page size given, so the plan runs the Hopper fused
    kernel (the Hopper FP8 variant with TMA page boxes beside the FP8 decode tile).  Batches are padded
    with zero-length requests up to the capacity; rows past the batch's tokens stay NaN."""
    hq, hkv, d, ps, cap = 32, 8, 128, 16, 16
    max_ctx = 2048
    decode = kind == "decode"
    max_tq = cap if decode else 640
    kc, vc, q, cu_q, used, pt, out, lse = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, kv_dtype=kv_dtype)
    shape = (cap, hkv) if decode else ()
    kd = torch.ones(shape, device="cuda", dtype=torch.float32)
    vd = torch.ones(shape, device="cuda", dtype=torch.float32)
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=max_tq, max_seqlen_q=1 if decode else 256, max_seqlen_k=max_ctx, paged=True,
                         causal=True, kv_dtype=kv_dtype, **({"page_size": ps} if kind == "mixed_hopper" else {}))
    # mixed_hopper: the Hopper fused kernel (the Hopper FP8 variant beside the FP8 decode tile); mixed:
    # the sm_80 fused kernel (no page size: TMA cannot box the pages)
    assert plan.recipe.kind == ("single" if decode else "fused")
    assert plan.hopper == (kind == "mixed_hopper") and "_kve" in plan.attn.spec.name
    rng = np.random.default_rng(23)

    def new_step(seed):
        batch, lq, ctx = draw_lengths(rng, cap, max_ctx, prefill=not decode)
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        q.copy_(torch.randn(max_tq, hq, d, device="cuda").to(BF16))
        kc.copy_((2 * torch.randn(kc.shape, device="cuda")).to(kv_dtype))
        vc.copy_((2 * torch.randn(vc.shape, device="cuda")).to(kv_dtype))
        new_kd, new_vd = descales(cap, hkv, seed, per_tensor=not decode)
        kd.copy_(new_kd)                          # in place: the captured kernels read the same addresses
        vd.copy_(new_vd)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return batch, int(lq.sum())

    def run():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse, k_descale=kd, v_descale=vd)

    new_step(100)
    graph = capture(run)                           # warm (validate, prepare, compile; the fast path), capture
    for i in range(2):
        batch, tq = new_step(200 + i)
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        kk, vv = (kd[:batch], vd[:batch]) if decode else (kd, vd)
        ref, ref_lse = attention_reference(q[:tq], k, v, cu_q[: batch + 1], cu_k, causal=True, k_descale=kk,
                                           v_descale=vv)
        check(out[:tq], lse[:, :tq], ref, ref_lse, BF16, kv_dtype)
        assert torch.isnan(out[tq:]).all(), "rows past the batch's tokens must not be written"
        assert torch.isnan(lse[:, tq:]).all(), "lse rows past the batch must not be written"
