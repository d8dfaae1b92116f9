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
// USER_ACC (experiment, off: KG_USER_ACC=1 in KERNELGEN_DEFINES turns it on): a hoisted score_mod
// whose per-key part is independent of the score starts the Hopper kernel's Q K^T accumulators from
// it (user_acc_init); only straight-line snippets (one return, no branch: VariantCode's "acc"), no
// soft-cap.  Not safe as the default: eligibility is decided from the values at score 0, per
// element, and a review found snippets where it differs between threads of the warpgroup's one
// wgmma without a branch in the snippet's text (kg_min / kg_max / clamp of a kg_rowcol, an array
// of them indexed by q_idx) or where the per-key part depends on the score (`score + 1e-3f * kv_idx
// * fmaxf(score, 0.f)`); it needs compile-time eligibility from the types (docs/dev/perf-log.md,
// twenty-third session).
#ifndef KG_USER_ACC
#define KG_USER_ACC 0
#endif
constexpr bool USER_ACC = KG_USER_ACC && !SOFTCAP && {{ "true" if u.acc else "false" }};

// 2-byte floating types of user tensors (no CUDA headers here): read them with to_float.
struct __align__(2) kg_half_t { unsigned short x; };
struct __align__(2) kg_bf16_t { unsigned short x; };
typedef kg_half_t __half;
typedef kg_bf16_t __nv_bfloat16;

// The token indices a snippet sees (q_idx, kv_idx, q_len, kv_len, q_offset) are kg_idx values: an
// int that also carries its exact float value, so that float arithmetic on sums and differences of
// indices costs float adds, not an int-to-float conversion per logit (I2F runs at a quarter of the
// FP32 rate on sm_80 / sm_90, on the pipe the softmax's exp2 needs: the ALiBi score_mod
// `score - slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))` cost 1.14x the built-in
// ALiBi with int indices).  kg_idx behaves as an int everywhere an int is expected (implicit
// operator int: comparisons, indexing, integer arithmetic, calls taking int); + and - with ints or
// other kg_idx keep both copies, (float) / static_cast<float> and +, -, *, / with a float or
// double take the float copy.  The float copy equals (float) of the int as long as every value on
// the way stays below 2^24 in magnitude (16,777,216 tokens).
template <class T> struct kg_kind { static constexpr int value = 0; };      // 0: not arithmetic
template <> struct kg_kind<bool> { static constexpr int value = 1; };         // 1: promotes to int
template <> struct kg_kind<char> { static constexpr int value = 1; };
template <> struct kg_kind<signed char> { static constexpr int value = 1; };
template <> struct kg_kind<unsigned char> { static constexpr int value = 1; };
template <> struct kg_kind<short> { static constexpr int value = 1; };
template <> struct kg_kind<unsigned short> { static constexpr int value = 1; };
template <> struct kg_kind<int> { static constexpr int value = 1; };
template <> struct kg_kind<unsigned> { static constexpr int value = 2; };      // 2: other integers
template <> struct kg_kind<long> { static constexpr int value = 2; };
template <> struct kg_kind<unsigned long> { static constexpr int value = 2; };
template <> struct kg_kind<long long> { static constexpr int value = 2; };
template <> struct kg_kind<unsigned long long> { static constexpr int value = 2; };
template <> struct kg_kind<float> { static constexpr int value = 3; };        // 3: floating
template <> struct kg_kind<double> { static constexpr int value = 3; };
template <bool B> struct kg_enable {};
template <> struct kg_enable<true> { typedef int type; };

// What the kernel knows of an index at compile time (every field folds to a constant once the
// snippet is inlined; no register holds them): lin, the value is exactly q * q_idx + k * kv_idx +
// ql * q_len + kl * kv_len; f1, the float copy has a compile-time part (f1 below is not the absent
// -0.f); nn, the snippet runs where every (q_idx, kv_idx) it sees has q_idx + kv_len - q_len -
// kv_idx >= 0 (a causal kernel's key blocks below the diagonal: the NONNEG instances of apply_user_hoist / apply_user), so kg_abs
// of that distance is the distance itself and stays linear in the key (see kg_rowcol).
struct kg_sym {
  int q, k, ql, kl;
  bool lin, f1, nn;
};
__device__ __forceinline__ kg_sym kg_sym_none() { return kg_sym{0, 0, 0, 0, false, false, false}; }
__device__ __forceinline__ kg_sym kg_sym_add(kg_sym a, kg_sym b, int sg) {
  return kg_sym{a.q + sg * b.q, a.k + sg * b.k, a.ql + sg * b.ql, a.kl + sg * b.kl, a.lin && b.lin, a.f1 || b.f1,
                a.nn || b.nn};
}
__device__ __forceinline__ kg_sym kg_sym_neg(kg_sym a) { return kg_sym{-a.q, -a.k, -a.ql, -a.kl, a.lin, a.f1, a.nn}; }
// (the value changed by an integer: no longer a pure combination; the float copy has a second part)
__device__ __forceinline__ kg_sym kg_sym_moved(kg_sym a) { return kg_sym{a.q, a.k, a.ql, a.kl, false, true, a.nn}; }

