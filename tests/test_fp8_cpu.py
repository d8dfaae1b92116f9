"""FP8 K/V caches (issue 24, first slice) on the CPU: the float64 reference dequantises exactly,
the checks of k/v dtypes and of ``k_descale`` / ``v_descale`` (FlashAttention-3's shapes; errors
name the argument), the tolerance."""
import math

import pytest
import torch

from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.selection import validation as V

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
    (torch.ones(4), (0, 1)), (torch.ones(2, 1), (1, 0)), (torch.ones(1, 4), (0, 1)),
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
    (torch.ones(1, 2, 4), ValueError, "k_descale must have shape"),
    (torch.ones(2, 4, device="meta"), ValueError, "k_descale must be on cpu"),
])
def test_bad_descales_name_the_argument(x, exc, msg):
    with pytest.raises(exc, match=msg):
        V.descale("k_descale", x, 2, 4, CPU, "e4m3")


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
