"""Option "x" of the Hopper mainloop on the CPU (templates/common/softmax.cuh, ``ex2_fma``): a share
of the softmax's exponentials on the FMA pipe by a polynomial instead of MUFU.EX2.

The polynomial is evaluated from the template's own lines, every operation rounded to float32 as
the device does (an FMA rounds once: the float32 product is exact in float64), and checked against
2^x in float64: the relative error the comment and ``reference.EX2_REL_ERR`` state, exact +0 for
-inf and for x <= -127 (masked logits: a row that sees no key must keep a row sum of exactly 0), 1
at 0, 256 at 8 (the FP8 tensor-core variant's exponents reach +8).  Then the rendering: only kernels
with "x" carry it, each variant of a fused kernel its own macro, the SASS has MUFU.EX2 for the share
the define leaves and none spills."""
import dataclasses
import re

import numpy as np
import pytest

from kernelgen.apps.reference import EX2_REL_ERR
from kernelgen.jit import render
from kernelgen.selection import heuristics

F = np.float32


def _spec(dtype="bf16", d=64, softcap=False, opts="px"):
    v = heuristics.choose("sm_90a", dtype, d, d, num_heads_q=64, num_heads_kv=8, mask="causal",
                          max_seqlen_q=16384, max_seqlen_k=16384, softcap=softcap)
    return dataclasses.replace(v.attention, sm90_opts=opts)


def _function(src: str) -> str:
    body = src[src.index("float ex2_fma(float x)"):]
    return body[:body.index("\n}\n")]


def _coefficients(src: str, degree: int) -> list[float]:
    """The Horner coefficients of one degree's branch, highest first, then the last FMA's 1."""
    body = _function(src)
    branches = re.split(r"#if KG_EX2_FMA_DEG_\w+ == 4|#else|#endif", body)
    line = branches[1] if degree == 4 else branches[2]
    return [float(c) for c in re.findall(r"(-?\d+\.\d+e-?\d+)f", line)]


def _fmaf(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def ex2_fma(x, coef):
    """The template's arithmetic, step by step in float32 (coefficients highest degree first)."""
    x = np.maximum(np.asarray(x, dtype=F), F(-127.0))
    t = (x + F(12582912.0)).astype(F)
    f = (x - (t - F(12582912.0)).astype(F)).astype(F)
    q = np.full_like(f, F(coef[0]))
    for c in coef[1:]:
        q = _fmaf(q, f, F(c))
    q = _fmaf(q, f, F(1.0))
    bits = (q.view(np.uint32).astype(np.uint64) + (t.view(np.uint32).astype(np.uint64) << 23)) & 0xFFFFFFFF
    return bits.astype(np.uint32).view(F)


def _every_float32(lo: float, hi: float) -> np.ndarray:
    """Every float32 in [lo, hi] with lo < hi <= 0 (by their bit patterns)."""
    a, b = np.array([hi, lo], dtype=F).view(np.uint32)
    return np.arange(a, b + 1, dtype=np.uint32).view(F)


@pytest.mark.parametrize("degree,bound", [(3, 1.02e-4), (4, 2.9e-6)])
def test_the_polynomial_is_as_accurate_as_the_comment_says(degree, bound):
    """Every float32 of [-8, -4] (each f in [-1/2, 1/2] at that binade's spacing, 2^-21) and 2
    million drawn from [-126, 8]: relative error within the comment's bound, which
    ``reference.EX2_REL_ERR`` (the error bounds of the GPU tests) covers; and not much inside it (the
    fit is minimax: its bound is reached)."""
    src = render.render(_spec())
    coef = _coefficients(src, degree)
    assert len(coef) == degree
    rng = np.random.default_rng(degree)
    x = np.concatenate([_every_float32(-8.0, -4.0), rng.uniform(-126, 8, 2_000_000).astype(F),
                        rng.uniform(-1, 1, 500_000).astype(F)])
    got = ex2_fma(x, coef).astype(np.float64)
    rel = np.abs(got / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() <= bound <= EX2_REL_ERR, rel.max()
    assert rel.max() > 0.8 * bound


def test_the_ends_of_the_range():
    """-inf and everything at or below -127 give exactly +0 (so does MUFU.EX2.FTZ); 0 gives 1, 8 gives
    256, -126 gives 2^-126; positive and never NaN over [-1e30, 8]."""
    src = render.render(_spec())
    coef = _coefficients(src, 3)
    edge = ex2_fma(np.array([-np.inf, -1e30, -200.0, -127.0, 0.0, -0.0, 8.0, -126.0], dtype=F), coef)
    assert list(edge[:4]) == [0.0, 0.0, 0.0, 0.0] and not np.signbit(edge[:4]).any()
    assert list(edge[4:7]) == [1.0, 1.0, 256.0] and edge[7] == F(2.0 ** -126)
    x = np.concatenate([_every_float32(-127.0, -126.0), np.linspace(-1e30, 8, 100_001).astype(F)])
    y = ex2_fma(x, coef)
    assert not np.isnan(y).any() and (y >= 0).all() and not np.signbit(y).any()


def test_the_degree_follows_the_probabilities_dtype():
    """Degree 3 where P rounds to bf16 (2^-9) or e4m3, 4 where it rounds to fp16 (2^-12): an fp16
    call, and a bf16 q on an FP8 cache (its GEMMs on fp16, ``fp16_gemms``)."""
    def deg(spec):
        return int(re.findall(r"#define KG_EX2_FMA_DEG_\w+ (\d)", render.render(spec))[0])
    assert deg(_spec("bf16")) == 3 and deg(_spec("fp16")) == 4
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                          max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3")
    spec = dataclasses.replace(v.attention, sm90_opts="".join(sorted(set(v.attention.sm90_opts) | {"x"})))
    assert spec.fp16_gemms and deg(spec) == 4


def test_the_dispatcher_adds_the_option_where_the_mufu_binds():
    """heuristics.sm90_ex2_fma: head dim 64 with a soft-cap, a user variant calling a MUFU function,
    or the FP8 tensor-core GEMMs; not at head dim 128, not on plain 16-bit kernels, not on a snippet
    without transcendental functions; SM90_EX2_FMA False turns the rule off."""
    from kernelgen.kernels.variant_code import VariantCode

    def opts(d=64, softcap=False, variant=None, q_dtype="", kv_dtype=""):
        v = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=64, num_heads_kv=8, mask="causal",
                              max_seqlen_q=16384, max_seqlen_k=16384, softcap=softcap,
                              **({"variant": variant} if variant else {}),
                              **({"q_dtype": q_dtype, "kv_dtype": kv_dtype} if kv_dtype else {}))
        assert v.attention.mainloop == "sm90a"
        return v.attention.sm90_opts
    tanh = VariantCode(score_mod="50.f * tanhf(score / 50.f)")
    alibi = VariantCode(score_mod="score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)",
                        tensors=(("slopes", "float32"),))
    assert "x" in opts(softcap=True) and "x" in opts(variant=tanh) and "x" in opts(q_dtype="e4m3", kv_dtype="e4m3")
    assert "x" not in opts() and "x" not in opts(variant=alibi) and "x" not in opts(d=128, softcap=True)
    assert "x" not in opts(d=128, q_dtype="e4m3", kv_dtype="e4m3") and "x" not in opts(kv_dtype="e4m3")


def test_the_rule_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(heuristics, "SM90_EX2_FMA", False)
    v = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=64, num_heads_kv=8, mask="causal",
                          max_seqlen_q=16384, max_seqlen_k=16384, softcap=True)
    assert "x" not in v.attention.sm90_opts


