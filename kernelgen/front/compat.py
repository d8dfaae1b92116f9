"""FlashAttention-3 compatible entry points: ``flash_attn_varlen_func``, ``flash_attn_with_kvcache``,
``flash_attn_func`` (a batch of equal-length sequences), ``flash_attn_qkvpacked_func``,
``flash_attn_combine`` (the merge of partial outputs by their LSEs) and ``get_scheduler_metadata``
(returns None: kernelgen schedules on the GPU in every call, and its entry points accept
``scheduler_metadata=None``).

They take FlashAttention-3's argument names, positional order, defaults and return conventions
(``hopper/flash_attn_interface.py``), so code written against FA3 can switch with an import::

    from kernelgen.compat import flash_attn_varlen_func, flash_attn_with_kvcache

and map every call onto :func:`kernelgen.ops.varlen_attention` (the ``torch.compile``-traceable
form of :func:`kernelgen.varlen_attention`), so they work inside ``torch.compile(fullgraph=True)``
and CUDA-graph capture.  Importing this module imports torch and registers the
``torch.ops.kernelgen`` operators.

Mapping (FA3 -> kernelgen): ``cache_seqlens`` -> ``seqused_k``; ``page_table`` (FA3) or
``block_table`` (FlashAttention-2 / vLLM's fork) -> ``page_table``; ``return_attn_probs`` (varlen,
FA3's meaning: also return the LSE) or ``return_softmax_lse`` -> ``return_lse``; ``causal``,
``window_size``, ``softcap``, ``softmax_scale``, ``pack_gqa`` and ``out`` keep their names and
meaning; ``num_splits`` keeps FA3's (0 = heuristic, 1 = no split, n > 1 an upper bound of the
heuristic's split count: kernelgen's ``max_num_splits``); attention sinks (gpt-oss)
are ``sinks`` or ``s_aux`` (vLLM's FA3 fork's name), a float32 (num_heads_q,) tensor (there is no
FlashAttention-4 style entry point here, so no ``learnable_sink``).  ``deterministic`` is
accepted and ignored: it selects FA3's *backward* algorithm, kernelgen has no backward, and its
forward is deterministic by design (each output tile is computed by one CTA with no atomics on
the data, and split-KV partials are merged in a fixed order).

Accepted and ignored, as they change nothing kernelgen computes: ``scheduler_metadata`` (FA3's
precomputed schedule; kernelgen schedules on the GPU in every call, and ``AttentionPlan`` is its
fixed-capacity plan), vLLM's ``fa_version``, SGLang's ``ver``, ``rotary_interleaved``, and
with_kvcache's ``cu_seqlens_k_new`` / ``rotary_seqlens``, which FA3 reads only with ``k``/``v`` /
``rotary_cos``.  As FA3 reads them: a negative ``window_size`` side is unbounded (so is one above
kernelgen's 2^30 that reaches every key, ``>= max_seqlen_k - 1``), a ``softcap`` not above 0 is off,
``num_splits`` up to 256 (FA3's range) is a cap, and a bfloat16 / float16 ``s_aux``
(vLLM's fork takes bfloat16) is cast to float32 on the device in every call.

Every other FA3 (or vLLM fork) argument kernelgen does not implement raises
``NotImplementedError`` naming the argument, but only when it is set to something other than its
default: ``seqused_q``, ``qv`` (vLLM: ``q_v``), ``attention_chunk``, ``sm_margin``, ``dropout_p``,
vLLM's context-parallel ``cp_world_size`` / ``cp_rank`` / ``cp_tot_seqused_k``; with_kvcache also
``k``/``v`` (appending new tokens), ``rotary_cos``/``rotary_sin``, ``cache_batch_idx`` and
``cache_leftpad``.

``num_splits`` n > 1 is read as FA3's varlen scheduler reads it (hopper/flash_prepare_scheduler.cu,
for batches up to 992 requests): an upper bound of the automatic split count, so vLLM's
full-CUDA-graph bound (``num_splits=max_num_splits`` on every call of a captured size) lets short
caches and prefill chunks go unsplit and caps the workspace at n splits a request; kernelgen's
:func:`kernelgen.varlen_attention` forces its ``num_splits``, so the bound goes to its
``max_num_splits``.

FP8: ``k``/``v`` (``k_cache``/``v_cache``) in float8_e4m3fn or float8_e5m2 with a
float16/bfloat16 ``q`` take FA3's ``k_descale`` / ``v_descale`` (float32 (batch, num_heads_kv) or
broadcastable; see :func:`kernelgen.varlen_attention`).  FA3's FP8 forward, q, k and v all
float8_e4m3fn, works too, with ``q_descale`` (same shapes) beside the other two, and returns
bfloat16 as FA3 does (an ``out`` may be bfloat16 or float16); kernelgen also takes an e4m3 q with an
e5m2 cache (FA3 wants one FP8 dtype for the three).  An FP8 q with a 16-bit cache raises TypeError
naming k.  As FA3, the descales are ignored where they do not apply (never read, so vLLM's calls
stay free of host syncs and graph-capturable): ``q_descale`` with a float16/bfloat16 q,
``k_descale`` / ``v_descale`` with a 16-bit cache.
"""
import numbers
from typing import Optional

import torch

from ..kernels.spec import MAX_WINDOW
from ..selection import validation
from . import ops

