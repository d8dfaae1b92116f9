"""GPU: kernelgen's FP8 attention error against FlashAttention-3's FP8 error on the same inputs (issue 24
item 5: "compare kernelgen's error with FA3 FP8's error on the same inputs (it should not be worse),
including long contexts (32k+) and inputs with outliers").

Both get the same e4m3 q, k and v and the same float32 descales (per request and KV head); the
float64 reference (``attention_reference`` with the descales) dequantises them exactly, so what is
measured is each kernel's own error (P in e4m3 for the P V GEMM, fp32 accumulation, the bf16 output),
not the inputs' quantisation.  kernelgen runs q, k and v in e4m3 (its FP8 tensor-core kernel on
sm_90a, also checked against its own derived per-element bounds, ``fp8_mma_bounds``) and the e4m3
cache with a bf16 q (its serving path, q exact: checked with the 16-bit tolerance of an FP8 cache on
the N(0, 1) inputs, which that tolerance assumes, and against FA3's errors on every input);
FA3 takes only an e4m3 q.  Shapes: 256 queries at the end of 32k and 64k-key contexts (causal,
bottom-right) and 4 x 4096 non-causal; each with N(0, 1) inputs and with outlier channels as in LLM
caches (a quarter-spaced set of channels x 10 in k and x 100 in v; q plain).

The comparison is of the mean error and the 99.9th percentile, not the maximum: a CPU model of the
pipeline (P rounded to e4m3, two equally accurate orders of key blocks) gave equal p99.9 and means
within 8 %, while the maximum, set by the rows whose top logits nearly tie, differed by up to 3x
between the two with outliers.  Slack: 15 % on the mean, 25 % on p99.9.  Skips without FA3
(``flash_attn_interface``, installed only in the bench's peer calls, docs/dev/benchmarks/s44/p3.sh),
without its FP8 build, or without an sm_90 GPU.

    pytest -q -p no:xdist tests/gpu/test_fp8_vs_fa3_gpu.py
"""
import pytest
import torch

import kernelgen
from kernelgen.apps.bench import peers
from kernelgen.apps.bench.suites import quantize_e4m3
from kernelgen.apps.reference import attention_reference

from gpu_helpers import HOPPER, check, prepared  # noqa: E402
from test_fp8_mma_gpu import check_mma  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn

#: (name, query lengths, key lengths, causal)
SHAPES = [("chunk256_ctx32k", [256], [32768], True), ("chunk256_ctx64k", [256], [65536], True),
          ("noncausal_4x4k", [4096] * 4, [4096] * 4, False)]
#: Slack of the comparison with FA3 (module doc): mean error, 99.9th percentile.
MEAN_SLACK, P999_SLACK = 1.15, 1.25


def _fa3():
    if not HOPPER:
        pytest.skip("FA3's FP8 forward needs an sm_90 GPU")
    try:
        mod, flags = peers.load_fa3()
    except peers.Unavailable as e:
        pytest.skip(f"FlashAttention-3 not installed: {e}")
    if flags.get("FLASHATTENTION_DISABLE_FP8"):
        pytest.skip("this FlashAttention-3 build has no FP8 forward (FLASHATTENTION_DISABLE_FP8)")
    return mod


def _inputs(qlens, klens, hq, hkv, d, outliers, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(sum(n), h, d, generator=g, device="cuda") for n, h in ((qlens, hq), (klens, hkv), (klens, hkv)))
    if outliers:   # outlier channels as in LLM K / V caches; the per-tensor scales then spend their range on them
        k[..., :: d // 4] *= 10.0
        v[..., :: d // 4] *= 100.0
    (q8, qs), (k8, ks), (v8, vs) = (quantize_e4m3(t) for t in (q, k, v))
    b = len(qlens)
    qd, kd, vd = (s.reshape(1, 1).expand(b, hkv).contiguous() for s in (qs, ks, vs))
    cu = [torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
          for n in (qlens, klens)]
    return q8, k8, v8, qd, kd, vd, cu[0], cu[1]


def _errors(out, ref):
    """(mean, 99.9th percentile, max) of |out - ref| (kthvalue: torch.quantile takes at most 2^24 values)."""
    e = (out.double() - ref).abs().flatten()
    return e.mean().item(), e.kthvalue(max(1, int(0.999 * e.numel()))).values.item(), e.max().item()


@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_fp8_error_is_no_worse_than_fa3s(shape, outliers):
    mod = _fa3()
    _, qlens, klens, causal = shape
    hq, hkv, d = 16, 4, 128
    q8, k8, v8, qd, kd, vd, cu_q, cu_k = _inputs(qlens, klens, hq, hkv, d, outliers, seed=31)
    mq, mk = max(qlens), max(klens)
    ref, ref_lse, bound, lbound = attention_reference(q8, k8, v8, cu_q, cu_k, causal=causal, q_descale=qd,
                                                      k_descale=kd, v_descale=vd, fp8_mma_bounds=True)
    fa3 = mod.flash_attn_varlen_func(q8, k8, v8, cu_q, cu_k, mq, mk, causal=causal, q_descale=qd, k_descale=kd,
                                     v_descale=vd)
    fa3 = fa3[0] if isinstance(fa3, tuple) else fa3
    kg, lse = kernelgen.varlen_attention(q8, k8, v8, cu_q, cu_k, mq, mk, causal=causal, q_descale=qd, k_descale=kd,
                                         v_descale=vd, return_lse=True)
    torch.cuda.synchronize()
    assert "_fp8mma" in prepared().attn.name, prepared().attn.name
    check_mma(kg, lse, ref, ref_lse, bound, lbound)                  # within kernelgen's own derived bounds
    (fa_mean, fa_p, fa_max), (kg_mean, kg_p, kg_max) = _errors(fa3, ref), _errors(kg, ref)
    # the serving path: the e4m3 cache with a bf16 q (q's dequantised values rounded to bf16; its
    # reference is computed from that same bf16 q)
    qb = (q8.float() * qd[0, 0]).to(BF16)
    kv_only, kv_lse = kernelgen.varlen_attention(qb, k8, v8, cu_q, cu_k, mq, mk, causal=causal, k_descale=kd,
                                                 v_descale=vd, return_lse=True)
    ref_b, ref_b_lse = attention_reference(qb, k8, v8, cu_q, cu_k, causal=causal, k_descale=kd, v_descale=vd)
    torch.cuda.synchronize()
    kv_mean, kv_p, kv_max = _errors(kv_only, ref_b)
    print(f"{shape[0]} outliers={outliers}: mean / p99.9 / max |err|: FA3 {fa_mean:.3e} / {fa_p:.3e} / {fa_max:.3e}, "
          f"kernelgen {kg_mean:.3e} / {kg_p:.3e} / {kg_max:.3e}, kernelgen bf16 q {kv_mean:.3e} / {kv_p:.3e} / {kv_max:.3e}")
    if not outliers:   # the 16-bit tolerance assumes dequantised values of about N(0, 1) (reference.tolerance)
        check(kv_only, kv_lse, ref_b, ref_b_lse, BF16, kv_dtype=E4M3)
    assert kg_mean <= MEAN_SLACK * fa_mean, (kg_mean, fa_mean)
    assert kg_p <= P999_SLACK * fa_p, (kg_p, fa_p)
    assert kv_mean <= MEAN_SLACK * fa_mean and kv_p <= P999_SLACK * fa_p, (kv_mean, kv_p, fa_mean, fa_p)
