"""The fused launch of a mixed batch: long-query and short-query requests in one persistent kernel.

A call whose batch may mix prefill chunks and decodes runs, on the current stream:

1. the scheduler kernel twice, once per request class (``metadata.SchedulerConfig.class_min_q`` /
   ``class_max_q``): requests with at most ``short_max_q`` query tokens are *short* and get
   one-warp decode tiles (pack-GQA, split-KV), the others *long* and get prefill tiles (128 rows;
   64 on the sm_80 kernel compiled for sm_90a with a soft-cap, where the 128-row one spills);
   each class has its own metadata buffer, so its own tile queue;
2. the fused attention kernel (``FusedAttentionSpec``), whose CTAs take tiles from both queues:
   templates/attention/fwd_fused_sm80.cu.j2 (its parameter: one AttnParams per class), or on
   sm_90a fwd_fused_sm90.cu.j2 (the long class on the Hopper variant, the short class's tiles on
   the SMs of the CTAs that start on the short queue, ``FusedKernels.short_ctas``; its parameter:
   ``params.FUSED_TMA_PARAMS``, written by ``HopperPairLaunch``);
3. with split-KV in the short class, the combine kernel (long rows record one partial and are
   skipped).

``FusedKernels`` is a fused recipe's kernels bound to its scheduler configs (``bind``), what a
plan or a call signature keeps; ``build`` (its ``prepare``) turns it and a validated call into a
``PreparedFusedCall`` whose ``run`` reads the data pointers, allocates the workspace unless the
caller owns one, and enqueues the four launches.  ``PairKernels`` / ``build_pair`` do the same for
the two classes in turn (sm_90a where the Hopper fused kernel does not apply).  The
co-scheduling of prefill and decode work in one launch follows PoD-Attention (Kamath et al.
2024); the per-kind queues and one-warp decode tiles are kernelgen's.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..kernels import kernel_args, tma
from ..kernels.metadata import SchedulerConfig
from ..kernels.params import ATTENTION_PARAMS, FUSED_TMA_PARAMS, FUSED_TMA_PARAMS_FP8, fused_params_for
from ..kernels.recipe import FusedVariants, PairVariants
from ..kernels.workspace import FusedWorkspace
from . import launch, prepared


@dataclass
class FusedKernels:
    """A fused recipe's loaded kernels (``jit.runtime.Kernel``: scheduler, fused attention kernel,
    combine or None) and both request classes' scheduler configs (see the module doc)."""

    variants: FusedVariants
    sched: object
    fused: object
    combine: object
    cfg_long: SchedulerConfig
    cfg_short: SchedulerConfig
    #: Hopper fused kernel: CTAs that start on the short queue (``heuristics.sm90_mixed_short_ctas``).
    short_ctas: int = 0

    @property
    def attn(self):
        """The kernel that runs the attention tiles: the fused kernel."""
        return self.fused

    @property
    def config(self) -> SchedulerConfig:
        """The long class's scheduler config (the short class's: ``cfg_short``)."""
        return self.cfg_long

    @property
    def attn_spec(self):
        return self.variants.fused

    @property
    def sched_spec(self):
        return self.variants.scheduler

    @property
    def hopper(self) -> bool:
        """Whether the long class runs the Hopper (wgmma/TMA) variant."""
        return self.variants.fused.hopper

    @property
    def map_spec(self):
        """The variant whose q/k/v TMA maps the launch writes (the long class's)."""
        return self.variants.fused.long

    def prepare(self, **call) -> "PreparedFusedCall":
        """``build(self, **call)``."""
        return build(self, **call)


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


