"""The Hopper (sm_90a) attention path without a GPU: spec rules, the dispatcher's choice and its
overrides, the TMA tensor-map arguments, the parameter ABI, the launch a call makes (CUDA stubbed,
tests/fake_cuda.py), and NVRTC builds for sm_90a with no spills whose SASS holds warpgroup MMAs.

The three build lists (COMPILE, PAGED_COMPILE, PAGED_WIDE_COMPILE) compile a sample by default
that holds every value of every spec field the list holds (tests/sampling.py), and all of them
with ``--full-matrix``; test_every_build_case_renders renders every case of all three."""
import itertools
import re

import pytest
from pathlib import Path
import sampling
from sass_loops import shortest_loop
import torch

import kernelgen
from kernelgen.front import api
from kernelgen.jit import compiler, render, sass
from kernelgen.jit.cache import KernelCache
from kernelgen.kernels import tma
from kernelgen.kernels.params import ATTENTION_PARAMS, TMA_ATTENTION_PARAMS
from kernelgen.kernels.spec import AttentionSpec, TileConfig
from kernelgen.launch import prepared
from kernelgen.selection import heuristics, validation as V
from kernelgen.selection.settings import Settings

BF16 = torch.bfloat16
T90 = heuristics.SM90_TILE


def sm90(dtype="bf16", d=128, mask="causal", layout="soa", tile=None, opts="", dv=None, **kw):
    dv = d if dv is None else dv
    heavy = bool(kw.get("softcap") or kw.get("alibi") or kw.get("variant") is not None)
    tile = heuristics.sm90_tile(d, dv, kw.get("paged", False), kw.get("kv_dtype", ""), heavy) if tile is None else tile
    return AttentionSpec("sm_90a", dtype, d, dv, mask, layout, tile, mainloop="sm90a", sm90_opts=opts, **kw)


#: Every (head_dim, head_dim_v) pair of the Hopper path.
PAIRS = [(64, 64), (96, 96), (128, 128), (192, 192), (192, 128), (256, 256)]


# ------------------------------------------------------------------------------------- spec


def test_sm90_spec_shape_and_name():
    s = sm90()
    assert s.template == "attention/fwd_sm90.cu.j2" and s.num_threads == 384
    assert s.name == "attn_sm_90a_wgmma_bf16_d128_causal_soa_m128n128w8s2b1"
    # the dispatcher's default: ping-pong (docs/dev/perf-log.md) and the tile coordinates through shared
    # memory (docs/dev/issue22_account.md)
    assert heuristics.SM90_OPTS == "pt"
    assert sm90(opts="pt").name == "attn_sm_90a_wgmma_pingpong_tileinfo_bf16_d128_causal_soa_m128n128w8s2b1"
    assert sm90(opts="hs").name == "attn_sm_90a_wgmma_pvhalves_serial_bf16_d128_causal_soa_m128n128w8s2b1"
    assert sm90(opts="pr").name == "attn_sm_90a_wgmma_pingpong_lazyrescale_bf16_d128_causal_soa_m128n128w8s2b1"
    # Q (128 x 128) + 2 stages of K and V (128 x 128), bf16, + barriers + alignment slack
    assert s.smem_bytes() == 2 * 128 * (128 + 2 * 2 * 128) + 256 + 1024
    assert sm90(tile=TileConfig(128, 128, 8, 3, 1)).smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]
    s80 = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 3, 2))
    assert s80.template == "attention/fwd_sm80.cu.j2" and s80.num_threads == 128 and s80.name != s.name


@pytest.mark.parametrize("kw,why", [
    (dict(d=128, dv=64), "head dims"), (dict(d=256, dv=128), "head dims"), (dict(d=96, dv=64), "head dims"),
    (dict(pack_gqa=True, kv_dtype="e4m3"), "pack_gqa"),
    (dict(row_splits=True, split=True), "row_splits"),
    (dict(opts="g"), "paged cache"),
    (dict(d=192, dv=128, paged=True), "paged at head dims"),
    (dict(tile=TileConfig(128, 32, 4, 3, 2)), "tile"), (dict(tile=TileConfig(128, 128, 8, 2, 2)), "tile"),
    (dict(opts="z"), "sm90_opts"), (dict(opts="sh"), "sm90_opts"), (dict(opts="ps"), "ping-pong"),
    (dict(opts="gp", paged=True, tile=TileConfig(128, 192, 8, 2, 1)), "block_n up to 128"),
])
def test_sm90_spec_rejects_what_it_does_not_build(kw, why):
    with pytest.raises(ValueError, match=why):
        sm90(**kw)


def test_sm90_split_spec():
    s = sm90(split=True)
    assert s.split and s.name == "attn_sm_90a_wgmma_bf16_d128_causal_split_soa_m128n128w8s2b1"
    assert s.smem_bytes() == sm90().smem_bytes()
    src = render.render(s)
    assert "constexpr bool SPLIT = true" in src and "constexpr bool ROW_SPLITS = SPLIT" in src
    assert "constexpr bool SPLIT = false" in render.render(sm90())


def test_sm90_spec_needs_sm_90a_and_opts_need_sm90():
    with pytest.raises(ValueError, match="sm_90a"):
        AttentionSpec("sm_80", "bf16", 128, 128, "none", "soa", T90, mainloop="sm90a")
    with pytest.raises(ValueError, match="sm90_opts"):
        AttentionSpec("sm_90a", "bf16", 128, 128, "none", "soa", TileConfig(128, 32, 4, 3, 2), sm90_opts="h")


# -------------------------------------------------------------------------------- dispatcher

PREFILL = dict(num_heads_q=32, num_heads_kv=8, max_seqlen_q=4096, max_seqlen_k=4096)


@pytest.mark.parametrize("dtype,dd,mask", list(itertools.product(("bf16", "fp16"), PAIRS, ("none", "causal"))))
def test_automatic_choice_is_hopper_for_supported_prefill(dtype, dd, mask):
    d, dv = dd
    v = heuristics.choose("sm_90a", dtype, d, dv, mask=mask, **PREFILL)
    # the default options, without "t" above head dim 192 (the producer would spill)
    assert v.attention.mainloop == "sm90a" and v.attention.sm90_opts == ("pt" if max(d, dv) <= 192 else "p")
    assert v.attention.tile == heuristics.sm90_tile(d, dv) == heuristics.SM90_TILES.get((d, dv), T90)
    assert v.combine is None and v.max_splits == 1 and v.scheduler.arch == "sm_90a"


def test_sm90_spec_builds_window_and_softcap():
    for mask, cap in (("local", False), ("local", True), ("causal", True), ("none", True)):
        s = sm90(mask=mask, softcap=cap)
        assert s.sm90_unsupported() == "" and s.template == "attention/fwd_sm90.cu.j2"
    assert sm90(mask="local", softcap=True).name == "attn_sm_90a_wgmma_bf16_d128_local_softcap_soa_m128n128w8s2b1"


@pytest.mark.parametrize("dtype,d,mask,softcap", [(dt, d, m, c) for dt in ("bf16", "fp16") for d in (64, 128)
                                                  for m, c in (("local", False), ("local", True),
                                                               ("causal", True), ("none", True))])
def test_automatic_choice_is_hopper_for_window_and_softcap(dtype, d, mask, softcap):
    v = heuristics.choose("sm_90a", dtype, d, d, mask=mask, softcap=softcap, **PREFILL)
    a = v.attention
    # d 64 takes the three-warpgroup tile, soft-capped too ("softcap" in SM90_THREE_WG_EXTRAS); a
    # soft-cap takes option "m" except with a window (heuristics.with_mask_split, without_mask_split)
    assert a.tile == (TileConfig(192, 128, 12, 2, 1) if d == 64 else T90)
    heavy = heuristics.sm90_heavy(softcap, False, None)
    assert not heavy and a.mainloop == "sm90a" and a.tile == heuristics.sm90_tile(d, d, heavy=heavy) and a.mask == mask
    assert ("m" in a.sm90_opts) == (softcap and mask != "local"), a.name
    assert a.softcap == softcap and v.combine is None and v.max_splits == 1
    assert heuristics.sm90_unsupported("sm_90a", d, d, mask=mask, paged=False, softcap=softcap, pack=False,
                                       num_splits=0) == ""
    assert "mask" in heuristics.sm90_unsupported("sm_90a", d, d, mask="band", paged=False, softcap=False, pack=False,
                                                 num_splits=0)


@pytest.mark.parametrize("kw", [
    dict(pack_gqa=True, sm90_pack=False), dict(max_seqlen_q=1), dict(max_seqlen_q=48), dict(tma_ok=False),
    dict(paged=True, max_seqlen_q=1), dict(pack_gqa=True, num_heads_q=28, num_heads_kv=4),
])
def test_automatic_choice_falls_back_to_sm80(kw):
    v = heuristics.choose("sm_90a", "bf16", 128, 128, **{**PREFILL, **kw})
    assert v.attention.mainloop == "sm80"


@pytest.mark.parametrize("dtype,d,mask", list(itertools.product(("bf16", "fp16"), (64, 128), ("none", "causal"))))
def test_automatic_split_takes_the_hopper_path(dtype, d, mask):
    """Few tiles against many keys (1 request x 8 heads x 256 queries, 64k keys: 16 tiles on 132
    SMs): the Hopper kernel with split-KV, bounded by the Hopper tile's key blocks."""
    v = heuristics.choose("sm_90a", dtype, d, d, mask=mask, num_heads_q=8, num_heads_kv=2, max_seqlen_q=256,
                          max_seqlen_k=65536)
    t = heuristics.sm90_tile(d, d)
    assert v.attention.mainloop == "sm90a" and v.attention.tile == t and v.attention.split
    assert v.combine is not None and v.combine.head_dim_v == d and not v.forced_splits
    # the same bound FlashAttention-3's rule gives for the Hopper tile (16 tiles, 512 key blocks, 1 CTA/SM)
    assert v.max_splits == heuristics.num_splits_heuristic(8 * 2, 65536 // t.block_n, 132) > 1
    assert v.max_splits <= heuristics.MAX_AUTO_SPLITS
    # one request, one head, 256 queries, 64k keys: 2 tiles split much further
    one = heuristics.choose("sm_90a", dtype, d, d, mask=mask, num_heads_q=1, num_heads_kv=1, max_seqlen_q=256,
                            max_seqlen_k=65536)
    assert one.attention.mainloop == "sm90a" and one.max_splits > v.max_splits
    # enough tiles to fill the SMs: no split
    full = heuristics.choose("sm_90a", dtype, d, d, mask=mask, num_heads_q=32, num_heads_kv=8, max_seqlen_q=2048,
                             max_seqlen_k=65536)
    assert full.attention.mainloop == "sm90a" and not full.attention.split and full.combine is None
    # few key blocks (<= 4): no split however few the tiles
    short = heuristics.choose("sm_90a", dtype, d, d, mask=mask, num_heads_q=1, num_heads_kv=1, max_seqlen_q=256,
                              max_seqlen_k=512)
    assert short.attention.mainloop == "sm90a" and short.max_splits == 1 and short.combine is None


@pytest.mark.parametrize("mainloop", [None, "sm90a"])
def test_forced_splits_on_the_hopper_path(mainloop):
    for n in (2, 3, 7):
        v = heuristics.choose("sm_90a", "bf16", 128, 128, mask="causal", num_splits=n, mainloop=mainloop, **PREFILL)
        assert v.attention.mainloop == "sm90a" and v.attention.split and v.combine is not None
        assert v.forced_splits and v.max_splits == n
    # bounded by the Hopper tile's key blocks (300 keys: 3 blocks of 128)
    v = heuristics.choose("sm_90a", "bf16", 64, 64, num_splits=7, mainloop=mainloop,
                          **{**PREFILL, "max_seqlen_k": 300})
    assert v.attention.mainloop == "sm90a" and v.max_splits == 3 and v.forced_splits
    # num_splits=1: forced off
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_splits=1, mainloop=mainloop, num_heads_q=1, num_heads_kv=1,
                          max_seqlen_q=256, max_seqlen_k=65536)
    assert v.attention.mainloop == "sm90a" and not v.attention.split and v.max_splits == 1 and v.forced_splits
    # the sm_80 path keeps its own (lighter) split tile when forced there
    v80 = heuristics.choose("sm_90a", "bf16", 128, 128, num_splits=3, mainloop="sm80", **PREFILL)
    assert v80.attention.mainloop == "sm80" and v80.attention.split and v80.max_splits == 3


