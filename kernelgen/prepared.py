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
import threading

import torch

from . import kernel_args, launch
from .params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS, TMA_ATTENTION_PARAMS
from .workspace import WorkspaceLayout

_MAPS_BYTES = TMA_ATTENTION_PARAMS.MAPS_BYTES


def _stream_handle(device: int) -> int:
    return torch.cuda.current_stream(device).cuda_stream


#: PyTorch's current CUDA device index (the C getter ``torch.cuda.current_device`` wraps).
current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
#: The raw CUstream handle of PyTorch's current stream on a device.
current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _stream_handle


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

    def _new_slots(self):
        # First launch of this call in this thread (the device is current here): bind the device's
        # primary context to the thread, which driver-API launches need and a thread that made no
        # CUDA runtime call yet does not have.
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device_index)
        slots = self._tls.slots = tuple(x.new_slot() if x is not None else None for x in self._launches())
        return slots

    def run(self, q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse):
        """Enqueue the call on PyTorch's current stream of the prepared device, made current for
        the launches if it is not.

        ``out``/``lse`` None: allocated here (lse only if the signature returns it).  Returns
        (out, lse), or None, with nothing enqueued or allocated, when q, k, v or out does not
        start at a 16-byte aligned address (the caller's validating path then raises).
        Raises launch.LaunchError if the driver refuses a launch.
        """
        dev = self.device_index
        if current_device() != dev:
            with torch.cuda.device(dev):
                return self._enqueue(current_stream(dev), q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse)
        return self._enqueue(current_stream(dev), q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse)

    def _enqueue(self, stream, q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse):
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        op = 0 if out is None else out.data_ptr()
        if (qp | kp | vp | op) & 15:
            return None
        if out is None:
            out = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
            op = out.data_ptr()
        if lse is None and self.lse_shape is not None:
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
        lp = 0 if lse is None else lse.data_ptr()
        md = self.fixed_base
        if md is None:
            # freed on return: the caching allocator reuses it in stream order, after these kernels
            ws = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=self.device)
            md = ws.data_ptr()
        cq = cu_q.data_ptr()
        ck = 0 if cu_k is None else cu_k.data_ptr()
        su = 0 if seqused_k is None else seqused_k.data_ptr()
        pt = 0 if page_table is None else page_table.data_ptr()
        self._launch(stream, md, qp, kp, vp, op, lp, cq, ck, su, pt)
        return out, lse

    def _launch(self, stream, md, qp, kp, vp, op, lp, cq, ck, su, pt):
        """The three launches, unrolled (launch.PreparedLaunch.launch without its per-call
        overhead); ``md`` is the workspace's address."""
        try:
            sched, attn, combine = self._tls.slots
        except AttributeError:
            sched, attn, combine = self._new_slots()
        drv = launch._driver_launch or launch.driver_launch()
        kernel = self.sched
        try:
            sched[0](sched[1], 0, cq, ck, su, md)
            drv(*sched[2], stream, sched[3], 0)
            kernel = self.attn
            if combine is None:
                attn[0](attn[1], 0, qp, kp, vp, op, lp, cq, ck, su, pt, md, 0, 0, 0)
                drv(*attn[2], stream, attn[3], 0)
            else:
                oa, la, rs = md + self._oa, md + self._la, md + self._rs
                attn[0](attn[1], 0, qp, kp, vp, op, lp, cq, ck, su, pt, md, oa, la, rs)
                drv(*attn[2], stream, attn[3], 0)
                kernel = self.combine
                combine[0](combine[1], 0, oa, la, rs, cq, md, op, lp)
                drv(*combine[2], stream, combine[3], 0)
        except Exception as e:  # noqa: BLE001 - whatever the binding raises, name the kernel
            raise launch.LaunchError(kernel.name, e) from e


class TmaPreparedCall(PreparedCall):
    """A prepared call of the Hopper attention kernel: before the launches, the three TMA tensor
    maps of the call's q, k and v (``tma.AttentionMaps``: re-encoded only when the pointers
    change, per thread) are written into the attention launch's parameter buffer, ahead of the
    pointers (``params.TMA_ATTENTION_PARAMS``)."""

    def __init__(self, *, maps, **kw):
        super().__init__(**kw)
        self.maps = maps

    def _launch(self, stream, md, qp, kp, vp, op, lp, cq, ck, su, pt):
        try:
            slot = self._tls.slots[1]
        except AttributeError:
            slot = self._new_slots()[1]
        try:
            ctypes.memmove(slot[1], self.maps.encode(qp, kp, vp), _MAPS_BYTES)
        except Exception as e:  # noqa: BLE001 - the driver's refusal names the kernel like a launch error
            raise launch.LaunchError(self.attn.name, e) from e
        super()._launch(stream, md, qp, kp, vp, op, lp, cq, ck, su, pt)


def build(*, sched, attn, combine, cfg, layout: WorkspaceLayout, batch: int, q, k, v, out, lse, page_table,
          scale: float, window: tuple, softcap: float, return_lse: bool, fixed_base: int | None,
          sizes: dict, maps=None) -> PreparedCall:
    """Prepare the launches of a validated call whose tensors are ``q``, ``k``, ``v``, ``out``,
    ``lse`` and ``page_table`` (shapes and strides are read, pointers are not kept).

    ``sched``/``attn``/``combine`` are loaded ``runtime.Kernel``s (combine None without split-KV),
    ``cfg`` the scheduler's ``metadata.SchedulerConfig``; the metadata describes ``batch``
    requests in ``layout.capacity`` slots.  ``fixed_base``: the address of a workspace the
    caller owns (AttentionPlan), None to allocate ``layout.nbytes`` per run.  ``return_lse``:
    runs allocate lse when none is given.  ``maps``: the ``tma.AttentionMaps`` of a Hopper
    attention kernel (a ``TmaPreparedCall`` then writes them per call).  Raises ValueError past
    metadata.MAX_CAPACITY.
    """
    kernel_args.check_capacity(layout.capacity)
    threads, smem = kernel_args.scheduler_launch_shape(layout.capacity, sched.smem_bytes)
    strides = layout.split_strides()
    hq = out.shape[1]
    sched_launch = sched.prepare(1, kernel_args.scheduler_fields(batch, layout.capacity, cfg), smem=smem,
                                 threads=threads)
    attn_launch = attn.prepare(attn.persistent_grid, kernel_args.attention_fields(
        q, k, v, out, lse, page_table, layout.capacity, scale, window, softcap, strides))
    combine_launch = None
    if combine is not None:
        grid = kernel_args.combine_grid(out.shape[0], hq, combine.spec.rows_per_cta)
        combine_launch = combine.prepare(grid, kernel_args.combine_fields(out, lse, hq, strides))
    kw = dict(device=q.device, sched=sched_launch, attn=attn_launch, combine=combine_launch, layout=layout,
              fixed_base=fixed_base, out_shape=tuple(out.shape), lse_shape=(hq, out.shape[0]) if return_lse else None,
              dtype=q.dtype, sizes=sizes, config=cfg)
    return PreparedCall(**kw) if maps is None else TmaPreparedCall(maps=maps, **kw)
