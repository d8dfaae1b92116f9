"""The keys-as-rows decode tile (block_m 8, templates/attention/tile_kt_sm80.cuh) without a GPU:
its tile and spec rules, where the dispatcher uses it (the Hopper fused kernel's short class up to
head dim 128), its shared memory, the rendered source, and NVRTC builds (sm_80 and sm_90a) with no
spills whose SASS has half the 16-row tile's MMAs a key block and the two movmatrix of P^T.
Its numbers on the GPU are in tests/gpu/test_fused_gpu.py (every Hopper mixed batch runs it)."""
import dataclasses

import pytest
import sampling

from kernelgen.jit import compiler, render, sass
from kernelgen.kernels.device import Device
from kernelgen.kernels.spec import AttentionSpec, TileConfig
from kernelgen.selection import decide, heuristics
from kernelgen.selection.settings import Settings

KT = TileConfig(8, 16, 1, 2, 8)
ROWS16 = TileConfig(16, 16, 1, 2, 8)
_NVDISASM = sass.find_nvdisasm()


def spec(tile=KT, d=128, dv=None, arch="sm_90a", **kw):
    kw.setdefault("pack_gqa", True)
    return AttentionSpec(arch, "bf16", d, d if dv is None else dv, kw.pop("mask", "causal"), "soa", tile, **kw)


def fused(d=128, dv=None, **kw):
    return heuristics.choose_fused_hopper("sm_90a", "bf16", d, d if dv is None else dv, num_heads_q=32, num_heads_kv=8,
                                          mask="causal", max_seqlen_q=2048, max_seqlen_k=8192,
                                          paged=kw.pop("paged", True), short_max_q=4, page_size=16, **kw)


def test_tile_rules():
    assert KT.keys_as_rows and not ROWS16.keys_as_rows and KT.tag == "m8n16w1s2b8"
    with pytest.raises(ValueError, match="one warp, block_n=16"):
        TileConfig(8, 16, 2, 2, 8)
    with pytest.raises(ValueError, match="one warp, block_n=16"):
        TileConfig(8, 32, 1, 2, 8)
    with pytest.raises(ValueError, match="multiple of 16"):
        TileConfig(24, 16, 1, 2, 8)


@pytest.mark.parametrize("d,dv", [(192, 128), (256, 256), (128, 192)])
def test_spec_refuses_head_dims_above_128(d, dv):
    with pytest.raises(ValueError, match="keys-as-rows tile .* head dims <= 128"):
        spec(d=d, dv=dv)


def test_spec_shared_memory_is_the_kv_stages_only():
    """Q^T in registers (no Q/O tile): 2 stages x 16 keys x (136 + 136) x 2 bytes at d 128, as the
    16-row tile with Q in registers; the fp32 O^T staging (8 x 132 x 4 = 4224 bytes) reuses them."""
    for d in (64, 96, 128):
        s, s16 = spec(d=d), spec(ROWS16, d=d)
        assert s.q_in_registers and s16.q_in_registers
        assert s.smem_bytes() == s16.smem_bytes() == 2 * 2 * 16 * 2 * (d + 8)
        assert 8 * (d + 4) * 4 <= s.smem_bytes()
    assert spec().name.endswith("_m8n16w1s2b8") and spec().name != spec(ROWS16).name


def test_dispatcher_uses_it_in_the_hopper_fused_kernel_up_to_d128():
    assert heuristics.SM90_FUSED_SHORT_ROWS == 8
    for d in (64, 96, 128):
        fv = fused(d, paged=d != 96)
        assert fv.fused.short.tile == KT and fv.fused.short.mainloop == "sm80"
        assert (fv.fused.short_tiles_first, fv.fused.short_tiles_after) == (12, 8)
    # the 16-row tile on request, and above head dim 128 (192 x 128 keeps Q in shared memory)
    assert fused(short_rows=16).fused.short.tile == ROWS16
    assert fused(192, 128, paged=False).fused.short.tile.block_m == 16
    with pytest.raises(ValueError, match="short_rows must be 8 or 16"):
        fused(short_rows=32)
    # the standalone decode call keeps the 16-row tile (its full-GPU rate is HBM-bound either way)
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=1,
                          max_seqlen_k=8192, paged=True, page_size=16)
    assert v.attention.tile == ROWS16


