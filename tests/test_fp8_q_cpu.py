"""An FP8 q (``torch.float8_e4m3fn`` with an FP8 K/V cache, FlashAttention-3's FP8 forward) on the
CPU: the checks of q / k / ``q_descale`` / ``out_dtype`` / ``out`` (errors name the argument), the
dispatch through the fake CUDA layer (tests/fake_cuda.py: the Hopper FP8 tensor-core variant reads
the FP8 q itself, every other kernel gets q converted exactly to the output dtype, read back from
the memory the launch addresses), the ``q_descale`` parameter fields, the prepared fast path, and
``AttentionPlan(q_dtype=)``.  The torch ops and the FlashAttention-3 entry points:
tests/test_ops_compat.py (and the end of this file)."""
import ctypes
import re

import pytest
import torch

import fake_cuda as fake_cuda_mod   # (the fixture is named fake_cuda)
import kernelgen
from kernelgen.front import api
from kernelgen.jit import runtime
from kernelgen.selection import validation as V

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP16 = torch.bfloat16, torch.float16
CPU = torch.device("cpu")


def _batch(d=64, lq=(3, 7), lk=(1988, 12), hq=4, hkv=2, kv_dtype=E4M3, seed=0):
    """(q, k, v, cu_seqlens_q, cu_seqlens_k): an e4m3 q and an FP8 packed K/V cache (CPU)."""
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lq), sum(lk)
    q = (4 * torch.randn(tq, hq, d, generator=g)).to(E4M3)
    k = (4 * torch.randn(tk, hkv, d, generator=g)).to(kv_dtype)
    v = (4 * torch.randn(tk, hkv, d, generator=g)).to(kv_dtype)
    cq = torch.tensor([0, lq[0], tq], dtype=torch.int32)
    ck = torch.tensor([0, lk[0], tk], dtype=torch.int32)
    return q, k, v, cq, ck


#: prefill-shaped (the Hopper kernel takes it on the fake H200) and decode-shaped batches
PREFILL = dict(d=128, lq=(200, 56), lk=(300, 400))
DECODE = dict(d=128, lq=(1, 1), lk=(3000, 4000))


def _bytes(x: torch.Tensor) -> bytes:
    return x.contiguous().view(torch.uint8).numpy().tobytes()


def _watch_q(rec, nbytes: int) -> list:
    """Each attention launch's (kind, q address, the ``nbytes`` there), read while the launch is
    recorded (the call's temporaries are alive then)."""
    seen = []

    def hook(x):
        if x.kind.startswith("attention"):
            ptr = x.fields()["q"]
            seen.append((x.kind, ptr, ctypes.string_at(ptr, nbytes)))
    rec.hooks.append(hook)
    return seen


def _attn(rec) -> list:
    return [x for x in rec.launches if x.kind.startswith("attention")]


def _q_descale_fields(f) -> tuple:
    return f["q_descale"], f["q_descale_batch_stride"], f["q_descale_head_stride"]


def _loaded_attention_specs() -> list:
    return [k.spec for k in runtime.loaded_kernels() if k.spec.kind == "attention"]


def _inputs(q_dtype=E4M3, k_dtype=E4M3):
    q = torch.zeros(10, 8, 64).to(q_dtype)
    k = torch.zeros(12, 2, 64).to(k_dtype)
    return q, k, k.clone(), torch.tensor([0, 4, 10], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)


def _check(q, k, v, cq, ck, out=None, **kw):
    return V.varlen_inputs(q, k, v, cq, ck, None, None, out, devtypes=("cpu",), **kw)


# ----------------------------------------------------------------------------- the checks
@pytest.mark.parametrize("kv,name", [(E4M3, "e4m3"), (E5M2, "e5m2")])
def test_fp8_q_sizes(kv, name):
    sizes = _check(*_inputs(E4M3, kv))
    assert (sizes["q_dtype"], sizes["kv_dtype"], sizes["dtype"]) == ("e4m3", name, BF16)
    assert _check(*_inputs(E4M3, kv), out_dtype=FP16)["dtype"] == FP16
    assert _check(*_inputs(E4M3, kv), out_dtype=BF16)["dtype"] == BF16
    assert _check(*_inputs(E4M3, kv), out=torch.empty(10, 8, 64, dtype=FP16))["dtype"] == FP16   # out's dtype
    # a 16-bit q: no q_dtype, the output in q's dtype (out_dtype None or q's)
    for dt in (BF16, FP16):
        for od in (None, dt):
            sizes = _check(*_inputs(dt, kv), out_dtype=od)
            assert "q_dtype" not in sizes and sizes["dtype"] == dt


@pytest.mark.parametrize("k_dtype", [BF16, FP16])
def test_fp8_q_with_a_16_bit_k_names_k(k_dtype):
    with pytest.raises(TypeError, match=r"^k must have an FP8 dtype \(float8_e4m3fn or float8_e5m2\) with an FP8 q, "
                                        rf"got {str(k_dtype).replace('torch.', '')}"):
        _check(*_inputs(E4M3, k_dtype))


def test_e5m2_q_names_q():
    with pytest.raises(TypeError, match=r"^q must have dtype float16, bfloat16, float8_e4m3fn, got float8_e5m2"):
        _check(*_inputs(E5M2, E5M2))


