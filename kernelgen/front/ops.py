"""kernelgen as PyTorch custom ops, for ``torch.compile`` and CUDA graphs.

Importing this module registers two operators in the ``kernelgen`` namespace (it imports torch;
``import kernelgen`` alone does not, so the CLI's cache commands stay light):

``torch.ops.kernelgen.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None,
max_seqlen_k=None, seqused_k=None, page_table=None, causal=False, window_left=-1, window_right=-1,
softcap=0.0, softmax_scale=None, num_splits=0, pack_gqa=None, return_lse=False,
metadata_layout="soa", sort=True, head_swizzle=True, sinks=None, alibi_slopes=None, k_descale=None,
v_descale=None, q_descale=None, out_dtype=None, quantize_q=False, max_num_splits=0) -> (Tensor out, Tensor lse)``
    Functional: allocates ``out`` (total_q, num_heads_q, head_dim_v) in q's dtype (an FP8 q:
    ``out_dtype``, bfloat16 by default).  ``lse`` is
    (num_heads_q, total_q) float32 (natural log) when ``return_lse`` is true, else an *empty*
    float32 tensor of shape (0,) on q's device: the op always returns two tensors, and asking for
    no LSE costs no allocation and no writes.

``torch.ops.kernelgen.varlen_attention_out(out, q, k, v, cu_seqlens_q, ..., head_swizzle=True,
sinks=None, alibi_slopes=None, k_descale=None, v_descale=None, q_descale=None, out_dtype=None,
quantize_q=False, max_num_splits=0) -> Tensor lse``
    The same with a caller-provided ``out`` that the op writes in place (declared with
    ``mutates_args=("out",)``, so ``torch.compile`` functionalises it correctly); returns only
    ``lse`` (same convention) because a custom op may not return one of its inputs.

The arguments are those of :func:`kernelgen.varlen_attention` with two changes a custom-op schema
needs: ``window_size=(left, right)`` becomes ``window_left, window_right`` (ints), and ``out``
moves to the ``_out`` variant.  Shapes: q (total_q, Hq, d); packed k/v (total_k, Hkv, d/dv) with
cu_seqlens_k, or paged k/v (num_pages, page_size, Hkv, d/dv) with page_table (batch,
max_pages_per_seq) and seqused_k (batch,); all index tensors int32.

FP8 (FlashAttention-3's FP8 forward): k/v may be float8_e4m3fn or float8_e5m2 with ``k_descale`` /
``v_descale`` (float32, (batch, Hkv) or broadcasting to it); q may then be float8_e4m3fn too, with
``q_descale`` (same shape rules) and ``out_dtype`` (``ScalarType? out_dtype=None`` in the schema:
torch.bfloat16, the default, or torch.float16; with a 16-bit q None or q's dtype).  With an e4m3
k/v and a 16-bit q, ``quantize_q`` (``bool quantize_q=False``, the schema's last argument) lets a
call that the Hopper FP8 tensor-core variant can take quantise q to e4m3 on the device first, per
request and KV head with power-of-two factors (``kernelgen.launch.quant_q``; out stays in q's
dtype; :func:`kernelgen.varlen_attention`'s ``quantize_q``); the other calls keep q exact.
``max_num_splits`` (``SymInt max_num_splits=0``, last) caps the automatic split count
(:func:`kernelgen.varlen_attention`'s).  The appended arguments keep every earlier positional call valid.

The fake (meta) implementations compute only shapes and dtypes (they read no values), for packed
and paged K/V alike (the output in ``out_dtype`` for an FP8 q; ``quantize_q`` changes neither shape nor
dtype), so a model that calls kernelgen
traces with ``torch.compile(fullgraph=True)``, including dynamic ``total_q``.  The real implementations call
:func:`kernelgen.varlen_attention`, which allocates only through PyTorch and never synchronises
the host, so the compiled graph can be captured in a CUDA graph
(``torch.compile(mode="reduce-overhead")`` or ``torch.cuda.graph``).

Most code should call :func:`varlen_attention` below rather than the raw ops: it has the exact
signature of :func:`kernelgen.varlen_attention`, goes through the registered op while
``torch.compile`` traces (or when given fake/meta tensors, or when autograd records), and calls
the eager implementation directly otherwise, which skips the dispatcher's few microseconds of
host time per call.

There is no backward (kernelgen is for inference): a backward through the functional op, or a
``torch.compile`` of a training graph that contains it, raises a RuntimeError that says to use
``torch.no_grad()`` / ``torch.inference_mode()``.
"""
import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["varlen_attention", "varlen_attention_op", "varlen_attention_out_op"]

