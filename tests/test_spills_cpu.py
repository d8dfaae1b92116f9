"""CPU: a user variant's three-warpgroup Hopper kernel (head dim 64) or its kernel with option "m" (a
tanh snippet at head dim 256) is kept only where its build has no spills (``selection.spills``): the
snippets the notes name compile on NVRTC for sm_90a here, no GPU needed; a spilling one is decided
again on the two-warpgroup tile without "m"; a kernel not built yet
counts only when the caller builds it; a kernel's spills are looked up once; without JIT a cached
spilling kernel runs when its twin is not cached; the catalog (``kernelgen warmup``) lists both
tiles.  (The tiered first call's background build of both: tests/test_call_path.py.)"""
import dataclasses
import random

import pytest

from kernelgen.jit import cache
from kernelgen.kernels.device import Device
from kernelgen.kernels.variant_code import VariantCode
from kernelgen.selection import catalog, decide, heuristics, spills

H200 = Device("H200", (9, 0), 132, 60 * 2 ** 20, 232448)

#: ALiBi as a snippet: fits the 160 registers of a three-warpgroup consumer (no spills, NVRTC 13.0).
ALIBI = VariantCode(score_mod="score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)",
                    tensors=(("slopes", "float32"),))
#: apps.variant_examples.t5_bias's snippet: spills 68 bytes there when causal.
T5 = VariantCode(score_mod=("const int rel = clamp(kv_idx - (q_idx + kv_len - q_len), -4096, 4096);\n"
                            "return score + table[head * 32 + buckets[rel + 4096]];"),
                 tensors=(("table", "float32"), ("buckets", "int32")))


def sig(variant, **kw) -> decide.CallSignature:
    """A causal bf16 prefill of gpt-oss's heads (64 / 8, d 64): 1 x 16k, with a user variant."""
    base = dict(dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=64, num_heads_kv=8, mask="causal",
                window_left=-1, layout="soa", max_seqlen_q=16384, max_seqlen_k=16384, paged=False, page_size=0,
                softcap=False, pack_gqa=None, num_splits=0, short_query_tokens=None, arch=None, tma_ok=True,
                batch=1, rows=16384, variant=variant)
    return decide.CallSignature(**{**base, **kw})


def warps(recipe) -> int:
    return recipe.variants.attention.tile.num_warps


def test_a_variant_that_fits_keeps_three_warpgroups():
    s = sig(ALIBI)
    r = decide.decide(s, H200)
    assert warps(r) == 12 and spills.variant_with_twin(r.variants.attention)
    assert spills.spills(r.variants.attention, build=True) is False
    assert spills.checked(r, s, H200, build=True) is r


def test_a_variant_that_spills_takes_two_warpgroups():
    s = sig(T5)
    r = decide.decide(s, H200)
    assert warps(r) == 12 and spills.spills(r.variants.attention, build=True) is True
    two = spills.checked(r, s, H200, build=True)
    assert warps(two) == 8 and two.variants.attention.tile.block_m == 128
    assert two == decide.decide(dataclasses.replace(s, variant_spills=True), H200)
    assert spills.spills(two.variants.attention, build=True) is False
    # the build is now cached: a later call's check needs no build (what front.api asks first)
    assert spills.checked(r, s, H200, build=False) == two


def test_an_unbuilt_kernel_counts_only_when_built():
    code = VariantCode(score_mod=f"score * {random.randint(1, 10 ** 9)}.f * 1e-9f")   # in no cache
    s = sig(code)
    r = decide.decide(s, H200)
    assert cache.get_cache().lookup(r.variants.attention) is None
    assert spills.spills(r.variants.attention, build=False) is None
    assert spills.checked(r, s, H200, build=False) is r
    assert cache.get_cache().lookup(r.variants.attention) is None      # nothing built


@pytest.mark.parametrize("kw", [dict(), dict(head_dim=128, head_dim_v=128, num_heads_q=32), dict(arch="sm_80")])
def test_other_calls_are_not_looked_up(kw, monkeypatch):
    """No variant, head dim 128 (no three-warpgroup tile) or the sm_80 path: the recipe as decided,
    the cache never read."""
    monkeypatch.setattr(cache, "get_cache", lambda: pytest.fail("the cache was read"))
    for code in ((T5,) if kw else (None,)):
        s = sig(code, **kw)
        r = decide.decide(s, H200)
        assert spills.checked(r, s, H200, build=True) is r


