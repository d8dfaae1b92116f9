"""The scheduler-metadata ABI and the scheduler's pure-Python reference.

One int32 device buffer per plan, sized by a *capacity* (the largest batch it will ever describe),
never by the runtime batch, so a CUDA-graph replay whose batch is padded past the planned one reads
a consistent layout.

Header (16 bytes, 4 int32):

====  ===============  ======================================================================
int   name             meaning
====  ===============  ======================================================================
0     tile_semaphore   next tile counter, taken with atomicAdd by the persistent attention CTAs
1     total_tiles      number of work tiles described below
2     batch            runtime batch the buffer was written for
3     exit_count       CTAs that found no more work; the last one resets ints 0 and 3 to 0, so
                       the same metadata can drive any number of attention launches in stream order
====  ===============  ======================================================================

Per-request fields, indexed by the *virtual* index ``vb`` (the order the tiles are walked in):

====  ===============  ======================================================================
k     name             meaning
====  ===============  ======================================================================
0     tile_start       first tile of request ``vb`` (exclusive prefix sum of tile counts)
1     batch_idx        the request this entry describes (vb -> request)
2     m_blocks         query blocks of the request: ceil(seqlen_q / block_m)
3     splits_nheads    num_splits | (nheads_in_l2 << 16)  (1 | 1 << 16 until split-KV / swizzle)
====  ===============  ======================================================================

Layouts (both always built; ``metadata_layout="soa"|"aos"`` picks one):

* SoA: field k of entry vb at ``4 + k * round_up(capacity, 4) + vb``;
* AoS: field k of entry vb at ``4 + 4 * vb + k`` (one 16-byte int4 per request).

Entries ``[batch, round_up(capacity, 4))`` are written by the scheduler kernel with neutral values
(tile_start = total_tiles, batch_idx = vb, m_blocks = 0, splits_nheads = 1 | 1 << 16): they own no
tiles, and the tile search over ``[0, capacity)`` never lands on them.

A request ``vb`` owns ``num_heads * m_blocks`` consecutive tiles starting at ``tile_start``.  Local
tile ``r`` decodes to ``head = r // m_blocks`` and ``m_block = r % m_blocks``, reversed
(``m_blocks - 1 - m_block``) for causal masks so the most expensive query blocks of a request are
started first (longest-processing-time first, the idea of FlashAttention-3's varlen scheduler).
"""
from __future__ import annotations

import numpy as np

HEADER_INTS = 4
SEMAPHORE, TOTAL_TILES, BATCH, EXIT_COUNT = 0, 1, 2, 3
FIELDS = ("tile_start", "batch_idx", "m_blocks", "splits_nheads")
NVEC = len(FIELDS)
NEUTRAL_SPLITS_NHEADS = 1 | (1 << 16)


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def buffer_ints(capacity: int) -> int:
    """Size of the metadata buffer in int32 elements (the same for both layouts)."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    return HEADER_INTS + NVEC * round_up(capacity, 4)


def field_offset(layout: str, capacity: int, field: int, vb: int) -> int:
    """Element offset of ``field`` (index into FIELDS) of entry ``vb``."""
    if layout == "soa":
        return HEADER_INTS + field * round_up(capacity, 4) + vb
    if layout == "aos":
        return HEADER_INTS + NVEC * vb + field
    raise ValueError(f"metadata_layout must be 'soa' or 'aos', got {layout!r}")


def template_constants() -> dict:
    """Constants rendered into templates/common/metadata.cuh (single source of truth)."""
    return {
        "md_header_ints": HEADER_INTS,
        "md_nvec": NVEC,
        "md_semaphore": SEMAPHORE,
        "md_total_tiles": TOTAL_TILES,
        "md_batch": BATCH,
        "md_exit_count": EXIT_COUNT,
        "md_fields": list(enumerate(FIELDS)),
        "md_neutral_splits_nheads": NEUTRAL_SPLITS_NHEADS,
    }


def reference_schedule(
    cu_seqlens_q,
    cu_seqlens_k,
    batch: int,
    capacity: int,
    num_heads: int,
    block_m: int,
    block_n: int,
    layout: str,
) -> np.ndarray:
    """What the scheduler kernel writes, bit for bit, as an int32 numpy array.

    The header's semaphore and exit counter are 0 (the state after the scheduler kernel).
    ``block_n`` is accepted for the ABI (n-blocks enter with split-KV) and is unused here.
    """
    cu_q = np.asarray(cu_seqlens_q, dtype=np.int64)
    if batch > capacity:
        raise ValueError(f"batch {batch} exceeds capacity {capacity}")
    buf = np.zeros(buffer_ints(capacity), dtype=np.int32)
    cap = round_up(capacity, 4)
    start = 0
    tile_start = np.empty(cap, np.int64)
    batch_idx = np.arange(cap, dtype=np.int64)
    m_blocks = np.zeros(cap, np.int64)
    sn = np.full(cap, NEUTRAL_SPLITS_NHEADS, np.int64)
    for i in range(batch):
        lq = int(cu_q[i + 1] - cu_q[i])
        m = (lq + block_m - 1) // block_m if lq > 0 else 0
        tile_start[i] = start
        m_blocks[i] = m
        start += num_heads * m
    tile_start[batch:] = start
    buf[TOTAL_TILES] = start
    buf[BATCH] = batch
    # Every slot up to round_up(capacity, 4) is written, so no byte of the buffer is uninitialised.
    for k, vec in enumerate((tile_start, batch_idx, m_blocks, sn)):
        for vb in range(cap):
            buf[field_offset(layout, capacity, k, vb)] = vec[vb]
    return buf


def decode(buf, layout: str, capacity: int) -> dict:
    """Split a metadata buffer into its header and per-entry vectors (numpy int64 arrays)."""
    buf = np.asarray(buf)
    out = {
        "tile_semaphore": int(buf[SEMAPHORE]),
        "total_tiles": int(buf[TOTAL_TILES]),
        "batch": int(buf[BATCH]),
        "exit_count": int(buf[EXIT_COUNT]),
    }
    for k, name in enumerate(FIELDS):
        out[name] = np.array([buf[field_offset(layout, capacity, k, vb)] for vb in range(capacity)], dtype=np.int64)
    return out


def tile_to_work(buf, layout: str, capacity: int, num_heads: int, causal: bool, t: int):
    """Decode tile ``t`` to (request, head, m_block) exactly as the attention kernel does."""
    d = decode(buf, layout, capacity)
    if not 0 <= t < d["total_tiles"]:
        raise IndexError(t)
    # Last entry whose tile_start <= t (entries without tiles share the next one's start).
    vb = int(np.searchsorted(d["tile_start"], t, side="right")) - 1
    m = int(d["m_blocks"][vb])
    r = t - int(d["tile_start"][vb])
    head, mb = divmod(r, m)
    if causal:
        mb = m - 1 - mb
    return int(d["batch_idx"][vb]), head, mb


def enumerate_tiles(buf, layout: str, capacity: int, num_heads: int, causal: bool) -> list:
    """All tiles as (request, head, m_block), in tile-index order."""
    total = int(np.asarray(buf)[TOTAL_TILES])
    return [tile_to_work(buf, layout, capacity, num_heads, causal, t) for t in range(total)]