_EMPTY_LSE_SHAPE = (0,)


def _lse_or_empty(lse: Optional[Tensor], q: Tensor) -> Tensor:
    return lse if lse is not None else torch.empty(_EMPTY_LSE_SHAPE, dtype=torch.float32, device=q.device)


def _varlen_attention_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    seqused_k: Optional[Tensor] = None,
    page_table: Optional[Tensor] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    softmax_scale: Optional[float] = None,
    num_splits: int = 0,
    pack_gqa: Optional[bool] = None,
    return_lse: bool = False,
    metadata_layout: str = "soa",
    sort: bool = True,
    head_swizzle: bool = True,
    sinks: Optional[Tensor] = None,
    alibi_slopes: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    q_descale: Optional[Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    quantize_q: bool = False,
    max_num_splits: int = 0,
) -> Tuple[Tensor, Tensor]:
    """``torch.ops.kernelgen.varlen_attention``: varlen attention that allocates its output.

    Args: those of :func:`kernelgen.varlen_attention` (q (total_q, Hq, d); packed k/v
    (total_k, Hkv, d) or paged (num_pages, page_size, Hkv, d); int32 cu_seqlens (batch + 1,),
    seqused_k (batch,), page_table (batch, max_pages_per_seq); lengths in tokens), with
    ``window_size`` given as ``window_left, window_right`` and no ``out``; ``sinks`` float32
    (Hq,) attention sinks or None (in the attention and combine kernels of a single-class call, as an
    LSE rescale after the kernels of a mixed batch);
    ``alibi_slopes`` float32 (Hq,) or (batch, Hq) ALiBi slopes or None (FlashAttention-2's
    convention, see :func:`kernelgen.varlen_attention`); ``k_descale`` / ``v_descale`` float32
    (batch, Hkv) or broadcastable descale factors of an FP8 k/v cache, or None; ``q_descale``
    the same for a float8_e4m3fn q (which needs an FP8 k/v cache), or None; ``out_dtype`` the
    output's dtype for an FP8 q (torch.bfloat16 when None, or torch.float16; with a 16-bit q None
    or q's dtype); ``quantize_q`` (bool, default False) with an e4m3 k/v and a 16-bit q: True lets
    a call that the Hopper FP8 tensor-core variant can take quantise q to e4m3 on the device first
    (per request and KV head, power-of-two factors; out stays in q's dtype), the other calls keep
    q exact; ignored otherwise (:func:`kernelgen.varlen_attention`'s ``quantize_q``);
    ``max_num_splits`` (int, default 0 = none) caps the automatic split count
    (:func:`kernelgen.varlen_attention`'s).

    Returns:
        (out, lse): out (total_q, Hq, head_dim_v) in q's dtype (``out_dtype`` for an FP8 q); lse
        (Hq, total_q) float32 natural log when ``return_lse``, else an empty (0,) float32 tensor.

    Raises:
        TypeError, ValueError: as :func:`kernelgen.varlen_attention` (the message names the argument).
        kernelgen.jit.compiler.CompileError: NVRTC rejected a kernel.
    """
    from . import api

    res = api.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=seqused_k,
        page_table=page_table, causal=causal, window_size=(window_left, window_right), softcap=softcap,
        softmax_scale=softmax_scale, num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse,
        metadata_layout=metadata_layout, sort=sort, head_swizzle=head_swizzle, sinks=sinks,
        alibi_slopes=alibi_slopes, k_descale=k_descale, v_descale=v_descale, q_descale=q_descale,
        out_dtype=out_dtype, quantize_q=quantize_q, max_num_splits=max_num_splits)
    if return_lse:
        out, lse = res
        return out, lse
    return res, _lse_or_empty(None, q)


