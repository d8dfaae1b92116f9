"""The fused mixed-batch launch on the CPU (CUDA stubbed, tests/fake_cuda.py): when it is chosen,
the four launches and their parameters (two scheduler classes, two AttnParams, the combine),
the plan path, and the validation of ``short_query_tokens``.  On the fake H200 without a forced
arch the fused launch is the Hopper one (``fused_sm90``: the long class on the wgmma/TMA variant,
``params.FUSED_TMA_PARAMS``); the classes in turn (``heuristics.choose_pair``) remain the fallback
where it does not apply (head_dim_v above 128), covered here directly and through the API.
tests/test_fused_hopper_cpu.py has the Hopper fused launch's parameter layout and NVRTC builds."""
import numpy as np
import pytest
import torch

import fake_cuda as FC
import kernelgen
from kernelgen.front import api
from kernelgen.jit import runtime
from kernelgen.kernels import metadata
from kernelgen.kernels.params import FUSED_TMA_PARAMS
from kernelgen.launch import bind, fused
from kernelgen.selection import arguments, decide, heuristics

BF16 = torch.bfloat16
HQ, HKV, D, PS = 32, 8, 128, 16


def paged_inputs(qlens, ctx):
    need = [-(-c // PS) for c in ctx]
    pt = torch.zeros(len(qlens), max(need), dtype=torch.int32)
    kc = torch.randn(sum(need) + 1, PS, HKV, D).to(BF16)
    vc = torch.randn_like(kc)
    q = torch.randn(sum(qlens), HQ, D).to(BF16)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32)
    used = torch.tensor(ctx, dtype=torch.int32)
    return q, kc, vc, cu_q, used, pt


QLENS, CTX = [300, 1, 1, 3, 2048, 1, 0], [900, 40, 5000, 7, 2048, 1, 0]


def call(q, kc, vc, cu_q, used, pt, **kw):
    return kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                      causal=True, **kw)


