"""The Hopper fused mixed-batch launch without a GPU (sm_90a: the long class on the wgmma/TMA
variant and the short class on the sm_80 one-warp decode variant in ONE persistent kernel,
templates/attention/fwd_fused_sm90.cu.j2).

Checked: the parameter ABI (``params.FUSED_TMA_PARAMS``: maps + the long class's AttnParams at
384, padded to 704, the short class's AttnParams at 704, ``short_ctas`` right after it, 1024
bytes; its C declaration, also laid out by the host C++ compiler); the short tiles per CTA and the shared memory of the spec
(numbers worked out by hand from spec.py's formulas); what the prepared launch
(``fused.HopperPairLaunch``) writes at which offset on the fake H200 (tests/fake_cuda.py): the
tensor maps of the fake encoder, both pointer sets on the call's workspace, ``short_ctas`` (44 of
132 SMs, ``KERNELGEN_MIXED_SHORT_CTAS`` and its validation); the plan's ``short_ctas``; the
rendered source; and NVRTC builds for sm_90a with no spills, 168 registers, and SASS holding both
the long variant's warpgroup MMAs (HGMMA) and the decode tile's mma.sync (HMMA).
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import sampling
import torch
from fake_cuda import FUNC, decode_map, default_short_ctas, fake_encode, make_plan
from test_fused_cpu import CTX, HKV, HQ, PS, QLENS, D, call, paged_inputs

from kernelgen.front import api
from kernelgen.jit import compiler, render, sass
from kernelgen.kernels import tma
from kernelgen.kernels.params import ATTENTION_PARAMS, FUSED_TMA_PARAMS, TMA_ATTENTION_PARAMS
from kernelgen.kernels.spec import FusedAttentionSpec, TileConfig
from kernelgen.launch import fused
from kernelgen.selection import heuristics
from kernelgen.selection.settings import Settings

ENV = "KERNELGEN_MIXED_SHORT_CTAS"
#: The decode tile of the short class (one warp, 16 x 16, two stages, 8 CTAs per SM on its own).
DECODE_TILE = TileConfig(16, 16, 1, 2, 8)


def pair(d, dv=None, *, dtype="bf16", mask="causal", paged=True, page_size=PS, softcap=False):
    """``choose_pair``'s variants for a mixed batch (32 x 8 heads, threshold 4), with the Hopper options
    "p" (the default's without "t", which the standalone long kernel takes on packed K/V and the fused
    kernel's long variant drops: ``choose_fused_hopper``)."""
    return heuristics.choose_pair("sm_90a", dtype, d, d if dv is None else dv, num_heads_q=HQ, num_heads_kv=HKV,
                                  mask=mask, max_seqlen_q=2048, max_seqlen_k=8192, paged=paged, short_max_q=4,
                                  page_size=page_size, softcap=softcap, sm90_opts="p")


def hopper_fused(d, **kw):
    """``choose_fused_hopper``'s variants for the same batch as ``pair``."""
    dtype, mask, paged = kw.get("dtype", "bf16"), kw.get("mask", "causal"), kw.get("paged", True)
    return heuristics.choose_fused_hopper("sm_90a", dtype, d, d, num_heads_q=HQ, num_heads_kv=HKV, mask=mask,
                                          max_seqlen_q=2048, max_seqlen_k=8192, paged=paged, short_max_q=4,
                                          page_size=kw.get("page_size", PS), softcap=kw.get("softcap", False))


# ------------------------------------------------------------------------------ parameter ABI


def _fields(seed: int) -> dict:
    """AttnParams values, distinct per field and per seed (floats exact in f32; pointers any)."""
    vals = {}
    for i, name in enumerate(ATTENTION_PARAMS.names):
        ty = dict(ATTENTION_PARAMS.fields)[name]
        vals[name] = (seed + i) * 0.25 if ty == "f32" else seed * 1000 + i + 1
    return vals


#: Bytes of one AttnParams (272 when the fused launch came; a field added since moves short_ctas only).
AP = ATTENTION_PARAMS.size
#: Where short_ctas sits: right after the short class's AttnParams (976 for a 272-byte AttnParams).
CTAS = 704 + AP


def test_fused_tma_params_layout_and_round_trip():
    P = FUSED_TMA_PARAMS
    assert AP % 8 == 0 and 384 + AP <= 704 and TMA_ATTENTION_PARAMS.size == 704
    assert (P.MAPS_BYTES, P.short_offset, P.ctas_offset, P.size) == (384, 704, CTAS, 1024)
    long, short = _fields(1), _fields(2)
    buf = bytearray(P.pack_static(long, short, 33))
    assert len(buf) == 1024
    assert buf[:384] == bytes(384)                 # maps: written per launch
    assert buf[384 + AP:704] == bytes(320 - AP)    # TmaAttnParams' padding to 64 bytes
    assert buf[CTAS + 4:] == bytes(1020 - CTAS)    # pad_ and the padding to 1024
    zero_ptrs = dict.fromkeys(ATTENTION_PARAMS.pointer_names, 0)
    assert P.unpack(bytes(buf)) == ({**long, **zero_ptrs}, {**short, **zero_ptrs}, 33)
    # the pointer writers touch their own struct only
    n = len(ATTENTION_PARAMS.pointer_names)
    assert n == 13
    P.long_pointers.pack_into(buf, 0, *range(1, n + 1))
    P.short_pointers.pack_into(buf, 0, *range(101, n + 101))
    a, b, ctas = P.unpack(bytes(buf))
    assert [a[x] for x in ATTENTION_PARAMS.pointer_names] == list(range(1, n + 1))
    assert [b[x] for x in ATTENTION_PARAMS.pointer_names] == list(range(101, n + 101))
    assert {k: v for k, v in a.items() if k not in zero_ptrs} == {k: v for k, v in long.items() if k not in zero_ptrs}
    assert {k: v for k, v in b.items() if k not in zero_ptrs} == {k: v for k, v in short.items() if k not in zero_ptrs}
    assert ctas == 33 and buf[:384] == bytes(384)
    # the same bytes read at fixed offsets, without FUSED_TMA_PARAMS
    assert ATTENTION_PARAMS.struct.unpack_from(buf, 384)[:2] == (1, 2)
    assert ATTENTION_PARAMS.struct.unpack_from(buf, 704)[:2] == (101, 102)
    assert struct.unpack_from("<ii", buf, CTAS) == (33, 0)
    # hopper_params (the plan's one-off packer) from a packed TmaAttnParams and AttnParams
    maps = bytes(range(256)) + bytes(range(128))
    full = fused.hopper_params(TMA_ATTENTION_PARAMS.pack(long, maps), ATTENTION_PARAMS.pack(short), 7)
    assert len(full) == 1024 and full[:384] == maps
    assert P.unpack(full) == (long, short, 7)
    with pytest.raises(ValueError, match="hopper_params"):
        fused.hopper_params(ATTENTION_PARAMS.pack(long), ATTENTION_PARAMS.pack(short), 7)
    with pytest.raises(ValueError, match="hopper_params"):
        fused.hopper_params(TMA_ATTENTION_PARAMS.pack(long, maps), TMA_ATTENTION_PARAMS.pack(short), 7)


def test_fused_tma_params_c_declaration():
    decl = FUSED_TMA_PARAMS.c_decl()
    assert TMA_ATTENTION_PARAMS.c_decl() in decl
    assert "struct FusedTmaParams { TmaAttnParams a; AttnParams b; int short_ctas; int pad_; };" in decl
    assert 'static_assert(sizeof(FusedTmaParams) == 1024, "FusedTmaParams ABI size");' in decl


def test_fused_tma_params_c_layout_with_the_host_compiler(tmp_path):
    """The declaration's layout as a C++ compiler lays it out: sizes and the offsets the Python
    side writes at (b at 704, short_ctas after it, the long AttnParams at 384)."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "layout.cpp"
    src.write_text("#include <cstddef>\n#include <cstdio>\n#define __align__(n) __attribute__((aligned(n)))\n"
                   + FUSED_TMA_PARAMS.c_decl() + "\nint main() { std::printf(\"%zu %zu %zu %zu %zu\", "
                   "sizeof(FusedTmaParams), offsetof(FusedTmaParams, b), offsetof(FusedTmaParams, short_ctas), "
                   "offsetof(TmaAttnParams, p), alignof(FusedTmaParams)); }\n")
    exe = tmp_path / "layout"
    subprocess.run([cxx, "-std=c++17", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["1024", "704", str(CTAS), "384", "64"]
    assert [int(x) for x in out.split()[:3]] == [FUSED_TMA_PARAMS.size, FUSED_TMA_PARAMS.short_offset,
                                                 FUSED_TMA_PARAMS.ctas_offset]


# ------------------------------------------------------------------------------------ spec


@pytest.mark.parametrize("d,dv,long_smem,short_smem,first,after,smem", [
    # At d <= 128 the decode slice is the K/V stages only (Q in registers): 2 B x 2 stages x 16 keys x (d + 8 + dv + 8).
    # d 64: slice 2 * 2 * 16 * 144 = 9216; 12 warps * 9216 + 1024 = 111616 fits the opt-in 232448
    # (> the long tile's 83200): 12 slices first; (83200 - 1280) // 9216 = 8 after (the 8 consumer warps)
    (64, 64, 83200, 9216, 12, 8, 111616),
    # d 128: slice 2 * 2 * 16 * 272 = 17408; 12 * 17408 + 1024 = 209920: 12 first; (165120 - 1280) // 17408 = 9,
    # capped at the 8 consumer warps
    (128, 128, 165120, 17408, 12, 8, 209920),
    # d 96 (packed K/V; Q/K/V rows padded to 128 on the Hopper side): slice 2 * 2 * 16 * 208 = 13312,
    # 12 * 13312 + 1024 = 160768 < the long tile's 165120: 12 first; (165120 - 1280) // 13312 = 12, capped at 8
    (96, 96, 165120, 13312, 12, 8, 165120),
    # d 192 x 128 (packed; Q stays in shared memory above d 128): slice 2 * (16 * 200 + 2 * 16 * (200 + 136))
    # = 27904; 231424 // 27904 = 8 first; (214272 - 1280) // 27904 = 7 after
    (192, 128, 214272, 27904, 8, 7, 232448),
])
def test_short_tiles_per_cta_and_shared_memory(d, dv, long_smem, short_smem, first, after, smem):
    pv = pair(d, dv, paged=d in (64, 128))
    f = FusedAttentionSpec(pv.long.attention, pv.short.attention)
    assert f.hopper and f.mainloop == "sm90a" and f.template == "attention/fwd_fused_sm90.cu.j2"
    assert f.short.tile == DECODE_TILE and f.short.mainloop == "sm80" and f.num_threads == 384
    assert (f.long.smem_bytes(), f.short.smem_bytes()) == (long_smem, short_smem)
    assert (f.short_tiles_first, f.short_tiles_after, f.smem_bytes()) == (first, after, smem)
    assert f.tiles_per_step == first
    tv = f.template_vars()
    assert (tv["short_tiles_first"], tv["short_tiles_after"], tv["smem_bytes"], tv["tiles_per_step"]) == \
        (first, after, smem, first)
    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", d, dv, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                        max_seqlen_q=2048, max_seqlen_k=8192, paged=d in (64, 128), short_max_q=4,
                                        page_size=PS)
    # the dispatcher's Hopper fused spec: the same long variant, a one-warp decode tile of its own stages
    assert fv.fused.long == f.long and fv.short_max_q == 4 and fv.combine is not None and fv.short_max_splits > 1
    assert fv.fused.short == dataclasses.replace(f.short, tile=fv.fused.short.tile)
    # the keys-as-rows tile (8 rows) up to head dim 128, the 16-row tile above; same shared memory
    kt = max(d, dv) <= 128
    assert fv.fused.short.tile.num_warps == 1 and fv.fused.short.tile.block_m == (8 if kt else 16)
    assert fv.fused.short.tile.keys_as_rows == kt and fv.fused.short.smem_bytes() == short_smem
    assert fv.fused.short_tiles_first >= 1 and fv.fused.short_tiles_after >= 1


@pytest.mark.parametrize("d, stages, rows, slice_bytes", [(128, 2, 8, 8192), (128, 4, 16, 16384), (64, 3, 8, 6144),
                                                         (96, 2, 16, 6144)])
def test_fp8_decode_tile_stages_and_rows(d, stages, rows, slice_bytes):
    """The FP8-cache fused kernel's decode tile takes ``short_stages`` (default
    ``heuristics.SM90_FUSED_SHORT_STAGES_FP8``) and ``short_rows`` (``SM90_FUSED_SHORT_ROWS_FP8``: 8, the
    keys-as-rows tile, or 16), both converting FP8 in registers: FP8 stages only, 16 keys x (d + d) bytes
    each, so even four stages keep a short-first CTA's 12 warps (16384 x 12 + 1024 fits the 232448 bytes)
    and the consumers' 8; the 16-bit tile's stages stay ``SM90_FUSED_SHORT_STAGES``."""
    kw = dict(num_heads_q=HQ, num_heads_kv=HKV, mask="causal", max_seqlen_q=2048, max_seqlen_k=8192, paged=True,
              page_size=PS)
    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, kv_dtype="e4m3", short_stages=stages, short_rows=rows,
                                        **kw)
    s = fv.fused.short
    assert s.fp8_in_registers and s.tile.num_stages == stages and s.tile.block_m == rows and s.tile.block_n == 16
    assert s.tile.keys_as_rows == (rows == 8) and s.fp16_gemms
    assert s.smem_bytes() == slice_bytes == stages * 16 * 2 * d
    assert (fv.fused.short_tiles_first, fv.fused.short_tiles_after) == (12, 8)
    dflt = heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, kv_dtype="e4m3", **kw)
    assert dflt.fused.short.tile.num_stages == heuristics.SM90_FUSED_SHORT_STAGES_FP8
    assert dflt.fused.short.tile.block_m == heuristics.SM90_FUSED_SHORT_ROWS_FP8 == 8
    assert dflt.fused.short == dataclasses.replace(s, tile=dflt.fused.short.tile)
    bf = heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, **kw)
    assert bf.fused.short.tile.num_stages == heuristics.SM90_FUSED_SHORT_STAGES
    assert heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, short_stages=stages, **kw).fused.short.tile \
        .num_stages == stages
    with pytest.raises(ValueError, match="short_rows must be 8 or 16"):
        heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, kv_dtype="e4m3", short_rows=12, **kw)


def test_fp8_decode_tile_above_head_dim_128_keeps_16_rows():
    """The keys-as-rows tile stops at head dim 128: a 192 x 128 FP8 mixed batch's fused kernel takes the
    16-row tile whatever ``short_rows`` asks (Q's fragments in shared memory), and then the 16-bit share of
    short-first CTAs (``SM90_MIXED_SHORT_FRACTION_FP8`` was measured with the keys-as-rows tile)."""
    kw = dict(num_heads_q=HQ, num_heads_kv=HKV, mask="causal", max_seqlen_q=2048, max_seqlen_k=8192, kv_dtype="e4m3")
    for rows in (None, 8, 16):
        fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 192, 128, short_rows=rows, **kw)
        assert fv is not None and fv.fused.short.tile.block_m == 16 and not fv.fused.short.tile.keys_as_rows
        assert fv.fused.short.fp8_in_registers


def test_head_dim_256_is_not_fused_on_hopper():
    """d 256 would fit 5 short tiles first and 5 after (decode slice 2 * (16 * 264 + 2 * 16 * 528) =
    42240, Q in shared memory above d 128: (232448 - 1024) // 42240 = 5, (230656 - 1280) // 42240 = 5)
    but its 256-column O
    accumulators are above the fused kernel's head_dim_v limit of 128: the classes in turn."""
    pv = pair(256, paged=False)
    assert pv is not None and pv.long.attention.smem_bytes() == 230656 and pv.short.attention.smem_bytes() == 42240
    assert FusedAttentionSpec.SM90_FUSED_MAX_DV == 128
    with pytest.raises(ValueError, match="head_dim_v <= 128"):
        FusedAttentionSpec(pv.long.attention, pv.short.attention)
    assert hopper_fused(256, paged=False) is None


def test_packed_head_dim_64_fuses_on_two_warpgroups():
    """A packed d 64 mixed batch: its long class alone (the classes in turn) takes the 192-row tile
    in three consumer warpgroups; the fused kernel keeps two (its named barriers 1-5 and register
    split are the two-warpgroup ones), so its long variant is the same tile on 128 rows, and a
    12-warp long variant is refused naming the warps."""
    pv = pair(64, paged=False)
    assert pv.long.attention.tile == TileConfig(192, 128, 12, 2, 1)
    fv = hopper_fused(64, paged=False)
    assert fv is not None and fv.fused.long.tile == TileConfig(128, 128, 8, 2, 1)
    assert fv.fused.long == dataclasses.replace(pv.long.attention, tile=TileConfig(128, 128, 8, 2, 1))
    with pytest.raises(ValueError, match="8 consumer warps"):
        FusedAttentionSpec(pv.long.attention, fv.fused.short)


def test_hopper_fused_spec_rules():
    pv = pair(128)
    long, short = pv.long.attention, pv.short.attention
    with pytest.raises(ValueError, match="does not split"):
        FusedAttentionSpec(dataclasses.replace(long, split=True, row_splits=False), short)
    with pytest.raises(ValueError, match="one-warp"):
        FusedAttentionSpec(long, dataclasses.replace(short, tile=TileConfig(64, 16, 4, 2, 2)))
    with pytest.raises(ValueError, match="sm80 one-warp"):   # a Hopper short variant
        FusedAttentionSpec(long, dataclasses.replace(long, row_splits=False))
    with pytest.raises(ValueError, match="differ in paged"):
        FusedAttentionSpec(dataclasses.replace(long, paged=False, sm90_opts="p"), short)
    f = FusedAttentionSpec(long, short)
    sm80 = heuristics.choose_fused("sm_90a", "bf16", 128, 128, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                   max_seqlen_k=8192, paged=True).fused
    assert not sm80.hopper and sm80.template == "attention/fwd_fused_sm80.cu.j2"
    assert f.name != sm80.name and "_wgmma" in f.name and f.name.startswith("fused_" + long.name + "__")


# ------------------------------------------------------------------- the launch (CUDA stubbed)


def test_prepared_launch_writes_maps_and_both_pointer_sets(fake_cuda, monkeypatch):
    """The prepared Hopper fused launch: the fake encoder's maps of q, k, v at [0, 384), the long
    class's pointers at 384 (its metadata, row_splits for the combine), the short class's at 704
    (its metadata, out_accum/lse_accum/row_splits), short_ctas after them; maps encoded once per
    pointer set, a new output re-pointing both structs."""
    encoded = []

    def counting(*a):
        encoded.append(a[0])
        return fake_encode(*a)

    monkeypatch.setattr(tma, "_encoder", counting)
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    out = torch.empty_like(q)
    call(q, kc, vc, cu_q, used, pt, out=out)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    prep = api._CALLS._last[1]
    assert isinstance(prep, fused.PreparedFusedCall) and isinstance(prep.pair, fused.HopperPairLaunch)
    ctas = default_short_ctas()
    assert prep.pair.short_ctas == prep.kernels.short_ctas == ctas > 0
    assert encoded == [q.data_ptr(), kc.data_ptr(), vc.data_ptr()]
    s_long, s_short, f, c = fake_cuda.launches
    raw = f.params
    assert len(raw) == 1024 and f.grid == (132, 1, 1) and f.block == (384, 1, 1)
    n = tma.MAP_BYTES
    assert decode_map(raw[:n]) == (q.data_ptr(), (D, HQ, sum(QLENS)), (2 * D, 2 * D * HQ), (64, 1, 128))
    assert decode_map(raw[n:2 * n], 4)[0] == kc.data_ptr() and decode_map(raw[2 * n:3 * n], 4)[0] == vc.data_ptr()
    assert decode_map(raw[n:2 * n], 4)[1:] == ((D, HKV, PS, kc.shape[0]), (2 * D, 2 * D * HKV, 2 * D * HKV * PS),
                                               (64, 1, PS, 1))
    a = dict(zip(ATTENTION_PARAMS.names, ATTENTION_PARAMS.struct.unpack_from(raw, 384)))
    b = dict(zip(ATTENTION_PARAMS.names, ATTENTION_PARAMS.struct.unpack_from(raw, 704)))
    assert struct.unpack_from("<ii", raw, CTAS) == (ctas, 0) and raw[CTAS + 4:] == bytes(1020 - CTAS)
    assert raw[384 + AP:704] == bytes(320 - AP)
    assert f.fields() == {"long": a, "short": b, "short_ctas": ctas}
    # the workspace: the short class's metadata and partials where a single-class call has them,
    # the long class's metadata after them
    base, lay = s_short.fields()["metadata"], prep.layout
    assert base == fake_cuda.allocations[-1].data_ptr()
    assert a["metadata"] == s_long.fields()["metadata"] == base + lay.long_metadata_offset
    assert b["metadata"] == base and c.fields()["metadata"] == base
    assert (a["out_accum"], a["lse_accum"]) == (0, 0)
    assert (b["out_accum"], b["lse_accum"]) == (base + lay.short.out_accum_offset, base + lay.short.lse_accum_offset)
    assert a["row_splits"] == b["row_splits"] == c.fields()["row_splits"] == base + lay.short.row_splits_offset
    for x in (a, b):
        assert (x["q"], x["k"], x["v"], x["out"], x["lse"]) == (q.data_ptr(), kc.data_ptr(), vc.data_ptr(),
                                                                out.data_ptr(), 0)
        assert (x["cu_seqlens_q"], x["cu_seqlens_k"], x["seqused_k"], x["page_table"]) == (
            cu_q.data_ptr(), 0, used.data_ptr(), pt.data_ptr())
        assert (x["num_heads_q"], x["num_heads_kv"], x["page_size"], x["capacity"]) == (HQ, HKV, PS, len(QLENS))
        assert (x["window_left"], x["window_right"], x["k_page_stride"]) == (-1, 0, PS * HKV * D)
    assert a["accum_split_stride"] == a["accum_head_stride"] == 0
    strides = lay.short.split_strides()
    assert b["accum_split_stride"] == strides["accum_split_stride"] == c.fields()["accum_split_stride"] != 0
    # the same pointers again (one graph launch): no new maps; a new output: both structs re-pointed
    fake_cuda.clear()
    call(q, kc, vc, cu_q, used, pt, out=out)
    assert fake_cuda.graph_launches == 1 and len(encoded) == 3
    out2 = torch.empty_like(q)
    fake_cuda.clear()
    call(q, kc, vc, cu_q, used, pt, out=out2)
    ff = fake_cuda.launches[2].fields()
    assert ff["long"]["out"] == ff["short"]["out"] == fake_cuda.launches[3].fields()["out"] == out2.data_ptr()
    assert ff["short_ctas"] == ctas and len(encoded) == 3
    q2 = q.clone()
    fake_cuda.clear()
    call(q2, kc, vc, cu_q, used, pt, out=out2)
    assert encoded[3:] == [q2.data_ptr(), kc.data_ptr(), vc.data_ptr()]
    assert fake_cuda.launches[2].maps()[0][0] == q2.data_ptr() == fake_cuda.launches[2].fields()["short"]["q"]


def test_encoder_refusal_names_the_fused_kernel(fake_cuda, monkeypatch):
    from kernelgen.launch import launch

    def refuse(*a):
        raise RuntimeError("CUDA_ERROR_INVALID_VALUE")

    monkeypatch.setattr(tma, "_encoder", refuse)
    with pytest.raises(launch.LaunchError, match="cuTensorMapEncodeTiled") as ei:
        call(*paged_inputs(QLENS, CTX))
    assert ei.value.kernel.startswith("fused_attn_sm_90a_wgmma")
    assert "fused_sm90" not in fake_cuda.kinds()


def test_default_short_ctas_is_a_share_of_the_sms(monkeypatch):
    """The default: a third of the SMs, rounded, at least one (44 of an H200's 132)."""
    monkeypatch.delenv(ENV, raising=False)
    assert heuristics.SM90_MIXED_SHORT_FRACTION == 1 / 3
    assert Settings.from_env().mixed_short_ctas(132) is None
    assert [heuristics.sm90_mixed_short_ctas(n) for n in (132, 114, 16, 2, 1)] == [44, 38, 5, 1, 1]
    monkeypatch.setenv(ENV, "  ")              # blank: the default
    assert Settings.from_env().mixed_short_ctas(132) is None
    assert heuristics.sm90_mixed_short_ctas(132, Settings.from_env().mixed_short_ctas(132)) == 44
    # an FP8 cache: a quarter (its keys-as-rows decode tile; SM90_MIXED_SHORT_FRACTION_FP8)
    assert heuristics.SM90_MIXED_SHORT_FRACTION_FP8 == 1 / 4
    assert [heuristics.sm90_mixed_short_ctas(n, fp8=True) for n in (132, 114, 16, 2, 1)] == [33, 28, 4, 1, 1]
    assert heuristics.sm90_mixed_short_ctas(132, 50, fp8=True) == 50


@pytest.mark.parametrize("grid", [132, 114, 16, 7, 1])
def test_short_first_sms_are_spread_evenly(grid):
    """Exactly short_ctas SM ids, evenly spaced: consecutive picks (cyclically) are floor or ceil of
    grid / short_ctas apart."""
    for k in range(grid + 1):
        sms = fused.short_first_sms(grid, k)
        assert len(sms) == k and sms == sorted(set(sms)) and all(0 <= s < grid for s in sms)
        if k:
            gaps = {(b - a) % grid or grid for a, b in zip(sms, sms[1:] + sms[:1])}
            assert gaps <= {grid // k, -(-grid // k)}, (grid, k, gaps)
    assert fused.short_first_sms(132, 44) == list(range(0, 132, 3))
    assert fused.short_first_sms(132, 66) == list(range(0, 132, 2))
    # not the same as floor(i * grid / k): the picks start at 0 and round up
    assert fused.short_first_sms(7, 3) == [0, 3, 5] and fused.short_first_sms(10, 4) == [0, 3, 5, 8]
    for bad in ((132, -1), (132, 133), (0, 0)):
        with pytest.raises(ValueError, match="short_first_sms"):
            fused.short_first_sms(*bad)


def _kernel_rule():
    """starts_short's SM-id expression from the rendered kernel, as a Python function."""
    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                        max_seqlen_q=2048, max_seqlen_k=8192, paged=True, short_max_q=4, page_size=16)
    src = render.render(fv.fused)
    m = re.search(r"if \(s < grid\) return (.+);", src)
    assert m, "starts_short's SM-id rule is not in the rendered kernel"
    expr = m.group(1).replace("(long long)", "").replace("(int)", "")
    assert re.fullmatch(r"[\s()*%<a-z_]+", expr), expr  # only s, short_ctas, grid and integer operators
    return src, lambda s, short_ctas, grid: eval(expr, {}, dict(s=s, short_ctas=short_ctas, grid=grid))


def test_kernel_chooses_short_first_ctas_by_sm_id():
    """The rendered kernel applies short_first_sms's rule to %smid (blockIdx only past the grid or
    with the diagnostic KG_SHORT_BY_BLOCK), one decision for the whole CTA (a barrier's OR)."""
    src, rule = _kernel_rule()
    assert 'asm volatile("mov.u32 %0, %%smid;" : "=r"(r));' in src
    assert "if (__syncthreads_or(starts_short(F.short_ctas))) {" in src  # one decision for the whole CTA
    assert "blockIdx.x >= (int)gridDim.x - F.short_ctas" not in src
    for grid in (132, 114, 16, 7, 1):
        for k in range(grid + 1):  # the kernel's expression (non-negative operands: C's % is Python's)
            assert [s for s in range(grid) if rule(s, k, grid)] == fused.short_first_sms(grid, k), (grid, k)


def test_short_first_sms_match_the_h200_runs():
    """The SM ids whose CTAs started on the decodes in the H200 timelines of the SM-id rule
    (docs/dev/benchmarks/mixed_placement_h200.json, k 48 and 44 of 132) are short_first_sms's."""
    data = json.loads((Path(__file__).resolve().parents[1] / "docs/dev/benchmarks/mixed_placement_h200.json").read_text())
    seen = 0
    for name, k in (("timeline_run4_role1", 48), ("final_timeline_run6", 44)):
        for run in data["runs"][name]["all_runs"][f"fused_k{k}"]:
            assert json.loads(run["short_first_smids"]) == fused.short_first_sms(132, k), name
            seen += 1
    assert seen == 24


@pytest.mark.parametrize("value,expected", [("7", 7), ("0", 0), ("132", 132), (" 12 ", 12)])
def test_short_ctas_from_the_environment(fake_cuda, monkeypatch, value, expected):
    monkeypatch.setenv(ENV, value)
    assert heuristics.sm90_mixed_short_ctas(132, Settings.from_env().mixed_short_ctas(132)) == expected
    call(*paged_inputs(QLENS, CTX))
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    raw = fake_cuda.launches[2].params
    assert struct.unpack_from("<i", raw, CTAS)[0] == expected == api._CALLS._last[1].pair.short_ctas


@pytest.mark.parametrize("value", ["-1", "133", "abc", "3.5", "0x10"])
def test_invalid_short_ctas_environment_raises(fake_cuda, monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ValueError, match=ENV):
        Settings.from_env().mixed_short_ctas(132)
    with pytest.raises(ValueError, match=ENV):
        call(*paged_inputs(QLENS, CTX))
    assert fake_cuda.launches == []
    # the sm_80 fused launch has no short_ctas: the variable is not read
    call(*paged_inputs(QLENS, CTX), arch="sm_80")
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused", "combine"]


def test_plan_takes_short_ctas_when_made(fake_cuda, monkeypatch):
    kw = dict(max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096, max_seqlen_q=2048,
              max_seqlen_k=8192, paged=True, causal=True, page_size=PS)
    monkeypatch.setenv(ENV, "7")
    p = make_plan(monkeypatch, **kw)
    assert p.attn_spec.kind == "fused" and p.hopper and p.fused.short_ctas == 7
    assert p.attn.func_ptr == FUNC["fused_sm90"] and p.attn.persistent_grid == 132
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    monkeypatch.delenv(ENV)                      # read when the plan was made
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt)
    assert fake_cuda.launches[2].fields()["short_ctas"] == 7
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt)
    assert fake_cuda.launches[2].kind == "fused_sm90" and fake_cuda.launches[2].fields()["short_ctas"] == 7
    monkeypatch.setenv(ENV, "500")
    with pytest.raises(ValueError, match=ENV):
        make_plan(monkeypatch, **kw)


