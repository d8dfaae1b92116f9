"""GPU: the fused mixed-batch launch (prefill tiles and one-warp decode tiles in one persistent
kernel, two scheduler request classes, combine for the split decode rows).  Float64 reference on
fresh random inputs, NaN-poisoned outputs, both layouts, paged and packed K/V, empty requests."""
import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.front.plan import AttentionPlan
from kernelgen.jit import runtime
from kernelgen.launch import fused

from gpu_helpers import (capture, check, check_rows, make_packed, plan_buffers, prepared,  # noqa: E402
                         replay, write_lengths)
from test_paged_decode_gpu import make_paged  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16


def fused_loaded() -> bool:
    return any(k.spec.kind == "fused" for k in runtime.loaded_kernels())


def expect_mixed_launch(arch, single=False):
    """The last call's prepared launches: the fused kernel, on sm_90a without a forced arch the
    Hopper one (the long class on the wgmma/TMA variant, fwd_fused_sm90), else the sm_80 one;
    ``single``: neither (a threshold whose short tiles are not one-warp decode tiles)."""
    prep = prepared()
    if single:
        assert not isinstance(prep, (fused.PreparedFusedCall, fused.PreparedPairCall)), type(prep)
        return
    assert isinstance(prep, fused.PreparedFusedCall), type(prep)
    hopper = arch is None and torch.cuda.get_device_capability() == (9, 0)
    assert prep.kernels.variants.fused.hopper == hopper
    assert isinstance(prep.pair, fused.HopperPairLaunch) == hopper
    assert ("_wgmma" in prep.pair.name) == hopper
    assert fused_loaded()


def mixed_lengths(rng, n_decode=40, n_prefill=3, max_ctx=5000, spec_tokens=4):
    """Chunked prefills (with earlier context), decodes, short speculative steps and empty requests,
    shuffled."""
    qlens = [int(x) for x in rng.integers(17, 900, size=n_prefill)] + [1] * n_decode
    qlens += [int(x) for x in rng.integers(2, spec_tokens + 1, size=4)] + [0, 0]
    klens = [q + int(rng.integers(0, max_ctx)) for q in qlens]
    klens[-1] = 0                                  # an empty request with no context either
    klens[n_prefill] = 1                           # a decode that sees one key
    perm = rng.permutation(len(qlens))
    return [qlens[i] for i in perm], [klens[i] for i in perm]


@pytest.mark.parametrize("arch", ["sm_80", None])
@pytest.mark.parametrize("layout", ["soa", "aos"])
@pytest.mark.parametrize("hq,hkv,d,dtype,causal", [(32, 8, 128, BF16, True), (8, 1, 128, FP16, True),
                                                    (16, 16, 64, BF16, False), (28, 4, 128, BF16, True)])
def test_fused_paged_mixed_matches_reference(layout, hq, hkv, d, dtype, causal, arch):
    rng = np.random.default_rng(hq * 7 + d + (layout == "aos"))
    qlens, klens = mixed_lengths(rng)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=hq + d, dtype=dtype)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=dtype, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                        page_table=pt, causal=causal, return_lse=True, out=out,
                                        metadata_layout=layout, arch=arch)
    torch.cuda.synchronize()
    expect_mixed_launch(arch)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal)
    check(o, lse, ref, ref_lse, dtype)


@pytest.mark.parametrize("arch", ["sm_80", None])
@pytest.mark.parametrize("threshold", [1, 4, 16])
def test_fused_packed_kv_forced_threshold(threshold, arch):
    """short_query_tokens forces the mixed launch on packed K/V and moves the class boundary; at 16
    tokens (64 packed rows) the short tiles are not one-warp decode tiles: one class."""
    rng = np.random.default_rng(threshold)
    hq, hkv, d = 32, 8, 128
    qlens, klens = mixed_lengths(rng, n_decode=20, spec_tokens=16)
    q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, threshold)
    out = torch.full_like(q, float("nan"))
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, return_lse=True,
                                        out=out, short_query_tokens=threshold, arch=arch)
    torch.cuda.synchronize()
    expect_mixed_launch(arch, single=threshold == 16)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    check(o, lse, ref, ref_lse, BF16)


