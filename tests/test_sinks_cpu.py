"""Attention sinks (``sinks=``, gpt-oss semantics) on the CPU: the rescale helper against the direct
float64 softmax with the extra logit, the reference on a hand-computed case, the checks (errors
name ``sinks``), the dispatcher's paths (varlen_attention single / Hopper / split-KV / fused
mixed, AttentionPlan run and attend) through the CUDA stand-ins of tests/fake_cuda.py, the torch
ops' schema and fake impl, and compat's ``s_aux`` alias.  No NVRTC compile."""
import math

import pytest
import torch

import fake_cuda as fake_cuda_mod   # (the fixture is named fake_cuda)
from fake_cuda import make_plan
from test_fused_cpu import CTX, QLENS, paged_inputs
from test_ops_compat import Recorder, packed
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelgen
from kernelgen.apps.reference import attention_reference
from kernelgen.front import compat, ops
from kernelgen.launch import sinks as S
from kernelgen.selection import validation as V

NEG_INF = float("-inf")
BF16 = torch.bfloat16


def _batch(qlens, klens, hq, hkv, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(qlens), hq, d, generator=g, dtype=torch.float64)
    k = torch.randn(sum(klens), hkv, d, generator=g, dtype=torch.float64) * 2
    v = torch.randn(sum(klens), hkv, d, generator=g, dtype=torch.float64)
    cq = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32)
    ck = torch.tensor([0] + list(torch.tensor(klens).cumsum(0)), dtype=torch.int32)
    return q, k, v, cq, ck


# ----------------------------------------------------------------------------- the rescale helper
SINKS = [0.0, 3.0, -2.0, NEG_INF, 1000.0, -1000.0, 40.0, 0.5]   # large |sink|, no sink, ...


