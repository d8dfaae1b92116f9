// ---- attention/epilogue_sm80.cuh: normalise, write O through shared memory (16-byte stores) and LSE ----
// A row that saw no key (row_sum == 0) gets O = 0 and LSE = -inf.  LSE is the natural log.
__device__ __forceinline__ void epilogue(float (&o)[MT][DV / 8][4], const float (&row_max)[MT][2],
                                         const float (&row_sum)[MT][2], u16* sO, u16* out_tile,
                                         i64 o_row_stride, float* lse_tile, int valid_rows, int tid, int warp, int lane) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = warp * WM + mt * 16 + g + 8 * h;
      if (lse_tile != nullptr && tq == 0 && row < valid_rows)
        lse_tile[row] = l > 0.f ? (row_max[mt][h] + fast_log2(l)) * KG_LN2 : -KG_INF;
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt)
        *reinterpret_cast<u32*>(sO + row * SO + dt * 8 + 2 * tq) = pack2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
    }
  __syncthreads();
  // Same thread layout as load_tile (mainloop_sm80.cuh): running row pointer, constant offsets.
  constexpr int CPR = DV / 8;
  constexpr int TPR = copy_tpr(CPR);
  constexpr int RSTEP = NT / TPR;
  const int r0 = tid / TPR, c0 = tid % TPR;
  u16* dst = out_tile + (i64)r0 * o_row_stride + c0 * 8;
  const i64 step = (i64)RSTEP * o_row_stride;
#pragma unroll
  for (int i = 0; i < (BM + RSTEP - 1) / RSTEP; ++i) {
    const int r = r0 + i * RSTEP;
    if ((BM % RSTEP == 0 || r < BM) && r < valid_rows) {
#pragma unroll
      for (int j = 0; j < CPR / TPR; ++j)
        *reinterpret_cast<uint4*>(dst + j * TPR * 8) = *reinterpret_cast<const uint4*>(sO + r * SO + c0 * 8 + j * TPR * 8);
    }
    dst += step;
    asm volatile("" : "+l"(dst));
  }
}
