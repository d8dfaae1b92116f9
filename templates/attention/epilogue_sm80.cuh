// ---- attention/epilogue_sm80.cuh: write O and LSE (normalised by finalize_rows, common/softmax.cuh) ----
// Full results go through shared memory for 16-byte stores; split-KV partials (fp32, already
// normalised, with their LSE) go straight from registers to the accumulation buffers.

// Final output: rows r < valid_rows go to out_row(r) (a u16*), LSE to lse_at(r) (a float* or null).
template <class OutRow, class LseAt>
__device__ __forceinline__ void store_output(const float (&o)[MT][DV / 8][4], const float (&lse)[MT][2], u16* sO,
                                             OutRow out_row, LseAt lse_at, int valid_rows, int tid, int warp,
                                             int lane) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * WM + mt * 16 + g + 8 * h;
      if (tq == 0 && row < valid_rows) {
        float* lp = lse_at(row);
        if (lp != nullptr) *lp = lse[mt][h];
      }
{% if v.get("fp8_regs") %}
      // FP8_REGS: block dt, column 2 tq + x is head dim 32 (dt / 4) + 8 tq + 4 x + dt % 4 (mainloop_sm80.cuh)
#pragma unroll
      for (int q = 0; q < DV / 32; ++q) {
        uint4 w;
        w.x = pack2(o[mt][4 * q][2 * h], o[mt][4 * q + 1][2 * h]);
        w.y = pack2(o[mt][4 * q + 2][2 * h], o[mt][4 * q + 3][2 * h]);
        w.z = pack2(o[mt][4 * q][2 * h + 1], o[mt][4 * q + 1][2 * h + 1]);
        w.w = pack2(o[mt][4 * q + 2][2 * h + 1], o[mt][4 * q + 3][2 * h + 1]);
        *reinterpret_cast<uint4*>(sO + row * SO + 32 * q + 8 * tq) = w;
      }
{% else %}
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt)
        *reinterpret_cast<u32*>(sO + row * SO + dt * 8 + 2 * tq) = pack2(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
{% endif %}
    }
  tile_sync();
  constexpr int CPR = DV / 8;
  constexpr int TPR = copy_tpr(CPR);
  constexpr int RSTEP = NT / TPR;
  const int r0 = tid / TPR, c0 = tid % TPR;
#pragma unroll
  for (int i = 0; i < (BM + RSTEP - 1) / RSTEP; ++i) {
    const int r = r0 + i * RSTEP;
    if ((BM % RSTEP == 0 || r < BM) && r < valid_rows) {
      u16* dst = out_row(r) + c0 * 8;
#pragma unroll
      for (int j = 0; j < CPR / TPR; ++j)
        *reinterpret_cast<uint4*>(dst + j * TPR * 8) = *reinterpret_cast<const uint4*>(sO + r * SO + c0 * 8 + j * TPR * 8);
    }
  }
}

// Split-KV partial: fp32 O rows to acc_row(r) (a float*), LSE to lse_at(r).
template <class AccRow, class LseAt>
__device__ __forceinline__ void store_partial(const float (&o)[MT][DV / 8][4], const float (&lse)[MT][2],
                                              AccRow acc_row, LseAt lse_at, int valid_rows, int warp, int lane) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * WM + mt * 16 + g + 8 * h;
      if (row < valid_rows) {
        if (tq == 0) *lse_at(row) = lse[mt][h];
        float* dst = acc_row(row);
{% if v.get("fp8_regs") %}
#pragma unroll
        for (int q = 0; q < DV / 32; ++q) {   // FP8_REGS' head-dim order (store_output)
          *reinterpret_cast<float4*>(dst + 32 * q + 8 * tq) =
              make_float4(o[mt][4 * q][2 * h], o[mt][4 * q + 1][2 * h], o[mt][4 * q + 2][2 * h], o[mt][4 * q + 3][2 * h]);
          *reinterpret_cast<float4*>(dst + 32 * q + 8 * tq + 4) =
              make_float4(o[mt][4 * q][2 * h + 1], o[mt][4 * q + 1][2 * h + 1], o[mt][4 * q + 2][2 * h + 1],
                          o[mt][4 * q + 3][2 * h + 1]);
        }
{% else %}
#pragma unroll
        for (int dt = 0; dt < DV / 8; ++dt)
          *reinterpret_cast<float2*>(dst + dt * 8 + 2 * tq) = make_float2(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
{% endif %}
      }
    }
}
