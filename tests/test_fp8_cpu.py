"""FP8 K/V caches (issue 24, first slice) on the CPU: the float64 reference dequantises exactly,
the checks of k/v dtypes and of ``k_descale`` / ``v_descale`` (FlashAttention-3's shapes; errors
name the argument), the tolerance."""
import math

import pytest
import torch

from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.selection import validation as V
from kernelgen.selection.heuristics import FP8_DECODE_STAGES, fp8_tile

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
CPU = torch.device("cpu")


def _fp8_batch(kv_dtype=E4M3, hq=4, hkv=2, d=16, lq=(3, 1), lk=(5, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0] + torch.tensor(lq).cumsum(0).tolist(), dtype=torch.int32)
    ck = torch.tensor([0] + torch.tensor(lk).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(int(cq[-1]), hq, d, generator=g).half()
    k = (4 * torch.randn(int(ck[-1]), hkv, d, generator=g)).to(kv_dtype)
    v = (4 * torch.randn(int(ck[-1]), hkv, d, generator=g)).to(kv_dtype)
    return q, k, v, cq, ck


# ----------------------------------------------------------------------------- the reference
@pytest.mark.parametrize("kv_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_dequantises_exactly_per_request_and_kv_head(kv_dtype, causal):
    q, k, v, cq, ck = _fp8_batch(kv_dtype)
    kd = torch.tensor([[0.25, 0.5], [0.125, 2.0]])
    vd = torch.tensor([[1.5, 0.75], [0.5, 0.0625]])
    out, lse = attention_reference(q, k, v, cq, ck, causal=causal, k_descale=kd, v_descale=vd)
    # by hand: dequantise each request's rows, then the 16-bit reference on float64 inputs
    kk, vv = k.double().clone(), v.double().clone()
    for b in range(2):
        kk[ck[b]:ck[b + 1]] *= kd[b].double()[None, :, None]
        vv[ck[b]:ck[b + 1]] *= vd[b].double()[None, :, None]
    o2, l2 = attention_reference(q, kk, vv, cq, ck, causal=causal)
    assert torch.equal(out, o2) and torch.equal(lse, l2)


def test_reference_per_tensor_scales_broadcast():
    q, k, v, cq, ck = _fp8_batch()
    full = attention_reference(q, k, v, cq, ck, k_descale=torch.full((2, 2), 0.5), v_descale=torch.full((2, 2), 3.0))
    for kd, vd in ((torch.tensor(0.5), torch.tensor(3.0)), (torch.tensor([[0.5]]), torch.tensor([[3.0]])),
                   (torch.tensor([0.5]).expand(2, 2), torch.tensor(3.0).expand(2, 2))):
        o, l = attention_reference(q, k, v, cq, ck, k_descale=kd, v_descale=vd)
        assert torch.equal(o, full[0]) and torch.equal(l, full[1])
    # no descale: factor 1
    o, _ = attention_reference(q, k, v, cq, ck)
    o1, _ = attention_reference(q, k, v, cq, ck, k_descale=torch.ones(()), v_descale=torch.ones(()))
    assert torch.equal(o, o1)


def test_reference_fp8_hand_computed():
    """One query, two keys: q = (1, 0), k = (2, 0), (-1, 0) in e4m3 with k_descale 0.5 (keys 1 and
    -0.5), v = 3 and 448 (e4m3's largest) with v_descale 0.25; scale 1."""
    q = torch.tensor([[[1.0, 0.0]]]).half()
    k = torch.tensor([[[2.0, 0.0]], [[-1.0, 0.0]]]).to(E4M3)
    v = torch.tensor([[[3.0, 0.0]], [[448.0, 0.0]]]).to(E4M3)
    cu_q, cu_k = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32)
    o, lse = attention_reference(q, k, v, cu_q, cu_k, softmax_scale=1.0, k_descale=torch.tensor(0.5),
                                 v_descale=torch.tensor(0.25))
    w = [math.exp(1.0), math.exp(-0.5)]
    assert o[0, 0, 0].item() == pytest.approx((0.75 * w[0] + 112.0 * w[1]) / sum(w), rel=1e-15)
    assert lse[0, 0].item() == pytest.approx(math.log(sum(w)), rel=1e-15)


def test_reference_paged_fp8_cache():
    g = torch.Generator().manual_seed(1)
    kc = torch.randn(6, 4, 2, 16, generator=g).to(E4M3)
    vc = torch.randn(6, 4, 2, 16, generator=g).to(E4M3)
    pt = torch.tensor([[5, 0, 3], [1, 2, 4]], dtype=torch.int32)
    used = torch.tensor([9, 6], dtype=torch.int32)
    k, v, ck = gather_paged(kc, vc, pt, used)
    assert k.dtype == E4M3 and k.shape == (15, 2, 16)
    q = torch.randn(3, 4, 16, generator=g).half()
    cq = torch.tensor([0, 2, 3], dtype=torch.int32)
    kd = torch.rand(2, 2) + 0.5
    out, _ = attention_reference(q, k, v, cq, ck, k_descale=kd, v_descale=kd)
    assert torch.isfinite(out).all()


def test_tolerance_of_an_fp8_cache_is_the_compute_dtypes():
    for dt in (torch.float16, torch.bfloat16):
        for kv in (E4M3, E5M2, None, dt):
            assert tolerance(dt, kv) == tolerance(dt)
    with pytest.raises(ValueError):
        tolerance(torch.float16, torch.float32)


# ----------------------------------------------------------------------------- the checks
def _kv(dtype=E4M3, paged=False):
    shape = (3, 16, 2, 64) if paged else (12, 2, 64)
    return torch.zeros(shape).to(dtype), torch.zeros(shape).to(dtype)


def _inputs(k, v, q_dtype=torch.float16):
    q = torch.zeros(10, 8, 64, dtype=q_dtype)
    cq = torch.tensor([0, 4, 10], dtype=torch.int32)
    ck = torch.tensor([0, 5, 12], dtype=torch.int32)
    return q, k, v, cq, ck


@pytest.mark.parametrize("kv_dtype,name", [(E4M3, "e4m3"), (E5M2, "e5m2")])
@pytest.mark.parametrize("q_dtype", [torch.float16, torch.bfloat16])
def test_fp8_k_v_with_16_bit_q_pass_the_checks(kv_dtype, name, q_dtype):
    q, k, v, cq, ck = _inputs(*_kv(kv_dtype), q_dtype)
    sizes = V.varlen_inputs(q, k, v, cq, ck, None, None, None, devtypes=("cpu",))
    assert sizes["kv_dtype"] == name
    kc, vc = _kv(kv_dtype, paged=True)
    pt = torch.zeros(2, 1, dtype=torch.int32)
    sizes = V.varlen_inputs(q, kc, vc, cq, None, None, None, None, devtypes=("cpu",), seqused_k=torch.zeros(
        2, dtype=torch.int32), page_table=pt)
    assert sizes["kv_dtype"] == name and sizes["paged"]
    # a 16-bit cache has no kv_dtype entry (the sizes of every existing call are unchanged)
    q, k, v, cq, ck = _inputs(*_kv(q_dtype), q_dtype)
    assert "kv_dtype" not in V.varlen_inputs(q, k, v, cq, ck, None, None, None, devtypes=("cpu",))


@pytest.mark.parametrize("k_dtype,v_dtype,exc,msg", [
    (E4M3, E5M2, TypeError, "v must have dtype float8_e4m3fn"),
    (E4M3, torch.float16, TypeError, "v must have dtype float8_e4m3fn"),
    (torch.float16, E4M3, TypeError, "v must have dtype float16"),
    (torch.float32, torch.float32, TypeError, "k must have dtype float16, float8_e4m3fn, float8_e5m2"),
])
def test_mismatched_k_v_dtypes_name_the_argument(k_dtype, v_dtype, exc, msg):
    q, _, _, cq, ck = _inputs(*_kv())
    k, v = torch.zeros(12, 2, 64).to(k_dtype), torch.zeros(12, 2, 64).to(v_dtype)
    with pytest.raises(exc, match=msg):
        V.varlen_inputs(q, k, v, cq, ck, None, None, None, devtypes=("cpu",))


def test_fp8_rows_must_be_16_byte_aligned():
    q, _, _, cq, ck = _inputs(*_kv())
    k = torch.zeros(12, 2, 72).to(E4M3)[..., :64]      # head stride 72 bytes: not a multiple of 16
    with pytest.raises(ValueError, match="k stride 72 of dim 1 must be a multiple of 16 elements"):
        V.varlen_inputs(q, k, k, cq, ck, None, None, None, devtypes=("cpu",))


@pytest.mark.parametrize("x,strides", [
    (torch.ones(2, 4), (4, 1)), (torch.ones(()), (0, 0)), (torch.ones(1), (0, 0)), (torch.ones(1, 1), (0, 0)),
    (torch.ones(2, 1), (1, 0)), (torch.ones(1, 4), (0, 1)),
    (torch.ones(()).expand(2, 4), (0, 0)), (torch.ones(4, 2).t(), (1, 2)), (torch.ones(2, 8)[:, ::2], (8, 2)),
])
def test_descale_shapes_and_strides(x, strides):
    assert V.descale("k_descale", x, 2, 4, CPU, "e4m3") == strides
    assert V.descale("k_descale", None, 2, 4, CPU, "e4m3") is None


@pytest.mark.parametrize("x,exc,msg", [
    ("no", TypeError, "k_descale must be a torch.Tensor"),
    (torch.ones(2, 4, dtype=torch.float16), TypeError, "k_descale must have dtype float32"),
    (torch.ones(2, 4, dtype=torch.float64), TypeError, "k_descale must have dtype float32"),
    (torch.ones(3, 4), ValueError, r"k_descale must have shape \(2, 4\) \(batch, num_heads_kv\)"),
    (torch.ones(2, 3), ValueError, r"k_descale must have shape \(2, 4\)"),
    (torch.ones(8), ValueError, r"k_descale must have shape \(2, 4\)"),
    (torch.ones(4), ValueError, r"a 1-D tensor of several factors is ambiguous"),   # per head or per request?
    (torch.ones(2), ValueError, r"got \(2,\)"),
    (torch.ones(1, 2, 4), ValueError, "k_descale must have shape"),
    (torch.ones(2, 4, device="meta"), ValueError, "k_descale must be on cpu"),
])
def test_bad_descales_name_the_argument(x, exc, msg):
    with pytest.raises(exc, match=msg):
        V.descale("k_descale", x, 2, 4, CPU, "e4m3")


@pytest.mark.parametrize("batch,heads", [(1, 1), (1, 4), (2, 1), (3, 8)])
@pytest.mark.parametrize("x", [torch.ones(5, 9), torch.ones(2, 3, 4)])
def test_a_bad_descale_shape_lists_each_accepted_form_once(batch, heads, x):
    """The accepted shapes, each once and (1,) among them (at batch 1 the list had (1, 1) twice and
    lacked (1,): a new user's find; the full shape was listed again among the broadcast ones: a
    review's)."""
    with pytest.raises(ValueError) as e:
        V.descale("k_descale", x, batch, heads, CPU, "e4m3")
    msg = str(e.value)
    for f in {f"({batch}, {heads})", "()", "(1,)", "(1, 1)", f"({batch}, 1)", f"(1, {heads})"}:
        assert msg.count(f) == 1, (f, msg)


def test_descale_with_a_16_bit_cache_is_refused():
    with pytest.raises(ValueError, match="v_descale applies to an FP8 K/V cache"):
        V.descale("v_descale", torch.ones(2, 4), 2, 4, CPU, None)


def test_non_finite_descales_raise_under_the_host_checks():
    V.check_descale_values("k_descale", torch.ones(2, 4))
    V.check_descale_values("k_descale", None)
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.ones(2, 4)
        x[1, 2] = bad
        with pytest.raises(ValueError, match="k_descale holds a non-finite factor"):
            V.check_descale_values("k_descale", x)


# ----------------------------------------------------------------------------- the spec and the kernels
import dataclasses   # noqa: E402

import fake_cuda as fake_cuda_mod   # noqa: E402   (the fixture is named fake_cuda)
from test_decide import A100, H200, sig   # noqa: E402
from test_fused_cpu import CTX, QLENS, paged_inputs   # noqa: E402

import kernelgen   # noqa: E402
from kernelgen.jit import compiler, render   # noqa: E402
from kernelgen.kernels import params as P   # noqa: E402
from kernelgen.kernels.spec import AttentionSpec, FusedAttentionSpec, TileConfig, spec_from_json   # noqa: E402
from kernelgen.selection import decide, heuristics   # noqa: E402
from kernelgen.selection.settings import Settings   # noqa: E402

BASE = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2))


