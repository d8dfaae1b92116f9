"""The one decider: a call's signature and a ``Device`` in, a launch ``Recipe`` out.

``decide`` is the only place that picks the kind of launch (one attention kernel, the fused
mixed-batch kernel, or the two classes in turn), the mainloop (sm_80 or Hopper) and, through
``heuristics``, every variant, tile, split bound and scheduler setting.  It is pure: it reads no
device, no environment (overrides come in as ``Settings``) and loads nothing, so a recipe can be
computed and tested on a CPU for any described device.  ``varlen_attention`` and
``AttentionPlan`` both call it; ``kernelgen warmup`` enumerates the same ``heuristics`` choices
(``selection.catalog``).

The order of the rules:

1. ``arch`` (the call's argument, else ``KERNELGEN_ARCH``) resolved against the device: "sm_90a"
   forces the Hopper kernel (ValueError where it cannot run the call), "sm_80" the sm_80 ones;
2. a one-shot paged call whose requests average at least ``heuristics.SM90_PAGED_MIN_MEAN_Q``
   query tokens (chunked prefill) takes the Hopper kernel where it runs the call;
3. a batch that may mix long- and short-query requests (``use_fused``) takes, without a forced
   mainloop and where the Hopper kernel runs its long class (``heuristics.choose_pair``), the
   Hopper fused kernel (``heuristics.choose_fused_hopper``), or where that does not fit the two
   classes in turn; otherwise (or with arch="sm_80") the sm_80 fused kernel
   (``heuristics.choose_fused``) where it applies; the same with an FP8 cache (the variants'
   ``kv_dtype``; ``KERNELGEN_FP8_FUSED=0``: no fused kernel, on sm_90a the classes in turn), but
   one class with an FP8 q, unless kernelgen quantised it from a 16-bit q (``quantize_q``,
   ``CallSignature.quantized_q``): then the Hopper fused kernel whose long class runs the FP8
   tensor-core variant, where it applies, else one class;
4. everything else: ``heuristics.choose``'s scheduler, attention and combine kernels.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..kernels.device import Device
from ..kernels.metadata import SchedulerConfig
from ..kernels.recipe import FusedVariants, PairVariants, Recipe, SchedulerPlan, Variants
from ..kernels.spec import FusedAttentionSpec
from ..kernels.variant_code import VariantCode
from ..kernels.workspace import WorkspaceLayout, short_class_workspace
from . import heuristics, validation
from .settings import Settings

#: class_max_q of the long request class: no upper bound.
_NO_LIMIT = 2 ** 31 - 1


@dataclass(frozen=True)
class CallSignature:
    """What the choice of kernels depends on, for one call signature or one plan.

    dtype: "fp16" or "bf16"; head_dim, head_dim_v; num_heads_q, num_heads_kv; mask: "none",
    "causal" or "local", with ``window_left`` its left window in tokens (-1: none); layout: the
    metadata layout, "soa" or "aos"; max_seqlen_q, max_seqlen_k: the length hints in tokens;
    paged, page_size (tokens a page, 0 = unknown or packed K/V); softcap: logit capping on;
    pack_gqa: None (heuristic) or forced; num_splits: 0 (automatic) or forced; short_query_tokens:
    the fused launch's class threshold (None automatic, 0 off); arch: the call's ``arch``
    argument (None: ``KERNELGEN_ARCH``, through ``Settings``); tma_ok: q/k/v strides TMA can
    address; batch: the requests (a plan: its capacity); rows: the query tokens (a plan: its
    ``max_total_q``), which size the workspace; sort, head_swizzle: scheduler switches; plan:
    the batch and rows are capacities, not one call's lengths (the mean query length is then
    unknown and rule 2 of the module doc does not apply).
    """

    dtype: str
    head_dim: int
    head_dim_v: int
    num_heads_q: int
    num_heads_kv: int
    mask: str
    window_left: int
    layout: str
    max_seqlen_q: int
    max_seqlen_k: int
    paged: bool
    page_size: int
    softcap: bool
    pack_gqa: bool | None
    num_splits: int
    short_query_tokens: int | None
    arch: str | None
    tma_ok: bool
    batch: int
    rows: int
    sort: bool = True
    head_swizzle: bool = True
    plan: bool = False
    #: ALiBi biases (``alibi_slopes``): ALiBi attention variants; a mixed batch then runs its
    #: classes in turn on sm_90a (``heuristics.choose_pair``) or as one class elsewhere (the fused
    #: kernels take no ALiBi variant).
    alibi: bool = False
    #: attention sinks (``sinks=``): a single-class recipe gets the sink variants
    #: (``AttentionSpec.sinks``, ``CombineSpec.sinks``: the kernels apply them, ``Recipe.sinks_fused``);
    #: (calls with ``sinks=``, plans made with ``sinks=True``);
    #: the mixed-batch kinds (fused kernel, classes in turn) keep the plain kernels and
    #: ``launch.sinks.apply`` after them.  The choice of tiles and splits is that of the call without sinks.
    sinks: bool = False
    #: a user attention variant's code (``kernelgen.Variant``, ``kernels.variant_code.VariantCode``):
    #: its attention variants (``AttentionSpec.variant``); a mixed batch then runs its classes in
    #: turn on sm_90a or as one class elsewhere, as with ALiBi (the fused kernels take no variant).
    variant: VariantCode | None = None
    #: FP8 K/V cache ("e4m3" or "e5m2"; "" = k/v in ``dtype``): FP8 variants
    #: (``AttentionSpec.kv_dtype``: converted to ``dtype`` exactly, ``k_descale`` / ``v_descale``
    #: applied) of the Hopper kernel where it takes the call (``heuristics.choose``), else of the
    #: sm_80 mainloop; a mixed batch takes the fused kernels' (or on sm_90a the classes in turn)
    #: FP8 variants as a 16-bit one takes theirs (no ALiBi or user variant there; an FP8 q: one class).
    kv_dtype: str = ""
    #: FP8 q ("e4m3"; "" = q in ``dtype``, which is then the output's): the Hopper kernel's FP8
    #: tensor-core variant where it takes the call (``AttentionSpec.fp8_mma``), else the kernels of
    #: the call with q converted to ``dtype`` (``heuristics.choose``).
    q_dtype: str = ""
    #: the user variant's three-warpgroup, option-"m" or packed Hopper kernel spilled when it was built
    #: (``selection.spills``): 1 (or True), the same call on the two-warpgroup tile without "m"; 2, the
    #: same unpacked too (``spills.TWIN_LEVELS``); 0 (False), the call as decided.
    variant_spills: int = 0
    #: a local mask's right window in tokens (-1: unbounded; 0 with causal), beside ``window_left``:
    #: with both bounded, a query tile sees at most ``window_span`` + its tokens keys.
    window_right: int = -1
    #: a cap on the automatic split count (0: none; ``validation.max_num_splits``): every class's
    #: automatic bound becomes min(its bound, the cap) (``heuristics.capped_splits``, through
    #: ``choose`` and the mixed-batch choosers' short class; 1: unsplit); a forced ``num_splits``
    #: excludes it.
    max_num_splits: int = 0
    #: q (``q_dtype`` "e4m3") is kernelgen's own e4m3 copy of the call's 16-bit q (``quantize_q``),
    #: which the call keeps: a mixed batch may then take the Hopper fused kernel whose long class
    #: runs the FP8 tensor-core variant on the e4m3 copy and whose short class reads the 16-bit q
    #: (``heuristics.choose_fused_hopper``'s ``q_dtype``).
    quantized_q: bool = False


def window_span(sig: CallSignature) -> int:
    """left + right of a sliding window bounded on both sides (``mask`` "local", ``window_left``
    and ``window_right`` >= 0; causal counts as right 0), -1 otherwise: a query tile of q tokens
    then sees at most span + q keys (``heuristics.choose``'s ``window_span``)."""
    if sig.mask != "local" or sig.window_left < 0 or sig.window_right < 0:
        return -1
    return sig.window_left + sig.window_right


def decide(sig: CallSignature, device: Device, settings: Settings = Settings()) -> Recipe:
    """The launch recipe of a call signature on a device (see the module doc for the rules).

    Raises:
        ValueError: ``arch`` (or ``KERNELGEN_ARCH``) asks for the Hopper kernel on another device
            or for a call it cannot run, or with a fused launch; a variant does not fit the arch's
            shared memory; an override in ``settings`` is malformed (the message names it).
        RuntimeError: the device's compute capability has no kernels (or untested ones, Blackwell,
            without ``settings.allow_untested_arch``).
    """
    arch = device.compile_arch(settings.allow_untested_arch)
    mainloop = validation.arch(sig.arch, arch, settings.arch)
    kv = sig.kv_dtype
    if kv and sig.short_query_tokens:
        raise ValueError("short_query_tokens >= 1 forces a fused launch; an FP8 K/V cache takes one only with the "
                         "automatic threshold: leave it None (or 0 for none)")
    if mainloop == "sm90a":
        if sig.short_query_tokens:
            raise ValueError("arch='sm_90a' runs no fused mixed-batch launch: leave short_query_tokens None or 0")
        return recipe(_choose(sig, arch, device, settings, "sm90a"), sig, device, settings)
    if (not sig.plan and mainloop is None and sig.short_query_tokens is None
            and heuristics.paged_prefers_hopper(sig.paged, sig.rows, sig.batch)):
        v = _choose(sig, arch, device, settings, None)
        if v.attention.mainloop == "sm90a":
            return recipe(v, sig, device, settings)
    # an FP8 q: one class (its FP8 tensor-core variant reads q as it is; the mixed-batch kernels would
    # take q converted, and the classes of one launch one q: not built), but for a q that kernelgen
    # quantised from a 16-bit q it keeps (quantize_q): the Hopper fused kernel on both (below)
    thr = 0 if sig.q_dtype and not sig.quantized_q else use_fused(sig)
    if thr and (sig.alibi or sig.variant is not None):
        if mainloop is None and not kv:   # (an FP8 cache with ALiBi or a variant: one class)
            pv = heuristics.choose_pair(
                arch, sig.dtype, sig.head_dim, sig.head_dim_v, num_heads_q=sig.num_heads_q,
                num_heads_kv=sig.num_heads_kv, mask=sig.mask, layout=sig.layout, max_seqlen_q=sig.max_seqlen_q,
                max_seqlen_k=sig.max_seqlen_k, paged=sig.paged, softcap=sig.softcap, short_max_q=thr,
                num_sms=device.num_sms, page_size=sig.page_size, tma_ok=sig.tma_ok, sm90_opts=settings.sm90_opts,
                alibi=sig.alibi, variant=sig.variant, variant_spills=sig.variant_spills,
                window_span=window_span(sig), max_num_splits=sig.max_num_splits)
            if pv is not None:
                return recipe(pv, sig, device, settings)
        thr = 0
    if thr:
        fused = not kv or settings.fp8_fused   # (KERNELGEN_FP8_FUSED=0: an FP8 batch takes no fused kernel)
        extra = {"kv_dtype": kv} if kv else {}
        if mainloop is None:
            kw = dict(num_heads_q=sig.num_heads_q, num_heads_kv=sig.num_heads_kv, mask=sig.mask, layout=sig.layout,
                      max_seqlen_q=sig.max_seqlen_q, max_seqlen_k=sig.max_seqlen_k, paged=sig.paged,
                      softcap=sig.softcap, short_max_q=thr, num_sms=device.num_sms, page_size=sig.page_size,
                      tma_ok=sig.tma_ok, sm90_opts=settings.sm90_opts, **extra)
            kw["window_span"] = window_span(sig)
            kw["max_num_splits"] = sig.max_num_splits
            # the Hopper fused kernel is built from the classes-in-turn variants, where they apply
            rows = settings.sm90_short_rows() if sig.head_dim_v <= FusedAttentionSpec.SM90_FUSED_MAX_DV else None
            if sig.q_dtype:   # (a quantised q: the fused kernel with the FP8 tensor-core long variant, else one class)
                fv = heuristics.choose_fused_hopper(arch, sig.dtype, sig.head_dim, sig.head_dim_v, **kw,
                                                    short_rows=rows, q_dtype=sig.q_dtype) if fused else None
                if fv is not None:
                    return recipe(fv, sig, device, settings)
                return recipe(_choose(sig, arch, device, settings, mainloop), sig, device, settings)
            pv = heuristics.choose_pair(arch, sig.dtype, sig.head_dim, sig.head_dim_v, **kw)
            if pv is not None:
                fv = heuristics.choose_fused_hopper(arch, sig.dtype, sig.head_dim, sig.head_dim_v, **kw,
                                                    short_rows=rows) if fused else None
                return recipe(pv if fv is None else fv, sig, device, settings)
        if sig.q_dtype:   # (no fused kernel reads a quantised q off the Hopper path: one class)
            return recipe(_choose(sig, arch, device, settings, mainloop), sig, device, settings)
        fv = heuristics.choose_fused(arch, sig.dtype, sig.head_dim, sig.head_dim_v, num_heads_q=sig.num_heads_q,
                                     num_heads_kv=sig.num_heads_kv, mask=sig.mask, layout=sig.layout,
                                     max_seqlen_k=sig.max_seqlen_k, paged=sig.paged, softcap=sig.softcap,
                                     short_max_q=thr, num_sms=device.num_sms, max_num_splits=sig.max_num_splits,
                                     **extra) if fused else None
        if fv is not None:
            return recipe(fv, sig, device, settings)
    return recipe(_choose(sig, arch, device, settings, mainloop), sig, device, settings)


def kernel_q_dtype(recipe, q_dtype: str, dtype):
    """The torch dtype an FP8 q (``q_dtype`` "e4m3") is converted to before the kernels of
    ``recipe`` run: ``dtype`` (the output's) for every kernel but the Hopper FP8 tensor-core
    variant (``AttentionSpec.fp8_mma``), which reads q as it is (None); None for a 16-bit q.
    The conversion is exact (every e4m3 value is a bf16 and an fp16 value)."""
    if not q_dtype:
        return None
    attn = getattr(recipe.variants, "attention", None)
    fused = getattr(recipe.variants, "fused", None)
    if fused is not None and fused.long.fp8_mma:   # (its short class reads the call's 16-bit q: quantize_q)
        return None
    return None if attn is not None and attn.fp8_mma else dtype


def mean_q(sig: CallSignature) -> int:
    """The query tokens a request of one call (``rows // batch``), 0 for a plan (its batch and rows
    are capacities) or an empty call: ``heuristics.sm90_pack_auto``'s input."""
    return 0 if sig.plan or sig.batch < 1 else sig.rows // sig.batch


def _choose(sig: CallSignature, arch: str, device: Device, settings: Settings, mainloop) -> Variants:
    return heuristics.choose(
        arch, sig.dtype, sig.head_dim, sig.head_dim_v, num_heads_q=sig.num_heads_q, num_heads_kv=sig.num_heads_kv,
        mask=sig.mask, layout=sig.layout, max_seqlen_q=sig.max_seqlen_q, max_seqlen_k=sig.max_seqlen_k,
        paged=sig.paged, softcap=sig.softcap, pack_gqa=sig.pack_gqa, num_splits=sig.num_splits,
        num_sms=device.num_sms, mainloop=mainloop, tma_ok=sig.tma_ok, page_size=sig.page_size,
        sm90_opts=settings.sm90_opts, alibi=sig.alibi, variant=sig.variant, kv_dtype=sig.kv_dtype,
        q_dtype=sig.q_dtype, total_q=sig.rows, variant_spills=sig.variant_spills, window_span=window_span(sig),
        combine_rows=0 if sig.plan else sig.rows, sm90_pack=settings.sm90_pack_gqa, mean_q=mean_q(sig),
        max_num_splits=sig.max_num_splits)


def use_fused(sig: CallSignature) -> int:
    """The class threshold (query tokens) of a fused launch for a call, or 0 for none.

    ``short_query_tokens`` None (automatic): fused for a paged cache with more than one request
    whose ``max_seqlen_q`` exceeds the default threshold (``heuristics.short_query_tokens``) and
    no forced ``pack_gqa`` or ``num_splits``; an int >= 1: fused with that threshold whenever
    some request may exceed it; 0: never.
    """
    sqt = sig.short_query_tokens
    if sqt == 0:
        return 0
    auto = sqt is None
    thr = heuristics.short_query_tokens(sig.num_heads_q, sig.num_heads_kv) if auto else int(sqt)
    if auto and (not sig.paged or sig.pack_gqa is not None or sig.num_splits != 0):
        return 0
    if sig.batch < 2 or sig.max_seqlen_q <= thr:
        return 0
    return thr


def recipe(variants, sig: CallSignature, device: Device, settings: Settings = Settings()) -> Recipe:
    """The recipe that launches ``variants`` (``Variants``, ``FusedVariants`` or ``PairVariants``)
    for a call signature on a device: the scheduler plans of each request class and the workspace
    (sized by ``sig.batch`` requests and ``sig.rows`` query tokens)."""
    hq, dv = sig.num_heads_q, sig.head_dim_v
    if sig.kv_dtype and any(a.kv_dtype != sig.kv_dtype for a in _fp8_attention(variants)):
        raise ValueError(f"an FP8 K/V cache ({sig.kv_dtype}) runs its FP8 variants (one class, or the classes in "
                         f"turn on sm_90a), got {variants!r}")
    if sig.sinks and isinstance(variants, Variants):
        variants = dataclasses.replace(
            variants, attention=dataclasses.replace(variants.attention, sinks=True),
            combine=None if variants.combine is None else dataclasses.replace(variants.combine, sinks=True))
    common = dict(device=device, num_heads_q=hq, num_heads_kv=sig.num_heads_kv, sort=sig.sort,
                  head_swizzle=sig.head_swizzle, window_left=sig.window_left)
    if isinstance(variants, Variants):
        plan = scheduler_plan(variants.attention, **common, max_splits=variants.max_splits,
                              forced_splits=variants.forced_splits)
        ws = WorkspaceLayout(sig.batch, variants.combine is not None, variants.max_splits, hq, sig.rows, dv)
        return Recipe("single", variants, (plan,), ws)
    thr = variants.short_max_q
    if isinstance(variants, FusedVariants):
        f = variants.fused
        long = scheduler_plan(f.long, **common, standalone=False)
        short = scheduler_plan(f.short, **common, max_splits=variants.short_max_splits,
                               forced_splits=variants.short_forced_splits, standalone=False)
        # the short tiles of a fused CTA run side by side in its warps: as many shares as a decode launch's
        short = dataclasses.replace(short, ctas_per_grid=f.tiles_per_step * heuristics.SPLIT_GRANULARITY["decode"])
        split, max_splits = variants.combine is not None, variants.short_max_splits
        # (the FP8 share was measured with the keys-as-rows decode tile: the 16-row one keeps the 16-bit share)
        short_ctas = heuristics.sm90_mixed_short_ctas(device.num_sms, settings.mixed_short_ctas(device.num_sms),
                                                      fp8=bool(f.short.kv_dtype) and f.short.tile.keys_as_rows,
                                                      fp8_mma=f.long.fp8_mma and f.short.tile.keys_as_rows) \
            if f.hopper else 0
        kind = "fused"
    elif isinstance(variants, PairVariants):
        lv, sv = variants.long, variants.short
        long = scheduler_plan(lv.attention, **common, max_splits=1, forced_splits=True)
        short = scheduler_plan(sv.attention, **common, max_splits=sv.max_splits, forced_splits=sv.forced_splits)
        split, max_splits, short_ctas, kind = sv.combine is not None, sv.max_splits, 0, "pair"
    else:
        raise TypeError(f"recipe takes Variants, FusedVariants or PairVariants, got {type(variants).__name__}")
    long = _with_class(long, thr + 1, _NO_LIMIT)
    short = _with_class(short, 0, thr)
    ws = short_class_workspace(sig.batch, sig.rows, split, max_splits, hq, dv, thr)
    return Recipe(kind, variants, (long, short), ws, short_ctas)


def _fp8_attention(variants) -> tuple:
    """The attention specs of ``variants`` (a single class's; both classes' of a pair or a fused
    launch), each of which must carry an FP8 call's ``kv_dtype``."""
    if isinstance(variants, Variants):
        return (variants.attention,)
    if isinstance(variants, PairVariants):
        return (variants.long.attention, variants.short.attention)
    return (variants.fused.long, variants.fused.short)


def _with_class(p: SchedulerPlan, class_min_q: int, class_max_q: int) -> SchedulerPlan:
    return dataclasses.replace(p, base=dataclasses.replace(p.base, class_min_q=class_min_q, class_max_q=class_max_q))


def tile_class(attn_spec) -> str:
    """The split-granularity class of an attention variant's tile: "decode" (<= 16 rows), "mid"
    (<= 64) or "prefill"."""
    return "decode" if attn_spec.tile.block_m <= 16 else "mid" if attn_spec.tile.block_m <= 64 else "prefill"


def scheduler_plan(attn_spec, *, device: Device, num_heads_q: int, num_heads_kv: int, sort: bool = True,
                   head_swizzle: bool = True, max_splits: int = 1, forced_splits: bool = False,
                   window_left: int = -1, standalone: bool = True) -> SchedulerPlan:
    """The scheduler's run-time configuration for an attention variant on a device, but for the
    CTA counts that follow the loaded kernel's persistent grid (``SchedulerPlan.config``).

    ``window_left``: the call's left window in tokens for a local mask (-1: none), so that key
    blocks, splits and the sort key count what the window leaves (``metadata.request_blocks``: the
    last query block's keys, exact for decodes; a prefill under a window with a wide or unbounded
    right side reads more in its first blocks, which the count misses).

    The dynamic split divides the work by the persistent grid times
    ``heuristics.SPLIT_GRANULARITY`` of the tile's class (decode tiles: finer).

    The head-swizzle budget is a sixth of the device's L2 (about 10 MB on an H200; FlashAttention-3
    uses a fixed 8 MiB on 50 MB parts), counted in K+V blocks of one head (one byte an element on
    an FP8 cache).

    ``standalone``: the variant runs as its own kernel (not a class of the fused kernel); a
    decode-class one then passes its persistent grid as ``wave_ctas``, and the scheduler rounds
    the split cap of capped requests to whole waves (``metadata.wave_split_cap``); its quantum is
    at least ``heuristics.DECODE_MIN_SPLIT_KEYS`` keys (``SchedulerConfig.min_share``) where the
    batch's work makes a quarter of a wave of such tiles (smaller batches keep the fair share).
    """
    qpk = num_heads_q // num_heads_kv
    pack = attn_spec.pack_gqa
    budget = 0
    if head_swizzle:
        kv_block = attn_spec.tile.block_n * (attn_spec.head_dim + attn_spec.head_dim_v) * (1 if attn_spec.kv_dtype else 2)
        budget = max(1, (device.l2_bytes // 6) // kv_block)
    cls = tile_class(attn_spec)
    base = SchedulerConfig(
        num_heads=num_heads_kv if pack else num_heads_q,
        block_m=attn_spec.tile.block_m,
        block_n=attn_spec.tile.block_n,
        pack_factor=qpk if pack else 1,
        max_splits=max_splits,
        forced_splits=forced_splits,
        max_kvblocks_l2=budget,
        swizzle_mult=1 if pack else qpk,
        sort=sort,
        window_left=window_left if attn_spec.mask == "local" else -1,
    )
    wave = standalone and cls == "decode"
    if wave:
        base = dataclasses.replace(base, min_share=-(-heuristics.DECODE_MIN_SPLIT_KEYS // attn_spec.tile.block_n))
    return SchedulerPlan(base, heuristics.SPLIT_GRANULARITY[cls], wave)