def _varlen_attention_out_impl(
    out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    seqused_k: Optional[Tensor] = None,
    page_table: Optional[Tensor] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
    softmax_scale: Optional[float] = None,
    num_splits: int = 0,
    pack_gqa: Optional[bool] = None,
    return_lse: bool = False,
    metadata_layout: str = "soa",
    sort: bool = True,
    head_swizzle: bool = True,
    sinks: Optional[Tensor] = None,
    alibi_slopes: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    q_descale: Optional[Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    quantize_q: bool = False,
    max_num_splits: int = 0,
) -> Tensor:
    """``torch.ops.kernelgen.varlen_attention_out``: writes ``out`` in place, returns lse.

    Args: ``out`` first, (total_q, Hq, head_dim_v) in q's dtype (an FP8 q: bfloat16 or float16,
    ``out_dtype`` if given), last dim contiguous, 16-byte aligned rows (a custom op may not take a
    tensor keyword-only); then the arguments of ``torch.ops.kernelgen.varlen_attention``
    (``sinks``, ``alibi_slopes``, the descales, ``out_dtype``, ``quantize_q`` and ``max_num_splits`` included).

    Returns:
        lse (Hq, total_q) float32 natural log when ``return_lse``, else an empty (0,) float32 tensor.

    Raises:
        TypeError, ValueError: as :func:`kernelgen.varlen_attention` (wrong ``out`` shape/dtype included).
        kernelgen.jit.compiler.CompileError: NVRTC rejected a kernel.
    """
    from . import api

    res = api.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=seqused_k,
        page_table=page_table, causal=causal, window_size=(window_left, window_right), softcap=softcap,
        softmax_scale=softmax_scale, num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse, out=out,
        metadata_layout=metadata_layout, sort=sort, head_swizzle=head_swizzle, sinks=sinks,
        alibi_slopes=alibi_slopes, k_descale=k_descale, v_descale=v_descale, q_descale=q_descale,
        out_dtype=out_dtype, quantize_q=quantize_q, max_num_splits=max_num_splits)
    return res[1] if return_lse else _lse_or_empty(None, q)


#: ``torch.ops.kernelgen.varlen_attention`` (functional: allocates out).
varlen_attention_op = torch.library.custom_op("kernelgen::varlen_attention", mutates_args=())(_varlen_attention_impl)
varlen_attention_op.__doc__ = _varlen_attention_impl.__doc__
#: ``torch.ops.kernelgen.varlen_attention_out`` (writes its first argument ``out`` in place).
varlen_attention_out_op = torch.library.custom_op("kernelgen::varlen_attention_out",
                                                  mutates_args=("out",))(_varlen_attention_out_impl)
varlen_attention_out_op.__doc__ = _varlen_attention_out_impl.__doc__


def _no_backward(ctx, *grads):
    raise RuntimeError("kernelgen.varlen_attention has no backward (kernelgen is forward-only, for inference): "
                       "call it under torch.no_grad() or torch.inference_mode(), or on detached inputs")


# A clear error instead of PyTorch's generic one, at backward time (eager) or when torch.compile
# traces a training graph.  (A mutating op cannot have an autograd formula: varlen_attention_out
# keeps PyTorch's "no autograd formula" error.)
varlen_attention_op.register_autograd(_no_backward, setup_context=lambda ctx, inputs, output: None)


