// ---- attention/epilogue_sm90.cuh: write a consumer warp's O rows and LSE ----
{% if not v.pack_gqa %}
// Straight from the wgmma accumulators (normalised by finalize_rows): thread lane = 4g + t of
// consumer warp cw holds tile rows cw * 16 + g and + 8, columns 8j + 2t, 8j + 2t + 1; a quad
// writes 16 contiguous bytes of a row per 8-column slice.  Only the head dim's DV_OUT columns are
// stored (head dim 96's accumulators hold 128, the last 32 zero).  Rows >= valid_rows are not written.
__device__ __forceinline__ void store_rows(const AttnParams& p, const TileInfo& te, const float (&o)[1][DV / 8][4],
                                           const float (&lse)[1][2], int cw, int lane) {
  const int g = lane >> 2, tq = lane & 3;
  u16* O = static_cast<u16*>(const_cast<void*>(p.out));
  float* LSE = static_cast<float*>(const_cast<void*>(p.lse));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = cw * WM + g + 8 * h;
    if (r < te.valid_rows) {
      const int tok = te.q_start + te.row0 + r;
      u16* dst = O + (i64)tok * p.o_row_stride + (i64)te.head * p.o_head_stride + 2 * tq;
#pragma unroll
      for (int j = 0; j < DV_OUT / 8; ++j) *reinterpret_cast<u32*>(dst + 8 * j) = pack2(o[0][j][2 * h], o[0][j][2 * h + 1]);
      if (tq == 0 && LSE != nullptr) LSE[(i64)te.head * p.lse_head_stride + tok] = lse[0][h];
    }
  }
}

// Split-KV partial of split te.split (te.num_splits > 1): the fp32 O rows (normalised within the
// split) and their natural-log LSE (-inf for a row that saw no key in this split) into the
// workspace, in the layout the combine kernel reads (templates/combine/combine.cu.j2):
// out_accum[split][head][partial row][DV] and lse_accum[split][head][partial row] (partial_row:
// the token, or its (request, index) slot in a mixed batch's short class).  The LSE is written whether
// or not the call returns one (the combine kernel weighs the partials by it).
__device__ __forceinline__ void store_partial_rows(const AttnParams& p, const TileInfo& te,
                                                   const float (&o)[1][DV / 8][4], const float (&lse)[1][2], int cw,
                                                   int lane) {
  const int g = lane >> 2, tq = lane & 3;
  float* acc = static_cast<float*>(const_cast<void*>(p.out_accum)) + (i64)te.split * p.accum_split_stride +
               (i64)te.head * p.accum_head_stride;
  float* lacc = static_cast<float*>(const_cast<void*>(p.lse_accum)) + (i64)te.split * p.lse_accum_split_stride +
                (i64)te.head * p.lse_accum_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = cw * WM + g + 8 * h;
    if (r < te.valid_rows) {
      const int prow = partial_row(p, te.b, te.q_start, te.q_start + te.row0 + r);
      float* dst = acc + (i64)prow * DV_OUT + 2 * tq;  // rows of head_dim_v floats (DV_OUT; DV pads d 96)
#pragma unroll
      for (int j = 0; j < DV_OUT / 8; ++j) *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[0][j][2 * h], o[0][j][2 * h + 1]);
      if (tq == 0) lacc[prow] = lse[0][h];
    }
  }
}
{% else %}
// Pack-GQA (PACK_GQA, te.head the KV head): tile row r is token (row0 + r) / qpk of the request and
// query head te.head * qpk + (row0 + r) % qpk.  row0 is a multiple of qpk (BM % qpk == 0), so only
// r < BM is divided, by qpk_magic's multiply-shift (mainloop_sm90.cuh).
struct RowMap {
  int tok0;   // the tile's first token (row 0's), its index in q
  int head0;  // the tile's first query head (kv_head * qpk)
  int qpk;
  unsigned m;
};
__device__ __forceinline__ RowMap row_map(const TileInfo& te, int qpk) {
  RowMap rm;
  rm.qpk = qpk;
  rm.m = qpk_magic(qpk);
  rm.tok0 = te.q_start + tile_pos_first(te, rm.m);
  rm.head0 = te.head * qpk;
  return rm;
}
__device__ __forceinline__ int row_token(const RowMap& rm, int r) { return rm.tok0 + div_qpk(r, rm.m); }
__device__ __forceinline__ int row_qhead(const RowMap& rm, int r) { return rm.head0 + r - div_qpk(r, rm.m) * rm.qpk; }

// As above, each row to its own token and query head (O and LSE).
__device__ __forceinline__ void store_rows(const AttnParams& p, const TileInfo& te, const float (&o)[1][DV / 8][4],
                                           const float (&lse)[1][2], int qpk, int cw, int lane) {
  const int g = lane >> 2, tq = lane & 3;
  const RowMap rm = row_map(te, qpk);
  u16* O = static_cast<u16*>(const_cast<void*>(p.out));
  float* LSE = static_cast<float*>(const_cast<void*>(p.lse));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = cw * WM + g + 8 * h;
    if (r < te.valid_rows) {
      const int tok = row_token(rm, r), head = row_qhead(rm, r);
      u16* dst = O + (i64)tok * p.o_row_stride + (i64)head * p.o_head_stride + 2 * tq;
#pragma unroll
      for (int j = 0; j < DV_OUT / 8; ++j) *reinterpret_cast<u32*>(dst + 8 * j) = pack2(o[0][j][2 * h], o[0][j][2 * h + 1]);
      if (tq == 0 && LSE != nullptr) LSE[(i64)head * p.lse_head_stride + tok] = lse[0][h];
    }
  }
}

// As above, the partials of each row at its own query head and token.
__device__ __forceinline__ void store_partial_rows(const AttnParams& p, const TileInfo& te,
                                                   const float (&o)[1][DV / 8][4], const float (&lse)[1][2], int qpk,
                                                   int cw, int lane) {
  const int g = lane >> 2, tq = lane & 3;
  const RowMap rm = row_map(te, qpk);
  float* acc = static_cast<float*>(const_cast<void*>(p.out_accum)) + (i64)te.split * p.accum_split_stride;
  float* lacc = static_cast<float*>(const_cast<void*>(p.lse_accum)) + (i64)te.split * p.lse_accum_split_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = cw * WM + g + 8 * h;
    if (r < te.valid_rows) {
      const int prow = partial_row(p, te.b, te.q_start, row_token(rm, r));
      const int head = row_qhead(rm, r);
      float* dst = acc + (i64)head * p.accum_head_stride + (i64)prow * DV_OUT + 2 * tq;
#pragma unroll
      for (int j = 0; j < DV_OUT / 8; ++j) *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[0][j][2 * h], o[0][j][2 * h + 1]);
      if (tq == 0) lacc[(i64)head * p.lse_accum_head_stride + prow] = lse[0][h];
    }
  }
}
{% endif %}
