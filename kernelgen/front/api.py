"""Public calls.

The path of one call, top to bottom: validate -> choose the variants (``heuristics.choose``) ->
get the kernels (``runtime.get_kernel``: render, compile or load from the disk cache, load on the
device) -> prepare the launches (``prepared.build``) -> allocate one workspace (scheduler
metadata and split-KV partials) -> launch the scheduler kernel (writes the metadata) -> launch the
persistent attention kernel -> with split-KV, launch the combine kernel.  All launches go on
PyTorch's current stream of the tensors' device; nothing synchronises the host and every buffer
comes from PyTorch's allocator, so the call can be captured in a CUDA graph.

Everything before the allocation depends only on the call's signature (``signature.py``: types,
dtypes, devices, shapes and strides of the tensors, the other arguments' types and values), so the
prepared call is kept per signature: a call whose signature was validated before only reads its
data pointers, checks their alignment, allocates and launches.
"""
from __future__ import annotations

import torch

from ..launch import fused, prepared
from ..selection import heuristics, signature, validation
from ..kernels import kernel_args, metadata, tma
from ..jit import runtime
from ..kernels.kernel_args import scheduler_launch_shape  # noqa: F401 (public helper, re-exported)
from ..kernels.params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS, TMA_ATTENTION_PARAMS
from ..kernels.workspace import SplitBuffers, WorkspaceLayout

_arch_cache: dict = {}
#: Prepared calls of varlen_attention by signature (``signature.key``).
_CALLS = signature.SignatureCache(1024)


def device_arch(device: int) -> str:
    """Compile target of a CUDA device (e.g. 'sm_90a' on an H100/H200)."""
    a = _arch_cache.get(device)
    if a is None:
        a = _arch_cache[device] = heuristics.arch_for_capability(*runtime.device_properties(device)["cc"])
    return a


_current_stream = prepared.current_stream


