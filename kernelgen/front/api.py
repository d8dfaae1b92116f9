"""``varlen_attention``: the one-shot public call.

The path of one call, top to bottom through the layers: check the arguments
(``selection.arguments``) -> choose the launches (``selection.decide``: a ``Recipe`` from the call's
signature and the device, read once per device by ``jit.runtime.device``) -> get the kernels
(``jit.runtime.load``: render, compile or load from the disk cache, load on the device) -> bind
and prepare the launches (``launch.bind``) -> run them: allocate one workspace (scheduler
metadata and split-KV partials), launch the scheduler kernel (writes the metadata), the
persistent attention kernel and, with split-KV, the combine kernel.  All launches go on
PyTorch's current stream of the tensors' device; nothing synchronises the host and every buffer
comes from PyTorch's allocator, so the call can be captured in a CUDA graph.

A new user variant's first calls on an H200 run its sm_80-mainloop kernel while its Hopper kernel
builds in the background (``selection.tiered``, ``jit.background``); such a provisional call is not
kept per signature, so the calls after the build run the Hopper kernel.

Everything before the allocation depends only on the call's signature (``selection.signature``:
types, dtypes, devices, shapes and strides of the tensors, the other arguments' types and
values), so the prepared call is kept per signature: a call whose signature was validated before
only reads its data pointers, checks their alignment, allocates and launches.
"""
from __future__ import annotations

import contextlib

import torch

from ..jit import compiler, runtime
from ..kernels import kernel_args
from ..launch import bind, quant_q as _quant_q, sinks as _sinks
from ..selection import arguments, decide, signature, spills, tiered, validation
from ..jit.cache import KernelNotCachedError
from . import jit_hint

#: Prepared calls of varlen_attention by signature (``signature.key``).
_CALLS = signature.SignatureCache(1024)


def clear_signature_cache() -> None:
    """Forget varlen_attention's prepared calls (the next call of each signature validates again)."""
    _CALLS.clear()