@pytest.mark.parametrize("hq,hkv", [(8, 8), (8, 2), (8, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_apply_equals_the_direct_softmax_with_sink(hq, hkv, causal):
    """Plain attention (float64 reference) + apply == the reference computing the sink directly;
    rows with no key (lse -inf) included: empty requests, causal rows with seqlen_q > seqlen_k."""
    qlens, klens = [5, 0, 3, 9, 4], [7, 4, 0, 3, 20]
    q, k, v, cq, ck = _batch(qlens, klens, hq, hkv, seed=hq * 10 + hkv + causal)
    sinks = torch.tensor(SINKS[:hq], dtype=torch.float32)
    plain, lse = attention_reference(q, k, v, cq, ck, causal=causal)
    assert torch.isneginf(lse).any()                                # empty rows are covered
    want, want_lse = attention_reference(q, k, v, cq, ck, causal=causal, sinks=sinks)
    # float32 out: the helper's arithmetic is float32, so the match is to float32 rounding
    out, l32 = plain.float(), lse.float()
    got_lse = S.apply(out, l32, sinks, cq)
    assert got_lse is l32
    assert torch.allclose(out.double(), want, atol=1e-6, rtol=1e-5)
    assert torch.equal(torch.isneginf(got_lse), torch.isneginf(want_lse))
    fin = torch.isfinite(want_lse)
    assert torch.allclose(got_lse.double()[fin], want_lse[fin], atol=1e-5, rtol=1e-6)
    empty = torch.isneginf(lse)
    assert torch.all(out.transpose(0, 1)[empty] == 0)               # no key: out stays exactly 0
    h_of = torch.arange(hq)[:, None].expand_as(lse)
    assert torch.equal(got_lse[empty], sinks[h_of[empty]])          # ... and lse = sink[h]
    assert not torch.isnan(out).any() and not torch.isnan(got_lse).any()
    # bf16 out: the reference at bf16 tolerance
    ob = plain.to(BF16)
    S.apply(ob, lse.float(), sinks, cq)
    assert torch.allclose(ob.double(), want.to(BF16).double(), atol=1.6e-2, rtol=1.6e-2)


def test_apply_sink_minus_inf_is_exactly_no_sink_and_large_sink_zeroes():
    g = torch.Generator().manual_seed(3)
    out0 = torch.randn(6, 2, 16, generator=g).to(BF16)
    lse = torch.randn(2, 6, generator=g) * 5
    lse[1, 2] = NEG_INF
    out0[2, 1] = 0
    out = out0.clone()
    new = S.apply(out, lse.clone(), torch.tensor([NEG_INF, NEG_INF]))
    assert torch.equal(out, out0) and torch.equal(new, lse)
    out = out0.clone()
    new = S.apply(out, lse.clone(), torch.tensor([1e4, 1e4]))
    assert torch.all(out == 0) and torch.all(new == 1e4)


def test_apply_leaves_rows_past_the_batch_alone():
    """Rows at or past cu_seqlens_q[-1] are not written by the kernels: out and lse keep them."""
    out = torch.full((5, 2, 8), float("nan"), dtype=BF16)
    out[:3] = 1
    lse = torch.full((2, 5), float("nan"))
    lse[:, :3] = 0.0
    S.apply(out, lse, torch.tensor([0.0, NEG_INF]), torch.tensor([0, 1, 3], dtype=torch.int32))
    assert torch.isnan(out[3:]).all() and torch.isnan(lse[:, 3:]).all()
    assert torch.all(out[:3, 0] == 0.5) and torch.all(out[:3, 1] == 1)
    assert torch.allclose(lse[0, :3], torch.full((3,), math.log(2))) and torch.all(lse[1, :3] == 0)


def test_reference_with_sinks_hand_computed():
    """One query, two keys, scale 1: logits 1 and 0, sink 0.5."""
    q = torch.tensor([[[1.0, 0.0]]])
    k = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]]])
    v = torch.tensor([[[2.0, 0.0]], [[0.0, 4.0]]])
    cu_q, cu_k = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32)
    o, lse = attention_reference(q, k, v, cu_q, cu_k, softmax_scale=1.0, sinks=torch.tensor([0.5]))
    z = math.e + 1.0 + math.exp(0.5)
    assert torch.allclose(o[0, 0], torch.tensor([2 * math.e / z, 4 / z], dtype=torch.float64), atol=1e-12)
    assert abs(lse[0, 0].item() - math.log(z)) < 1e-12
    # no key: out 0, lse = the sink; sink -inf: no sink
    o, lse = attention_reference(q, k[:0], v[:0], cu_q, torch.tensor([0, 0], dtype=torch.int32),
                                 sinks=torch.tensor([0.5]))
    assert torch.all(o == 0) and lse[0, 0].item() == 0.5
    o1, l1 = attention_reference(q, k, v, cu_q, cu_k, sinks=torch.tensor([NEG_INF]))
    o2, l2 = attention_reference(q, k, v, cu_q, cu_k)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


# ----------------------------------------------------------------------------- checks
@pytest.mark.parametrize("x,exc,msg", [
    ("no", TypeError, "sinks must be a torch.Tensor"),
    (torch.zeros(4, dtype=torch.float16), TypeError, "sinks must have dtype float32"),
    (torch.zeros(4, 1), ValueError, "sinks must have 1 dimensions"),
    (torch.zeros(3), ValueError, r"sinks must have shape \(4,\)"),
    (torch.zeros(4, device="meta"), ValueError, "sinks must be on cpu"),
])
def test_sinks_checks_name_the_argument(x, exc, msg):
    with pytest.raises(exc, match=msg):
        V.sinks(x, 4, torch.device("cpu"))


def test_sinks_value_check():
    V.check_sinks_values(torch.tensor([0.0, NEG_INF, 1e30]))
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"sinks\[1\]"):
            V.check_sinks_values(torch.tensor([0.0, bad]))


