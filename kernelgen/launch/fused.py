"""The fused launch of a mixed batch: long-query and short-query requests in one persistent kernel.

A call whose batch may mix prefill chunks and decodes runs, on the current stream:

1. the scheduler kernel twice, once per request class (``metadata.SchedulerConfig.class_min_q`` /
   ``class_max_q``): requests with at most ``short_max_q`` query tokens are *short* and get
   one-warp decode tiles (pack-GQA, split-KV), the others *long* and get 128-row prefill tiles;
   each class has its own metadata buffer, so its own tile queue;
2. the fused attention kernel (``FusedAttentionSpec``), whose CTAs take tiles from both queues:
   templates/attention/fwd_fused_sm80.cu.j2 (its parameter: one AttnParams per class), or on
   sm_90a fwd_fused_sm90.cu.j2 (the long class on the Hopper variant, the short class's tiles on
   the SMs of the CTAs that start on the short queue, ``FusedKernels.short_ctas``; its parameter:
   ``params.FUSED_TMA_PARAMS``, written by ``HopperPairLaunch``);
3. with split-KV in the short class, the combine kernel (long rows record one partial and are
   skipped).

``FusedKernels`` is what a plan or a call signature keeps (kernels, scheduler configs, workspace
layout); ``build`` turns it and a validated call into a ``PreparedFusedCall`` whose ``run``
reads the data pointers, allocates the workspace unless the caller owns one, and enqueues the four
launches.  The co-scheduling of prefill and decode work in one launch follows PoD-Attention
(Kamath et al. 2024); the per-kind queues and one-warp decode tiles are kernelgen's.
"""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass

import torch

from ..selection import heuristics
from ..kernels import kernel_args, metadata
from . import launch, prepared
from ..jit import runtime
from ..kernels.params import ATTENTION_PARAMS, FUSED_TMA_PARAMS
from ..kernels.workspace import ALIGN, WorkspaceLayout


@dataclass(frozen=True)
class FusedWorkspace:
    """One workspace for a fused call: the short class's metadata and split-KV partials (laid out
    as ``WorkspaceLayout``), then the long class's metadata."""

    short: WorkspaceLayout

    @property
    def capacity(self) -> int:
        return self.short.capacity

    @property
    def long_metadata_offset(self) -> int:
        return self.short.nbytes

    @property
    def nbytes(self) -> int:
        return self.short.nbytes + (4 * metadata.buffer_ints(self.capacity) + ALIGN - 1) // ALIGN * ALIGN

    def views(self, ws: torch.Tensor):
        """(long metadata, short metadata, short SplitBuffers or None) viewing a uint8 workspace."""
        md_short, split = self.short.views(ws)
        n = metadata.buffer_ints(self.capacity)
        off = self.long_metadata_offset
        md_long = ws[off:off + 4 * n].view(torch.int32)
        return md_long, md_short, split


def short_class_workspace(capacity: int, rows: int, split: bool, max_splits: int, num_heads_q: int,
                          head_dim_v: int, short_max_q: int) -> FusedWorkspace:
    """The workspace of a mixed call: only the short class splits, and its requests have at most
    ``short_max_q`` query tokens each, so its partials are indexed by (request, token of the
    request) when ``capacity * short_max_q`` rows are fewer than the step's ``rows`` tokens
    (``WorkspaceLayout.request_rows``)."""
    by_request = short_max_q if capacity * short_max_q < rows else 0
    return FusedWorkspace(WorkspaceLayout(capacity, split, max_splits, num_heads_q, rows, head_dim_v, by_request))


@dataclass
class FusedKernels:
    """The loaded kernels and scheduler configurations of a fused call (see the module doc)."""

    variants: heuristics.FusedVariants
    sched: runtime.Kernel
    fused: runtime.Kernel
    combine: runtime.Kernel | None
    cfg_long: metadata.SchedulerConfig
    cfg_short: metadata.SchedulerConfig
    #: Hopper fused kernel: CTAs that start on the short queue (``heuristics.sm90_mixed_short_ctas``).
    short_ctas: int = 0

    def workspace(self, capacity: int, rows: int, num_heads_q: int, head_dim_v: int) -> FusedWorkspace:
        return short_class_workspace(capacity, rows, self.combine is not None, self.variants.short_max_splits,
                                     num_heads_q, head_dim_v, self.variants.short_max_q)


