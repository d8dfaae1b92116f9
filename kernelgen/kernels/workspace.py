"""The device scratch memory of one call, in one allocation.

A call needs the scheduler metadata (int32, ``metadata.buffer_ints(capacity)``) and, with
split-KV, the fp32 partials ``out_accum`` (splits, Hq, partial rows, dv) and ``lse_accum``
(splits, Hq, partial rows) and the int32 ``row_splits`` (rows,).

Partial rows are the query tokens (``request_rows`` 0), or, for the short class of a mixed batch
whose requests have at most ``request_rows`` query tokens each, ``capacity * request_rows`` rows
indexed by (request, token of the request): a mixed step's prefill tokens never split, so sizing
the partials by all of its tokens cost GBs (6.9 GiB for a 256-request, 8192-token Llama-3 plan,
0.9 GiB by request).  ``row_splits[token]`` holds the token's partial count in its low 8 bits
(at most ``heuristics.MAX_DECODE_SPLITS`` = 255) and its partial row above them; the attention kernels
write it, the combine kernel reads it.  ``WorkspaceLayout`` places them in one
byte buffer at 256-byte aligned offsets, so ``varlen_attention`` makes one ``torch.empty`` per
call (stream-ordered reuse by PyTorch's caching allocator makes a fresh buffer per call safe, also
inside CUDA-graph capture) and ``AttentionPlan`` one buffer for its lifetime.  A mixed batch's
two request classes share one workspace (``FusedWorkspace``): the short class's metadata and
partials as a ``WorkspaceLayout``, then the long class's metadata.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import metadata

#: Alignment of every region, bytes (the caching allocator's own block alignment is 512).
ALIGN = 256
#: Most partial rows a workspace may hold: row_splits keeps the row above 8 bits of count.
MAX_PARTIAL_ROWS = (1 << 23) - 1


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class SplitBuffers:
    """Split-KV partials: out_accum (splits, Hq, partial rows, dv) and lse_accum (splits, Hq,
    partial rows) float32, and row_splits (total_q,) int32 (partials per token and the token's
    partial row, written by the attention kernel); ``request_rows`` as ``WorkspaceLayout``'s."""

    def __init__(self, out_accum, lse_accum, row_splits, request_rows: int = 0):
        self.out_accum, self.lse_accum, self.row_splits = out_accum, lse_accum, row_splits
        self.request_rows = int(request_rows)

    @classmethod
    def allocate(cls, max_splits, num_heads_q, total_q, head_dim_v, device):
        return cls(torch.empty((max_splits, num_heads_q, total_q, head_dim_v), dtype=torch.float32, device=device),
                   torch.empty((max_splits, num_heads_q, total_q), dtype=torch.float32, device=device),
                   torch.empty((total_q,), dtype=torch.int32, device=device))


