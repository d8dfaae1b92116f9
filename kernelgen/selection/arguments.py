"""The public calls' arguments checked and turned into the decider's input.

``varlen_call`` does every check of ``varlen_attention`` (``validation``) and returns a
``CheckedCall``: the derived sizes and run-time values, the ``decide.CallSignature`` and the
environment's overrides (``Settings``).  ``plan_capacity`` / ``plan_options`` do the same for
``AttentionPlan`` (their order is the constructor's: capacities, then the device, then the
options), ``plan_step`` checks one step of a plan.  Nothing here reads device memory (but the
opt-in host checks of ``KERNELGEN_CHECK_INPUTS``) or synchronises.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kernels import metadata, tma
from ..kernels.spec import HEAD_DIMS
from . import validation
from .decide import CallSignature
from .settings import Settings


@dataclass(frozen=True)
class CheckedCall:
    """A checked call: ``sizes`` (``validation.varlen_inputs``' dict: total_q, batch, heads, head
    dims, paging), the softmax ``scale``, the ``window`` (left, right) and ``softcap`` the kernels
    take, the decider's ``signature`` and the ``settings`` it runs with."""

    sizes: dict
    scale: float
    window: tuple
    softcap: float
    signature: CallSignature
    settings: Settings
    #: the batch stride of ``alibi_slopes`` in elements (0: one slope per head), -1 without ALiBi
    alibi_stride: int = -1
    #: the addresses of a user variant's tensors (``AttnParams.user0`` ..), None without a variant
    user: tuple | None = None
    #: FP8 K/V (``sizes["kv_dtype"]``): ((k_descale batch, head strides) or None, (v_descale ...) or
    #: None, (q_descale ...) or None) in elements (``validation.descale``, ``validation.q_descale``;
    #: None: factor 1); None for a 16-bit cache
    descale: tuple | None = None

    @property
    def empty(self) -> bool:
        """No query token or no request: nothing to launch."""
        return self.sizes["total_q"] == 0 or self.sizes["batch"] == 0


def varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, seqused_k, page_table, out,
                causal, window_size, softcap, softmax_scale, num_splits, pack_gqa, metadata_layout, sort,
                head_swizzle, short_query_tokens, arch, sinks=None, alibi_slopes=None, variant=None,
                k_descale=None, v_descale=None, q_descale=None, out_dtype=None, max_num_splits=0,
                q_descale_filled=True) -> CheckedCall:
    """Every check of ``varlen_attention``'s arguments (same names, shapes and types; see its
    docstring), in its order, and the signature its kernels are chosen from: the length hints
    default to total_q and the K/V capacity in tokens.  ``q_descale_filled=False``: ``q_descale``
    is kernelgen's own buffer, which ``quantize_q`` writes after this check, so the opt-in host
    checks do not read its values, and q is that quantisation's e4m3 copy of a 16-bit q the call
    keeps (``CallSignature.quantized_q``).

    Raises TypeError / ValueError naming the argument (or the environment variable), and ValueError
    for more than ``metadata.MAX_CAPACITY`` requests in a call that has query tokens.
    """
    sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out,
                                     seqused_k=seqused_k, page_table=page_table, out_dtype=out_dtype)
    kv_dtype = sizes.get("kv_dtype")
    descale = tuple(validation.descale(name, x, sizes["batch"], sizes["num_heads_kv"], q.device, kv_dtype)
                    for name, x in (("k_descale", k_descale), ("v_descale", v_descale)))
    descale += (validation.q_descale(q_descale, sizes["batch"], sizes["num_heads_kv"], q.device,
                                     sizes.get("q_dtype")),)
    validation.sinks(sinks, sizes["num_heads_q"], q.device)
    alibi_stride = validation.alibi_slopes(alibi_slopes, sizes["num_heads_q"], sizes["batch"], q.device)
    code = validation.variant(variant, q.device)
    scale = validation.softmax_scale(softmax_scale, sizes["head_dim"])
    layout = validation.layout(metadata_layout)
    mask, left, right = validation.window(window_size, validation.flag("causal", causal))
    cap = validation.softcap(softcap)
    validation.softcap_ratio(scale, cap)
    splits = validation.num_splits(num_splits)
    split_cap = validation.max_num_splits(max_num_splits, splits)
    pack_gqa = validation.optional_flag("pack_gqa", pack_gqa)
    sort, head_swizzle = validation.flag("sort", sort), validation.flag("head_swizzle", head_swizzle)
    validation.short_query_tokens(short_query_tokens, pack_gqa, splits)
    settings = Settings.from_env().check()
    if validation.arch(arch, None, settings.arch) == "sm90a" and short_query_tokens:
        raise ValueError("arch='sm_90a' runs no fused mixed-batch launch: leave short_query_tokens None or 0")
    if validation.host_checks_enabled():
        validation.check_cu_seqlens_values("cu_seqlens_q", cu_seqlens_q, sizes["total_q"])
        if cu_seqlens_k is not None:
            validation.check_cu_seqlens_values("cu_seqlens_k", cu_seqlens_k, sizes["total_k"])
        if page_table is not None:
            validation.check_paged_values(page_table, seqused_k, sizes["num_pages"], sizes["page_size"])
        elif seqused_k is not None:
            validation.check_seqused_values(seqused_k, cu_seqlens_k)
        validation.check_sinks_values(sinks)
        validation.check_descale_values("k_descale", k_descale)
        validation.check_descale_values("v_descale", v_descale)
        if q_descale_filled:
            validation.check_descale_values("q_descale", q_descale)
            validation.check_descale_product(k_descale, q_descale, scale)
    total_q, batch = sizes["total_q"], sizes["batch"]
    if total_q and batch and batch > metadata.MAX_CAPACITY:
        raise ValueError(f"cu_seqlens_q describes {batch} requests; at most {metadata.MAX_CAPACITY} per call")
    if max_seqlen_q is None:
        max_seqlen_q = total_q
    if max_seqlen_k is None:
        max_seqlen_k = sizes["max_pages"] * sizes["page_size"] if sizes["paged"] else sizes["total_k"]
    sig = CallSignature(
        dtype=validation.DTYPES[sizes["dtype"]], head_dim=sizes["head_dim"], head_dim_v=sizes["head_dim_v"],
        num_heads_q=sizes["num_heads_q"], num_heads_kv=sizes["num_heads_kv"], mask=mask, window_left=left,
        window_right=right, layout=layout, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, paged=sizes["paged"],
        page_size=sizes.get("page_size", 0), softcap=cap > 0, pack_gqa=pack_gqa, num_splits=splits,
        short_query_tokens=short_query_tokens, arch=arch, tma_ok=all(tma.tma_compatible(t) for t in (q, k, v)),
        batch=batch, rows=total_q, sort=sort, head_swizzle=head_swizzle, alibi=alibi_stride >= 0,
        sinks=sinks is not None, variant=code, max_num_splits=split_cap, **({"kv_dtype": kv_dtype} if kv_dtype else {}),
        **({"q_dtype": sizes["q_dtype"], "quantized_q": not q_descale_filled} if "q_dtype" in sizes else {}))
    return CheckedCall(sizes, scale, (left, right), cap, sig, settings, alibi_stride,
                       None if variant is None else variant.addresses(), descale if kv_dtype else None)


def plan_capacity(max_batch, dtype, num_heads_q: int, num_heads_kv: int, max_seqlen_q, max_seqlen_k,
                  head_dim=128, head_dim_v=None, max_total_q=None) -> None:
    """``AttentionPlan``'s first checks: capacity in requests (1 .. ``metadata.MAX_CAPACITY``),
    dtype, head counts (ints >= 1, num_heads_q a multiple of num_heads_kv), head dims (each one of
    ``spec.HEAD_DIMS``; which pairs run is checked with the kernels' tiles), length hints (ints >= 0, in tokens),
    ``max_total_q`` (None or an int >= 1, in tokens).  Raises TypeError / ValueError naming the
    argument."""
    validation.nonneg_int("max_batch", max_batch)
    if not 1 <= max_batch <= metadata.MAX_CAPACITY:
        raise ValueError(f"max_batch must be in [1, {metadata.MAX_CAPACITY}], got {max_batch}")
    if dtype not in validation.DTYPES:
        raise TypeError(f"dtype must be torch.float16 or torch.bfloat16, got {dtype}")
    validation.positive_int("num_heads_q", num_heads_q)
    validation.positive_int("num_heads_kv", num_heads_kv)
    if num_heads_q % num_heads_kv:
        raise ValueError(f"num_heads_q ({num_heads_q}) must be a multiple of num_heads_kv ({num_heads_kv})")
    if num_heads_q > metadata.MAX_HEADS:
        raise ValueError(f"num_heads_q must be <= {metadata.MAX_HEADS} (the scheduler metadata's 15-bit head field), "
                         f"got {num_heads_q}")
    validation.positive_int("head_dim", head_dim)
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    if head_dim_v is not None:
        validation.positive_int("head_dim_v", head_dim_v)
        if head_dim_v not in HEAD_DIMS:
            raise ValueError(f"head_dim_v must be one of {HEAD_DIMS}, got {head_dim_v}")
    validation.nonneg_int("max_seqlen_q", max_seqlen_q)
    validation.nonneg_int("max_seqlen_k", max_seqlen_k)
    if max_total_q is not None:
        validation.positive_int("max_total_q", max_total_q)


