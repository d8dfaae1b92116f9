"""Public calls.

The path of one call, top to bottom: validate -> choose the variants (``heuristics.choose``) ->
get the kernels (``runtime.get_kernel``: render, compile or load from the disk cache, load on the
device) -> launch the scheduler kernel (writes the metadata buffer) -> launch the persistent
attention kernel -> with split-KV, launch the combine kernel.  All launches go on PyTorch's
current stream of the tensors' device; nothing synchronises the host and every buffer comes from
PyTorch's allocator, so the call can be captured in a CUDA graph.
"""
from __future__ import annotations

import math
import os

import torch

from . import heuristics, metadata, runtime, validation
from .params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS

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
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    *,
    seqused_k: torch.Tensor | None = None,
    page_table: torch.Tensor | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    softmax_scale: float | None = None,
    num_splits: int = 0,
    pack_gqa: bool | None = None,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    metadata_layout: str = "soa",
    sort: bool = True,
    head_swizzle: bool = True,
):
    """Attention over a ragged (varlen) batch of requests, prefill and decode alike.

    Request ``i`` owns query rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` of ``q``.  Its keys are
    rows ``cu_seqlens_k[i]:cu_seqlens_k[i+1]`` of a packed ``k``/``v`` (the first ``seqused_k[i]``
    of them when ``seqused_k`` is given), or, with ``page_table``, the first ``seqused_k[i]``
    tokens of a paged cache: token ``j`` lives at ``k[page_table[i, j // page_size], j % page_size]``.
    Query head ``h`` attends to KV head ``h // (num_heads_q // num_heads_kv)`` (GQA/MQA).

    Args:
        q: (total_q, num_heads_q, head_dim), float16 or bfloat16, CUDA, last dim contiguous.
        k: packed (total_k, num_heads_kv, head_dim) or paged (num_pages, page_size, num_heads_kv,
            head_dim), q's dtype and device; any strides with a contiguous last dim.
        v: like k with head_dim_v (64, 96, 128, 192 or 256) as the last dim.
        cu_seqlens_q: int32 (batch + 1,), cumulative query lengths in tokens, starting at 0.
        cu_seqlens_k: int32 (batch + 1,), cumulative key lengths (packed k/v only).
        max_seqlen_q, max_seqlen_k: longest request lengths in tokens, used only to choose tiles,
            pack-GQA and the split bound (kernels read lengths on the GPU).  None: assume
            total_q (resp. the cache's capacity); pass them for decode speed.
        seqused_k: int32 (batch,), keys used per request (required with page_table).
        page_table: int32 (batch, max_pages_per_seq), page ids of each request's cache pages.
        causal: bottom-right aligned causal mask: query row r of a request sees key j iff
            ``j <= r + seqlen_k - seqlen_q``.
        window_size: (left, right) sliding window around that diagonal (-1 = unbounded).
        softcap: > 0 caps logits as ``softcap * tanh(logit / softcap)`` (0 = off).
        softmax_scale: logit scale, default ``1 / sqrt(head_dim)``.
        num_splits: split-KV: 0 lets the GPU scheduler decide per request, n > 0 forces n
            (capped by each request's key blocks).
        pack_gqa: put the query heads of one KV head in one tile (K/V read once per KV head);
            None decides by heuristic (on for decode-like batches).
        return_lse: also return the log-sum-exp of the scaled logits.
        out: optional output tensor (total_q, num_heads_q, head_dim_v), q's dtype.
        metadata_layout: "soa" or "aos", the scheduler-metadata layout (see ``metadata.py``).
        sort: let the GPU scheduler order requests longest-first (ties by request index).
        head_swizzle: for causal/local masks, walk heads in sections sized to the device's L2 so
            tiles running together share K/V in L2.  ``sort`` and ``head_swizzle`` change only
            the order of work, never the result.

    Returns:
        out (total_q, num_heads_q, head_dim_v) in q's dtype; with ``return_lse`` also
        lse (num_heads_q, total_q) float32, natural log (FlashAttention-3's convention).  A row
        that sees no key gets out = 0 and lse = -inf.  Query rows past ``cu_seqlens_q[-1]`` are
        not written.

    Raises:
        TypeError: an argument has the wrong type or dtype (the message names it).
        ValueError: wrong shape, device, stride/alignment, head counts that do not divide,
            unsupported head dim, bad window/softcap/num_splits/softmax_scale/layout, paged
            arguments missing or inconsistent, or more than 8192 requests.
        kernelgen.compiler.CompileError: NVRTC rejected a kernel (log and source path attached).

    The values of cu_seqlens, seqused_k and page_table are not read on the host (that would
    synchronise): ``KERNELGEN_CHECK_INPUTS=1`` checks them (ordering, page ids inside the cache,
    page_table wide enough, seqused_k within each request's keys) at the cost of a sync.  Offsets are 64-bit, so caches past 2^31
    elements are addressed correctly.

    Algorithm: FlashAttention-2 tiling with an fp32 online softmax (Dao 2023; Milakov and
    Gimelshein 2018) in a persistent kernel fed by a GPU scheduler after FlashAttention-3's varlen
    scheduler (Shah et al. 2024, with a capacity-sized metadata buffer), split-KV after
    FlashDecoding (Dao et al. 2023).
    """
    sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out,
                                     seqused_k=seqused_k, page_table=page_table)
    scale = validation.softmax_scale(softmax_scale, sizes["head_dim"])
    layout = validation.layout(metadata_layout)
    mask, left, right = validation.window(window_size, bool(causal))
    cap = validation.softcap(softcap)
    splits = validation.num_splits(num_splits)
    if pack_gqa is not None and not isinstance(pack_gqa, bool):
        raise TypeError(f"pack_gqa must be None or a bool, got {type(pack_gqa).__name__}")
    if os.environ.get("KERNELGEN_CHECK_INPUTS") == "1":
        validation.check_cu_seqlens_values("cu_seqlens_q", cu_seqlens_q, sizes["total_q"])
        if cu_seqlens_k is not None:
            validation.check_cu_seqlens_values("cu_seqlens_k", cu_seqlens_k, sizes["total_k"])
        if page_table is not None:
            validation.check_paged_values(page_table, seqused_k, sizes["num_pages"], sizes["page_size"])
        elif seqused_k is not None:
            validation.check_seqused_values(seqused_k, cu_seqlens_k)

    total_q, hq = sizes["total_q"], sizes["num_heads_q"]
    if out is None:
        out = torch.empty((total_q, hq, sizes["head_dim_v"]), dtype=q.dtype, device=q.device)
    lse = torch.empty((hq, total_q), dtype=torch.float32, device=q.device) if return_lse else None
    batch = sizes["batch"]
    if total_q == 0 or batch == 0:
        return (out, lse) if return_lse else out
    if batch > metadata.MAX_CAPACITY:
        raise ValueError(f"cu_seqlens_q describes {batch} requests; at most {metadata.MAX_CAPACITY} per call")

    if max_seqlen_q is None:
        max_seqlen_q = total_q
    if max_seqlen_k is None:
        max_seqlen_k = sizes["max_pages"] * sizes["page_size"] if sizes["paged"] else sizes["total_k"]
    device = q.device.index
    call = _Call(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, sizes, scale, mask, left, right,
                 cap, splits, pack_gqa, layout, bool(sort), bool(head_swizzle), max_seqlen_q, max_seqlen_k)
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            call.launch()
    else:
        call.launch()
    return (out, lse) if return_lse else out


