// ---- common/fp8_mma.cuh: FP8 tensor-core building blocks of the Hopper kernel (design variant B) ----
// docs/dev/fp8_hopper_design.md section 4; used by the attention kernel's FP8 tensor-core variant
// (AttentionSpec.fp8_mma).  tests/test_fp8_mma_cpu.py pins their layouts (numpy emulation) and compiles them.
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

// stmatrix (sm_90): four 8 x 8 b16 matrices; lane l gives the address of row l & 7 of matrix l >> 3
// and, in register m, bytes 4 (l & 3) .. 4 (l & 3) + 3 of row l >> 2 of matrix m.
__device__ __forceinline__ void stsm_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], { %1, %2, %3, %4 };\n"
               ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// One V block, FP8 rows as the Hopper kernel's landing stages hold them (NK keys x ND head dims in
// column blocks of 64 dims, NK rows x 64 bytes each, TMA's 64-byte swizzle: chunk c of row r at
// c ^ ((r >> 1) & 3); variant A's layout, mainloop_sm90.cuh), into V^T (ND rows x NK keys in
// column blocks of 128 keys, ND rows x 128 bytes each, 128-byte swizzle; keys permuted by vt_key
// inside every 32-key group).  Keys >= valid are written as zeros.
//
// A unit is a 32-key group x 16 head dims (512 bytes), one per warp instruction pair, the way
// FlashAttention-3 transposes FP8 V (ldmatrix.trans, byte permutes, stmatrix; our own layout):
// - ldmatrix.x4.trans reads matrices m = 0..3 (keys 8m..8m+7 of the group, 16 bytes of dims each,
//   lanes 8m..8m+7 give the rows): lane (j = l >> 2, t = l & 3) receives in r_m, as b16 column j,
//   bytes [key 8m+2t: dims 2j, 2j+1; key 8m+2t+1: dims 2j, 2j+1];
// - two byte permutes per pair (r0, r1), (r2, r3) give, for dim 2j and for dim 2j+1, the four
//   bytes of positions 16h + 4t .. 16h + 4t + 3, which vt_key maps to keys 16h + {2t, 2t+1, 8+2t,
//   9+2t}: exactly the keys r_(2h) and r_(2h+1) hold;
// - stmatrix.x4 writes them: matrix 2h + q, row j = dim 2j + (q ^ (j >= 4)) (lanes j >= 4 swap
//   even and odd, so that a matrix's 8 rows fall in 8 distinct 16-byte chunks of the 128-byte
//   swizzle: no bank conflicts), bytes 4t.. of the 16 positions 16h ...
// Warp w of nw takes the 16-dim chunks C = w, w + nw, ... and, per chunk, the NK / 32 key groups in
// an unrolled loop: the chunk's ldmatrix and stmatrix addresses are computed once, a group's are
// immediate offsets (ldmatrix: + 2048 G) or one XOR (stmatrix: the swizzled 16-byte chunk
// 2 (G & 3) + (m >> 1) ^ (dl & 7) is the chunk's own XOR 2 (G & 3), bits 5-6 of an address whose
// other terms are multiples of 128), so a unit costs ldmatrix, four byte permutes, one XOR and
// stmatrix (the loop over units with a division per unit issued ~36 instructions a unit and made
// the d 256 kernel issue 1.46x FlashAttention-3's instructions; ncu, docs/dev/perf-log.md).
// tests/test_fp8_mma_cpu.py emulates the lanes.
// One unit: ldmatrix.x4.trans at `ld`, the byte permutes, stmatrix.x4 at `st`.  `left`: keys of the
// block past this lane's byte-0 key of r_0 (valid - 32 G - 2t), below 32: r_q's bytes of keys
// 8q + 2t (+ 1) at or past it are zeroed.
__device__ __forceinline__ void transpose_unit(u32 ld, u32 st, u32 sel_a, u32 sel_b, int left = 32) {
  u32 r[4];
  ldsm_x4_t(ld, r[0], r[1], r[2], r[3]);
  if (left < 32) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      r[q] &= (8 * q < left ? 0x0000ffffu : 0u) | (8 * q + 1 < left ? 0xffff0000u : 0u);
  }
  const u32 a0 = __byte_perm(r[0], r[1], sel_a), b0 = __byte_perm(r[0], r[1], sel_b);
  const u32 a1 = __byte_perm(r[2], r[3], sel_a), b1 = __byte_perm(r[2], r[3], sel_b);
  stsm_x4(st, a0, b0, a1, b1);
}

template <int NK, int ND>
__device__ __forceinline__ void transpose_v8(u32 vt, u32 land, int tid, int nthr, int valid) {
  static_assert(NK % 64 == 0 && NK >= 128 && ND % 64 == 0, "V^T blocks of 128 keys (the last may hold 64), 64-dim landing blocks");
  constexpr int NG = NK / 32, NC = ND / 16;
  // the lane's constants are recomputed per block (a dozen instructions) rather than hoisted out of
  // the caller's block loop, where they would stay live beside its state (the d 256 producer's 24
  // registers spilled them)
  asm volatile("" : "+r"(tid));
  const int lane = tid & 31, w = tid >> 5, nw = nthr >> 5;
  const int m = lane >> 3, i = lane & 7, j = lane >> 2, t = lane & 3;
  // ldmatrix row of this lane: key 8m + i of the group; its 64-byte swizzle term (key >> 1) & 3
  const u32 ld_row = land + (8 * m + i) * 64;
  const int ld_swz = (i >> 1) & 3;
  // stmatrix row of this lane: dim dl of the 16, positions 16 (m >> 1) of the group, its swizzled
  // 16-byte chunk without the group's part
  const int dl = 2 * i + ((m & 1) ^ (i >= 4 ? 1 : 0));
  const u32 st_row = vt + dl * 128 + ((u32)((m >> 1) ^ (dl & 7)) << 4);
  const u32 sel_a = j < 4 ? 0x6420u : 0x7531u, sel_b = j < 4 ? 0x7531u : 0x6420u;
  // key of byte 0 / byte 2 of r_m, for the tail mask
  const int k0 = 2 * t;
  // group G's stmatrix address in a chunk whose group-0 address is st (blocks of 128 keys ND * 128 apart)
  auto st_of = [](u32 st, int G) -> u32 { return (st ^ (u32)((G & 3) << 5)) + (NG > 4 ? (G >> 2) * (ND * 128) : 0); };
#pragma unroll 1
  for (int C = w; C < NC; C += nw) {
    const u32 ld = ld_row + (u32)(C >> 2) * (NK * 64) + ((u32)((C & 3) ^ ld_swz) << 4);
    const u32 st = st_row + (u32)C * (16 * 128);
    if (valid >= NK) {   // every key of the block: no tail mask in the unit loop
#pragma unroll 1
      for (int G = 0; G < NG; ++G) transpose_unit(ld + G * 2048, st_of(st, G),
                                                  sel_a, sel_b);
    } else {
#pragma unroll 1
      for (int G = 0; G < NG; ++G) transpose_unit(ld + G * 2048, st_of(st, G),
                                                  sel_a, sel_b, valid - 32 * G - k0);
    }
  }
}
