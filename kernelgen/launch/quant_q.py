"""A 16-bit q quantised to e4m3 on the device, per request and KV head (``quantize_q=True``).

An FP8 K/V cache with a bf16 / fp16 q has two Hopper prefill kernels: the FP8-cache kernel, whose
producer warps convert every K/V block exactly to 16 bits in shared memory (0.45-0.57x of the bf16
call's speed on the H200, ``docs/dev/perf-log.md``), and the FP8 tensor-core kernel
(``AttentionSpec.fp8_mma``: S = Q K^T and P V on FP8 wgmma), which needs an e4m3 q.  With
``quantize_q=True`` a call that the tensor-core kernel can take quantises q first, as a serving
engine does for FlashAttention-3's FP8 forward (vLLM's FP8 query), and passes the result with its
``q_descale`` (FlashAttention-3's (batch, num_heads_kv) convention).

The scale of request b and KV head h is a power of two, 2^-k with k the largest integer such that
``amax * 2^k <= 448`` (e4m3's largest finite value), amax the largest |q| over the request's rows
and the query heads of that KV head (k = 0 for an all-zero or non-finite amax; -126 <= k <= 126
for bf16, -24 <= k <= 15 for fp16, whose range ends at 65504: an fp16 request whose largest |q| is
below 2^-6 keeps e4m3's normal range only down to 2^-21).  A
power of two makes ``q * 2^k`` exact in q's own dtype, so the only rounding is e4m3's (round to
nearest even: a relative error of at most 2^-4 for every element at or above 2^-6 / 2^k, an
absolute one of 2^-10 / 2^k below), ``q_descale = 2^-k`` exactly, and no element exceeds 448.
(A power of two wastes at most the top half of e4m3's range of one binade, which changes nothing
for normal values: their relative step is the same in every binade.)  A request and KV head with
an inf or NaN in q keeps the factor 1, so its other values are cast unscaled (past 448, inf
included, the kernel saturates them to +-448, as ``quantize_reference``'s cast does from torch
2.12 on, NaN before; below 2^-10 they round to 0); NaN stays NaN.  The
row with the inf or NaN is lost either way (so it is on the exact path); the group's other rows
lose precision here only.

On a GPU of compute capability 8.9 and up one kernel does it (templates/quant/quant_q.cu.j2: the
largest |q| per request and KV head, then the cast; each phase reads q once), elsewhere torch ops
(``quantize_reference``, the same bytes); either way on the current stream, with no host
synchronisation, capturable in a CUDA graph.  Cost, measured on the H200 for a 16384-token q of
134 MB (32 x 128, 16 x 256 or 64 x 64 heads; ``benchmarks/experiments/quant_q_time.py``): the kernel
92-97 us (3.5-3.7 TB/s of the 402 MB it moves), the torch ops 384-430 us, against the 2-4.4 ms the
tensor-core kernel saves on such a prefill (``docs/dev/perf-log.md``, thirtieth and thirty-first
sessions).
"""
from __future__ import annotations

import torch

#: e4m3 (``torch.float8_e4m3fn``): the largest finite value.
E4M3_MAX = 448.0
#: The quantised q's dtype.
Q8_DTYPE = torch.float8_e4m3fn


