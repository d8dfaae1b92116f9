"""ALiBi (``alibi_slopes=``, FlashAttention-2's argument and convention) on the CPU: the float64
reference on hand-computed cases, the checks (errors name ``alibi_slopes``), the spec (off: no
trace in the name, template variables, ``to_json`` or source), the decider's ALiBi specs (lighter
sm_80 prefill tile, Hopper prefill, pack-GQA decode with split-KV, mixed batches in turn / one
class), the dispatcher's paths through the CUDA stand-ins of tests/fake_cuda.py (the slopes'
address and batch stride in the ALiBi AttnParams, the fast path, a new slopes tensor), and NVRTC
builds of ALiBi variants for sm_80 (16-row, keys-as-rows) and sm_90a without spills (a handful
of compiles, through the session's NVRTC memo)."""
import dataclasses
import math

import pytest
import torch

import fake_cuda as fake_cuda_mod   # (the fixture is named fake_cuda)
from test_fused_cpu import CTX, QLENS, paged_inputs

import kernelgen
from kernelgen.apps.reference import attention_reference
from kernelgen.jit import compiler, render
from kernelgen.kernels.params import ATTENTION_PARAMS, ATTENTION_PARAMS_ALIBI, attention_params_for
from kernelgen.kernels.spec import AttentionSpec, FusedAttentionSpec, TileConfig, spec_from_json
from kernelgen.kernels.variant_code import VariantCode
from kernelgen.selection import decide, heuristics, validation as V
from test_decide import A100, H200, sig

BF16 = torch.bfloat16


# ----------------------------------------------------------------------------- the reference
def test_reference_alibi_hand_computed():
    """One query (last of two, so i = 1), three keys, scale 1, slope 0.5: the row's key position
    is i + lk - lq = 2, distances 2, 1, 0; logits q.k = 1, 0, 2; biased 0, -0.5, 2."""
    q = torch.tensor([[[0.0, 0.0]], [[1.0, 0.0]]])
    k = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[2.0, 0.0]]])
    v = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[3.0, 3.0]]])
    cu_q, cu_k = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32)
    o, lse = attention_reference(q, k, v, cu_q, cu_k, softmax_scale=1.0, alibi_slopes=torch.tensor([0.5]))
    w = [math.exp(0.0), math.exp(-0.5), math.exp(2.0)]
    z = sum(w)
    want = torch.tensor([(w[0] + 3 * w[2]) / z, (w[1] + 3 * w[2]) / z], dtype=torch.float64)
    assert torch.allclose(o[1, 0], want, atol=1e-12)
    assert abs(lse[0, 1].item() - math.log(z)) < 1e-12
    # row 0 (key position 1): distances 1, 0, 1 (non-causal: |.|), logits 0
    w0 = [math.exp(-0.5), 1.0, math.exp(-0.5)]
    assert abs(lse[0, 0].item() - math.log(sum(w0))) < 1e-12
    # the bias goes after softmax_scale and soft-cap: scale 2, softcap 1 -> tanh(2 * s) - slope * dist
    o, lse = attention_reference(q, k, v, cu_q, cu_k, softmax_scale=2.0, softcap=1.0,
                                 alibi_slopes=torch.tensor([0.5]))
    w = [math.exp(math.tanh(2.0) - 1.0), math.exp(0.0 - 0.5), math.exp(math.tanh(4.0))]
    assert abs(lse[0, 1].item() - math.log(sum(w))) < 1e-12


