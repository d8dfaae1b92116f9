"""Launches whose parameters are packed per launch: ``AttentionPlan.schedule`` and ``attend``.

The prepared path (``prepared``, ``fused``) packs every non-pointer parameter once per call
signature; these functions pack the whole struct for one launch (the same field values, from
``kernel_args``) and launch it on PyTorch's current stream of the kernel's device.  ``schedule``
and ``attend`` run a bound recipe's launches (``bind``) on a plan's own metadata and partials.
"""
from __future__ import annotations

from ..kernels import kernel_args, params, tma
from ..kernels.params import (ATTENTION_PARAMS, ATTENTION_PARAMS_ALIBI, ATTENTION_PARAMS_ALIBI_SINKS,
                              ATTENTION_PARAMS_SINKS, COMBINE_PARAMS, COMBINE_PARAMS_SINKS, SCHEDULER_PARAMS,
                              TMA_ATTENTION_PARAMS, TMA_ATTENTION_PARAMS_ALIBI, TMA_ATTENTION_PARAMS_ALIBI_SINKS,
                              TMA_ATTENTION_PARAMS_SINKS)
from ..kernels.workspace import SplitBuffers
from . import fused, launch, prepared


def scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> bytes:
    """Packed SchedParams for one batch: cu_seqlens_q / cu_seqlens_k (batch + 1,) and seqused_k
    (batch,) int32 (lengths in tokens; either key tensor may be None), ``md`` the int32 metadata
    buffer of ``capacity`` requests, ``cfg`` a ``metadata.SchedulerConfig``."""
    return SCHEDULER_PARAMS.pack({
        "cu_seqlens_q": cu_seqlens_q.data_ptr(),
        "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "metadata": md.data_ptr(), **kernel_args.scheduler_fields(batch, capacity, cfg),
    })


def attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, capacity, scale, *, seqused_k=None,
                     page_table=None, window=(-1, -1), softcap=0.0, split: SplitBuffers | None = None,
                     row_splits=None, maps: bytes | None = None, alibi: tuple | None = None,
                     sinks: int | None = None, user: tuple | None = None, descale: dict | None = None) -> bytes:
    """Packed AttnParams (tensors as in ``varlen_attention``; strides in elements; ``scale`` is
    softmax_scale, folded with log2(e)).  ``row_splits``: without ``split``, the int32 per-token
    count a non-splitting variant records for the combine kernel (the long class of a fused
    launch).  ``maps``: the Hopper kernel's encoded q/k/v tensor maps (``tma.AttentionMaps.encode``),
    which then lead the parameter (``params.TMA_ATTENTION_PARAMS``).  ``alibi``: (address, batch
    stride) of an ALiBi kernel's slopes (``params.ATTENTION_PARAMS_ALIBI``); ``sinks``: the sinks'
    address of a sink kernel (``params.ATTENTION_PARAMS_SINKS``); ``user``: the addresses of a user
    variant's tensors (``params.user_params``); ``descale``: an FP8 K/V kernel's descale fields
    (``kernel_args.descale_fields``, ``params.fp8_params``; on the Hopper kernel after its maps,
    ``params.tma_fp8_params``)."""
    if sinks is not None:
        if alibi is None:
            struct = ATTENTION_PARAMS_SINKS if maps is None else TMA_ATTENTION_PARAMS_SINKS
        else:
            struct = ATTENTION_PARAMS_ALIBI_SINKS if maps is None else TMA_ATTENTION_PARAMS_ALIBI_SINKS
    elif alibi is None:
        struct = ATTENTION_PARAMS if maps is None else TMA_ATTENTION_PARAMS
    else:
        struct = ATTENTION_PARAMS_ALIBI if maps is None else TMA_ATTENTION_PARAMS_ALIBI
    if descale is not None:   # (the FP8 fields come before a user variant's, as params.attention_params_for)
        struct = params.fp8_params(struct) if maps is None else params.tma_fp8_params(params.fp8_params(struct.inner))
    if user is not None:
        struct = params.user_params(struct.inner if maps is not None else struct, len(user), maps is not None)
    return struct.pack({
        "q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "out": out.data_ptr(),
        "lse": lse.data_ptr() if lse is not None else 0,
        "cu_seqlens_q": cu_seqlens_q.data_ptr(), "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "page_table": page_table.data_ptr() if page_table is not None else 0, "metadata": md.data_ptr(),
        "out_accum": split.out_accum.data_ptr() if split else 0, "lse_accum": split.lse_accum.data_ptr() if split else 0,
        "row_splits": split.row_splits.data_ptr() if split else row_splits.data_ptr() if row_splits is not None else 0,
        **kernel_args.attention_fields(q, k, v, out, lse, page_table, capacity, scale, window, softcap,
                                       kernel_args.split_strides(split), alibi, sinks, user, descale),
    }, *(() if maps is None else (maps,)))


def combine_params(bufs: SplitBuffers, cu_seqlens_q, md, out, lse, num_heads_q: int, sinks: int | None = None) -> bytes:
    """Packed CombineParams: the partials ``bufs``, cu_seqlens_q (batch + 1,) int32, the metadata
    ``md``, out (total_q, num_heads_q, head_dim_v) and lse (num_heads_q, total_q) or None;
    ``sinks``: the sinks' address of a sink combine kernel."""
    return (COMBINE_PARAMS if sinks is None else COMBINE_PARAMS_SINKS).pack({
        "out_accum": bufs.out_accum.data_ptr(), "lse_accum": bufs.lse_accum.data_ptr(),
        "row_splits": bufs.row_splits.data_ptr(), "cu_seqlens_q": cu_seqlens_q.data_ptr(), "metadata": md.data_ptr(),
        "out": out.data_ptr(), "lse": lse.data_ptr() if lse is not None else 0,
        **kernel_args.combine_fields(out, lse, num_heads_q, kernel_args.split_strides(bufs), sinks),
    })