@dataclass(frozen=True)
class WorkspaceLayout:
    """Byte offsets of the regions of one workspace.

    ``capacity``: requests the metadata describes; ``max_splits``, ``num_heads_q``, ``rows``
    (query tokens) and ``head_dim_v`` size the split-KV partials, which exist only when
    ``split``; ``request_rows`` > 0 indexes the partials by (request, token of the request),
    ``capacity * request_rows`` rows (see the module doc).  Raises ValueError for more than
    ``MAX_PARTIAL_ROWS`` partial rows (row_splits keeps 23 bits for the row).
    """

    capacity: int
    split: bool
    max_splits: int = 1
    num_heads_q: int = 1
    rows: int = 0
    head_dim_v: int = 0
    request_rows: int = 0

    def __post_init__(self):
        if self.split and self.partial_rows > MAX_PARTIAL_ROWS:
            raise ValueError(f"split-KV partials of {self.partial_rows} rows exceed {MAX_PARTIAL_ROWS} "
                             f"(row_splits holds the row in 23 bits): an AttentionPlan's max_total_q (or a call's "
                             f"query tokens) must stay within it with split-KV; pass num_splits=1 for more")

    @property
    def partial_rows(self) -> int:
        """Rows of the partials: the tokens, or ``capacity * request_rows``."""
        return self.capacity * self.request_rows if self.request_rows > 0 else self.rows

    @property
    def metadata_offset(self) -> int:
        return 0

    @property
    def metadata_ints(self) -> int:
        return metadata.buffer_ints(self.capacity)

    @property
    def out_accum_offset(self) -> int:
        return _align(4 * self.metadata_ints)

    @property
    def lse_accum_offset(self) -> int:
        return self.out_accum_offset + _align(4 * self.max_splits * self.num_heads_q * self.partial_rows
                                              * self.head_dim_v)

    @property
    def row_splits_offset(self) -> int:
        return self.lse_accum_offset + _align(4 * self.max_splits * self.num_heads_q * self.partial_rows)

    @property
    def nbytes(self) -> int:
        """Size of the whole workspace in bytes (a multiple of ALIGN)."""
        if not self.split:
            return self.out_accum_offset
        return self.row_splits_offset + _align(4 * self.rows)

    def split_strides(self) -> dict:
        """Element strides of the partials, as the kernels' parameter fields (0 without split-KV)."""
        if not self.split:
            return dict.fromkeys(("accum_split_stride", "accum_head_stride", "lse_accum_split_stride",
                                  "lse_accum_head_stride", "split_request_rows"), 0)
        h, r, dv = self.num_heads_q, self.partial_rows, self.head_dim_v
        return {"accum_split_stride": h * r * dv, "accum_head_stride": r * dv, "lse_accum_split_stride": h * r,
                "lse_accum_head_stride": r, "split_request_rows": self.request_rows}

    def views(self, ws: torch.Tensor):
        """(metadata int32 tensor, SplitBuffers or None) viewing a uint8 workspace of ``nbytes``."""
        if ws.dtype != torch.uint8 or ws.dim() != 1 or ws.numel() < self.nbytes:
            raise ValueError(f"workspace must be a uint8 tensor of {self.nbytes} bytes, got {ws.dtype} {tuple(ws.shape)}")

        def region(offset, count, dtype, shape):
            return ws[offset:offset + 4 * count].view(dtype).view(shape)

        md = region(self.metadata_offset, self.metadata_ints, torch.int32, (self.metadata_ints,))
        if not self.split:
            return md, None
        s, h, r, dv = self.max_splits, self.num_heads_q, self.partial_rows, self.head_dim_v
        return md, SplitBuffers(region(self.out_accum_offset, s * h * r * dv, torch.float32, (s, h, r, dv)),
                                region(self.lse_accum_offset, s * h * r, torch.float32, (s, h, r)),
                                region(self.row_splits_offset, self.rows, torch.int32, (self.rows,)),
                                self.request_rows)


@dataclass(frozen=True)
class FusedWorkspace:
    """One workspace for a fused call: the short class's metadata and split-KV partials (laid out
    as ``WorkspaceLayout``), then the long class's metadata."""

    short: WorkspaceLayout

    @property
    def capacity(self) -> int:
        return self.short.capacity

    @property
    def long_metadata_offset(self) -> int:
        return self.short.nbytes

    @property
    def nbytes(self) -> int:
        return self.short.nbytes + (4 * metadata.buffer_ints(self.capacity) + ALIGN - 1) // ALIGN * ALIGN

    def views(self, ws: torch.Tensor):
        """(long metadata, short metadata, short SplitBuffers or None) viewing a uint8 workspace of
        ``nbytes``."""
        md_short, split = self.short.views(ws)
        n = metadata.buffer_ints(self.capacity)
        off = self.long_metadata_offset
        md_long = ws[off:off + 4 * n].view(torch.int32)
        return md_long, md_short, split


def short_class_workspace(capacity: int, rows: int, split: bool, max_splits: int, num_heads_q: int,
                          head_dim_v: int, short_max_q: int) -> FusedWorkspace:
    """The workspace of a mixed call: only the short class splits, and its requests have at most
    ``short_max_q`` query tokens each, so its partials are indexed by (request, token of the
    request) when ``capacity * short_max_q`` rows are fewer than the step's ``rows`` tokens
    (``WorkspaceLayout.request_rows``)."""
    by_request = short_max_q if capacity * short_max_q < rows else 0
    return FusedWorkspace(WorkspaceLayout(capacity, split, max_splits, num_heads_q, rows, head_dim_v, by_request))