def test_reference_alibi_causal_matches_fa2_shift_and_per_request_slopes():
    """Causal: FlashAttention-2 adds slope * j (a constant shift per row of -slope * (i + lk - lq)):
    the same out, an lse shifted by that constant; (batch, heads) slopes: request b uses row b."""
    g = torch.Generator().manual_seed(1)
    qlens, klens = [3, 5], [7, 5]
    q = torch.randn(8, 2, 16, generator=g, dtype=torch.float64)
    k = torch.randn(12, 1, 16, generator=g, dtype=torch.float64)
    v = torch.randn(12, 1, 16, generator=g, dtype=torch.float64)
    cq, ck = torch.tensor([0, 3, 8], dtype=torch.int32), torch.tensor([0, 7, 12], dtype=torch.int32)
    slopes = torch.tensor([0.25, 0.125])
    o, lse = attention_reference(q, k, v, cq, ck, causal=True, alibi_slopes=slopes)
    o0, _ = attention_reference(q, k, v, cq, ck, causal=True)
    assert not torch.allclose(o, o0)
    # explicit bias: softmax over j of s_ij + slope * j equals ours (shift invariance)
    for b, (lq, lk) in enumerate(zip(qlens, klens)):
        q0, k0 = int(cq[b]), int(ck[b])
        for h in range(2):
            s = q[q0:q0 + lq, h] @ k[k0:k0 + lk, 0].T / 4.0 + slopes[h].double() * torch.arange(lk)
            i = torch.arange(lq)[:, None] + lk - lq
            s = s.masked_fill(torch.arange(lk)[None, :] > i, float("-inf"))
            want = torch.softmax(s, -1) @ v[k0:k0 + lk, 0]
            assert torch.allclose(o[q0:q0 + lq, h], want, atol=1e-12)
    per_req = torch.stack([slopes, slopes * 4])
    o2, _ = attention_reference(q, k, v, cq, ck, causal=True, alibi_slopes=per_req)
    assert torch.allclose(o2[:3], o[:3]) and not torch.allclose(o2[3:], o[3:])
    o4, _ = attention_reference(q, k, v, cq, ck, causal=True, alibi_slopes=slopes * 4)
    assert torch.allclose(o2[3:], o4[3:])


# ----------------------------------------------------------------------------- checks
CPU = torch.device("cpu")


@pytest.mark.parametrize("x,exc,msg", [
    ("no", TypeError, "alibi_slopes must be a torch.Tensor"),
    (torch.zeros(4, dtype=torch.float16), TypeError, "alibi_slopes must have dtype float32"),
    (torch.zeros(3), ValueError, r"alibi_slopes must have shape \(4,\) or \(batch, 4\)"),
    (torch.zeros(3, 4), ValueError, r"alibi_slopes must have shape \(4,\) or \(2, 4\)"),
    (torch.zeros(2, 4, 1), ValueError, "alibi_slopes must have 1 or 2 dimensions"),
    (torch.zeros(4, 2).t(), ValueError, "alibi_slopes must be contiguous along the heads"),
    (torch.zeros(4, device="meta"), ValueError, "alibi_slopes must be on cpu"),
])
def test_alibi_checks_name_the_argument(x, exc, msg):
    with pytest.raises(exc, match=msg):
        V.alibi_slopes(x, 4, 2, CPU)


def test_alibi_batch_stride():
    assert V.alibi_slopes(None, 4, 2, CPU) == -1
    assert V.alibi_slopes(torch.zeros(4), 4, 2, CPU) == 0
    assert V.alibi_slopes(torch.zeros(2, 4), 4, 2, CPU) == 4
    assert V.alibi_slopes(torch.zeros(2, 8)[:, :4], 4, 2, CPU) == 8
    assert V.alibi_slopes(torch.zeros(1, 4), 4, 1, CPU) == 0


# ----------------------------------------------------------------------------- the spec
BASE = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2))


def test_spec_off_leaves_no_trace_and_on_is_named_and_round_trips():
    on = dataclasses.replace(BASE, alibi=True)
    assert "alibi" not in BASE.name and "alibi" not in BASE.to_json() and "alibi" not in BASE.template_vars()
    assert "_alibi" in on.name and on.to_json()["alibi"] is True and on.template_vars()["alibi"] is True
    assert spec_from_json(on.to_json()) == on and spec_from_json(BASE.to_json()) == BASE
    src_off, src_on = render.render(BASE), render.render(on)
    assert "alibi" not in src_off.lower()
    assert "apply_alibi(s, alibi_sl" in src_on and "long long alibi_slopes;" in src_on
    assert ATTENTION_PARAMS.c_decl() in src_off and ATTENTION_PARAMS_ALIBI.c_decl() in src_on
    assert attention_params_for(on) is ATTENTION_PARAMS_ALIBI and attention_params_for(BASE) is ATTENTION_PARAMS
    # the plain struct's fields come first, in the same order, then the slopes' address and stride
    assert ATTENTION_PARAMS_ALIBI.pointer_names == ATTENTION_PARAMS.pointer_names
    assert set(ATTENTION_PARAMS_ALIBI.names) - set(ATTENTION_PARAMS.names) == {"alibi_slopes", "alibi_batch_stride"}


