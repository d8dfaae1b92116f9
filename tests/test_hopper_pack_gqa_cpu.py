"""Pack-GQA on the Hopper prefill kernel (CPU): the decider's automatic choice
(``heuristics.sm90_pack_auto``) and the overrides ``SM90_PACK_GQA`` / ``KERNELGEN_SM90_PACK_GQA``, the
packed Q box, the launch through the stubbed driver (tests/fake_cuda.py), and NVRTC builds for sm_90a
without spills; the unpacked kernels' sources say PACK_GQA = false.  Their numerical checks are
tests/gpu/test_hopper_pack_gqa_gpu.py (docs/dev/hopper_pack_gqa.md)."""
import dataclasses

import pytest
import torch

import kernelgen
from kernelgen.front import api
from kernelgen.jit import compiler, render
from kernelgen.kernels import tma
from kernelgen.kernels.spec import AttentionSpec, FusedAttentionSpec
from kernelgen.selection import heuristics as H
from kernelgen.selection.settings import SM90_PACK_GQA, Settings

BF16 = torch.bfloat16


def _choose(hq=32, hkv=8, d=128, lq=4096, **kw):
    base = dict(num_heads_q=hq, num_heads_kv=hkv, mask="causal", max_seqlen_q=lq, max_seqlen_k=max(lq, 8192))
    return H.choose("sm_90a", "bf16", d, d, **{**base, **kw}).attention


# ---------------------------------------------------------------- the decider


def test_automatic_by_mean_query_tokens_and_on_when_asked():
    assert H.SM90_PACK_GQA is None and H.SM90_PACK_MAX_MEAN_Q == 1024 and H.SM90_PACK_AUTO_MIN_QPK_128 == 8
    # mean unknown (0): a plan, the classes of a mixed batch
    assert not _choose(hq=8, hkv=1).pack_gqa and not _choose(hq=64, hkv=8, d=64).pack_gqa
    # the bench's varlen trace (mean 659): packed where it measured 0.87-0.97x the unpacked time ...
    a = _choose(hq=64, hkv=8, d=64, mean_q=659)        # gpt-oss: the 192-row tile, 0.874
    assert a.mainloop == "sm90a" and a.pack_gqa and a.tile.block_m == 192 and "_pack_" in a.name
    assert _choose(hq=8, hkv=1, mean_q=659).pack_gqa    # llama3-70b-tp8: qpk 8 on 128 rows, 0.966
    assert _choose(hq=16, hkv=2, d=192, mean_q=659).pack_gqa
    # ... not at 4 query heads a KV head on 128 rows (0.98-0.99 on the trace, 1.01-1.05 on chunks)
    a = _choose(mean_q=659)
    assert a.mainloop == "sm90a" and not a.pack_gqa
    for mean in (1024, 2048, 16384):                     # long requests: nothing to gain on 128 rows ...
        assert not _choose(hq=8, hkv=1, mean_q=mean).pack_gqa, mean
        # ... the 16-bit 192-row tile packs at any length (H100: 0.79-0.998 from 2k to 16k tokens)
        a = _choose(hq=64, hkv=8, d=64, mean_q=mean)
        assert a.pack_gqa and a.tile.block_m == 192, (mean, a.name)
        a = _choose(hq=64, hkv=8, d=64, mean_q=mean, mask="none")
        assert a.pack_gqa and a.tile.block_m == 192, (mean, a.name)
    assert not _choose(hq=8, hkv=1, mean_q=659, sm90_pack=False).pack_gqa     # KERNELGEN_SM90_PACK_GQA=0
    assert not _choose(hq=32, hkv=32, mean_q=659).pack_gqa                    # no GQA
    assert _choose(mean_q=16384, sm90_pack=True).pack_gqa                     # KERNELGEN_SM90_PACK_GQA=1
    assert _choose(mean_q=16384, pack_gqa=True).pack_gqa                      # asked for
    assert H.sm90_pack_auto(4, 1023) and not H.sm90_pack_auto(4, 0) and not H.sm90_pack_auto(1, 10)
    assert H.sm90_pack_auto(4, 500, 192) and not H.sm90_pack_auto(4, 500, 128) and H.sm90_pack_auto(8, 500, 128)
    assert H.sm90_pack_auto(8, 16384) and H.sm90_pack_auto(8, 16384, 192) and not H.sm90_pack_auto(8, 16384, 128)
    # an FP8 call's 192-row tile (the FP8 tensor-core tile) only below the bound (16k packed ran 1.006-1.046x)
    assert H.sm90_pack_auto(8, 659, 192, fp8=True) and H.sm90_pack_auto(8, 4096, 192, fp8=True)
    assert H.SM90_FP8_PACK_MAX_MEAN_Q == 6144 and not H.sm90_pack_auto(8, 8192, 192, fp8=True)
    a = _choose(sm90_pack=True)
    assert a.mainloop == "sm90a" and a.pack_gqa and "_pack_" in a.name
    # gpt-oss's heads on the three-warpgroup tile (192 rows = 24 tokens x 8 heads); one KV head (TP8)
    a = _choose(hq=64, hkv=8, d=64, sm90_pack=True)
    assert a.pack_gqa and a.tile.block_m == 192 and a.tile.num_warps == 12
    a = _choose(hq=8, hkv=1, lq=1000, sm90_pack=True)
    assert a.pack_gqa and a.tile.block_m == 128


