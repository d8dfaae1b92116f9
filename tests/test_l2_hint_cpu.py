"""The one-warp decode tiles of standalone launches on a paged cache copy (K, V and their few Q rows)
with an L2 evict_first hint, and nothing else does: not the packed caches, the prefill tiles or the
fused mixed-batch kernels (CPU, NVRTC to PTX); those copies ask L2 for whole 128-byte lines where a
head's rows are whole lines, and the defines KG_EF_PREFETCH / KG_CP_PREFETCH set the sizes; no hinted
kernel gets a misaligned memory descriptor (SASS).  The hint (common/ptx.cuh ``cp_async16_ef``, variant_sm80.cuh ``KV_EVICT_FIRST``) was
measured on the H200 with attention timed after the GEMMs that precede it in a decode layer: 1-5 %
faster on every bench decode batch (docs/dev/perf-log.md, "Thirty-seventh session" and
"Thirty-eighth session")."""
import re

import pytest

from kernelgen.jit import compiler, render, sass
from kernelgen.kernels.spec import AttentionSpec, TileConfig

HINTED = "cp.async.cg.shared.global.L2::cache_hint"
_CP_ASYNC = re.compile(r"^\s*cp\.async\.cg\.shared\.global[.\w:]*", re.M)


def ptx(spec) -> str:
    """PTX of the spec's kernel, compiled by NVRTC for the virtual arch of its target."""
    from cupy.cuda import nvrtc

    compiler._ensure_nvrtc()
    opts = [o.replace(f"={spec.arch}", "=compute_" + spec.arch[3:]) if o.startswith("--gpu-architecture") else o
            for o in compiler.default_options(spec.arch) if o != "-Xptxas=-v"]
    prog = nvrtc.createProgram(render.render(spec), f"{spec.name}.cu", [], [])
    try:
        nvrtc.compileProgram(prog, opts)
        out = nvrtc.getPTX(prog)
        return out.decode() if isinstance(out, bytes) else out
    finally:
        nvrtc.destroyProgram(prog)


def copies(text: str) -> tuple[int, int]:
    """(cp.async copies with the L2 hint, without) in the PTX text."""
    ops = _CP_ASYNC.findall(text)
    hinted = sum(op.strip().startswith(HINTED) for op in ops)
    return hinted, len(ops) - hinted


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("tile, kv_dtype, paged, expect_hint", [
    (TileConfig(16, 16, 1, 2, 8), "", True, True),        # the standalone decode tile
    (TileConfig(16, 16, 1, 2, 12), "e4m3", True, True),   # ... on an FP8 cache
    (TileConfig(8, 16, 1, 2, 8), "", True, True),         # the keys-as-rows decode tile
    (TileConfig(16, 16, 1, 2, 8), "", False, False),      # packed K / V: no hint
    (TileConfig(16, 16, 1, 2, 12), "e4m3", False, False),
    (TileConfig(128, 32, 4, 2, 2), "", True, False),      # a four-warp prefill tile
])
def test_only_the_paged_one_warp_tiles_hint_their_copies(arch, tile, kv_dtype, paged, expect_hint):
    spec = AttentionSpec(arch, "bf16", 128, 128, "causal", "soa", tile, pack_gqa=tile.num_warps == 1,
                         split=tile.num_warps == 1, paged=paged, kv_dtype=kv_dtype, mainloop="sm80")
    text = ptx(spec)
    hinted, plain = copies(text)
    if expect_hint:
        assert hinted > 0 and plain == 0, (hinted, plain)
    else:
        assert hinted == 0 and plain > 0, (hinted, plain)
    assert prefetch_sizes(text) == ({"L2::128B"} if expect_hint else {""})


def prefetch_sizes(text: str) -> set:
    """The L2 prefetch-size qualifiers (``L2::128B``, ...; "" for none) of the PTX's cp.async copies."""
    return {(re.search(r"L2::\d+B", op) or [""])[0] for op in _CP_ASYNC.findall(text)}


