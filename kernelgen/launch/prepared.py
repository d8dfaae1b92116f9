"""A validated call signature turned into three prepared launches.

``build`` runs once per signature (``signature.py``), after validation and the variant choice:
it fixes the kernels, their launch shapes and every non-pointer parameter, and the workspace
layout.  ``PreparedCall.run`` is then all a repeated call does: read the data pointers, check the
16-byte alignment validation asks of q, k, v and out, allocate what the call owns (the output
when none is given, lse when asked for, the workspace unless the caller owns one) and enqueue the
scheduler, attention and (with split-KV) combine kernels.
"""
from __future__ import annotations

import ctypes
import struct
import threading
import warnings
from dataclasses import dataclass

import torch

from ..kernels import kernel_args, tma
from ..kernels.metadata import SchedulerConfig
from ..kernels.params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS, TMA_ATTENTION_PARAMS
from ..kernels.recipe import Variants
from ..kernels.workspace import WorkspaceLayout
from . import graph_launch, launch

_MAPS_BYTES = TMA_ATTENTION_PARAMS.MAPS_BYTES
_I64 = struct.Struct("<q")


def _stream_handle(device: int) -> int:
    return torch.cuda.current_stream(device).cuda_stream


#: PyTorch's current CUDA device index (the C getter ``torch.cuda.current_device`` wraps).
current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
#: The raw CUstream handle of PyTorch's current stream on a device.
current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _stream_handle
#: Whether PyTorch's current stream is capturing a CUDA graph.
is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


_RAW_ALLOC = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
_RAW_DELETE = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None)


def _raw_alloc_public(nbytes: int, stream: int) -> int:
    return torch.cuda.caching_allocator_alloc(nbytes, stream=stream)


#: ``raw_alloc(nbytes, stream) -> address``: device memory of the current device from PyTorch's
#: caching allocator, tied to the raw stream ``stream`` (reused in that stream's order once
#: returned with ``raw_delete(address)``, like a freed tensor's); the binding
#: ``torch.cuda.caching_allocator_alloc`` wraps, without the wrapper's device switch.
raw_alloc = _RAW_ALLOC if _RAW_ALLOC is not None and _RAW_DELETE is not None else _raw_alloc_public
raw_delete = _RAW_DELETE if raw_alloc is _RAW_ALLOC else torch.cuda.caching_allocator_delete


# run() passes pointers positionally in these orders: refuse to import if the ABI's order differs.
_POINTER_ORDER = {
    SCHEDULER_PARAMS: ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "metadata"),
    ATTENTION_PARAMS: ("q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table",
                       "metadata", "out_accum", "lse_accum", "row_splits"),
    COMBINE_PARAMS: ("out_accum", "lse_accum", "row_splits", "cu_seqlens_q", "metadata", "out", "lse"),
}
for _params, _order in _POINTER_ORDER.items():
    if _params.pointer_names != _order:
        raise ImportError(f"{_params.cname} pointer fields {_params.pointer_names} differ from PreparedCall.run's "
                          f"order {_order}")


