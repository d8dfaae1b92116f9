"""Variant choice: tiles, split bounds and the kernel specs of a call.

``choose`` is used by the dispatcher at run time (``decide``) *and* by ``kernelgen warmup``
(``catalog``), so a pre-warmed cache is always hit (the failure mode of FlashInfer issue #4737,
where the pre-compile step and the launch path each had their own rule).  ``specs_for`` is its short form for plain prefill.

Tile classes, by query rows per request tile (``max_seqlen_q`` times the pack-GQA factor):
``decode`` (<= 16 rows: one warp of 16 rows, many CTAs per SM, memory-bound), ``mid`` (<= 64) and
``prefill`` (FlashAttention-2 style 128-row tiles; the Hopper path's ``sm90_tile``: 192 rows at head
dim 64).  Every tile compiles with no register spills (tests/test_compile_matrix.py) and fits the
arch's shared memory.

Mainloop: on sm_90a, prefill-class calls the Hopper path supports (``sm90_unsupported``) take the
wgmma/TMA kernel (``mainloop="sm90a"``, the head dims' tile ``sm90_tile``, options
``SM90_OPTS`` or the ``sm90_opts`` override the decider passes from ``KERNELGEN_SM90_OPTS``; a paged
cache whose pages do not hold whole key blocks adds "g": K/V rows gathered through the page table,
``sm90_options``), with split-KV when the split bound for that tile says so; everything else, and
every other arch, the sm_80 (mma.sync) kernels.  ``choose``'s ``mainloop`` argument forces one
(``varlen_attention(arch=...)``, ``KERNELGEN_ARCH``).

The choosers here are the decider's (``decide``) building blocks: they read no device and no
environment (the device's SMs and the overrides come in as arguments).

Split-KV: the host picks an upper bound with FlashAttention-3's occupancy rule (treating a varlen
batch as one request, as FA3 does); the GPU scheduler then gives each request its own count from
the batch's real work (metadata.SchedulerConfig).
"""
from __future__ import annotations

import dataclasses
import math

from ..kernels.recipe import FusedVariants, PairVariants, Variants
from ..kernels.variant_code import VariantCode
from ..kernels.spec import (AttentionSpec, CombineSpec, FusedAttentionSpec, MAINLOOPS, MASKS, SM90_HEAD_DIM_PAIRS,
                            SM90_PAGED_HEAD_DIMS, SchedulerSpec, TileConfig)

#: Largest dynamic shared memory one CTA may opt into, bytes (CUDA programming guide, per arch).
SMEM_LIMIT = {"sm_80": 166912, "sm_86": 101376, "sm_89": 101376, "sm_90a": 232448,
              "sm_100": 232448, "sm_120": 101376}
#: Shared memory per SM (bytes), for the occupancy estimate.
SMEM_PER_SM = {"sm_80": 167936, "sm_86": 102400, "sm_89": 102400, "sm_90a": 233472,
               "sm_100": 233472, "sm_120": 102400}
TILE_CLASSES = ("prefill", "mid", "decode")
#: Upper bound of the automatic split count from ``num_splits_heuristic`` (the FA3 rule).
MAX_AUTO_SPLITS = 64
#: Largest forced ``num_splits``.
MAX_SPLITS = 128
#: Largest automatic split count of the one-warp decode tiles (``decode_split_bound``); the
#: combine kernel reads a row's count from 8 bits of ``row_splits`` (kernels/workspace.py).
MAX_DECODE_SPLITS = 255
#: The split partials (fp32 outputs and LSEs) that ``decode_split_bound`` may size a workspace
#: for, bytes: the bound of ``num_splits_heuristic`` is raised only as far as this allows.
DECODE_PARTIALS_BYTES = 64 << 20
#: A sliding window that lets a query tile see fewer than 2 x MIN_SPLIT_KEYS keys (``choose``'s
#: ``window_span`` + its query tokens) gets no automatic split: FlashAttention-3's rule keeps a
#: request whole up to 4 key blocks of its decode tiles (128 keys or more each), where the one-warp
#: decode tile's 16-key blocks let the GPU scheduler's quantum cut a 128-key window into about 5 splits.
#: H200 (docs/dev/perf-log.md, "Twenty-eighth session"): gpt-oss's window-128 decode of 128
#: requests ran in 31 us with one split against 60 us with the automatic ones.  Wider windows keep
#: the bound (standalone decode kernels also have a minimum split size: ``DECODE_MIN_SPLIT_KEYS``).
MIN_SPLIT_KEYS = 128
#: Smallest dynamic-split quantum of a standalone decode-class kernel, in keys (the scheduler's
#: ``min_share`` is this over the tile's key block: 16 blocks of the one-warp decode tile), taken
#: where the batch's work makes at least a quarter of a wave of such tiles
#: (``metadata.split_share``).  The fair share alone cut a batch with little work into tiles of a
#: few blocks, each paying the tile's fixed cost (metadata, Q, the pipeline's refill, a partial to
#: write and merge): the llama3-70b-tp8 preset (one KV head) on the Azure batch got 2-block tiles.
#: H200 (docs/dev/perf-log.md, "Thirty-sixth session", ``decode_ab.py`` against the fair share, two
#: passes): tp8 Azure b128 / trace b32 0.89-0.91x the time (bf16 and e4m3), llama3-8b 16 x 2k /
#: 4 x 8k / 64 x 512 0.91-0.95x (bf16) and 0.83-0.88x (e4m3), llama3-8b Azure 0.99x; 512 keys lost
#: 8 % on tp8 Azure (256 tiles for 1584 CTAs).  Small batches the floor leaves alone ran 1-6 %
#: slower with the same schedule (0.3-1.6 us of 22-30 us; the scheduler's changed code, not
#: measured further).
DECODE_MIN_SPLIT_KEYS = 256

_PREFILL_BIG_SMEM = {
    64: TileConfig(128, 64, 4, 2, 2),
    96: TileConfig(128, 32, 4, 2, 2),
    128: TileConfig(128, 32, 4, 3, 2),  # H200 sweep (docs/dev/perf-log.md): 3 stages +3% over 2
    192: TileConfig(64, 64, 4, 2, 1),
    256: TileConfig(64, 32, 4, 2, 1),
}
_PREFILL_SM90 = {**_PREFILL_BIG_SMEM, 256: TileConfig(128, 64, 8, 2, 1)}
_PREFILL_SMALL_SMEM = {
    64: TileConfig(128, 64, 4, 2, 2),
    96: TileConfig(128, 32, 4, 2, 2),
    128: TileConfig(128, 32, 4, 2, 2),
    192: TileConfig(64, 32, 4, 2, 1),
    256: TileConfig(64, 16, 4, 2, 1),
}
_MID = {
    64: TileConfig(64, 64, 4, 2, 2),
    96: TileConfig(64, 64, 4, 2, 2),
    128: TileConfig(64, 64, 4, 2, 2),
    192: TileConfig(64, 32, 4, 2, 1),
    256: TileConfig(64, 32, 4, 2, 1),
}
_MID_SMALL_SMEM = {**_MID, 256: TileConfig(64, 16, 4, 2, 1)}
#: One warp, 16 query rows: at decode the tile is almost all K/V traffic, so many small CTAs per
#: SM keep enough bytes in flight (16 rows keep the MMA work per byte low enough for mma.sync).
#: 16-key blocks: one page lookup per block for the usual page sizes (16, 32, ...), and 9-42 KB of
#: shared memory (up to head dim 128 the tile keeps Q in registers: K/V stages only), so 5-12 CTAs
#: per SM (H200 decode sweeps in docs/dev/perf-log.md).
_DECODE = {
    64: TileConfig(16, 16, 1, 2, 8),
    96: TileConfig(16, 16, 1, 2, 8),
    128: TileConfig(16, 16, 1, 2, 8),
    192: TileConfig(16, 16, 1, 2, 8),
    256: TileConfig(16, 16, 1, 2, 8),
}
#: K/V stages of the one-warp decode tiles on an FP8 cache (``AttentionSpec.kv_dtype``).  An FP8
#: stage holds half the bytes of a 16-bit one, so deeper rings looked like the way to keep as many
#: bytes in flight; measured on the H200 (decode_trace_b128_paged16, e4m3 against bf16,
#: ``tools/bench.py --fp8-stage-sweep``) they lose: 2 / 3 / 4 / 6 / 8 stages ran 1.21 / 1.14 / 1.09 /
#: 0.91 / 0.77x the bf16 call, because the tile is bound by its warps' latency (164 registers: at
#: most 12 one-warp CTAs an SM) and every stage past two costs CTAs (shared memory).  So two, as
#: the 16-bit table; the hook stays for the sweep (docs/dev/perf-log.md, "FP8 K/V caches").
FP8_DECODE_STAGES = 2
#: CTAs per SM promised to the register allocator (``TileConfig.min_blocks``) by the one-warp decode
#: tiles on an FP8 cache: with the conversion in registers (``AttentionSpec.fp8_in_registers``) the
#: 16-row tile needs 8 KB of shared memory at head dim 128, so registers alone bound its CTAs per SM;
#: 12 caps them at 168 (164 used at d 128, no spills; 14 spills) and ran 1.56x the bf16 decode
#: against 1.45x at 8 (H200, ``tools/bench.py --fp8-stage-sweep``: 2 or 4 stages equal).
FP8_DECODE_MIN_BLOCKS = 12
#: Query rows of the standalone one-warp decode tile on an FP8 cache at head dims up to 128: 16, or 8
#: (the keys-as-rows tile converting in registers, 124 registers at d 128 against the 16-row tile's
#: 166) -- an experiment hook (``benchmarks/experiments/decode_ab.py``'s ``@rN``), 16 until measured.
FP8_DECODE_ROWS = 16


def fp8_tile(t: TileConfig, head_dim: int, head_dim_v: int) -> TileConfig:
    """The sm_80 mainloop's tile ``t`` on an FP8 K/V cache: the one-warp decode tiles (16-row and
    keys-as-rows) take at least ``FP8_DECODE_STAGES`` stages, and at head dims up to 128 at least
    ``FP8_DECODE_MIN_BLOCKS`` CTAs per SM (larger head dims spill at 168 registers: d 256's tile,
    with Q's fragments in shared memory, takes 237 at its 8, and at 9 spilled 88 bytes) and
    ``FP8_DECODE_ROWS`` rows; the others as is."""
    if t.num_warps == 1 and t.block_m <= 16:
        small = max(head_dim, head_dim_v) <= 128
        mb = max(t.min_blocks, FP8_DECODE_MIN_BLOCKS) if small else t.min_blocks
        bm = FP8_DECODE_ROWS if small and t.block_m == 16 and t.block_n == 16 else t.block_m
        return dataclasses.replace(t, block_m=bm, num_stages=max(t.num_stages, FP8_DECODE_STAGES), min_blocks=mb)
    return t


#: The dynamic split sizes tiles to about one CTA's share of the batch's work divided by this
#: factor (per tile class): small decode CTAs share an SM, so finer tiles balance SMs better.
SPLIT_GRANULARITY = {"prefill": 1, "mid": 1, "decode": 4}

#: The Hopper path's tile (mainloop "sm90a"): 128 query rows in two consumer warpgroups of 64,
#: blocks of 128 keys, a two-stage K/V ring (one CTA per SM: 160 KB of shared memory at head dim 128).
SM90_TILE = TileConfig(128, 128, 8, 2, 1)
#: The Hopper tile by (head_dim, head_dim_v); the others (96 stored as 128, 128) take
#: ``SM90_TILE``.  Head dim 64 takes FlashAttention-3's 192-row tile: three consumer warpgroups
#: (12 warps, 160 registers each: 32 O accumulators, 64 scores, 32 P registers), so that a third
#: warpgroup's softmax hides behind the other two's GEMMs where the 128-row tile's softmax issue
#: rate was the limit (docs/dev/perf-log.md, "Head dim 64: three consumer warpgroups").  The larger
#: head dims keep one CTA per SM with 128 query rows (two consumer warpgroups of 64) and two K/V
#: stages; block_n is the largest that fits both limits (docs/dev/perf-log.md, "Hopper path: head dims"):
#:  - shared memory (232,448 B per CTA, ``spec.AttentionSpec.smem_bytes``): 2 B x (Q 128 x d +
#:    2 stages x block_n x (d + dv)) + 1280 B of barriers and alignment slack;
#:  - registers (``setmaxnreg`` 240 a consumer thread, no spills): a consumer thread holds 64 x dv / 128
#:    fp32 O accumulators (dv / 2), 64 x block_n / 128 fp32 scores (block_n / 2) and the bf16 P
#:    fragments (block_n / 4), next to the softmax state and addresses (about 30).
#: d 256: 2 x (128 x 256 + 2 x 80 x 512) = 229,376 + 1280 = 230,656 B; 128 + 40 + 20 registers.
#: d 192: 2 x (128 x 192 + 2 x 112 x 384) = 221,184 + 1280 = 222,464 B; 96 + 56 + 28.
#: d 192 x 128: 2 x (128 x 192 + 2 x 128 x 320) = 212,992 + 1280 = 214,272 B; 64 + 64 + 32.
SM90_TILES = {
    (64, 64): TileConfig(192, 128, 12, 2, 1),
    (256, 256): TileConfig(128, 80, 8, 2, 1),
    (192, 192): TileConfig(128, 112, 8, 2, 1),
    (192, 128): TileConfig(128, 128, 8, 2, 1),
}


#: The Hopper tile of a paged K/V cache at head dims 192 and 256: 64-key blocks.  The paged
#: producers need more registers (``AttentionSpec.SM90_REGS_PAGED``, ``SM90_REGS_GATHER``), which
#: leaves the consumers 232 / 224 instead of 240, and their 80- and 112-key blocks then spill (d 256
#: everywhere; d 192 with a window, soft-cap and split-KV); 64 keys take 16 fp32 scores and 8 P
#: registers fewer than 80 (and 24 / 12 fewer than 112) and divide every power-of-two page size,
#: so pages of 8 to 64 tokens take TMA boxes and pages of 64 or more whole-block boxes.
SM90_PAGED_TILES = {
    (256, 256): TileConfig(128, 64, 8, 2, 1),
    (192, 192): TileConfig(128, 64, 8, 2, 1),
}