# ------------------------------------------------------------------------ render and compile


def test_render_declares_the_fused_params_and_the_host_numbers():
    f = hopper_fused(128).fused
    ctx = render.context(f)
    assert ctx["params_decl"] == FUSED_TMA_PARAMS.c_decl()
    src = render.render(f)
    tv = f.template_vars()
    for needle in ("struct FusedTmaParams { TmaAttnParams a; AttnParams b; int short_ctas; int pad_; };",
                   "static_assert(sizeof(FusedTmaParams) == 1024",
                   "(const __grid_constant__ FusedTmaParams F)", f"constexpr int SMEM_TOTAL = {f.smem_bytes()};",
                   f"static_assert(NS_FIRST == {f.short_tiles_first} && NS_AFTER == {f.short_tiles_after},",
                   "F.short_ctas",
                   f"setmaxnreg_dec<{tv['producer_regs']}>", f"setmaxnreg_inc<{tv['consumer_regs']}>",
                   "wgmma.mma_async", "mma.sync.aligned.m16n8k16"):
        assert needle in src, needle
    assert src.count("constexpr bool QUEUE_ONLY = true") == 1   # the long variant only
    assert 128 * tv["producer_regs"] + 256 * tv["consumer_regs"] <= 168 * 384
    # the standalone Hopper kernel keeps its own tile hand-out, the sm_80 fused kernel its params
    assert "constexpr bool QUEUE_ONLY = false" in render.render(f.long)
    sm80 = heuristics.choose_fused("sm_90a", "bf16", 128, 128, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                   max_seqlen_k=8192, paged=True).fused
    assert "FusedTmaParams" not in render.render(sm80)