def test_per_head_dim_tiles_fit_shared_memory_and_the_report_shape_dispatches_to_hopper():
    """The tiles of heuristics.SM90_TILES: one CTA per SM within the 227 KB, the arithmetic of
    their comment; the bench's prefill_dense_causal_h256_s4k (2 x 16 x 4096, d 256, causal) call
    takes the Hopper path with the 128 x 80 tile."""
    assert heuristics.sm90_tile(256, 256) == TileConfig(128, 80, 8, 2, 1)
    assert heuristics.sm90_tile(192, 192) == TileConfig(128, 112, 8, 2, 1)
    assert heuristics.sm90_tile(192, 128) == TileConfig(128, 128, 8, 2, 1)
    assert heuristics.sm90_tile(96, 96) == heuristics.sm90_tile(128, 128) == T90
    # d 64: 192 rows in three consumer warpgroups (FlashAttention-3's tile), packed 16-bit K/V without
    # extra per-logit state only; the rest keep its keys and stages in two warpgroups
    assert heuristics.sm90_tile(64, 64) == TileConfig(192, 128, 12, 2, 1)
    for kw in ({"paged": True}, {"kv_dtype": "e4m3"}, {"heavy": True}):
        assert heuristics.sm90_tile(64, 64, **kw) == T90, kw
    expect = {(256, 256): 230656, (192, 192): 222464, (192, 128): 214272, (96, 96): 165120, (128, 128): 165120,
              (64, 64): 2 * 64 * (192 + 4 * 128) + 1280}
    for (d, dv), nbytes in expect.items():
        s = sm90(d=d, dv=dv)
        assert s.smem_bytes() == nbytes <= heuristics.SMEM_LIMIT["sm_90a"], (d, dv)
    v = heuristics.choose("sm_90a", "bf16", 256, 256, num_heads_q=16, num_heads_kv=16, mask="causal",
                          max_seqlen_q=4096, max_seqlen_k=4096)
    assert v.attention.mainloop == "sm90a" and v.attention.tile == TileConfig(128, 80, 8, 2, 1) and v.combine is None
    with pytest.raises(ValueError, match="shared memory"):  # 96-key blocks at d 256: 263 KB
        heuristics.choose("sm_90a", "bf16", 256, 256, mainloop="sm90a", tile=TileConfig(128, 96, 8, 2, 1), **PREFILL)


@pytest.mark.parametrize("d,dv", [(128, 64), (256, 128), (96, 64), (64, 128)])
def test_other_head_dims_fall_back_and_cannot_be_forced(d, dv):
    assert heuristics.choose("sm_90a", "bf16", d, dv, **PREFILL).attention.mainloop == "sm80"
    with pytest.raises(ValueError, match="Hopper"):
        heuristics.choose("sm_90a", "bf16", d, dv, mainloop="sm90a", **PREFILL)


def test_forced_mainloops():
    assert heuristics.choose("sm_90a", "bf16", 128, 128, mainloop="sm80", **PREFILL).attention.mainloop == "sm80"
    # forced Hopper on a decode-shaped call: no pack-GQA, one 128-row tile class
    v = heuristics.choose("sm_90a", "bf16", 128, 128, mainloop="sm90a", **{**PREFILL, "max_seqlen_q": 1})
    assert v.attention.mainloop == "sm90a" and not v.attention.pack_gqa
    for kw in (dict(pack_gqa=True, sm90_pack=False), dict(pack_gqa=True, num_heads_q=28, num_heads_kv=4),
               dict(tma_ok=False)):
        with pytest.raises(ValueError, match="Hopper"):
            heuristics.choose("sm_90a", "bf16", 128, 128, mainloop="sm90a", **{**PREFILL, **kw})
    # pack_gqa=True where the Hopper kernel packs (4 query heads a KV head on 128 rows)
    v = heuristics.choose("sm_90a", "bf16", 128, 128, mainloop="sm90a", pack_gqa=True, **PREFILL)
    assert v.attention.mainloop == "sm90a" and v.attention.pack_gqa
    with pytest.raises(ValueError, match="sm_90a"):
        heuristics.choose("sm_80", "bf16", 128, 128, mainloop="sm90a", **PREFILL)
    with pytest.raises(ValueError, match="mainloop"):
        heuristics.choose("sm_90a", "bf16", 128, 128, mainloop="sm100", **PREFILL)
    # an explicit tile without a mainloop is an sm_80 tile (the tile sweep's use)
    v = heuristics.choose("sm_90a", "bf16", 128, 128, tile=TileConfig(128, 64, 8, 2, 1), **PREFILL)
    assert v.attention.mainloop == "sm80"
    assert heuristics.choose("sm_80", "bf16", 128, 128, **PREFILL).attention.mainloop == "sm80"


def test_arch_argument_and_environment(monkeypatch):
    monkeypatch.delenv(V.ARCH_ENV, raising=False)
    assert Settings.from_env().arch is None
    assert V.arch(None, "sm_90a") is None and V.arch("auto", "sm_90a") is None
    assert V.arch("sm_80", "sm_90a") == "sm80" and V.arch("SM_90A", "sm_90a") == "sm90a"
    assert V.arch("sm_80", "sm_86") == "sm80"
    with pytest.raises(ValueError, match="Hopper device"):
        V.arch("sm_90a", "sm_80")
    with pytest.raises(ValueError, match="arch"):
        V.arch("sm_75", "sm_90a")
    with pytest.raises(TypeError, match="arch"):
        V.arch(90, "sm_90a")
    monkeypatch.setenv(V.ARCH_ENV, "sm_80")
    env = Settings.from_env().arch
    assert env == "sm_80"
    assert V.arch(None, "sm_90a", env) == "sm80" and V.arch("sm_90a", "sm_90a", env) == "sm90a"  # the argument wins
    monkeypatch.setenv(V.ARCH_ENV, "hopper")
    with pytest.raises(ValueError, match=V.ARCH_ENV):
        V.arch(None, "sm_90a", Settings.from_env().arch)


# ------------------------------------------------------------------------------------ TMA


def test_tma_map_args():
    q = torch.empty(1000, 32, 128, dtype=BF16)
    dims, strides, box = tma.map_args(0x1000, tuple(q.shape), tuple(q.stride()), 128)
    assert dims == (128, 32, 1000) and strides == (256, 32 * 256) and box == (64, 1, 128)
    qkv = torch.empty(300, 12, 64, dtype=BF16)
    k = qkv[:, 4:8]
    assert tma.map_args(16, tuple(k.shape), tuple(k.stride()), 64) == ((64, 4, 300), (128, 12 * 128), (64, 1, 64))
    assert tma.tma_compatible(k) and tma.tma_compatible(q)
    # head dim 96: boxes of 64 columns (the second reads columns 96..127 as zeros)
    q96 = torch.empty(50, 4, 96, dtype=BF16)
    assert tma.map_args(16, tuple(q96.shape), tuple(q96.stride()), 80) == ((96, 4, 50), (192, 4 * 192), (64, 1, 80))


@pytest.mark.parametrize("ptr,shape,strides,rows,what", [
    (0x1008, (10, 2, 128), (256, 128, 1), 64, "aligned"),
    (0x1000, (10, 2, 128), (260, 130, 1), 64, "stride"),
    (0x1000, (0, 2, 128), (256, 128, 1), 64, "token"),
    (0x1000, (10, 2, 80), (160, 80, 1), 64, "multiple of 32"),
    (0x1000, (10, 2, 32), (64, 32, 1), 64, "at least 64"),
    (0x1000, (10, 2, 128), (256, 1, 2), 64, "contiguous"),
    (0x1000, (10, 2, 128), (256, 128, 1), 300, "box_rows"),
])
def test_tma_map_args_refuses(ptr, shape, strides, rows, what):
    with pytest.raises(ValueError, match=what):
        tma.map_args(ptr, shape, strides, rows)


def test_tma_param_struct_abi():
    p = TMA_ATTENTION_PARAMS
    assert p.MAPS_BYTES == 384 and p.size % 64 == 0 and p.size >= 384 + ATTENTION_PARAMS.size
    static = {n: 0 for n in ATTENTION_PARAMS.names}
    static.update(num_heads_q=32, scale_log2=0.5)
    buf = bytearray(p.pack_static(static))
    assert len(buf) == p.size and not any(buf[:384])
    p.pointer_struct.pack_into(buf, 0, *range(1, len(p.pointer_names) + 1))
    fields = p.unpack(bytes(buf))
    assert fields["q"] == 1 and fields["k"] == 2 and fields["num_heads_q"] == 32 and fields["scale_log2"] == 0.5
    maps = bytes(range(256)) + bytes(128)
    assert p.pack({**static, "q": 5}, maps)[:384] == maps
    decl = p.c_decl()
    assert "struct TmaAttnParams { TmaDesc q; TmaDesc k; TmaDesc v; AttnParams p; };" in decl
    assert f"sizeof(TmaAttnParams) == {p.size}" in decl


# ---------------------------------------------------------------- the launch (CUDA stubbed)


def prefill_inputs(hq=8, hkv=2, d=128, lens=(300, 0, 129), klens=(400, 5, 257)):
    q = torch.randn(sum(lens), hq, d).to(BF16)
    k = torch.randn(sum(klens), hkv, d).to(BF16)
    v = torch.randn_like(k)
    cu_q = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(klens).cumsum(0).tolist()], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


def test_prefill_call_launches_the_hopper_kernel(fake_cuda):
    q, k, v, cu_q, cu_k = prefill_inputs()
    # (pack_gqa=False: these short prompts would pack, tests/test_hopper_pack_gqa_cpu.py's launch)
    out = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=True, pack_gqa=False)
    assert out.shape == q.shape
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    launch = fake_cuda.launches[1]
    spec = api._CALLS._last[1].attn
    assert launch.block == (384, 1, 1) and launch.grid == (132, 1, 1) and launch.smem == sm90(opts="pt").smem_bytes()
    assert "_tileinfo_" in spec.name and launch.smem == sm90().smem_bytes() + AttentionSpec.SM90_TINFO_BYTES
    assert "_wgmma" in spec.name
    f = launch.fields()
    assert (f["q"], f["k"], f["v"], f["out"]) == (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr())
    assert f["num_heads_q"] == 8 and f["num_heads_kv"] == 2 and f["q_row_stride"] == 8 * 128
    mq, mk, mv = launch.maps()
    assert mq == (q.data_ptr(), (128, 8, 429), (256, 8 * 256), (64, 1, 128))
    assert mk == (k.data_ptr(), (128, 2, 662), (256, 2 * 256), (64, 1, 128))
    assert mv[0] == v.data_ptr() and mv[1:] == mk[1:]
    # the scheduler is configured with the Hopper tile
    sched = fake_cuda.launches[0].fields()
    assert (sched["block_m"], sched["block_n"], sched["num_ctas"]) == (128, 128, 132)


