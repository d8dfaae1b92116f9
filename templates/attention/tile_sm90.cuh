// ---- attention/tile_sm90.cuh: a consumer warp's persistent tile loop ----
// Tile indices come from the producer through two shared-memory slots (tile_full / tile_empty);
// every consumer warp walks the same tiles and the same K/V pipeline positions as the producer.
__device__ __forceinline__ void consumer_loop(const AttnParams& p, int* md, int cap4, int total, u32 sb,
                                              const volatile int* s_tile, int cw, int lane) {
{#- tile_s: variant_sm90.cuh #}
  const int qpk = p.num_heads_q / p.num_heads_kv;
  {% if v.pack_gqa %}
  const unsigned qm = qpk_magic(qpk);
  {% endif %}
  int cursor = 0;
  KvPos kv;
  kv.stage = 0;
  kv.phase = 0;
  u32 q_iter = 0;
  if (PINGPONG && (cw >> 2) == NCG - 1) turn_pass(NCG - 1);  // warpgroup 0 goes first
  {% if "e" in v.sm90_opts %}
  // Option "e": the next tile's index (slot (it + 1) & 1) and scheduler entry are taken right after
  // this tile's last P V, before its epilogue, so that their dependent loads are in flight while
  // O is normalised and stored (docs/dev/fa3_d256_bf16_sass.md: 16 dependent metadata loads and
  // 743 instructions from a tile's last P V to the next one's first Q K^T, FA3 528).  The producer
  // publishes that tile once it has issued this tile's last loads and taken the next index from the
  // semaphore (into a slot released two tiles ago), so the wait is short and cannot deadlock: the
  // consumers have consumed those loads by the time they wait.
  int t_next, cursor_next;
  mbar_wait(bar_tile_full(sb, 0), 0, 5);
  t_next = {{ 'take_tile_s(sb' if tile_s else 'take_tile(s_tile' }}, 0, lane);
  release(bar_tile_empty(sb, 0), lane);
  cursor_next = t_next < total ? find_entry(md, cap4, t_next, 0) : 0;
  for (int it = 0;; ++it) {
    const int t = t_next;
    if (t >= total) break;
    cursor = cursor_next;
  {% elif "t" in v.sm90_opts %}
  // Option "t": the producer publishes each tile's TileInfo with its index; the slot is released after
  // the epilogue has read it again (the producer reuses it two tiles later)
  (void)cursor;
  for (int it = 0;; ++it) {
    const int slot = it & 1;
    mbar_wait(bar_tile_full(sb, slot), (it >> 1) & 1, 5);
    const int t = take_tile_s(sb, slot, lane);
    if (t >= total) {
      release(bar_tile_empty(sb, slot), lane);
      break;
    }
  {% else %}
  for (int it = 0;; ++it) {
    const int slot = it & 1;
    mbar_wait(bar_tile_full(sb, slot), (it >> 1) & 1, 5);
    const int t = {{ 'take_tile_s(sb' if tile_s else 'take_tile(s_tile' }}, slot, lane);
    release(bar_tile_empty(sb, slot), lane);
    if (t >= total) break;
    cursor = find_entry(md, cap4, t, cursor);
  {% endif %}
    float o[1][DV / 8][4];
    float row_max[1][2], row_sum[1][2];
#pragma unroll
    for (int j = 0; j < DV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][j][e] = 0.f;
    row_max[0][0] = row_max[0][1] = -KG_INF;
    row_sum[0][0] = row_sum[0][1] = 0.f;
    {
      {% if "t" in v.sm90_opts and "e" not in v.sm90_opts %}
      const TileInfo ti = get_tile_info(sb + OFF_TINFO + (it & 3) * TINFO_INTS * 4, qpk, lane);
      {% else %}
      const TileInfo ti = tile_info(p, md, cap4, cursor, t, {{ "sched_heads(p)" if v.pack_gqa else "p.num_heads_q" }}, qpk);
      {% endif %}
      const MaskInfo mi = tile_mask(p, ti);
      const int pos_last = {{ "tile_pos_last(ti, qm)" if v.pack_gqa else "ti.row0 + ti.valid_rows - 1" }};
      int n_lo, n_hi;
      key_block_range(mi, {{ "tile_pos_first(ti, qm)" if v.pack_gqa else "ti.row0" }}, pos_last, n_lo, n_hi);
      {% if v.get("user") %}
      const UserTile ut = user_tile(ti, qpk);  // user variant (common/user_mod.cuh)
      if (USER_RANGE) user_block_range(p, ut, {{ "tile_pos_first(ti, qm)" if v.pack_gqa else "ti.row0" }}, pos_last + 1, n_lo, n_hi);
      {% endif %}
      split_block_range(ti.split, ti.num_splits, n_lo, n_hi);
      if (n_hi > n_lo) {
        mbar_wait(bar_q_full(sb), q_iter & 1, 6);
        ++q_iter;
        {% if v.get("fp16_gemms") %}
        // MMA_F16: this warp's Q rows to fp16 (times 2^k), visible to the warpgroup's wgmma reads
        const RowScale q_unscale = q_rows_to_f16(sb, cw, lane);
        fence_proxy_async_smem();
        named_sync(1 + (cw >> 2), 128);
        {% endif %}
        {% if v.get("alibi") %}
        // ALiBi: slope of this thread's rows in the units of the scores (raw unless soft-capped)
        float alibi_sl[1][2];
        alibi_row_coefs(alibi_sl, p, ti.b, ti.head, ti.row0, qpk, cw, lane, ALIBI_LOG2E / score_scale(p));
        {% endif %}
        {% if v.get("kv_dtype") %}
        {% set ti_kv_head = "tile_kv_head(ti, qpk)" if v.pack_gqa else "ti.head / qpk" %}
        // FP8: the tile's k_descale (request, KV head), times an FP8 q's q_descale, multiplies the logits' scale
        {% if v.get("fp16_gemms") %}
        const RowScale kd = descale_of(p.k_descale, p.k_descale_batch_stride, p.k_descale_head_stride, ti.b, {{ ti_kv_head }})
                            * descale_of(p.q_descale, p.q_descale_batch_stride, p.q_descale_head_stride, ti.b, {{ ti_kv_head }})
                            * q_unscale;   // (times each row's factor of q_rows_to_f16)
        {% else %}
        const float kd = descale_of(p.k_descale, p.k_descale_batch_stride, p.k_descale_head_stride, ti.b, {{ ti_kv_head }})
                         * descale_of(p.q_descale, p.q_descale_batch_stride, p.q_descale_head_stride, ti.b, {{ ti_kv_head }});
        {% endif %}
        {% else %}
        const float kd = 1.f;
        {% endif %}
        consumer_mainloop(p, mi, n_lo, n_hi, ti.row0, pos_last, sb, kv, cw, lane, o, row_max, row_sum, kd{% if v.get("alibi") %}, alibi_sl{% endif %}{% if v.get("user") %}, ut{% endif %});
      }
    }
    {% if "e" in v.sm90_opts %}
    {
      const int sn = (it + 1) & 1;
      mbar_wait(bar_tile_full(sb, sn), ((it + 1) >> 1) & 1, 5);
      t_next = {{ 'take_tile_s(sb' if tile_s else 'take_tile(s_tile' }}, sn, lane);
      release(bar_tile_empty(sb, sn), lane);
      cursor_next = t_next < total ? find_entry(md, cap4, t_next, cursor) : cursor;
    }
    {% endif %}
    float lse[1][2];
    finalize_rows(o, row_max, row_sum, lse);
    {% if "t" in v.sm90_opts and "e" not in v.sm90_opts %}
    // the tile's coordinates again from its slot (rather than live across the mainloop), then the slot is free
    const TileInfo te = get_tile_info(sb + OFF_TINFO + (it & 3) * TINFO_INTS * 4, qpk, lane);
    release(bar_tile_empty(sb, slot), lane);
    {% else %}
    // the tile's coordinates again (L1 hits) rather than live across the mainloop
    const TileInfo te = tile_info(p, md, cap4, cursor, t, {{ "sched_heads(p)" if v.pack_gqa else "p.num_heads_q" }}, qpk);
    {% endif %}
    {% if v.get("kv_dtype") %}
    {  // FP8: the tile's v_descale on O (full rows and split-KV partials alike)
      const float vd = descale_of(p.v_descale, p.v_descale_batch_stride, p.v_descale_head_stride, te.b, {{ "tile_kv_head(te, qpk)" if v.pack_gqa else "te.head / qpk" }});
#pragma unroll
      for (int j = 0; j < DV / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][j][e] *= vd;
    }
    {% endif %}
    if (ROW_SPLITS && te.split == 0) {  // how many partials each token has (read by the combine kernel)
      int* row_splits = static_cast<int*>(const_cast<void*>(p.row_splits));
      {% if v.pack_gqa %}
      const RowMap rm = row_map(te, qpk);
      for (int r = cw * 32 + lane; r < te.valid_rows; r += NW * 32)
        if (row_qhead(rm, r) == rm.head0) {   // (a token's first row)
          const int tok = row_token(rm, r);
          row_splits[tok] = row_splits_entry(p, te.b, te.q_start, tok, te.num_splits);
        }
      {% else %}
      for (int r = cw * 32 + lane; r < te.valid_rows; r += NW * 32) {
        const int tok = te.q_start + te.row0 + r;
        row_splits[tok] = row_splits_entry(p, te.b, te.q_start, tok, te.num_splits);
      }
      {% endif %}
    }
    if (SPLIT && te.num_splits > 1) {
      store_partial_rows(p, te, o, lse, {{ "qpk, " if v.pack_gqa else "" }}cw, lane);
    } else {
      {% if v.get("sinks") %}
      {% if v.pack_gqa %}
      {  // attention sinks (common/sinks.cuh): each packed row its own query head (store_rows)
        const RowMap rm = row_map(te, qpk);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float f = sink_rescale(lse[0][h], sink_of(p, row_qhead(rm, cw * WM + (lane >> 2) + 8 * h)));
      {% else %}
      {  // attention sinks (common/sinks.cuh): every row has the tile's head (store_rows)
        const float sink = sink_of(p, te.head);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float f = sink_rescale(lse[0][h], sink);
      {% endif %}
#pragma unroll
          for (int j = 0; j < DV / 8; ++j) {
            o[0][j][2 * h] *= f;
            o[0][j][2 * h + 1] *= f;
          }
        }
      }
      {% endif %}
      store_rows(p, te, o, lse, {{ "qpk, " if v.pack_gqa else "" }}cw, lane);
    }
  }
  if (PINGPONG && (cw >> 2) == 0) turn_wait(0);  // the last warpgroup's last pass
}
