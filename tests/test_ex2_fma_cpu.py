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
    """The causal call's Hopper spec with ``opts``; a soft-cap on the two-warpgroup tile the option was
    built and measured on (its three-warpgroup kernel, the default since the fifty-second session,
    spills 40 bytes with "x")."""
    saved = heuristics.SM90_THREE_WG_EXTRAS
    heuristics.SM90_THREE_WG_EXTRAS = saved - {"softcap"}
    try:
        v = heuristics.choose("sm_90a", dtype, d, d, num_heads_q=64, num_heads_kv=8, mask="causal",
                              max_seqlen_q=16384, max_seqlen_k=16384, softcap=softcap)
    finally:
        heuristics.SM90_THREE_WG_EXTRAS = saved
    return dataclasses.replace(v.attention, sm90_opts=opts)


def _function(src: str) -> str:
    body = src[src.index("float ex2_fma(float x)"):]
    return body[:body.index("\n}\n")]


def _lines(src: str, degree: int) -> list[str]:
    """The statements of the rendered ex2_fma, the preprocessor branch of ``degree`` taken."""
    out, keep = [], True
    for line in _function(src).splitlines()[1:]:
        line = line.split("//")[0].strip()
        if line.startswith("#if"):
            keep = line.endswith("== 4") == (degree == 4)
        elif line.startswith("#else"):
            keep = not keep
        elif line.startswith("#endif"):
            keep = True
        elif line and keep:
            out.append(line)
    return out


def _as_python(line: str) -> str:
    """One C statement as numpy float32 / uint32 arithmetic (each operation rounded as on the device)."""
    line = re.sub(r"^(const )?float ", "", line.rstrip(";"))
    line = re.sub(r"^return ", "out = ", line)
    line = re.sub(r"\b0x([0-9a-f]+)u\b", r"U(0x\1)", line)
    return re.sub(r"(\d+\.\d*(?:e-?\d+)?)f\b", r"F(\1)", line)


def _coefficients(src: str, degree: int) -> list[float]:
    return [float(c) for c in re.findall(r"(\d+\.\d+e-?\d+)f", " ".join(_lines(src, degree)))]


