// ---- attention/mainloop_sm80.cuh: cp.async tile loads and the two tensor-core GEMMs ----
// Fragment layouts are those of mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"):
// lane = 4*g + t.  A: {(g,2t..), (g+8,2t..), (g,2t+8..), (g+8,2t+8..)}; B: {(k=2t..,n=g), (k=2t+8..,n=g)};
// C: {(g,2t), (g,2t+1), (g+8,2t), (g+8,2t+1)}.

// Threads per row in a tile copy: the largest power of two <= 32 dividing both the row's 16-byte
// chunk count and the CTA size.  Each thread then copies chunks c0, c0 + TPR, ... of rows
// r0, r0 + NT/TPR, ...: every address is a running row pointer plus a compile-time offset.
__host__ __device__ constexpr int copy_tpr(int cpr) {
  int t = 32;
  while (t > 1 && (cpr % t != 0 || NT % t != 0)) t /= 2;
  return t;
}

// cp_async16, with the L2 evict_first hint in the one-warp decode tiles (KV_EVICT_FIRST)
__device__ __forceinline__ void copy16(u32 dst, const void* src, bool pred) {
  if (KV_EVICT_FIRST) cp_async16_ef<KV_EF_PREFETCH>(dst, src, pred);
  else cp_async16(dst, src, pred);
}

// ROWS x COLS elements from global (row stride `row_stride` elements) into smem (row stride S);
// rows >= valid_rows are zero-filled: cp.async is then given a source size of 0 and reads nothing.
template <int ROWS, int COLS, int S>
__device__ __forceinline__ void load_tile(u32 s_base, const u16* g, i64 row_stride, int valid_rows, int tid) {
  constexpr int CPR = COLS / 8;  // 16-byte chunks per row
  constexpr int TPR = copy_tpr(CPR);
  constexpr int RSTEP = NT / TPR;
  const int r0 = tid / TPR, c0 = tid % TPR;
  const u16* src = g + (i64)r0 * row_stride + c0 * 8;
  const i64 step = (i64)RSTEP * row_stride;
  const u32 dst = s_base + (u32)((r0 * S + c0 * 8) * 2);
#pragma unroll
  for (int i = 0; i < (ROWS + RSTEP - 1) / RSTEP; ++i) {
    const int r = r0 + i * RSTEP;
    if (ROWS % RSTEP == 0 || r < ROWS) {
      const bool ok = r < valid_rows;
#pragma unroll
      for (int j = 0; j < CPR / TPR; ++j) copy16(dst + (u32)((i * RSTEP * S + j * TPR * 8) * 2), src + j * TPR * 8, ok);
    }
    src += step;
    // Opaque to the optimiser: stops it hoisting one 64-bit address per row out of the mainloop.
    asm volatile("" : "+l"(src));
  }
}

// The same copy for rows at arbitrary addresses: row_ptr(r) gives row r's first element (called
// only for r < valid_rows).  Used for pack-GQA query rows and paged K/V.
template <int ROWS, int COLS, int S, class RowPtr>
__device__ __forceinline__ void load_rows(u32 s_base, RowPtr row_ptr, int valid_rows, const u16* dummy, int tid) {
  constexpr int CPR = COLS / 8;
  constexpr int TPR = copy_tpr(CPR);
  constexpr int RSTEP = NT / TPR;
  const int r0 = tid / TPR, c0 = tid % TPR;
  const u32 dst = s_base + (u32)((r0 * S + c0 * 8) * 2);
#pragma unroll
  for (int i = 0; i < (ROWS + RSTEP - 1) / RSTEP; ++i) {
    const int r = r0 + i * RSTEP;
    if (ROWS % RSTEP == 0 || r < ROWS) {
      const bool ok = r < valid_rows;
      const u16* src = (ok ? row_ptr(r) : dummy) + c0 * 8;
#pragma unroll
      for (int j = 0; j < CPR / TPR; ++j) copy16(dst + (u32)((i * RSTEP * S + j * TPR * 8) * 2), src + j * TPR * 8, ok);
    }
  }
}