def test_varlen_attention_checks_sinks(fake_cuda, monkeypatch):
    q, k, v, cq, ck = _plain()
    with pytest.raises(ValueError, match="sinks must have shape"):
        kernelgen.varlen_attention(q, k, v, cq, ck, sinks=torch.zeros(3))
    with pytest.raises(TypeError, match="sinks must have dtype float32"):
        kernelgen.varlen_attention(q, k, v, cq, ck, sinks=torch.zeros(4, dtype=torch.float64))
    assert fake_cuda.kinds() == []
    kernelgen.varlen_attention(q, k, v, cq, ck, sinks=torch.tensor([0.0, 1, 2, float("nan")]))  # not checked
    monkeypatch.setenv(V.CHECK_INPUTS_ENV, "1")
    with pytest.raises(ValueError, match=r"sinks\[3\] = nan"):
        kernelgen.varlen_attention(q, k, v, cq, ck, sinks=torch.tensor([0.0, 1, 2, float("nan")]))


# ----------------------------------------------------------------------------- the dispatcher's paths
def _plain(total_k=20):
    return fake_cuda_mod.small_batch(total_k)


@pytest.fixture
def applied(monkeypatch):
    """Records every call of launch.sinks.apply (and runs it)."""
    calls, real = [], S.apply

    def rec(out, lse, sinks, cu_seqlens_q=None):
        calls.append(dict(out=out, lse=lse, sinks=sinks, cu=cu_seqlens_q, lse_before=lse.clone()))
        return real(out, lse, sinks, cu_seqlens_q)

    monkeypatch.setattr(S, "apply", rec)
    return calls


def _lse_ptrs(rec):
    """The lse pointer of every launch that writes one (attention, fused, combine)."""
    ptrs = []
    for launch in rec.launches:
        if launch.kind == "scheduler":
            continue
        f = launch.fields()
        ptrs.append(f["long"]["lse"] if "long" in f else f["lse"])
    return ptrs


CASES = fake_cuda_mod.single_class_cases("_sinks", combine="combine_sinks")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("return_lse", [False, True])
def test_varlen_attention_fuses_sinks(fake_cuda, applied, monkeypatch, case, return_lse):
    """A single-class call runs the sink kernels (the epilogue / the combine apply the sinks, read
    through AttnParams.sinks / CombineParams.sinks): no rescale after them, no LSE unless returned."""
    kw, kinds = CASES[case]
    q, k, v, cq, ck = _plain(2000)
    sinks = torch.tensor([0.0, 1.0, -1.0, NEG_INF])
    out = torch.ones(10, 4, 64, dtype=BF16)
    for i in range(2):                       # the validating path, then the prepared call's fast path
        fake_cuda.clear()
        guard = fake_cuda_mod.no_host_sync() if i else pytest.MonkeyPatch()
        try:
            res = kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, out=out,
                                             return_lse=return_lse, sinks=sinks, **kw)
        finally:
            guard.undo()
        assert fake_cuda.kinds() == kinds
        assert applied == []
        for launch in fake_cuda.launches[1:]:
            assert launch.fields()["sinks"] == sinks.data_ptr()
        if return_lse:
            assert res[0] is out and res[1].shape == (4, 10)
            assert set(_lse_ptrs(fake_cuda)) == {res[1].data_ptr()}
        else:
            assert res is out
            assert set(_lse_ptrs(fake_cuda)) == {0}                  # no LSE written: none asked for
    # other sinks (another address): another prepared call, the new address
    sinks2 = sinks.clone()
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, out=out, sinks=sinks2, **kw)
    assert {launch.fields()["sinks"] for launch in fake_cuda.launches[1:]} == {sinks2.data_ptr()}
    assert applied == []


