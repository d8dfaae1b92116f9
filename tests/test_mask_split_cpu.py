"""Option "m" of the Hopper mainloop (``AttentionSpec.sm90_opts``; templates/attention/mainloop_sm90.cuh
``steady_block``): the overlapped loop's key block rendered as a masked and an unmasked copy, chosen
once a block, so that no branch separates a block's soft-cap or score_mod from its row max and
exponentials (FlashAttention-3 and -4 run a masked and an unmasked loop; FA4's sm_90 soft-cap kernel
interleaves its tanh with the row max, which ptxas cannot do across our in-block mask branch).
The dispatcher adds it where a MUFU function runs on every logit (``heuristics.with_mask_split``);
the GPU checks are tests/gpu/test_mask_split_gpu.py."""
import dataclasses
import re

import pytest

from kernelgen.jit import render
from kernelgen.kernels.variant_code import VariantCode
from kernelgen.selection import heuristics

SNIPPET = VariantCode(score_mod="50.f * tanhf(score / 50.f)")
ALIBI = VariantCode(score_mod="score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)",
                    tensors=(("slopes", "float32"),))


@pytest.fixture(autouse=True)
def exact_letters(monkeypatch):
    """The options as given (the dispatcher's rule, ``SM90_MASK_SPLIT_MUFU``, adds "m" to soft-capped
    and transcendental kernels: test_the_dispatcher_adds_it_where_a_mufu_function_runs_on_every_logit)."""
    monkeypatch.setattr(heuristics, "SM90_MASK_SPLIT_MUFU", False)


def _spec(opts, d=64, mask="causal", **kw):
    v = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=64, num_heads_kv=8, mask=mask, max_seqlen_q=16384,
                          max_seqlen_k=16384, mean_q=16384, sm90_opts=opts, mainloop="sm90a", **kw)
    return v.attention


def _loop(src: str) -> str:
    """The overlapped mainloop's key-block loop of the rendered source."""
    body = src[src.index("  for (n = n_hi - 2; n >= n_lo; --n) {"):]
    return body[:body.index("  // P V of the last block (n_lo)")]


@pytest.mark.parametrize("kw", [{}, {"softcap": True}, {"variant": SNIPPET}, {"variant": ALIBI}, {"alibi": True}],
                         ids=["plain", "softcap", "snippet", "alibi_snippet", "alibi"])
def test_the_loop_holds_a_masked_and_an_unmasked_copy(kw):
    """Without "m": one copy, its mask behind a test in the block; with it: two copies of the block
    (two Q K^T issues in the loop), the test once, before them; the masked copy masks, the
    unmasked one has no mask (and a nonneg score_mod takes its in-range form there)."""
    base, m = _spec("p", **kw), _spec("mp", **kw)
    assert "_masksplit" in m.name and "_masksplit" not in base.name
    a, b = _loop(render.render(base)), _loop(render.render(m))
    assert a.count("issue_qk(") == 1 and b.count("issue_qk(") == 2
    assert b.count("block_needs_mask(") == 1
    masked, unmasked = b.split("\n    } else {\n", 1)
    assert "apply_mask" in masked and "apply_mask" not in unmasked
    if "variant" in kw and kw["variant"] is ALIBI:
        assert "<false, false>" in masked and "<false, true>" in unmasked and "<false, false>" not in unmasked