class PairLaunch:
    """A prepared launch of the fused kernel: two AttnParams back to back (long, short), each
    packed once; a launch writes both structs' pointer fields (``launch.PreparedLaunch``'s
    scheme for a struct pair)."""

    def __init__(self, kernel, static_long: dict, static_short: dict):
        self.name = kernel.spec.name
        self.struct = st = fused_params_for(kernel.spec)   # (ATTENTION_PARAMS, or its FP8 form)
        self.template = st.pack_static(static_long) + st.pack_static(static_short)
        self.head = (int(kernel.func_ptr), kernel.persistent_grid, 1, 1, kernel.num_threads, 1, 1, kernel.smem_bytes)

    def new_slot(self) -> tuple:
        """(pack, buffer, head, kernelParams address, keep-alive): ``pack(buffer, 0, *long_pointers,
        *short_pointers)`` (13 each, ATTENTION_PARAMS.pointer_names order), as
        ``launch.PreparedLaunch.new_slot``'s."""
        buf = ctypes.create_string_buffer(self.template, len(self.template))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        ps, size, n = self.struct.pointer_struct, self.struct.size, len(ATTENTION_PARAMS.pointer_names)

        def pack(b, offset, *ptrs):
            ps.pack_into(b, 0, *ptrs[:n])
            ps.pack_into(b, size, *ptrs[n:])
        return (pack, buf, self.head, ctypes.addressof(argv), argv)


class HopperPairLaunch:
    """A prepared launch of the Hopper fused kernel (``params.FUSED_TMA_PARAMS``): the long
    class's tensor maps and AttnParams, the short class's AttnParams, ``short_ctas``; a launch
    encodes the maps of its q/k/v pointers (``tma.AttentionMaps``, cached per pointer set) and
    writes both structs' pointer fields, as ``prepared.TmaLaunch`` and ``PairLaunch`` do."""

    def __init__(self, kernel, static_long: dict, static_short: dict, maps, short_ctas: int,
                 q_descale_delta: int | None = None):
        self.name, self.maps, self.short_ctas = kernel.spec.name, maps, int(short_ctas)
        self.struct = fused_params_for(kernel.spec)   # (FUSED_TMA_PARAMS, or its FP8 form)
        self.template = self.struct.pack_static(static_long, static_short, short_ctas)
        self.head = (int(kernel.func_ptr), kernel.persistent_grid, 1, 1, kernel.num_threads, 1, 1, kernel.smem_bytes)
        #: A long class on a q the call quantised (``launch.quant_q``; the FP8 tensor-core variant): its
        #: ``q_descale`` lies this many bytes past that q in the same buffer, and each pack writes that
        #: address into the long struct's ``q_descale`` field (``prepared.TmaLaunch``'s scheme); None:
        #: the field stays as prepared.
        self.q_descale_delta = q_descale_delta
        self._q_descale_at = None if q_descale_delta is None else self.struct.tma.offset("q_descale")

    def new_slot(self) -> tuple:
        """(pack, buffer, head, kernelParams address, keep-alive) as ``PairLaunch.new_slot``'s;
        ``pack`` also writes the tensor maps of the long pointers' q, k, v."""
        buf = ctypes.create_string_buffer(self.template, len(self.template))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        n = len(ATTENTION_PARAMS.pointer_names)
        long_ptrs, short_ptrs = self.struct.long_pointers, self.struct.short_pointers
        encode, name, nbytes = self.maps.encode, self.name, self.struct.MAPS_BYTES
        delta, at = self.q_descale_delta, self._q_descale_at

        def pack(b, offset, *ptrs):
            try:
                maps = encode(ptrs[0], ptrs[1], ptrs[2])
            except Exception as e:  # noqa: BLE001 - the driver's refusal names the kernel like a launch error
                raise launch.LaunchError(name, e, "cuTensorMapEncodeTiled") from e
            ctypes.memmove(b, maps, nbytes)
            long_ptrs.pack_into(b, 0, *ptrs[:n])
            short_ptrs.pack_into(b, 0, *ptrs[n:])
            if delta is not None:
                prepared._I64.pack_into(b, at, ptrs[0] + delta)
        return (pack, buf, self.head, ctypes.addressof(argv), argv)


