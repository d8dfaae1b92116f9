// ---- attention/mainloop_sm90.cuh: TMA producer, wgmma GEMMs and the consumer's key-block loop ----
// Pipeline (all on mbarriers, common/tma.cuh): the producer warp loads, per tile with key blocks,
// Q once (q_full / q_empty) and then K and V of each key block into STAGES ring slots
// (k_full / k_empty, v_full / v_empty); key blocks are walked from the last (n_hi - 1) down to
// n_lo, so the block that needs the key-length or causal mask comes first.  Both sides count
// slots and phases the same way over the whole persistent loop.

// Tensor maps of the launch (built on the host with cuTensorMapEncodeTiled, kernelgen/tma.py):
// 3-D (head_dim, heads, tokens) views of q, k and v, boxes of 64 x 1 x BM (q) or BN (k, v) rows,
// 128-byte swizzle; HALVES boxes a Q or K row, VHALVES a V row (columns past the head dim read as
// zeros: head dim 96's second box).  Paged K/V (PAGED, not GATHER): 4-D (head_dim, heads, page
// slot, page) views of the caches, boxes of 64 x 1 x min(page_size, BN) x 1 (tma_load_paged).
struct TmaMaps {
  const void* q;
  const void* k;
  const void* v;
};

{% if v.pack_gqa %}
// Pack-GQA (PACK_GQA): the qpk query heads of one KV head share a tile; its rows are (token, head)
// pairs, row r = (token r / qpk, query head kv_head * qpk + r % qpk) as on the sm_80 path, and the
// scheduler's heads (sched_heads) are the KV heads.  Q is one TMA box of qpk heads x BM / qpk tokens
// a 64-column half (kernels/tma.py, attention_maps: BM % qpk == 0), which lands in that row order.
__device__ __forceinline__ int sched_heads(const AttnParams& p) { return PACK_GQA ? p.num_heads_kv : p.num_heads_q; }
__device__ __forceinline__ int tile_kv_head(const TileInfo& ti, int qpk) { return PACK_GQA ? ti.head : ti.head / qpk; }
// Packed rows are divided by qpk without a division instruction (the producer warps have 24
// registers, and a run-time division a tile spilled them at head dims 192 and soft-capped 64):
// qm = 2^16 / qpk + 1 (qpk_magic, once a kernel) gives x / qpk = (x * qm) >> 16 exactly for
// x * qpk < 2^16, and every number divided is below BM (row0 is a multiple of BM and of qpk).
__device__ __forceinline__ unsigned qpk_magic(int qpk) { return PACK_GQA ? 65536u / (unsigned)qpk + 1u : 0u; }
__device__ __forceinline__ int div_qpk(int x, unsigned qm) { return (int)(((unsigned)x * qm) >> 16); }
// the query positions of a tile's first and last valid rows (the rows themselves unless PACK_GQA)
__device__ __forceinline__ int tile_pos_first(const TileInfo& ti, unsigned qm) {
  return PACK_GQA ? ti.row0 / BM * div_qpk(BM, qm) : ti.row0;
}
__device__ __forceinline__ int tile_pos_last(const TileInfo& ti, unsigned qm) {
  return PACK_GQA ? tile_pos_first(ti, qm) + div_qpk(ti.valid_rows - 1, qm) : ti.row0 + ti.valid_rows - 1;
}
// the Q box's head and token coordinates of tile ti
__device__ __forceinline__ int q_head0(const TileInfo& ti, int qpk) { return PACK_GQA ? ti.head * qpk : ti.head; }
__device__ __forceinline__ int q_token0(const TileInfo& ti, unsigned qm) { return ti.q_start + tile_pos_first(ti, qm); }
{% endif %}

// With split-KV, split `split` of `num_splits` covers one contiguous share of the tile's key
// blocks [n_lo, n_hi) (the sm_80 path's rule, tile_sm80.cuh): ceil((n_hi - n_lo) / num_splits)
// blocks each, the last shares shorter or empty (n_lo == n_hi: the producer loads nothing, the
// consumers write O = 0 and LSE = -inf, which the combine kernel weighs 0).  Producer and
// consumers compute the same range, so they walk the same pipeline slots.
__device__ __forceinline__ void split_block_range(int split, int num_splits, int& n_lo, int& n_hi) {
  if (SPLIT && num_splits > 1) {
    const int per = n_hi > n_lo ? (n_hi - n_lo + num_splits - 1) / num_splits : 0;
    n_lo = min(n_lo + split * per, n_hi);
    n_hi = min(n_lo + per, n_hi);
  }
}

// The mask of tile ti (common/mask.cuh): its request's key count, the bottom-right diagonal offset
// and, for a local mask, the call's window (p.window_left / p.window_right, -1 = unbounded).  The
// producer and the consumers take the tile's key-block range from it, so both walk the same blocks.
__device__ __forceinline__ MaskInfo tile_mask(const AttnParams& p, const TileInfo& ti) {
  MaskInfo mi;
  mi.seqlen_k = ti.seqlen_k;
  mi.offset = ti.seqlen_k - ti.seqlen_q;
  mi.left = LOCAL ? p.window_left : -1;
  mi.right = LOCAL ? p.window_right : -1;
  return mi;
}

// Paged TMA (PAGED, not GATHER): the BN keys of a request from key0 on, as NB boxes of
// rows = min(page_size, BN) keys (the 4-D map's box), each inside one page: page_size a multiple of
// BN (one box a 64-column half, starting at key0's slot), or BN a multiple of page_size with
// page_size a multiple of 8 (NB = BN / page_size boxes from slot 0, each starting on a 1024-byte
// swizzle atom).  The whole producer warp takes part (TMA_WARPS warps for 16-bit K/V: box
// b = lane * TMA_WARPS + pw): each lane looks up the page of its box (one independent page-table
// load a lane, issued before the slot wait and kept for V) and issues that box's TMA copies, so a
// block costs one load latency, not NB dependent ones in a row.  Boxes past
// the request's last page (last_pi) load that page again (rows past seqlen_k are masked and their V
// rows zeroed), so no page-table entry past seqused_k is read.
static_assert(BN <= 32 * 8, "paged TMA: one box a producer lane, boxes of at least 8 keys");
struct PagedBoxes {
  int page;  // this lane's page (box < nb)
  int slot;  // first slot of every box of the block
  int nb;    // boxes a block
  int rows;  // keys a box
  int box;   // this lane's box: lane tw + pw (pw: the producer warp, tw: the warps that issue)
};
__device__ __forceinline__ PagedBoxes paged_boxes(const int* page_row, int page_size, int key0, int last_pi, int lane,
                                                  int pw = 0, int tw = 1) {
  PagedBoxes pb;
  pb.rows = min(page_size, BN);
  pb.nb = BN / pb.rows;
  const int pi0 = key0 / page_size;
  pb.slot = key0 - pi0 * page_size;
  pb.box = pw < tw ? lane * tw + pw : BN;  // (BN: no box)
  pb.page = pb.box < pb.nb ? page_row[min(pi0 + pb.box, last_pi)] : 0;
  return pb;
}
// NH: 64-column boxes a row (HALVES for K, VHALVES for V); HALF_BYTES apart in shared memory, rows
// of ROW_BYTES (16-bit slots: KV_HALF and 128; FP8 landing stages: K8_HALF and 64).
template <int NH, int HALF_BYTES = KV_HALF, int ROW_BYTES = 128>
__device__ __forceinline__ void tma_load_paged(u32 dst, const void* map, u32 bar, int kv_head, const PagedBoxes& pb,
                                               int lane) {
  if (pb.box < pb.nb) {
#pragma unroll
    for (int h = 0; h < NH; ++h)
      tma_load_4d(dst + h * HALF_BYTES + (u32)(pb.box * pb.rows * ROW_BYTES), map, bar, h * 64, kv_head, pb.slot,
                  pb.page);
  }
}