#: The Hopper tile of gathered K/V rows (option "g") at head dim 256: 48-key blocks.  The gather
#: producers take 56 registers, leaving the consumers 224, where 64-key blocks spill 16 bytes.
SM90_GATHER_TILES = {
    (256, 256): TileConfig(128, 48, 8, 2, 1),
}


#: The Hopper tile on an FP8 K/V cache (``AttentionSpec.kv_dtype``), where it differs from
#: ``SM90_TILE``: the FP8 landing stages (``AttentionSpec.land_stages``) take shared memory beside
#: the 16-bit ring, and the converting producer warps leave the consumers 232 registers
#: (``AttentionSpec.SM90_REGS_FP8``), so the large head dims take 64-key blocks (d 256: one landing
#: stage, 230,656 B; d 192 and 192 x 128: two).  d 64, 96, 128: 128 keys, two landing stages
#: (d 128: 163,840 B of ring and Q + 65,536 B of landing + 1280 = 230,656 B).
SM90_FP8_TILES = {
    (256, 256): TileConfig(128, 64, 8, 2, 1),
    (192, 192): TileConfig(128, 64, 8, 2, 1),
    (192, 128): TileConfig(128, 64, 8, 2, 1),
}


#: Calls with an FP8 q and K/V on the Hopper kernel take its FP8 tensor-core variant
#: (``AttentionSpec.fp8_mma``, docs/dev/fp8_hopper_design.md variant B) where the tile allows it
#: (head_dim == head_dim_v, a multiple of 64; 128-key blocks); False: q converted to 16 bits and
#: the FP8 K/V variant (A/B measurements).
SM90_FP8_MMA = True

#: Tiles of the FP8 tensor-core variant by (head_dim, head_dim_v) (block_n a multiple of 32, at least 128);
#: absent pairs take the 16-bit call's tile.  d 128: 224-key blocks, as FlashAttention-3's FP8 tile
#: (V^T keeps whole 128-key column blocks, the second one 96 keys used; 40 / 232 registers; no spill
#: with a mask, one word reloaded once a tile without): causal 1 x 16k x 32/8 heads 0.961-0.978x the
#: time of 192-key blocks (2661 against 2770 us, three passes), non-causal 4 x 4k 0.984-0.990x (equal
#: to 128 keys); with the P V wait pinned (mainloop_sm90.cuh's KG_PIN_FP8) 0.967-0.987x more, and
#: 128-key blocks pinned lost: non-causal calls take 224 keys too (bench entries 1.02x / 1.01x FA3's
#: FP8 where 192 / 128 keys gave 0.93x / 0.97x; H200, session 32, docs/dev/benchmarks/s32).  Paged
#: calls whose pages TMA cannot box at 224 keys: ``SM90_FP8_MMA_PAGED_BLOCKS``.  192 keys before that: causal 16k 2747 us
#: against 3150 for 128 keys (benchmarks/experiments/tile_ab.py; non-causal 4 x 4k: 1462 against 1501).  Measured on the H200
#: (tools/fp8_mma_probe.py --tiles, benchmarks/experiments/tile_ab.py; docs/dev/perf-log.md "FP8
#: tensor-core GEMMs", "Head dim 64: three consumer warpgroups"): d 64 on 192 rows in three consumer
#: warpgroups (56 / 152 registers) 347 us causal and 531 non-causal (8 x 2k, 32 heads) against 379 /
#: 604 for 128 x 256 (which beat 128 x 128 by 11 %), FA3's FP8 328 / 498 in the same run; d 256 with
#: 128-key blocks (the variant's smallest; 230,656 B, 24 / 240 registers) 460 us, against 1276 for
#: the FP8 K/V variant with q converted and 491 for the bf16 call.  Deeper rings at d 128 measured
#: within noise (2812 / 2881 / 2905 us for 2 / 3 / 4 stages on causal 16k).  A paged call whose
#: pages TMA cannot box at the entry's block_n, or whose soft-cap, window or split-KV the entry does
#: not take (``SM90_FP8_MMA_TILE_LIMITS``), keeps its usual tile.
SM90_FP8_MMA_TILES: dict = {(64, 64): TileConfig(192, 128, 12, 2, 1), (128, 128): TileConfig(128, 224, 8, 2, 1),
                            (256, 256): TileConfig(128, 128, 8, 2, 1)}

#: What each ``SM90_FP8_MMA_TILES`` entry does not take ("softcap", "local": a sliding window,
#: "split": split-KV, "nomask": no causal mask or window): such calls keep their usual tile.  NVRTC
#: 13.0 for sm_90a: d 128's 192-key blocks spilled 8-40 bytes with a soft-cap and 4 without a mask
#: until the V^T transposer's rewrite (5bff8e6), which left them without spills; with the soft-cap on
#: tanh.approx (1ddbd07) they ran as fast as the 128-key blocks (causal 16k with a soft-cap 0.995x,
#: non-causal 4 x 4k 1.004x: within the spread), so d 128 keeps 128 keys there.  d 64's 192-row tile
#: spilled 16-24 bytes with the accurate tanh and none with tanh.approx: 6031 against 6409 us for
#: 128 x 128 on gpt-oss's heads (64 / 8, causal 16k, soft-cap 50).  d 256's 128-key blocks spill in
#: the consumers with a soft-cap (100-116 bytes stored in all, 21-25 spill instructions there), a
#: window (56, 2-3) or split-KV (84), the producer 44-56 bytes of its block-loop state (12-16 with
#: KG_VT_BATCH=1); still, on Gemma 2's heads (16 / 8, causal 16k, soft-cap 50) they ran 2481 us
#: against 7251 for the usual tile (the FP8 K/V variant with q converted; FA3's FP8 forward 2276),
#: and with a window of 4096 too 1170 against 3284 (perf log, "Twenty-ninth session"), so only
#: split-KV keeps the usual tile there.  tests/test_review_fp8q_cpu.py compiles every dispatched
#: variant and bounds those spills.
SM90_FP8_MMA_TILE_LIMITS: dict = {(64, 64): frozenset(), (128, 128): frozenset({"softcap"}),
                                  (256, 256): frozenset({"split"})}


def fp8_mma_tile(head_dim: int, head_dim_v: int, *, softcap: bool = False, local: bool = False,
                 split: bool = False, nomask: bool = False) -> TileConfig | None:
    """The FP8 tensor-core variant's tile for a call (``SM90_FP8_MMA_TILES``' entry), or None where
    there is none or the entry does not take the call's soft-cap, window, split-KV or lack of a
    mask (``SM90_FP8_MMA_TILE_LIMITS``): the call then keeps its usual tile."""
    t = SM90_FP8_MMA_TILES.get((head_dim, head_dim_v))
    limits = SM90_FP8_MMA_TILE_LIMITS.get((head_dim, head_dim_v), frozenset())
    if t is None or (softcap and "softcap" in limits) or (local and "local" in limits) or (split and "split" in limits) \
            or (nomask and "nomask" in limits):
        return None
    return t


#: Key blocks the FP8 tensor-core variant falls back to, in order, below its entry's block_n when TMA
#: cannot box a paged call's pages at that block_n (``sm90_paged_tma_fits``), by whether the call has a
#: mask: d 128's 224 keys take no page of 24, 48, 64 or 96 tokens, which 192 keys (0.87x the time of
#: 128 on causal 16k, session 18) do; without a mask 128 keys first (192 measured 1.01-1.02x their
#: time there, session 32), 192 where 128 do not fit.  What fits none of them takes the call's usual
#: tile (and the sm_80 path where TMA cannot box that either).
SM90_FP8_MMA_PAGED_BLOCKS = {"mask": (192,), "nomask": (128, 192)}


def fp8_mma_paged_fallbacks(t: TileConfig, paged: bool, *, nomask: bool = False) -> tuple:
    """``t`` with each of ``SM90_FP8_MMA_PAGED_BLOCKS``' key blocks below its own, in order, for a paged
    call (``nomask``: without a mask); none for packed K/V.  ``choose`` keeps the first whose pages
    TMA can box."""
    if not paged:
        return ()
    blocks = SM90_FP8_MMA_PAGED_BLOCKS["nomask" if nomask else "mask"]
    return tuple(dataclasses.replace(t, block_n=n) for n in blocks if n < t.block_n)


def two_warpgroups(t: TileConfig) -> TileConfig:
    """``t`` with 128 query rows in two consumer warpgroups (8 warps), its keys and stages kept."""
    return t if t.num_warps == 8 else dataclasses.replace(t, block_m=128, num_warps=8)


#: The per-logit extras that may run on the three-warpgroup tile (head dim 64) instead of the
#: two-warpgroup one: "alibi" (built-in ALiBi), "variant" (a user score_mod / mask_mod, unless its
#: three-warpgroup build spills: ``sm90_heavy``'s ``variant_spills``, found by ``selection.spills``).
#: NVRTC 13.0 compiles the d 64 ALiBi kernels on the 192-row tile without spills (causal, whose
#: accumulators start from the bias, non-causal and sliding-window, split-KV; bf16 and fp16:
#: tests/test_alibi_cpu.py), where ALiBi's FFMA a logit used to spill 28-64 bytes, and so the
#: bench's four score_mods (ALiBi on indices or a float cast, soft-cap with kg_tanh or tanhf) and
#: four of the six examples of ``apps.variant_examples`` causal and not; the causal T5 bias spills
#: 68 bytes and ``index_arith`` 56-336; the built-in soft-cap spilled 44 bytes (see "softcap" below).
#: H200, gpt-oss's heads (64 / 8, d 64), causal 1 x 16k: built-in ALiBi 1.11x the plain kernel's
#: time on the two-warpgroup tile (twenty-fourth session), 1.00-1.01x on three (twenty-fifth, two
#: runs; sinks 1.01x, the ALiBi snippet 1.035-1.04x the built-in; docs/dev/perf-log.md).
#: "transcendental": a user variant whose snippets call a MUFU function (``VariantCode.transcendental``:
#: the tanh.approx soft-cap ``50.f * tanhf(score / 50.f)``), and "softcap": the built-in soft-cap (its
#: d 64 kernels build on that tile without spills since NVRTC 13.0 and the fifty-second session's
#: templates: causal, unmasked and windowed, split or not, bf16 / fp16, with and without option "m").
#: Such kernels are bound by the MUFU unit (two MUFU instructions a logit; ncu, twenty-sixth session:
#: MUFU pipe 73 % busy).  With the tanh before the row max in one straight run (option "m",
#: ``with_mask_split``) the three-warpgroup tile wins (FlashAttention-4's sm_90 tile for these calls):
#: H100, gpt-oss's heads, causal 1 x 16k, built-in soft-cap 0.907-0.926x the two-warpgroup kernel's
#: time, the tanh.approx snippet 0.951-0.967x (twins within 0.1 %; fifty-second session).  Without
#: "m" three warpgroups did not pay for the snippet: the two-warpgroup kernel ran 0.964-0.989x their
#: time (H200, twenty-sixth session), three ran 1.006x two's (H100, fifty-second).
SM90_THREE_WG_EXTRAS: frozenset = frozenset({"alibi", "variant", "softcap", "transcendental"})


#: A user variant's spill twins (``selection.spills``; ``decide.CallSignature.variant_spills``): 1, the
#: call on the two-warpgroup tile without "m", packed where the call packs; 2, the same unpacked.  A
#: packed kernel's per-row heads and positions made a windowed T5 bias spill 36-48 bytes at head dim
#: 128 on two warpgroups, where gpt-oss-like calls' soft-cap and ``index_arith`` snippets spill only
#: on three (8 and 960 bytes packed at head dim 64, split; their packed two-warpgroup kernels fit).
VARIANT_TWIN_LEVELS = (1, 2)


def sm90_heavy(softcap: bool, alibi: bool, variant, variant_spills: int = 0) -> bool:
    """Whether a call's per-logit state keeps it off the three-warpgroup tile (``sm90_tile``'s
    ``heavy``): a soft-cap, ALiBi or a user variant unless ``SM90_THREE_WG_EXTRAS`` lets it on;
    a user variant also when ``variant_spills`` (its three-warpgroup kernel spilled when built) or
    when its snippets call a MUFU function (``variant.transcendental``) and "transcendental" is not
    among the extras."""
    mufu = variant is not None and variant.transcendental and "transcendental" not in SM90_THREE_WG_EXTRAS
    return bool((softcap and "softcap" not in SM90_THREE_WG_EXTRAS) or (alibi and "alibi" not in SM90_THREE_WG_EXTRAS)
                or (variant is not None and ("variant" not in SM90_THREE_WG_EXTRAS or variant_spills or mufu)))


def sm90_tile(head_dim: int, head_dim_v: int, paged: bool = False, kv_dtype: str = "",
              heavy: bool = False) -> TileConfig:
    """The Hopper path's tile for a (head_dim, head_dim_v) pair: for a paged cache
    ``SM90_PAGED_TILES``' entry if any, else ``SM90_TILES``' entry, else ``SM90_TILE`` (read at
    call time, so tuning runs can replace any); on an FP8 cache ``SM90_FP8_TILES``' entry, if any.
    A three-warpgroup tile (12 warps) serves only packed 16-bit K/V without extra per-logit state:
    its consumers keep 160 registers (152 beside the paged and FP8 producers), where a paged or FP8
    cache, a soft-cap, ALiBi or a user variant (``heavy``, ``sm90_heavy``) spill (28-64 bytes at
    head dim 64, NVRTC for sm_90a); those calls take the same tile in two warpgroups
    (``two_warpgroups``)."""
    if kv_dtype and (head_dim, head_dim_v) in SM90_FP8_TILES:
        t = SM90_FP8_TILES[(head_dim, head_dim_v)]
    elif paged and (head_dim, head_dim_v) in SM90_PAGED_TILES:
        t = SM90_PAGED_TILES[(head_dim, head_dim_v)]
    else:
        t = SM90_TILES.get((head_dim, head_dim_v), SM90_TILE)
    return two_warpgroups(t) if paged or kv_dtype or heavy else t