def test_tensor_maps_encoded_once_per_pointer_set(fake_cuda, monkeypatch):
    calls = []
    from fake_cuda import fake_encode

    def counting(*a):
        calls.append(a[0])
        return fake_encode(*a)

    monkeypatch.setattr(tma, "_encoder", counting)
    q, k, v, cu_q, cu_k = prefill_inputs()
    out = torch.empty_like(q)
    for _ in range(3):
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, out=out)
    assert calls == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    q2 = q.clone()
    kernelgen.varlen_attention(q2, k, v, cu_q, cu_k, 300, 400, out=out)
    assert calls[3:] == [q2.data_ptr(), k.data_ptr(), v.data_ptr()]
    assert fake_cuda.launches[-1].maps()[0][0] == q2.data_ptr()


def test_arch_override_and_environment(fake_cuda, monkeypatch):
    q, k, v, cu_q, cu_k = prefill_inputs()
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, arch="sm_80")
    assert fake_cuda.kinds()[:2] == ["scheduler", "attention"]
    monkeypatch.setenv("KERNELGEN_ARCH", "sm_80")
    api.clear_signature_cache()
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)
    assert fake_cuda.kinds()[:2] == ["scheduler", "attention"]
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, arch="sm_90a")
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    monkeypatch.setenv("KERNELGEN_ARCH", "bogus")
    api.clear_signature_cache()
    with pytest.raises(ValueError, match="KERNELGEN_ARCH"):
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)


def test_sm90_opts_from_the_environment_when_a_signature_is_first_seen(fake_cuda, monkeypatch):
    """KERNELGEN_SM90_OPTS is read when a call signature is first seen (docs/environment.md; before
    the move into layers it was read once, at import): a value set after the import reaches the next
    new signature, a signature seen before keeps its kernel, and an empty value is no options."""
    from kernelgen.jit import runtime

    def hopper_opts():
        return [k.spec.sm90_opts for k in runtime.loaded_kernels() if getattr(k.spec, "mainloop", "") == "sm90a"]

    q, k, v, cu_q, cu_k = prefill_inputs()
    monkeypatch.delenv("KERNELGEN_SM90_OPTS", raising=False)
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)
    assert hopper_opts() == [heuristics.SM90_OPTS]
    monkeypatch.setenv("KERNELGEN_SM90_OPTS", "hr")
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)      # the signature's prepared call
    assert hopper_opts() == [heuristics.SM90_OPTS]
    api.clear_signature_cache()
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)
    assert hopper_opts() == [heuristics.SM90_OPTS, "hr"]
    monkeypatch.setenv("KERNELGEN_SM90_OPTS", "")
    api.clear_signature_cache()
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)
    assert hopper_opts() == [heuristics.SM90_OPTS, "hr", ""]
    monkeypatch.setenv("KERNELGEN_SM90_OPTS", "zz")
    api.clear_signature_cache()
    with pytest.raises(ValueError, match="^KERNELGEN_SM90_OPTS must hold option letters .* got 'zz'"):
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400)


@pytest.mark.parametrize("causal,kw,mask,left,right", [
    (False, dict(window_size=(64, -1)), "local", 64, -1),
    (False, dict(window_size=(64, 32)), "local", 64, 32),
    (True, dict(window_size=(64, 0)), "local", 64, 0),
    (True, dict(window_size=(100, 7)), "local", 100, 0),   # causal clamps the right side to 0
    (False, dict(softcap=20.0), "none", -1, -1),
    (True, dict(softcap=20.0), "causal", -1, 0),
    (True, dict(window_size=(128, 0), softcap=30.0), "local", 128, 0),
])
def test_window_and_softcap_calls_take_the_hopper_kernel(fake_cuda, causal, kw, mask, left, right):
    q, k, v, cu_q, cu_k = prefill_inputs()
    for arch in (None, "sm_90a"):
        fake_cuda.clear()
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=causal, arch=arch, **kw)
        assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
        f = fake_cuda.launches[1].fields()
        assert (f["window_left"], f["window_right"]) == (left, right)
        cap = kw.get("softcap", 0.0)
        assert f["softcap_log2"] == pytest.approx(cap * 1.4426950408889634, rel=1e-6)
        assert f["softcap_scale"] == pytest.approx(128 ** -0.5 / cap if cap else 0.0, rel=1e-6)
        sched = fake_cuda.launches[0].fields()
        assert sched["window_left"] == (left if mask == "local" else -1)
        name = api._CALLS._last[1].attn.name
        assert f"_{mask}_" in name and ("_softcap" in name) == (cap > 0) and "_wgmma" in name, name


def test_unsupported_calls_fall_back_or_raise_when_forced(fake_cuda):
    q, k, v, cu_q, cu_k = prefill_inputs(hq=14)   # 7 query heads a KV head: no 128-row tile of whole tokens
    for kw in (dict(pack_gqa=True),):
        fake_cuda.clear()
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=True, **kw)
        assert "attention_sm90" not in fake_cuda.kinds() and "attention" in fake_cuda.kinds()
        with pytest.raises(ValueError, match="Hopper"):
            kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=True, arch="sm_90a", **kw)
    q, k, v, cu_q, cu_k = prefill_inputs()
    v64 = v[..., :64].contiguous()
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v64, cu_q, cu_k, 300, 400)  # head dims 128 x 64
    assert "attention" in fake_cuda.kinds() and "attention_sm90" not in fake_cuda.kinds()
    with pytest.raises(ValueError, match="short_query_tokens"):
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, arch="sm_90a", short_query_tokens=4)


@pytest.mark.parametrize("arch", [None, "sm_90a"])
def test_split_call_launches_hopper_kernel_and_combine(fake_cuda, arch):
    """Forced and automatic split-KV: scheduler, the Hopper kernel (split variant) with the
    workspace's partial buffers, then the combine kernel on the same buffers."""
    q, k, v, cu_q, cu_k = prefill_inputs()
    out = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=True, num_splits=3, arch=arch,
                                     return_lse=True)[0]
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90", "combine"]
    prep = api._CALLS._last[1]
    assert isinstance(prep.attn, prepared.TmaLaunch) and "_split" in prep.attn.name
    sched, attn, comb = (x.fields() for x in fake_cuda.launches)
    assert (sched["max_splits"], sched["forced_splits"], sched["block_n"]) == (3, 1, 128)
    assert attn["out_accum"] and attn["lse_accum"] and attn["row_splits"]
    for f in ("out_accum", "lse_accum", "row_splits", "accum_split_stride", "accum_head_stride",
              "lse_accum_split_stride", "lse_accum_head_stride"):
        assert attn[f] == comb[f], f
    assert comb["out"] == out.data_ptr() == attn["out"]
    assert attn["accum_head_stride"] == q.shape[0] * 128 and attn["accum_split_stride"] == 8 * q.shape[0] * 128
    # automatic: 1 request x 2 heads x 256 queries against 16k keys
    fake_cuda.clear()
    api.clear_signature_cache()
    q, k, v, cu_q, cu_k = prefill_inputs(hq=2, hkv=1, lens=(256,), klens=(16384,))
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 256, 16384, arch=arch)
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90", "combine"]
    assert fake_cuda.launches[0].fields()["max_splits"] > 1 and not fake_cuda.launches[0].fields()["forced_splits"]


def test_strides_tma_cannot_address_fall_back(fake_cuda):
    """A one-head q whose head stride is not a multiple of 16 bytes passes validation (that dim
    has one element) but no tensor map can describe it: the call takes the sm_80 path."""
    T = 300
    buf = torch.randn(T * 128 + 8).to(BF16)
    q = torch.as_strided(buf, (T, 1, 128), (128, 3, 1))
    k = torch.randn(T, 1, 128).to(BF16)
    v = torch.randn_like(k)
    cu = torch.tensor([0, T], dtype=torch.int32)
    assert not tma.tma_compatible(q)
    kernelgen.varlen_attention(q, k, v, cu, cu, T, T)
    assert "attention" in fake_cuda.kinds() and "attention_sm90" not in fake_cuda.kinds()
    with pytest.raises(ValueError, match="TMA"):
        kernelgen.varlen_attention(q, k, v, cu, cu, T, T, arch="sm_90a")