def hopper_params(long_packed: bytes, short_packed: bytes, short_ctas: int, fp8: bool = False) -> bytes:
    """The Hopper fused kernel's parameter from the long class's packed ``TmaAttnParams`` (maps
    first) and the short class's packed ``AttnParams`` (``oneoff.attention_params``); ``fp8``: both
    with the descale fields (``params.FUSED_TMA_PARAMS_FP8``)."""
    st = FUSED_TMA_PARAMS_FP8 if fp8 else FUSED_TMA_PARAMS
    if len(long_packed) != st.short_offset or len(short_packed) != st.inner.size:
        raise ValueError("hopper_params takes a packed TmaAttnParams and a packed AttnParams"
                         + (" (both with the FP8 descale fields)" if fp8 else ""))
    return long_packed + short_packed + st.tail.pack(int(short_ctas), 0)


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

    def _pointer_sets(self, base, qp, kp, vp, op, lp, cq, ck, su, pt, qs=None) -> tuple:
        """As ``PreparedCall._pointer_sets``; ``qs``: the short class's q (the 16-bit q of a call
        whose long class reads its e4m3 copy ``qp``: ``q_short``), else ``qp``."""
        md_s, md_l = base, base + self._long_md
        qs = qp if qs is None else qs
        sched = ((cq, ck, su, md_l), (cq, ck, su, md_s))
        if self.combine is None:
            return sched + ((qp, kp, vp, op, lp, cq, ck, su, pt, md_l, 0, 0, 0,
                             qs, kp, vp, op, lp, cq, ck, su, pt, md_s, 0, 0, 0),)
        oa, la, rs = base + self._oa, base + self._la, base + self._rs
        return sched + ((qp, kp, vp, op, lp, cq, ck, su, pt, md_l, 0, 0, rs,
                         qs, kp, vp, op, lp, cq, ck, su, pt, md_s, oa, la, rs),
                        (oa, la, rs, cq, md_s, op, lp))


def _combine_launch(kernels, out, lse, strides: dict):
    """The prepared combine launch of a mixed call (None when its short class does not split)."""
    if kernels.combine is None:
        return None
    grid = kernel_args.combine_grid(out.shape[0], out.shape[1], kernels.combine.spec.rows_per_cta)
    return launch.prepare(kernels.combine, grid, kernel_args.combine_fields(out, lse, out.shape[1], strides))


def _scheduler_launches(kernels, batch: int, cap: int) -> tuple:
    """The two classes' prepared scheduler launches (long, short) of a mixed call."""
    kernel_args.check_capacity(cap)
    threads, smem = kernel_args.scheduler_launch_shape(cap, kernels.sched.smem_bytes)
    return tuple(launch.prepare(kernels.sched, 1, kernel_args.scheduler_fields(batch, cap, cfg), smem=smem,
                                threads=threads) for cfg in (kernels.cfg_long, kernels.cfg_short))


def build(kernels: FusedKernels, *, layout: FusedWorkspace, batch: int, q, k, v, out, lse, page_table, scale: float,
          window: tuple, softcap: float, return_lse: bool, fixed_base: int | None, sizes: dict,
          alibi: tuple | None = None, user: tuple | None = None, descale: dict | None = None,
          q_short=None, q_descale_delta: int | None = None) -> PreparedFusedCall:
    """Prepare the launches of a validated fused call (as ``prepared.build``): both scheduler
    launches (the two classes' configs), the fused kernel's two parameter structs, the combine.
    The fused kernels have no ALiBi variant (``alibi`` must be None).  ``descale``: both classes'
    descale fields on an FP8 cache (``kernel_args.descale_fields``; either fused kernel).

    ``q_short``: a Hopper fused kernel whose long class runs the FP8 tensor-core variant
    (``AttentionSpec.fp8_mma``) on ``q``, an e4m3 copy the call quantised (``launch.quant_q``) of
    the 16-bit ``q_short``, which the short class reads (its strides here; its factor 1: the short
    class's ``q_descale`` fields are zeroed); ``q_descale_delta``: where that copy's ``q_descale``
    lies past it (bytes; ``HopperPairLaunch``).  The prepared call's ``run`` then takes the 16-bit q
    as ``q_short`` beside the copy.  Raises ValueError for a ``q_short`` without such a long class."""
    if alibi is not None:
        raise ValueError("the fused kernels take no ALiBi slopes (the decider runs such batches otherwise)")
    if user is not None:
        raise ValueError("the fused kernels take no user variant (the decider runs such batches otherwise)")
    f = kernels.variants.fused
    if (q_short is not None) != f.long.fp8_mma:
        raise ValueError("q_short: the 16-bit q of a fused call goes with (and only with) a long class on the FP8 "
                         "tensor-core variant (its e4m3 copy in q)")
    cap = layout.capacity
    sched_long, sched_short = _scheduler_launches(kernels, batch, cap)
    strides = layout.short.split_strides()
    static_long = kernel_args.attention_fields(q, k, v, out, lse, page_table, cap, scale, window, softcap, None,
                                               descale=descale)
    descale_short = descale if q_short is None else kernel_args.without_q_descale(descale)
    static_short = kernel_args.attention_fields(q if q_short is None else q_short, k, v, out, lse, page_table, cap,
                                                scale, window, softcap, strides, descale=descale_short)
    if f.hopper:
        pair = HopperPairLaunch(kernels.fused, static_long, static_short,
                                tma.attention_maps(f.long, q, k, v, page_table is not None), kernels.short_ctas,
                                q_descale_delta)
    else:
        pair = PairLaunch(kernels.fused, static_long, static_short)
    hq = out.shape[1]
    combine = _combine_launch(kernels, out, lse, strides)
    call = PreparedFusedCall(device=q.device, kernels=kernels, sched_long=sched_long, sched_short=sched_short,
                             pair=pair, combine=combine, layout=layout, fixed_base=fixed_base,
                             out_shape=tuple(out.shape), lse_shape=(hq, out.shape[0]) if return_lse else None,
                             dtype=out.dtype, sizes=sizes)
    call.q_short = q_short is not None
    return call


