"""Public calls.

The path of one call, top to bottom: validate -> choose the variant (``heuristics.specs_for``) ->
get the kernels (``runtime.get_kernel``: render, compile or load from the disk cache, load on
the device) -> launch the scheduler kernel (writes the metadata buffer) -> launch the persistent
attention kernel.  Both launches go on PyTorch's current stream of the tensors' device; nothing
synchronises the host and every buffer comes from PyTorch's allocator, so the call can be
captured in a CUDA graph.
"""
from __future__ import annotations

import os

import torch

from . import heuristics, metadata, runtime, validation
from .params import ATTENTION_PARAMS, SCHEDULER_PARAMS

_LOG2E = 1.4426950408889634
_arch_cache: dict = {}


def device_arch(device: int) -> str:
    """Compile target of a CUDA device (e.g. 'sm_90a' on an H100/H200)."""
    a = _arch_cache.get(device)
    if a is None:
        a = _arch_cache[device] = heuristics.arch_for_capability(*runtime.device_properties(device)["cc"])
    return a


def _current_stream(device: int) -> int:
    get_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get_raw is not None:
        return get_raw(device)
    return torch.cuda.current_stream(device).cuda_stream


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    metadata_layout: str = "soa",
    sort: bool = True,
    head_swizzle: bool = True,
):
    """Attention over a ragged (varlen) batch of requests packed along the token dimension.

    Request ``i`` owns query rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` of ``q`` and key/value rows
    ``cu_seqlens_k[i]:cu_seqlens_k[i+1]`` of ``k``/``v``; query head ``h`` attends to KV head
    ``h // (num_heads_q // num_heads_kv)`` (GQA/MQA).

    Args:
        q: (total_q, num_heads_q, head_dim), float16 or bfloat16, CUDA, last dim contiguous.
        k: (total_k, num_heads_kv, head_dim), q's dtype and device.
        v: (total_k, num_heads_kv, head_dim_v), q's dtype and device.
        cu_seqlens_q: int32 (batch + 1,), cumulative query lengths in tokens, starting at 0.
        cu_seqlens_k: int32 (batch + 1,), cumulative key lengths in tokens, starting at 0.
        max_seqlen_q, max_seqlen_k: longest request lengths in tokens (ints; accepted for
            FlashAttention compatibility, kernels read the lengths from cu_seqlens on the GPU).
        causal: bottom-right aligned causal mask: query row r of a request sees key j iff
            ``j <= r + seqlen_k - seqlen_q`` (rows that see no key get out = 0, lse = -inf).
        softmax_scale: logit scale, default ``1 / sqrt(head_dim)``.
        return_lse: also return the log-sum-exp of the scaled logits.
        out: optional output tensor (total_q, num_heads_q, head_dim_v), q's dtype.
        metadata_layout: "soa" or "aos", the scheduler-metadata layout (see ``metadata.py``).
        sort: let the GPU scheduler order requests longest-first (ties by request index).
        head_swizzle: for causal masks, walk heads in sections sized to the device's L2 so tiles
            running together share K/V in L2.  ``sort`` and ``head_swizzle`` change only the
            order of work, never the result.

    Returns:
        out (total_q, num_heads_q, head_dim_v) in q's dtype; with ``return_lse`` also
        lse (num_heads_q, total_q) float32, natural log (FlashAttention-3's convention).
        Query rows past ``cu_seqlens_q[-1]`` are not written.

    Raises:
        TypeError: an argument has the wrong type or dtype (the message names it).
        ValueError: wrong shape, device, stride/alignment, head counts that do not divide,
            unsupported head dim (64, 96, 128, 192, 256), bad softmax_scale or metadata_layout.
        kernelgen.compiler.CompileError: NVRTC rejected a kernel (log and source path attached).

    The values of cu_seqlens are not read on the host (that would synchronise); set
    ``KERNELGEN_CHECK_INPUTS=1`` to check them (non-decreasing, within the tensors) at a sync.

    Algorithm: FlashAttention-2 tiling with an fp32 online softmax (Dao 2023; Milakov and
    Gimelshein 2018) in a persistent kernel fed by a GPU scheduler, after FlashAttention-3's
    varlen scheduler (Shah et al. 2024) with a capacity-sized metadata buffer.
    """
    sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out)
    scale = validation.softmax_scale(softmax_scale, sizes["head_dim"])
    layout = validation.layout(metadata_layout)
    if os.environ.get("KERNELGEN_CHECK_INPUTS") == "1":
        validation.check_cu_seqlens_values("cu_seqlens_q", cu_seqlens_q, sizes["total_q"])
        validation.check_cu_seqlens_values("cu_seqlens_k", cu_seqlens_k, sizes["total_k"])

    total_q, hq = sizes["total_q"], sizes["num_heads_q"]
    if out is None:
        out = torch.empty((total_q, hq, sizes["head_dim_v"]), dtype=q.dtype, device=q.device)
    lse = torch.empty((hq, total_q), dtype=torch.float32, device=q.device) if return_lse else None
    batch = sizes["batch"]
    if total_q == 0 or batch == 0:
        return (out, lse) if return_lse else out

    device = q.device.index
    flags = (bool(causal), layout, bool(sort), bool(head_swizzle))
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            _launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, sizes, scale, *flags)
    else:
        _launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, sizes, scale, *flags)
    return (out, lse) if return_lse else out