def test_spec_axis_off_leaves_no_trace_and_on_is_named_and_round_trips():
    assert "kv_dtype" not in BASE.to_json() and "kv_dtype" not in BASE.template_vars() and "_kv" not in BASE.name
    for kv in ("e4m3", "e5m2"):
        s = dataclasses.replace(BASE, kv_dtype=kv)
        assert s.name == BASE.name.replace("_causal_", f"_causal_kv{kv}_")
        assert s.to_json()["kv_dtype"] == kv and s.template_vars()["kv_dtype"] == kv
        assert spec_from_json(s.to_json()) == s
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        dataclasses.replace(BASE, kv_dtype="fp8")


def test_spec_smem_one_16_bit_tile_and_fp8_stages():
    s = dataclasses.replace(BASE, kv_dtype="e4m3")
    bm, bn, st = 128, 32, 2
    assert s.smem_bytes() == 2 * (bm * 136 + bn * 136 * 2) + st * bn * 256
    assert s.smem_bytes() <= BASE.smem_bytes()        # never more than the 16-bit variant's
    kt = AttentionSpec("sm_80", "fp16", 128, 128, "none", "soa", TileConfig(8, 16, 1, 4, 1), kv_dtype="e5m2")
    assert kt.fp8_in_registers and kt.smem_bytes() == 4 * 16 * 256      # the FP8 stages only (FP8_REGS)
    kt_alibi = dataclasses.replace(kt, alibi=True)                      # the 16-bit tile's path
    assert not kt_alibi.fp8_in_registers and kt_alibi.smem_bytes() == 2 * 16 * 136 * 2 + 4 * 16 * 256