def test_the_catalog_lists_both_tiles_of_a_d64_variant():
    specs = catalog.warmup_specs("sm_90a", head_dims=(64,), dtypes=("bf16",), causals=(True,),
                                 layouts=("soa",), phases=("prefill",), gqas=(8,), paged=(False,),
                                 variants=(T5,))
    hopper = [s for s in specs if getattr(s, "kind", None) == "attention" and s.mainloop == "sm90a"]
    assert {s.tile.num_warps for s in hopper} == {8, 12}
    assert heuristics.SM90_THREE_WG_EXTRAS >= {"variant"}


def _new_t5() -> VariantCode:
    """A T5-bias snippet no cache holds (its clamp bound drawn at random): spills as T5 does."""
    n = random.randint(3000, 5000)
    return VariantCode(score_mod=(f"const int rel = clamp(kv_idx - (q_idx + kv_len - q_len), -{n}, {n});\n"
                                  f"return score + table[head * 32 + buckets[rel + {n}]];"),
                       tensors=(("table", "float32"), ("buckets", "int32")))


def test_a_known_kernel_is_not_looked_up_again(monkeypatch):
    s = sig(_new_t5())
    r = decide.decide(s, H200)
    assert spills.spills(r.variants.attention, build=True) is True
    monkeypatch.setattr(cache.KernelCache, "lookup", lambda *a: pytest.fail("looked up again"))
    monkeypatch.setattr(cache.KernelCache, "get", lambda *a: pytest.fail("built again"))
    assert spills.spills(r.variants.attention, build=False) is True
    assert warps(spills.checked(r, s, H200, build=False)) == 8


def test_without_jit_a_spilling_kernel_runs_when_its_twin_is_not_cached(monkeypatch):
    """KERNELGEN_DISABLE_JIT: the spilling three-warpgroup kernel is in the cache and its
    two-warpgroup twin is not: the call keeps the cached kernel (it runs, slower) instead of
    raising KernelNotCachedError for the twin; once the twin is cached, the twin."""
    s = sig(_new_t5())
    r = decide.decide(s, H200)
    cache.get_cache().get(r.variants.attention)             # (built by a run with JIT on)
    twin = spills.twin_recipe(r, s, H200)
    assert warps(twin) == 8 and cache.get_cache().lookup(twin.variants.attention) is None
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    assert spills.checked(r, s, H200, build=True) is r
    monkeypatch.delenv("KERNELGEN_DISABLE_JIT")
    cache.get_cache().get(twin.variants.attention)
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    assert spills.checked(r, s, H200, build=True) == twin


def test_the_twin_recipe():
    assert spills.twin_recipe(decide.decide(sig(None), H200), sig(None), H200) is None
    s = sig(ALIBI)
    r = decide.decide(s, H200)
    assert warps(spills.twin_recipe(r, s, H200)) == 8
    s128 = sig(ALIBI, head_dim=128, head_dim_v=128, num_heads_q=32)
    assert spills.twin_recipe(decide.decide(s128, H200), s128, H200) is None


#: A soft-cap snippet through the header's kg_tanh: with option "m" at head dim 256 its causal kernel
#: on paged K / V (128 x 64 tile) spills 4 bytes (NVRTC 13.0); tanhf's (SNIPPET_TANHF) does not.
KG_TANH = VariantCode(score_mod="30.f * kg_tanh(score * (1.f / 30.f))")
SNIPPET_TANHF = VariantCode(score_mod="50.f * tanhf(score / 50.f)")


def sig256(variant, **kw) -> decide.CallSignature:
    """gemma2-9b's heads (16 / 8, d 256), causal 1 x 16k on a paged cache of 16-token pages."""
    return sig(variant, **{**dict(head_dim=256, head_dim_v=256, num_heads_q=16, num_heads_kv=8, paged=True,
                                  page_size=16), **kw})


def test_a_d256_snippet_with_option_m_that_spills_takes_its_twin_without_it():
    """Head dim 256 has no three-warpgroup tile: the twin of a tanh snippet's "m" kernel is the same
    two-warpgroup tile without "m", and it builds without spills (NVRTC 13.0: 12 bytes and none, on
    contiguous K / V; on 16-token pages neither spills since the consumers of causal 16-bit d 256 read
    the tile index through the shared window); the tanhf snippet keeps "m"."""
    s = sig256(KG_TANH, paged=False, page_size=0)
    r = decide.decide(s, H200)
    a = r.variants.attention
    assert a.mainloop == "sm90a" and "m" in a.sm90_opts and warps(r) == 8 and spills.variant_with_twin(a)
    assert spills.spills(a, build=True) is True
    two = spills.checked(r, s, H200, build=True)
    assert two == decide.decide(dataclasses.replace(s, variant_spills=True), H200)
    assert "m" not in two.variants.attention.sm90_opts and warps(two) == 8
    assert dataclasses.replace(two.variants.attention, sm90_opts=a.sm90_opts) == a   # only "m" differs
    assert spills.spills(two.variants.attention, build=True) is False
    f = sig256(SNIPPET_TANHF)
    rf = decide.decide(f, H200)
    assert "m" in rf.variants.attention.sm90_opts and spills.checked(rf, f, H200, build=True) is rf