_NVDISASM = sass.find_nvdisasm()
#: The Hopper fused kernels the dispatcher picks (at most 8 builds): head dims 64 and 128 with K/V
#: paged by TMA (pages of 16 and 256 tokens), gathered (page size 1, the "g" option, which is also
#: what a plan made without page_size takes) and packed (the forced-threshold path); causal and local
#: masks; soft-cap on/off and both dtypes for one case.  By default a sample with each of these
#: values at least once is built (tests/sampling.py); ``--full-matrix`` builds all of them.
FUSED_COMPILE = [
    dict(d=64, page_size=16),
    dict(d=64, page_size=1),   # SM90_FUSED_REGS["gather_d64"]: 56/224 spilled across setmaxnreg
    dict(d=128, page_size=256),
    dict(d=128, page_size=256, dtype="fp16"),
    dict(d=128, page_size=16, mask="local"),
    dict(d=128, page_size=16, mask="local", softcap=True),
    dict(d=128, page_size=1),
    dict(d=128, paged=False, page_size=0),
]


def _compile_id(kw) -> str:
    return "-".join(f"{k}={v}" for k, v in kw.items())


def _fused_axes(kw) -> dict:
    s = hopper_fused(**kw).fused.long
    return dict(d=s.head_dim, page_size=kw.get("page_size"), mask=s.mask, softcap=s.softcap, dtype=s.dtype,
                paged=s.paged, opts=s.sm90_opts)