def short_first_sms(grid: int, short_ctas: int) -> list[int]:
    """SM ids whose CTA starts on the short queue in the Hopper fused launch (the kernel's
    ``starts_short``, templates/attention/fwd_fused_sm90.cu.j2, which this mirrors for tests and
    tools): SM ``s`` of ``0 .. grid - 1`` when ``s * short_ctas % grid < short_ctas``, i.e. exactly
    ``short_ctas`` ids one every ``grid / short_ctas``.  (On a GPU whose SM ids reach past the grid
    the kernel falls back to the last ``short_ctas`` CTAs by blockIdx.)

    Raises ValueError unless ``0 <= short_ctas <= grid`` and ``grid >= 1``.
    """
    if grid < 1 or not 0 <= short_ctas <= grid:
        raise ValueError(f"short_first_sms needs grid >= 1 and 0 <= short_ctas <= grid, got {grid}, {short_ctas}")
    return [s for s in range(grid) if s * short_ctas % grid < short_ctas]


def load(variants: heuristics.FusedVariants, device: int, num_heads_q: int, num_heads_kv: int, *, sort: bool = True,
         head_swizzle: bool = True, window_left: int = -1) -> FusedKernels:
    """Load the kernels of ``variants`` on ``device`` and derive both classes' scheduler configs.

    The long class's split share divides by the fused grid; the short class's by the grid times
    the short tiles a CTA runs side by side times the decode split granularity (as for a decode
    launch, whose one-warp CTAs fill the same warps).  ``window_left``: the call's left window in
    tokens (-1: none; used by a local mask's schedulers, see ``api.scheduler_config``).
    """
    from ..front.api import scheduler_config

    f = variants.fused
    sched = runtime.get_kernel(variants.scheduler, device)
    fused = runtime.get_kernel(f, device)
    combine = runtime.get_kernel(variants.combine, device) if variants.combine is not None else None
    big = 2 ** 31 - 1
    cfg_long = scheduler_config(f.long, fused, num_heads_q, num_heads_kv, sort=sort, head_swizzle=head_swizzle,
                                window_left=window_left)
    cfg_long = dataclasses.replace(cfg_long, class_min_q=variants.short_max_q + 1, class_max_q=big)
    cfg_short = scheduler_config(f.short, fused, num_heads_q, num_heads_kv, sort=sort, head_swizzle=head_swizzle,
                                 max_splits=variants.short_max_splits, forced_splits=variants.short_forced_splits,
                                 window_left=window_left)
    cfg_short = dataclasses.replace(cfg_short, num_ctas=fused.persistent_grid * f.tiles_per_step
                         * heuristics.SPLIT_GRANULARITY["decode"], class_min_q=0, class_max_q=variants.short_max_q)
    short_ctas = heuristics.sm90_mixed_short_ctas(runtime.device_properties(device)["num_sms"]) if f.hopper else 0
    return FusedKernels(variants, sched, fused, combine, cfg_long, cfg_short, short_ctas)


class PairLaunch:
    """A prepared launch of the fused kernel: two AttnParams back to back (long, short), each
    packed once; a launch writes both structs' pointer fields (``launch.PreparedLaunch``'s
    scheme for a struct pair)."""

    def __init__(self, kernel: runtime.Kernel, static_long: dict, static_short: dict):
        self.name = kernel.spec.name
        self.template = ATTENTION_PARAMS.pack_static(static_long) + ATTENTION_PARAMS.pack_static(static_short)
        self.head = (int(kernel.func_ptr), kernel.persistent_grid, 1, 1, kernel.num_threads, 1, 1, kernel.smem_bytes)

    def new_slot(self) -> tuple:
        """(pack, buffer, head, kernelParams address, keep-alive): ``pack(buffer, 0, *long_pointers,
        *short_pointers)`` (13 each, ATTENTION_PARAMS.pointer_names order), as
        ``launch.PreparedLaunch.new_slot``'s."""
        buf = ctypes.create_string_buffer(self.template, len(self.template))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        ps, size, n = ATTENTION_PARAMS.pointer_struct, ATTENTION_PARAMS.size, len(ATTENTION_PARAMS.pointer_names)

        def pack(b, offset, *ptrs):
            ps.pack_into(b, 0, *ptrs[:n])
            ps.pack_into(b, size, *ptrs[n:])
        return (pack, buf, self.head, ctypes.addressof(argv), argv)