def test_paged_mixed_call_takes_the_fused_launch(fake_cuda):
    """The fused launch: the sm_80 path's mixed batch (arch="sm_80" on the fake H200, whose
    automatic choice is test_mixed_call_on_sm90_takes_the_hopper_fused_launch's)."""
    args = paged_inputs(QLENS, CTX)
    call(*args, arch="sm_80")
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused", "combine"]
    s_long, s_short, f, c = fake_cuda.launches
    long_f, short_f = s_long.fields(), s_short.fields()
    thr = heuristics.short_query_tokens(HQ, HKV)
    assert thr == 4
    assert (long_f["class_min_q"], long_f["class_max_q"]) == (thr + 1, 2 ** 31 - 1)
    assert (short_f["class_min_q"], short_f["class_max_q"]) == (0, thr)
    assert (long_f["block_m"], long_f["pack_factor"], long_f["max_splits"]) == (128, 1, 1)
    assert (short_f["block_m"], short_f["pack_factor"]) == (16, HQ // HKV) and short_f["max_splits"] > 1
    assert long_f["batch"] == short_f["batch"] == len(QLENS) == long_f["capacity"]
    assert long_f["metadata"] != short_f["metadata"]
    a, b = f.fields().values()
    assert a["metadata"] == long_f["metadata"] and b["metadata"] == short_f["metadata"]
    assert a["row_splits"] == b["row_splits"] != 0        # the long class records its rows' counts
    assert a["out_accum"] == 0 and b["out_accum"] != 0 and b["lse_accum"] != 0
    assert a["q"] == b["q"] == args[0].data_ptr() and a["out"] == b["out"]
    assert f.block == (128, 1, 1) and f.grid == (FC.FUSED_GRID, 1, 1)
    spec = [k.spec for k in kernelgen.jit.runtime.loaded_kernels() if k.spec.kind == "fused"][0]
    assert f.smem == spec.smem_bytes() and spec.short.pack_gqa and spec.long.row_splits
    cf = c.fields()
    assert cf["metadata"] == short_f["metadata"] and cf["row_splits"] == b["row_splits"]
    # the workspace holds both metadata buffers and the partials, disjoint
    md_bytes = 4 * metadata.buffer_ints(len(QLENS))
    lo, hi = sorted([long_f["metadata"], short_f["metadata"]])
    assert hi - lo >= md_bytes and b["out_accum"] >= short_f["metadata"] + md_bytes


@pytest.mark.parametrize("arch,kinds", [("sm_80", ["scheduler", "scheduler", "fused", "combine"]),
                                        (None, ["scheduler", "scheduler", "fused_sm90", "combine"])])
def test_repeated_signature_reuses_the_prepared_fused_call(fake_cuda, arch, kinds):
    args = paged_inputs(QLENS, CTX)
    call(*args, arch=arch)
    first = [x.fields() for x in fake_cuda.launches if x.kind == "scheduler"]
    fake_cuda.clear()
    call(*args, arch=arch)
    assert fake_cuda.kinds() == kinds
    again = [x.fields() for x in fake_cuda.launches if x.kind == "scheduler"]
    drop = ("metadata",)  # a new workspace each call
    assert [{k: v for k, v in d.items() if k not in drop} for d in first] == \
        [{k: v for k, v in d.items() if k not in drop} for d in again]


@pytest.mark.parametrize("kw,expected", [
    ({"short_query_tokens": 0}, ["scheduler", "attention"]),     # off: one class, prefill tiles
    ({"num_splits": 1}, ["scheduler", "attention"]),             # a forced split count: single class
    ({"pack_gqa": False}, ["scheduler", "attention"]),
])
@pytest.mark.parametrize("arch", ["sm_80", None])
def test_fused_switched_off(fake_cuda, kw, expected, arch):
    """One class; on the (fake) H200 without an arch its prefill tiles are the Hopper kernel's."""
    call(*paged_inputs(QLENS, CTX), arch=arch, **kw)
    assert fake_cuda.kinds() == (expected if arch else ["scheduler", "attention_sm90"])


def test_packed_kv_only_when_forced(fake_cuda):
    q = torch.randn(sum(QLENS), HQ, D).to(BF16)
    k = torch.randn(sum(CTX), HKV, D).to(BF16)
    v = torch.randn_like(k)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(QLENS)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(CTX)]), dtype=torch.int32)
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(QLENS), max(CTX), causal=True)
    assert "fused" not in fake_cuda.kinds()
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(QLENS), max(CTX), causal=True, short_query_tokens=3,
                               arch="sm_80")
    assert fake_cuda.kinds()[:3] == ["scheduler", "scheduler", "fused"]
    assert fake_cuda.launches[1].fields()["class_max_q"] == 3
    fake_cuda.clear()     # the fake H200's automatic choice: the Hopper fused launch (K/V maps of rank 3)
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(QLENS), max(CTX), causal=True, short_query_tokens=3)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    assert fake_cuda.launches[1].fields()["class_max_q"] == 3
    f = fake_cuda.launches[2]
    assert [m[0] for m in f.maps()] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    assert f.maps()[1][1:] == ((D, HKV, sum(CTX)), (2 * D, 2 * D * HKV), (64, 1, 128))
    fl = f.fields()
    assert fl["long"]["cu_seqlens_k"] == fl["short"]["cu_seqlens_k"] == cu_k.data_ptr()
    assert fl["long"]["page_table"] == fl["short"]["page_table"] == 0
    spec = [k.spec for k in kernelgen.jit.runtime.loaded_kernels() if k.spec.kind == "fused" and k.spec.hopper][-1]
    assert not spec.long.paged and spec.long.sm90_opts == "p" and spec.template == "attention/fwd_fused_sm90.cu.j2"


