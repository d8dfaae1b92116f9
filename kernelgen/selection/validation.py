"""Input checks for the public calls.

Every failure raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape, device,
layout or value) whose message starts with the argument's name and says what was expected.
Only metadata is inspected: nothing here reads device memory or synchronises the host, so the
*values* of cu_seqlens are the caller's contract (see ``check_cu_seqlens_values`` for the opt-in
host check, enabled with ``KERNELGEN_CHECK_INPUTS=1``).
"""
from __future__ import annotations

import math
import numbers
import os

import torch

from ..kernels.metadata import MAX_HEADS
from ..kernels.spec import HEAD_DIMS, MAX_WINDOW

DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
#: FP8 K/V cache dtypes (``AttentionSpec.kv_dtype``): k and v in one of these with 16-bit queries;
#: the kernels convert the cache to q's dtype on load (exactly: every e4m3/e5m2 value is an fp16
#: and a bf16 value) and apply ``k_descale`` / ``v_descale``.
KV_FP8_DTYPES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
#: FP8 query dtypes (FlashAttention-3's FP8 forward: q, k and v in FP8): q in one of these needs an
#: FP8 K/V cache; the output is 16-bit (``out_dtype``, default bfloat16).  On the Hopper kernel's FP8
#: tensor-core variant (``AttentionSpec.fp8_mma``) the GEMMs read q as it is; the other kernels get
#: q converted exactly to the output dtype first (one elementwise pass over q).
Q_FP8_DTYPES = {torch.float8_e4m3fn: "e4m3"}
LAYOUTS = ("soa", "aos")
#: Environment variable that turns on the host checks of the length and page values (syncs).
CHECK_INPUTS_ENV = "KERNELGEN_CHECK_INPUTS"
# os.environ keeps its encoded entries in ``_data`` (CPython): a dict lookup there sees every change
# made through os.environ at a tenth of ``os.environ.get``'s cost for an absent variable.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(CHECK_INPUTS_ENV) if _ENV_DATA is not None else None
_ENV_ONE = os.environ.encodevalue("1") if _ENV_DATA is not None else None


def host_checks_enabled() -> bool:
    """Whether ``KERNELGEN_CHECK_INPUTS=1`` is set in ``os.environ`` now (read on every call)."""
    if _ENV_DATA is not None:
        return _ENV_DATA.get(_ENV_KEY) == _ENV_ONE
    return os.environ.get(CHECK_INPUTS_ENV) == "1"


def tensor(name: str, x, *, ndim: int | None = None, dtypes=None, device=None, devtypes=("cuda",)):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dtypes is not None and x.dtype not in dtypes:
        want = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype {want}, got {str(x.dtype).replace('torch.', '')}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if device is None:
        if x.device.type not in devtypes:
            raise ValueError(f"{name} must be on a CUDA device, got {x.device}")
    elif x.device != device:
        raise ValueError(f"{name} must be on {device} (like q), got {x.device}")
    return x


def _storageless(x: torch.Tensor) -> bool:
    """A meta tensor, or a fake one (torch.compile's tracing): no address to check."""
    return x.device.type == "meta" or isinstance(x, torch._subclasses.fake_tensor.FakeTensor)


def rows_16b(name: str, x: torch.Tensor):
    """The kernels copy 16-byte chunks: last dim contiguous, other strides and the base 16-byte aligned."""
    if x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension (stride 1), got strides {tuple(x.stride())}")
    elem = x.element_size()
    for d in range(x.dim() - 1):
        if (x.stride(d) * elem) % 16 and x.shape[d] > 1:
            raise ValueError(f"{name} stride {x.stride(d)} of dim {d} must be a multiple of {16 // elem} elements (16 bytes)")
    if not _storageless(x) and x.data_ptr() % 16:
        raise ValueError(f"{name} must start at a 16-byte aligned address")