@pytest.mark.parametrize("bad", [torch.float32, E4M3, E5M2, torch.int8, "bf16", 16, [torch.bfloat16]])
def test_out_dtype_not_16_bit_is_a_type_error(bad):
    for q_dtype in (E4M3, BF16):
        with pytest.raises(TypeError, match=r"^out_dtype must be None, torch.float16 or torch.bfloat16, got "):
            _check(*_inputs(q_dtype), out_dtype=bad)


def test_out_dtype_other_than_a_16_bit_qs_is_a_value_error():
    with pytest.raises(ValueError, match=r"^out_dtype \(torch.float16\) must be q's dtype torch.bfloat16"):
        _check(*_inputs(BF16), out_dtype=FP16)
    with pytest.raises(ValueError, match=r"^out_dtype \(torch.bfloat16\) must be q's dtype torch.float16"):
        _check(*_inputs(FP16, E5M2), out_dtype=BF16)


def test_out_of_the_wrong_dtype_for_an_fp8_q_names_out():
    for dt, want in ((torch.float32, "bfloat16"), (E4M3, "bfloat16")):
        with pytest.raises(TypeError, match=rf"^out must have dtype {want}, got "):
            _check(*_inputs(), out=torch.zeros(10, 8, 64).to(dt))
    with pytest.raises(ValueError, match=r"^out_dtype \(torch.float16\) differs from out's dtype torch.float32"):
        _check(*_inputs(), out=torch.zeros(10, 8, 64), out_dtype=FP16)
    with pytest.raises(ValueError, match=r"^out_dtype \(torch.bfloat16\) differs from out's dtype torch.float16"):
        _check(*_inputs(), out=torch.zeros(10, 8, 64, dtype=FP16), out_dtype=BF16)
    with pytest.raises(ValueError, match=r"^out must have shape \(10, 8, 64\)"):
        _check(*_inputs(), out=torch.zeros(10, 8, 32, dtype=BF16))


@pytest.mark.parametrize("x,strides", [
    (torch.ones(2, 4), (4, 1)), (torch.ones(()), (0, 0)), (torch.ones(1), (0, 0)), (torch.ones(1, 1), (0, 0)),
    (torch.ones(2, 1), (1, 0)), (torch.ones(1, 4), (0, 1)), (torch.ones(()).expand(2, 4), (0, 0)),
    (torch.ones(4, 2).t(), (1, 2)), (torch.ones(2, 8)[:, ::2], (8, 2)),
])
def test_q_descale_shapes_and_strides(x, strides):
    assert V.q_descale(x, 2, 4, CPU, "e4m3") == strides
    assert V.q_descale(None, 2, 4, CPU, "e4m3") is None
    assert V.q_descale(None, 2, 4, CPU, "") is None


@pytest.mark.parametrize("x,exc,msg", [
    (1.0, TypeError, "^q_descale must be a torch.Tensor, got float"),
    (torch.ones(2, 4, dtype=FP16), TypeError, "^q_descale must have dtype float32, got float16"),
    (torch.ones(2, 4, dtype=torch.float64), TypeError, "^q_descale must have dtype float32"),
    (torch.ones(3, 4), ValueError, r"^q_descale must have shape \(2, 4\) \(batch, num_heads_kv\)"),
    (torch.ones(2, 8), ValueError, r"^q_descale must have shape \(2, 4\)"),
    (torch.ones(4), ValueError, "a 1-D tensor of several factors is ambiguous"),
    (torch.ones(1, 2, 4), ValueError, "^q_descale must have shape"),
    (torch.ones(2, 4, device="meta"), ValueError, "^q_descale must be on cpu"),
])
def test_bad_q_descales_name_the_argument(x, exc, msg):
    with pytest.raises(exc, match=msg):
        V.q_descale(x, 2, 4, CPU, "e4m3")


def test_q_descale_with_a_16_bit_q_is_refused():
    with pytest.raises(ValueError, match=r"^q_descale applies to an FP8 q \(float8_e4m3fn\) only; q here is "
                                         r"float16/bfloat16: pass q_descale=None"):
        V.q_descale(torch.ones(2, 4), 2, 4, CPU, "")


def test_validation_q_dtype():
    assert V.q_dtype(None, "") == "" and V.q_dtype(None, "e4m3") == ""
    assert V.q_dtype("e4m3", "e5m2") == "e4m3" and V.q_dtype(E4M3, "e4m3") == "e4m3"
    for bad in ("e5m2", E5M2, BF16, "fp8", 8, True):
        with pytest.raises(ValueError, match=r"^q_dtype must be None, 'e4m3' or torch.float8_e4m3fn"):
            V.q_dtype(bad, "e4m3")
    with pytest.raises(ValueError, match=r"^q_dtype \(an FP8 q\) needs an FP8 K/V cache: pass kv_dtype too"):
        V.q_dtype("e4m3", "")


