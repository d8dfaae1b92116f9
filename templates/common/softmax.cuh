// ---- common/softmax.cuh: score transform and fp32 online softmax in base 2 ----
// Scores are first put in log2 units: s * softmax_scale * log2(e) (one factor), or with softcap
// c > 0, c * log2(e) * tanh(s * softmax_scale / c) (Gemma-2 style logit capping).  Then the
// online softmax (Milakov & Gimelshein 2018): row_max is the running max in those units; a row that
// has seen no key yet has row_max = -inf and exponents are taken against 0, so -inf - -inf never
// makes a NaN (the -inf sentinel is IEEE, never a finite stand-in, so very negative logits stay
// exact).  Equal logits give exactly equal scaled values: the max subtracts to exactly 0.

// The built-in soft-cap (softcap > 0) takes the hardware tanh, tanh.approx.f32 (MUFU.TANH, sm_75+),
// as FlashAttention-2/3/4 and FlashInfer do: one MUFU instruction a logit.  The PTX ISA bounds its
// relative error by 2^-11 (measured over every float32 on the H200: tests/gpu/test_softcap_gpu.py);
// a capped logit c tanh(x) is then off by at most c 2^-11 |tanh(x)|, and the float64 reference's
// error bounds (apps/reference.py, ``error_bounds``) carry that into out and the lse.  H200, causal
// 2 x 4k d 256 soft-cap 50 (docs/dev/perf-log.md, "Twenty-seventh session"): 0.80x the time of
// the accurate form below, 0.96-0.97x FA3's.
__device__ __forceinline__ float tanh_approx(float x) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
  return t;
}

// The accurate tanh (``kg_tanh``, a helper of the user variants' snippets), from one ex2:
// tanh|x| = (1 - e) / (1 + e) with e = 2^(-2|x| log2 e).  Absolute error about 1e-7.
#ifdef KG_TANH_RCP
#define KG_TANH_RCP_{{ v.ns }} KG_TANH_RCP
#else
#define KG_TANH_RCP_{{ v.ns }} {{ 0 if (v.mainloop == "sm90a" and v.head_dim <= 64) else 1 }}
#endif
__device__ __forceinline__ float tanh_ex2(float x) {
#if KG_TANH_RCP_{{ v.ns }} == 2
  return tanh_approx(x);
#elif KG_TANH_RCP_{{ v.ns }} == 1
  const float e = fast_exp2(-2.8853900817779268f * fabsf(x));
  return copysignf(__fdividef(1.f - e, 1.f + e), x);
#else
  const float e = fast_exp2(-2.8853900817779268f * fabsf(x));
  const float y = 1.f + e;
  float r = fmaf(y, (y - 4.5f) * (32.f / 99.f), 210.f / 99.f);
  r = fmaf(r, fmaf(-y, r, 1.f), r);
  r = fmaf(r, fmaf(-y, r, 1.f), r);
  return copysignf((r - 0.5f) * 2.f, x);
#endif
}
{% if "x" in v.get("sm90_opts", "") %}