def test_only_kernels_with_the_option_carry_it():
    """Without "x" the source has neither the function nor the macro (every other kernel's source and
    cache key unchanged); with it the kernel's name says so."""
    plain, with_x = _spec(opts="p"), _spec(opts="px")
    a, b = render.render(plain), render.render(with_x)
    assert "ex2_fma" not in a and "KG_EX2_FMA" not in a
    assert "ex2_fma(xv)" in b and "_ex2fma" in with_x.name and "_ex2fma" not in plain.name


@pytest.mark.parametrize("dtype,d,softcap", [("bf16", 64, True), ("bf16", 64, False), ("fp16", 64, False),
                                             ("bf16", 128, False)])
def test_the_sass_takes_the_share_off_the_mufu(dtype, d, softcap):
    """Compiled with NVRTC for sm_90a: KG_EX2_FMA = 8 moves every logit's MUFU.EX2 to the FMA pipe
    (what is left: the rows' corrections and the epilogue's), the default share 4 of 8 with a soft-cap,
    2 of 8 without; no spills either way."""
    import os

    from kernelgen.jit import compiler, sass
    tool = sass.find_nvdisasm()
    assert tool is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"

    def ex2_count(spec, defines=""):
        saved = os.environ.get(compiler.DEFINES_ENV)
        os.environ[compiler.DEFINES_ENV] = defines
        try:
            res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
        finally:
            if saved is None:
                os.environ.pop(compiler.DEFINES_ENV)
            else:
                os.environ[compiler.DEFINES_ENV] = saved
        assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0, (spec.name, res.resources)
        return len(re.findall(r"MUFU\.EX2\b", sass.disassemble(res.cubin, tool)))

    base = _spec(dtype, d, softcap, opts="p")
    x = dataclasses.replace(base, sm90_opts="px")
    plain, half, none = ex2_count(base), ex2_count(x), ex2_count(x, "KG_EX2_FMA=8")
    logits = plain - none          # the per-logit MUFU.EX2 the option can move (the rest: row corrections)
    assert logits > 0 and none < plain / 4, (plain, half, none)
    share = 4 if softcap else 2    # the template's default (a soft-cap's second MUFU instruction: 4)
    assert half - none == logits * (8 - share) // 8, (plain, half, none)