def plan_scalars(*, head_dim: int, paged, causal, alibi, sinks, sort, head_swizzle, pack_gqa, softcap,
                 quantize_q) -> None:
    """``AttentionPlan``'s boolean options (bools: ``validation.flag``; ``pack_gqa`` None or a bool) and
    its ``softcap`` against the default scale ``1 / sqrt(head_dim)`` (a cap so small their ratio
    overflows float32 fails here, not at the first step), checked before the device is read.
    Raises TypeError / ValueError naming the argument."""
    for name, x in (("paged", paged), ("causal", causal), ("alibi", alibi), ("sinks", sinks), ("sort", sort),
                    ("head_swizzle", head_swizzle), ("quantize_q", quantize_q)):
        validation.flag(name, x)
    validation.optional_flag("pack_gqa", pack_gqa)
    validation.softcap_ratio(validation.softmax_scale(None, head_dim), validation.softcap(softcap))


@dataclass(frozen=True)
class CheckedPlan:
    """A checked plan: its ``signature`` (batch: the capacity; rows: ``max_total_q``), the
    ``window`` (left, right) and ``softcap`` its kernels take, ``page_size`` (None: any), the
    ``settings`` its kernels are chosen with."""

    signature: CallSignature
    window: tuple
    softcap: float
    page_size: int | None
    settings: Settings


def plan_options(*, capacity: int, max_total_q: int, num_heads_q: int, num_heads_kv: int, head_dim: int,
                 head_dim_v: int, dtype, max_seqlen_q: int, max_seqlen_k: int, paged: bool, page_size,
                 causal: bool, window_size, softcap, num_splits, pack_gqa, metadata_layout: str, sort: bool,
                 head_swizzle: bool, short_query_tokens, arch, alibi: bool = False, sinks: bool = False,
                 variant=None, kv_dtype: str = "", q_dtype: str = "", max_num_splits=0,
                 quantized_q: bool = False) -> CheckedPlan:
    """``AttentionPlan``'s remaining checks (page size, window, soft-cap, layout, num_splits,
    max_num_splits, short_query_tokens) and the signature its kernels are chosen from (see ``AttentionPlan`` for
    the arguments; lengths in tokens; ``kv_dtype``: "e4m3" / "e5m2" for an FP8 K/V cache,
    ``validation.kv_dtype``'s result, "" for none; ``q_dtype``: "e4m3" for an FP8 q; ``quantized_q``: that q is
    the plan's own e4m3 copy of each step's 16-bit q, ``quantize_q``).  Raises TypeError / ValueError naming the
    argument."""
    paged = validation.flag("paged", paged)
    if page_size is not None:
        validation.nonneg_int("page_size", page_size)
        if not paged or page_size < 1:
            raise ValueError(f"page_size ({page_size}) needs paged=True and at least 1 token")
    mask, left, right = validation.window(window_size, validation.flag("causal", causal))
    cap = validation.softcap(softcap)
    layout = validation.layout(metadata_layout)
    splits = validation.num_splits(num_splits)
    split_cap = validation.max_num_splits(max_num_splits, splits)
    pack_gqa = validation.optional_flag("pack_gqa", pack_gqa)
    sort, head_swizzle = validation.flag("sort", sort), validation.flag("head_swizzle", head_swizzle)
    alibi, sinks = validation.flag("alibi", alibi), validation.flag("sinks", sinks)
    validation.short_query_tokens(short_query_tokens, pack_gqa, splits)
    sig = CallSignature(
        dtype=validation.DTYPES[dtype], head_dim=head_dim, head_dim_v=head_dim_v, num_heads_q=num_heads_q,
        num_heads_kv=num_heads_kv, mask=mask, window_left=left, window_right=right, layout=layout,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k, paged=paged, page_size=page_size or 0, softcap=cap > 0, pack_gqa=pack_gqa,
        num_splits=splits, short_query_tokens=short_query_tokens, arch=arch, tma_ok=True, batch=capacity,
        rows=max_total_q, sort=sort, head_swizzle=head_swizzle, plan=True, alibi=alibi, sinks=sinks,
        variant=variant, max_num_splits=split_cap, **({"kv_dtype": kv_dtype} if kv_dtype else {}),
        **({"q_dtype": q_dtype, "quantized_q": bool(quantized_q)} if q_dtype else {}))
    return CheckedPlan(sig, (left, right), cap, page_size, Settings.from_env().check())