def test_hopper_spec_takes_fp8_with_landing_stages_and_the_hopper_fused_kernel():
    """The Hopper FP8 spec: the 16-bit ring plus ``land_stages`` FP8 landing stages (2 where they fit,
    else 1), the producer/consumer register split of ``SM90_REGS_FP8``; no ALiBi, user variant or
    gathered rows with it; both fused kernels take it (both classes on one FP8 dtype)."""
    def hop(d, dv, bn, **kw):
        return AttentionSpec("sm_90a", "bf16", d, dv, "causal", "soa", TileConfig(128, bn, 8, 2, 1), mainloop="sm90a",
                             kv_dtype="e4m3", **{"sm90_opts": "p", **kw})
    s = hop(128, 128, 128)
    ring = 2 * (128 * (128 + 2 * 128) + 128 * 2 * 128) + 256 + 1024
    assert s.land_stages == 2 and s.smem_bytes() == ring + 2 * 128 * 256 == 230656
    assert s.template_vars()["land_stages"] == 2 
    assert s.name == "attn_sm_90a_wgmma_pingpong_bf16_d128_causal_kve4m3_soa_m128n128w8s2b1"
    # head dims up to 128: 56 producer registers (two converter chunks in flight, CONV_UNROLL 2); above, 40
    assert (s.template_vars()["producer_regs"], s.template_vars()["consumer_regs"]) == AttentionSpec.SM90_REGS_FP8_D128[8] \
        == (56, 224)
    assert "#define KG_CONV_UNROLL 2" in render.render(s)
    d64 = hop(64, 64, 128)
    assert (d64.template_vars()["producer_regs"], d64.template_vars()["consumer_regs"]) == (56, 224)
    assert "#define KG_CONV_UNROLL 2" in render.render(d64)
    # the FP8 tensor-core variant converts nothing: it keeps its registers at d 128
    mma = hop(128, 128, 128, fp8_mma=True, q_dtype="e4m3") if "q_dtype" in AttentionSpec.__dataclass_fields__ \
        else hop(128, 128, 128, fp8_mma=True)
    assert (mma.template_vars()["producer_regs"], mma.template_vars()["consumer_regs"]) == AttentionSpec.SM90_REGS_FP8[8]
    d256 = hop(256, 256, 64)
    assert d256.land_stages == 1 and d256.smem_bytes() == 2 * (256 * 256 + 256 * 128) + 1280 + 64 * 512
    assert hop(96, 96, 128).smem_bytes() == s.smem_bytes()          # d 96 padded to 128 columns
    assert dataclasses.replace(s, kv_dtype="").land_stages == 0
    assert dataclasses.replace(s, kv_dtype="").smem_bytes() == ring
    for kw in (dict(alibi=True), dict(paged=True, sm90_opts="gp")):
        with pytest.raises(ValueError, match="kv_dtype 'e4m3' with ALiBi, a user variant or gathered rows"):
            hop(128, 128, 128, **kw)
    long = dataclasses.replace(BASE, kv_dtype="e4m3")
    short = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(16, 32, 1, 2, 1), kv_dtype="e4m3")
    f80 = FusedAttentionSpec(long, short)                  # the sm_80 fused kernel: its AttnParams with descales
    assert not f80.hopper and P.fused_params_for(f80) is P.ATTENTION_PARAMS_FP8
    # the Hopper fused kernel: both classes on the same FP8 cache dtype
    short90 = dataclasses.replace(short, arch="sm_90a", tile=TileConfig(16, 16, 1, 2, 12))
    f = FusedAttentionSpec(s, short90)
    assert f.hopper and f.hopper_regs() == FusedAttentionSpec.SM90_FUSED_REGS["fp8"]
    assert f.smem_bytes() == s.smem_bytes() and f.short_tiles_after >= 1 and "_kve4m3" in f.name
    assert P.fused_params_for(f) is P.FUSED_TMA_PARAMS_FP8
    with pytest.raises(ValueError, match="fused variants differ in kv_dtype"):
        FusedAttentionSpec(s, dataclasses.replace(short90, kv_dtype="e5m2"))
    with pytest.raises(ValueError, match="fused variants differ in kv_dtype"):
        FusedAttentionSpec(dataclasses.replace(s, kv_dtype=""), short90)


def test_fp8_params_append_the_descale_fields():
    s = dataclasses.replace(BASE, kv_dtype="e4m3")
    st = P.attention_params_for(s)
    assert st is P.ATTENTION_PARAMS_FP8
    assert st.names[-6:] == tuple(n for n, _ in P.FP8_FIELDS) or set(n for n, _ in P.FP8_FIELDS) <= set(st.names)
    both = P.attention_params_for(dataclasses.replace(s, alibi=True, sinks=True))
    assert {"alibi_slopes", "sinks", "k_descale", "v_descale_head_stride"} <= set(both.names)
    assert P.attention_params_for(BASE) is P.ATTENTION_PARAMS


def test_source_of_the_fp8_variants():
    src = render.render(dataclasses.replace(BASE, kv_dtype="e4m3"))
    assert "load_kv8_block<D>(s8K_base" in src and "convert_kv8<D, SQ>" in src and "fma.rn.bf16x2" in src
    assert "0x7B807B80u" in src and "mul.rn.f16x2" not in src and "cvt." not in src.split("fp8x4_to_16")[1][:2000]
    assert "kv_scale_log2" in src and "p.v_descale" in src
    src16 = render.render(dataclasses.replace(BASE, dtype="fp16", kv_dtype="e4m3"))
    assert "mul.rn.f16x2" in src16 and "fma.rn.bf16x2" not in src16
    src5 = render.render(dataclasses.replace(BASE, kv_dtype="e5m2"))
    assert "0x77807780u" in src5 and "0x7B807B80u" not in src5
    src = render.render(AttentionSpec("sm_80", "fp16", 64, 64, "none", "soa", TileConfig(8, 16, 1, 4, 1),
                                      kv_dtype="e5m2"))
    assert "load_kv8_block" in src and "mul.rn.f16x2" not in src and "fma.rn.bf16x2" not in src
    assert "x0.x *= vd" in src
    plain = render.render(BASE)
    assert "kv8" not in plain and "descale" not in plain


def _e4m3_to_f16_bits(byte: int) -> int:
    """The kernel's e4m3 -> fp16 bit trick (fp8x4_to_16), before the * 256."""
    a = byte << 8
    return (a & 0x8000) | ((a >> 1) & 0x3F80)


def test_the_conversion_bit_trick_is_exact_for_every_e4m3_and_e5m2_value():
    b = torch.arange(256, dtype=torch.int32)
    x = b.to(torch.uint8).view(E4M3)
    h = torch.tensor([_e4m3_to_f16_bits(int(i)) for i in b], dtype=torch.int32).to(torch.int16).view(torch.float16)
    got = (h.float() * 256).half()                   # mul.rn.f16x2 by 256: a power of two, exact
    ok = ~torch.isnan(x.float())
    assert torch.equal(got[ok].double(), x[ok].double())
    assert torch.equal(got[ok].float().to(torch.bfloat16).double(), x[ok].double())   # and on to bf16
    assert set(got[~ok].abs().tolist()) == {480.0}    # e4m3fn's NaN reads as +-480 (documented)
    y = b.to(torch.uint8).view(E5M2)                 # e5m2: the high byte of an fp16
    h5 = (b << 8).to(torch.int16).view(torch.float16)
    fin = torch.isfinite(y.float())
    assert torch.equal(h5[fin].double(), y[fin].double())


def _fp8_to_bf16_bits(byte: int, kv_dtype: str) -> int:
    """The kernel's FP8 -> bf16 bit trick (fp8x4_to_16 with dtype bf16), before the * 2^120 / 2^112."""
    a = byte << 8
    sh, keep = (4, 0x07F0) if kv_dtype == "e4m3" else (3, 0x0FE0)
    return (a & 0x8000) | ((a >> sh) & keep)


@pytest.mark.parametrize("kv_dtype", ["e4m3", "e5m2"])
def test_the_bf16_conversion_bit_trick_is_exact_for_every_finite_value(kv_dtype):
    b = torch.arange(256, dtype=torch.int32)
    x = b.to(torch.uint8).view(E4M3 if kv_dtype == "e4m3" else E5M2)
    bits = torch.tensor([_fp8_to_bf16_bits(int(i), kv_dtype) for i in b], dtype=torch.int32).to(torch.int16)
    # fma.rn.bf16x2 by 2^120 / 2^112 (a power of two; bf16 subnormals kept): exact, computed in float64
    got = bits.view(torch.bfloat16).double() * 2.0 ** (120 if kv_dtype == "e4m3" else 112)
    assert torch.equal(got.to(torch.bfloat16).double(), got)      # representable in bf16: the fma is exact
    fin = torch.isfinite(x.float())
    assert torch.equal(got[fin], x[fin].double())
    assert (got[x.float() == 0] == 0).all() and torch.equal(torch.signbit(got[fin]), torch.signbit(x[fin].float()))
    sub = fin & (x.float() != 0) & (x.float().abs() < (2.0 ** -6 if kv_dtype == "e4m3" else 2.0 ** -14))
    assert sub.sum() == (14 if kv_dtype == "e4m3" else 6) and (bits[sub].view(torch.bfloat16).float() != 0).all()   # bf16 subnormal inputs
    if kv_dtype == "e4m3":
        assert set(got[~fin].abs().tolist()) == {480.0}
    else:
        assert float(got[~fin].abs().min()) == 65536.0