@pytest.mark.parametrize("kw", sampling.matrix(FUSED_COMPILE, 1, _fused_axes), ids=_compile_id)
def test_hopper_fused_kernel_compiles_without_spills_with_hgmma_and_hmma(kw):
    fv = hopper_fused(**kw)
    spec = fv.fused
    d = spec.long.head_dim
    assert spec.hopper and spec.long.mask == kw.get("mask", "causal") and spec.long.softcap == kw.get("softcap", False)
    gather = kw.get("page_size") == 1
    assert spec.long.sm90_opts == ("gp" if gather else "p") and spec.long.paged == kw.get("paged", True)
    assert spec.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    assert r["registers"] == 168, r                   # __launch_bounds__(384, 1): 65536 / 384, granule 8
    for code in ("C7508", "C7510", "C7519"):          # setmaxnreg honoured, wgmma asynchronous, no fence
        assert code not in res.log, res.log
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    ops = sass.opcode_counts(sass.disassemble(res.cubin, _NVDISASM),
                             ("HGMMA", "HMMA", "MOVM", "LDL", "STL", "UTMALDG", "USETMAXREG", "LDGSTS"))
    halves = d // 64
    # the long variant: Q K^T k-steps (d / 16) and P V k-steps (block_n / 16) per key block
    per_block = d // 16 + spec.long.tile.block_n // 16
    assert ops["HGMMA"] >= per_block and ops["HGMMA"] % per_block == 0, ops
    # the decode tile per key block, keys-as-rows (8 query rows as N, 16 keys as M): S^T = K Q^T in d / 16
    # k-steps and O^T += V^T P^T in dv / 16 m-tiles, P^T's two B fragments by movmatrix; the tile runs
    # at two call sites (CTAs that start on the short queue, consumer warps after the long queue)
    assert spec.short.tile.keys_as_rows
    per_dec = d // 16 + spec.short.head_dim_v // 16
    assert ops["HMMA"] == 2 * per_dec and ops["MOVM"] == 2 * 2, ops
    assert ops["LDL"] == 0 and ops["STL"] == 0 and ops["USETMAXREG"] == 2, ops
    assert ops["LDGSTS"] > 0, ops                     # the decode tile's cp.async (and the gathered rows)
    if gather:
        assert ops["UTMALDG"] == halves, ops          # Q only
    else:
        assert ops["UTMALDG"] >= 3 * halves, ops      # Q, K, V