# ----------------------------------------------------------------------------- errors of the public call
def test_varlen_attention_fp8_q_errors_name_the_argument(fake_cuda):
    q, k, v, cq, ck = _batch()
    q16, k16, v16 = q.to(BF16), k.to(BF16), v.to(BF16)
    with pytest.raises(TypeError, match="^k must have an FP8 dtype .* with an FP8 q, got bfloat16"):
        kernelgen.varlen_attention(q, k16, v16, cq, ck)
    with pytest.raises(ValueError, match=r"^q_descale applies to an FP8 q \(float8_e4m3fn\) only"):
        kernelgen.varlen_attention(q16, k, v, cq, ck, q_descale=torch.ones(2, 2))       # 16-bit q, FP8 cache
    with pytest.raises(ValueError, match=r"^q_descale applies to an FP8 q"):
        kernelgen.varlen_attention(q16, k16, v16, cq, ck, q_descale=torch.ones(()))    # all 16-bit
    with pytest.raises(ValueError, match=r"^q_descale must have shape \(2, 2\)"):
        kernelgen.varlen_attention(q, k, v, cq, ck, q_descale=torch.ones(3, 2))
    with pytest.raises(TypeError, match="^q_descale must have dtype float32"):
        kernelgen.varlen_attention(q, k, v, cq, ck, q_descale=torch.ones(2, 2, dtype=BF16))
    with pytest.raises(ValueError, match="^q_descale must be on cpu"):
        kernelgen.varlen_attention(q, k, v, cq, ck, q_descale=torch.ones(2, 2, device="meta"))
    with pytest.raises(TypeError, match="^out_dtype must be None, torch.float16 or torch.bfloat16"):
        kernelgen.varlen_attention(q, k, v, cq, ck, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^out_dtype \(torch.float16\) must be q's dtype torch.bfloat16"):
        kernelgen.varlen_attention(q16, k, v, cq, ck, out_dtype=FP16)
    with pytest.raises(TypeError, match="^out must have dtype bfloat16, got float32"):
        kernelgen.varlen_attention(q, k, v, cq, ck, out=torch.empty(10, 4, 64))
    with pytest.raises(TypeError, match=r"^q must have dtype float16, bfloat16, float8_e4m3fn, got float8_e5m2"):
        kernelgen.varlen_attention(q.to(E5M2), k, v, cq, ck)
    assert fake_cuda.kinds() == []


def test_non_finite_q_descale_raises_under_the_host_checks(fake_cuda, monkeypatch):
    q, k, v, cq, ck = _batch()
    qd = torch.ones(2, 2)
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 2000, q_descale=qd)      # prepared
    fake_cuda.clear()
    qd[1, 0] = float("nan")
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    with pytest.raises(ValueError, match="q_descale holds a non-finite factor"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 7, 2000, q_descale=qd)
    assert fake_cuda.kinds() == []


# ----------------------------------------------------------------------------- dispatch
@pytest.mark.parametrize("arch", [None, "sm_90a"])
@pytest.mark.parametrize("out_dtype", [None, BF16, FP16])
def test_prefill_d128_runs_the_fp8_tensor_core_variant_on_the_fp8_q(fake_cuda, arch, out_dtype):
    """On the (fake) H200 a prefill-shaped call at d 128 takes the Hopper kernel's FP8 tensor-core
    variant: the launch addresses q itself (its q map an FP8 one over q's bytes), no conversion;
    the output in out_dtype (bf16 by default); the same on the prepared fast path."""
    from fake_cuda import map_kind
    q, k, v, cq, ck = _batch(**PREFILL)
    seen = _watch_q(fake_cuda, q.numel())
    for step in range(2):
        fake_cuda.clear()
        out = kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, arch=arch, out_dtype=out_dtype)
        assert out.dtype == (out_dtype or BF16) and out.shape == (256, 4, 128)
        assert fake_cuda.kinds() == ["scheduler", "attention_sm90_fp8mma"]
        (launch,) = _attn(fake_cuda)
        assert launch.fields()["q"] == q.data_ptr() and launch.fields()["o_row_stride"] == 4 * 128
        ptr, dims, strides, _ = launch.maps()[0]
        assert ptr == q.data_ptr() and dims == (128, 4, 256) and strides == (128, 512)   # bytes: 1 a value
        assert map_kind(launch.params[:128]) == "fp8"
        assert seen[-1] == ("attention_sm90_fp8mma", q.data_ptr(), _bytes(q))
    assert len(seen) == 2 and len(api._CALLS._d) == 1
    (prep,) = api._CALLS._d.values()
    assert prep.q_convert is None
    (spec,) = _loaded_attention_specs()
    assert spec.fp8_mma and spec.mainloop == "sm90a" and spec.kv_dtype == "e4m3"
    assert spec.dtype == ("fp16" if out_dtype == FP16 else "bf16")