def test_paged_plan_schedules_from_seqused_k_only(fake_cuda, monkeypatch):
    """A paged plan's schedule() takes the key lengths as run() and varlen_attention do: seqused_k,
    never cu_seqlens_k (it scheduled from cu_seqlens_k, and attend(seqused_k=...) then ran on
    metadata of other lengths: a review's find); nothing is launched for the refused calls."""
    from fake_cuda import make_plan

    plan = make_plan(monkeypatch, max_batch=4, num_heads_q=4, num_heads_kv=2, head_dim=64, max_seqlen_q=8,
                     max_seqlen_k=64, paged=True)
    cu_q = torch.tensor([0, 3, 10], dtype=torch.int32)
    fake_cuda.clear()
    with pytest.raises(ValueError, match=r"^cu_seqlens_k must be None for a paged plan \(key lengths come from "
                                         r"seqused_k\)$"):
        plan.schedule(cu_q, torch.tensor([0, 20, 50], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^seqused_k is required for a paged plan"):
        plan.schedule(cu_q)
    assert fake_cuda.kinds() == []
    plan.schedule(cu_q, seqused_k=torch.tensor([20, 30], dtype=torch.int32))
    assert fake_cuda.kinds() == ["scheduler"]


def test_plan_runs_the_hopper_kernel(fake_cuda, monkeypatch):
    """A prefill-shaped AttentionPlan on sm_90a takes the Hopper kernel: run() and
    schedule() + attend() launch it with the tensor maps of the step's q/k/v; arch="sm_80" keeps
    the mma.sync kernel; strides TMA cannot address are refused, naming the tensor."""
    from fake_cuda import make_plan

    kw = dict(max_batch=4, num_heads_q=8, num_heads_kv=2, head_dim=128, max_total_q=429, max_seqlen_q=300,
              max_seqlen_k=400, causal=True)
    plan = make_plan(monkeypatch, **kw)
    assert plan.hopper and plan.attn_spec.mainloop == "sm90a" and plan.combine is None
    q, k, v, cu_q, cu_k = prefill_inputs()
    out = torch.empty_like(q)
    for _ in range(2):
        fake_cuda.clear()
        plan.run(q, k, v, cu_q, cu_k, out=out)
        assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
        f = fake_cuda.launches[1].fields()
        assert (f["q"], f["out"], f["metadata"]) == (q.data_ptr(), out.data_ptr(), plan.metadata.data_ptr())
        assert [m[0] for m in fake_cuda.launches[1].maps()] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
        assert fake_cuda.launches[1].maps()[0][1:] == ((128, 8, 429), (256, 8 * 256), (64, 1, 128))
    fake_cuda.clear()
    plan.schedule(cu_q, cu_k)
    q2 = q.clone()
    plan.attend(q2, k, v, cu_q, cu_k, out=out)
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    assert [m[0] for m in fake_cuda.launches[1].maps()] == [q2.data_ptr(), k.data_ptr(), v.data_ptr()]
    assert fake_cuda.launches[1].fields()["q"] == q2.data_ptr()
    # one head whose head stride (3 elements) passes validation but no tensor map can describe
    one = make_plan(monkeypatch, **{**kw, "num_heads_q": 1, "num_heads_kv": 1})
    T = 300
    q1 = torch.as_strided(torch.randn(T * 128 + 8).to(BF16), (T, 1, 128), (128, 3, 1))
    k1 = torch.randn(T, 1, 128).to(BF16)
    cu = torch.tensor([0, T], dtype=torch.int32)
    assert one.hopper and not tma.tma_compatible(q1)
    with pytest.raises(ValueError, match="^q: the plan runs the Hopper"):
        one.run(q1, k1, k1, cu, cu)
    assert not make_plan(monkeypatch, arch="sm_80", **kw).hopper
    assert not make_plan(monkeypatch, **{**kw, "max_seqlen_q": 1}).hopper   # decode-shaped: sm_80 tiles
    with pytest.raises(ValueError, match="short_query_tokens"):
        make_plan(monkeypatch, arch="sm_90a", short_query_tokens=4, **kw)
    # a paged prefill plan without the fused launch: the Hopper kernel gathering K/V rows (the
    # page size is not known when the plan is made), no K/V tensor maps
    paged = make_plan(monkeypatch, **{**kw, "num_heads_q": 32, "num_heads_kv": 8, "max_total_q": 1600,
                                      "max_seqlen_q": 900, "max_seqlen_k": 1500}, paged=True, short_query_tokens=0)
    assert paged.hopper and paged.attn_spec.paged and "g" in paged.attn_spec.sm90_opts
    pq, kc, vc, pcu, used, pt = paged_prefill_inputs(16)
    fake_cuda.clear()
    paged.run(pq, kc, vc, pcu, seqused_k=used, page_table=pt)
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    n = tma.MAP_BYTES
    assert fake_cuda.launches[1].maps()[0][0] == pq.data_ptr() and fake_cuda.launches[1].params[n:3 * n] == bytes(2 * n)


# ------------------------------------------------------------------------ render and compile


def test_render_uses_the_hopper_instructions_and_keys_differ(tmp_path):
    src = render.render(sm90())
    for needle in ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.3d",
                   "bar.arrive", "constexpr bool PINGPONG = false",
                   "mbarrier.try_wait.parity", "setmaxnreg.inc.sync.aligned.u32 %0", "__grid_constant__",
                   "setmaxnreg_dec<24>", "setmaxnreg_inc<240>"):
        assert needle in src, needle
    s80 = heuristics.choose("sm_90a", "bf16", 128, 128, mainloop="sm80", mask="causal", **PREFILL).attention
    cache = KernelCache(tmp_path)
    opts = compiler.default_options("sm_90a")
    variants = (sm90(), s80, sm90(opts="h"), sm90(mask="none"), sm90(mask="local"), sm90(softcap=True),
                sm90(mask="local", softcap=True))
    keys = {cache.key_for(render.render(s), "sm_90a", opts) for s in variants}
    assert len(keys) == len(variants)
    src = render.render(sm90(mask="local", softcap=True))
    for needle in ("constexpr bool LOCAL = true", "constexpr bool SOFTCAP = true", "constexpr bool LPT = CAUSAL || LOCAL",
                   "tile_mask(p, ti)", "cap_scores(s, p, kd)"):
        assert needle in src, needle
    plain = render.render(sm90())
    assert "constexpr bool LOCAL = false" in plain and "constexpr bool SOFTCAP = false" in plain


_NVDISASM = sass.find_nvdisasm()
COMPILE = [dict(dtype=dt, d=d, dv=dv, mask=m) for dt in ("bf16", "fp16") for d, dv in PAIRS for m in ("none", "causal")]
COMPILE += [dict(opts="h"), dict(opts="s"), dict(opts="hs", mask="none"), dict(opts="p"), dict(opts="hp", d=64),
            dict(opts="pr"), dict(opts="r", dtype="fp16"),
            dict(layout="aos"),
            dict(split=True, d=64), dict(split=True, dtype="fp16", d=64, mask="none"), dict(split=True),
            dict(split=True, dtype="fp16", mask="none"), dict(split=True, layout="aos", opts="hs"),
            dict(tile=TileConfig(128, 128, 8, 3, 1)), dict(d=64, tile=TileConfig(128, 128, 8, 4, 1)),
            dict(d=256, opts="h"), dict(d=256, opts="s"), dict(d=256, opts="", layout="aos"), dict(d=192, opts="h"),
            dict(d=192, dv=128, opts="h"), dict(d=96, opts="h"), dict(d=96, opts="s")]
# sliding window and soft-cap (issue 5): both dtypes and head dims, and the mainloop options
COMPILE += [dict(dtype=dt, d=d, mask=m, softcap=c) for dt in ("bf16", "fp16") for d in (64, 128)
            for m, c in (("local", False), ("local", True), ("causal", True), ("none", True))]
COMPILE += [dict(mask="local", softcap=True, opts="s"), dict(mask="local", softcap=True, opts="hr"),
            dict(mask="local", opts="pr", layout="aos")]
# the slices together: split-KV with a window and soft-cap, and with the wide head dims
COMPILE += [dict(split=True, mask="local", softcap=True), dict(split=True, mask="causal", softcap=True, d=64,
                                                                dtype="fp16"), dict(split=True, mask="local", layout="aos")]
COMPILE += [dict(d=d, dv=dv, split=True, mask="local", softcap=True) for d, dv in ((256, 256), (192, 192), (192, 128),
                                                                                  (96, 96))]
COMPILE += [dict(d=256, mask="causal", softcap=True), dict(d=96, split=True)]
# the long class of a mixed batch on sm_90a: unsplit, recording row_splits for the combine
COMPILE += [dict(row_splits=True), dict(row_splits=True, mask="local", softcap=True, d=64)]


def _spec_axes(spec, **extra) -> dict:
    """The axes a build list is sampled over (tests/sampling.py): the spec's own values, defaults included."""
    return dict(dtype=spec.dtype, d=spec.head_dim, dv=spec.head_dim_v, mask=spec.mask, layout=spec.layout,
                opts=spec.sm90_opts, split=spec.split, softcap=spec.softcap, row_splits=spec.row_splits,
                tile=spec.tile, **extra)


def _fp8q(d, mask, softcap=False):
    return heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=16, num_heads_kv=4, mask=mask, max_seqlen_q=4096,
                             max_seqlen_k=4096, softcap=softcap, kv_dtype="e4m3", q_dtype="e4m3").attention


@pytest.mark.parametrize("make,width,stores", [
    (lambda: sm90(d=128, mask="causal", opts="pt"), 16, 8),   # 128 columns: 4 x 16 bytes a row half
    (lambda: sm90(d=64, mask="causal", opts="p"), 16, 4),
    (lambda: sm90(d=256, mask="none", opts="p"), 16, 16),
    (lambda: _fp8q(256, "causal"), 16, 16),
    (lambda: _fp8q(256, "causal", softcap=True), 16, 16),
    (lambda: sm90(d=256, mask="causal", opts="p"), 16, 16),   # (with the tile index through the shared window)
    (lambda: sm90(d=256, mask="local", opts="p"), 4, 0),      # 16 bytes spilled a word here
    (lambda: heuristics.choose("sm_90a", "bf16", 256, 256, num_heads_q=16, num_heads_kv=16, mask="causal",
                               max_seqlen_q=4096, max_seqlen_k=4096, softcap=True).attention, 4, 0),  # (gemma2's)
    (lambda: _fp8q(256, "local", softcap=True), 4, 0),       # and one more consumer spill here
])
def test_o_rows_are_stored_16_bytes_a_thread_where_that_adds_no_spill(make, width, stores):
    """The epilogue writes O with 16-byte stores (a 4 x 4 word transpose in each quad: 0.93-0.97x the
    time of 4-byte stores at d 256 on the H100, docs/dev/perf-log.md "Sixty-eighth session"), except
    where ptxas spilled with them (d 256: 16-bit with a window or a soft-cap, FP8 with both), which keep
    the 4-byte stores: so ``stores`` STG.E.128 in the SASS (each row half's head-dim columns over 32 bytes,
    both row halves) or none.  The 16-bit kernels with 16-byte stores build without spills (the FP8 d 256
    ones spill in the producer as before, tests/test_review_fp8q_cpu.py bounds them; the 4-byte ones are
    the old code: 16-bit d 256 with a window spilled 8 bytes before)."""
    spec = make()
    src = render.render(spec)
    assert f"constexpr int O_STORE = {width};" in src, spec.name
    res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.entry)
    text = sass.disassemble(res.cubin, sass.find_nvdisasm())
    assert len(re.findall(r"\bSTG\.E\.128\b", text)) == stores, spec.name
    if width == 16 and not spec.fp8_mma:
        r = res.resources
        assert r["spill_stores"] == r["spill_loads"] == r["stack_frame"] == 0, (spec.name, r)


@pytest.mark.parametrize("d,mask", [(256, "none"), (256, "causal"), (192, "none")])
def test_the_widest_default_tiles_compile_without_spills(d, mask):
    """The dispatched ping-pong tiles at the widest head dims sit at the consumers' 240 registers, so
    small mainloop changes tip them into spills (the P V wait pin did at d 256 without a mask, which
    the sampled matrix above had not built): always built."""
    spec = sm90(d=d, mask=mask, opts="p")
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)


