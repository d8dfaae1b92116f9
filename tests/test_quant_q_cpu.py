"""``quantize_q=True``: a 16-bit q quantised to e4m3 on the device for the Hopper FP8 tensor-core
variant (``kernelgen.launch.quant_q``), on the CPU: the quantisation's own guarantees (power-of-two
descales per request and KV head, the largest such scale, e4m3's rounding bound, saturation, the
fp16 range), and the dispatch through the fake CUDA layer (tests/fake_cuda.py): which calls
quantise, the bytes the launch reads as q, the ``q_descale`` field written per call at its offset
past q, the prepared fast path, and the calls that keep q exact."""
import ctypes
import struct

import pytest
import torch

import kernelgen
from kernelgen.front import api
from kernelgen.jit import runtime
from kernelgen.kernels.params import ATTENTION_PARAMS, TMA_ATTENTION_PARAMS, fp8_params, tma_fp8_params
from kernelgen.launch import quant_q
from kernelgen.selection import heuristics

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP16 = torch.bfloat16, torch.float16


def _rows_request(cu: torch.Tensor, total: int) -> torch.Tensor:
    """Each row's request (rows past the end: the last request), on the host."""
    req = torch.empty(total, dtype=torch.long)
    b = len(cu) - 1
    for i in range(b):
        req[int(cu[i]):int(cu[i + 1])] = i
    req[int(cu[-1]):] = b                # (no request: factor 1)
    return req