// The float copy is kept as two parts, f0 + f1: f1 holds what the kernel knows at compile time
// (a key's column within its block after unrolling) and is -0.f when there is none (x + -0.f folds
// to x, x + 0.f does not), so `(float)(row_part - kv_idx)` costs one add per logit once the
// row part less the block's first key is formed (once a row and block).
struct kg_idx {
  int i;     // the index
  float f0;  // f0 + f1 == (float)i, exact below 2^24
  float f1;
  kg_sym s;  // compile-time facts (kg_sym)
  kg_idx() = default;
  __device__ __forceinline__ kg_idx(int i_, float f0_, float f1_, kg_sym s_) : i(i_), f0(f0_), f1(f1_), s(s_) {}
  // (a value the kernel cannot split: all of it in f1, the part that may differ from key to key; f0,
  // the part shared by a row's keys of a block, is the absent -0.f)
  __device__ __forceinline__ explicit kg_idx(int v) : i(v), f0(-0.f), f1((float)v), s(kg_sym{0, 0, 0, 0, false, true, false}) {}
  __device__ __forceinline__ float fl() const { return f0 + f1; }
  __device__ __forceinline__ operator int() const { return i; }
  // explicit conversions (casts, if (...)): the float copy for float / double, the int otherwise
  template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
  __device__ __forceinline__ explicit operator T() const {
    if constexpr (kg_kind<T>::value == 3) return (T)fl();
    else return (T)i;
  }
  // (any type an int takes: arithmetic types, a kg_score; a kg_idx takes the copy assignment)
  template <class T>
  __device__ __forceinline__ kg_idx& operator=(T v) {
    i = v;
    f0 = -0.f;
    f1 = (float)i;
    s = kg_sym{0, 0, 0, 0, false, true, s.nn};
    return *this;
  }
  __device__ __forceinline__ kg_idx& operator+=(kg_idx b) { return *this = kg_add(*this, b); }
  __device__ __forceinline__ kg_idx& operator-=(kg_idx b) { return *this = kg_sub(*this, b); }
  template <class T>
  __device__ __forceinline__ kg_idx& operator+=(T b) {
    if constexpr (kg_kind<T>::value == 1) { i += b; f1 += (float)b; s = kg_sym_moved(s); } else { int v = i; v += b; *this = v; }
    return *this;
  }
  template <class T>
  __device__ __forceinline__ kg_idx& operator-=(T b) {
    if constexpr (kg_kind<T>::value == 1) { i -= b; f1 = -((float)b - f1); s = kg_sym_moved(s); } else { int v = i; v -= b; *this = v; }
    return *this;
  }
#define KG_IDX_COMPOUND(OP) \
  template <class T> __device__ __forceinline__ kg_idx& operator OP(T b) { int v = i; v OP b; return *this = v; }
  KG_IDX_COMPOUND(*=) KG_IDX_COMPOUND(/=) KG_IDX_COMPOUND(%=) KG_IDX_COMPOUND(<<=) KG_IDX_COMPOUND(>>=)
  KG_IDX_COMPOUND(&=) KG_IDX_COMPOUND(|=) KG_IDX_COMPOUND(^=)
#undef KG_IDX_COMPOUND
  __device__ __forceinline__ kg_idx& operator++() { ++i; f1 += 1.f; s = kg_sym_moved(s); return *this; }
  __device__ __forceinline__ kg_idx& operator--() { --i; f1 = -(1.f - f1); s = kg_sym_moved(s); return *this; }
  __device__ __forceinline__ kg_idx operator++(int) { kg_idx t = *this; ++*this; return t; }
  __device__ __forceinline__ kg_idx operator--(int) { kg_idx t = *this; --*this; return t; }
  // (f1 by its presence flags: an absent part adds nothing and stays -0.f, which x - -0.f would
  // not fold to)
  static __device__ __forceinline__ kg_idx kg_add(kg_idx a, kg_idx b) {
    return kg_idx(a.i + b.i, a.f0 + b.f0, a.f1 + b.f1, kg_sym_add(a.s, b.s, 1));
  }
  static __device__ __forceinline__ kg_idx kg_sub(kg_idx a, kg_idx b) {
    const float f1 = !b.s.f1 ? a.f1 : !a.s.f1 ? -b.f1 : a.f1 - b.f1;
    return kg_idx(a.i - b.i, a.f0 - b.f0, f1, kg_sym_add(a.s, b.s, -1));
  }
};
__device__ __forceinline__ kg_idx operator+(kg_idx a, kg_idx b) { return kg_idx::kg_add(a, b); }
__device__ __forceinline__ kg_idx operator-(kg_idx a, kg_idx b) { return kg_idx::kg_sub(a, b); }
// (0.f - f0: the negation of index 0 is +0.f, as (float)-0 is; -(f1 + 0.f): an absent f1 stays -0.f)
__device__ __forceinline__ kg_idx operator-(kg_idx a) { return kg_idx(-a.i, 0.f - a.f0, a.s.f1 ? -a.f1 : -0.f, kg_sym_neg(a.s)); }
__device__ __forceinline__ kg_idx operator+(kg_idx a) { return a; }
// kg_idx with another arithmetic type: + and - keep an index (ints) or take the float copy
// (floating types); * and / only with floating types (with integers the built-in int operators
// apply through operator int).
template <class T, int K = kg_kind<T>::value, typename kg_enable<K != 0>::type = 0>
__device__ __forceinline__ auto operator+(kg_idx a, T b) {
  if constexpr (K == 1) return kg_idx(a.i + b, a.f0, a.f1 + (float)b, kg_sym_moved(a.s));
  else if constexpr (K == 2) return a.i + b;
  else return a.fl() + b;
}
template <class T, int K = kg_kind<T>::value, typename kg_enable<K != 0>::type = 0>
__device__ __forceinline__ auto operator+(T b, kg_idx a) {
  if constexpr (K == 1) return kg_idx(b + a.i, a.f0, (float)b + a.f1, kg_sym_moved(a.s));
  else if constexpr (K == 2) return b + a.i;
  else return b + a.fl();
}
template <class T, int K = kg_kind<T>::value, typename kg_enable<K != 0>::type = 0>
__device__ __forceinline__ auto operator-(kg_idx a, T b) {
  if constexpr (K == 1) return kg_idx(a.i - b, a.f0, a.s.f1 ? a.f1 - (float)b : -(float)b, kg_sym_moved(a.s));
  else if constexpr (K == 2) return a.i - b;
  else return a.fl() - b;
}
template <class T, int K = kg_kind<T>::value, typename kg_enable<K != 0>::type = 0>
__device__ __forceinline__ auto operator-(T b, kg_idx a) {
  if constexpr (K == 1) return kg_idx(b - a.i, 0.f - a.f0, a.s.f1 ? (float)b - a.f1 : (float)b, kg_sym_moved(kg_sym_neg(a.s)));
  else if constexpr (K == 2) return b - a.i;
  else return b - a.fl();
}