def test_mixed_call_on_sm90_takes_the_hopper_fused_launch(fake_cuda):
    """On sm_90a without a forced arch a mixed batch runs both schedulers, ONE Hopper fused launch
    (the long class on the wgmma/TMA variant, unsplit and recording row_splits; the short class on
    the sm_80 one-warp keys-as-rows decode variant, pack-GQA and split-KV), then the combine; with a sliding
    window too (which the sm_80 fused launch does not take)."""
    args = paged_inputs(QLENS, CTX)
    q, kc, vc, cu_q, used, pt = args
    out = call(*args)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    s_long, s_short, f, c = fake_cuda.launches
    lf, sf, ff, cf = s_long.fields(), s_short.fields(), f.fields(), c.fields()
    af, bf = ff["long"], ff["short"]
    thr = heuristics.short_query_tokens(HQ, HKV)
    assert (lf["class_min_q"], lf["class_max_q"]) == (thr + 1, 2 ** 31 - 1)
    assert (sf["class_min_q"], sf["class_max_q"]) == (0, thr)
    assert (lf["block_m"], lf["block_n"], lf["max_splits"], lf["num_ctas"]) == (128, 128, 1, 132)
    # the short class's scheduler counts 8-row tiles: the keys-as-rows decode tile (heuristics.SM90_FUSED_SHORT_ROWS)
    assert (sf["block_m"], sf["block_n"], sf["pack_factor"]) == (8, 16, HQ // HKV) and sf["max_splits"] > 1
    assert lf["wave_ctas"] == sf["wave_ctas"] == 0    # no wave rounding in a fused launch
    assert af["metadata"] == lf["metadata"] != bf["metadata"] == sf["metadata"] == cf["metadata"]
    assert af["row_splits"] == bf["row_splits"] == cf["row_splits"] != 0
    assert af["out_accum"] == af["lse_accum"] == 0
    assert bf["out_accum"] == cf["out_accum"] != 0 and bf["lse_accum"] == cf["lse_accum"] != 0
    assert af["q"] == bf["q"] == q.data_ptr() and af["out"] == bf["out"] == cf["out"] == out.data_ptr()
    assert (af["k"], af["page_table"], af["seqused_k"]) == (bf["k"], bf["page_table"], bf["seqused_k"]) == \
        (kc.data_ptr(), pt.data_ptr(), used.data_ptr())
    assert af["accum_split_stride"] == 0 and bf["accum_split_stride"] == cf["accum_split_stride"] != 0
    assert ff["short_ctas"] == FC.default_short_ctas()     # a share of the 132 SMs (40)
    mq, mk, mv = f.maps(kv_rank=4)
    assert mq == (q.data_ptr(), (D, HQ, sum(QLENS)), (2 * D, 2 * D * HQ), (64, 1, 128))
    # the page size is known from the cache: K/V by TMA, boxes of one 16-token page
    assert mk == (kc.data_ptr(), (D, HKV, PS, kc.shape[0]), (2 * D, 2 * D * HKV, 2 * D * HKV * PS), (64, 1, PS, 1))
    assert mv[0] == vc.data_ptr() and mv[1:] == mk[1:]
    spec = [k.spec for k in kernelgen.jit.runtime.loaded_kernels() if k.spec.kind == "fused"][-1]
    assert spec.hopper and spec.mainloop == "sm90a" and spec.template == "attention/fwd_fused_sm90.cu.j2"
    assert spec.long.row_splits and spec.long.paged and not spec.long.split and spec.long.sm90_opts == "p"
    assert spec.short.pack_gqa and spec.short.split and spec.short.tile.num_warps == 1
    # 12 decode slices of 2 * 2 * 16 * 272 = 17408 bytes (Q in registers) + 1024 of alignment slack
    assert f.block == (384, 1, 1) and f.grid == (132, 1, 1) and f.smem == spec.smem_bytes() == 209920
    fake_cuda.clear()
    call(*args, window_size=(256, 0))
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    ff = fake_cuda.launches[2].fields()
    assert ff["long"]["window_left"] == ff["short"]["window_left"] == 256
    assert ff["long"]["window_right"] == ff["short"]["window_right"] == 0
    assert fake_cuda.launches[0].fields()["window_left"] == fake_cuda.launches[1].fields()["window_left"] == 256
    # paged head dim 96: the Hopper fused launch too (rows padded to 128 columns on the long side, the
    # keys-as-rows decode tile at 96 on the short side)
    fake_cuda.clear()
    kernelgen.varlen_attention(q[..., :96].contiguous(), kc[..., :96].contiguous(), vc[..., :96].contiguous(), cu_q,
                               None, max(QLENS), max(CTX), seqused_k=used, page_table=pt, causal=True)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    spec = [k.spec for k in kernelgen.jit.runtime.loaded_kernels() if k.spec.kind == "fused"][-1]
    assert spec.hopper and spec.long.head_dim == 96 and spec.long.paged and spec.short.tile.keys_as_rows


def test_mixed_call_without_short_splits_has_no_combine(fake_cuda):
    """Few keys (at most 64): the short class does not split, so the Hopper fused launch is the
    last one, the long class records no row_splits and the short class has no partials."""
    qlens, ctx = [40, 1, 1, 3], [64, 10, 64, 7]
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    out = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(ctx), seqused_k=used, page_table=pt,
                                     causal=True)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90"]
    s_long, s_short, f = fake_cuda.launches
    assert s_short.fields()["max_splits"] == 1 and s_long.fields()["max_splits"] == 1
    ff = f.fields()
    for c in ("long", "short"):
        assert (ff[c]["row_splits"], ff[c]["out_accum"], ff[c]["lse_accum"]) == (0, 0, 0), c
        assert ff[c]["out"] == out.data_ptr() and ff[c]["accum_split_stride"] == 0
    assert ff["long"]["metadata"] == s_long.fields()["metadata"] != ff["short"]["metadata"] == \
        s_short.fields()["metadata"]
    spec = [k.spec for k in kernelgen.jit.runtime.loaded_kernels() if k.spec.kind == "fused"][-1]
    assert spec.hopper and not spec.long.row_splits and not spec.short.split and "_rowsplits" not in spec.name


