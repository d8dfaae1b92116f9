// ---- attention/tile_scheduler.cuh: persistent tile hand-out and tile -> (request, head, m_block) ----
// CTA c starts with tile c; later tiles come from the semaphore (atomicAdd + gridDim.x), so each
// CTA sees strictly increasing tile indices and the entry search can move forward only.

// Last entry vb (>= `vb` on entry) whose tile_start <= t.  Warp-cooperative: 32 entries per step.
// Entries without tiles share the next entry's tile_start, so the last match owns tile t.
__device__ __forceinline__ int find_entry(const int* md, int cap4, int t, int vb) {
  const int lane = threadIdx.x & 31;
  for (;;) {
    const int idx = vb + lane;
    const int ts = idx < cap4 ? md[md_offset(cap4, MD_F_TILE_START, idx)] : 0x7fffffff;
    const u32 bal = __ballot_sync(0xffffffffu, ts <= t);
    if (bal != 0xffffffffu) return vb + __popc(bal) - 1;
    vb += 32;
  }
}

// Local tile r of an entry -> head, m_block, split (orders of FlashAttention-3's varlen tile
// scheduler; mirrored by metadata.decode_local_tile):
//  - not causal: m_block fastest, then split, then head;
//  - causal or local (LPT), one split: heads in sections of nheads_in_l2 (head swizzle: tiles running at the same
//    time share K/V in L2), all heads of a section at the last m_block first (longest first);
//  - causal with splits: the non-causal order with m_blocks reversed.
__device__ __forceinline__ void decode_tile(const MdEntry& e, int t, int num_heads, int& head, int& m_block,
                                            int& split, int& num_splits) {
  const int r = t - e.tile_start;
  const int m = e.m_blocks;
  num_splits = e.splits_nheads & 0xffff;
  if (LPT && num_splits == 1) {
    const int hs = e.splits_nheads >> 16;
    const int sec = r / (hs * m);
    const int rr = r - sec * hs * m;
    const int hc = min(hs, num_heads - sec * hs);
    const int x = rr / hc;
    head = sec * hs + (rr - x * hc);
    m_block = m - 1 - x;
    split = 0;
  } else {
    const int q = r / m;
    const int block = r - q * m;
    head = q / num_splits;
    split = q - head * num_splits;
    m_block = LPT ? m - 1 - block : block;
  }
}

// Everything a tile needs to know about its request.  Lengths are clamped at 0 so malformed
// lengths (which the host cannot check without a sync) never produce negative work.
// With pack-GQA, `head` is the KV head and rows are (position, head-in-group) pairs.
struct TileInfo {
  int b, head, row0, q_start, seqlen_q, rows, valid_rows, k_start, seqlen_k, split, num_splits;
};

__device__ __forceinline__ TileInfo tile_info(const AttnParams& p, const int* md, int cap4, int vb, int t, int num_heads,
                                              int qpk) {
  const MdEntry e = md_load_entry(md, cap4, vb);
  TileInfo ti;
  int m_block;
  decode_tile(e, t, num_heads, ti.head, m_block, ti.split, ti.num_splits);
  const int b = e.batch_idx;
  const int* cu_q = static_cast<const int*>(p.cu_seqlens_q);
  ti.b = b;
  ti.q_start = cu_q[b];
  ti.seqlen_q = max(cu_q[b + 1] - ti.q_start, 0);
  ti.rows = PACK_GQA ? ti.seqlen_q * qpk : ti.seqlen_q;
  if (p.seqused_k != nullptr) {
    ti.seqlen_k = max(static_cast<const int*>(p.seqused_k)[b], 0);
  } else {
    const int* cu_k = static_cast<const int*>(p.cu_seqlens_k);
    ti.seqlen_k = max(cu_k[b + 1] - cu_k[b], 0);
  }
  ti.k_start = p.cu_seqlens_k != nullptr ? static_cast<const int*>(p.cu_seqlens_k)[b] : 0;
  ti.row0 = m_block * BM;
  ti.valid_rows = min(BM, ti.rows - ti.row0);
  return ti;
}

