"""Review of FP8 K/V on the Hopper kernel (design variant A) from the CPU side: dispatch edge
cases (page sizes, strides, forced arch), the parameter struct on every packing path, and what the
docs say about it."""
import pytest
import torch

import fake_cuda as fake_cuda_mod   # noqa: F401   (the fixture is named fake_cuda)
import kernelgen
from fake_cuda import make_plan, map_kind

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _paged(page_size, n_pages=40, hkv=2, d=128, hq=4, qlens=(200, 130), ctx=(300, 260), kv=E4M3, seed=0):
    g = torch.Generator().manual_seed(seed)
    need = [-(-c // page_size) for c in ctx]
    pt = torch.arange(sum(need), dtype=torch.int32)
    rows = []
    o = 0
    for n in need:
        rows.append(torch.cat([pt[o:o + n], torch.zeros(max(need) - n, dtype=torch.int32)]))
        o += n
    pt = torch.stack(rows)
    kc = torch.randn(max(n_pages, sum(need)), page_size, hkv, d, generator=g).to(kv)
    vc = torch.randn(kc.shape, generator=g).to(kv)
    q = torch.randn(sum(qlens), hq, d, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0, qlens[0], sum(qlens)], dtype=torch.int32)
    used = torch.tensor(ctx, dtype=torch.int32)
    return q, kc, vc, cu_q, used, pt


def _attn(rec):
    return [x for x in rec.launches if x.kind.startswith("attention")]


@pytest.mark.parametrize("page_size,hopper", [(8, True), (16, True), (32, True), (128, True), (256, True),
                                              (24, False), (5, False), (48, False)])
def test_paged_fp8_prefill_takes_the_hopper_kernel_where_tma_boxes_fit(fake_cuda, page_size, hopper):
    """One class (``short_query_tokens=0``: no mixed-batch launch) of a paged FP8 prefill."""
    q, kc, vc, cu_q, used, pt = _paged(page_size)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, 200, 300, seqused_k=used, page_table=pt, causal=True,
                               short_query_tokens=0)
    (a,) = _attn(fake_cuda)
    assert a.kind == ("attention_sm90_fp8" if hopper else "attention_fp8"), page_size
    if hopper:
        raw = a.params
        assert map_kind(raw[:128]) == "16bit" and map_kind(raw[128:256]) == map_kind(raw[256:384]) == "fp8"
        ptr, dims, strides, box = a.maps(kv_rank=4)[1]
        assert box == (64, 1, min(page_size, 128), 1) and strides == (kc.stride(2), kc.stride(1), kc.stride(0))
    else:
        fake_cuda.clear()
        with pytest.raises(ValueError, match=r"FP8 K/V cache \(e4m3\) with pages TMA boxes do not fit"):
            kernelgen.varlen_attention(q, kc, vc, cu_q, None, 200, 300, seqused_k=used, page_table=pt, causal=True,
                                       arch="sm_90a")
        assert fake_cuda.kinds() == []


def _packed(d=128, dv=128, hq=4, hkv=2, lq=(150, 90), lk=(300, 200), kv=E4M3, seed=1):
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0, lq[0], sum(lq)], dtype=torch.int32)
    ck = torch.tensor([0, lk[0], sum(lk)], dtype=torch.int32)
    q = torch.randn(sum(lq), hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(sum(lk), hkv, d, generator=g).to(kv)
    v = torch.randn(sum(lk), hkv, dv, generator=g).to(kv)
    return q, k, v, cq, ck


@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 192), (192, 128), (256, 256)])
def test_packed_fp8_prefill_hopper_every_head_dim_pair(fake_cuda, d, dv):
    q, k, v, cq, ck = _packed(d, dv)
    kernelgen.varlen_attention(q, k, v, cq, ck, 150, 300, causal=True)
    (a,) = _attn(fake_cuda)
    assert a.kind == "attention_sm90_fp8"
    _, dims, strides, box = a.maps()[2]
    assert dims == (dv, 2, k.shape[0]) and strides == (dv, 2 * dv) and box[0] == 64


def _odd_head_stride(t):
    """A (tokens, 1, d) view whose head stride (8 elements) is legal for the 16-byte rule (one head)
    but no multiple of 16 bytes for an FP8 tensor map."""
    return t.as_strided((t.shape[0], 1, t.shape[2]), (t.shape[2], 8, 1))