class HopperPairLaunch:
    """A prepared launch of the Hopper fused kernel (``params.FUSED_TMA_PARAMS``): the long
    class's tensor maps and AttnParams, the short class's AttnParams, ``short_ctas``; a launch
    encodes the maps of its q/k/v pointers (``tma.AttentionMaps``, cached per pointer set) and
    writes both structs' pointer fields, as ``prepared.TmaLaunch`` and ``PairLaunch`` do."""

    def __init__(self, kernel: runtime.Kernel, static_long: dict, static_short: dict, maps, short_ctas: int):
        self.name, self.maps, self.short_ctas = kernel.spec.name, maps, int(short_ctas)
        self.template = FUSED_TMA_PARAMS.pack_static(static_long, static_short, short_ctas)
        self.head = (int(kernel.func_ptr), kernel.persistent_grid, 1, 1, kernel.num_threads, 1, 1, kernel.smem_bytes)

    def new_slot(self) -> tuple:
        """(pack, buffer, head, kernelParams address, keep-alive) as ``PairLaunch.new_slot``'s;
        ``pack`` also writes the tensor maps of the long pointers' q, k, v."""
        buf = ctypes.create_string_buffer(self.template, len(self.template))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        n = len(ATTENTION_PARAMS.pointer_names)
        long_ptrs, short_ptrs = FUSED_TMA_PARAMS.long_pointers, FUSED_TMA_PARAMS.short_pointers
        encode, name, nbytes = self.maps.encode, self.name, FUSED_TMA_PARAMS.MAPS_BYTES

        def pack(b, offset, *ptrs):
            try:
                maps = encode(ptrs[0], ptrs[1], ptrs[2])
            except Exception as e:  # noqa: BLE001 - the driver's refusal names the kernel like a launch error
                raise launch.LaunchError(name, e, "cuTensorMapEncodeTiled") from e
            ctypes.memmove(b, maps, nbytes)
            long_ptrs.pack_into(b, 0, *ptrs[:n])
            short_ptrs.pack_into(b, 0, *ptrs[n:])
        return (pack, buf, self.head, ctypes.addressof(argv), argv)


def hopper_params(long_packed: bytes, short_packed: bytes, short_ctas: int) -> bytes:
    """The Hopper fused kernel's parameter from the long class's packed ``TmaAttnParams`` (maps
    first) and the short class's packed ``AttnParams`` (``api.attention_params``)."""
    if len(long_packed) != FUSED_TMA_PARAMS.short_offset or len(short_packed) != ATTENTION_PARAMS.size:
        raise ValueError("hopper_params takes a packed TmaAttnParams and a packed AttnParams")
    return long_packed + short_packed + FUSED_TMA_PARAMS.tail.pack(int(short_ctas), 0)


class PreparedFusedCall(prepared.PreparedCall):
    """The four launches of one fused call signature (see ``build``): ``run`` and the workspace
    handling are ``prepared.PreparedCall``'s; the short class's metadata and partials sit where a
    single-class call has them, the long class's metadata after them."""

    def __init__(self, *, device, kernels: FusedKernels, sched_long, sched_short, pair: PairLaunch, combine,
                 layout: FusedWorkspace, fixed_base, out_shape, lse_shape, dtype, sizes):
        super().__init__(device=device, sched=sched_long, attn=pair, combine=combine, layout=layout.short,
                         fixed_base=fixed_base, out_shape=out_shape, lse_shape=lse_shape, dtype=dtype, sizes=sizes,
                         config=kernels.cfg_long)
        self.kernels, self.layout, self.workspace_bytes = kernels, layout, layout.nbytes
        self.sched_long, self.sched_short, self.pair = sched_long, sched_short, pair
        self._long_md = layout.long_metadata_offset

    def _launches(self) -> tuple:
        return (self.sched_long, self.sched_short, self.pair, self.combine)

    def _pointer_sets(self, base, qp, kp, vp, op, lp, cq, ck, su, pt) -> tuple:
        md_s, md_l = base, base + self._long_md
        sched = ((cq, ck, su, md_l), (cq, ck, su, md_s))
        if self.combine is None:
            return sched + ((qp, kp, vp, op, lp, cq, ck, su, pt, md_l, 0, 0, 0,
                             qp, kp, vp, op, lp, cq, ck, su, pt, md_s, 0, 0, 0),)
        oa, la, rs = base + self._oa, base + self._la, base + self._rs
        return sched + ((qp, kp, vp, op, lp, cq, ck, su, pt, md_l, 0, 0, rs,
                         qp, kp, vp, op, lp, cq, ck, su, pt, md_s, oa, la, rs),
                        (oa, la, rs, cq, md_s, op, lp))


def _combine_launch(kernels, out, lse, strides: dict):
    """The prepared combine launch of a mixed call (None when its short class does not split)."""
    if kernels.combine is None:
        return None
    grid = kernel_args.combine_grid(out.shape[0], out.shape[1], kernels.combine.spec.rows_per_cta)
    return kernels.combine.prepare(grid, kernel_args.combine_fields(out, lse, out.shape[1], strides))