@pytest.mark.parametrize("dtype, kv_dtype, d, dv, alibi, size", [
    ("bf16", "", 64, 64, False, "L2::128B"), ("fp16", "", 128, 128, False, "L2::128B"),
    ("bf16", "", 256, 256, False, "L2::128B"), ("bf16", "", 192, 128, False, "L2::128B"),
    ("bf16", "", 96, 96, False, ""),                                   # 192-byte rows straddle two heads
    ("bf16", "e4m3", 128, 128, False, "L2::128B"), ("fp16", "e5m2", 256, 256, False, "L2::128B"),
    ("bf16", "e4m3", 64, 64, False, ""), ("fp16", "e5m2", 64, 64, False, ""),
    ("bf16", "e4m3", 96, 96, False, ""), ("bf16", "e4m3", 192, 128, False, ""),
    ("bf16", "e4m3", 64, 64, True, ""), ("bf16", "e4m3", 128, 128, True, "L2::128B"),   # FP8 tiles not FP8_REGS
])
def test_hinted_copies_prefetch_128_bytes_where_rows_are_whole_lines(dtype, kv_dtype, d, dv, alibi, size):
    """The evict_first copies prefetch 128 bytes into L2 where one head's K and V rows are whole
    multiples of 128 bytes (bf16 d 128 / 256 ran 1.2-2.2 % faster on the H100), none otherwise: an
    e4m3 row of d 64 is 64 bytes, and 128 fetched the next KV head's row too (1.11-1.18x slower;
    docs/dev/perf-log.md, "Sixtieth session"); rows of 96 / 192 bytes straddle two heads' lines.
    The qualifier reaches the SASS (LDGSTS .LTC128B) where nvdisasm is found."""
    tile = TileConfig(16, 16, 1, 2, 12 if kv_dtype and d <= 128 else 8)
    spec = AttentionSpec("sm_90a", dtype, d, dv, "causal", "soa", tile, pack_gqa=True, split=True, paged=True,
                         kv_dtype=kv_dtype, mainloop="sm80", alibi=alibi)
    assert not (alibi and spec.fp8_in_registers), spec.name   # the ALiBi cases: FP8 tiles of the other kind
    text = ptx(spec)
    assert copies(text)[0] > 0
    assert prefetch_sizes(text) == {size}
    if _NVDISASM is not None:
        res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)
        ops = set(re.findall(r"LDGSTS[.\w]*", sass.disassemble(res.cubin, _NVDISASM)))
        assert ops and all(("LTC128B" in op) == bool(size) for op in ops), ops


@pytest.mark.parametrize("defines, hinted_size, plain_size", [
    ("KG_EF_PREFETCH=0", "", ""), ("KG_EF_PREFETCH=256", "L2::256B", ""),
    ("KG_CP_PREFETCH=64", "L2::128B", "L2::64B"), ("KG_CP_PREFETCH=128,KG_EF_PREFETCH=64", "L2::64B", "L2::128B"),
])
def test_prefetch_size_defines(monkeypatch, defines, hinted_size, plain_size):
    """KG_EF_PREFETCH overrides the evict_first copies' size, KG_CP_PREFETCH sets the plain copies'
    (none by default: 128 made the fused mixed-batch kernels' decode tiles slower on the H100); each
    define sets its copies' qualifier alone."""
    monkeypatch.setenv(compiler.DEFINES_ENV, defines)
    tile = TileConfig(16, 16, 1, 2, 8)
    for paged, size in ((True, hinted_size), (False, plain_size)):
        spec = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", tile, pack_gqa=True, split=True,
                             paged=paged, mainloop="sm80")
        text = ptx(spec)
        assert copies(text)[0 if paged else 1] > 0
        assert prefetch_sizes(text) == {size}, (paged, defines)


@pytest.mark.parametrize("kv_dtype", ["", "e4m3"])
@pytest.mark.parametrize("hopper", [False, True])
def test_fused_launches_do_not_hint(hopper, kv_dtype):
    """The fused mixed-batch kernels' one-warp decode tiles (paged) copy without the hint: it was
    measured on standalone decode launches, and in the Hopper fused FP8 kernel it made the
    consumers' key-block loop spill (tests/test_fused_hopper_cpu.py)."""
    from kernelgen.selection import heuristics

    kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_k=8192, paged=True, kv_dtype=kv_dtype)
    fv = (heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, max_seqlen_q=2048, page_size=16, **kw) if hopper
          else heuristics.choose_fused("sm_80", "bf16", 128, 128, **kw))
    assert fv is not None and fv.fused.short.tile.num_warps == 1 and fv.fused.short.paged
    text = ptx(fv.fused)
    hinted, plain = copies(text)
    assert hinted == 0 and plain > 0, (hinted, plain)
    assert prefetch_sizes(text) == {""}