def test_fp8_cache_tma_cannot_address_runs_sm80_and_forced_hopper_names_it(fake_cuda):
    q, k, v, cq, ck = _packed(hq=2, hkv=2)
    k1, v1 = _odd_head_stride(k[:, :1].contiguous()), _odd_head_stride(v[:, :1].contiguous())
    q1 = q[:, :1].contiguous()
    kernelgen.varlen_attention(q1, k1, v1, cq, ck, 150, 300, causal=True)
    assert [a.kind for a in _attn(fake_cuda)] == ["attention_fp8"]
    fake_cuda.clear()
    with pytest.raises(ValueError, match="strides that TMA cannot address"):
        kernelgen.varlen_attention(q1, k1, v1, cq, ck, 150, 300, causal=True, arch="sm_90a")
    # a head dimension broadcast with stride 0: the 16-byte rule holds, TMA needs positive strides
    kb, vb = k[:, :1].expand(-1, 2, -1), v[:, :1].expand(-1, 2, -1)
    fake_cuda.clear()
    kernelgen.varlen_attention(q, kb, vb, cq, ck, 150, 300, causal=True)
    assert [a.kind for a in _attn(fake_cuda)] == ["attention_fp8"]


@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_hopper_fp8_parameter_is_the_same_on_every_packing_path(fake_cuda, monkeypatch, sinks, num_splits):
    """plan.run (prepared launch), plan.attend (one-off packing, oneoff.attention_params) and a
    varlen_attention call write the same TmaAttnParams around the FP8 AttnParams (+ sinks): the same
    size as the kernel's struct (attention_params_for, what params_decl declares), the same maps
    and the same descale and sink fields."""
    from kernelgen.jit import render
    from kernelgen.kernels.params import attention_params_for
    plan = make_plan(monkeypatch, kv_dtype="e4m3", sinks=sinks, num_splits=num_splits, max_batch=4, num_heads_q=4,
                     num_heads_kv=2, head_dim=128, max_seqlen_q=150, max_seqlen_k=300, causal=True)
    assert plan.hopper
    (spec,) = [s for s in plan.recipe.specs if s.kind == "attention"]
    assert spec.kv_dtype == "e4m3" and spec.sinks == sinks
    st = attention_params_for(spec)
    assert st.c_decl() in render.render(spec)
    q, k, v, cq, ck = _packed()
    kd, vd = torch.rand(2, 2) + 0.5, (torch.rand(2, 2) + 0.5).t()
    sk = torch.zeros(4) if sinks else None
    kw = dict(k_descale=kd, v_descale=vd, **({"sinks": sk} if sinks else {}))
    got = []
    out = torch.empty(q.shape, dtype=q.dtype)
    plan.run(q, k, v, cq, ck, out=out, **kw)
    got.append(_attn(fake_cuda)[0])
    fake_cuda.clear()
    plan.schedule(cq, ck)
    fake_cuda.clear()
    plan.attend(q, k, v, cq, ck, out=out, **kw)
    got.append(_attn(fake_cuda)[0])
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, 150, 300, causal=True, num_splits=num_splits, out=out, **kw)
    got.append(_attn(fake_cuda)[0])
    keep = ("q", "k", "v", "out", "cu_seqlens_q", "cu_seqlens_k", "sinks", "k_descale", "v_descale", "q_row_stride",
            "q_head_stride", "k_row_stride", "k_head_stride", "v_row_stride", "v_head_stride", "num_heads_q",
            "num_heads_kv", "total_q", "window_left", "window_right", "scale_log2", "softcap_scale",
            "k_descale_batch_stride", "k_descale_head_stride", "v_descale_batch_stride", "v_descale_head_stride")
    for a in got:
        assert a.kind == "attention_sm90_fp8" + ("_sinks" if sinks else "")
        assert len(a.params) == st.size
    f0 = {n: x for n, x in got[0].fields().items() if n in keep}
    for a in got[1:]:
        assert a.params[:384] == got[0].params[:384]
        f = {n: x for n, x in a.fields().items() if n in keep}
        assert f == f0
    f = got[0].fields()
    assert (f["k_descale"], f["v_descale"], f["v_descale_batch_stride"], f["v_descale_head_stride"]) == \
        (kd.data_ptr(), vd.data_ptr(), 1, 2)
    if sinks:
        assert f["sinks"] == sk.data_ptr()


@pytest.mark.parametrize("page_size", [8, 16, 64, 24])
def test_plan_and_one_off_call_choose_the_same_fp8_kernels(fake_cuda, monkeypatch, page_size):
    q, kc, vc, cu_q, used, pt = _paged(page_size)
    plan = make_plan(monkeypatch, kv_dtype="e4m3", max_batch=2, num_heads_q=4, num_heads_kv=2, head_dim=128,
                     max_seqlen_q=200, max_seqlen_k=300, paged=True, page_size=page_size, causal=True,
                     max_total_q=330)
    plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt)
    def seen():
        return [(a.kind, a.params[:384] if "sm90" in a.kind else a.smem) for a in _attn(fake_cuda)]
    from_plan = seen()
    fake_cuda.clear()
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, 200, 300, seqused_k=used, page_table=pt, causal=True)
    assert seen() == from_plan
    assert plan.hopper == (page_size != 24)