def test_sink_specs_and_params():
    """AttentionSpec.sinks / CombineSpec.sinks: off leaves no trace (name, template variables,
    to_json, parameters), on is named, round-trips and adds the sinks address to the parameters."""
    import dataclasses
    from kernelgen.kernels import params as P
    from kernelgen.kernels.spec import AttentionSpec, CombineSpec, TileConfig, spec_from_json
    a = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2))
    s = dataclasses.replace(a, sinks=True)
    assert "sinks" not in a.to_json() and "sinks" not in a.template_vars() and "sinks" not in a.name
    assert s.name == a.name.replace("_causal_", "_causal_sinks_")
    assert spec_from_json(s.to_json()) == s and s.template_vars()["sinks"] is True
    assert P.attention_params_for(a) is P.ATTENTION_PARAMS
    assert P.attention_params_for(s) is P.ATTENTION_PARAMS_SINKS
    assert set(P.ATTENTION_PARAMS_SINKS.names) == set(P.ATTENTION_PARAMS.names) | {"sinks"}
    h = dataclasses.replace(s, mainloop="sm90a", arch="sm_90a", tile=TileConfig(128, 128, 8, 2, 1))
    assert P.attention_params_for(h) is P.TMA_ATTENTION_PARAMS_SINKS
    assert P.attention_params_for(dataclasses.replace(h, alibi=True)) is P.TMA_ATTENTION_PARAMS_ALIBI_SINKS
    c = CombineSpec("sm_80", "bf16", 128)
    cs = dataclasses.replace(c, sinks=True)
    assert c.to_json() == {"arch": "sm_80", "dtype": "bf16", "head_dim_v": 128, "kind": "combine"}
    assert cs.name == c.name + "_sinks" and spec_from_json(cs.to_json()) == cs
    assert P.combine_params_for(c) is P.COMBINE_PARAMS and "sinks" in P.combine_params_for(cs).names


def test_decider_gives_sink_specs_to_single_recipes_only():
    """The sink variants keep the tiles and splits of the call without sinks; the mixed-batch kinds
    keep the plain kernels (launch.sinks.apply after them)."""
    import dataclasses
    from kernelgen.selection import decide
    from test_decide import H200, MIXED, sig
    for base in (sig(max_seqlen_q=16384, max_seqlen_k=16384, mask="causal"),
                 sig(max_seqlen_q=1, max_seqlen_k=4096, batch=128, rows=128, paged=True, page_size=16)):
        plain = decide.decide(base, H200)
        fused = decide.decide(dataclasses.replace(base, sinks=True), H200)
        assert plain.kind == fused.kind == "single" and fused.sinks_fused and not plain.sinks_fused
        assert fused.variants.attention == dataclasses.replace(plain.variants.attention, sinks=True)
        assert (fused.combine is None) == (plain.combine is None)
        if plain.combine is not None:
            assert fused.combine == dataclasses.replace(plain.combine, sinks=True)
        assert fused.schedulers == plain.schedulers and fused.workspace == plain.workspace
    mixed = decide.decide(sig(**MIXED, sinks=True), H200)
    assert mixed.kind in ("fused", "pair") and not mixed.sinks_fused
    assert not any(getattr(s, "sinks", False) for s in mixed.specs)


def test_varlen_attention_without_sinks_is_unchanged(fake_cuda, applied):
    q, k, v, cq, ck = _plain()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 12, causal=True, arch="sm_80")
    assert applied == [] and set(_lse_ptrs(fake_cuda)) == {0}


@pytest.mark.parametrize("arch", [None, "sm_80"])
def test_mixed_call_applies_sinks(fake_cuda, applied, arch):
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    sinks = torch.linspace(-3, 3, q.shape[1])
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True, sinks=sinks, arch=arch)
    assert fake_cuda.kinds() == (["scheduler", "scheduler", "fused_sm90", "combine"] if arch is None
                                 else ["scheduler", "scheduler", "fused", "combine"])
    assert len(applied) == 1 and applied[0]["lse"].shape == (q.shape[1], q.shape[0])
    assert set(_lse_ptrs(fake_cuda)) == {applied[0]["lse"].data_ptr()}


def _expected(out0, lse0, sinks):
    new = torch.logaddexp(lse0, sinks[:, None])
    return (out0.float() * torch.exp(lse0 - new).t()[..., None]).to(out0.dtype), new