@contextlib.contextmanager
def separate_signature_cache(cache: signature.SignatureCache):
    """For benchmarks: inside the ``with`` block varlen_attention keeps and finds its prepared calls
    in ``cache`` (the caller's, initially empty) instead of the process's, so that a call prepared
    inside binds the kernels loaded inside (with ``jit.runtime.separate_modules``: another copy of
    each module).  Process-wide while it lasts: single-threaded measurement code only."""
    global _CALLS
    saved, _CALLS = _CALLS, cache
    try:
        yield cache
    finally:
        _CALLS = saved


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
    sinks: torch.Tensor | None = None,
    alibi_slopes: torch.Tensor | None = None,
    variant=None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    q_descale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    quantize_q: bool = False,
    max_num_splits: int = 0,
):
    """Attention over a ragged (varlen) batch of requests, prefill and decode alike.

    Request ``i`` owns query rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` of ``q``.  Its keys are
    rows ``cu_seqlens_k[i]:cu_seqlens_k[i+1]`` of a packed ``k``/``v`` (the first ``seqused_k[i]``
    of them when ``seqused_k`` is given), or, with ``page_table``, the first ``seqused_k[i]``
    tokens of a paged cache: token ``j`` lives at ``k[page_table[i, j // page_size], j % page_size]``.
    Query head ``h`` attends to KV head ``h // (num_heads_q // num_heads_kv)`` (GQA/MQA).

    Args:
        q: (total_q, num_heads_q, head_dim), float16 or bfloat16, CUDA, last dim contiguous; or
            float8_e4m3fn with an FP8 K/V cache (FlashAttention-3's FP8 forward; see ``q_descale``).
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
        softcap: > 0 caps logits as ``softcap * tanh(logit / softcap)`` (0 = off; Gemma 2), with the
            hardware's tanh (tanh.approx.f32: relative error at most 2^-11, as FlashAttention-2/3/4
            and FlashInfer compute it; docs/variants.md shows the accurate form as a score_mod).
        softmax_scale: logit scale, default ``1 / sqrt(head_dim)``.
        num_splits: split-KV: 0 lets the GPU scheduler decide per request, n > 0 forces n
            (capped by each request's key blocks, and by the key blocks of ``max_seqlen_k``: the
            workspace is sized from that hint, so a hint below the real length forces fewer splits).
        max_num_splits: 0 (default) no cap; n >= 1 caps the automatic split count (``num_splits``
            0) at n splits a request, so the workspace holds at most n (FlashAttention-3's varlen
            reading of its ``num_splits``, an upper bound of its own choice; vLLM's full-CUDA-graph
            mode passes one); 1 means no split.  An int in [0, 256]; ValueError with a forced
            ``num_splits``.
        pack_gqa: put the query heads of one KV head in one tile (K/V read once per KV head);
            None decides by heuristic (on for decode-like batches; on the Hopper prefill kernel,
            ``heuristics.sm90_pack_auto``, for GQA batches on its 192-row tile (head dim 64) at any
            length, with built-in ALiBi or FP8 q / K / V when the requests average fewer than 6144
            query tokens (``SM90_ALIBI_PACK_MAX_MEAN_Q``, ``SM90_FP8_PACK_MAX_MEAN_Q``), and on
            128-row tiles (16-bit, or FP8 q / K / V at head dim 128) when they average fewer than
            ``heuristics.SM90_PACK_MAX_MEAN_Q`` (1024) with at least 8 query heads a KV head;
            with a user variant as without one up to head dim 128 (``SM90_VARIANT_PACK_AUTO``,
            ``SM90_VARIANT_PACK_MAX_HEAD_DIM``; a variant kernel that spills packed runs its
            unpacked twin, ``selection.spills``); never with an FP8 cache read by a 16-bit q;
            ``KERNELGEN_SM90_PACK_GQA`` overrides the Hopper kernel's choice).  True packs: on the
            sm_80 mainloop where the Hopper kernel cannot pack the call (head dim 256, a 16-bit q on
            an FP8 cache; ``heuristics.sm90_unsupported``); False never packs.
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
            cache of two or more requests whose ``max_seqlen_q`` exceeds
            ``heuristics.short_query_tokens``, 4 for 32/8 heads, unless pack_gqa or num_splits is
            forced); an int >= 1 forces the fused launch with that threshold where some request may
            exceed it (two or more requests, ``max_seqlen_q`` above it: ``decide.use_fused``); 0
            turns it off.
        arch: which attention mainloop runs: None or "auto" picks the Hopper path (wgmma, TMA,
            warp specialisation; ``docs/dev/perf-log.md``, "Hopper path") on compute capability
            9.0 for the calls it supports (packed K/V, head dims 64, 96, 128, 192 or 256 with
            head_dim_v == head_dim, or 192 with head_dim_v 128, or a paged cache with head_dim ==
            head_dim_v in 64, 96, 128, 192 or 256: whole pages or key blocks loaded by TMA where
            they fit, rows gathered through the page table otherwise; any mask, window and
            soft-cap; split-KV, automatic or forced; pack-GQA as ``pack_gqa`` says;
            prefill-sized ``max_seqlen_q`` * query heads per tile; a paged batch of several
            requests only when they average at least ``heuristics.SM90_PAGED_MIN_MEAN_Q`` query
            tokens, else the fused launch) and the sm_80 path (mma.sync) otherwise; "sm_80" forces the sm_80 path,
            "sm_90a" the Hopper path (ValueError if the call or the device does not support it).
            None reads the ``KERNELGEN_ARCH`` environment variable (same values) when a call
            signature is first seen (``clear_signature_cache`` makes it read again).
        sinks: attention sinks (gpt-oss): None, or a contiguous float32 (num_heads_q,) tensor on q's device,
            one extra logit per *query* head that joins every row's softmax denominator and has
            no value: ``p_j = exp(s_j) / (exp(sinks[h]) + sum_k exp(s_k))`` over the row's scaled
            (soft-capped, masked) logits s.  The returned lse includes it:
            ``logaddexp(lse, sinks[h])``; a row that sees no key keeps out = 0 and gets lse =
            sinks[h].  -inf means no sink for that head.  A call of one request class runs the
            sink kernels (the epilogue's final normalisation and the split-KV combine add the
            sink: ``AttentionSpec.sinks``); a mixed batch (fused launch, classes in turn) applies
            it after the kernels as an exact LSE rescale (``launch.sinks.apply``: ``out *=
            exp(lse - new_lse)`` in float32, one extra pass over out).  Either way on the device,
            no host sync, CUDA-graph safe (the values are read at run time).  Values are not checked
            (NaN or +inf raise ValueError only under ``KERNELGEN_CHECK_INPUTS=1``).
        alibi_slopes: ALiBi (Press et al. 2022, "Train Short, Test Long"; FlashAttention-2's
            argument and convention): None, or a float32 tensor on q's device of shape
            ``(num_heads_q,)`` or ``(batch, num_heads_q)``, contiguous along the heads.  The
            logit of query row i of request b (0-based in the request) and key j, after
            ``softmax_scale`` and soft-cap, gets ``-alibi_slopes[b, h] * |i + seqlen_k - seqlen_q
            - j|`` (seqlen_q, seqlen_k: the request's lengths); the returned lse is that of the
            biased logits (FlashAttention-2's causal kernels add ``slope * j`` instead: the same
            out, an lse shifted by a constant per row).  The kernels read the values on the
            device at every launch (CUDA-graph safe); the tensor's address is part of the call
            signature.  A mixed prefill + decode batch with ALiBi runs its classes in turn
            (sm_90a) or as one class (no fused launch).
        variant: a user attention variant (``kernelgen.Variant``: C++ ``score_mod`` /
            ``mask_mod`` / ``kv_range`` snippets and the CUDA tensors they read, FlexAttention's
            idea, see ``kernelgen.selection.variant``), or None.  Its kernels are compiled at first use
            (NVRTC, cached on disk by the snippets' source and the tensors' dtypes).  Where the
            Hopper kernel would run (``arch`` None or "auto", ``KERNELGEN_ARCH`` unset) and is not
            built yet, the call runs the variant's sm_80-mainloop kernel (about half the compile)
            while the Hopper kernel builds in a background thread, and so do the calls of the
            signature until it is built; later calls run the Hopper kernel (the results agree
            within ``kernelgen.apps.reference.tolerance``, not bitwise).  ``KERNELGEN_TIERED_COMPILE=0``
            turns this off, ``kernelgen.wait_for_compiles()`` waits for the builds; under CUDA
            graph capture, with ``KERNELGEN_DISABLE_JIT`` and in ``AttentionPlan`` the Hopper kernel
            is built at once (docs/variants.md, "First call").  Its tensors
            must be contiguous and on q's device, their values are read on the device at every
            launch (CUDA-graph safe) and their addresses are part of the call signature.  The
            score_mod sees the logit after softmax_scale, soft-cap and ALiBi; the built-in masks
            (causal, window, key length) apply after the variant.  A mixed prefill + decode batch
            with a variant runs its classes in turn (sm_90a) or as one class (no fused launch).
        k_descale, v_descale: FP8 K/V caches (``k`` and ``v`` ``torch.float8_e4m3fn`` or
            ``torch.float8_e5m2`` with fp16/bf16 ``q``; FlashAttention-3's argument names and
            convention): None (factor 1) or float32 tensors on q's device of shape
            ``(batch, num_heads_kv)`` or one that broadcasts to it (``()``, ``(1, 1)``: a
            per-tensor scale; any strides).  Request b's keys of KV head h are ``k * k_descale[b,
            h]`` (folded into the softmax scale), its values ``v * v_descale[b, h]`` (applied to
            O); out is in q's dtype.  Given with a 16-bit cache they raise ValueError.  The
            kernels read the factors on the device at every launch (CUDA-graph safe); the
            tensors' addresses are part of the call signature.  FP8 values are converted
            exactly to q's dtype in shared memory: on an H200 prefill-shaped calls TMA can load
            take the Hopper kernel (its producer warps convert), the others the sm_80 mainloop
            (``arch="sm_90a"`` raises ValueError for ALiBi, a user variant or pages TMA cannot
            box); a paged mixed prefill + decode batch takes the Hopper fused kernel on an H200 (the classes
            in turn above head dim 128), the sm_80 fused kernel elsewhere.  Non-finite or negative factors raise ValueError under
            ``KERNELGEN_CHECK_INPUTS=1`` only (the values are not read otherwise).
        q_descale: an FP8 q (``torch.float8_e4m3fn``, with FP8 k/v): None (factor 1) or a float32
            tensor shaped as ``k_descale`` (``(batch, num_heads_kv)`` or broadcasting to it):
            request b's queries of the query heads of KV head h are ``q * q_descale[b, h]`` (folded
            into the softmax scale with ``k_descale``).  On an H200 prefill-shaped calls whose
            head_dim == head_dim_v is 64 or 128, or 256 without split-KV,
            run the Hopper kernel's FP8 tensor-core variant
            (S = Q K^T and P V on FP8 wgmma; P rounded to e4m3 after the softmax: accuracy in
            ``docs/api.md``, "FP8"); every other call converts q exactly to ``out_dtype`` first
            (one elementwise pass over q) and runs the FP8 K/V kernels.  With a 16-bit q it
            raises ValueError.
        out_dtype: the output's dtype for an FP8 q: torch.bfloat16 (None's default) or
            torch.float16 (``out``'s dtype when ``out`` is given).  With a 16-bit q it must be None
            or q's dtype (ValueError).
        quantize_q: a 16-bit q with an e4m3 K/V cache: True lets a call that the Hopper FP8
            tensor-core variant can take (the calls an e4m3 q would send there, see ``q_descale``)
            quantise q to e4m3 on the device first, per request and KV head with a power-of-two
            ``q_descale`` (``kernelgen.launch.quant_q``: e4m3's rounding, a relative error of at
            most 2^-4 for elements above 2^-13 of their group's largest |q|, coarser below, as for
            a caller's own e4m3 q; one kernel, two launches that read q twice), and run that variant: about
            2x the FP8-cache kernel's speed at prefill sizes (``docs/api.md``, "FP8"); out stays in
            q's dtype.  A paged mixed batch that the Hopper fused kernel takes (head dims 64 and 128)
            runs its long class on that variant over the quantised q and its short class (the
            decodes) on the 16-bit q, exact (``launch.fused.build``'s ``q_short``); other mixed
            batches that the variant takes run as one class on it, decodes included: head dim 256,
            ``KERNELGEN_FP8_FUSED=0``, ``short_query_tokens=0``, a forced ``pack_gqa`` or
            ``num_splits``, and a batch whose requests average at least
            ``heuristics.SM90_PAGED_MIN_MEAN_Q`` (512) query tokens (the Hopper kernel alone, as
            without quantize_q; so whether a step's decodes stay exact depends on the step: an
            ``AttentionPlan`` decides once for every step).  The other calls (decode-shaped, sm_80,
            ...) keep q exact, as with False (the default: every FP8 value converted exactly, q
            untouched).  Ignored without an FP8
            cache; TypeError if not a bool.

    Returns:
        out (total_q, num_heads_q, head_dim_v) in q's dtype (``out_dtype`` for an FP8 q); with ``return_lse`` also
        lse (num_heads_q, total_q) float32, natural log (FlashAttention-3's convention).  A row
        that sees no key gets out = 0 and lse = -inf (lse = sinks[h] with sinks).  Query rows past
        ``cu_seqlens_q[-1]`` are not written.

    Raises:
        TypeError: an argument has the wrong type or dtype (the message names it).
        ValueError: wrong shape, device, stride/alignment, head counts that do not divide,
            unsupported head dim, bad window/softcap/num_splits/max_num_splits/softmax_scale/layout/arch, paged
            arguments missing or inconsistent, more than 8192 requests, ``arch="sm_90a"`` for
            a call or device the Hopper path does not support, or an environment variable set to a
            value it does not take (``KERNELGEN_SM90_PACK_GQA``, ``KERNELGEN_ARCH``; the message names it).
        kernelgen.CompileError: NVRTC rejected a kernel (log and source path attached);
            ``kernelgen.VariantCompileError`` (also a ValueError) when a variant's snippet does not
            compile: NVRTC's diagnostics at the snippet's own line numbers and the snippet (a
            background build's failure is raised by the next call that needs the kernel).
        kernelgen.KernelNotCachedError: ``KERNELGEN_DISABLE_JIT=1`` and a kernel the call
            needs is not in the cache; the message names the ``kernelgen warmup`` command that
            builds it (``selection.catalog.warmup_command``).
        kernelgen.LaunchError: the driver refused a launch (the message names the kernel).

    The values of cu_seqlens, seqused_k and page_table are not read on the host (that would
    synchronise): ``KERNELGEN_CHECK_INPUTS=1`` checks them (ordering, page ids inside the cache,
    page_table wide enough, seqused_k within each request's keys) at the cost of a sync, on every
    call.  Offsets are 64-bit, so caches past 2^31 elements are addressed correctly.

    Host cost: the first call of a signature (tensor types, dtypes, devices, shapes and strides,
    the other arguments, including the length hints) validates, chooses and loads kernels (tens of
    us, or a compile); later calls of the signature skip to reading the data pointers, one
    workspace allocation and the launches (scheduler, attention and, with split-KV, combine; four
    for a fused mixed batch, five for the two classes in turn), enqueued from a stream's second call on as one CUDA graph launch
    (``graph_launch.py``; 12-41 us of host time for a repeated decode call on the hosts of the
    H200 runs so far, ``docs/dev/perf-log.md``, "host overhead").  A
    decode loop whose ``max_seqlen_k`` hint changes every step misses every time: use
    ``AttentionPlan`` there.

    Algorithm: FlashAttention-2 tiling with an fp32 online softmax (Dao 2023; Milakov and
    Gimelshein 2018) in a persistent kernel fed by a GPU scheduler after FlashAttention-3's varlen
    scheduler (Shah et al. 2024, with a capacity-sized metadata buffer), split-KV after
    FlashDecoding (Dao et al. 2023); on Hopper, FlashAttention-3's asynchronous design (wgmma,
    TMA, producer/consumer warpgroups, softmax overlapped with the next block's GEMM).
    """
    try:
        descaled = k_descale is not None or v_descale is not None or q_descale is not None
        key = signature.key((q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, sinks, alibi_slopes)
                            + ((k_descale, v_descale, q_descale) if descaled else ()),
                            window_size,
                            (max_seqlen_q, max_seqlen_k, causal, softcap, softmax_scale, num_splits, pack_gqa,
                             return_lse, metadata_layout, sort, head_swizzle, short_query_tokens, arch,
                             None if alibi_slopes is None else alibi_slopes.data_ptr(),
                             None if sinks is None else sinks.data_ptr(),
                             None if variant is None else variant.key(), out_dtype, quantize_q, max_num_splits)
                            + (tuple(None if x is None else x.data_ptr() for x in (k_descale, v_descale, q_descale))
                               if descaled else ()))
        prep = _CALLS.get(key)
    except Exception:  # noqa: BLE001 - an argument that cannot be keyed: the validating path names it
        key = prep = None
    if prep is not None and not validation.host_checks_enabled():
        # an FP8 q converted for the kernels (its own alignment checked as the validating path
        # does); a declined run goes down the validating path with the caller's q
        kq = q if prep.q_convert is None else None if q.data_ptr() & 15 else q.to(prep.q_convert)
        if prep.q_quant is not None:   # a 16-bit q quantised for the FP8 tensor-core kernel (a misaligned
            # one goes down the validating path, which names it: the key holds no addresses)
            kq = None if q.data_ptr() & 15 else \
                _quant_q.quantize(q, cu_seqlens_q, *prep.q_quant, kernel=prep.q_quant_kernel)[0]
        res = None if kq is None else prep.run(kq, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, None,
                                               **({"q_short": q} if prep.q_short else {}))
        if res is not None:
            if sinks is not None and not prep.sinks_fused:
                _sinks.apply(res[0], res[1], sinks, cu_seqlens_q)
            return res if return_lse else res[0]
    try:
        return _validated_call(key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                               page_table, causal, window_size, softcap, softmax_scale, num_splits, pack_gqa,
                               return_lse, out, metadata_layout, sort, head_swizzle, short_query_tokens, arch, sinks,
                               alibi_slopes, variant, k_descale, v_descale, q_descale, out_dtype, quantize_q,
                               max_num_splits)
    except KernelNotCachedError as e:   # JIT disabled: name the command that builds the missing kernel
        jit_hint.raise_with_command(e)
        raise