def test_hopper_and_keys_as_rows_sources_hold_the_bias():
    h = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(128, 128, 8, 2, 1), mainloop="sm90a",
                      alibi=True)
    src = render.render(h)
    # causal: the Q K^T accumulators start from the per-key part before each of the three issues
    # (alibi_acc_init), the row's offset is taken off in the softmax (apply_alibi_causal<!ALIBI_ACC>)
    assert src.count("apply_alibi_causal<!ALIBI_ACC>(s, alibi_sl, mi, n, row0, 1, cw, lane, roff);") == 3
    assert src.count("if (ALIBI_ACC) alibi_acc_init(s, alibi_sl);") == 3
    assert "constexpr bool ALIBI_ACC = KG_ALIBI_ACC && true;" in src
    # a soft-cap takes the raw scores and the bias comes after it: no accumulator start
    capped = render.render(dataclasses.replace(h, softcap=True))
    assert "constexpr bool ALIBI_ACC = KG_ALIBI_ACC && false;" in capped
    assert src.count(", roff);") == 6 and "apply_alibi(s," not in src
    assert "alibi_row_coefs(alibi_sl, p, ti.b, ti.head" in src
    nc = render.render(dataclasses.replace(h, mask="none"))
    assert nc.count("apply_alibi(s, alibi_sl, mi, n, row0, 1, cw, lane);") == 3 and "apply_alibi_causal<" not in nc
    assert "constexpr bool ALIBI_ACC = KG_ALIBI_ACC && false;" in nc
    kt = AttentionSpec("sm_80", "fp16", 128, 128, "none", "soa", TileConfig(8, 16, 1, 4, 1), pack_gqa=True,
                       split=True, paged=True, alibi=True)
    assert "alibi_kpos" in render.render(kt)


def test_fused_spec_refuses_alibi():
    long = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2), paged=True,
                         row_splits=True, alibi=True)
    short = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 8), True, True, True,
                          alibi=True)
    with pytest.raises(ValueError, match="no ALiBi"):
        FusedAttentionSpec(long, short)


# ----------------------------------------------------------------------------- the decider
from test_decide import MIXED  # noqa: E402


def _attn_specs(r):
    return [s for s in r.specs if getattr(s, "kind", "") == "attention"]


def test_decider_gives_alibi_specs_everywhere():
    # sm_80 prefill: the lighter two-stage tile (the slopes are extra state), no spill
    r = decide.decide(sig(alibi=True), A100)
    (a,) = _attn_specs(r)
    assert a.alibi and a.tile == TileConfig(128, 32, 4, 2, 2)
    # with soft-cap or a window beside the slopes: the lighter 64-row tile (no spill on sm_90a either)
    for kw in (dict(softcap=True), dict(mask="local", window_left=100)):
        (a,) = _attn_specs(decide.decide(sig(alibi=True, arch="sm_80", **kw), H200))
        assert a.alibi and a.tile == heuristics.ALIBI_HEAVY_TILE, a.name
        (a,) = _attn_specs(decide.decide(sig(arch="sm_80", **kw), H200))
        assert a.tile == TileConfig(128, 32, 4, 2, 2)
    # the sm_80 mainloop on a Hopper GPU: causal ALiBi on the 64-row tile too (the 128-row one spills
    # there, not on sm_80), non-causal on the 128-row one
    (a,) = _attn_specs(decide.decide(sig(alibi=True, arch="sm_80"), H200))
    assert a.alibi and a.mainloop == "sm80" and a.tile == heuristics.ALIBI_HEAVY_TILE, a.name
    (a,) = _attn_specs(decide.decide(sig(alibi=True, arch="sm_80", mask="none"), H200))
    assert a.alibi and a.mainloop == "sm80" and a.tile == TileConfig(128, 32, 4, 2, 2), a.name
    # Hopper prefill
    (a,) = _attn_specs(decide.decide(sig(alibi=True), H200))
    assert a.alibi and a.mainloop == "sm90a"
    # decode: pack-GQA, forced split
    d = sig(alibi=True, max_seqlen_q=1, rows=8, batch=8, paged=True, page_size=16, max_seqlen_k=32768, num_splits=4)
    for dev in (A100, H200):
        (a,) = _attn_specs(decide.decide(d, dev))
        assert a.alibi and a.pack_gqa and a.split and a.paged
    # without ALiBi, nothing changes
    assert not any(s.alibi for s in _attn_specs(decide.decide(sig(), H200)))


