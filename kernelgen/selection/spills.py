"""A user variant's three-warpgroup, option-"m" or packed Hopper kernel, kept only where it builds without spills.

At head dim 64 the Hopper path runs a user variant (``kernelgen.Variant``) on the 192-row tile of
three consumer warpgroups (``heuristics.SM90_THREE_WG_EXTRAS``), whose consumers have 160
registers; a snippet that calls a MUFU function also gets option "m" there and at head dim 256
(``heuristics.with_mask_split``: the key block in a masked and an unmasked copy).  Most snippets fit
(the bench's ALiBi and soft-cap score_mods, four of the six examples of ``apps.variant_examples``),
some do not (the causal T5 bias spilled 68 bytes, ``index_arith`` 56-336, a ``kg_tanh`` soft-cap with
"m" 4-8, NVRTC 13.0), and only the build can tell.  ``checked`` reads the build's resources
(``jit.cache``: the kernel cache's entry, which records ptxas' spill counts) and, where that kernel
spilled, decides the call again with ``CallSignature.variant_spills`` (``TWIN_LEVELS``: first the
two-warpgroup tile, whose consumers have 240 registers, without "m" and still packed where the call
packs; where that one spills too and is packed, the same unpacked: a packed kernel's per-row heads
and positions made a windowed T5 bias spill 36-48 bytes at head dim 128), and takes a twin where it
spills less (at head dim 256 both kernels have two warpgroups, and some snippets spill more without "m").

The decider stays pure: this module is the one that reads the cache, as ``selection.tiered`` does.
``front.api`` asks it twice for a call it validates: before the tiered first call (``build=False``:
only kernels already built count, so a new variant's first call still runs its sm_80 kernel at
once while the Hopper kernel builds in the background; the call after that build finds its
resources) and, when the call builds and runs its recipe itself, again with ``build=True``, which
builds that kernel first if needed (the build the call would make anyway).
``AttentionPlan`` asks with ``build=True``.  ``selection.catalog`` lists both tiles of such calls,
so ``kernelgen warmup --variant FILE`` builds whichever the calls will run; the tiered first call's
background build makes the twins too (``twin_recipes``, ``selection.tiered``), the kernel with a twin
first, so that after ``kernelgen.wait_for_compiles()`` the call's next run finds the kernel it
keeps built either way.  With JIT off (``KERNELGEN_DISABLE_JIT``) a spilling kernel in the cache
whose two-warpgroup twin is not there still runs (slower, but what the cache has).  A kernel's
spills are remembered once known (``_KNOWN``), so a call's check renders no source twice.
"""
from __future__ import annotations

import dataclasses

from ..jit import cache
from . import decide, heuristics
from .settings import Settings

#: {(cache root, spec): spilled bytes} of the kernels whose build was looked up or made.
_KNOWN: dict = {}


def variant_with_twin(spec) -> bool:
    """Whether ``spec`` is a user variant's Hopper attention kernel on a three-warpgroup tile, with
    option "m" or packed (pack-GQA: some snippets' packed two-warpgroup kernels spill where the
    unpacked ones do not, a review's survey): one whose call has twin recipes (``variant_spills``
    1: two warpgroups, no "m", packed where the call packs; 2: the same unpacked) for when it spills."""
    return (getattr(spec, "kind", None) == "attention" and spec.mainloop == "sm90a" and spec.variant is not None
            and (spec.tile.num_warps == 12 or "m" in spec.sm90_opts or spec.pack_gqa))


def spilled_bytes(spec, build: bool) -> int | None:
    """ptxas' spill stores plus spill loads of ``spec``'s kernel, in bytes, or None when it is not
    built and ``build`` is False.  With ``build`` the kernel is built (and cached) if needed: raises
    as ``KernelCache.get`` does (``compiler.VariantCompileError``, ``KernelNotCachedError``)."""
    c = cache.get_cache()
    key = (str(c.root), spec)
    known = _KNOWN.get(key)
    if known is not None:
        return known
    entry = c.get(spec) if build else c.lookup(spec)
    if entry is None:
        return None
    r = entry.resources
    _KNOWN[key] = out = int(r.get("spill_stores") or 0) + int(r.get("spill_loads") or 0)
    return out