# NVRTC builds: decode (paged, pack-GQA, split; 16-row and keys-as-rows) and prefill, sm_80 and
# the sm_80 mainloop compiled for sm_90a (an H200 runs FP8 there), without spills
COMPILE = {
    "prefill_sm80_bf16": AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2)),
    "prefill_sm90a_fp16_split": AttentionSpec("sm_90a", "fp16", 128, 128, "causal", "soa",
                                              TileConfig(128, 32, 4, 2, 2), split=True),
    "decode_pack_split_paged": AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 8),
                                             True, True, True),
    "keys_as_rows_sm90a": AttentionSpec("sm_90a", "fp16", 128, 128, "none", "soa", TileConfig(8, 16, 1, 4, 1),
                                        pack_gqa=True, split=True, paged=True),
}


@pytest.mark.parametrize("kv", ["e4m3", "e5m2"])
@pytest.mark.parametrize("name", list(COMPILE))
def test_fp8_variants_compile_without_spills(name, kv):
    base = COMPILE[name]
    spec = dataclasses.replace(base, kv_dtype=kv, tile=fp8_tile(base.tile, base.head_dim, base.head_dim_v))   # the tile the decider gives FP8
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
    assert r["registers"] * spec.num_threads <= 65536 // spec.tile.min_blocks, (spec.name, r)


@pytest.mark.parametrize("kw", [dict(alibi=True, sinks=True), dict(variant=True),
                                dict(alibi=True, max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16,
                                     batch=64, rows=64),
                                dict(variant=True, sinks=True, max_seqlen_q=1, max_seqlen_k=32768, paged=True,
                                     page_size=16, batch=64, rows=64)],
                         ids=["prefill_alibi_sinks", "prefill_variant", "decode_alibi", "decode_variant_sinks"])
def test_fp8_with_alibi_sinks_and_variants_compiles_without_spills(kw):
    """FP8 combined with ALiBi, sinks and a user variant: the decider's kernels (one class, FP8
    variants of the ALiBi / sink / variant kernels) build for sm_90a without spills."""
    from kernelgen.front.variant import Variant
    if kw.get("variant"):
        kw = dict(kw, variant=Variant(score_mod="score - 0.01f * (float)(q_idx - kv_idx)").code)
    r = decide.decide(sig(kv_dtype="e4m3", **kw), H200)
    (a,) = _attn_specs(r)
    assert r.kind == "single" and a.kv_dtype == "e4m3" and a.mainloop == "sm80"
    assert (a.alibi, a.sinks, a.variant is not None) == (bool(kw.get("alibi")), bool(kw.get("sinks")),
                                                       kw.get("variant") is not None)
    res = compiler.compile_cubin(render.render(a), a.arch, compiler.default_options(a.arch), a.name).resources
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0 and res["stack_frame"] == 0, (a.name, res)


def test_fp8_decode_tiles_take_at_least_the_fp8_stages_and_ctas_and_the_others_keep_theirs(monkeypatch):
    from kernelgen.selection import heuristics
    assert fp8_tile(TileConfig(16, 16, 1, 2, 8), 128, 128) == TileConfig(16, 16, 1, max(2, FP8_DECODE_STAGES),
                                                               max(8, heuristics.FP8_DECODE_MIN_BLOCKS))
    monkeypatch.setattr(heuristics, "FP8_DECODE_STAGES", 4)
    monkeypatch.setattr(heuristics, "FP8_DECODE_MIN_BLOCKS", 10)
    assert fp8_tile(TileConfig(16, 16, 1, 2, 8), 128, 128) == TileConfig(16, 16, 1, 4, 10)
    assert fp8_tile(TileConfig(8, 16, 1, 2, 1), 128, 128) == TileConfig(8, 16, 1, 4, 10)
    assert fp8_tile(TileConfig(8, 16, 1, 6, 12), 64, 64) == TileConfig(8, 16, 1, 6, 12)
    prefill = TileConfig(128, 32, 4, 2, 2)
    assert fp8_tile(prefill, 128, 128) is prefill
    assert fp8_tile(TileConfig(16, 16, 1, 2, 8), 128, 256).min_blocks == 8   # larger head dims keep theirs


# ----------------------------------------------------------------------------- the decider
def _attn_specs(r):
    return [s for s in r.specs if s.kind == "attention"]


@pytest.mark.parametrize("dev", [A100, H200])
def test_decider_routes_fp8(dev):
    """Prefill-shaped FP8 calls take the Hopper kernel on an H200 (the 16-bit call's choice, with the
    FP8 tile), decode-shaped ones and every call elsewhere the sm_80 mainloop; pages TMA cannot box
    (gathered rows) and ALiBi keep FP8 on the sm_80 mainloop."""
    hopper = dev is H200
    one = dict(short_query_tokens=0)   # (paged prefills: one class, no mixed-batch launch)
    for kw, on_hopper in ((dict(), hopper), (dict(paged=True, page_size=64, max_seqlen_k=8192, **one), hopper),
                          (dict(paged=True, page_size=5, max_seqlen_k=8192, **one), False), (dict(alibi=True), False),
                          (dict(max_seqlen_q=1, rows=8, batch=8, paged=True, page_size=16, max_seqlen_k=32768), False),
                          (dict(max_seqlen_q=1, rows=8, batch=8, paged=True, page_size=16, max_seqlen_k=32768,
                                num_splits=4), False)):
        r = decide.decide(sig(kv_dtype="e4m3", **kw), dev)
        (a,) = _attn_specs(r)
        assert r.kind == "single" and a.kv_dtype == "e4m3" and (a.mainloop == "sm90a") == on_hopper, (kw, a.name)
        plain = decide.decide(sig(**kw), dev)
        assert not any(s.kv_dtype for s in _attn_specs(plain))
        if on_hopper:
            assert a.land_stages == 2 and a.tile == _attn_specs(plain)[0].tile