#: The Hopper mainloop's options (``AttentionSpec.sm90_opts``) the dispatcher uses: "p", the
#: consumer warpgroups' GEMMs in ping-pong (two; three in turn on the 192-row tile) (H200,
#: docs/dev/perf-log.md "Hopper path": 648 vs 580 TFLOP/s without it on the causal 16k shape; P V
#: over the whole head dim, softmax overlapped with the next block's Q K^T), and "t", each tile's
#: coordinates handed from the producer to the consumers in shared memory (H200, interleaved A/B
#: against "p" alone, docs/dev/issue22_account.md: causal d 96 0.968-0.977 of the time, d 192 0.976,
#: 4 x 4k GQA d 128 0.976-0.982, 16k d 128 0.989-0.990, non-causal 4k d 128 0.995-1.003; outputs
#: bit-identical; the default since its GPU suite, sanitizer and fuzz ran green, forty-fifth session);
#: ``sm90_options`` and ``without_tileinfo`` drop "t" where the kernel does not take it or would spill
#: (gathered pages, head dims above 192, FP8 caches unless ``SM90_FP8_TILEINFO``, per-logit extras,
#: AoS, ...; the fused kernel).  ``KERNELGEN_SM90_OPTS`` overrides it for tuning runs
#: (``Settings.sm90_opts``, passed as the choosers' ``sm90_opts``; read at call time, so tuning runs
#: may also replace this constant).
SM90_OPTS = "pt"

#: Option "t" on the FP8-cache kernels (head dims up to 128, not with a window at 128:
#: ``sm90_options``, ``sm90_tileinfo_fits``): they build without spills and ran the GPU suite, the
#: sanitizer (768 tiles on 132 CTAs) and the fuzz green with it (H200, forty-fifth session), but the
#: one bench run with it had the FP8 prefill entries at d 64 / 128 2-3 % further behind FA3 FP8 than
#: the report's earlier run without it (0.968 against 1.002 on causal 16k d 128, 0.951 against 0.983
#: on gpt-oss's d 64; d 256, which has no "t", unchanged), where the 16-bit A/B predicted 1-2 %
#: faster.  The interleaved A/B (``benchmarks/experiments/tile_ab.py``, ``fp8q:...:p`` against
#: ``fp8q:...:pt``, forty-seventh session, H100, two processes of three passes) has "t" 1.004-1.046x
#: the time at d 64 and 0.979-1.042x at d 128: it does not pay on the FP8 tensor-core kernels.  Off.
SM90_FP8_TILEINFO = False

#: Option "t" on the soft-capped, ALiBi and user-variant kernels (``sm90_options``' ``extras``).  Off:
#: tried in the forty-fourth session and dropped for 1-2 % on causal shapes that no goal waited on (a
#: snippet compared with its built-in needs it on both sides, and a user variant's spills are known
#: only once built: the two-warpgroup twin ``variant_spills`` would then apply at every head dim).
#: Experiments set it (``benchmarks/experiments/tile_ab.py`` where a configuration's letters have "t");
#: ``sm90_tileinfo_fits`` does not know these kernels' spills (NVRTC 13.0: the 16-bit soft-cap at head
#: dim 64 without a mask 8 / 16 bytes, ALiBi at head dim 192 with a window 36 / 56; docs/dev/perf-log.md
#: "Forty-fourth session"), so turning it on needs them first.
SM90_TILEINFO_EXTRAS = False

#: A paged call whose requests average at least this many query tokens (total_q / batch, known
#: on the host without a sync) skips the fused mixed-batch launch for the Hopper path (when that
#: path runs it): each short request in such a batch costs at most one nearly empty 128-row tile
#: per head against at least 4 full ones on average, which the Hopper mainloop's speed over the
#: sm_80 one more than pays for (docs/dev/perf-log.md, "Hopper path", paged K/V).
SM90_PAGED_MIN_MEAN_Q = 512

#: Alternatives measured by the benchmark's tile sweep (tools/bench.py).
CANDIDATE_TILES = {
    128: [
        TileConfig(128, 32, 4, 2, 2),
        TileConfig(128, 32, 4, 3, 2),
        TileConfig(128, 64, 8, 2, 1),
        TileConfig(128, 128, 8, 2, 1),
        TileConfig(64, 64, 4, 2, 2),
    ],
}


#: The sm_80 path's head-dim-128 prefill tile for ALiBi with a window or soft-cap, and for causal
#: ALiBi compiled for sm_90a (the sm_80 mainloop on a Hopper GPU: ``arch="sm_80"`` /
#: ``mainloop="sm80"`` calls): the 128-row two-stage tile spills there (24 spill stores with split-KV
#: and a window / soft-cap; causal: 32 / 24 bytes unsplit in the SoA layout, NVRTC 13.0; its sm_80
#: build and the sm_90a split / AoS / non-causal builds do not).
ALIBI_HEAVY_TILE = TileConfig(64, 64, 4, 2, 2)

#: The sm_80 path's head-dim-128 prefill tile (and the sm_80 fused kernel's long tile) where the
#: 128-row two-stage tile spills (``sm80_prefill_spills``): it runs at 247-255 registers with a
#: paged cache, and NVRTC 13.0's ptxas spills it on some of those builds (12-48 bytes; which ones
#: turns on the mask, the split, the soft-cap, an FP8 cache and even the metadata layout).  The
#: 64-row tile needs 190-218 registers there.
PAGED_PREFILL_TILE = TileConfig(64, 64, 4, 2, 2)


def sm80_prefill_spills(arch: str, head_dim: int, head_dim_v: int, mask: str, paged: bool, softcap: bool,
                        kv_dtype: str = "") -> bool:
    """Whether the sm_80 mainloop's 128-row head-dim-128 prefill tile (``tile_config``'s extra-state
    one) is replaced by ``PAGED_PREFILL_TILE`` for these features when compiled for ``arch``
    (NVRTC 13.0, every combination of mask, split, soft-cap, FP8 cache and layout compiled): on
    sm_90a (the sm_80 mainloop compiled for an H200: ``arch="sm_80"`` calls, the tiered first call's
    stand-in, calls the Hopper path does not take) every paged call, where it spilled 24-36 bytes
    with split-KV, an FP8 cache, a soft-cap or a window depending on the layout; on sm_80 a paged
    call with a window and a soft-cap (48 bytes) or a causal one on an FP8 cache (12-20)."""
    if not (paged and max(head_dim, head_dim_v) == 128):
        return False
    if arch == "sm_90a":
        return True
    return arch == "sm_80" and ((mask == "local" and softcap) or (bool(kv_dtype) and mask == "causal"))


#: The sm_80 path's prefill tiles of user variants (``kernelgen.Variant``), by head dim: the mid
#: class's 64-row tiles.  A snippet's index arithmetic and tensor loads run on every logit beside
#: the 128-row tiles' 64 fp32 scores a thread; the 64-row tiles leave them room (the five sample
#: variants of tests/test_variant_cpu.py compile without spills on sm_80 and sm_90a).
VARIANT_PREFILL_TILES = {
    64: TileConfig(64, 64, 4, 2, 2),
    96: TileConfig(64, 64, 4, 2, 2),
    128: TileConfig(64, 64, 4, 2, 2),
}


#: The Hopper tile's block_n for user variants whose paged K/V rows are gathered (option "g"): the
#: gathering producers leave the consumers 224 registers, where 128-key blocks spill with a snippet
#: on every logit (12-56 bytes for the five sample variants at head dim 128); 96 keys do not.
VARIANT_GATHER_BLOCK_N = 96


def variant_sm90_tile(t: TileConfig, opts: str, variant) -> TileConfig:
    """The Hopper tile ``t`` (options ``opts``) for a user variant (``variant`` not None): 96-key
    blocks when the producers gather rows (``VARIANT_GATHER_BLOCK_N``), else ``t`` itself."""
    if variant is not None and "g" in opts and t.block_n > VARIANT_GATHER_BLOCK_N:
        return dataclasses.replace(t, block_n=VARIANT_GATHER_BLOCK_N)
    return t


def tile_config(arch: str, head_dim: int, head_dim_v: int, tile_class: str = "prefill",
                extra_state: bool = False) -> TileConfig:
    """The tile shape for a head dim (the larger of head_dim and head_dim_v) on an arch.

    ``extra_state``: the variant also keeps split/paging/window/softcap state live, which costs the
    three-stage head-dim-128 prefill tile its last registers; it then uses two stages.
    """
    d = max(head_dim, head_dim_v)
    if tile_class == "prefill" and d == 128 and extra_state and arch in ("sm_80", "sm_90a"):
        return TileConfig(128, 32, 4, 2, 2)
    small = SMEM_LIMIT.get(arch, SMEM_LIMIT["sm_86"]) < SMEM_LIMIT["sm_80"]   # sm_86, sm_89, sm_120: ~99 KB a CTA
    if tile_class == "decode":
        table = _DECODE
    elif tile_class == "mid":
        table = _MID_SMALL_SMEM if small else _MID
    elif tile_class == "prefill":
        table = _PREFILL_SM90 if arch == "sm_90a" else _PREFILL_SMALL_SMEM if small else _PREFILL_BIG_SMEM
    else:
        raise ValueError(f"tile_class must be one of {TILE_CLASSES}, got {tile_class!r}")
    if d not in table:
        raise ValueError(f"head_dim {head_dim}/{head_dim_v} has no tile config (supported: {sorted(table)})")
    return table[d]


def tile_class_for_rows(rows: int, packed: bool = False) -> str:
    """Tile class for ``rows`` query rows per request tile (max_seqlen_q x pack factor).  Packed
    tiles (per-row addresses for every query row) stay at <= 64 rows."""
    return "decode" if rows <= 16 else "mid" if rows <= 64 or packed else "prefill"


def default_pack_gqa(qpk: int, max_seqlen_q: int) -> bool:
    """Pack the query heads of one KV head into a tile when a request has few query rows (decode,
    speculative decode): K/V is then read once per KV head instead of once per query head."""
    return qpk > 1 and max_seqlen_q * qpk <= 64


def num_splits_heuristic(total_mblocks: int, n_blocks: int, num_ctas: int, max_splits: int = MAX_AUTO_SPLITS) -> int:
    """Upper bound of split-KV, FlashAttention-3's rule (hopper/heuristics.h, described in
    shared/research/fa3_scheduler.md 7.1): no split once the tiles fill 80 % of the CTAs or when a
    request has <= 4 key blocks; else the smallest count whose wave efficiency is >= 85 % of the best."""
    if total_mblocks >= 0.8 * num_ctas or n_blocks <= 4:
        return 1
    cap = max(1, min(max_splits, num_ctas, n_blocks))
    eff = []
    for s in range(1, cap + 1):
        w = total_mblocks * s / num_ctas
        eff.append(w / math.ceil(w))
    best = max(eff)
    for s, e in enumerate(eff, start=1):
        if e >= 0.85 * best:
            return s
    return 1


def capped_splits(bound: int, max_num_splits: int) -> int:
    """An automatic split bound under the caller's ``max_num_splits`` (0 = no cap): FlashAttention-3's
    varlen scheduler reads its ``num_splits`` n > 1 as an upper bound of its own choice
    (hopper/flash_prepare_scheduler.cu: min(its dynamic count, n)), so a cap lowers the bound and
    never raises it."""
    return min(bound, max_num_splits) if max_num_splits > 0 else bound