def test_a_twin_that_spills_as_much_is_not_taken(monkeypatch):
    """At head dim 256 the twin is the same two-warpgroup tile without "m": where it spills more
    (a tanh snippet with a modulo mask on gathered pages: "m" 4 / 4 bytes, the twin 48 / 80), the
    call keeps its "m" kernel; with the letters forced to hold "m" the twin is the recipe itself."""
    masked = VariantCode(score_mod="50.f * tanhf(score / 50.f)", mask_mod="kv_idx % 7 != 3")
    s = sig256(masked, mask="none", max_seqlen_q=200, rows=200, page_size=1, num_splits=1)
    r = decide.decide(s, H200)
    a = r.variants.attention
    assert "m" in a.sm90_opts and spills.spills(a, build=True) is True
    twin = spills.twin_recipe(r, s, H200)
    assert spills.spilled_bytes(twin.variants.attention, build=True) > spills.spilled_bytes(a, build=True)
    assert spills.checked(r, s, H200, build=True) is r
    monkeypatch.setattr(heuristics, "SM90_OPTS", "mpt")
    f = sig256(KG_TANH, paged=False, page_size=0)
    rf = decide.decide(f, H200)
    assert "m" in rf.variants.attention.sm90_opts and spills.spills(rf.variants.attention, build=True) is True
    assert spills.twin_recipe(rf, f, H200) == rf and spills.checked(rf, f, H200, build=True) is rf


def test_the_catalog_lists_the_twin_of_a_paged_d256_variant():
    """``kernelgen warmup --variant FILE`` on paged calls builds the twin of the TMA-box kernel with
    "m" too (the one ``test_a_d256_snippet_with_option_m_that_spills_takes_its_twin_without_it`` takes)."""
    specs = catalog.warmup_specs("sm_90a", head_dims=(256,), dtypes=("bf16",), causals=(True,), layouts=("soa",),
                                 gqas=(2,), paged=(True,), page_sizes=(16,), kv_heads=(8,), variants=(KG_TANH,))
    r = decide.decide(sig256(KG_TANH), H200)
    twin = decide.decide(dataclasses.replace(sig256(KG_TANH), variant_spills=True), H200)
    assert r.variants.attention in specs and twin.variants.attention in specs
    assert twin.variants.attention != r.variants.attention


def test_a_packed_variant_that_spills_takes_its_unpacked_twin():
    """Pack-GQA with a user variant (heuristics.SM90_VARIANT_PACK_AUTO): the windowed T5 bias at head
    dim 128, packed on the 128-row tile (8 query heads a KV head, short requests), spills 36-48 bytes
    (NVRTC 13.0: the packed rows' heads and positions) where the unpacked kernel does not, so the
    call takes its twin, unpacked; the ALiBi snippet's packed kernel fits and stays."""
    kw = dict(head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=1, mask="local", window_left=128,
              max_seqlen_q=300, max_seqlen_k=300, batch=4, rows=1200)
    s = sig(T5, **kw)
    r = decide.decide(s, H200)
    a = r.variants.attention
    assert a.mainloop == "sm90a" and a.pack_gqa and warps(r) == 8 and "m" not in a.sm90_opts, a.name
    assert spills.variant_with_twin(a) and spills.spills(a, build=True) is True
    assert spills.twin_recipe(r, s, H200) == r     # (level 1: the same two-warpgroup tile, packed)
    two = spills.checked(r, s, H200, build=True)
    assert two == decide.decide(dataclasses.replace(s, variant_spills=2), H200)
    b = two.variants.attention
    assert b.mainloop == "sm90a" and not b.pack_gqa and warps(two) == 8, b.name
    assert spills.spills(b, build=True) is False
    f = sig(ALIBI, **kw)
    rf = decide.decide(f, H200)
    assert rf.variants.attention.pack_gqa and spills.checked(rf, f, H200, build=True) is rf