@pytest.mark.parametrize("with_lse", [False, True])
def test_plan_run_applies_sinks(fake_cuda, applied, monkeypatch, with_lse):
    """A paged mixed plan: the step writes its LSE into the caller's lse (rescaled in place) or the
    plan's preallocated scratch; the fake kernels write nothing, so out/lse keep what the test put
    there and the rescale is checked exactly; a second step takes the fast path with no host sync,
    also while capturing, and reads the new sink values."""
    qlens, ctx = [300, 1, 1, 3, 1, 0], [900, 40, 500, 7, 1, 0]       # a small mixed step
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    hq, tq = q.shape[1], q.shape[0]
    plan = make_plan(monkeypatch, max_batch=16, num_heads_q=hq, num_heads_kv=kc.shape[2], head_dim=q.shape[2],
                     max_total_q=4096, max_seqlen_q=max(QLENS), max_seqlen_k=max(CTX), paged=True, causal=True,
                     sinks=True)
    assert plan._sink_lse is not None and plan._sink_lse.numel() == hq * 4096
    g = torch.Generator().manual_seed(1)
    out0 = torch.randn(tq, hq, q.shape[2], generator=g).to(BF16)
    lse0 = torch.randn(hq, tq, generator=g)
    sinks = torch.linspace(-2, 2, hq)
    for step in range(3):
        fake_cuda.clear()
        fake_cuda.capturing = step == 2
        out, lse = out0.clone(), lse0.clone()
        if not with_lse:
            plan._sink_lse[:hq * tq].copy_(lse0.flatten())
        guard = fake_cuda_mod.no_host_sync() if step else pytest.MonkeyPatch()
        try:
            if with_lse:
                res = plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse, sinks=sinks)
            else:
                res = plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, sinks=sinks)
        finally:
            guard.undo()
        assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
        want_out, want_lse = _expected(out0, lse0, sinks)
        if with_lse:
            assert res[0] is out and res[1] is lse and torch.allclose(lse, want_lse)
        else:
            assert res is out
            scratch = plan._sink_lse
            assert set(_lse_ptrs(fake_cuda)) == {scratch.data_ptr()}
            assert torch.allclose(scratch[:hq * tq].view(hq, tq), want_lse)
        assert torch.equal(out, want_out)
        sinks = sinks * 2 - 1                   # new values for the next step, same tensor signature


def test_plan_attend_and_per_step_scratch(fake_cuda, applied, monkeypatch):
    """A plan made without sinks=True allocates the step's LSE; attend applies sinks too."""
    q, k, v, cq, ck = _plain()
    plan = make_plan(monkeypatch, max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=64, max_seqlen_q=7,
                     max_seqlen_k=12, causal=True, arch="sm_80")
    assert plan._sink_lse is None
    sinks = torch.zeros(4)
    plan.run(q, k, v, cq, ck, sinks=sinks)
    assert len(applied) == 1 and applied[0]["lse"].shape == (4, 10)
    with pytest.raises(ValueError, match="sinks must have shape"):
        plan.run(q, k, v, cq, ck, sinks=torch.zeros(5))
    inf_sink = torch.tensor([0.0, float("inf"), 0.0, 0.0])
    plan.run(q, k, v, cq, ck, sinks=inf_sink)                 # values are not read without the switch
    with monkeypatch.context() as m:
        m.setenv(V.CHECK_INPUTS_ENV, "1")
        with pytest.raises(ValueError, match=r"sinks\[1\] = inf"):
            plan.run(q, k, v, cq, ck, sinks=inf_sink)
    applied.clear()
    plan.schedule(cq, ck)
    lse = torch.zeros(4, 10)
    plan.attend(q, k, v, cq, ck, lse=lse, sinks=sinks)
    assert len(applied) == 1 and applied[0]["lse"] is lse and torch.allclose(lse, torch.full((4, 10), math.log(2)))


# ----------------------------------------------------------------------------- torch ops and compat
def test_op_schema_has_sinks():
    for op in (torch.ops.kernelgen.varlen_attention.default, torch.ops.kernelgen.varlen_attention_out.default):
        arg = next(a for a in op._schema.arguments if a.name == "sinks")   # alibi_slopes follows it
        assert str(arg.type) == "Optional[Tensor]" and arg.default_value is None