def _dequant(q8, qd, cu, hkv):
    total, hq, d = q8.shape
    req = _rows_request(cu, total)
    qd = torch.cat([qd.double(), torch.ones(1, hkv, dtype=torch.float64)])
    return (q8.double().unflatten(1, (hkv, hq // hkv)) * qd[req][:, :, None, None]).flatten(1, 2)


def _random_q(dtype, total=41, hq=8, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = 3 * torch.randn(total, hq, d, generator=g)
    q[3:7, 2:4] *= 300               # one request / KV head with outliers
    q[20:30] *= 1e-3                 # a request of small values
    return q.to(dtype)


CU = torch.tensor([0, 10, 10, 30, 41], dtype=torch.int32)   # an empty request too
#: torch's cast to e4m3fn saturates past 448 from 2.12 on (NaN before)
SATURATES = float(torch.tensor([1000.0]).to(E4M3).float()) == 448


def _saturated(x: torch.Tensor) -> bool:
    """Every value of x is what a value past e4m3's range casts to on this torch."""
    v = x.float().abs()
    return bool(torch.all(v == 448)) if SATURATES else bool(torch.all(torch.isnan(v)))


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_descales_are_the_largest_powers_of_two_that_fit(dtype):
    q = _random_q(dtype)
    q8, qd = quant_q.quantize(q, CU, 4, 4)
    assert q8.dtype == E4M3 and q8.shape == q.shape and q8.is_contiguous()
    assert qd.dtype == torch.float32 and qd.shape == (4, 4) and qd.is_contiguous()
    m, e = torch.frexp(qd)
    assert torch.all(m == 0.5)                                       # powers of two
    req = _rows_request(CU, q.shape[0])
    amax = torch.zeros(4, 4, dtype=torch.float64)
    x = q.double().unflatten(1, (4, 2)).abs().amax(dim=(2, 3))
    for r in range(q.shape[0]):
        amax[req[r]] = torch.maximum(amax[req[r]], x[r])
    scaled = amax / qd.double()
    nz = amax > 0
    assert torch.all(scaled[nz] <= 448) and torch.all(scaled[nz] > 224)   # the largest 2^k with amax 2^k <= 448
    assert torch.all(qd[1] == 1)                                     # the empty request: factor 1
    assert float(q8.float().abs().max()) <= 448


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_error_is_e4m3_rounding_only(dtype):
    """Every element: relative error at most 2^-4 where q 2^k is at or above e4m3's smallest normal
    2^-6, absolute at most 2^-10 (half its subnormal step) in the scaled units below."""
    q = _random_q(dtype)
    q8, qd = quant_q.quantize(q, CU, 4, 4)
    err = (_dequant(q8, qd, CU, 4) - q.double()).abs()
    scale = _dequant(torch.ones_like(q8, dtype=torch.float32), qd, CU, 4)   # 2^-k of each element
    scaled = q.double().abs() / scale
    normal = scaled >= 2 ** -6
    assert normal.float().mean() > 0.9
    assert torch.all(err[normal] <= 2 ** -4 * q.double().abs()[normal])
    assert torch.all(err[~normal] <= 2 ** -10 * scale[~normal])
    assert float(err.max()) > 0                                      # (it does round)


def test_small_fp16_values_keep_the_fp16_range():
    """fp16: 2^k stays within fp16 (k <= 15), so a request of tiny values is scaled by 2^15."""
    q = torch.full((4, 2, 64), 2.0 ** -20, dtype=FP16)
    q8, qd = quant_q.quantize(q, torch.tensor([0, 4], dtype=torch.int32), 1, 1)
    assert float(qd) == 2.0 ** -15 and torch.all(q8.float() == 2.0 ** -5)
    q8, qd = quant_q.quantize(q.to(BF16), torch.tensor([0, 4], dtype=torch.int32), 1, 1)   # bf16: up to 448
    assert float(qd) == 2.0 ** -28 and torch.all(q8.float() == 256)


def test_non_finite_values_keep_factor_one_and_saturate():
    q = torch.ones(6, 2, 64, dtype=BF16)
    q[1, 0, 3] = float("inf")
    q[4, 1, 5] = float("nan")
    q[4, 1, 6] = 1000.0
    cu = torch.tensor([0, 3, 6], dtype=torch.int32)
    q8, qd = quant_q.quantize(q, cu, 2, 2)
    assert qd[0, 0] == 1 and qd[1, 1] == 1                           # the requests / heads with inf, NaN
    assert qd[0, 1] == 2.0 ** -8 and qd[1, 0] == 2.0 ** -8           # the others: 1 * 2^8 = 256 <= 448
    assert _saturated(q8[1, 0, 3]) and _saturated(q8[4, 1, 6])
    assert torch.isnan(q8[4, 1, 5].float())


def test_strided_q_and_rows_past_the_batch():
    """Any strides of q (the kernels' q8 is contiguous); rows past cu_seqlens_q[-1] change no
    request's factor (a padded plan step: q's buffer is longer than the step)."""
    base = _random_q(BF16, total=41, hq=16)
    q = base[:, ::2]                                                  # head stride 128, not contiguous
    cu = torch.tensor([0, 10, 30], dtype=torch.int32)
    q8, qd = quant_q.quantize(q, cu, 2, 4)
    q8c, qdc = quant_q.quantize(q.contiguous(), cu, 2, 4)
    assert torch.equal(q8.view(torch.uint8), q8c.view(torch.uint8)) and torch.equal(qd, qdc)
    assert qd.shape == (2, 4)
    big = q.clone()
    big[30:] = 1000.0                                                 # rows past the batch
    q8b, qdb = quant_q.quantize(big, cu, 2, 4)
    assert torch.equal(qdb, qd) and torch.equal(q8b[:30].view(torch.uint8), q8[:30].view(torch.uint8))
    assert _saturated(q8b[30:])                                       # factor 1, past 448


def test_a_buffer_too_small_raises():
    q = _random_q(BF16, total=5, hq=3, d=64)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^q \(5 x 3 x 64\) and its \(1, 3\) factors do not fit the buffer"):
        quant_q.quantize(q, cu, 1, 3, buffer=torch.empty(960, dtype=torch.uint8))
    with pytest.raises(ValueError, match="do not fit the buffer"):       # factors over q
        quant_q.quantize(q, cu, 1, 3, buffer=torch.empty(2000, dtype=torch.uint8), descale_offset=640)


def test_one_buffer_holds_both():
    q = _random_q(BF16, total=5, hq=3, d=64)
    off, n = quant_q.buffer_bytes(5, 3, 64, 2, 3)
    assert off == 960 and n == 960 + 24
    off, n = quant_q.buffer_bytes(1, 1, 8, 3, 1)
    assert off == 16 and n == 28                                       # the descales 16-byte aligned
    buf = torch.zeros(n + 8, dtype=torch.uint8)
    q8, qd = quant_q.quantize(q[:1, :1, :8], torch.tensor([0, 1, 1, 1], dtype=torch.int32), 3, 1, buffer=buf)
    assert q8.data_ptr() == buf.data_ptr() and qd.data_ptr() == buf.data_ptr() + 16


def test_param_offsets():
    st = fp8_params(ATTENTION_PARAMS)
    raw = st.pack({**{n: 0 for n in st.names}, "q_descale": 0x1234_5678_9abc})
    assert struct.unpack_from("<q", raw, st.offset("q_descale"))[0] == 0x1234_5678_9abc
    assert tma_fp8_params(st).offset("q_descale") == TMA_ATTENTION_PARAMS.MAPS_BYTES + st.offset("q_descale")
    assert ATTENTION_PARAMS.offset("q") == 0
    with pytest.raises(KeyError, match="no field 'q_descale'"):
        ATTENTION_PARAMS.offset("q_descale")


# ----------------------------------------------------------------------------- dispatch (fake H200)
def _cache(d=128, lq=(200, 56), lk=(300, 400), hq=4, hkv=2, dtype=BF16, kv_dtype=E4M3, seed=0):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lq), sum(lk)
    q = (2 * torch.randn(tq, hq, d, generator=g)).to(dtype)
    k = (4 * torch.randn(tk, hkv, d, generator=g)).to(kv_dtype)
    v = (4 * torch.randn(tk, hkv, d, generator=g)).to(kv_dtype)
    cq = torch.tensor([0, lq[0], tq], dtype=torch.int32)
    ck = torch.tensor([0, lk[0], tk], dtype=torch.int32)
    return q, k, v, cq, ck


def _watch(rec, nq: int, nd: int) -> list:
    """Each attention launch's (kind, fields, q bytes, q_descale floats), read while it is recorded."""
    seen = []

    def hook(x):
        if x.kind.startswith("attention"):
            f = x.fields()
            qd = f.get("q_descale", 0)
            seen.append((x.kind, f, ctypes.string_at(f["q"], nq),
                         struct.unpack(f"<{nd}f", ctypes.string_at(qd, 4 * nd)) if qd else None))
    rec.hooks.append(hook)
    return seen


@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("d", [64, 128])
def test_prefill_quantises_q_for_the_fp8_tensor_core_variant(fake_cuda, dtype, d):
    q, k, v, cq, ck = _cache(d=d, dtype=dtype)
    want8, want_qd = quant_q.quantize(q, cq, 2, 2)
    seen = _watch(fake_cuda, want8.numel(), 4)
    off, _ = quant_q.buffer_bytes(q.shape[0], 4, d, 2, 2)
    kd = torch.tensor(0.5)
    for step in range(2):
        fake_cuda.clear()
        out = kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, quantize_q=True, k_descale=kd)
        assert out.dtype == dtype and out.shape == (256, 4, d)
        assert fake_cuda.kinds() == ["scheduler", "attention_sm90_fp8mma"]
        kind, f, qbytes, qds = seen[-1]
        assert f["q"] != q.data_ptr()
        assert qbytes == want8.view(torch.uint8).numpy().tobytes()
        assert f["q_descale"] == f["q"] + off                        # written per call, past q
        assert (f["q_descale_batch_stride"], f["q_descale_head_stride"]) == (2, 1)
        assert qds == tuple(want_qd.flatten().tolist())
        assert f["k_descale"] == kd.data_ptr()
        ptr, dims, strides, _ = fake_cuda.launches[-1].maps()[0]
        assert ptr == f["q"] and strides == (d, 4 * d)               # an FP8 map over q8 (1 byte a value)
    assert len(api._CALLS._d) == 1
    (prep,) = api._CALLS._d.values()
    assert prep.q_quant == (2, 2) and prep.q_convert is None
    (spec,) = [x.spec for x in runtime.loaded_kernels() if x.spec.kind == "attention"]
    assert spec.fp8_mma and spec.dtype == ("fp16" if dtype == FP16 else "bf16")


def test_the_fast_path_quantises_each_new_q(fake_cuda):
    q, k, v, cq, ck = _cache()
    seen = _watch(fake_cuda, q.numel(), 4)
    kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, quantize_q=True)
    q2 = q * 3
    q2[:200, :2] *= 100
    fake_cuda.clear()
    kernelgen.varlen_attention(q2, k, v, cq, ck, 200, 400, causal=True, quantize_q=True)
    assert len(api._CALLS._d) == 1
    want8, want_qd = quant_q.quantize(q2, cq, 2, 2)
    assert seen[-1][2] == want8.view(torch.uint8).numpy().tobytes()
    assert seen[-1][3] == tuple(want_qd.flatten().tolist())
    assert seen[-1][3] != seen[0][3]


@pytest.mark.parametrize("case", ["decode", "d96", "sm_80", "e5m2", "off", "alibi"])
def test_other_calls_keep_q_exact(fake_cuda, case):
    """Where the tensor-core variant does not take the call (decode-shaped, head dim 96, the sm_80
    path, an e5m2 cache, ALiBi) or quantize_q is False, the launch reads the caller's q itself."""
    kw = dict(d=96) if case == "d96" else dict(lq=(1, 1), lk=(3000, 4000)) if case == "decode" else {}
    q, k, v, cq, ck = _cache(kv_dtype=E5M2 if case == "e5m2" else E4M3, **kw)
    extra = {"arch": "sm_80"} if case == "sm_80" else {}
    if case == "alibi":
        extra["alibi_slopes"] = torch.rand(4)
    seen = _watch(fake_cuda, 8, 4)
    kernelgen.varlen_attention(q, k, v, cq, ck, int(max(cq[1], cq[2] - cq[1])), int(ck[-1]), causal=True,
                               quantize_q=case != "off", **extra)
    kind, f, _, _ = seen[-1]
    assert f["q"] == q.data_ptr() and "fp8mma" not in kind and f.get("q_descale", 0) == 0
    (prep,) = api._CALLS._d.values()
    assert prep.q_quant is None


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_quantize_q_must_be_a_bool(fake_cuda, bad):
    q, k, v, cq, ck = _cache()
    with pytest.raises(TypeError, match=r"^quantize_q must be a bool, got "):
        kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, quantize_q=bad)
    assert fake_cuda.kinds() == []