def test_mixed_batch_with_alibi_runs_the_classes_in_turn_or_as_one_class():
    r = decide.decide(sig(alibi=True, **MIXED), H200)
    assert r.kind == "pair" and all(s.alibi for s in _attn_specs(r)) and len(_attn_specs(r)) == 2
    assert decide.decide(sig(**MIXED), H200).kind == "fused"
    r = decide.decide(sig(alibi=True, **MIXED), A100)
    assert r.kind == "single" and all(s.alibi for s in _attn_specs(r))
    assert decide.decide(sig(**MIXED), A100).kind == "fused"


# ----------------------------------------------------------------------------- the dispatcher
_plain = fake_cuda_mod.small_batch
_attn_fields = fake_cuda_mod.attention_fields
CASES = fake_cuda_mod.single_class_cases("_alibi")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("per_request", [False, True])
def test_varlen_attention_passes_the_slopes(fake_cuda, case, per_request):
    kw, kinds = CASES[case]
    q, k, v, cq, ck = _plain()
    slopes = torch.rand(2, 4) if per_request else torch.rand(4)
    for i in range(2):                       # the validating path, then the prepared call's fast path
        fake_cuda.clear()
        kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, alibi_slopes=slopes, **kw)
        assert fake_cuda.kinds() == kinds
        (f,) = _attn_fields(fake_cuda)
        assert f["alibi_slopes"] == slopes.data_ptr() and f["alibi_batch_stride"] == (4 if per_request else 0)
    other = slopes.clone()                   # a new slopes tensor: its own prepared call
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, alibi_slopes=other, **kw)
    (f,) = _attn_fields(fake_cuda)
    assert f["alibi_slopes"] == other.data_ptr()


def test_varlen_attention_without_alibi_launches_the_plain_kernels(fake_cuda):
    q, k, v, cq, ck = _plain()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, arch="sm_80", num_splits=1)
    assert fake_cuda.kinds() == ["scheduler", "attention"]
    assert "alibi_slopes" not in _attn_fields(fake_cuda)[0]


def test_varlen_attention_checks_alibi(fake_cuda):
    q, k, v, cq, ck = _plain()
    with pytest.raises(ValueError, match="alibi_slopes must have shape"):
        kernelgen.varlen_attention(q, k, v, cq, ck, alibi_slopes=torch.zeros(3))
    with pytest.raises(ValueError, match=r"alibi_slopes must have shape \(4,\) or \(2, 4\)"):
        kernelgen.varlen_attention(q, k, v, cq, ck, alibi_slopes=torch.zeros(3, 4))
    with pytest.raises(TypeError, match="alibi_slopes must have dtype float32"):
        kernelgen.varlen_attention(q, k, v, cq, ck, alibi_slopes=torch.zeros(4, dtype=torch.float64))
    assert fake_cuda.kinds() == []


@pytest.mark.parametrize("arch", [None, "sm_80"])
def test_mixed_call_with_alibi(fake_cuda, arch):
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    slopes = torch.linspace(0.01, 0.5, q.shape[1])
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True, alibi_slopes=slopes, arch=arch)
    kinds = fake_cuda.kinds()
    if arch is None:   # the classes in turn: Hopper long class, sm_80 decode class
        assert kinds[:4] == ["scheduler", "scheduler", "attention_sm90_alibi", "attention_alibi"]
    else:              # one class on the sm_80 path
        assert kinds[:2] == ["scheduler", "attention_alibi"]
    assert "fused" not in kinds and "fused_sm90" not in kinds
    assert {f["alibi_slopes"] for f in _attn_fields(fake_cuda)} == {slopes.data_ptr()}