@pytest.mark.parametrize("snippet", ["softcap", "index_arith"])
def test_a_packed_three_warpgroup_kernel_that_spills_keeps_packing_on_two(snippet):
    """A packed call whose three-warpgroup kernel spills (at head dim 64, three splits, GQA 16 / 4:
    the soft-cap example's ``kg_tanh`` 8 bytes with "m", ``index_arith`` 960, NVRTC 13.0) takes the
    first twin, the two-warpgroup tile still packed (it fits), not the unpacked one: the GPU run of
    the fifty-fifth session found the call unpacked there (``test_hopper_pack_gqa``)."""
    from kernelgen.apps import variant_examples as X
    import torch
    v = (X.softcap(30.0) if snippet == "softcap" else X.index_arith(torch.ones(16)))[0]
    qlens = [700, 300, 0, 451, 33]
    s = sig(v.code, num_heads_q=16, num_heads_kv=4, max_seqlen_q=700, max_seqlen_k=900, pack_gqa=True,
            num_splits=3, batch=5, rows=sum(qlens))
    r = decide.decide(s, H200)
    a = r.variants.attention
    assert a.pack_gqa and warps(r) == 12 and spills.spills(a, build=True) is True, a.name
    two = spills.checked(r, s, H200, build=True)
    b = two.variants.attention
    assert b.pack_gqa and b.split and warps(two) == 8 and "m" not in b.sm90_opts, b.name
    assert spills.spills(b, build=True) is False
    assert two == spills.twin_recipe(r, s, H200) == spills.twin_recipes(r, s, H200)[0]
    unpacked = spills.twin_recipe(r, s, H200, level=2)
    assert not unpacked.variants.attention.pack_gqa and spills.twin_recipes(r, s, H200) == [two, unpacked]


def _gqa_sig(variant, **kw) -> decide.CallSignature:
    """A packed causal bf16 varlen prefill at head dim 64 (5 requests, at most 700 / 900 tokens)."""
    return sig(variant, **{**dict(num_heads_q=15, num_heads_kv=5, max_seqlen_q=700, max_seqlen_k=900,
                                  pack_gqa=True, batch=5, rows=1534), **kw})


def test_a_pack_the_two_warpgroup_tile_cannot_hold_stays_on_the_hopper_kernel():
    """GQA 3 (SmolLM2-360M's 15 / 5 heads, head dim 64), pack_gqa=True: the 192-row three-warpgroup
    kernel packs (192 % 3 == 0) and ``index_arith`` spills there; the 128-row tile cannot pack 3
    query heads a KV head, so the first twin is the two-warpgroup Hopper kernel unpacked, not the
    sm_80 mainloop (a review found it there), equal to the second twin."""
    import torch
    from kernelgen.apps import variant_examples as X
    s = _gqa_sig(X.index_arith(torch.ones(15))[0].code, num_splits=3)
    r = decide.decide(s, H200)
    a = r.variants.attention
    assert a.mainloop == "sm90a" and a.pack_gqa and warps(r) == 12 and spills.spills(a, build=True) is True, a.name
    one, two = (spills.twin_recipe(r, s, H200, level=v) for v in (1, 2))
    assert one == two and one.variants.attention.mainloop == "sm90a" and not one.variants.attention.pack_gqa
    assert spills.checked(r, s, H200, build=True) == one and spills.twin_recipes(r, s, H200) == [one]


@pytest.mark.parametrize("heads", [(15, 5), (30, 5), (12, 1), (24, 2), (16, 2), (64, 8)])
def test_the_first_twin_never_leaves_the_hopper_kernel(heads):
    code = VariantCode(score_mod="score * 0.5f + 1.f")
    s = _gqa_sig(code, num_heads_q=heads[0], num_heads_kv=heads[1])
    r = decide.decide(s, H200)
    assert r.variants.attention.mainloop == "sm90a"
    t = spills.twin_recipe(r, s, H200, level=1)
    assert t is not None and t.variants.attention.mainloop == "sm90a", t.variants.attention.name


def test_without_jit_a_cached_second_twin_runs_when_the_first_is_not_cached(monkeypatch):
    """KERNELGEN_DISABLE_JIT: the spilling packed three-warpgroup kernel and the unpacked second twin
    are cached (a warmup of the fifty-fourth session's code, whose one twin was unpacked, made the
    same cache keys), the first twin is not: the call takes the second, not the spilling kernel."""
    code = VariantCode(score_mod="score * 0.25f + 2.f")
    s = _gqa_sig(code, num_heads_q=16, num_heads_kv=4, num_splits=3)
    r = decide.decide(s, H200)
    l1, l2 = (spills.twin_recipe(r, s, H200, level=v) for v in (1, 2))
    assert l1.variants.attention.pack_gqa and not l2.variants.attention.pack_gqa
    cached = {r.variants.attention, *l2.specs}
    monkeypatch.setattr(cache.KernelCache, "lookup", lambda self, spec: object() if spec in cached else None)
    root = str(cache.get_cache().root)
    monkeypatch.setitem(spills._KNOWN, (root, r.variants.attention), 8)
    monkeypatch.setitem(spills._KNOWN, (root, l2.variants.attention), 0)
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    assert spills.checked(r, s, H200, build=True) == l2