# ---------------------------- sm_90a: the classes in turn (where the Hopper fused kernel does not apply)
@dataclass
class PairKernels:
    """A pair recipe's loaded kernels (``jit.runtime.Kernel``): the scheduler (launched once per
    class), the long class's Hopper kernel, the short class's sm_80 decode kernel, the combine
    kernel when the short class splits (else None), and both classes' scheduler configs."""

    variants: PairVariants
    sched: object
    attn_long: object
    attn_short: object
    combine: object
    cfg_long: SchedulerConfig
    cfg_short: SchedulerConfig

    @property
    def attn(self):
        """The long class's (Hopper) attention kernel."""
        return self.attn_long

    @property
    def config(self) -> SchedulerConfig:
        """The long class's scheduler config (the short class's: ``cfg_short``)."""
        return self.cfg_long

    @property
    def attn_spec(self):
        return self.variants.long.attention

    @property
    def sched_spec(self):
        return self.variants.long.scheduler

    @property
    def hopper(self) -> bool:
        """Always: the long class runs the Hopper kernel."""
        return True

    @property
    def map_spec(self):
        """The variant whose q/k/v TMA maps the launch writes (the long class's)."""
        return self.variants.long.attention

    def prepare(self, **call) -> "PreparedPairCall":
        """``build_pair(self, **call)``."""
        return build_pair(self, **call)


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
               sizes: dict, alibi: tuple | None = None, user: tuple | None = None,
               descale: dict | None = None) -> PreparedPairCall:
    """Prepare the launches of a validated mixed call on sm_90a (as ``build``): both scheduler
    launches, the Hopper kernel (its tensor maps re-encoded when the pointers change), the decode
    kernel, the combine.  ``descale``: both FP8 kernels' descale fields (``kernel_args.descale_fields``)."""
    cap = layout.capacity
    sched_long, sched_short = _scheduler_launches(kernels, batch, cap)
    strides = layout.short.split_strides()
    long_spec = kernels.variants.long.attention
    attn_long = prepared.TmaLaunch(launch.prepare(kernels.attn_long, kernels.attn_long.persistent_grid,
                                                  kernel_args.attention_fields(q, k, v, out, lse, page_table, cap,
                                                                               scale, window, softcap, None, alibi,
                                                                               user=user, descale=descale)),
                                   tma.attention_maps(long_spec, q, k, v, page_table is not None))
    attn_short = launch.prepare(kernels.attn_short, kernels.attn_short.persistent_grid, kernel_args.attention_fields(
        q, k, v, out, lse, page_table, cap, scale, window, softcap, strides, alibi, user=user, descale=descale))
    hq = out.shape[1]
    combine = _combine_launch(kernels, out, lse, strides)
    return PreparedPairCall(device=q.device, kernels=kernels, sched_long=sched_long, sched_short=sched_short,
                            attn_long=attn_long, attn_short=attn_short, combine=combine, layout=layout,
                            fixed_base=fixed_base, out_shape=tuple(out.shape),
                            lse_shape=(hq, out.shape[0]) if return_lse else None, dtype=q.dtype, sizes=sizes)