@pytest.mark.parametrize("d,dv,mask", [(256, 256, "causal"), (256, 256, "none"), (192, 192, "causal")])
def test_wide_head_dims_keep_q_descriptors_uniform(d, dv, mask):
    """16-bit ping-pong kernels above head dim 128 without split-KV take the warp-uniform warpgroup
    index (docs/dev/fa3_d256_bf16_sass.md): Q's descriptors stay in uniform registers, so the key-block
    loop has at most 10 R2UR (32 at d 256 / 24 at d 192 before), the P V wait is pinned (d 256
    without a mask too), and nothing spills; with split-KV, AoS metadata or a soft-cap at d 256 the
    index stays per-thread (those builds spill with it)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sass_loops import shortest_loop

    from kernelgen.jit import sass
    spec = sm90(d=d, dv=dv, mask=mask, opts="p")
    src = render.render(spec)
    assert "const int cg = __shfl_sync(0xffffffffu, cw >> 2, 0);" in src and "#define KG_PIN_PV_WAIT 1" in src
    res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
    loop = shortest_loop(sass.disassemble(res.cubin, sass.find_nvdisasm()), "HGMMA", 8)
    assert sum(i.startswith("R2UR") for i in loop) <= 10
    for other in (sm90(d=d, dv=dv, mask=mask, opts="p", split=True), sm90(d=d, dv=dv, mask=mask, opts="p", layout="aos"),
                  sm90(d=256, mask=mask, opts="p", softcap=True)):
        assert "const int cg = cw >> 2;" in render.render(other), other.name


@pytest.mark.parametrize("kw", [dict(d=128, mask="causal"), dict(d=64, mask="none"), dict(d=192, mask="causal"),
                                dict(d=128, mask="causal", paged=True, split=True), dict(d=128, mask="local", softcap=True)],
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_early_next_tile_option(kw):
    """Option "e" (an experiment, not the dispatcher's): the consumers take the next tile's index and
    entry after the last P V, before the epilogue, the same slots and phases as before (slot
    (it + 1) & 1, phase ((it + 1) >> 1) & 1), and build without spills at 16-bit head dims up to 192
    (d 256 and the FP8 tensor-core kernels spill with it); without "e" the loop is rendered as before."""
    spec = sm90(opts="ep", **kw)
    src = render.render(spec)
    assert "t_next = take_tile(s_tile, sn, lane);" in src and "_earlytile_" in spec.name
    assert "mbar_wait(bar_tile_full(sb, sn), ((it + 1) >> 1) & 1, 5);" in src
    assert src.index("t_next = take_tile(s_tile, sn, lane);") < src.index("finalize_rows(o, row_max, row_sum, lse);")
    assert "t_next" not in render.render(sm90(opts="p", **kw))
    r = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)


@pytest.mark.parametrize("kw", [dict(d=128, mask="causal"), dict(d=64, mask="none"), dict(d=192, mask="causal"),
                                dict(d=192, dv=128, mask="causal"), dict(d=96, mask="causal"),
                                dict(d=128, mask="causal", paged=True, split=True), dict(d=128, mask="local", softcap=True),
                                dict(d=128, mask="causal", pack_gqa=True), dict(d=128, mask="causal", kv_dtype="e4m3"),
                                dict(d=64, mask="none", kv_dtype="e5m2", paged=True),
                                dict(d=96, mask="local", kv_dtype="e4m3", split=True)],
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_tile_info_option(kw):
    """Option "t" (the dispatcher's default where it builds clean; docs/dev/issue22_account.md): the producer
    writes each tile's coordinates into shared-memory slot it & 3 before publishing its index, the
    consumers read them there at the tile start and again for the epilogue (no scheduler metadata
    from global memory) and release the index slot after the epilogue's read; 256 more bytes of
    shared memory; built without spills up to head dim 192; without "t" the kernels render as before."""
    spec = sm90(opts="pt", **kw)
    src = render.render(spec)
    assert "_tileinfo_" in spec.name and spec.smem_bytes() == sm90(opts="p", **kw).smem_bytes() + 256
    assert f"static_assert(SMEM_BYTES == {spec.smem_bytes()}" in src
    put = src.index("put_tile_info(sb + OFF_TINFO + (it & 3) * TINFO_INTS * 4, ti);")
    assert put < src.index("publish_tile_s(sb, slot, it, t);", put)   # coordinates before the index
    loop = src[src.index("void consumer_loop("):]
    reads = [i for i in range(len(loop)) if loop.startswith("get_tile_info(sb + OFF_TINFO + (it & 3)", i)]
    assert len(reads) == 2 and "find_entry(" not in loop[:loop.index("finalize_rows(")]
    assert reads[1] < loop.index("release(bar_tile_empty(sb, slot), lane);", reads[1]) < loop.index("store_rows(p, te")
    plain = render.render(sm90(opts="p", **kw))
    assert "get_tile_info" not in plain and "take_tile_s" not in plain and "OFF_TINFO" not in plain
    r = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)


def test_tile_info_option_from_the_environment_is_dropped_where_it_does_not_apply():
    """KERNELGEN_SM90_OPTS with "t" (review finding): head dim 256, rows gathered through the page
    table and the fused mixed-batch kernel run without it instead of raising."""
    kw = dict(num_heads_q=32, num_heads_kv=8, max_seqlen_q=4096, max_seqlen_k=8192, mask="causal", sm90_opts="pt")
    assert "_tileinfo_" in heuristics.choose("sm_90a", "bf16", 128, 128, **kw).attention.name
    assert "_tileinfo_" not in heuristics.choose("sm_90a", "bf16", 256, 256, **kw).attention.name
    g = heuristics.choose("sm_90a", "bf16", 128, 128, paged=True, page_size=24, **kw).attention
    assert "_gather_" in g.name and "t" not in g.sm90_opts
    fkw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=2048, max_seqlen_k=8192, paged=True,
               short_max_q=4, page_size=64)
    plain = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, **fkw)
    with_t = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, sm90_opts="pt", **fkw)
    assert plain is not None and with_t is not None and with_t.fused == plain.fused
    assert heuristics.sm90_options(False, 0, 128, "pt", 256) == "p" and heuristics.sm90_options(False, 0, 128, "pt", 192) == "pt"


def test_tile_info_default_is_dropped_where_it_would_spill():
    """The default options' "t" goes only where its kernels build without spills (NVRTC 13.0, every
    "t" kernel of the serving catalog, the GPU tests and fuzz seed 41: ``heuristics.sm90_tileinfo_fits``
    and ``sm90_options``): the SoA layout, not head dim 64 on pages or with a window, not packed
    paged head dim 192 or packed paged split-KV, no per-logit extra, an FP8 cache only with
    ``SM90_FP8_TILEINFO`` (off), up to head dim 128 and not with a window at 128; d 64 with a window,
    forced, spills."""
    kw = dict(num_heads_q=32, num_heads_kv=8, max_seqlen_q=2048, max_seqlen_k=8192)

    def opts(d, mask="causal", **k):
        return heuristics.choose("sm_90a", "bf16", d, d, mask=mask, **kw, **k).attention.sm90_opts

    assert opts(64) == opts(96) == opts(128) == opts(192) == "pt"
    assert opts(128, paged=True, page_size=128) == opts(96, mask="local") == "pt"
    assert opts(128, num_splits=4) == opts(192, mask="none", paged=True, page_size=128, num_splits=4) == "pt"
    assert opts(64, paged=True, page_size=128) == opts(64, mask="local") == "p"      # d 64: pages, window
    assert opts(128, layout="aos") == opts(192, layout="aos") == "p"                  # AoS metadata
    assert opts(192, paged=True, page_size=128, pack_gqa=True) == "p"                 # packed, paged, d 192
    assert opts(128, mask="none", paged=True, page_size=128, pack_gqa=True, num_splits=4) == "p"   # ... split
    assert opts(128, mask="none", paged=True, page_size=128, pack_gqa=True, num_splits=1) == "pt"
    assert opts(192, mask="local", num_splits=4) == "p" and opts(192, mask="local", num_splits=1) == "pt"
    assert opts(128, alibi=True) == opts(256) == "p" and opts(128, softcap=True) == "mp"   # extras, d 256
    assert opts(128, kv_dtype="e4m3") == opts(64, kv_dtype="e4m3") == "p"               # FP8: SM90_FP8_TILEINFO off
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(heuristics, "SM90_FP8_TILEINFO", True)
        assert opts(128, kv_dtype="e4m3") == opts(64, kv_dtype="e4m3") == opts(96, mask="local", kv_dtype="e4m3") == "pt"
        assert opts(192, kv_dtype="e4m3") == opts(128, mask="local", kv_dtype="e4m3") == "p"   # d 192, window at 128
    assert not heuristics.sm90_tileinfo_fits(128, 128, "soa", "local", False, False, kv_dtype="e4m3")
    assert heuristics.sm90_tileinfo_fits(128, 128, "soa", "local", False, False)
    assert heuristics.sm90_tileinfo_fits(128, 128, "soa", "local", True, True)
    assert not heuristics.sm90_tileinfo_fits(128, 128, "soa", "none", True, True, split=True)
    assert not heuristics.sm90_tileinfo_fits(64, 64, "soa", "causal", True, False)
    spec = sm90(d=64, mask="local", opts="pt")
    r = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name).resources
    assert r["spill_stores"] > 0, (spec.name, r)     # why d 64 with a window keeps "p"


def test_tile_info_option_refusals():
    with pytest.raises(ValueError, match="above head dim 192"):
        sm90(d=256, opts="pt")
    for opts in ("ept", "gpt"):
        with pytest.raises(ValueError, match="'t'"):
            sm90(opts=opts, paged=True)
    from kernelgen.kernels.spec import FusedAttentionSpec
    short = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                              max_seqlen_q=1, max_seqlen_k=4096, paged=True, mainloop="sm80").attention
    long = sm90(opts="pt", paged=True, row_splits=short.split)
    with pytest.raises(ValueError, match="sm90_opts 't'"):
        FusedAttentionSpec(long, short)


@pytest.mark.parametrize("kw", sampling.matrix(COMPILE, 1, lambda kw: _spec_axes(sm90(**kw))),
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_hopper_kernel_compiles_without_spills_with_hgmma(kw):
    """Sampled: each value of each spec field (dtype, head dims, mask, layout, options, split,
    soft-cap, row splits, tile) that COMPILE holds is compiled in at least one case."""
    spec = sm90(**kw)
    assert spec.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    assert r["registers"] * spec.num_threads <= 65536, r       # __launch_bounds__(384, 1)
    # ptxas honoured setmaxnreg (C7508 says it ignored it), kept the wgmmas asynchronous
    # (C7510: serialised) and needed no fence of its own (C7519)
    for code in ("C7508", "C7510", "C7519"):
        assert code not in res.log, res.log
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    ops = sass.opcode_counts(sass.disassemble(res.cubin, _NVDISASM))
    halves, vhalves = -(-spec.head_dim // 64), -(-spec.head_dim_v // 64)  # 64-column blocks (96 -> 2)
    pv = spec.tile.block_n // 16 * (vhalves if ("h" in spec.sm90_opts or vhalves == 1) else 1)
    per_block = spec.head_dim // 16 + pv                            # Q K^T k-steps + P V k-steps
    assert ops["HGMMA"] >= per_block and ops["HGMMA"] % per_block == 0, ops
    assert ops["HMMA"] == 0 and ops["LDL"] == 0 and ops["STL"] == 0, ops
    assert ops["UTMALDG"] >= 2 * halves + vhalves and ops["USETMAXREG"] == 2, ops


# ------------------------------------------------------------------------- paged K/V (issue 5)


def test_paged_spec_options_and_registers():
    s = sm90(paged=True, opts="p")
    assert s.name == "attn_sm_90a_wgmma_pingpong_bf16_d128_causal_paged_soa_m128n128w8s2b1"
    g = sm90(paged=True, opts="gp")
    assert g.name == "attn_sm_90a_wgmma_gather_pingpong_bf16_d128_causal_paged_soa_m128n128w8s2b1"
    assert g.smem_bytes() == s.smem_bytes() == sm90().smem_bytes()
    # paged producers keep more registers (the gathering one most); the consumers' increase must
    # not exceed what the producer gives back from the launch's 168 a thread
    (pr, cr), (pp, cp), (pr0, cr0) = (AttentionSpec.SM90_REGS_GATHER[8], AttentionSpec.SM90_REGS_PAGED[8],
                                      AttentionSpec.SM90_REGS[8])
    assert pr > pp > pr0
    for a, b in ((pr, cr), (pp, cp), (pr0, cr0)):
        assert 128 * a + 256 * b <= 168 * 384 and a % 8 == 0 and b % 8 == 0
    assert g.template_vars()["producer_regs"] == pr and s.template_vars()["producer_regs"] == pp
    assert sm90().template_vars()["producer_regs"] == pr0


@pytest.mark.parametrize("page_size,opts", [(128, "pt"), (256, "pt"), (1024, "pt"), (64, "pt"), (16, "pt"), (8, "pt"),
                                            (1, "gp"), (4, "gp"), (0, "gp"), (192, "gp"), (48, "gp"), (24, "gp")])
def test_paged_choice_picks_the_load_path_from_the_page_size(page_size, opts):
    v = heuristics.choose("sm_90a", "bf16", 128, 128, mask="causal", paged=True, page_size=page_size, **PREFILL)
    assert v.attention.mainloop == "sm90a" and v.attention.paged and v.attention.sm90_opts == opts
    assert heuristics.sm90_options(True, page_size, 128) == opts
    assert heuristics.sm90_options(False, page_size, 128) == "pt"
    # "t" is dropped where the kernel would spill or does not take it (rows gathered, option "e")
    assert heuristics.sm90_options(False, page_size, 128, max_head_dim=256) == "p"
    assert heuristics.sm90_options(False, page_size, 128, max_head_dim=128, kv_dtype="e4m3") == "p"
    with pytest.MonkeyPatch.context() as mp:     # FP8 with "t" (SM90_FP8_TILEINFO): up to head dim 128
        mp.setattr(heuristics, "SM90_FP8_TILEINFO", True)
        assert heuristics.sm90_options(False, page_size, 128, max_head_dim=128, kv_dtype="e4m3") == "pt"
        assert heuristics.sm90_options(False, page_size, 128, max_head_dim=192, kv_dtype="e4m3") == "p"
    assert heuristics.sm90_options(False, page_size, 128, extras=True) == "p"
    with pytest.MonkeyPatch.context() as mp:     # "t" on soft-cap / ALiBi / variant kernels: experiments only
        mp.setattr(heuristics, "SM90_TILEINFO_EXTRAS", True)
        assert heuristics.sm90_options(False, page_size, 128, extras=True) == "pt"
        assert heuristics.sm90_options(False, page_size, 128, max_head_dim=256, extras=True) == "p"
    assert heuristics.sm90_options(False, page_size, 128, "ept") == "ep"


def test_paged_choice_gather_forced_and_decode_shapes(monkeypatch):
    monkeypatch.setattr(heuristics, "SM90_OPTS", "gp")  # "g" forces gathering on any page size
    assert heuristics.choose("sm_90a", "bf16", 64, 64, paged=True, page_size=256, **PREFILL).attention.sm90_opts == "gp"
    assert heuristics.choose("sm_90a", "bf16", 64, 64, **PREFILL).attention.sm90_opts == "p"  # packed K/V: no "g"
    monkeypatch.setattr(heuristics, "SM90_OPTS", "p")
    # decode-shaped paged calls stay on the sm_80 path (pack-GQA, small tiles) unless forced
    kw = {**PREFILL, "max_seqlen_q": 1}
    assert heuristics.choose("sm_90a", "bf16", 128, 128, paged=True, page_size=16, **kw).attention.mainloop == "sm80"
    v = heuristics.choose("sm_90a", "bf16", 128, 128, paged=True, page_size=1, mainloop="sm90a", **kw)
    assert v.attention.mainloop == "sm90a" and v.attention.sm90_opts == "gp" and not v.attention.pack_gqa
    # soft-cap, a window and forced splits run paged on the Hopper path too
    for extra in (dict(softcap=True), dict(mask="local"), dict(num_splits=2)):
        v = heuristics.choose("sm_90a", "bf16", 128, 128, paged=True, page_size=16, **{**PREFILL, **extra})
        assert v.attention.mainloop == "sm90a" and v.attention.paged
    # paged head dims 96, 192 and 256 (head_dim == head_dim_v) run on the Hopper path: 192 and 256 on
    # 64-key blocks (SM90_PAGED_TILES: TMA boxes for every power-of-two page size), gathered rows of
    # d 256 on 48-key blocks (SM90_GATHER_TILES), which also make 24-token pages TMA boxes
    cases = [(96, 256, 128, "p"), (96, 1, 128, "gp"), (192, 256, 64, "p"), (192, 16, 64, "p"), (192, 24, 64, "gp"),
             (256, 256, 64, "p"), (256, 64, 64, "p"), (256, 8, 64, "p"), (256, 1, 48, "gp"), (256, 24, 48, "p")]
    for d, ps, bn, opts in cases:
        a = heuristics.choose("sm_90a", "bf16", d, d, paged=True, page_size=ps, **PREFILL).attention
        assert (a.mainloop, a.tile.block_n, a.sm90_opts, a.paged) == ("sm90a", bn, opts, True), (d, ps, a.name)
    # 192 x 128 paged falls back (and cannot be forced)
    assert heuristics.choose("sm_90a", "bf16", 192, 128, paged=True, page_size=256,
                             **PREFILL).attention.mainloop == "sm80"
    with pytest.raises(ValueError, match="Hopper"):
        heuristics.choose("sm_90a", "bf16", 192, 128, paged=True, page_size=256, mainloop="sm90a", **PREFILL)


def test_paged_prefers_hopper_by_mean_query_length():
    n = heuristics.SM90_PAGED_MIN_MEAN_Q
    assert heuristics.paged_prefers_hopper(True, 4 * n, 4) and heuristics.paged_prefers_hopper(True, n, 1)
    assert not heuristics.paged_prefers_hopper(True, 4 * n - 1, 4)
    assert not heuristics.paged_prefers_hopper(False, 4 * n, 4)
    assert not heuristics.paged_prefers_hopper(True, 0, 0)


def test_paged_map_args():
    kc = torch.empty(50, 128, 8, 128, dtype=BF16)
    dims, strides, box = tma.paged_map_args(0x1000, tuple(kc.shape), tuple(kc.stride()), 128)
    assert dims == (128, 8, 128, 50) and strides == (256, 8 * 256, 128 * 8 * 256) and box == (64, 1, 128, 1)
    kv = torch.empty(50, 2, 64, 4, 64, dtype=BF16)       # interleaved K/V pages: page stride 2x
    k = kv[:, 0]
    assert tma.paged_map_args(16, tuple(k.shape), tuple(k.stride()), 64) == (
        (64, 4, 64, 50), (128, 4 * 128, 2 * 64 * 4 * 128), (64, 1, 64, 1))
    assert tma.tma_compatible(k) and tma.tma_compatible(kc)


@pytest.mark.parametrize("ptr,shape,strides,rows,what", [
    (0x1000, (10, 16, 2, 128), (16 * 256, 256, 128, 1), 64, "page_size"),
    (0x1000, (0, 128, 2, 128), (128 * 256, 256, 128, 1), 64, "page"),
    (0x1000, (10, 128, 2, 128), (128 * 256 + 4, 256, 128, 1), 64, "page stride"),
    (0x1008, (10, 128, 2, 128), (128 * 256, 256, 128, 1), 64, "aligned"),
    (0x1000, (10, 128, 2, 80), (128 * 160, 160, 80, 1), 64, "multiple of 32"),
])
def test_paged_map_args_refuses(ptr, shape, strides, rows, what):
    with pytest.raises(ValueError, match=what):
        tma.paged_map_args(ptr, shape, strides, rows)


def paged_prefill_inputs(page_size, qlens=(900, 700), ctx=(1500, 900), hq=32, hkv=8, d=128):
    need = [-(-c // page_size) for c in ctx]
    kc = torch.randn(sum(need) + 3, page_size, hkv, d).to(BF16)
    vc = torch.randn_like(kc)
    pt = torch.arange(sum(need), dtype=torch.int32).flip(0)[:max(need)].repeat(len(ctx), 1)
    q = torch.randn(sum(qlens), hq, d).to(BF16)
    cu_q = torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], dtype=torch.int32)
    used = torch.tensor(ctx, dtype=torch.int32)
    return q, kc, vc, cu_q, used, pt


@pytest.mark.parametrize("page_size", [128, 256, 16, 1, 24])
def test_paged_prefill_call_launches_the_hopper_kernel(fake_cuda, page_size):
    q, kc, vc, cu_q, used, pt = paged_prefill_inputs(page_size)
    out = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 900, 1500, seqused_k=used, page_table=pt, causal=True,
                                     pack_gqa=False)   # (unpacked Q boxes; these prompts would pack)
    assert out.shape == q.shape and fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    spec = [k.spec for k in kernelgen.jit.runtime.loaded_kernels() if getattr(k.spec, "mainloop", "") == "sm90a"
            and k.spec.paged][-1]
    gather = page_size in (1, 24)
    assert spec.sm90_opts == ("gp" if gather else "pt") and "_paged" in spec.name
    launch = fake_cuda.launches[1]
    assert launch.block == (384, 1, 1) and launch.smem == spec.smem_bytes()
    f = launch.fields()
    assert (f["k"], f["v"], f["page_table"], f["seqused_k"]) == (kc.data_ptr(), vc.data_ptr(), pt.data_ptr(),
                                                               used.data_ptr())
    assert f["page_size"] == page_size and f["k_page_stride"] == page_size * 8 * 128 and f["cu_seqlens_k"] == 0
    mq = launch.maps()[0]
    assert mq == (q.data_ptr(), (128, 32, 1600), (256, 32 * 256), (64, 1, 128))
    n = tma.MAP_BYTES
    if gather:          # no K/V maps: the producer warps gather the rows
        assert launch.params[n:3 * n] == bytes(2 * n)
    else:
        _, mk, mv = launch.maps(kv_rank=4)
        pages = kc.shape[0]
        rows = min(page_size, 128)            # boxes of whole pages, or of whole blocks inside a page
        assert mk == (kc.data_ptr(), (128, 8, page_size, pages), (256, 2048, page_size * 2048), (64, 1, rows, 1))
        assert mv[0] == vc.data_ptr() and mv[1:] == mk[1:]


def test_paged_calls_fused_or_sm80_where_the_hopper_path_does_not_pay(fake_cuda):
    # mixed batch (short requests among long ones): one Hopper fused launch, the long class on the
    # wgmma/TMA variant (test_fused_cpu.test_mixed_call_on_sm90_takes_the_hopper_fused_launch)
    import fake_cuda as fake_cuda_module
    from test_fused_cpu import CTX, QLENS, paged_inputs
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    assert fake_cuda.launches[2].block == (384, 1, 1) and fake_cuda.launches[2].fields()["short_ctas"] == \
        fake_cuda_module.default_short_ctas()
    # arch="sm_80": the sm_80 path; arch="sm_90a" forces the Hopper kernel even for a mixed batch
    q, kc, vc, cu_q, used, pt = paged_prefill_inputs(16)
    fake_cuda.clear()
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, 900, 1500, seqused_k=used, page_table=pt, arch="sm_80")
    assert "attention_sm90" not in fake_cuda.kinds()
    fake_cuda.clear()
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True, arch="sm_90a")
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]


PAGED_COMPILE = [dict(dtype=dt, d=d, mask=m, opts=o) for dt in ("bf16", "fp16") for d in (64, 128)
                 for m in ("none", "causal") for o in ("p", "gp")]
PAGED_COMPILE += [dict(opts="gp", layout="aos"), dict(opts="g"), dict(opts="gs"), dict(opts="ghp", d=128),
                  dict(opts="p", tile=TileConfig(128, 64, 8, 2, 1)), dict(opts="gp", d=64, tile=TileConfig(128, 64, 8, 3, 1))]
# paged with the other slices: window, soft-cap and split-KV together (the fewest consumer registers)
PAGED_COMPILE += [dict(opts="p", row_splits=True), dict(opts="gp", row_splits=True, mask="local"),
                  dict(opts="p", mask="local", softcap=True, split=True),
                  dict(opts="gp", mask="local", softcap=True, split=True), dict(opts="gp", d=64, split=True)]


@pytest.mark.parametrize("kw", sampling.matrix(PAGED_COMPILE, 1, lambda kw: _spec_axes(sm90(paged=True, **kw))),
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_paged_hopper_kernel_compiles_without_spills(kw):
    """Sampled: each value of each spec field that PAGED_COMPILE holds is compiled at least once."""
    spec = sm90(paged=True, **kw)
    assert spec.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    for code in ("C7508", "C7510", "C7519"):
        assert code not in res.log, res.log
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    ops = sass.opcode_counts(sass.disassemble(res.cubin, _NVDISASM),
                               ("HGMMA", "HMMA", "LDL", "STL", "UTMALDG", "USETMAXREG", "LDGSTS", "FENCE"))
    halves = spec.head_dim // 64
    assert ops["HGMMA"] > 0 and ops.get("HMMA", 0) == 0 and ops.get("LDL", 0) == 0 and ops.get("STL", 0) == 0, ops
    assert ops["USETMAXREG"] == 2, ops
    if "g" in spec.sm90_opts:   # Q by TMA, K/V rows by cp.async (LDGSTS) with a proxy fence
        assert ops["UTMALDG"] == halves and ops["LDGSTS"] > 0 and ops["FENCE"] > 0, ops
    else:                       # Q, K and V by TMA, no cp.async
        assert ops["UTMALDG"] >= 3 * halves and ops["LDGSTS"] == 0, ops


PAGED_WIDE_COMPILE = [dict(d=d, page_size=ps, **x) for d in (96, 192, 256) for ps in (16, 1)
                      for x in (dict(mask="causal"), dict(mask="local", softcap=True, split=True))]
PAGED_WIDE_COMPILE += [dict(d=256, page_size=24, mask="causal")]


def _paged_wide_axes(kw):
    return _spec_axes(_paged_wide_spec(kw), page_size=kw["page_size"])


def _paged_wide_spec(kw):
    kw = dict(kw)
    d, ps = kw.pop("d"), kw.pop("page_size")
    tile, opts = heuristics.sm90_tile_and_options(d, d, True, ps)
    return sm90(d=d, tile=tile, opts=opts, paged=True, **kw)


@pytest.mark.parametrize("kw", sampling.matrix(PAGED_WIDE_COMPILE, 1, _paged_wide_axes),
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_paged_wide_head_dims_compile_without_spills(kw):
    """Paged K/V at head dims 96, 192 and 256 with the dispatcher's tile and loads
    (``heuristics.sm90_tile_and_options``): no spills under the paged register budgets (producer
    40 / consumers 232 with TMA boxes, 56 / 224 gathered), Q by TMA in whole 64-column boxes (d 96:
    two, the second half past the head dim) and K/V by TMA boxes or gathered rows.  Sampled: each
    head dim, page size, mask, option and split that PAGED_WIDE_COMPILE holds at least once."""
    kw = dict(kw)
    d, ps = kw.pop("d"), kw.pop("page_size")
    tile, opts = heuristics.sm90_tile_and_options(d, d, True, ps)
    spec = sm90(d=d, tile=tile, opts=opts, paged=True, **kw)
    assert spec.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    ops = sass.opcode_counts(sass.disassemble(res.cubin, _NVDISASM), ("HGMMA", "LDL", "STL", "UTMALDG", "LDGSTS"))
    halves = -(-d // 64)
    assert ops["HGMMA"] > 0 and ops.get("LDL", 0) == 0 and ops.get("STL", 0) == 0, ops
    if "g" in opts:
        assert ops["UTMALDG"] == halves and ops["LDGSTS"] > 0, ops
    else:
        assert ops["UTMALDG"] >= 3 * halves and ops["LDGSTS"] == 0, ops


def test_every_build_case_renders():
    """Every case of COMPILE, PAGED_COMPILE and PAGED_WIDE_COMPILE, the sampled-out ones included:
    the spec fits shared memory and renders the Hopper mainloop completely."""
    specs = [sm90(**kw) for kw in COMPILE] + [sm90(paged=True, **kw) for kw in PAGED_COMPILE]
    specs += [_paged_wide_spec(kw) for kw in PAGED_WIDE_COMPILE]
    for spec in specs:
        assert spec.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"], spec.name
        src = render.render(spec)
        assert "wgmma.mma_async" in src and "setmaxnreg" in src, spec.name
        assert "{{" not in src and "{%" not in src, spec.name
    assert len({s.name for s in specs}) == len(specs)  # no case builds another's kernel


# ------------------------------------------------------- paged TMA: one box a producer lane


def test_paged_tma_page_sizes_give_at_most_one_box_a_lane():
    """Every page size the host sends to the paged TMA path (heuristics.sm90_paged_tma_fits) splits a
    key block into at most 32 boxes (one a producer lane, tma_load_paged) of a whole number of
    8-row swizzle atoms, or one box inside a page that is a multiple of the block."""
    for bn in range(16, 257, 16):
        for ps in range(1, 2049):
            if not heuristics.sm90_paged_tma_fits(ps, bn):
                continue
            rows = min(ps, bn)
            nb = bn // rows
            assert nb * rows == bn and 1 <= nb <= 32, (bn, ps)
            assert nb == 1 or rows % 8 == 0, (bn, ps)
            if ps > bn:
                assert ps % bn == 0, (bn, ps)


def test_paged_tma_boxes_of_four_warps_cover_each_block_once():
    """Standalone 16-bit paged kernels issue a block's boxes from TMA_WARPS (4) producer warps where a
    block has at least TMA_WARPS_MIN_NB boxes (box = lane * tw + pw), else from warp 0 alone: for
    every page size the host sends there, each box is issued by exactly one (warp, lane), and the
    warps that issue nothing skip the block loop.  The constants are read from the rendered source."""
    import re
    spec = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", heuristics.SM90_TILE, mainloop="sm90a",
                         sm90_opts="p", paged=True)
    src = render.render(spec)
    assert re.search(r"constexpr int TMA_WARPS = PAGED && !GATHER && !FP8 \? 4 : 1;", src)
    min_nb = int(re.search(r"#define KG_TMA_WARPS_MIN_NB (\d+)", src).group(1))
    assert "const int tw = p.page_size * TMA_WARPS_MIN_NB <= BN ? TMA_WARPS : 1;" in src
    assert "for (int n = pw < tw ? n_hi - 1 : n_lo - 1; n >= n_lo; --n)" in src
    assert "pb.box = pw < tw ? lane * tw + pw : BN;" in src
    # the tile hand-out waits for the three extra warps' arrivals
    assert "NW + (GATHER || FP8 ? 3 : 0) + (TMA_WARPS - 1)" in src
    # each issuing warp owns a box of every block it walks (else it could fall a phase behind on the
    # "empty" barriers): the default keeps four warps to blocks of at least four boxes, and the
    # template refuses a smaller define (test_paged_tma_four_warps_refuse_blocks_of_fewer_boxes)
    assert min_nb >= 4
    assert "static_assert(TMA_WARPS == 1 || TMA_WARPS_MIN_NB >= TMA_WARPS" in src
    seen_tw = set()
    for bn in range(16, 257, 16):
        for ps in range(1, 2049):
            if not heuristics.sm90_paged_tma_fits(ps, bn):
                continue
            nb = bn // min(ps, bn)
            tw = 4 if ps * min_nb <= bn else 1
            seen_tw.add(tw)
            issued = [lane * tw + pw for pw in range(tw) for lane in range(32) if lane * tw + pw < nb]
            assert sorted(issued) == list(range(nb)), (bn, ps)
            assert all(pw < nb for pw in range(tw)), (bn, ps)   # no issuing warp without a box
    assert seen_tw == {1, 4}


def test_paged_tma_four_warps_refuse_blocks_of_fewer_boxes(monkeypatch):
    """KG_TMA_WARPS_MIN_NB below the four issuing warps (a define for an A/B) would let a warp walk a
    block that has no box for it: the kernel does not compile."""
    from kernelgen.jit import compiler
    spec = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", heuristics.SM90_TILE, mainloop="sm90a",
                         sm90_opts="p", paged=True)
    monkeypatch.setenv("KERNELGEN_DEFINES", "KG_TMA_WARPS_MIN_NB=2")
    with pytest.raises(Exception, match="KG_TMA_WARPS_MIN_NB below TMA_WARPS"):
        compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.entry)
    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                        max_seqlen_q=2048, max_seqlen_k=8192, paged=True, short_max_q=4,
                                        page_size=16)
    fused = render.render(fv.fused)
    # (fused-tma-warps.patch: the fused kernel's producer warps 0-3 run producer_loop too)
    assert "kpre::producer_loop(p, maps, md, cap4, total, sb, s_tile, warp, lane);" in fused


def test_paged_tma_producer_source_runs_the_block_loop_on_the_whole_warp():
    """The paged branch of producer_loop: every lane waits for the slot, lane 0 (of producer warp 0)
    alone announces the bytes, a __syncwarp orders that before the lanes' own boxes (K, then V)."""
    spec = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", heuristics.SM90_TILE, mainloop="sm90a",
                         sm90_opts="p", paged=True)
    src = render.render(spec)
    body = src[src.index("void producer_loop("):]
    body = body[:body.index("\n}\n")]
    paged = body[body.index("if (PAGED) {"):body.index("} else if (lane == 0) {")]
    for bar, halves in (("bar_k", "HALVES"), ("bar_v", "VHALVES")):
        i_wait = paged.index(f"mbar_wait({bar}_empty(")
        i_exp = paged.index(f"lane == 0) mbar_arrive_expect_tx({bar}_full(")
        i_sync = paged.index("__syncwarp();", i_exp)
        i_tma = paged.index(f"tma_load_paged<{halves}>(")
        assert i_wait < i_exp < i_sync < i_tma, bar
    assert "paged_boxes(" in paged and paged.count("mbar_arrive_expect_tx") == 2