def test_module_switch_forces_either_way(monkeypatch):
    monkeypatch.setattr(H, "SM90_PACK_GQA", True)
    assert _choose().pack_gqa and not _choose(sm90_pack=False).pack_gqa
    monkeypatch.setattr(H, "SM90_PACK_GQA", False)
    assert not _choose(hq=8, hkv=1, mean_q=100).pack_gqa and _choose(sm90_pack=True).pack_gqa


def test_decider_passes_the_mean_of_a_call_not_of_a_plan():
    from kernelgen.selection import decide
    sig = decide.CallSignature(dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=32, num_heads_kv=8,
                               mask="causal", window_left=-1, layout="soa", max_seqlen_q=4000, max_seqlen_k=4000,
                               paged=False, page_size=0, softcap=False, pack_gqa=None, num_splits=0,
                               short_query_tokens=None, arch=None, tma_ok=True, batch=44, rows=29006)
    assert decide.mean_q(sig) == 659
    assert decide.mean_q(dataclasses.replace(sig, plan=True)) == 0
    assert decide.mean_q(dataclasses.replace(sig, batch=0, rows=0)) == 0


@pytest.mark.parametrize("kw,why", [
    (dict(hq=28, hkv=4), "7 heads a KV head: a 128-row tile of whole tokens does not exist"),
    (dict(hq=32, hkv=32), "no GQA"),
    (dict(d=256), "head dim 256 spilled packed"),
    (dict(pack_gqa=False), "the caller said no"),
    (dict(d=192, hq=16, hkv=2, alibi=True, softcap=True), "ALiBi with a soft-cap above head dim 128 spilled packed"),
    (dict(kv_dtype="e4m3"), "FP8 caches are converted by the producers"),
    (dict(d=256, hq=16, hkv=4, kv_dtype="e4m3", q_dtype="e4m3"), "FP8 q / K / V at head dim 256"),
    (dict(hq=64, hkv=8, d=64, kv_dtype="e4m3"), "an FP8 cache with a 16-bit q at head dim 64"),
])
def test_calls_it_does_not_pack(kw, why):
    a = _choose(sm90_pack=True, **kw)
    assert a.mainloop == "sm90a" and not a.pack_gqa, why


@pytest.mark.parametrize("kw,why", [
    (dict(d=192, hq=16, hkv=2, alibi=True, softcap=True), "pack-GQA with ALiBi and a soft-cap above head dim 128"),
    (dict(kv_dtype="e4m3"), r"pack-GQA with an FP8 K/V cache \(e4m3\) and a 16-bit q"),
    (dict(sm90_pack=False), r"pack-GQA, turned off for the Hopper kernel \(KERNELGEN_SM90_PACK_GQA\)"),
])
def test_a_forced_hopper_call_names_why_it_cannot_pack(kw, why):
    """pack_gqa=True with mainloop="sm90a" where the Hopper kernel does not pack: the error names the reason."""
    with pytest.raises(ValueError, match="does not support this call: " + why):
        _choose(lq=300, pack_gqa=True, mainloop="sm90a", **kw)


