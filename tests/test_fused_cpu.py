"""The fused mixed-batch launch on the CPU (CUDA stubbed, tests/fake_cuda.py): when it is chosen,
the four launches and their parameters (two scheduler classes, two AttnParams, the combine),
the plan path, and the validation of ``short_query_tokens``."""
import numpy as np
import pytest
import torch

import fake_cuda as FC
import kernelgen
from kernelgen import fused, heuristics, metadata

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
    automatic choice is test_mixed_call_on_sm90_runs_the_classes_in_turn's)."""
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
    spec = [k.spec for k in kernelgen.runtime.loaded_kernels() if k.spec.kind == "fused"][0]
    assert f.smem == spec.smem_bytes() and spec.short.pack_gqa and spec.long.row_splits
    cf = c.fields()
    assert cf["metadata"] == short_f["metadata"] and cf["row_splits"] == b["row_splits"]
    # the workspace holds both metadata buffers and the partials, disjoint
    md_bytes = 4 * metadata.buffer_ints(len(QLENS))
    lo, hi = sorted([long_f["metadata"], short_f["metadata"]])
    assert hi - lo >= md_bytes and b["out_accum"] >= short_f["metadata"] + md_bytes


@pytest.mark.parametrize("arch,kinds", [("sm_80", ["scheduler", "scheduler", "fused", "combine"]),
                                        (None, ["scheduler", "scheduler", "attention_sm90", "attention", "combine"])])
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
    fake_cuda.clear()     # the fake H200's automatic choice: the classes in turn, the long one on Hopper
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(QLENS), max(CTX), causal=True, short_query_tokens=3)
    assert fake_cuda.kinds()[:4] == ["scheduler", "scheduler", "attention_sm90", "attention"]
    assert fake_cuda.launches[1].fields()["class_max_q"] == 3


def test_mixed_call_on_sm90_runs_the_classes_in_turn(fake_cuda):
    """On sm_90a without a forced arch a mixed batch runs both schedulers, the long class on the
    Hopper kernel (unsplit, recording row_splits), the short class on the sm_80 decode kernel
    (pack-GQA, split-KV), then the combine; with a sliding window too (which the fused launch
    does not take)."""
    args = paged_inputs(QLENS, CTX)
    call(*args)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "attention_sm90", "attention", "combine"]
    s_long, s_short, a, b, c = fake_cuda.launches
    lf, sf, af, bf, cf = s_long.fields(), s_short.fields(), a.fields(), b.fields(), c.fields()
    thr = heuristics.short_query_tokens(HQ, HKV)
    assert (lf["class_min_q"], lf["class_max_q"]) == (thr + 1, 2 ** 31 - 1)
    assert (sf["class_min_q"], sf["class_max_q"]) == (0, thr)
    assert (lf["block_m"], lf["block_n"], lf["max_splits"], lf["num_ctas"]) == (128, 128, 1, 132)
    assert (sf["block_m"], sf["pack_factor"]) == (16, HQ // HKV) and sf["max_splits"] > 1
    assert af["metadata"] == lf["metadata"] != bf["metadata"] == sf["metadata"] == cf["metadata"]
    assert af["row_splits"] == bf["row_splits"] == cf["row_splits"] != 0
    assert af["out_accum"] == 0 and bf["out_accum"] == cf["out_accum"] != 0
    assert af["q"] == bf["q"] == args[0].data_ptr() and af["out"] == bf["out"] == cf["out"]
    assert a.maps()[0][0] == args[0].data_ptr() and a.block == (384, 1, 1)
    spec = [k.spec for k in kernelgen.runtime.loaded_kernels() if getattr(k.spec, "mainloop", "") == "sm90a"][-1]
    assert spec.row_splits and spec.paged and not spec.split and "_rowsplits" in spec.name
    fake_cuda.clear()
    call(*args, window_size=(256, 0))
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "attention_sm90", "attention", "combine"]
    assert fake_cuda.launches[2].fields()["window_left"] == 256
    # a long class the Hopper path cannot run (paged head dim 96): the fused launch
    fake_cuda.clear()
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kernelgen.varlen_attention(q[..., :96].contiguous(), kc[..., :96].contiguous(), vc[..., :96].contiguous(), cu_q,
                               None, max(QLENS), max(CTX), seqused_k=used, page_table=pt, causal=True)
    assert "fused" in fake_cuda.kinds() and "attention_sm90" not in fake_cuda.kinds()


def test_all_short_batch_is_a_plain_decode_launch(fake_cuda):
    qlens, ctx = [1, 1, 2], [100, 3000, 5]
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, 2, max(ctx), seqused_k=used, page_table=pt, causal=True)
    assert "fused" not in fake_cuda.kinds()


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
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    out = torch.empty_like(q)
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


def test_fused_workspace_regions_are_disjoint_and_aligned():
    fv = heuristics.choose_fused("sm_90a", "bf16", D, D, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                 max_seqlen_k=8192, paged=True)
    from kernelgen.workspace import WorkspaceLayout
    ws = fused.FusedWorkspace(WorkspaceLayout(100, True, fv.short_max_splits, HQ, 4096, D))
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
def test_mixed_plan_on_sm90_runs_the_classes_in_turn(fake_cuda, monkeypatch, page_size, opts):
    """A mixed-batch plan on the (fake) H200: run() and schedule() + attend() launch both
    schedulers on the plan's two metadata buffers, the Hopper kernel (gathering K/V rows unless
    the plan knows the page size), the decode kernel and the combine; a step with another page
    size than the plan's is refused."""
    p = FC.make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                     max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, page_size=page_size)
    assert isinstance(p.fused, fused.PairKernels) and p.hopper and p.attn_spec.sm90_opts == opts
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    out = torch.empty_like(q)
    kinds = ["scheduler", "scheduler", "attention_sm90", "attention", "combine"]
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == kinds
    s_long, s_short, a, b, c = fake_cuda.launches
    assert s_long.fields()["metadata"] == p.metadata.data_ptr() == a.fields()["metadata"]
    assert s_short.fields()["metadata"] == p.metadata_short.data_ptr() == b.fields()["metadata"]
    assert a.fields()["row_splits"] == b.fields()["row_splits"] == p.split.row_splits.data_ptr()
    assert a.maps()[0][0] == q.data_ptr()
    fields = [x.fields() for x in fake_cuda.launches[2:]]
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)
    assert fake_cuda.kinds() == kinds
    assert [x.fields() for x in fake_cuda.launches[2:]] == fields, "the one-off packers give the prepared step's"
    if page_size is not None:     # a cache of 32-token pages
        kc2 = torch.randn(kc.shape[0] // 2 + 1, 2 * PS, HKV, D).to(BF16)
        with pytest.raises(ValueError, match="page_size=16"):
            p.run(q, kc2, kc2, cu_q, seqused_k=used, page_table=pt, out=out)