# ----------------------------------------------------------------------------- NVRTC builds
COMPILE = {
    "sm80_prefill": AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2)),
    # the sm_80 mainloop compiled for sm_90a (forced arch="sm_80" on an H200): the tightest budget
    # (the split 128-row tile is what sinks take there: test_sinks_cpu.py); causal ALiBi takes the
    # 64-row tile there (heuristics.ALIBI_HEAVY_TILE: the 128-row one spilled 32 / 24 bytes unsplit),
    # non-causal keeps the 128-row one
    "sm80_mainloop_on_sm90a_split": AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa",
                                                  TileConfig(128, 32, 4, 2, 2), split=True),
    "sm80_mainloop_on_sm90a_causal": AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa",
                                                   TileConfig(64, 64, 4, 2, 2)),
    "sm80_mainloop_on_sm90a_causal_split": AttentionSpec("sm_90a", "fp16", 128, 128, "causal", "soa",
                                                         TileConfig(64, 64, 4, 2, 2), split=True),
    "sm80_mainloop_on_sm90a_none_split": AttentionSpec("sm_90a", "bf16", 128, 128, "none", "soa",
                                                       TileConfig(128, 32, 4, 2, 2), split=True),
    "sm80_decode_pack_split_paged": AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa",
                                                  TileConfig(16, 16, 1, 2, 8), True, True, True),
    "sm80_keys_as_rows": AttentionSpec("sm_80", "fp16", 128, 128, "none", "soa", TileConfig(8, 16, 1, 4, 1),
                                       pack_gqa=True, split=True, paged=True),
    "sm90a_prefill_pingpong": AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa",
                                            TileConfig(128, 128, 8, 2, 1), mainloop="sm90a", sm90_opts="p"),
    "sm90a_paged_split_softcap_local": AttentionSpec("sm_90a", "bf16", 128, 128, "local", "soa",
                                                     TileConfig(128, 128, 8, 2, 1), split=True, paged=True,
                                                     softcap=True, mainloop="sm90a"),
    # head dim 64 on the three-warpgroup tile (160 registers a consumer: heuristics.SM90_THREE_WG_EXTRAS)
    "sm90a_d64_three_wg_causal": AttentionSpec("sm_90a", "bf16", 64, 64, "causal", "soa",
                                               TileConfig(192, 128, 12, 2, 1), mainloop="sm90a", sm90_opts="p"),
    "sm90a_d64_three_wg_none_fp16": AttentionSpec("sm_90a", "fp16", 64, 64, "none", "soa",
                                                  TileConfig(192, 128, 12, 2, 1), mainloop="sm90a", sm90_opts="p"),
    "sm90a_d64_three_wg_local": AttentionSpec("sm_90a", "bf16", 64, 64, "local", "soa",
                                              TileConfig(192, 128, 12, 2, 1), mainloop="sm90a", sm90_opts="p"),
    "sm90a_d64_three_wg_causal_split": AttentionSpec("sm_90a", "bf16", 64, 64, "causal", "soa",
                                                     TileConfig(192, 128, 12, 2, 1), split=True, mainloop="sm90a",
                                                     sm90_opts="p"),
}


@pytest.mark.parametrize("name", list(COMPILE))
def test_alibi_variants_compile_without_spills(name):
    spec = dataclasses.replace(COMPILE[name], alibi=True)
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
    assert r["registers"] * spec.num_threads <= 65536 // spec.tile.min_blocks, (spec.name, r)
    if spec.mainloop == "sm90a":
        for code in ("C7508", "C7510", "C7519"):   # setmaxnreg honoured, wgmmas kept asynchronous
            assert code not in res.log, res.log