def test_asked_for_pack_where_the_hopper_kernel_cannot_pack():
    # pack_gqa=True: the Hopper kernel packs where it can; else the sm_80 path packs, as before
    a = _choose(hq=32, hkv=8, lq=300, pack_gqa=True, sm90_pack=True)
    assert a.mainloop == "sm90a" and a.pack_gqa
    a = _choose(hq=28, hkv=4, lq=300, pack_gqa=True, sm90_pack=True)
    assert a.mainloop == "sm80" and a.pack_gqa
    with pytest.raises(ValueError, match="pack-GQA with 7 query heads"):
        _choose(hq=28, hkv=4, lq=300, pack_gqa=True, sm90_pack=True, mainloop="sm90a")
    # automatic, pack_gqa=True packs on the Hopper kernel whatever the mean (a long prefill too)
    a = _choose(hq=32, hkv=8, lq=300, pack_gqa=True)
    assert a.mainloop == "sm90a" and a.pack_gqa
    a = _choose(hq=32, hkv=8, pack_gqa=True, mean_q=4096)
    assert a.mainloop == "sm90a" and a.pack_gqa
    # with the Hopper packing off (KERNELGEN_SM90_PACK_GQA=0), pack_gqa=True keeps the sm_80 path's packed tile
    a = _choose(hq=32, hkv=8, lq=300, pack_gqa=True, sm90_pack=False)
    assert a.mainloop == "sm80" and a.pack_gqa


def test_split_bound_counts_packed_tiles():
    """One KV head, 8 query heads, 1000 query tokens: 63 packed tiles of 16 tokens x 8 heads or 64
    tiles of 128 tokens a head (8 a head): about the same tile count, the same split bound."""
    a = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, num_heads_kv=1, mask="causal", max_seqlen_q=1000,
                 max_seqlen_k=32768, sm90_pack=True)
    b = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, num_heads_kv=1, mask="causal", max_seqlen_q=1000,
                 max_seqlen_k=32768)
    assert a.attention.pack_gqa and not b.attention.pack_gqa
    assert a.max_splits == b.max_splits > 1


@pytest.mark.parametrize("kw", [dict(hq=28, hkv=4), dict(d=256), dict(kv_dtype="e4m3"), dict()])
def test_forced_hopper_path_with_packing_on_never_raises_for_what_it_cannot_pack(kw):
    """arch="sm_90a" (mainloop "sm90a") on a decode-sized call, where the sm_80 path's default would
    pack: with the Hopper packing on, a call the Hopper kernel cannot pack runs unpacked, as with
    it off (review finding: the sm_80 default once leaked into the Hopper path and raised)."""
    for sp in (False, True):
        a = _choose(lq=8, mainloop="sm90a", sm90_pack=sp, **kw)
        assert a.mainloop == "sm90a"
        assert a.pack_gqa == (sp and not kw), a.name


def test_packed_two_warpgroup_kernels_give_the_producer_40_registers():
    """The producer's per-tile positions of packed rows spilled at 24 registers (soft-capped head dim
    64, 192 x 128 with a window): packed 8-warp kernels take (40, 232), the 12-warp one keeps (24, 160)."""
    a = _choose(sm90_pack=True)
    assert a.pack_gqa and a.template_vars()["producer_regs"] == 40 and a.template_vars()["consumer_regs"] == 232
    b = _choose(hq=64, hkv=8, d=64, sm90_pack=True)
    assert b.pack_gqa and b.template_vars()["producer_regs"] == 24 and b.template_vars()["consumer_regs"] == 160
    assert _choose().template_vars()["producer_regs"] == 24


def test_spec_refuses_what_the_kernel_does_not_pack():
    t = H.SM90_TILE
    ok = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", t, pack_gqa=True, mainloop="sm90a", sm90_opts="p")
    assert ok.sm90_unsupported() == ""
    with pytest.raises(ValueError, match="above head dim 192"):
        AttentionSpec("sm_90a", "bf16", 256, 256, "causal", "soa", H.sm90_tile(256, 256), pack_gqa=True,
                      mainloop="sm90a", sm90_opts="p")
    for kw in (dict(kv_dtype="e4m3"),):
        with pytest.raises(ValueError, match="pack_gqa"):
            AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", t, pack_gqa=True, mainloop="sm90a",
                          sm90_opts="p", **kw)
    short = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=1,
                     max_seqlen_k=4096, paged=True, mainloop="sm80").attention
    long = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", t, pack_gqa=True, paged=True, mainloop="sm90a",
                         sm90_opts="p", row_splits=short.split)
    with pytest.raises(ValueError, match="does not pack GQA"):
        FusedAttentionSpec(long, short)


def test_sm90_opts_setting_names_the_variable():
    """A letter that is no Hopper option in KERNELGEN_SM90_OPTS: ValueError naming the variable (the
    kernel spec's check said only "sm90_opts 'zzz'": a review's find)."""
    from kernelgen.selection.settings import SM90_OPTS

    assert Settings.from_env({SM90_OPTS: "hpr"}).check().sm90_opts == "hpr"
    assert Settings.from_env({SM90_OPTS: ""}).check().sm90_opts == ""
    with pytest.raises(ValueError, match=r"^KERNELGEN_SM90_OPTS must hold option letters of 'eghmprstx' .*got "
                                         r"'hzq' \('q', 'z' unknown\)"):
        Settings.from_env({SM90_OPTS: "hzq"}).check()