@pytest.mark.parametrize("case,kw,kind", [
    ("decode", dict(DECODE), "attention_fp8"),
    ("d96", dict(PREFILL, d=96), "attention_sm90_fp8"),
    ("sm_80", dict(PREFILL), "attention_fp8"),
    ("e5m2_decode", dict(DECODE, kv_dtype=E5M2), "attention_fp8"),
])
@pytest.mark.parametrize("out_dtype", [None, FP16])
def test_other_kernels_get_q_converted_to_the_output_dtype(fake_cuda, case, kw, kind, out_dtype):
    """A decode-shaped call, head dim 96 (not a multiple of 64: the tensor-core variant does not take it) or the
    sm_80 path: a kernel without fp8_mma, whose launch addresses a 16-bit copy of q in the output
    dtype (exact: every e4m3 value is a bf16 and an fp16 value), not q; again on the prepared fast
    path (a new conversion each call)."""
    from fake_cuda import map_kind
    q, k, v, cq, ck = _batch(**kw)
    want = out_dtype or BF16
    seen = _watch_q(fake_cuda, 2 * q.numel())
    lq = max(kw["lq"])
    for step in range(2):
        fake_cuda.clear()
        out = kernelgen.varlen_attention(q, k, v, cq, ck, lq, max(kw["lk"]), causal=True, out_dtype=out_dtype,
                                         **({"arch": "sm_80"} if case == "sm_80" else {}))
        assert out.dtype == want and out.shape == (q.shape[0], 4, q.shape[2])
        assert fake_cuda.kinds()[:2] == ["scheduler", kind]
        (launch,) = _attn(fake_cuda)
        f = launch.fields()
        assert f["q"] != q.data_ptr()
        assert (f["q_row_stride"], f["q_head_stride"]) == (4 * q.shape[2], q.shape[2])
        if kind == "attention_sm90_fp8":
            ptr, dims, strides, _ = launch.maps()[0]
            assert ptr == f["q"] and strides == (2 * q.shape[2], 8 * q.shape[2]) and map_kind(launch.params[:128]) \
                == "16bit"
        assert seen[-1] == (kind, f["q"], _bytes(q.to(want)))
        assert torch.equal(q.to(want).float(), q.float())          # (the conversion is exact)
    assert len(seen) == 2 and len(api._CALLS._d) == 1
    (prep,) = api._CALLS._d.values()
    assert prep.q_convert == want
    (spec,) = _loaded_attention_specs()
    assert not spec.fp8_mma and spec.kv_dtype == ("e5m2" if case.startswith("e5m2") else "e4m3")
    assert spec.dtype == ("fp16" if out_dtype == FP16 else "bf16")


@pytest.mark.parametrize("shape", ["prefill", "decode"])
def test_q_descale_lands_in_the_parameter_fields(fake_cuda, shape):
    """q_descale's address and (batch, KV head) strides in elements in the attention launch, beside
    k_descale / v_descale (a transposed tensor, a broadcast one, a per-tensor factor, none: 0); a
    new tensor its own prepared call; the same values on the fast path."""
    q, k, v, cq, ck = _batch(**(PREFILL if shape == "prefill" else DECODE))
    lq, lk = max(int(cq[1]), int(cq[2] - cq[1])), int(ck[-1])
    kd, vd = torch.rand(2, 2) + 0.5, torch.rand(2, 2) + 0.5
    qd = (torch.rand(2, 2) + 0.5).t()                             # strides (1, 2)
    for _ in range(2):
        fake_cuda.clear()
        kernelgen.varlen_attention(q, k, v, cq, ck, lq, lk, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
        (launch,) = _attn(fake_cuda)
        f = launch.fields()
        assert _q_descale_fields(f) == (qd.data_ptr(), 1, 2)
        assert (f["k_descale"], f["k_descale_batch_stride"], f["k_descale_head_stride"]) == (kd.data_ptr(), 2, 1)
        assert f["v_descale"] == vd.data_ptr()
    assert len(api._CALLS._d) == 1
    s = torch.tensor(0.25)
    col = torch.rand(2, 1)
    for x, want in ((s, (s.data_ptr(), 0, 0)), (s.expand(2, 2), (s.data_ptr(), 0, 0)),
                    (col, (col.data_ptr(), 1, 0)), (torch.ones(1, 2), None), (None, (0, 0, 0))):
        fake_cuda.clear()
        kernelgen.varlen_attention(q, k, v, cq, ck, lq, lk, causal=True, q_descale=x, k_descale=kd)
        got = _q_descale_fields(_attn(fake_cuda)[0].fields())
        assert got == (want or (x.data_ptr(), 0, 1))
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, lq, lk, causal=True)     # nothing: every factor 1
    f = _attn(fake_cuda)[0].fields()
    assert _q_descale_fields(f) == (0, 0, 0) and f["k_descale"] == f["v_descale"] == 0


def test_a_16_bit_q_on_an_fp8_cache_leaves_q_descale_zero(fake_cuda):
    q, k, v, cq, ck = _batch()
    q16 = q.to(BF16)
    kernelgen.varlen_attention(q16, k, v, cq, ck, 7, 2000, k_descale=torch.ones(2, 2))
    (launch,) = _attn(fake_cuda)
    assert launch.fields()["q"] == q16.data_ptr() and _q_descale_fields(launch.fields()) == (0, 0, 0)
    (spec,) = _loaded_attention_specs()
    assert not spec.fp8_mma


def test_fast_path_converts_each_call_and_uses_no_host_sync(fake_cuda, monkeypatch):
    """The second call of a signature takes the prepared call (no validation: _validated_call is not
    reached) and converts the new q of that call; no host sync on the way (CUDA graph capture)."""
    q, k, v, cq, ck = _batch(**DECODE)
    qd = torch.full((2, 2), 0.5)
    kernelgen.varlen_attention(q, k, v, cq, ck, 1, 4000, causal=True, q_descale=qd, out_dtype=BF16)
    calls = []
    orig = api._validated_call

    def spy(*a, **kw):
        calls.append(1)
        return orig(*a, **kw)
    monkeypatch.setattr(api, "_validated_call", spy)
    fake_cuda.hooks.clear()
    q2 = (2 * q.float()).to(E4M3)                                     # new values, same signature
    seen = _watch_q(fake_cuda, 2 * q.numel())
    guard = fake_cuda_mod.no_host_sync()
    try:
        for x in (q2, q):
            fake_cuda.clear()
            out = kernelgen.varlen_attention(x, k, v, cq, ck, 1, 4000, causal=True, q_descale=qd, out_dtype=BF16)
            assert out.dtype == BF16
            assert _q_descale_fields(_attn(fake_cuda)[0].fields()) == (qd.data_ptr(), 2, 1)
    finally:
        guard.undo()
    assert calls == [] and len(api._CALLS._d) == 1                  # out_dtype given: still one cached call
    assert [s[2] for s in seen] == [_bytes(q2.to(BF16)), _bytes(q.to(BF16))]
    assert all(s[1] not in (q.data_ptr(), q2.data_ptr()) for s in seen)


