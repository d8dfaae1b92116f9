// ---- attention/tile_kt_sm80.cuh: the keys-as-rows decode tile (8 query rows, one warp) ----
// The same work as tile_sm80.cuh's one-warp tile, transposed.  A decode request has few query
// rows (its tokens x the query heads of a KV head, 4 at 32 / 8 heads), so a 16-row tile wastes
// most of its MMA rows.  Here the keys are the M dimension of mma.m16n8k16 and the tile's 8 query
// rows its N: per block of 16 keys
//   S^T (16 keys x 8 rows) = K (16 x D) Q^T (D x 8)      D / 16 MMAs, Q^T as B fragments in registers;
//   column softmax of S^T (a column is a query row: max over the 8 lanes of a column, lane % 4);
//   P^T as B fragment: movmatrix.trans turns the bf16 accumulator pairs (key, rows 2t, 2t+1)
//     into (row, keys 2t, 2t+1), the B layout of the next MMA;
//   O^T (DV x 8) += V^T (DV x 16 keys) P^T (16 x 8)       DV / 16 MMAs, V^T by ldmatrix.trans.
// Half the MMAs, exponentials and O rescaling of the 16-row tile, and half its O and Q registers
// (docs/perf-notes.md, "The keys-as-rows decode tile").  The idea of putting the short dimension
// on the MMA's N side is the usual one for skinny GEMMs; the tile itself is kernelgen's.
// Fragment coordinates (lane = 4 g + t): S^T / O^T accumulators hold (row g, cols 2t, 2t+1) and
// (row g + 8, same cols), where rows are keys / value dims and cols are the tile's query rows.
static_assert(KT && NW == 1 && BM == 8 && BN == 16, "the keys-as-rows tile is one warp, 8 rows, 16-key blocks");
static_assert(D <= 128 && DV <= 128, "the keys-as-rows tile keeps Q^T and O^T in registers up to head dim 128");
// fp32 O^T staging for the epilogue, rows of KT_SO floats (DV + 4: the 32 lanes' scalar stores
// (row 2t + e, col g) fall in 32 distinct banks), in the K/V stages (idle by then)
{% if v.get("fp8_regs") %}
// (FP8_REGS: the value dim of row g is kt_o_dim's 32 (dp / 2) + 4 g + ..., so up to 4 lanes share a bank
// there; once a tile)
{% endif %}
constexpr int KT_SO = DV + 4;
{% if v.get("kv_dtype") %}
static_assert(BM * KT_SO * 4 <= KV_BYTES, "the O staging fits the K/V stages");
{% else %}
static_assert(BM * KT_SO * 4 <= 2 * STAGES * (K_ELEMS + V_ELEMS), "the O staging fits the K/V stages");
{% endif %}

__device__ __forceinline__ u32 movm_trans(u32 x) {
  u32 r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}
{% set kt8 = v.get("fp8_regs") %}
{% if kt8 %}
{% set f8cvt = v.arch not in ("sm_80", "sm_86", "sm_87") %}
{% set fp8_cvt, fp8_mma, fp8_pack = ("fp8x4_to_f16", "mma_16816_f16", "pack2_f16") if f8cvt else ("fp8x4_to_16", "mma_16816", "pack2") %}

