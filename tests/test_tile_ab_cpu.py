"""benchmarks/experiments/tile_ab.py's pure parts: the summary of ratios and the twin configurations."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "tile_ab", Path(__file__).resolve().parents[1] / "benchmarks" / "experiments" / "tile_ab.py")
tile_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tile_ab)

CONFIGS = {"m": "bf16:128:128:128:2:p::a/templates", "h": "bf16:128:128:128:2:p::b/templates",
           "fm": "fp8q:128:128:192:2:p", "fh": "fp8q:128:128:192:2:p:KG_PIN_FP8=1", "fa3": "fa3", "fa3f": "fa3fp8"}


def test_each_time_is_divided_by_its_paths_first_configuration_over_the_passes():
    rows = [{"shape": "h128c", "us": {"m": 100.0, "h": 90.0, "fm": 80.0, "fh": 60.0, "fa3": 95.0, "fa3f": 70.0}},
            {"shape": "h128c", "us": {"m": 100.0, "h": 110.0, "fm": 80.0, "fh": 88.0, "fa3": 105.0, "fa3f": 72.0}},
            {"shape": "h64c", "us": {"fm": 50.0, "fh": 40.0}}]
    lines = tile_ab.summarize(rows, CONFIGS)
    assert lines == ["h128c: h 0.900-1.100, fh 0.750-1.100, fa3 0.950-1.050, fa3f 0.875-0.900",
                     "h64c: fh 0.800"]


def test_alibi_configurations_are_timed_against_the_first_bf16_one():
    configs = {"p": "bf16:128:128:128:2:p", "a": "alibi:128:128:128:2:p",
               "acc": "alibi:128:128:128:2:p:KG_ALIBI_ACC=1"}
    rows = [{"shape": "h128c", "us": {"p": 100.0, "a": 104.0, "acc": 102.0}},
            {"shape": "h128c", "us": {"p": 100.0, "a": 106.0, "acc": 101.0}}]
    assert tile_ab.summarize(rows, configs) == ["h128c: a 1.040-1.060, acc 1.010-1.020"]


def test_twins_follow_each_kernelgen_configuration_and_not_the_peers():
    twins = tile_ab.with_twins(CONFIGS)
    assert list(twins) == ["m", "m~2", "h", "h~2", "fm", "fm~2", "fh", "fh~2", "fa3", "fa3f"]
    assert twins["fh~2"] == CONFIGS["fh"] and tile_ab.path_of(twins["m~2"]) == "bf16"


def test_a_configuration_name_with_a_tilde_is_refused():
    import pytest
    with pytest.raises(ValueError, match="reserved"):
        tile_ab.with_twins({"a": "bf16:64:192:128:2:p", "a~2": "bf16:64:192:128:2:p"})


def test_an_fp8q_configuration_lifts_the_tile_limits_while_it_is_prepared():
    """fp8q's tile must reach soft-capped calls, which SM90_FP8_MMA_TILE_LIMITS keeps on their usual
    tile at d 128 (and non-causal ones, which it no longer limits there): lifted inside, restored after."""
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics
    before = dict(heuristics.SM90_FP8_MMA_TILE_LIMITS)
    tile = TileConfig(128, 192, 8, 2, 1)
    got = tile_ab.patched("fp8q", 128, tile, "p", lambda: (heuristics.fp8_mma_tile(128, 128, nomask=True),
                                                          heuristics.fp8_mma_tile(128, 128, softcap=True)))
    assert got == (tile, tile)
    assert heuristics.SM90_FP8_MMA_TILE_LIMITS == before and heuristics.fp8_mma_tile(128, 128, softcap=True) is None


def test_regs_fp8_in_the_defines_sets_the_fp8_cache_registers_while_prepared(monkeypatch):
    """``REGS_FP8=P/C`` among a configuration's defines is no define: it sets the FP8-cache kernels'
    registers of 8 consumer warps while the call is prepared (the rendered setmaxnreg changes), and
    the rest of the defines still reach KERNELGEN_DEFINES; both are restored after."""
    import os

    from kernelgen.kernels.spec import AttentionSpec, TileConfig
    from kernelgen.selection import heuristics
    monkeypatch.delenv("KERNELGEN_DEFINES", raising=False)
    before = dict(AttentionSpec.SM90_REGS_FP8)
    tile = TileConfig(128, 128, 8, 2, 1)

    def inside():
        spec = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                 max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3").attention
        return spec._sm90_regs(), os.environ.get("KERNELGEN_DEFINES")
    regs, defs = tile_ab.patched("kv8", 128, tile, "p", inside, "REGS_FP8=56/224+KG_CONV_UNROLL=2")
    assert defs == "KG_CONV_UNROLL=2"
    assert regs == {"producer_regs": 56, "consumer_regs": 224}
    assert AttentionSpec.SM90_REGS_FP8 == before and "KERNELGEN_DEFINES" not in os.environ


def test_regs_fp8_mma_small_sets_the_d64_tensor_core_registers_while_prepared(monkeypatch):
    """``REGS_FP8_MMA_SMALL=P/C``: the 12-warp FP8 tensor-core kernels' registers at head dim 64
    (FlashAttention-3's 192 x 160 FP8 tile at 32 / 160 compiles without spills, where 56 / 152
    spills 96 bytes: docs/dev/perf-log.md, "Thirty-fourth session"), restored after."""
    from kernelgen.kernels.spec import AttentionSpec, TileConfig
    from kernelgen.selection import heuristics
    monkeypatch.delenv("KERNELGEN_DEFINES", raising=False)
    before = dict(AttentionSpec.SM90_REGS_FP8_MMA_SMALL)
    tile = TileConfig(192, 160, 12, 2, 1)

    def inside():
        spec = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=32, num_heads_kv=8, mask="causal",
                                 max_seqlen_q=2048, max_seqlen_k=2048, kv_dtype="e4m3", q_dtype="e4m3").attention
        return spec.tile, spec._sm90_regs()
    got_tile, regs = tile_ab.patched("fp8q", 64, tile, "p", inside, "REGS_FP8_MMA_SMALL=32/160")
    assert got_tile == tile and regs == {"producer_regs": 32, "consumer_regs": 160}
    assert AttentionSpec.SM90_REGS_FP8_MMA_SMALL == before


def test_the_fa4_peer_is_timed_against_the_first_bf16_configuration_and_has_no_twin():
    configs = {"w3": "bf16:64:192:128:2:p", "w2": "bf16:64:128:128:2:p", "fa4": "fa4"}
    rows = [{"shape": "g64c", "us": {"w3": 100.0, "w2": 96.0, "fa4": 93.0}}]
    assert tile_ab.summarize(rows, configs) == ["g64c: w2 0.960, fa4 0.930"]
    assert list(tile_ab.with_twins(configs)) == ["w3", "w3~2", "w2", "w2~2", "fa4"]


def test_wg3_in_the_defines_lets_extras_on_the_three_warpgroup_tile_while_prepared(monkeypatch):
    """``WG3=transcendental`` is no define: it adds "transcendental" to
    ``heuristics.SM90_THREE_WG_EXTRAS`` while the configuration is prepared (here from a set without
    it), so the tanh.approx snippet takes the 192-row tile (as FA4's sm_90 soft-cap kernel does); with
    option "m" the kernel carries it; both restored after."""
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.kernels.variant_code import VariantCode
    from kernelgen.selection import heuristics
    monkeypatch.delenv("KERNELGEN_DEFINES", raising=False)
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset({"alibi", "variant"}))   # (the default has it)
    before = heuristics.SM90_THREE_WG_EXTRAS
    snippet = VariantCode(score_mod="50.f * tanhf(score / 50.f)")

    def inside():
        import os
        spec = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=64, num_heads_kv=8, mask="causal",
                                 max_seqlen_q=16384, max_seqlen_k=16384, variant=snippet).attention
        return spec, os.environ.get("KERNELGEN_DEFINES")
    spec, defs = tile_ab.patched("bf16", 64, TileConfig(192, 128, 12, 2, 1), "mp", inside, "WG3=transcendental")
    assert spec.tile.block_m == 192 and spec.tile.num_warps == 12 and "_masksplit" in spec.name and defs is None
    spec, _ = tile_ab.patched("bf16", 64, TileConfig(192, 128, 12, 2, 1), "p", inside)
    assert spec.tile.num_warps == 8 and "_masksplit" not in spec.name
    # the letters exact: the dispatcher's rule (SM90_MASK_SPLIT_MUFU) adds no "m" inside
    spec, _ = tile_ab.patched("bf16", 64, TileConfig(192, 128, 12, 2, 1), "p", inside, "WG3=transcendental")
    assert spec.tile.num_warps == 12 and "_masksplit" not in spec.name
    assert heuristics.SM90_THREE_WG_EXTRAS == before and heuristics.SM90_MASK_SPLIT_MUFU


def test_option_m_in_the_letters_applies_at_every_head_dim_while_prepared():
    """A configuration whose letters hold "m" gets it above ``SM90_MASK_SPLIT_MAX_HEAD_DIM`` too (the
    plain d 256 kernel spills 8 / 16 bytes with it, an experiment's to see; the soft-capped one has it
    by default, ``SM90_MASK_SPLIT_MUFU_HEAD_DIMS``), restored after."""
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics
    before = heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM

    def inside():
        return heuristics.choose("sm_90a", "bf16", 256, 256, num_heads_q=16, num_heads_kv=8, mask="causal",
                                 max_seqlen_q=16384, max_seqlen_k=16384).attention.name
    assert "_masksplit" in tile_ab.patched("bf16", 256, TileConfig(128, 80, 8, 2, 1), "mp", inside)
    assert heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM == before == 128
    assert "_masksplit" not in inside()


def test_a_malformed_pseudo_define_raises_before_anything_is_patched():
    """``REGS_FP8=x`` (or a pair that is not PRODUCER/CONSUMER) raises ValueError, and the tile
    tables, options and extras are as before the call."""
    import pytest
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics
    before = (dict(heuristics.SM90_TILES), heuristics.SM90_OPTS, heuristics.SM90_THREE_WG_EXTRAS,
              heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM)
    for bad in ("WG3=softcap+REGS_FP8=x", "REGS_FP8_MMA_SMALL=32/160/8"):
        with pytest.raises(ValueError):
            tile_ab.patched("bf16", 64, TileConfig(192, 128, 12, 2, 1), "mp", lambda: None, bad)
        assert (dict(heuristics.SM90_TILES), heuristics.SM90_OPTS, heuristics.SM90_THREE_WG_EXTRAS,
                heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM) == before


def test_the_letters_are_exact_on_the_fp8_tensor_core_tile_too():
    """The dispatcher adds option "m" to causal FP8 tensor-core calls at head dim 256
    (``heuristics.SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS``); a configuration's letters stay exact: "p" builds
    without it, "mp" with it, and the rule is back afterwards."""
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics

    def opts():
        return heuristics.choose("sm_90a", "bf16", 256, 256, num_heads_q=16, num_heads_kv=16, mask="causal",
                                 max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3", q_dtype="e4m3",
                                 mainloop="sm90a").attention.sm90_opts
    tile = TileConfig(128, 128, 8, 2, 1)
    assert tile_ab.patched("fp8q", 256, tile, "p", opts) == "p"
    assert tile_ab.patched("fp8q", 256, tile, "mp", opts) == "mp"
    assert opts() == "mp" and heuristics.SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS == (256,)