def _validated_call(key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table,
                    causal, window_size, softcap, softmax_scale, num_splits, pack_gqa, return_lse, out,
                    metadata_layout, sort, head_swizzle, short_query_tokens=None, arch=None, sinks=None,
                    alibi_slopes=None, variant=None, k_descale=None, v_descale=None, q_descale=None,
                    out_dtype=None, quantize_q=False, max_num_splits=0):
    """varlen_attention for a signature not prepared yet: every check, the one decision, the
    kernels; the prepared call is stored under ``key`` (None: not keyable) and run.  With
    ``sinks`` a single-class recipe runs the sink kernels (``Recipe.sinks_fused``: the epilogue and
    the combine apply them); the other recipes (mixed batches) write an LSE (allocated per call
    when not returned), which ``launch.sinks.apply`` uses after them."""
    call = arguments.varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=seqused_k,
                                 page_table=page_table, out=out, causal=causal, window_size=window_size,
                                 softcap=softcap, softmax_scale=softmax_scale, num_splits=num_splits,
                                 pack_gqa=pack_gqa, metadata_layout=metadata_layout, sort=sort,
                                 head_swizzle=head_swizzle, short_query_tokens=short_query_tokens, arch=arch,
                                 sinks=sinks, alibi_slopes=alibi_slopes, variant=variant, k_descale=k_descale,
                                 v_descale=v_descale, q_descale=q_descale, out_dtype=out_dtype,
                                 max_num_splits=max_num_splits)
    quantize_q = validation.flag("quantize_q", quantize_q)
    return_lse = validation.flag("return_lse", return_lse)
    quant = None
    if (quantize_q and not call.empty and call.signature.kv_dtype == "e4m3" and not call.signature.q_dtype
            and alibi_slopes is None and variant is None):   # (the FP8 tensor-core variant takes neither)
        quant = _quantized(call, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                           page_table, causal, window_size, softcap, softmax_scale, num_splits, pack_gqa, out,
                           metadata_layout, sort, head_swizzle, short_query_tokens, arch, sinks, k_descale, v_descale,
                           max_num_splits)
        if quant is not None:
            q16 = q   # (the short class of a fused recipe reads it: q_short)
            call, q, q_descale, recipe, q_kernel = quant
    sizes = call.sizes
    provisional = None
    if quant is not None:
        kernel_lse = bool(return_lse) or (sinks is not None and not recipe.sinks_fused)
        ordinal = q.device.index
    elif call.empty:
        kernel_lse = bool(return_lse) or sinks is not None
    else:
        ordinal = q.device.index
        device = runtime.device(ordinal)
        # (a user variant's three-warpgroup / option-"m" kernel that spilled: its twin, selection.spills)
        decided = decide.decide(call.signature, device, call.settings)
        recipe = spills.checked(decided, call.signature, device, call.settings, build=False)
        # a new user variant's Hopper kernel still building: its sm_80 recipe now (selection.tiered)
        provisional = tiered.provisional_recipe(recipe, call, device, ordinal)
        if provisional is not None:
            try:
                runtime.load(provisional.specs, ordinal)
                recipe = provisional
            except compiler.CompileError:
                # its sm_80 kernel does not build: the full recipe (whose Hopper kernel the
                # background build delivers, or whose error the synchronous build raises)
                provisional = None
        if provisional is None:   # built here and now: a variant kernel's spills (and its twin's) first,
            # from the decided recipe (the check above may have taken a twin whose spills it did not know)
            recipe = spills.checked(decided, call.signature, device, call.settings, build=True)
        kernel_lse = bool(return_lse) or (sinks is not None and not recipe.sinks_fused)
    if out is None:
        out = torch.empty((sizes["total_q"], sizes["num_heads_q"], sizes["head_dim_v"]), dtype=sizes["dtype"],
                          device=q.device)
    lse = torch.empty((sizes["num_heads_q"], sizes["total_q"]), dtype=torch.float32, device=q.device) \
        if kernel_lse else None
    if call.empty:
        return (out, lse) if return_lse else out
    q_convert = decide.kernel_q_dtype(recipe, sizes.get("q_dtype", ""), sizes["dtype"])
    try:
        loaded = runtime.load(recipe.specs, ordinal)
    except KernelNotCachedError as e:   # JIT disabled: the command that builds every kernel of the call
        jit_hint.raise_with_command(e, recipe.specs)
        raise
    kernels = bind.bind(recipe, loaded)
    if q_convert is not None:
        q = q.to(q_convert)
    prep = kernels.prepare(layout=recipe.workspace, batch=sizes["batch"], q=q, k=k, v=v, out=out, lse=lse,
                           page_table=page_table, scale=call.scale, window=call.window, softcap=call.softcap,
                           return_lse=kernel_lse, fixed_base=None, sizes=sizes,
                           **({} if alibi_slopes is None else {"alibi": (alibi_slopes.data_ptr(), call.alibi_stride)}),
                           **({"sinks": sinks.data_ptr()} if recipe.sinks_fused else {}),
                           **({} if call.user is None else {"user": call.user}),
                           **({} if call.descale is None else
                              {"descale": kernel_args.descale_fields(k_descale, v_descale, call.descale, q_descale)}),
                           **({} if quant is None else {"q_descale_delta": q_descale.data_ptr() - q.data_ptr()}),
                           **({"q_short": q16} if quant is not None and recipe.kind == "fused" else {}))
    prep.q_convert = q_convert
    if quant is not None:
        prep.q_quant, prep.q_quant_kernel = (sizes["batch"], sizes["num_heads_kv"]), q_kernel
    if key is not None and signature.cacheable(key) and provisional is None:   # (a provisional call is not kept)
        _CALLS.put(key, prep)
    out, lse = prep.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                        **({"q_short": q16} if prep.q_short else {}))
    if sinks is not None and not recipe.sinks_fused:
        _sinks.apply(out, lse, sinks, cu_seqlens_q)
    return (out, lse) if return_lse else out