class _Call:
    """One validated call: variants, kernels, transient buffers and the three launches."""

    def __init__(self, q, k, v, cu_q, cu_k, seqused_k, page_table, out, lse, sizes, scale, mask, left, right, softcap,
                 num_splits, pack_gqa, layout, sort, head_swizzle, max_seqlen_q, max_seqlen_k):
        self.__dict__.update(locals())
        del self.__dict__["self"]

    def launch(self):
        q, sizes = self.q, self.sizes
        device = q.device.index
        arch = device_arch(device)
        variants = heuristics.choose(
            arch, validation.DTYPES[q.dtype], sizes["head_dim"], sizes["head_dim_v"],
            num_heads_q=sizes["num_heads_q"], num_heads_kv=sizes["num_heads_kv"], mask=self.mask, layout=self.layout,
            max_seqlen_q=self.max_seqlen_q, max_seqlen_k=self.max_seqlen_k, paged=sizes["paged"],
            softcap=self.softcap > 0, pack_gqa=self.pack_gqa, num_splits=self.num_splits,
            num_sms=runtime.device_properties(device)["num_sms"])
        sched = runtime.get_kernel(variants.scheduler, device)
        attn = runtime.get_kernel(variants.attention, device)
        combine = runtime.get_kernel(variants.combine, device) if variants.combine is not None else None
        capacity = sizes["batch"]
        md = torch.empty(metadata.buffer_ints(capacity), dtype=torch.int32, device=q.device)
        stream = _current_stream(device)
        cfg = scheduler_config(variants.attention, attn, sizes["num_heads_q"], sizes["num_heads_kv"], sort=self.sort,
                               head_swizzle=self.head_swizzle, max_splits=variants.max_splits,
                               forced_splits=variants.forced_splits)
        launch_scheduler(sched, stream, self.cu_q, self.cu_k, self.seqused_k, md, capacity, capacity, cfg)
        bufs = SplitBuffers.allocate(variants.max_splits, sizes["num_heads_q"], sizes["total_q"], sizes["head_dim_v"],
                                     q.device) if combine is not None else None
        attn.launch(attn.persistent_grid, stream, attention_params(
            q, self.k, self.v, self.out, self.lse, self.cu_q, self.cu_k, md, capacity, self.scale,
            seqused_k=self.seqused_k, page_table=self.page_table, window=(self.left, self.right),
            softcap=self.softcap, split=bufs))
        if combine is not None:
            launch_combine(combine, stream, bufs, self.cu_q, md, self.out, self.lse, sizes["num_heads_q"])