def test_decider_fp8_mixed_batch_takes_the_fused_kernels():
    """A paged mixed batch on an FP8 cache: on the H200 with the page size known the Hopper fused
    kernel, or with ``KERNELGEN_FP8_FUSED=0`` and at head dim 256 the classes in turn (the same two
    variants: the Hopper FP8 variant recording row_splits for the split FP8 decode tile); the sm_80
    fused kernel on the A100, without a page size (TMA cannot box the pages) and with
    ``arch="sm_80"`` (one class with ``KERNELGEN_FP8_FUSED=0``); one class for a chunked-prefill
    batch on the H200 (rule 2: the Hopper kernel), with ALiBi, and with ``arch="sm_90a"``."""
    mixed = dict(paged=True, page_size=16, max_seqlen_q=2048, max_seqlen_k=5000, batch=7, rows=2355)
    for dev in (A100, H200):
        assert decide.decide(sig(**mixed), dev).kind in ("fused", "pair")
    for dev, kw in ((A100, mixed), (A100, dict(mixed, rows=7 * 600)), (H200, dict(mixed, page_size=0)),
                    (H200, dict(mixed, arch="sm_80"))):
        r = decide.decide(sig(kv_dtype="e5m2", **kw), dev)        # the sm_80 fused kernel, as the 16-bit batch
        f = r.variants.fused
        assert r.kind == "fused" and not f.hopper and f.long.kv_dtype == f.short.kv_dtype == "e5m2", kw
        assert f.short.fp8_in_registers and f.long.tile == heuristics.fp8_tile(
            heuristics.tile_config(dev.arch, 128, 128, "prefill", True), 128, 128)   # the sm_80 FP8 prefill tile
        assert decide.decide(sig(kv_dtype="e5m2", **kw), dev, Settings(fp8_fused=False)).kind == "single"
    for kv in ("e4m3", "e5m2"):
        f = decide.decide(sig(kv_dtype=kv, **mixed), H200)          # the Hopper fused kernel
        assert f.kind == "fused" and f.variants.fused.long.kv_dtype == f.variants.fused.short.kv_dtype == kv
        r = decide.decide(sig(kv_dtype=kv, **mixed), H200, Settings(fp8_fused=False))   # the classes in turn
        long, short = _attn_specs(r)
        # the same variants, but the fused kernel's decode tile is the keys-as-rows one (8 rows; the
        # standalone decode call keeps 16: heuristics.SM90_FUSED_SHORT_ROWS_FP8)
        assert f.variants.fused.long == long and f.variants.fused.short == dataclasses.replace(
            short, tile=dataclasses.replace(short.tile, block_m=heuristics.SM90_FUSED_SHORT_ROWS_FP8))
        assert f.variants.fused.short.tile.keys_as_rows and f.variants.fused.short.fp8_in_registers
        assert r.kind == "pair" and long.kv_dtype == short.kv_dtype == kv
        assert long.mainloop == "sm90a" and not long.split and not long.pack_gqa and long.land_stages == 2
        assert short.mainloop == "sm80" and short.tile.num_warps == 1 and short.tile.block_m == 16
        assert short.pack_gqa and short.split and long.row_splits and r.variants.short.combine is not None
        assert r.variants.short_max_q == 4                         # 32 / 8 heads: 4 query tokens fill 16 rows
        plain = decide.decide(sig(**mixed), H200)                   # the 16-bit batch's long tile (fused launch)
        assert plain.kind == "fused" and long.tile == plain.variants.fused.long.tile
    d256 = decide.decide(sig(kv_dtype="e4m3", **dict(mixed, head_dim=256, head_dim_v=256)), H200)
    assert d256.kind == "pair"                                      # wide O: no fused kernel, the classes in turn
    for kw in (dict(mixed, rows=7 * 600), dict(mixed, alibi=True), dict(mixed, arch="sm_90a")):
        r = decide.decide(sig(kv_dtype="e4m3", **kw), H200)
        (a,) = _attn_specs(r)
        assert r.kind == "single" and a.kv_dtype == "e4m3", kw
        assert a.mainloop == ("sm80" if kw.get("alibi") else "sm90a"), kw
    assert _attn_specs(decide.decide(sig(kv_dtype="e4m3", arch="sm_90a"), H200))[0].mainloop == "sm90a"
    with pytest.raises(ValueError, match=r"FP8 K/V cache \(e4m3\) with ALiBi"):
        decide.decide(sig(kv_dtype="e4m3", arch="sm_90a", alibi=True), H200)
    with pytest.raises(ValueError, match="short_query_tokens >= 1 forces a fused launch; an FP8 K/V cache takes one only with the automatic threshold"):
        decide.decide(sig(kv_dtype="e4m3", short_query_tokens=4, **mixed), H200)


# ----------------------------------------------------------------------------- the dispatcher
def _fp8_small_batch(kv_dtype=E4M3):
    q, k, v, cq, ck = fake_cuda_mod.small_batch()
    return q, k.to(kv_dtype), v.to(kv_dtype), cq, ck


def _fields(rec):
    return fake_cuda_mod.attention_fields(rec)


@pytest.mark.parametrize("splits,kinds", [(1, ["scheduler", "attention_fp8"]),
                                          (3, ["scheduler", "attention_fp8", "combine"])])
@pytest.mark.parametrize("arch", [None, "sm_80"])
def test_varlen_attention_passes_the_descales(fake_cuda, splits, kinds, arch):
    q, k, v, cq, ck = _fp8_small_batch()
    kd, vd = torch.rand(2, 2) + 0.5, torch.rand(2, 2) + 0.5
    for _ in range(2):                       # the validating path, then the prepared call's fast path
        fake_cuda.clear()
        out = kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, k_descale=kd, v_descale=vd,
                                         num_splits=splits, arch=arch)
        assert out.dtype == q.dtype and fake_cuda.kinds() == kinds
        (f,) = _fields(fake_cuda)
        assert (f["k_descale"], f["v_descale"]) == (kd.data_ptr(), vd.data_ptr())
        assert (f["k_descale_batch_stride"], f["k_descale_head_stride"]) == (2, 1)
        assert f["k_row_stride"] == k.stride(0) and f["k_head_stride"] == k.stride(1)
    other = kd.clone()                       # a new descale tensor: its own prepared call
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, k_descale=other, v_descale=vd,
                               num_splits=splits, arch=arch)
    assert _fields(fake_cuda)[0]["k_descale"] == other.data_ptr()


def test_varlen_attention_per_tensor_and_absent_descales(fake_cuda):
    q, k, v, cq, ck = _fp8_small_batch(E5M2)
    s = torch.tensor(0.5)
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, k_descale=s, v_descale=s.expand(2, 2))
    (f,) = _fields(fake_cuda)
    assert f["k_descale"] == f["v_descale"] == s.data_ptr()
    assert all(f[n] == 0 for n in ("k_descale_batch_stride", "k_descale_head_stride", "v_descale_batch_stride",
                                   "v_descale_head_stride"))
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988)       # no descale: factor 1 (null addresses)
    (f,) = _fields(fake_cuda)
    assert f["k_descale"] == f["v_descale"] == 0


def test_varlen_attention_fp8_checks(fake_cuda):
    q, k, v, cq, ck = _fp8_small_batch()
    with pytest.raises(ValueError, match=r"k_descale must have shape \(2, 2\)"):
        kernelgen.varlen_attention(q, k, v, cq, ck, k_descale=torch.ones(3, 2))
    with pytest.raises(TypeError, match="v_descale must have dtype float32"):
        kernelgen.varlen_attention(q, k, v, cq, ck, v_descale=torch.ones(2, 2, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"FP8 K/V cache \(e4m3\) with ALiBi"):
        kernelgen.varlen_attention(q, k, v, cq, ck, arch="sm_90a", alibi_slopes=torch.ones(4))
    q16, k16, v16, _, _ = fake_cuda_mod.small_batch()
    with pytest.raises(ValueError, match="k_descale applies to an FP8 K/V cache"):
        kernelgen.varlen_attention(q16, k16, v16, cq, ck, k_descale=torch.ones(2, 2))
    assert fake_cuda.kinds() == []


def test_varlen_attention_fp8_non_finite_descale_under_host_checks(fake_cuda, monkeypatch):
    q, k, v, cq, ck = _fp8_small_batch()
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    with pytest.raises(ValueError, match="v_descale holds a non-finite factor"):
        kernelgen.varlen_attention(q, k, v, cq, ck, v_descale=torch.tensor([[1.0, float("nan")]]))


def test_mixed_paged_fp8_batch_on_sm80_takes_the_sm80_fused_kernel(fake_cuda):
    """A mixed paged batch on an FP8 cache forced onto the sm_80 mainloop: the sm_80 fused kernel,
    both classes' AttnParams with the descales."""
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd = torch.full((len(QLENS), kc.shape[2]), 0.25)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True, k_descale=kd, v_descale=kd, arch="sm_80")
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_fp8", "combine"]
    f = next(x for x in fake_cuda.launches if x.kind == "fused_fp8").fields()
    want = (kd.data_ptr(), kd.data_ptr(), kc.shape[2], 1, kc.shape[2], 1)
    assert _descale_fields(f["long"]) == _descale_fields(f["short"]) == want