def test_alibi_and_variants_take_the_three_warpgroup_tile_where_switched_on(monkeypatch):
    """Head dim 64: the plain prefill runs on the 192-row tile (three consumer warpgroups), and so do
    ALiBi and user variants while heuristics.SM90_THREE_WG_EXTRAS holds "alibi" / "variant" (the
    default; ALiBi's kernels compile without spills: test_alibi_variants_compile_without_spills);
    a variant whose three-warpgroup build spills (``variant_spills``, selection.spills) and a
    soft-cap take the two-warpgroup tile; without the switch, ALiBi and variants take it too."""
    kw = dict(num_heads_q=64, num_heads_kv=8, mask="causal", max_seqlen_q=16384, max_seqlen_k=16384)

    def tile(**extra):
        a = heuristics.choose("sm_90a", "bf16", 64, 64, **kw, **extra).attention
        assert a.mainloop == "sm90a"
        return (a.tile.block_m, a.tile.num_warps)
    snippet = VariantCode(score_mod="score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)",
                          tensors=(("slopes", "float32"),))
    assert tile() == (192, 12)
    assert heuristics.SM90_THREE_WG_EXTRAS == frozenset({"alibi", "variant", "softcap", "transcendental"})
    assert tile(alibi=True) == (192, 12) and tile(variant=snippet) == (192, 12)
    assert tile(variant=snippet, variant_spills=True) == (128, 8) and tile(alibi=True, variant_spills=True) == (192, 12)
    assert tile(alibi=True, softcap=True) == (192, 12) and tile(softcap=True) == (192, 12)
    assert tile(variant=snippet, softcap=True) == (192, 12)
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset({"alibi", "variant"}))
    assert tile(alibi=True, softcap=True) == (128, 8) and tile(softcap=True) == (128, 8)
    assert tile(variant=snippet, softcap=True) == (128, 8)
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset({"alibi"}))
    assert tile(alibi=True) == (192, 12) and tile(variant=snippet) == (128, 8)
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset({"variant"}))
    assert tile(variant=snippet) == (192, 12) and tile(alibi=True) == (128, 8)
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset())
    assert tile(alibi=True) == (128, 8) and tile(variant=snippet) == (128, 8)
    # "softcap": the built-in soft-cap on three too
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset({"softcap", "alibi"}))
    assert tile(softcap=True) == (192, 12) and tile(alibi=True, softcap=True) == (192, 12)
    assert tile(variant=snippet, softcap=True) == (128, 8)


# ----------------------------------------------------------------------------- AttentionPlan
def test_plan_run_and_attend_pass_the_slopes(fake_cuda, monkeypatch):
    """A paged mixed plan made with alibi=True: ALiBi kernels (the classes in turn on the fake
    H200), the slopes' address in every attention launch, a repeated step (also while capturing)
    on the fast path with no host sync; the (batch, heads) shape; a plan without ALiBi refuses
    slopes and an ALiBi plan requires them; attend passes them too."""
    from fake_cuda import make_plan
    qlens, ctx = [300, 1, 1, 3, 1, 0], [900, 40, 500, 7, 1, 0]
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    hq = q.shape[1]
    kw = dict(max_batch=16, num_heads_q=hq, num_heads_kv=kc.shape[2], head_dim=q.shape[2], max_total_q=4096,
              max_seqlen_q=max(QLENS), max_seqlen_k=max(CTX), paged=True, causal=True)
    plan = make_plan(monkeypatch, alibi=True, **kw)
    assert plan.alibi and plan.recipe.kind == "pair" and all(s.alibi for s in _attn_specs(plan.recipe))
    slopes = torch.linspace(0.01, 1.0, hq)
    for step in range(3):
        fake_cuda.clear()
        fake_cuda.capturing = step == 2
        guard = fake_cuda_mod.no_host_sync() if step else pytest.MonkeyPatch()
        try:
            plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, alibi_slopes=slopes)
        finally:
            guard.undo()
        assert fake_cuda.kinds()[:4] == ["scheduler", "scheduler", "attention_sm90_alibi", "attention_alibi"]
        assert {(f["alibi_slopes"], f["alibi_batch_stride"]) for f in _attn_fields(fake_cuda)} == \
            {(slopes.data_ptr(), 0)}
        slopes.mul_(0.5)                         # new values, same tensor: read on the device
    fake_cuda.capturing = False
    per_req = torch.rand(len(qlens), hq)
    fake_cuda.clear()
    plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, alibi_slopes=per_req)
    assert {(f["alibi_slopes"], f["alibi_batch_stride"]) for f in _attn_fields(fake_cuda)} == \
        {(per_req.data_ptr(), hq)}
    with pytest.raises(ValueError, match="alibi_slopes is required"):
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt)
    with pytest.raises(ValueError, match=r"alibi_slopes must have shape"):
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, alibi_slopes=torch.rand(len(qlens) + 1, hq))
    fake_cuda.clear()
    plan.schedule(cu_q, None, used)
    plan.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, alibi_slopes=slopes)
    assert {f["alibi_slopes"] for f in _attn_fields(fake_cuda)} == {slopes.data_ptr()}
    plain = make_plan(monkeypatch, **kw)
    assert not plain.alibi and plain.recipe.kind == "fused"
    with pytest.raises(ValueError, match="made without ALiBi"):
        plain.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, alibi_slopes=slopes)