{% if "t" in v.sm90_opts %}
// Option "t" (Hopper): a TileInfo through shared memory at `addr` (a shared-space address, 16-byte
// aligned: two 16-byte vectors), written by the producer's lane 0 into the ring slot of its tile
// before it publishes the tile's index, read by the consumers after waiting on the index.
__device__ __forceinline__ void st_shared_s32(u32 addr, int x) {
  asm volatile("st.shared.s32 [%0], %1;" ::"r"(addr), "r"(x) : "memory");
}
__device__ __forceinline__ void put_tile_info(u32 addr, const TileInfo& ti) {
  // 8 words: rows and valid_rows follow from seqlen_q and row0 (get_tile_info), split and num_splits share one
  asm volatile("st.shared.v4.s32 [%0], { %1, %2, %3, %4};" ::"r"(addr), "r"(ti.b), "r"(ti.head), "r"(ti.row0),
               "r"(ti.q_start) : "memory");
  asm volatile("st.shared.v4.s32 [%0], { %1, %2, %3, %4};" ::"r"(addr + 16), "r"(ti.seqlen_q), "r"(ti.k_start),
               "r"(ti.seqlen_k), "r"(ti.split | (ti.num_splits << 16)) : "memory");
}
// Lane 0 reads the slot and broadcasts it (as take_tile: compute-sanitizer's racecheck reports every
// lane's read of a slot that lane 0's arrive then releases as a hazard).
__device__ __forceinline__ TileInfo get_tile_info(u32 addr, int qpk, int lane) {
  int w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (lane == 0) {
    asm volatile("ld.shared.v4.s32 { %0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(addr) : "memory");
    asm volatile("ld.shared.v4.s32 { %0, %1, %2, %3}, [%4];" : "=r"(w[4]), "=r"(w[5]), "=r"(w[6]), "=r"(w[7])
                 : "r"(addr + 16) : "memory");
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) w[k] = __shfl_sync(0xffffffffu, w[k], 0);
  TileInfo ti;
  ti.b = w[0]; ti.head = w[1]; ti.row0 = w[2]; ti.q_start = w[3];
  ti.seqlen_q = w[4]; ti.k_start = w[5]; ti.seqlen_k = w[6];
  ti.split = w[7] & 0xffff;
  ti.num_splits = w[7] >> 16;
  ti.rows = PACK_GQA ? ti.seqlen_q * qpk : ti.seqlen_q;   // (as tile_info)
  ti.valid_rows = min(BM, ti.rows - ti.row0);
  return ti;
}
{% endif %}
// Row of the split-KV partials of token `tok` (global index) of request `b` whose tokens start at
// `q_start`: the token itself, or with p.split_request_rows > 0 (the short class of a mixed batch,
// at most that many tokens a request) b * split_request_rows + the token's index in its request.
// row_splits[tok] holds the partial count in its low 8 bits and this row above them
// (kernelgen/workspace.py); the combine kernel reads both.
__device__ __forceinline__ int partial_row(const AttnParams& p, int b, int q_start, int tok) {
  return p.split_request_rows > 0 ? b * p.split_request_rows + (tok - q_start) : tok;
}
// (Unsigned shift: a row with one partial, which the combine kernel skips, may be a token index
// past 2^23 in a long class; its bits above the count are then never read.)
__device__ __forceinline__ int row_splits_entry(const AttnParams& p, int b, int q_start, int tok, int num_splits) {
  return (int)((unsigned)num_splits | ((unsigned)partial_row(p, b, q_start, tok) << 8));
}

// Called by thread 0 when the CTA runs out of tiles: the last CTA to leave resets the semaphore
// and the exit counter, so the same metadata can drive the next launch in stream order.
__device__ __forceinline__ void release_semaphore(int* md) {
  __threadfence();
  const int done = atomicAdd(&md[MD_EXIT_COUNT], 1);
  if (done == (int)gridDim.x - 1) {
    md[MD_SEMAPHORE] = 0;
    md[MD_EXIT_COUNT] = 0;
  }
}