__all__ = ["flash_attn_combine", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache", "get_scheduler_metadata"]

_INT32_MAX = 2 ** 31 - 1
#: FA3's largest num_splits (hopper/flash_api.cpp refuses more)
_FA3_MAX_SPLITS = 256

_HINTS = {
    "seqused_q": "kernelgen reads query lengths from cu_seqlens_q only",
    "qv": "there is no extra query-value product (DeepSeek MLA) in kernelgen",
    "attention_chunk": "chunked (Llama-4 style) attention is not implemented; use window_size for a sliding window",
    "sm_margin": "kernelgen's persistent kernels use every SM",
    "dropout_p": "kernelgen is inference-only (no dropout)",
    "k": "appending new keys/values to the cache is not implemented: write them into k_cache/v_cache first "
         "(your cache-update kernel) and pass cache_seqlens that include them",
    "v": "appending new keys/values to the cache is not implemented: write them into k_cache/v_cache first "
         "(your cache-update kernel) and pass cache_seqlens that include them",
    "rotary_cos": "apply rotary embeddings before the call",
    "rotary_sin": "apply rotary embeddings before the call",
    "cache_batch_idx": "index the cache with a page_table instead (one row of page ids per request)",
    "cache_leftpad": "left-padded caches are not implemented; use a page_table or packed k/v with cu_seqlens_k",
    "q_v": "there is no extra query-value product (DeepSeek MLA) in kernelgen",
    "cp_world_size": "context parallelism (keys sharded over GPUs) is not implemented",
    "cp_rank": "context parallelism (keys sharded over GPUs) is not implemented",
    "cp_tot_seqused_k": "context parallelism (keys sharded over GPUs) is not implemented",
}


def _show(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"<tensor {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}>"
    return repr(value)


def _reject_unsupported(fn: str, **given) -> None:
    """Raise NotImplementedError for the first argument that is set to a non-default value.

    ``given`` maps an argument name to ``(value, is_default)``.
    """
    for name, (value, is_default) in given.items():
        if not is_default:
            raise NotImplementedError(f"{fn}: argument {name}={_show(value)} is not supported by kernelgen "
                                      f"({_HINTS[name]}); leave it at its default")


def _is_int(x) -> bool:
    """A Python or numpy integer scalar, or torch's symbolic one (an int traced with dynamic shapes:
    make_fx, torch.export; read as eager reads the value); bools (Python's and numpy's) are not."""
    if type(x) is int:   # (the common case first: the ABC checks below cost about a microsecond each)
        return True
    return (isinstance(x, numbers.Integral) and not isinstance(x, bool)) or isinstance(x, torch.SymInt)


def _is_zero(x) -> bool:
    if x is None or ((type(x) is int or type(x) is float) and x == 0):
        return True
    return isinstance(x, numbers.Number) and not isinstance(x, bool) and x == 0


def _window(window_size, max_seqlen_k=None):
    """FA3's window sides as kernelgen takes them: ``None`` (vLLM's fork) is (-1, -1); a pair of
    ints has each negative side unbounded (-1), as FA3 reads it, and a side above kernelgen's range
    ([-1, MAX_WINDOW]) unbounded where it reaches every key of the call (>= ``max_seqlen_k`` - 1,
    FA3's own rule); anything else goes to kernelgen's check as given."""
    if window_size is None:  # vLLM's fork passes None for "no window"
        return (-1, -1)
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    left, right = window_size
    if not (_is_int(left) and _is_int(right)):
        return (left, right)

    def side(x):
        if x < 0 or (x > MAX_WINDOW and _is_int(max_seqlen_k) and x >= max_seqlen_k - 1):
            return -1
        return x
    return (side(left), side(right))


def _softcap(softcap):
    # FA3 soft-caps only when softcap > 0 ("anything > 0 activates"): a negative or NaN cap is off,
    # kernelgen's 0 (which refuses both)
    if isinstance(softcap, numbers.Real) and not isinstance(softcap, bool) and not softcap > 0:
        return 0.0
    return softcap


def _num_splits(num_splits) -> dict:
    """kernelgen's split arguments for FA3's ``num_splits``: <= 0 the heuristic (``num_splits=0``), 1
    no split, 2-256 an upper bound of the heuristic (``max_num_splits``: FA3's varlen scheduler takes
    min(its dynamic count, n)); anything else goes to ``num_splits`` as given, whose check names it
    (above 256 kernelgen refuses, as FA3 does)."""
    if _is_int(num_splits) and num_splits <= 0:
        return {"num_splits": 0}
    if _is_int(num_splits) and 2 <= num_splits <= _FA3_MAX_SPLITS:
        return {"num_splits": 0, "max_num_splits": num_splits if isinstance(num_splits, torch.SymInt)
                else int(num_splits)}
    if _is_int(num_splits) and num_splits > _FA3_MAX_SPLITS:
        raise ValueError(f"num_splits must be at most {_FA3_MAX_SPLITS} (<= 0: the heuristic, 1: no split, "
                         f"2-{_FA3_MAX_SPLITS}: an upper bound of the heuristic), got {num_splits}")
    return {"num_splits": num_splits}


def _page_table(fn: str, page_table, block_table):
    if page_table is not None and block_table is not None:
        raise ValueError(f"{fn}: give page_table or block_table (the same thing), not both")
    return page_table if page_table is not None else block_table


def _sinks(fn: str, sinks, s_aux):
    """One sinks tensor from ``sinks`` or ``s_aux``; a bfloat16 / float16 one (vLLM's fork takes
    bfloat16 ``s_aux``, and gpt-oss's weights are bfloat16) as a contiguous float32 copy, made on
    the device in every call (captured in a CUDA graph, so a replay reads the current weights);
    float32 is passed as is (no copy)."""
    if sinks is not None and s_aux is not None:
        raise ValueError(f"{fn}: give sinks or s_aux (the same thing, vLLM's name), not both")
    x = sinks if sinks is not None else s_aux
    if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16):
        x = x.float().contiguous()
    return x


def _qv(fn: str, qv, q_v):
    if qv is not None and q_v is not None:
        raise ValueError(f"{fn}: give qv or q_v (the same thing, vLLM's name), not both")
    return (("q_v", q_v) if q_v is not None else ("qv", qv))


def _q_descale(q, x):
    """FA3's ``q_descale``, which it reads only for an FP8 q (its flash_api.cpp) and ignores with a
    float16/bfloat16 q, which vLLM relies on (it passes its scales on every call): passed on with
    an FP8 q only (:func:`kernelgen.varlen_attention` checks it there: float32, (batch,
    num_heads_kv) or broadcastable), dropped otherwise, never read here (no host sync, CUDA-graph
    safe)."""
    return None if isinstance(q, torch.Tensor) and q.dtype in (torch.float16, torch.bfloat16) else x


def _kv_descales(k, k_descale, v_descale) -> tuple:
    """FA3's ``k_descale`` / ``v_descale``, which it ignores for a 16-bit cache (vLLM passes them on
    every call): passed on with an FP8 ``k`` only (:func:`kernelgen.varlen_attention` refuses them
    otherwise), never read here."""
    fp8 = isinstance(k, torch.Tensor) and k.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    return (k_descale, v_descale) if fp8 else (None, None)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    seqused_q=None,
    seqused_k=None,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
    return_attn_probs=False,
    *,
    block_table: Optional[torch.Tensor] = None,
    page_table: Optional[torch.Tensor] = None,
    return_softmax_lse: bool = False,
    out: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    scheduler_metadata: Optional[torch.Tensor] = None,
    s_aux: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    q_v: Optional[torch.Tensor] = None,
    fa_version: Optional[int] = None,
    ver: Optional[int] = None,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_tot_seqused_k: Optional[torch.Tensor] = None,
):
    """FlashAttention-3's ``flash_attn_varlen_func`` on kernelgen's kernels (forward only).

    Positional order and defaults are upstream FA3's (``num_splits=1``: no split-KV; pass 0 to let
    kernelgen's GPU scheduler split decode-like batches).  vLLM's fork orders
    ``max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k`` differently: call by keyword.  The
    keyword-only arguments come from FlashAttention-2 / vLLM's fork.

    Args:
        q: (total_q, num_heads_q, head_dim), float16 or bfloat16, CUDA; or float8_e4m3fn with FP8
            k/v (FA3's FP8 forward; see ``q_descale``).
        k, v: packed (total_k, num_heads_kv, head_dim / head_dim_v), or with ``block_table`` /
            ``page_table`` a paged cache (num_pages, page_size, num_heads_kv, head_dim / head_dim_v);
            q's dtype, or float8_e4m3fn / float8_e5m2 (an FP8 cache; required with an FP8 q).
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,), cumulative lengths in tokens.  With a page
            table, ``cu_seqlens_k`` only gives key lengths (FlashAttention-2's paged convention)
            unless ``seqused_k`` is given.
        max_seqlen_q, max_seqlen_k: longest query / key length in tokens (ints; hints for the
            tile shape and split bound).
        seqused_k: int32 (batch,), keys used per request.
        softmax_scale: logit scale, default 1 / sqrt(head_dim).
        causal, window_size, softcap: bottom-right aligned causal mask, (left, right) sliding
            window in tokens (-1 = unbounded, as any negative side, or one above 2^30 that reaches
            every key: >= max_seqlen_k - 1; None accepted as (-1, -1)), logit soft-capping (0 =
            off, as any value not above 0).
        num_splits: split-KV: 1 none, 0 (or negative) kernelgen's heuristic, 2-256 an upper
            bound of the heuristic's count (FA3's varlen reading; kernelgen's ``max_num_splits``);
            above 256 ValueError, as FA3.
        pack_gqa: None = heuristic.
        deterministic: accepted and ignored (backward-only in FA3; kernelgen's forward is
            deterministic).
        return_attn_probs, return_softmax_lse: also return the log-sum-exp (FA3 returns
            (out, softmax_lse) for return_attn_probs; no attention probabilities are returned).
        block_table, page_table: int32 (batch, max_pages_per_seq) page ids (paged K/V).
        out: optional (total_q, num_heads_q, head_dim_v) output tensor in q's dtype (an FP8 q:
            bfloat16, FA3's, or float16).
        s_aux, sinks: attention sinks (vLLM's FA3 fork calls them ``s_aux``; give one of the
            two): contiguous float32 (num_heads_q,) on q's device (bfloat16 / float16 are cast
            to a float32 copy in every call), one value-less logit per query head in every
            softmax denominator; the LSE includes it.  The sink kernels add it on a
            call of one request class; a mixed batch rescales out by the LSE after its kernels
            (see :func:`kernelgen.varlen_attention`).
        alibi_slopes: ALiBi slopes, FlashAttention-2/3's argument and convention: float32
            (num_heads_q,) or (batch, num_heads_q) on q's device; the logit of query row i and key
            j gets ``-slope * |i + seqlen_k - seqlen_q - j|`` (see :func:`kernelgen.varlen_attention`).
        q_descale, k_descale, v_descale: FA3's FP8 descale factors: float32 tensors (batch,
            num_heads_kv) or broadcastable (a (1,) or () factor for the whole tensor), or None
            (1).  k_descale / v_descale with k/v float8_e4m3fn or float8_e5m2, q_descale with a
            float8_e4m3fn q (request b's queries of the query heads of KV head h are ``q *
            q_descale[b, h]``).  Ignored (never read) where FA3 ignores them: q_descale with a
            16-bit q, k_descale / v_descale with a 16-bit cache.  See
            :func:`kernelgen.varlen_attention`.
        scheduler_metadata, fa_version, ver: accepted and ignored (FA3's precomputed schedule,
            kernelgen schedules on the GPU in every call; vLLM's and SGLang's implementation
            choice).
        q_v: vLLM's name of ``qv`` (unsupported); cp_world_size, cp_rank, cp_tot_seqused_k:
            vLLM's context parallelism, only at their defaults (1, 0, None).

    Returns:
        out (total_q, num_heads_q, head_dim_v) in q's dtype (bfloat16 for an FP8 q, as FA3, or
        ``out``'s dtype), or (out, softmax_lse) with softmax_lse (num_heads_q, total_q) float32,
        natural log.

    Raises:
        NotImplementedError: an unsupported FA3 argument (seqused_q, qv / q_v, attention_chunk,
            sm_margin, dropout_p, cp_world_size, cp_rank, cp_tot_seqused_k) is set; the message
            names it.
        TypeError: cu_seqlens_q is None (a batched q: use flash_attn_with_kvcache) or not a
            tensor (e.g. vLLM's positional order), or a kernelgen
            type/dtype check failed (the message names the argument): e.g. an FP8 q with a 16-bit
            k (k), a float8_e5m2 q (q), a q_descale not a float32 tensor, an ``out`` neither
            bfloat16 nor float16 for an FP8 q.
        ValueError: shapes, devices or values rejected by :func:`kernelgen.varlen_attention`
            (the message names kernelgen's argument: page_table for block_table; q_descale of a
            wrong shape), or both page_table and block_table (sinks and s_aux, qv and q_v) given,
            or a page table without key lengths.
    """
    fn = "flash_attn_varlen_func"
    qv_name, qv = _qv(fn, qv, q_v)
    _reject_unsupported(
        fn,
        seqused_q=(seqused_q, seqused_q is None),
        **{qv_name: (qv, qv is None)},
        attention_chunk=(attention_chunk, _is_zero(attention_chunk)),
        sm_margin=(sm_margin, _is_zero(sm_margin)),
        dropout_p=(dropout_p, _is_zero(dropout_p)),
        **_cp_args(cp_world_size, cp_rank, cp_tot_seqused_k),
    )
    if cu_seqlens_q is None:
        raise TypeError(f"{fn}: cu_seqlens_q is required: kernelgen's varlen entry takes q packed as (total_q, "
                        f"num_heads_q, head_dim); for a (batch, seqlen_q, num_heads_q, head_dim) q use "
                        f"flash_attn_with_kvcache, or pass cu_seqlens_q = arange(batch + 1) * seqlen_q")
    if not isinstance(cu_seqlens_q, torch.Tensor):
        raise TypeError(f"{fn}: cu_seqlens_q must be an int32 tensor, got {type(cu_seqlens_q).__name__}; "
                        f"kernelgen.compat follows FlashAttention-3's order (q, k, v, cu_seqlens_q, cu_seqlens_k, "
                        f"max_seqlen_q, max_seqlen_k); vLLM's fork puts max_seqlen_q first, so pass keywords")
    table = _page_table(fn, page_table, block_table)
    if table is not None:
        if seqused_k is None:
            if cu_seqlens_k is None:
                raise ValueError(f"{fn}: a paged cache (page_table/block_table) needs seqused_k or cu_seqlens_k "
                                 f"for the key lengths")
            # (checked as varlen_attention checks it on packed k/v before the lengths are taken from it)
            if not isinstance(q, torch.Tensor):
                raise TypeError(f"{fn}: q must be a torch.Tensor, got {type(q).__name__}")
            if validation.cu_seqlens("cu_seqlens_k", cu_seqlens_k, q.device) != cu_seqlens_q.shape[0] - 1:
                raise ValueError(f"{fn}: cu_seqlens_k must have as many entries as cu_seqlens_q "
                                 f"({cu_seqlens_q.shape[0]}), got shape {tuple(cu_seqlens_k.shape)}")
            seqused_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        cu_seqlens_k = None
    return ops.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=seqused_k, page_table=table,
        causal=causal, window_size=_window(window_size, max_seqlen_k), softcap=_softcap(softcap),
        softmax_scale=softmax_scale,
        **_num_splits(num_splits), pack_gqa=pack_gqa,
        return_lse=bool(return_attn_probs or return_softmax_lse), out=out, sinks=_sinks(fn, sinks, s_aux),
        alibi_slopes=alibi_slopes, **dict(zip(("k_descale", "v_descale"), _kv_descales(k, k_descale, v_descale))),
        q_descale=_q_descale(q, q_descale))