def no_overlap(name: str, x: torch.Tensor):
    """A tensor the kernels write (``out``, ``lse``): no two of its elements may share memory (an
    expanded or overlapping view would make the kernels' writes race).  The sufficient test: its
    dimensions of size > 1, sorted by stride, each step at least the extent of the ones before
    (``torch.Tensor.out=`` refuses such tensors the same way).  Raises ValueError naming ``name``."""
    dims = [(x.stride(d), x.shape[d]) for d in range(x.dim()) if x.shape[d] > 1]
    for i in range(1, len(dims)):          # insertion sort: torch.compile traces comparisons of symbolic
        j = i                              # strides, not sorted() on them
        while j > 0 and dims[j][0] < dims[j - 1][0]:
            dims[j - 1], dims[j] = dims[j], dims[j - 1]
            j -= 1
    span = 1
    for st, n in dims:
        if st < span:
            raise ValueError(f"{name} must not have elements that share memory (an expanded or overlapping view), "
                             f"got shape {tuple(x.shape)} with strides {tuple(x.stride())}")
        span = st * n


def seqused(x, batch: int, device):
    """``seqused_k``: a contiguous int32 (batch,) tensor on ``device``; TypeError / ValueError naming it."""
    tensor("seqused_k", x, ndim=1, dtypes=(torch.int32,), device=device)
    if x.shape[0] != batch:
        raise ValueError(f"seqused_k must have shape ({batch},) (one length a request), got {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"seqused_k must be contiguous, got stride {x.stride(0)}")


def cu_seqlens(name: str, x, device) -> int:
    """Validate a cu_seqlens tensor; returns the batch size."""
    tensor(name, x, ndim=1, dtypes=(torch.int32,), device=device)
    if x.shape[0] < 1:
        raise ValueError(f"{name} must have batch+1 >= 1 entries, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return x.shape[0] - 1


def nonneg_int(name: str, x) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    if x < 0:
        raise ValueError(f"{name} must be >= 0, got {x}")
    return int(x)


#: The largest float32 (the kernels take the scale and the soft-cap in float32, scaled by log2(e)).
FLOAT32_MAX = 3.4028234663852886e38
#: The bound of ``softmax_scale`` and ``softcap``: times log2(e) (the kernels' exp2 units) they stay
#: finite in float32.
SCALAR_MAX = FLOAT32_MAX / 1.4426950408889634 / 2


def _is_bool(x) -> bool:
    """A Python bool, or a NumPy one (``np.bool_``: a comparison of NumPy values gives one)."""
    return isinstance(x, bool) or (type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_"))


def flag(name: str, x) -> bool:
    """A boolean option as a Python bool: a bool or a NumPy bool, else TypeError naming ``name`` (a
    string such as "False" was taken for its truth value, a causal mask; ints are refused, as
    ``pack_gqa`` and ``quantize_q`` always did)."""
    if _is_bool(x):
        return bool(x)
    raise TypeError(f"{name} must be a bool, got {type(x).__name__}")


def optional_flag(name: str, x):
    """None (the heuristics decide, ``pack_gqa``) or ``flag``'s bool, else TypeError naming ``name``."""
    if x is None:
        return None
    if _is_bool(x):
        return bool(x)
    raise TypeError(f"{name} must be None or a bool, got {type(x).__name__}")


def positive_int(name: str, x) -> int:
    """An int >= 1 (head counts, capacities), else TypeError / ValueError naming ``name``."""
    x = nonneg_int(name, x)
    if x < 1:
        raise ValueError(f"{name} must be >= 1, got {x}")
    return x


def softmax_scale(x, head_dim: int) -> float:
    if x is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"softmax_scale must be a float or None, got {type(x).__name__}")
    x = float(x)
    if not 0 < x < math.inf:  # NaN and inf fail too; comparisons trace under torch.compile
        raise ValueError(f"softmax_scale must be a finite positive number, got {x}")
    if x > SCALAR_MAX:
        raise ValueError(f"softmax_scale must be at most {SCALAR_MAX:.3g} (the kernels take it times log2(e) "
                         f"in float32), got {x}")
    return x


def layout(x) -> str:
    if x not in LAYOUTS:
        raise ValueError(f"metadata_layout must be one of {LAYOUTS}, got {x!r}")
    return x


def check_cu_seqlens_values(name: str, x: torch.Tensor, total: int) -> None:
    """Opt-in host check (synchronises!): starts at 0, non-decreasing, last entry <= total rows."""
    v = x.detach().to("cpu", torch.int64)
    if v[0].item() != 0:
        raise ValueError(f"{name}[0] must be 0, got {v[0].item()}")
    if v.numel() > 1 and bool((v[1:] < v[:-1]).any()):
        raise ValueError(f"{name} must be non-decreasing")
    if v[-1].item() > total:
        raise ValueError(f"{name}[-1] = {v[-1].item()} exceeds the {total} rows of the packed tensor")


def varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, devtypes=("cuda",), *,
                  seqused_k=None, page_table=None, out_dtype=None):
    """Checks for varlen_attention; returns a dict of the derived sizes.

    Packed K/V: k (total_k, Hkv, d), v (total_k, Hkv, dv) with cu_seqlens_k (and optionally
    seqused_k: the keys used per request, offsets still from cu_seqlens_k).  Paged K/V: k
    (num_pages, page_size, Hkv, d), v (num_pages, page_size, Hkv, dv), page_table int32
    (batch, max_pages_per_seq) and seqused_k int32 (batch,), no cu_seqlens_k.
    ``devtypes`` lets shape-only callers (tests, fake tensors) pass "meta" tensors.  An FP8 q
    (``Q_FP8_DTYPES``) needs FP8 k/v; ``sizes["dtype"]`` is the output's (and the kernels' 16-bit)
    dtype: ``out``'s, else ``out_dtype``, else bfloat16 for an FP8 q and q's dtype otherwise;
    ``sizes["q_dtype"]`` is "e4m3" for an FP8 q.
    """
    tensor("q", q, ndim=3, dtypes=tuple(DTYPES) + tuple(Q_FP8_DTYPES), devtypes=devtypes)
    dev = q.device
    q_fp8 = q.dtype in Q_FP8_DTYPES
    dtype = output_dtype(q, out, out_dtype)
    paged = page_table is not None
    kdim = 4 if paged else 3
    if paged and isinstance(k, torch.Tensor) and k.dim() == 3:
        raise ValueError("k must be a paged cache (num_pages, page_size, num_heads_kv, head_dim) when page_table is given")
    if q_fp8:
        tensor("k", k, ndim=kdim, device=dev)
        if k.dtype not in KV_FP8_DTYPES:
            raise TypeError(f"k must have an FP8 dtype (float8_e4m3fn or float8_e5m2) with an FP8 q, got "
                            f"{str(k.dtype).replace('torch.', '')}; convert q to float16/bfloat16 for a 16-bit cache")
    tensor("k", k, ndim=kdim, dtypes=(q.dtype,) + tuple(KV_FP8_DTYPES), device=dev)
    tensor("v", v, ndim=kdim, dtypes=(k.dtype,), device=dev)
    total_q, hq, d = q.shape
    hkv, dk = k.shape[-2], k.shape[-1]
    if dk != d:
        raise ValueError(f"k head_dim {dk} must equal q head_dim {d}")
    if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError(f"v must have shape ({', '.join(map(str, k.shape[:-1]))}, head_dim_v) like k, "
                         f"got {tuple(v.shape)}")
    dv = v.shape[-1]
    if d not in HEAD_DIMS:
        raise ValueError(f"q head_dim must be one of {HEAD_DIMS}, got {d}")
    if dv not in HEAD_DIMS:
        raise ValueError(f"v head_dim_v must be one of {HEAD_DIMS}, got {dv}")
    if hkv < 1 or hq < 1 or hq % hkv:
        raise ValueError(f"q num_heads ({hq}) must be a positive multiple of k num_heads ({hkv})")
    if hq > MAX_HEADS:
        raise ValueError(f"q num_heads must be <= {MAX_HEADS} (the scheduler metadata's 15-bit head field), got {hq}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        rows_16b(name, x)
    batch = cu_seqlens("cu_seqlens_q", cu_seqlens_q, dev)
    sizes = {"total_q": total_q, "num_heads_q": hq, "num_heads_kv": hkv, "head_dim": d, "head_dim_v": dv,
             "batch": batch, "paged": paged}
    if k.dtype in KV_FP8_DTYPES:
        sizes["kv_dtype"] = KV_FP8_DTYPES[k.dtype]
    sizes["dtype"] = dtype
    if q_fp8:
        sizes["q_dtype"] = Q_FP8_DTYPES[q.dtype]
    if paged:
        if cu_seqlens_k is not None:
            raise ValueError("cu_seqlens_k must be None with a page_table (key lengths come from seqused_k)")
        if seqused_k is None:
            raise ValueError("seqused_k is required with a page_table (the keys of each request)")
        tensor("page_table", page_table, ndim=2, dtypes=(torch.int32,), device=dev)
        if page_table.shape[0] != batch:
            raise ValueError(f"page_table must have batch = {batch} rows, got shape {tuple(page_table.shape)}")
        if page_table.stride(1) != 1:
            raise ValueError("page_table must be contiguous in its last dimension")
        sizes.update(num_pages=k.shape[0], page_size=k.shape[1], max_pages=page_table.shape[1], total_k=0)
        if sizes["page_size"] < 1:
            raise ValueError(f"k page_size must be >= 1, got {sizes['page_size']}")
    else:
        if cu_seqlens_k is None:
            raise ValueError("cu_seqlens_k is required for packed k/v (give page_table and seqused_k for a paged cache)")
        batch_k = cu_seqlens("cu_seqlens_k", cu_seqlens_k, dev)
        if batch_k != batch:
            raise ValueError(f"cu_seqlens_k must have batch+1 = {batch + 1} entries like cu_seqlens_q, got {batch_k + 1}")
        sizes["total_k"] = k.shape[0]
    if seqused_k is not None:
        seqused(seqused_k, batch, dev)
    if max_seqlen_q is not None:
        nonneg_int("max_seqlen_q", max_seqlen_q)
    if max_seqlen_k is not None:
        nonneg_int("max_seqlen_k", max_seqlen_k)
    if out is not None:
        tensor("out", out, ndim=3, dtypes=(dtype,), device=dev)
        if tuple(out.shape) != (total_q, hq, dv):
            raise ValueError(f"out must have shape {(total_q, hq, dv)}, got {tuple(out.shape)}")
        rows_16b("out", out)
        no_overlap("out", out)
    return sizes


def output_dtype(q, out, out_dtype):
    """The output's dtype: ``out``'s when given, else ``out_dtype`` (float16 or bfloat16; None:
    bfloat16 for an FP8 q, q's dtype otherwise).  ``out_dtype`` other than q's with a 16-bit q, or
    other than ``out``'s, raises ValueError naming it; anything but float16/bfloat16 TypeError."""
    q_fp8 = q.dtype in Q_FP8_DTYPES
    if out_dtype is not None:
        if not isinstance(out_dtype, torch.dtype) or out_dtype not in DTYPES:
            raise TypeError(f"out_dtype must be None, torch.float16 or torch.bfloat16, got {out_dtype!r}")
        if not q_fp8 and out_dtype != q.dtype:
            raise ValueError(f"out_dtype ({out_dtype}) must be q's dtype {q.dtype} (or None): the output of a "
                             f"16-bit q is in q's dtype; out_dtype chooses the output of an FP8 q")
        if isinstance(out, torch.Tensor) and out.dtype != out_dtype:
            raise ValueError(f"out_dtype ({out_dtype}) differs from out's dtype {out.dtype}")
    if isinstance(out, torch.Tensor) and q_fp8 and out.dtype in DTYPES:
        return out.dtype
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if q_fp8 else q.dtype


def _integer(x) -> bool:
    """A Python / NumPy integer (not a bool), or torch.compile's symbolic one (``dynamic=True`` makes
    an int argument a SymInt while the op's fake implementation checks it; comparing it guards)."""
    return (isinstance(x, numbers.Integral) and not isinstance(x, bool)) or isinstance(x, torch.SymInt)


def window(window_size, causal: bool) -> tuple[str, int, int]:
    """(mask kind, left, right) from window_size=(left, right) (-1 = unbounded) and causal."""
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not (_integer(window_size[0]) and _integer(window_size[1]))):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    left, right = int(window_size[0]), int(window_size[1])
    if left < -1 or right < -1 or left > MAX_WINDOW or right > MAX_WINDOW:
        raise ValueError(f"window_size entries must be in [-1, {MAX_WINDOW}] tokens (-1 = unbounded), got "
                         f"{window_size!r}")
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left < 0 and right < 0:
        return "none", -1, -1
    if left < 0 and right == 0:
        return "causal", -1, 0
    return "local", left, right


def softcap(x) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"softcap must be a float, got {type(x).__name__}")
    x = float(x)
    if not 0 <= x < math.inf:  # NaN and inf fail too; comparisons trace under torch.compile
        raise ValueError(f"softcap must be finite and >= 0 (0 = off), got {x}")
    if x > SCALAR_MAX:
        raise ValueError(f"softcap must be at most {SCALAR_MAX:.3g} (the kernels take it times log2(e) in "
                         f"float32), got {x}")
    return x