# ----------------------------------------------------------------------------- AttentionPlan(quantize_q=True)
_PREFILL_PLAN = dict(max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=128, max_seqlen_q=256, max_seqlen_k=400,
                     max_total_q=300, causal=True, kv_dtype="e4m3")


@pytest.mark.parametrize("path", ["run", "attend"])
def test_plan_quantises_each_step_into_its_buffer(fake_cuda, monkeypatch, path):
    """A prefill plan with quantize_q: each step's q quantised into the plan's buffer (the same
    address every step, the factors at a fixed offset sized by max_total_q and max_batch), on the
    first (validating) and the prepared steps, and through schedule + attend."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, quantize_q=True, **_PREFILL_PLAN)
    assert plan.q_quant and plan.attn_spec.fp8_mma and plan.q_dtype is None and plan.q_convert is None
    off, _ = quant_q.buffer_bytes(300, 4, 128, 4, 2)
    seen = _watch(fake_cuda, 256 * 4 * 128, 4)
    addrs = set()
    for step in range(3):
        q, k, v, cq, ck = _cache(seed=step)
        fake_cuda.clear()
        if path == "run":
            out = plan.run(q, k, v, cq, ck)
        else:
            plan.schedule(cq, ck)
            out = plan.attend(q, k, v, cq, ck)
        assert out.dtype == BF16 and fake_cuda.kinds()[-1] == "attention_sm90_fp8mma"
        want8, want_qd = quant_q.quantize(q, cq, 2, 2)
        kind, f, qbytes, qds = seen[-1]
        assert qbytes == want8.view(torch.uint8).numpy().tobytes() and qds == tuple(want_qd.flatten().tolist())
        assert f["q_descale"] == f["q"] + off and (f["q_descale_batch_stride"], f["q_descale_head_stride"]) == (2, 1)
        addrs.add(f["q"])
    assert len(addrs) == 1                                             # the plan's buffer


@pytest.mark.parametrize("path", ["run", "attend"])
@pytest.mark.parametrize("tokens", [301, 400])
def test_plan_step_past_max_total_q_raises(fake_cuda, monkeypatch, path, tokens):
    """The plan's buffer holds max_total_q rows of q8, then the factors: a longer step (even one
    token more) is refused before anything is written or launched, though the plan has no split-KV
    (review of 35171ca: it overwrote the factors)."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, quantize_q=True, **_PREFILL_PLAN)
    assert plan.split is None or plan.q_quant
    q, k, v, cq, ck = _cache(lq=(200, tokens - 200))
    before = plan._q8.clone()
    with pytest.raises(ValueError, match=rf"^q has {tokens} tokens; the plan's max_total_q is 300"):
        if path == "run":
            plan.run(q, k, v, cq, ck)
        else:
            plan.attend(q, k, v, cq, ck)
    assert torch.equal(plan._q8, before) and fake_cuda.kinds() == []