def _scheduler_launches(kernels, batch: int, cap: int) -> tuple:
    """The two classes' prepared scheduler launches (long, short) of a mixed call."""
    kernel_args.check_capacity(cap)
    threads, smem = kernel_args.scheduler_launch_shape(cap, kernels.sched.smem_bytes)
    return tuple(kernels.sched.prepare(1, kernel_args.scheduler_fields(batch, cap, cfg), smem=smem, threads=threads)
                 for cfg in (kernels.cfg_long, kernels.cfg_short))


def build(kernels: FusedKernels, *, layout: FusedWorkspace, batch: int, q, k, v, out, lse, page_table, scale: float,
          window: tuple, softcap: float, return_lse: bool, fixed_base: int | None, sizes: dict) -> PreparedFusedCall:
    """Prepare the launches of a validated fused call (as ``prepared.build``): both scheduler
    launches (the two classes' configs), the fused kernel's two parameter structs, the combine."""
    cap = layout.capacity
    sched_long, sched_short = _scheduler_launches(kernels, batch, cap)
    strides = layout.short.split_strides()
    static_long = kernel_args.attention_fields(q, k, v, out, lse, page_table, cap, scale, window, softcap, None)
    static_short = kernel_args.attention_fields(q, k, v, out, lse, page_table, cap, scale, window, softcap, strides)
    f = kernels.variants.fused
    if f.hopper:
        from ..front.api import hopper_maps

        pair = HopperPairLaunch(kernels.fused, static_long, static_short,
                                hopper_maps(f.long, q, k, v, page_table is not None), kernels.short_ctas)
    else:
        pair = PairLaunch(kernels.fused, static_long, static_short)
    hq = out.shape[1]
    combine = _combine_launch(kernels, out, lse, strides)
    return PreparedFusedCall(device=q.device, kernels=kernels, sched_long=sched_long, sched_short=sched_short,
                             pair=pair, combine=combine, layout=layout, fixed_base=fixed_base,
                             out_shape=tuple(out.shape), lse_shape=(hq, out.shape[0]) if return_lse else None,
                             dtype=q.dtype, sizes=sizes)


def use_fused(short_query_tokens, *, paged: bool, batch: int, max_seqlen_q: int, num_heads_q: int,
              num_heads_kv: int, pack_gqa, num_splits: int) -> int:
    """The class threshold (query tokens) of a fused launch for a call, or 0 for none.

    ``short_query_tokens`` None (automatic): fused for a paged cache with more than one request
    whose ``max_seqlen_q`` exceeds the default threshold and no forced ``pack_gqa`` or
    ``num_splits``; an int >= 1: fused with that threshold whenever some request may exceed it;
    0: never.
    """
    if short_query_tokens == 0:
        return 0
    auto = short_query_tokens is None
    thr = heuristics.short_query_tokens(num_heads_q, num_heads_kv) if auto else int(short_query_tokens)
    if auto and (not paged or pack_gqa is not None or num_splits != 0):
        return 0
    if batch < 2 or max_seqlen_q <= thr:
        return 0
    return thr


# ---------------------------- sm_90a: the classes in turn (where the Hopper fused kernel does not apply)
@dataclass
class PairKernels:
    """The loaded kernels of a mixed batch on sm_90a (``heuristics.choose_pair``): the scheduler
    (launched once per class), the long class's Hopper kernel, the short class's sm_80 decode
    kernel, the combine kernel when the short class splits, and both classes' scheduler configs."""

    variants: heuristics.PairVariants
    sched: runtime.Kernel
    attn_long: runtime.Kernel
    attn_short: runtime.Kernel
    combine: runtime.Kernel | None
    cfg_long: metadata.SchedulerConfig
    cfg_short: metadata.SchedulerConfig

    def workspace(self, capacity: int, rows: int, num_heads_q: int, head_dim_v: int) -> FusedWorkspace:
        return short_class_workspace(capacity, rows, self.combine is not None, self.variants.short.max_splits,
                                     num_heads_q, head_dim_v, self.variants.short_max_q)


