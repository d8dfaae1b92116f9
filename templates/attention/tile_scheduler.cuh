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

// Local tile r of an entry -> head and m_block (m_block fastest; reversed for causal so the
// query blocks that see the most keys start first).
__device__ __forceinline__ void decode_tile(const MdEntry& e, int t, int& head, int& m_block) {
  const int r = t - e.tile_start;
  head = r / e.m_blocks;
  const int mb = r - head * e.m_blocks;
  m_block = CAUSAL ? e.m_blocks - 1 - mb : mb;
}

// Everything a tile needs to know about its request.  Lengths are clamped at 0 so malformed
// cu_seqlens (which the host cannot check without a sync) never produce negative work.
struct TileInfo {
  int head, row0, q_start, seqlen_q, valid_q, k_start, seqlen_k;
};

__device__ __forceinline__ TileInfo tile_info(const int* md, int cap4, int vb, int t, const int* cu_q, const int* cu_k) {
  const MdEntry e = md_load_entry(md, cap4, vb);
  TileInfo ti;
  int m_block;
  decode_tile(e, t, ti.head, m_block);
  const int b = e.batch_idx;
  ti.q_start = cu_q[b];
  ti.seqlen_q = max(cu_q[b + 1] - ti.q_start, 0);
  ti.k_start = cu_k[b];
  ti.seqlen_k = max(cu_k[b + 1] - ti.k_start, 0);
  ti.row0 = m_block * BM;
  ti.valid_q = min(BM, ti.seqlen_q - ti.row0);
  return ti;
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