def _pair_inputs(d):
    """A mixed batch on packed K/V at head dim ``d`` (forced threshold 4: packed K/V is not fused
    automatically)."""
    q = torch.randn(sum(QLENS), HQ, d).to(BF16)
    k = torch.randn(sum(CTX), HKV, d).to(BF16)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(QLENS)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(CTX)]), dtype=torch.int32)
    return q, k, torch.randn_like(k), cu_q, cu_k


def test_mixed_call_with_wide_head_dim_v_runs_the_classes_in_turn(fake_cuda):
    """The fallback through the API: head_dim_v 256 is above the Hopper fused kernel's 128
    (``choose_fused_hopper`` gives None), so the two classes run in turn: the long class on the
    Hopper kernel, the short one on the sm_80 decode kernel, then the combine."""
    q, k, v, cu_q, cu_k = _pair_inputs(256)
    kw = dict(num_heads_q=HQ, num_heads_kv=HKV, mask="causal", max_seqlen_q=max(QLENS), max_seqlen_k=max(CTX),
              short_max_q=4)
    assert heuristics.choose_fused_hopper("sm_90a", "bf16", 256, 256, **kw) is None
    assert heuristics.choose_pair("sm_90a", "bf16", 256, 256, **kw) is not None
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(QLENS), max(CTX), causal=True, short_query_tokens=4)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "attention_sm90", "attention", "combine"]
    a, b = fake_cuda.launches[2].fields(), fake_cuda.launches[3].fields()
    assert a["metadata"] == fake_cuda.launches[0].fields()["metadata"] != b["metadata"]
    assert a["row_splits"] == b["row_splits"] != 0 and a["out_accum"] == 0 and b["out_accum"] != 0
    assert isinstance(api._CALLS._last[1], fused.PreparedPairCall)


