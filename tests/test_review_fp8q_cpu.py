"""Review of the FP8-query feature (an e4m3 q with an FP8 cache, the Hopper FP8 tensor-core variant
``AttentionSpec.fp8_mma``) from the CPU side: the tiles the dispatcher gives it (NVRTC for sm_90a),
the reference's accuracy bound, and what the docs say about it."""
import pytest

from kernelgen.jit import compiler, render
from kernelgen.selection import heuristics


def _consumer_and_producer_spills(spec) -> tuple:
    """(resources, spill instructions before the producer's register release, after it): the
    consumer warpgroups' code comes first in the Hopper kernel's SASS, the producer's (after its
    ``USETMAXREG.DEALLOC``) last, as tests/test_fp8_mma_cpu.py reads it."""
    from kernelgen.jit import sass
    res = compiler.compile_cubin(render.render(spec), "sm_90a", compiler.default_options("sm_90a"), spec.entry)
    lines = sass.disassemble(res.cubin, sass.find_nvdisasm()).splitlines()
    release = next(i for i, x in enumerate(lines) if "USETMAXREG.DEALLOC" in x)
    spills = [i for i, x in enumerate(lines) if "STL" in x or "LDL" in x]
    return res.resources, sum(i < release for i in spills), sum(i > release for i in spills)


# (head_dim, mask, softcap, num_splits, paged): the FP8 tensor-core tiles (d 64: 256-key blocks, d 256:
# 128-key blocks) beside a soft-cap, a window and split-KV, and the plain calls that keep them
@pytest.mark.parametrize("d,mask,softcap,splits,paged,mma,block_n", [
    (64, "causal", False, 0, False, True, 256),
    (64, "local", False, 3, True, True, 256),
    (64, "causal", True, 0, False, True, 128),        # soft-cap: n256's consumers spilled 24 bytes
    (64, "local", True, 3, True, True, 128),          # ... 28-44 with split-KV / a window
    (128, "local", True, 3, True, True, 128),
    (256, "causal", False, 0, False, True, 128),
    (256, "none", False, 0, True, True, 128),
    (256, "local", False, 0, False, False, 64),       # a window: n128's consumers spilled 36 bytes
    (256, "causal", False, 3, False, False, 64),      # split-KV: 56 bytes
    (256, "causal", True, 0, False, False, 64),       # a soft-cap: 84 bytes
])
def test_dispatched_fp8_q_variants_do_not_spill_in_their_consumers(d, mask, softcap, splits, paged, mma, block_n):
    """Every Hopper kernel ``heuristics.choose`` gives an e4m3 q compiles with no spill in its consumer
    warpgroups (the softmax and both GEMMs): SM90_FP8_MMA_TILES' 256-key tile at d 64 and 128-key tile
    at d 256 were taken whatever the call's soft-cap, window or split-KV, where they spill (24-124
    bytes, stores before the producer's register release).  Those calls keep their usual tile (d 64:
    128 keys, still the tensor-core variant; d 256: the FP8 K/V variant's 64 keys with q converted).
    Only d 256's tensor-core producer spills (loop counters, at most 28 bytes)."""
    v = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=16, num_heads_kv=4, mask=mask, max_seqlen_q=4096,
                          max_seqlen_k=4096, paged=paged, page_size=16 if paged else 0, num_splits=splits,
                          softcap=softcap, kv_dtype="e4m3", q_dtype="e4m3")
    a = v.attention
    assert a.mainloop == "sm90a" and (a.fp8_mma, a.tile.block_n) == (mma, block_n), a.name
    assert (v.combine is not None) == bool(splits)
    r, consumer, producer = _consumer_and_producer_spills(a)
    assert consumer == 0, (a.name, r)
    if a.fp8_mma and d > 128:
        assert r["spill_stores"] <= 28 and r["spill_loads"] <= 40, (a.name, r)
    else:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and producer == 0, (a.name, r)


def test_an_automatic_split_leaves_the_d256_tensor_core_tile():
    """The split bound comes from the tile: a d 256 call the 128-key tile would split (few query
    tiles, long keys) takes the usual tile and its own bound instead; one it would not split keeps
    the tensor-core tile."""
    kw = dict(num_heads_q=8, num_heads_kv=8, mask="causal", max_seqlen_k=32768, kv_dtype="e4m3", q_dtype="e4m3")
    v = heuristics.choose("sm_90a", "bf16", 256, 256, max_seqlen_q=128, **kw)
    assert not v.attention.fp8_mma and v.attention.tile.block_n == 64 and v.max_splits > 1
    assert v == heuristics.choose("sm_90a", "bf16", 256, 256, max_seqlen_q=128, **{**kw, "q_dtype": ""})
    big = heuristics.choose("sm_90a", "bf16", 256, 256, max_seqlen_q=32768, **kw)
    assert big.attention.fp8_mma and big.attention.tile.block_n == 128 and big.max_splits == 1