def test_the_option_is_dropped_where_it_spills():
    """Above ``SM90_MASK_SPLIT_MAX_HEAD_DIM`` (128), with a sliding window and for causal ALiBi on
    packed tiles the two copies spill (NVRTC 13.0): the Hopper options lose "m" there and keep it on
    the other causal and unmasked calls up to head dim 128; the default options have none."""
    assert heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM == 128
    assert heuristics.without_mask_split("mpt", 128, 128, "causal") == "mpt"
    assert heuristics.without_mask_split("mpt", 64, 64, "none") == "mpt"
    assert heuristics.without_mask_split("mpt", 192, 128, "causal") == "pt"
    assert heuristics.without_mask_split("mpt", 64, 64, "local") == "pt"
    # head dim 256 keeps it where a MUFU function runs on every logit (SM90_MASK_SPLIT_MUFU_HEAD_DIMS:
    # the soft-cap and the tanh snippets build without spills), not with ALiBi (4-24 bytes) nor at 192
    assert heuristics.SM90_MASK_SPLIT_MUFU_HEAD_DIMS == (256,)
    assert heuristics.without_mask_split("mp", 256, 256, "causal", mufu=True) == "mp"
    assert heuristics.without_mask_split("mp", 256, 256, "causal") == "p"
    assert heuristics.without_mask_split("mp", 256, 256, "causal", alibi=True, mufu=True) == "p"
    assert heuristics.without_mask_split("mp", 192, 192, "none", mufu=True) == "p"
    assert heuristics.without_mask_split("mp", 256, 256, "local", mufu=True) == "p"
    assert "m" not in heuristics.SM90_OPTS
    assert "_masksplit" in _spec("mp", d=128).name and "_masksplit" in _spec("mp", mask="none").name
    assert "_masksplit" not in _spec("mp", d=256).name
    assert "_masksplit" in _spec("mp", d=256, softcap=True).name and "_masksplit" in _spec("mp", d=256, variant=SNIPPET).name
    assert "_masksplit" not in _spec("mp", d=256, variant=ALIBI).name
    assert "_masksplit" not in _spec("mp", mask="local", window_span=128).name
    # causal built-in ALiBi on packed tiles (the copies spilled 56-340 bytes); unpacked keeps it
    assert heuristics.without_mask_split("mpt", 64, 64, "causal", alibi=True, pack=True) == "pt"
    assert heuristics.without_mask_split("mpt", 64, 64, "none", alibi=True, pack=True) == "mpt"
    packed = _spec("mp", alibi=True, pack_gqa=True)
    assert "_pack_" in packed.name and "_masksplit" not in packed.name
    assert "_masksplit" in _spec("mp", alibi=True, pack_gqa=False).name


def test_the_fused_kernel_does_not_take_it():
    """Like "t" and "x", "m" is the standalone kernel's: the one-launch mixed kernel's long variant
    drops it."""
    f = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                       max_seqlen_q=2048, max_seqlen_k=4096, paged=True, page_size=128,
                                       sm90_opts="mpt")
    assert f is not None and f.fused.long.mainloop == "sm90a" and "m" not in f.fused.long.sm90_opts


@pytest.mark.parametrize("kw,d", [({"variant": SNIPPET}, 64), ({"softcap": True}, 128), ({}, 128),
                                  ({"alibi": True}, 64), ({"variant": SNIPPET}, 256)],
                         ids=["snippet_d64", "softcap_d128", "plain_d128", "alibi_d64", "snippet_d256"])
def test_the_sass_has_the_second_copy_and_no_spills(kw, d):
    """Compiled with NVRTC for sm_90a: the loop's second copy is one more key block of GMMAs (and, with
    a tanh, one more block of MUFU.TANH), with no spills and no more registers than the limit."""
    from kernelgen.jit import compiler, sass
    tool = sass.find_nvdisasm()
    assert tool is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"

    def build(spec):
        res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
        r = res.resources
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
        text = sass.disassemble(res.cubin, tool)
        return len(re.findall(r"\bHGMMA\.", text)), len(re.findall(r"MUFU\.TANH\b", text))

    base = _spec("p", d=d, **kw)
    m = dataclasses.replace(base, sm90_opts="".join(sorted(base.sm90_opts + "m")))
    (g0, t0), (g1, t1) = build(base), build(m)
    per_block = base.head_dim // 16 + base.tile.block_n // 16   # Q K^T (k = 16 a GMMA) + P V
    assert g1 - g0 == per_block, (g0, g1, per_block)
    tanh = "softcap" in kw or "variant" in kw and kw["variant"] is SNIPPET
    scores = base.tile.block_n * 16 // 32     # a warp's scores of a block, a thread's share
    assert t1 - t0 == (scores if tanh else 0), (t0, t1)