// Option "x": a fixed share of the softmax's exponentials on the FMA pipe instead of the MUFU (the
// share FlashAttention-4 takes on Blackwell, Dao et al. 2025; our own polynomial).  The MUFU does
// 16 exponentials a clock an SM against 128 FP32 operations, so where a logit costs a second MUFU
// instruction (a soft-cap's tanh) or the GEMMs need fewer clocks than the exponentials (head dim 64,
// FP8), moving some of them to the FMA pipe shortens the block.  ex2_fma(x) = 2^x for x <= 8:
// x clamped to -127 with max.NaN (a masked -inf gives exactly +0, as MUFU.EX2.FTZ does, and a NaN
// stays NaN); n = round(x) through the 1.5 * 2^23 trick (two FADDs), f = x - n in [-1/2, 1/2];
// s = 2^n from the exponent bits (+0 at n = -127); 2^f by a polynomial with the constant term 1, in
// Horner form (KG_EX2_FMA_DEG 3 or 4 FFMAs); the product q s (a subnormal flushes to 0, as the
// MUFU's).  Relative error, its arithmetic included (tests/test_ex2_fma_cpu.py runs these lines: every
// float32 of [-8, -4], 2 M drawn from [-126, 8], 0.5 M from [-1, 1]): 1.02e-4 at degree 3 (the
// probabilities round to bf16's 2^-9 or FP8's 2^-4 after it), 2.9e-6 at degree 4 (fp16's P, 2^-12).
// KG_EX2_FMA of every 8 exponentials of a row take it (0-8): 4 where a logit costs a second MUFU
// instruction (a soft-cap's, or a user variant's that calls tanhf, expf, ...), else 2.
#ifdef KG_EX2_FMA
#define KG_EX2_FMA_{{ v.ns }} KG_EX2_FMA
#else
#define KG_EX2_FMA_{{ v.ns }} {{ 4 if (v.softcap or (v.get("user") and v.user.transcendental)) else 2 }}
#endif
#ifdef KG_EX2_FMA_DEG
#define KG_EX2_FMA_DEG_{{ v.ns }} KG_EX2_FMA_DEG
#else
#define KG_EX2_FMA_DEG_{{ v.ns }} {{ 4 if ((v.dtype == "fp16" and not v.get("fp8_mma")) or v.get("fp16_gemms")) else 3 }}
#endif
__device__ __forceinline__ float fmax_nan(float a, float b) {   // max.NaN.f32 (sm_80+): NaN if either is
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float ex2_fma(float x) {
  x = fmax_nan(x, -127.f);
  const float t = x + 12582912.f;           // 1.5 * 2^23: the low mantissa bits of t hold round(x)
  const float f = x - (t - 12582912.f);     // in [-1/2, 1/2]
  const float s = __uint_as_float((__float_as_uint(t) << 23) + 0x3f800000u);   // 2^round(x)
#if KG_EX2_FMA_DEG_{{ v.ns }} == 4
  const float q = fmaf(fmaf(fmaf(fmaf(9.58284456e-3f, f, 5.59064187e-2f), f, 2.40240991e-1f), f, 6.93124175e-1f), f, 1.f);
#else
  const float q = fmaf(fmaf(fmaf(5.50088398e-2f, f, 2.42210865e-1f), f, 6.93282902e-1f), f, 1.f);
#endif
  return q * s;
}
{% endif %}

// A factor of each of a thread's two rows (h 0: row g, h 1: row g + 8 of its m16 fragments; MT == 1),
// where the factor differs by row: the Hopper kernel's fp16 GEMMs on a bf16 q (MMA_F16 in
// mainloop_sm90.cuh) scale each Q row by its own power of two.  A plain float is the same factor
// for every row; row_of gives the factor of row h either way.
struct RowScale {
  float v[2];
};
__device__ __forceinline__ float row_of(float f, int) { return f; }
__device__ __forceinline__ float row_of(const RowScale& f, int h) { return f.v[h]; }
__device__ __forceinline__ RowScale operator*(float a, const RowScale& b) {
  RowScale r;
  r.v[0] = a * b.v[0];
  r.v[1] = a * b.v[1];
  return r;
}

template <class Scale>
__device__ __forceinline__ void transform_scores(float (&s)[MT][BN / 8][4], Scale scale_log2, Scale softcap_scale,
                                                 float softcap_log2) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (SOFTCAP) s[mt][nt][e] = tanh_approx(s[mt][nt][e] * row_of(softcap_scale, e >> 1)) * softcap_log2;
        else s[mt][nt][e] *= row_of(scale_log2, e >> 1);
      }
}