@pytest.mark.parametrize("fused", [True, False])
def test_mixed_paged_fp8_batch_on_hopper_fused_or_in_turn(fake_cuda, monkeypatch, fused):
    """The same batch with the automatic choice on the (fake) H200: both schedulers, then the Hopper
    fused kernel (``fused``) or, with ``KERNELGEN_FP8_FUSED=0``, the Hopper FP8 kernel and the FP8
    decode tile in turn, then the combine.  The Hopper kernel's K/V tensor maps are FP8 maps (1-byte
    strides, boxes of 64 columns x the page's rows), its q map a 16-bit one; both classes' AttnParams
    carry the same descales (the per-request strides included)."""
    from fake_cuda import map_kind
    if not fused:
        monkeypatch.setenv("KERNELGEN_FP8_FUSED", "0")
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd = torch.full((len(QLENS), kc.shape[2]), 0.25)
    vd = torch.full((len(QLENS), kc.shape[2]), 0.5)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True, k_descale=kd, v_descale=vd)
    want = (kd.data_ptr(), vd.data_ptr(), kc.shape[2], 1, kc.shape[2], 1)
    if fused:
        assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90_fp8", "combine"]
        launch = next(x for x in fake_cuda.launches if x.kind == "fused_sm90_fp8")
        f = launch.fields()
        assert _descale_fields(f["long"]) == _descale_fields(f["short"]) == want and f["short_ctas"] >= 1
    else:
        assert fake_cuda.kinds() == ["scheduler", "scheduler", "attention_sm90_fp8", "attention_fp8", "combine"]
        fields = _fields(fake_cuda)
        assert len(fields) == 2 and all(_descale_fields(f) == want for f in fields)
        launch = next(x for x in fake_cuda.launches if x.kind == "attention_sm90_fp8")
    raw = launch.params
    assert map_kind(raw[:128]) == "16bit" and map_kind(raw[128:256]) == map_kind(raw[256:384]) == "fp8"
    ptr, dims, strides, box = launch.maps(kv_rank=4)[1]
    ps = kc.shape[1]
    assert ptr == kc.data_ptr() and dims == (kc.shape[3], kc.shape[2], ps, kc.shape[0])
    assert strides == (kc.stride(2), kc.stride(1), kc.stride(0)) and box == (64, 1, min(ps, 128), 1)


# ----------------------------------------------------------------------------- AttentionPlan
_PLAN = dict(max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=64, max_seqlen_q=7, max_seqlen_k=1988, causal=True)


@pytest.mark.parametrize("kv,name", [("e4m3", "e4m3"), (E4M3, "e4m3"), ("e5m2", "e5m2"), (E5M2, "e5m2"),
                                     (None, None)])
def test_plan_kv_dtype_argument(fake_cuda, monkeypatch, kv, name):
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, kv_dtype=kv, **_PLAN)
    assert plan.kv_dtype == name and plan.recipe.kind == "single" and not plan.hopper
    (a,) = _attn_specs(plan.recipe)
    assert a.kv_dtype == (name or "") and (a.mainloop == "sm80" or not name)


@pytest.mark.parametrize("bad", ["fp8", "E4M3", torch.float16, torch.bfloat16, torch.float32, 8, True])
def test_plan_bad_kv_dtype_names_the_argument(fake_cuda, monkeypatch, bad):
    from fake_cuda import make_plan
    with pytest.raises(ValueError, match="kv_dtype must be None, 'e4m3', 'e5m2'"):
        make_plan(monkeypatch, kv_dtype=bad, **_PLAN)


def test_plan_fp8_hopper_and_mixed_plan_classes(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    assert make_plan(monkeypatch, kv_dtype="e4m3", arch="sm_90a", **_PLAN).hopper
    mixed = dict(max_batch=16, num_heads_q=32, num_heads_kv=8, head_dim=128, max_total_q=4096, max_seqlen_q=2048,
                 max_seqlen_k=5000, paged=True, causal=True)
    with pytest.raises(ValueError, match="short_query_tokens >= 1 forces a fused launch; an FP8 K/V cache takes one only with the automatic threshold"):
        make_plan(monkeypatch, kv_dtype="e4m3", short_query_tokens=4, **mixed)
    assert make_plan(monkeypatch, **mixed).recipe.kind in ("fused", "pair")
    for arch in (None, "sm_80"):   # no page size: the Hopper kernel cannot box pages; the sm_80 fused kernel
        plan = make_plan(monkeypatch, kv_dtype=E5M2, arch=arch, **mixed)
        assert plan.recipe.kind == "fused" and not plan.hopper and plan.metadata_short is not None
        assert plan.recipe.variants.fused.long.kv_dtype == "e5m2"
    plan = make_plan(monkeypatch, kv_dtype=E5M2, page_size=16, **mixed)      # the Hopper fused kernel (decide)
    assert plan.recipe.kind == "fused" and plan.hopper and plan.metadata_short is not None
    f = plan.recipe.variants.fused
    assert f.long.kv_dtype == f.short.kv_dtype == "e5m2"


def _descale_fields(f):
    return (f["k_descale"], f["v_descale"], f["k_descale_batch_stride"], f["k_descale_head_stride"],
            f["v_descale_batch_stride"], f["v_descale_head_stride"])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_plan_run_and_attend_pass_the_descales(fake_cuda, monkeypatch, num_splits, arch):
    """A plan made with kv_dtype: run passes the descales' addresses and strides in the attention
    launch (validating path, then the prepared step with no host sync, also while capturing: new
    values written in place keep the address a captured graph reads), a new tensor its own address,
    per-tensor and absent descales (0: factor 1); attend (packed per launch) passes them too.  Both
    mainloops (sm_90a: the Hopper kernel's maps lead the same AttnParams)."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, kv_dtype="e4m3", arch=arch, num_splits=num_splits, **_PLAN)
    assert plan.hopper == (arch == "sm_90a")
    q, k, v, cq, ck = _fp8_small_batch()
    kinds = ["scheduler", "attention_sm90_fp8" if plan.hopper else "attention_fp8"] + \
        (["combine"] if num_splits > 1 else [])
    kd, vd = torch.rand(2, 2) + 0.5, (torch.rand(2, 2) + 0.5).t()     # v_descale transposed: strides (1, 2)
    out = torch.empty(10, 4, 64, dtype=q.dtype)
    for step in range(3):
        fake_cuda.clear()
        fake_cuda.capturing = step == 2
        guard = fake_cuda_mod.no_host_sync() if step else pytest.MonkeyPatch()
        try:
            res = plan.run(q, k, v, cq, ck, out=out, k_descale=kd, v_descale=vd)
        finally:
            guard.undo()
        assert res is out and fake_cuda.kinds() == kinds
        (f,) = _fields(fake_cuda)
        assert _descale_fields(f) == (kd.data_ptr(), vd.data_ptr(), 2, 1, 1, 2)
        assert f["k_row_stride"] == k.stride(0) and f["k_head_stride"] == k.stride(1)
        kd.mul_(0.5)                                     # new values, same tensor: read on the device
    fake_cuda.capturing = False
    assert len(plan._steps._d) <= 1
    other = kd.clone()                                   # a new tensor: its own step
    fake_cuda.clear()
    plan.run(q, k, v, cq, ck, k_descale=other, v_descale=vd)
    assert _descale_fields(_fields(fake_cuda)[0])[:2] == (other.data_ptr(), vd.data_ptr())
    s = torch.tensor(0.25)
    for kk, vv, want in ((s, s.expand(2, 2), (s.data_ptr(), s.data_ptr(), 0, 0, 0, 0)),
                         (None, None, (0, 0, 0, 0, 0, 0)), (None, kd[:, :1], (0, kd.data_ptr(), 0, 0, 2, 0))):
        fake_cuda.clear()
        plan.run(q, k, v, cq, ck, k_descale=kk, v_descale=vv)
        assert _descale_fields(_fields(fake_cuda)[0]) == want
    plan.schedule(cq, ck)
    fake_cuda.clear()
    plan.attend(q, k, v, cq, ck, k_descale=kd, v_descale=vd)
    assert fake_cuda.kinds() == kinds[1:]
    assert _descale_fields(_fields(fake_cuda)[0]) == (kd.data_ptr(), vd.data_ptr(), 2, 1, 1, 2)
    fake_cuda.clear()
    plan.attend(q, k, v, cq, ck)
    assert _descale_fields(_fields(fake_cuda)[0]) == (0, 0, 0, 0, 0, 0)


def test_plan_fp8_with_sinks_and_alibi(fake_cuda, monkeypatch):
    """FP8 with the plan's other per-step tensors: sink kernels (sinks=True, one class) and ALiBi,
    every address in the one FP8 attention launch."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, kv_dtype="e5m2", sinks=True, alibi=True, num_splits=3, **_PLAN)
    assert plan.sinks_fused
    q, k, v, cq, ck = _fp8_small_batch(E5M2)
    sinks, slopes, kd = torch.zeros(4), torch.rand(4), torch.rand(2, 2) + 0.5
    for _ in range(2):
        fake_cuda.clear()
        plan.run(q, k, v, cq, ck, sinks=sinks, alibi_slopes=slopes, k_descale=kd)
        assert fake_cuda.kinds() == ["scheduler", "attention_fp8_alibi_sinks", "combine_sinks"]
        (f,) = _fields(fake_cuda)
        assert (f["sinks"], f["alibi_slopes"]) == (sinks.data_ptr(), slopes.data_ptr())
        assert _descale_fields(f) == (kd.data_ptr(), 0, 2, 1, 0, 0)


def test_plan_padded_batch_descales_have_a_row_per_request_slot(fake_cuda, monkeypatch):
    """A paged decode plan at capacity 8 run with a batch padded by zero-length requests: the
    (batch, num_heads_kv) descales have a row per request of the step (padding included)."""
    from fake_cuda import make_plan
    qlens, ctx = [1, 1, 1, 0, 0, 0, 0, 0], [40, 500, 7, 0, 0, 0, 0, 0]
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    hkv = kc.shape[2]
    plan = make_plan(monkeypatch, kv_dtype="e4m3", max_batch=8, num_heads_q=q.shape[1], num_heads_kv=hkv,
                     head_dim=q.shape[2], max_total_q=8, max_seqlen_q=1, max_seqlen_k=4096, paged=True, causal=True)
    kd = torch.rand(8, hkv) + 0.5
    plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, k_descale=kd, v_descale=kd)
    assert fake_cuda.kinds()[:2] == ["scheduler", "attention_fp8"]
    assert {_descale_fields(f) for f in _fields(fake_cuda)} == {(kd.data_ptr(), kd.data_ptr(), hkv, 1, hkv, 1)}
    with pytest.raises(ValueError, match=rf"k_descale must have shape \(8, {hkv}\)"):
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, k_descale=kd[:3])