def test_setting_reads_the_environment(monkeypatch):
    assert Settings.from_env({}).check().sm90_pack_gqa is None
    for word, value in (("1", True), ("on", True), ("YES", True), ("0", False), ("off", False), (" ", None)):
        assert Settings.from_env({SM90_PACK_GQA: word}).check().sm90_pack_gqa is value
    # a typo is not taken for "unset": calls, plans and warmup raise, naming the variable
    bad = Settings.from_env({SM90_PACK_GQA: "maybe"})
    assert bad.sm90_pack_gqa is None
    with pytest.raises(ValueError, match="KERNELGEN_SM90_PACK_GQA must be one of .* got 'maybe'"):
        bad.check()
    from kernelgen.selection import catalog
    monkeypatch.setenv(SM90_PACK_GQA, "maybe")
    with pytest.raises(ValueError, match="KERNELGEN_SM90_PACK_GQA"):
        catalog.warmup_specs("sm_90a", head_dims=(64,), dtypes=("bf16",))


# ---------------------------------------------------------------- the Q box


def test_map_args_box_of_heads():
    dims, strides, box = tma.map_args(256, (1000, 32, 128), (32 * 128, 128, 1), 32, box_heads=4)
    assert dims == (128, 32, 1000) and strides == (256, 32 * 256) and box == (64, 4, 32)
    with pytest.raises(ValueError, match="box_heads"):
        tma.map_args(256, (1000, 2, 128), (256, 128, 1), 32, box_heads=4)


def test_packed_spec_gets_a_q_box_of_whole_tokens():
    q = torch.empty(500, 32, 128, dtype=BF16)
    k = torch.empty(900, 8, 128, dtype=BF16)
    spec = _choose(sm90_pack=True)
    maps = tma.attention_maps(spec, q, k, k, paged=False)
    assert maps.args[0][2] == (64, 4, 32)          # 4 heads x 32 tokens = the 128-row tile
    assert maps.args[1][2] == (64, 1, 128)         # K / V blocks unchanged
    unpacked = tma.attention_maps(_choose(), q, k, k, paged=False)
    assert unpacked.args[0][2] == (64, 1, 128)
    with pytest.raises(ValueError, match="whole tokens"):
        tma.AttentionMaps(q, k, k, 128, 128, q_heads=3)


# ---------------------------------------------------------------- the launch (CUDA stubbed)


def test_a_call_with_a_mistyped_pack_setting_names_the_variable(fake_cuda, monkeypatch):
    monkeypatch.setenv(SM90_PACK_GQA, "packed")
    api.clear_signature_cache()
    q, k, v = (torch.randn(500, h, 128, dtype=BF16) for h in (32, 8, 8))
    cu = torch.tensor([0, 500], dtype=torch.int32)
    with pytest.raises(ValueError, match="KERNELGEN_SM90_PACK_GQA must be one of .* got 'packed'"):
        kernelgen.varlen_attention(q, k, v, cu, cu, 500, 500, causal=True)
    assert fake_cuda.kinds() == []
    api.clear_signature_cache()


def test_packed_prefill_call_launches_the_packed_hopper_kernel(fake_cuda, monkeypatch):
    monkeypatch.setenv(SM90_PACK_GQA, "1")
    lens, klens = (300, 0, 129), (400, 5, 257)
    q = torch.randn(sum(lens), 8, 128).to(BF16)
    k = torch.randn(sum(klens), 2, 128).to(BF16)
    v = torch.randn_like(k)
    cu_q = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(klens).cumsum(0).tolist()], dtype=torch.int32)
    out = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=True)
    assert out.shape == q.shape
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    spec = api._CALLS._last[1].attn
    assert "_pack_" in spec.name and "_wgmma" in spec.name
    mq, mk, _ = fake_cuda.launches[1].maps()
    assert mq == (q.data_ptr(), (128, 8, 429), (256, 8 * 256), (64, 4, 32))
    assert mk[3] == (64, 1, 128)
    sched = fake_cuda.launches[0].fields()
    assert sched["num_heads"] == 2 and sched["pack_factor"] == 4 and sched["block_m"] == 128