// Division by the page size without a division in the key-block loop: x / d = (umulhi(x, m) + x)
// >> l for 0 <= x < 2^31 with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1 (Granlund and
// Montgomery, "Division by invariant integers using multiplication", 1994; the form torch's
// IntDivider uses).  Built once a tile (one 64-bit division there); the loop's `key / page_size`
// and `key % page_size` were each a ~25-instruction division on the path to the next cp.async.
// A power of two has m = 1 (a shift).  tests/test_fp8_regs_cpu.py checks the identity.
struct PageDiv {
  int d;
  u32 m, l;
  __device__ __forceinline__ int div(int x) const { return (int)((__umulhi((u32)x, m) + (u32)x) >> l); }
  __device__ __forceinline__ int mod(int x) const { return x - div(x) * d; }
};
__device__ __forceinline__ PageDiv page_div(int d) {
  PageDiv r;
  r.d = d;
  r.l = d > 1 ? 32 - __clz(d - 1) : 0;
  r.m = (u32)((((u64)((1ull << r.l) - (u64)d)) << 32) / (u64)d) + 1u;
  return r;
}

// One K or V block of BN keys starting at key `key0` of a request, from a packed tensor (rows at
// `base + key * row_stride`) or a paged cache (key j lives in page page_table[j / page_size], slot
// j % page_size).  Pages are looked up per block when a page holds whole blocks (page_size a
// multiple of BN), per row otherwise.  Keys >= seqlen_k are zero-filled.
template <int COLS, int S>
__device__ __forceinline__ void load_kv_block(u32 s_base, const u16* base, i64 row_stride, i64 page_stride,
                                              const int* page_row, const PageDiv& pd, int key0, int seqlen_k, int tid) {
  const int valid = seqlen_k - key0;
  if (!PAGED) {
    load_tile<BN, COLS, S>(s_base, base + (i64)key0 * row_stride, row_stride, valid, tid);
  } else if (pd.d % BN == 0) {
    const int page = page_row[pd.div(key0)];
    load_tile<BN, COLS, S>(s_base, base + (i64)page * page_stride + (i64)pd.mod(key0) * row_stride, row_stride,
                           valid, tid);
  } else {
    // Small pages: the block's page ids are read once per warp (one coalesced load a lane) and
    // handed to each row with a shuffle.  Reading page_row[] per row made every cp.async wait
    // on a dependent global load (about 13k cycles per 32-key block at decode).
    constexpr int CPR = COLS / 8;
    constexpr int TPR = copy_tpr(CPR);
    constexpr int RSTEP = NT / TPR;
    constexpr int R = BN / 32 + 1;  // lanes' worth of page ids one block can span
    const int lane = tid & 31;
    const int r0 = tid / TPR, c0 = tid % TPR;
    const int first = pd.div(key0);
    const int last = pd.div(min(key0 + BN, seqlen_k) - 1);
    int lp[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int idx = first + k * 32 + lane;
      lp[k] = idx <= last ? page_row[idx] : 0;
    }
    const u32 dst = s_base + (u32)((r0 * S + c0 * 8) * 2);
#pragma unroll 2
    for (int i = 0; i < (BN + RSTEP - 1) / RSTEP; ++i) {
      const int r = r0 + i * RSTEP;
      const int j = key0 + r;
      const int pidx = min(pd.div(j), last) - first;  // clamped: every lane shuffles
      int page = 0;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int v = __shfl_sync(0xffffffffu, lp[k], pidx & 31);
        if ((pidx >> 5) == k) page = v;
      }
      if (BN % RSTEP == 0 || r < BN) {
        const bool ok = j < seqlen_k;
        const u16* src = base + (i64)page * page_stride + (i64)(j - (first + pidx) * pd.d) * row_stride + c0 * 8;
#pragma unroll
        for (int jj = 0; jj < CPR / TPR; ++jj)
          copy16(dst + (u32)((i * RSTEP * S + jj * TPR * 8) * 2), src + jj * TPR * 8, ok);
      }
    }
  }
}