def _producer_ops(cubin):
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", sass.disassemble(cubin, _NVDISASM))
    return ins[next(i for i, s in enumerate(ins) if "USETMAXREG.DEALLOC" in s):]


@pytest.mark.parametrize("d,tile", [(64, None), (128, None), (128, TileConfig(128, 64, 8, 2, 1))])
@pytest.mark.parametrize("fused", [False, True])
def test_paged_tma_sass_lane0_expect_tx_then_warp_sync_then_boxes(d, tile, fused):
    """In the machine code of the producer: every paged K/V tensor copy (UTMALDG.4D) follows, since
    the last mbarrier wait, a predicated expect-tx arrival (lane 0's) and a warp synchronisation;
    2 copies (K, V) a 64-column half.  (Matches ptxas's instruction order: a new CUDA release may
    need the patterns updated.)"""
    assert _NVDISASM is not None
    if fused:
        if tile is not None:
            pytest.skip("the fused kernel takes the default tile")
        spec = heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, num_heads_q=32, num_heads_kv=8, mask="causal",
                                              max_seqlen_q=2048, max_seqlen_k=8192, paged=True, short_max_q=4,
                                              page_size=16).fused
    else:
        spec = AttentionSpec("sm_90a", "bf16", d, d, "causal", "soa", tile or heuristics.SM90_TILE,
                             mainloop="sm90a", sm90_opts="p", paged=True)
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
    assert res.resources["spill_stores"] == 0 and res.resources["stack_frame"] == 0, res.resources
    n4d, since_wait = 0, []
    for s in _producer_ops(res.cubin):
        if "SYNCS.PHASECHK" in s:
            since_wait = []
        since_wait.append(s)
        if "UTMALDG.4D" in s:
            n4d += 1
            assert any(x.startswith("@") and "SYNCS.ARRIVE.TRANS64" in x for x in since_wait), since_wait
            assert any("BRA.DIV" in x or "WARPSYNC" in x for x in since_wait), since_wait
    assert n4d == 2 * (d // 64), n4d


def test_head_dim_64_call_and_plan_launch_the_192_row_tile(fake_cuda, monkeypatch):
    """Head dim 64's 192-row tile (three consumer warpgroups) through the launch layers: 512
    threads, a Q box of 192 rows, the scheduler's block_m 192 (tiles of 192 rows), the split bound
    counted in 192-row blocks; the same in a plan, whose split-KV partials are sized by tokens."""
    from fake_cuda import make_plan

    T192 = TileConfig(192, 128, 12, 2, 1)
    q, k, v, cu_q, cu_k = prefill_inputs(d=64)
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 300, 400, causal=True, pack_gqa=False)   # (short prompts pack)
    assert api._CALLS._last[1].attn.name.endswith("_" + T192.tag)
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90"]
    launch = fake_cuda.launches[1]
    assert launch.block == (512, 1, 1) and launch.smem == sm90(d=64, opts="pt").smem_bytes()
    assert launch.maps()[0][1:] == ((64, 8, 429), (128, 8 * 128), (64, 1, 192))
    assert launch.maps()[1][3] == (64, 1, 128)
    assert fake_cuda.launches[0].fields()["block_m"] == 192
    # a long context: split-KV with the bound FlashAttention-3's rule gives 8 heads x 2 m-blocks of 192 rows
    plan = make_plan(monkeypatch, max_batch=2, num_heads_q=8, num_heads_kv=2, head_dim=64, max_total_q=400,
                     max_seqlen_q=300, max_seqlen_k=65536, causal=True)
    assert plan.hopper and plan.attn_spec.tile == T192 and plan.attn_spec.split and plan.combine is not None
    bound = heuristics.num_splits_heuristic(8 * 2, 65536 // 128, 132)
    assert plan.recipe.variants.max_splits == bound > 1
    assert plan.split.out_accum.shape == (bound, 8, 400, 64) and plan.split.row_splits.shape == (400,)
    fake_cuda.clear()
    lens, klens = (300, 100), (65536, 9000)
    q = torch.randn(sum(lens), 8, 64).to(BF16)
    k = torch.randn(sum(klens), 2, 64).to(BF16)
    cu_q = torch.tensor([0, 300, 400], dtype=torch.int32)
    cu_k = torch.tensor([0, 65536, 65536 + 9000], dtype=torch.int32)
    plan.run(q, k, k, cu_q, cu_k)
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90", "combine"]
    assert fake_cuda.launches[1].block == (512, 1, 1)
    assert fake_cuda.launches[1].maps()[0][3] == (64, 1, 192)
    f = fake_cuda.launches[0].fields()
    assert (f["block_m"], f["block_n"], f["max_splits"]) == (192, 128, bound)


def test_every_hopper_register_split_fits_the_pool_of_its_warp_count():
    """Every (producer, consumer) split of the AttentionSpec tables, for each consumer warp count
    (8: 384 threads, 12: 512), is a multiple of 8 that setmaxnreg takes (24..256) and fits the
    65536 registers ptxas gives the CTA at launch (65536 / threads a thread); check_register_pool
    refuses a 12-warp kernel compiled with fewer than 128 registers a thread."""
    from kernelgen.jit import runtime
    for table in (AttentionSpec.SM90_REGS, AttentionSpec.SM90_REGS_PAGED, AttentionSpec.SM90_REGS_GATHER,
                  AttentionSpec.SM90_REGS_FP8, AttentionSpec.SM90_REGS_FP8_MMA_SMALL,
                  AttentionSpec.SM90_REGS_FP8_MMA_LARGE):
        for warps, (p, c) in table.items():
            assert warps in (8, 12) and p % 8 == 0 and c % 8 == 0 and 24 <= p <= c <= 256, (table, warps)
            assert 128 * p + 32 * warps * c <= 65536, (table, warps)
    s = sm90(d=64, mask="causal", opts="p")
    assert s.tile.num_warps == 12 and s.num_threads == 512
    runtime.check_register_pool(s, {"registers": 128})
    with pytest.raises(RuntimeError, match="wait forever"):
        runtime.check_register_pool(s, {"registers": 120})


def _key_block_loop_ops(sass_text: str) -> dict:
    """Opcode counts of the consumer's overlapped key-block loop (``_key_block_loop``)."""
    ops = {}
    for ins in _key_block_loop(sass_text):
        op = re.match(r"[A-Z0-9_]+", ins).group(0)
        ops[op] = ops.get(op, 0) + 1
    return ops


def _key_block_loop(sass_text: str) -> list:
    """The instructions (opcode and operands, predicates dropped) of the consumer's overlapped
    key-block loop: the shortest backward-branch body holding at least the 12 HGMMA of one key
    block (S and P V)."""
    return shortest_loop(sass_text, "HGMMA", 12)


@pytest.mark.parametrize("opts,most", [("p", 630), ("pt", 637)])
def test_the_key_block_loop_advances_descriptors_instead_of_building_them(opts, most):
    """issue_qk / issue_pv build each operand's wgmma descriptor once (wgmma_desc2) and advance its
    low half by one add a k step (desc_at): the d 64 causal kernel's key-block loop holds no
    descriptor bit-building (it held 25 ULOP3 and 12 USHF, 691 instructions; FlashAttention-3's 423,
    docs/dev/fa3_d64_sass.md).  With option "t" (the default's) the loop has 637 instructions (NVRTC 13.0;
    630 without it): the same HGMMA and floating-point work, seven more integer and uniform moves
    (the tile's key range lives in other registers)."""
    spec = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=32, num_heads_kv=32, mask="causal",
                             max_seqlen_q=2048, max_seqlen_k=2048, sm90_opts=opts).attention
    assert spec.sm90_opts == opts
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    ops = _key_block_loop_ops(sass.disassemble(res.cubin, _NVDISASM))
    assert ops["HGMMA"] == 12, ops
    assert ops.get("ULOP3", 0) <= 4 and ops.get("USHF", 0) == 0, ops
    assert sum(ops.values()) <= most, sum(ops.values())