def test_a_misaligned_fp8_q_is_refused_on_the_fast_path_too(fake_cuda):
    """The validating path refuses a q that does not start 16-byte aligned; a prepared call of the
    same signature must too (the converted copy is aligned: it must not hide it)."""
    q, k, v, cq, ck = _batch(**DECODE)
    buf = torch.zeros(q.numel() + 16, dtype=torch.uint8).view(E4M3)
    qm = buf[1:1 + q.numel()].view(q.shape)
    qm.copy_(q)
    assert qm.data_ptr() % 16 and qm.stride() == q.stride()
    with pytest.raises(ValueError, match="^q must start at a 16-byte aligned address"):
        kernelgen.varlen_attention(qm, k, v, cq, ck, 1, 4000)
    kernelgen.varlen_attention(q, k, v, cq, ck, 1, 4000)                 # prepared
    fake_cuda.clear()
    with pytest.raises(ValueError, match="^q must start at a 16-byte aligned address"):
        kernelgen.varlen_attention(qm, k, v, cq, ck, 1, 4000)
    # a misaligned out on the prepared call: named as out, with the caller's q
    ob = torch.empty(2 * 4 * 128 + 8, dtype=BF16)
    with pytest.raises(ValueError, match="^out must start at a 16-byte aligned address"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 1, 4000, out=ob[1:1 + 2 * 4 * 128].view(2, 4, 128))
    assert fake_cuda.kinds() == []


def test_out_given_for_an_fp8_q(fake_cuda):
    q, k, v, cq, ck = _batch(**PREFILL)
    for dt in (BF16, FP16):
        out = torch.full((256, 4, 128), float("nan"), dtype=dt)
        res, lse = kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, out=out, return_lse=True)
        assert res is out and lse.dtype == torch.float32 and lse.shape == (4, 256)
        assert _attn(fake_cuda)[-1].fields()["q"] == q.data_ptr()
    assert {s.dtype for s in _loaded_attention_specs()} == {"bf16", "fp16"}


def test_empty_fp8_q_call_returns_the_output_dtype(fake_cuda):
    q, k, v, _, ck = _batch()
    q0 = q[:0]
    cq = torch.tensor([0, 0, 0], dtype=torch.int32)
    out = kernelgen.varlen_attention(q0, k, v, cq, ck, out_dtype=FP16)
    assert out.shape == (0, 4, 64) and out.dtype == FP16 and fake_cuda.kinds() == []


# ----------------------------------------------------------------------------- AttentionPlan
_PLAN = dict(max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=64, max_seqlen_q=7, max_seqlen_k=2000, causal=True)
_PREFILL_PLAN = dict(max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=128, max_seqlen_q=256, max_seqlen_k=400,
                     max_total_q=256, causal=True)