// A float that also carries a part per query row and a part per key: what an index's float copy
// times a float becomes (`slopes[head] * (q_idx + kv_len - q_len - kv_idx)`: row = slope * the
// row's distance to the thread's first key of the block, col = slope * the key's column, an
// immediate times one register).  Used as a float it is v, the value float arithmetic gives (the
// index's exact float times the float, rounded once: comparisons and floorf in a mask_mod see
// what a float would).  A score_mod that returns `score -/+ such a value` hands the kernel the two
// parts instead (kg_ret): it takes the row part out of the exponent once a row instead of adding
// it to every logit (apply_user_hoist; causal ALiBi's identity, common/alibi.cuh, done for any
// snippet), one FFMA a logit where the float took three; the parts are each rounded, so that
// score can differ from the float computation by an ulp or two of the bias.  hc: col is present
// (else -0.f: nothing to add).  + - * / with numbers, indices, scores and each other keep both
// forms (the compiler drops the one nothing reads).
//   Two more forms ride along (compile-time flags): lazy, col is k * c with k a factor (a per-row
// value: the slope) and c the key's column (an immediate), as an index times a float gives; rawok,
// the value is row + scale * rawc with scale the kernel's own softmax_scale (kg_score::orig), as
// `score -/+ lazy` gives: rawc = raw -/+ (k / scale) * c is one FFMA a logit, and the kernel then
// folds the scale into the exponent as for plain attention (apply_user_hoist).
struct kg_rowcol {
  float v;        // the value as float arithmetic gives it
  float row, col;  // v == row + col up to rounding
  bool hc;
  float k, c;     // lazy: col == k * c
  bool lazy;
  float rawc;     // rawok: v == row + rfac * rawc up to rounding (rfac: the kernel's scale, > 0)
  float rfac;
  bool rawok;
  float radd;     // runit: rawc == raw + radd up to rounding, radd independent of the score (the
  bool runit;     //   score entered with factor +1: the Q K^T accumulators can start from radd)
  kg_rowcol() = default;
  __device__ __forceinline__ kg_rowcol(float v_, float r, float c_, bool h)
      : v(v_), row(r), col(c_), hc(h), k(1.f), c(c_), lazy(false), rawc(0.f), rfac(1.f), rawok(false), radd(0.f),
        runit(false) {}
  // An integer converts to a kg_rowcol as well as a kg_rowcol to an integer (through float), so that
  // `c ? slope * d : 0` is ambiguous (a compile error, as for kg_score) instead of a conditional of
  // type int that truncates the product (write `0.f`).
  template <class T, typename kg_enable<kg_kind<T>::value == 1 || kg_kind<T>::value == 2>::type = 0>
  __device__ __forceinline__ kg_rowcol(T i) : kg_rowcol((float)i, -0.f, (float)i, true) {}
  __device__ __forceinline__ explicit kg_rowcol(float x) : kg_rowcol(x, -0.f, x, true) {}
  __device__ __forceinline__ explicit kg_rowcol(kg_idx x) : kg_rowcol(x.fl(), x.f0, x.f1, x.s.f1) {}
  static __device__ __forceinline__ kg_rowcol scaled(float v, float r, float k, float c, bool h) {   // r + k * c
    kg_rowcol x(v, r, h ? k * c : -0.f, h);
    x.k = k;
    x.c = c;
    x.lazy = h;
    return x;
  }
  __device__ __forceinline__ operator float() const { return v; }
  __device__ __forceinline__ kg_rowcol& operator=(float x) { return *this = kg_rowcol(x); }
  template <class T> __device__ __forceinline__ kg_rowcol& operator+=(T b) { return *this = *this + b; }
  template <class T> __device__ __forceinline__ kg_rowcol& operator-=(T b) { return *this = *this - b; }
  template <class T> __device__ __forceinline__ kg_rowcol& operator*=(T b) { return *this = *this * b; }
  template <class T> __device__ __forceinline__ kg_rowcol& operator/=(T b) { return *this = *this / b; }
  __device__ __forceinline__ kg_rowcol& operator++() { return *this = *this + 1; }
  __device__ __forceinline__ kg_rowcol& operator--() { return *this = *this - 1; }
  __device__ __forceinline__ float operator++(int) { const float t = v; ++*this; return t; }
  __device__ __forceinline__ float operator--(int) { const float t = v; --*this; return t; }
};
// (a plain number: float or an integer; a double takes the float value into double arithmetic)
template <class T> struct kg_is_num { static constexpr bool value = kg_kind<T>::value == 1 || kg_kind<T>::value == 2; };
template <> struct kg_is_num<float> { static constexpr bool value = true; };
template <class R> struct kg_is_rc { static constexpr bool value = false; };
template <> struct kg_is_rc<kg_rowcol> { static constexpr bool value = true; };
// (templates on the kg_rowcol operand too: an int, which converts to a kg_rowcol, never picks them)
#define KG_NUM template <class R, class T, typename kg_enable<kg_is_rc<R>::value && kg_is_num<T>::value>::type = 0> __device__ __forceinline__
#define KG_RC template <class R, typename kg_enable<kg_is_rc<R>::value>::type = 0> __device__ __forceinline__
KG_NUM kg_rowcol operator+(R a, T b) { return kg_rowcol(a.v + (float)b, a.row, a.hc ? a.col + (float)b : (float)b, true); }
KG_NUM kg_rowcol operator+(T b, R a) { return kg_rowcol((float)b + a.v, a.row, a.hc ? (float)b + a.col : (float)b, true); }
KG_NUM kg_rowcol operator-(R a, T b) { return kg_rowcol(a.v - (float)b, a.row, a.hc ? a.col - (float)b : -(float)b, true); }
KG_NUM kg_rowcol operator-(T b, R a) { return kg_rowcol((float)b - a.v, -a.row, a.hc ? (float)b - a.col : (float)b, true); }
__device__ __forceinline__ kg_rowcol kg_rc_mul(kg_rowcol a, float b, float v) {   // (a lazy product stays one)
  if (a.lazy) return kg_rowcol::scaled(v, a.row * b, a.k * b, a.c, true);
  return kg_rowcol(v, a.row * b, a.hc ? a.col * b : -0.f, a.hc);
}
KG_NUM kg_rowcol operator*(R a, T b) { return kg_rc_mul(a, (float)b, a.v * (float)b); }
KG_NUM kg_rowcol operator*(T b, R a) { return kg_rc_mul(a, (float)b, (float)b * a.v); }
KG_NUM kg_rowcol operator/(R a, T b) {
  if (a.lazy) return kg_rowcol::scaled(a.v / (float)b, a.row / (float)b, a.k / (float)b, a.c, true);
  return kg_rowcol(a.v / (float)b, a.row / (float)b, a.hc ? a.col / (float)b : -0.f, a.hc);
}
#undef KG_NUM
template <class R, class T, typename kg_enable<kg_is_rc<R>::value && kg_kind<T>::value == 3 && !kg_is_num<T>::value>::type = 0>
__device__ __forceinline__ T operator*(R a, T b) { return (float)a * b; }
template <class R, class T, typename kg_enable<kg_is_rc<R>::value && kg_kind<T>::value == 3 && !kg_is_num<T>::value>::type = 0>
__device__ __forceinline__ T operator*(T b, R a) { return b * (float)a; }
KG_RC kg_rowcol operator-(R a) { return kg_rc_mul(a, -1.f, -a.v); }
KG_RC kg_rowcol operator+(R a) { return a; }
__device__ __forceinline__ kg_rowcol kg_rc_add(kg_rowcol a, kg_rowcol b, bool sub) {
  const float col = !b.hc ? a.col : !a.hc ? (sub ? -b.col : b.col) : (sub ? a.col - b.col : a.col + b.col);
  return kg_rowcol(sub ? a.v - b.v : a.v + b.v, sub ? a.row - b.row : a.row + b.row, col, a.hc || b.hc);
}
template <class R, class Q, typename kg_enable<kg_is_rc<R>::value && kg_is_rc<Q>::value>::type = 0>
__device__ __forceinline__ kg_rowcol operator+(R a, Q b) { return kg_rc_add(a, b, false); }
template <class R, class Q, typename kg_enable<kg_is_rc<R>::value && kg_is_rc<Q>::value>::type = 0>
__device__ __forceinline__ kg_rowcol operator-(R a, Q b) { return kg_rc_add(a, b, true); }
KG_RC kg_rowcol operator+(R a, kg_idx b) { return kg_rc_add(a, kg_rowcol(b), false); }
KG_RC kg_rowcol operator-(R a, kg_idx b) { return kg_rc_add(a, kg_rowcol(b), true); }
KG_RC kg_rowcol operator+(kg_idx a, R b) { return kg_rc_add(kg_rowcol(a), b, false); }
KG_RC kg_rowcol operator-(kg_idx a, R b) { return kg_rc_add(kg_rowcol(a), b, true); }
#undef KG_RC
// An index times a float: the float value (the index's exact float copy times b, one rounding) and
// the two parts (a double: the float copy in double arithmetic)
__device__ __forceinline__ kg_rowcol kg_idx_times(kg_idx a, float b) {
  return kg_rowcol::scaled(a.fl() * b, a.f0 * b, b, a.f1, a.s.f1);
}
template <class T, typename kg_enable<kg_kind<T>::value == 3>::type = 0>
__device__ __forceinline__ auto operator*(kg_idx a, T b) {
  if constexpr (sizeof(T) == sizeof(float)) return kg_idx_times(a, b);
  else return a.fl() * b;
}
template <class T, typename kg_enable<kg_kind<T>::value == 3>::type = 0>
__device__ __forceinline__ auto operator*(T b, kg_idx a) {
  if constexpr (sizeof(T) == sizeof(float)) return kg_idx_times(a, b);
  else return b * a.fl();
}
template <class T, typename kg_enable<kg_kind<T>::value == 3>::type = 0>
__device__ __forceinline__ T operator/(kg_idx a, T b) { return a.fl() / b; }
template <class T, typename kg_enable<kg_kind<T>::value == 3>::type = 0>
__device__ __forceinline__ T operator/(T b, kg_idx a) { return b / a.fl(); }