// S[MT][BN/8] = Q_warp (WM x D) * K_tile^T (D x BN)
__device__ __forceinline__ void gemm_qk(float (&s)[MT][BN / 8][4], u32 sQ_base, u32 sK_base, int warp, int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
  const u32 q_lane = sQ_base + (u32)(((warp * WM + (lane & 15)) * SQ + (lane >> 4) * 8) * 2);
  const u32 k_lane = sK_base + (u32)((((lane & 7) + ((lane >> 4) << 3)) * SQ + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    u32 qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldsm_x4(q_lane + (u32)((mt * 16 * SQ + ks * 16) * 2), qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
      u32 b0, b1, b2, b3;
      ldsm_x4(k_lane + (u32)((np * 16 * SQ + ks * 16) * 2), b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(s[mt][2 * np], qa[mt], b0, b1);
        mma_16816(s[mt][2 * np + 1], qa[mt], b2, b3);
      }
    }
  }
}

// Q_REGS tiles: the warp's 16 x D query rows as mma A fragments (qa[ks] for key dims 16 ks ..),
// read straight from global memory, 4 bytes a load (rows >= valid_rows are zeros).  row_ptr(r)
// gives row r's first element (called only for r < valid_rows).
template <class RowPtr>
__device__ __forceinline__ void load_q_frags(u32 (&qa)[D / 16][4], RowPtr row_ptr, int valid_rows, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const u16* r0 = g < valid_rows ? row_ptr(g) + 2 * t : nullptr;
  const u16* r1 = g + 8 < valid_rows ? row_ptr(g + 8) + 2 * t : nullptr;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    qa[ks][0] = r0 != nullptr ? *reinterpret_cast<const u32*>(r0 + ks * 16) : 0u;
    qa[ks][1] = r1 != nullptr ? *reinterpret_cast<const u32*>(r1 + ks * 16) : 0u;
    qa[ks][2] = r0 != nullptr ? *reinterpret_cast<const u32*>(r0 + ks * 16 + 8) : 0u;
    qa[ks][3] = r1 != nullptr ? *reinterpret_cast<const u32*>(r1 + ks * 16 + 8) : 0u;
  }
}

// gemm_qk with Q from registers (Q_REGS: one warp, one m16 tile)
__device__ __forceinline__ void gemm_qk_regs(float (&s)[MT][BN / 8][4], const u32 (&qa)[D / 16][4], u32 sK_base,
                                             int lane) {
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
  const u32 k_lane = sK_base + (u32)((((lane & 7) + ((lane >> 4) << 3)) * SQ + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
      u32 b0, b1, b2, b3;
      ldsm_x4(k_lane + (u32)((np * 16 * SQ + ks * 16) * 2), b0, b1, b2, b3);
      mma_16816(s[0][2 * np], qa[ks], b0, b1);
      mma_16816(s[0][2 * np + 1], qa[ks], b2, b3);
    }
  }
}

// O[MT][DV/8] += P (WM x BN, from the probabilities left in s) * V_tile (BN x DV)
__device__ __forceinline__ void gemm_pv(float (&o)[MT][DV / 8][4], const float (&s)[MT][BN / 8][4], u32 sV_base, int lane) {
  const u32 v_lane = sV_base + (u32)((((lane & 7) + ((lane >> 3) & 1) * 8) * SV + (lane >> 4) * 8) * 2);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    u32 pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < DV / 16; ++dp) {
      u32 b0, b1, b2, b3;
      ldsm_x4_t(v_lane + (u32)((kk * 16 * SV + dp * 16) * 2), b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(o[mt][2 * dp], pa[mt], b0, b1);
        mma_16816(o[mt][2 * dp + 1], pa[mt], b2, b3);
      }
    }
  }
}
{% if v.get("kv_dtype") %}

// ---- FP8 K/V ({{ v.kv_dtype }}): cp.async the cache's bytes into FP8 stages (rows of COLS bytes,
// unpadded), then, for the block about to be used, convert a stage into the one 16-bit K and V tile
// the GEMMs read (exact: every {{ v.kv_dtype }} value is an {{ v.dtype }} value). ----
typedef unsigned char u8;

