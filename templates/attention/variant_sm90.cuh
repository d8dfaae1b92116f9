// ---- attention/variant_sm90.cuh: the Hopper (sm_90a) attention variant in namespace {{ v.ns }} ----
// A CTA is one producer warpgroup (warp 0 issues the TMA loads; warps 1-3 give their registers
// back, issue paged 16-bit K/V boxes beside warp 0 (TMA_WARPS), gather rows (GATHER) or convert an
// FP8 cache's blocks) and NW / 4 (2 or 3) consumer warpgroups of 64 query
// rows each, which share one Q tile of BM rows and each K/V block of BN keys.  Supported here:
// packed or paged K/V (16-bit, or FP8 converted by the producer warps), head_dim == head_dim_v in
// {64, 96, 128, 192, 256} or 192 x 128, no mask, causal or a sliding window (local), with or
// without soft-cap, split-KV (fp32 partials and their LSE for the combine kernel, as on the sm_80
// path); no pack-GQA (the dispatcher sends every other variant to the sm_80 path).  Paged K/V:
// TMA of whole blocks inside one page (page_size a multiple of BN), or (option "g", GATHER, 16-bit
// caches only) all four producer warps gather key rows with cp.async into the same swizzled
// layout (any page size).
namespace {{ v.ns }} {

constexpr int D = {{ v.head_dim }};                      // head dim of Q and K
constexpr int DV_OUT = {{ v.head_dim_v }};                 // head dim of V and O
// Shared-memory rows and the O accumulators hold whole 64-column (128-byte) swizzle blocks: head
// dim 96 is padded to 128 (TMA reads columns 96..127 as zeros; Q K^T skips their k-steps, P V
// computes them and the epilogue does not store them).  DV is the accumulators' width.
constexpr int DP = (D + 63) / 64 * 64;
constexpr int DV = (DV_OUT + 63) / 64 * 64;
constexpr int BM = {{ v.block_m }};
constexpr int BN = {{ v.block_n }};
constexpr int NW = {{ v.num_warps }};        // consumer warps (16 query rows each)
constexpr int STAGES = {{ v.num_stages }};   // K/V pipeline depth
constexpr bool CAUSAL = {{ "true" if v.mask == "causal" else "false" }};
constexpr bool LOCAL = {{ "true" if v.mask == "local" else "false" }};   // sliding window
constexpr bool LPT = CAUSAL || LOCAL;        // m-blocks last-first
// PACK_GQA: the query heads of one KV head share a tile (rows are (token, head) pairs: the Q box,
// row_token / row_qhead in the epilogue; 16-bit K/V without ALiBi, a user variant or the fused kernel)
{# (This rendered comment is kept as it was so that the unpacked kernels' sources, and so their cache
    keys, stay unchanged.  Packed tiles now take built-in ALiBi, user variants, whose snippets see each
    row's own head and position, common/user_mod.cuh, and FP8 q / K / V on FP8 wgmma.) #}
constexpr bool PACK_GQA = {{ "true" if v.pack_gqa else "false" }};
constexpr bool SPLIT = {{ "true" if v.split else "false" }};        // split-KV partial outputs
constexpr bool PAGED = {{ "true" if v.paged else "false" }};
constexpr bool SOFTCAP = {{ "true" if v.softcap else "false" }};    // tanh logit capping
{% if v.get("alibi") %}
constexpr bool ALIBI = true;                                          // ALiBi biases (common/alibi.cuh)
{% endif %}
// ALIBI_ACC (causal built-in ALiBi on the 16-bit GEMMs): the Q K^T accumulators start from the
// bias's per-key part (common/alibi.cuh, alibi_acc_init); KG_ALIBI_ACC=0 (KERNELGEN_DEFINES) adds
// it with an FFMA a score after the GEMM instead, as before (for A/Bs)
#ifndef KG_ALIBI_ACC
#define KG_ALIBI_ACC 1
#endif
// (not with a soft-cap: the cap takes the raw scores, the bias comes after it)
constexpr bool ALIBI_ACC = KG_ALIBI_ACC && {{ "true" if (v.get("alibi") and v.mask == "causal" and not v.get("user") and not v.get("fp8_mma") and not v.softcap) else "false" }};
// per-token partial counts for the combine kernel: a split variant's, or (row_splits) the long
// class's rows of a mixed batch whose short class splits (one partial each: the combine skips them)
constexpr bool ROW_SPLITS = SPLIT || {{ "true" if v.row_splits else "false" }};
// Mainloop options (spec.sm90_opts): OVERLAP issues block i+1's S = Q K^T before block i's P V
// and computes block i+1's softmax while P V runs (FlashAttention-3's intra-warpgroup
// pipelining); PV_HALVES issues P V as 64-column halves (one swizzle atom of V each);
constexpr bool OVERLAP = {{ "false" if "s" in v.sm90_opts else "true" }};
constexpr bool PV_HALVES = {{ "true" if ("h" in v.sm90_opts or v.head_dim_v == 64) else "false" }};
// PINGPONG passes the GEMM issue round robin between the consumer warpgroups (named barriers
// PP_BAR + cg, mainloop_sm90.cuh);
// LAZY_RESCALE skips a warp's O rescale when none of its rows' max grew (every factor is 1).
constexpr bool PINGPONG = {{ "true" if "p" in v.sm90_opts else "false" }};
constexpr bool LAZY_RESCALE = {{ "true" if "r" in v.sm90_opts else "false" }};
// GATHER ("g", paged only): the producer warpgroup's 128 threads copy K/V rows found through the
// page table (cp.async, each thread's copies arriving on the "full" barrier once they land; the
// consumers fence to the async proxy after the wait, wait_full).
constexpr bool GATHER = {{ "true" if "g" in v.sm90_opts else "false" }};
// QUEUE_ONLY: the long-query variant of the fused mixed-batch kernel (fwd_fused_sm90.cu.j2), whose
// CTAs take every tile from the semaphore and leave its reset to the kernel.
constexpr bool QUEUE_ONLY = {{ "true" if v.get("queue_only") else "false" }};
constexpr int NPROD = 128;                   // producer threads that arrive on a gathered block
// FP8 K/V ({{ v.get("kv_dtype") or "off" }}): producer warp 0 TMA-loads each block's FP8 K and V into one of
// LAND landing stages; warps 1-3 (NCONV threads) convert them into the 16-bit K/V ring, which the
// consumers read unchanged (mainloop_sm90.cuh, producer_loop_convert); k_descale scales the logits,
// v_descale O (tile_sm90.cuh).
constexpr bool FP8 = {{ "true" if v.get("kv_dtype") else "false" }};
constexpr int LAND = {{ v.get("land_stages", 0) }};
// TMA_WARPS: producer warps that issue a paged block's TMA boxes (PAGED, 16-bit K/V, standalone
// and fused kernels): box b by warp b % TMA_WARPS, so that the per-lane issue loops of pages smaller than a
// block (8 boxes a 64-column half at pages of 16) run side by side.  Warps 1.. take each tile index
// from the slots as the consumers do (tile_empty counts them); warp 0 hands out the tiles, loads Q
// and sets the blocks' expected bytes.
constexpr int TMA_WARPS = PAGED && !GATHER && !FP8 ? 4 : 1;
#ifndef KG_TMA_WARPS_MIN_NB
#define KG_TMA_WARPS_MIN_NB 4
#endif
constexpr int TMA_WARPS_MIN_NB = KG_TMA_WARPS_MIN_NB;  // boxes a block from which TMA_WARPS warps issue them
// every issuing warp must own a box of each block: a warp without one would still wait on the
// slots' "empty" barriers that nothing ties to its pace, and could fall a phase behind (a hang)
static_assert(TMA_WARPS == 1 || TMA_WARPS_MIN_NB >= TMA_WARPS, "KG_TMA_WARPS_MIN_NB below TMA_WARPS");
// FP8_MMA (design variant B, docs/dev/fp8_hopper_design.md section 0): q, K and V in FP8, S = Q K^T on
// FP8 wgmma reading Q8 and the landing stage's K directly (64-byte swizzle), V transposed by warps
// 1-3 into an FP8 V^T ring (transpose_v8), P packed to e4m3 (pack_p8) for O += P V^T on FP8 wgmma.
// LAND == STAGES: landing slot and V^T slot share the consumers' pipeline position.
constexpr bool FP8_MMA = {{ "true" if v.get("fp8_mma") else "false" }};
{% if v.get("fp8_mma") %}
static_assert(!FP8_MMA || (FP8 && LAND == STAGES && D == DV_OUT && D % 64 == 0 && BN % 32 == 0 && BN >= 128),
              "FP8 wgmma: head dims multiple of 64, key blocks of 128 or more (multiples of 32), one landing stage a ring slot");
{% else %}
static_assert(!FP8_MMA || (FP8 && LAND == STAGES && D == DV_OUT && D % 64 == 0 && BN % 64 == 0 && BN >= 128),
              "FP8 wgmma: head dims multiple of 64, key blocks of 128 or more (multiples of 64), one landing stage a ring slot");
{% endif %}
constexpr int NCONV = 96;
{% if v.pack_gqa and v.get("fp8_mma") %}
static_assert(!PACK_GQA || ((!FP8 || FP8_MMA) && !QUEUE_ONLY),
              "pack-GQA on the Hopper kernel: 16-bit K/V or FP8 q / K / V on FP8 wgmma, standalone launches");
{% else %}
static_assert(!PACK_GQA || (!FP8 && !QUEUE_ONLY), "pack-GQA on the Hopper kernel: 16-bit K/V, standalone launches");
{% endif %}
static_assert(!FP8 || (!GATHER && LAND >= 1), "FP8 K/V: TMA landing stages, no row gathering");
static_assert(!GATHER || PAGED, "row gathering is for paged K/V");
constexpr int NCG = NW / 4;                  // consumer warpgroups
constexpr int NT = (NW + 4) * 32;            // threads per CTA
constexpr int MT = 1;                        // m16 row tiles per warp (the softmax/mask helpers' shape)
constexpr int WM = 16;                       // query rows per warp
constexpr int HALVES = DP / 64;              // 128-byte (64-element) column blocks of a Q/K row
constexpr int VHALVES = DV / 64;             // ... of a V row
constexpr int QK_STEPS = D / 16;             // k16 steps of Q K^T (the padding's are skipped)
static_assert((D == DV_OUT && (D == 64 || D == 96 || D == 128 || D == 192 || D == 256)) ||
              (D == 192 && DV_OUT == 128), "head dims of the Hopper path");
static_assert(BM == 64 * NCG && BN % 16 == 0 && BN <= 256, "tile shape");
static_assert(!PINGPONG || (OVERLAP && (NCG == 2 || NCG == 3)), "ping-pong needs the overlapped mainloop and 2-3 consumer warpgroups");

// Shared memory (offsets from a 1024-byte aligned base): Q (BM rows), STAGES K blocks,
// STAGES V blocks, each as HALVES (V: VHALVES) column blocks of rows x 128 bytes in TMA's
// 128-byte swizzle; then the mbarriers and the two tile-index slots.  BN * 128 is a multiple of
// 1024 (BN % 8 == 0), so every column block starts on a swizzle atom.
constexpr int Q_HALF = BM * (FP8_MMA ? 64 : 128);    // FP8 q: 64-byte boxes, 64-byte swizzle
constexpr int KV_HALF = BN * 128;
constexpr int Q_BYTES = BM * DP * (FP8_MMA ? 1 : 2);
constexpr int K_BYTES = FP8_MMA ? 0 : BN * DP * 2;     // FP8_MMA: K is read from the landing stage
constexpr int VT_KEYS = (BN + 127) / 128 * 128;           // FP8_MMA: V^T rows hold whole 128-key column blocks
constexpr int V_BYTES = FP8_MMA ? DV * VT_KEYS : BN * DV * 2;   // FP8_MMA: a V^T slot (DV rows of BN keys)
constexpr int VT_HALF = DV * 128;                      // FP8_MMA: a V^T column block of 128 keys
constexpr int PA_N = FP8_MMA ? BN / 32 : BN / 16;      // P's A fragments: k32 (FP8) or k16 steps
constexpr int OFF_K = Q_BYTES;
constexpr int OFF_V = OFF_K + STAGES * K_BYTES;
constexpr int K8_HALF = BN * 64;              // FP8 landing: a 64-column block of BN rows (64-byte swizzle)
constexpr int K8_BYTES = BN * DP;
constexpr int V8_BYTES = BN * DV;
constexpr int LAND_BYTES = K8_BYTES + V8_BYTES;
constexpr int OFF_LAND = OFF_V + STAGES * V_BYTES;
constexpr int OFF_BAR = OFF_LAND + LAND * LAND_BYTES;
constexpr int BAR_USED = 8 * (2 + 4 * STAGES + 4) + 8 + 16 * LAND;   // mbarriers and tile slots
constexpr int BAR_BYTES = BAR_USED + 4 * 16 <= 256 ? 256 : 320;        // + the pin words (spec.sm90_bar_bytes)
{% if "t" in v.sm90_opts %}
// Option "t": the producer hands each tile's TileInfo to the consumers beside its index, four slots of
// TINFO_INTS ints after the barrier area (tile it in slot it & 3; tile_sm90.cuh: consumer_loop;
// mainloop_sm90.cuh: producer_loop).
constexpr int TINFO_INTS = 16;
constexpr int OFF_TINFO = OFF_BAR + BAR_BYTES;
constexpr int SMEM_BYTES = OFF_TINFO + 4 * TINFO_INTS * 4 + 1024;  // + slack for aligning the base
{% else %}
constexpr int SMEM_BYTES = OFF_BAR + BAR_BYTES + 1024;  // + slack for aligning the base
{% endif %}
static_assert(SMEM_BYTES == {{ v.smem_bytes }}, "host and device disagree on shared memory size");
static_assert(BAR_USED <= BAR_BYTES - 4 * 16, "barrier area");
constexpr int OFF_PIN = OFF_BAR + BAR_BYTES - 4 * 16;  // a word a consumer warp (mainloop_sm90.cuh: pin_pv_wait)
static_assert(NW <= 16, "pin words");

// Barriers: arrival counts 1 for "full" (the producer's arrive.expect_tx; TMA completes the
// bytes; NPROD for gathered K/V), NW for "empty" (lane 0 of every consumer warp; tile_empty also
// counts producer warps 1-3 when they gather, convert FP8 blocks or issue boxes, TMA_WARPS).
__device__ __forceinline__ u32 bar_q_full(u32 sb) { return sb + OFF_BAR; }
__device__ __forceinline__ u32 bar_q_empty(u32 sb) { return sb + OFF_BAR + 8; }
__device__ __forceinline__ u32 bar_k_full(u32 sb, int s) { return sb + OFF_BAR + 16 + 8 * s; }
__device__ __forceinline__ u32 bar_k_empty(u32 sb, int s) { return sb + OFF_BAR + 16 + 8 * (STAGES + s); }
__device__ __forceinline__ u32 bar_v_full(u32 sb, int s) { return sb + OFF_BAR + 16 + 8 * (2 * STAGES + s); }
__device__ __forceinline__ u32 bar_v_empty(u32 sb, int s) { return sb + OFF_BAR + 16 + 8 * (3 * STAGES + s); }
__device__ __forceinline__ u32 bar_tile_full(u32 sb, int i) { return sb + OFF_BAR + 16 + 8 * (4 * STAGES + i); }
__device__ __forceinline__ u32 bar_tile_empty(u32 sb, int i) { return sb + OFF_BAR + 16 + 8 * (4 * STAGES + 2 + i); }
constexpr int OFF_TILE = OFF_BAR + 16 + 8 * (4 * STAGES + 4);  // two ints
__device__ __forceinline__ u32 bar_land_full(u32 sb, int s) { return sb + OFF_TILE + 8 + 8 * s; }
__device__ __forceinline__ u32 bar_land_empty(u32 sb, int s) { return sb + OFF_TILE + 8 + 8 * (LAND + s); }

__device__ __forceinline__ void init_barriers(u32 sb) {
  mbar_init(bar_q_full(sb), 1);
  mbar_init(bar_q_empty(sb), NW);
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(bar_k_full(sb, s), GATHER ? NPROD : FP8 ? NCONV : 1);
    mbar_init(bar_k_empty(sb, s), NW);
    mbar_init(bar_v_full(sb, s), GATHER ? NPROD : FP8 ? NCONV : 1);
    mbar_init(bar_v_empty(sb, s), NW);
  }
  for (int i = 0; i < 2; ++i) {
    mbar_init(bar_tile_full(sb, i), 1);
    mbar_init(bar_tile_empty(sb, i), NW + (GATHER || FP8 ? 3 : 0) + (TMA_WARPS - 1));
  }
  for (int s = 0; s < LAND; ++s) {
    mbar_init(bar_land_full(sb, s), 1);
    mbar_init(bar_land_empty(sb, s), NCONV + (FP8_MMA ? NW : 0));   // FP8_MMA: the consumers read K there
  }
}

{% include "attention/tile_scheduler.cuh" %}
{% include "common/mask.cuh" %}
{% include "common/softmax.cuh" %}
{% if v.get("alibi") %}
{% include "common/alibi.cuh" %}
{% endif %}
{% if v.get("sinks") %}
{% include "common/sinks.cuh" %}
{% endif %}
{% if v.get("user") %}
{% include "common/user_mod.cuh" %}
{% endif %}
{% if v.get("kv_dtype") %}
{% include "common/fp8.cuh" %}
{% endif %}
{% if v.get("fp8_mma") %}
{% include "common/fp8_mma.cuh" %}
{% endif %}
{#- 16-bit causal d 256: the consumers take the tile index through the shared window (take_tile_s,
    mainloop_sm90.cuh; tile_sm90.cuh) instead of s_tile, a generic pointer live through their loop: with
    the 16-byte O stores it made ptxas save a word across the consumers' register grow (NVRTC 13.0);
    elsewhere the shared-window read added spills (FP8 d 128 / d 256, 16-bit d 256 with a window:
    docs/dev/perf-log.md, "Sixty-eighth session"). #}
{% set tile_s = not v.get("kv_dtype") and v.head_dim_v == 256 and v.mask == "causal" %}
{% include "attention/mainloop_sm90.cuh" %}
{% include "attention/epilogue_sm90.cuh" %}
{% include "attention/tile_sm90.cuh" %}
}  // namespace {{ v.ns }}