// ---- FP8 in registers on this tile (FP8_REGS, AttentionSpec.fp8_in_registers): the GEMMs read the
// FP8 stages and convert in registers, as the 16-row tile does (mainloop_sm80.cuh, "FP8 in
// registers"), with the same two permutations.  S^T's row (M) slot r of a block holds key
// fp8_key(r), so lane (g, t) reads K rows fp8_key(g) and fp8_key(g + 8), bytes [(D/4) t, (D/4)(t+1)):
// word ks of each is its A fragment's head dims {2t, 2t+1} (low pair) and {2t+8, 2t+9} (high pair)
// of k-step ks, and Q^T's B fragments take the same head-dim order (8 bytes of q row g at (D/4) t +
// 4 ks).  P^T's B fragments (movmatrix) then hold slots {2t, 2t+1, 2t+8, 2t+9}, i.e. the keys
// 4t .. 4t+3: V^T's A fragment of lane (g, t) is four consecutive V rows, whose words at bytes
// 32 q + 4 g one 4 x 4 byte transpose turns into head dims 32 q + 4 g + r (r = 0..3) over those
// keys.  O^T's m-tile dp = 2 q + j has head dims 32 q + 4 g + 2 j (row g) and + 1 (row g + 8), which
// the epilogue's staging puts back in order.  Per 16-key block: D / 16 + DV / 16 MMAs (the 16-row
// tile's D / 8 + DV / 8) for the same conversions.
{% if f8cvt %}
// From sm_89 the GEMMs run on fp16 whatever the dtype (e4m3 -> fp16 pairs in one cvt; a bf16 q is
// moved into fp16 row by row by a power of two, in run_tile), P^T is packed to fp16.
{% endif %}

// S^T (two accumulators, even / odd k-steps) = K Q^T from an FP8 K stage (BN rows of D bytes at s8K)
__device__ __forceinline__ void kt_qk_fp8(float (&s)[4], float (&s2)[4], const u32 (&qb)[D / 16][2], const u8* s8K,
                                          int lane) {
  const int g = lane >> 2, t = lane & 3;
  u32 w[2][D / 16];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const u8* row = s8K + fp8_key(g + 8 * h) * D + (D / 4) * t;
    if ((D / 4) % 16 == 0) {
#pragma unroll
      for (int i = 0; i < D / 64; ++i) {
        const uint4 x = reinterpret_cast<const uint4*>(row)[i];
        w[h][4 * i] = x.x; w[h][4 * i + 1] = x.y; w[h][4 * i + 2] = x.z; w[h][4 * i + 3] = x.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < D / 32; ++i) {
        const uint2 x = reinterpret_cast<const uint2*>(row)[i];
        w[h][2 * i] = x.x; w[h][2 * i + 1] = x.y;
      }
    }
  }
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    u32 a[4];
    {{ fp8_cvt }}(w[0][ks], a[0], a[2]);
    {{ fp8_cvt }}(w[1][ks], a[1], a[3]);
    {{ fp8_mma }}(ks % 2 == 0 ? s : s2, a, qb[ks][0], qb[ks][1]);
  }
}

// O^T (DV x 8) += V^T P^T from an FP8 V stage (BN rows of DV bytes at s8V); pb0 / pb1: P^T's B fragments
__device__ __forceinline__ void kt_pv_fp8(float (&o)[DV / 16][4], u32 pb0, u32 pb1, const u8* s8V, int lane) {
#pragma unroll
  for (int q = 0; q < DV / 32; ++q) {
    u32 w[4];   // w[r]: head dim 32 q + 4 g + r of keys 4t .. 4t+3 (mainloop_sm80.cuh)
    fp8_v_words(w, s8V, q, lane);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      u32 a[4];
      {{ fp8_cvt }}(w[2 * j], a[0], a[2]);       // row g: head dim 32 q + 4 g + 2 j, keys (4t, 4t+1), (4t+2, 4t+3)
      {{ fp8_cvt }}(w[2 * j + 1], a[1], a[3]);   // row g + 8: head dim + 1
      {{ fp8_mma }}(o[2 * q + j], a, pb0, pb1);
    }
  }
}

// O^T's value dim of m-tile dp, row g + 8 h (the staging's column)
__device__ __forceinline__ int kt_o_dim(int dp, int g, int h) { return 32 * (dp >> 1) + 4 * g + 2 * (dp & 1) + h; }
{% endif %}