// The logit a score_mod sees, `score`, is a kg_score: the scaled logit raw * scale kept as its
// two factors until a float is needed, so that a product or quotient with a number folds into the
// factor (once a tile) instead of costing a multiply per logit: `tanhf(score / 50.f)` is one FMUL,
// raw * (scale / 50), not two.  It converts to float implicitly (every float context: calls,
// arithmetic with floats, comparisons, `return score;`); * and / by an arithmetic value and unary
// minus keep a kg_score; compound assignment and assigning a float work as on a float.
struct kg_score {
  float raw;    // the logit before its scale
  float scale;  // raw * scale == the float value
  bool orig;    // scale is the kernel's own (compile-time: the score as the kernel passed it, times nothing)
  kg_score() = default;
  __device__ __forceinline__ kg_score(float raw_, float scale_, bool orig_ = false) : raw(raw_), scale(scale_), orig(orig_) {}
  // An integer converts to a kg_score as well as a kg_score to an integer (through float), so that
  // `c ? score : 0` is ambiguous (a compile error) instead of a conditional of type int that
  // truncates the score (write `0.f`).
  template <class T, typename kg_enable<kg_kind<T>::value == 1 || kg_kind<T>::value == 2>::type = 0>
  __device__ __forceinline__ kg_score(T v) : raw((float)v), scale(1.f), orig(false) {}
  __device__ __forceinline__ operator float() const { return raw * scale; }
  template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
  __device__ __forceinline__ kg_score& operator=(T v) { raw = (float)v; scale = 1.f; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator=(kg_idx v) { raw = v.fl(); scale = 1.f; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator=(kg_rowcol v) { raw = (float)v; scale = 1.f; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator*=(kg_rowcol b) { scale *= (float)b; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator/=(kg_rowcol b) { scale /= (float)b; orig = false; return *this; }
  template <class T> __device__ __forceinline__ kg_score& operator+=(T b) { raw = (float)*this + b; scale = 1.f; orig = false; return *this; }
  template <class T> __device__ __forceinline__ kg_score& operator-=(T b) { raw = (float)*this - b; scale = 1.f; orig = false; return *this; }
  template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
  __device__ __forceinline__ kg_score& operator*=(T b) { scale *= (float)b; orig = false; return *this; }
  template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
  __device__ __forceinline__ kg_score& operator/=(T b) { scale /= (float)b; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator*=(kg_idx b) { scale *= b.fl(); orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator/=(kg_idx b) { scale /= b.fl(); orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator*=(kg_score b) { scale *= (float)b; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator/=(kg_score b) { scale /= (float)b; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator++() { raw = (float)*this + 1.f; scale = 1.f; orig = false; return *this; }
  __device__ __forceinline__ kg_score& operator--() { raw = (float)*this - 1.f; scale = 1.f; orig = false; return *this; }
  __device__ __forceinline__ float operator++(int) { const float t = *this; ++*this; return t; }
  __device__ __forceinline__ float operator--(int) { const float t = *this; --*this; return t; }
};
template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
__device__ __forceinline__ kg_score operator*(kg_score a, T b) { return kg_score{a.raw, a.scale * (float)b}; }
template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
__device__ __forceinline__ kg_score operator*(T b, kg_score a) { return kg_score{a.raw, (float)b * a.scale}; }
template <class T, typename kg_enable<kg_kind<T>::value != 0>::type = 0>
__device__ __forceinline__ kg_score operator/(kg_score a, T b) { return kg_score{a.raw, a.scale / (float)b}; }
template <class S> struct kg_is_score { static constexpr bool value = false; };
template <> struct kg_is_score<kg_score> { static constexpr bool value = true; };
// (templates: an int, which converts to a kg_score, never picks them over the int operators)
#define KG_SCORE_ONLY template <class S, typename kg_enable<kg_is_score<S>::value>::type = 0> __device__ __forceinline__
KG_SCORE_ONLY float operator*(S a, kg_idx b) { return (float)a * b.fl(); }
KG_SCORE_ONLY float operator*(kg_idx b, S a) { return b.fl() * (float)a; }
KG_SCORE_ONLY float operator/(S a, kg_idx b) { return (float)a / b.fl(); }
KG_SCORE_ONLY float operator+(S a, kg_idx b) { return (float)a + b.fl(); }
KG_SCORE_ONLY float operator+(kg_idx b, S a) { return b.fl() + (float)a; }
KG_SCORE_ONLY float operator-(S a, kg_idx b) { return (float)a - b.fl(); }
KG_SCORE_ONLY float operator-(kg_idx b, S a) { return b.fl() - (float)a; }
KG_SCORE_ONLY S operator-(S a) { return kg_score{a.raw, -a.scale}; }
KG_SCORE_ONLY S operator+(S a) { return a; }
// the score and a kg_rowcol: raw * scale +- col in one FFMA, the row part kept apart; with the
// kernel's own scale (orig: finite, > 0) and a lazy product also as raw -/+ (k / scale) * c
// (kg_rowcol's rawok form)
__device__ __forceinline__ kg_rowcol kg_score_rc(kg_score a, kg_rowcol b, float sa, float sb) {   // sa a + sb b
  kg_rowcol r(fmaf(sa * a.raw, a.scale, sb * b.v), sb * b.row, b.hc ? fmaf(sa * a.raw, a.scale, sb * b.col) : sa * (float)a,
              true);
  if (a.orig && (b.lazy || !b.hc)) {
    r.rawc = b.hc ? fmaf(sb * (b.k / a.scale), b.c, sa * a.raw) : sa * a.raw;
    r.rfac = a.scale;
    r.rawok = true;
    r.runit = b.hc && sa == 1.f;
    r.radd = b.hc ? fmaf(sb * (b.k / a.scale), b.c, 0.f) : 0.f;   // (rawc's FFMA at score 0)
  }
  return r;
}
// tanh of a score: a score of scale 1, so that `cap * tanhf(score / cap)` keeps the cap as a scale
// (apply_user_hoist folds it into the exponent: FlashAttention-4's soft-cap score_mod costs that
// multiply per logit)
using ::tanhf;   // (the float overloads stay visible next to this one)
__device__ __forceinline__ kg_score tanhf(kg_score x) { return kg_score(::tanhf((float)x), 1.f); }
#define KG_SCORE_RC template <class S, class R, typename kg_enable<kg_is_score<S>::value && kg_is_rc<R>::value>::type = 0> __device__ __forceinline__
KG_SCORE_RC kg_rowcol operator+(S a, R b) { return kg_score_rc(a, b, 1.f, 1.f); }
KG_SCORE_RC kg_rowcol operator+(R b, S a) { return kg_score_rc(a, b, 1.f, 1.f); }
KG_SCORE_RC kg_rowcol operator-(S a, R b) { return kg_score_rc(a, b, 1.f, -1.f); }
KG_SCORE_RC kg_rowcol operator-(R b, S a) { return kg_score_rc(a, b, -1.f, 1.f); }
#undef KG_SCORE_RC
#undef KG_SCORE_ONLY

// Helpers a snippet may call.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(kg_idx x) { return x.fl(); }
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
// (the result type is that of a + b; explicit casts keep a kg_idx's float copy; a kg_idx chosen at
// run time carries no compile-time facts: kg_plain)
template <class R> __device__ __forceinline__ R kg_plain(R x) { return x; }
__device__ __forceinline__ kg_idx kg_plain(kg_idx x) {
  x.f1 = x.fl();
  x.f0 = -0.f;
  x.s = kg_sym{0, 0, 0, 0, false, true, false};
  return x;
}
template <class A, class B>
__device__ __forceinline__ auto kg_min(A a, B b) -> decltype(a + b) {
  typedef decltype(a + b) R;
  return kg_plain(a < b ? R(a) : R(b));
}
template <class A, class B>
__device__ __forceinline__ auto kg_max(A a, B b) -> decltype(a + b) {
  typedef decltype(a + b) R;
  return kg_plain(a < b ? R(b) : R(a));
}
template <class X, class L, class H>
__device__ __forceinline__ auto clamp(X x, L lo, H hi) -> decltype(x + lo + hi) {
  typedef decltype(x + lo + hi) R;
  return kg_plain(x < lo ? R(lo) : (hi < x ? R(hi) : R(x)));
}
template <class X>
__device__ __forceinline__ X kg_abs(X x) { return x < 0 ? X(-x) : x; }
// |x| of an index, each copy alone.  Where the kernel guarantees it (s.nn: a causal kernel's key
// blocks below the diagonal, whose every query / key pair has the bottom-right distance
// q_idx + kv_len - q_len - kv_idx >= 0), |that distance| is the distance (and |-distance| its
// negation): the float copy keeps its two parts, so `slopes[head] * kg_abs(distance)` stays a
// kg_rowcol (ALiBi's identity under a causal mask).  Exact in those blocks; elsewhere the general
// form (the int copy is always abs of the int).
__device__ __forceinline__ kg_idx kg_abs(kg_idx x) {
  const bool dist = x.s.lin && x.s.q == 1 && x.s.k == -1 && x.s.ql == -1 && x.s.kl == 1;
  const bool neg_dist = x.s.lin && x.s.q == -1 && x.s.k == 1 && x.s.ql == 1 && x.s.kl == -1;
  if (x.s.nn && dist) return kg_idx(abs(x.i), x.f0, x.f1, x.s);
  if (x.s.nn && neg_dist) {
    const kg_idx m = -x;
    return kg_idx(abs(x.i), m.f0, m.f1, m.s);
  }
  return kg_idx(abs(x.i), -0.f, fabsf(x.fl()), kg_sym{0, 0, 0, 0, false, true, x.s.nn});
}
__device__ __forceinline__ float kg_tanh(float x) { return tanh_ex2(x); }  // about 1e-7 (tanhf: tanh.approx)
__device__ __forceinline__ kg_score kg_tanh(kg_score x) { return kg_score(tanh_ex2((float)x), 1.f); }  // (see tanhf)
__device__ __forceinline__ float kg_log(float x) { return logf(x); }
__device__ __forceinline__ float kg_log(kg_idx x) { return logf(x.fl()); }
__device__ __forceinline__ float kg_exp(float x) { return expf(x); }
__device__ __forceinline__ float kg_exp(kg_idx x) { return expf(x.fl()); }

// What a score_mod returns: v, its value as float arithmetic gives it (what the sm_80 kernels and a
// Hopper kernel with a mask_mod use), and the parts apply_user_hoist takes apart: value = row +
// fac * col (raw: col in the units of a score: a kg_score returned, or a kg_rowcol's rawok form;
// pos: fac is the kernel's own scale, known > 0), else row + col.
// add / unit: col == the raw score + add, add independent of the score (kg_rowcol's runit: `score -/+
// an index times a per-row value`), so the Q K^T accumulators may start from add (user_acc_init).
struct kg_ret {
  float v, row, col, fac, add;
  bool raw, pos, unit;
  kg_ret() = default;
  __device__ __forceinline__ kg_ret(float x)
      : v(x), row(-0.f), col(x), fac(1.f), add(0.f), raw(false), pos(false), unit(false) {}
  __device__ __forceinline__ kg_ret(kg_score x)
      : v((float)x), row(-0.f), col(x.raw), fac(x.scale), add(0.f), raw(true), pos(x.orig), unit(false) {}
  __device__ __forceinline__ kg_ret(kg_rowcol x)
      : v(x.v), row(x.row), col(x.rawok ? x.rawc : x.hc ? x.col : -0.f), fac(x.rfac), add(x.radd), raw(x.rawok),
        pos(x.rawok), unit(x.rawok && x.runit) {}
  __device__ __forceinline__ kg_ret(kg_idx x)
      : v(x.fl()), row(x.f0), col(x.f1), fac(1.f), add(0.f), raw(false), pos(false), unit(false) {}
  __device__ __forceinline__ float natural() const { return v; }
};

{% if u.score_mod is not none %}
__device__ __forceinline__ kg_ret kg_user_score_mod(kg_score score, int batch, int head, int kv_head, kg_idx q_idx,
                                                   kg_idx kv_idx, kg_idx q_len, kg_idx kv_len, kg_idx q_offset{% for n, t in u.tensors %},
                                                   const {{ t }}* __restrict__ {{ n }}{% endfor %}) {
#line 1 "score_mod"
{{ u.score_mod }}
//@@kg_line_restore@@
}
{% endif %}
{% if u.mask_mod is not none %}
// What a mask_mod returns: its value converted to bool as a bool function's return converts it (an
// int or a float is true when not zero), but a pointer (a user tensor named without an index:
// `allowed` for `allowed[kv_idx]`) stops the compile instead of reading as true for every pair.
__device__ __forceinline__ bool kg_mask_bool(bool b) { return b; }
struct kg_mask_ret {
  bool v;
  __device__ __forceinline__ kg_mask_ret() : v(false) {}   // `return {};`, as a bool's false
  template <class T>
  __device__ __forceinline__ kg_mask_ret(T&& x) : v(kg_mask_bool(static_cast<T&&>(x))) {}
  template <class T>
  __device__ __forceinline__ kg_mask_ret(T*) : v(true) {
    static_assert(sizeof(T) == 0, "mask_mod returned a pointer: index the tensor (name[kv_idx], not name)");
  }
};
__device__ __forceinline__ kg_mask_ret kg_user_mask_mod(int batch, int head, int kv_head, kg_idx q_idx, kg_idx kv_idx,
                                                 kg_idx q_len, kg_idx kv_len, kg_idx q_offset{% for n, t in u.tensors %},
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
// KV head, and its valid rows (the tile's rows past them are padding); the lengths and the offset
// also as the snippets' kg_idx values (their float copies converted once a tile).
struct UserTile {
  int b, head, kv_head, q_len, kv_len, q_offset, valid_rows;
  kg_idx q_len_x, kv_len_x, q_offset_x;
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
  ut.q_len_x = kg_idx(ut.q_len, (float)ut.q_len, -0.f, kg_sym{0, 0, 1, 0, true, false, false});
  ut.kv_len_x = kg_idx(ut.kv_len, (float)ut.kv_len, -0.f, kg_sym{0, 0, 0, 1, true, false, false});
  ut.q_offset_x = kg_idx(ut.q_offset, (float)ut.q_offset, -0.f, kg_sym_none());
  return ut;
}

__device__ __forceinline__ bool user_keep(const AttnParams& p, const UserTile& ut, int head, kg_idx q_idx,
                                          kg_idx kv_idx) {
{% if u.mask_mod is not none %}
  return kg_user_mask_mod(ut.b, head, ut.kv_head, q_idx, kv_idx, ut.q_len_x, ut.kv_len_x, ut.q_offset_x
                          {%- for n, t in u.tensors %}, reinterpret_cast<const {{ t }}*>(p.user{{ loop.index0 }}){% endfor %}).v;
{% else %}
  return true;
{% endif %}
}

// One logit x (in units whose natural-log value is x * to_nat) through mask_mod and score_mod; the
// result in the same units (from_nat = 1 / to_nat).  A masked pair never runs the score_mod (its
// reads may rely on the mask).
__device__ __forceinline__ float user_logit(const AttnParams& p, const UserTile& ut, int head, kg_idx q_idx,
                                            kg_idx kv_idx, float x, float to_nat, float from_nat) {
  if (USER_MASK && !user_keep(p, ut, head, q_idx, kv_idx)) return -KG_INF;
{% if u.score_mod is not none %}
  const kg_ret r = kg_user_score_mod(kg_score(x, to_nat, true), ut.b, head, ut.kv_head, q_idx, kv_idx, ut.q_len_x,
                                     ut.kv_len_x, ut.q_offset_x
                                     {%- for n, t in u.tensors %}, reinterpret_cast<const {{ t }}*>(p.user{{ loop.index0 }}){% endfor %});
  x = r.natural() * from_nat;
{% endif %}
  return x;
}

{% if u.score_mod is not none %}
// The score_mod's result as its parts (kg_ret), for apply_user_hoist (no mask_mod there).
__device__ __forceinline__ kg_ret user_logit_parts(const AttnParams& p, const UserTile& ut, int head, kg_idx q_idx,
                                                   kg_idx kv_idx, float x, float to_nat) {
  return kg_user_score_mod(kg_score(x, to_nat, true), ut.b, head, ut.kv_head, q_idx, kv_idx, ut.q_len_x, ut.kv_len_x,
                           ut.q_offset_x
                           {%- for n, t in u.tensors %}, reinterpret_cast<const {{ t }}*>(p.user{{ loop.index0 }}){% endfor %});
}
{% endif %}

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

// The indices of fragment element (mt, h, nt, e): query row r's position (clamped to the last
// row) and the key (clamped to the last key unless CLAMP_KV is false); kg_sym facts as documented
// there (NONNEG: the caller knows every pair of the block has a non-negative bottom-right distance).
struct UserBlock {
  int col0;
  float col0_f, kv_last_c;
};
__device__ __forceinline__ UserBlock user_block(const UserTile& ut, int n, int lane) {
  UserBlock ub;
  ub.col0 = n * BN + 2 * (lane & 3);
  ub.col0_f = (float)(n * BN) + (float)(2 * (lane & 3));
  ub.kv_last_c = (ut.kv_len_x.f0 - 1.f) - ub.col0_f;   // the last key's column from col0 (clamped blocks)
  return ub;
}
template <bool NONNEG>
__device__ __forceinline__ kg_idx user_q_idx(const UserTile& ut, int pos) {
  const int qi = min(pos, ut.q_len - 1);
  return kg_idx(qi, (float)qi, -0.f, kg_sym{1, 0, 0, 0, true, false, NONNEG});
}
template <bool CLAMP_KV, bool NONNEG>
__device__ __forceinline__ kg_idx user_kv_idx(const UserTile& ut, const UserBlock& ub, int c) {
  if (CLAMP_KV)
    return kg_idx(min(ub.col0 + c, ut.kv_len - 1), ub.col0_f, fminf((float)c, ub.kv_last_c), kg_sym{0, 1, 0, 0, false, true, false});
  return kg_idx(ub.col0 + c, ub.col0_f, (float)c, kg_sym{0, 1, 0, 0, true, true, NONNEG});
}

// mask_mod / score_mod on a block of scores in the m16 fragment layout (apply_mask's: rows
// row0 + warp * WM + mt * 16 + g + 8 h, keys n * BN + nt * 8 + 2 tq + e).  Out-of-range elements
// (padding rows, keys at or past kv_len) get the snippets at clamped indices (the last query row,
// the last key): every read stays in bounds, and no branch splits the warp around the snippet (a
// guard made the loop branch around each logit: 1.26x the built-in ALiBi's time, 2x its soft-cap);
// their results never count (apply_mask then masks keys past kv_len; padding rows are not stored).
// CLAMP_KV false: the caller knows every key of block n is below kv_len (a tile's key blocks but its
// last), so the keys go unclamped.  The keys' float copies: one add a column from the block's base.
// NONNEG: every pair of the block has a non-negative bottom-right distance (kg_abs uses it).
template <bool CLAMP_KV = true, bool NONNEG = false>
__device__ __forceinline__ void apply_user(float (&s)[MT][BN / 8][4], const AttnParams& p, const UserTile& ut, int n,
                                           int row0, int qpk, int warp, int lane, float to_nat, float from_nat) {
  const UserBlock ub = user_block(ut, n, lane);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + warp * WM + mt * 16 + (lane >> 2) + 8 * h;
      const int pos = row_position(r, qpk);
      const int head = PACK_GQA ? ut.kv_head * qpk + (r - pos * qpk) : ut.head;
      const kg_idx q_idx = user_q_idx<NONNEG>(ut, pos);
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[mt][nt][2 * h + e];
          x = user_logit(p, ut, head, q_idx, user_kv_idx<CLAMP_KV, NONNEG>(ut, ub, nt * 8 + e), x, to_nat, from_nat);
        }
    }
}

{% if u.score_mod is not none and u.mask_mod is none %}
// apply_user on the Hopper path, whose softmax_scores takes a row offset and an exponent factor
// (score_mod without mask_mod).  The score_mod's results (kg_ret) leave the scores in two ways:
// - the row part: s = col + (row - the first key's row), which is s = col where the compiler sees
//   a row's parts equal (a score_mod built from the indices' float copies times per-row values:
//   ALiBi); roff[mt][h] = -the first key's row (in the scores' units), so the scores come back as
//   the true logits plus roff and softmax_scores takes roff off the max and the exponent once a
//   row (causal ALiBi's identity, common/alibi.cuh, for any snippet).  The equality is tested on
//   the bits, folded when both are one value; unequal parts are added back, so any score_mod stays
//   exact.
// - the scale: when every result is in a score's units with one positive factor (kg_ret::raw:
//   the score as passed, `score -/+ an index times a per-row value`, `cap * tanhf(score / cap)`),
//   the scores stay in those units and the factor goes into the exponent (softmax_scores folds a
//   positive factor into the row max, as plain attention does with its scale); otherwise they are
//   converted to natural-log units.  The test folds at compile time for the usual snippets (the
//   kernel's own scale is known positive; a constant cap is); a factor known only at run time
//   takes the test at run time, both forms compiled.
// Returns the factor softmax_scores applies to the block's scores (own_factor: the one of the
// kernel's own scale, score_scale).
// The score_mod's parts (kg_ret) of every element of block n (apply_user's indices), at the scores
// s, and whether all are in a score's units with one factor (apply_user_hoist's raw); ZERO: at
// score 0, and whether all are `the raw score + add` (user_acc_init's unit).
template <bool CLAMP_KV, bool NONNEG, bool ZERO = false>
__device__ __forceinline__ bool user_block_parts(kg_ret (&rr)[MT][BN / 8][4], const float (&s)[MT][BN / 8][4],
                                                 const AttnParams& p, const UserTile& ut, int n, int row0, int qpk,
                                                 int warp, int lane, float to_nat) {
  bool all = true;
  const UserBlock ub = user_block(ut, n, lane);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + warp * WM + mt * 16 + (lane >> 2) + 8 * h;
      const int pos = row_position(r, qpk);
      const int head = PACK_GQA ? ut.kv_head * qpk + (r - pos * qpk) : ut.head;
      const kg_idx q_idx = user_q_idx<NONNEG>(ut, pos);
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          kg_ret& q = rr[mt][nt][2 * h + e];
          q = user_logit_parts(p, ut, head, q_idx, user_kv_idx<CLAMP_KV, NONNEG>(ut, ub, nt * 8 + e),
                               ZERO ? 0.f : s[mt][nt][2 * h + e], to_nat);
          all = ZERO ? all && q.unit : all && q.raw && __float_as_uint(q.fac) == __float_as_uint(rr[0][0][0].fac);
        }
    }
  return all;
}

template <bool CLAMP_KV = true, bool NONNEG = false>
__device__ __forceinline__ float apply_user_hoist(float (&s)[MT][BN / 8][4], const AttnParams& p, const UserTile& ut,
                                                  int n, int row0, int qpk, int warp, int lane, float to_nat,
                                                  float own_factor, float (&roff)[MT][2], bool acc = false) {
  kg_ret rr[MT][BN / 8][4];
  bool raw = user_block_parts<CLAMP_KV, NONNEG>(rr, s, p, ut, n, row0, qpk, warp, lane, to_nat);
  const float fac = rr[0][0][0].fac;
  raw = raw && (rr[0][0][0].pos || fac > 0.f);
  // Each lane decides its own unit (raw with its factor, or natural-log): with a per-key factor on the
  // score (`score * temp[kv_idx]`) the lanes of one query row can differ, and softmax_scores takes
  // each lane's max into log2 units (its own exponent factor, the value returned below) before the
  // quad's reduction, so they never mix.  (A vote for one unit per warp was GPU-tested instead; it
  // cost every hoisted snippet a multiply and a select a logit, the unit no longer known at compile
  // time: 628 -> 759 instructions in the identity snippet's d 64 key-block loop.)
  const float inv = raw ? 1.f / fac : 1.f;   // the row parts into the scores' units
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row_first = rr[mt][0][2 * h].row;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const kg_ret& q = rr[mt][nt][2 * h + e];
          // (acc: the accumulators started from q.add, user_acc_init: the score is q.col already)
          const float col = acc && q.unit ? s[mt][nt][2 * h + e] : raw || !q.raw ? q.col : q.col * q.fac;
          s[mt][nt][2 * h + e] =
              __float_as_uint(q.row) == __float_as_uint(row_first) ? col : col + (q.row - row_first) * inv;
        }
      roff[mt][h] = -row_first * inv;
    }
  // (the kernel's own scale: its exponent factor as plain attention takes it, own_factor)
  return raw ? (rr[0][0][0].pos ? own_factor : fac * USER_LOG2E) : USER_LOG2E;
}

// The Q K^T accumulators of block n started from the score_mod's per-key part (USER_ACC): when
// every result of apply_user_hoist's instance <CLAMP_KV, NONNEG> is `the raw score + add` (kg_ret's
// unit: `score -/+ an index times a per-row value`, ALiBi written as a snippet), s = add (the snippet
// at score 0) and true is returned: the first wgmma then accumulates, and apply_user_hoist (acc)
// takes the scores as they come, without the FFMA a logit that would add the part after the GEMM
// (the built-in ALiBi's ALIBI_ACC, common/alibi.cuh).  Otherwise s is left alone and false returned.
template <bool CLAMP_KV = true, bool NONNEG = false>
__device__ __forceinline__ bool user_acc_init(float (&s)[MT][BN / 8][4], const AttnParams& p, const UserTile& ut,
                                              int n, int row0, int qpk, int warp, int lane, float to_nat) {
  if (!USER_ACC) return false;
  kg_ret rr[MT][BN / 8][4];
  if (!user_block_parts<CLAMP_KV, NONNEG, true>(rr, s, p, ut, n, row0, qpk, warp, lane, to_nat)) return false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = rr[mt][nt][e].add;
  return true;
}
{% endif %}
