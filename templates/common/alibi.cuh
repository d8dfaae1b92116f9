// ---- common/alibi.cuh: ALiBi biases (Press et al. 2022, "Train Short, Test Long") ----
// Included only by the ALiBi variants (AttentionSpec.alibi).  FlashAttention-2's convention: the
// logit of query position r (0-based in its request) and key j, after softmax_scale and soft-cap,
// gets -slope * |r + seqlen_k - seqlen_q - j| (with causal the distance is never negative; FA2
// adds slope * j there, the same softmax shifted by a constant per row: its LSE differs by that
// constant, ours is the LSE of the logits as written).  slope = alibi_slopes[b * batch_stride + h]
// for request b and query head h (batch_stride 0 for (num_heads_q,) slopes).  A tile row's head
// is the CTA's head, or with pack-GQA kv_head * qpk + row % qpk.  The bias is added in the units
// of the scores it meets (`unit`: log2(e) on scores already scaled to log2 units, log2(e) /
// scale_log2 on raw scores whose scale is folded into the exponent later); -inf (masked) stays.
constexpr float ALIBI_LOG2E = 1.4426950408889634f;

__device__ __forceinline__ float alibi_slope(const AttnParams& p, int b, int head) {
  return __ldg(reinterpret_cast<const float*>(p.alibi_slopes) + (i64)b * p.alibi_batch_stride + head);
}

// The query head of tile row `row` (head: the CTA's query head, or its KV head with pack-GQA).
__device__ __forceinline__ int alibi_head(int head, int row, int qpk) { return PACK_GQA ? head * qpk + row % qpk : head; }

// slope * unit for this thread's rows of the m16 fragment layout (rows row0 + warp * WM + mt * 16
// + g + 8 h), loaded once per tile (without pack-GQA every row has the tile's head: sl[0][0] only).
__device__ __forceinline__ void alibi_row_coefs(float (&sl)[MT][2], const AttnParams& p, int b, int head, int row0,
                                                int qpk, int warp, int lane, float unit) {
  const int g = lane >> 2;
  if (!PACK_GQA) {  // one head for the whole tile: one live value (apply_alibi reads sl[0][0] only)
    sl[0][0] = alibi_slope(p, b, head) * unit;
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sl[mt][h] = alibi_slope(p, b, alibi_head(head, row0 + warp * WM + mt * 16 + g + 8 * h, qpk)) * unit;
}

// s -= coef * |pos + seqlen_k - seqlen_q - key| on a block of scores (the layout apply_mask uses).
// In float arithmetic: the row's distance to the thread's first key of the block once per row,
// then one FADD and one FFMA (|x| is an operand modifier) per score.  Integer arithmetic took an
// IADD, an IABS and an I2F per score (ALiBi cost 1.09x on the causal 16k prefill).  Exact: the
// positions are integers below 2^24.
__device__ __forceinline__ void apply_alibi(float (&s)[MT][BN / 8][4], const float (&sl)[MT][2], const MaskInfo& mi,
                                            int n, int row0, int qpk, int warp, int lane) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float d0 = (float)(row_position(row0 + warp * WM + mt * 16 + g + 8 * h, qpk) + mi.offset - n * BN - 2 * tq);
      const float coef = PACK_GQA ? sl[mt][h] : sl[0][0];
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) s[mt][nt][2 * h + e] = fmaf(-coef, fabsf(d0 - (float)(nt * 8 + e)), s[mt][nt][2 * h + e]);
    }
}

// Causal ALiBi with one FFMA per score.  Under a causal mask every key a row keeps is at or before
// its position, so the bias is -coef * (kpos - col) without |.|, which splits into
//   -coef * (kpos - n BN - 2 tq)  (one value per row and lane: roff, taken off in softmax_scores)
//   +coef * (nt * 8 + e)          (an immediate per score: one FFMA)
// The scores leave here as true score + roff; softmax_scores subtracts roff from the row's max and
// folds it into the exponent's offset, so row_max, row_sum and the LSE are those of the true
// scores.  The added terms stay below coef * BN (no large magnitudes, unlike FA2's slope * j).
// ADD false: the per-score part is already in s (alibi_acc_init started the Q K^T accumulators
// from it); only roff is computed.
template <bool ADD = true>
__device__ __forceinline__ void apply_alibi_causal(float (&s)[MT][BN / 8][4], const float (&sl)[MT][2],
                                                   const MaskInfo& mi, int n, int row0, int qpk, int warp, int lane,
                                                   float (&roff)[MT][2]) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float coef = PACK_GQA ? sl[mt][h] : sl[0][0];
      roff[mt][h] = coef * (float)(row_position(row0 + warp * WM + mt * 16 + g + 8 * h, qpk) + mi.offset - n * BN - 2 * tq);
      if (ADD) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) s[mt][nt][2 * h + e] = fmaf(coef, (float)(nt * 8 + e), s[mt][nt][2 * h + e]);
      }
    }
}

{% if v.pack_gqa and v.mainloop == "sm90a" %}
// Pack-GQA on the Hopper kernel: apply_alibi / apply_alibi_causal with this thread's two rows'
// positions given (rpos: consumer_mainloop's, row / qpk without a division a block) and each row's
// own slope (sl[0][h]: alibi_row_coefs, the row's query head).
__device__ __forceinline__ void apply_alibi_pos(float (&s)[1][BN / 8][4], const float (&sl)[1][2], const MaskInfo& mi,
                                                int n, const int (&rpos)[2], int lane) {
  const int tq = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float d0 = (float)(rpos[h] + mi.offset - n * BN - 2 * tq);
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) s[0][nt][2 * h + e] = fmaf(-sl[0][h], fabsf(d0 - (float)(nt * 8 + e)), s[0][nt][2 * h + e]);
  }
}
template <bool ADD = true>
__device__ __forceinline__ void apply_alibi_causal_pos(float (&s)[1][BN / 8][4], const float (&sl)[1][2],
                                                       const MaskInfo& mi, int n, const int (&rpos)[2], int lane,
                                                       float (&roff)[1][2]) {
  const int tq = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    roff[0][h] = sl[0][h] * (float)(rpos[h] + mi.offset - n * BN - 2 * tq);
    if (ADD) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) s[0][nt][2 * h + e] = fmaf(sl[0][h], (float)(nt * 8 + e), s[0][nt][2 * h + e]);
    }
  }
}

{% endif %}
// ALIBI_ACC (the Hopper kernel's causal ALiBi, variant_sm90.cuh): the Q K^T accumulators start from
// the per-score part coef * (nt * 8 + e) (the first wgmma accumulates: scale_d 1), so the scores
// come back as apply_alibi_causal's without its FFMA a score, and apply_alibi_causal (ADD false)
// only forms roff.  The values (32 products, copied to the second row: no FFMA) are written once the
// previous block's P has left s (pack_p), before the next Q K^T issue: off the path from S to the
// row max, where the FFMAs delayed every exponential.  H200, causal 16k, 32 heads, d 128
// (tile_ab, interleaved graph replays, two calls): ALiBi 1.10-1.11x the plain kernel's time with
// the FFMAs, 1.05-1.06x with the accumulators started (docs/dev/perf-log.md, twenty-third session).
// The sum S = bias + Q K^T is the tensor cores' fp32 accumulation instead of an FFMA's rounding:
// outputs differ by rounding (1 bf16 ulp at most in that run).
__device__ __forceinline__ void alibi_acc_init(float (&s)[MT][BN / 8][4], const float (&sl)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float coef = PACK_GQA ? sl[mt][h] : sl[0][0];
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) s[mt][nt][2 * h + e] = coef * (float)(nt * 8 + e);
    }
}