// ROWS x COLS bytes from global (row stride `row_stride` bytes) into an FP8 stage; rows >=
// valid_rows are zero-filled (source size 0: nothing is read).
template <int ROWS, int COLS>
__device__ __forceinline__ void load_tile8(u32 s_base, const u8* g, i64 row_stride, int valid_rows, int tid) {
  constexpr int CPR = COLS / 16;  // 16-byte chunks per row
  constexpr int TPR = copy_tpr(CPR);
  constexpr int RSTEP = NT / TPR;
  const int r0 = tid / TPR, c0 = tid % TPR;
  const u8* src = g + (i64)r0 * row_stride + c0 * 16;
  const i64 step = (i64)RSTEP * row_stride;
  const u32 dst = s_base + (u32)(r0 * COLS + c0 * 16);
#pragma unroll
  for (int i = 0; i < (ROWS + RSTEP - 1) / RSTEP; ++i) {
    const int r = r0 + i * RSTEP;
    if (ROWS % RSTEP == 0 || r < ROWS) {
      const bool ok = r < valid_rows;
#pragma unroll
      for (int j = 0; j < CPR / TPR; ++j) copy16(dst + (u32)(i * RSTEP * COLS + j * TPR * 16), src + j * TPR * 16, ok);
    }
    src += step;
    asm volatile("" : "+l"(src));
  }
}

// load_kv_block for an FP8 cache: one block of BN keys into an FP8 stage (same paging rules).
template <int COLS>
__device__ __forceinline__ void load_kv8_block(u32 s_base, const u8* base, i64 row_stride, i64 page_stride,
                                               const int* page_row, const PageDiv& pd, int key0, int seqlen_k, int tid) {
  const int valid = seqlen_k - key0;
  if (!PAGED) {
    load_tile8<BN, COLS>(s_base, base + (i64)key0 * row_stride, row_stride, valid, tid);
  } else if (pd.d % BN == 0) {
    const int page = page_row[pd.div(key0)];
    load_tile8<BN, COLS>(s_base, base + (i64)page * page_stride + (i64)pd.mod(key0) * row_stride, row_stride,
                         valid, tid);
  } else {
    constexpr int CPR = COLS / 16;
    constexpr int TPR = copy_tpr(CPR);
    constexpr int RSTEP = NT / TPR;
    constexpr int R = BN / 32 + 1;
    const int lane = tid & 31;
    const int r0 = tid / TPR, c0 = tid % TPR;
    const int first = pd.div(key0);
    const int last = pd.div(min(key0 + BN, seqlen_k) - 1);
    int lp[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int idx = first + k * 32 + lane;
      lp[k] = idx <= last ? page_row[idx] : 0;
    }
    const u32 dst = s_base + (u32)(r0 * COLS + c0 * 16);
#pragma unroll 2
    for (int i = 0; i < (BN + RSTEP - 1) / RSTEP; ++i) {
      const int r = r0 + i * RSTEP;
      const int j = key0 + r;
      const int pidx = min(pd.div(j), last) - first;
      int page = 0;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int v = __shfl_sync(0xffffffffu, lp[k], pidx & 31);
        if ((pidx >> 5) == k) page = v;
      }
      if (BN % RSTEP == 0 || r < BN) {
        const bool ok = j < seqlen_k;
        const u8* src = base + (i64)page * page_stride + (i64)(j - (first + pidx) * pd.d) * row_stride + c0 * 16;
#pragma unroll
        for (int jj = 0; jj < CPR / TPR; ++jj)
          copy16(dst + (u32)(i * RSTEP * COLS + jj * TPR * 16), src + jj * TPR * 16, ok);
      }
    }
  }
}

{% include "common/fp8.cuh" %}