def test_op_fake_impl_takes_sinks():
    with FakeTensorMode():
        q, k, v, cu = packed(device="cuda")
        o, lse = torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, return_lse=True,
                                                      sinks=torch.empty(4, device="cuda"))
        assert o.shape == (20, 4, 64) and lse.shape == (4, 20)
        with pytest.raises(ValueError, match="sinks must have shape"):
            torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, sinks=torch.empty(3, device="cuda"))
        with pytest.raises(TypeError, match="sinks must have dtype float32"):
            torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, sinks=torch.empty(4, device="cuda",
                                                                                    dtype=BF16))
        # the fake impl checks as varlen_attention does (it had its own, shorter copy of the check)
        with pytest.raises(ValueError, match="sinks must have 1 dimensions"):
            torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, sinks=torch.empty(4, 1, device="cuda"))
        with pytest.raises(ValueError, match="sinks must be on"):
            torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, sinks=torch.empty(4, device="cpu"))


def test_op_passes_sinks_down(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", rec)
    q, k, v, cu = packed()
    s = torch.zeros(4)
    torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, sinks=s)
    assert rec.last["sinks"] is s
    ops.varlen_attention(q, k, v, cu, cu, sinks=s)          # eager entry
    assert rec.last["sinks"] is s


def test_compat_s_aux_alias(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", rec)
    q, k, v, cu = packed()
    s = torch.zeros(4)
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, s_aux=s)
    assert rec.last["sinks"] is s
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, sinks=s)
    assert rec.last["sinks"] is s
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13)
    assert rec.last["sinks"] is None
    with pytest.raises(ValueError, match="s_aux"):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, s_aux=s, sinks=s)
    kc = torch.randn(2, 16, 2, 64).to(BF16)
    compat.flash_attn_with_kvcache(q[:2].view(2, 1, 4, 64), kc, kc, cache_seqlens=5, s_aux=s)
    assert rec.last["sinks"] is s


def test_opcheck_with_sinks(monkeypatch):
    """The registered ops with sinks pass torch.library.opcheck (schema, fake impl, aliasing) on a
    CPU stand-in of api.varlen_attention (the float64 reference, which takes sinks)."""
    from test_ops_compat import reference_api

    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", reference_api)
    q, k, v, cu = packed()
    s = torch.tensor([0.5, NEG_INF, -1.0, 3.0])
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention.default, (q, k, v, cu),
                              dict(cu_seqlens_k=cu, causal=True, return_lse=return_lse, sinks=s))
        out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention_out.default, (out, q, k, v, cu),
                              dict(cu_seqlens_k=cu, causal=True, return_lse=return_lse, sinks=s))
    o, lse = ops.varlen_attention(q, k, v, cu, cu, causal=True, return_lse=True, sinks=s)
    o0, lse0 = ops.varlen_attention(q, k, v, cu, cu, causal=True, return_lse=True)
    assert torch.allclose(lse, torch.logaddexp(lse0, s[:, None]), atol=1e-5)


def test_apply_records_no_autograd_for_learnable_sinks():
    """gpt-oss keeps its sinks as an nn.Parameter (requires_grad): outside no_grad, apply must not
    tie out / lse to an autograd graph.  With the plan's preallocated LSE scratch a recorded copy
    made the scratch itself carry the graph, so every later step chained onto the previous one
    (unbounded growth, and the next step's LSE a function of the last step's sinks)."""
    sinks = torch.nn.Parameter(torch.tensor([0.5, NEG_INF]))
    base = torch.zeros(2 * 3)                          # like AttentionPlan._sink_lse
    for _ in range(2):
        out = torch.ones(3, 2, 8, dtype=BF16)
        lse = base[:6].view(2, 3)
        S.apply(out, lse, sinks, torch.tensor([0, 3], dtype=torch.int32))
        assert not out.requires_grad and out.grad_fn is None
        assert not lse.requires_grad and base.grad_fn is None