def launch_scheduler(sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> None:
    """Launch the scheduler kernel ``sched`` on the raw stream ``stream``: writes ``md`` (int32,
    ``metadata.buffer_ints(capacity)``) for ``batch`` requests (``scheduler_params``' tensors).
    Raises ValueError past metadata.MAX_CAPACITY, launch.LaunchError if the driver refuses."""
    kernel_args.check_capacity(capacity)
    threads, smem = kernel_args.scheduler_launch_shape(capacity, sched.smem_bytes)
    launch.launch_kernel(sched, 1, stream, scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch,
                                                            capacity, cfg), smem=smem, threads=threads)


def launch_combine(combine, stream, bufs: SplitBuffers, cu_seqlens_q, md, out, lse, num_heads_q: int,
                   sinks: int | None = None) -> None:
    """Merge split-KV partials into ``out`` (and ``lse``): four warps per (token, head) row
    (``combine_params``' tensors).  Raises launch.LaunchError if the driver refuses."""
    grid = kernel_args.combine_grid(out.shape[0], num_heads_q, combine.spec.rows_per_cta)
    launch.launch_kernel(combine, grid, stream, combine_params(bufs, cu_seqlens_q, md, out, lse, num_heads_q, sinks))


def schedule(bound, cu_seqlens_q, cu_seqlens_k, seqused_k, md_long, md_short, batch: int, capacity: int) -> None:
    """Launch the scheduler of each request class of a bound recipe (``bind.bind``) on PyTorch's
    current stream of its device: ``md_long`` (the only class's, or the long one's) and, for the
    two-class recipes, ``md_short``.  Length tensors as ``scheduler_params``'."""
    stream = prepared.current_stream(bound.sched.device)
    launch_scheduler(bound.sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, md_long, batch, capacity,
                     bound.config)
    if md_short is not None:
        launch_scheduler(bound.sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, md_short, batch, capacity,
                         bound.cfg_short)


def attend(bound, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, *, md_long, md_short,
           split: SplitBuffers | None, capacity: int, scale: float, window: tuple, softcap: float,
           alibi: tuple | None = None, sinks: int | None = None, user: tuple | None = None,
           descale: dict | None = None, q_short=None) -> None:
    """Launch a bound recipe's attention kernel(s) and combine on the metadata a ``schedule`` wrote
    (``md_long``; ``md_short`` for the two-class recipes, whose short class owns ``split``), on
    PyTorch's current stream of its device.  Tensors as in ``varlen_attention``; ``alibi``:
    (address, batch stride) of the ALiBi slopes of a recipe of ALiBi kernels; ``sinks``: the sinks'
    address of a single-class recipe of sink kernels (``Recipe.sinks_fused``); ``descale``: the
    descale fields of a recipe of FP8 K/V kernels (``kernel_args.descale_fields``; each class's).
    ``q_short``: the 16-bit q whose e4m3 copy ``q`` is, for (and only for) the Hopper fused kernel whose
    long class runs the FP8 tensor-core variant (its short class reads ``q_short`` with factor 1:
    ``fused.build``'s); ValueError otherwise."""
    if (q_short is not None) != (isinstance(bound, fused.FusedKernels) and bound.variants.fused.long.fp8_mma):
        raise ValueError("q_short: the Hopper fused kernel with the FP8 tensor-core long variant reads two q's (the "
                         "16-bit q goes with it, and only with it)")
    stream = prepared.current_stream(bound.sched.device)
    kw = dict(seqused_k=seqused_k, page_table=page_table, window=window, softcap=softcap, alibi=alibi, user=user)
    args = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    maps = None
    if bound.hopper:
        maps = tma.attention_maps(bound.map_spec, q, k, v, page_table is not None).encode(
            q.data_ptr(), k.data_ptr(), v.data_ptr())
    rs = None if split is None else split.row_splits
    md = md_long if md_short is None else md_short
    if isinstance(bound, fused.PairKernels):  # the long class on Hopper, then the short one
        launch.launch_kernel(bound.attn_long, bound.attn_long.persistent_grid, stream, attention_params(
            *args, md_long, capacity, scale, row_splits=rs, maps=maps, descale=descale, **kw))
        short = bound.attn_short
        launch.launch_kernel(short, short.persistent_grid, stream, attention_params(
            *args, md, capacity, scale, split=split, descale=descale, **kw))
    elif isinstance(bound, fused.FusedKernels) and bound.hopper:  # maps + long struct, short struct
        args_s, descale_s = args, descale
        if q_short is not None:   # (the short class on the 16-bit q, factor 1)
            args_s = (q_short,) + args[1:]
            descale_s = kernel_args.without_q_descale(descale)
        packed = fused.hopper_params(
            attention_params(*args, md_long, capacity, scale, row_splits=rs, maps=maps, descale=descale, **kw),
            attention_params(*args_s, md, capacity, scale, split=split, descale=descale_s, **kw), bound.short_ctas,
            fp8=descale is not None)
        launch.launch_kernel(bound.attn, bound.attn.persistent_grid, stream, packed)
    else:
        packed = attention_params(*args, md, capacity, scale, split=split, maps=maps, sinks=sinks, descale=descale,
                                  **kw)
        if isinstance(bound, fused.FusedKernels):  # the long class's struct first; it records row_splits only
            packed = attention_params(*args, md_long, capacity, scale, row_splits=rs, descale=descale, **kw) + packed
        launch.launch_kernel(bound.attn, bound.attn.persistent_grid, stream, packed)
    if bound.combine is not None:
        launch_combine(bound.combine, stream, split, cu_seqlens_q, md, out, lse, out.shape[1], sinks)
