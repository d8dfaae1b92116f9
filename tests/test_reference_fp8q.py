"""CPU: the float64 reference for an FP8 q (``attention_reference(..., q_descale=)``) and the
per-element bounds of the Hopper FP8 tensor-core variant (``fp8_mma_bounds=True``; docs/dev/
fp8_hopper_design.md section 8): q dequantised exactly per (request, KV head), and the bounds
holding, tightly, for an emulation of the kernel's arithmetic (Q K^T summed 32 products at a time
into an accumulator truncated to 13 mantissa bits, P formed against the row max - 8, rounded to
e4m3, row sum from the unrounded values)."""
import math

import pytest
import torch

from kernelgen.apps.reference import attention_reference

E4M3 = torch.float8_e4m3fn


def _batch(hq=4, hkv=2, d=16, lq=(5, 1, 3), lk=(9, 7, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0] + torch.tensor(lq).cumsum(0).tolist(), dtype=torch.int32)
    ck = torch.tensor([0] + torch.tensor(lk).cumsum(0).tolist(), dtype=torch.int32)
    q = (8 * torch.randn(int(cq[-1]), hq, d, generator=g)).to(E4M3)
    k = (8 * torch.randn(int(ck[-1]), hkv, d, generator=g)).to(E4M3)
    v = (8 * torch.randn(int(ck[-1]), hkv, d, generator=g)).to(E4M3)
    return q, k, v, cq, ck