@pytest.mark.parametrize("arch,page_size", [("sm_80", None), (None, None), (None, 16)])
def test_fused_plan_graph_replays_with_new_mixes(arch, page_size):
    """One captured mixed step replayed with new mixes of prefills and decodes (and padding past the
    runtime batch); the queues reset for the next replay.  arch "sm_80": the sm_80 fused launch;
    None on sm_90a: the Hopper fused launch (its long variant gathering K/V rows, or by TMA when
    the plan knows the page size)."""
    hq, hkv, d, ps, cap = 32, 8, 128, 16, 64
    max_ctx, max_tq = 4096, 2048
    kc, vc, q, cu_q, used, pt, out, _ = plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, cache_seed=0)
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, max_total_q=max_tq,
                         max_seqlen_q=1024, max_seqlen_k=max_ctx, paged=True, causal=True, arch=arch,
                         page_size=page_size)
    hopper = arch is None and torch.cuda.get_device_capability() == (9, 0)
    assert isinstance(plan.fused, fused.FusedKernels) and plan.hopper == hopper
    assert plan.fused.variants.fused.hopper == hopper
    rng = np.random.default_rng(11)

    def new_step():
        batch = int(rng.integers(2, cap + 1))
        n_pre = int(rng.integers(0, 3))
        lq = np.zeros(cap, dtype=np.int64)
        lq[:batch] = 1
        lq[:n_pre] = rng.integers(5, 600, size=n_pre)
        lq[rng.random(cap) < 0.05] = 0
        lq[batch:] = 0
        ctx = np.zeros(cap, dtype=np.int64)
        ctx[:batch] = lq[:batch] + rng.integers(0, max_ctx - 600, size=batch)
        write_lengths(rng, lq, ctx, cu_q, used, pt)
        q.copy_(torch.randn(max_tq, hq, d, device="cuda").to(BF16))
        out.fill_(float("nan"))
        return batch, int(lq.sum())

    def run():
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)

    new_step()
    run()
    torch.cuda.synchronize()
    assert plan.fused is not None
    graph = capture(run, warm=0)
    for _ in range(12):
        batch, tq = new_step()
        replay(graph)
        k, v, cu_k = gather_paged(kc, vc, pt[:batch], used[:batch])
        ref, _ = attention_reference(q[:tq], k, v, cu_q[: batch + 1], cu_k, causal=True)
        check_rows(out, ref, tq, 2e-2)


def test_unfused_when_switched_off():
    """short_query_tokens=0 keeps the single-class launch (the pre-fusion path) and stays right."""
    rng = np.random.default_rng(5)
    qlens, klens = mixed_lengths(rng, n_decode=10)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 32, 8, 128, 128, 16, seed=9)
    before = {id(k) for k in runtime.loaded_kernels() if k.spec.kind == "fused"}
    o = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used, page_table=pt,
                                   causal=True, short_query_tokens=0)
    torch.cuda.synchronize()
    assert {id(k) for k in runtime.loaded_kernels() if k.spec.kind == "fused"} == before
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    r = ref.to(BF16).double()
    assert ((o.double() - r).abs() <= 2e-2 + 2e-2 * r.abs()).all()


