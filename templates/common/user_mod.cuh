// ---- common/user_mod.cuh: a user attention variant (kernelgen.Variant) rendered in place ----
// Included only by variants with AttentionSpec.variant (kernels/variant_code.py).  The idea is
// FlexAttention's (Dong et al. 2024: score_mod, mask_mod and block masks; FlashAttention-4's
// CuTe-DSL score_mod): the user's C++ snippets become three device functions, called
//   score_mod: on every in-range logit (natural-log units, after soft-cap and ALiBi), returns the new one;
//   mask_mod:  on every in-range (query, key) pair, false => the logit is -inf;
//   kv_range:  once per tile (and in the Hopper producer) to narrow the key range [kv_lo, kv_hi) its
//              query rows [q_lo, q_hi) can see: only key blocks meeting it are loaded and computed.
// "In range" is a valid query row of the tile and a key below the request's kv_len: the snippets
// never see the padding rows of a tile or the keys past the request (they may index their tensors
// without bounds checks).  Each snippet starts with `#line 1 "<name>"`, so NVRTC reports its errors
// at the snippet's own line numbers; the line after it restores the program's numbering (render.py).
// User tensors are flat `const T* __restrict__` pointers read from AttnParams.user0.. (their values
// are read on the device at every launch; the host never reads them).
{% set u = v.user %}
constexpr bool USER_SCORE = {{ "true" if u.score_mod is not none else "false" }};  // score_mod given
constexpr bool USER_MASK = {{ "true" if u.mask_mod is not none else "false" }};    // mask_mod given
constexpr bool USER_RANGE = {{ "true" if u.kv_range is not none else "false" }};   // kv_range given
constexpr float USER_LOG2E = 1.4426950408889634f;

// 2-byte floating types of user tensors (no CUDA headers here): read them with to_float.
struct __align__(2) kg_half_t { unsigned short x; };
struct __align__(2) kg_bf16_t { unsigned short x; };
typedef kg_half_t __half;
typedef kg_bf16_t __nv_bfloat16;

// Helpers a snippet may call.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x.x));
  return f;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __uint_as_float((unsigned)x.x << 16); }
__device__ __forceinline__ float to_float(int x) { return (float)x; }
__device__ __forceinline__ float to_float(long long x) { return (float)x; }
__device__ __forceinline__ float to_float(signed char x) { return (float)x; }
__device__ __forceinline__ float to_float(unsigned char x) { return (float)x; }
__device__ __forceinline__ float to_float(bool x) { return x ? 1.f : 0.f; }
template <class A, class B>
__device__ __forceinline__ auto kg_min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B>
__device__ __forceinline__ auto kg_max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }
template <class X, class L, class H>
__device__ __forceinline__ auto clamp(X x, L lo, H hi) -> decltype(x + lo + hi) { return x < lo ? lo : (hi < x ? hi : x); }
template <class X>
__device__ __forceinline__ X kg_abs(X x) { return x < 0 ? -x : x; }
__device__ __forceinline__ float kg_tanh(float x) { return tanh_ex2(x); }  // about 1e-7 (tanhf: tanh.approx)
__device__ __forceinline__ float kg_log(float x) { return logf(x); }
__device__ __forceinline__ float kg_exp(float x) { return expf(x); }

{% if u.score_mod is not none %}
__device__ __forceinline__ float kg_user_score_mod(float score, int batch, int head, int kv_head, int q_idx, int kv_idx,
                                                   int q_len, int kv_len, int q_offset{% for n, t in u.tensors %},
                                                   const {{ t }}* __restrict__ {{ n }}{% endfor %}) {
#line 1 "score_mod"
{{ u.score_mod }}
//@@kg_line_restore@@
}
{% endif %}
{% if u.mask_mod is not none %}
__device__ __forceinline__ bool kg_user_mask_mod(int batch, int head, int kv_head, int q_idx, int kv_idx, int q_len,
                                                 int kv_len, int q_offset{% for n, t in u.tensors %},
                                                 const {{ t }}* __restrict__ {{ n }}{% endfor %}) {
#line 1 "mask_mod"
{{ u.mask_mod }}
//@@kg_line_restore@@
}
{% endif %}
{% if u.kv_range is not none %}
__device__ __forceinline__ void kg_user_kv_range(int& kv_lo, int& kv_hi, int batch, int kv_head, int q_lo, int q_hi,
                                                 int q_len, int kv_len, int q_offset{% for n, t in u.tensors %},
                                                 const {{ t }}* __restrict__ {{ n }}{% endfor %}) {
#line 1 "kv_range"
{{ u.kv_range }}
//@@kg_line_restore@@
}
{% endif %}

// What the element-wise snippets need of a tile: request b (its q_len query and kv_len key
// tokens, its first query at token q_offset of q), the tile's query head (without pack-GQA) and
// KV head, and its valid rows (the tile's rows past them are padding).
struct UserTile {
  int b, head, kv_head, q_len, kv_len, q_offset, valid_rows;
};