def test_q_descale_dequantises_per_request_and_kv_head():
    q, k, v, cq, ck = _batch()
    qd = torch.tensor([[0.25, 0.5], [0.125, 2.0], [1.0, 0.0625]])
    out, lse = attention_reference(q, k, v, cq, ck, causal=True, q_descale=qd)
    qq = q.double().clone()
    for b in range(3):
        for h in range(4):                        # query head h belongs to KV head h // 2
            qq[cq[b]:cq[b + 1], h] *= float(qd[b, h // 2])
    o2, l2 = attention_reference(qq, k, v, cq, ck, causal=True)
    assert torch.equal(out, o2) and torch.equal(lse, l2)
    # a per-tensor factor broadcasts
    o3, _ = attention_reference(q, k, v, cq, ck, q_descale=torch.tensor(0.5))
    o4, _ = attention_reference(q, k, v, cq, ck, q_descale=torch.full((3, 2), 0.5))
    assert torch.equal(o3, o4)


def test_descales_follow_varlen_attentions_rules():
    """The reference refuses the descales ``varlen_attention`` refuses (it would otherwise read them
    some other way: a 1-D tensor of several factors per head where a caller meant per request):
    float32 only, (batch, num_heads_kv) or a broadcast of it, ``q_descale`` with an FP8 q only,
    ``k_descale`` / ``v_descale`` with an FP8 k only."""
    q, k, v, cq, ck = _batch()                                  # 3 requests, 2 KV heads
    with pytest.raises(ValueError, match=r"^k_descale must have shape \(3, 2\) .*a 1-D tensor of several factors"):
        attention_reference(q, k, v, cq, ck, k_descale=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"^v_descale must have shape \(3, 2\) .*got \(2, 2\)"):
        attention_reference(q, k, v, cq, ck, v_descale=torch.ones(2, 2))
    with pytest.raises(TypeError, match=r"^q_descale must have dtype"):
        attention_reference(q, k, v, cq, ck, q_descale=torch.ones(3, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^q_descale applies to an FP8 q"):
        attention_reference(q.to(torch.bfloat16), k, v, cq, ck, q_descale=torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"^k_descale applies to an FP8 K/V cache"):
        attention_reference(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), cq, ck,
                            k_descale=torch.ones(3, 2))
    # the forms varlen_attention takes: per tensor, per request, per KV head, expanded
    full = torch.tensor([[0.5, 2.0], [0.5, 2.0], [0.5, 2.0]])
    want, _ = attention_reference(q, k, v, cq, ck, k_descale=full, v_descale=full, q_descale=full)
    for kd in (torch.tensor([[0.5, 2.0]]), torch.tensor([[0.5, 2.0]]).expand(3, 2)):
        got, _ = attention_reference(q, k, v, cq, ck, k_descale=kd, v_descale=kd, q_descale=kd)
        assert torch.equal(got, want)


def _trunc13(x):
    """x with its mantissa truncated to 13 bits (toward zero), as Hopper's FP8 wgmma accumulator."""
    m, e = torch.frexp(x)                       # x = m * 2^e, 0.5 <= |m| < 1
    return torch.ldexp(torch.trunc(m * 2.0 ** 14) / 2.0 ** 14, e)


def _kernel_like(q, k, v, cq, ck, scale):
    """The FP8 tensor-core variant's arithmetic, emulated in float64 except where the kernel rounds:
    Q K^T as k32 steps, each adding 32 exact products to the accumulator and truncating it to 13
    mantissa bits; P = exp2(s * log2e - (max - 8)) rounded to e4m3; the row sum from the unrounded
    P; O = P_e4m3 V / sum.  Returns (out, lse)."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float64)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float64)
    qpk = q.shape[1] // k.shape[1]
    d = q.shape[2]
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        if k1 == k0:
            continue
        for h in range(q.shape[1]):
            qq, kk = q[q0:q1, h].double(), k[k0:k1, h // qpk].double()
            acc = torch.zeros(q1 - q0, k1 - k0, dtype=torch.float64)
            for c in range(0, d, 32):
                acc = _trunc13(acc + qq[:, c:c + 32] @ kk[:, c:c + 32].T)
            s = acc * scale * math.log2(math.e)
            m = s.amax(dim=-1, keepdim=True)
            p = torch.exp2(s - (m - 8))
            p8 = p.float().to(E4M3).double()
            z = p.sum(dim=-1, keepdim=True)
            out[q0:q1, h] = (p8 @ v[k0:k1, h // qpk].double()) / z
            lse[h, q0:q1] = ((m - 8 + torch.log2(z)) * math.log(2))[:, 0]
    return out, lse


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fp8_p_bound_holds_for_the_kernels_arithmetic(seed):
    q, k, v, cq, ck = _batch(d=32, lq=(40, 1, 17), lk=(60, 33, 17), seed=seed)
    scale = 0.02
    ref, lse, bound, lse_bound = attention_reference(q, k, v, cq, ck, softmax_scale=scale, fp8_mma_bounds=True)
    ref2, lse2 = attention_reference(q, k, v, cq, ck, softmax_scale=scale)
    assert torch.equal(ref, ref2) and torch.equal(lse, lse2), "the bounds must not change out / lse"
    assert bound.shape == ref.shape and (bound > 0).all() and lse_bound.shape == lse.shape and (lse_bound > 0).all()
    emu, emu_lse = _kernel_like(q, k, v, cq, ck, scale)
    err = (emu - ref).abs()
    assert (err <= bound).all(), float((err / bound).max())
    lerr = (emu_lse - lse).abs()
    assert (lerr <= lse_bound + 1e-12).all(), float((lerr / lse_bound).max())
    # both roundings are visible (the emulation differs) and the bounds are not loose by orders of magnitude
    assert float(err.max()) > 0 and float(lerr.max()) > 0
    assert float((err / bound).max()) > 0.05 and float((lerr / lse_bound).max()) > 0.01


def test_the_bound_of_rows_without_keys_is_zero():
    q, k, v, cq, ck = _batch(lq=(2, 3), lk=(0, 4))
    ref, lse, bound, lse_bound = attention_reference(q, k, v, cq, ck, fp8_mma_bounds=True)
    assert torch.equal(bound[:2], torch.zeros_like(bound[:2])) and torch.equal(ref[:2], torch.zeros_like(ref[:2]))
    assert torch.equal(lse_bound[:, :2], torch.zeros_like(lse_bound[:, :2]))
    assert torch.isneginf(lse[:, :2]).all()


def test_the_bound_covers_fp16_outputs_among_the_subnormals():
    """An output below 2^-14 rounds to a multiple of fp16's subnormal step 2^-24, an absolute error
    up to 2^-25 that no relative term covers (fuzz seed 35, replay 14176579: a row whose sink took
    almost all its weight, out -4 x 2^-24 for a reference of -3.55 x 2^-24, rounded to nearest).
    The kernel's arithmetic, emulated and rounded to fp16, stays within the bound there."""
    q, k, v, cq, ck = _batch(d=32, lq=(40, 1, 17), lk=(60, 33, 17), seed=3)
    scale, vd = 0.02, 2.0 ** -26                       # outputs about 1e-7: fp16 subnormals
    ref, lse, bound, lse_bound = attention_reference(q, k, v, cq, ck, softmax_scale=scale,
                                                     v_descale=torch.tensor(vd), fp8_mma_bounds=True)
    emu, _ = _kernel_like(q, k, v, cq, ck, scale)
    out16 = (emu * vd).to(torch.float16)
    assert float(out16.abs().max()) < 2.0 ** -14 and int((out16 != 0).sum()) > out16.numel() // 2
    err = (out16.double() - ref).abs()
    assert (err <= bound).all(), float((err / bound).max())
    # the subnormal rounding is what the bound has to cover here: without its 2^-25 it would not
    assert bool((err > bound - 2.0 ** -25).any())
    # and the fuzz's whole-output check passes it too: its mean-error test (a systematic error) looks
    # above that rounding, which alone averages about 2^-26 an element here
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import fuzz
    rows = int(cq[-1])
    lse16 = lse.float()
    r = fuzz.compare({"dtype": "fp16", "kv_dtype": "e4m3"}, out16, lse16, ref, lse, rows, out_poisoned=False,
                     lse_poisoned=False, bounds=(bound, lse_bound))
    assert r["ok"], r["errors"]
    assert float(err.mean()) > 0.25 * float(bound.mean())      # what the plain mean check refused