def test_forced_hopper_fp8_plan_without_a_page_size_names_the_pages(fake_cuda, monkeypatch):
    kw = dict(kv_dtype="e4m3", max_batch=2, num_heads_q=4, num_heads_kv=2, head_dim=128, max_seqlen_q=200,
              max_seqlen_k=300, paged=True, causal=True, arch="sm_90a")
    with pytest.raises(ValueError, match="pages TMA boxes do not fit"):
        make_plan(monkeypatch, **kw)
    assert make_plan(monkeypatch, page_size=32, **kw).hopper


def test_forced_hopper_fp8_with_a_user_variant_names_it(fake_cuda):
    q, k, v, cq, ck = _packed()
    var = kernelgen.Variant(score_mod="score * 0.5f")
    with pytest.raises(ValueError, match=r"FP8 K/V cache \(e4m3\) with a user variant"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 150, 300, causal=True, variant=var, arch="sm_90a")
    assert fake_cuda.kinds() == []
    kernelgen.varlen_attention(q, k, v, cq, ck, 150, 300, causal=True, variant=var)
    assert [a.kind for a in _attn(fake_cuda)] == ["attention_fp8_variant0"]


# ----------------------------------------------------------------------------- the docs
from pathlib import Path   # noqa: E402
import re   # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_cli_md_counts_the_fp8_kernels_serving_warmup_adds_on_sm90a():
    """docs/cli.md: "`--serving --kv-dtype e4m3` adds N kernels for `sm_90a`" -- what ``kernelgen
    warmup`` builds (cmd_warmup's warmup_specs call with the parser's defaults).  It said 320, the
    count from when FP8 ran on the sm_80 mainloop only (sm_80's count); the Hopper FP8 kernels add more."""
    from kernelgen.apps import cli
    from kernelgen.selection.catalog import warmup_specs

    m = re.search(r"`--serving --kv-dtype e4m3` adds (\d+) kernels for `sm_90a`", (REPO / "docs/cli.md").read_text())
    assert m is not None

    def count(argv):
        a = cli.build_parser().parse_args(["warmup", "--arch", "sm_90a", "--serving", *argv])
        dtypes, kv = cli.split_dtypes(a.dtype, a.kv_dtype)   # what cmd_warmup passes on
        return len(warmup_specs("sm_90a", a.head_dim, dtypes, a.causal, a.layout, phases=["prefill", "chunked", "decode"],
                                gqas=[1, 4, 8], paged=[False, True], page_sizes=a.page_size,
                                **({"kv_dtypes": kv} if kv else {})))
    assert int(m.group(1)) == count(["--kv-dtype", "e4m3"]) - count([])


def test_api_md_fp8_section_says_prefill_runs_on_the_hopper_kernel():
    """docs/api.md "FP8 K/V caches": the table row "mainloop" and the status paragraph said every
    FP8 call runs the sm_80 mainloop and that arch="sm_90a" raises ValueError; prefill-shaped FP8
    calls now take the Hopper kernel on an H200 (decide) and arch="sm_90a" forces it."""
    import sys
    sys.path.insert(0, str(REPO / "tests"))
    from test_decide import H200, sig
    from kernelgen.selection import decide

    r = decide.decide(sig(kv_dtype="e4m3", arch="sm_90a"), H200)          # no ValueError
    assert [s.mainloop for s in r.specs if s.kind == "attention"] == ["sm90a"]
    text = (REPO / "docs/api.md").read_text()
    section = text[text.index("### FP8 K/V caches"):text.index("### User variants")]
    (row,) = [ln for ln in section.splitlines() if ln.startswith("| mainloop |")]
    assert "Hopper" in row and "the sm_80 mainloop on every arch" not in row, row
    flat = " ".join(section.split())
    assert "an FP8 prefill runs on the sm_80 mainloop on the H200 too" not in flat


def test_forced_hopper_fp8_with_gather_options_names_the_options_not_the_page_size():
    """KERNELGEN_SM90_OPTS with "g" makes paged calls gather rows, which the FP8 Hopper kernel cannot:
    the forced call's ValueError named "pages TMA boxes do not fit (page_size 16, block_n 128)",
    although they fit (the options are the reason)."""
    from kernelgen.selection import heuristics as H
    kw = dict(num_heads_q=8, num_heads_kv=2, max_seqlen_q=500, max_seqlen_k=900, paged=True, page_size=16,
              kv_dtype="e4m3", mainloop="sm90a")
    assert H.choose("sm_90a", "bf16", 128, 128, **kw).attention.mainloop == "sm90a"
    with pytest.raises(ValueError, match=r"FP8 K/V cache \(e4m3\) with rows gathered .* ask for 'g'") as e:
        H.choose("sm_90a", "bf16", 128, 128, sm90_opts="gp", **kw)
    assert "do not fit" not in str(e.value)
    with pytest.raises(ValueError, match=r"pages TMA boxes do not fit \(page_size 24, block_n 128\)"):
        H.choose("sm_90a", "bf16", 128, 128, **{**kw, "page_size": 24})