@pytest.mark.parametrize("window,cap", [((300, 0), 0.0), ((-1, -1), 30.0)])
def test_mixed_on_hopper_with_window_and_softcap(window, cap):
    """The Hopper fused launch with a sliding window (which the sm_80 fused launch does not take)
    and with soft-cap, against the reference."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90a device")
    rng = np.random.default_rng(41 + int(cap))
    qlens, klens = mixed_lengths(rng)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 32, 8, 128, 128, 16, seed=44)
    out = torch.full((q.shape[0], 32, 128), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                        page_table=pt, causal=True, return_lse=True, out=out, window_size=window,
                                        softcap=cap)
    torch.cuda.synchronize()
    expect_mixed_launch(None)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=True, window_size=window, softcap=cap,
                                                  error_bounds=True)
    check(o, lse, ref, ref_lse, BF16, bound=bound, lse_bound=lb)


def _hopper_only():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90a device")


@pytest.mark.parametrize("short_ctas", [0, 1, 33, 132])
def test_hopper_fused_any_split_of_the_sms(short_ctas, monkeypatch):
    """Every split of the SMs between the queues gives the reference's result: 0 (every CTA starts
    on the long queue; the consumer warps take the decode tiles after it), 1, the default share,
    and all (every CTA runs decode tiles first, then long tiles).  A plan run twice checks that the
    last CTA out resets both queues."""
    _hopper_only()
    monkeypatch.setenv("KERNELGEN_MIXED_SHORT_CTAS", str(short_ctas))
    rng = np.random.default_rng(100 + short_ctas)
    qlens, klens = mixed_lengths(rng, n_decode=150, n_prefill=3, max_ctx=6000)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=3 + short_ctas)
    plan = AttentionPlan(max_batch=len(qlens), num_heads_q=hq, num_heads_kv=hkv, head_dim=d, max_total_q=q.shape[0],
                         max_seqlen_q=max(qlens), max_seqlen_k=max(klens), paged=True, causal=True)
    assert plan.fused.variants.fused.hopper and plan.fused.short_ctas == short_ctas
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    for _ in range(2):
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
        lse = torch.full((hq, q.shape[0]), float("nan"), dtype=torch.float32, device="cuda")
        plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, lse=lse)
        torch.cuda.synchronize()
        check(out, lse, ref, ref_lse, BF16)
    sem = [int(x) for x in plan.metadata[:4].tolist()], [int(x) for x in plan.metadata_short[:4].tolist()]
    assert sem[0][0] == 0 and sem[0][3] == 0 and sem[1][0] == 0, f"queues not reset: {sem}"


@pytest.mark.parametrize("d,page_size", [(64, 16), (128, 256)])
def test_hopper_fused_head_dims_and_tma_pages(d, page_size):
    """The Hopper fused launch at head dim 64 (12 decode slices in a CTA that starts on the short
    queue) and with 256-token pages (the long variant loads K/V by TMA)."""
    _hopper_only()
    rng = np.random.default_rng(d + page_size)
    qlens, klens = mixed_lengths(rng, n_decode=60, max_ctx=3000)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 16, 4, d, d, page_size, seed=d)
    out = torch.full((q.shape[0], 16, d), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,
                                        page_table=pt, causal=True, return_lse=True, out=out)
    torch.cuda.synchronize()
    expect_mixed_launch(None)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    check(o, lse, ref, ref_lse, BF16)


def test_pair_path_still_right():
    """The classes in turn (``fused.build_pair``), the fallback where the Hopper fused kernel does
    not apply, run directly against the reference."""
    _hopper_only()
    from kernelgen.launch import bind
    from kernelgen.selection import arguments, decide, heuristics

    rng = np.random.default_rng(77)
    qlens, klens = mixed_lengths(rng)
    hq, hkv, d = 32, 8, 128
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=77)
    pv = heuristics.choose_pair("sm_90a", "bf16", d, d, num_heads_q=hq, num_heads_kv=hkv, mask="causal",
                                max_seqlen_q=max(qlens), max_seqlen_k=max(klens), paged=True, short_max_q=4,
                                page_size=16)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    lse = torch.full((hq, q.shape[0]), float("nan"), dtype=torch.float32, device="cuda")
    checked = arguments.varlen_call(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used, page_table=pt,
                                    out=out, causal=True, window_size=(-1, -1), softcap=0.0, softmax_scale=None,
                                    num_splits=0, pack_gqa=None, metadata_layout="soa", sort=True, head_swizzle=True,
                                    short_query_tokens=None, arch=None)
    dev = torch.cuda.current_device()
    recipe = decide.recipe(pv, checked.signature, runtime.device(dev))
    kernels = bind.bind(recipe, runtime.load(recipe.specs, dev))
    prep = fused.build_pair(kernels, layout=recipe.workspace, batch=len(qlens), q=q, k=kc, v=vc, out=out, lse=lse,
                            page_table=pt, scale=d ** -0.5, window=(-1, 0), softcap=0.0, return_lse=True,
                            fixed_base=None, sizes=checked.sizes)
    prep.run(q, kc, vc, cu_q, None, used, pt, out, lse)
    torch.cuda.synchronize()
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    check(out, lse, ref, ref_lse, BF16)