{% if v.get("fp8_regs") %}
// ---- FP8 in registers (FP8_REGS: the 16-row one-warp decode tile, AttentionSpec.fp8_in_registers):
// the GEMMs read the FP8 stages and convert in registers, no 16-bit K/V tile.
// S = Q K^T sums over the head dim, so Q and K may take the same permutation of it: lane (g, t)
// reads the bytes [(D/4) t, (D/4) (t+1)) of its key rows, and word ks of them is its B fragment's
// head dims {2t, 2t+1, 2t+8, 2t+9} of k-step ks; Q's fragments are read in that order
// (load_q_frags_fp8).  P V sums over the keys, so inside a 16-key block S's column c may hold any
// key: it holds fp8_key(c) = 4 (c % 8 / 2) + 2 (c / 8) + c % 2, which makes lane t's B-fragment keys
// {2t, 2t+1, 2t+8, 2t+9} the consecutive rows 4t .. 4t+3: four words of them, transposed bytewise,
// give one word per head dim (the mask follows: common/mask.cuh).  V's n8 block dt, column n, is
// head dim 4 (8 (dt / 4) + n) + dt % 4, so O's block dt, column 2t + x, is head dim
// 32 (dt / 4) + 8 t + 4 x + dt % 4: eight consecutive head dims a lane for each dt / 4
// (epilogue_sm80.cuh).
__device__ __forceinline__ int fp8_key(int c) { return 4 * ((c & 7) >> 1) + 2 * (c >> 3) + (c & 1); }
{% set f8cvt = v.arch not in ("sm_80", "sm_86", "sm_87") %}
{% set q_to_f16 = v.get("fp16_gemms") %}

{% if f8cvt %}
// From sm_89 the GEMMs of this tile run on fp16 whatever the dtype: an FP8 code becomes an fp16
// in one cvt a pair (fp8x4_to_f16), against four instructions a pair for a bf16 (fp8x4_to_16),
// and the conversions are most of the tile's instructions (docs/dev/perf-log.md, "FP8 K/V caches
// on the H200").  P is packed to fp16 (finer than bf16 in [2^-14, 1], coarser below: FA2's P
// for fp16 inputs).  (mma_16816_f16 and pack2_f16: common/mma.cuh)
{% endif %}
{% set fp8_cvt, fp8_mma, fp8_pack = ("fp8x4_to_f16", "mma_16816_f16", "pack2_f16") if f8cvt else ("fp8x4_to_16", "mma_16816", "pack2") %}
{% if q_to_f16 %}

// A bf16 q for the fp16 GEMMs: each row is multiplied by a power of two 2^k that puts its largest
// |q| in [2^14, 2^15) (fp16's largest finite value is 65504), then rounded to fp16.  That is exact
// for every element down to 2^-24 of the row's largest (fp16's normal range; smaller ones keep
// fp16's absolute precision, 2^-39 of the largest: far below bf16's own 2^-9 relative rounding of
// the largest), and the scores of the row come out 2^k times the true ones: unscale[h] = 2^-k for
// this lane's rows g (h 0) and g + 8 (h 1), which the logit scale takes back.  A zero row gets
// k = 126; a row holding inf or NaN keeps it.
__device__ __forceinline__ void q_frags_to_f16(u32 (&qa)[D / 16][4], RowScale& unscale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    u32 m = 0;  // the row's largest |q| as bf16 bits (monotone in the value for |.|, NaN above inf)
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) m = __vmaxu2(m, __vmaxu2(qa[ks][h] & 0x7FFF7FFFu, qa[ks][h + 2] & 0x7FFF7FFFu));
    m = max(m & 0xFFFFu, m >> 16);
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));   // the quad holds the row
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const int k = f16_row_shift(m);
    const float up = pow2f(k);
    unscale.v[h] = pow2f(-k);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
      for (int j = h; j < 4; j += 2) qa[ks][j] = bf16x2_to_f16x2(qa[ks][j], up);
  }
}

{% endif %}

