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

import torch

from .spec import HEAD_DIMS

DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
LAYOUTS = ("soa", "aos")


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


def rows_16b(name: str, x: torch.Tensor):
    """The kernels copy 16-byte chunks: last dim contiguous, other strides and the base 16-byte aligned."""
    if x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension (stride 1), got strides {tuple(x.stride())}")
    elem = x.element_size()
    for d in range(x.dim() - 1):
        if (x.stride(d) * elem) % 16 and x.shape[d] > 1:
            raise ValueError(f"{name} stride {x.stride(d)} of dim {d} must be a multiple of {16 // elem} elements (16 bytes)")
    if x.data_ptr() % 16:
        raise ValueError(f"{name} must start at a 16-byte aligned address")


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


def softmax_scale(x, head_dim: int) -> float:
    if x is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"softmax_scale must be a float or None, got {type(x).__name__}")
    x = float(x)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"softmax_scale must be a finite positive number, got {x}")
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


def varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, devtypes=("cuda",)):
    """Checks for varlen_attention; returns a dict of the derived sizes.

    ``devtypes`` lets shape-only callers (tests, fake tensors) pass "meta" tensors.
    """
    tensor("q", q, ndim=3, dtypes=tuple(DTYPES), devtypes=devtypes)
    dev = q.device
    tensor("k", k, ndim=3, dtypes=(q.dtype,), device=dev)
    tensor("v", v, ndim=3, dtypes=(q.dtype,), device=dev)
    total_q, hq, d = q.shape
    total_k, hkv, dk = k.shape
    if dk != d:
        raise ValueError(f"k head_dim {dk} must equal q head_dim {d}")
    if v.shape[0] != total_k or v.shape[1] != hkv:
        raise ValueError(f"v must have shape ({total_k}, {hkv}, head_dim_v) like k, got {tuple(v.shape)}")
    dv = v.shape[2]
    if d not in HEAD_DIMS:
        raise ValueError(f"q head_dim must be one of {HEAD_DIMS}, got {d}")
    if dv not in HEAD_DIMS:
        raise ValueError(f"v head_dim_v must be one of {HEAD_DIMS}, got {dv}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"q num_heads ({hq}) must be a multiple of k num_heads ({hkv})")
    for name, x in (("q", q), ("k", k), ("v", v)):
        rows_16b(name, x)
    batch = cu_seqlens("cu_seqlens_q", cu_seqlens_q, dev)
    batch_k = cu_seqlens("cu_seqlens_k", cu_seqlens_k, dev)
    if batch_k != batch:
        raise ValueError(f"cu_seqlens_k must have batch+1 = {batch + 1} entries like cu_seqlens_q, got {batch_k + 1}")
    nonneg_int("max_seqlen_q", max_seqlen_q)
    nonneg_int("max_seqlen_k", max_seqlen_k)
    if out is not None:
        tensor("out", out, ndim=3, dtypes=(q.dtype,), device=dev)
        if tuple(out.shape) != (total_q, hq, dv):
            raise ValueError(f"out must have shape {(total_q, hq, dv)}, got {tuple(out.shape)}")
        rows_16b("out", out)
    return {"total_q": total_q, "total_k": total_k, "num_heads_q": hq, "num_heads_kv": hkv,
            "head_dim": d, "head_dim_v": dv, "batch": batch}
