"""The soft-cap's tanh on the CPU (templates/common/softmax.cuh).

The built-in soft-cap (``softcap > 0``) is the hardware's tanh.approx.f32 (MUFU.TANH) on every path,
as FlashAttention-2/3/4 and FlashInfer run it: the kernels' SASS has it, and no MUFU.RCP of the
accurate form.  The accurate tanh (``tanh_ex2``: ``kg_tanh`` in a user variant) is checked for which
form each kernel renders, and for the accuracy of the form without MUFU.RCP, evaluated from the
template's own lines.

The accurate form: the Hopper kernels up to head dim 64 take the reciprocal on the FMA pipe (``KG_TANH_RCP`` 0: they
are bound by the MUFU unit, 0.92-0.96x the time on the H200), every other kernel MUFU.RCP (1: at
head dims 128 and 256 the FMA form was 1.04x / 1.08x slower; docs/dev/perf-log.md, "Twenty-seventh
session")."""
import re
from pathlib import Path

import numpy as np
import pytest

from kernelgen.jit import render
from kernelgen.selection import heuristics

SOFTMAX = Path(__file__).resolve().parents[1] / "templates" / "common" / "softmax.cuh"


def _rendered_default(arch, d, mainloop=None):
    v = heuristics.choose(arch, "bf16", d, d, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=4096,
                          max_seqlen_k=4096, softcap=True, **({"mainloop": mainloop} if mainloop else {}))
    found = re.findall(r"#define KG_TANH_RCP_\w+ (\d)", render.render(v.attention))
    assert found, v.attention.name
    return v.attention.mainloop, int(found[0])


@pytest.mark.parametrize("arch,d,mainloop,want", [
    ("sm_90a", 64, None, ("sm90a", 0)), ("sm_90a", 96, None, ("sm90a", 1)), ("sm_90a", 128, None, ("sm90a", 1)),
    ("sm_90a", 256, None, ("sm90a", 1)), ("sm_80", 64, None, ("sm80", 1)), ("sm_90a", 64, "sm80", ("sm80", 1)),
])
def test_the_reciprocal_form_follows_mainloop_and_head_dim(arch, d, mainloop, want):
    assert _rendered_default(arch, d, mainloop) == want


def _fma_form_lines():
    """The statements of tanh_ex2's KG_TANH_RCP 0 branch (after ``#else``), as written."""
    text = SOFTMAX.read_text()
    body = text[text.index("float tanh_ex2(float x)"):]
    body = body[:body.index("\n}\n")]
    branch = body[body.index("#else"):body.index("#endif")].splitlines()[1:]
    assert any("fmaf" in x for x in branch) and "MUFU" not in " ".join(branch)
    return [x.strip() for x in branch if x.strip()]


def _as_python(line):
    """One C statement of the branch as numpy float32 arithmetic (each operation rounded to float32)."""
    line = re.sub(r"^(const )?float ", "", line.rstrip(";"))
    line = re.sub(r"\breturn ", "out = ", line)
    return re.sub(r"(\d+\.\d*(?:e-?\d+)?|\d+\.?)f\b", r"F(\1)", line)


def _tanh_fma(x):
    F = np.float32

    def fmaf(a, b, c):   # one rounding: the float32 product is exact in float64
        return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)

    def fast_exp2(z):    # ex2.approx, taken as exact here (the hardware's is within 2 ulp)
        return np.exp2(z.astype(np.float64)).astype(np.float32)

    env = {"F": F, "fmaf": fmaf, "fast_exp2": fast_exp2, "fabsf": np.abs, "copysignf": np.copysign,
           "x": x.astype(np.float32)}
    for line in _fma_form_lines():
        exec(_as_python(line), env)   # noqa: S102 - the template's own arithmetic, translated above
    return env["out"]