// Q_REGS fragments in FP8_REGS' head-dim order: qa[ks] = head dims (D/4) t + 4 ks .. + 3 of rows g,
// g + 8 (one 8-byte load each; rows >= valid_rows are zeros).
template <class RowPtr>
__device__ __forceinline__ void load_q_frags_fp8(u32 (&qa)[D / 16][4], RowPtr row_ptr, int valid_rows, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const u16* r0 = g < valid_rows ? row_ptr(g) + (D / 4) * t : nullptr;
  const u16* r1 = g + 8 < valid_rows ? row_ptr(g + 8) + (D / 4) * t : nullptr;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint2 a = r0 != nullptr ? *reinterpret_cast<const uint2*>(r0 + 4 * ks) : make_uint2(0u, 0u);
    const uint2 b = r1 != nullptr ? *reinterpret_cast<const uint2*>(r1 + 4 * ks) : make_uint2(0u, 0u);
    qa[ks][0] = a.x;
    qa[ks][2] = a.y;
    qa[ks][1] = b.x;
    qa[ks][3] = b.y;
  }
}

// S (16 x 16) = Q K^T from an FP8 K stage (BN rows of D bytes at s8K)
__device__ __forceinline__ void gemm_qk_fp8(float (&s)[MT][BN / 8][4], const u32 (&qa)[D / 16][4], const u8* s8K,
                                            int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nb = 0; nb < BN / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nb][e] = 0.f;
    const u8* row = s8K + fp8_key(8 * nb + g) * D + (D / 4) * t;
    u32 w[D / 16];
    if ((D / 4) % 16 == 0) {
#pragma unroll
      for (int i = 0; i < D / 64; ++i) {
        const uint4 x = reinterpret_cast<const uint4*>(row)[i];
        w[4 * i] = x.x; w[4 * i + 1] = x.y; w[4 * i + 2] = x.z; w[4 * i + 3] = x.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < D / 32; ++i) {
        const uint2 x = reinterpret_cast<const uint2*>(row)[i];
        w[2 * i] = x.x; w[2 * i + 1] = x.y;
      }
    }
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      u32 b0, b1;
      {{ fp8_cvt }}(w[ks], b0, b1);
      {{ fp8_mma }}(s[0][nb], qa[ks], b0, b1);
    }
  }
}

{% if v.head_dim > 128 %}
// Q_FRAGS (variant_sm80.cuh): the lane's fragments qa[ks] as 16-byte words at sQf + 16 (32 ks + lane)
// (each k-step's 32 words are 512 consecutive bytes: conflict-free), read back by gemm_qk_fp8_smem.
__device__ __forceinline__ void store_q_frags(u32 sQf, const u32 (&qa)[D / 16][4], int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    asm volatile("st.shared.v4.u32 [%0], { %1, %2, %3, %4};\n" ::"r"(sQf + 16 * (32 * ks + lane)), "r"(qa[ks][0]),
                 "r"(qa[ks][1]), "r"(qa[ks][2]), "r"(qa[ks][3]) : "memory");
}

// gemm_qk_fp8 with Q's fragments read from shared memory (store_q_frags) one k-step at a time:
// k-steps outermost, so a lane holds one Q fragment and its key rows' words of that k-step.
__device__ __forceinline__ void gemm_qk_fp8_smem(float (&s)[MT][BN / 8][4], u32 sQf, const u8* s8K, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nb = 0; nb < BN / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nb][e] = 0.f;
#pragma unroll
  for (int k4 = 0; k4 < D / 64; ++k4) {   // four k-steps a 16-byte word of each key row
    uint4 x[BN / 8];
#pragma unroll
    for (int nb = 0; nb < BN / 8; ++nb)
      x[nb] = reinterpret_cast<const uint4*>(s8K + fp8_key(8 * nb + g) * D + (D / 4) * t)[k4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int ks = 4 * k4 + j;
      u32 a[4];
      asm volatile("ld.shared.v4.u32 { %0, %1, %2, %3}, [%4];\n"
                   : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(sQf + 16 * (32 * ks + lane)));
#pragma unroll
      for (int nb = 0; nb < BN / 8; ++nb) {
        const u32 w = j == 0 ? x[nb].x : j == 1 ? x[nb].y : j == 2 ? x[nb].z : x[nb].w;
        u32 b0, b1;
        {{ fp8_cvt }}(w, b0, b1);
        {{ fp8_mma }}(s[0][nb], a, b0, b1);
      }
    }
  }
}
{% endif %}