def plan_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, *, heads: tuple, dtype,
                device, capacity: int, paged: bool, page_size, max_total_q: int | None, hopper: bool,
                sinks=None, kv_dtype: str = "", q_dtype: str = "") -> dict:
    """The checks of one ``AttentionPlan`` step's tensors (shapes as in ``varlen_attention``; lse
    (num_heads_q, total_q) float32): ``validation.varlen_inputs``' and that they match the plan:
    ``heads`` (num_heads_q, num_heads_kv, head_dim, head_dim_v), ``dtype``, ``device``, at most
    ``capacity`` requests, ``paged`` and ``page_size`` (None: any), at most ``max_total_q`` query
    tokens (None: no bound: the plan has no split-KV partials), and on the Hopper path (``hopper``)
    q/k/v strides TMA can address; ``sinks`` None or float32 (num_heads_q,) on ``device`` (its
    values, no NaN or +inf, only under ``KERNELGEN_CHECK_INPUTS=1``); k/v in the plan's FP8
    ``kv_dtype`` ("e4m3" / "e5m2"; "": q's dtype); q in FP8 exactly when the plan's ``q_dtype``
    is "e4m3" (out then in ``dtype``).  Returns the sizes dict.  Raises TypeError /
    ValueError (a k dtype other than the plan's: ValueError naming ``k``)."""
    if q_dtype and isinstance(q, torch.Tensor) and q.dtype not in validation.Q_FP8_DTYPES:
        # (dtype only: varlen_inputs checks the rest, on the device types it accepts)
        raise TypeError(f"q must have dtype float8_e4m3fn (the plan's q_dtype='e4m3'), got "
                        f"{str(q.dtype).replace('torch.', '')}")
    elif not q_dtype and isinstance(q, torch.Tensor) and q.dtype != dtype:
        raise TypeError(f"q must have the plan's dtype {dtype}, got {q.dtype}"
                        + ("; an FP8 q needs a plan made with q_dtype='e4m3'" if q.dtype in validation.Q_FP8_DTYPES
                           else ""))
    if q_dtype and isinstance(out, torch.Tensor) and out.dtype != dtype:
        raise TypeError(f"out must have the plan's dtype {dtype} (the output of its FP8 q), got {out.dtype}")
    if (kv_dtype and isinstance(k, torch.Tensor) and (k.dtype == dtype or k.dtype in validation.KV_FP8_DTYPES)
            and validation.KV_FP8_DTYPES.get(k.dtype, "") != kv_dtype):
        # (a k the plan's other forms take, the other FP8 dtype or the plan's 16-bit one, before
        # varlen_inputs, whose FP8-q rule would name a 16-bit k with a TypeError; other dtypes get
        # varlen_inputs' TypeError listing what k may be)
        _plan_kv_dtype_error(k, kv_dtype, validation.KV_FP8_DTYPES.get(k.dtype, ""), dtype, q_dtype)
    sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, None, None, out, seqused_k=seqused_k,
                                     page_table=page_table, out_dtype=dtype if q_dtype else None)
    got = (sizes["num_heads_q"], sizes["num_heads_kv"], sizes["head_dim"], sizes["head_dim_v"])
    if got != heads:
        raise ValueError(f"q/k/v heads and head dims {got} differ from the plan's {heads}")
    if q.device != device:
        raise ValueError(f"q must be on the plan's device {device}, got {q.device}")
    if sizes["batch"] > capacity:
        raise ValueError(f"batch {sizes['batch']} exceeds the plan's capacity {capacity}")
    if page_size is not None and sizes["page_size"] != page_size:
        raise ValueError(f"the K/V cache has pages of {sizes['page_size']} tokens; the plan was made with "
                         f"page_size={page_size}")
    if sizes["paged"] != paged:
        raise ValueError(f"the plan was made with paged={paged}; page_table must "
                         f"{'be given' if paged else 'be None'}")
    if max_total_q is not None and sizes["total_q"] > max_total_q:
        raise ValueError(f"q has {sizes['total_q']} tokens; the plan's max_total_q is {max_total_q}")
    if hopper and sizes["total_q"]:   # (a step with no query token loads nothing: the plan launches nothing)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not tma.tma_compatible(t):
                raise ValueError(f"{name}: the plan runs the Hopper (TMA) kernel, whose loads need token and head "
                                 f"strides that are multiples of 16 bytes, got strides {tuple(t.stride())}; make "
                                 f"the plan with arch='sm_80' for such tensors")
    got_kv = sizes.get("kv_dtype", "")
    if got_kv != kv_dtype:
        _plan_kv_dtype_error(k, kv_dtype, got_kv, dtype, q_dtype)
    if lse is not None:
        validation.lse_buffer(lse, heads[0], sizes["total_q"], device)
    validation.sinks(sinks, heads[0], device)
    if sinks is not None and validation.host_checks_enabled():
        validation.check_sinks_values(sinks)
    return sizes