def test_the_fma_form_is_as_accurate_as_the_docs_say():
    """Largest absolute error at most 2.0e-7 with ex2 taken as exact (the comment's number; MUFU.RCP's
    form 1.3e-7; ex2.approx's own error adds about 5e-8 on the device), odd, never above 1 in
    magnitude, exact at 0 and saturating to +-1."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1, 1, 400_000), rng.uniform(-20, 20, 400_000), rng.normal(0, 1e-3, 100_000),
                        np.linspace(-3, 3, 100_001)]).astype(np.float32)
    t = _tanh_fma(x)
    err = np.abs(t.astype(np.float64) - np.tanh(x.astype(np.float64)))
    assert t.dtype == np.float32 and err.max() <= 2.0e-7, err.max()
    assert np.array_equal(_tanh_fma(-x), -t) and np.abs(t).max() <= 1.0
    edge = _tanh_fma(np.array([0.0, -0.0, 30.0, -30.0, np.inf, -np.inf], dtype=np.float32))
    assert list(edge) == [0.0, 0.0, 1.0, -1.0, 1.0, -1.0] and np.signbit(edge[1])


def test_each_variant_of_a_fused_kernel_takes_its_own_form():
    """The Hopper fused kernel holds two variants (kpre: sm90a, kdec: the sm_80 decode tile), each
    including softmax.cuh: at head dim 64 kpre takes the FMA form and kdec MUFU.RCP (one macro a
    namespace; a shared #ifndef KG_TANH_RCP gave kdec kpre's 0)."""
    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 64, 64, num_heads_q=32, num_heads_kv=8, mask="causal",
                                        max_seqlen_q=2048, max_seqlen_k=8192, short_max_q=4, softcap=True)
    src = render.render(fv.fused)
    assert re.findall(r"#define KG_TANH_RCP_(\w+) (\d)", src) == [("kpre", "0"), ("kdec", "1")]


@pytest.mark.parametrize("arch,d,mainloop,seqlen_q", [
    ("sm_90a", 64, None, 4096), ("sm_90a", 128, None, 4096), ("sm_90a", 256, None, 4096),
    ("sm_80", 128, None, 4096), ("sm_80", 128, None, 1),
])
def test_the_builtin_softcap_is_the_hardware_tanh(arch, d, mainloop, seqlen_q, monkeypatch):
    """Every built-in soft-cap kernel (the Hopper mainloop, the sm_80 path's prefill and 16-row
    decode tiles; the 8-row one: the next test) takes MUFU.TANH and no more MUFU.RCP than the plain kernel (none of the accurate form's);
    the plain kernel has no MUFU.TANH (the instruction comes with the soft-cap)."""
    from kernelgen.jit import compiler, sass
    tool = sass.find_nvdisasm()
    assert tool is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"

    def text(softcap, sm90_opts=None):
        v = heuristics.choose(arch, "bf16", d, d, num_heads_q=32, num_heads_kv=8, mask="causal",
                              max_seqlen_q=seqlen_q, max_seqlen_k=4096, softcap=softcap, sm90_opts=sm90_opts)
        spec = v.attention
        res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
        return spec, sass.disassemble(res.cubin, tool)

    spec, capped = text(True)
    # the plain kernel with the capped one's Hopper options (the default's "t", which a soft-capped
    # kernel drops, takes the tile decode's integer divisions and their MUFU.RCP out of the consumers)
    # (at head dim 256 the plain kernel keeps the soft-capped one's option "m" only past the bound
    # that drops it there: it spills 8 / 16 bytes with it, heuristics.SM90_MASK_SPLIT_MUFU_HEAD_DIMS)
    monkeypatch.setattr(heuristics, "SM90_MASK_SPLIT_MAX_HEAD_DIM", max(d, heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM))
    plain_spec, plain = text(False, spec.sm90_opts if spec.mainloop == "sm90a" else None)
    assert plain_spec.sm90_opts == spec.sm90_opts
    _check_capped(spec, capped, plain)


def _check_capped(spec, capped, plain):
    assert "_softcap" in spec.name, spec.name
    assert len(re.findall(r"MUFU\.TANH\b", capped)) >= 8, spec.name
    rcp = [len(re.findall(r"MUFU\.RCP\b", t)) for t in (capped, plain)]
    assert rcp[0] <= rcp[1], (spec.name, rcp)          # the epilogue's 1 / row sum: the plain kernel's too
    assert not re.findall(r"MUFU\.TANH\b", plain)


def test_the_fused_hopper_kernels_decode_tile_takes_the_hardware_tanh_too():
    """The Hopper fused mixed-batch kernel's decode part is the 8-row sm_80 tile (tile_kt_sm80.cuh,
    its own soft-cap line): MUFU.TANH there as well, none of the accurate form's MUFU.RCP."""
    from kernelgen.jit import compiler, sass
    tool = sass.find_nvdisasm()
    assert tool is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"

    def text(softcap):
        fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                            max_seqlen_q=2048, max_seqlen_k=8192, short_max_q=4, softcap=softcap)
        src = render.render(fv.fused)
        assert "tile_kt_sm80" in src or "_m8n" in fv.fused.name, fv.fused.name
        res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), fv.fused.name)
        return fv.fused, sass.disassemble(res.cubin, tool)

    spec, capped = text(True)
    _, plain = text(False)
    _check_capped(spec, capped, plain)