def test_plan_q_dtype_needs_kv_dtype(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    with pytest.raises(ValueError, match=r"^q_dtype \(an FP8 q\) needs an FP8 K/V cache: pass kv_dtype too"):
        make_plan(monkeypatch, q_dtype="e4m3", **_PLAN)
    with pytest.raises(ValueError, match="^q_dtype must be None, 'e4m3' or torch.float8_e4m3fn"):
        make_plan(monkeypatch, q_dtype="e5m2", kv_dtype="e5m2", **_PLAN)
    for qd in ("e4m3", E4M3):
        plan = make_plan(monkeypatch, q_dtype=qd, kv_dtype="e5m2", **_PLAN)
        assert plan.q_dtype == "e4m3" and plan.kv_dtype == "e5m2"
    assert make_plan(monkeypatch, kv_dtype="e4m3", **_PLAN).q_dtype is None


def test_plan_steps_with_the_wrong_q_dtype_name_q(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    fp8q = make_plan(monkeypatch, q_dtype="e4m3", kv_dtype="e4m3", **_PLAN)
    kvonly = make_plan(monkeypatch, kv_dtype="e4m3", **_PLAN)
    q, k, v, cq, ck = _batch()
    for call in (lambda: fp8q.run(q.to(BF16), k, v, cq, ck), lambda: fp8q.attend(q.to(BF16), k, v, cq, ck)):
        with pytest.raises(TypeError, match=r"^q must have dtype float8_e4m3fn \(the plan's q_dtype='e4m3'\), "
                                            r"got bfloat16"):
            call()
    for call in (lambda: kvonly.run(q, k, v, cq, ck), lambda: kvonly.attend(q, k, v, cq, ck)):
        with pytest.raises(TypeError, match=r"^q must have the plan's dtype torch.bfloat16, got torch.float8_e4m3fn; "
                                            r"an FP8 q needs a plan made with q_dtype='e4m3'"):
            call()
    with pytest.raises(ValueError, match=r"^q_descale applies to an FP8 q"):
        kvonly.run(q.to(BF16), k, v, cq, ck, q_descale=torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"^q_descale must have shape \(2, 2\)"):
        fp8q.run(q, k, v, cq, ck, q_descale=torch.ones(3, 2))
    # a 16-bit k on an FP8 plan: the plan's ValueError naming k (docs/api.md: "the same error" as an
    # FP8-cache plan's), not varlen_attention's TypeError for an FP8 q beside a 16-bit cache
    # (with the plan that takes it: a 16-bit cache needs a 16-bit q, so no q_dtype either)
    for plan, fix in ((fp8q, "a 16-bit cache takes a 16-bit q: make a plan without q_dtype and kv_dtype"),
                      (kvonly, "make a plan with kv_dtype=None for such a cache")):
        qq = q if plan is fp8q else q.to(BF16)
        for call in (lambda: plan.run(qq, k.to(BF16), v.to(BF16), cq, ck),
                     lambda: plan.attend(qq, k.to(BF16), v.to(BF16), cq, ck)):
            with pytest.raises(ValueError, match=r"^k must have the plan's FP8 dtype torch.float8_e4m3fn "
                                                 r"\(kv_dtype='e4m3'\), got torch.bfloat16; " + re.escape(fix)):
                call()
        # a k no plan of this q takes (fp16 beside a bf16 plan, float32): varlen_attention's TypeError
        for bad in (FP16, torch.float32):
            with pytest.raises(TypeError, match=r"^k must have "):
                plan.run(qq, k.to(bad), v.to(bad), cq, ck)
    # out of another dtype than the plan's: named as out (the plan passes no out_dtype of the user's)
    out16 = torch.zeros(q.shape[0], q.shape[1], q.shape[2], dtype=FP16)
    for call in (lambda: fp8q.run(q, k, v, cq, ck, out=out16), lambda: fp8q.attend(q, k, v, cq, ck, out=out16)):
        with pytest.raises(TypeError, match=r"^out must have the plan's dtype torch.bfloat16 \(the output of its FP8 "
                                            r"q\), got torch.float16"):
            call()
    assert fake_cuda.kinds() == []


def test_plan_prefill_runs_the_fp8_tensor_core_variant(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, q_dtype="e4m3", kv_dtype="e4m3", arch="sm_90a", num_splits=1, **_PREFILL_PLAN)
    assert plan.hopper and plan.attn_spec.fp8_mma and plan.q_convert is None
    q, k, v, cq, ck = _batch(**PREFILL)
    qd = torch.rand(2, 2) + 0.5                                       # (batch, num_heads_kv) of the step
    for _ in range(2):
        fake_cuda.clear()
        out = plan.run(q, k, v, cq, ck, q_descale=qd)
        assert out.dtype == BF16 and fake_cuda.kinds() == ["scheduler", "attention_sm90_fp8mma"]
        f = _attn(fake_cuda)[0].fields()
        assert f["q"] == q.data_ptr() and _q_descale_fields(f) == (qd.data_ptr(), 2, 1)
    plan.schedule(cq, ck)
    fake_cuda.clear()
    plan.attend(q, k, v, cq, ck, q_descale=qd)
    f = _attn(fake_cuda)[0].fields()
    assert f["q"] == q.data_ptr() and _q_descale_fields(f) == (qd.data_ptr(), 2, 1)


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_plan_decode_converts_q_to_the_plans_dtype(fake_cuda, monkeypatch, dtype):
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, q_dtype="e4m3", kv_dtype="e4m3", dtype=dtype, **_PLAN)
    assert not plan.attn_spec.fp8_mma and plan.q_convert == dtype
    q, k, v, cq, ck = _batch()
    seen = _watch_q(fake_cuda, 2 * q.numel())
    qd = torch.tensor(0.5)
    out = torch.empty(10, 4, 64, dtype=dtype)
    for step in range(3):
        fake_cuda.clear()
        fake_cuda.capturing = step == 2
        guard = fake_cuda_mod.no_host_sync() if step else pytest.MonkeyPatch()
        try:
            res = plan.run(q, k, v, cq, ck, out=out, q_descale=qd)
        finally:
            guard.undo()
        assert res is out
        (launch,) = _attn(fake_cuda)
        f = launch.fields()
        assert f["q"] != q.data_ptr() and _q_descale_fields(f) == (qd.data_ptr(), 0, 0)
        assert seen[-1] == (launch.kind, f["q"], _bytes(q.to(dtype)))
    fake_cuda.capturing = False
    assert len(plan._steps._d) == 1
    fake_cuda.clear()
    assert plan.run(q, k, v, cq, ck).dtype == dtype                     # out allocated in the plan's dtype
    plan.schedule(cq, ck)
    fake_cuda.clear()
    plan.attend(q, k, v, cq, ck, out=out)
    assert seen[-1][2] == _bytes(q.to(dtype)) and seen[-1][1] != q.data_ptr()


def test_plan_fast_path_declines_with_the_callers_q(fake_cuda, monkeypatch):
    """A prepared step that declines (misaligned out) goes down the validating path, which names
    out, not the converted q; a misaligned FP8 q is named as the first call would."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, q_dtype="e4m3", kv_dtype="e4m3", **_PLAN)
    q, k, v, cq, ck = _batch()
    out = torch.empty(10, 4, 64, dtype=BF16)
    plan.run(q, k, v, cq, ck, out=out)
    fake_cuda.clear()
    ob = torch.empty(10 * 4 * 64 + 8, dtype=BF16)
    with pytest.raises(ValueError, match="^out must start at a 16-byte aligned address"):
        plan.run(q, k, v, cq, ck, out=ob[1:1 + 10 * 4 * 64].view(10, 4, 64))
    buf = torch.zeros(q.numel() + 16, dtype=torch.uint8).view(E4M3)
    qm = buf[1:1 + q.numel()].view(q.shape)
    with pytest.raises(ValueError, match="^q must start at a 16-byte aligned address"):
        plan.run(qm, k, v, cq, ck, out=out)
    assert fake_cuda.kinds() == []


# ----------------------------------------------------------------------------- compat, end to end
def test_compat_fp8_forward_returns_bf16_with_every_descale_in_the_launch(fake_cuda):
    """FA3's FP8 forward through kernelgen.compat on the fake layer: q, k, v e4m3 with the three
    descales, bf16 out; the kernel receives the three factors' addresses."""
    from kernelgen.front import compat
    q, k, v, cq, ck = _batch(**PREFILL)
    qd, kd, vd = torch.rand(2, 2) + 0.5, torch.rand(2, 2) + 0.5, torch.rand(2, 2) + 0.5
    out, lse = compat.flash_attn_varlen_func(q, k, v, cq, ck, 200, 400, causal=True, q_descale=qd, k_descale=kd,
                                             v_descale=vd, return_attn_probs=True)
    assert out.dtype == BF16 and out.shape == (256, 4, 128) and lse.shape == (4, 256)
    f = _attn(fake_cuda)[0].fields()
    assert (f["q"], f["q_descale"], f["k_descale"], f["v_descale"]) == (q.data_ptr(), qd.data_ptr(), kd.data_ptr(),
                                                                        vd.data_ptr())
    fake_cuda.clear()
    b, hq, hkv = 2, 4, 2
    q4 = q[:2].view(b, 1, hq, 128)
    kc = k[:2 * 300].view(b, 300, hkv, 128)
    o4 = compat.flash_attn_with_kvcache(q4, kc, kc, cache_seqlens=torch.tensor([100, 300], dtype=torch.int32),
                                        q_descale=qd, k_descale=kd, v_descale=vd)
    assert o4.dtype == BF16 and o4.shape == (b, 1, hq, 128)
    f = _attn(fake_cuda)[0].fields()
    assert f["q"] != q4.data_ptr() and _q_descale_fields(f) == (qd.data_ptr(), 2, 1)   # decode: converted q
    with pytest.raises(TypeError, match="^k must have an FP8 dtype"):
        compat.flash_attn_varlen_func(q, k.to(BF16), v.to(BF16), cq, ck, 200, 400, q_descale=qd)
    with pytest.raises(TypeError, match="^q_descale must be a torch.Tensor, got float"):
        compat.flash_attn_varlen_func(q, k, v, cq, ck, 200, 400, q_descale=1.0)


def test_plan_sink_step_gets_the_converted_q(fake_cuda, monkeypatch):
    """A plan whose kernels do not add the sinks (rescaled after them, ``_sink_step``) on an FP8 q:
    the prepared step's kernel reads the converted q too."""
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, q_dtype="e4m3", kv_dtype="e4m3", **_PLAN)
    assert not plan.sinks_fused and plan.q_convert == BF16
    from kernelgen.front import plan as plan_mod
    q, k, v, cq, ck = _batch()
    seen = _watch_q(fake_cuda, 2 * q.numel())
    sinks = torch.zeros(4)
    steps = []
    orig = plan_mod.AttentionPlan._sink_step

    def spy(self, step, q_, *rest):
        steps.append(q_.dtype)
        return orig(self, step, q_, *rest)
    monkeypatch.setattr(plan_mod.AttentionPlan, "_sink_step", spy)
    for _ in range(2):
        fake_cuda.clear()
        out, lse = plan.run(q, k, v, cq, ck, sinks=sinks, return_lse=True)
        assert out.dtype == BF16 and lse.shape == (4, 10)
        (launch,) = _attn(fake_cuda)
        assert seen[-1] == (launch.kind, launch.fields()["q"], _bytes(q.to(BF16)))
        assert launch.fields()["q"] != q.data_ptr()
    assert len(seen) == 2 and len(plan._steps._d) == 1
    assert steps == [BF16]                      # the second call: the prepared step's sink path