def softcap_ratio(scale: float, cap: float) -> None:
    """A soft-capped call's ``softmax_scale / softcap`` (the kernels' pre-tanh factor, float32) is
    finite: ValueError naming ``softcap`` otherwise (a tiny cap)."""
    if cap > 0 and scale / cap > FLOAT32_MAX:
        raise ValueError(f"softcap ({cap}) is too small for softmax_scale ({scale}): their ratio, which the "
                         f"kernels scale the logits by before tanh, overflows float32")


def num_splits(x) -> int:
    if not _integer(x):
        raise TypeError(f"num_splits must be an int, got {type(x).__name__}")
    if not 0 <= x <= 128:
        raise ValueError(f"num_splits must be in [0, 128] (0 = automatic), got {x}")
    return int(x)


#: The largest ``max_num_splits`` (FlashAttention-3's num_splits range; a cap above every automatic
#: bound changes nothing).
MAX_NUM_SPLITS_CAP = 256


def max_num_splits(x, num_splits: int = 0) -> int:
    """The cap on the automatic split count: an int in [0, ``MAX_NUM_SPLITS_CAP``] (0 = no cap), not
    combined with a forced ``num_splits`` (n >= 1).  Raises TypeError / ValueError naming the argument."""
    if not _integer(x):
        raise TypeError(f"max_num_splits must be an int, got {type(x).__name__}")
    if not 0 <= x <= MAX_NUM_SPLITS_CAP:
        raise ValueError(f"max_num_splits must be in [0, {MAX_NUM_SPLITS_CAP}] (0 = no cap), got {x}")
    if x and num_splits:
        raise ValueError(f"num_splits={num_splits} forces the split count and max_num_splits={x} caps the automatic "
                         f"one: give one of them (the other 0)")
    return int(x)