def _plan_kv_dtype_error(k, kv_dtype: str, got_kv: str, dtype, q_dtype: str = ""):
    """Raise the ValueError naming ``k`` whose dtype is not the plan's ``kv_dtype`` ("": 16-bit),
    with the plan that takes such a k (a 16-bit cache needs a 16-bit q: a plan without q_dtype)."""
    if not kv_dtype:
        raise ValueError(f"k: an FP8 K/V cache ({k.dtype}) needs a plan made for it: pass kv_dtype='{got_kv}' "
                         f"to AttentionPlan (its FP8 kernels); this plan's k/v have q's dtype {dtype}")
    want = next(t for t, n in validation.KV_FP8_DTYPES.items() if n == kv_dtype)
    if got_kv:
        fix = f"make a plan with kv_dtype={got_kv!r} for such a cache"
    elif q_dtype:
        fix = "a 16-bit cache takes a 16-bit q: make a plan without q_dtype and kv_dtype for such a cache"
    else:
        fix = "make a plan with kv_dtype=None for such a cache"
    raise ValueError(f"k must have the plan's FP8 dtype {want} (kv_dtype='{kv_dtype}'), got {k.dtype}; {fix}")


def step_scalars(return_lse, softmax_scale, head_dim: int, softcap: float) -> tuple:
    """An ``AttentionPlan`` step's scalar options: (``return_lse`` as a bool, the logit scale:
    ``softmax_scale`` or ``1 / sqrt(head_dim)``), the scale's ratio to the plan's ``softcap``
    checked.  Raises TypeError / ValueError naming the argument."""
    scale = validation.softmax_scale(softmax_scale, head_dim)
    validation.softcap_ratio(scale, softcap)
    return validation.flag("return_lse", return_lse), scale


def plan_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, *, device, capacity: int, paged: bool) -> int:
    """The checks of a plan step's length tensors (int32: cu_seqlens_q and cu_seqlens_k (batch + 1,),
    seqused_k (batch,), lengths in tokens; cu_seqlens_k or seqused_k given; a ``paged`` plan takes
    seqused_k only, as ``varlen_attention`` with a page table); returns the batch.
    Raises TypeError / ValueError, also for more than ``capacity`` requests."""
    batch = validation.cu_seqlens("cu_seqlens_q", cu_seqlens_q, device)
    if paged and cu_seqlens_k is not None:
        raise ValueError("cu_seqlens_k must be None for a paged plan (key lengths come from seqused_k)")
    if paged and seqused_k is None:
        raise ValueError("seqused_k is required for a paged plan (the keys of each request)")
    if cu_seqlens_k is not None and validation.cu_seqlens("cu_seqlens_k", cu_seqlens_k, device) != batch:
        raise ValueError("cu_seqlens_k must have as many entries as cu_seqlens_q")
    if cu_seqlens_k is None and seqused_k is None:
        raise ValueError("give cu_seqlens_k or seqused_k")
    if seqused_k is not None:
        validation.seqused(seqused_k, batch, device)
    if batch > capacity:
        raise ValueError(f"batch {batch} exceeds the plan's capacity {capacity}")
    return batch