# ----------------------------------------------------------------------------- a review's finds
def test_quantize_q_host_checks_leave_its_own_buffer_alone(fake_cuda, monkeypatch):
    """``quantize_q=True`` under ``KERNELGEN_CHECK_INPUTS=1``: the q_descale the call makes is an
    uninitialised buffer the quantiser writes after the checks; its stale bytes (here NaN) are not
    host-checked as a caller's factors would be."""
    real_empty = torch.empty

    class _Torch:   # api.torch with an allocator whose fresh uint8 buffers hold 0xFF (NaN floats)
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*a, **kw):
            t = real_empty(*a, **kw)
            return t.fill_(0xFF) if t.dtype == torch.uint8 else t

    monkeypatch.setattr(api, "torch", _Torch())
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    q, k, v, cq, ck = _batch(**PREFILL)
    q = q.to(BF16)
    out = kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, quantize_q=True, arch="sm_90a",
                                     num_splits=1)
    assert out.shape == (256, 4, 128) and out.dtype == BF16
    (launch,) = _attn(fake_cuda)
    assert launch.fields()["q"] != q.data_ptr()   # the quantised q was launched
    # a caller's own bad factor still fails the check
    with pytest.raises(ValueError, match="^k_descale holds a non-finite factor"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 200, 400, causal=True, quantize_q=True, arch="sm_90a",
                                   num_splits=1, k_descale=torch.tensor(float("nan")))