def _mma_loops(lines: list) -> list:
    """(first, last) line of the innermost backward-branch loops of nvdisasm ``lines`` that hold an
    HMMA or HGMMA: the key-block loops (the decode tile's, at both call sites, and the Hopper
    consumers')."""
    labels = {m.group(1): i for i, line in enumerate(lines) for m in [re.match(r"^\.(L_x_\d+):", line)] if m}
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA `\(\.(L_x_\d+)\)", line)
        if m and labels.get(m.group(1), 1 << 30) < i and any("MMA" in x for x in lines[labels[m.group(1)]:i + 1]):
            loops.append((labels[m.group(1)], i))
    # shortest first, each kept unless it overlaps a kept one (nvdisasm places cold paths after the
    # function's end that branch back into a loop: they overlap the loop they return to)
    kept: list = []
    for a, b in sorted(loops, key=lambda x: x[1] - x[0]):
        if not any(a <= d and c <= b for c, d in kept):
            kept.append((a, b))
    return sorted(kept)


FUSED_FP8_COMPILE = [dict(d=128, kv="e4m3"), dict(d=64, kv="e5m2", mask="local"), dict(d=128, kv="e4m3", mask="none"),
                     dict(d=128, kv="e4m3", mask="local", softcap=True), dict(d=96, kv="e4m3", dtype="fp16"),
                     dict(d=128, kv="e4m3", rows=16), dict(d=96, kv="e4m3", rows=16)]


@pytest.mark.parametrize("kw", FUSED_FP8_COMPILE, ids=_compile_id)
def test_hopper_fused_fp8_kernel_compiles_without_spills_in_its_key_block_loops(kw):
    """The Hopper fused kernel on an FP8 cache (``choose_fused_hopper(kv_dtype=)``): the Hopper FP8
    variant (landing stages converted by producer warps 1-3: their loop is in the kernel) beside the
    FP8 decode tile (K/V converted in registers; by default the keys-as-rows tile, 8 rows).  With it no
    spill at all; with the 16-row tile (``short_rows=16``) at head dims 96 and 128 the kernel spills a
    few values once a tile (``SM90_FUSED_REGS["fp8"]``' note): at most 128 bytes, and no local load or
    store inside a key-block loop (the two decode loops, the consumers' wgmma loop).  The producer keeps
    two converter chunks in flight (56 / 224) but with a soft-cap (40 / 232: at 224 the consumers'
    loop spilled)."""
    kv = kw["kv"]
    fv = heuristics.choose_fused_hopper("sm_90a", kw.get("dtype", "bf16"), kw["d"], kw["d"], num_heads_q=HQ,
                                        num_heads_kv=HKV, mask=kw.get("mask", "causal"), max_seqlen_q=2048,
                                        max_seqlen_k=8192, paged=True, page_size=16, softcap=kw.get("softcap", False),
                                        kv_dtype=kv, short_rows=kw.get("rows"))
    spec = fv.fused
    assert spec.hopper and spec.long.kv_dtype == spec.short.kv_dtype == kv and spec.long.land_stages >= 1
    assert spec.short.fp8_in_registers and spec.short.tile.block_m == kw.get("rows", 8)
    assert spec.hopper_regs() == ((40, 232) if kw.get("softcap") else (56, 224))
    src = render.render(spec)
    assert f"#define KG_CONV_UNROLL {1 if kw.get('softcap') else 2}" in src
    assert "producer_loop_convert" in src and "FusedTmaParams" in src and "k_descale" in src
    res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["spill_stores"] <= 128 and r["spill_loads"] <= 128 and r["registers"] == 168, r
    if kw["d"] == 64 or "rows" not in kw:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    lines = sass.disassemble(res.cubin, _NVDISASM).splitlines()
    loops = _mma_loops(lines)
    hgmma = [(a, b) for a, b in loops if any("HGMMA" in x for x in lines[a:b + 1])]
    hmma = [(a, b) for a, b in loops if any("HMMA" in x for x in lines[a:b + 1])]
    assert len(hgmma) == 1 and len(hmma) == 2, loops          # the consumers' loop; the decode tile at 2 sites
    for a, b in loops:
        assert not any(re.search(r"\b(LDL|STL)", x) for x in lines[a:b + 1]), (a, b)
    ops = sass.opcode_counts("\n".join(lines), ("F2FP", "USETMAXREG", "UTMALDG"))
    assert ops["F2FP"] > 0 and ops["USETMAXREG"] == 2 and ops["UTMALDG"] > 0, ops   # cvt e4m3/e5m2 pairs, TMA


FUSED_FP8_MMA_COMPILE = [dict(d=128), dict(d=128, mask="none"), dict(d=64, mask="local", softcap=True, dtype="fp16"),
                         dict(d=128, page_size=64)]


@pytest.mark.parametrize("kw", FUSED_FP8_MMA_COMPILE, ids=_compile_id)
def test_hopper_fused_kernel_on_a_quantised_q_compiles(kw):
    """The Hopper fused kernel of a mixed batch with ``quantize_q`` (``choose_fused_hopper(q_dtype=)``):
    the long class on the FP8 tensor-core variant (FP8 wgmma on the quantised q, K read in the landing
    stages, V transposed by producer warps 1-3), the short class the keys-as-rows FP8 decode tile on the
    16-bit q.  40 / 232 registers (``SM90_FUSED_REGS["fp8_mma"]``: at 48 / 224 and 56 / 224 ptxas
    spilled 96 bytes): no spill on 224-key blocks with a mask (pages of 16) and on 128-key blocks; a few
    words once a tile, none inside a key-block loop, on 224-key blocks without a mask (as the standalone
    variant) and on 192-key blocks (pages of 24, 48 and 64, which TMA does not box at 224 keys)."""
    fv = heuristics.choose_fused_hopper("sm_90a", kw.get("dtype", "bf16"), kw["d"], kw["d"], num_heads_q=HQ,
                                        num_heads_kv=HKV, mask=kw.get("mask", "causal"), max_seqlen_q=2048,
                                        max_seqlen_k=8192, paged=True, page_size=kw.get("page_size", 16),
                                        softcap=kw.get("softcap", False), kv_dtype="e4m3", q_dtype="e4m3",
                                        window_span=300 if "mask" in kw else -1)
    spec = fv.fused
    assert spec.hopper and spec.long.fp8_mma and not spec.short.fp8_mma and spec.short.tile.block_m == 8
    assert spec.hopper_regs() == FusedAttentionSpec.SM90_FUSED_REGS["fp8_mma"] == (40, 232)
    assert "_fp8mma" in spec.name and spec.short_tiles_first >= 1 and spec.short_tiles_after >= 1
    src = render.render(spec)
    res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.name)
    r = res.resources
    assert r["registers"] == 168, r
    assert spec.long.tile.block_n == (192 if "page_size" in kw else 128 if kw["d"] == 64 else 224)
    if (kw.get("mask") == "none" and kw["d"] == 128) or "page_size" in kw:
        assert r["spill_stores"] <= 16 and r["spill_loads"] <= 16, r
    else:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    lines = sass.disassemble(res.cubin, _NVDISASM).splitlines()
    loops = _mma_loops(lines)
    qgmma = [(a, b) for a, b in loops if any("QGMMA" in x for x in lines[a:b + 1])]   # (FP8 wgmma's SASS name)
    hmma = [(a, b) for a, b in loops if any("HMMA" in x for x in lines[a:b + 1])]
    assert len(qgmma) == 1 and len(hmma) == 2, loops          # the consumers' loop; the decode tile at 2 sites
    assert not any("HGMMA" in x for x in lines), "a 16-bit wgmma in the FP8 tensor-core variant"
    for a, b in loops:
        assert not any(re.search(r"\b(LDL|STL)", x) for x in lines[a:b + 1]), (a, b)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_hopper_fused_d192x128_compiles_without_spills(dtype):
    """The fused kernel of head dims 192 x 128 (packed K/V): its decode tile keeps Q in shared memory
    (Q_REGS stops at d 128; 48 registers of Q made this kernel spill 4-8 bytes at 168)."""
    fv = heuristics.choose_fused_hopper("sm_90a", dtype, 192, 128, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                        max_seqlen_q=2048, max_seqlen_k=8192, paged=False, short_max_q=4)
    assert fv is not None and not fv.fused.short.q_in_registers
    assert (fv.fused.short_tiles_first, fv.fused.short_tiles_after) == (8, 7)
    res = compiler.compile_cubin(render.render(fv.fused), "sm_90a", compiler.default_options("sm_90a"), fv.fused.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0 and r["registers"] == 168, r


def test_register_pool_check_guards_setmaxnreg():
    """runtime.check_register_pool: the Hopper kernels' launch registers (168 x 384) cover every
    budget they ask for with setmaxnreg, and a cubin with fewer is refused before it could hang."""
    from kernelgen.jit import runtime

    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 64, 64, num_heads_q=32, num_heads_kv=8, mask="causal",
                                        max_seqlen_q=4096, max_seqlen_k=32768, paged=True, page_size=1)
    hop = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, num_heads_kv=8, mask="causal",
                            max_seqlen_q=4096, max_seqlen_k=4096).attention
    assert runtime.register_budget(fv.fused) == (72, 216) and runtime.register_budget(hop) == (24, 240)
    assert runtime.register_budget(fv.fused.short) is None and runtime.register_budget(fv.scheduler) is None
    for spec in (fv.fused, hop):
        runtime.check_register_pool(spec, {"registers": 168})
        with pytest.raises(RuntimeError, match="cannot cover setmaxnreg"):
            runtime.check_register_pool(spec, {"registers": 160})
    runtime.check_register_pool(fv.fused.short, {"registers": 40})     # no setmaxnreg: nothing to check
    runtime.check_register_pool(fv.fused, {})                          # no count reported: nothing to check


def test_the_fused_long_variant_drops_option_t():
    """On packed K/V the standalone long kernel takes the default options with "t" (tile coordinates
    through shared memory); the fused kernel's long variant is the same spec without it (its tile
    loop has no such ring), and the spec refuses "t" naming it."""
    pv = heuristics.choose_pair("sm_90a", "bf16", 128, 128, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                                max_seqlen_q=2048, max_seqlen_k=8192, paged=False, short_max_q=4)
    assert pv.long.attention.sm90_opts == "pt"
    fv = hopper_fused(128, paged=False)
    assert fv.fused.long.sm90_opts == "p"
    assert fv.fused.long == dataclasses.replace(pv.long.attention, sm90_opts="p", tile=fv.fused.long.tile)
    with pytest.raises(ValueError, match="takes no sm90_opts 't'"):
        FusedAttentionSpec(pv.long.attention, fv.fused.short)