__device__ __forceinline__ void run_tile(const AttnParams& p, int* md, int cap4, int t, int& cursor, u16* sQ,
                                         u32 sQ_base, int tid) {
{% if kt8 %}
  const u32 sK_base = sQ_base, sV_base = sQ_base;   // (no 16-bit K/V tile: FP8_REGS)
  const u32 s8K_base = sQ_base;                      // STAGES FP8 stages of K, then of V
  const u32 s8V_base = s8K_base + STAGES * K8_BYTES;
  const u8* const smem8 = reinterpret_cast<const u8*>(sQ);
{% elif v.get("kv_dtype") %}
  const u32 sK_base = sQ_base;  // no Q tile: Q^T lives in registers; the 16-bit K tile
  const u32 sV_base = sK_base + K_ELEMS * 2;         // the 16-bit V tile
  const u32 s8K_base = sV_base + V_ELEMS * 2;        // STAGES FP8 stages of K, then of V
  const u32 s8V_base = s8K_base + STAGES * K8_BYTES;
  u8* const smem8 = reinterpret_cast<u8*>(sQ);       // sK_base as a generic pointer
{% else %}
  const u32 sK_base = sQ_base;  // no Q tile: Q^T lives in registers
  const u32 sV_base = sK_base + STAGES * K_ELEMS * 2;
{% endif %}
  const u16* Q = static_cast<const u16*>(p.q);
  const {{ "u8" if v.get("kv_dtype") else "u16" }}* K = static_cast<const {{ "u8" if v.get("kv_dtype") else "u16" }}*>(p.k);
  const {{ "u8" if v.get("kv_dtype") else "u16" }}* V = static_cast<const {{ "u8" if v.get("kv_dtype") else "u16" }}*>(p.v);
  const int qpk = p.num_heads_q / p.num_heads_kv;
  const int sched_heads = PACK_GQA ? p.num_heads_kv : p.num_heads_q;
  const int lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;

  cursor = find_entry(md, cap4, t, cursor);
  const TileInfo ti = tile_info(p, md, cap4, cursor, t, sched_heads, qpk);
  const int kv_head = PACK_GQA ? ti.head : ti.head / qpk;
  const int row0 = ti.row0;
  MaskInfo mi;
  mi.seqlen_k = ti.seqlen_k;
  mi.offset = ti.seqlen_k - ti.seqlen_q;
  mi.left = p.window_left;
  mi.right = p.window_right;
  const int pos_first = row_position(row0, qpk), pos_last = row_position(row0 + ti.valid_rows - 1, qpk);
  int n_lo, n_hi;
  key_block_range(mi, pos_first, pos_last, n_lo, n_hi);
  {% if v.get("user") %}
  // user variant (common/user_mod.cuh): the request and rows its snippets see; kv_range narrows the blocks
  const UserTile ut = user_tile(ti, qpk);
  if (USER_RANGE) user_block_range(p, ut, pos_first, pos_last + 1, n_lo, n_hi);
  {% endif %}
  if (SPLIT && ti.num_splits > 1) {  // this split's contiguous share of [n_lo, n_hi)
    const int per = n_hi > n_lo ? (n_hi - n_lo + ti.num_splits - 1) / ti.num_splits : 0;
    n_lo = min(n_lo + ti.split * per, n_hi);
    n_hi = min(n_lo + per, n_hi);
  }
  const int n_blocks = n_hi - n_lo;

  const {{ "u8" if v.get("kv_dtype") else "u16" }}* k_base = K + (i64)ti.k_start * p.k_row_stride + (i64)kv_head * p.k_head_stride;
  const {{ "u8" if v.get("kv_dtype") else "u16" }}* v_base = V + (i64)ti.k_start * p.v_row_stride + (i64)kv_head * p.v_head_stride;
  const int* page_row = PAGED ? static_cast<const int*>(p.page_table) + (i64)ti.b * p.page_table_stride : nullptr;
  const PageDiv pdiv = page_div(PAGED ? p.page_size : 1);   // key -> (page, slot) without a division a block
  {% if v.get("kv_dtype") %}
  // FP8: k_descale (times an FP8 q's q_descale) of this tile's (request, KV head) folded into the logit scale
  const float k_desc = descale_of(p.k_descale, p.k_descale_batch_stride, p.k_descale_head_stride, ti.b, kv_head)
                       * descale_of(p.q_descale, p.q_descale_batch_stride, p.q_descale_head_stride, ti.b, kv_head);
  const float kv_scale_log2 = p.scale_log2 * k_desc, kv_softcap_scale = p.softcap_scale * k_desc;
  {% endif %}

  float o[DV / 16][4];                  // O^T: value dims 16 dp + g (+8) x query rows 2 tq (+1)
{% if kt8 %}
  // (FP8_REGS: value dims kt_o_dim(dp, g, 0) and kt_o_dim(dp, g, 1) instead)
{% endif %}
  float row_max[2], row_sum[2];         // of query rows 2 tq + e; row_sum over this lane's keys only
#pragma unroll
  for (int dp = 0; dp < DV / 16; ++dp)
#pragma unroll
    for (int x = 0; x < 4; ++x) o[dp][x] = 0.f;
  row_max[0] = row_max[1] = -KG_INF;
  row_sum[0] = row_sum[1] = 0.f;

  if (n_blocks > 0) {
    // Q^T as B fragments (k = head dims 16 ks + 2 tq (+8), n = query row g), from global memory
    u32 qb[D / 16][2];
    {
      const u16* qr = nullptr;
      if (g < ti.valid_rows) {
        const int pr = row0 + g;
        const int pos = PACK_GQA ? pr / qpk : pr;
        const int head = PACK_GQA ? kv_head * qpk + pr - pos * qpk : ti.head;
{% if kt8 %}
        qr = Q + (i64)(ti.q_start + pos) * p.q_row_stride + (i64)head * p.q_head_stride + (D / 4) * tq;
      }
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {   // FP8_REGS' head-dim order: 8 bytes of row g at (D/4) tq + 4 ks
        const uint2 x = qr != nullptr ? *reinterpret_cast<const uint2*>(qr + 4 * ks) : make_uint2(0u, 0u);
        qb[ks][0] = x.x;
        qb[ks][1] = x.y;
      }
{% else %}
        qr = Q + (i64)(ti.q_start + pos) * p.q_row_stride + (i64)head * p.q_head_stride + 2 * tq;
      }
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        qb[ks][0] = qr != nullptr ? *reinterpret_cast<const u32*>(qr + ks * 16) : 0u;
        qb[ks][1] = qr != nullptr ? *reinterpret_cast<const u32*>(qr + ks * 16 + 8) : 0u;
      }
{% endif %}
    }
{% if kt8 and v.get("fp16_gemms") %}
    // A bf16 q for the fp16 GEMMs (as q_frags_to_f16 does for the 16-row tile): row g times the power
    // of two 2^k that puts its largest |q| in [2^14, 2^15) (the quad holds the row), and the scores
    // of query row c come out 2^k(c) times the true ones: unscale[e] = 2^-k of this lane's columns
    // 2 tq + e (held by lanes 4 (2 tq + e)), which the logit scales take back.
    float unscale[2];
    {
      u32 m = 0;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) m = __vmaxu2(m, __vmaxu2(qb[ks][0] & 0x7FFF7FFFu, qb[ks][1] & 0x7FFF7FFFu));
      m = max(m & 0xFFFFu, m >> 16);
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const int k = f16_row_shift(m);
      const float up = pow2f(k);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        qb[ks][0] = bf16x2_to_f16x2(qb[ks][0], up);
        qb[ks][1] = bf16x2_to_f16x2(qb[ks][1], up);
      }
      const float un = pow2f(-k);
      unscale[0] = __shfl_sync(0xffffffffu, un, 8 * tq);
      unscale[1] = __shfl_sync(0xffffffffu, un, 8 * tq + 4);
    }
{% endif %}
    // positions of this lane's two query rows (for the element masks)
    const int pos_e0 = row_position(row0 + 2 * tq, qpk), pos_e1 = row_position(row0 + 2 * tq + 1, qpk);
    // A fragments: K rows (keys) lane & 15, dims 8 (lane >> 4); V^T via ldmatrix.trans: keys
    // (lane & 7) + 8 (lane >> 4), value dims 8 ((lane >> 3) & 1)
{% if not kt8 %}
    const u32 k_lane = (u32)(((lane & 15) * SQ + (lane >> 4) * 8) * 2);
    const u32 v_lane = (u32)((((lane & 7) + ((lane >> 4) << 3)) * SV + ((lane >> 3) & 1) * 8) * 2);
{% endif %}
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < n_blocks) {
        const int n = n_hi - 1 - st;
{% if v.get("kv_dtype") %}
        load_kv8_block<D>(s8K_base + st * K8_BYTES, k_base, p.k_row_stride, p.k_page_stride, page_row, pdiv,
                          n * BN, ti.seqlen_k, tid);
        load_kv8_block<DV>(s8V_base + st * V8_BYTES, v_base, p.v_row_stride, p.v_page_stride, page_row, pdiv,
                           n * BN, ti.seqlen_k, tid);
{% else %}
        load_kv_block<D, SQ>(sK_base + st * K_ELEMS * 2, k_base, p.k_row_stride, p.k_page_stride, page_row,
                             pdiv, n * BN, ti.seqlen_k, tid);
        load_kv_block<DV, SV>(sV_base + st * V_ELEMS * 2, v_base, p.v_row_stride, p.v_page_stride, page_row,
                              pdiv, n * BN, ti.seqlen_k, tid);
{% endif %}
      }
      cp_async_commit();
    }
{% if kt8 and v.get("fp16_gemms") %}
    // per query column 2 tq + e: the logit scale (or the soft-cap's) times the column's q unscale
    const float sc[2] = {SOFTCAP ? 1.f : kv_scale_log2 * unscale[0], SOFTCAP ? 1.f : kv_scale_log2 * unscale[1]};
    const float cap_sc[2] = {kv_softcap_scale * unscale[0], kv_softcap_scale * unscale[1]};
{% elif kt8 %}
    const float sc[2] = {SOFTCAP ? 1.f : kv_scale_log2, SOFTCAP ? 1.f : kv_scale_log2};
    const float cap_sc[2] = {kv_softcap_scale, kv_softcap_scale};
{% elif v.get("kv_dtype") %}
    const float scale = SOFTCAP ? 1.f : kv_scale_log2;
{% else %}
    const float scale = SOFTCAP ? 1.f : p.scale_log2;
{% endif %}
    {% if v.get("alibi") %}
    // ALiBi: slope of this lane's query rows 2 tq + e in the units of s (raw scores unless
    // soft-capped: the scale is folded into the exponent below), and their key positions
    float alibi_sl[2];
    int alibi_kpos[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      alibi_sl[e] = alibi_slope(p, ti.b, alibi_head(PACK_GQA ? kv_head : ti.head, row0 + 2 * tq + e, qpk)) *
                    (ALIBI_LOG2E / scale);
      alibi_kpos[e] = (e == 0 ? pos_e0 : pos_e1) + mi.offset;
    }
    {% endif %}
    for (int i = 0; i < n_blocks; ++i) {
      const int n = n_hi - 1 - i;
      cp_async_wait<STAGES - 2>();
      __syncwarp();
      {
        const int j = i + STAGES - 1;
        if (j < n_blocks) {
          const int nj = n_hi - 1 - j;
          const int sj = j % STAGES;
{% if v.get("kv_dtype") %}
          load_kv8_block<D>(s8K_base + sj * K8_BYTES, k_base, p.k_row_stride, p.k_page_stride, page_row,
                            pdiv, nj * BN, ti.seqlen_k, tid);
          load_kv8_block<DV>(s8V_base + sj * V8_BYTES, v_base, p.v_row_stride, p.v_page_stride, page_row,
                             pdiv, nj * BN, ti.seqlen_k, tid);
{% else %}
          load_kv_block<D, SQ>(sK_base + sj * K_ELEMS * 2, k_base, p.k_row_stride, p.k_page_stride, page_row,
                               pdiv, nj * BN, ti.seqlen_k, tid);
          load_kv_block<DV, SV>(sV_base + sj * V_ELEMS * 2, v_base, p.v_row_stride, p.v_page_stride, page_row,
                                pdiv, nj * BN, ti.seqlen_k, tid);
{% endif %}
        }
        cp_async_commit();
      }
{% if kt8 %}
      // FP8_REGS: the GEMMs read this block's FP8 stages and convert in registers
      const int st8 = i % STAGES;
      float s[4], s2[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) s[x] = s2[x] = 0.f;
      kt_qk_fp8(s, s2, qb, smem8 + st8 * K8_BYTES, lane);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        s[x] += s2[x];
        if (SOFTCAP) s[x] = tanh_approx(s[x] * cap_sc[x & 1]) * p.softcap_log2;
      }
{% elif v.get("kv_dtype") %}
      // FP8: convert this block's stage into the 16-bit K and V tiles, which the GEMMs then read
      const int st8 = i % STAGES;
      convert_kv8<D, SQ>(reinterpret_cast<u16*>(smem8), smem8 + 2 * (K_ELEMS + V_ELEMS) + st8 * K8_BYTES, tid);
      convert_kv8<DV, SV>(reinterpret_cast<u16*>(smem8) + K_ELEMS,
                          smem8 + 2 * (K_ELEMS + V_ELEMS) + STAGES * K8_BYTES + st8 * V8_BYTES, tid);
      tile_sync();
      const int st = 0;
{% else %}
      const int st = i % STAGES;
{% endif %}
{% if not kt8 %}
      // S^T = K Q^T, in two accumulators (even / odd head-dim steps: half the dependent chain)
      float s[4], s2[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) s[x] = s2[x] = 0.f;
      const u32 kb = sK_base + st * K_ELEMS * 2 + k_lane;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        u32 a[4];
        ldsm_x4(kb + ks * 32, a[0], a[1], a[2], a[3]);
        mma_16816(ks % 2 == 0 ? s : s2, a, qb[ks][0], qb[ks][1]);
      }
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        s[x] += s2[x];
{% if v.get("kv_dtype") %}
        if (SOFTCAP) s[x] = tanh_approx(s[x] * kv_softcap_scale) * p.softcap_log2;
{% else %}
        if (SOFTCAP) s[x] = tanh_approx(s[x] * p.softcap_scale) * p.softcap_log2;
{% endif %}
      }
{% endif %}
      {% if v.get("alibi") %}