def short_query_tokens(x, pack_gqa=None, num_splits: int = 0):
    """The fused launch's class threshold: None (automatic) or an int >= 0 (0 = off).  A forced
    threshold (>= 1) does not combine with a forced ``pack_gqa`` or ``num_splits`` (the fused
    launch chooses both per class).  Raises TypeError / ValueError naming the argument."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"short_query_tokens must be None or an int, got {type(x).__name__}")
    if not 0 <= x <= 1 << 20:
        raise ValueError(f"short_query_tokens must be in [0, 2^20] query tokens (0 = no fused launch), got {x}")
    if x > 0 and (pack_gqa is not None or num_splits):
        raise ValueError("short_query_tokens >= 1 (a forced fused launch) cannot be combined with pack_gqa or "
                         "num_splits: the fused launch chooses them per request class")
    return int(x)


def check_seqused_values(seqused_k, cu_seqlens_k) -> None:
    """Opt-in host check (synchronises!) for packed k/v: 0 <= seqused_k[i] <= the keys request i
    has in cu_seqlens_k."""
    used = seqused_k.detach().to("cpu", torch.int64)
    cu = cu_seqlens_k.detach().to("cpu", torch.int64)
    span = cu[1:] - cu[:-1]
    bad = ((used < 0) | (used > span)).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"seqused_k[{i}] = {int(used[i])} must be in [0, {int(span[i])}] (the keys request {i} "
                         f"has in cu_seqlens_k)")


def lse_buffer(lse, num_heads_q: int, total_q: int, device) -> None:
    """A caller-provided lse: float32 (num_heads_q, total_q) on ``device``, tokens contiguous."""
    tensor("lse", lse, ndim=2, dtypes=(torch.float32,), device=device)
    if tuple(lse.shape) != (num_heads_q, total_q):
        raise ValueError(f"lse must have shape {(num_heads_q, total_q)}, got {tuple(lse.shape)}")
    if lse.stride(1) != 1 and total_q > 1:
        raise ValueError(f"lse must be contiguous along tokens (stride 1 in dim 1), got strides {tuple(lse.stride())}")
    no_overlap("lse", lse)


def sinks(x, num_heads_q: int, device) -> None:
    """``sinks``: None, or a contiguous float32 (num_heads_q,) tensor on ``device`` (q's), one logit
    per query head (the kernels read ``sinks[head]`` from its address: a strided or expanded view
    raises ValueError; pass ``.contiguous()``).  Its values are not read here (see
    ``check_sinks_values``)."""
    if x is None:
        return
    tensor("sinks", x, ndim=1, dtypes=(torch.float32,), device=device)
    if x.shape[0] != num_heads_q:
        raise ValueError(f"sinks must have shape ({num_heads_q},) (one logit per query head), got {tuple(x.shape)}")
    if x.stride(0) != 1 and num_heads_q > 1:
        raise ValueError(f"sinks must be contiguous (stride 1: the kernels read sinks[head] from its address), "
                         f"got stride {x.stride(0)}; pass sinks.contiguous()")


def alibi_slopes(x, num_heads_q: int, batch: int | None, device) -> int:
    """``alibi_slopes``: None, or a float32 tensor on ``device`` (q's) of shape ``(num_heads_q,)``
    or ``(batch, num_heads_q)`` (FlashAttention-2's argument: one ALiBi slope per query head, or
    per request and query head), contiguous along the heads.  Returns the batch stride in elements
    the kernels read the slopes with (0 for ``(num_heads_q,)``; -1 for None).  ``batch`` None: any
    number of rows (an AttentionPlan's capacity is checked by the plan).  The values are read on
    the device only."""
    if x is None:
        return -1
    tensor("alibi_slopes", x, dtypes=(torch.float32,), device=device)
    if x.dim() == 1:
        if x.shape[0] != num_heads_q:
            raise ValueError(f"alibi_slopes must have shape ({num_heads_q},) or (batch, {num_heads_q}) "
                             f"(one slope per query head), got {tuple(x.shape)}")
    elif x.dim() == 2:
        if x.shape[1] != num_heads_q or (batch is not None and x.shape[0] != batch):
            want = "batch" if batch is None else batch
            raise ValueError(f"alibi_slopes must have shape ({num_heads_q},) or ({want}, {num_heads_q}) "
                             f"(one slope per request and query head), got {tuple(x.shape)}")
    else:
        raise ValueError(f"alibi_slopes must have 1 or 2 dimensions ((num_heads_q,) or (batch, num_heads_q)), "
                         f"got shape {tuple(x.shape)}")
    if x.stride(-1) != 1 and num_heads_q > 1:
        raise ValueError(f"alibi_slopes must be contiguous along the heads (stride 1 in its last dimension), "
                         f"got strides {tuple(x.stride())}")
    return x.stride(0) if x.dim() == 2 and x.shape[0] > 1 else 0


def descale(name: str, x, batch: int | None, num_heads_kv: int, device, kv_dtype: str | None) -> tuple:
    """``k_descale`` / ``v_descale`` (FlashAttention-3's arguments): None (1.0), or a float32 tensor
    on ``device`` (q's) of shape ``(batch, num_heads_kv)`` or one that broadcasts to it (``()``,
    ``(1,)``, ``(1, 1)``, ``(batch, 1)``, ``(1, num_heads_kv)``: a per-tensor scale is the broadcast
    case; any strides, ``expand``ed tensors included).  A 1-D tensor of more than one element is
    refused (FA3 takes exactly (batch, num_heads_kv); one factor per request or per head would be
    ambiguous).  Given only with an
    FP8 K/V cache (``kv_dtype``).  Returns the (batch, head) strides in elements the kernels read
    the factor of (request b, KV head h) at (0 along a broadcast dimension), None for None.
    ``batch`` None: any number of rows (a plan's capacity is checked by the plan).  The values are
    read on the device only (``check_descale_values``: finite, under ``KERNELGEN_CHECK_INPUTS=1``)."""
    if x is None:
        return None
    if kv_dtype is None:
        raise ValueError(f"{name} applies to an FP8 K/V cache (k/v float8_e4m3fn or float8_e5m2) only; "
                         f"k/v here have q's 16-bit dtype: pass {name}=None")
    return _descale_strides(name, x, batch, num_heads_kv, device)


def q_descale(x, batch: int | None, num_heads_kv: int, device, q_dtype: str | None) -> tuple:
    """``q_descale`` (FlashAttention-3's argument): as ``descale`` (shape ``(batch, num_heads_kv)``
    or one that broadcasts to it, float32, on q's device), given only with an FP8 q (``q_dtype``
    "e4m3"): request b's queries of the heads of KV head h are ``q * q_descale[b, h]``."""
    if x is None:
        return None
    if not q_dtype:
        raise ValueError("q_descale applies to an FP8 q (float8_e4m3fn) only; q here is float16/bfloat16: pass "
                         "q_descale=None (k_descale / v_descale scale an FP8 K/V cache)")
    return _descale_strides("q_descale", x, batch, num_heads_kv, device)


def _broadcast_forms(want_b, num_heads_kv: int) -> list:
    """The shapes a (want_b, num_heads_kv) descale may also have, each once, the full one not among them."""
    forms = dict.fromkeys(["()", "(1,)", "(1, 1)", f"({want_b}, 1)", f"(1, {num_heads_kv})"])
    return [f for f in forms if f != f"({want_b}, {num_heads_kv})"]


def _descale_strides(name: str, x, batch: int | None, num_heads_kv: int, device) -> tuple:
    tensor(name, x, dtypes=(torch.float32,), device=device)
    want_b = "batch" if batch is None else batch
    if x.dim() > 2 or (x.dim() == 1 and x.numel() != 1):
        why = ("a 1-D tensor of several factors is ambiguous: per request or per KV head? reshape it" if x.dim() == 1
               else "at most 2 dimensions")
        forms = _broadcast_forms(want_b, num_heads_kv)
        raise ValueError(f"{name} must have shape ({want_b}, {num_heads_kv}) (batch, num_heads_kv), or "
                         f"{', '.join(forms)}; got {tuple(x.shape)} ({why})")
    shape = (1,) * (2 - x.dim()) + tuple(x.shape)
    stride = (0,) * (2 - x.dim()) + tuple(x.stride())
    if (batch is not None and shape[0] not in (1, batch)) or shape[1] not in (1, num_heads_kv):
        forms = _broadcast_forms(want_b, num_heads_kv)
        raise ValueError(f"{name} must have shape ({want_b}, {num_heads_kv}) (batch, num_heads_kv), or one that "
                         f"broadcasts to it ({', '.join(forms)}), got {tuple(x.shape)}")
    return (stride[0] if shape[0] > 1 else 0, stride[1] if shape[1] > 1 else 0)


def kv_dtype(x) -> str:
    """``AttentionPlan``'s ``kv_dtype``: None (K/V in q's dtype), or an FP8 K/V cache's dtype, as
    "e4m3" / "e5m2" or ``torch.float8_e4m3fn`` / ``torch.float8_e5m2``.  Returns "e4m3", "e5m2"
    or "" (None).  Raises ValueError naming ``kv_dtype`` for anything else."""
    if x is None:
        return ""
    if isinstance(x, torch.dtype) and x in KV_FP8_DTYPES:
        return KV_FP8_DTYPES[x]
    if isinstance(x, str) and x in KV_FP8_DTYPES.values():
        return x
    raise ValueError(f"kv_dtype must be None, 'e4m3', 'e5m2', torch.float8_e4m3fn or torch.float8_e5m2 (the FP8 "
                     f"K/V cache's dtype), got {x!r}")


def q_dtype(x, kv: str) -> str:
    """``AttentionPlan``'s ``q_dtype``: None (q in the plan's 16-bit dtype) or an FP8 q's dtype,
    "e4m3" or ``torch.float8_e4m3fn``, which needs an FP8 K/V cache (``kv``: ``kv_dtype``'s
    result).  Returns "e4m3" or "".  Raises ValueError naming ``q_dtype``."""
    if x is None:
        return ""
    if not ((isinstance(x, torch.dtype) and x in Q_FP8_DTYPES) or (isinstance(x, str) and x in Q_FP8_DTYPES.values())):
        raise ValueError(f"q_dtype must be None, 'e4m3' or torch.float8_e4m3fn (an FP8 q), got {x!r}")
    if not kv:
        raise ValueError("q_dtype (an FP8 q) needs an FP8 K/V cache: pass kv_dtype too")
    return "e4m3"


def check_descale_values(name: str, x) -> None:
    """Opt-in host check (synchronises!): every descale factor is finite and not negative (the
    kernels' online softmax takes the row maximum of the raw scores times the positive softmax
    scale; a negative k_descale * q_descale would turn it into the minimum)."""
    if x is None:
        return
    v = x.detach().to("cpu", torch.float64).flatten()
    bad = (~torch.isfinite(v)).nonzero().flatten()
    if bad.numel():
        raise ValueError(f"{name} holds a non-finite factor ({float(v[int(bad[0])])}); descale factors must be finite")
    neg = (v < 0).nonzero().flatten()
    if neg.numel():
        raise ValueError(f"{name} holds a negative factor ({float(v[int(neg[0])])}); descale factors must be >= 0 "
                         f"(an FP8 tensor's scale)")


def check_descale_product(k_descale, q_descale, softmax_scale: float) -> None:
    """Opt-in host check (synchronises!), with an FP8 q: the kernels multiply ``k_descale *
    q_descale`` in float32 (None: 1), then fold it with ``softmax_scale * log2(e)`` into one float32
    factor a (request, KV head); ValueError naming both descales where the largest of either is not
    a finite float32 (every logit would be inf or NaN)."""
    if k_descale is None and q_descale is None:
        return
    k64, q64 = (torch.ones((), dtype=torch.float64) if x is None else x.detach().to("cpu", torch.float64)
                for x in (k_descale, q_descale))
    kq = float((k64 * q64).abs().max())   # (the shapes broadcast to (batch, num_heads_kv))
    big = max(kq, kq * abs(softmax_scale) * 1.4426950408889634)
    if not big < FLOAT32_MAX:
        raise ValueError(f"k_descale * q_descale * softmax_scale * log2(e) reaches {big:.3g}, past float32's range: "
                         f"the kernels fold it into one float32 factor; rescale the FP8 tensors")


def check_sinks_values(x) -> None:
    """Opt-in host check (synchronises!): no sink is NaN or +inf (-inf is allowed: no sink)."""
    if x is None:
        return
    v = x.detach().to("cpu", torch.float64)
    bad = (torch.isnan(v) | (v == math.inf)).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"sinks[{i}] = {float(v[i])} must be finite or -inf (no sink)")


def check_paged_values(page_table, seqused_k, num_pages: int, page_size: int) -> None:
    """Opt-in host check (synchronises!): page ids in [0, num_pages) for the pages each request
    uses, and page_table wide enough for seqused_k."""
    used = seqused_k.detach().to("cpu", torch.int64)
    if bool((used < 0).any()):
        raise ValueError("seqused_k must be >= 0")
    need = (used + page_size - 1) // page_size
    if int(need.max().item() if need.numel() else 0) > page_table.shape[1]:
        raise ValueError(f"page_table is too narrow: a request needs {int(need.max())} pages of {page_size} "
                         f"tokens, page_table has {page_table.shape[1]} columns")
    pt = page_table.detach().to("cpu", torch.int64)
    for b in range(pt.shape[0]):
        ids = pt[b, : int(need[b])]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_pages):
            raise ValueError(f"page_table[{b}] has page ids outside the cache's {num_pages} pages")


#: Environment variable that forces a mainloop for calls whose ``arch`` argument is None.
ARCH_ENV = "KERNELGEN_ARCH"
_ARCH_NAMES = {"sm_80": "sm80", "sm80": "sm80", "sm_90a": "sm90a", "sm90a": "sm90a", "auto": None, "": None}


def arch(x, device_arch: str | None, env: str | None = None):
    """The mainloop a call asks for: None (automatic), "sm80" or "sm90a".

    ``x`` is varlen_attention's ``arch`` argument ("sm_80", "sm_90a", "auto" or None); None takes
    ``env``, the value of ``KERNELGEN_ARCH`` (``Settings.arch``; same values, None = unset =
    automatic).  "sm_90a" needs a device whose compile target is sm_90a (``device_arch``; None
    skips that check).  Raises TypeError / ValueError naming the argument (or the variable).
    """
    what = "arch"
    if x is None:
        x, what = env or "", ARCH_ENV
    if not isinstance(x, str):
        raise TypeError(f"arch must be None or a str, got {type(x).__name__}")
    key = x.strip().lower()
    if key not in _ARCH_NAMES:
        raise ValueError(f"{what} must be one of 'sm_80', 'sm_90a', 'auto' (or unset), got {x!r}")
    m = _ARCH_NAMES[key]
    if m == "sm90a" and device_arch is not None and device_arch != "sm_90a":
        raise ValueError(f"{what}={x!r} needs a Hopper device (compute capability 9.0); this one compiles for "
                         f"{device_arch}")
    return m


def variant(x, device):
    """``variant``: None or a ``kernelgen.Variant`` whose tensors are contiguous and on ``device``
    (q's; None: any device).  Returns its ``VariantCode`` (None for None).  Raises TypeError / ValueError naming the
    argument and the tensor.  The tensors' values are never read here."""
    if x is None:
        return None
    from .variant import check   # (imports torch-free kernels code only; loaded on first use)

    check(x, device)
    return x.code