def test_host_check_refuses_a_combined_scale_past_float32(fake_cuda, monkeypatch):
    """The kernels multiply k_descale * q_descale in float32 (None: 1), then fold it with
    softmax_scale * log2(e) into one float32 factor: under ``KERNELGEN_CHECK_INPUTS=1`` either past
    float32's range is refused, naming the descales (each factor alone is finite); a review found the
    product's float32 overflow, a missing k_descale and the log2(e) unchecked."""
    q, k, v, cq, ck = _batch()
    big = torch.tensor(1e20)
    msg = "^k_descale \\* q_descale \\* softmax_scale \\* log2\\(e\\) reaches "
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    with pytest.raises(ValueError, match=msg + "1e\\+40, past float32"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, q_descale=big, k_descale=big)
    assert fake_cuda.kinds() == []
    for kw, reach in ((dict(q_descale=torch.tensor(3e38), softmax_scale=2.0), "8.66e\\+38"),   # k_descale None
                      (dict(q_descale=torch.tensor(1e10), k_descale=torch.tensor(1e30), softmax_scale=1e-3),
                       "1e\\+40"),                                                           # k * q in float32
                      (dict(q_descale=torch.tensor(3e38), k_descale=torch.tensor(1.0), softmax_scale=1.0),
                       "4.33e\\+38")):                                                      # times log2(e)
        with pytest.raises(ValueError, match=msg + reach):
            kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, **kw)
    assert fake_cuda.kinds() == []
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, q_descale=big, k_descale=torch.tensor(1e-20))
    assert fake_cuda.kinds() != []
    # per (request, KV head): large factors of different requests do not multiply
    qd, kd = torch.tensor([[1e20, 1e20], [1.0, 1.0]]), torch.tensor([[1.0, 1.0], [1e20, 1e20]])
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, q_descale=qd, k_descale=kd)
    with pytest.raises(ValueError, match=msg + "1e\\+40"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, q_descale=qd, k_descale=kd.flip(0))


def test_a_descale_of_three_dimensions_is_named_as_such():
    with pytest.raises(ValueError, match=r"^k_descale must have shape \(2, 2\) .*got \(1, 2, 2\) \(at most 2 "
                                         r"dimensions\)$"):
        V.descale("k_descale", torch.ones(1, 2, 2), 2, 2, CPU, "e4m3")


def test_the_traced_op_checks_the_descales_batch_and_type():
    """kernelgen.ops on meta tensors (what torch.compile traces): a descale of another batch is the
    eager call's ValueError, a non-tensor descale its TypeError (not the dispatcher's RuntimeError)."""
    from kernelgen.front import compat, ops

    q = torch.empty(10, 4, 64, device="meta", dtype=BF16)
    k = torch.empty(2000, 2, 64, device="meta", dtype=E4M3)
    cq = torch.empty(3, dtype=torch.int32, device="meta")

    def m(*shape):
        return torch.empty(*shape, device="meta", dtype=torch.float32)
    o = ops.varlen_attention(q, k, k, cq, cq, 7, 1988, k_descale=m(2, 2), v_descale=m(2, 1))
    assert o.device.type == "meta" and o.shape == (10, 4, 64)
    with pytest.raises(ValueError, match=r"^k_descale must have shape \(2, 2\)"):
        ops.varlen_attention(q, k, k, cq, cq, 7, 1988, k_descale=m(5, 2))
    for name in ("k_descale", "v_descale", "sinks", "alibi_slopes"):
        with pytest.raises(TypeError, match=f"^{name} must be a torch.Tensor, got float$"):
            ops.varlen_attention(q, k, k, cq, cq, 7, 1988, **{name: 1.0})
    q8 = torch.empty(10, 4, 64, device="meta", dtype=E4M3)
    with pytest.raises(ValueError, match=r"^q_descale must have shape \(2, 2\)"):
        compat.flash_attn_varlen_func(q8, k, k, cq, cq, 7, 1988, q_descale=m(5, 2))


def test_plan_host_check_refuses_a_combined_scale_past_float32(fake_cuda, monkeypatch):
    from fake_cuda import make_plan
    plan = make_plan(monkeypatch, q_dtype="e4m3", kv_dtype="e4m3", **_PLAN)
    q, k, v, cq, ck = _batch()
    big = torch.tensor(1e20)
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    msg = "^k_descale \\* q_descale \\* softmax_scale \\* log2\\(e\\) reaches "
    with pytest.raises(ValueError, match=msg + "1e\\+40"):
        plan.run(q, k, v, cq, ck, q_descale=big, k_descale=big)
    with pytest.raises(ValueError, match=msg + "8.66e\\+38"):   # (no k_descale: 1)
        plan.run(q, k, v, cq, ck, q_descale=torch.tensor(3e38), softmax_scale=2.0)
    assert fake_cuda.kinds() == []
    plan.run(q, k, v, cq, ck, q_descale=big, k_descale=torch.tensor(1e-20))
    assert fake_cuda.kinds() != []