def test_calls_the_variant_does_not_take_quantise_nothing(fake_cuda, monkeypatch):
    """A decode-shaped call with quantize_q=True decides first and quantises nothing (review of
    35171ca: every new signature quantised q and threw it away)."""
    calls = []
    orig = quant_q.quantize
    monkeypatch.setattr(quant_q, "quantize", lambda *a, **kw: calls.append(1) or orig(*a, **kw))
    q, k, v, cq, ck = _cache(lq=(1, 1), lk=(3000, 4000))
    for hint in range(4000, 4003):
        kernelgen.varlen_attention(q, k, v, cq, ck, 1, hint, causal=True, quantize_q=True)
    assert calls == [] and "attention_sm90_fp8mma" not in fake_cuda.kinds()


def test_plan_without_the_tensor_core_variant_keeps_q_exact(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    for kw in (dict(_PREFILL_PLAN, max_seqlen_q=1, max_total_q=4), dict(_PREFILL_PLAN, kv_dtype="e5m2"),
               dict(_PREFILL_PLAN, head_dim=96), dict(_PREFILL_PLAN, quantize_q=False)):
        plan = make_plan(monkeypatch, **{"quantize_q": True, **kw})
        assert not plan.q_quant and not plan.attn_spec.fp8_mma and plan._q8 is None
    with pytest.raises(TypeError, match=r"^quantize_q must be a bool, got int"):
        make_plan(monkeypatch, quantize_q=1, **_PREFILL_PLAN)


def test_plan_refuses_a_q_descale_of_the_callers(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, quantize_q=True, **_PREFILL_PLAN)
    q, k, v, cq, ck = _cache()
    with pytest.raises(ValueError, match=r"^q_descale applies to an FP8 q"):
        plan.run(q, k, v, cq, ck, q_descale=torch.ones(2, 2))
    with pytest.raises(TypeError, match=r"^q must have the plan's dtype torch.bfloat16, got torch.float8_e4m3fn"):
        plan.run(q.to(E4M3), k, v, cq, ck)


def _misaligned(q: torch.Tensor) -> torch.Tensor:
    """q's values in a contiguous tensor 2 bytes past a 16-byte boundary."""
    flat = torch.empty(q.numel() + 8, dtype=q.dtype)
    out = flat[1:1 + q.numel()].view(q.shape)
    out.copy_(q)
    assert out.is_contiguous() and out.data_ptr() % 16 == 2
    return out


def test_a_misaligned_q_on_the_fast_path_is_named(fake_cuda):
    """The signature key holds no addresses: a later call of the same shape with a q the kernels
    cannot read (not 16-byte aligned) goes down the validating path, which names it, instead of
    quantising it (review of ee4eb67: the quantisation kernel's 16-byte loads faulted)."""
    q, k, v, cq, ck = _cache()
    kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, quantize_q=True)
    assert len(api._CALLS._d) == 1
    fake_cuda.clear()
    with pytest.raises(ValueError, match="^q must start at a 16-byte aligned address"):
        kernelgen.varlen_attention(_misaligned(q), k, v, cq, ck, 200, 400, causal=True, quantize_q=True)
    assert fake_cuda.launches == []