# ----------------------------------------------------------------------------- torch ops and compat
def test_op_schema_and_fake_impl_take_alibi_slopes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernelgen.front import ops
    for op in (torch.ops.kernelgen.varlen_attention, torch.ops.kernelgen.varlen_attention_out):
        schema = str(op.default._schema)
        assert "Tensor? alibi_slopes=None" in schema, schema
    with FakeTensorMode():
        q = torch.empty(10, 4, 64, dtype=BF16, device="cuda")
        k = torch.empty(20, 2, 64, dtype=BF16, device="cuda")
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        out, lse = torch.ops.kernelgen.varlen_attention(q, k, k, cu, cu, alibi_slopes=torch.empty(4, device="cuda"))
        assert out.shape == (10, 4, 64)
        with pytest.raises(ValueError, match="alibi_slopes must have shape"):
            torch.ops.kernelgen.varlen_attention(q, k, k, cu, cu, alibi_slopes=torch.empty(3, device="cuda"))
        with pytest.raises(TypeError, match="alibi_slopes must have dtype float32"):
            torch.ops.kernelgen.varlen_attention(q, k, k, cu, cu,
                                                 alibi_slopes=torch.empty(4, dtype=torch.float16, device="cuda"))
    assert ops.varlen_attention.__doc__ and "alibi_slopes" in ops.varlen_attention.__doc__


def test_ops_and_compat_pass_alibi_slopes_down(monkeypatch):
    from test_ops_compat import Recorder, packed

    from kernelgen.front import compat, ops
    rec = Recorder()
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", rec)
    q, k, v, cu = packed()
    s = torch.rand(q.shape[1])
    ops.varlen_attention(q, k, v, cu, cu, alibi_slopes=s)
    assert rec.last["alibi_slopes"] is s
    torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, alibi_slopes=s)
    assert torch.equal(rec.last["alibi_slopes"], s)
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, alibi_slopes=s)
    assert rec.last["alibi_slopes"] is s
    q4 = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.zeros(2, 24, 2, 64, dtype=BF16)
    compat.flash_attn_with_kvcache(q4, kc, kc, alibi_slopes=s[:4])
    assert rec.last["alibi_slopes"] is not None


def test_ops_on_cpu_reference_with_alibi(monkeypatch):
    """The op through the CPU reference stand-in equals the reference with the slopes."""
    from test_ops_compat import packed, reference_api
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", reference_api)
    q, k, v, cu = packed()
    s = torch.rand(q.shape[1])
    out = torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, causal=True, alibi_slopes=s)[0]
    want, _ = attention_reference(q.double(), k.double(), v.double(), cu, cu, causal=True, alibi_slopes=s)
    assert torch.allclose(out.double(), want.nan_to_num().to(BF16).double())


def test_warmup_specs_with_alibi():
    """``kernelgen warmup --alibi``: the ALiBi variants besides the plain ones (which stay as they
    were), no fused kernel with ALiBi, the classes-in-turn pair of a paged mixed call on sm_90a."""
    from kernelgen.selection.catalog import warmup_specs
    kw = dict(head_dims=(128,), dtypes=("bf16",), layouts=("soa",), phases=("prefill", "chunked", "decode"),
              gqas=(4,), paged=(False, True))
    plain = warmup_specs("sm_90a", **kw)
    both = warmup_specs("sm_90a", alibi=True, **kw)
    assert set(plain) <= set(both) and not any(getattr(s, "alibi", False) for s in plain)
    al = [s for s in both if getattr(s, "alibi", False)]
    assert any(s.mainloop == "sm90a" for s in al) and any(s.mainloop == "sm80" and s.pack_gqa for s in al)
    assert any(s.row_splits for s in al)                      # the pair's Hopper long class
    assert not any(s.kind == "fused" and (s.long.alibi or s.short.alibi) for s in both)