# ------------------------------------------------------------------------------ fake (meta) kernels
def _fake_shapes(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, causal, window_left, window_right,
                 softcap, num_splits, metadata_layout, sinks=None, alibi_slopes=None, k_descale=None,
                 v_descale=None, q_descale=None, out_dtype=None, out=None, softmax_scale=None, max_num_splits=0,
                 max_seqlen_q=None, max_seqlen_k=None):
    """The checks of kernelgen.varlen_attention that read no tensor values (shapes, dtypes, scalar
    arguments), so a bad call fails while torch.compile traces; returns (total_q, num_heads_q,
    head_dim_v, the output's dtype): q's, or for a float8_e4m3fn q (which needs an FP8 k/v)
    ``out``'s, else ``out_dtype``, else bfloat16 (``validation.output_dtype``)."""
    from ..selection import validation

    validation.layout(metadata_layout)
    validation.window((window_left, window_right), bool(causal))
    validation.softcap(softcap)
    validation.max_num_splits(max_num_splits, validation.num_splits(num_splits))
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(x, numbers.Integral):   # (a SymInt while torch.compile traces dynamic shapes: unchecked)
            validation.nonneg_int(name, x)
    # varlen_attention's own checks of the tensors' shapes, dtypes, devices and strides (q's device type is
    # not checked here: fake CUDA tensors while torch.compile traces, meta ones, or opcheck's CPU ones)
    sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, None, None, out, (q.device.type,),
                                     seqused_k=seqused_k, page_table=page_table, out_dtype=out_dtype)
    dtype, hq, hkv, batch = sizes["dtype"], sizes["num_heads_q"], sizes["num_heads_kv"], sizes["batch"]
    validation.softcap_ratio(validation.softmax_scale(softmax_scale, q.shape[-1]), validation.softcap(softcap))
    validation.sinks(sinks, hq, q.device)     # varlen_attention's own checks (dtype, shape, device)
    validation.alibi_slopes(alibi_slopes, hq, batch, q.device)
    kv_dtype = validation.KV_FP8_DTYPES.get(k.dtype)
    validation.descale("k_descale", k_descale, batch, hkv, q.device, kv_dtype)
    validation.descale("v_descale", v_descale, batch, hkv, q.device, kv_dtype)
    validation.q_descale(q_descale, batch, hkv, q.device, validation.Q_FP8_DTYPES.get(q.dtype))
    return q.shape[0], q.shape[1], v.shape[-1], dtype


def _fake_lse(q, return_lse):
    shape = (q.shape[1], q.shape[0]) if return_lse else _EMPTY_LSE_SHAPE
    return q.new_empty(shape, dtype=torch.float32)