def _fmaf(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def ex2_fma(x, src, degree=3):
    """The rendered template's own statements, run on float32 / uint32 numpy arrays."""
    env = {"F": F, "U": np.uint32, "fmaf": _fmaf, "fmax_nan": lambda a, b: np.maximum(a, F(b)),
           "__float_as_uint": lambda v: np.asarray(v, dtype=F).view(np.uint32),
           "__uint_as_float": lambda u: np.asarray(u, dtype=np.uint32).view(F),
           "x": np.atleast_1d(np.asarray(x, dtype=F)).copy()}
    with np.errstate(over="ignore", invalid="ignore"):
        for line in _lines(src, degree):
            exec(_as_python(line), env)   # noqa: S102 - the template's arithmetic, translated above
    return env["out"].astype(F)


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
    assert len(_coefficients(src, degree)) == degree
    rng = np.random.default_rng(degree)
    x = np.concatenate([_every_float32(-8.0, -4.0), rng.uniform(-126, 8, 2_000_000).astype(F),
                        rng.uniform(-1, 1, 500_000).astype(F)])
    got = ex2_fma(x, src, degree).astype(np.float64)
    rel = np.abs(got / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() <= bound <= EX2_REL_ERR, rel.max()
    assert rel.max() > 0.8 * bound


def test_the_ends_of_the_range():
    """-inf and everything at or below -127 give exactly +0 (so does MUFU.EX2.FTZ); 0 gives 1, 8 gives
    256, -126 gives 2^-126; a NaN stays NaN (max.NaN, as the MUFU's); never negative or NaN otherwise
    over [-1e30, 8]."""
    src = render.render(_spec())
    edge = ex2_fma(np.array([-np.inf, -1e30, -200.0, -127.0, 0.0, -0.0, 8.0, -126.0, np.nan], dtype=F), src)
    assert list(edge[:4]) == [0.0, 0.0, 0.0, 0.0] and not np.signbit(edge[:4]).any()
    assert list(edge[4:7]) == [1.0, 1.0, 256.0] and edge[7] == F(2.0 ** -126) and np.isnan(edge[8])
    x = np.concatenate([_every_float32(-127.0, -126.0), np.linspace(-1e30, 8, 100_001).astype(F)])
    y = ex2_fma(x, src)
    assert not np.isnan(y).any() and (y >= 0).all() and not np.signbit(y).any()
    assert "max.NaN.f32" in src      # the clamp keeps a NaN (fmaxf would return -127 for it)


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


def test_the_dispatcher_adds_the_option_where_the_mufu_binds(monkeypatch):
    """heuristics.sm90_ex2_fma: head dim 64 with a soft-cap or a user variant calling a MUFU function
    (also the Hopper pair's long kernel of a mixed batch); on the FP8 tensor-core kernels only with
    SM90_EX2_FMA_FP8; not at head dim 128, not on plain 16-bit kernels, not on a snippet without
    transcendental functions, never on the fused mixed-batch kernel."""
    from kernelgen.kernels.variant_code import VariantCode
    monkeypatch.setattr(heuristics, "SM90_EX2_FMA", True)

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
    assert "x" in opts(softcap=True) and "x" in opts(variant=tanh)
    assert "x" not in opts() and "x" not in opts(variant=alibi) and "x" not in opts(d=128, softcap=True)
    assert "x" not in opts(q_dtype="e4m3", kv_dtype="e4m3") and "x" not in opts(kv_dtype="e4m3")
    monkeypatch.setattr(heuristics, "SM90_EX2_FMA_FP8", True)
    assert "x" in opts(q_dtype="e4m3", kv_dtype="e4m3") and "x" not in opts(d=128, q_dtype="e4m3", kv_dtype="e4m3")
    kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=900, max_seqlen_k=6000, paged=True,
              page_size=16, softcap=True)
    pair = heuristics.choose_pair("sm_90a", "bf16", 64, 64, **kw)
    fused = heuristics.choose_fused_hopper("sm_90a", "bf16", 64, 64, **kw)
    fused8 = heuristics.choose_fused_hopper("sm_90a", "bf16", 64, 64, kv_dtype="e4m3", **kw)
    assert "x" in pair.long.attention.sm90_opts
    assert "x" not in fused.fused.long.sm90_opts and "x" not in fused8.fused.long.sm90_opts


def test_the_option_is_dropped_where_it_would_spill(monkeypatch):
    """Asked for through the options (KERNELGEN_SM90_OPTS): kept up to head dim 128, up to 64 on the
    FP8 tensor-core kernels (sm90_ex2_fma_fits)."""
    monkeypatch.setattr(heuristics, "SM90_OPTS", "ptx")

    def opts(d, **kw):
        return heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=32, num_heads_kv=8, mask="none",
                                 max_seqlen_q=4096, max_seqlen_k=4096, **kw).attention.sm90_opts
    assert "x" in opts(64) and "x" in opts(128) and "x" not in opts(256) and "x" not in opts(192)
    assert "x" in opts(64, q_dtype="e4m3", kv_dtype="e4m3") and "x" not in opts(128, q_dtype="e4m3", kv_dtype="e4m3")


def test_the_rule_is_off_by_default_and_can_be_turned_on(monkeypatch):
    """Off by default (heuristics.SM90_EX2_FMA: measured slower): a soft-capped d 64 kernel has no
    "x"; True: it carries "x"."""
    assert heuristics.SM90_EX2_FMA is False
    kw = dict(num_heads_q=64, num_heads_kv=8, mask="causal", max_seqlen_q=16384, max_seqlen_k=16384, softcap=True)
    assert "x" not in heuristics.choose("sm_90a", "bf16", 64, 64, **kw).attention.sm90_opts
    monkeypatch.setattr(heuristics, "SM90_EX2_FMA", True)
    assert "x" in heuristics.choose("sm_90a", "bf16", 64, 64, **kw).attention.sm90_opts


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
