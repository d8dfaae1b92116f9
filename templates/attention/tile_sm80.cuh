// ---- attention/tile_sm80.cuh: one work tile, start to finish ----
// Tile t (of metadata md) on the tile's NT threads (tid in [0, NT)), with the variant's shared
// memory at sQ (generic pointer; sQ_base is its shared-window address): the Q/O tile, then
// STAGES K and V blocks (no Q/O tile for Q_REGS tiles: Q in registers, O staged in the K/V
// stages).  `cursor` is this thread group's entry
// search position (tile indices it sees only grow).
__device__ __forceinline__ void run_tile(const AttnParams& p, int* md, int cap4, int t, int& cursor, u16* sQ,
                                         u32 sQ_base, int tid) {
{% set q_frags = v.get("fp8_regs") and v.head_dim > 128 %}
{% if q_frags %}
  const u32 sK_base = sQ_base, sV_base = sQ_base;   // (no 16-bit K/V tile: FP8_REGS)
  const u32 s8K_base = sQ_base + Q_ELEMS * 2;        // Q's fragments (Q_FRAGS), then STAGES FP8 stages of K, of V
  const u32 s8V_base = s8K_base + STAGES * K8_BYTES;
  const u8* const smem8 = reinterpret_cast<const u8*>(sQ) + Q_ELEMS * 2;
{% elif v.get("fp8_regs") %}
  const u32 sK_base = sQ_base, sV_base = sQ_base;   // (no 16-bit K/V tile: FP8_REGS)
  const u32 s8K_base = sQ_base;                      // STAGES FP8 stages of K, then of V
  const u32 s8V_base = s8K_base + STAGES * K8_BYTES;
  const u8* const smem8 = reinterpret_cast<const u8*>(sQ);
{% elif v.get("kv_dtype") %}
  const u32 sK_base = sQ_base + Q_ELEMS * 2;        // the 16-bit K tile
  const u32 sV_base = sK_base + K_ELEMS * 2;         // the 16-bit V tile
  const u32 s8K_base = sV_base + V_ELEMS * 2;        // STAGES FP8 stages of K, then of V
  const u32 s8V_base = s8K_base + STAGES * K8_BYTES;
  u8* const smem8 = reinterpret_cast<u8*>(sQ) + Q_ELEMS * 2;  // sK_base as a generic pointer
{% else %}
  const u32 sK_base = sQ_base + Q_ELEMS * 2;
  const u32 sV_base = sK_base + STAGES * K_ELEMS * 2;
{% endif %}
  const u16* Q = static_cast<const u16*>(p.q);
  const {{ "u8" if v.get("kv_dtype") else "u16" }}* K = static_cast<const {{ "u8" if v.get("kv_dtype") else "u16" }}*>(p.k);
  const {{ "u8" if v.get("kv_dtype") else "u16" }}* V = static_cast<const {{ "u8" if v.get("kv_dtype") else "u16" }}*>(p.v);
  const int qpk = p.num_heads_q / p.num_heads_kv;
  const int sched_heads = PACK_GQA ? p.num_heads_kv : p.num_heads_q;
  const int lane = tid & 31, warp = tid >> 5;

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
  {% if v.get("alibi") %}
  float alibi_sl[MT][2];  // ALiBi: slope * log2(e) of this thread's rows (the scores are in log2 units)
  alibi_row_coefs(alibi_sl, p, ti.b, PACK_GQA ? kv_head : ti.head, row0, qpk, warp, lane, ALIBI_LOG2E);
  {% endif %}

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
  {% set q_to_f16 = v.get("fp16_gemms") %}
  {% if q_to_f16 %}
  RowScale row_scale_log2, row_softcap_scale;   // FP8_REGS with fp16 GEMMs: each row's q was scaled (q_frags_to_f16)
  {% endif %}

  float o[MT][DV / 8][4];
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt)
#pragma unroll
      for (int x = 0; x < 4; ++x) o[mt][dt][x] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -KG_INF;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  u32 qa[D / 16][4];  // Q_REGS: the warp's Q fragments, all of head dim D (else unused)
  if (n_blocks > 0) {
    if (Q_REGS{{ " || Q_FRAGS" if q_frags else "" }}) {
      load_q_frags{{ "_fp8" if v.get("fp8_regs") else "" }}(qa, [&](int r) {
        const int pr = row0 + r;
        const int pos = PACK_GQA ? pr / qpk : pr;
        const int head = PACK_GQA ? kv_head * qpk + pr - pos * qpk : ti.head;
        return Q + (i64)(ti.q_start + pos) * p.q_row_stride + (i64)head * p.q_head_stride;
      }, ti.valid_rows, lane);
      {% if q_to_f16 %}
      RowScale unscale;
      q_frags_to_f16(qa, unscale);
      row_scale_log2 = kv_scale_log2 * unscale;
      row_softcap_scale = kv_softcap_scale * unscale;
      {% endif %}
      {% if q_frags %}
      store_q_frags(sQ_base, qa, lane);   // Q_FRAGS (the stages' first loads below do not touch them)
      {% endif %}
    } else if (PACK_GQA) {
      load_rows<BM, D, SQ>(sQ_base, [&](int r) {
        const int pr = row0 + r;
        const int pos = pr / qpk;
        return Q + (i64)(ti.q_start + pos) * p.q_row_stride + (i64)(kv_head * qpk + pr - pos * qpk) * p.q_head_stride;
      }, ti.valid_rows, Q, tid);
    } else {
      load_tile<BM, D, SQ>(sQ_base, Q + (i64)(ti.q_start + row0) * p.q_row_stride + (i64)ti.head * p.q_head_stride,
                           p.q_row_stride, ti.valid_rows, tid);
    }
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
    for (int i = 0; i < n_blocks; ++i) {
      const int n = n_hi - 1 - i;
      cp_async_wait<STAGES - 2>();
      tile_sync();
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
{% if v.get("fp8_regs") %}
      // FP8_REGS: the GEMMs read this block's FP8 stages and convert in registers
      const int st8 = i % STAGES;
      float s[MT][BN / 8][4];
{% if q_frags %}
      gemm_qk_fp8_smem(s, sQ_base, smem8 + st8 * K8_BYTES, lane);
{% else %}
      gemm_qk_fp8(s, qa, smem8 + st8 * K8_BYTES, lane);
{% endif %}
{% else %}
{% if v.get("kv_dtype") %}
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
      float s[MT][BN / 8][4];
      if (Q_REGS) gemm_qk_regs(s, qa, sK_base + st * K_ELEMS * 2, lane);
      else gemm_qk(s, sQ_base, sK_base + st * K_ELEMS * 2, warp, lane);
{% endif %}
{% if q_to_f16 %}
      transform_scores(s, row_scale_log2, row_softcap_scale, p.softcap_log2);
{% elif v.get("kv_dtype") %}
      transform_scores(s, kv_scale_log2, kv_softcap_scale, p.softcap_log2);
{% else %}
      transform_scores(s, p.scale_log2, p.softcap_scale, p.softcap_log2);
{% endif %}
      {% if v.get("alibi") %}
      apply_alibi(s, alibi_sl, mi, n, row0, qpk, warp, lane);
      {% endif %}
      {% if v.get("user") %}
      apply_user(s, p, ut, n, row0, qpk, warp, lane, KG_LN2, USER_LOG2E);  // scores in log2 units
      {% endif %}
      if (block_needs_mask(mi, n, pos_first, pos_last)) apply_mask(s, mi, n, row0, qpk, warp, lane);
      softmax_update(s, row_max, row_sum, o);
{% if v.get("fp8_regs") %}
      gemm_pv_fp8(o, s, smem8 + STAGES * K8_BYTES + st8 * V8_BYTES, lane);
{% else %}
      gemm_pv(o, s, sV_base + st * V_ELEMS * 2, lane);
{% endif %}
    }
    cp_async_wait<0>();
    tile_sync();
  }

  float lse[MT][2];
  finalize_rows(o, row_max, row_sum, lse);
  {
    // Re-read the tile's coordinates after the mainloop's barriers instead of keeping them
    // live across it (they are L1/L2 hits; keeping them costs registers the mainloop needs).
    const TileInfo te = tile_info(p, md, cap4, cursor, t, sched_heads, qpk);
    const int kvh = PACK_GQA ? te.head : te.head / qpk;
    {% if v.get("kv_dtype") %}
    {  // FP8: v_descale of the tile's (request, KV head) on O (full rows and split-KV partials alike)
      const float vd = descale_of(p.v_descale, p.v_descale_batch_stride, p.v_descale_head_stride, te.b, kvh);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dt = 0; dt < DV / 8; ++dt)
#pragma unroll
          for (int x = 0; x < 4; ++x) o[mt][dt][x] *= vd;
    }
    {% endif %}
    // (token, query head) of tile row r
    auto token_of = [&](int r) { return PACK_GQA ? (te.row0 + r) / qpk : te.row0 + r; };
    auto qhead_of = [&](int r) { return PACK_GQA ? kvh * qpk + (te.row0 + r) % qpk : te.head; };
    if (ROW_SPLITS && te.split == 0) {  // how many partials each token has (read by the combine kernel)
      int* row_splits = static_cast<int*>(const_cast<void*>(p.row_splits));
      for (int r = tid; r < te.valid_rows; r += NT)
        if (!PACK_GQA || (te.row0 + r) % qpk == 0) {
          const int tok = te.q_start + token_of(r);
          row_splits[tok] = row_splits_entry(p, te.b, te.q_start, tok, te.num_splits);
        }
    }
    if (SPLIT && te.num_splits > 1) {
      float* acc = static_cast<float*>(const_cast<void*>(p.out_accum)) + (i64)te.split * p.accum_split_stride;
      float* lacc = static_cast<float*>(const_cast<void*>(p.lse_accum)) + (i64)te.split * p.lse_accum_split_stride;
      store_partial(o, lse,
                    [&](int r) {
                      return acc + (i64)qhead_of(r) * p.accum_head_stride +
                             (i64)partial_row(p, te.b, te.q_start, te.q_start + token_of(r)) * DV;
                    },
                    [&](int r) {
                      return lacc + (i64)qhead_of(r) * p.lse_accum_head_stride +
                             partial_row(p, te.b, te.q_start, te.q_start + token_of(r));
                    },
                    te.valid_rows, warp, lane);
    } else {
      {% if v.get("sinks") %}
      // attention sinks (common/sinks.cuh): this row's head, as the LSE store below
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float f = sink_rescale(lse[mt][h], sink_of(p, qhead_of(warp * WM + mt * 16 + (lane >> 2) + 8 * h)));
#pragma unroll
          for (int dt = 0; dt < DV / 8; ++dt) {
            o[mt][dt][2 * h] *= f;
            o[mt][dt][2 * h + 1] *= f;
          }
        }
      {% endif %}
      u16* O = static_cast<u16*>(const_cast<void*>(p.out));
      float* LSE = static_cast<float*>(const_cast<void*>(p.lse));
      store_output(o, lse, sQ,
                   [&](int r) { return O + (i64)(te.q_start + token_of(r)) * p.o_row_stride + (i64)qhead_of(r) * p.o_head_stride; },
                   [&](int r) -> float* {
                     return LSE != nullptr ? LSE + (i64)qhead_of(r) * p.lse_head_stride + te.q_start + token_of(r) : nullptr;
                   },
                   te.valid_rows, tid, warp, lane);
    }
  }
}