__device__ __forceinline__ void release(u32 bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

// A warp's read of the tile index in slot `slot` (after its tile_full wait; release(tile_empty)
// follows): lane 0 reads it and passes it on, so the only shared-memory read before the slot is
// given back is the arriving lane's own.  (All lanes reading, then __syncwarp and lane 0's arrive,
// is ordered too, but compute-sanitizer's racecheck reported the producer's next write of the slot
// against the other lanes' reads: 1840 hazards on a split call with several tiles a CTA.)
__device__ __forceinline__ int take_tile(const volatile int* s_tile, int slot, int lane) {
  int t = 0;
  if (lane == 0) t = s_tile[slot];
  return __shfl_sync(0xffffffffu, t, 0);
}

{% if "t" in v.sm90_opts or tile_s %}
// take_tile through a shared-space address (option "t": no generic pointer live in the producer;
// the consumers of 16-bit causal d 256: tile_sm90.cuh's tile_s, the same condition)
__device__ __forceinline__ int take_tile_s(u32 sb, int slot, int lane) {
  int t = 0;
  if (lane == 0) asm volatile("ld.shared.s32 %0, [%1];" : "=r"(t) : "r"(sb + OFF_TILE + 4 * slot) : "memory");
  return __shfl_sync(0xffffffffu, t, 0);
}
{% endif %}
{% if "t" in v.sm90_opts %}
// ... and its publication by the producer's lane 0: wait for the slot, write the index, arrive
__device__ __forceinline__ void publish_tile_s(u32 sb, int slot, int it, int t) {
  mbar_wait(bar_tile_empty(sb, slot), ((it >> 1) & 1) ^ 1, 1);
  st_shared_s32(sb + OFF_TILE + 4 * slot, t);
  mbar_arrive(bar_tile_full(sb, slot));
}

{% endif %}
// Tile hand-out.  A standalone launch starts CTA c on tile c and takes later tiles from the
// semaphore offset by the grid; in the fused mixed-batch kernel (QUEUE_ONLY) CTAs join the long
// queue at different times (some run decode tiles first), so every tile comes from the semaphore
// and the fused kernel resets both queues itself when its last CTA leaves.
__device__ __forceinline__ int first_tile(int* md, int lane) {
  if (!QUEUE_ONLY) return blockIdx.x;
  int t = 0;
  if (lane == 0) t = atomicAdd(&md[MD_SEMAPHORE], 1);
  return __shfl_sync(0xffffffffu, t, 0);
}
__device__ __forceinline__ int next_tile_index(int* md) {
  return atomicAdd(&md[MD_SEMAPHORE], 1) + (QUEUE_ONLY ? 0 : (int)gridDim.x);
}

// The producer warp(s) (all 32 lanes call; warp 0's lane 0 issues Q and, without paging, K and V;
// with paged K/V each lane of the TMA_WARPS warps issues its own box, tma_load_paged; warp 0 alone
// hands out the tiles): publishes tile indices to the consumers
// (two slots, tile_full / tile_empty), takes the next tile from the semaphore after issuing the
// current tile's loads, and releases the semaphore when the tiles run out.  FP8 K/V: each block's
// K and V bytes go to one landing stage (land_full / land_empty; LAND stages), which producer
// warps 1-3 convert into the 16-bit ring (producer_loop_convert).
__device__ __forceinline__ void producer_loop(const AttnParams& p, const TmaMaps& maps, int* md, int cap4, int total,
                                              u32 sb, volatile int* s_tile, int pw, int lane) {
  const int qpk = p.num_heads_q / p.num_heads_kv;
  {% if v.pack_gqa %}
  const unsigned qm = qpk_magic(qpk);
  {% endif %}
  int cursor = 0;
  int t = pw == 0 ? first_tile(md, lane) : 0;
  int stage = 0;
  u32 phase = 0, q_iter = 0;
  if (pw == 0 && lane == 0) {
    tma_prefetch_desc(maps.q);
    tma_prefetch_desc(maps.k);
    tma_prefetch_desc(maps.v);
  }
  for (int it = 0;; ++it) {
    const int slot = it & 1;
    {% if "t" in v.sm90_opts %}
    // option "t": the tile's TileInfo first (every lane: find_entry is warp-cooperative), then published
    // with its index, so the consumers' tile start is a few shared-memory loads
    if (pw == 0 && t >= total) {
      if (lane == 0) publish_tile_s(sb, slot, it, t);
      __syncwarp();
      break;
    }
    if (pw != 0) {  // (TMA_WARPS > 1) the tile index, as the consumers take it
      mbar_wait(bar_tile_full(sb, slot), (it >> 1) & 1, 7);
      t = take_tile_s(sb, slot, lane);
      release(bar_tile_empty(sb, slot), lane);
      if (t >= total) break;
    }
    cursor = find_entry(md, cap4, t, cursor);
    const TileInfo ti = tile_info(p, md, cap4, cursor, t, {{ "sched_heads(p)" if v.pack_gqa else "p.num_heads_q" }}, qpk);
    if (pw == 0) {
      if (lane == 0) {
        // TileInfo slot it & 3 held tile it - 4, whose epilogue ended before the consumers released
        // index slot (it - 2) & 1, which this producer waited for when it published tile it - 2
        put_tile_info(sb + OFF_TINFO + (it & 3) * TINFO_INTS * 4, ti);
        publish_tile_s(sb, slot, it, t);
      }
      __syncwarp();
    }
    {% else %}
    if (pw == 0) {
      if (lane == 0) {
        mbar_wait(bar_tile_empty(sb, slot), ((it >> 1) & 1) ^ 1, 1);
        s_tile[slot] = t;
        mbar_arrive(bar_tile_full(sb, slot));
      }
      __syncwarp();
    } else {  // (TMA_WARPS > 1) the tile index, as the consumers take it
      mbar_wait(bar_tile_full(sb, slot), (it >> 1) & 1, 7);
      t = take_tile(s_tile, slot, lane);
      release(bar_tile_empty(sb, slot), lane);
    }
    if (t >= total) break;
    cursor = find_entry(md, cap4, t, cursor);
    const TileInfo ti = tile_info(p, md, cap4, cursor, t, {{ "sched_heads(p)" if v.pack_gqa else "p.num_heads_q" }}, qpk);
    {% endif %}
    const MaskInfo mi = tile_mask(p, ti);
    int n_lo, n_hi;  // a key block outside the causal mask or the window is never loaded
    key_block_range(mi, {{ "tile_pos_first(ti, qm), tile_pos_last(ti, qm)" if v.pack_gqa else "ti.row0, ti.row0 + ti.valid_rows - 1" }}, n_lo, n_hi);
    {% if v.get("user") %}
    if (USER_RANGE) user_block_range(p, user_tile(ti, qpk), {{ "tile_pos_first(ti, qm), tile_pos_last(ti, qm) + 1" if v.pack_gqa else "ti.row0, ti.row0 + ti.valid_rows" }}, n_lo, n_hi);
    {% endif %}
    split_block_range(ti.split, ti.num_splits, n_lo, n_hi);
    if (n_hi > n_lo) {
      const int kv_head = {{ "tile_kv_head(ti, qpk)" if v.pack_gqa else "ti.head / qpk" }};
      if (pw == 0 && lane == 0) {
        mbar_wait(bar_q_empty(sb), (q_iter & 1) ^ 1, 2);
        mbar_arrive_expect_tx(bar_q_full(sb), Q_BYTES);
#pragma unroll
        for (int h = 0; h < HALVES; ++h)
          tma_load_3d(sb + h * Q_HALF, maps.q, bar_q_full(sb), h * 64, {{ "q_head0(ti, qpk), q_token0(ti, qm)" if v.pack_gqa else "ti.head, ti.q_start + ti.row0" }});
      }
      if (PAGED && FP8) {  // FP8 boxes into the landing stage (the whole warp: one box a lane)
        const int* page_row = static_cast<const int*>(p.page_table) + (i64)ti.b * p.page_table_stride;
        const int last_pi = (ti.seqlen_k - 1) / p.page_size;
        for (int n = n_hi - 1; n >= n_lo; --n) {
          const PagedBoxes pb = paged_boxes(page_row, p.page_size, n * BN, last_pi, lane);
          mbar_wait(bar_land_empty(sb, stage), phase ^ 1, 9);
          if (lane == 0) mbar_arrive_expect_tx(bar_land_full(sb, stage), K8_BYTES + V8_BYTES);
          __syncwarp();
          const u32 land = sb + OFF_LAND + stage * LAND_BYTES;
          tma_load_paged<HALVES, K8_HALF, 64>(land, maps.k, bar_land_full(sb, stage), kv_head, pb, lane);
          tma_load_paged<VHALVES, K8_HALF, 64>(land + K8_BYTES, maps.v, bar_land_full(sb, stage), kv_head, pb, lane);
          if (++stage == LAND) {
            stage = 0;
            phase ^= 1;
          }
        }
      } else if (FP8) {  // FP8: lane 0 loads K and V of a block into one landing stage
        if (lane == 0) {
          for (int n = n_hi - 1; n >= n_lo; --n) {
            const int key0 = ti.k_start + n * BN;
            const u32 land = sb + OFF_LAND + stage * LAND_BYTES;
            mbar_wait(bar_land_empty(sb, stage), phase ^ 1, 9);
            mbar_arrive_expect_tx(bar_land_full(sb, stage), K8_BYTES + V8_BYTES);
#pragma unroll
            for (int h = 0; h < HALVES; ++h)
              tma_load_3d(land + h * K8_HALF, maps.k, bar_land_full(sb, stage), h * 64, kv_head, key0);
#pragma unroll
            for (int h = 0; h < VHALVES; ++h)
              tma_load_3d(land + K8_BYTES + h * K8_HALF, maps.v, bar_land_full(sb, stage), h * 64, kv_head, key0);
            if (++stage == LAND) {
              stage = 0;
              phase ^= 1;
            }
          }
        }
      } else if (PAGED) {  // TMA_WARPS warps: one box a lane (tma_load_paged)
        const int* page_row = static_cast<const int*>(p.page_table) + (i64)ti.b * p.page_table_stride;
        const int last_pi = (ti.seqlen_k - 1) / p.page_size;
        // the warps that issue: TMA_WARPS where a block has at least TMA_WARPS_MIN_NB boxes, else warp 0
        // (two boxes from two warps ran 4-5 % slower than from one at pages of 64, H200)
        const int tw = p.page_size * TMA_WARPS_MIN_NB <= BN ? TMA_WARPS : 1;
        for (int n = pw < tw ? n_hi - 1 : n_lo - 1; n >= n_lo; --n) {
          const PagedBoxes pb = paged_boxes(page_row, p.page_size, n * BN, last_pi, lane, pw, tw);  // paged: k_start is 0
          mbar_wait(bar_k_empty(sb, stage), phase ^ 1, 3);
          // (another warp's boxes may complete first: the barrier's byte count goes below zero until
          // this arrival, and the phase cannot complete before it)
          if (pw == 0 && lane == 0) mbar_arrive_expect_tx(bar_k_full(sb, stage), K_BYTES);
          __syncwarp();
          tma_load_paged<HALVES>(sb + OFF_K + stage * K_BYTES, maps.k, bar_k_full(sb, stage), kv_head, pb, lane);
          mbar_wait(bar_v_empty(sb, stage), phase ^ 1, 4);
          if (pw == 0 && lane == 0) mbar_arrive_expect_tx(bar_v_full(sb, stage), V_BYTES);
          __syncwarp();
          tma_load_paged<VHALVES>(sb + OFF_V + stage * V_BYTES, maps.v, bar_v_full(sb, stage), kv_head, pb, lane);
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      } else if (lane == 0) {
        for (int n = n_hi - 1; n >= n_lo; --n) {
          const int key0 = ti.k_start + n * BN;
          mbar_wait(bar_k_empty(sb, stage), phase ^ 1, 3);
          mbar_arrive_expect_tx(bar_k_full(sb, stage), K_BYTES);
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            tma_load_3d(sb + OFF_K + stage * K_BYTES + h * KV_HALF, maps.k, bar_k_full(sb, stage), h * 64, kv_head,
                        key0);
          mbar_wait(bar_v_empty(sb, stage), phase ^ 1, 4);
          mbar_arrive_expect_tx(bar_v_full(sb, stage), V_BYTES);
#pragma unroll
          for (int h = 0; h < VHALVES; ++h)
            tma_load_3d(sb + OFF_V + stage * V_BYTES + h * KV_HALF, maps.v, bar_v_full(sb, stage), h * 64, kv_head,
                        key0);
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      ++q_iter;
    }
    if (pw == 0) {
      __syncwarp();
      int next = 0;
      if (lane == 0) next = next_tile_index(md);
      t = __shfl_sync(0xffffffffu, next, 0);
    }
  }
  if (!QUEUE_ONLY && pw == 0 && lane == 0) release_semaphore(md);
}

// S (this warpgroup's 64 rows x BN keys) = Q K^T over the head dim: QK_STEPS k16 steps, four
// per 64-column block (step i: block i / 4, 32 bytes a step inside it).
// acc0: the accumulators hold the block's bias already (ALIBI_ACC, a score_mod's USER_ACC): the
// first wgmma accumulates.
__device__ __forceinline__ void issue_qk(float (&s)[1][BN / 8][4], u32 q_base, u32 k_base, bool acc0 = false) {
  float* sf = &s[0][0][0];
  {% if v.get("fp8_mma") %}
  // FP8_MMA: D / 32 k32 steps over 64-byte column blocks (Q8: BM rows, the landing stage's K: BN
  // rows), two steps a block, both in the 64-byte swizzle.
  const WgmmaDesc dq8 = wgmma_desc2_sw64(q_base), dk8 = wgmma_desc2_sw64(k_base);
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    const int h = i >> 1, kk = i & 1;
    wgmma_ss8_n{{ v.block_n }}_e4m3_{{ v.kv_dtype }}(sf, desc_at(dq8, h * Q_HALF + kk * 32),
                                                     desc_at(dk8, h * K8_HALF + kk * 32), i != 0);
  }
  return;
  {% endif %}
  const WgmmaDesc dq = wgmma_desc2(q_base, 16, 1024), dk = wgmma_desc2(k_base, 16, 1024);
#pragma unroll
  for (int i = 0; i < QK_STEPS; ++i) {
    const int h = i >> 2, kk = i & 3;
    {{ "wgmma_ss_f16" if v.get("fp16_gemms") else "wgmma_ss" }}_n{{ v.block_n }}(sf, desc_at(dq, h * Q_HALF + kk * 32), desc_at(dk, h * KV_HALF + kk * 32), i != 0 || ALIBI_ACC || acc0);
  }
}

// An FP8 cache with a bf16 q (MMA_F16): both GEMMs run on fp16.  The producers convert K and V to
// fp16 (one cvt a pair of codes, common/fp8.cuh's fp8x4_to_f16, where a bf16 target takes four
// instructions; every e4m3 / e5m2 value is an fp16), each consumer warp moves its 16 rows of the Q
// tile to fp16 in shared memory with a power of two (q_rows_to_f16, once a tile), and P is packed
// to fp16 (finer than bf16 in [2^-14, 1], an absolute step of 2^-24 below: FlashAttention-2's P
// for fp16 inputs).
{% set mma_f16 = v.get("fp16_gemms") %}
{% set rs = "wgmma_rs_f16" if mma_f16 else "wgmma_rs" %}
constexpr bool MMA_F16 = {{ "true" if mma_f16 else "false" }};

// O (64 rows x DV) += P (registers, BN keys) V (BN x DV): BN / 16 k16 steps.
__device__ __forceinline__ void issue_pv(float (&o)[1][DV / 8][4], const u32 (&pa)[PA_N][4], u32 v_base) {
  float* of = &o[0][0][0];
  {% if v.get("fp8_mma") %}
  // FP8_MMA: BN / 32 k32 steps; V^T rows of 128 keys (128-byte swizzle), 32 bytes a step
  const WgmmaDesc dvt = wgmma_desc2(v_base, 16, 1024);
#pragma unroll
  for (int i = 0; i < BN / 32; ++i)
    wgmma_rs8_n{{ (v.head_dim_v + 63) // 64 * 64 }}_e4m3_{{ v.kv_dtype }}(of, pa[i],
                                                     desc_at(dvt, (i >> 2) * VT_HALF + (i & 3) * 32));
  return;
  {% endif %}
  const WgmmaDesc dvh = wgmma_desc2(v_base, 1024, 1024), dv = wgmma_desc2(v_base, KV_HALF, 1024);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    if (PV_HALVES) {
#pragma unroll
      for (int h = 0; h < VHALVES; ++h)
        {{ rs }}_n64(of + 32 * h, pa[kk], desc_at(dvh, h * KV_HALF + kk * 2048));
    } else {
      {{ rs }}_n{{ (v.head_dim_v + 63) // 64 * 64 }}(of, pa[kk], desc_at(dv, kk * 2048));
    }
  }
}

// Probabilities (fp32, in s) -> bf16/fp16 A fragments of P V, one per 16 keys (fp16 with MMA_F16).
{% set pk = "pack2_f16" if mma_f16 else "pack2" %}
__device__ __forceinline__ void pack_p(const float (&s)[1][BN / 8][4], u32 (&pa)[PA_N][4]) {
  {% if v.get("fp8_mma") %}
  pack_p8<BN>(s, pa);   // e4m3 A fragments of k32 (common/fp8_mma.cuh)
  return;
  {% endif %}
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    pa[kk][0] = {{ pk }}(s[0][2 * kk][0], s[0][2 * kk][1]);
    pa[kk][1] = {{ pk }}(s[0][2 * kk][2], s[0][2 * kk][3]);
    pa[kk][2] = {{ pk }}(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    pa[kk][3] = {{ pk }}(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

// A key block that runs past the request's keys holds rows of whatever follows in k/v (another
// request, or unused buffer space that may hold NaN/inf): their probabilities are exactly 0,
// but 0 * inf is NaN in the MMA, so the rows >= valid of the V slot are zeroed before P V (FP8:
// the converter has written them as zeros, convert_block; GATHER: the producers' copies zero-fill
// every row past seqlen_k, gather_copy; only the barrier is left for both: a second write of those
// zeros would also race, for compute-sanitizer, with the copies that cp_async_arrive orders).  Each
// consumer warpgroup zeroes the rows itself (all write the same zeros) and orders its writes
// before its own wgmma reads (proxy fence + a warpgroup barrier).
__device__ __forceinline__ void zero_v_tail(u32 v_base, int valid, int cg, int wg_tid) {
#pragma unroll 1
  for (int h = 0; h < (FP8 || GATHER ? 0 : VHALVES); ++h)
#pragma unroll 1
    for (int c = valid * 8 + wg_tid; c < BN * 8; c += 128)
      asm volatile("st.shared.v4.u32 [%0], { %1, %1, %1, %1};\n" ::"r"(v_base + h * KV_HALF + c * 16), "r"(0u)
                   : "memory");
  fence_proxy_async_smem();
  named_sync(1 + cg, 128);
}

// Soft-cap (SOFTCAP): the raw scores S = Q K^T become tanh(S * scale / c) in place (tanh_approx,
// common/softmax.cuh), before the mask sets -inf; softmax_scores then takes them with the factor
// c * log2(e) (score_scale), which its exponent's FFMA applies anyway, so the cap costs a multiply
// and the MUFU.TANH a logit (the sm_80 tiles' transform_scores multiplies by c log2(e) too:
// FMUL + MUFU + FMUL; H200, gpt-oss heads d 64 causal 16k: 0.91x the time).  The kernels with
// fp16 GEMMs on a bf16 q (MMA_F16: an FP8 cache) keep that form, c log2(e) in the scores and the
// factor 1 (CAP_IN_EXP false): at head dim 256 the other one spilled 16 bytes.  Without soft-cap
// the scale stays folded into softmax_scores' exponent.
// FP8 K/V: kd, the tile's k_descale, multiplies the logits' scale (1 otherwise).
constexpr bool CAP_IN_EXP = {{ "false" if v.get("fp16_gemms") else "true" }};
template <class Scale>
__device__ __forceinline__ void cap_scores_by(float (&s)[1][BN / 8][4], const AttnParams& p, Scale f) {
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float t = tanh_approx(s[0][nt][e] * row_of(f, e >> 1));
      s[0][nt][e] = CAP_IN_EXP ? t : t * p.softcap_log2;
    }
}
__device__ __forceinline__ void cap_scores(float (&s)[1][BN / 8][4], const AttnParams& p, float kd = 1.f) {
  cap_scores_by(s, p, p.softcap_scale * kd);
}
__device__ __forceinline__ float score_scale(const AttnParams& p, float kd = 1.f) {
  return SOFTCAP ? (CAP_IN_EXP ? p.softcap_log2 : 1.f) : p.scale_log2 * kd;
}
{% if v.get("fp16_gemms") %}
// MMA_F16: kd a row (q_rows_to_f16's factors times the tile's k_descale)
__device__ __forceinline__ void cap_scores(float (&s)[1][BN / 8][4], const AttnParams& p, const RowScale& kd) {
  cap_scores_by(s, p, p.softcap_scale * kd);
}
__device__ __forceinline__ RowScale score_scale(const AttnParams& p, const RowScale& kd) {
  RowScale one;
  one.v[0] = one.v[1] = 1.f;
  return SOFTCAP ? one : p.scale_log2 * kd;
}
{% endif %}
{% if v.get("user") %}
// User variants: the factor softmax_scores applies to the logits it is given: score_scale, or
// log2(e) after a score_mod, which leaves them in natural-log units (apply_user converts them
// once, not back).
__device__ __forceinline__ float exp_scale(const AttnParams& p) { return USER_SCORE ? USER_LOG2E : score_scale(p); }
{% endif %}

// Ping-pong of the consumer warpgroups (option "p"; FlashAttention-3's inter-warpgroup schedule):
// a warpgroup issues its GEMMs only in its turn (named barrier PP_BAR + cg, completed by the
// previous warpgroup's arrival after its own issue; round robin over NCG = 2 or 3), so one
// warpgroup's softmax runs while another's GEMMs occupy the tensor cores.  Every issue section of
// one warpgroup is matched by one of each other (all walk the same tiles and blocks); the last
// warpgroup opens with an arrival and warpgroup 0 takes the last one after the tile loop.
// Barriers 1 .. NCG are zero_v_tail's (one a warpgroup).
constexpr int PP_BAR = NCG == 2 ? 3 : 4;
__device__ __forceinline__ void turn_wait(int cg) {
  if (PINGPONG) named_sync(PP_BAR + cg, 256);
}
__device__ __forceinline__ void turn_pass(int cg) {
  if (PINGPONG) named_arrive(PP_BAR + (cg + 1 == NCG ? 0 : cg + 1), 256);
}

{#- A hoisted score_mod's per-key part into the accumulators of block n before its Q K^T issue
    (user_acc_init), with the instance block_scores(clamp_kv) will take for the block. -#}
{% macro user_acc(clamp_kv=True, mask="branch") -%}
{% set urows = "qpk" if v.pack_gqa else "1" %}
{% set nonneg = v.get("user") and v.mask == "causal" and v.user.nonneg and not clamp_kv %}
{% if nonneg and mask != "branch" -%}
uacc = user_acc_init<false, {{ "false" if mask == "yes" else "true" }}>(s, p, ut, n, row0, {{ urows }}, cw, lane, score_scale(p) * KG_LN2);
{% elif nonneg -%}
uacc = block_needs_mask(mi, n, pos_first, pos_last)
           ? user_acc_init<false, false>(s, p, ut, n, row0, {{ urows }}, cw, lane, score_scale(p) * KG_LN2)
           : user_acc_init<false, true>(s, p, ut, n, row0, {{ urows }}, cw, lane, score_scale(p) * KG_LN2);
{% else -%}
uacc = user_acc_init<{{ "true" if clamp_kv else "false" }}>(s, p, ut, n, row0, {{ urows }}, cw, lane, score_scale(p) * KG_LN2);
{% endif -%}
{%- endmacro %}

{#- Before block n's Q K^T issue: its accumulators started from the bias (built-in causal ALiBi,
    ALIBI_ACC) or from a hoisted score_mod's per-key part (user_acc). -#}
{% macro acc_start(clamp_kv=True, mask="branch") -%}
{% if v.get("alibi") -%}
if (ALIBI_ACC) alibi_acc_init(s, alibi_sl);
{% endif -%}
{% if v.get("user") and v.user.hoist -%}
{{ user_acc(clamp_kv, mask) }}
{% endif -%}
{%- endmacro %}

{#- The scores of key block n, from S = Q K^T to P: soft-cap, ALiBi, the user variant (its keys clamped
    unless every key of the block is in range: clamp_kv), the masks, the online softmax (rendered at
    the three places a consumer takes a block: the serial loop, the overlapped loop's peeled first
    block and its loop). -#}
{% macro block_scores(clamp_kv=True, comment="", mask="branch") -%}
{% set hoist = v.get("user") and v.user.hoist %}
{% set mask_call = "apply_mask_pos(s, mi, n, rpos, lane)" if v.pack_gqa else "apply_mask(s, mi, n, row0, 1, cw, lane)" %}
{% set alibi_roff = v.get("alibi") and v.mask == "causal" and not v.get("user") %}
{% set apply = "apply_user_hoist" if hoist else "apply_user" %}
{% set user_args = "s, p, ut, n, row0, " ~ ("qpk" if v.pack_gqa else "1") ~ ", cw, lane, score_scale(p) * KG_LN2, " ~ ("score_scale(p), roff, uacc" if hoist else "1.f") %}
{% set nonneg = v.get("user") and v.mask == "causal" and v.user.nonneg and not clamp_kv %}
if (SOFTCAP) cap_scores(s, p, kd);
{% if alibi_roff or hoist -%}
float roff[1][2];  // the scores come back shifted by roff per row (causal ALiBi: common/alibi.cuh; a score_mod's row part: apply_user_hoist)
{% endif -%}
{% if hoist -%}
float ef;          // the factor of the scores' exponent (apply_user_hoist: raw or natural-log units)
{% endif -%}
{% if alibi_roff and v.pack_gqa -%}
apply_alibi_causal_pos<!ALIBI_ACC>(s, alibi_sl, mi, n, rpos, lane, roff);
{% elif alibi_roff -%}
apply_alibi_causal<!ALIBI_ACC>(s, alibi_sl, mi, n, row0, 1, cw, lane, roff);
{% elif v.get("alibi") and v.pack_gqa -%}
apply_alibi_pos(s, alibi_sl, mi, n, rpos, lane);
{% elif v.get("alibi") -%}
apply_alibi(s, alibi_sl, mi, n, row0, 1, cw, lane);
{% endif -%}
{% if nonneg -%}
// (block n < n_hi - 1: keys in range; below the diagonal every distance is >= 0: kg_abs)
{% if mask == "yes" -%}
{{ "ef = " if hoist }}{{ apply }}<false, false>({{ user_args }});
{{ mask_call }};
{% elif mask == "no" -%}
{{ "ef = " if hoist }}{{ apply }}<false, true>({{ user_args }});
{% else -%}
if (block_needs_mask(mi, n, pos_first, pos_last)) {
  {{ "ef = " if hoist }}{{ apply }}<false, false>({{ user_args }});
  {{ mask_call }};
} else {
  {{ "ef = " if hoist }}{{ apply }}<false, true>({{ user_args }});
}
{% endif -%}
{% else -%}
{% if v.get("user") -%}
{{ "ef = " if hoist }}{{ apply }}<{{ "true" if clamp_kv else "false" }}>({{ user_args }});  // {{ "leaves natural-log logits or raw ones" if hoist else "leaves natural-log logits" }}{{ "" if clamp_kv else " (block n < n_hi - 1: keys in range)" }}
{% endif -%}
{% if mask == "yes" -%}
{{ mask_call }};
{% elif mask == "branch" -%}
if (block_needs_mask(mi, n, pos_first, pos_last)) {{ mask_call }};
{% endif -%}
{% endif -%}
softmax_scores(s, row_max, row_sum, corr, {{ "ef" if hoist else "exp_scale(p)" if v.get("user") else "score_scale(p, kd)" }}{{ ", roff" if alibi_roff or hoist else "" }});{{ comment }}
{%- endmacro %}

// ptxas orders wgmma.wait_group only against memory operations: it hoists the wait for the previous
// block's P V above this block's softmax, so the warpgroup idles until its P V is done instead of
// computing the softmax meanwhile (SASS: the DEPBAR before the row max and every exponential).  A
// shared store of the first row's new max (lane 0 of each warp, its own word of OFF_PIN, never read)
// keeps the wait after the row max; ptxas then issues part of the exponentials before it.  16-bit
// P V only: FP8 P V ran 0-7 % slower with it (H200; docs/dev/perf-log.md, "The P V wait").
// Not at head dim 256 without a mask: the pin's address register made ptxas spill 12 bytes of the
// tile loop's state there (NVRTC 13.0).  KG_PIN_PV_WAIT (0 or 1, KERNELGEN_DEFINES) overrides the
// choice for experiments.
{# (Since the forty-first session only where the warpgroup index stays per-thread, uniform_cg below:
    with it warp-uniform the pin builds clean there.)  The consumers' warpgroup index is made
    warp-uniform with a shuffle (consumer_mainloop), so that Q's descriptors stay in uniform
    registers, except where that spills with NVRTC 13.0: the FP8 K/V converter kernels, the
    soft-capped FP8 tensor-core kernels above head dim 128, and the 16-bit ones above 128 with
    split-KV (8-16 bytes, every mask, dtype and extra of a 123-build sweep), in the fused mixed-batch
    kernel, without the ping-pong ("p": 4-8 bytes at d 192), with AoS metadata (4-8 bytes at d 256),
    with ALiBi (4-8 bytes at d 192 with a window) or a user variant (not tried), or with a soft-cap
    above 192 (8 bytes at d 256).  The other 16-bit kernels at head dims 192 / 256 spilled with it when it was first
    tried (53 against 25 bytes); with NVRTC 13.0 they build clean, and the d 256 loop goes from 32 R2UR
    a key block to 10, with the P V wait after 12 of its 42 exponentials instead of before the first
    (docs/dev/fa3_d256_bf16_sass.md).  The comments rendered into the kernels are left as they were,
    so that every other kernel's source, cache key and SASS stay the same. #}
{% set maxd = [v.head_dim, v.head_dim_v] | max %}
{% set uniform_cg = not ((v.get("kv_dtype") and not v.get("fp8_mma")) or (v.get("fp8_mma") and v.softcap and maxd > 128)
                         or (not v.get("kv_dtype") and maxd > 128
                             and (v.split or v.get("queue_only") or "p" not in v.sm90_opts or v.layout != "soa"
                                  or v.get("alibi") or v.get("user") or (v.softcap and maxd > 192)))) %}
#ifndef KG_PIN_PV_WAIT
#define KG_PIN_PV_WAIT {{ 0 if (v.head_dim_v > 192 and v.mask == "none" and (v.get("kv_dtype") or not uniform_cg)) else 1 }}
#endif
__device__ __forceinline__ void pin_pv_wait(u32 sb, int cw, int lane, const float (&row_max)[1][2]) {
  if (KG_PIN_PV_WAIT && !FP8_MMA && lane == 0)
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(sb + OFF_PIN + 4 * cw), "f"(row_max[0][0]) : "memory");
}
{% if v.get("fp8_mma") %}
// FP8 P V: where the wait for the previous block's P V may go (KERNELGEN_DEFINES KG_PIN_FP8 for
// experiments): 0 unpinned (ptxas puts it before the softmax), 1 after the first row's max (as the
// 16-bit pin), 2 after that row's sum (its exponentials), 3 after both rows' sums.  H200, d 128
// (tile_ab, 32 / 8 heads, three passes; docs/dev/perf-log.md "Thirty-second session"): with
// 224-key blocks 1 took 0.967-0.978x the unpinned time (causal 16k and 4 x 4k, non-causal 4 x 4k
// 0.978-0.987x); with 128-key blocks 1.01-1.09x (as measured before): pinned above 192 keys (192,
// a paged call's fallback, not measured pinned, stays as it was measured).
#ifndef KG_PIN_FP8
#define KG_PIN_FP8 {{ 1 if v.block_n > 192 else 0 }}
#endif
__device__ __forceinline__ void pin_pv_wait8(u32 sb, int cw, int lane, const float (&row_max)[1][2],
                                             const float (&row_sum)[1][2]) {
  if (KG_PIN_FP8 && lane == 0) {
    const float x = KG_PIN_FP8 == 1 ? row_max[0][0] : KG_PIN_FP8 == 2 ? row_sum[0][0] : row_sum[0][0] + row_sum[0][1];
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(sb + OFF_PIN + 4 * cw), "f"(x) : "memory");
  }
}
{% endif %}

// A consumer's wait for a K / V ring slot's "full" barrier.  Gathered rows (GATHER) are cp.async
// writes of the producer threads (generic proxy), signalled by cp_async_arrive when they land: the
// proxy fence orders them before this thread's wgmma reads of the slot (async proxy).
__device__ __forceinline__ void wait_full(u32 bar, u32 parity, int tag) {
  mbar_wait(bar, parity, tag);
  if (GATHER) fence_proxy_async_smem();
}

// Per-thread pipeline position of a consumer (the same sequence the producer walks).
struct KvPos {
  int stage;
  u32 phase;
  __device__ __forceinline__ void advance() {
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1;
    }
  }
};

{# One key block n of the overlapped loop: its Q K^T issued with P V of the block before, then its
    scores.  mask: "branch" (block_needs_mask tested in the block), "yes" / "no" (known: option "m"). #}
{% macro steady_block(mask="branch") -%}
wait_full(FP8_MMA ? bar_land_full(sb, kv.stage) : bar_k_full(sb, kv.stage), kv.phase, 13);
{{ acc_start(clamp_kv=False, mask=mask) | trim }}
fence_regs<BN / 2>(&s[0][0][0]);
fence_regs<DV / 2>(&o[0][0][0]);
fence_regs<PA_N * 4>(&pa[0][0]);
turn_wait(cg);
wgmma_fence();
issue_qk(s, q_base, FP8_MMA ? sb + OFF_LAND + kv.stage * LAND_BYTES : sb + OFF_K + kv.stage * K_BYTES{{ ', uacc' if (v.get('user') and v.user.hoist) else '' }});
wgmma_commit();
wait_full(bar_v_full(sb, pv.stage), pv.phase, 14);
{
  const u32 v_base = sb + OFF_V + pv.stage * V_BYTES;
  wgmma_fence();  // (ptxas would add this one itself after the wait loop: C7519)
  issue_pv(o, pa, v_base);
}
wgmma_commit();
turn_pass(cg);
wgmma_wait<1>();  // S of block n is done; P V of block n + 1 may still run
fence_regs<BN / 2>(&s[0][0][0]);
release(FP8_MMA ? bar_land_empty(sb, kv.stage) : bar_k_empty(sb, kv.stage), lane);
if (n == n_lo) release(bar_q_empty(sb), lane);
{{ block_scores(clamp_kv=False, mask=mask) }}
pin_pv_wait(sb, cw, lane, row_max);
{% if v.get("fp8_mma") %}
pin_pv_wait8(sb, cw, lane, row_max, row_sum);
{% endif %}
wgmma_wait<0>();
fence_regs<DV / 2>(&o[0][0][0]);
fence_regs<PA_N * 4>(&pa[0][0]);
release(bar_v_empty(sb, pv.stage), lane);
if (!LAZY_RESCALE || __any_sync(0xffffffffu, corr[0][0] != 1.f || corr[0][1] != 1.f)) rescale_rows(o, corr);
pack_p(s, pa);
pv = kv;
kv.advance();
{%- endmacro %}
// The key blocks [n_lo, n_hi) of one tile for this consumer warpgroup (warp cw of the consumers,
// rows cw * 16 .. of the tile): accumulates o (unnormalised), row_max and row_sum.
__device__ __forceinline__ void consumer_mainloop(const AttnParams& p, const MaskInfo& mi, int n_lo, int n_hi,
                                                  int row0, int pos_last, u32 sb, KvPos& kv, int cw, int lane,
                                                  float (&o)[1][DV / 8][4], float (&row_max)[1][2],
                                                  float (&row_sum)[1][2], {{ "const RowScale&" if v.get("fp16_gemms") else "float" }} kd{% if v.get("alibi") %}, const float (&alibi_sl)[1][2]{% endif %}{% if v.get("user") %}, const UserTile& ut{% endif %}) {
  {% if not uniform_cg %}
  const int cg = cw >> 2;   // (16-bit head dims 192 / 256, the FP8 K/V converter kernels and the soft-capped FP8
                            //  tensor-core ones above d 128 spill more with the shuffle below: 53 against 25 bytes)
  {% else %}
  // warp-uniform for the compiler, so Q's descriptors stay in uniform registers (16 R2UR a key block
  // at d 128 otherwise: docs/dev/fa3_d128_d256_sass.md; the FP8 tensor-core kernels at d 256 too:
  // R2UR 96 -> 47, 0.97-1.00x the time on the H200, docs/dev/fa3_fp8_d256_sass.md)
  const int cg = __shfl_sync(0xffffffffu, cw >> 2, 0);
  {% endif %}
  const int wg_tid = (cw & 3) * 32 + lane;
  const u32 q_base = sb + cg * 64 * (FP8_MMA ? 64 : 128);
  {% if v.pack_gqa %}
  // pack-GQA: tile row r is query head r % qpk of position r / qpk (row0 is a multiple of BM and of
  // qpk); rpos: the positions of this thread's two rows (g and g + 8), for apply_mask_pos
  const int qpk = p.num_heads_q / p.num_heads_kv;   // (a user variant's rows: common/user_mod.cuh)
  const unsigned qm = qpk_magic(qpk);
  const int pos_first = row0 / BM * div_qpk(BM, qm);
  int rpos[2];
  rpos[0] = pos_first + div_qpk(cw * WM + (lane >> 2), qm);
  rpos[1] = pos_first + div_qpk(cw * WM + (lane >> 2) + 8, qm);
  {% else %}
  const int pos_first = row0;
  {% endif %}
  float s[1][BN / 8][4];
  u32 pa[PA_N][4];
  float corr[1][2];
  {% if v.get("user") and v.user.hoist %}
  bool uacc = false;   // the accumulators of the block in flight started from the score_mod's per-key part
  {% endif %}
  if (!OVERLAP) {
    for (int n = n_hi - 1; n >= n_lo; --n) {
      wait_full(FP8_MMA ? bar_land_full(sb, kv.stage) : bar_k_full(sb, kv.stage), kv.phase, 10);
      {{ acc_start(clamp_kv=True) | trim | indent(6) }}
      fence_regs<BN / 2>(&s[0][0][0]);
      wgmma_fence();
      issue_qk(s, q_base, FP8_MMA ? sb + OFF_LAND + kv.stage * LAND_BYTES : sb + OFF_K + kv.stage * K_BYTES{{ ', uacc' if (v.get('user') and v.user.hoist) else '' }});
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs<BN / 2>(&s[0][0][0]);
      release(FP8_MMA ? bar_land_empty(sb, kv.stage) : bar_k_empty(sb, kv.stage), lane);
      if (n == n_lo) release(bar_q_empty(sb), lane);
      {{ block_scores() | indent(6) }}
      rescale_rows(o, corr);
      pack_p(s, pa);
      wait_full(bar_v_full(sb, kv.stage), kv.phase, 11);
      const u32 v_base = sb + OFF_V + kv.stage * V_BYTES;
      if ((n + 1) * BN > mi.seqlen_k) zero_v_tail(v_base, mi.seqlen_k - n * BN, cg, wg_tid);
      fence_regs<DV / 2>(&o[0][0][0]);
      fence_regs<PA_N * 4>(&pa[0][0]);
      wgmma_fence();
      issue_pv(o, pa, v_base);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs<DV / 2>(&o[0][0][0]);
      release(bar_v_empty(sb, kv.stage), lane);
      kv.advance();
    }
    return;
  }
  // Overlapped: S of block n is issued together with P V of block n + 1 (the previous one); the
  // softmax of block n runs while that P V is on the tensor cores.
  int n = n_hi - 1;
  wait_full(FP8_MMA ? bar_land_full(sb, kv.stage) : bar_k_full(sb, kv.stage), kv.phase, 12);
  {{ acc_start(clamp_kv=True) | trim | indent(2) }}
  fence_regs<BN / 2>(&s[0][0][0]);
  turn_wait(cg);
  wgmma_fence();
  issue_qk(s, q_base, FP8_MMA ? sb + OFF_LAND + kv.stage * LAND_BYTES : sb + OFF_K + kv.stage * K_BYTES{{ ', uacc' if (v.get('user') and v.user.hoist) else '' }});
  wgmma_commit();
  turn_pass(cg);
  wgmma_wait<0>();
  fence_regs<BN / 2>(&s[0][0][0]);
  release(FP8_MMA ? bar_land_empty(sb, kv.stage) : bar_k_empty(sb, kv.stage), lane);
  if (n == n_lo) release(bar_q_empty(sb), lane);
  {{ block_scores(comment="  // o is still 0: no rescale") | indent(2) }}
  pack_p(s, pa);
  KvPos pv = kv;  // the slot whose V the pending P V reads
  kv.advance();
  // Only the first pending P V's block (n_hi - 1) can run past the keys: zero its V tail here,
  // out of the steady loop (a block the loop's P V reads later is whole).
  if (n_hi - 2 >= n_lo && n_hi * BN > mi.seqlen_k) {
    wait_full(bar_v_full(sb, pv.stage), pv.phase, 16);
    zero_v_tail(sb + OFF_V + pv.stage * V_BYTES, mi.seqlen_k - (n_hi - 1) * BN, cg, wg_tid);
  }
  for (n = n_hi - 2; n >= n_lo; --n) {
    {% if "m" in v.sm90_opts %}
    // option "m": a masked and an unmasked copy of the block, chosen once a block, so that no
    // branch splits the scores' score_mod / soft-cap from their row max and exponentials
    if (block_needs_mask(mi, n, pos_first, pos_last)) {
      {{ steady_block("yes") | indent(6) }}
    } else {
      {{ steady_block("no") | indent(6) }}
    }
    {% else %}
    {{ steady_block() | indent(4, blank=True) }}
    {% endif %}
  }
  // P V of the last block (n_lo)
  wait_full(bar_v_full(sb, pv.stage), pv.phase, 15);
  const u32 v_base = sb + OFF_V + pv.stage * V_BYTES;
  if ((n_lo + 1) * BN > mi.seqlen_k) zero_v_tail(v_base, mi.seqlen_k - n_lo * BN, cg, wg_tid);
  fence_regs<DV / 2>(&o[0][0][0]);
  fence_regs<PA_N * 4>(&pa[0][0]);
  turn_wait(cg);
  wgmma_fence();
  issue_pv(o, pa, v_base);
  wgmma_commit();
  turn_pass(cg);
  wgmma_wait<0>();
  fence_regs<DV / 2>(&o[0][0][0]);
  release(bar_v_empty(sb, pv.stage), lane);
}

// Gathered K/V (GATHER): key j of a request lives in slot j % page_size of page
// page_table[b][j / page_size].  Producer warp pw copies rows [pw * G_RW, (pw + 1) * G_RW) of each
// block: lane l looks up the page and slot of rows pw * G_RW + l + 32 i once per block (one
// coalesced page-table load a lane, before the wait for the slot), and the copies take them by
// shuffle.  A row is G_CPR 16-byte chunks (G_CPR lanes a row, G_RPS rows a warp step), chunk c of
// block row r landing in column block c / 8 at chunk (c % 8) ^ (r % 8): the 128-byte swizzle TMA
// writes and the wgmma descriptors read.  Keys at or past seqlen_k are zero-filled (nothing
// read).  cp.async writes through the generic proxy: each thread arrives on the "full" barrier
// (NPROD arrivals) through cp.async_arrive once its copies of the slot have landed, without waiting
// for them, so that the copies of every free ring slot are in flight at once (the STAGES-deep
// pipeline of the TMA paths; waiting for each copy before the next left one K and one V block in
// flight and ran 300 TFLOP/s at head dim 128, docs/dev/perf-log.md "Thirty-eighth session"); the
// consumers fence their view to the async proxy after the wait (wait_full) before wgmma reads it.
constexpr int G_RW = BN / 4;              // rows per producer warp
constexpr int G_RI = (G_RW + 31) / 32;    // looked-up rows per lane
constexpr int G_CPR = DP / 8;             // 16-byte chunks per (padded) row
constexpr int G_RPS = 32 / G_CPR;         // rows per warp step
constexpr int G_LANES = G_RPS * G_CPR;    // lanes that copy (24 at head dim 192)
static_assert(G_RW % G_RPS == 0, "gather steps");
// Head dim 96 (rows padded to 128 columns): chunks 12-15 of a row are zero-filled, as TMA's
// out-of-bounds fill does on the other paths.
static_assert(!PAGED || D == DV_OUT, "paged K/V: head_dim == head_dim_v");

struct GatherRows {
  int page[G_RI];
  int slot[G_RI];  // -1: past seqlen_k (zero-filled)
};

__device__ __forceinline__ void gather_lookup(GatherRows& g, const int* page_row, int page_size, int key0,
                                              int seqlen_k, int pw, int lane) {
#pragma unroll
  for (int i = 0; i < G_RI; ++i) {
    const int r = 32 * i + lane;
    const int j = key0 + pw * G_RW + r;
    const bool ok = r < G_RW && j < seqlen_k;
    const int pi = ok ? j / page_size : 0;
    g.page[i] = ok ? page_row[pi] : 0;
    g.slot[i] = ok ? j - pi * page_size : -1;
  }
}

// The rows a lane looked up, as addresses in one cache (K or V): row[i] is the first element of
// its row 32 i + lane (the cache at this KV head where the row is past seqlen_k), bit l of
// valid[i] says whether row 32 i + l holds a key.  Computed once a block and cache, after the
// slot's wait (the page-table loads are in flight during it), so that each copy step takes one
// 64-bit shuffle instead of the page, the slot and their 64-bit products.
struct GatherPtrs {
  const u16* row[G_RI];
  u32 valid[G_RI];
};

__device__ __forceinline__ GatherPtrs gather_ptrs(const GatherRows& g, const u16* base, i64 row_stride,
                                                  i64 page_stride) {
  GatherPtrs a;
#pragma unroll
  for (int i = 0; i < G_RI; ++i) {
    const bool ok = g.slot[i] >= 0;
    a.row[i] = ok ? base + (i64)g.page[i] * page_stride + (i64)g.slot[i] * row_stride : base;
    a.valid[i] = __ballot_sync(0xffffffffu, ok);
  }
  return a;
}

// This warp's rows of one K or V block into the ring slot at `dst`: step st copies chunk c of
// row rr = G_RPS st + lr (lane = G_CPR lr + c), taking the row's address from the lane that looked
// it up.  The 128-byte swizzle repeats every 8 rows, so where this warp's rows start on an 8-row
// boundary (G_RW % 8 == 0) the steps run in groups of G_SWP (8 rows) whose chunk offsets a lane
// computes once.
constexpr int G_STEPS = G_RW / G_RPS;
constexpr int G_SWP = 8 % G_RPS == 0 && G_RW % 8 == 0 && G_STEPS % (8 / G_RPS) == 0 ? 8 / G_RPS : 1;
__device__ __forceinline__ void gather_copy(u32 dst, const GatherPtrs& a, int pw, int lane) {
  const int c = lane % G_CPR;
  // lanes >= G_LANES (head dim 192) take part in the shuffles only
  const int lr = G_LANES == 32 ? lane / G_CPR : min(lane / G_CPR, G_RPS - 1);
  const bool copies = G_LANES == 32 || lane < G_LANES;
  u32 d0 = dst + (u32)(c >> 3) * KV_HALF + (u32)(pw * G_RW + lr) * 128u;
  u32 sw[G_SWP];  // (G_SWP > 1) the swizzled chunk offset of step m of each group
#pragma unroll
  for (int m = 0; m < G_SWP; ++m) sw[m] = (u32)((c & 7) ^ ((m * G_RPS + lr) & 7)) << 4;
#pragma unroll 1
  for (int k = 0; k < G_STEPS / G_SWP; ++k) {
#pragma unroll
    for (int m = 0; m < G_SWP; ++m) {
      const int st = k * G_SWP + m;
      const int rr = st * G_RPS + lr;
      const int ri = (st * G_RPS) >> 5;
      const u16* row = reinterpret_cast<const u16*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(G_RI == 1 ? a.row[0] : a.row[ri]), rr & 31));
      if (copies) {
        const bool ok = (((G_RI == 1 ? a.valid[0] : a.valid[ri]) >> (rr & 31)) & 1u) && (D == DP || c < D / 8);
        // (D == DP: an unused row's address is the cache's first row at this head, so row + c * 8 is
        // in bounds either way; head dim 96's padding chunks read nothing)
        const u16* src = D == DP ? row + c * 8 : ok ? row + c * 8 : row;
        const u32 off = G_SWP > 1 ? sw[m] : (u32)((c & 7) ^ ((pw * G_RW + rr) & 7)) << 4;
        cp_async16(d0 + (u32)(m * G_RPS) * 128u + off, src, ok);
      }
    }
    d0 += (u32)(G_SWP * G_RPS) * 128u;
  }
}

__device__ __forceinline__ void gather_publish(u32 bar) {
  fence_proxy_async_smem();
  mbar_arrive(bar);
}

// The producer loop of GATHER variants, run by all four producer warps (pw = 0..3): warp 0 hands
// out the tiles and loads Q by TMA as producer_loop does; warps 1-3 take each tile index from the
// same slots as the consumers (tile_empty counts them).
__device__ __forceinline__ void producer_loop_gather(const AttnParams& p, const void* q_map, int* md, int cap4,
                                                     int total, u32 sb, volatile int* s_tile, int pw, int lane) {
  const int qpk = p.num_heads_q / p.num_heads_kv;
  {% if v.pack_gqa %}
  const unsigned qm = qpk_magic(qpk);
  {% endif %}
  const u16* K = static_cast<const u16*>(p.k);
  const u16* Vc = static_cast<const u16*>(p.v);
  int cursor = 0;
  int t = pw == 0 ? first_tile(md, lane) : 0;
  int stage = 0;
  u32 phase = 0, q_iter = 0;
  if (pw == 0 && lane == 0) tma_prefetch_desc(q_map);
  for (int it = 0;; ++it) {
    const int slot = it & 1;
    if (pw == 0) {
      if (lane == 0) {
        mbar_wait(bar_tile_empty(sb, slot), ((it >> 1) & 1) ^ 1, 1);
        s_tile[slot] = t;
        mbar_arrive(bar_tile_full(sb, slot));
      }
      __syncwarp();
    } else {
      mbar_wait(bar_tile_full(sb, slot), (it >> 1) & 1, 7);
      t = take_tile(s_tile, slot, lane);
      release(bar_tile_empty(sb, slot), lane);
    }
    if (t >= total) break;
    cursor = find_entry(md, cap4, t, cursor);
    const TileInfo ti = tile_info(p, md, cap4, cursor, t, {{ "sched_heads(p)" if v.pack_gqa else "p.num_heads_q" }}, qpk);
    const MaskInfo mi = tile_mask(p, ti);  // the consumers' key-block range (window, split share)
    int n_lo, n_hi;
    key_block_range(mi, {{ "tile_pos_first(ti, qm), tile_pos_last(ti, qm)" if v.pack_gqa else "ti.row0, ti.row0 + ti.valid_rows - 1" }}, n_lo, n_hi);
    {% if v.get("user") %}
    if (USER_RANGE) user_block_range(p, user_tile(ti, qpk), {{ "tile_pos_first(ti, qm), tile_pos_last(ti, qm) + 1" if v.pack_gqa else "ti.row0, ti.row0 + ti.valid_rows" }}, n_lo, n_hi);
    {% endif %}
    split_block_range(ti.split, ti.num_splits, n_lo, n_hi);
    if (n_hi > n_lo) {
      const int kv_head = {{ "tile_kv_head(ti, qpk)" if v.pack_gqa else "ti.head / qpk" }};
      if (pw == 0 && lane == 0) {
        mbar_wait(bar_q_empty(sb), (q_iter & 1) ^ 1, 2);
        mbar_arrive_expect_tx(bar_q_full(sb), Q_BYTES);
#pragma unroll
        for (int h = 0; h < HALVES; ++h)
          tma_load_3d(sb + h * Q_HALF, q_map, bar_q_full(sb), h * 64, {{ "q_head0(ti, qpk), q_token0(ti, qm)" if v.pack_gqa else "ti.head, ti.q_start + ti.row0" }});
      }
      ++q_iter;
      const int* page_row = static_cast<const int*>(p.page_table) + (i64)ti.b * p.page_table_stride;
      const u16* kb = K + (i64)kv_head * p.k_head_stride;
      const u16* vb = Vc + (i64)kv_head * p.v_head_stride;
#pragma unroll 1
      for (int n = n_hi - 1; n >= n_lo; --n) {
        GatherRows g;
        gather_lookup(g, page_row, p.page_size, n * BN, ti.seqlen_k, pw, lane);
        mbar_wait(bar_k_empty(sb, stage), phase ^ 1, 3);
        gather_copy(sb + OFF_K + stage * K_BYTES, gather_ptrs(g, kb, p.k_row_stride, p.k_page_stride), pw, lane);
        cp_async_arrive(bar_k_full(sb, stage));
        mbar_wait(bar_v_empty(sb, stage), phase ^ 1, 4);
        gather_copy(sb + OFF_V + stage * V_BYTES, gather_ptrs(g, vb, p.v_row_stride, p.v_page_stride), pw, lane);
        cp_async_arrive(bar_v_full(sb, stage));
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    if (pw == 0) {
      __syncwarp();
      int next = 0;
      if (lane == 0) next = next_tile_index(md);
      t = __shfl_sync(0xffffffffu, next, 0);
    }
  }
  cp_async_wait_all();  // (this thread's last copies land before it leaves; none is committed to a group)
  if (!QUEUE_ONLY && pw == 0 && lane == 0) release_semaphore(md);
}
{% if v.get("kv_dtype") %}

// ---- FP8 K/V ({{ v.kv_dtype }}): producer warps 1-3 convert each landing stage into the 16-bit ring.
// A landing stage holds a block's K then V bytes as column blocks of 64 head dims (BN rows x 64
// bytes, K8_HALF apart), in TMA's 64-byte swizzle: 16-byte chunk c of row r sits at chunk
// c ^ ((r >> 1) & 3).  Converter thread i (of NCONV) takes chunks i, i + NCONV, ... numbered
// column block, chunk, row (row fastest), so the eight threads of a 16-byte shared-memory phase read
// eight consecutive rows (distinct banks under the 64-byte swizzle) and write the two 16-bit chunks
// 2c, 2c + 1 of those rows at (2c) ^ (r & 7) and (2c + 1) ^ (r & 7) in the 128-byte swizzle the
// wgmma descriptors read (distinct banks again).  The values are exact (fp8x4_to_16).
// Rows >= valid (keys past the request's end, in the last block) are written as zeros: the V
// rows' probabilities are 0 there but 0 * a stray value could be NaN in the MMA (zero_v_tail's job
// on the other paths, done here so that only the converter writes the slot).
// CONV_UNROLL chunks a converter thread has in flight (KG_CONV_UNROLL in KERNELGEN_DEFINES for an
// A/B; 1: each chunk's load, conversion and stores in turn): 2 where the producers have 56
// registers (head dims up to 128, AttentionSpec.SM90_REGS_FP8_D128; with 40 two chunks spill), 1 else.  The loads and stores are volatile asm
// kept in source order, so a group's loads are all issued before its first store.
#ifndef KG_CONV_UNROLL
#define KG_CONV_UNROLL {{ 2 if (producer_regs is defined and producer_regs >= 56) else 1 }}
#endif
constexpr int CONV_UNROLL = KG_CONV_UNROLL;

template <int NH, bool F16 = false>   // F16: into fp16 (MMA_F16), else the dtype
__device__ __forceinline__ void convert_block(u32 dst, u32 src, int tid, int valid = BN) {
  constexpr int CHUNKS = NH * BN * 4;
#pragma unroll 1
  for (int c0 = tid; c0 < CHUNKS; c0 += NCONV * CONV_UNROLL) {
    u32 x[CONV_UNROLL][4];
#pragma unroll
    for (int u = 0; u < CONV_UNROLL; ++u) {
      const int c = c0 + u * NCONV;
      const int h = c / (BN * 4), rem = c - h * (BN * 4);
      const int cc = rem / BN, r = rem - cc * BN;
      x[u][0] = x[u][1] = x[u][2] = x[u][3] = 0u;   // FP8 code 0 is +0
      if ((CONV_UNROLL == 1 || c < CHUNKS) && r < valid)
        asm volatile("ld.shared.v4.u32 { %0, %1, %2, %3}, [%4];\n"
                     : "=r"(x[u][0]), "=r"(x[u][1]), "=r"(x[u][2]), "=r"(x[u][3])
                     : "r"(src + h * K8_HALF + r * 64 + ((cc ^ ((r >> 1) & 3)) << 4)));
    }
#pragma unroll
    for (int u = 0; u < CONV_UNROLL; ++u) {
      const int c = c0 + u * NCONV;
      if (CONV_UNROLL > 1 && c >= CHUNKS) break;
      const int h = c / (BN * 4), rem = c - h * (BN * 4);
      const int cc = rem / BN, r = rem - cc * BN;
      u32 y[8];
      if (F16) {
        fp8x4_to_f16(x[u][0], y[0], y[1]);
        fp8x4_to_f16(x[u][1], y[2], y[3]);
        fp8x4_to_f16(x[u][2], y[4], y[5]);
        fp8x4_to_f16(x[u][3], y[6], y[7]);
      } else {
        fp8x4_to_16(x[u][0], y[0], y[1]);
        fp8x4_to_16(x[u][1], y[2], y[3]);
        fp8x4_to_16(x[u][2], y[4], y[5]);
        fp8x4_to_16(x[u][3], y[6], y[7]);
      }
      const u32 row = dst + h * KV_HALF + r * 128;
      asm volatile("st.shared.v4.u32 [%0], { %1, %2, %3, %4};\n" ::"r"(row + (((2 * cc) ^ (r & 7)) << 4)), "r"(y[0]),
                   "r"(y[1]), "r"(y[2]), "r"(y[3]) : "memory");
      asm volatile("st.shared.v4.u32 [%0], { %1, %2, %3, %4};\n" ::"r"(row + (((2 * cc + 1) ^ (r & 7)) << 4)),
                   "r"(y[4]), "r"(y[5]), "r"(y[6]), "r"(y[7]) : "memory");
    }
  }
}

{% if mma_f16 %}
// MMA_F16: consumer warp cw's 16 rows of the Q tile (bf16, as TMA wrote them) -> fp16 in place, each
// row times the power of two 2^k that puts its largest finite |q| in [2^14, 2^15) (fp16's largest
// finite value is 65504): exact for every element down to 2^-24 of the row's largest (fp16's normal
// range; smaller ones keep fp16's absolute step, 2^-39 of it, far below bf16's own rounding of the
// largest); inf and NaN stay inf and NaN, a zero row stays zero.  Lane (g, t) converts the 16-byte
// chunks 2t, 2t + 1 of rows g and g + 8 in each 128-byte column block (the swizzle permutes chunks
// inside a row), which are its own rows of S (wgmma's m64 accumulator: warp w of the warpgroup holds
// rows 16 w .. 16 w + 15), so it returns its rows' factors 2^-k for the logits' scale.  The caller
// orders the writes before the warpgroup's wgmma reads (proxy fence and warpgroup barrier).
__device__ __forceinline__ RowScale q_rows_to_f16(u32 sb, int cw, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const u32 base = sb + ((cw >> 2) * 64 + 16 * (cw & 3) + g) * 128 + t * 32;
  RowScale un;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const u32 row = base + r * 8 * 128;
    u32 m = 0;   // the row's largest finite |q| as bf16 bits (monotone in the value for |.|)
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        u32 x[4];
        asm volatile("ld.shared.v4.u32 { %0, %1, %2, %3}, [%4];\n"
                     : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "r"(row + h * Q_HALF + c * 16));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const u32 a = x[j] & 0x7FFF7FFFu;
          m = __vmaxu2(m, a & __vcmpltu2(a, 0x7F807F80u));   // inf / NaN halves count as 0
        }
      }
    m = max(m & 0xFFFFu, m >> 16);
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));   // the quad holds the row
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const int k = m == 0 ? 0 : f16_row_shift(m);
    const float up = pow2f(k);
    un.v[r] = pow2f(-k);
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const u32 addr = row + h * Q_HALF + c * 16;
        u32 x[4];
        asm volatile("ld.shared.v4.u32 { %0, %1, %2, %3}, [%4];\n" : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "r"(addr));
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = bf16x2_to_f16x2(x[j], up);
        asm volatile("st.shared.v4.u32 [%0], { %1, %2, %3, %4};\n" ::"r"(addr), "r"(x[0]), "r"(x[1]), "r"(x[2]),
                     "r"(x[3]) : "memory");
      }
  }
  return un;
}