def test_pair_path_runs_the_classes_in_turn(fake_cuda):
    """The classes in turn, built directly (``choose_pair``, ``decide.recipe``, ``bind``,
    ``build_pair``): both schedulers, the long class on the Hopper kernel (unsplit, recording
    row_splits), the short class on the sm_80 decode kernel (pack-GQA, split-KV), then the combine."""
    args = paged_inputs(QLENS, CTX)
    q, kc, vc, cu_q, used, pt = args
    out = torch.empty_like(q)
    thr = heuristics.short_query_tokens(HQ, HKV)
    pv = heuristics.choose_pair("sm_90a", "bf16", D, D, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                max_seqlen_q=max(QLENS), max_seqlen_k=max(CTX), paged=True, short_max_q=thr,
                                page_size=PS)
    assert pv.long.attention.mainloop == "sm90a" and pv.short.attention.mainloop == "sm80" and pv.short_max_q == thr
    checked = arguments.varlen_call(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                    out=out, causal=True, window_size=(-1, -1), softcap=0.0, softmax_scale=None,
                                    num_splits=0, pack_gqa=None, metadata_layout="soa", sort=True, head_swizzle=True,
                                    short_query_tokens=None, arch=None)
    recipe = decide.recipe(pv, checked.signature, runtime.device(None))
    assert recipe.kind == "pair" and recipe.specs == (pv.short.scheduler, pv.long.attention, pv.short.attention,
                                                      pv.short.combine)
    kernels = bind.bind(recipe, runtime.load(recipe.specs, None))
    assert isinstance(kernels, fused.PairKernels)
    sizes = checked.sizes
    step = fused.build_pair(kernels, layout=recipe.workspace, batch=sizes["batch"], q=q, k=kc, v=vc, out=out, lse=None,
                            page_table=pt, scale=D ** -0.5, window=(-1, 0), softcap=0.0, return_lse=False,
                            fixed_base=None, sizes=sizes)
    step.run(q, kc, vc, cu_q, None, used, pt, out, None)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "attention_sm90", "attention", "combine"]
    s_long, s_short, a, b, c = fake_cuda.launches
    lf, sf, af, bf, cf = s_long.fields(), s_short.fields(), a.fields(), b.fields(), c.fields()
    assert (lf["class_min_q"], lf["class_max_q"]) == (thr + 1, 2 ** 31 - 1)
    assert (sf["class_min_q"], sf["class_max_q"]) == (0, thr)
    assert (lf["block_m"], lf["block_n"], lf["max_splits"], lf["num_ctas"]) == (128, 128, 1, 132)
    assert (sf["block_m"], sf["pack_factor"]) == (16, HQ // HKV) and sf["max_splits"] > 1
    # the classes in turn: the short class's decode kernel runs alone, so its splits are wave-rounded
    assert lf["wave_ctas"] == 0 and sf["wave_ctas"] == b.grid[0] > 0
    assert af["metadata"] == lf["metadata"] != bf["metadata"] == sf["metadata"] == cf["metadata"]
    assert af["row_splits"] == bf["row_splits"] == cf["row_splits"] != 0
    assert af["out_accum"] == 0 and bf["out_accum"] == cf["out_accum"] != 0
    assert af["q"] == bf["q"] == q.data_ptr() and af["out"] == bf["out"] == cf["out"] == out.data_ptr()
    assert a.maps()[0][0] == q.data_ptr() and a.block == (384, 1, 1) and b.block == (32, 1, 1)
    spec = pv.long.attention
    assert spec.row_splits and spec.paged and not spec.split and "_rowsplits" in spec.name


def test_all_short_batch_is_a_plain_decode_launch(fake_cuda):
    qlens, ctx = [1, 1, 2], [100, 3000, 5]
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, 2, max(ctx), seqused_k=used, page_table=pt, causal=True)
    assert "fused" not in fake_cuda.kinds()
    # a decode launch on its own: its scheduler rounds capped splits to waves of the kernel's grid
    sched, attn = fake_cuda.launches[0], fake_cuda.launches[1]
    assert fake_cuda.kinds()[:2] == ["scheduler", "attention"]
    assert sched.fields()["wave_ctas"] == attn.grid[0] == FC.ATTN_GRID and sched.fields()["block_m"] == 16


