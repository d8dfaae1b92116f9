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
2     m_blocks         query blocks of the request: ceil(seqlen_q * pack / block_m) (pack: the
                       query heads a KV head with pack-GQA, else 1)
3     splits_nheads    num_splits | (nheads_in_l2 << 16)  (1 | 1 << 16 until split-KV / swizzle)
====  ===============  ======================================================================

Layouts (both always built; ``metadata_layout="soa"|"aos"`` picks one):

* SoA: field k of entry vb at ``4 + k * round_up(capacity, 4) + vb``;
* AoS: field k of entry vb at ``4 + 4 * vb + k`` (one 16-byte int4 per request).

Entries ``[batch, round_up(capacity, 4))`` are written by the scheduler kernel with neutral values
(tile_start = total_tiles, batch_idx = vb, m_blocks = 0, splits_nheads = 1 | 1 << 16): they own no
tiles, and the tile search over ``[0, round_up(capacity, 4))`` never lands on them.

A request ``vb`` owns ``num_heads * m_blocks * num_splits`` consecutive tiles starting at
``tile_start`` (num_heads: the KV heads with pack-GQA).  ``decode_local_tile`` gives the order of a
request's local tiles: m-block fastest, then split, then head; for causal and local masks the m-blocks
reversed (``m_blocks - 1 - m_block``) so the most expensive query blocks of a request start first
(longest-processing-time first, the idea of FlashAttention-3's varlen scheduler), and without
splits the heads walked in L2-sized sections (``nheads_in_l2``, the head swizzle).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

#: Largest capacity (requests) one metadata buffer may describe: the scheduler sorts the whole
#: batch in one CTA of up to 1024 threads (up to 8 requests a thread, 8 or 16 bytes of shared
#: memory a request).
MAX_CAPACITY = 8192
#: Sort keys (KV blocks of a request's longest tile) saturate here: 19 key bits above 13 index bits.
SORT_KEY_CAP = (1 << 19) - 3
HEADER_INTS = 4
SEMAPHORE, TOTAL_TILES, BATCH, EXIT_COUNT = 0, 1, 2, 3
FIELDS = ("tile_start", "batch_idx", "m_blocks", "splits_nheads")
NVEC = len(FIELDS)
NEUTRAL_SPLITS_NHEADS = 1 | (1 << 16)
#: Most query heads a call may have: ``splits_nheads`` holds a head-section size (up to the head
#: count) in its bits 16-30 of an int32.
MAX_HEADS = (1 << 15) - 1


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
        "md_sort_key_cap": SORT_KEY_CAP,
        "md_sort_min_spread": SORT_MIN_SPREAD,
    }


@dataclass(frozen=True)
class SchedulerConfig:
    """Run-time inputs of the scheduler kernel besides the lengths (all ints; see module doc).

    num_heads: scheduler heads H' (KV heads with pack-GQA, else query heads);
    block_m / block_n: the attention kernel's tile rows / keys;
    pack_factor: query rows per token in a tile (num_heads_q // num_heads_kv with pack-GQA, else 1);
    max_splits: largest split count a request may get (1 = no split-KV);
    forced_splits: every request gets min(max_splits, n_blocks) splits instead of the dynamic rule;
    num_ctas: CTAs of the persistent attention launch (the dynamic split's fair share divides by it);
    max_kvblocks_l2: K/V blocks (of one head) that fit the head-swizzle L2 budget, 0 = no swizzle;
    swizzle_mult: heads that share one K/V head (keeps a GQA group in one section when not packing);
    sort: order requests longest-first (per-split KV blocks, ties by request index);
    class_min_q / class_max_q: only requests with class_min_q <= seqlen_q <= class_max_q query
    tokens get tiles (the others are scheduled as if they had no query rows): a fused launch runs
    one scheduler per request class (long-query and short-query), each with its own tile shape;
    window_left: the left window (keys before the diagonal) of a local mask, -1 = none.  With a
    window, a request's key blocks are those its last query block reads (``request_blocks``), so
    the splits, the split share and the sort key count the work the window leaves (exact for a
    decode; with a right side wider than the left, or unbounded, a prefill's first query blocks
    read more: an under-count, a speed matter only).
    wave_ctas: CTAs of the attention launch that run at once (its persistent grid), 0 = off; with
    it the dynamic rule's split cap is lowered where the requests with the most splits would spill
    a partial wave of tiles (``wave_split_cap``).
    min_share: a smallest dynamic-split quantum P in key blocks (1 = the fair share alone), taken
    where the work makes a quarter of ``wave_ctas`` tiles of it (``split_share``; with
    ``wave_ctas`` 0 it is always taken).  A larger quantum may also leave the wave cap off, so a
    request can get more splits than with the fair share (never more than ``max_splits``).  A
    standalone decode-class kernel takes ``heuristics.DECODE_MIN_SPLIT_KEYS`` keys, so that a
    batch with little work (one KV head, short contexts) is not cut into tiles of one or two key
    blocks.
    """

    num_heads: int
    block_m: int
    block_n: int
    pack_factor: int = 1
    max_splits: int = 1
    forced_splits: bool = False
    num_ctas: int = 1
    max_kvblocks_l2: int = 0
    swizzle_mult: int = 1
    sort: bool = True
    class_min_q: int = 0
    class_max_q: int = 2 ** 31 - 1
    window_left: int = -1
    wave_ctas: int = 0
    min_share: int = 1