@pytest.mark.parametrize("d,limit", [(64, 300), (128, 390)])
def test_the_fp8_causal_mask_compares_each_score_once(d, limit):
    """apply_mask (common/mask.cuh) of the FP8 tensor-core causal kernels at head dim 64 / 128 tests
    only the key limit (keys are never negative), relative to the lane's first column: one compare
    of each score against a constant.  The whole kernel's ISETP with NVRTC 13.0: 281 / 377 before the
    16-byte O stores, 286 / 382 with them (the epilogue's row tests; the absolute form of both limits:
    347 / 449 before them).  The other kernels keep the absolute form (where the
    relative one did not measure faster on the H200, docs/dev/perf-log.md, "Eighteenth session")."""
    import re
    v = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=32, num_heads_kv=32, mask="causal",
                          max_seqlen_q=16384, max_seqlen_k=16384, kv_dtype="e4m3", q_dtype="e4m3").attention
    assert v.fp8_mma
    src = render.render(v)
    assert "nt * 8 + e > hi" in src and "col < lo" not in src
    res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), v.entry)
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    assert len(re.findall(r"\bISETP", sass.disassemble(res.cubin, _NVDISASM))) <= limit
    fp8 = dict(kv_dtype="e4m3", q_dtype="e4m3")
    for dd, mask, kw in ((d, "none", fp8), (256, "causal", fp8), (d, "causal", {})):
        a = heuristics.choose("sm_90a", "bf16", dd, dd, num_heads_q=32, num_heads_kv=32, mask=mask,
                              max_seqlen_q=16384, max_seqlen_k=16384, **kw).attention
        assert "col < lo" in render.render(a), a.name


