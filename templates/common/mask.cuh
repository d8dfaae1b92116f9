// ---- common/mask.cuh: key-length and causal masks on a block of scores ----
// Causal is bottom-right aligned: query row r of a request sees key j iff j <= r + seqlen_k - seqlen_q.

// Does key block n_block need any masking for the query block starting at row0?
__device__ __forceinline__ bool block_needs_mask(int n_block, int row0, int seqlen_q, int seqlen_k) {
  const int last_key = (n_block + 1) * BN - 1;
  if (last_key >= seqlen_k) return true;
  return CAUSAL && last_key > row0 + seqlen_k - seqlen_q;
}

__device__ __forceinline__ void apply_mask(float (&s)[MT][BN / 8][4], int n_block, int row0, int warp, int lane,
                                           int seqlen_q, int seqlen_k) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + warp * WM + mt * 16 + g + 8 * h;
      int col_end = seqlen_k;  // exclusive
      if (CAUSAL) col_end = min(col_end, row + seqlen_k - seqlen_q + 1);
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n_block * BN + nt * 8 + 2 * tq + e;
          if (col >= col_end) s[mt][nt][2 * h + e] = -KG_INF;
        }
    }
}