def test_short_prompts_pack_without_the_switch(fake_cuda, monkeypatch):
    """No KERNELGEN_SM90_PACK_GQA: a batch of short prompts (mean 200 tokens) with 8 query heads a
    KV head packs; the same heads on requests of 2048 tokens do not, nor 4 heads a KV head."""
    monkeypatch.delenv(SM90_PACK_GQA, raising=False)
    for lens, hq, packed in (((300, 100, 129, 271), 16, True), ((2048, 2048), 16, False),
                             ((300, 100, 129, 271), 8, False)):
        q = torch.randn(sum(lens), hq, 128).to(BF16)
        k = torch.randn(sum(lens), 2, 128).to(BF16)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        kernelgen.varlen_attention(q, k, torch.randn_like(k), cu, cu, max(lens), max(lens), causal=True)
        spec = api._CALLS._last[1].attn
        assert "_wgmma" in spec.name and ("_pack_" in spec.name) == packed, spec.name


# ---------------------------------------------------------------- the builds


@pytest.mark.parametrize("hq,hkv,d,kw", [
    (32, 8, 128, dict(mask="causal")),
    (64, 8, 64, dict(mask="causal", num_splits=2)),                       # three warpgroups, split-KV
    (32, 8, 128, dict(mask="local", softcap=True, paged=True, page_size=16, num_splits=3)),   # TMA page boxes
    (16, 8, 192, dict(mask="causal", paged=True, page_size=1)),            # gathered rows
    # the review's spills (fixed: the producer's multiply-shift positions, 40 producer registers)
    (8, 2, 64, dict(mask="causal", softcap=True, num_splits=3)),
    (8, 4, 192, dict(mask="causal", num_splits=3)),
    (8, 2, (192, 128), dict(mask="local", num_splits=3)),
])
def test_packed_kernels_build_without_spills(hq, hkv, d, kw):
    base = dict(num_heads_q=hq, num_heads_kv=hkv, max_seqlen_q=4096, max_seqlen_k=8192, sm90_pack=True)
    d, dv = d if isinstance(d, tuple) else (d, d)
    a = H.choose("sm_90a", "bf16", d, dv, **{**base, **kw}).attention
    assert a.pack_gqa and a.mainloop == "sm90a"
    src = render.render(a)
    assert "constexpr bool PACK_GQA = true;" in src
    r = compiler.compile_cubin(src, a.arch, compiler.default_options(a.arch), a.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (a.name, r)


def test_unpacked_sources_say_so():
    """The packed code is rendered only into packed kernels (Jinja), so every unpacked kernel keeps its
    source and SASS (checked with NVRTC 13.0 over the GPU tests' 276 Hopper kernels when it was built)."""
    src = render.render(_choose())
    assert "constexpr bool PACK_GQA = false;" in src
    for packed_only in ("RowMap", "qpk_magic", "apply_mask_pos", "sched_heads", "tile_pos_first"):
        assert packed_only not in src, packed_only
    packed = render.render(_choose(sm90_pack=True))
    assert all(x in packed for x in ("RowMap", "qpk_magic", "apply_mask_pos", "sched_heads", "tile_pos_first"))


# ---------------------------------------------------------------- FP8 q / K / V (the FP8 tensor-core tile)


def test_fp8_tensor_core_tiles_pack_at_head_dims_64_and_128():
    """FP8 q, K and V at gpt-oss's heads (64 / 8, d 64): the FP8 tensor-core 192-row tile packs
    calls of requests up to 4k tokens automatically (the varlen trace 0.873x the unpacked time, H100),
    not longer ones (8k-16k: 1.006-1.046x); head dim 128's FP8 tiles pack as 16-bit 128-row tiles do
    (below 1024 tokens at >= 8 query heads a KV head); an FP8 cache with a 16-bit q keeps its converting producers unpacked."""
    fp8 = dict(kv_dtype="e4m3", q_dtype="e4m3")
    a = _choose(hq=64, hkv=8, d=64, mean_q=659, **fp8)
    assert a.fp8_mma and a.pack_gqa and a.tile.block_m == 192 and "_pack_" in a.name, a.name
    a = _choose(hq=64, hkv=8, d=64, mean_q=4096, **fp8)
    assert a.fp8_mma and a.pack_gqa, a.name
    for mean in (8192, 16384):
        a = _choose(hq=64, hkv=8, d=64, mean_q=mean, **fp8)
        assert a.fp8_mma and not a.pack_gqa, (mean, a.name)
    a = _choose(hq=64, hkv=8, d=64, mean_q=16384, sm90_pack=True, **fp8)     # KERNELGEN_SM90_PACK_GQA=1
    assert a.fp8_mma and a.pack_gqa
    a = _choose(hq=16, hkv=4, d=128, mean_q=659, **fp8)      # qpk 4 on 128 rows: not automatically
    assert a.fp8_mma and not a.pack_gqa, a.name
    a = _choose(hq=64, hkv=8, d=128, mean_q=659, **fp8)      # qpk 8: packed below 1024 tokens
    assert a.fp8_mma and a.pack_gqa and a.tile.block_m == 128, a.name
    a = _choose(hq=32, hkv=4, d=128, sm90_pack=True, **fp8)
    assert a.fp8_mma and a.pack_gqa, a.name
    with pytest.raises(ValueError, match="pack_gqa on FP8 wgmma above head dim 128"):
        dataclasses.replace(_choose(hq=16, hkv=4, d=256, **fp8), pack_gqa=True)
    with pytest.raises(ValueError, match="pack_gqa with an FP8 cache and a 16-bit q"):
        dataclasses.replace(_choose(hq=64, hkv=8, d=64, kv_dtype="e4m3"), pack_gqa=True)


@pytest.mark.parametrize("mask,softcap,paged,splits,kv_dtype", [
    ("causal", False, False, 0, "e4m3"), ("none", True, False, 3, "e5m2"), ("local", False, True, 3, "e4m3"),
    ("causal", True, True, 0, "e5m2")])
def test_fp8_packed_kernels_build_without_spills(mask, softcap, paged, splits, kv_dtype):
    """NVRTC for sm_90a: the packed FP8 tensor-core kernels at head dim 64 (sinks too) keep 128
    registers without spills, and their q / k / v descales are read at the tile's KV head."""
    a = H.choose("sm_90a", "bf16", 64, 64, num_heads_q=64, num_heads_kv=8, mask=mask, max_seqlen_q=600,
                 max_seqlen_k=3000, kv_dtype=kv_dtype, q_dtype="e4m3", mean_q=600, softcap=softcap, paged=paged,
                 page_size=16 if paged else 0, num_splits=splits).attention
    a = dataclasses.replace(a, sinks=True)
    assert a.fp8_mma and a.pack_gqa and a.tile.block_m == 192, a.name
    src = render.render(a)
    assert "constexpr bool PACK_GQA = true" in src and "tile_kv_head(ti, qpk))" in src and "ti.head / qpk)" not in src
    assert "tile_kv_head(te, qpk))" in src and "te.head / qpk)" not in src     # v_descale too
    res = compiler.compile_cubin(src, a.arch, compiler.default_options(a.arch), a.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["registers"] <= 128, r


def test_warmup_builds_the_packed_fp8_kernels_calls_take():
    """``kernelgen warmup --kv-dtype e4m3``: the packed FP8 tensor-core kernels that calls of short
    requests take automatically (``sm90_pack_auto``, mean below SM90_FP8_PACK_MAX_MEAN_Q) are pre-built."""
    from kernelgen.selection import catalog
    s = Settings()
    specs = set(catalog.warmup_specs("sm_90a", head_dims=(64,), dtypes=("bf16",), gqas=(8,), kv_dtypes=("e4m3",),
                                     phases=("prefill", "chunked"), settings=s))
    for phase in ("prefill", "chunked"):
        for max_q, max_k in catalog.PHASE_HINTS[phase]:
            for mask in ("causal", "none"):
                for mean in (0, 500):
                    v = H.choose("sm_90a", "bf16", 64, 64, num_heads_q=64, num_heads_kv=8, mask=mask,
                                 max_seqlen_q=max_q, max_seqlen_k=max_k, kv_dtype="e4m3", q_dtype="e4m3",
                                 mean_q=mean, sm90_opts=s.sm90_opts)
                    assert v.attention.pack_gqa == (mean > 0)
                    assert v.attention in specs, v.attention.name
                    assert v.combine is None or v.combine in specs


@pytest.mark.parametrize("hq,hkv,d", [(64, 8, 64), (64, 8, 128)])
def test_warmup_builds_the_packed_alibi_kernels_calls_take(hq, hkv, d):
    """``kernelgen warmup --alibi``: the packed ALiBi kernels that calls of short requests take
    automatically (192 rows at d 64, 128 rows at d 128 with qpk 8) are pre-built with the unpacked ones."""
    from kernelgen.selection import catalog
    s = Settings()
    specs = set(catalog.warmup_specs("sm_90a", head_dims=(d,), dtypes=("bf16",), gqas=(hq // hkv,), kv_heads=(hkv,),
                                     phases=("prefill", "chunked"), alibi=True, settings=s))
    for phase in ("prefill", "chunked"):
        for max_q, max_k in catalog.PHASE_HINTS[phase]:
            for mask in ("causal", "none"):
                for mean in (0, 500):
                    v = H.choose("sm_90a", "bf16", d, d, num_heads_q=hq, num_heads_kv=hkv, mask=mask,
                                 max_seqlen_q=max_q, max_seqlen_k=max_k, alibi=True, mean_q=mean,
                                 sm90_opts=s.sm90_opts)
                    assert v.attention.alibi and v.attention.pack_gqa == (mean > 0), v.attention.name
                    assert v.attention in specs, v.attention.name
                    assert v.combine is None or v.combine in specs


# ---------------------------------------------------------------- ALiBi (per-row slopes)


def test_alibi_packs_with_each_rows_slope():
    """Built-in ALiBi on the packed Hopper tile: each row's slope from its own query head
    (alibi_row_coefs) and its position from rpos (apply_alibi_pos / apply_alibi_causal_pos, no
    division a block); the 192-row tile at gpt-oss's heads packs below SM90_ALIBI_PACK_MAX_MEAN_Q
    tokens a request (the plain one at any length)."""
    for mask in ("causal", "none"):
        a = _choose(hq=64, hkv=8, d=64, mean_q=H.SM90_ALIBI_PACK_MAX_MEAN_Q - 1, alibi=True, mask=mask)
        assert a.pack_gqa and a.alibi and a.tile.block_m == 192, a.name
        for mean in (H.SM90_ALIBI_PACK_MAX_MEAN_Q, 16384):
            b = _choose(hq=64, hkv=8, d=64, mean_q=mean, alibi=True, mask=mask)
            assert not b.pack_gqa and b.alibi and b.tile.block_m == 192, b.name
            assert _choose(hq=64, hkv=8, d=64, mean_q=mean, mask=mask).pack_gqa
            assert _choose(hq=64, hkv=8, d=64, mean_q=mean, alibi=True, mask=mask, sm90_pack=True).pack_gqa
        src = render.render(a)
        fn = "apply_alibi_causal_pos<" if mask == "causal" else "apply_alibi_pos(s, alibi_sl, mi, n, rpos, lane)"
        assert fn in src and "#error" not in src
    a = _choose(hq=8, hkv=1, mean_q=600, alibi=True)
    assert a.pack_gqa and a.tile.block_m == 128
    assert "apply_alibi_pos" not in render.render(_choose(hq=64, hkv=8, d=64, mean_q=600, alibi=True, pack_gqa=False))


@pytest.mark.parametrize("d,hq,hkv,mask,softcap,paged,splits", [
    (64, 64, 8, "causal", False, False, 0), (64, 64, 8, "none", False, False, 3), (64, 64, 8, "local", False, False, 0),
    (128, 64, 8, "causal", True, True, 3), (192, 16, 2, "causal", False, False, 3), (96, 16, 2, "none", False, True, 0)])
def test_packed_alibi_kernels_build_without_spills(d, hq, hkv, mask, softcap, paged, splits):
    a = H.choose("sm_90a", "bf16", d, d, num_heads_q=hq, num_heads_kv=hkv, mask=mask, max_seqlen_q=600,
                 max_seqlen_k=3000, mean_q=600, softcap=softcap, paged=paged, page_size=16 if paged else 0,
                 num_splits=splits, alibi=True, window_span=200 if mask == "local" else -1).attention
    a = dataclasses.replace(a, sinks=True)
    assert a.pack_gqa and a.alibi, a.name
    r = compiler.compile_cubin(render.render(a), a.arch, compiler.default_options(a.arch), a.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r


# ---------------------------------------------------------------- user variants


def test_user_variants_pack_as_the_plain_call_and_where_asked(monkeypatch):
    """A user variant packs on the Hopper kernel where the plain call packs (``SM90_VARIANT_PACK_AUTO``:
    192-row tiles at any length, 128-row tiles at 8 query heads a KV head below 1024 tokens) and where
    the call asks (``pack_gqa=True`` or the switch); with ``SM90_VARIANT_PACK_AUTO`` off, only where asked."""
    from kernelgen.kernels.variant_code import VariantCode
    code = VariantCode(score_mod="50.f * tanhf(score / 50.f)")
    assert H.SM90_VARIANT_PACK_AUTO is True
    cases = [(64, 64, 8, 300), (64, 64, 8, 16384), (128, 32, 8, 300), (128, 32, 8, 16384), (128, 8, 1, 300),
             (128, 8, 1, 4096)]
    for d, hq, hkv, lq in cases:
        plain = _choose(hq=hq, hkv=hkv, d=d, lq=lq, mean_q=lq)
        a = _choose(hq=hq, hkv=hkv, d=d, lq=lq, mean_q=lq, variant=code)
        assert a.mainloop == "sm90a" and a.pack_gqa == plain.pack_gqa, (a.name, plain.name)
        a = _choose(hq=hq, hkv=hkv, d=d, lq=lq, pack_gqa=True, variant=code)
        assert a.mainloop == "sm90a" and a.pack_gqa and "_pack_" in a.name and a.variant == code, a.name
        a = _choose(hq=hq, hkv=hkv, d=d, lq=lq, sm90_pack=True, variant=code)
        assert a.mainloop == "sm90a" and a.pack_gqa, a.name
    assert [_choose(hq=hq, hkv=hkv, d=d, lq=lq, mean_q=lq, variant=code).pack_gqa for d, hq, hkv, lq in cases] == \
        [True, True, False, False, True, False]
    monkeypatch.setattr(H, "SM90_VARIANT_PACK_AUTO", False)
    for d, hq, hkv, lq in cases:
        assert not _choose(hq=hq, hkv=hkv, d=d, lq=lq, mean_q=lq, variant=code).pack_gqa
        assert _choose(hq=hq, hkv=hkv, d=d, lq=lq, pack_gqa=True, variant=code).pack_gqa
    assert _choose(hq=64, hkv=8, d=64, lq=300, mean_q=300).pack_gqa   # the plain call's choice is its own


def test_user_variants_do_not_pack_above_head_dim_128():
    """Packed at head dim 192 the examples' ALiBi / T5 / prefix-LM kernels spilled (SM90_VARIANT_PACK_MAX_HEAD_DIM):
    the automatic choice leaves them unpacked, pack_gqa=True takes the sm_80 path's packed tile, and a forced
    Hopper call names the reason."""
    from kernelgen.kernels.variant_code import VariantCode
    code = VariantCode(score_mod="50.f * tanhf(score / 50.f)")
    assert H.SM90_VARIANT_PACK_MAX_HEAD_DIM == 128
    assert _choose(hq=16, hkv=2, d=192, lq=300, mean_q=300).pack_gqa
    a = _choose(hq=16, hkv=2, d=192, lq=300, mean_q=300, variant=code)
    assert a.mainloop == "sm90a" and not a.pack_gqa, a.name
    a = _choose(hq=16, hkv=2, d=192, lq=300, pack_gqa=True, variant=code)
    assert a.mainloop == "sm80" and a.pack_gqa, a.name
    with pytest.raises(ValueError, match="pack-GQA with a user variant above head dim 128"):
        _choose(hq=16, hkv=2, d=192, lq=300, pack_gqa=True, mainloop="sm90a", variant=code)


def test_packed_variant_source_gives_the_snippets_each_rows_head_and_position():
    """The packed kernel's user calls take qpk (common/user_mod.cuh: row r is token r / qpk of query
    head kv_head * qpk + r % qpk); a kv_range gets the tile's query positions, not its packed rows."""
    from kernelgen.kernels.variant_code import VariantCode
    doc = VariantCode(mask_mod="doc[q_offset + q_idx] == doc[kv_idx]", kv_range="kv_lo = 0;",
                      tensors=(("doc", "int32"),))
    alibi = VariantCode(score_mod="score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)",
                                       tensors=(("slopes", "float32"),))
    for code in (doc, alibi):
        packed = _choose(hq=32, lq=300, pack_gqa=True, variant=code)
        unpacked = _choose(hq=32, lq=300, pack_gqa=False, variant=code)
        assert packed.pack_gqa and not unpacked.pack_gqa
        src, usrc = render.render(packed), render.render(unpacked)
        assert "row0, qpk, cw, lane" in src and "row0, qpk, cw, lane" not in usrc
        assert "row0, 1, cw, lane, score_scale" in usrc and "row0, 1, cw, lane, score_scale" not in src
        if code is doc:
            assert src.count("user_block_range(p, user_tile(ti, qpk), tile_pos_first(ti, qm), tile_pos_last(ti, qm) + 1") == 2
            assert "user_block_range(p, ut, tile_pos_first(ti, qm), pos_last + 1" in src
            assert "user_block_range(p, ut, ti.row0, pos_last + 1" in usrc