def test_ops_entry_goes_through_the_op_when_sinks_require_grad(monkeypatch):
    """Autograd records when the sinks require grad (a learnable nn.Parameter): the Python entry
    takes the registered op, whose backward raises the clear forward-only error."""
    rec = Recorder()
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", rec)
    q, k, v, cu = packed()
    s = torch.nn.Parameter(torch.zeros(4))
    assert ops._through_op(q, k, v, s)
    assert not ops._through_op(q, k, v, s.detach())
    with torch.no_grad():
        assert not ops._through_op(q, k, v, s)


def test_plan_made_in_inference_mode_steps_outside_it(fake_cuda, applied, monkeypatch):
    """The LSE scratch of a plan constructed under torch.inference_mode is a normal tensor: a step
    outside inference mode (under no_grad) rescales into it in place (an inference tensor refuses
    that: "Inplace update to inference tensor outside InferenceMode")."""
    q, kc, vc, cu_q, used, pt = paged_inputs([300, 1, 1, 3, 1, 0], [900, 40, 500, 7, 1, 0])   # a mixed step
    hq = q.shape[1]
    with torch.inference_mode():
        plan = make_plan(monkeypatch, max_batch=16, num_heads_q=hq, num_heads_kv=kc.shape[2], head_dim=q.shape[2],
                         max_total_q=4096, max_seqlen_q=max(QLENS), max_seqlen_k=max(CTX), paged=True, causal=True,
                         sinks=True)
    assert not plan.sinks_fused and not plan._sink_lse.is_inference()
    with torch.no_grad():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, sinks=torch.zeros(hq))
    with torch.inference_mode():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, sinks=torch.zeros(hq))
    assert len(applied) == 2 and all(c["lse"].data_ptr() == plan._sink_lse.data_ptr() for c in applied)


def test_apply_takes_inference_tensors_outside_inference_mode():
    """Buffers made under torch.inference_mode (a serving loop's preallocated out / lse) and a call
    outside it: the kernels write them through pointers, so the rescale must not refuse them."""
    with torch.inference_mode():
        out, lse = torch.ones(3, 2, 8, dtype=BF16), torch.zeros(2, 3)
    with torch.no_grad():
        S.apply(out, lse, torch.tensor([0.0, NEG_INF]), torch.tensor([0, 3], dtype=torch.int32))
    assert torch.all(out[:, 0] == 0.5) and torch.all(out[:, 1] == 1)
    assert torch.allclose(lse[0], torch.full((3,), math.log(2))) and torch.all(lse[1] == 0)


# ----------------------------------------------------------------------------- NVRTC builds
def test_sink_code_only_in_sink_sources():
    """Without sinks the sources hold no sink code (the plain kernels are unchanged); with sinks
    every attention mainloop's direct-store epilogue and the combine hold the rescale."""
    import dataclasses
    from test_alibi_cpu import COMPILE
    from kernelgen.jit import render
    from kernelgen.kernels.spec import CombineSpec
    for spec in COMPILE.values():
        plain, with_sinks = render.render(spec), render.render(dataclasses.replace(spec, sinks=True))
        assert "sink" not in plain.lower()
        assert "long long sinks;" in with_sinks and with_sinks.count("sink_rescale(") == 2   # definition + one use
    plain = render.render(CombineSpec("sm_90a", "bf16", 128))
    with_sinks = render.render(CombineSpec("sm_90a", "bf16", 128, sinks=True))
    assert "sink" not in plain.lower() and "p.sinks" in with_sinks


SINK_COMPILE = ["sm80_prefill", "sm80_mainloop_on_sm90a_split", "sm80_decode_pack_split_paged", "sm80_keys_as_rows",
                "sm90a_prefill_pingpong", "sm90a_paged_split_softcap_local"]


@pytest.mark.parametrize("name", SINK_COMPILE)
def test_sink_variants_compile_without_spills(name):
    """The sink variants (sm_80 16/128-row tiles, keys-as-rows, the sm_80 mainloop for sm_90a,
    Hopper ping-pong and paged split soft-cap local) build with no spill, within the register budget."""
    import dataclasses
    from test_alibi_cpu import COMPILE
    from kernelgen.jit import compiler, render
    spec = dataclasses.replace(COMPILE[name], sinks=True)
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
    assert r["registers"] * spec.num_threads <= 65536 // spec.tile.min_blocks, (spec.name, r)
    if spec.mainloop == "sm90a":
        for code in ("C7508", "C7510", "C7519"):   # setmaxnreg honoured, wgmmas kept asynchronous
            assert code not in res.log, res.log


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_sink_combine_compiles_without_spills(arch):
    from kernelgen.jit import compiler, render
    from kernelgen.kernels.spec import CombineSpec
    spec = CombineSpec(arch, "bf16", 128, sinks=True)
    r = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r