def test_a_misaligned_plan_step_is_named(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, quantize_q=True, **_PREFILL_PLAN)
    q, k, v, cq, ck = _cache()
    plan.run(q, k, v, cq, ck)
    fake_cuda.clear()
    with pytest.raises(ValueError, match="^q must start at a 16-byte aligned address"):
        plan.run(_misaligned(q), k, v, cq, ck)
    assert fake_cuda.launches == []


# ----------------------------------------------------------------------------- a mixed batch (the fused kernel)
@pytest.mark.parametrize("strided", [False, True])
def test_mixed_batch_quantises_q_for_the_fused_kernels_long_class(fake_cuda, strided):
    """A mixed paged batch with an e4m3 cache and quantize_q on the (fake) H200: the Hopper fused
    kernel whose long class runs the FP8 tensor-core variant on the quantised q (its map an FP8 one
    over the copy, its q_descale written per call past it) while the short class reads the caller's
    16-bit q itself (its strides, factor 1); the prepared fast path quantises each new q."""
    from test_fused_cpu import CTX, HQ, HKV, QLENS, D, paged_inputs
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    if strided:   # (a view of a wider tensor: the short class keeps its strides, the copy is contiguous)
        q = torch.cat([q, torch.zeros_like(q)], dim=2)[:, :, :D]
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    b = len(QLENS)
    off, _ = quant_q.buffer_bytes(q.shape[0], HQ, D, b, HKV)
    kd = torch.full((b, HKV), 0.25)
    seen = []

    def hook(x):
        if x.kind == "fused_sm90_fp8":
            f = x.fields()
            L = f["long"]
            seen.append((f, ctypes.string_at(L["q"], q.shape[0] * HQ * D),
                         struct.unpack(f"<{b * HKV}f", ctypes.string_at(L["q_descale"], 4 * b * HKV)), x.maps(4)[0]))
    fake_cuda.hooks.append(hook)
    for step in range(3):
        if step == 2:   # (a new q of the same signature: in place, strides kept)
            q.mul_(3)
            q[:300, :8] *= 100
        want8, want_qd = quant_q.quantize(q, cu_q, b, HKV)
        fake_cuda.clear()
        out = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                         causal=True, quantize_q=True, k_descale=kd)
        assert out.dtype == BF16 and out.shape == (q.shape[0], HQ, D)
        assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90_fp8", "combine"]
        f, qbytes, qds, qmap = seen[-1]
        L, S = f["long"], f["short"]
        assert S["q"] == q.data_ptr() and (S["q_row_stride"], S["q_head_stride"]) == (q.stride(0), q.stride(1))
        assert (S["q_descale"], S["q_descale_batch_stride"], S["q_descale_head_stride"]) == (0, 0, 0)
        assert L["q"] != q.data_ptr() and (L["q_row_stride"], L["q_head_stride"]) == (HQ * D, D)
        assert qbytes == want8.view(torch.uint8).numpy().tobytes()
        assert L["q_descale"] == L["q"] + off and (L["q_descale_batch_stride"], L["q_descale_head_stride"]) == (HKV, 1)
        assert qds == tuple(want_qd.flatten().tolist())
        assert L["k_descale"] == S["k_descale"] == kd.data_ptr()
        assert f["short_ctas"] == round(132 * heuristics.SM90_MIXED_SHORT_FRACTION_FP8_MMA) == 44   # (fake H200)
        ptr, dims, strides, box = qmap
        assert ptr == L["q"] and strides == (D, HQ * D)              # an FP8 map over the copy (1 byte a value)
    assert len(api._CALLS._d) == 1
    (prep,) = api._CALLS._d.values()
    assert prep.q_quant == (b, HKV) and prep.q_short and prep.q_convert is None
    (spec,) = [x.spec for x in runtime.loaded_kernels() if x.spec.kind == "fused"]
    assert spec.hopper and spec.long.fp8_mma and not spec.short.fp8_mma and spec.short.kv_dtype == "e4m3"