def decode_split_bound(base: int, n_blocks: int, *, total_q: int, num_heads_q: int, head_dim_v: int) -> int:
    """The split cap of an automatic split-KV call on a one-warp decode tile: ``base`` (the FA3
    rule's, ``num_splits_heuristic``) raised to min(``MAX_DECODE_SPLITS``, ``n_blocks``, the splits
    whose partials for ``total_q`` query tokens fit ``DECODE_PARTIALS_BYTES``); ``base`` as is
    when it is 1 (no split-KV) or ``total_q`` is unknown (0).

    The FA3 rule bounds a call by its heads and tile rows alone (it does not see the batch); with
    one KV head per GPU (tensor parallelism) and few or long requests, its 55 splits leave most of
    the 1584 one-warp CTAs of an H200 idle (8 x 128 K keys: 440 tiles) or cut the longest requests
    of a ragged batch into the longest tiles.  The GPU scheduler's quantum (``metadata.split_share``)
    gives each request only the splits its keys need, and ``metadata.wave_split_cap`` rounds the
    most-split requests to whole waves, so a higher cap costs only workspace.
    """
    if base <= 1 or total_q <= 0:
        return base
    per_split = 4 * num_heads_q * total_q * (head_dim_v + 1)
    return max(base, min(MAX_DECODE_SPLITS, n_blocks, DECODE_PARTIALS_BYTES // per_split))


#: Warps of 256-thread combine CTAs resident on an SM (``__launch_bounds__(256, 4)`` up to head
#: dim 128, (256, 2) above: templates/combine/combine.cu.j2's MIN_CTAS).
COMBINE_WARPS_PER_SM = {True: 32, False: 16}


def combine_row_warps(total_q: int, num_heads_q: int, head_dim_v: int, num_sms: int) -> int:
    """Warps merging one (token, head) row in the split-KV combine (``CombineSpec.row_warps``):
    the most of 8, 4, 2, 1 whose warps for every row of ``total_q`` query tokens stay resident at
    once on ``num_sms`` SMs, so the combine runs in one wave of row chains (each a few dependent
    round trips) and a row with many splits has the most warps loading its partials; 1 where even
    one warp a row is more than a wave (a 128-request decode at 32 heads: 4096 rows, where four
    warps a row took four waves); 4 when ``total_q`` is unknown (0).  docs/dev/perf-log.md,
    "Thirty-fifth session"."""
    if total_q <= 0:
        return 4
    resident = num_sms * COMBINE_WARPS_PER_SM[head_dim_v <= 128]
    rows = total_q * num_heads_q
    for r in (8, 4, 2):
        if rows * r <= resident:
            return r
    return 1


def window_split_cap(bound: int, visible_keys: int) -> int:
    """An automatic split bound under a two-sided window: 1 (no split) where a query tile sees
    fewer than 2 x ``MIN_SPLIT_KEYS`` keys, else ``bound``; ``bound`` as is without such a window
    (``visible_keys`` 0)."""
    return 1 if 0 < visible_keys < 2 * MIN_SPLIT_KEYS else bound


def estimated_ctas(arch: str, tile: TileConfig, smem_bytes: int, num_sms: int) -> int:
    """Persistent CTAs the occupancy calculator will likely allow, assuming up to 255 registers a
    thread; only used to bound the split count before a kernel is loaded."""
    by_smem = SMEM_PER_SM.get(arch, 102400) // (smem_bytes + 1024)
    by_regs = 65536 // (255 * 32 * tile.num_warps)
    return max(1, min(by_smem, by_regs, 32)) * num_sms


def sm90_options(paged: bool, page_size: int, block_n: int, sm90_opts: str | None = None,
                 max_head_dim: int = 0, kv_dtype: str = "", extras: bool = False) -> str:
    """The Hopper mainloop's options (``AttentionSpec.sm90_opts``) for a call: ``sm90_opts``
    (None: ``SM90_OPTS``) without "g" for packed K/V; for a paged cache, with "g" (the producer
    warps gather K/V rows through the page table, any page size) unless TMA boxes fit the pages
    (``sm90_paged_tma_fits``) and the options do not ask for "g" themselves.  "t" (the default's, or
    ``KERNELGEN_SM90_OPTS``') is dropped where the kernel does not take it: with "g" or "e", above head
    dim 192 (``max_head_dim``: the larger of the call's head dims; 0 = unknown), and where its
    registers spill (NVRTC 13.0): with an FP8 cache (``kv_dtype``) unless ``SM90_FP8_TILEINFO`` and
    never above head dim 128 (4 / 16 bytes at 192), and in soft-capped, ALiBi or user-variant
    kernels (``extras``) unless ``SM90_TILEINFO_EXTRAS`` (their snippet / built-in comparisons would
    need it on both sides; docs/dev/perf-log.md "Forty-fourth session")."""
    base = SM90_OPTS if sm90_opts is None else sm90_opts
    opts = set(base) - {"g"}
    if paged and ("g" in base or not sm90_paged_tma_fits(page_size, block_n)):
        opts.add("g")
    if "g" in opts or "e" in opts or max_head_dim > (128 if kv_dtype else 192) \
            or (extras and not SM90_TILEINFO_EXTRAS) or (kv_dtype and not SM90_FP8_TILEINFO):
        opts.discard("t")
    return "".join(sorted(opts))


#: Option "x" (``AttentionSpec.sm90_opts``: a share of the softmax's exponentials on the FMA pipe by a
#: polynomial, templates/common/softmax.cuh ``ex2_fma``) added by the dispatcher where a logit costs a
#: second MUFU instruction (``sm90_ex2_fma``).  False: only where the options ask for it
#: (``KERNELGEN_SM90_OPTS``, tuning runs; ``benchmarks/experiments/tile_ab.py`` sets it False so that
#: its configurations' letters are exact).  Off: correct on the GPU (tests/gpu/test_ex2_fma_gpu.py, 58
#: passed, forty-seventh session) but slower where the rule applies: the soft-cap snippet at gpt-oss's
#: heads ran 1.10x the time at share 4, 1.00x at 2, 1.15x at 6, and the FP8 tensor-core kernels at
#: d 64 1.12x / 1.18x at shares 2 / 3 (interleaved A/B, H100; docs/dev/perf-log.md): the
#: polynomial's eight FMA-pipe instructions cost more issue slots than the MUFU time they free.  (Since
#: the soft-cap takes the three-warpgroup tile at d 64, "x" spills 40 bytes there: the rule would need
#: ``sm90_ex2_fma_fits`` to know the tile first.)
SM90_EX2_FMA = False
#: The same on the FP8 tensor-core kernels at head dim 64, whose GEMMs run at twice the 16-bit rate
#: (so the exponentials bind): off until an A/B says it pays (``tile_ab.py``, ``fp8q:64:...:px``).
SM90_EX2_FMA_FP8 = False


def sm90_ex2_fma(head_dim: int, softcap: bool, variant, fp8_mma: bool) -> bool:
    """Whether the dispatcher adds option "x" to a standalone Hopper kernel (``SM90_EX2_FMA``; never
    to the fused mixed-batch kernel, ``choose_fused_hopper``): at head dims up to 64, where a key
    block's GEMMs take as many tensor-core clocks as its exponentials take MUFU clocks (16 a clock an
    SM), when a logit costs a second MUFU instruction (a soft-cap's tanh, or a user variant whose
    snippets call a MUFU function, ``variant.transcendental``: the template then moves half of the
    exponentials), and on the FP8 tensor-core kernels when ``SM90_EX2_FMA_FP8`` (a quarter)."""
    if not SM90_EX2_FMA or head_dim > 64:
        return False
    return bool(softcap or (variant is not None and variant.transcendental) or (fp8_mma and SM90_EX2_FMA_FP8))


def sm90_ex2_fma_fits(head_dim: int, fp8_mma: bool) -> bool:
    """Whether option "x" builds without spills (NVRTC 13.0, a review's survey of 1,328 kernels with
    it): up to head dim 128, and up to 64 on the FP8 tensor-core kernels (d 256 spilled 4-12 bytes, the
    FP8 tensor-core d 128 non-causal tile 44 where it has 4 without); ``choose`` drops it elsewhere,
    also when ``KERNELGEN_SM90_OPTS`` asks for it."""
    return head_dim <= (64 if fp8_mma else 128)


def with_ex2_fma(opts: str, head_dim: int, softcap: bool, variant, fp8_mma: bool) -> str:
    """``opts`` with option "x" where ``sm90_ex2_fma`` adds it, without it where it does not fit
    (``sm90_ex2_fma_fits``; ``head_dim``: the larger of the call's head dims)."""
    if sm90_ex2_fma(head_dim, softcap, variant, fp8_mma):
        opts = "".join(sorted(set(opts) | {"x"}))
    return opts if sm90_ex2_fma_fits(head_dim, fp8_mma) else opts.replace("x", "")


def sm90_tileinfo_fits(head_dim: int, head_dim_v: int, layout: str, mask: str, paged: bool, pack: bool,
                       split: bool = False, kv_dtype: str = "") -> bool:
    """Whether option "t" (``sm90_options``) builds without spills for a kernel of these features,
    beyond ``sm90_options``' own rules (NVRTC 13.0, every "t" kernel of the serving catalog, the GPU
    tests and fuzz seed 41 built on the CPU, docs/dev/perf-log.md "Forty-third session"): not on the
    AoS metadata layout (4-40 bytes in split, head-dim-192 and 192 x 128 builds), not at head dim 64
    on paged K/V (its 128-row paged tile: 8-28 bytes) or with a sliding window (96 bytes on the
    192-row tile), not on packed-GQA paged K/V at head dim 192 (28 bytes) or with split-KV (4 bytes
    at head dims 96 / 128), not with a window and split-KV at head dim 192 (32-60 bytes; a review's
    survey of 366 dispatched kernels); with an FP8 cache (``kv_dtype``), not with a window at head dim
    128 (16-152 bytes in converting and tensor-core kernels; a survey of 348 FP8 "t" builds,
    docs/dev/perf-log.md "Forty-fourth session")."""
    d = max(head_dim, head_dim_v)
    if layout != "soa":
        return False
    if kv_dtype and d == 128 and mask == "local":
        return False
    if d == 64 and (paged or mask == "local"):
        return False
    if d == 192 and mask == "local" and split:
        return False
    return not (paged and pack and (d == 192 or split))


def without_tileinfo(opts: str, head_dim: int, head_dim_v: int, layout: str, mask: str, paged: bool,
                     pack: bool, split: bool, kv_dtype: str = "") -> str:
    """``opts`` without "t" where ``sm90_tileinfo_fits`` says it would spill."""
    if "t" in opts and not sm90_tileinfo_fits(head_dim, head_dim_v, layout, mask, paged, pack, split, kv_dtype):
        return opts.replace("t", "")
    return opts


#: Option "m" (``AttentionSpec.sm90_opts``: the overlapped loop's key block in a masked and an
#: unmasked copy) is dropped above this head dim and with a sliding window (``without_mask_split``),
#: where the two copies spill (NVRTC 13.0: head dim 192 / 256 8-68 bytes, and windows 12-490 bytes,
#: the d 64 three-warpgroup window kernels 116-144), and for causal built-in ALiBi on packed tiles
#: (56-340 bytes); the other causal and unmasked kernels up to head dim 128 do not spill.
SM90_MASK_SPLIT_MAX_HEAD_DIM = 128

#: Head dims above ``SM90_MASK_SPLIT_MAX_HEAD_DIM`` where option "m" stays on the kernels
#: ``with_mask_split`` gives it (a soft-cap or a transcendental snippet): at head dim 256 those build
#: with it without spills (NVRTC 13.0: causal and unmasked, paged, split; the plain kernel spills
#: 8 / 16 bytes, causal ALiBi with splits 24 / 52, head dim 192's soft-cap 8 / 16), except the
#: unmasked unsplit soft-cap in AoS or with sinks, 4 / 8 bytes as without "m" (12 / 16 with sinks:
#: the review's survey of 152 such builds); a user snippet's spills are its own (``selection.spills``
#: keeps the kernel that spills less).  H100, interleaved
#: A/B with twins, gemma2-9b's heads (16 / 8) causal 1 x 16k, two processes of three passes (fifty-third
#: session): the tanh.approx snippet 0.947-0.990x the time (twins 0.992-1.050), the built-in soft-cap
#: 0.917-1.010x (twins 0.991-1.028).
SM90_MASK_SPLIT_MUFU_HEAD_DIMS = (256,)

#: Head dims where a transcendental user snippet on the two-warpgroup tile takes option "m"
#: (``with_mask_split``; on three warpgroups it always does).  H100, interleaved A/B with twins,
#: causal 1 x 16k, the tanh.approx snippet: llama3-8b's heads (32 / 8, d 128) 0.919-0.969x the time
#: (twins 0.956-1.009; fifty-fourth session), gemma2-9b's (16 / 8, d 256) 0.947-0.990x (fifty-third);
#: at head dim 64 it ran 1.007x (that tile has three warpgroups by default).  Outputs bit-identical.
SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS = (128, 256)

#: Option "m" added by the dispatcher (``with_mask_split``) where every logit passes through a MUFU
#: function besides the exponential: the built-in soft-cap and user variants whose snippets call one
#: (``VariantCode.transcendental``).  There the unmasked copy lets ptxas interleave the tanh with the
#: row max as FlashAttention-4's sm_90 kernel does (SASS, fifty-second session).  H100, interleaved
#: A/B with twins (twins within 0.1 % unless stated), causal: gpt-oss's heads (64 / 8, d 64) 1 x 16k,
#: the built-in soft-cap 0.960-0.968x the time on two warpgroups and 0.907-0.926x with three (which
#: alone gives 0.941x; 4 x 4k 0.906-0.912x), the tanh.approx snippet 0.951-0.967x with three (1.007x
#: with "m" on two); llama3-8b's d 128 soft-cap 0.905-0.978x (twins 0.964-1.016).  Without such a
#: function it does not pay (plain d 64 / d 128 and ALiBi within the twins' spread).  False: only where
#: the options ask for it (``KERNELGEN_SM90_OPTS``; tile_ab.py keeps its letters exact).
SM90_MASK_SPLIT_MUFU = True

#: Head dims where the FP8 tensor-core kernels (FP8 q, K and V: ``AttentionSpec.fp8_mma``) take option
#: "m" on causal calls without a soft-cap on contiguous K / V (``with_mask_split``; ``without_mask_split``
#: keeps it there, and only there, on those kernels above ``SM90_MASK_SPLIT_MAX_HEAD_DIM``).  At head
#: dim 256 they spill no more with it (NVRTC 13.0: SoA 44 / 64 bytes, AoS 60 / 72, in the producer).
#: H100, tile_ab, interleaved graph replays, 2 x 4096 causal, 16 / 16 heads, two processes of three
#: passes (sixty-ninth session): 0.986-1.000x and 0.989-0.994x the time without it.
#: Measured and left out: gpt-oss's d 64 (192 rows, 1 x 16k) 0.992-1.108x / 1.026-1.071x; gemma2's
#: soft-capped d 256 (16 / 8 heads, causal 1 x 16k) 1.030-1.075x, and 0.987-1.048x with the consumers'
#: warpgroup index warp-uniform (``uniform_cg``, attention/mainloop_sm90.cuh).
SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS = (256,)


def fp8_mma_mask_split(fp8_mma: bool, mask: str, paged: bool, head_dim: int) -> bool:
    """Whether an FP8 tensor-core kernel takes option "m" (``SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS``): causal,
    contiguous K / V, one of those head dims (the callers add: no soft-cap, no ALiBi, no user variant)."""
    return fp8_mma and mask == "causal" and not paged and head_dim in SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS


def mufu_logits(softcap: bool, variant) -> bool:
    """True where every logit passes through a MUFU function besides the exponential: the built-in
    soft-cap, or a user variant whose snippet calls one (``VariantCode.transcendental``)."""
    return bool(softcap or (variant is not None and variant.transcendental))


def with_mask_split(opts: str, softcap: bool, variant, num_warps: int, fp8: bool = False,
                    head_dim: int = 0, variant_spills: int = 0, fp8_mma: bool = False, mask: str = "",
                    paged: bool = False) -> str:
    """``opts`` with option "m" where ``SM90_MASK_SPLIT_MUFU`` adds it: a soft-cap, or a transcendental
    user variant on the three-warpgroup tile (``num_warps`` 12: at head dim 64 on two the snippet ran
    1.007x the time with it) or at a head dim of ``SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS`` (two warpgroups,
    0.919-0.969x at 128, 0.947-0.990x at 256), 16-bit K / V only (``fp8``: an FP8 cache or FP8 q; not measured
    with an FP8 cache, slower on the soft-capped FP8 tensor-core kernels: ``SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS``);
    ``without_mask_split`` then drops it where the built-in kernels spill.  A user variant's spills are
    known only once built: with ``variant_spills`` (its kernel with "m" or on three warpgroups spilled,
    ``selection.spills``) none is added.  The FP8 tensor-core kernels (``fp8_mma``) take it on causal
    calls (``mask``) without a soft-cap, on contiguous K / V (not ``paged``: there it spills 8 bytes more,
    unmeasured), at the head dims of ``SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS``."""
    if variant is not None and variant_spills:
        return opts
    if not softcap and variant is None and fp8_mma_mask_split(fp8_mma, mask, paged, head_dim):
        return "".join(sorted(set(opts) | {"m"}))
    if SM90_MASK_SPLIT_MUFU and not fp8 and (softcap or (variant is not None and variant.transcendental and (
            num_warps == 12 or head_dim in SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS))):
        return "".join(sorted(set(opts) | {"m"}))
    return opts


def without_mask_split(opts: str, head_dim: int, head_dim_v: int, mask: str, alibi: bool = False,
                       pack: bool = False, mufu: bool = False, fp8_mma: bool = False, paged: bool = False) -> str:
    """``opts`` without "m" above ``SM90_MASK_SPLIT_MAX_HEAD_DIM`` (except at the head dims of
    ``SM90_MASK_SPLIT_MUFU_HEAD_DIMS`` where ``mufu``, ``mufu_logits``, without ALiBi: soft-cap and
    ALiBi at 256 spilled 4-24 bytes), with a sliding window, and for causal built-in ALiBi on packed
    tiles (56-340 bytes spilled at head dims 64-128, NVRTC 13.0); kept on the FP8 tensor-core kernels
    (``fp8_mma``) where ``with_mask_split`` gives it to them: causal, contiguous K / V (not ``paged``), the
    head dims of ``SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS``."""
    d = max(head_dim, head_dim_v)
    too_wide = d > SM90_MASK_SPLIT_MAX_HEAD_DIM and not (mufu and not alibi and d in SM90_MASK_SPLIT_MUFU_HEAD_DIMS) \
        and not (not alibi and fp8_mma_mask_split(fp8_mma, mask, paged, d))
    if "m" in opts and (too_wide or mask == "local" or (alibi and pack and mask == "causal")):
        return opts.replace("m", "")
    return opts


def sm90_tile_and_options(head_dim: int, head_dim_v: int, paged: bool, page_size: int,
                          tile: TileConfig | None = None, sm90_opts: str | None = None,
                          kv_dtype: str = "", heavy: bool = False, extras: bool = False) -> tuple[TileConfig, str]:
    """The Hopper path's (tile, ``sm90_opts``) for a call: ``tile`` or ``sm90_tile``, with the
    options of its K/V loads (``sm90_options``); where those gather rows and ``SM90_GATHER_TILES``
    has a lighter tile for the head dims (no explicit ``tile``, no FP8 cache), that tile and its own
    options.  ``sm90_opts``: as ``sm90_options``'; ``kv_dtype``: an FP8 cache, ``heavy``: a soft-cap,
    ALiBi or a user variant (``sm90_tile``), ``extras``: any of them (``sm90_options``)."""
    t = tile or sm90_tile(head_dim, head_dim_v, paged, kv_dtype, heavy)
    opts = sm90_options(paged, page_size, t.block_n, sm90_opts, max(head_dim, head_dim_v), kv_dtype,
                        heavy or extras)
    if tile is None and not kv_dtype and "g" in opts and (head_dim, head_dim_v) in SM90_GATHER_TILES:
        t = SM90_GATHER_TILES[(head_dim, head_dim_v)]
        opts = sm90_options(paged, page_size, t.block_n, sm90_opts, max(head_dim, head_dim_v), kv_dtype,
                        heavy or extras)
    return t, opts


def sm90_paged_tma_fits(page_size: int, block_n: int) -> bool:
    """Whether the Hopper kernel loads a paged cache's key blocks of ``block_n`` keys with TMA
    boxes of min(page_size, block_n) keys, each inside one page: ``page_size`` a multiple of
    ``block_n`` (one box a block), or ``block_n`` a multiple of a ``page_size`` that is a multiple
    of 8 (a box of whole 8-row swizzle atoms per page; 0 = unknown: no)."""
    if page_size <= 0:
        return False
    return page_size % block_n == 0 or (block_n % page_size == 0 and page_size % 8 == 0)


def paged_prefers_hopper(paged: bool, total_q: int, batch: int) -> bool:
    """Whether an automatic paged call (no ``short_query_tokens``) with ``total_q`` query tokens in
    ``batch`` requests should try the Hopper path before the fused mixed-batch launch: its
    requests average at least ``SM90_PAGED_MIN_MEAN_Q`` query tokens (chunked prefill)."""
    return bool(paged) and batch > 0 and total_q >= SM90_PAGED_MIN_MEAN_Q * batch


#: Pack-GQA on the Hopper prefill kernel (``choose``'s ``sm90_pack``; ``KERNELGEN_SM90_PACK_GQA``
#: overrides it): the qpk query heads of a KV head share a 128- or 192-row tile, as FlashAttention-3
#: packs varlen calls, so a short request wastes fewer rows to the tile's round-up and the causal
#: diagonal (docs/dev/hopper_pack_gqa.md: the bench's varlen trace computes 0.891 -> 0.93 of its MMAs
#: usefully at 128 rows, gpt-oss's 192-row tile 0.797 -> 0.921).  None (default): automatic, by the
#: call's mean query tokens a request (``sm90_pack_auto``); True / False: always / never.
SM90_PACK_GQA: bool | None = None
#: The automatic choice packs a call whose requests average fewer query tokens than this (and not a
#: plan, whose mean is unknown) on a tile ``sm90_pack_auto`` names.  Measured on the H200 with
#: benchmarks/experiments/pack_gqa_ab.py (packed / unpacked time, outputs bit-identical;
#: docs/dev/hopper_pack_gqa.md): the varlen trace (44 prompts, mean 659 tokens) 0.874 on gpt-oss's
#: 64/8 heads at d 64 (192-row tile), 0.966 on llama3-70b-tp8's 8/1, 0.978-0.990 on llama3-8b's 32/8;
#: 8 chunks of 1024 on 8192 keys 0.88 on gpt-oss; 16 chunks of 512 0.996 on tp8 but 1.02-1.03 on
#: llama3-8b, whose chunks of 1024-2048 ran 1.01-1.05 packed.  The 16-bit 192-row tile packs at any
#: length (sm90_pack_auto: 0.79-0.998 from 2k to 16k tokens, H100, fiftieth session).
SM90_PACK_MAX_MEAN_Q: int = 1024
#: The same bound for an FP8 call's 192-row tile (FP8 q, K and V on the FP8 tensor-core tile, head dim 64):
#: packed / unpacked at gpt-oss's heads (H100, fiftieth session) 0.873 on the varlen trace, one causal
#: request of 2k 0.93-0.94, 4k 0.97-0.98 (non-causal 0.95), 8k 1.02-1.04, 16k 1.006-1.046: between 4k and 8k.
SM90_FP8_PACK_MAX_MEAN_Q: int = 6144
#: The same bound for a call with built-in ALiBi on the 16-bit 192-row tile (per-row slopes and
#: positions): packed / unpacked at gpt-oss's heads (H100, fifty-first session) 0.855-0.863 on the
#: varlen trace, one causal request of 4k 0.937-0.943, 16k 1.007-1.030.
SM90_ALIBI_PACK_MAX_MEAN_Q: int = 6144
#: The automatic choice packs 128-row tiles only from this many query heads a KV head: at 4 the packed
#: tile's per-row addressing costs 1-5 % on aligned chunks and the trace gains 1-2 %; at 8 it gains
#: 3.4 % on the trace and costs nothing on chunks.  The 192-row tile (head dim 64) packs at any qpk
#: that divides it: its unpacked tiles straddle the 128-key blocks (12 % on gpt-oss).
SM90_PACK_AUTO_MIN_QPK_128: int = 8
#: The automatic choice packs a call with a user variant (``kernelgen.Variant``; its snippets see each
#: packed row's own query head and position, common/user_mod.cuh) as it packs the plain call
#: (``sm90_pack_auto``'s tiles and bounds); False: only where asked (``pack_gqa=True``,
#: ``KERNELGEN_SM90_PACK_GQA=1``).  Packed / unpacked time, H100, fifty-fourth session
#: (benchmarks/experiments/pack_gqa_ab.py --score-mod, two passes): the tanh.approx soft-cap snippet
#: on gpt-oss's heads (64 / 8, d 64, 192-row tile) 0.849-0.870 on the varlen trace, 0.972-0.974 on one
#: causal 16k request, 0.879 on 8 chunks of 1024; an ALiBi-shaped snippet there 0.851 / 0.990-0.998 /
#: 0.876; on llama3-70b-tp8's 8 / 1 (128-row tile, d 128) 0.972-0.975 and 0.931-0.968 on the trace;
#: on llama3-8b's 32 / 8 (qpk 4, not packed automatically) 0.94-0.97 on the trace, 1.018-1.020 on
#: chunks of 2048, 1.011-1.018 at 16k (the plain kernel's pattern).
SM90_VARIANT_PACK_AUTO: bool = True
#: The largest head dim the Hopper kernel packs a user variant at: packed at 192 the examples' ALiBi,
#: T5 bias, prefix-LM and index_arith kernels spill 8-152 bytes (NVRTC 13.0; unpacked ALiBi and the
#: T5 bias do not): most calls would build a packed kernel only for ``selection.spills`` to take the
#: unpacked twin.
SM90_VARIANT_PACK_MAX_HEAD_DIM: int = 128


def sm90_pack_auto(qpk: int, mean_q: int, block_m: int = 0, fp8: bool = False, alibi: bool = False,
                   variant: bool = False) -> bool:
    """The automatic pack-GQA choice of the Hopper prefill kernel: GQA (``qpk`` > 1 query heads a
    KV head) and requests averaging ``mean_q`` > 0 query tokens (0 = unknown: a plan, or a mixed
    batch's long class: no packing); once the tile is known (``block_m`` rows; 0 = not yet: True,
    the tile decides), the 16-bit 192-row tile packs at any length (with built-in ALiBi, ``alibi``,
    below ``SM90_ALIBI_PACK_MAX_MEAN_Q`` tokens), an FP8 call's (``fp8``) 192-row tile below
    ``SM90_FP8_PACK_MAX_MEAN_Q`` tokens and a 128-row tile (at qpk >=
    ``SM90_PACK_AUTO_MIN_QPK_128``) below ``SM90_PACK_MAX_MEAN_Q``.  Packed / unpacked time on an
    H100 (docs/dev/perf-log.md, "Fiftieth session"), d 64, one request: bf16 at gpt-oss's 64 / 8
    heads causal 2k-16k 0.91-0.998, non-causal 4k / 16k 0.97-0.998, a 128-token window 0.79, four
    chunks of 2048 0.95, at 32 / 8 heads 4k / 16k 0.93-0.98; FP8 q / K / V at 64 / 8 the varlen
    trace 0.873, 2k-4k 0.93-0.98, 8k-16k 1.006-1.046 (slower); FP8 at d 128 (128-row tile) and
    8 / 1 heads (fifty-first session) the varlen trace 0.940, chunks of 512 0.994-1.004, one 4k
    request 1.013-1.020 (not packed automatically).  A call with a user variant (``variant``) packs
    as the plain call does where ``SM90_VARIANT_PACK_AUTO``, else never automatically."""
    if not (qpk > 1 and mean_q > 0) or (variant and not SM90_VARIANT_PACK_AUTO):
        return False
    if block_m == 0:
        return True
    if block_m > 128:
        bound = SM90_FP8_PACK_MAX_MEAN_Q if fp8 else SM90_ALIBI_PACK_MAX_MEAN_Q if alibi else 0
        return bound == 0 or mean_q < bound
    return mean_q < SM90_PACK_MAX_MEAN_Q and qpk >= SM90_PACK_AUTO_MIN_QPK_128


#: The largest head dim the Hopper kernel packs GQA at.  Head dim 256 packed builds without spills
#: at its (24, 240) registers (``AttentionSpec.SM90_REGS_PACK``) in 140 of 144 variants; the
#: non-causal ones with sinks spill 20 bytes (NVRTC 13.0), and sinks join a call's spec after this
#: choice (``decide.recipe``), so d 256 stays unpacked until that case is handled there.
SM90_PACK_MAX_HEAD_DIM = AttentionSpec.SM90_PACK_MAX_HEAD_DIM
#: The largest head dim at which an FP8 call (q, K and V in FP8, the FP8 tensor-core tile) packs GQA:
#: head dim 64's 192-row tile and head dim 128's 128-row one (``AttentionSpec.SM90_FP8_PACK_MAX_HEAD_DIM``).
SM90_FP8_PACK_MAX_HEAD_DIM = AttentionSpec.SM90_FP8_PACK_MAX_HEAD_DIM


def sm90_unsupported(arch: str, head_dim: int, head_dim_v: int, *, mask: str, paged: bool, softcap: bool,
                     pack: bool, num_splits: int, tma_ok: bool = True, pack_why: str = "") -> str:
    """Why the Hopper mainloop cannot run a call ("" when it can): it needs sm_90a, packed K/V with
    (head_dim, head_dim_v) in ``spec.SM90_HEAD_DIM_PAIRS`` or a paged cache with head_dim ==
    head_dim_v in ``spec.SM90_PAGED_HEAD_DIMS``, no pack-GQA, and q/k/v strides TMA can address
    (``tma_ok``, see ``tma.tma_compatible``; for a paged cache its page, slot and head strides).
    Every mask ("none", "causal", "local": a sliding window), soft-cap (``softcap``) and split-KV
    (automatic or a forced ``num_splits``) run on it; ``num_splits`` is kept for the callers'
    signature.  ``pack_why``: the reason given for ``pack`` (default "pack-GQA")."""
    if arch != "sm_90a":
        return f"arch {arch} (the wgmma/TMA path needs sm_90a)"
    if (head_dim, head_dim_v) not in SM90_HEAD_DIM_PAIRS:
        return f"head dims {head_dim}/{head_dim_v} (supported: {SM90_HEAD_DIM_PAIRS})"
    if paged and (head_dim != head_dim_v or head_dim not in SM90_PAGED_HEAD_DIMS):
        return f"a paged K/V cache at head dims {head_dim}/{head_dim_v} (paged: equal, in {SM90_PAGED_HEAD_DIMS})"
    if mask not in MASKS:
        return f"mask {mask!r} (masks: {MASKS})"
    if pack:
        return pack_why or "pack-GQA"
    if not tma_ok:
        return "q/k/v strides that TMA cannot address (token and head strides must be multiples of 16 bytes)"
    return ""


def choose(arch: str, dtype: str, head_dim: int, head_dim_v: int, *, num_heads_q: int, num_heads_kv: int,
           mask: str = "none", layout: str = "soa", max_seqlen_q: int, max_seqlen_k: int, paged: bool = False,
           softcap: bool = False, pack_gqa: bool | None = None, num_splits: int = 0, num_sms: int = 132,
           tile: TileConfig | None = None, mainloop: str | None = None, tma_ok: bool = True,
           page_size: int = 0, sm90_opts: str | None = None, alibi: bool = False,
           variant: VariantCode | None = None, kv_dtype: str = "", q_dtype: str = "",
           total_q: int = 0, variant_spills: int = 0, window_span: int = -1,
           combine_rows: int = 0, sm90_pack: bool | None = None, mean_q: int = 0,
           max_num_splits: int = 0) -> Variants:
    """Every kernel variant of a call, from what the host knows (shapes, flags, max lengths).

    ``max_num_splits``: a cap on the automatic split bound (0 = none; FlashAttention-3's varlen
    reading of its ``num_splits``): the bound is min(the automatic one, the cap), and a cap of 1
    leaves the call unsplit.  A forced ``num_splits`` ignores it (the callers refuse both).

    ``window_span``: left + right of a sliding window bounded on both sides (``decide.window_span``;
    -1 = none): a query tile then sees at most window_span + max_seqlen_q keys, and below 2 x
    ``MIN_SPLIT_KEYS`` an automatic call does not split; a forced ``num_splits`` is kept.

    ``total_q``: the query tokens the workspace is sized for (0 = unknown): an automatic split-KV
    call on a one-warp decode tile may then split further (``decode_split_bound``).

    ``sm90_pack``: whether the Hopper path packs GQA (``Settings.sm90_pack_gqa``; None: ``SM90_PACK_GQA``,
    and when that is None too, ``pack_gqa=True`` or ``sm90_pack_auto`` of ``mean_q``: the call's
    query tokens a request, 0 = unknown).
    When on, a prefill-sized call on the Hopper path packs the query heads of a KV head into its
    tiles (``AttentionSpec.pack_gqa``) unless ``pack_gqa`` is False, with 16-bit q and K/V (or FP8 q,
    K and V on the FP8 tensor-core tile up to ``SM90_FP8_PACK_MAX_HEAD_DIM``), no user variant (nor
    ALiBi with a soft-cap above head dim 128), and a tile of whole tokens (block_m a multiple of qpk); a call that asks for
    ``pack_gqa=True`` where it cannot pack takes the sm_80 path (a forced ``mainloop="sm90a"``
    raises ValueError).

    ``combine_rows``: the query tokens of the one call the recipe serves (0 = unknown, as for a
    plan, whose steps run any number up to its capacity): the split-KV combine's warps a row
    (``combine_row_warps``; 4 when unknown).

    ``kv_dtype``: an FP8 K/V cache ("e4m3" / "e5m2"; ``AttentionSpec.kv_dtype``).  The Hopper
    path takes it where it takes the 16-bit call, with ``SM90_FP8_TILES`` and TMA boxes (no ALiBi,
    user variant or gathered rows: those calls take the sm_80 path); the sm_80 path's tile becomes
    ``fp8_tile``'s (splits chosen with the 16-bit tile, whose block_n it keeps).
    ``q_dtype``: "e4m3" for an FP8 q (with an FP8 cache): the Hopper variant becomes the FP8
    tensor-core one (``AttentionSpec.fp8_mma``, ``SM90_FP8_MMA``) where the head dims and tile allow
    it; the caller converts q to ``dtype`` for every other variant.

    ``variant``: a user variant's code (``kernelgen.Variant``, ``AttentionSpec.variant``): its
    snippets run on every logit, so the sm_80 path takes the lighter tiles (the 64-row tile of
    the mid class for prefill, ``VARIANT_PREFILL_TILES``) and the Hopper path its usual tile (the
    three-warpgroup one at head dim 64, ``SM90_THREE_WG_EXTRAS``, unless ``variant_spills``: that
    kernel spilled when built, ``selection.spills``; then the two-warpgroup one without "m", and at
    ``variant_spills`` 2 that one unpacked).

    ``alibi``: the attention variant adds ALiBi biases (``AttentionSpec.alibi``); its slopes stay
    live in the mainloop, so it takes the lighter prefill tile like the other extra state.

    ``mainloop``: None picks the Hopper path ("sm90a": wgmma, TMA) on sm_90a for the variants it
    supports (``sm90_unsupported``) when the call is prefill-shaped (more than 64 rows), and the sm_80
    path ("sm80": mma.sync) otherwise; the Hopper path splits KV like the sm_80 path (automatic
    bound from ``num_splits_heuristic`` with the Hopper tile, or the forced ``num_splits``).
    "sm80" or "sm90a" forces one (a forced "sm90a" that cannot run the call raises ValueError
    with the reason).  An explicit
    ``tile`` belongs to the sm_80 path unless ``mainloop="sm90a"``.  ``tma_ok``: q/k/v strides
    that TMA can address.  ``page_size``: tokens per page of a paged cache (0 = unknown), which
    picks the Hopper path's K/V loads (``sm90_options``).  ``sm90_opts``: the Hopper mainloop's
    options (None: ``SM90_OPTS``).

    Raises ValueError when the variant does not fit the arch (shared memory) or a value is bad.
    """
    if num_heads_kv < 1 or num_heads_q % num_heads_kv:
        raise ValueError(f"num_heads_q ({num_heads_q}) must be a multiple of num_heads_kv ({num_heads_kv})")
    visible_keys = min(max_seqlen_k, window_span + max(max_seqlen_q, 1)) if window_span >= 0 else 0
    if mainloop is not None and mainloop not in MAINLOOPS:
        raise ValueError(f"mainloop must be None or one of {MAINLOOPS}, got {mainloop!r}")
    if num_splits < 0 or num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits must be in [0, {MAX_SPLITS}] (0 = automatic), got {num_splits}")
    qpk = num_heads_q // num_heads_kv
    asked_pack = pack_gqa   # (the Hopper path decides its own packing from what the caller asked)
    forced_pack = sm90_pack if sm90_pack is not None else SM90_PACK_GQA
    auto_pack = forced_pack is None and asked_pack is not True   # (then the tile decides too: sm90_pack_auto)
    sm90_pack_on = (bool(forced_pack) if forced_pack is not None
                    else asked_pack is True or sm90_pack_auto(qpk, mean_q))
    if mainloop == "sm90a" and pack_gqa is None:
        pack_gqa = False
    pack = default_pack_gqa(qpk, max_seqlen_q) if pack_gqa is None else bool(pack_gqa) and qpk > 1
    rows = max(1, max_seqlen_q) * (qpk if pack else 1)
    tile_class = tile_class_for_rows(rows, pack)
    extra = paged or softcap or mask == "local" or alibi or variant is not None
    # the Hopper path packs GQA itself (sm90_pack_on): a packed call whose rows make prefill tiles enters it
    hopper_class = tile_class_for_rows(rows, pack and not sm90_pack_on)
    if mainloop == "sm90a" or (mainloop is None and tile is None and hopper_class == "prefill"):
        # pack-GQA on the Hopper kernel (16-bit q and K/V, or FP8 q, K and V on the FP8 tensor-core tile up to
        # SM90_FP8_PACK_MAX_HEAD_DIM; a user variant too, automatically where SM90_VARIANT_PACK_AUTO): asked
        # for, or automatic
        fp8_call = bool(kv_dtype or q_dtype)
        # (ALiBi packs with per-row slopes; with a soft-cap above head dim 128 the packed kernel spilled 8 bytes)
        no_pack = (f"pack-GQA with a user variant above head dim {SM90_VARIANT_PACK_MAX_HEAD_DIM} (the packed "
                   f"kernels spill; SM90_VARIANT_PACK_MAX_HEAD_DIM)"
                   if variant is not None and max(head_dim, head_dim_v) > SM90_VARIANT_PACK_MAX_HEAD_DIM
                   else "pack-GQA with a user variant (not chosen automatically: SM90_VARIANT_PACK_AUTO)"
                   if variant is not None and auto_pack and not sm90_pack_auto(qpk, mean_q, variant=True)
                   else f"pack-GQA with an FP8 K/V cache ({kv_dtype}) and a 16-bit q"
                   if fp8_call and not (kv_dtype and q_dtype)
                   else "pack-GQA with ALiBi and a soft-cap above head dim 128 (the packed kernel spills)"
                   if alibi and softcap and max(head_dim, head_dim_v) > 128
                   else "pack-GQA, turned off for the Hopper kernel (KERNELGEN_SM90_PACK_GQA)"
                   if forced_pack is not None and not forced_pack else "")
        # a user variant's second spill twin (variant_spills 2: its packed two-warpgroup kernel without "m"
        # spilled too, selection.spills) runs unpacked on the Hopper kernel (packed two-warpgroup kernels of
        # some snippets spill where the unpacked ones do not: a windowed T5 bias at d 128, 36-48 bytes)
        # (at level 1 a pack the two-warpgroup tile cannot hold, e.g. 3 query heads a KV head on 128 rows,
        # runs unpacked on the Hopper kernel too, not on the sm_80 mainloop)
        twin = variant is not None and bool(variant_spills)
        twin_unpacked = twin and variant_spills >= 2
        want_pack = sm90_pack_on and qpk > 1 and asked_pack is not False and not no_pack and not twin_unpacked
        unsupported = sm90_unsupported(arch, head_dim, head_dim_v, mask=mask, paged=paged, softcap=softcap,
                                       pack=pack and not want_pack and not twin_unpacked, num_splits=num_splits,
                                       tma_ok=tma_ok, pack_why=no_pack)
        mma_tile = (fp8_mma_tile(head_dim, head_dim_v, softcap=softcap, local=mask == "local", nomask=mask == "none")
                    if q_dtype and kv_dtype and SM90_FP8_MMA and tile is None else None)
        # the FP8 tensor-core variant's own tile first (where it applies), then its smaller key blocks
        # for pages TMA cannot box at that block_n (SM90_FP8_MMA_PAGED_BLOCKS), else the call's usual tile
        for cand in ((mma_tile, *fp8_mma_paged_fallbacks(mma_tile, paged, nomask=mask == "none"), None)
                     if mma_tile is not None else (None,)):
            t, opts = sm90_tile_and_options(head_dim, head_dim_v, paged, page_size, tile or cand, sm90_opts, kv_dtype,
                                            heavy=sm90_heavy(softcap, alibi, variant, variant_spills),
                                            extras=bool(softcap or alibi or variant is not None))
            if cand is not None and "g" in opts:   # pages TMA cannot box at its block_n: the call's usual tile
                continue
            why = unsupported
            if not why and kv_dtype and (alibi or variant is not None or "g" in opts):
                why = (f"an FP8 K/V cache ({kv_dtype}) with " + ("ALiBi" if alibi else "a user variant"
                       if variant is not None
                       else f"pages TMA boxes do not fit (page_size {page_size}, block_n {t.block_n})"
                       if not sm90_paged_tma_fits(page_size, t.block_n)
                       else f"rows gathered through the page table (the Hopper options {opts!r} ask for 'g', "
                            f"KERNELGEN_SM90_OPTS)"))
            if mainloop == "sm90a" and why:
                raise ValueError(f"the Hopper (sm_90a) path does not support this call: {why}")
            if why:
                break
            if tile is None:
                t = variant_sm90_tile(t, opts, variant)
            mma8 = bool(SM90_FP8_MMA and q_dtype and kv_dtype and head_dim == head_dim_v and head_dim % 64 == 0
                        and t.block_n % 32 == 0 and t.block_n >= 128)
            # an FP8 call packs only on the FP8 tensor-core tile up to SM90_FP8_PACK_MAX_HEAD_DIM
            fp8_packs = not fp8_call or (mma8 and max(head_dim, head_dim_v) <= SM90_FP8_PACK_MAX_HEAD_DIM)
            # a packed Q box holds whole tokens; head dim 256 stays unpacked (SM90_PACK_MAX_HEAD_DIM)
            hpack = (want_pack and fp8_packs and t.block_m % qpk == 0
                     and max(head_dim, head_dim_v) <= SM90_PACK_MAX_HEAD_DIM
                     and (not auto_pack or sm90_pack_auto(qpk, mean_q, t.block_m, fp8_call, bool(alibi),
                                                          variant is not None)))
            if pack and not hpack and not twin:
                why = (f"pack-GQA with {qpk} query heads a KV head on a {t.block_m}-row tile" if fp8_packs else
                       f"pack-GQA of an FP8 call off the FP8 tensor-core tile at head dims up to "
                       f"{SM90_FP8_PACK_MAX_HEAD_DIM} (SM90_FP8_PACK_MAX_HEAD_DIM)")
                if mainloop == "sm90a":
                    raise ValueError(f"the Hopper (sm_90a) path does not support this call: {why}")
                break
            n = -(-max(max_seqlen_k, 1) // t.block_n)
            if num_splits > 0:  # forced: never more splits than key blocks (sizes the partials)
                max_splits, forced = max(1, min(num_splits, n)), True
            else:
                probe = AttentionSpec(arch, dtype, head_dim, head_dim_v, mask, layout, t, paged=paged, softcap=softcap,
                                      mainloop="sm90a", sm90_opts=opts)
                ctas = estimated_ctas(arch, t, probe.smem_bytes(), num_sms)
                m_tiles = (num_heads_kv * max(1, -(-max(1, max_seqlen_q) * qpk // t.block_m)) if hpack
                           else num_heads_q * max(1, -(-max(1, max_seqlen_q) // t.block_m)))
                max_splits, forced = num_splits_heuristic(m_tiles, n, ctas), False
                max_splits = capped_splits(window_split_cap(max_splits, visible_keys), max_num_splits)
            split = max_splits > 1
            if cand is not None and split and fp8_mma_tile(head_dim, head_dim_v, softcap=softcap,
                                                           local=mask == "local", split=True) is None:
                continue   # the entry takes no split-KV: the call's usual tile (and its own split bound)
            opts = without_tileinfo(opts, head_dim, head_dim_v, layout, mask, paged, hpack, split, kv_dtype)
            opts = without_mask_split(with_mask_split(opts, softcap, variant, t.num_warps, fp8_call,
                                                      max(head_dim, head_dim_v), variant_spills, mma8, mask, paged),
                                      head_dim, head_dim_v, mask, alibi, hpack, mufu_logits(softcap, variant), mma8,
                                      paged)
            opts = with_ex2_fma(opts, max(head_dim, head_dim_v), softcap, variant, mma8)
            attn = AttentionSpec(arch, dtype, head_dim, head_dim_v, mask, layout, t, pack_gqa=hpack, split=split,
                                 paged=paged, softcap=softcap, mainloop="sm90a", sm90_opts=opts, alibi=alibi,
                                 variant=variant, kv_dtype=kv_dtype, fp8_mma=mma8)
            _check_smem(attn, arch)
            combine = (CombineSpec(arch, dtype, head_dim_v, row_warps=combine_row_warps(combine_rows, num_heads_q, head_dim_v, num_sms))
                       if split else None)
            return Variants(SchedulerSpec(arch=arch, layout=layout), attn, combine, max_splits, forced)
    fixed_tile = tile is not None
    tile = tile or tile_config(arch, head_dim, head_dim_v, tile_class, extra)
    if alibi and not fixed_tile and tile_class == "prefill" and max(head_dim, head_dim_v) == 128 \
            and (softcap or mask == "local" or (arch == "sm_90a" and mask == "causal")):
        # the slopes beside a window / soft-cap state and split-KV spill the 128-row tile on sm_90a,
        # and so does the causal diagonal's path there
        tile = ALIBI_HEAVY_TILE
    if not fixed_tile and tile_class == "prefill" and tile == tile_config(arch, head_dim, head_dim_v, "prefill", True) \
            and sm80_prefill_spills(arch, head_dim, head_dim_v, mask, paged, softcap, kv_dtype):
        tile = PAGED_PREFILL_TILE
    if variant is not None and not fixed_tile and tile_class == "prefill":
        tile = VARIANT_PREFILL_TILES.get(max(head_dim, head_dim_v), tile)

    def split_bound(t: TileConfig) -> tuple[int, bool]:
        if num_splits > 0:
            # a request never gets more splits than key blocks: size the partials for that
            return max(1, min(num_splits, -(-max(max_seqlen_k, 1) // t.block_n))), True
        probe = AttentionSpec(arch, dtype, head_dim, head_dim_v, mask, layout, t, pack, False, paged, softcap)
        sched_heads = num_heads_kv if pack else num_heads_q
        m = max(1, -(-rows // t.block_m))
        n = -(-max(max_seqlen_k, 0) // t.block_n)
        bound = num_splits_heuristic(sched_heads * m, n, estimated_ctas(arch, t, probe.smem_bytes(), num_sms))
        if t.num_warps == 1 and t.block_m <= 16:
            bound = decode_split_bound(bound, n, total_q=total_q, num_heads_q=num_heads_q, head_dim_v=head_dim_v)
        return capped_splits(window_split_cap(bound, visible_keys), max_num_splits), False

    max_splits, forced = split_bound(tile)
    if max_splits > 1 and not fixed_tile and not extra:  # split state needs the lighter tile, if any
        lighter = tile_config(arch, head_dim, head_dim_v, tile_class, True)
        if lighter != tile:
            tile = lighter
            max_splits, forced = split_bound(tile)
    split = max_splits > 1
    attn = AttentionSpec(arch, dtype, head_dim, head_dim_v, mask, layout, tile, pack, split, paged, softcap,
                         alibi=alibi, variant=variant)
    if kv_dtype:
        attn = dataclasses.replace(attn, kv_dtype=kv_dtype, tile=fp8_tile(tile, head_dim, head_dim_v))
    _check_smem(attn, arch)
    combine = (CombineSpec(arch, dtype, head_dim_v, row_warps=combine_row_warps(combine_rows, num_heads_q, head_dim_v, num_sms))
               if split else None)
    return Variants(SchedulerSpec(arch=arch, layout=layout), attn, combine, max_splits, forced)


def _check_smem(attn: AttentionSpec, arch: str) -> None:
    limit = SMEM_LIMIT.get(arch, 101376)
    if attn.smem_bytes() > limit:
        raise ValueError(f"{attn.name} needs {attn.smem_bytes()} bytes of shared memory; {arch} allows {limit}")


#: Query rows of a short-query (decode-class) tile in a fused launch: the one-warp decode tile.
SHORT_TILE_ROWS = 16


def short_query_tokens(num_heads_q: int, num_heads_kv: int) -> int:
    """Default request-class threshold of a fused (mixed-batch) launch: requests with at most this
    many query tokens run as one-warp decode tiles (16 rows: tokens x the pack-GQA factor when the
    query heads of a KV head fit one tile), the others as prefill tiles."""
    qpk = num_heads_q // max(num_heads_kv, 1)
    return max(1, SHORT_TILE_ROWS // qpk) if 1 < qpk <= SHORT_TILE_ROWS else SHORT_TILE_ROWS


def _short_class(arch, dtype, head_dim, head_dim_v, num_heads_q, num_heads_kv, mask, layout, max_seqlen_k, paged,
                 softcap, short_max_q, num_sms, alibi=False, variant=None, kv_dtype="", window_span=-1,
                 max_num_splits=0):
    """(threshold, the short class's sm_80 decode variants) of a mixed batch, or (threshold, None)
    when the threshold is below 1 or its tiles would not be one-warp decode tiles.  ``max_num_splits``:
    the caller's cap on the short class's automatic split bound (``choose``'s)."""
    thr = short_query_tokens(num_heads_q, num_heads_kv) if short_max_q is None else int(short_max_q)
    if thr < 1:
        return thr, None
    short = choose(arch, dtype, head_dim, head_dim_v, num_heads_q=num_heads_q, num_heads_kv=num_heads_kv, mask=mask,
                   layout=layout, max_seqlen_q=thr, max_seqlen_k=max_seqlen_k, paged=paged, softcap=softcap,
                   num_sms=num_sms, mainloop="sm80", alibi=alibi, variant=variant, kv_dtype=kv_dtype,
                   window_span=window_span, max_num_splits=max_num_splits)
    return thr, (short if short.attention.tile.num_warps == 1 else None)


def choose_fused(arch: str, dtype: str, head_dim: int, head_dim_v: int, *, num_heads_q: int, num_heads_kv: int,
                 mask: str = "none", layout: str = "soa", max_seqlen_k: int, paged: bool = False,
                 softcap: bool = False, short_max_q: int | None = None, num_sms: int = 132,
                 kv_dtype: str = "", max_num_splits: int = 0) -> FusedVariants | None:
    """The fused launch of a batch that may mix long-query and short-query requests, or None when
    it does not apply: a sliding window (the fused window variants do not fit the registers
    without spilling), a threshold whose short tiles would not be one-warp decode tiles, or a
    pair of tiles whose shared memory does not fit the arch.

    The long class gets the prefill tile (the two-stage one, as with split-KV), no split, and
    records row_splits when the short class splits; the short class gets what ``choose`` gives a
    decode batch of ``short_max_q`` query tokens (pack-GQA and the automatic split bound).
    ``kv_dtype``: an FP8 cache: both variants' FP8 forms (the long tile ``fp8_tile``'s, the short
    one the FP8 decode tile ``choose`` gives).  ``max_num_splits``: a cap on the short class's
    automatic split bound (``choose``'s; 1: the short class unsplit, no row_splits, no combine).
    """
    if mask == "local":
        return None
    thr, short = _short_class(arch, dtype, head_dim, head_dim_v, num_heads_q, num_heads_kv, mask, layout,
                              max_seqlen_k, paged, softcap, short_max_q, num_sms, kv_dtype=kv_dtype,
                              max_num_splits=max_num_splits)
    if short is None:
        return None
    long_tile = tile_config(arch, head_dim, head_dim_v, "prefill", True)
    if arch == "sm_90a" and paged and softcap and max(head_dim, head_dim_v) == 128:
        # the fused kernel compiled for sm_90a spilled 28-48 bytes there with the 128-row long tile (the
        # other paged sm_90a builds of it did not, NVRTC 13.0: sm80_prefill_spills is the standalone rule)
        long_tile = PAGED_PREFILL_TILE
    if kv_dtype:
        long_tile = fp8_tile(long_tile, head_dim, head_dim_v)
    long = AttentionSpec(arch, dtype, head_dim, head_dim_v, mask, layout, long_tile, False, False, paged, softcap,
                         row_splits=short.attention.split, kv_dtype=kv_dtype)
    fused = FusedAttentionSpec(long, short.attention)
    if fused.smem_bytes() > SMEM_LIMIT.get(arch, 101376):
        return None
    return FusedVariants(short.scheduler, fused, short.combine, short.max_splits, short.forced_splits, thr)


def choose_pair(arch: str, dtype: str, head_dim: int, head_dim_v: int, *, num_heads_q: int, num_heads_kv: int,
                mask: str = "none", layout: str = "soa", max_seqlen_q: int, max_seqlen_k: int, paged: bool = False,
                softcap: bool = False, short_max_q: int | None = None, num_sms: int = 132, page_size: int = 0,
                tma_ok: bool = True, sm90_opts: str | None = None, alibi: bool = False,
                variant: VariantCode | None = None, kv_dtype: str = "",
                variant_spills: int = 0, window_span: int = -1, max_num_splits: int = 0,
                q_dtype: str = "") -> PairVariants | None:
    """A mixed batch's two kernels on sm_90a, or None where they do not apply (another arch, a
    long class the Hopper path cannot run, or a threshold whose short tiles are not decode tiles).

    ``kv_dtype``: an FP8 cache ("e4m3" / "e5m2"): the long class takes the Hopper path's FP8 K/V
    variant (``choose``'s, with a 16-bit q: None where the Hopper path does not take the call, e.g.
    pages TMA cannot box) and the short class the FP8 decode tile (conversion in registers).  Run
    as one class instead, the Hopper kernel gave each decode request 128-row tiles of one row:
    ``mixed_trace_fp8`` (3 chunks + 192 decodes) ran 4x slower than its two calls in turn.

    The classes in turn: the long class's tiles on the Hopper kernel and then the short class's
    on the sm_80 decode kernel, each from its own scheduler metadata (the same two-class
    scheduling as the fused launch), on the caller's stream.  A mixed call on sm_90a takes the
    one-launch Hopper fused kernel (``choose_fused_hopper``, built from these variants) where it
    applies and this pair where it does not (head_dim_v above 128).  On an H200 the sm_80 fused
    launch (``choose_fused``) lost to this pair once the long class took the Hopper kernel
    (``mixed_trace``: 5856 us fused against 5456 us in turn, docs/dev/perf-log.md).
    ``max_num_splits``: a cap on the short class's automatic split bound (as ``choose_fused``).
    ``q_dtype``: "e4m3" with an FP8 cache for a q that the call quantised from its 16-bit q
    (``quantize_q``): the long class takes ``choose``'s FP8 tensor-core variant
    (``AttentionSpec.fp8_mma``, on the e4m3 q) and the short class the FP8 decode tile on the 16-bit
    q; None where the long class's variant is not the FP8 tensor-core one.
    """
    if arch != "sm_90a" or (q_dtype and not kv_dtype):
        return None
    thr, short = _short_class(arch, dtype, head_dim, head_dim_v, num_heads_q, num_heads_kv, mask, layout,
                              max_seqlen_k, paged, softcap, short_max_q, num_sms, alibi, variant, kv_dtype,
                              window_span, max_num_splits)
    if short is None:
        return None
    if kv_dtype:
        try:
            lv = choose(arch, dtype, head_dim, head_dim_v, num_heads_q=num_heads_q, num_heads_kv=num_heads_kv, mask=mask,
                        layout=layout, max_seqlen_q=max(max_seqlen_q, thr + 1), max_seqlen_k=max_seqlen_k, paged=paged,
                        softcap=softcap, pack_gqa=False, num_splits=1, num_sms=num_sms, mainloop="sm90a",
                        tma_ok=tma_ok, page_size=page_size, sm90_opts=sm90_opts, alibi=alibi, variant=variant,
                        kv_dtype=kv_dtype, q_dtype=q_dtype)
        except ValueError:   # the Hopper path does not take the call: one class
            return None
        if q_dtype and not lv.attention.fp8_mma:
            return None
        attn = dataclasses.replace(lv.attention, row_splits=short.attention.split)
        return PairVariants(Variants(short.scheduler, attn, None, 1, True), short, thr)
    if sm90_unsupported(arch, head_dim, head_dim_v, mask=mask, paged=paged, softcap=softcap, pack=False,
                        num_splits=1, tma_ok=tma_ok):
        return None
    t, opts = sm90_tile_and_options(head_dim, head_dim_v, paged, page_size, sm90_opts=sm90_opts,
                                    heavy=sm90_heavy(softcap, alibi, variant, variant_spills),
                                    extras=bool(softcap or alibi or variant is not None))
    t = variant_sm90_tile(t, opts, variant)
    opts = without_tileinfo(opts, head_dim, head_dim_v, layout, mask, paged, False, False)
    opts = without_mask_split(with_mask_split(opts, softcap, variant, t.num_warps, bool(kv_dtype),
                                              max(head_dim, head_dim_v), variant_spills),
                              head_dim, head_dim_v, mask, alibi, False, mufu_logits(softcap, variant))
    opts = with_ex2_fma(opts, max(head_dim, head_dim_v), softcap, variant, False)
    attn = AttentionSpec(arch, dtype, head_dim, head_dim_v, mask, layout, t, paged=paged, softcap=softcap,
                         row_splits=short.attention.split, mainloop="sm90a", sm90_opts=opts, alibi=alibi,
                         variant=variant)
    _check_smem(attn, arch)
    long = Variants(short.scheduler, attn, None, 1, True)
    return PairVariants(long, short, thr)


#: CTAs of the Hopper fused mixed-batch launch that start on the short (decode) queue, as a fraction
#: of the SMs.  Decode tiles are bound by memory bandwidth, so a few SMs with many bytes in flight
#: each reach most of the H200's: the work they take in parallel with the long class costs
#: only those SMs' time (docs/dev/perf-log.md, "mixed batches: one Hopper launch").  Either kind of
#: CTA takes the other queue's tiles once its own is empty, so the choice moves work between
#: phases, never leaves an SM idle.  ``KERNELGEN_MIXED_SHORT_CTAS`` (an int) overrides it
#: (``Settings.mixed_short_ctas``).
#: 1/3 (44 of an H200's 132) since the short-first CTAs sit on SMs spread over the SM ids
#: (``fused.short_first_sms``): there the decode tiles read about 70 GB/s an SM beside the prefill
#: instead of 53, and the bench's mixed batch balances at 44-48 (``benchmarks/experiments/mixed_timeline.py``; heavy
#: prefill batches at 40); it was 0.425 (56) with the CTAs chosen by blockIdx, 0.30 while the paged
#: prefill ran at 300 TFLOP/s.
SM90_MIXED_SHORT_FRACTION = 1 / 3
#: The same on an FP8 cache (``kv_dtype``): its keys-as-rows decode tile (``SM90_FUSED_SHORT_ROWS_FP8``)
#: reads about 50 GB/s an SM beside the prefill, the prefill is the bulk of the SM-time, and a quarter
#: (33 of 132) balanced best: H100, seventieth session, ``mixed_sweep.py --kv-dtype e4m3 --short-ctas``,
#: x serial, three processes: bench (mixed_trace_fp8's batch) k33 0.816 / 0.839 / 0.834 against k44
#: 0.848 / 0.860 / 0.851 (k22 0.871, k26 0.838); 4 chunks of 4096 + 256 decodes flat (0.92-0.93);
#: 1 chunk of 512 + 64 decodes 0.968 against 0.963.
SM90_MIXED_SHORT_FRACTION_FP8 = 1 / 4
#: The same with the long class on the FP8 tensor cores (``quantize_q``: ``AttentionSpec.fp8_mma``), whose
#: prefill takes about 0.6x the SM-time of the bf16-q one, so the decode tiles' share of the work grows:
#: H100, seventy-second session, bench entry ``mixed_trace_fp8_qq`` x its serial peer: k33 0.858, k44
#: 0.819 / 0.826, k55 0.822, k66 0.831, k80 0.850.
SM90_MIXED_SHORT_FRACTION_FP8_MMA = 1 / 3


def sm90_mixed_short_ctas(num_sms: int, override: int | None = None, fp8: bool = False,
                          fp8_mma: bool = False) -> int:
    """CTAs of a Hopper fused mixed-batch launch on ``num_sms`` SMs that start on the short queue:
    ``override`` (``Settings.mixed_short_ctas``, 0..num_sms) when given, else a
    ``SM90_MIXED_SHORT_FRACTION`` share (``SM90_MIXED_SHORT_FRACTION_FP8`` on an FP8 cache: ``fp8``;
    ``SM90_MIXED_SHORT_FRACTION_FP8_MMA`` with the long class on the FP8 tensor cores: ``fp8_mma``),
    at least 1."""
    if override is not None:
        return override
    share = (SM90_MIXED_SHORT_FRACTION_FP8_MMA if fp8_mma else SM90_MIXED_SHORT_FRACTION_FP8 if fp8
             else SM90_MIXED_SHORT_FRACTION)
    return max(1, round(num_sms * share))


#: K/V pipeline stages of the decode tile in the Hopper fused kernel.  The tiles of the CTAs that
#: start on the short queue must pull a whole SM's share of bandwidth, and an SM's bytes in flight
#: are its warps' slices times (stages - 1) / stages: deeper rings (fewer warps, each with more
#: blocks in flight) beat the standalone decode kernel's two stages there.
SM90_FUSED_SHORT_STAGES = 2

#: K/V pipeline stages of the FP8-cache decode tile (K/V converted in registers, FP8_REGS) in the
#: Hopper fused kernel.  Its slices are 4 KB a stage at head dim 128 (one byte an element, no 16-bit
#: tile), so deeper rings keep all 12 warps of a short-first CTA where the 16-bit tile's could not;
#: they still lose (H100, ``mixed_sweep.py --kv-dtype e4m3 --stages 2,4``, seventieth session, x serial:
#: bench 0.798 / 0.855 with 8 rows, 0.894 / 0.908 with 16; heavy 0.918 / 0.933, 0.955 / 0.961).
SM90_FUSED_SHORT_STAGES_FP8 = 2
#: Query rows of that FP8 decode tile: 8, the keys-as-rows tile with the 16-row tile's conversion in
#: registers and permutations (templates/attention/tile_kt_sm80.cuh: half the MMAs, exponentials and
#: O registers; no spill in the fused kernel, where the 16-row tile's spilled 40-88 bytes), or 16.
#: ``KERNELGEN_SM90_SHORT_ROWS`` overrides it.  H100, seventieth session, x serial (mixed_trace_fp8's
#: batch, 44 short-first CTAs): 8 rows 0.798-0.860 against 0.894 with 16 (bench), 0.918-0.932 against
#: 0.955 (4 chunks of 4096 + 256 decodes); the bench entry 0.835.  Head dims above 128 take 16.
SM90_FUSED_SHORT_ROWS_FP8 = 8

#: Query rows of the decode tile in the Hopper fused kernel: 8 takes the keys-as-rows tile
#: (``TileConfig.keys_as_rows``, templates/attention/tile_kt_sm80.cuh: keys as the MMA's M, the
#: tile's rows as its N; half the MMAs, exponentials and O rescaling of the 16-row tile, which at
#: 4 query heads a KV head fills 4 of its 16 rows), 16 the sm_80 path's 16-row tile.  Head dims
#: above 128 always take 16.  Requests of more than 8 rows (tokens x query heads a KV head) run as
#: two or more 8-row tiles.  ``KERNELGEN_SM90_SHORT_ROWS`` overrides it (``Settings.sm90_short_rows``).
SM90_FUSED_SHORT_ROWS = 8


def choose_fused_hopper(arch: str, dtype: str, head_dim: int, head_dim_v: int, *, num_heads_q: int,
                        num_heads_kv: int, mask: str = "none", layout: str = "soa", max_seqlen_q: int,
                        max_seqlen_k: int, paged: bool = False, softcap: bool = False,
                        short_max_q: int | None = None, num_sms: int = 132, page_size: int = 0,
                        tma_ok: bool = True, short_stages: int | None = None,
                        short_block_n: int | None = None, short_rows: int | None = None,
                        sm90_opts: str | None = None, kv_dtype: str = "", window_span: int = -1,
                        max_num_splits: int = 0, q_dtype: str = "") -> FusedVariants | None:
    """The one-launch kernels of a mixed batch on sm_90a: the Hopper long variant and the sm_80
    one-warp decode variant of ``choose_pair`` in one persistent kernel (``FusedAttentionSpec``
    with a Hopper long variant, templates/attention/fwd_fused_sm90.cu.j2), or None where
    ``choose_pair`` gives None, head_dim_v is above ``FusedAttentionSpec.SM90_FUSED_MAX_DV`` (the
    consumers' registers spill) or no short tile fits beside the long variant's shared memory.

    The decode tile has ``short_rows`` query rows (default ``SM90_FUSED_SHORT_ROWS``; 8 is the
    keys-as-rows tile, head dims <= 128 only, with 16-key blocks), ``short_stages`` K/V stages
    (``SM90_FUSED_SHORT_STAGES``) and, for 16 rows, ``short_block_n`` keys a block.

    ``kv_dtype``: an FP8 cache: the long variant is ``choose_pair``'s FP8 one (producer warps 1-3
    converting its landing stages) and the FP8 decode tile (16 keys, K/V converted in registers)
    with ``short_stages`` stages (``SM90_FUSED_SHORT_STAGES_FP8``) and ``short_rows`` rows
    (``SM90_FUSED_SHORT_ROWS_FP8``; 8: the keys-as-rows tile with the conversion in registers, head dims
    <= 128); ``short_block_n`` does not apply.  ``max_num_splits``: a
    cap on the short class's automatic split bound (as ``choose_fused``).  ``q_dtype``: "e4m3" for a
    q that the call quantised from its 16-bit q (``quantize_q``): the long variant is the FP8
    tensor-core one on the e4m3 copy (``choose_pair``'s ``q_dtype``; None where it is not), the short
    one reads the 16-bit q."""
    pv = choose_pair(arch, dtype, head_dim, head_dim_v, num_heads_q=num_heads_q, num_heads_kv=num_heads_kv,
                     mask=mask, layout=layout, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, paged=paged,
                     softcap=softcap, short_max_q=short_max_q, num_sms=num_sms, page_size=page_size, tma_ok=tma_ok,
                     sm90_opts=sm90_opts, kv_dtype=kv_dtype, window_span=window_span, max_num_splits=max_num_splits,
                     q_dtype=q_dtype)
    if pv is None or head_dim_v > FusedAttentionSpec.SM90_FUSED_MAX_DV:
        return None
    short = pv.short.attention
    if kv_dtype:
        st = SM90_FUSED_SHORT_STAGES_FP8 if short_stages is None else int(short_stages)
        rows = SM90_FUSED_SHORT_ROWS_FP8 if short_rows is None else int(short_rows)
        if rows not in (8, 16):
            raise ValueError(f"short_rows must be 8 or 16, got {rows}")
        if rows == 8 and max(head_dim, head_dim_v) > 128:
            rows = 16
        short = dataclasses.replace(short, tile=dataclasses.replace(short.tile, num_stages=st, block_m=rows))
    else:
        st = SM90_FUSED_SHORT_STAGES if short_stages is None else int(short_stages)
        bn = short.tile.block_n if short_block_n is None else int(short_block_n)
        rows = SM90_FUSED_SHORT_ROWS if short_rows is None else int(short_rows)
        if rows not in (8, 16):
            raise ValueError(f"short_rows must be 8 or 16, got {rows}")
        if rows == 8 and max(head_dim, head_dim_v) > 128:
            rows = 16
        short = dataclasses.replace(short, tile=dataclasses.replace(short.tile, num_stages=st, block_n=bn,
                                                                    block_m=rows))
    long = pv.long.attention
    if long.tile.num_warps != 8:   # the fused kernel's long variant has two consumer warpgroups
        long = dataclasses.replace(long, tile=dataclasses.replace(long.tile, block_m=128, num_warps=8))
    if set("tmx") & set(long.sm90_opts):   # (options "t", "m" and "x" are the standalone kernel's only)
        long = dataclasses.replace(long, sm90_opts="".join(o for o in long.sm90_opts if o not in "tmx"))
    f = FusedAttentionSpec(long, short)
    if f.short_tiles_first < 1 or f.short_tiles_after < 1 or f.smem_bytes() > SMEM_LIMIT[arch]:
        return None
    s = pv.short
    return FusedVariants(s.scheduler, f, s.combine, s.max_splits, s.forced_splits, pv.short_max_q)


def attention_spec(arch, dtype, head_dim, head_dim_v, causal, layout, tile: TileConfig | None = None,
                   mainloop: str | None = None) -> AttentionSpec:
    """The plain prefill attention spec (no pack, split, paging or softcap)."""
    return specs_for(arch, dtype, head_dim, head_dim_v, causal, layout, tile, mainloop)[1]


def scheduler_spec(arch: str, layout: str) -> SchedulerSpec:
    return SchedulerSpec(arch=arch, layout=layout)


def specs_for(arch, dtype, head_dim, head_dim_v, causal, layout, tile: TileConfig | None = None,
              mainloop: str | None = None):
    """(scheduler spec, attention spec) of a plain prefill call: ``choose`` with one query head
    per KV head, long queries and no split (on sm_90a the Hopper path where it applies, unless
    ``mainloop`` or ``tile`` says otherwise)."""
    v = choose(arch, dtype, head_dim, head_dim_v, num_heads_q=1, num_heads_kv=1,
               mask="causal" if causal else "none", layout=layout, max_seqlen_q=4096, max_seqlen_k=4096,
               num_splits=1, tile=tile, mainloop=mainloop)
    return v.scheduler, v.attention