def clear_signature_cache() -> None:
    """Forget varlen_attention's prepared calls (the next call of each signature validates again)."""
    _CALLS.clear()


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
    short_query_tokens: int | None = None,
    arch: str | None = None,
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
        sort: let the GPU scheduler order requests longest-first (ties by request index; a batch
            whose longest tiles are within 1/8 of each other keeps request order).
        head_swizzle: for causal/local masks, walk heads in sections sized to the device's L2 so
            tiles running together share K/V in L2.  ``sort`` and ``head_swizzle`` change only
            the order of work, never the result.
        short_query_tokens: the request-class threshold of the fused launch for batches mixing
            long-query (prefill) and short-query (decode) requests: requests with at most this
            many query tokens run as one-warp decode tiles, the others as 128-row prefill tiles,
            in one persistent launch (``docs/serving.md``).  None: automatic (fused for a paged
            cache whose ``max_seqlen_q`` exceeds ``heuristics.short_query_tokens``, 4 for 32/8
            heads, unless pack_gqa or num_splits is forced); an int >= 1 forces the fused launch
            with that threshold; 0 turns it off.
        arch: which attention mainloop runs: None or "auto" picks the Hopper path (wgmma, TMA,
            warp specialisation; ``docs/perf-notes.md``, "Hopper path") on compute capability
            9.0 for the calls it supports (packed K/V, head dims 64, 96, 128, 192 or 256 with
            head_dim_v == head_dim, or 192 with head_dim_v 128, or a paged cache at head dims 64
            and 128; any mask, window and soft-cap; split-KV, automatic or forced; no pack-GQA;
            prefill-sized ``max_seqlen_q`` * query heads per tile; a paged batch of several
            requests only when they average at least ``heuristics.SM90_PAGED_MIN_MEAN_Q`` query
            tokens, else the fused launch) and the sm_80 path (mma.sync) otherwise; "sm_80" forces the sm_80 path,
            "sm_90a" the Hopper path (ValueError if the call or the device does not support it).
            None reads the ``KERNELGEN_ARCH`` environment variable (same values) when a call
            signature is first seen (``clear_signature_cache`` makes it read again).

    Returns:
        out (total_q, num_heads_q, head_dim_v) in q's dtype; with ``return_lse`` also
        lse (num_heads_q, total_q) float32, natural log (FlashAttention-3's convention).  A row
        that sees no key gets out = 0 and lse = -inf.  Query rows past ``cu_seqlens_q[-1]`` are
        not written.

    Raises:
        TypeError: an argument has the wrong type or dtype (the message names it).
        ValueError: wrong shape, device, stride/alignment, head counts that do not divide,
            unsupported head dim, bad window/softcap/num_splits/softmax_scale/layout/arch, paged
            arguments missing or inconsistent, more than 8192 requests, or ``arch="sm_90a"`` for
            a call or device the Hopper path does not support.
        kernelgen.jit.compiler.CompileError: NVRTC rejected a kernel (log and source path attached).
        kernelgen.launch.launch.LaunchError: the driver refused a launch (the message names the kernel).

    The values of cu_seqlens, seqused_k and page_table are not read on the host (that would
    synchronise): ``KERNELGEN_CHECK_INPUTS=1`` checks them (ordering, page ids inside the cache,
    page_table wide enough, seqused_k within each request's keys) at the cost of a sync, on every
    call.  Offsets are 64-bit, so caches past 2^31 elements are addressed correctly.

    Host cost: the first call of a signature (tensor types, dtypes, devices, shapes and strides,
    the other arguments, including the length hints) validates, chooses and loads kernels (tens of
    us, or a compile); later calls of the signature skip to reading the data pointers, one
    workspace allocation and the launches (three kernels; four for a fused mixed batch, five for
    the two classes in turn), enqueued from a stream's second call on as one CUDA graph launch
    (``graph_launch.py``; 12-22 us of host time for a repeated decode call on the H200's hosts,
    ``docs/perf-notes.md``, "host overhead").  A
    decode loop whose ``max_seqlen_k`` hint changes every step misses every time: use
    ``AttentionPlan`` there.

    Algorithm: FlashAttention-2 tiling with an fp32 online softmax (Dao 2023; Milakov and
    Gimelshein 2018) in a persistent kernel fed by a GPU scheduler after FlashAttention-3's varlen
    scheduler (Shah et al. 2024, with a capacity-sized metadata buffer), split-KV after
    FlashDecoding (Dao et al. 2023); on Hopper, FlashAttention-3's asynchronous design (wgmma,
    TMA, producer/consumer warpgroups, softmax overlapped with the next block's GEMM).
    """
    try:
        key = signature.key((q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out), window_size,
                            (max_seqlen_q, max_seqlen_k, causal, softcap, softmax_scale, num_splits, pack_gqa,
                             return_lse, metadata_layout, sort, head_swizzle, short_query_tokens, arch))
        prep = _CALLS.get(key)
    except Exception:  # noqa: BLE001 - an argument that cannot be keyed: the validating path names it
        key = prep = None
    if prep is not None and not validation.host_checks_enabled():
        res = prep.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, None)
        if res is not None:
            return res if return_lse else res[0]
    return _validated_call(key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                           page_table, causal, window_size, softcap, softmax_scale, num_splits, pack_gqa, return_lse,
                           out, metadata_layout, sort, head_swizzle, short_query_tokens, arch)


def _validated_call(key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table,
                    causal, window_size, softcap, softmax_scale, num_splits, pack_gqa, return_lse, out,
                    metadata_layout, sort, head_swizzle, short_query_tokens=None, arch=None):
    """varlen_attention for a signature not prepared yet: every check, the variant choice, the
    kernels; the prepared call is stored under ``key`` (None: not keyable) and run."""
    sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out,
                                     seqused_k=seqused_k, page_table=page_table)
    scale = validation.softmax_scale(softmax_scale, sizes["head_dim"])
    layout = validation.layout(metadata_layout)
    mask, left, right = validation.window(window_size, bool(causal))
    cap = validation.softcap(softcap)
    splits = validation.num_splits(num_splits)
    if pack_gqa is not None and not isinstance(pack_gqa, bool):
        raise TypeError(f"pack_gqa must be None or a bool, got {type(pack_gqa).__name__}")
    validation.short_query_tokens(short_query_tokens, pack_gqa, splits)
    mainloop = validation.arch(arch, None)
    if mainloop == "sm90a" and short_query_tokens:
        raise ValueError("arch='sm_90a' runs no fused mixed-batch launch: leave short_query_tokens None or 0")
    if validation.host_checks_enabled():
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
    dev_arch = device_arch(device)
    mainloop = validation.arch(arch, dev_arch)
    prep = None

    def choose():
        return heuristics.choose(
            dev_arch, validation.DTYPES[q.dtype], sizes["head_dim"], sizes["head_dim_v"],
            num_heads_q=hq, num_heads_kv=sizes["num_heads_kv"], mask=mask, layout=layout,
            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, paged=sizes["paged"],
            softcap=cap > 0, pack_gqa=pack_gqa, num_splits=splits,
            num_sms=runtime.device_properties(device)["num_sms"], mainloop=mainloop,
            tma_ok=all(tma.tma_compatible(t) for t in (q, k, v)), page_size=sizes.get("page_size", 0))

    variants = None
    if mainloop is None and short_query_tokens is None and heuristics.paged_prefers_hopper(
            sizes["paged"], total_q, batch):
        # long queries on average (chunked prefill on a paged cache): the Hopper path, where it
        # runs the call, rather than the fused mixed-batch launch
        variants = choose()
        if variants.attention.mainloop != "sm90a":
            variants = None
    if mainloop != "sm90a" and variants is None:
        prep = _fused_call(short_query_tokens, q, k, v, out, lse, page_table, sizes, dev_arch, device, mask, layout,
                           left, right, cap, scale, pack_gqa, splits, max_seqlen_q, max_seqlen_k, sort, head_swizzle,
                           return_lse, mainloop)
    if prep is not None:
        if key is not None and signature.cacheable(key):
            _CALLS.put(key, prep)
        out, lse = prep.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse)
        return (out, lse) if return_lse else out
    if variants is None:
        variants = choose()
    sched = runtime.get_kernel(variants.scheduler, device)
    attn = runtime.get_kernel(variants.attention, device)
    combine = runtime.get_kernel(variants.combine, device) if variants.combine is not None else None
    cfg = scheduler_config(variants.attention, attn, hq, sizes["num_heads_kv"], sort=bool(sort),
                           head_swizzle=bool(head_swizzle), max_splits=variants.max_splits,
                           forced_splits=variants.forced_splits, window_left=left)
    ws = WorkspaceLayout(batch, combine is not None, variants.max_splits, hq, total_q, sizes["head_dim_v"])
    maps = hopper_maps(variants.attention, q, k, v, sizes["paged"]) if variants.attention.mainloop == "sm90a" else None
    prep = prepared.build(sched=sched, attn=attn, combine=combine, cfg=cfg, layout=ws, batch=batch, q=q, k=k, v=v,
                          out=out, lse=lse, page_table=page_table, scale=scale, window=(left, right), softcap=cap,
                          return_lse=bool(return_lse), fixed_base=None, sizes=sizes, maps=maps)
    if key is not None and signature.cacheable(key):
        _CALLS.put(key, prep)
    out, lse = prep.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse)
    return (out, lse) if return_lse else out


def hopper_maps(spec, q, k, v, paged: bool):
    """The ``tma.AttentionMaps`` of a Hopper attention kernel's call signature: q by 128-row boxes,
    K/V by key blocks, or on a paged cache (num_pages, page_size, heads, dim) by boxes of
    min(block_n, page_size) keys inside one page (``tma_load_paged``), none for the gather
    option "g" (the producer warps copy K/V rows themselves)."""
    t = spec.tile
    kv_rows = min(t.block_n, k.shape[1]) if paged else t.block_n
    return tma.AttentionMaps(q, k, v, t.block_m, t.block_n, kv_maps="g" not in spec.sm90_opts, kv_rows=kv_rows)


def _fused_call(short_query_tokens, q, k, v, out, lse, page_table, sizes, arch, device, mask, layout, left, right,
                cap, scale, pack_gqa, splits, max_seqlen_q, max_seqlen_k, sort, head_swizzle, return_lse,
                mainloop=None):
    """The prepared launches of a call that may mix long- and short-query requests
    (``fused.use_fused``): on sm_90a without a forced mainloop the Hopper fused launch
    (``heuristics.choose_fused_hopper``), or where it does not fit the two classes in turn, the
    long one on the Hopper kernel (``heuristics.choose_pair``, ``fused.build_pair``); elsewhere the
    sm_80 fused launch; or None when the call takes the single-class launch."""
    hq, hkv = sizes["num_heads_q"], sizes["num_heads_kv"]
    thr = fused.use_fused(short_query_tokens, paged=sizes["paged"], batch=sizes["batch"], max_seqlen_q=max_seqlen_q,
                          num_heads_q=hq, num_heads_kv=hkv, pack_gqa=pack_gqa, num_splits=splits)
    if not thr:
        return None

    def prepare(load, build, variants):
        kernels = load(variants, device, hq, hkv, sort=bool(sort), head_swizzle=bool(head_swizzle), window_left=left)
        ws = kernels.workspace(sizes["batch"], sizes["total_q"], hq, sizes["head_dim_v"])
        return build(kernels, layout=ws, batch=sizes["batch"], q=q, k=k, v=v, out=out, lse=lse, page_table=page_table,
                     scale=scale, window=(left, right), softcap=cap, return_lse=bool(return_lse), fixed_base=None,
                     sizes=sizes)
    if mainloop is None:
        kw = dict(num_heads_q=hq, num_heads_kv=hkv, mask=mask, layout=layout, max_seqlen_q=max_seqlen_q,
                  max_seqlen_k=max_seqlen_k, paged=sizes["paged"], softcap=cap > 0, short_max_q=thr,
                  num_sms=runtime.device_properties(device)["num_sms"], page_size=sizes.get("page_size", 0),
                  tma_ok=all(tma.tma_compatible(t) for t in (q, k, v)))
        fv = heuristics.choose_fused_hopper(arch, validation.DTYPES[q.dtype], sizes["head_dim"], sizes["head_dim_v"],
                                            **kw)
        if fv is not None:
            return prepare(fused.load, fused.build, fv)
        pv = heuristics.choose_pair(arch, validation.DTYPES[q.dtype], sizes["head_dim"], sizes["head_dim_v"], **kw)
        if pv is not None:
            return prepare(fused.load_pair, fused.build_pair, pv)
    fv = heuristics.choose_fused(arch, validation.DTYPES[q.dtype], sizes["head_dim"], sizes["head_dim_v"],
                                 num_heads_q=hq, num_heads_kv=hkv, mask=mask, layout=layout, max_seqlen_k=max_seqlen_k,
                                 paged=sizes["paged"], softcap=cap > 0, short_max_q=thr,
                                 num_sms=runtime.device_properties(device)["num_sms"])
    return None if fv is None else prepare(fused.load, fused.build, fv)


def scheduler_config(attn_spec, attn_kernel, num_heads_q: int, num_heads_kv: int, *, sort: bool = True,
                     head_swizzle: bool = True, max_splits: int = 1, forced_splits: bool = False,
                     window_left: int = -1):
    """The scheduler's run-time configuration for an attention kernel on its device.

    ``window_left``: the call's left window in tokens for a local mask (-1: none), so that key
    blocks, splits and the sort key count what the window leaves (``metadata.request_blocks``).

    The dynamic split divides the work by the persistent grid times
    ``heuristics.SPLIT_GRANULARITY`` of the tile's class (decode tiles: finer).

    The head-swizzle budget is a sixth of the device's L2 (about 10 MB on an H200; FlashAttention-3
    uses a fixed 8 MiB on 50 MB parts), counted in K+V blocks of one head.

    A decode-class kernel launched on its own (``attn_kernel`` runs ``attn_spec``, not a fused
    kernel) passes its persistent grid as ``wave_ctas``: the scheduler then rounds the split cap of
    capped requests to whole waves (``metadata.wave_split_cap``).
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
        window_left=window_left if attn_spec.mask == "local" else -1,
        wave_ctas=attn_kernel.persistent_grid if _wave_rounded(attn_spec, attn_kernel) else 0,
    )