@pytest.mark.parametrize("kv,max_q,max_tq", [("e4m3", 1, 16), ("e5m2", 256, 640)])
def test_plan_gpu_test_kernels_are_warmed(fake_cuda, monkeypatch, kv, max_q, max_tq):
    """The kernels of tests/gpu/test_fp8_gpu.py's graph-replayed plans (the fake H200 has the
    H200's SM count) are among tools/warm_gpu_tests.py's fp8_specs."""
    import sys
    from pathlib import Path

    from fake_cuda import make_plan
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        import warm_gpu_tests
    finally:
        sys.path.pop(0)
    plan = make_plan(monkeypatch, kv_dtype=kv, max_batch=16, num_heads_q=32, num_heads_kv=8, head_dim=128,
                     max_total_q=max_tq, max_seqlen_q=max_q, max_seqlen_k=2048, paged=True, causal=True)
    assert set(plan.recipe.specs) <= set(warm_gpu_tests.fp8_specs())


def test_plan_fp8_step_checks(fake_cuda, monkeypatch):
    """A k dtype other than the plan's kv_dtype is a ValueError naming k (16-bit k to an FP8 plan,
    e5m2 to an e4m3 plan, FP8 k to a plan made without kv_dtype: the message says to pass it);
    descales to a 16-bit plan, or of a bad shape or dtype, name the argument; non-finite factors
    raise under KERNELGEN_CHECK_INPUTS=1 even for a prepared step; nothing is launched."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, kv_dtype="e4m3", arch="sm_80", **_PLAN)
    plain = make_plan(monkeypatch, arch="sm_80", **_PLAN)
    q, k, v, cq, ck = _fp8_small_batch()
    q16, k16, v16, _, _ = fake_cuda_mod.small_batch()
    k5, v5 = k16.to(E5M2), v16.to(E5M2)
    for call in (lambda: plan.run(q16, k16, v16, cq, ck), lambda: plan.attend(q16, k16, v16, cq, ck)):
        with pytest.raises(ValueError, match=r"^k must have the plan's FP8 dtype torch.float8_e4m3fn "
                                             r"\(kv_dtype='e4m3'\), got torch.bfloat16"):
            call()
    with pytest.raises(ValueError, match=r"^k must have the plan's FP8 dtype .* got torch.float8_e5m2; make a plan "
                                         r"with kv_dtype='e5m2'"):
        plan.run(q, k5, v5, cq, ck)
    with pytest.raises(TypeError, match="v must have dtype float8_e4m3fn"):
        plan.run(q, k, v5, cq, ck)
    for x, kk in ((k, "e4m3"), (k5, "e5m2")):
        with pytest.raises(ValueError, match=rf"^k: an FP8 K/V cache .* pass kv_dtype='{kk}' to AttentionPlan"):
            plain.run(q, x, x, cq, ck)
    with pytest.raises(ValueError, match="k_descale applies to an FP8 K/V cache"):
        plain.run(q16, k16, v16, cq, ck, k_descale=torch.ones(2, 2))
    with pytest.raises(ValueError, match="v_descale applies to an FP8 K/V cache"):
        plain.attend(q16, k16, v16, cq, ck, v_descale=torch.ones(()))
    with pytest.raises(ValueError, match=r"k_descale must have shape \(2, 2\)"):
        plan.run(q, k, v, cq, ck, k_descale=torch.ones(3, 2))
    with pytest.raises(TypeError, match="v_descale must have dtype float32"):
        plan.run(q, k, v, cq, ck, v_descale=torch.ones(2, 2, dtype=torch.float16))
    assert fake_cuda.kinds() == []
    kd = torch.ones(2, 2)
    plan.run(q, k, v, cq, ck, k_descale=kd)              # prepared
    fake_cuda.clear()
    kd[1, 1] = float("inf")
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    with pytest.raises(ValueError, match="k_descale holds a non-finite factor"):
        plan.run(q, k, v, cq, ck, k_descale=kd)
    assert fake_cuda.kinds() == []


def test_plan_inputs_refuse_an_fp8_k_without_kv_dtype(fake_cuda):
    from kernelgen.selection import arguments
    q, k, v, cq, ck = _fp8_small_batch()
    kw = dict(heads=(4, 2, 64, 64), dtype=q.dtype, device=q.device, capacity=8, paged=False, page_size=None,
              max_total_q=None, hopper=False)
    with pytest.raises(ValueError, match="pass kv_dtype='e4m3'"):
        arguments.plan_inputs(q, k, v, cq, ck, None, None, None, None, **kw)
    sizes = arguments.plan_inputs(q, k, v, cq, ck, None, None, None, None, kv_dtype="e4m3", **kw)
    assert sizes["kv_dtype"] == "e4m3"


def test_validation_kv_dtype():
    assert V.kv_dtype(None) == "" and V.kv_dtype("e5m2") == "e5m2" and V.kv_dtype(E4M3) == "e4m3"
    with pytest.raises(ValueError, match="kv_dtype must be"):
        V.kv_dtype(torch.uint8)


# ----------------------------------------------------------------------------- torch ops and compat
def test_op_schema_and_fake_impl_take_the_descales():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernelgen.front import ops  # noqa: F401  (registers the ops)
    for op in (torch.ops.kernelgen.varlen_attention, torch.ops.kernelgen.varlen_attention_out):
        schema = str(op.default._schema)
        assert "Tensor? k_descale=None" in schema and "Tensor? v_descale=None" in schema, schema
    with FakeTensorMode():
        q = torch.empty(10, 4, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(20, 2, 64, dtype=E4M3, device="cuda")
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        out, _ = torch.ops.kernelgen.varlen_attention(q, k, k, cu, cu, k_descale=torch.empty(2, 2, device="cuda"))
        assert out.shape == (10, 4, 64) and out.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="k_descale must have shape"):
            torch.ops.kernelgen.varlen_attention(q, k, k, cu, cu, k_descale=torch.empty(2, 3, device="cuda"))
        with pytest.raises(TypeError, match="^v must have dtype float8_e4m3fn, got float8_e5m2$"):
            torch.ops.kernelgen.varlen_attention(q, k, k.to(E5M2), cu, cu)
        k16 = torch.empty(20, 2, 64, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="v_descale applies to an FP8 K/V cache"):
            torch.ops.kernelgen.varlen_attention(q, k16, k16, cu, cu, v_descale=torch.empty(2, 2, device="cuda"))


def test_ops_and_compat_pass_the_descales_down(monkeypatch):
    from test_ops_compat import Recorder, packed

    from kernelgen.front import compat, ops
    rec = Recorder()
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", rec)
    q, k, v, cu = packed()
    k, v = k.to(E4M3), v.to(E4M3)
    kd, vd = torch.rand(2, k.shape[1]), torch.rand(())
    ops.varlen_attention(q, k, v, cu, cu, k_descale=kd, v_descale=vd)
    assert rec.last["k_descale"] is kd and rec.last["v_descale"] is vd
    torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, k_descale=kd, v_descale=vd)
    assert torch.equal(rec.last["k_descale"], kd)
    # FA3 ignores q_descale with a 16-bit q (vLLM passes its scales on every call): so does compat
    for qd in (None, 1, 1.0, 0.5, torch.ones(2, k.shape[1]), torch.full((2, 2), 2.0)):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, q_descale=qd, k_descale=kd, v_descale=vd)
        assert rec.last["k_descale"] is kd and rec.last["v_descale"] is vd
    # and k_descale / v_descale with a 16-bit cache (dropped, never read)
    q16, k16, v16, _ = packed()
    compat.flash_attn_varlen_func(q16, k16, v16, cu, cu, 13, 13, q_descale=kd, k_descale=kd, v_descale=vd)
    assert rec.last["k_descale"] is None and rec.last["v_descale"] is None
    kc = torch.zeros(2, 24, 2, 64).to(E4M3)
    compat.flash_attn_with_kvcache(torch.randn(2, 1, 4, 64).to(torch.bfloat16), kc, kc, k_descale=kd, v_descale=vd)
    assert rec.last["k_descale"] is kd
    # an FP8 q (FA3's FP8 forward): q_descale passed on with the others (tests/test_fp8_q_cpu.py)
    qd = torch.ones(2, 2)
    compat.flash_attn_varlen_func(q.to(E4M3), k, v, cu, cu, 13, 13, q_descale=qd, k_descale=kd, v_descale=vd)
    assert rec.last["q_descale"] is qd and rec.last["k_descale"] is kd and rec.last["v_descale"] is vd


def test_compat_ignores_fa3s_unused_descales_without_reading_them(fake_cuda):
    """vLLM's FA3 backend passes q_descale (and k/v_descale) on every call, FP8 cache or not: FA3
    ignores them where they do not apply, and so must compat, without a host sync (CUDA graphs)."""
    from kernelgen.front import compat
    q, k, v, cq, ck = _fp8_small_batch()
    kd, qd = torch.ones(2, 2), torch.ones(()).expand(2, 2)
    compat.flash_attn_varlen_func(q, k, v, cq, ck, 7, 1988, q_descale=qd, k_descale=kd, v_descale=kd)
    guard = fake_cuda_mod.no_host_sync()
    try:
        compat.flash_attn_varlen_func(q, k, v, cq, ck, 7, 1988, q_descale=qd, k_descale=kd, v_descale=kd)
        q16, k16, v16, cq16, ck16 = fake_cuda_mod.small_batch()
        fake_cuda.clear()
        compat.flash_attn_varlen_func(q16, k16, v16, cq16, ck16, 7, 1988, q_descale=qd, k_descale=kd, v_descale=kd)
    finally:
        guard.undo()
    assert "attention_fp8" not in fake_cuda.kinds() and "attention" in fake_cuda.kinds()


@pytest.mark.parametrize("fused", [True, False])
def test_mixed_fp8_plan_run_and_attend_pass_the_descales_to_both_classes(fake_cuda, monkeypatch, fused):
    """A mixed paged plan on an FP8 cache with its page size (the Hopper fused kernel, or with
    ``KERNELGEN_FP8_FUSED=0`` the classes in turn): run (the prepared step) and schedule + attend
    (packed per launch: ``oneoff.attend``, ``fused.hopper_params(fp8=True)``) launch the same
    parameters, and both classes' AttnParams carry the step's descales."""
    from fake_cuda import make_plan
    from test_fused_cpu import D, HKV, HQ, PS
    if not fused:
        monkeypatch.setenv("KERNELGEN_FP8_FUSED", "0")
    p = make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                  max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, page_size=PS, kv_dtype="e4m3")
    assert p.recipe.kind == ("fused" if fused else "pair") and p.hopper
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd, vd = torch.rand(len(QLENS), HKV) + 0.5, torch.tensor(0.75)
    out = torch.empty_like(q)
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, k_descale=kd, v_descale=vd)
    kinds = (["scheduler", "scheduler", "fused_sm90_fp8", "combine"] if fused
             else ["scheduler", "scheduler", "attention_sm90_fp8", "attention_fp8", "combine"])
    assert fake_cuda.kinds() == kinds
    want = (kd.data_ptr(), vd.data_ptr(), HKV, 1, 0, 0)
    if fused:
        f = next(x for x in fake_cuda.launches if x.kind == "fused_sm90_fp8").fields()
        assert _descale_fields(f["long"]) == _descale_fields(f["short"]) == want
    else:
        assert [_descale_fields(f) for f in _fields(fake_cuda)] == [want, want]
    run_params = [x.params for x in fake_cuda.launches]
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, k_descale=kd, v_descale=vd)
    assert fake_cuda.kinds() == kinds
    assert [x.params for x in fake_cuda.launches] == run_params


@pytest.mark.parametrize("arch,d,kv", [("sm_80", 128, "e4m3"), ("sm_90a", 64, "e5m2"), ("sm_80", 256, "e4m3")])
def test_sm80_fused_fp8_kernel_compiles_without_spills(arch, d, kv):
    """The sm_80 fused kernel on an FP8 cache (``choose_fused(kv_dtype=)``: the sm_80 FP8 prefill
    tile, staged conversion, beside the FP8 decode tile): NVRTC builds it without spills, its
    AttnParams declared with the descale fields."""
    fv = heuristics.choose_fused(arch, "bf16", d, d, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_k=8192,
                                 paged=True, num_sms=132, kv_dtype=kv)
    f = fv.fused
    assert not f.hopper and f.long.kv_dtype == f.short.kv_dtype == kv and f.short.tile.num_warps == 1
    src = render.render(f)
    assert "k_descale" in src and "FusedParams" in src
    r = compiler.compile_cubin(src, arch, compiler.default_options(arch), f.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