@pytest.mark.parametrize("value,err", [("4", TypeError), (True, TypeError), (2.0, TypeError), (-1, ValueError)])
def test_short_query_tokens_validation(fake_cuda, value, err):
    with pytest.raises(err, match="short_query_tokens"):
        call(*paged_inputs(QLENS, CTX), short_query_tokens=value)
    assert fake_cuda.launches == []


def test_forced_threshold_does_not_combine_with_forced_pack_or_splits(fake_cuda):
    for kw in ({"pack_gqa": True}, {"num_splits": 2}):
        with pytest.raises(ValueError, match="short_query_tokens"):
            call(*paged_inputs(QLENS, CTX), short_query_tokens=4, **kw)
    assert fake_cuda.launches == []


def test_fused_plan_run_and_schedule(fake_cuda, monkeypatch):
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, arch="sm_80")
    assert p.fused is not None and p.metadata_short is not None
    assert p.metadata.data_ptr() != p.metadata_short.data_ptr()
    assert p.metadata_bytes == 4 * (p.metadata.numel() + p.metadata_short.numel())   # both classes' buffers
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    out = torch.empty_like(q)
    with pytest.raises(RuntimeError, match="schedule"):   # no metadata yet
        p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == []
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused", "combine"]
    s_long, s_short, f, _ = fake_cuda.launches
    assert s_long.fields()["metadata"] == p.metadata.data_ptr()
    assert s_short.fields()["metadata"] == p.metadata_short.data_ptr()
    assert s_long.fields()["capacity"] == 16 and s_long.fields()["batch"] == len(QLENS)
    a, b = f.fields().values()
    assert a["row_splits"] == b["row_splits"] == p.split.row_splits.data_ptr()
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused", "combine"]
    a2, b2 = fake_cuda.launches[2].fields().values()
    assert a2 == a and b2 == b, "the one-off packers give the prepared step's bytes"
    # attend on a batch the last schedule was not for: refused before any launch, naming both sizes
    fake_cuda.clear()
    q1, kc1, vc1, cu_q1, used1, pt1 = paged_inputs(QLENS[:-1], CTX[:-1])
    with pytest.raises(ValueError, match=rf"{len(QLENS) - 1} requests but the last schedule\(\) was for {len(QLENS)}"):
        p.attend(q1, kc1, vc1, cu_q1, seqused_k=used1, page_table=pt1)
    assert fake_cuda.kinds() == []
    p.run(q1, kc1, vc1, cu_q1, seqused_k=used1, page_table=pt1)    # run writes the metadata too
    fake_cuda.clear()
    p.attend(q1, kc1, vc1, cu_q1, seqused_k=used1, page_table=pt1)
    assert fake_cuda.kinds() == ["fused", "combine"]
    # a batch padded past the scheduled one with zero-length requests (they own no tiles): accepted, as
    # tests/gpu/test_attention_gpu.py's padded replay does (schedule 5, attend 16)
    fake_cuda.clear()
    pad = torch.cat([cu_q1, cu_q1[-1:].repeat(3)])
    p.attend(q1, kc1, vc1, pad, seqused_k=torch.cat([used1, torch.zeros(3, dtype=torch.int32)]),
             page_table=torch.cat([pt1, pt1[:3]]))
    assert fake_cuda.kinds() == ["fused", "combine"]