class PreparedCall:
    """The launches of one call signature (see ``build``)."""

    #: the kernels apply the attention sinks themselves (``AttentionSpec.sinks``): no
    #: ``launch.sinks.apply`` after them; False for every other call (the rescale follows)
    sinks_fused: bool = False
    #: an FP8 q whose kernels take a 16-bit q (every kernel but the Hopper FP8 tensor-core variant,
    #: ``AttentionSpec.fp8_mma``): the dtype the caller converts q to before ``run``; None otherwise
    q_convert = None
    #: a 16-bit q the caller quantises before ``run`` (``launch.quant_q.quantize``'s (batch,
    #: num_heads_kv)), whose q_descale the Hopper launch finds past q (``TmaLaunch``); None otherwise
    q_quant = None
    #: with ``q_quant``: the loaded quantisation kernel ``quantize`` launches (None: its torch ops)
    q_quant_kernel = None

    def __init__(self, *, device: torch.device, sched, attn, combine, layout: WorkspaceLayout,
                 fixed_base: int | None, out_shape: tuple, lse_shape: tuple | None, dtype, sizes: dict, config=None):
        self.device, self.device_index = device, device.index
        self.sched, self.attn, self.combine = sched, attn, combine
        self.layout, self.fixed_base = layout, fixed_base
        self.workspace_bytes = layout.nbytes
        self._oa, self._la, self._rs = layout.out_accum_offset, layout.lse_accum_offset, layout.row_splits_offset
        self.out_shape, self.lse_shape, self.dtype = out_shape, lse_shape, dtype
        #: validation's sizes of the signature (total_q, batch, heads, ...) and the scheduler's config
        self.sizes, self.config = sizes, config
        self._tls = threading.local()

    def _launches(self) -> tuple:
        """The prepared launches of the call, in order (None for an absent combine)."""
        return (self.sched, self.attn, self.combine)

    #: the call's kernels read two q's: an e4m3 copy the caller quantised (``q``, the long class of
    #: the Hopper fused kernel with the FP8 tensor-core variant) and the 16-bit q itself (``run``'s
    #: ``q_short``, the short class): ``launch.fused.PreparedFusedCall``
    q_short = False

    def _pointer_sets(self, md, qp, kp, vp, op, lp, cq, ck, su, pt) -> tuple:
        """Each present launch's pointer parameters (its struct's pointer order), for a workspace
        at ``md``."""
        if self.combine is None:
            return ((cq, ck, su, md), (qp, kp, vp, op, lp, cq, ck, su, pt, md, 0, 0, 0))
        oa, la, rs = md + self._oa, md + self._la, md + self._rs
        return ((cq, ck, su, md), (qp, kp, vp, op, lp, cq, ck, su, pt, md, oa, la, rs),
                (oa, la, rs, cq, md, op, lp))

    def _thread_state(self):
        # First launch of this call in this thread (the device is current here): bind the device's
        # primary context to the thread, which driver-API calls need and a thread that made no
        # CUDA runtime call yet does not have.
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device_index)
        tls = self._tls
        tls.kernels = tuple(x for x in self._launches() if x is not None)
        tls.slots = tuple(x.new_slot() for x in tls.kernels)
        tls.graphs = {} if graph_launch.driver() is not None else None
        return tls.graphs

    def run(self, q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse, q_short=None):
        """Enqueue the call on PyTorch's current stream of the prepared device, made current for
        the launches if it is not.

        ``out``/``lse`` None: allocated here (lse only if the signature returns it).  ``q_short``:
        the 16-bit q whose e4m3 copy ``q`` is, for a call whose ``q_short`` is True (its short
        class reads it), else None.  Returns (out, lse), or None, with nothing enqueued or
        allocated, when q, q_short, k, v or out does not start at a 16-byte aligned address (the
        caller's validating path then raises).  Raises launch.LaunchError if the driver refuses a
        launch, ValueError when ``q_short`` is given to a call that does not read it or missing.
        """
        if (q_short is not None) != self.q_short:
            raise ValueError("q_short: the 16-bit q goes with a call whose kernels read two q's (and only there)")
        dev = self.device_index
        if current_device() != dev:
            with torch.cuda.device(dev):
                return self._enqueue(current_stream(dev), q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse,
                                     q_short)
        return self._enqueue(current_stream(dev), q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse, q_short)

    def _enqueue(self, stream, q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse, q_short=None):
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        op = 0 if out is None else out.data_ptr()
        qs = {} if q_short is None else {"qs": q_short.data_ptr()}
        if (qp | kp | vp | op | qs.get("qs", 0)) & 15:
            return None
        if out is None:
            out = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
            op = out.data_ptr()
        if lse is None and self.lse_shape is not None:
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
        lp = 0 if lse is None else lse.data_ptr()
        cq = cu_q.data_ptr()
        ck = 0 if cu_k is None else cu_k.data_ptr()
        su = 0 if seqused_k is None else seqused_k.data_ptr()
        pt = 0 if page_table is None else page_table.data_ptr()
        capturing = is_capturing()
        md = self.fixed_base
        if md is not None:
            self._launch(stream, capturing, self._pointer_sets(md, qp, kp, vp, op, lp, cq, ck, su, pt, **qs))
        elif capturing:
            # from the capture's memory pool; freed on return, reused in the graph's stream order
            ws = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=self.device)
            self._launch(stream, True, self._pointer_sets(ws.data_ptr(), qp, kp, vp, op, lp, cq, ck, su, pt, **qs))
        else:
            # the caching allocator's block, tied to this stream: freed on return, reused in stream order
            md = raw_alloc(self.workspace_bytes, stream)
            try:
                self._launch(stream, False, self._pointer_sets(md, qp, kp, vp, op, lp, cq, ck, su, pt, **qs))
            finally:
                raw_delete(md)
        return out, lse

    def _launch(self, stream, capturing: bool, sets: tuple) -> None:
        """Enqueue the launches with these pointer sets (``_pointer_sets``): outside capture, from
        a stream's second call on, one graph launch (``graph_launch.GraphCache`` of this thread and
        stream); else one cuLaunchKernel per kernel."""
        tls = self._tls
        try:
            graphs = tls.graphs
        except AttributeError:
            graphs = self._thread_state()
        if graphs is not None and not capturing and graph_launch.enabled():
            cache = graphs.get(stream)
            if cache is None and stream in graphs:     # the stream's second call: graphs from now on
                cache = graphs[stream] = graph_launch.GraphCache(graph_launch.driver(), tls.kernels, stream)
            if cache is not None:
                try:
                    cache.run(sets)
                    return
                except graph_launch.GraphBuildError as e:
                    tls.graphs = None                  # this thread stops trying for this call
                    # stacklevel 5: the caller of varlen_attention / AttentionPlan.run
                    warnings.warn(f"kernelgen: CUDA graph launch unavailable, launching kernels one by one ({e})",
                                  RuntimeWarning, stacklevel=5)
            else:                                      # first call on this stream: launch directly
                if graphs and len(graphs) >= graph_launch.MAX_STREAMS:
                    graphs.pop(next(iter(graphs)))
                graphs[stream] = None
        drv = launch._driver_launch or launch.driver_launch()
        for x, slot, ptrs in zip(tls.kernels, tls.slots, sets):
            slot[0](slot[1], 0, *ptrs)
            try:
                drv(*slot[2], stream, slot[3], 0)
            except Exception as e:  # noqa: BLE001 - whatever the binding raises, name the kernel
                raise launch.LaunchError(x.name, e) from e