// The UserTile of a work tile (tile_scheduler.cuh; with pack-GQA ti.head is the KV head).
__device__ __forceinline__ UserTile user_tile(const TileInfo& ti, int qpk) {
  UserTile ut;
  ut.b = ti.b;
  ut.head = ti.head;
  ut.kv_head = PACK_GQA ? ti.head : ti.head / qpk;
  ut.q_len = ti.seqlen_q;
  ut.kv_len = ti.seqlen_k;
  ut.q_offset = ti.q_start;
  ut.valid_rows = ti.valid_rows;
  return ut;
}

__device__ __forceinline__ bool user_keep(const AttnParams& p, const UserTile& ut, int head, int q_idx, int kv_idx) {
{% if u.mask_mod is not none %}
  return kg_user_mask_mod(ut.b, head, ut.kv_head, q_idx, kv_idx, ut.q_len, ut.kv_len, ut.q_offset
                          {%- for n, t in u.tensors %}, reinterpret_cast<const {{ t }}*>(p.user{{ loop.index0 }}){% endfor %});
{% else %}
  return true;
{% endif %}
}

// One logit x (in units whose natural-log value is x * to_nat) through mask_mod and score_mod;
// the result is in the same units (from_nat = 1 / to_nat).
__device__ __forceinline__ float user_logit(const AttnParams& p, const UserTile& ut, int head, int q_idx, int kv_idx,
                                            float x, float to_nat, float from_nat) {
  if (USER_MASK && !user_keep(p, ut, head, q_idx, kv_idx)) return -KG_INF;
{% if u.score_mod is not none %}
  x = kg_user_score_mod(x * to_nat, ut.b, head, ut.kv_head, q_idx, kv_idx, ut.q_len, ut.kv_len, ut.q_offset
                        {%- for n, t in u.tensors %}, reinterpret_cast<const {{ t }}*>(p.user{{ loop.index0 }}){% endfor %}) * from_nat;
{% endif %}
  return x;
}

// The key blocks [n_lo, n_hi) of a tile narrowed to those meeting the user's kv_range for its query
// positions [q_lo, q_hi) (before the split-KV division: splits share the narrowed range).  An
// empty range leaves n_lo == n_hi (no key: O = 0, LSE = -inf, as a fully masked tile).
__device__ __forceinline__ void user_block_range(const AttnParams& p, const UserTile& ut, int q_lo, int q_hi, int& n_lo,
                                                 int& n_hi) {
{% if u.kv_range is not none %}
  int kv_lo = 0, kv_hi = ut.kv_len;
  kg_user_kv_range(kv_lo, kv_hi, ut.b, ut.kv_head, q_lo, q_hi, ut.q_len, ut.kv_len, ut.q_offset
                   {%- for n, t in u.tensors %}, reinterpret_cast<const {{ t }}*>(p.user{{ loop.index0 }}){% endfor %});
  kv_lo = max(kv_lo, 0);
  kv_hi = min(kv_hi, ut.kv_len);
  if (kv_hi <= kv_lo) {
    n_hi = n_lo;
    return;
  }
  n_lo = max(n_lo, kv_lo / BN);
  n_hi = min(n_hi, (kv_hi + BN - 1) / BN);
  if (n_hi < n_lo) n_hi = n_lo;
{% endif %}
}

// mask_mod / score_mod on a block of scores in the m16 fragment layout (apply_mask's: rows
// row0 + warp * WM + mt * 16 + g + 8 h, keys n * BN + nt * 8 + 2 tq + e).  Out-of-range elements
// (padding rows, keys at or past kv_len) get the snippets at clamped indices (the last query row,
// the last key): every read stays in bounds, and no branch splits the warp around the snippet (a
// guard made the loop branch around each logit: 1.26x the built-in ALiBi's time, 2x its soft-cap);
// their results never count (apply_mask then masks keys past kv_len; padding rows are not stored).
__device__ __forceinline__ void apply_user(float (&s)[MT][BN / 8][4], const AttnParams& p, const UserTile& ut, int n,
                                           int row0, int qpk, int warp, int lane, float to_nat, float from_nat) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + warp * WM + mt * 16 + g + 8 * h;
      const int pos = row_position(r, qpk);
      const int head = PACK_GQA ? ut.kv_head * qpk + (r - pos * qpk) : ut.head;
      const int q_idx = min(pos, ut.q_len - 1);
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kv_idx = min(n * BN + nt * 8 + 2 * tq + e, ut.kv_len - 1);
          s[mt][nt][2 * h + e] = user_logit(p, ut, head, q_idx, kv_idx, s[mt][nt][2 * h + e], to_nat, from_nat);
        }
    }
}