_NVDISASM = sass.find_nvdisasm()


@pytest.mark.skipif(_NVDISASM is None, reason="nvdisasm not found")
@pytest.mark.parametrize("arch", ["sm_90a"])   # (sm_80's LDGSTS take no descriptor operand)
@pytest.mark.parametrize("dtype, kv_dtype, d, dv, mask, split, paged", [
    *[("bf16", kv, d, d, "causal", True, paged) for kv, d in (("", 64), ("", 128), ("", 256), ("e4m3", 64),
                                                                ("e4m3", 128), ("e5m2", 256)) for paged in (False, True)],
    # FP8 caches without a mask or splits: ptxas gave the hinted copies desc[UR1] here (fp16 q at
    # d 128, either q at 192 x 128), so they copy without the hint; the neighbours keep it
    ("fp16", "e4m3", 128, 128, "none", False, True), ("fp16", "e5m2", 128, 128, "none", False, True),
    ("bf16", "e4m3", 192, 128, "none", False, True), ("fp16", "e5m2", 192, 128, "none", False, True),
    ("fp16", "e4m3", 128, 128, "causal", False, True), ("fp16", "e4m3", 128, 128, "none", True, True),
    ("bf16", "e4m3", 192, 128, "local", False, True), ("fp16", "", 128, 128, "none", False, True),
    ("bf16", "", 192, 128, "none", False, True),
])
def test_decode_copies_use_aligned_memory_descriptors(arch, dtype, kv_dtype, d, dv, mask, split, paged):
    """Every LDGSTS of the one-warp decode tiles names an even uniform register pair as its 64-bit
    memory descriptor.  With the L2 hint on packed FP8 K/V, NVRTC 13.0
    gave 8-16 of them desc[UR1] and the kernel raised an illegal instruction on the H200
    (docs/dev/perf-log.md, "Thirty-seventh session"); paged FP8 tiles without a mask or splits got it
    too (fp16 q at d 128, 192 x 128: "Sixtieth session"), so those copy without the hint.  This is the
    CPU-side guard for any change to the copies' cache policy."""
    tile = TileConfig(16, 16, 1, 2, 12 if kv_dtype and max(d, dv) <= 128 else 8)
    spec = AttentionSpec(arch, dtype, d, dv, mask, "soa", tile, pack_gqa=True, split=split, paged=paged,
                         kv_dtype=kv_dtype, mainloop="sm80")
    res = compiler.compile_cubin(render.render(spec), arch, compiler.default_options(arch), spec.name)
    text = sass.disassemble(res.cubin, _NVDISASM)
    regs = [int(r) for r in re.findall(r"LDGSTS[.\w]* \[[^\]]*\], desc\[UR(\d+)\]", text)]
    assert regs, "no LDGSTS found"
    assert all(r % 2 == 0 for r in regs), sorted(set(regs))
    hinted = paged and not (kv_dtype and mask == "none" and not split)
    assert copies(ptx(spec))[0 if hinted else 1] > 0 and copies(ptx(spec))[1 if hinted else 0] == 0


@pytest.mark.parametrize("defines", ["KG_CP_PREFETCH=100", "KG_CP_PREFETCH", "KG_EF_PREFETCH=32"])
def test_an_invalid_prefetch_size_fails_the_build(monkeypatch, defines):
    """A prefetch-size define other than 0, 64, 128 or 256 (a bare one reads as 1) stops the compile
    instead of meaning no prefetch."""
    monkeypatch.setenv(compiler.DEFINES_ENV, defines)
    spec = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 8), pack_gqa=True,
                         split=True, paged=True, mainloop="sm80")
    with pytest.raises(compiler.CompileError, match="PREFETCH|prefetch"):
        compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.name)


@pytest.mark.parametrize("arch", ["sm_100", "sm_120"])
def test_blackwell_decode_tiles_copy_without_the_hint(arch):
    """On the untested Blackwell archs the decode tiles copy without the evict_first hint: ptxas gave
    most hinted copies there the odd descriptor register desc[UR1] (docs/dev/perf-log.md, "Sixtieth
    session")."""
    spec = AttentionSpec(arch, "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 8), pack_gqa=True,
                         split=True, paged=True, mainloop="sm80")
    hinted, plain = copies(ptx(spec))
    assert hinted == 0 and plain > 0, (hinted, plain)