def _wave_rounded(attn_spec, attn_kernel) -> bool:
    return _tile_class(attn_spec) == "decode" and attn_kernel.spec == attn_spec


def _tile_class(attn_spec) -> str:
    return "decode" if attn_spec.tile.block_m <= 16 else "mid" if attn_spec.tile.block_m <= 64 else "prefill"


def launch_scheduler(sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> None:
    """Launch the scheduler kernel: writes ``md`` (int32, metadata.buffer_ints(capacity)) for ``batch``.
    Raises ValueError past metadata.MAX_CAPACITY."""
    kernel_args.check_capacity(capacity)
    threads, smem = scheduler_launch_shape(capacity, sched.smem_bytes)
    sched.launch(1, stream, scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg),
                 smem=smem, threads=threads)


def scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg) -> bytes:
    """Packed SchedParams for one batch (``md`` is the int32 metadata buffer of ``capacity``)."""
    return SCHEDULER_PARAMS.pack({
        "cu_seqlens_q": cu_seqlens_q.data_ptr(),
        "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "metadata": md.data_ptr(), **kernel_args.scheduler_fields(batch, capacity, cfg),
    })


def attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, capacity, scale, *, seqused_k=None,
                     page_table=None, window=(-1, -1), softcap=0.0, split: SplitBuffers | None = None,
                     row_splits=None, maps: bytes | None = None) -> bytes:
    """Packed AttnParams (strides in elements; ``scale`` is softmax_scale, folded with log2(e)).
    ``row_splits``: without ``split``, the int32 per-token count a non-splitting variant records
    for the combine kernel (the long class of a fused launch).  ``maps``: the Hopper kernel's
    encoded q/k/v tensor maps (``tma.AttentionMaps.encode``), which then lead the parameter
    (``params.TMA_ATTENTION_PARAMS``)."""
    struct = ATTENTION_PARAMS if maps is None else TMA_ATTENTION_PARAMS
    return struct.pack({
        "q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "out": out.data_ptr(),
        "lse": lse.data_ptr() if lse is not None else 0,
        "cu_seqlens_q": cu_seqlens_q.data_ptr(), "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "page_table": page_table.data_ptr() if page_table is not None else 0, "metadata": md.data_ptr(),
        "out_accum": split.out_accum.data_ptr() if split else 0, "lse_accum": split.lse_accum.data_ptr() if split else 0,
        "row_splits": split.row_splits.data_ptr() if split else row_splits.data_ptr() if row_splits is not None else 0,
        **kernel_args.attention_fields(q, k, v, out, lse, page_table, capacity, scale, window, softcap,
                                       kernel_args.split_strides(split)),
    }, *(() if maps is None else (maps,)))


def combine_params(bufs: SplitBuffers, cu_seqlens_q, md, out, lse, num_heads_q: int) -> bytes:
    """Packed CombineParams."""
    return COMBINE_PARAMS.pack({
        "out_accum": bufs.out_accum.data_ptr(), "lse_accum": bufs.lse_accum.data_ptr(),
        "row_splits": bufs.row_splits.data_ptr(), "cu_seqlens_q": cu_seqlens_q.data_ptr(), "metadata": md.data_ptr(),
        "out": out.data_ptr(), "lse": lse.data_ptr() if lse is not None else 0,
        **kernel_args.combine_fields(out, lse, num_heads_q, kernel_args.split_strides(bufs)),
    })


def launch_combine(combine, stream, bufs: SplitBuffers, cu_seqlens_q, md, out, lse, num_heads_q: int) -> None:
    """Merge split-KV partials into ``out`` (and ``lse``): one warp per (token, head) row."""
    grid = kernel_args.combine_grid(out.shape[0], num_heads_q, combine.spec.rows_per_cta)
    combine.launch(grid, stream, combine_params(bufs, cu_seqlens_q, md, out, lse, num_heads_q))