def test_mixed_batch_off_the_fused_kernel_keeps_q_exact(fake_cuda, monkeypatch):
    """KERNELGEN_FP8_FUSED=0 (no fused kernel on an FP8 cache): the mixed batch with quantize_q runs
    as one class on the tensor-core variant, as before the fused form existed."""
    from test_fused_cpu import CTX, QLENS, paged_inputs
    monkeypatch.setenv("KERNELGEN_FP8_FUSED", "0")
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True, quantize_q=True)
    assert "fused_sm90_fp8" not in fake_cuda.kinds()
    (prep,) = api._CALLS._d.values()
    assert not prep.q_short


@pytest.mark.parametrize("path", ["run", "attend"])
def test_mixed_plan_quantises_for_the_fused_kernels_long_class(fake_cuda, monkeypatch, path):
    """A mixed-batch plan with an e4m3 cache and quantize_q: the Hopper fused kernel whose long class
    reads each step's q quantised into the plan's buffer (the same address every step, its factors at
    the plan's offset) and whose short class reads the step's 16-bit q (factor 1), through run (the
    validating then the prepared steps) and schedule + attend."""
    from fake_cuda import make_plan
    from test_fused_cpu import CTX, HQ, HKV, PS, QLENS, D, paged_inputs
    plan = make_plan(monkeypatch, max_batch=8, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_seqlen_q=2048,
                     max_seqlen_k=8192, max_total_q=4096, paged=True, page_size=PS, causal=True, kv_dtype="e4m3",
                     quantize_q=True)
    assert plan.recipe.kind == "fused" and plan.attn_spec.long.fp8_mma and plan.q_quant and plan._q_short
    assert plan.q_convert is None and plan._q_kernel is None      # (the fake device: torch ops)
    off, _ = quant_q.buffer_bytes(4096, HQ, D, 8, HKV)
    b = len(QLENS)
    addrs = set()
    for step in range(3):
        q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
        kc, vc = kc.to(E4M3), vc.to(E4M3)
        seen = []

        def hook(x):
            if x.kind == "fused_sm90_fp8":
                L = x.fields()["long"]
                seen.append((x.fields(), ctypes.string_at(L["q"], q.shape[0] * HQ * D),
                             struct.unpack(f"<{b * HKV}f", ctypes.string_at(L["q_descale"], 4 * b * HKV))))
        fake_cuda.hooks[:] = [hook]
        fake_cuda.clear()
        if path == "run":
            plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt)
        else:
            plan.schedule(cu_q, seqused_k=used)
            plan.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt)
        assert "fused_sm90_fp8" in fake_cuda.kinds()
        want8, want_qd = quant_q.quantize(q, cu_q, b, HKV)
        f, qbytes, qds = seen[-1]
        L, S = f["long"], f["short"]
        assert qbytes == want8.view(torch.uint8).numpy().tobytes() and qds == tuple(want_qd.flatten().tolist())
        assert L["q_descale"] == L["q"] + off and (L["q_descale_batch_stride"], L["q_descale_head_stride"]) == (HKV, 1)
        assert S["q"] == q.data_ptr() and (S["q_descale"], S["q_descale_batch_stride"]) == (0, 0)
        addrs.add(L["q"])
    assert len(addrs) == 1                                             # the plan's buffer


