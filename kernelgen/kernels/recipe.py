"""Launch recipes: everything a call launches, named before any kernel is loaded.

The decider (``selection.decide``) makes a ``Recipe`` from a call's signature and a ``Device``;
the JIT layer loads its ``specs``; the launch layer binds the loaded kernels to it and prepares
the launches.  A recipe is one of three kinds:

- ``single``: the scheduler, the attention kernel (sm_80 or Hopper mainloop) and, with split-KV,
  the combine kernel (``Variants``);
- ``fused``: a batch mixing long- and short-query requests in one persistent kernel: the
  scheduler once per request class, the fused kernel, the combine (``FusedVariants``);
- ``pair``: such a batch on sm_90a where the Hopper fused kernel does not apply: the scheduler
  per class, the long class's Hopper kernel, the short class's decode kernel, the combine
  (``PairVariants``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only: choosing kernels needs neither numpy nor torch
    from .metadata import SchedulerConfig
    from .spec import AttentionSpec, CombineSpec, FusedAttentionSpec, SchedulerSpec
    from .workspace import FusedWorkspace, WorkspaceLayout

KINDS = ("single", "fused", "pair")
#: Grid rules of a launch: one CTA; the kernel's persistent grid (CTAs per SM from the occupancy
#: calculator once loaded, times the SMs); one CTA per ``CombineSpec.rows_per_cta`` (token, head)
#: rows of the call (``kernel_args.combine_grid``).
GRIDS = ("one", "persistent", "rows")


@dataclass(frozen=True)
class Variants:
    """The kernels of one call: scheduler, attention and (with split-KV) combine, plus the split
    bound the scheduler receives."""

    scheduler: SchedulerSpec
    attention: AttentionSpec
    combine: CombineSpec | None
    max_splits: int
    forced_splits: bool


@dataclass(frozen=True)
class FusedVariants:
    """The kernels of a fused mixed-batch call: one scheduler spec (launched once per request
    class), the fused attention kernel, the combine kernel when the short class splits KV, the
    short class's split bound and the class threshold (query tokens)."""

    scheduler: SchedulerSpec
    fused: FusedAttentionSpec
    combine: CombineSpec | None
    short_max_splits: int
    short_forced_splits: bool
    short_max_q: int


@dataclass(frozen=True)
class PairVariants:
    """The kernels of a mixed batch on sm_90a run as the two classes in turn: the long class's
    Hopper variants (no split; records row_splits when the short class splits) and the short
    class's sm_80 decode variants (pack-GQA, the automatic split bound, combine), with the class
    threshold."""

    long: Variants
    short: Variants
    short_max_q: int


@dataclass(frozen=True)
class SchedulerPlan:
    """One scheduler launch's configuration before its attention kernel is loaded.

    ``base`` holds every field but the two CTA counts that follow the persistent grid of the
    attention kernel the scheduler feeds (known once that kernel is loaded): ``config(grid)``
    sets ``num_ctas`` to ``grid * ctas_per_grid`` (the dynamic split's fair share divides by it)
    and ``wave_ctas`` to ``grid`` when ``wave`` (a decode-class kernel launched on its own), else 0.
    """

    base: SchedulerConfig
    ctas_per_grid: int = 1
    wave: bool = False

    def config(self, grid: int) -> SchedulerConfig:
        """The ``metadata.SchedulerConfig`` for an attention kernel of ``grid`` persistent CTAs."""
        return dataclasses.replace(self.base, num_ctas=grid * self.ctas_per_grid, wave_ctas=grid if self.wave else 0)


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a recipe: its spec, what it does (``role``) and its grid rule (``GRIDS``)."""

    role: str
    spec: object
    grid: str


@dataclass(frozen=True)
class Recipe:
    """Every kernel spec, scheduler configuration and workspace layout of one call signature.

    ``kind``: one of ``KINDS`` (see the module doc); ``variants``: the kind's variants;
    ``schedulers``: one ``SchedulerPlan`` for ``single``, (long class, short class) otherwise;
    ``workspace``: the byte layout of the call's one workspace (a ``WorkspaceLayout``, or a
    ``FusedWorkspace`` for the two-class kinds); ``short_ctas``: the Hopper fused kernel's CTAs that
    start on the short queue (0 otherwise).
    """

    kind: str
    variants: Variants | FusedVariants | PairVariants
    schedulers: tuple
    workspace: WorkspaceLayout | FusedWorkspace
    short_ctas: int = 0

    def __post_init__(self):
        want = {"single": Variants, "fused": FusedVariants, "pair": PairVariants}.get(self.kind)
        if want is None or not isinstance(self.variants, want):
            raise ValueError(f"a {self.kind!r} recipe takes {want.__name__ if want else KINDS}, "
                             f"got {type(self.variants).__name__}")
        if len(self.schedulers) != (1 if self.kind == "single" else 2):
            raise ValueError(f"a {self.kind!r} recipe has {1 if self.kind == 'single' else 2} scheduler plans, "
                             f"got {len(self.schedulers)}")

    @property
    def specs(self) -> tuple:
        """The kernels to load, in the order the launch layer binds them (``launch.bind``):
        scheduler, attention kernel(s), combine (when present)."""
        v = self.variants
        if self.kind == "single":
            specs = (v.scheduler, v.attention, v.combine)
        elif self.kind == "fused":
            specs = (v.scheduler, v.fused, v.combine)
        else:
            specs = (v.short.scheduler, v.long.attention, v.short.attention, v.short.combine)
        return tuple(s for s in specs if s is not None)

    @property
    def sinks_fused(self) -> bool:
        """The kernels apply the attention sinks (a single-class recipe of sink variants,
        ``AttentionSpec.sinks``); else ``launch.sinks.apply`` rescales after them."""
        return self.kind == "single" and getattr(self.variants.attention, "sinks", False)

    @property
    def combine(self) -> CombineSpec | None:
        v = self.variants
        return v.short.combine if self.kind == "pair" else v.combine

    @property
    def launches(self) -> tuple:
        """The launches of one call, in order (``Launch``: role, spec, grid rule)."""
        v = self.variants
        if self.kind == "single":
            out = [Launch("scheduler", v.scheduler, "one"), Launch("attention", v.attention, "persistent")]
        elif self.kind == "fused":
            out = [Launch("scheduler long", v.scheduler, "one"), Launch("scheduler short", v.scheduler, "one"),
                   Launch("fused attention", v.fused, "persistent")]
        else:
            out = [Launch("scheduler long", v.short.scheduler, "one"),
                   Launch("scheduler short", v.short.scheduler, "one"),
                   Launch("attention long", v.long.attention, "persistent"),
                   Launch("attention short", v.short.attention, "persistent")]
        if self.combine is not None:
            out.append(Launch("combine", self.combine, "rows"))
        return tuple(out)
