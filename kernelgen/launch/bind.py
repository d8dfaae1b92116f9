"""A recipe's loaded kernels bound into what the launch layer runs.

``bind(recipe, kernels)`` takes a ``kernels.recipe.Recipe`` and its kernels as the JIT layer loaded
them (``jit.runtime.load(recipe.specs, device)``, same order) and returns the recipe kind's
bound kernels, with each request class's scheduler configuration completed by the persistent
grid of the kernel it feeds (``SchedulerPlan.config``): ``prepared.SingleKernels``,
``fused.FusedKernels`` or ``fused.PairKernels``.  Each has ``prepare(...)`` (the prepared launches
of one call signature) and is what ``oneoff.schedule`` / ``oneoff.attend`` launch.
"""
from __future__ import annotations

from . import fused, prepared


def bind(recipe, kernels: tuple):
    """The bound kernels of ``recipe`` (see the module doc).  Raises ValueError when ``kernels``
    are not the recipe's specs, in order."""
    if tuple(k.spec for k in kernels) != recipe.specs:
        raise ValueError(f"kernels {[k.spec.name for k in kernels]} are not the recipe's "
                         f"{[s.name for s in recipe.specs]}")
    combine = kernels[-1] if recipe.combine is not None else None
    if recipe.kind == "single":
        sched, attn = kernels[:2]
        (plan,) = recipe.schedulers
        return prepared.SingleKernels(recipe.variants, sched, attn, combine, plan.config(attn.persistent_grid))
    long, short = recipe.schedulers
    if recipe.kind == "fused":
        sched, kernel = kernels[:2]
        return fused.FusedKernels(recipe.variants, sched, kernel, combine, long.config(kernel.persistent_grid),
                                  short.config(kernel.persistent_grid), recipe.short_ctas)
    sched, attn_long, attn_short = kernels[:3]
    return fused.PairKernels(recipe.variants, sched, attn_long, attn_short, combine,
                             long.config(attn_long.persistent_grid), short.config(attn_short.persistent_grid))