def test_the_dispatcher_adds_it_where_a_mufu_function_runs_on_every_logit(monkeypatch):
    """``SM90_MASK_SPLIT_MUFU`` (on): "m" on a soft-cap (two and three warpgroups, head dims up to 128
    and 256) and on a transcendental snippet on the three-warpgroup tile or at head dims 128 and 256
    (``SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS``); not on
    plain, ALiBi, a snippet without a MUFU function, FP8, a window, head dim 192, a soft-cap with ALiBi
    at 256, nor a variant whose kernel spilled (``variant_spills``: selection.spills' twin)."""
    monkeypatch.setattr(heuristics, "SM90_MASK_SPLIT_MUFU", True)

    def has_m(d=64, **kw):
        return "_masksplit" in _spec(None, d=d, **kw).name
    assert has_m(softcap=True) and has_m(d=128, softcap=True) and has_m(variant=SNIPPET)
    assert heuristics.SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS == (128, 256)
    assert has_m(d=128, variant=SNIPPET)                          # two warpgroups: 0.919-0.969x the time
    assert heuristics.with_mask_split("p", False, SNIPPET, 8, head_dim=64) == "p"   # 1.007x with it
    assert heuristics.with_mask_split("p", False, SNIPPET, 8, head_dim=128) == "mp"
    assert heuristics.with_mask_split("p", False, SNIPPET, 8, head_dim=96) == "p"   # not measured
    assert not has_m() and not has_m(alibi=True) and not has_m(variant=ALIBI) and not has_m(d=256)
    assert has_m(d=256, softcap=True) and has_m(d=256, variant=SNIPPET)           # 0.92-0.99x the time
    assert not has_m(d=256, softcap=True, alibi=True) and not has_m(d=192, softcap=True)
    assert not has_m(d=256, variant=SNIPPET, variant_spills=True) and not has_m(variant=SNIPPET, variant_spills=True)
    assert has_m(d=256, softcap=True, variant=SNIPPET) and not has_m(d=256, softcap=True, variant=SNIPPET,
                                                                      variant_spills=True)
    assert not has_m(softcap=True, mask="local", window_span=128)
    assert not has_m(d=128, softcap=True, kv_dtype="e4m3")
    assert heuristics.with_mask_split("p", True, None, 8, fp8=True) == "p"
    monkeypatch.setattr(heuristics, "SM90_MASK_SPLIT_MUFU", False)
    assert not has_m(softcap=True) and not has_m(variant=SNIPPET)


def test_the_fp8_tensor_core_kernels_take_it_on_causal_d256_calls(monkeypatch):
    """``SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS`` (256): e4m3 q, K and V on the FP8 tensor-core tile at head dim
    256, causal, contiguous K / V, no soft-cap, take "m" (0.986-1.000x the time, H100, sixty-ninth
    session; its spills are test_review_fp8q_cpu.py's bound); not with a soft-cap (1.03-1.075x), paged
    K / V (8 bytes more spilled, unmeasured), a window, without a mask, at head dim 64 (0.99-1.11x) or
    128, nor on an FP8 cache with a bf16 q (not the tensor-core tile)."""
    def fp8(d=256, mask="causal", q_dtype="e4m3", **kw):
        return heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=16, num_heads_kv=8, mask=mask,
                                 max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3", q_dtype=q_dtype,
                                 mainloop="sm90a", **kw).attention
    a = fp8()
    assert a.fp8_mma and a.sm90_opts == "mp" and "_masksplit" in a.name, a.name
    for kw in ({"softcap": True}, {"paged": True, "page_size": 16}, {"mask": "none"}, {"d": 64}, {"d": 128}):
        b = fp8(**kw)
        assert b.fp8_mma and "m" not in b.sm90_opts, (kw, b.name)
    for kw in ({"q_dtype": ""}, {"mask": "local", "window_span": 256}):
        assert "m" not in fp8(**kw).sm90_opts, kw
    # letters given ("mp", KERNELGEN_SM90_OPTS): kept only where the rule adds it, dropped above d 128 elsewhere
    assert fp8(sm90_opts="mp").sm90_opts == "mp"
    for kw in ({"paged": True, "page_size": 16}, {"mask": "none"}):
        assert fp8(sm90_opts="mp", **kw).sm90_opts == "p", kw
    monkeypatch.setattr(heuristics, "SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS", ())
    assert fp8().sm90_opts == "p"