{% endif %}
{% if v.get("fp8_mma") %}
// The converter thread's index (0 .. NCONV - 1: producer warps 1-3), read from %tid.x where it is
// used rather than kept in a register across the block loop (the FP8_MMA transposer with two units
// in flight at 24 registers: d 128's 192-key tile spilled 4 bytes, reloaded every block).
__device__ __forceinline__ int conv_tid() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t - 32;
}

{% endif %}
// Producer warps 1-3 (pw): take each tile index from the consumers' slots (tile_empty counts them),
// walk the tile's key blocks as the consumers do, and per block wait for its landing stage, convert
// K into the ring slot once the consumers freed it, publish it (proxy fence, one k_full arrival a
// thread), the same for V, then free the landing stage (land_empty).
__device__ __forceinline__ void producer_loop_convert(const AttnParams& p, int* md, int cap4, int total, u32 sb,
                                                      volatile int* s_tile, int pw, int lane) {
  const int qpk = p.num_heads_q / p.num_heads_kv;
  {% if v.pack_gqa %}
  const unsigned qm = qpk_magic(qpk);
  {% endif %}
  {% if not v.get("fp8_mma") %}
  const int tid = (pw - 1) * 32 + lane;
  {% endif %}
  {% if v.get("fp8_mma") %}
#ifdef KG_VT_HOIST
  const VtLane vl = vt_lane(conv_tid());
#endif
  {% endif %}
  int cursor = 0;
  int stage = 0{{ "" if v.get("fp8_mma") else ", ls = 0" }};
  u32 phase = 0{{ "" if v.get("fp8_mma") else ", lphase = 0" }};
  for (int it = 0;; ++it) {
    const int slot = it & 1;
    mbar_wait(bar_tile_full(sb, slot), (it >> 1) & 1, 7);
    const int t = take_tile(s_tile, slot, lane);
    release(bar_tile_empty(sb, slot), lane);
    if (t >= total) break;
    cursor = find_entry(md, cap4, t, cursor);
    const TileInfo ti = tile_info(p, md, cap4, cursor, t, {{ "sched_heads(p)" if v.pack_gqa else "p.num_heads_q" }}, qpk);
    const MaskInfo mi = tile_mask(p, ti);
    int n_lo, n_hi;
    key_block_range(mi, {{ "tile_pos_first(ti, qm), tile_pos_last(ti, qm)" if v.pack_gqa else "ti.row0, ti.row0 + ti.valid_rows - 1" }}, n_lo, n_hi);
    split_block_range(ti.split, ti.num_splits, n_lo, n_hi);
    {% if v.get("fp8_mma") %}
    // FP8_MMA: K stays in the landing stage (the consumers read it); V is transposed into V^T.
    // LAND == STAGES: the landing slot is the ring slot (one stage / phase pair: fewer registers).
    const int seqlen_k = ti.seqlen_k;
#pragma unroll 1
    for (int n = n_hi - 1; n >= n_lo; --n) {
      mbar_wait(bar_land_full(sb, stage), phase, 8);
      mbar_wait(bar_v_empty(sb, stage), phase ^ 1, 4);
#ifdef KG_VT_HOIST
      transpose_v8_lane<BN, DV, NCONV / 32>(sb + OFF_V + stage * V_BYTES, sb + OFF_LAND + stage * LAND_BYTES + K8_BYTES,
                                            vl, min(BN, seqlen_k - n * BN));
#else
      transpose_v8<BN, DV, NCONV / 32>(sb + OFF_V + stage * V_BYTES, sb + OFF_LAND + stage * LAND_BYTES + K8_BYTES,
                                       conv_tid(), min(BN, seqlen_k - n * BN));
#endif
      gather_publish(bar_v_full(sb, stage));
      mbar_arrive(bar_land_empty(sb, stage));
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
      }
    }
    {% else %}
#pragma unroll 1
    for (int n = n_hi - 1; n >= n_lo; --n) {
      const u32 land = sb + OFF_LAND + ls * LAND_BYTES;
      mbar_wait(bar_land_full(sb, ls), lphase, 8);
      mbar_wait(bar_k_empty(sb, stage), phase ^ 1, 3);
      convert_block<HALVES, MMA_F16>(sb + OFF_K + stage * K_BYTES, land, tid);
      gather_publish(bar_k_full(sb, stage));
      mbar_wait(bar_v_empty(sb, stage), phase ^ 1, 4);
      convert_block<VHALVES, MMA_F16>(sb + OFF_V + stage * V_BYTES, land + K8_BYTES, tid, min(BN, ti.seqlen_k - n * BN));
      gather_publish(bar_v_full(sb, stage));
      mbar_arrive(bar_land_empty(sb, ls));
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
      }
      if (++ls == LAND) {
        ls = 0;
        lphase ^= 1;
      }
    }
    {% endif %}
  }
}
{% endif %}