def load_pair(variants: heuristics.PairVariants, device: int, num_heads_q: int, num_heads_kv: int, *,
              sort: bool = True, head_swizzle: bool = True, window_left: int = -1) -> PairKernels:
    """Load the kernels of ``variants`` on ``device`` and derive both classes' scheduler configs
    (each kernel's own tile and grid; the long class unsplit, the short class with its split
    bound), as ``load`` does for the fused launch."""
    from ..front.api import scheduler_config

    lv, sv = variants.long, variants.short
    sched = runtime.get_kernel(sv.scheduler, device)
    attn_long = runtime.get_kernel(lv.attention, device)
    attn_short = runtime.get_kernel(sv.attention, device)
    combine = runtime.get_kernel(sv.combine, device) if sv.combine is not None else None
    cfg_long = scheduler_config(lv.attention, attn_long, num_heads_q, num_heads_kv, sort=sort,
                                head_swizzle=head_swizzle, max_splits=1, forced_splits=True, window_left=window_left)
    cfg_long = dataclasses.replace(cfg_long, class_min_q=variants.short_max_q + 1, class_max_q=2 ** 31 - 1)
    cfg_short = scheduler_config(sv.attention, attn_short, num_heads_q, num_heads_kv, sort=sort,
                                 head_swizzle=head_swizzle, max_splits=sv.max_splits, forced_splits=sv.forced_splits,
                                 window_left=window_left)
    cfg_short = dataclasses.replace(cfg_short, class_min_q=0, class_max_q=variants.short_max_q)
    return PairKernels(variants, sched, attn_long, attn_short, combine, cfg_long, cfg_short)


class PreparedPairCall(prepared.PreparedCall):
    """The five launches of one mixed-batch call signature on sm_90a (see ``build_pair``): both
    schedulers, the long class's Hopper kernel (with its tensor maps), the short class's decode
    kernel, the combine; the workspace as a fused call's."""

    def __init__(self, *, device, kernels: PairKernels, sched_long, sched_short, attn_long, attn_short, combine,
                 layout: FusedWorkspace, fixed_base, out_shape, lse_shape, dtype, sizes):
        super().__init__(device=device, sched=sched_long, attn=attn_long, combine=combine, layout=layout.short,
                         fixed_base=fixed_base, out_shape=out_shape, lse_shape=lse_shape, dtype=dtype, sizes=sizes,
                         config=kernels.cfg_long)
        self.kernels, self.layout, self.workspace_bytes = kernels, layout, layout.nbytes
        self.sched_long, self.sched_short = sched_long, sched_short
        self.attn_long, self.attn_short = attn_long, attn_short
        self._long_md = layout.long_metadata_offset

    def _launches(self) -> tuple:
        return (self.sched_long, self.sched_short, self.attn_long, self.attn_short, self.combine)

    def _pointer_sets(self, base, qp, kp, vp, op, lp, cq, ck, su, pt) -> tuple:
        md_s, md_l = base, base + self._long_md
        sched = ((cq, ck, su, md_l), (cq, ck, su, md_s))
        if self.combine is None:
            return sched + ((qp, kp, vp, op, lp, cq, ck, su, pt, md_l, 0, 0, 0),
                            (qp, kp, vp, op, lp, cq, ck, su, pt, md_s, 0, 0, 0))
        oa, la, rs = base + self._oa, base + self._la, base + self._rs
        return sched + ((qp, kp, vp, op, lp, cq, ck, su, pt, md_l, 0, 0, rs),
                        (qp, kp, vp, op, lp, cq, ck, su, pt, md_s, oa, la, rs),
                        (oa, la, rs, cq, md_s, op, lp))


def build_pair(kernels: PairKernels, *, layout: FusedWorkspace, batch: int, q, k, v, out, lse, page_table,
               scale: float, window: tuple, softcap: float, return_lse: bool, fixed_base: int | None,
               sizes: dict) -> PreparedPairCall:
    """Prepare the launches of a validated mixed call on sm_90a (as ``build``): both scheduler
    launches, the Hopper kernel (its tensor maps re-encoded when the pointers change), the decode
    kernel, the combine."""
    from ..front.api import hopper_maps

    cap = layout.capacity
    sched_long, sched_short = _scheduler_launches(kernels, batch, cap)
    strides = layout.short.split_strides()
    long_spec = kernels.variants.long.attention
    attn_long = prepared.TmaLaunch(kernels.attn_long.prepare(kernels.attn_long.persistent_grid, kernel_args.attention_fields(
        q, k, v, out, lse, page_table, cap, scale, window, softcap, None)),
        hopper_maps(long_spec, q, k, v, page_table is not None))
    attn_short = kernels.attn_short.prepare(kernels.attn_short.persistent_grid, kernel_args.attention_fields(
        q, k, v, out, lse, page_table, cap, scale, window, softcap, strides))
    hq = out.shape[1]
    combine = _combine_launch(kernels, out, lse, strides)
    return PreparedPairCall(device=q.device, kernels=kernels, sched_long=sched_long, sched_short=sched_short,
                            attn_long=attn_long, attn_short=attn_short, combine=combine, layout=layout,
                            fixed_base=fixed_base, out_shape=tuple(out.shape),
                            lse_shape=(hq, out.shape[0]) if return_lse else None, dtype=q.dtype, sizes=sizes)