def spills(spec, build: bool) -> bool | None:
    """Whether ``spec``'s kernel spills registers (``spilled_bytes`` above 0), or None when it is not
    built and ``build`` is False; raises as ``spilled_bytes`` does."""
    n = spilled_bytes(spec, build)
    return None if n is None else n > 0


#: The twins' levels (``heuristics.VARIANT_TWIN_LEVELS``).
TWIN_LEVELS = heuristics.VARIANT_TWIN_LEVELS


def twin_recipe(recipe, sig: decide.CallSignature, device, settings: Settings = Settings(), level: int = 1):
    """The call's recipe at twin level ``level`` (``sig`` with ``variant_spills=level``,
    ``TWIN_LEVELS``) when ``recipe`` holds a user variant's three-warpgroup, option-"m" or packed
    kernel (``variant_with_twin``), else None."""
    if sig.variant is None or sig.variant_spills or not any(variant_with_twin(s) for s in recipe.specs):
        return None
    return decide.decide(dataclasses.replace(sig, variant_spills=level), device, settings)


def twin_recipes(recipe, sig: decide.CallSignature, device, settings: Settings = Settings()) -> list:
    """The distinct twin recipes of ``recipe`` (``twin_recipe`` at each of ``TWIN_LEVELS``, none
    equal to ``recipe`` or to an earlier one): what the tiered first call builds in the background."""
    out = []
    for level in TWIN_LEVELS:
        t = twin_recipe(recipe, sig, device, settings, level)
        if t is None:
            break
        if t != recipe and t not in out:
            out.append(t)
        if not any(getattr(s, "pack_gqa", False) for s in t.specs if variant_with_twin(s)):
            break   # (nothing packed left: the next level is this one)
    return out


def _twin_spills_less(recipe, two, build: bool) -> bool:
    """Whether the twin's own variant kernels (``two``'s, not in ``recipe``) spill fewer bytes than
    ``recipe``'s kernels with a twin; without ``build`` only spills already known count (no cache
    lookup on the call path), and a twin kernel whose spills are not known counts as none.
    At head dim 256 both are two-warpgroup kernels, and without "m" some snippets spill more (a
    review found 62 of 158 such twins spilling as much or more, NVRTC 13.0); the same recipe (the
    letters forced with "m", ``KERNELGEN_SM90_OPTS``) is no improvement."""
    own = [s for s in two.specs if s not in recipe.specs and getattr(s, "kind", None) == "attention"]
    if not own:
        return False
    root = str(cache.get_cache().root)
    counts = [spilled_bytes(s, True) if build else _KNOWN.get((root, s)) for s in own]
    if any(n is None for n in counts):
        return True
    return sum(counts) < sum(spilled_bytes(s, build) or 0 for s in recipe.specs if variant_with_twin(s))


def _spills_with_twin(recipe, build: bool) -> bool:
    """Whether one of ``recipe``'s kernels has twins (``variant_with_twin``) and spills (``spills``)."""
    for spec in recipe.specs:
        if variant_with_twin(spec) and spills(spec, build):
            return True
    return False


def checked(recipe, sig: decide.CallSignature, device, settings: Settings = Settings(), *, build: bool):
    """``recipe`` (``decide.decide(sig, device, settings)``), or a twin of it (``twin_recipe``) when
    one of its kernels is a user variant's three-warpgroup, option-"m" or packed kernel that spills
    (``spills``; a kernel not built yet counts only with ``build``): the levels in turn, the two-warpgroup
    tile without "m" (packed where the call packs) and then the same unpacked, each taken where it
    spills less than the recipe held so far (``_twin_spills_less``; without ``build`` a twin whose
    spills are not known is taken, so a caller that then builds checks the decided recipe again with
    ``build``, as ``front.api`` and ``AttentionPlan`` do), and the next level tried only while the
    recipe held still has such a kernel that spills.  With JIT off a twin whose kernels are not all
    in the cache is passed over (the recipe held, or the next level's twin, runs)."""
    if sig.variant is None or sig.variant_spills:
        return recipe
    held = recipe
    for level in TWIN_LEVELS:
        if not _spills_with_twin(held, build):
            return held
        two = twin_recipe(recipe, sig, device, settings, level)
        if two is None or two == held:
            continue
        if cache.jit_disabled() and any(cache.get_cache().lookup(s) is None
                                        for s in two.specs if s not in held.specs):
            continue   # (not cached: the next level's may be)
        if _twin_spills_less(held, two, build):
            held = two
    return held