def _decided(settings):
    """The decider's Hopper fused kernel for the ``fused()`` batch on an H200 with ``settings``."""
    sig = decide.CallSignature(dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=32, num_heads_kv=8,
                               mask="causal", window_left=-1, layout="soa", max_seqlen_q=2048, max_seqlen_k=8192,
                               paged=True, page_size=16, softcap=False, pack_gqa=None, num_splits=0,
                               short_query_tokens=4, arch=None, tma_ok=True, batch=8, rows=4096)
    r = decide.decide(sig, Device("H200", (9, 0), 132, 60 * 2 ** 20, 232448), settings)
    assert r.kind == "fused"
    return r.variants.fused


def test_short_rows_from_the_environment(monkeypatch):
    monkeypatch.setenv("KERNELGEN_SM90_SHORT_ROWS", "16")
    s = Settings.from_env()
    assert s.sm90_short_rows() == 16 and fused(short_rows=s.sm90_short_rows()).fused.short.tile == ROWS16
    assert _decided(s).short.tile == ROWS16
    monkeypatch.setenv("KERNELGEN_SM90_SHORT_ROWS", "8")
    assert _decided(Settings.from_env()).short.tile == KT
    for bad in ("4", "x", "8.0"):
        monkeypatch.setenv("KERNELGEN_SM90_SHORT_ROWS", bad)
        with pytest.raises(ValueError, match="KERNELGEN_SM90_SHORT_ROWS must be 8 or 16"):
            _decided(Settings.from_env())
    monkeypatch.delenv("KERNELGEN_SM90_SHORT_ROWS")
    assert Settings.from_env().sm90_short_rows() is None and heuristics.SM90_FUSED_SHORT_ROWS == 8
    assert _decided(Settings.from_env()).short.tile == KT


def test_render_takes_the_keys_as_rows_tile():
    src = render.render(spec())
    assert "tile_kt_sm80.cuh" in src and "movmatrix.sync.aligned.m8n8.trans.b16" in src
    assert "constexpr bool KT = BM == 8;" in src and "constexpr int BM = 8;" in src
    src16 = render.render(spec(ROWS16))
    assert "movmatrix" not in src16 and "attention/tile_sm80.cuh" in src16


def _ops(s, arch):
    res = compiler.compile_cubin(render.render(s), arch, compiler.default_options(arch), s.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    assert _NVDISASM is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    return r, sass.opcode_counts(sass.disassemble(res.cubin, _NVDISASM), ("HMMA", "MOVM", "LDL", "STL", "MUFU"))


KT_BUILDS = {"d128-paged-split": dict(d=128, paged=True, split=True),
             "d64-softcap": dict(d=64, mask="none", softcap=True), "d96-local": dict(d=96, mask="local")}
KT_CASES = [(name, arch) for name in KT_BUILDS for arch in ("sm_80", "sm_90a")]


@pytest.mark.parametrize("kw,arch", sampling.matrix([(KT_BUILDS[n], a) for n, a in KT_CASES], 1),
                         ids=[f"{n}-{a}" for n, a in KT_CASES])
def test_compiles_with_half_the_mmas_of_the_16_row_tile(arch, kw):
    """Sampled: each build once, on both archs (3 of 6; all with --full-matrix)."""
    kw = dict(kw)
    d = kw.pop("d")
    r, ops = _ops(spec(d=d, arch=arch, **kw), arch)
    r16, ops16 = _ops(spec(ROWS16, d=d, arch=arch, **kw), arch)
    # a 16-key block: d / 16 + d / 16 MMAs (S^T k-steps, O^T m-tiles) against the 16-row tile's
    # 2 x d / 16 + d / 8; both have one block loop (the mainloop is not unrolled)
    assert ops["HMMA"] == d // 16 + d // 16 and ops16["HMMA"] == 2 * (d // 16) + d // 8, (ops, ops16)
    assert ops["MOVM"] == 2 and ops16["MOVM"] == 0, (ops, ops16)
    assert ops["LDL"] == ops["STL"] == 0
    assert r["registers"] < r16["registers"], (r, r16)   # half the O and Q fragments