class TmaLaunch:
    """The Hopper attention kernel's prepared launch: its parameter buffer starts with the three
    TMA tensor maps of the call's q, k and v (``tma.AttentionMaps``, re-encoded only when the
    pointers change, per thread), the pointers follow (``params.TMA_ATTENTION_PARAMS``).  Offers
    what ``PreparedCall`` and ``graph_launch`` use of a ``launch.PreparedLaunch`` (``name``,
    ``head``, ``new_slot``): a slot's ``pack`` writes the maps, then the pointers."""

    def __init__(self, inner: launch.PreparedLaunch, maps, q_descale_delta: int | None = None):
        self.inner, self.maps = inner, maps
        self.name, self.head, self.params = inner.name, inner.head, inner.params
        #: A q quantised by the call (``launch.quant_q``): its ``q_descale`` lies this many bytes
        #: past q's address in the same buffer, and each pack writes that address into the
        #: ``q_descale`` field (a per-call allocation, like q's); None: the field stays as prepared.
        self.q_descale_delta = q_descale_delta
        self._q_descale_at = None if q_descale_delta is None else inner.params.offset("q_descale")

    def new_slot(self) -> tuple:
        pack, buf, head, argv, keep = self.inner.new_slot()
        encode, name = self.maps.encode, self.name
        delta, at = self.q_descale_delta, self._q_descale_at

        def pack_with_maps(b, offset, qp, kp, vp, *rest):
            try:
                maps = encode(qp, kp, vp)
            except Exception as e:  # noqa: BLE001 - the driver's refusal names the kernel like a launch error
                raise launch.LaunchError(name, e, "cuTensorMapEncodeTiled") from e
            ctypes.memmove(b, maps, _MAPS_BYTES)
            pack(b, offset, qp, kp, vp, *rest)
            if delta is not None:
                _I64.pack_into(b, offset + at, qp + delta)
        return (pack_with_maps, buf, head, argv, keep)


