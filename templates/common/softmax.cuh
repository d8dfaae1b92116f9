// ---- common/softmax.cuh: fp32 online softmax in base 2, softmax_scale * log2(e) folded into one factor ----
// row_max is kept in scaled log2 units (max of s * scale * log2(e)).  A row that has seen no key
// yet has row_max = -inf; exponents are then taken against 0 so -inf - -inf never makes a NaN
// (the -inf sentinel is IEEE, never a finite stand-in, so very negative logits stay exact).

__device__ __forceinline__ void softmax_update(float (&s)[MT][BN / 8][4], float (&row_max)[MT][2],
                                               float (&row_sum)[MT][2], float (&o)[MT][DV / 8][4],
                                               float scale_log2) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Scale first (one FMUL per score): equal logits then give exactly equal scaled values, so
      // the row max subtracts to exactly 0 and a uniform row gets weights of exactly 1.
      float mx = -KG_INF;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[mt][nt][2 * h + e] *= scale_log2;
          mx = fmaxf(mx, s[mt][nt][2 * h + e]);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[mt][h], mx);
      const float m_use = m_new == -KG_INF ? 0.f : m_new;
      const float corr = fast_exp2(row_max[mt][h] - m_use);
      row_max[mt][h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(s[mt][nt][2 * h + e] - m_use);
          s[mt][nt][2 * h + e] = pv;
          sum += pv;
        }
      row_sum[mt][h] = row_sum[mt][h] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt) {
        o[mt][dt][2 * h] *= corr;
        o[mt][dt][2 * h + 1] *= corr;
      }
    }
}