#pragma unroll
      for (int x = 0; x < 4; ++x) s[x] -= alibi_sl[x & 1] * (float)abs(alibi_kpos[x & 1] - (n * BN + g + 8 * (x >> 1)));
      {% endif %}
      {% if v.get("user") %}
      // user variant: s is in the units of `scale` (raw, or log2 when soft-capped); its natural-log
      // value is s * scale * ln 2.  Element x: key n * BN + g + 8 (x >> 1), tile row 2 tq + (x & 1).
      // (out-of-range elements at clamped indices, no branch: see apply_user)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int r = row0 + 2 * tq + (x & 1);
        const int kv_idx = min(n * BN + g + 8 * (x >> 1), ut.kv_len - 1);
        const int pos = row_position(r, qpk);
        const int head = PACK_GQA ? kv_head * qpk + (r - pos * qpk) : ut.head;
        s[x] = user_logit(p, ut, head, kg_idx(min(pos, ut.q_len - 1)), kg_idx(kv_idx), s[x], scale * KG_LN2,
                           USER_LOG2E / scale);
      }
      {% endif %}
      if (block_needs_mask(mi, n, pos_first, pos_last)) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int pos = e == 0 ? pos_e0 : pos_e1;
          const int hi = min(mi.seqlen_k - 1, key_hi(mi, pos));
          const int lo = key_lo(mi, pos);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int key = n * BN + {{ "fp8_key(g + 8 * h)" if kt8 else "g + 8 * h" }};
            if (key > hi || key < lo) s[2 * h + e] = -KG_INF;
          }
        }
      }
      // column softmax (base 2, the scale folded into the exponent as in softmax_scores)
      float corr[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float mx = fmaxf(s[e], s[2 + e]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
{% set scale_e = "sc[e]" if kt8 else "scale" %}
        const float m_new = fmaxf(row_max[e], __fmul_ru(mx, {{ scale_e }}));   // (rounded up: exponents <= 0, see softmax_scores)
        const float m_use = m_new == -KG_INF ? 0.f : m_new;
        corr[e] = fast_exp2(row_max[e] - m_use);
        row_max[e] = m_new;
        s[e] = fast_exp2(fmaf(s[e], {{ scale_e }}, -m_use));
        s[2 + e] = fast_exp2(fmaf(s[2 + e], {{ scale_e }}, -m_use));
        row_sum[e] = row_sum[e] * corr[e] + (s[e] + s[2 + e]);
      }
      // P^T as B fragments: (keys g, rows 2t..) -> (row g, keys 2t..) for keys 0-7 and 8-15
{% if kt8 %}
      const u32 pb0 = movm_trans({{ fp8_pack }}(s[0], s[1]));
      const u32 pb1 = movm_trans({{ fp8_pack }}(s[2], s[3]));
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        o[dp][0] *= corr[0];
        o[dp][1] *= corr[1];
        o[dp][2] *= corr[0];
        o[dp][3] *= corr[1];
      }
      kt_pv_fp8(o, pb0, pb1, smem8 + STAGES * K8_BYTES + st8 * V8_BYTES, lane);
{% else %}
      const u32 pb0 = movm_trans(pack2(s[0], s[1]));
      const u32 pb1 = movm_trans(pack2(s[2], s[3]));
      const u32 vb = sV_base + st * V_ELEMS * 2 + v_lane;
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        o[dp][0] *= corr[0];
        o[dp][1] *= corr[1];
        o[dp][2] *= corr[0];
        o[dp][3] *= corr[1];
        u32 a[4];
        ldsm_x4_t(vb + dp * 32, a[0], a[1], a[2], a[3]);
        mma_16816(o[dp], a, pb0, pb1);
      }
{% endif %}
    }
    cp_async_wait<0>();
    __syncwarp();
  }

  // finalize: a column's sum over its 8 lanes; a row that saw no key gets O = 0 and LSE = -inf
  float lse[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float l = row_sum[e];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    lse[e] = l > 0.f ? (row_max[e] + fast_log2(l)) * KG_LN2 : -KG_INF;
#pragma unroll
    for (int dp = 0; dp < DV / 16; ++dp) {
      o[dp][e] *= inv;
      o[dp][2 + e] *= inv;
    }
  }
  {% if v.get("sinks") %}
  {  // attention sinks (common/sinks.cuh) on rows written directly; lane's rows 2 tq + e
    const TileInfo ts = tile_info(p, md, cap4, cursor, t, sched_heads, qpk);
    if (!(SPLIT && ts.num_splits > 1)) {
      const int kvh = PACK_GQA ? ts.head : ts.head / qpk;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int hq = PACK_GQA ? kvh * qpk + (ts.row0 + 2 * tq + e) % qpk : ts.head;
        const float f = sink_rescale(lse[e], sink_of(p, hq));
#pragma unroll
        for (int dp = 0; dp < DV / 16; ++dp) {
          o[dp][e] *= f;
          o[dp][2 + e] *= f;
        }
      }
    }
  }
  {% endif %}
  // O^T -> fp32 rows in the (idle) K/V stages: row 2 tq + e, value dim 16 dp + g + 8 h{{ " (FP8_REGS: kt_o_dim)" if kt8 else "" }}
  float* sO = reinterpret_cast<float*>(sQ);
