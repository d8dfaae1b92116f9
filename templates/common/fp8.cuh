// ---- common/fp8.cuh: FP8 ({{ v.kv_dtype }}) K/V values to {{ v.dtype }} and their descale factors ----
// Shared by the sm_80 mainloop (mainloop_sm80.cuh: staging stages, or FP8_REGS' fragments) and the
// Hopper one (mainloop_sm90.cuh: the producer warps' landing-stage conversion).
{% set f8cvt = v.arch not in ("sm_80", "sm_86", "sm_87") %}
{% if f8cvt %}
// sm_89+: four FP8 values -> two fp16 pairs (the layout of fp8x4_to_16), for an fp16 dtype and for
// the FP8_REGS tile's fp16 MMAs whatever the dtype (mainloop_sm80.cuh, "FP8 in registers").  e4m3: one
// cvt.rn.f16x2.e4m3x2 a pair (F2FP reads either half of w), exact for every code, NaN stays NaN;
// e5m2 is the high byte of an fp16: two byte permutes.  (fp8x4_to_16 takes 4 instructions a pair
// for a bf16 target.)
__device__ __forceinline__ void fp8x4_to_f16(u32 w, u32& lo, u32& hi) {
  {% if v.kv_dtype == "e4m3" %}
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi) : "r"(w));
  {% else %}
  lo = __byte_perm(w, 0u, 0x1404);
  hi = __byte_perm(w, 0u, 0x3424);
  {% endif %}
}
{% endif %}

{% if f8cvt and v.dtype == "bf16" %}
// A bf16 q for fp16 GEMMs (the FP8_REGS decode tile's q_frags_to_f16, the Hopper kernel's
// q_rows_to_f16): a row times the power of two 2^k that puts its largest |q| (bf16 bits m, sign
// cleared: monotone in the value) in [2^14, 2^15), below fp16's largest finite value 65504.
__device__ __forceinline__ int f16_row_shift(u32 m) { return min(141 - (int)(m >> 7), 126); }   // 2^(E - 127 + k) = 2^14
__device__ __forceinline__ float pow2f(int k) { return __uint_as_float((u32)(127 + k) << 23); }  // 2^k, -126 <= k <= 127
// Two bf16 values (lo in the low half) times `up`, as an fp16 pair.
__device__ __forceinline__ u32 bf16x2_to_f16x2(u32 w, float up) {
  return pack2_f16(__uint_as_float(w << 16) * up, __uint_as_float(w & 0xFFFF0000u) * up);
}
{% endif %}

// Four FP8 values (byte i of w = element i) -> four 16-bit values, elements 0, 1 in lo (0 in the
// low half), 2, 3 in hi.  Each byte is moved into the high byte of a 16-bit lane first; then the
// sign stays and the exponent and mantissa bits shift into the target format's places, which
// reads as the value times 2^-(the bias difference), and one multiply by that power of two (exact,
// subnormals included) restores it: 2 logic ops and one packed multiply per two values, no cvt
// (the F2F conversions run at a quarter of the FMA rate and made the bf16 decode compute-bound).
// An fp16 target on sm_89+ takes fp8x4_to_f16's one cvt a pair instead (the FP8 to fp16
// conversion is a single F2FP, not a chain through fp32).
__device__ __forceinline__ void fp8x4_to_16(u32 w, u32& lo, u32& hi) {
  {% if f8cvt and v.dtype == "fp16" %}
  fp8x4_to_f16(w, lo, hi);
  {% else %}
  u32 a = __byte_perm(w, 0u, 0x1404), b = __byte_perm(w, 0u, 0x3424);
  {% if v.dtype == "bf16" %}
  {% if v.kv_dtype == "e4m3" %}
  // e4m3 (bias 7) -> bf16 (bias 127): exponent and mantissa right by 4 bits, then * 2^120.
  // e4m3fn's NaN (S.1111.111) reads as +-480.
  const u32 sh = 4, keep = 0x07F007F0u, k = 0x7B807B80u;
  {% else %}
  // e5m2 (bias 15) -> bf16 (bias 127): exponent and mantissa right by 3 bits, then * 2^112.
  // e5m2's inf and NaN read as finite values (+-65536 and above).
  const u32 sh = 3, keep = 0x0FE00FE0u, k = 0x77807780u;
  {% endif %}
  a = (a & 0x80008000u) | ((a >> sh) & keep);
  b = (b & 0x80008000u) | ((b >> sh) & keep);
  // fma with -0 as the addend (mul.bf16x2 is sm_90 only): x * 2^n + (-0) = x * 2^n, signed zeros kept
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(a) : "r"(a), "r"(k), "r"(0x80008000u));
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(b) : "r"(b), "r"(k), "r"(0x80008000u));
  {% elif v.kv_dtype == "e4m3" %}
  // e4m3 (bias 7) -> fp16 (bias 15): exponent and mantissa right by 1 bit, then * 256.
  // e4m3fn's NaN (S.1111.111) has no fp16 image here and reads as +-480.
  const u32 k256 = 0x5C005C00u;
  a = (a & 0x80008000u) | ((a >> 1) & 0x3F803F80u);
  b = (b & 0x80008000u) | ((b >> 1) & 0x3F803F80u);
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(a) : "r"(a), "r"(k256));
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(b) : "r"(b), "r"(k256));
  {% endif %}
  // (e5m2 is the high byte of an fp16: nothing more to do for fp16)
  lo = a;
  hi = b;
  {% endif %}
}

// The descale factor of request b, KV head h (FlashAttention-3's (batch, num_heads_kv) tensor at
// `addr` with strides bs, hs; 0 along a broadcast dimension); a null address reads as 1.
__device__ __forceinline__ float descale_of(i64 addr, int bs, int hs, int b, int h) {
  return addr != 0 ? reinterpret_cast<const float*>(addr)[(i64)b * bs + (i64)h * hs] : 1.f;
}
