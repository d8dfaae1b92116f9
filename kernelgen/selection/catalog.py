"""The kernel specs ``kernelgen warmup`` pre-builds: the dispatcher's choices for a product of call options.

``warmup_specs`` asks ``heuristics`` exactly what the decider (``decide``) asks it at run time, for
each combination and for the alternatives a call with those options may take (the Hopper and the
sm_80 mainloop, both paged K/V load paths, the fused mixed-batch launch or the classes in turn;
with ``kv_dtypes`` the FP8 K/V variants: the Hopper kernel's where it takes the call, and the sm_80
mainloop's),
so whatever is pre-warmed is what a later call looks up.  ``jit.warmup.warmup`` compiles them.
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
import os
import time

from ..kernels.spec import DTYPES, HEAD_DIMS, LAYOUTS, MAX_WINDOW, QuantSpec
from . import heuristics
from .settings import Settings

#: FP8 K/V cache dtypes ``kv_dtypes`` takes (``AttentionSpec.kv_dtype``).
KV_DTYPES = ("e4m3", "e5m2")

#: KV heads of the calls warmup pre-builds by default (a whole model's; query heads = KV heads x the
#: GQA ratio): ``warmup_specs``' ``kv_heads``.
KV_HEADS = (8,)

#: Length hints (max_seqlen_q, max_seqlen_k) of the call shapes warmup pre-builds per phase: plain
#: prefill, a chunked prefill against a long context (split-KV), decode against a long context
#: (split-KV + combine) and against a short one (no split).
PHASE_HINTS = {
    "prefill": ((4096, 4096),),
    "chunked": ((512, 32768),),
    "decode": ((1, 32768), (1, 256)),
}

#: Query rows up to which a request tile takes the decode tile, and the 64-row mid tile
#: (``heuristics.tile_class_for_rows``).
DECODE_TILE_ROWS, MID_TILE_ROWS = 16, 64


def unsplit_short_hints(gqa: int) -> tuple:
    """The (max_seqlen_q, max_seqlen_k) hints of the short-query calls without split-KV that the
    decode phase's hints (one query token, which packs ``gqa`` > 1 query heads) do not reach: a paged
    batch of speculative-decode steps or short chunks whose longest request has 2-64 query tokens
    takes, with ``num_splits=1`` (no fused mixed-batch launch then, ``decide.use_fused``), one class:
    the mid tile unpacked (64 query tokens) and packed (``heuristics.default_pack_gqa``: 64 // gqa
    tokens), and the decode tile unpacked (16 tokens, which do not pack above a GQA ratio of 4)."""
    qs = (MID_TILE_ROWS, MID_TILE_ROWS // gqa, DECODE_TILE_ROWS)
    return tuple((q, 32768) for q in dict.fromkeys(q for q in qs if q > 1))


def _ints(values, name: str, low: int, high, what: str) -> tuple:
    """``values`` as Python ints in [low, high] (any integral type but bool; duplicates dropped),
    else ValueError naming ``name`` and the offending value."""
    out = []
    for raw in values:
        try:
            v = None if isinstance(raw, bool) else operator.index(raw)
        except TypeError:
            v = None
        if v is None or v < low or (high is not None and v > high):
            raise ValueError(f"{name}: each must be {what}, got {raw!r}")
        out.append(v)
    return tuple(dict.fromkeys(out))


def head_dim_pairs(head_dims) -> tuple:
    """``warmup_specs``' ``head_dims`` as (head_dim, head_dim_v) pairs, duplicates dropped: an int d is
    (d, d); a pair is taken as it is.  Each value must be in ``HEAD_DIMS``, else ValueError naming
    ``head_dims`` (which pairs a mainloop runs is the dispatcher's to say: ``heuristics.choose``)."""
    out = []
    for raw in head_dims:
        pair = tuple(raw) if isinstance(raw, (tuple, list)) else (raw, raw)
        try:
            pair = tuple(None if isinstance(x, bool) else operator.index(x) for x in pair)
        except TypeError:
            pair = ()
        if len(pair) != 2 or not all(x in HEAD_DIMS for x in pair):
            raise ValueError(f"head_dims: each must be one of {HEAD_DIMS} or a pair (head_dim, head_dim_v) of "
                             f"them, got {raw!r}")
        if pair not in out:
            out.append(pair)
    return tuple(out)


def warmup_specs(arch: str, head_dims=HEAD_DIMS, dtypes=DTYPES, causals=(False, True), layouts=LAYOUTS,
                 phases=("prefill",), gqas=(1,), paged=(False,), softcap: bool = False, num_sms: int = 132,
                 page_sizes=(16,), settings: Settings | None = None, alibi: bool = False,
                 sinks: bool = False, variants=(), kv_dtypes=(), windows=(), kv_heads=KV_HEADS,
                 unsplit: bool = False) -> list:
    """Every kernel spec the dispatcher would use for the given product of call options.

    Args:
        arch: compile target, e.g. "sm_80" or "sm_90a" (``spec.ARCHS``).
        head_dims: head dims, each an int in 64, 96, 128, 192, 256 (head_dim == head_dim_v) or a
            pair (head_dim, head_dim_v) of them, e.g. (192, 128) (DeepSeek's MLA prefill shape).
        dtypes: "fp16" and/or "bf16".
        causals: mask choices, bools (True = causal).
        layouts: scheduler-metadata layouts, "soa" and/or "aos".
        phases: call shapes from ``PHASE_HINTS`` ("prefill", "chunked", "decode").
        gqas: query heads per KV head (pack-GQA is chosen for decode-like calls when > 1; on sm_90a also
            the Hopper kernel packed, which calls of short requests take: ``heuristics.sm90_pack_auto``).
        paged: K/V layouts to cover (False = packed, True = paged cache).
        softcap: also the logit-capping variants.
        num_sms: SM count used for the split bound (132 on an H100/H200).
        page_sizes: tokens per page of the paged caches to cover (sm_90a: the Hopper path's K/V
            loads and, at head dim 256, its tile depend on it; rows gathered through the page
            table, what a call without a known page size takes, are always included).
        settings: the overrides the calls will run with (``KERNELGEN_SM90_OPTS``,
            ``KERNELGEN_SM90_SHORT_ROWS``); None reads them from the environment now.
        alibi: also the ALiBi variants (``alibi_slopes=``; their mixed batches take no fused
            launch: the classes in turn on sm_90a, one class elsewhere).
        sinks: also the sink variants (``sinks=``) of the single-class calls' attention and
            combine kernels (``AttentionSpec.sinks``; mixed batches keep the plain kernels).
        variants: user variants' code (``kernels.variant_code.VariantCode``, e.g. from
            ``kernelgen warmup --variant FILE``): when given, only their kernels (every option
            combination with each variant; their mixed batches take no fused launch, as ALiBi's),
            instead of the plain ones; on sm_90a every Hopper kernel a call may end on where a build
            may spill (three warpgroups, option "m" or packed, and their twins at each of
            ``heuristics.VARIANT_TWIN_LEVELS``: ``selection.spills``).
        unsplit: also every combination's kernels without split-KV (the calls with ``num_splits=1``,
            FlashAttention-3's varlen default through ``kernelgen.compat``, or ``max_num_splits=1``;
            the phases' hints split long contexts, and decode ones on the 16-key tile short ones too),
            the decode phase's with 2-64 query tokens too (``unsplit_short_hints``: a paged batch of
            speculative-decode steps runs as one class on the mid tile with ``num_splits=1``).
        windows: left windows in tokens (ints in [0, ``spec.MAX_WINDOW``]) of causal
            sliding-window calls, ``window_size=(w, 0)`` (Mistral, Gemma 2, gpt-oss; engines pass
            the model's window minus one): each adds the local-mask kernels of every other
            combination, beside ``causals``' masks.  A short window bounds a call's split-KV
            (``heuristics.window_split_cap``), so windows under 255 tokens may take other kernels
            than longer ones, which all share one set.  Empty (default): none.
        kv_heads: KV heads of the calls (ints >= 1; query heads = KV heads x ``gqas``).  Default
            ``KV_HEADS``, 8 (a whole model's).  The heads bound a call's tiles and so its split-KV: a
            tensor-parallel shard with 1 or 2 KV heads (llama3-70b on 8 GPUs: 8 / 1) splits chunks
            that 8 KV heads do not (on sm_90a packed-GQA, paged, split kernels); give its count.
        kv_dtypes: FP8 K/V cache dtypes ("e4m3", "e5m2"; ``kernelgen warmup --kv-dtype``): also
            the FP8 variants of every combination's single-class kernels (``heuristics.choose``
            with ``kv_dtype``, automatic and forced to the sm_80 mainloop, on sm_90a with each
            page size too; with ``sinks``, ``alibi`` or ``variants`` theirs too), those of the
            same calls with an e4m3 q (``q_dtype``: the Hopper FP8 tensor-core variant where it
            applies, and then, for an e4m3 cache, the kernel that quantises a 16-bit q for it:
            ``quantize_q=True``, ``spec.QuantSpec``), and a paged mixed batch's fused kernels (``choose_fused`` with ``kv_dtype``;
            on sm_90a ``choose_fused_hopper``'s at each page size, for an e4m3 cache also its form
            whose long class reads a quantised q (``quantize_q=True``), or the classes in turn,
            ``choose_pair``, where that does not apply; ``decide``).  Empty (default): none.

    Returns:
        The specs from ``heuristics.choose`` (the dispatcher's own function) for each
        combination (on sm_90a both the Hopper path's, for a paged cache both its K/V load paths,
        and, for ``arch="sm_80"`` calls and plans, and calls whose strides TMA cannot address, the
        sm_80 path's), and for paged calls with long queries those of ``heuristics.choose_fused``
        (the fused mixed-batch launch the dispatcher takes then; on sm_90a also
        ``heuristics.choose_fused_hopper``'s, or ``choose_pair``'s where it does not apply), in
        first-seen order with duplicates removed; each combine kernel with every
        ``CombineSpec.row_warps`` (a call's own follows its query tokens,
        ``heuristics.combine_row_warps``).

    Raises:
        ValueError: an unknown arch, dtype, head dim, layout, phase or kv dtype, a negative window, a variant
            that does not fit the arch (the same error the dispatcher would raise for that call), or
            ``KERNELGEN_SM90_PACK_GQA`` set to something other than an on / off word.
    """
    settings = (Settings.from_env() if settings is None else settings).check()
    opts = settings.sm90_opts
    out: dict = {}
    for phase in phases:
        if phase not in PHASE_HINTS:
            raise ValueError(f"phase must be one of {tuple(PHASE_HINTS)}, got {phase!r}")
    kv_dtypes = tuple(dict.fromkeys(kv_dtypes))
    for kv in kv_dtypes:
        if kv not in KV_DTYPES:
            raise ValueError(f"kv_dtypes: each must be one of {KV_DTYPES}, got {kv!r}")
    kv_heads = _ints(kv_heads, "kv_heads", 1, None, "an int >= 1")
    spans = _ints(windows, "windows", 0, MAX_WINDOW, f"an int in [0, {MAX_WINDOW}] (a left window in tokens)")
    # (mask, window_span): the masks of ``causals``, then a causal sliding window of each left size
    masks = [("causal" if c else "none", -1) for c in causals] + [("local", w) for w in spans]
    caps = (False, True) if softcap else (False,)
    auto_pack = settings.sm90_pack_gqa is None and heuristics.SM90_PACK_GQA is None
    alibis = (False, True) if alibi else (False,)
    codes = tuple(variants) or (None,)
    pairs = head_dim_pairs(head_dims)
    for layout, dtype, (d, dv), (mask, span), phase, kvh, gqa, pg, cap, al, var in itertools.product(
            layouts, dtypes, pairs, masks, phases, kv_heads, gqas, paged, caps, alibis, codes):
        hints = [(h, 0) for h in PHASE_HINTS[phase]]
        if unsplit:   # (split_cap 1: the unsplit calls' kernels, the same a num_splits=1 call takes)
            hints += [(h, 1) for h in PHASE_HINTS[phase] + (unsplit_short_hints(int(gqa)) if phase == "decode" else ())]
        for (max_q, max_k), split_cap in hints:
            sc = {"max_num_splits": split_cap} if split_cap else {}
            kw = dict(num_heads_q=kvh * int(gqa), num_heads_kv=kvh, mask=mask, layout=layout,
                      max_seqlen_q=max_q, max_seqlen_k=max_k, paged=bool(pg), softcap=cap, num_sms=num_sms,
                      sm90_opts=opts, window_span=span, **({"alibi": True} if al else {}),
                      **({"variant": var} if var is not None else {}), **sc)
            # (the single-class calls pack GQA on the Hopper kernel as KERNELGEN_SM90_PACK_GQA says; unset,
            # calls of short requests pack: heuristics.sm90_pack_auto, so both kernels)
            v = heuristics.choose(arch, dtype, d, dv, sm90_pack=settings.sm90_pack_gqa, **kw)
            specs = [v.scheduler, v.attention, v.combine]
            if auto_pack:
                vp = heuristics.choose(arch, dtype, d, dv, sm90_pack=True, **kw)
                specs += [vp.attention, vp.combine]
            if var is not None:   # its three-warpgroup / "m" / packed Hopper kernel may spill: the twins the calls
                # then take (selection.heuristics.VARIANT_TWIN_LEVELS), packed calls' too
                for sp in (settings.sm90_pack_gqa, *((True,) if auto_pack else ())):
                    for lvl in heuristics.VARIANT_TWIN_LEVELS:
                        vs = heuristics.choose(arch, dtype, d, dv, variant_spills=lvl,
                                               sm90_pack=sp, **kw)
                        specs += [vs.attention, vs.combine]
            if v.attention.mainloop == "sm90a":  # arch="sm_80" calls and plans take the sm_80 path
                v80 = heuristics.choose(arch, dtype, d, dv, mainloop="sm80", **kw)
                specs += [v80.attention, v80.combine]
                if pg:  # both paged load paths: gathered rows (above) and TMA boxes (page sizes like 16)
                    for ps in page_sizes:
                        for sp in (settings.sm90_pack_gqa, *((True,) if auto_pack else ())):
                            specs.append(heuristics.choose(arch, dtype, d, dv,
                                                           page_size=int(ps), sm90_pack=sp, **kw).attention)
                            for lvl in (heuristics.VARIANT_TWIN_LEVELS if var is not None else ()):   # (the twins, as above)
                                vps = heuristics.choose(arch, dtype, d, dv, page_size=int(ps),
                                                        variant_spills=lvl, sm90_pack=sp, **kw)
                                specs += [vps.attention, vps.combine]
            for kv in kv_dtypes:  # FP8 K/V: one class (decide), automatic and forced to the sm_80 mainloop
                for extra in ({}, {"mainloop": "sm80"}, *({"page_size": int(ps)} for ps in page_sizes
                                                           if pg and arch == "sm_90a")):
                    v8 = heuristics.choose(arch, dtype, d, dv, kv_dtype=kv, **extra, **kw)
                    specs += [v8.scheduler, v8.attention, v8.combine]
                    if "mainloop" not in extra:   # an FP8 q as well: the FP8 tensor-core variant where it applies
                        vq = heuristics.choose(arch, dtype, d, dv, kv_dtype=kv, q_dtype="e4m3",
                                               sm90_pack=settings.sm90_pack_gqa, **extra, **kw)
                        specs += [vq.attention, vq.combine]
                        if auto_pack:   # (short requests' calls pack: heuristics.sm90_pack_auto, d 64 and 128)
                            vqp = heuristics.choose(arch, dtype, d, dv, kv_dtype=kv,
                                                    q_dtype="e4m3", sm90_pack=True, **extra, **kw)
                            specs += [vqp.attention, vqp.combine]
                        if kv == "e4m3" and vq.attention.fp8_mma:   # quantize_q=True: q's quantisation kernel
                            specs.append(QuantSpec(arch, dtype))
            if sinks:  # the single-class calls' sink variants (decide.recipe: same tiles and splits)
                specs += [dataclasses.replace(s, sinks=True) for s in specs
                          if s is not None and s.kind not in ("scheduler", "quant")]
            for kv in kv_dtypes:   # a paged mixed batch (decide): the fused kernels, on sm_90a the classes in
                # turn where the Hopper one does not apply (mixed batches keep the plain kernels with sinks)
                if pg and max_q > heuristics.short_query_tokens(kvh * int(gqa), kvh) and not al and var is None \
                        and settings.fp8_fused:
                    fv = heuristics.choose_fused(arch, dtype, d, dv, kv_dtype=kv,
                                                 **{k: x for k, x in kw.items()
                                                    if k not in ("max_seqlen_q", "sm90_opts", "window_span")})
                    if fv is not None:
                        specs += [fv.scheduler, fv.fused, fv.combine]
                if pg and arch == "sm_90a" and max_q > heuristics.short_query_tokens(kvh * int(gqa), kvh) \
                        and not al and var is None:
                    for ps in page_sizes:
                        hv = heuristics.choose_fused_hopper(arch, dtype, d, dv, page_size=int(ps), kv_dtype=kv,
                                                            short_rows=settings.sm90_short_rows(), **kw)
                        # quantize_q=True: the fused kernel whose long class runs the FP8 tensor-core variant on
                        # the quantised q, and the quantisation kernel (also at page sizes where the 16-bit q's
                        # Hopper fused kernel does not apply: the tensor-core variant's 192-key blocks box them)
                        hq8 = heuristics.choose_fused_hopper(arch, dtype, d, dv, page_size=int(ps), kv_dtype=kv,
                                                             short_rows=settings.sm90_short_rows(),
                                                             q_dtype="e4m3", **kw) \
                            if kv == "e4m3" and settings.fp8_fused else None
                        if hq8 is not None:
                            specs += [hq8.scheduler, hq8.fused, hq8.combine, QuantSpec(arch, dtype)]
                        if hv is not None and settings.fp8_fused:
                            specs += [hv.scheduler, hv.fused, hv.combine]
                            continue
                        pv = heuristics.choose_pair(arch, dtype, d, dv, page_size=int(ps),
                                                    kv_dtype=kv, **kw)
                        if pv is not None:
                            specs += [pv.long.attention, pv.short.attention, pv.short.combine]
            hq = kvh * int(gqa)
            if pg and max_q > heuristics.short_query_tokens(hq, kvh) and (al or var is not None):
                # ALiBi or a user variant: no fused kernel; the classes in turn on sm_90a (the single class is above)
                for ps in ((*page_sizes, 0) if arch == "sm_90a" else ()):
                    for vsp in ((False, True) if var is not None else (False,)):   # (variant_spills: as above)
                        pv = heuristics.choose_pair(arch, dtype, d, dv, num_heads_q=hq,
                                                    num_heads_kv=kvh, mask=mask, layout=layout,
                                                    max_seqlen_q=max_q, max_seqlen_k=max_k, paged=True, softcap=cap,
                                                    num_sms=num_sms, page_size=ps, sm90_opts=opts, alibi=al,
                                                    window_span=span, **sc,
                                                    **({"variant": var, "variant_spills": vsp} if var is not None
                                                       else {}))
                        if pv is not None:
                            specs += [pv.long.attention, pv.short.attention, pv.short.combine]
            elif pg and max_q > heuristics.short_query_tokens(hq, kvh):
                # a paged call with long queries takes the fused mixed-batch launch (decide.use_fused)
                mkw = dict(num_heads_q=hq, num_heads_kv=kvh, mask=mask, layout=layout,
                           max_seqlen_k=max_k, paged=True, softcap=cap, num_sms=num_sms, **sc)
                fv = heuristics.choose_fused(arch, dtype, d, dv, **mkw)
                mkw["window_span"] = span   # (the sm_80 fused kernel takes none: decide)
                if fv is not None:
                    specs += [fv.scheduler, fv.fused, fv.combine]
                for ps in ((*page_sizes, 0) if arch == "sm_90a" else ()):  # sm_90a: the Hopper fused launch
                    hv = heuristics.choose_fused_hopper(arch, dtype, d, dv, max_seqlen_q=max_q,
                                                        page_size=ps, sm90_opts=opts,
                                                        short_rows=settings.sm90_short_rows(), **mkw)
                    if hv is not None:
                        specs += [hv.scheduler, hv.fused, hv.combine]
                        continue
                    pv = heuristics.choose_pair(arch, dtype, d, dv, max_seqlen_q=max_q,
                                                page_size=ps, sm90_opts=opts, **mkw)
                    if pv is not None:  # where it does not apply: the classes in turn
                        specs += [pv.long.attention, pv.short.attention, pv.short.combine]
            for spec in specs:
                if spec is not None:
                    out.setdefault(spec, None)
                    if spec.kind == "combine":   # the warps a row follow each call's query tokens (decide)
                        for r in spec.ROW_WARPS:
                            out.setdefault(dataclasses.replace(spec, row_warps=r), None)
    return list(out)


#: The call-shape flag sets ``warmup_command`` tries, smallest first (a ``kernelgen warmup`` command's
#: flags and ``warmup_specs``' keywords for them): the phases, query heads per KV head, a paged cache,
#: calls with ``num_splits=1``, tensor-parallel KV head counts, wide GQA ratios (packed-GQA kernels of
#: 70B-class models on a few GPUs) and page sizes widen the set in turn.
_SERVING = dict(phases=("prefill", "chunked", "decode"), gqas=(1, 4, 8), paged=(False, True))
_SHAPE_TIERS = (
    ((), {}),
    (("--phase", "prefill,chunked,decode"), dict(phases=_SERVING["phases"])),
    (("--phase", "prefill,chunked,decode", "--gqa", "1,4,8"), dict(phases=_SERVING["phases"], gqas=(1, 4, 8))),
    (("--serving",), _SERVING),
    (("--serving", "--unsplit"), dict(_SERVING, unsplit=True)),
    (("--serving", "--unsplit", "--kv-heads", "1,2,8"), dict(_SERVING, unsplit=True, kv_heads=(1, 2, 8))),
    (("--phase", "prefill,chunked,decode", "--both-paged", "--unsplit", "--kv-heads", "1,2,8", "--gqa",
      "1,2,4,5,8,16,32,64"),   # (not --serving: it sets the GQA ratios itself)
     dict(_SERVING, unsplit=True, kv_heads=(1, 2, 8), gqas=(1, 2, 4, 5, 8, 16, 32, 64))),
    (("--serving", "--unsplit", "--kv-heads", "1,2,8", "--page-size", "1,16,32,64,128"),
     dict(_SERVING, unsplit=True, kv_heads=(1, 2, 8), page_sizes=(1, 16, 32, 64, 128))),
)

#: The environment variables that change the dispatcher's choices (``settings.Settings``): a command
#: found under them builds the kernel only under them, so ``warmup_command`` puts the set ones first.
_CHOICE_ENV = ("KERNELGEN_SM90_OPTS", "KERNELGEN_SM90_SHORT_ROWS", "KERNELGEN_MIXED_SHORT_CTAS",
               "KERNELGEN_FP8_FUSED", "KERNELGEN_SM90_PACK_GQA")


#: ``warmup_command``'s default bound on its search, in seconds (None: no bound; the tests set None so
#: that no result depends on the machine's speed).
WARMUP_COMMAND_BUDGET_S: float | None = 2.0


def warmup_command(spec, settings: Settings | None = None, also=(), budget_s="default") -> str | None:
    """A ``kernelgen warmup`` command whose kernels include ``spec`` and every spec of ``also`` (the
    other kernels of the same call), for a call with ``KERNELGEN_DISABLE_JIT=1`` that raised
    ``KernelNotCachedError``; or None.

    The spec's own fields give the fixed flags (``--arch``, ``--head-dim``, ``--dtype``, the mask,
    ``--layout``, ``--paged``, ``--softcap`` / ``--alibi`` / ``--sinks``, ``--kv-dtype``); the call
    shapes (``_SHAPE_TIERS``) are tried smallest first, each checked against ``warmup_specs`` (the
    set the command builds), so the command returned does build them.  A sliding window's size is not
    in the spec: a 4096-token window is tried, then 128 and 4096 (under 255 tokens a window bounds
    split-KV).  The set ``_CHOICE_ENV`` variables lead the command (``VAR=value kernelgen warmup
    ...``): the kernels were chosen under them.  None for a user variant's kernels (``--variant FILE``
    needs the caller's file), for specs no tried set builds, when the search reaches ``budget_s``
    seconds (it runs on an error path; default ``WARMUP_COMMAND_BUDGET_S``, None: no bound), or when
    the settings do not read (None reads the environment, as the command would)."""
    start = time.monotonic()
    budget_s = WARMUP_COMMAND_BUDGET_S if budget_s == "default" else budget_s
    base = spec.long if getattr(spec, "kind", "") == "fused" else spec
    if getattr(base, "variant", None) is not None:
        return None
    flags, kw = ["--arch", base.arch], {}
    hd, hdv = getattr(base, "head_dim", None), getattr(base, "head_dim_v", None)
    if hd is not None or hdv is not None:
        hd = hdv if hd is None else hd
        flags += ["--head-dim", str(hd) if hd == hdv else f"{hd}x{hdv}"]
        kw["head_dims"] = (hd if hd == hdv else (hd, hdv),)
    if getattr(base, "dtype", None) in DTYPES:
        flags += ["--dtype", base.dtype]
        kw["dtypes"] = (base.dtype,)
    if getattr(base, "layout", None) is not None:
        flags += ["--layout", base.layout]
        kw["layouts"] = (base.layout,)
    if getattr(base, "paged", False):
        flags.append("--paged")
        kw["paged"] = (True,)
    for name in ("softcap", "alibi", "sinks"):
        if getattr(base, name, False):
            flags.append(f"--{name}")
            kw[name] = True
    kv = getattr(base, "kv_dtype", "") or ("e4m3" if isinstance(spec, QuantSpec) else "")
    if kv:
        flags += ["--kv-dtype", kv]
        kw["kv_dtypes"] = (kv,)
    masks = {"causal": [(["--causal"], dict(causals=(True,)))],
             "none": [(["--no-causal"], dict(causals=(False,)))],
             "local": [(["--causal", "--window", w], dict(causals=(True,), windows=tuple(map(int, w.split(",")))))
                       for w in ("4096", "128,4096")]}.get(getattr(base, "mask", None), [([], {})])
    try:
        settings = (Settings.from_env() if settings is None else settings).check()
    except ValueError:
        return None
    wanted = {spec, *also}
    for shape_flags, shape_kw in _SHAPE_TIERS:
        for mask_flags, mask_kw in masks:
            if budget_s is not None and time.monotonic() - start >= budget_s:
                return None
            args = {**kw, **mask_kw, **shape_kw}
            if wanted <= set(warmup_specs(base.arch, settings=settings, **args)):
                cmd = flags + mask_flags + list(shape_flags)
                if ("--serving" in shape_flags or "--both-paged" in shape_flags) and "--paged" in cmd:
                    cmd.remove("--paged")   # (both cover the paged K/V layout; --both-paged excludes --paged)
                env = [f"{v}={os.environ[v].strip()}" for v in _CHOICE_ENV if os.environ.get(v, "").strip()]
                return " ".join(env + ["kernelgen", "warmup"] + cmd)
    return None