@pytest.mark.parametrize("where", ["schedule", "run"])
def test_a_launch_failing_half_way_leaves_attend_no_batch_to_trust(fake_cuda, monkeypatch, where):
    """A review: a second scheduler launch failing left the old batch recorded while the first class's
    metadata already held the new one; attend then accepted the old batch."""
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, arch="sm_80")
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    p.schedule(cu_q, seqused_k=used)
    real, calls = FC.launch._driver_launch, []

    def second_fails(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("simulated launch failure")
        return real(*a, **kw)

    monkeypatch.setattr(FC.launch, "_driver_launch", second_fails)
    monkeypatch.setenv("KERNELGEN_GRAPH_LAUNCH", "0")   # (launch by launch, not as one graph)
    q2, kc2, vc2, cu_q2, used2, pt2 = paged_inputs(QLENS[:-1], CTX[:-1])
    with pytest.raises(RuntimeError, match="simulated"):
        if where == "schedule":
            p.schedule(cu_q2, seqused_k=used2)
        else:
            p.run(q2, kc2, vc2, cu_q2, seqused_k=used2, page_table=pt2)
    with pytest.raises(RuntimeError, match="no metadata yet"):
        p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt)


def test_fused_workspace_regions_are_disjoint_and_aligned():
    fv = heuristics.choose_fused("sm_90a", "bf16", D, D, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                 max_seqlen_k=8192, paged=True)
    from kernelgen.kernels.workspace import FusedWorkspace, WorkspaceLayout
    ws = FusedWorkspace(WorkspaceLayout(100, True, fv.short_max_splits, HQ, 4096, D))
    s = ws.short
    regions = [(0, 4 * metadata.buffer_ints(100)), (s.out_accum_offset, s.lse_accum_offset),
               (s.lse_accum_offset, s.row_splits_offset), (s.row_splits_offset, s.nbytes),
               (ws.long_metadata_offset, ws.nbytes)]
    for (a0, a1), (b0, b1) in zip(regions, regions[1:]):
        assert a1 <= b0
    assert all(r[0] % 256 == 0 for r in regions)
    assert ws.nbytes - ws.long_metadata_offset >= 4 * metadata.buffer_ints(100)
    md_long, md_short, split = ws.views(torch.zeros(ws.nbytes, dtype=torch.uint8))
    assert md_long.numel() == md_short.numel() == metadata.buffer_ints(100)
    assert split.out_accum.shape == (fv.short_max_splits, HQ, 4096, D)