#: ``SchedulerConfig.min_share`` applies where the work makes at least 1 / MIN_SHARE_WAVE_PARTS of
#: ``wave_ctas`` tiles of that share (H200: 512 tiles of 16 blocks for a 1584-CTA grid beat 3072 of
#: 2-3 blocks by 9 %, 256 of 31 blocks lost 8 %; docs/dev/perf-log.md, "Thirty-sixth session").
MIN_SHARE_WAVE_PARTS = 4


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def request_blocks(lq: int, lk: int, cfg: SchedulerConfig) -> tuple[int, int]:
    """(m_blocks, n_blocks) of a request with ``lq`` query and ``lk`` key tokens (negative: 0).

    m_blocks = ceil(lq * pack_factor / block_m).  n_blocks = the key blocks of the request's last
    query block, the tile the attention kernel walks first (m-blocks last-first): ceil(lk / block_n)
    without a window (causal or not, the last block sees every key), and with a left window
    ``w = cfg.window_left`` the blocks from ``lo // block_n`` on, where ``lo = (m_blocks - 1) *
    block_m // pack_factor + lk - lq - w`` is the first key its first row sees (bottom-right
    aligned positions; ``key_block_range`` in templates/common/mask.cuh).  A window-capped n_blocks
    is what makes a long decode context under a sliding window as cheap as it is (FlashAttention-3
    caps its split heuristic's key count by the window the same way).
    """
    lq, lk = max(lq, 0), max(lk, 0)
    m = _ceil_div(lq * cfg.pack_factor, cfg.block_m) if lq > 0 else 0
    n = _ceil_div(lk, cfg.block_n)
    if cfg.window_left >= 0 and m > 0:
        lo = (m - 1) * cfg.block_m // cfg.pack_factor + lk - lq - cfg.window_left
        if lo > 0:
            n -= min(lo // cfg.block_n, n)
    return m, n


def request_plan(lq: int, lk: int, cfg: SchedulerConfig, share: int) -> tuple[int, int, int, int]:
    """(m_blocks, n_blocks, splits, nheads_in_l2) of one request (blocks: ``request_blocks``);
    ``share`` is the dynamic-split quantum P."""
    m, n = request_blocks(lq, lk, cfg)
    if cfg.max_splits <= 1:
        s = 1
    elif cfg.forced_splits:
        s = min(cfg.max_splits, max(n, 1))
    else:
        s = min(cfg.max_splits, max(1, _ceil_div(n, share)))
    nh = 1
    if cfg.max_kvblocks_l2 > 0:
        per = max(_ceil_div(n, s), 1)
        for g in (16, 8, 4, 2):
            if g * per <= cfg.max_kvblocks_l2:
                nh = g
                break
        nh = min(nh * cfg.swizzle_mult, cfg.num_heads)
    return m, n, s, nh


def split_share(ms, ns, cfg: SchedulerConfig) -> int:
    """Dynamic-split quantum P (KV blocks per split): a 10 % margin over one CTA's fair share of
    the total (m_blocks x n_blocks) work, after FlashAttention-3's prepare kernel.  Never 0.

    ``cfg.min_share`` replaces a smaller quantum where the total work is at least a quarter of
    ``cfg.wave_ctas`` quanta of it (H' x sum of m x n >= wave_ctas x min_share / 4, from the sum
    the quantum already has, not an exact tile count, which would take another block reduction):
    a small batch keeps the fair share's many short tiles rather than
    leave most of the grid idle (8 decodes of 1 K keys on one KV head would get 32 tiles of 16
    blocks for 1584 CTAs)."""
    total = sum(int(m) * int(n) for m, n in zip(ms, ns))
    share = min(max(1, _ceil_div(11 * total * cfg.num_heads, 10 * max(cfg.num_ctas, 1))), 2 ** 31 - 1)
    if cfg.min_share > share and MIN_SHARE_WAVE_PARTS * total * cfg.num_heads >= cfg.wave_ctas * cfg.min_share:
        share = cfg.min_share
    return share


def wave_split_cap(ms, ns, cfg: SchedulerConfig, share: int) -> int:
    """The dynamic rule's split cap: ``cfg.max_splits``, or lower where the requests with the most
    splits would spill a partial wave of tiles.

    With ``wave_ctas`` W > 0 (and the dynamic rule): each request with query rows gets
    s = min(max_splits, ceil(n / P)) splits; the *top* requests are those with the largest s (S).
    When the tiles T = H' (sum of m x s) exceed W, are not a whole number of waves, and the top
    requests hold at least half of them, the cap becomes c = floor((floor(T / W) W / H' - tiles
    of the others) / m-blocks of the top requests) if S / 2 <= c < S: the top requests' tiles then
    end at the last full wave instead of spilling into a new one, each at most twice as long.
    (8 decode requests of 128 K keys at 8 KV heads on 1584 one-warp CTAs: 55 splits, 3520 tiles,
    2.22 waves -> 49, 3136 tiles, 1.98 waves: 8 % faster on the H200; 64 (2.59 waves) and 90
    (3.64) ran as slow as 55, 74 (2.99) as fast as 49: docs/dev/perf-log.md "decode_long_b8_128k:
    the split count".  The guards keep a few long requests of a ragged batch from being cut to
    fewer, longer tiles that would outlast the rest.)
    """
    cap = cfg.max_splits
    if cfg.wave_ctas <= 0 or cap <= 1 or cfg.forced_splits:
        return cap
    splits = [min(cap, max(1, _ceil_div(n, share))) if m > 0 else 0 for m, n in zip(ms, ns)]
    top = max(splits, default=0)
    if top <= 1:
        return cap
    top_m = sum(m for m, s in zip(ms, splits) if s == top)
    others = sum(m * s for m, s in zip(ms, splits) if 0 < s < top)
    w = cfg.wave_ctas
    tiles = cfg.num_heads * (others + top * top_m)
    if tiles > w and 2 * cfg.num_heads * top * top_m >= tiles:
        c = ((tiles // w) * w // cfg.num_heads - others) // top_m
        if top <= 2 * c and c < top:
            return c
    return cap


def sort_key(m: int, n: int, s: int) -> int:
    """Longest-first key: KV blocks of the request's most expensive tile, saturating at
    SORT_KEY_CAP (-1: no query rows).  With m-blocks walked last-first, a request's first tile is
    its most expensive one for both masks, so one expression serves causal and non-causal."""
    return min(_ceil_div(n, s), SORT_KEY_CAP) if m > 0 else -1


#: The sort leaves a batch in request order when the work classes (``sort_key + 2``) of its
#: requests with query rows span at most 1/SORT_MIN_SPREAD of the largest class: the work per
#: tile is then already even, ordering gains nothing and would cost the radix pass
#: (docs/dev/perf-log.md, scheduler v11).  Requests without rows (class 1, no tiles) do not count,
#: so padding a batch with zero-length requests never changes the decision (scheduler v13).
SORT_MIN_SPREAD = 8


def sort_needed(cmin: int, cmax: int) -> bool:
    """Whether a batch whose requests with rows have work classes in [cmin, cmax] is sorted (see
    SORT_MIN_SPREAD)."""
    spread = cmax - cmin
    return spread > 0 and spread * SORT_MIN_SPREAD > cmax


def reference_schedule(cu_seqlens_q, cu_seqlens_k, batch: int, capacity: int, cfg: SchedulerConfig, layout: str,
                       seqused_k=None) -> np.ndarray:
    """What the scheduler kernel writes, bit for bit, as an int32 numpy array.

    Key lengths come from ``seqused_k`` when given, else from ``cu_seqlens_k``.  The header's
    semaphore and exit counter are 0 (the state after the scheduler kernel).
    """
    if batch > capacity:
        raise ValueError(f"batch {batch} exceeds capacity {capacity}")
    cu_q = np.asarray(cu_seqlens_q, dtype=np.int64)
    if seqused_k is not None:
        lks = np.asarray(seqused_k, dtype=np.int64)[:batch]
    else:
        cu_k = np.asarray(cu_seqlens_k, dtype=np.int64)
        lks = cu_k[1:batch + 1] - cu_k[:batch]
    lqs = cu_q[1:batch + 1] - cu_q[:batch]
    lqs = np.where((lqs >= cfg.class_min_q) & (lqs <= cfg.class_max_q), lqs, 0)  # the other class: no rows
    mn = [request_plan(int(lq), int(lk), cfg, 1)[:2] for lq, lk in zip(lqs, lks)]
    share = split_share([m for m, _ in mn], [n for _, n in mn], cfg)
    cap = wave_split_cap([m for m, _ in mn], [n for _, n in mn], cfg, share)
    pcfg = cfg if cap == cfg.max_splits else dataclasses.replace(cfg, max_splits=cap)
    plans = [request_plan(int(lq), int(lk), pcfg, share) for lq, lk in zip(lqs, lks)]
    order = list(range(batch))
    if cfg.sort and batch > 1:
        keys = [sort_key(plans[i][0], plans[i][1], plans[i][2]) for i in range(batch)]
        with_rows = [kk for kk in keys if kk >= 0]
        if with_rows and sort_needed(min(with_rows) + 2, max(with_rows) + 2):
            order.sort(key=lambda i: (-keys[i], i))
    buf = np.zeros(buffer_ints(capacity), dtype=np.int32)
    cap = round_up(capacity, 4)
    start = 0
    for vb in range(cap):
        if vb < batch:
            i = order[vb]
            m, _, s, nh = plans[i]
            entry = (start, i, m, s | (nh << 16))
            start += cfg.num_heads * m * s
        else:
            entry = (None, vb, 0, NEUTRAL_SPLITS_NHEADS)
        for k, val in enumerate(entry):
            buf[field_offset(layout, capacity, k, vb)] = val if val is not None else 0
    # the tail's tile_start is the total, known only now
    for vb in range(batch, cap):
        buf[field_offset(layout, capacity, 0, vb)] = start
    buf[TOTAL_TILES] = start
    buf[BATCH] = batch
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


def decode_local_tile(r: int, m: int, s: int, nh: int, num_heads: int, lpt: bool) -> tuple[int, int, int]:
    """Local tile r of a request -> (head, m_block, split), exactly as the attention kernel does.

    ``lpt``: the kernel's longest-processing-time order, which it takes for causal and for local
    (sliding-window) masks (``LPT`` in templates/attention/variant_sm80.cuh and variant_sm90.cuh).
    Without it: m-block fastest, then split, then head.  With it and no splits: heads in sections
    of ``nh`` (head swizzle), all heads of a section for the last m-block first, then the one
    before.  With it and splits: the plain order with m-blocks reversed.  (The orders of
    FlashAttention-3's varlen tile scheduler.)
    """
    if lpt and s == 1:
        sec, rr = divmod(r, nh * m)
        hc = min(nh, num_heads - sec * nh)
        x, h_in = divmod(rr, hc)
        return sec * nh + h_in, m - 1 - x, 0
    q, block = divmod(r, m)
    head, split = divmod(q, s)
    return head, (m - 1 - block) if lpt else block, split


def tile_to_work(buf, layout: str, capacity: int, num_heads: int, lpt: bool, t: int):
    """Decode tile ``t`` to (request, head, m_block, split) exactly as the attention kernel does
    (``lpt``: a causal or local mask; ``decode_local_tile``)."""
    d = decode(buf, layout, capacity)
    if not 0 <= t < d["total_tiles"]:
        raise IndexError(t)
    # Last entry whose tile_start <= t (entries without tiles share the next one's start).
    vb = int(np.searchsorted(d["tile_start"], t, side="right")) - 1
    sn = int(d["splits_nheads"][vb])
    head, mb, split = decode_local_tile(t - int(d["tile_start"][vb]), int(d["m_blocks"][vb]), sn & 0xFFFF, sn >> 16,
                                        num_heads, lpt)
    return int(d["batch_idx"][vb]), head, mb, split


def enumerate_tiles(buf, layout: str, capacity: int, num_heads: int, lpt: bool) -> list:
    """All tiles as (request, head, m_block, split), in tile-index order (``lpt``: a causal or local
    mask, ``decode_local_tile``)."""
    total = int(np.asarray(buf)[TOTAL_TILES])
    return [tile_to_work(buf, layout, capacity, num_heads, lpt, t) for t in range(total)]