__device__ __forceinline__ void softmax_update(float (&s)[MT][BN / 8][4], float (&row_max)[MT][2],
                                               float (&row_sum)[MT][2], float (&o)[MT][DV / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -KG_INF;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
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

// softmax_update without the accumulator, on raw scores (S = Q K^T, masked with -inf): the
// scale is folded into the exponent, p = 2^(s * scale_log2 - m) with one FFMA per score (row_max
// and m stay in log2 units: the max of the raw scores times scale_log2 > 0 is the scaled max).
// Leaves the probabilities in s, updates row_max and row_sum, and returns the factor corr[mt][h]
// that the caller applies to O later with rescale_rows (the Hopper mainloop rescales O only once
// the P.V of the previous block, still in flight on the tensor cores, has completed).  Soft-capped
// scores come in as tanh(S scale / c) with scale_log2 = c log2(e) (the Hopper mainloop's
// cap_scores and score_scale), or, in the kernels with fp16 GEMMs, already times c log2(e) with
// scale_log2 = 1.
{# Causal ALiBi (common/alibi.cuh, apply_alibi_causal) and a score_mod's row part (common/user_mod.cuh,
   apply_user_hoist) pass roff: this lane's scores are its true scores plus roff (per row), so the
   max and the exponent take roff off once per row. #}
{% set with_roff = (v.get("alibi") and v.mask == "causal" and not v.get("user")) or (v.get("user") and v.user.hoist and v.mainloop == "sm90a") %}
{% set lane_units = v.get("user") and v.user.hoist and v.mainloop == "sm90a" %}
template <class Scale>   // float, or a RowScale (a factor a row)
__device__ __forceinline__ void softmax_scores(float (&s)[MT][BN / 8][4], float (&row_max)[MT][2],
                                               float (&row_sum)[MT][2], float (&corr)[MT][2], Scale scale_rows
                                               {%- if with_roff %}, const float (&roff)[MT][2]{% endif %}) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float scale_log2 = row_of(scale_rows, h);
      float mx = fmaxf(s[mt][0][2 * h], s[mt][0][2 * h + 1]);   // (seeded with the first pair: no -inf max)
#pragma unroll
      for (int nt = 1; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
      {% if with_roff %}
      mx -= roff[mt][h];  // this lane's offset (before the quad's reduction: the lanes' offsets differ)
      {% endif %}
      {% if lane_units %}
      // (a score_mod's hoisted scores: each lane in its own unit, scale_log2 its own exponent factor,
      // apply_user_hoist; the max goes into log2 units before the quad's reduction.  With one unit
      // across the quad the result is the product below: __fmul_ru is monotonic.)
      mx = __fmul_ru(mx, scale_log2);
      {% endif %}
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // The max's product rounded up: every exponent fma(s, scale, -m) below is then <= 0 exactly
      // (s * scale <= mx * scale <= m), whatever the logits' magnitude; rounded to nearest it could
      // exceed 0 by half an ulp of the logit, which overflows fp16's P beyond 2^27 (MMA_F16).  The
      // row's common offset cancels in O / sum and the LSE uses m itself.  (scale > 0.)
      const float m_new = fmaxf(row_max[mt][h], {{ "mx" if lane_units else "__fmul_ru(mx, scale_log2)" }});
      {% if with_roff %}
      const float m_fin = fmaxf(m_new, -KG_FLT_MAX);   // (a row with no key yet: finite, see below)
      const float m_use = m_fin + roff[mt][h] * scale_log2;
      corr[mt][h] = fast_exp2(row_max[mt][h] - m_fin);
      {% elif v.get("fp8_mma") %}
      // FP8 P: exponents against the max - 8, so P lies in [0, 256] (e4m3 up to 448) and rounds
      // with e4m3's relative precision well below the max; O / sum cancels the 2^8, the LSE takes it off
      const float m_base = fmaxf(m_new, -KG_FLT_MAX);
      corr[mt][h] = fast_exp2(row_max[mt][h] - m_base);
      const float m_use = m_base - 8.f;
      {% else %}
      // A row that has seen no key (every score -inf so far) has m_new = -inf; its exponents are taken
      // against -FLT_MAX instead (one FMNMX; -inf - -inf would be NaN): the scores' -inf and the old
      // max's -inf still give 0.
      const float m_use = fmaxf(m_new, -KG_FLT_MAX);
      corr[mt][h] = fast_exp2(row_max[mt][h] - m_use);
      {% endif %}
      row_max[mt][h] = m_new;
      float sum = -0.f;   // (-0.f + x folds to x; 0.f + x does not)
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          {% if "x" in v.get("sm90_opts", "") %}
          const float xv = fmaf(s[mt][nt][2 * h + e], scale_log2, -m_use);
          const float pv = ((2 * nt + e) & 7) < KG_EX2_FMA_{{ v.ns }} ? ex2_fma(xv) : fast_exp2(xv);
          {% else %}
          const float pv = fast_exp2(fmaf(s[mt][nt][2 * h + e], scale_log2, -m_use));
          {% endif %}
          s[mt][nt][2 * h + e] = pv;
          sum += pv;
        }
      row_sum[mt][h] = row_sum[mt][h] * corr[mt][h] + sum;
    }
}

__device__ __forceinline__ void rescale_rows(float (&o)[MT][DV / 8][4], const float (&corr)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {
      o[mt][dt][0] *= corr[mt][0];
      o[mt][dt][1] *= corr[mt][0];
      o[mt][dt][2] *= corr[mt][1];
      o[mt][dt][3] *= corr[mt][1];
    }
}

// After the last key block: a row that saw no key (row_sum == 0) gets O = 0 and LSE = -inf;
// LSE is the natural log.
// Row-wise sum over the quad, normalise o in place; returns (per row) the natural-log LSE.
__device__ __forceinline__ void finalize_rows(float (&o)[MT][DV / 8][4], const float (&row_max)[MT][2],
                                              const float (&row_sum)[MT][2], float (&lse)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      lse[mt][h] = l > 0.f ? (row_max[mt][h] + fast_log2(l){{ " - 8.f" if v.get("fp8_mma") else "" }}) * KG_LN2 : -KG_INF;
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt) {
        o[mt][dt][2 * h] *= inv;
        o[mt][dt][2 * h + 1] *= inv;
      }
    }
}
