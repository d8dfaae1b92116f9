"""The tiered first call of a new user variant (issue 25: a new variant's first call within 1 s).

A user variant's Hopper attention kernel (``AttentionSpec.mainloop == "sm90a"`` with a
``variant``: ``is_slow``) took 0.9-1.5 s of NVRTC on the H200 hosts, the same variant's
sm_80-mainloop kernel (mma.sync, which runs on an H200 too) about half of that: 0.47-0.52 s
(docs/dev/perf-log.md, "First call of a user variant": the sm_80 kernel first).

``provisional_recipe(recipe, call, device, ordinal)`` is asked by ``varlen_attention`` after the
decision of every call it validates.  When ``recipe`` holds a slow kernel and one of its kernels is
neither loaded (``jit.runtime``) nor in the disk cache (``KernelCache.lookup``), it starts
building the missing kernels in the background (``jit.background``: slow ones first; for a user
variant's three-warpgroup, option-"m" or packed kernel, which may spill, its twins after them:
``selection.spills.twin_recipes``) and returns
the recipe of the same call on the sm_80 mainloop (``quick_recipe``), which the caller builds on
its own thread, in parallel, and runs now.  The caller does not keep the prepared call of a
provisional recipe (``front.api``), so every call of the signature decides again: the sm_80 recipe
while the build runs (its kernels loaded by then: no second compile), the full recipe once the
build has finished (loaded from the cache's memory; that prepared call is kept as usual).

It returns None, and the call builds and runs ``recipe`` on its own thread as before, when:

- ``recipe`` has no slow kernel, or each of its slow kernels is loaded, in the disk cache or built
  (the other kernels it lacks, quick to build, are built on the caller's thread);
- ``allowed`` says no: ``KERNELGEN_TIERED_COMPILE`` is off, or the call's ``arch`` or
  ``KERNELGEN_ARCH`` forces a mainloop (honoured as asked);
- JIT is disabled (``KERNELGEN_DISABLE_JIT``: the call raises ``KernelNotCachedError`` naming
  the kernel);
- the current stream is capturing a CUDA graph (the graph must hold the kernels the signature
  keeps; a build in flight is then waited for, through the cache's per-key lock);
- a background build of one of its kernels failed (the call builds it again and raises the
  error, e.g. ``VariantCompileError``);
- the same call has no sm_80 recipe without a slow kernel.

The caller also falls back to ``recipe`` when the provisional recipe's own kernels fail to compile
(``front.api``: it then waits for the background build through the cache's per-key lock).

``is_slow``, ``slow_specs``, ``allowed`` and ``quick_recipe`` are pure (the decider's inputs only);
``provisional_recipe`` also reads the kernels' state and PyTorch's capture state, and starts builds.
"""
from __future__ import annotations

import dataclasses

import torch

from ..jit import background, cache, runtime
from . import decide, spills, validation
from .settings import Settings


def is_slow(spec) -> bool:
    """Whether ``spec`` is a user variant's Hopper attention kernel (the slow compile)."""
    return getattr(spec, "kind", None) == "attention" and spec.mainloop == "sm90a" and spec.variant is not None


def slow_specs(recipe) -> tuple:
    """The user-variant Hopper attention kernels of ``recipe`` (a ``kernels.recipe.Recipe``): the
    attention kernel of a single-class recipe or the long class's of a pair recipe, when it is one
    (the fused kernels take no variant); () for none."""
    return tuple(s for s in recipe.specs if is_slow(s))


def allowed(sig: decide.CallSignature, settings: Settings) -> bool:
    """Whether a call of ``sig`` may run a quicker recipe while its slow kernels build:
    ``KERNELGEN_TIERED_COMPILE`` is not off (``settings.tiered_compile``) and no mainloop is forced
    (the call's ``arch`` None or "auto", and ``KERNELGEN_ARCH`` unset or "auto").  Raises
    ValueError / TypeError for a malformed ``arch`` (as the decider does)."""
    return settings.tiered_compile and validation.arch(sig.arch, None, settings.arch) is None


def quick_recipe(sig: decide.CallSignature, device, settings: Settings = Settings()):
    """The recipe of the same call on the sm_80 mainloop (the decider's with ``arch="sm_80"``, what
    a call forcing it runs) on ``device`` (a ``kernels.device.Device``), or None when there is none
    without a slow kernel (the decider raises for it: ValueError or RuntimeError, or it still holds
    one)."""
    try:
        r = decide.decide(dataclasses.replace(sig, arch="sm_80"), device, settings)
    except (ValueError, RuntimeError):
        return None
    return None if slow_specs(r) else r


def provisional_recipe(recipe, call, device, ordinal: int):
    """The recipe to run now instead of ``recipe`` (a ``kernels.recipe.Recipe`` decided for the
    checked call ``call``, a ``selection.arguments.CheckedCall``, on ``device``, the
    ``kernels.device.Device`` of CUDA device ``ordinal``) while its missing kernels build in the
    background, or None to build and run ``recipe`` itself (see the module doc).  Starts the
    background builds it needs; loads nothing."""
    slow = slow_specs(recipe)
    if not slow or not allowed(call.signature, call.settings) or _capturing() or cache.jit_disabled():
        return None
    missing = []
    for spec in recipe.specs:
        if runtime.is_loaded(spec, ordinal):
            continue
        state = background.state(spec)
        if state == "failed":
            return None
        if state == "pending" or (state is None and cache.get_cache().lookup(spec) is None):
            missing.append(spec)
    if not any(is_slow(s) for s in missing):   # only quick kernels to build: build them now
        return None
    quick = quick_recipe(call.signature, device, call.settings)
    if quick is None:
        return None
    # a three-warpgroup / option-"m" / packed variant kernel may spill (selection.spills): its twins after it
    later = []
    for twin in spills.twin_recipes(recipe, call.signature, device, call.settings):
        later += [s for s in twin.specs if s not in missing and s not in recipe.specs and s not in later
                  and not runtime.is_loaded(s, ordinal) and background.state(s) is None
                  and cache.get_cache().lookup(s) is None]
    try:
        background.submit(sorted(missing, key=lambda s: s not in slow) + later)   # the slow kernels first
    except RuntimeError:   # the interpreter is shutting down: no new thread work
        return None
    return quick


def _capturing() -> bool:
    """Whether PyTorch's current stream is capturing a CUDA graph (True when that cannot be told)."""
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - no driver: stay on the synchronous path
        return True