def _quantized(call, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table, causal,
               window_size, softcap, softmax_scale, num_splits, pack_gqa, out, metadata_layout, sort, head_swizzle,
               short_query_tokens, arch, sinks, k_descale, v_descale, max_num_splits=0):
    """``quantize_q=True`` on a 16-bit q with an e4m3 cache (``call``: its checked call): the call
    checked again with an e4m3 q and a ``q_descale`` (the views of one uninitialised buffer) and
    decided; when the recipe runs the Hopper FP8 tensor-core variant (a single class, or the long
    class of the Hopper fused kernel, whose short class reads the 16-bit q) q is quantised into that
    buffer (``launch.quant_q``) and (checked call, q8, q_descale, recipe, kernel) returned, else
    None (the call keeps its exact 16-bit q, and nothing was quantised)."""
    sizes = call.sizes
    batch, hkv = sizes["batch"], sizes["num_heads_kv"]
    off, nbytes = _quant_q.buffer_bytes(q.shape[0], q.shape[1], q.shape[2], batch, hkv)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    q8 = buf[:q.numel()].view(_quant_q.Q8_DTYPE).view(q.shape)
    qd = buf[off:].view(torch.float32).view(batch, hkv)
    call8 = arguments.varlen_call(q8, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  seqused_k=seqused_k, page_table=page_table, out=out, causal=causal,
                                  window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                                  num_splits=num_splits, pack_gqa=pack_gqa, metadata_layout=metadata_layout, sort=sort,
                                  head_swizzle=head_swizzle, short_query_tokens=short_query_tokens, arch=arch,
                                  sinks=sinks, alibi_slopes=None, variant=None, k_descale=k_descale,
                                  v_descale=v_descale, q_descale=qd, out_dtype=q.dtype, max_num_splits=max_num_splits,
                                  q_descale_filled=False)
    device = runtime.device(q.device.index)
    recipe = spills.checked(decide.decide(call8.signature, device, call8.settings), call8.signature, device,
                            call8.settings, build=True)
    attn = getattr(recipe.variants, "attention", None)
    fused = getattr(recipe.variants, "fused", None)
    if not (recipe.kind == "single" and attn is not None and attn.fp8_mma) \
            and not (recipe.kind == "fused" and fused.long.fp8_mma):
        return None
    try:
        kernel = runtime.quant_kernel(q.device, q.dtype, call.settings.allow_untested_arch)
    except KernelNotCachedError as e:   # JIT disabled: the command that builds it and the call's kernels
        jit_hint.raise_with_command(e, recipe.specs)
        raise
    return (call8, *_quant_q.quantize(q, cu_seqlens_q, batch, hkv, buffer=buf, kernel=kernel), recipe, kernel)