def test_short_rows_setting_reaches_the_quantised_mixed_call(fake_cuda, monkeypatch):
    """KERNELGEN_SM90_SHORT_ROWS=16 gives the quantised mixed call's fused kernel the 16-row decode
    tile, as it does the 16-bit q's (review of 9b6b892: the quantised branch did not pass it)."""
    from test_fused_cpu import CTX, QLENS, paged_inputs
    monkeypatch.setenv("KERNELGEN_SM90_SHORT_ROWS", "16")
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    for qq in (False, True):
        kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                   causal=True, quantize_q=qq)
    specs = [k.spec for k in runtime.loaded_kernels() if k.spec.kind == "fused"]
    assert sorted(s.long.fp8_mma for s in specs) == [False, True]
    assert all(s.short.tile.block_m == 16 for s in specs), [s.name for s in specs]


@pytest.mark.parametrize("page_size,rows", [(16, None), (16, "16"), (24, None), (48, None)])
def test_warmup_lists_the_quantised_mixed_calls_kernels(monkeypatch, page_size, rows):
    """``warmup_specs(kv_dtypes=("e4m3",))`` holds every kernel a quantised mixed call decides, also
    at page sizes where the 16-bit q's Hopper fused kernel does not apply (24, 48: the tensor-core
    variant's 192-key blocks box them) and with KERNELGEN_SM90_SHORT_ROWS (review of 9b6b892)."""
    from test_decide import H200, sig
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from kernelgen.selection.settings import Settings
    if rows:
        monkeypatch.setenv("KERNELGEN_SM90_SHORT_ROWS", rows)
    st = Settings.from_env()
    have = set(warmup_specs("sm_90a", head_dims=(128,), dtypes=("bf16",), causals=(True,), layouts=("soa",),
                            phases=("prefill", "chunked", "decode"), gqas=(4,), paged=(False, True),
                            kv_dtypes=("e4m3",), page_sizes=(page_size,), settings=st))
    r = decide.decide(sig(kv_dtype="e4m3", q_dtype="e4m3", quantized_q=True, page_size=page_size, max_seqlen_q=512,
                          max_seqlen_k=32768, paged=True, batch=40, rows=600), H200, st)
    assert r.kind == "fused" and r.variants.fused.long.fp8_mma
    assert r.variants.fused.long.tile.block_n == (224 if page_size == 16 else 192)
    assert [s.name for s in r.specs if s not in have] == []