class SplitBuffers:
    """Split-KV partials: out_accum (splits, Hq, total_q, dv) and lse_accum (splits, Hq, total_q)
    float32, and row_splits (total_q,) int32 (partials per token, written by the attention kernel)."""

    def __init__(self, out_accum, lse_accum, row_splits):
        self.out_accum, self.lse_accum, self.row_splits = out_accum, lse_accum, row_splits

    @classmethod
    def allocate(cls, max_splits, num_heads_q, total_q, head_dim_v, device):
        return cls(torch.empty((max_splits, num_heads_q, total_q, head_dim_v), dtype=torch.float32, device=device),
                   torch.empty((max_splits, num_heads_q, total_q), dtype=torch.float32, device=device),
                   torch.empty((total_q,), dtype=torch.int32, device=device))


def scheduler_config(attn_spec, attn_kernel, num_heads_q: int, num_heads_kv: int, *, sort: bool = True,
                     head_swizzle: bool = True, max_splits: int = 1, forced_splits: bool = False):
    """The scheduler's run-time configuration for an attention kernel on its device.

    The dynamic split divides the work by the persistent grid times
    ``heuristics.SPLIT_GRANULARITY`` of the tile's class (decode tiles: finer).

    The head-swizzle budget is a sixth of the device's L2 (about 10 MB on an H200; FlashAttention-3
    uses a fixed 8 MiB on 50 MB parts), counted in K+V blocks of one head.
    """
    qpk = num_heads_q // num_heads_kv
    pack = attn_spec.pack_gqa
    budget = 0
    if head_swizzle:
        l2 = runtime.device_properties(attn_kernel.device)["l2_bytes"]
        budget = max(1, (l2 // 6) // (attn_spec.tile.block_n * (attn_spec.head_dim + attn_spec.head_dim_v) * 2))
    return metadata.SchedulerConfig(
        num_heads=num_heads_kv if pack else num_heads_q,
        block_m=attn_spec.tile.block_m,
        block_n=attn_spec.tile.block_n,
        pack_factor=qpk if pack else 1,
        max_splits=max_splits,
        forced_splits=forced_splits,
        num_ctas=attn_kernel.persistent_grid * heuristics.SPLIT_GRANULARITY[_tile_class(attn_spec)],
        max_kvblocks_l2=budget,
        swizzle_mult=1 if pack else qpk,
        sort=sort,
    )


def _tile_class(attn_spec) -> str:
    return "decode" if attn_spec.tile.block_m <= 16 else "mid" if attn_spec.tile.block_m <= 64 else "prefill"


def scheduler_launch_shape(capacity: int, max_smem: int = 48 * 1024) -> tuple[int, int]:
    """(threads, dynamic shared memory bytes) of a scheduler launch for a capacity: one thread per
    request slot up to 1024 (at least a warp); two 4-byte sort-key buffers per slot, and two more
    for the plans stashed at sort time when ``max_smem`` (bytes, what the loaded kernel may use)
    allows (otherwise the kernel re-reads the lengths of each sorted request from global memory)."""
    cap4 = metadata.round_up(capacity, 4)
    n = 32
    while n < cap4:
        n <<= 1
    threads = min(n, 1024)
    return threads, 16 * cap4 if 16 * cap4 <= max_smem else 8 * cap4


def launch_scheduler(sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> None:
    """Launch the scheduler kernel: writes ``md`` (int32, metadata.buffer_ints(capacity)) for ``batch``."""
    if capacity > metadata.MAX_CAPACITY:
        raise ValueError(f"capacity {capacity} exceeds {metadata.MAX_CAPACITY} requests (the scheduler sorts the "
                         f"whole batch in one CTA)")
    threads, smem = scheduler_launch_shape(capacity, sched.smem_bytes)
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
        "class_min_q": cfg.class_min_q, "class_max_q": cfg.class_max_q,
    })


def attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, capacity, scale, *, seqused_k=None,
                     page_table=None, window=(-1, -1), softcap=0.0, split: SplitBuffers | None = None) -> bytes:
    """Packed AttnParams (strides in elements; ``scale`` is softmax_scale, folded with log2(e))."""
    paged = page_table is not None
    total_q, hq, _ = out.shape
    return ATTENTION_PARAMS.pack({
        "q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "out": out.data_ptr(),
        "lse": lse.data_ptr() if lse is not None else 0,
        "cu_seqlens_q": cu_seqlens_q.data_ptr(), "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "page_table": page_table.data_ptr() if paged else 0, "metadata": md.data_ptr(),
        "out_accum": split.out_accum.data_ptr() if split else 0, "lse_accum": split.lse_accum.data_ptr() if split else 0,
        "row_splits": split.row_splits.data_ptr() if split else 0,
        "q_row_stride": q.stride(0), "q_head_stride": q.stride(1),
        "k_row_stride": k.stride(1 if paged else 0), "k_head_stride": k.stride(-2), "k_page_stride": k.stride(0) if paged else 0,
        "v_row_stride": v.stride(1 if paged else 0), "v_head_stride": v.stride(-2), "v_page_stride": v.stride(0) if paged else 0,
        "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
        "lse_head_stride": lse.stride(0) if lse is not None else 0,
        "page_table_stride": page_table.stride(0) if paged else 0,
        "accum_split_stride": split.out_accum.stride(0) if split else 0,
        "accum_head_stride": split.out_accum.stride(1) if split else 0,
        "lse_accum_split_stride": split.lse_accum.stride(0) if split else 0,
        "lse_accum_head_stride": split.lse_accum.stride(1) if split else 0,
        "num_heads_q": hq, "num_heads_kv": k.shape[-2], "capacity": capacity, "total_q": total_q,
        "page_size": k.shape[1] if paged else 0, "window_left": window[0], "window_right": window[1],
        "scale_log2": scale * _LOG2E,
        "softcap_scale": scale / softcap if softcap > 0 else 0.0,
        "softcap_log2": softcap * _LOG2E,
    })


def launch_combine(combine, stream, bufs: SplitBuffers, cu_seqlens_q, md, out, lse, num_heads_q: int) -> None:
    """Merge split-KV partials into ``out`` (and ``lse``): one warp per (token, head) row."""
    total_q = out.shape[0]
    rows = total_q * num_heads_q
    grid = max(1, math.ceil(rows / combine.spec.rows_per_cta))
    combine.launch(grid, stream, COMBINE_PARAMS.pack({
        "out_accum": bufs.out_accum.data_ptr(), "lse_accum": bufs.lse_accum.data_ptr(),
        "row_splits": bufs.row_splits.data_ptr(), "cu_seqlens_q": cu_seqlens_q.data_ptr(), "metadata": md.data_ptr(),
        "out": out.data_ptr(), "lse": lse.data_ptr() if lse is not None else 0,
        "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
        "lse_head_stride": lse.stride(0) if lse is not None else 0,
        "accum_split_stride": bufs.out_accum.stride(0), "accum_head_stride": bufs.out_accum.stride(1),
        "lse_accum_split_stride": bufs.lse_accum.stride(0), "lse_accum_head_stride": bufs.lse_accum.stride(1),
        "num_heads_q": num_heads_q, "total_q": total_q,
    }))