@varlen_attention_op.register_fake
def _varlen_attention_fake(q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           seqused_k=None, page_table=None, causal=False, window_left=-1, window_right=-1,
                           softcap=0.0, softmax_scale=None, num_splits=0, pack_gqa=None, return_lse=False,
                           metadata_layout="soa", sort=True, head_swizzle=True, sinks=None, alibi_slopes=None,
                           k_descale=None, v_descale=None, q_descale=None, out_dtype=None, quantize_q=False,
                           max_num_splits=0):
    total_q, hq, dv, dtype = _fake_shapes(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, causal,
                                          window_left, window_right, softcap, num_splits, metadata_layout, sinks,
                                          alibi_slopes, k_descale, v_descale, q_descale, out_dtype,
                                          softmax_scale=softmax_scale, max_num_splits=max_num_splits,
                                          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return q.new_empty((total_q, hq, dv), dtype=dtype), _fake_lse(q, return_lse)


@varlen_attention_out_op.register_fake
def _varlen_attention_out_fake(out, q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               seqused_k=None, page_table=None, causal=False, window_left=-1, window_right=-1,
                               softcap=0.0, softmax_scale=None, num_splits=0, pack_gqa=None, return_lse=False,
                               metadata_layout="soa", sort=True, head_swizzle=True, sinks=None,
                               alibi_slopes=None, k_descale=None, v_descale=None, q_descale=None, out_dtype=None,
                               quantize_q=False, max_num_splits=0):
    total_q, hq, dv, dtype = _fake_shapes(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, causal,
                                          window_left, window_right, softcap, num_splits, metadata_layout, sinks,
                                          alibi_slopes, k_descale, v_descale, q_descale, out_dtype, out,
                                          softmax_scale=softmax_scale, max_num_splits=max_num_splits,
                                          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    if out.dtype != dtype:   # (the eager path's TypeError / ValueError split)
        raise TypeError(f"out must have dtype {str(dtype).replace('torch.', '')}, got "
                        f"{str(out.dtype).replace('torch.', '')}")
    if tuple(out.shape) != (total_q, hq, dv):
        raise ValueError(f"out must have shape {(total_q, hq, dv)}, got {tuple(out.shape)}")
    return _fake_lse(q, return_lse)


# ------------------------------------------------------------------------------ Python entry point
def _through_op(q, k, v, sinks=None) -> bool:
    """Use the registered op while torch.compile traces, for fake/meta/subclass tensors, and when
    autograd records (so a backward raises the op's clear "forward-only" error): q, k, v or the
    sinks (gpt-oss keeps them as an nn.Parameter) require grad."""
    return (torch.compiler.is_compiling() or type(q) is not torch.Tensor or q.device.type == "meta"
            or (torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in (q, k, v, sinks))))


def varlen_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    *,
    seqused_k: Optional[Tensor] = None,
    page_table: Optional[Tensor] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    softmax_scale: Optional[float] = None,
    num_splits: int = 0,
    pack_gqa: Optional[bool] = None,
    return_lse: bool = False,
    out: Optional[Tensor] = None,
    metadata_layout: str = "soa",
    sort: bool = True,
    head_swizzle: bool = True,
    sinks: Optional[Tensor] = None,
    alibi_slopes: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    q_descale: Optional[Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    quantize_q: bool = False,
    max_num_splits: int = 0,
):
    """:func:`kernelgen.varlen_attention` that ``torch.compile(fullgraph=True)`` can trace.

    The arguments, shapes, results and errors of :func:`kernelgen.varlen_attention` but ``arch``,
    ``short_query_tokens`` and ``variant`` (a custom op's schema takes tensors and scalars, not a
    ``kernelgen.Variant``; call :func:`kernelgen.varlen_attention` for those): q
    (total_q, num_heads_q, head_dim) fp16/bf16, or float8_e4m3fn with an FP8 k/v; k/v packed (total_k, num_heads_kv, head_dim[_v])
    with cu_seqlens_k, or paged (num_pages, page_size, num_heads_kv, head_dim[_v]) with page_table
    (batch, max_pages_per_seq) and seqused_k (batch,); index tensors int32; lengths in tokens;
    ``sinks`` contiguous float32 (num_heads_q,) attention sinks (gpt-oss semantics: the sink
    kernels of a single-class call add them, a mixed batch rescales out by the LSE after its
    kernels; see :func:`kernelgen.varlen_attention`);
    ``alibi_slopes`` float32 (num_heads_q,) or (batch, num_heads_q) ALiBi slopes (FlashAttention-2's
    convention; see :func:`kernelgen.varlen_attention`); ``k_descale`` / ``v_descale`` float32
    (batch, num_heads_kv) or broadcastable descale factors of an FP8 k/v cache (FlashAttention-3's);
    ``q_descale`` the same for a float8_e4m3fn q (FlashAttention-3's FP8 forward); ``out_dtype``
    the output's dtype for an FP8 q (torch.bfloat16 when None, FlashAttention-3's, or
    torch.float16; with a 16-bit q None or q's dtype); ``quantize_q`` (bool) with an e4m3 k/v
    cache and a 16-bit q: True lets a call that the Hopper FP8 tensor-core variant can take
    quantise q to e4m3 on the device first, per request and KV head with power-of-two
    ``q_descale`` factors, and run that variant (out stays in q's dtype; the other calls keep q
    exact, as False, the default, does everywhere; see :func:`kernelgen.varlen_attention`);
    ``max_num_splits`` (int, default 0 = none) caps the automatic split count.
    While torch.compile traces, for fake or meta tensors, and when autograd records (an input
    requires grad) the call goes through ``torch.ops.kernelgen.varlen_attention`` (or
    ``varlen_attention_out`` when ``out`` is given); otherwise it calls the eager implementation
    directly.  There is no backward: a backward through it raises RuntimeError (run inference
    under ``torch.no_grad()`` or ``torch.inference_mode()``).

    Returns:
        out (total_q, num_heads_q, head_dim_v) in q's dtype, ``out_dtype`` (default bfloat16) for
        an FP8 q (``out`` itself when given); with ``return_lse`` also lse (num_heads_q, total_q)
        float32, natural log.

    Raises:
        TypeError: an argument has the wrong type or dtype, e.g. window_size not a pair of ints,
            an FP8 q with a 16-bit k (names k), out_dtype not float16/bfloat16, ``causal``,
            ``return_lse``, ``sort``, ``head_swizzle`` or ``quantize_q`` not a bool, ``pack_gqa``
            not None or a bool (checked before the op: its ``bool`` schema would convert a
            number or None, and refuse a str with a dispatcher RuntimeError).
        ValueError: wrong shapes, devices or values (see :func:`kernelgen.varlen_attention`), e.g.
            q_descale with a 16-bit q or of a wrong shape, out_dtype other than a 16-bit q's dtype.
        kernelgen.jit.compiler.CompileError: NVRTC rejected a kernel.
    """
    if not _through_op(q, k, v, sinks):
        from . import api

        return api.varlen_attention(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=seqused_k,
            page_table=page_table, causal=causal, window_size=window_size, softcap=softcap,
            softmax_scale=softmax_scale, num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse, out=out,
            metadata_layout=metadata_layout, sort=sort, head_swizzle=head_swizzle, sinks=sinks,
            alibi_slopes=alibi_slopes, k_descale=k_descale, v_descale=v_descale, q_descale=q_descale,
            out_dtype=out_dtype, quantize_q=quantize_q, max_num_splits=max_num_splits)
    from ..selection import validation

    # Validate before converting: float()/int() would turn a bad value into a raw conversion error
    # (or silently accept True, "3" or 2.5); the validators name the argument and return the
    # converted value.
    # (the schema's bool would take 1 or None as one, and refuse a str with a dispatcher RuntimeError:
    # the eager path's TypeError instead)
    causal, return_lse = validation.flag("causal", causal), validation.flag("return_lse", return_lse)
    sort, head_swizzle = validation.flag("sort", sort), validation.flag("head_swizzle", head_swizzle)
    pack_gqa, quantize_q = validation.optional_flag("pack_gqa", pack_gqa), validation.flag("quantize_q", quantize_q)
    validation.window(window_size, causal)
    softcap = validation.softcap(softcap)
    num_splits = validation.num_splits(num_splits)
    max_num_splits = validation.max_num_splits(max_num_splits, num_splits)
    if softmax_scale is not None:   # (the head dim only names the default: q is checked in the op)
        softmax_scale = validation.softmax_scale(softmax_scale, 1)
    validation.layout(metadata_layout)   # (the schema's str would refuse None with a dispatcher RuntimeError)
    for name, x in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q)):
        if not isinstance(x, torch.Tensor):   # (the schema's Tensor: a RuntimeError that prints the value)
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    for name, x in (("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k), ("page_table", page_table),
                    ("out", out), ("sinks", sinks), ("alibi_slopes", alibi_slopes), ("k_descale", k_descale),
                    ("v_descale", v_descale), ("q_descale", q_descale)):
        if x is not None and not isinstance(x, torch.Tensor):   # (the schema's Tensor? would: a RuntimeError)
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if out_dtype is not None:   # (the schema's ScalarType? refuses a non-dtype with a dispatcher RuntimeError;
        validation.output_dtype(q, out, out_dtype)   # after the tensor checks: it reads q's and out's dtypes)
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if x is not None and not isinstance(x, torch.SymInt):   # (the schema's SymInt?: ints, or traced ones)
            validation.nonneg_int(name, x)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table, causal,
            int(window_size[0]), int(window_size[1]), softcap, softmax_scale, num_splits, pack_gqa,
            return_lse, metadata_layout, sort, head_swizzle, sinks, alibi_slopes, k_descale, v_descale,
            q_descale, out_dtype, quantize_q, max_num_splits)
    if out is None:
        out, lse = torch.ops.kernelgen.varlen_attention(*args)
    else:
        lse = torch.ops.kernelgen.varlen_attention_out(out, *args)
    return (out, lse) if return_lse else out