def build(*, sched, attn, combine, cfg, layout: WorkspaceLayout, batch: int, q, k, v, out, lse, page_table,
          scale: float, window: tuple, softcap: float, return_lse: bool, fixed_base: int | None,
          sizes: dict, maps=None, alibi: tuple | None = None, sinks: int | None = None,
          user: tuple | None = None, descale: dict | None = None, q_descale_delta: int | None = None) -> PreparedCall:
    """Prepare the launches of a validated call whose tensors are ``q``, ``k``, ``v``, ``out``,
    ``lse`` and ``page_table`` (shapes and strides are read, pointers are not kept).

    ``sched``/``attn``/``combine`` are loaded ``jit.runtime.Kernel``s (combine None without split-KV),
    ``cfg`` the scheduler's ``metadata.SchedulerConfig``; the metadata describes ``batch``
    requests in ``layout.capacity`` slots.  ``fixed_base``: the address of a workspace the
    caller owns (AttentionPlan), None to allocate ``layout.nbytes`` per run.  ``return_lse``:
    runs allocate lse when none is given.  ``maps``: the ``tma.AttentionMaps`` of a Hopper
    attention kernel (its launch is then a ``TmaLaunch``, which writes them per call).  ``alibi``:
    (address, batch stride) of the ALiBi slopes, static fields of an ALiBi kernel.  ``sinks``: the
    address of the sinks of sink kernels (``AttentionSpec.sinks``; the call's ``sinks_fused``).
    ``user``: the addresses of a user variant's tensors (``AttentionSpec.variant``).  ``descale``:
    an FP8 kernel's descale fields (``kernel_args.descale_fields``; ``AttentionSpec.kv_dtype``).
    ``q_descale_delta``: a q the call quantises (``launch.quant_q``) into a per-call buffer whose
    ``q_descale`` lies that many bytes past q (``TmaLaunch.q_descale_delta``; Hopper only).  Raises
    ValueError past metadata.MAX_CAPACITY.
    """
    kernel_args.check_capacity(layout.capacity)
    threads, smem = kernel_args.scheduler_launch_shape(layout.capacity, sched.smem_bytes)
    strides = layout.split_strides()
    hq = out.shape[1]
    sched_launch = launch.prepare(sched, 1, kernel_args.scheduler_fields(batch, layout.capacity, cfg), smem=smem,
                                  threads=threads)
    attn_launch = launch.prepare(attn, attn.persistent_grid, kernel_args.attention_fields(
        q, k, v, out, lse, page_table, layout.capacity, scale, window, softcap, strides, alibi, sinks, user, descale))
    combine_launch = None
    if combine is not None:
        grid = kernel_args.combine_grid(out.shape[0], hq, combine.spec.rows_per_cta)
        combine_launch = launch.prepare(combine, grid, kernel_args.combine_fields(out, lse, hq, strides, sinks))
    kw = dict(device=q.device, sched=sched_launch, attn=attn_launch, combine=combine_launch, layout=layout,
              fixed_base=fixed_base, out_shape=tuple(out.shape), lse_shape=(hq, out.shape[0]) if return_lse else None,
              dtype=out.dtype, sizes=sizes, config=cfg)
    if maps is not None:
        kw["attn"] = TmaLaunch(attn_launch, maps, q_descale_delta)
    elif q_descale_delta is not None:
        raise ValueError("q_descale_delta: a quantised q is read by the Hopper kernel only")
    call = PreparedCall(**kw)
    call.sinks_fused = sinks is not None
    return call


@dataclass
class SingleKernels:
    """A single-class recipe's loaded kernels (``jit.runtime.Kernel``: scheduler, attention,
    combine or None without split-KV) and its scheduler config (``bind.bind``)."""

    variants: Variants
    sched: object
    attn: object
    combine: object
    config: SchedulerConfig

    @property
    def attn_spec(self):
        return self.variants.attention

    @property
    def sched_spec(self):
        return self.variants.scheduler

    @property
    def hopper(self) -> bool:
        """Whether the attention kernel is the Hopper (wgmma/TMA) one."""
        return self.variants.attention.mainloop == "sm90a"

    @property
    def map_spec(self):
        """The variant whose q/k/v TMA maps the launch writes (on the Hopper path)."""
        return self.variants.attention

    def prepare(self, *, layout: WorkspaceLayout, batch: int, q, k, v, out, lse, page_table, scale: float,
                window: tuple, softcap: float, return_lse: bool, fixed_base: int | None, sizes: dict,
                alibi: tuple | None = None, sinks: int | None = None, user: tuple | None = None,
                descale: dict | None = None, q_descale_delta: int | None = None) -> PreparedCall:
        """``build`` with these kernels and config (and the Hopper kernel's tensor maps)."""
        maps = tma.attention_maps(self.map_spec, q, k, v, page_table is not None) if self.hopper else None
        return build(sched=self.sched, attn=self.attn, combine=self.combine, cfg=self.config, layout=layout,
                     batch=batch, q=q, k=k, v=v, out=out, lse=lse, page_table=page_table, scale=scale, window=window,
                     softcap=softcap, return_lse=return_lse, fixed_base=fixed_base, sizes=sizes, maps=maps, alibi=alibi,
                     sinks=sinks, user=user, descale=descale, q_descale_delta=q_descale_delta)