def _cp_args(cp_world_size, cp_rank, cp_tot_seqused_k) -> dict:
    """vLLM's fork's context-parallel arguments for ``_reject_unsupported`` (defaults: 1, 0, None)."""
    return dict(cp_world_size=(cp_world_size, _is_int(cp_world_size) and cp_world_size == 1),
                cp_rank=(cp_rank, _is_int(cp_rank) and cp_rank == 0),
                cp_tot_seqused_k=(cp_tot_seqused_k, cp_tot_seqused_k is None))


def _mergeable(x) -> bool:
    """True when dims 0 and 1 of ``x`` can be viewed as one (no copy)."""
    return x.shape[0] <= 1 or x.shape[1] <= 1 or x.stride(0) == x.stride(1) * x.shape[1]


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    qv=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    page_table=None,
    cu_seqlens_q=None,
    cu_seqlens_k_new=None,
    max_seqlen_q=None,
    rotary_seqlens=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    rotary_interleaved=True,
    scheduler_metadata=None,
    num_splits=0,
    pack_gqa=None,
    sm_margin=0,
    return_softmax_lse=False,
    *,
    block_table: Optional[torch.Tensor] = None,
    alibi_slopes: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    s_aux: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    fa_version: Optional[int] = None,
    ver: Optional[int] = None,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_tot_seqused_k: Optional[torch.Tensor] = None,
):
    """FlashAttention-3's ``flash_attn_with_kvcache`` on kernelgen's kernels (attention over an
    existing KV cache; forward only, no in-place append).

    The query batch becomes kernelgen's varlen layout (``cu_seqlens_q = arange(batch + 1) *
    seqlen_q``, a view of q when q is contiguous) and the output is reshaped back.  A paged cache
    goes to kernelgen as is.  A non-paged cache (batch_size_cache, seqlen_cache, Hkv, d) becomes
    packed K/V with ``cu_seqlens_k = arange(batch + 1) * seqlen_cache`` and ``seqused_k =
    cache_seqlens``, as a *view* (no copy); when its first two dims cannot be viewed as one (e.g.
    a slice ``cache[:, :n]`` of a longer cache) or it has 2^31 rows or more, it is passed as a
    paged cache with one page per request (``page_size = seqlen_cache``, ``page_table =
    arange(batch)``), again without a copy.

    Args:
        q: (batch, seqlen_q, num_heads_q, head_dim), or (total_q, num_heads_q, head_dim) with
            ``cu_seqlens_q``; float16 or bfloat16, CUDA; or float8_e4m3fn with an FP8 cache (FA3's
            FP8 forward; see ``q_descale``).
        k_cache, v_cache: (batch_size_cache >= batch, seqlen_cache, num_heads_kv, head_dim /
            head_dim_v) without a page table, or (num_pages, page_size, num_heads_kv, head_dim /
            head_dim_v) with one; last dim contiguous; q's dtype, or float8_e4m3fn / float8_e5m2
            (required with an FP8 q).
        cache_seqlens: keys in the cache per request (tokens): an integer (Python int or numpy
            integer scalar, the same for every request), or an int32 (batch,) tensor.  None: every request uses the whole cache row (seqlen_cache, or
            max_pages_per_seq * page_size when paged).
        page_table (FA3) or block_table (FlashAttention-2): int32 (batch, max_pages_per_seq).
        cu_seqlens_q: int32 (batch + 1,) for a varlen q; max_seqlen_q: its longest request (tokens).
        softmax_scale, causal, window_size, softcap, pack_gqa: as in ``flash_attn_varlen_func``.
        num_splits: 0 (default) lets kernelgen's GPU scheduler split long caches; 1 none; 2-256 an
            upper bound of its split count (as ``flash_attn_varlen_func``).
        rotary_interleaved, rotary_seqlens: ignored (only read with rotary_cos, which is
            unsupported); cu_seqlens_k_new: ignored (only read with k / v, unsupported).
        scheduler_metadata, fa_version, ver: accepted and ignored, as in ``flash_attn_varlen_func``;
            cp_world_size, cp_rank, cp_tot_seqused_k: only at their defaults (1, 0, None).
        return_softmax_lse: also return the log-sum-exp.
        out: optional output tensor shaped like the returned out (a view of it must be possible
            as (total_q, num_heads_q, head_dim_v)), in q's dtype (an FP8 q: bfloat16 or float16).
        s_aux, sinks: attention sinks, float32 (num_heads_q,) (bfloat16 / float16 cast), as in
            ``flash_attn_varlen_func``.
        alibi_slopes: ALiBi slopes, float32 (num_heads_q,) or (batch, num_heads_q), as in
            ``flash_attn_varlen_func`` (query row i of a request is its i-th new token).
        q_descale, k_descale, v_descale: as in ``flash_attn_varlen_func``: float32 (batch,
            num_heads_kv) or broadcastable, k_descale / v_descale for an FP8 k_cache/v_cache,
            q_descale for a float8_e4m3fn q; ignored (never read) where FA3 ignores them.

    Returns:
        out (batch, seqlen_q, num_heads_q, head_dim_v) in q's dtype (bfloat16 for an FP8 q, as
        FA3, or ``out``'s dtype) ((total_q, num_heads_q, head_dim_v) with cu_seqlens_q); with
        ``return_softmax_lse`` also softmax_lse float32,
        natural log: (batch, num_heads_q, seqlen_q) as in FA3 (a small contiguous copy of
        kernelgen's (num_heads_q, total_q)), or (num_heads_q, total_q) with cu_seqlens_q.

    Raises:
        NotImplementedError: an unsupported argument is set (k/v append, qv, rotary_cos /
            rotary_sin, cache_batch_idx, cache_leftpad, attention_chunk, sm_margin, cp_world_size,
            cp_rank, cp_tot_seqused_k); the message names it.
        TypeError: cache_seqlens is not an integer or an int32 tensor (a bool or a float
            included), or a kernelgen type check failed (named; an FP8 q with a 16-bit cache
            names k).
        ValueError: q/k_cache/out shapes that do not fit together (named), an integer
            cache_seqlens outside [0, 2^31 - 1] or above the tokens the cache holds per request
            (seqlen_cache, or the page table's pages x page_size), or shapes, devices or values rejected by
            :func:`kernelgen.varlen_attention`.
    """
    fn = "flash_attn_with_kvcache"
    _reject_unsupported(
        fn,
        k=(k, k is None),
        v=(v, v is None),
        qv=(qv, qv is None),
        rotary_cos=(rotary_cos, rotary_cos is None),
        rotary_sin=(rotary_sin, rotary_sin is None),
        cache_batch_idx=(cache_batch_idx, cache_batch_idx is None),
        cache_leftpad=(cache_leftpad, cache_leftpad is None),
        attention_chunk=(attention_chunk, _is_zero(attention_chunk)),
        sm_margin=(sm_margin, _is_zero(sm_margin)),
        **_cp_args(cp_world_size, cp_rank, cp_tot_seqused_k),
    )
    table = _page_table(fn, page_table, block_table)
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"{fn}: q must be a torch.Tensor, got {type(q).__name__}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            what = "(num_pages, page_size, Hkv, d)" if table is not None else "(batch_size_cache, seqlen_cache, Hkv, d)"
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{fn}: {name} must be a 4-dimensional tensor {what}, got {got}")
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]):
        raise ValueError(f"{fn}: v_cache must match k_cache in its first three dims, got {tuple(v_cache.shape)} "
                         f"and {tuple(k_cache.shape)}")

    # ---- queries -> varlen layout
    if cu_seqlens_q is not None:
        validation.cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.device)
        if q.dim() != 3:
            raise ValueError(f"{fn}: with cu_seqlens_q, q must be (total_q, num_heads_q, head_dim), got "
                             f"shape {tuple(q.shape)}")
        batch, seqlen_q = cu_seqlens_q.shape[0] - 1, None
        q3 = q
    else:
        if q.dim() != 4:
            raise ValueError(f"{fn}: q must be (batch, seqlen_q, num_heads_q, head_dim), got shape {tuple(q.shape)}")
        batch, seqlen_q = q.shape[0], q.shape[1]
        q3 = q.reshape(batch * seqlen_q, q.shape[2], q.shape[3])  # a view when q is contiguous
        cu_seqlens_q = torch.arange(batch + 1, dtype=torch.int32, device=q.device) * seqlen_q
        max_seqlen_q = seqlen_q
    total_q, hq = q3.shape[0], q3.shape[1]
    dv = v_cache.shape[-1]

    # ---- key lengths
    given_seqlens = None   # an integer cache_seqlens, checked against the cache's capacity below
    if cache_seqlens is not None:
        if _is_int(cache_seqlens):  # Python or numpy integer (FA3 takes an int); bools are not
            if not 0 <= cache_seqlens <= _INT32_MAX:
                raise ValueError(f"{fn}: cache_seqlens must be in [0, {_INT32_MAX}] tokens, got {cache_seqlens}")
            given_seqlens = int(cache_seqlens)
            cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
        elif not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32:
            got = cache_seqlens.dtype if isinstance(cache_seqlens, torch.Tensor) else type(cache_seqlens).__name__
            raise TypeError(f"{fn}: cache_seqlens must be an integer (int or numpy integer) or an int32 tensor, "
                            f"got {got}")
        elif cache_seqlens.dim() != 1 or cache_seqlens.shape[0] != batch:
            raise ValueError(f"{fn}: cache_seqlens must have shape ({batch},), got {tuple(cache_seqlens.shape)}")

    # ---- keys -> packed view or paged
    cu_seqlens_k = None
    max_seqlen_k = None
    kk, vv = k_cache, v_cache
    if table is None:
        b_cache, seqlen_cache = k_cache.shape[0], k_cache.shape[1]
        if b_cache < batch:
            raise ValueError(f"{fn}: k_cache has {b_cache} rows (batch_size_cache) for a batch of {batch} requests")
        if _mergeable(k_cache) and _mergeable(v_cache) and batch * seqlen_cache <= _INT32_MAX:
            kk = k_cache.reshape(b_cache * seqlen_cache, k_cache.shape[2], k_cache.shape[3])  # views, no copy
            vv = v_cache.reshape(b_cache * seqlen_cache, v_cache.shape[2], v_cache.shape[3])
            cu_seqlens_k = torch.arange(batch + 1, dtype=torch.int32, device=q.device) * seqlen_cache
            max_seqlen_k = seqlen_cache
        else:  # one page per request: still no copy
            table = torch.arange(batch, dtype=torch.int32, device=q.device).view(batch, 1)
            if cache_seqlens is None:
                cache_seqlens = torch.full((batch,), seqlen_cache, dtype=torch.int32, device=q.device)
    elif cache_seqlens is None:
        cache_seqlens = torch.full((batch,), table.shape[1] * k_cache.shape[1], dtype=torch.int32, device=q.device)
    # tokens a request's rows or pages hold (a malformed page_table is left to varlen_attention's checks)
    room = k_cache.shape[1] * (1 if table is None else table.shape[1] if isinstance(table, torch.Tensor)
                               and table.dim() == 2 else _INT32_MAX)
    if given_seqlens is not None and given_seqlens > room:
        # (known on the host: a request would read the next one's cache rows, or past the cache)
        raise ValueError(f"{fn}: cache_seqlens ({given_seqlens}) exceeds the keys the cache holds per request "
                         f"({room} tokens)")

    # ---- output buffer
    out3 = None
    if out is not None:
        want = (total_q, hq, dv) if seqlen_q is None else (batch, seqlen_q, hq, dv)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"{fn}: out must have shape {want}, got {got}")
        if seqlen_q is None:
            out3 = out
        elif _mergeable(out):
            out3 = out.reshape(total_q, hq, dv)
        else:
            raise ValueError(f"{fn}: out must be viewable as (batch * seqlen_q, num_heads_q, head_dim_v) "
                             f"(dims 0 and 1 contiguous with each other)")

    res = ops.varlen_attention(
        q3, kk, vv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=cache_seqlens,
        page_table=table, causal=causal, window_size=_window(window_size, room), softcap=_softcap(softcap),
        softmax_scale=softmax_scale, **_num_splits(num_splits), pack_gqa=pack_gqa,
        return_lse=bool(return_softmax_lse), out=out3, sinks=_sinks(fn, sinks, s_aux), alibi_slopes=alibi_slopes,
        **dict(zip(("k_descale", "v_descale"), _kv_descales(kk, k_descale, v_descale))),
        q_descale=_q_descale(q3, q_descale))
    o3, lse = (res if return_softmax_lse else (res, None))
    if seqlen_q is None:
        o = o3
    else:
        o = out if out is not None else o3.view(batch, seqlen_q, hq, dv)
        if lse is not None:  # (Hq, batch * seqlen_q) -> FA3's (batch, Hq, seqlen_q)
            lse = lse.view(hq, batch, seqlen_q).transpose(0, 1).contiguous()
    return (o, lse) if return_softmax_lse else o


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """FlashAttention-3's ``flash_attn_func`` (``hopper/flash_attn_interface.py``; its argument
    names, order and defaults, ``num_splits=1`` included) on kernelgen's kernels: attention over a
    batch of sequences of equal lengths, forward only.

    Args:
        q: (batch, seqlen_q, num_heads_q, head_dim); k, v: (batch, seqlen_k, num_heads_kv,
            head_dim / head_dim_v); dtypes and the other arguments as in ``flash_attn_with_kvcache``
            (``deterministic`` is accepted and ignored, as in ``flash_attn_varlen_func``).
        return_attn_probs: also return the log-sum-exp (FA3's meaning of the flag).

    Returns:
        out (batch, seqlen_q, num_heads_q, head_dim_v); with ``return_attn_probs`` (out,
        softmax_lse), softmax_lse float32 (batch, num_heads_q, seqlen_q), natural log.

    Raises:
        ValueError: q, k or v not 4-D, or their batch sizes (or k's and v's sequence lengths)
            differing; then what ``flash_attn_with_kvcache(q, k, v)`` raises (its messages name
            that function: this one is it with the whole k / v as the cache).
        NotImplementedError: ``qv``, ``attention_chunk`` or ``sm_margin`` set.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"flash_attn_func: {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"flash_attn_func: {name} must have 4 dimensions (batch, seqlen, num_heads, head_dim), "
                             f"got shape {tuple(x.shape)}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]) or k.shape[1] != v.shape[1]:
        raise ValueError(f"flash_attn_func: q, k and v must have the same batch size and k and v the same seqlen, got "
                         f"shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    return flash_attn_with_kvcache(q, k, v, qv=qv, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                                   softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                   attention_chunk=attention_chunk, softcap=softcap, num_splits=num_splits,
                                   pack_gqa=pack_gqa, sm_margin=sm_margin, return_softmax_lse=return_attn_probs)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None,
                              window_size=(-1, -1), attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """FlashAttention-3's ``flash_attn_qkvpacked_func`` (``hopper/flash_attn_interface.py``; its argument
    names, order and defaults) on kernelgen's kernels: self-attention over a batch of equal-length
    sequences whose q, k and v are one tensor, forward only.  q, k and v are views of ``qkv`` (the
    kernels take their strides; nothing is copied), then ``flash_attn_func``.

    Args:
        qkv: (batch, seqlen, 3, num_heads, head_dim), or with ``num_heads_q`` (batch, seqlen,
            num_heads_q + 2 * num_heads_kv, head_dim): the query heads, then the key heads, then the
            value heads (GQA / MQA); dtypes as ``flash_attn_func``'s q, k and v.
        num_heads_q: the query heads of the second form (None: the first form).
        the others: as ``flash_attn_func`` (``deterministic`` is accepted and ignored).

    Returns:
        out (batch, seqlen, num_heads_q, head_dim); with ``return_attn_probs`` (out, softmax_lse),
        softmax_lse float32 (batch, num_heads_q, seqlen), natural log.

    Raises:
        TypeError: ``qkv`` not a tensor, ``num_heads_q`` not an int.
        ValueError: ``qkv`` not of either shape, or ``num_heads_q`` leaving no or an odd number of
            key / value heads; then what ``flash_attn_func`` raises.
        NotImplementedError: ``attention_chunk`` or ``sm_margin`` set.
    """
    if not isinstance(qkv, torch.Tensor):
        raise TypeError(f"flash_attn_qkvpacked_func: qkv must be a torch.Tensor, got {type(qkv).__name__}")
    if num_heads_q is None:
        if qkv.dim() != 5 or qkv.shape[2] != 3:
            raise ValueError("flash_attn_qkvpacked_func: qkv must have shape (batch, seqlen, 3, num_heads, head_dim) "
                             f"(or pass num_heads_q for (batch, seqlen, num_heads_q + 2 * num_heads_kv, head_dim)), "
                             f"got {tuple(qkv.shape)}")
        q, k, v = qkv.unbind(dim=2)
    else:
        if not _is_int(num_heads_q):
            raise TypeError(f"flash_attn_qkvpacked_func: num_heads_q must be an int, got {type(num_heads_q).__name__}")
        if qkv.dim() != 4:
            raise ValueError("flash_attn_qkvpacked_func: with num_heads_q, qkv must have shape (batch, seqlen, "
                             f"num_heads_q + 2 * num_heads_kv, head_dim), got {tuple(qkv.shape)}")
        kv2 = qkv.shape[2] - int(num_heads_q)
        if num_heads_q < 1 or kv2 < 2 or kv2 % 2:
            raise ValueError(f"flash_attn_qkvpacked_func: num_heads_q={num_heads_q} leaves {kv2} of qkv's "
                             f"{qkv.shape[2]} heads for k and v (a positive even number needed)")
        q, k, v = qkv.split([int(num_heads_q), kv2 // 2, kv2 // 2], dim=2)
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, q_descale=q_descale,
                           k_descale=k_descale, v_descale=v_descale, window_size=window_size,
                           attention_chunk=attention_chunk, softcap=softcap, deterministic=deterministic,
                           sm_margin=sm_margin, return_attn_probs=return_attn_probs)


_COMBINE_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """FlashAttention-3's ``flash_attn_combine`` (``hopper/flash_attn_interface.py``, its C++
    ``mha_combine``; its argument names, order, defaults and return values): merges attention
    computed over disjoint key sets (split-KV partials, cascade / shared-prefix attention, context
    parallelism) into attention over their union.

    For S partials of one row with log-sum-exps l_s and outputs O_s: M = max_s l_s, w_s =
    exp(l_s - M), Z = sum_s w_s, ``out = sum_s (w_s / Z) O_s``, ``softmax_lse = M + ln Z`` (the merge
    rule of FlashDecoding and FlashAttention-3's combine kernel, computed here from the math).  A
    partial whose l_s is -inf (its keys were all masked, or it had none) weighs exactly 0 and its
    O_s is never read into the sum (it may hold anything, NaN included); a row whose partials are all
    -inf gives ``out`` 0 and ``softmax_lse`` -inf, as FA3's Hopper kernel does.  The weights and the
    sum are float32, as FA3's.

    Computed with torch operations on the partials' device (CPU too), so it works under
    ``torch.compile(fullgraph=True)`` and CUDA-graph capture (no host synchronisation); it is not one
    fused kernel (FA3's is): it reads the partials twice and allocates an (S, batch, seqlen,
    num_heads, head_dim) float32 temporary.  kernelgen's own split-KV calls never come here: their
    partials are merged by kernelgen's combine kernel inside the call.

    Args:
        out_partial: float32 (num_splits, batch, seqlen, num_heads, head_dim): partial s's
            attention output for each (batch, position, head) row (any strides).
        lse_partial: float32 (num_splits, batch, seqlen, num_heads): partial s's natural-log
            log-sum-exp of the scaled scores of its keys, -inf where it saw none (any strides; FA3
            wants the seqlen dimension contiguous, kernelgen does not).
        out: optional output (batch, seqlen, num_heads, head_dim) in ``out_dtype`` (written in place
            and returned; any strides).  With ``out`` and no ``out_dtype``, ``out``'s dtype is taken
            (FA3 then wants float32).
        out_dtype: float32 (default), bfloat16 or float16.

    Returns:
        (out, softmax_lse): out (batch, seqlen, num_heads, head_dim) in ``out_dtype``;
        softmax_lse float32 (batch, seqlen, num_heads), a transposed view of a contiguous (batch,
        num_heads, seqlen) tensor, as FA3 returns it.

    Raises:
        TypeError: a non-tensor argument, a partial not float32, an ``out_dtype`` (or ``out`` dtype)
            other than float32 / bfloat16 / float16, or ``out``'s dtype not ``out_dtype``.
        ValueError: ``out_partial`` not 5-D or with no splits, ``lse_partial`` not
            ``out_partial.shape[:4]``, ``out`` not ``out_partial.shape[1:]``, or tensors on
            different devices.
    """
    fn = "flash_attn_combine"
    for name, x in (("out_partial", out_partial), ("lse_partial", lse_partial)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype != torch.float32:
            raise TypeError(f"{fn}: {name} must be float32 (FA3's split-KV partials), got {x.dtype}")
    if out_partial.dim() != 5:
        raise ValueError(f"{fn}: out_partial must have shape (num_splits, batch, seqlen, num_heads, head_dim), "
                         f"got {tuple(out_partial.shape)}")
    if out_partial.shape[0] < 1:
        raise ValueError(f"{fn}: out_partial has no splits (shape {tuple(out_partial.shape)})")
    if tuple(lse_partial.shape) != tuple(out_partial.shape[:4]):
        raise ValueError(f"{fn}: lse_partial must have shape (num_splits, batch, seqlen, num_heads) = "
                         f"{tuple(out_partial.shape[:4])}, got {tuple(lse_partial.shape)}")
    if lse_partial.device != out_partial.device:
        raise ValueError(f"{fn}: lse_partial is on {lse_partial.device}, out_partial on {out_partial.device}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{fn}: out must be a torch.Tensor or None, got {type(out).__name__}")
        if tuple(out.shape) != tuple(out_partial.shape[1:]):
            raise ValueError(f"{fn}: out must have shape (batch, seqlen, num_heads, head_dim) = "
                             f"{tuple(out_partial.shape[1:])}, got {tuple(out.shape)}")
        if out.device != out_partial.device:
            raise ValueError(f"{fn}: out is on {out.device}, out_partial on {out_partial.device}")
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else torch.float32
        if out_dtype not in _COMBINE_OUT_DTYPES:
            raise TypeError(f"{fn}: out must be float32, bfloat16 or float16, got {out_dtype}")
    if out_dtype not in _COMBINE_OUT_DTYPES:
        raise TypeError(f"{fn}: out_dtype must be torch.float32, torch.bfloat16 or torch.float16, got {out_dtype}")
    if out is not None and out.dtype != out_dtype:
        raise TypeError(f"{fn}: out has dtype {out.dtype}, out_dtype is {out_dtype}")
    if out is not None:
        validation.no_overlap(f"{fn}: out", out)
    m = lse_partial.amax(dim=0)                                   # (B, L, H); -inf: no partial saw a key
    dead = m == float("-inf")
    m_safe = torch.where(dead, torch.zeros_like(m), m)
    w = torch.exp(lse_partial - m_safe)                           # exactly 0 where l_s is -inf
    z = w.sum(dim=0)
    z_safe = torch.where(dead, torch.ones_like(z), z)             # no 0/0 (nor its NaN gradient) in dead rows
    lse = torch.where(dead, m, torch.log(z_safe) + m_safe)       # -inf where every l_s is -inf
    scale = torch.where(w > 0, w / z_safe, torch.zeros_like(w)).unsqueeze(-1)
    # one (S, B, L, H, D) temporary: zero the unread partials, scale in place, sum
    merged = torch.where(scale > 0, out_partial, torch.zeros((), dtype=torch.float32,
                                                             device=out_partial.device)).mul_(scale).sum(dim=0)
    batch, seqlen, heads = m.shape
    softmax_lse = torch.empty(batch, heads, seqlen, dtype=torch.float32, device=lse.device).transpose(1, 2)
    softmax_lse.copy_(lse)
    if out is None:
        return merged.to(out_dtype), softmax_lse
    out.copy_(merged)
    return out, softmax_lse


def get_scheduler_metadata(*args, **kwargs):
    """FlashAttention-3's ``get_scheduler_metadata`` (vLLM imports it beside
    ``flash_attn_varlen_func``): returns None, which every kernelgen entry point takes as
    ``scheduler_metadata`` (FA3 then schedules in the call, as kernelgen always does: its scheduler
    runs on the GPU in every call; ``kernelgen.AttentionPlan`` is its fixed-capacity plan for CUDA
    graphs).  Any arguments are accepted and not read."""
    return None