@pytest.mark.parametrize("entry", ["call", "plan"])
def test_a_missing_quantisation_kernel_names_the_whole_calls_command(fake_cuda, monkeypatch, tmp_path, entry):
    """KERNELGEN_DISABLE_JIT=1 and the q quantisation kernel not in the cache: the error's ``kernelgen
    warmup`` command builds it and every kernel of the call (review of the seventy-second session's
    change: the call's error named a command for the quantisation kernel alone, whose set lacks the
    quantised mixed call's fused and combine kernels)."""
    import shlex

    from fake_cuda import make_plan
    from test_fused_cpu import CTX, HQ, HKV, PS, QLENS, D, paged_inputs
    from kernelgen.apps import cli
    from kernelgen.jit import cache
    from kernelgen.kernels.spec import QuantSpec
    from kernelgen.selection import catalog
    monkeypatch.setattr(catalog, "WARMUP_COMMAND_BUDGET_S", None)
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    qspec = QuantSpec("sm_90a", "bf16")

    def run():
        if entry == "call":
            kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                       causal=True, quantize_q=True)
        else:
            make_plan(monkeypatch, max_batch=8, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_seqlen_q=2048,
                      max_seqlen_k=8192, max_total_q=4096, paged=True, page_size=PS, causal=True, kv_dtype="e4m3",
                      quantize_q=True).run(q, kc, vc, cu_q, seqused_k=used, page_table=pt)

    run()   # (the fake device: no quantisation kernel, torch ops) the kernels the call loads
    specs = {k.spec for k in runtime.loaded_kernels()}
    assert any(s.kind == "fused" and s.long.fp8_mma for s in specs) and any(s.kind == "combine" for s in specs)
    empty = cache.KernelCache(tmp_path / "c")
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    monkeypatch.setattr(runtime, "quant_kernel", lambda device, dtype, allow=False: empty.get(qspec))
    monkeypatch.setattr(api, "_CALLS", type(api._CALLS)())
    with pytest.raises(cache.KernelNotCachedError) as ei:
        run()
    msg = str(ei.value)
    assert ei.value.spec == qspec and "..." not in msg, msg
    cmd = msg[msg.index("`kernelgen warmup") + 1:]
    cmd = cmd[:cmd.index("`")]
    args = cli.build_parser().parse_args(shlex.split(cmd)[1:])
    built = set(cli.warmup_catalog(args, args.arch))
    assert qspec in built and sorted(s.name for s in specs - built) == [], cmd


@pytest.mark.parametrize("case", ["long_mean", "pack_gqa", "num_splits"])
def test_the_documented_one_class_mixed_batches_quantise_their_decodes(fake_cuda, case):
    """The mixed batches docs/api.md lists as one class on the FP8 tensor-core variant with
    quantize_q (their decodes quantised too; review of the seventy-second session's docs, which
    listed only head dim 256, KERNELGEN_FP8_FUSED=0 and short_query_tokens=0): requests averaging at
    least SM90_PAGED_MIN_MEAN_Q query tokens (the Hopper kernel alone, also without quantize_q), a
    forced pack_gqa, a forced num_splits."""
    from test_fused_cpu import paged_inputs
    qlens, ctx = ([2048, 2048, 1, 1], [4096, 4096, 5000, 300]) if case == "long_mean" else \
        ([300, 1, 1, 3, 2048, 1, 0], [900, 40, 5000, 7, 2048, 1, 0])
    assert (sum(qlens) >= heuristics.SM90_PAGED_MIN_MEAN_Q * len(qlens)) == (case == "long_mean")
    kw = {"pack_gqa": dict(pack_gqa=True), "num_splits": dict(num_splits=4)}.get(case, {})
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kinds = {}
    for qq in (False, True):
        fake_cuda.clear()
        kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(ctx), seqused_k=used, page_table=pt,
                                   causal=True, quantize_q=qq, **kw)
        kinds[qq] = [k for k in fake_cuda.kinds() if k.startswith(("attention", "fused"))]
    assert kinds[True] == ["attention_sm90_fp8mma"], kinds
    assert not any(k.startswith("fused") for k in kinds[False]), kinds
    prep = list(api._CALLS._d.values())[-1]
    assert prep.q_quant == (len(qlens), 8) and not prep.q_short


@pytest.mark.parametrize("page_size", [None, 1, 16])
def test_a_plan_quantises_only_where_its_kernels_box_the_pages(fake_cuda, monkeypatch, page_size):
    """docs/api.md: a mixed-batch plan with quantize_q and page_size None (rows gathered through the
    page table) or pages TMA cannot box keeps q exact for every step (``q_quant`` False); pages of 16
    take the fused kernel's FP8 tensor-core long class."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, max_batch=8, num_heads_q=32, num_heads_kv=8, head_dim=128, max_seqlen_q=1024,
                     max_seqlen_k=8192, max_total_q=1024, paged=True, page_size=page_size, causal=True,
                     kv_dtype="e4m3", quantize_q=True)
    assert bool(plan.q_quant) == (page_size == 16) == bool(plan._q_short)
