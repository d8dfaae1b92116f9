// ---- attention/epilogue_sm90.cuh: write a consumer warp's O rows and LSE ----
{#- The O store width.  16-byte stores (a 4 x 4 word transpose within the quad) ran 0.93-0.97x the
    time of today's 4-byte ones at d 256 (FP8 Q/K/V and bf16), 0.96-0.99x at gemma2's FP8 d 256 soft-cap,
    and 1.0x at d 64 / d 128 on the H100 (docs/dev/perf-log.md, "Sixty-eighth session"): the default.
    4 where the wide stores made ptxas spill (NVRTC 13.0): d 256 16-bit with a window or a soft-cap, FP8
    with both (16-bit causal d 256 spilled a word too until its consumers read the tile index through
    the shared window, tile_sm90.cuh).  KG_O_STORE (KERNELGEN_DEFINES) overrides it for experiments. #}
// KG_O_STORE: bytes a thread writes per O store.  4: a quad writes 16 bytes of a row per 8-column
// slice (each 32-byte sector in two halves).  8: lanes t, t ^ 1 swap one word per two slices (one
// SHFL), so a quad writes a whole sector per store.  16: a 4 x 4 word transpose within the quad (lanes
// ^ 1 then ^ 2; four SHFL per four slices), 16-byte stores.  out's rows and heads start 16-byte aligned
// (validation.rows_16b).
// (A constant of this kernel's namespace: a fused kernel's two variants may differ.)
#ifdef KG_O_STORE
constexpr int O_STORE = KG_O_STORE;
#else
constexpr int O_STORE = {{ 4 if v.head_dim_v == 256 and ((not v.get("fp8_mma") and (v.mask == "local" or v.softcap))
                                                       or (v.get("fp8_mma") and v.softcap and v.mask == "local")) else 16 }};
#endif
static_assert(O_STORE == 4 || O_STORE == 8 || O_STORE == 16, "KG_O_STORE: 4, 8 or 16 bytes");
// Row `row` (the quad's row; valid: whether to write it) of accumulator half h, from this lane (quad
// position tq).  Every lane of the warp must call it (shuffles), whatever `valid`.
__device__ __forceinline__ void store_o_row(u16* row, bool valid, const float (&o)[1][DV / 8][4], int h, int tq) {
  // 4-byte stores from slice `done` on
  constexpr int done = O_STORE == 16 ? DV_OUT / 32 * 4 : O_STORE == 8 ? DV_OUT / 16 * 2 : 0;
  if constexpr (O_STORE == 16) {
    const bool odd = tq & 1, up = tq & 2;
#pragma unroll
    for (int m = 0; m < DV_OUT / 32; ++m) {
      u32 s[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) s[k] = pack2(o[0][4 * m + k][2 * h], o[0][4 * m + k][2 * h + 1]);
#pragma unroll
      for (int i = 0; i < 2; ++i) {   // lanes ^ 1: the slots whose index differs from tq in bit 0
        const u32 y = __shfl_xor_sync(0xffffffffu, odd ? s[2 * i] : s[2 * i + 1], 1);
        if (odd) s[2 * i] = y; else s[2 * i + 1] = y;
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {   // lanes ^ 2: bit 1
        const u32 y = __shfl_xor_sync(0xffffffffu, up ? s[i] : s[i + 2], 2);
        if (up) s[i] = y; else s[i + 2] = y;
      }
      // (inline st.global.v4: NVVM split a uint4 store at offset 0 into four 4-byte ones)
      if (valid)
        asm volatile("st.global.v4.b32 [%0], { %1, %2, %3, %4 };" :: "l"(row + 8 * (4 * m + tq)), "r"(s[0]), "r"(s[1]),
                     "r"(s[2]), "r"(s[3]) : "memory");
    }
  } else if constexpr (O_STORE == 8) {
    const bool odd = tq & 1;
#pragma unroll
    for (int i = 0; i < DV_OUT / 16; ++i) {
      const u32 a = pack2(o[0][2 * i][2 * h], o[0][2 * i][2 * h + 1]);
      const u32 b = pack2(o[0][2 * i + 1][2 * h], o[0][2 * i + 1][2 * h + 1]);
      const u32 y = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
      if (valid)
        asm volatile("st.global.v2.b32 [%0], { %1, %2 };" :: "l"(row + 8 * (2 * i + odd) + 2 * (tq & 2)), "r"(odd ? y : a),
                     "r"(odd ? b : y) : "memory");
    }
  }
#pragma unroll
  for (int j = done; j < DV_OUT / 8; ++j)
    if (valid) *reinterpret_cast<u32*>(row + 8 * j + 2 * tq) = pack2(o[0][j][2 * h], o[0][j][2 * h + 1]);
}
{% if not v.pack_gqa %}
// Straight from the wgmma accumulators (normalised by finalize_rows): thread lane = 4g + t of
// consumer warp cw holds tile rows cw * 16 + g and + 8, columns 8j + 2t, 8j + 2t + 1; a quad
// holds 16 contiguous bytes of a row per 8-column slice (store_o_row writes them).  Only the head dim's DV_OUT columns are
// stored (head dim 96's accumulators hold 128, the last 32 zero).  Rows >= valid_rows are not written.
__device__ __forceinline__ void store_rows(const AttnParams& p, const TileInfo& te, const float (&o)[1][DV / 8][4],
                                           const float (&lse)[1][2], int cw, int lane) {
  const int g = lane >> 2, tq = lane & 3;
  u16* O = static_cast<u16*>(const_cast<void*>(p.out));
  float* LSE = static_cast<float*>(const_cast<void*>(p.lse));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = cw * WM + g + 8 * h;
    const bool valid = r < te.valid_rows;
    if constexpr (O_STORE == 4) {   // no shuffles: skip the row, as the 4-byte stores always did
      if (!valid) continue;
    }
    const int tok = te.q_start + te.row0 + r;
    store_o_row(O + (i64)tok * p.o_row_stride + (i64)te.head * p.o_head_stride, valid, o, h, tq);
    if (valid && tq == 0 && LSE != nullptr) LSE[(i64)te.head * p.lse_head_stride + tok] = lse[0][h];
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
    const bool valid = r < te.valid_rows;
    if constexpr (O_STORE == 4) {   // no shuffles: skip the row, as the 4-byte stores always did
      if (!valid) continue;
    }
    const int tok = row_token(rm, r), head = row_qhead(rm, r);
    store_o_row(O + (i64)tok * p.o_row_stride + (i64)head * p.o_head_stride, valid, o, h, tq);
    if (valid && tq == 0 && LSE != nullptr) LSE[(i64)head * p.lse_head_stride + tok] = lse[0][h];
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