def test_warmup_specs_with_sinks():
    """``kernelgen warmup --sinks`` (catalog.warmup_specs(sinks=True)): the plain specs plus the
    sink variants of the single-class attention and combine kernels, which cover what the decider
    gives a single-class call with sinks."""
    import dataclasses
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from test_decide import H200, sig
    kw = dict(head_dims=(128,), dtypes=("bf16",), phases=("prefill", "decode"), gqas=(4,), paged=(False, True))
    plain, with_sinks = warmup_specs("sm_90a", **kw), warmup_specs("sm_90a", **kw, sinks=True)
    extra = [s for s in with_sinks if s not in plain]
    assert set(plain) <= set(with_sinks) and extra
    assert all(s.kind in ("attention", "combine") and s.sinks for s in extra)
    assert not any(getattr(s, "sinks", False) for s in plain)
    call = sig(num_heads_q=32, num_heads_kv=8, max_seqlen_q=1, max_seqlen_k=32768, batch=128, rows=128,
               paged=True, page_size=16, sinks=True)
    r = decide.decide(call, H200)
    assert r.sinks_fused and set(r.specs) <= set(with_sinks), [s.name for s in r.specs]


@pytest.mark.parametrize("num_splits", [1, 3])
def test_single_class_plan_runs_the_sink_kernels(fake_cuda, applied, monkeypatch, num_splits):
    """A single-class plan made with sinks=True runs the sink kernels: run (validating path, then
    the fast path with no host sync) and attend pass the sinks' address (a new tensor: its own
    address), a step without sinks passes the plan's -inf tensor; no rescale, no LSE scratch."""
    q, k, v, cq, ck = _plain(2000)
    plan = make_plan(monkeypatch, max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=64, max_seqlen_q=7,
                     max_seqlen_k=1988, causal=True, arch="sm_80", sinks=True, num_splits=num_splits)
    assert (plan.combine is not None) == (num_splits > 1)
    assert plan.sinks_fused and plan._sink_lse is None and plan.recipe.sinks_fused
    assert torch.all(torch.isneginf(plan._no_sinks)) and plan._no_sinks.shape == (4,)
    kinds = ["scheduler", "attention_sinks"] + (["combine_sinks"] if num_splits > 1 else [])
    sinks, sinks2 = torch.zeros(4), torch.ones(4)
    for i, (s, want) in enumerate([(sinks, sinks), (sinks, sinks), (sinks2, sinks2), (None, plan._no_sinks)]):
        fake_cuda.clear()
        guard = fake_cuda_mod.no_host_sync() if i == 1 else pytest.MonkeyPatch()
        try:
            out = plan.run(q, k, v, cq, ck, sinks=s)
        finally:
            guard.undo()
        assert torch.is_tensor(out) and out.shape == (10, 4, 64)
        assert fake_cuda.kinds() == kinds
        assert {launch.fields()["sinks"] for launch in fake_cuda.launches[1:]} == {want.data_ptr()}
    fake_cuda.clear()
    out, lse = plan.run(q, k, v, cq, ck, sinks=sinks, return_lse=True)
    assert lse.shape == (4, 10) and set(_lse_ptrs(fake_cuda)) == {lse.data_ptr()}
    plan.schedule(cq, ck)
    fake_cuda.clear()
    plan.attend(q, k, v, cq, ck, sinks=sinks2)
    assert fake_cuda.kinds() == kinds[1:]
    assert {launch.fields()["sinks"] for launch in fake_cuda.launches} == {sinks2.data_ptr()}
    assert applied == []