// V's words for lane (g, t) from an FP8 V stage (BN rows of DV bytes at s8V), head dims 32 q + 4 g .. + 3
// of the keys 4t .. 4t+3: the four rows' words at bytes 32 q + 4 g, transposed bytewise (4 x 4), so that
// w[r] holds head dim 32 q + 4 g + r of those keys, key 4t + i in byte i (both FP8 in-register tiles)
__device__ __forceinline__ void fp8_v_words(u32 (&w)[4], const u8* s8V, int q, int lane) {
  const u8* base = s8V + 4 * (lane & 3) * DV + 4 * (lane >> 2) + 32 * q;   // keys 4t .., head dims 32 q + 4 g ..
  const u32 a0 = *reinterpret_cast<const u32*>(base);
  const u32 a1 = *reinterpret_cast<const u32*>(base + DV);
  const u32 a2 = *reinterpret_cast<const u32*>(base + 2 * DV);
  const u32 a3 = *reinterpret_cast<const u32*>(base + 3 * DV);
  const u32 t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);
  const u32 t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);
  w[0] = __byte_perm(t0, t2, 0x5410);
  w[1] = __byte_perm(t0, t2, 0x7632);
  w[2] = __byte_perm(t1, t3, 0x5410);
  w[3] = __byte_perm(t1, t3, 0x7632);
}

// O (16 x DV) += P V from an FP8 V stage (BN rows of DV bytes at s8V)
__device__ __forceinline__ void gemm_pv_fp8(float (&o)[MT][DV / 8][4], const float (&s)[MT][BN / 8][4], const u8* s8V,
                                            int lane) {
  u32 pa[4];
  pa[0] = {{ fp8_pack }}(s[0][0][0], s[0][0][1]);
  pa[1] = {{ fp8_pack }}(s[0][0][2], s[0][0][3]);
  pa[2] = {{ fp8_pack }}(s[0][1][0], s[0][1][1]);
  pa[3] = {{ fp8_pack }}(s[0][1][2], s[0][1][3]);
#pragma unroll
  for (int q = 0; q < DV / 32; ++q) {
    u32 w[4];   // w[r]: head dim 4 (8 q + g) + r of keys 4t .. 4t+3
    fp8_v_words(w, s8V, q, lane);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      u32 b0, b1;
      {{ fp8_cvt }}(w[r], b0, b1);
      {{ fp8_mma }}(o[0][4 * q + r], pa, b0, b1);
    }
  }
}
{% endif %}

// An FP8 stage (BN rows of COLS bytes at `src`) -> the 16-bit tile (row stride S elements at `dst`).
template <int COLS, int S>
__device__ __forceinline__ void convert_kv8(u16* dst, const u8* src, int tid) {
  constexpr int CPR = COLS / 16;
#pragma unroll {{ 2 if v.num_warps == 1 else 1 }}  // (unrolled, the 128-row tile spills)
  for (int c0 = 0; c0 < BN * CPR; c0 += NT) {
    const int c = c0 + tid;
    if ((BN * CPR) % NT == 0 || c < BN * CPR) {
      const int r = c / CPR, col = (c - r * CPR) * 16;
      const uint4 x = *reinterpret_cast<const uint4*>(src + r * COLS + col);
      uint4 y0, y1;
      fp8x4_to_16(x.x, y0.x, y0.y);
      fp8x4_to_16(x.y, y0.z, y0.w);
      fp8x4_to_16(x.z, y1.x, y1.y);
      fp8x4_to_16(x.w, y1.z, y1.w);
      uint4* d = reinterpret_cast<uint4*>(dst + r * S + col);
      d[0] = y0;
      d[1] = y1;
    }
  }
}

{% endif %}