def scheduler_config(attn_spec, attn_kernel, num_heads_q: int, num_heads_kv: int, *, sort: bool = True,
                     head_swizzle: bool = True, max_splits: int = 1, forced_splits: bool = False):
    """The scheduler's run-time configuration for an attention kernel on its device.

    The head-swizzle budget is a sixth of the device's L2 (about 10 MB on an H200; FlashAttention-3
    uses a fixed 8 MiB on 50 MB parts), counted in K+V blocks of one head.
    """
    qpk = num_heads_q // num_heads_kv
    pack = attn_spec.pack_gqa
    budget = 0
    if head_swizzle:
        l2 = runtime.device_properties(attn_kernel.device)["l2_bytes"]
        elem = 2
        budget = max(1, (l2 // 6) // (attn_spec.tile.block_n * (attn_spec.head_dim + attn_spec.head_dim_v) * elem))
    return metadata.SchedulerConfig(
        num_heads=num_heads_kv if pack else num_heads_q,
        block_m=attn_spec.tile.block_m,
        block_n=attn_spec.tile.block_n,
        pack_factor=qpk if pack else 1,
        max_splits=max_splits,
        forced_splits=forced_splits,
        num_ctas=attn_kernel.persistent_grid,
        max_kvblocks_l2=budget,
        swizzle_mult=1 if pack else qpk,
        sort=sort,
    )


def _launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, sizes, scale, causal, layout, sort, head_swizzle):
    device = q.device.index
    arch = device_arch(device)
    dtype = validation.DTYPES[q.dtype]
    sched_spec, attn_spec = heuristics.specs_for(arch, dtype, sizes["head_dim"], sizes["head_dim_v"], causal, layout)
    sched = runtime.get_kernel(sched_spec, device)
    attn = runtime.get_kernel(attn_spec, device)

    capacity = sizes["batch"]
    md = torch.empty(metadata.buffer_ints(capacity), dtype=torch.int32, device=q.device)
    stream = _current_stream(device)
    cfg = scheduler_config(attn_spec, attn, sizes["num_heads_q"], sizes["num_heads_kv"], sort=sort,
                           head_swizzle=head_swizzle)
    launch_scheduler(sched, stream, cu_seqlens_q, cu_seqlens_k, None, md, sizes["batch"], capacity, cfg)
    attn.launch(attn.persistent_grid, stream, attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md,
                                                               capacity, scale))


def scheduler_launch_shape(capacity: int) -> tuple[int, int]:
    """(threads, dynamic shared memory bytes) of a scheduler launch for a capacity: one thread per
    request slot up to 1024 (at least a warp), and two 4-byte sort-key buffers."""
    cap4 = metadata.round_up(capacity, 4)
    n = 32
    while n < cap4:
        n <<= 1
    threads = min(n, 1024)
    return threads, 2 * 4 * max(n, threads)


def launch_scheduler(sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> None:
    """Launch the scheduler kernel: writes ``md`` (int32, metadata.buffer_ints(capacity)) for ``batch``."""
    if capacity > metadata.MAX_CAPACITY:
        raise ValueError(f"capacity {capacity} exceeds {metadata.MAX_CAPACITY} requests (the scheduler sorts the "
                         f"whole batch in one CTA)")
    threads, smem = scheduler_launch_shape(capacity)
    sched.launch(1, stream, scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg),
                 smem=smem, threads=threads)


def scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> bytes:
    """Packed SchedParams for one batch (``md`` is the int32 metadata buffer of ``capacity``)."""
    return SCHEDULER_PARAMS.pack({
        "cu_seqlens_q": cu_seqlens_q.data_ptr(),
        "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "metadata": md.data_ptr(), "batch": batch, "capacity": capacity, "num_heads": cfg.num_heads,
        "block_m": cfg.block_m, "block_n": cfg.block_n, "pack_factor": cfg.pack_factor,
        "max_splits": cfg.max_splits, "forced_splits": int(cfg.forced_splits), "num_ctas": cfg.num_ctas,
        "max_kvblocks_l2": cfg.max_kvblocks_l2, "swizzle_mult": cfg.swizzle_mult, "sort": int(cfg.sort),
    })


def attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, capacity, scale) -> bytes:
    """Packed AttnParams (strides in elements; ``scale`` is softmax_scale, folded with log2(e))."""
    return ATTENTION_PARAMS.pack({
        "q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "out": out.data_ptr(),
        "lse": lse.data_ptr() if lse is not None else 0,
        "cu_seqlens_q": cu_seqlens_q.data_ptr(), "cu_seqlens_k": cu_seqlens_k.data_ptr(), "metadata": md.data_ptr(),
        "q_row_stride": q.stride(0), "q_head_stride": q.stride(1),
        "k_row_stride": k.stride(0), "k_head_stride": k.stride(1),
        "v_row_stride": v.stride(0), "v_head_stride": v.stride(1),
        "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
        "lse_head_stride": lse.stride(0) if lse is not None else 0,
        "num_heads_q": q.shape[1], "num_heads_kv": k.shape[1], "capacity": capacity,
        "scale_log2": scale * _LOG2E,
    })