#pragma unroll
  for (int dp = 0; dp < DV / 16; ++dp)
#pragma unroll
    for (int x = 0; x < 4; ++x) sO[(2 * tq + (x & 1)) * KT_SO + {{ "kt_o_dim(dp, g, x >> 1)" if kt8 else "dp * 16 + g + 8 * (x >> 1)" }}] = o[dp][x];
  __syncwarp();
  {
    // Re-read the tile's coordinates after the mainloop (as tile_sm80.cuh does)
    const TileInfo te = tile_info(p, md, cap4, cursor, t, sched_heads, qpk);
    const int kvh = PACK_GQA ? te.head : te.head / qpk;
    auto token_of = [&](int r) { return PACK_GQA ? (te.row0 + r) / qpk : te.row0 + r; };
    auto qhead_of = [&](int r) { return PACK_GQA ? kvh * qpk + (te.row0 + r) % qpk : te.head; };
    {% if v.get("kv_dtype") %}
    // FP8: v_descale of the tile's (request, KV head), applied to O as it leaves the staging
    const float vd = descale_of(p.v_descale, p.v_descale_batch_stride, p.v_descale_head_stride, te.b, kvh);
    {% endif %}
    if (ROW_SPLITS && te.split == 0) {  // how many partials each token has (read by the combine kernel)
      int* row_splits = static_cast<int*>(const_cast<void*>(p.row_splits));
      if (lane < te.valid_rows && (!PACK_GQA || (te.row0 + lane) % qpk == 0)) {
        const int tok = te.q_start + token_of(lane);
        row_splits[tok] = row_splits_entry(p, te.b, te.q_start, tok, te.num_splits);
      }
    }
    const bool partial = SPLIT && te.num_splits > 1;
    // LSE: lanes 0-3 hold rows 2 tq, 2 tq + 1
    if (g == 0) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = 2 * tq + e;
        if (r < te.valid_rows) {
          float* lp;
          if (partial) {
            lp = static_cast<float*>(const_cast<void*>(p.lse_accum)) + (i64)te.split * p.lse_accum_split_stride +
                 (i64)qhead_of(r) * p.lse_accum_head_stride + partial_row(p, te.b, te.q_start, te.q_start + token_of(r));
          } else {
            lp = p.lse != nullptr ? static_cast<float*>(const_cast<void*>(p.lse)) + (i64)qhead_of(r) * p.lse_head_stride +
                                        te.q_start + token_of(r)
                                  : nullptr;
          }
          if (lp != nullptr) *lp = lse[e];
        }
      }
    }
    // rows out, 8 values (16 bytes of output or 32 of fp32 partial) a lane and step
    constexpr int CPR = DV / 8;
    for (int c = lane; c < BM * CPR; c += 32) {
      const int r = c / CPR, col = (c - r * CPR) * 8;
      if (r >= te.valid_rows) break;  // c grows with r
      {{ "" if v.get("kv_dtype") else "const " }}float4 x0 = *reinterpret_cast<const float4*>(sO + r * KT_SO + col);
      {{ "" if v.get("kv_dtype") else "const " }}float4 x1 = *reinterpret_cast<const float4*>(sO + r * KT_SO + col + 4);
{% if v.get("kv_dtype") %}
      x0.x *= vd; x0.y *= vd; x0.z *= vd; x0.w *= vd;
      x1.x *= vd; x1.y *= vd; x1.z *= vd; x1.w *= vd;
{% else %}
{% endif %}
      if (partial) {
        float* dst = static_cast<float*>(const_cast<void*>(p.out_accum)) + (i64)te.split * p.accum_split_stride +
                     (i64)qhead_of(r) * p.accum_head_stride +
                     (i64)partial_row(p, te.b, te.q_start, te.q_start + token_of(r)) * DV + col;
        reinterpret_cast<float4*>(dst)[0] = x0;
        reinterpret_cast<float4*>(dst)[1] = x1;
      } else {
        u16* dst = static_cast<u16*>(const_cast<void*>(p.out)) + (i64)(te.q_start + token_of(r)) * p.o_row_stride +
                   (i64)qhead_of(r) * p.o_head_stride + col;
        *reinterpret_cast<uint4*>(dst) =
            make_uint4(pack2(x0.x, x0.y), pack2(x0.z, x0.w), pack2(x1.x, x1.y), pack2(x1.z, x1.w));
      }
    }
  }
}
