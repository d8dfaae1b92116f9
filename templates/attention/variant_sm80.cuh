// ---- attention/variant_sm80.cuh: one attention variant's code in namespace {{ v.ns }} ----
// Everything that depends on the tile shape and the variant's flags lives here, so one kernel can
// hold two variants (the fused prefill + decode kernel, attention/fwd_fused_sm80.cu.j2).
namespace {{ v.ns }} {

constexpr int D = {{ v.head_dim }};
constexpr int DV = {{ v.head_dim_v }};
constexpr int BM = {{ v.block_m }};
constexpr int BN = {{ v.block_n }};
constexpr int NW = {{ v.num_warps }};
constexpr int STAGES = {{ v.num_stages }};
constexpr bool CAUSAL = {{ "true" if v.mask == "causal" else "false" }};
constexpr bool LOCAL = {{ "true" if v.mask == "local" else "false" }};   // sliding window
constexpr bool LPT = CAUSAL || LOCAL;                                     // m-blocks last-first
constexpr bool PACK_GQA = {{ "true" if v.pack_gqa else "false" }};  // query heads of one KV head share a tile
constexpr bool SPLIT = {{ "true" if v.split else "false" }};        // split-KV partial outputs
constexpr bool PAGED = {{ "true" if v.paged else "false" }};        // K/V from a paged cache
constexpr bool SOFTCAP = {{ "true" if v.softcap else "false" }};    // tanh logit capping
{% if v.get("alibi") %}
constexpr bool ALIBI = true;                                          // ALiBi biases (common/alibi.cuh)
{% endif %}
// per-token partial counts for the combine kernel: with split-KV, and in a fused launch whose
// other variant splits (this one then records 1 for its tokens)
constexpr bool ROW_SPLITS = SPLIT || {{ "true" if v.row_splits else "false" }};
constexpr int NT = NW * 32;
// The keys-as-rows decode tile (attention/tile_kt_sm80.cuh): one warp, 8 query rows as the MMA's
// N dimension.  The 16-row code below (MT, WM, the shared helpers) is then compiled but unused.
constexpr bool KT = BM == 8;
constexpr int MT = KT ? 1 : BM / (16 * NW);  // m16 row tiles per warp
constexpr int WM = 16 * MT;         // query rows per warp
// Shared-memory row strides (elements), padded by 16 bytes: the 8 row addresses of every
// ldmatrix phase then fall in distinct 16-byte bank groups.
constexpr int SQ = D + 8;
constexpr int SV = DV + 8;
constexpr int SO = DV + 8;
// One-warp, one-m16 tiles (the decode tile) with D <= 128 keep Q in registers, read once from
// global memory (D / 16 x 4 registers a lane), not in shared memory: that frees a sixth of a decode
// tile's shared memory, so more of them (more warps, more bytes in flight) fit an SM, and saves
// D / 16 ldmatrix a key block.  Their O staging (epilogue) reuses the K/V stages, idle by then.
// Wider Q (48-64 registers) makes the d 256 tile and the fused kernels of d 192 x 128 spill.
constexpr bool Q_REGS = NW == 1 && MT == 1 && D <= 128;
// The one-warp decode tiles (16-row and keys-as-rows) copy (K, V and their few Q rows) with an L2
// evict_first hint (common/ptx.cuh cp_async16_ef): a decode call streams its K / V once.  Measured on the H200
// (docs/dev/perf-log.md, "Thirty-seventh session"): with attention timed right after the GEMMs
// that precede it in a decode layer, 1-5 % faster on every bench decode batch (bf16 and e4m3
// caches, llama3-8b and llama3-70b-tp8); after a 256 MB write to L2 (the bench's default flush,
// which leaves dirty lines) 2-6 % slower on the long streams.  Only all-evict_first pays: K or V
// alone is slower than neither.  Paged caches only: on packed FP8 K/V NVRTC 13.0's ptxas gave the
// hinted copies an odd uniform register (desc[UR1]) as their 64-bit memory descriptor, and the
// kernel died of an illegal instruction on the H200 (tests/test_l2_hint_cpu.py scans for it).
// Restricted to paged caches it passed the GPU suite (thirty-eighth session, calls 1-2).  Standalone
// decode launches only (measured there): in the fused mixed-batch kernels the decode tiles share L2
// with prefill tiles that reread their K / V, and the hinted copies made the Hopper fused FP8
// kernel (head dim 128, window, soft-cap) spill inside a key-block loop (tests/test_fused_hopper_cpu.py).
// Nor on FP8 caches without a mask or splits: there NVRTC 13.0's ptxas gives the hinted copies the odd
// descriptor register again (desc[UR1]: fp16 q at d 128 and 192 x 128, e4m3 and e5m2, bf16 q at 192 x 128
// with e4m3; a CPU sweep of 720 paged decode tiles found no other), the pattern that died of an illegal instruction
// on the H200 on packed caches; these kernels have not run on a GPU with the hint, so they copy
// without it (tests/test_l2_hint_cpu.py scans their SASS).
{# Not on Blackwell (sm_100 and up, untested): ptxas gives most hinted copies there the odd descriptor
   register desc[UR1] (CPU sweep, sixtieth session); the condition sits in this expression so that the
   rendered source of the other archs stays as it was. #}
constexpr bool KV_EVICT_FIRST = NW == 1 && PAGED && {{ "false" if v.get("fused") or (v.arch[3:] | replace("a", "") | int) >= 100 else "true" }}
    && !({{ "true" if v.get("kv_dtype") else "false" }} && !CAUSAL && !LOCAL && !SPLIT);
// Their L2 prefetch size (common/ptx.cuh cp_async16_ef): 128 bytes where one head's K row and V row are
// whole multiples of 128 bytes (their 128-byte lines then hold nothing of the next head's rows), none
// otherwise.  Measured on the H100 (docs/dev/perf-log.md, "Sixtieth session"; decode_ab, the bench's
// paged decode batches, write flush and a decode layer's L2 state): bf16 rows of 256-512 bytes (d 128,
// 256) 1.2-2.2 % faster on llama3-8b / -70b-tp8 / gemma2, e4m3 rows of 128-256 bytes and bf16 d 64's
// 128 within 0.7 %; e4m3 d 64's 64-byte rows 1.11-1.18x slower with 128 (the next KV head's row came
// along) as e4m3 d 128 with 256 (1.22x).  Rows of 96 or 192 bytes (e4m3 d 96 / 192, bf16 d 96) stay
// without: not measured, and their lines straddle two heads.  KG_EF_PREFETCH overrides it.
constexpr int KV_ELEM_BYTES = {{ 1 if v.get("kv_dtype") else 2 }};
#ifdef KG_EF_PREFETCH
constexpr int KV_EF_PREFETCH = KG_EF_PREFETCH;
#else
constexpr int KV_EF_PREFETCH = (D * KV_ELEM_BYTES) % 128 == 0 && (DV * KV_ELEM_BYTES) % 128 == 0 ? 128 : 0;
#endif
{% if v.get("fp8_regs") and v.head_dim > 128 %}
// Q_FRAGS: FP8_REGS above head dim 128 (AttentionSpec.fp8_in_registers), where Q's fragments do not
// fit in registers beside O: the warp's Q fragments, in FP8_REGS' head-dim order and converted to
// the GEMMs' type once a tile, wait in shared memory (unpadded: lane-contiguous 16-byte words, D / 16
// of them a lane), BM x D elements; each key block reads them back one k-step at a time.  The O
// staging (epilogue) reuses this area and the FP8 stages after it, idle by then.
constexpr int Q_ELEMS = BM * D;   // (Q_FRAGS)
constexpr bool Q_FRAGS = true;
static_assert(!Q_REGS && NW == 1 && MT == 1 && D % 64 == 0, "Q_FRAGS: the one-warp 16-row tile above head dim 128");
{% else %}
constexpr int Q_ELEMS = Q_REGS || KT ? 0 : BM * (SQ > SO ? SQ : SO);
{% endif %}
constexpr int K_ELEMS = BN * SQ;
constexpr int V_ELEMS = BN * SV;
{% if v.get("kv_dtype") %}
// FP8 K/V ({{ v.kv_dtype }}): one 16-bit K and V tile (what the GEMMs read), then STAGES FP8
// stages of K and of V (rows of D / DV bytes, unpadded) that cp.async fills
constexpr int K8_BYTES = BN * D;
constexpr int V8_BYTES = BN * DV;
{% if v.get("fp8_regs") %}
// FP8_REGS (AttentionSpec.fp8_in_registers): the stages are converted in registers, straight into
// the MMA fragments, so no 16-bit tile (tile_sm80.cuh, "FP8 in registers")
constexpr int KV_BYTES = STAGES * (K8_BYTES + V8_BYTES);
{% else %}
constexpr int KV_BYTES = 2 * (K_ELEMS + V_ELEMS) + STAGES * (K8_BYTES + V8_BYTES);
{% endif %}
constexpr int SMEM_BYTES = 2 * Q_ELEMS + KV_BYTES;
{% if v.get("fp8_regs") and v.head_dim > 128 %}
static_assert(BM * SO * 2 <= 2 * Q_ELEMS + KV_BYTES, "the O staging fits Q's fragments and the K/V stages");
{% else %}
static_assert(KT || !Q_REGS || BM * SO * 2 <= KV_BYTES, "the O staging fits the K/V stages");
{% endif %}
{% else %}
constexpr int SMEM_BYTES = 2 * (Q_ELEMS + STAGES * (K_ELEMS + V_ELEMS));
static_assert(KT || !Q_REGS || BM * SO <= STAGES * (K_ELEMS + V_ELEMS), "the O staging fits the K/V stages");
{% endif %}
static_assert(SMEM_BYTES == {{ v.smem_bytes }}, "host and device disagree on shared memory size");
static_assert((KT ? NW == 1 : BM % (16 * NW) == 0) && BN % 16 == 0 && D % 16 == 0 && DV % 16 == 0, "tile shape");

// The tile's threads: a whole CTA, or a single warp of it (one-warp tiles only sync their warp,
// so a fused CTA can run one such tile per warp independently).
__device__ __forceinline__ void tile_sync() {
  if (NW == 1) {
    __syncwarp();
  } else {
    __syncthreads();
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
{% include "attention/mainloop_sm80.cuh" %}
{% include "attention/epilogue_sm80.cuh" %}
{% if v.block_m == 8 %}
{% include "attention/tile_kt_sm80.cuh" %}
{% else %}
{% include "attention/tile_sm80.cuh" %}
{% endif %}
}  // namespace {{ v.ns }}