@pytest.mark.parametrize("stages,fp8_mma", [(3, True), (4, True), (4, False)])
def test_deep_rings_keep_room_for_the_barriers_and_the_pin_words(stages, fp8_mma):
    """The barrier area holds the ring's and the landing stages' mbarriers and the P V wait's pin
    words: 256 bytes, 320 where a deep ring with landing stages needs more (sm90_bar_bytes; the
    kernel's static_assert and smem size agree with the host's)."""
    from kernelgen.kernels.spec import sm90_bar_bytes
    tile = TileConfig(192, 128, 12, stages, 1) if fp8_mma else TileConfig(128, 128, 8, stages, 1)
    a = AttentionSpec("sm_90a", "bf16", 64, 64, "causal", "soa", tile, mainloop="sm90a", sm90_opts="p",
                      kv_dtype="e4m3", fp8_mma=fp8_mma)
    assert sm90_bar_bytes(stages, a.land_stages) == (320 if 8 * (6 + 4 * stages) + 8 + 16 * a.land_stages > 192 else 256)
    res = compiler.compile_cubin(render.render(a), "sm_90a", compiler.default_options("sm_90a"), a.entry)
    assert res.resources["spill_stores"] == 0, res.resources
    assert sm90_bar_bytes(2, 2) == sm90_bar_bytes(4, 0) == 256 and sm90_bar_bytes(4, 4) == 320


@pytest.mark.parametrize("d", [64, 128])
def test_the_wait_for_the_previous_p_v_stays_after_the_row_max(d):
    """ptxas hoists the overlapped loop's wait for the previous block's P V
    (``WARPGROUP.DEPBAR.LE gsb0, 0x0``) above the softmax unless a memory operation that needs the
    row max comes first (``pin_pv_wait``): the row max's quad shuffles come before the wait, and at
    d 128 also a part of the exponentials (26 of 66 with NVRTC 13.0; without the pin, none and no
    shuffle: 1.05-1.06x the time at d 128 causal 16k on the H200)."""
    spec = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=32, num_heads_kv=32, mask="causal",
                             max_seqlen_q=16384, max_seqlen_k=16384).attention
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    loop = _key_block_loop(sass.disassemble(res.cubin, _NVDISASM))
    waits = [i for i, x in enumerate(loop) if x.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0")]
    assert len(waits) == 1, waits
    before = loop[:waits[0]]
    assert any(x.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1") for x in before)   # S waited for first
    assert sum(x.startswith("SHFL.BFLY") for x in before) >= 2, before[-40:]
    assert any(x.startswith("STS") for x in before)   # the pin
    if d == 128:
        assert sum(x.startswith("MUFU.EX2") for x in before) >= 16
