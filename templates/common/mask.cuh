// ---- common/mask.cuh: key-length, causal and sliding-window masks on a block of scores ----
// Positions are bottom-right aligned: query position r of a request (0 <= r < seqlen_q) stands at
// key position r + seqlen_k - seqlen_q.  Causal: key j is visible iff j <= that position.  Local
// (window_size = (left, right), -1 = unbounded): iff pos - left <= j <= pos + right.
// With pack-GQA a tile row is a (position, head) pair: its position is row / qpk.

struct MaskInfo {
  int seqlen_k;     // keys of the request
  int offset;       // seqlen_k - seqlen_q
  int left, right;  // window (local only; -1 = unbounded)
};

__device__ __forceinline__ int row_position(int row, int qpk) { return PACK_GQA ? row / qpk : row; }

// Last key (inclusive) visible to query position pos; keys past seqlen_k are cut separately.
__device__ __forceinline__ int key_hi(const MaskInfo& mi, int pos) {
  if (CAUSAL) return pos + mi.offset;
  if (LOCAL && mi.right >= 0) return pos + mi.offset + mi.right;
  return mi.seqlen_k - 1;
}
// First key visible to query position pos.
__device__ __forceinline__ int key_lo(const MaskInfo& mi, int pos) {
  if (LOCAL && mi.left >= 0) return pos + mi.offset - mi.left;
  return 0;
}

// Key blocks [n_lo, n_hi) that the query positions [pos_first, pos_last] can see.
__device__ __forceinline__ void key_block_range(const MaskInfo& mi, int pos_first, int pos_last, int& n_lo, int& n_hi) {
  n_hi = (mi.seqlen_k + BN - 1) / BN;
  n_lo = 0;
  const int hi = key_hi(mi, pos_last);
  n_hi = hi < 0 ? 0 : min(n_hi, hi / BN + 1);
  const int lo = key_lo(mi, pos_first);
  if (lo > 0) n_lo = min(lo / BN, n_hi);
}

// Does key block n need element masks for query positions [pos_first, pos_last]?
__device__ __forceinline__ bool block_needs_mask(const MaskInfo& mi, int n, int pos_first, int pos_last) {
  const int first_key = n * BN, last_key = n * BN + BN - 1;
  if (last_key >= mi.seqlen_k) return true;
  if ((CAUSAL || LOCAL) && last_key > key_hi(mi, pos_first)) return true;
  if (LOCAL && first_key < key_lo(mi, pos_last)) return true;
  return false;
}

{% set rel = v.get("fp8_mma") and v.mainloop == "sm90a" and not v.get("fp8_regs") and v.mask == "causal" and v.head_dim <= 128 %}
__device__ __forceinline__ void apply_mask(float (&s)[MT][BN / 8][4], const MaskInfo& mi, int n, int row0, int qpk,
                                           int warp, int lane) {
  const int g = lane >> 2, tq = lane & 3;
{% if rel %}
  // The FP8 tensor-core causal kernels at head dim 64 / 128 test only the key limit (a key is never
  // negative), relative to the lane's first column: one compare of each score against a constant
  // (d 128 loop 100 -> 68 ISETP, 30 fewer VIADD).  The other kernels keep the form below: on the
  // H200 the relative form measured FP8 d 128 causal 16k 0.93-0.97x the time and FP8 d 64 causal
  // 0.99x, but FP8 d 64 non-causal 1.09x and bf16 d 128 causal 1.07-1.12x; the masked path runs on
  // diagonal blocks only, so these differences come from how ptxas lays out the rest of the kernel,
  // and the bf16 one was measured where identical kernels differed by 6-8 % (docs/dev/perf-log.md,
  // "Eighteenth session": not settled).
  const int col0 = n * BN + 2 * tq;   // S column nt * 8 + 2 tq + e
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int hi = min(mi.seqlen_k - 1, key_hi(mi, row_position(row0 + warp * WM + mt * 16 + g + 8 * h, qpk))) - col0;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (nt * 8 + e > hi) s[mt][nt][2 * h + e] = -KG_INF;
    }
{% else %}
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int pos = row_position(row0 + warp * WM + mt * 16 + g + 8 * h, qpk);
      const int hi = min(mi.seqlen_k - 1, key_hi(mi, pos));
      const int lo = key_lo(mi, pos);
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
{% if v.get("fp8_regs") %}
          const int col = n * BN + 4 * tq + 2 * nt + e;   // FP8_REGS: S column 8 nt + 2 tq + e is key fp8_key(that)
{% else %}
          const int col = n * BN + nt * 8 + 2 * tq + e;
{% endif %}
          if (col > hi || col < lo) s[mt][nt][2 * h + e] = -KG_INF;
        }
    }
{% endif %}
}

{% if v.get("pack_gqa") and v.get("mainloop") == "sm90a" %}
// The Hopper kernel's packed tiles (pack-GQA, one m16 row tile a warp): the thread's two rows'
// query positions come precomputed (pos[h] for rows g and g + 8, consumer_mainloop), so a masked
// block costs no division by the run-time qpk.
__device__ __forceinline__ void apply_mask_pos(float (&s)[1][BN / 8][4], const MaskInfo& mi, int n, const int (&pos)[2],
                                               int lane) {
  const int tq = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int hi = min(mi.seqlen_k - 1, key_hi(mi, pos[h]));
    const int lo = key_lo(mi, pos[h]);
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n * BN + nt * 8 + 2 * tq + e;
        if (col > hi || col < lo) s[0][nt][2 * h + e] = -KG_INF;
      }
  }
}
{% endif %}
