// ---- common/fp8_mma.cuh: FP8 tensor-core building blocks of the Hopper kernel (design variant B) ----
// docs/dev/fp8_hopper_design.md section 4.  Not wired into the attention kernel yet: these are the
// pieces whose layouts tests/test_fp8_mma_cpu.py pins down (numpy emulation) and compiles.
//
// P V with FP8 operands: P (scores after the softmax, fp32 accumulators of S = Q K^T) becomes the
// register A operand of wgmma m64nNk32 e4m3 and V^T (head dims as rows, keys contiguous) the
// K-major shared-memory B operand.  A thread's accumulators of a 32-key group (slices 4i..4i+3)
// hold keys 2t, 2t+1, 8+2t, 9+2t, 16+2t, 17+2t, 24+2t, 25+2t of rows g and g + 8, while the k32
// A fragment wants k = 4t..4t+3 (registers 0, 1) and 16+4t..16+4t+3 (registers 2, 3).  P V sums
// over the keys, so instead of moving scores between lanes the keys are relabelled: position p of
// a 32-key group in V^T holds key vt_key(p), exactly the key the A fragment puts there.

// The key at position p (0..31) of a 32-key group of V^T.
__device__ __forceinline__ int vt_key(int p) {
  const int h = p >> 4, t = (p >> 2) & 3, e = p & 3;
  return 16 * h + 8 * (e >> 1) + 2 * t + (e & 1);
}

// Two fp32 values -> two e4m3 bytes in the low half of a register (x0 in byte 0), round to
// nearest even, saturated to +-448 (cvt puts its first source in the upper byte).
__device__ __forceinline__ u32 e4m3x2(float x0, float x1) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(x1), "f"(x0));
  return (u32)r;
}

// Probabilities (fp32 accumulator layout of S, NB keys) -> the e4m3 A fragments of P V, one per
// 32-key group: registers 0 / 2 rows g (keys 2t, 2t+1, 8+2t, 9+2t and the same + 16), 1 / 3 rows
// g + 8 (accumulator elements 2, 3).
template <int NB>
__device__ __forceinline__ void pack_p8(const float (&s)[1][NB / 8][4], u32 (&pa)[NB / 32][4]) {
#pragma unroll
  for (int i = 0; i < NB / 32; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {   // r = 0: keys 0-15 of the group (slices 4i, 4i+1), 1: 16-31
      const float* a = s[0][4 * i + 2 * r];
      const float* b = s[0][4 * i + 2 * r + 1];
      pa[i][2 * r] = e4m3x2(a[0], a[1]) | (e4m3x2(b[0], b[1]) << 16);
      pa[i][2 * r + 1] = e4m3x2(a[2], a[3]) | (e4m3x2(b[2], b[3]) << 16);
    }
  }
}

// 4 x 4 byte transpose: out[i] byte e = w[e] byte i.
__device__ __forceinline__ void transpose4x4(const u32 (&w)[4], u32 (&out)[4]) {
  const u32 t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[2], w[3], 0x5140);
  const u32 t2 = __byte_perm(w[0], w[1], 0x7362), t3 = __byte_perm(w[2], w[3], 0x7362);
  out[0] = __byte_perm(t0, t1, 0x5410);
  out[1] = __byte_perm(t0, t1, 0x7632);
  out[2] = __byte_perm(t2, t3, 0x5410);
  out[3] = __byte_perm(t2, t3, 0x7632);
}

// One V block, FP8 rows as the Hopper kernel's landing stages hold them (NK keys x ND head dims in
// column blocks of 64 dims, NK rows x 64 bytes each, TMA's 64-byte swizzle: chunk c of row r at
// c ^ ((r >> 1) & 3); variant A's layout, mainloop_sm90.cuh), into V^T (ND rows x NK keys in
// column blocks of 128 keys, ND rows x 128 bytes each, 128-byte swizzle; keys permuted by vt_key
// inside every 32-key group).  A unit is 4 V^T positions x 4 head dims: four 32-bit loads (one a
// key), a 4 x 4 byte transpose, four 32-bit stores (one a head dim).  Keys >= valid are written as
// zeros.  Thread tid of nthr takes units tid, tid + nthr, ...; the 32 units of a warp's step are
// 4 position quads x 8 head-dim quads (lane & 3, lane >> 2); tests/test_fp8_mma_cpu.py counts the
// bank conflicts this gives (ldmatrix.trans / stmatrix, FlashAttention-3's way, would do better:
// to measure on the GPU).
template <int NK, int ND>
__device__ __forceinline__ void transpose_v8(u32 vt, u32 land, int tid, int nthr, int valid) {
  static_assert(NK % 128 == 0 && ND % 64 == 0, "V^T blocks of 128 keys, 64-dim landing blocks");
  constexpr int UNITS = (NK / 4) * (ND / 4);
#pragma unroll 1
  for (int u = tid; u < UNITS; u += nthr) {
    const int lane = u & 31, step = u >> 5;
    const int pq = (step % (NK / 16)) * 4 + (lane & 3), dq = (step / (NK / 16)) * 8 + (lane >> 2);
    const int p0 = 4 * pq, d0 = 4 * dq;
    u32 w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = (p0 & ~31) + vt_key((p0 & 31) + e);
      w[e] = 0u;
      if (key < valid) {
        const int c = (d0 & 63) >> 4;
        const u32 a = land + (d0 >> 6) * (NK * 64) + key * 64 + (((c ^ ((key >> 1) & 3)) << 4) | (d0 & 15));
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w[e]) : "r"(a));
      }
    }
    u32 o[4];
    transpose4x4(w, o);
    const int cb = p0 >> 7, b = p0 & 127;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = d0 + i;
      const u32 a = vt + cb * (ND * 128) + row * 128 + ((((b >> 4) ^ (row & 7)) << 4) | (b & 15));
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(o[i]) : "memory");
    }
  }
}