@pytest.mark.parametrize("page_size,opts", [(None, "gp"), (16, "p")])
def test_mixed_plan_on_sm90_takes_the_hopper_fused_launch(fake_cuda, monkeypatch, page_size, opts):
    """A mixed-batch plan on the (fake) H200: the Hopper fused kernel (its long variant gathering
    K/V rows unless the plan knows the page size).  run() and schedule() + attend() launch both
    schedulers on the plan's two metadata buffers, the fused kernel and the combine, and the
    one-off packer of attend gives the prepared step's parameter bytes, tensor maps included; a
    step with another page size than the plan's is refused."""
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, page_size=page_size)
    assert isinstance(p.fused, fused.FusedKernels) and p.fused.short_ctas == FC.default_short_ctas()
    assert p.attn_spec.kind == "fused" and p.attn_spec.hopper and p.hopper and p.attn_spec.long.sm90_opts == opts
    assert p.attn.func_ptr == FC.FUNC["fused_sm90"] and p.attn.params is FUSED_TMA_PARAMS
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    out = torch.empty_like(q)
    kinds = ["scheduler", "scheduler", "fused_sm90", "combine"]
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == kinds
    s_long, s_short, f, c = fake_cuda.launches
    ff = f.fields()
    assert s_long.fields()["metadata"] == p.metadata.data_ptr() == ff["long"]["metadata"]
    assert s_short.fields()["metadata"] == p.metadata_short.data_ptr() == ff["short"]["metadata"]
    assert ff["long"]["row_splits"] == ff["short"]["row_splits"] == p.split.row_splits.data_ptr()
    assert ff["short"]["out_accum"] == p.split.out_accum.data_ptr() == c.fields()["out_accum"]
    assert ff["long"]["out_accum"] == 0 and ff["short_ctas"] == FC.default_short_ctas()
    n = FC.tma.MAP_BYTES
    assert f.maps()[0][0] == q.data_ptr()
    if page_size is None:           # gathering: no K/V maps
        assert f.params[n:3 * n] == bytes(2 * n)
    else:
        assert [m[0] for m in f.maps(kv_rank=4)[1:]] == [kc.data_ptr(), vc.data_ptr()]
    run_params = [x.params for x in fake_cuda.launches]
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    # (the combine attend launches after them: test_mixed_plan_attend_on_sm90_launches_the_combine)
    assert fake_cuda.kinds()[:3] == kinds[:3]
    assert [x.params for x in fake_cuda.launches[:3]] == run_params[:3], "the one-off packers give the prepared step's"
    assert len(run_params[2]) == FUSED_TMA_PARAMS.size == 1024
    if page_size is not None:     # a cache of 32-token pages
        kc2 = torch.randn(kc.shape[0] // 2 + 1, 2 * PS, HKV, D).to(BF16)
        with pytest.raises(ValueError, match="page_size=16"):
            p.run(q, kc2, kc2, cu_q, seqused_k=used, page_table=pt, out=out)


def test_mixed_plan_with_wide_head_dim_v_runs_the_classes_in_turn(fake_cuda, monkeypatch):
    """The plan's fallback: head_dim_v 256 (packed K/V, forced threshold) takes ``PairKernels``;
    run() and schedule() + attend() launch the same five kernels with the same parameters."""
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=256, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, causal=True, short_query_tokens=4)
    assert isinstance(p.fused, fused.PairKernels) and p.hopper and p.attn_spec.kind == "attention"
    q, k, v, cu_q, cu_k = _pair_inputs(256)
    out = torch.empty_like(q)
    kinds = ["scheduler", "scheduler", "attention_sm90", "attention", "combine"]
    p.run(q, k, v, cu_q, cu_k, out=out)
    assert fake_cuda.kinds() == kinds
    s_long, s_short, a, b, c = fake_cuda.launches
    assert s_long.fields()["metadata"] == p.metadata.data_ptr() == a.fields()["metadata"]
    assert s_short.fields()["metadata"] == p.metadata_short.data_ptr() == b.fields()["metadata"]
    assert a.fields()["row_splits"] == b.fields()["row_splits"] == p.split.row_splits.data_ptr()
    run_params = [x.params for x in fake_cuda.launches]
    fake_cuda.clear()
    p.schedule(cu_q, cu_k)
    p.attend(q, k, v, cu_q, cu_k, out=out)
    assert fake_cuda.kinds() == kinds
    assert [x.params for x in fake_cuda.launches] == run_params


def test_mixed_plan_attend_on_sm90_launches_the_combine(fake_cuda, monkeypatch):
    """schedule() + attend() of a Hopper fused plan whose short class splits KV: the combine
    follows the fused launch (as in run() and in the sm_80 fused plan), with run()'s parameters."""
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, page_size=PS)
    assert p.attn_spec.hopper and p.combine is not None
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    out = torch.empty_like(q)
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    combine = fake_cuda.launches[-1]
    assert combine.kind == "combine"
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    assert fake_cuda.launches[3].params == combine.params


def test_a_hopper_run_with_no_query_token_records_no_batch(fake_cuda, monkeypatch):
    """A review: such a run returns before any launch (a TMA map needs a token) but recorded its batch,
    so a later attend launched on metadata no scheduler wrote."""
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True)
    assert p.hopper
    q0, kc0, vc0, cu0, used0, pt0 = paged_inputs([0, 0, 0], [10, 10, 10])
    p.run(q0, kc0, vc0, cu0, seqused_k=used0, page_table=pt0)
    assert fake_cuda.kinds() == []
    q, kc, vc, cu, used, pt = paged_inputs([5, 1, 1], [100, 10, 10])
    with pytest.raises(RuntimeError, match="no metadata yet"):
        p.attend(q, kc, vc, cu, seqused_k=used, page_table=pt)