def buffer_bytes(total_q: int, num_heads_q: int, head_dim: int, batch: int, num_heads_kv: int) -> tuple[int, int]:
    """(offset of the descales, total bytes) of one buffer that holds the quantised q (contiguous
    (total_q, num_heads_q, head_dim) e4m3 at byte 0) and then its float32 (batch, num_heads_kv)
    ``q_descale`` at a 16-byte aligned offset."""
    off = -(-total_q * num_heads_q * head_dim // 16) * 16
    return off, off + 4 * batch * num_heads_kv


def _views(q: torch.Tensor, batch: int, num_heads_kv: int, buffer: torch.Tensor | None,
           descale_offset: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q8, descale) views of ``buffer`` (allocated when None): ``quantize``'s layout and checks."""
    total, hq, d = q.shape
    off, nbytes = buffer_bytes(total, hq, d, batch, num_heads_kv)
    if descale_offset is not None:
        off = descale_offset
    if buffer is None:
        buffer = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    elif off < total * hq * d or off % 4 or buffer.numel() < off + 4 * batch * num_heads_kv:
        raise ValueError(f"q ({total} x {hq} x {d}) and its ({batch}, {num_heads_kv}) factors do not fit the "
                         f"buffer ({buffer.numel()} bytes, factors at {off})")
    q8 = buffer[:total * hq * d].view(Q8_DTYPE).view(total, hq, d)
    descale = buffer[off:off + 4 * batch * num_heads_kv].view(torch.float32).view(batch, num_heads_kv)
    return q8, descale


def quantize(q: torch.Tensor, cu_seqlens_q: torch.Tensor, batch: int, num_heads_kv: int,
             buffer: torch.Tensor | None = None, descale_offset: int | None = None,
             kernel=None) -> tuple[torch.Tensor, torch.Tensor]:
    """q (total_q, num_heads_q, head_dim), float16 or bfloat16, as e4m3 with per-(request, KV head)
    power-of-two descales (the module's docstring says how they are chosen and how exact they are).

    ``cu_seqlens_q``: int32 (batch + 1,) on q's device (rows past ``cu_seqlens_q[batch]`` count
    toward no factor and are cast with factor 1; nothing reads them).  ``buffer``: a uint8 tensor of at
    least ``buffer_bytes(...)[1]`` bytes on q's device to write both results into (the kernels then
    find ``q_descale`` at a fixed offset from q's address), None to allocate one;
    ``descale_offset``: where the descales start in it (bytes, a multiple of 4 at or past q8's end;
    default ``buffer_bytes(...)[0]``: an ``AttentionPlan`` keeps its own, sized by its capacities).

    ``kernel``: the loaded quantisation kernel of q's dtype on q's device (``jit.runtime.quant_kernel``:
    ``spec.QuantSpec``, templates/quant/quant_q.cu.j2), which then does it in two launches on the
    current stream (the largest |q| per request and KV head, then the cast; both read q once) after
    zeroing a (batch, num_heads_kv) word array; None (a CPU tensor, a GPU without FP8 conversions):
    ``quantize_reference``'s torch ops, whose results are the same bytes.  No host synchronisation
    either way (capturable in a CUDA graph).

    Returns (q8, q_descale): q8 (total_q, num_heads_q, head_dim) ``torch.float8_e4m3fn``,
    contiguous; q_descale float32 (batch, num_heads_kv), contiguous.  No error checking: the
    callers validated the arguments; ValueError when q and its factors do not fit ``buffer``.
    """
    q8, descale = _views(q, batch, num_heads_kv, buffer, descale_offset)
    if kernel is None:
        return _reference_into(q, cu_seqlens_q, batch, num_heads_kv, q8, descale)
    total, hq, d = q.shape
    if total == 0:
        descale.fill_(1.0)
        return q8, descale
    from . import prepared

    if prepared.current_device() != q.device.index:   # (the kernel and the stream are q's device's)
        with torch.cuda.device(q.device):
            _launch(kernel, q, cu_seqlens_q, batch, num_heads_kv, q8, descale)
    else:
        _launch(kernel, q, cu_seqlens_q, batch, num_heads_kv, q8, descale)
    return q8, descale


def _launch(kernel, q, cu_seqlens_q, batch, num_heads_kv, q8, descale) -> None:
    """The kernel's two launches on the current stream of q's device (current already)."""
    from ..kernels.params import QUANT_PARAMS
    from . import launch, prepared

    total, hq, d = q.shape
    if q.stride(2) != 1 or q.stride(1) != d or q.stride(0) % 8 or q.data_ptr() % 16:
        # the kernel reads a row's heads as one run of 16-byte chunks (a contiguous q at a
        # misaligned address is copied too: contiguous() would return it as it is)
        q = q.clone(memory_format=torch.contiguous_format)
    amax = torch.zeros(batch * num_heads_kv, dtype=torch.int32, device=q.device)
    stream = prepared.current_stream(q.device.index)
    grid = -(-total // kernel.spec.rows_per_cta) * num_heads_kv
    fields = {"q": q.data_ptr(), "cu_seqlens_q": cu_seqlens_q.data_ptr(), "amax": amax.data_ptr(),
              "q8": q8.data_ptr(), "descale": descale.data_ptr(), "q_row_stride": q.stride(0), "total_q": total,
              "num_heads_kv": num_heads_kv, "group_elems": hq // num_heads_kv * d, "batch": batch}
    for phase in (0, 1):
        launch.launch_kernel(kernel, grid, stream, QUANT_PARAMS.pack({**fields, "phase": phase}))


def quantize_reference(q: torch.Tensor, cu_seqlens_q: torch.Tensor, batch: int, num_heads_kv: int,
                       buffer: torch.Tensor | None = None,
                       descale_offset: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize`` in torch ops on any device (the specification the kernel is tested against):
    same arguments, results and errors."""
    q8, descale = _views(q, batch, num_heads_kv, buffer, descale_offset)
    return _reference_into(q, cu_seqlens_q, batch, num_heads_kv, q8, descale)


def _reference_into(q, cu_seqlens_q, batch, num_heads_kv, q8, descale):
    total, hq, d = q.shape
    x = q.unflatten(1, (num_heads_kv, hq // num_heads_kv))             # (total, hkv, group, d)
    amax = torch.linalg.vector_norm(x, float("inf"), dim=(2, 3)).float()   # (total, hkv): max |q|, one pass
    rows = torch.arange(total, dtype=cu_seqlens_q.dtype, device=q.device)
    # each row's request; rows past cu_seqlens_q[batch]: "request" batch, whose factor is 1
    req = (torch.searchsorted(cu_seqlens_q, rows, right=True) - 1).clamp_(0, batch)
    amax = torch.zeros(batch + 1, num_heads_kv, dtype=torch.float32, device=q.device).scatter_reduce_(
        0, req[:, None].expand(-1, num_heads_kv), amax, "amax")
    amax[batch] = 0
    mant, expo = torch.frexp(amax)                                     # amax = mant * 2^expo, mant in [0.5, 1)
    # the largest k with amax * 2^k <= 448 = 0.875 * 2^9
    k = torch.where(mant <= E4M3_MAX / 512, 9 - expo, 8 - expo)
    lo, hi = (-24, 15) if q.dtype == torch.float16 else (-126, 126)   # 2^k and 2^-k in q's dtype / float32
    k = torch.where(torch.isfinite(amax) & (amax > 0), k, torch.zeros_like(k)).clamp_(lo, hi)
    torch.ldexp(torch.ones_like(descale), -k[:batch], out=descale)
    up = torch.ldexp(torch.ones_like(amax), k).to(q.dtype)            # exact: a power of two in range
    q8.view(total, num_heads_kv, hq // num_heads_kv, d).copy_(x * up[req][:, :, None, None])
    return q8, descale
