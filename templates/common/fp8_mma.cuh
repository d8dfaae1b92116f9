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
//
// Who does which unit.  The units (ND / 16 chunks of 16 dims x NK / 32 key groups) are numbered
// u = NG C + G, and the NW transposing warps (the kernel's NCONV = 96 threads: NW = 3) split them
// evenly by that flat index: warp W does units [W NU / NW, (W + 1) NU / NW).  d 256 / 128 keys:
// 64 units, 21 / 21 / 22 a warp (by whole 16-dim chunks, C = w, w + 3, ..., it was 24 / 20 / 20);
// d 128 / 192 keys: 48, 16 each (was 18 / 18 / 12); d 128 / 128 keys: 32, 10 / 11 / 11 (was
// 12 / 12 / 8); d 64 / 128 keys: 16, 5 / 5 / 6 (was 8 / 4 / 4).
// Each warp's share is unrolled at compile time (the warp index picks one of NW instantiations), so
// a unit's chunk C and group G are constants, and so are its address terms:
// - ldmatrix: the 16-byte column (C & 3) ^ ((key >> 1) & 3) of the landing stage's 64-byte rows is
//   the lane's chunk-0 column XOR (C & 3) << 4 (the stage is 1024-byte aligned and its rows 64
//   bytes, so the XOR touches only the column), plus (C >> 2) NK 64 (the 64-dim column block) +
//   2048 G;
// - stmatrix: the swizzled 16-byte chunk 2 (G & 3) + (m >> 1) ^ (dl & 7) is the lane's group-0
//   chunk XOR (G & 3) << 5 (the address's other terms are multiples of 128), plus 2048 C +
//   (G >> 2) ND 128.
// One register each holds the current ldmatrix / stmatrix address and is XORed in place from one
// unit's pattern to the next (a chain the compiler cannot fold back into a register per pattern:
// 4 + 4 of them would leave no room for the units in flight); the rest is the instructions'
// immediate offsets.  A unit is then ldmatrix, four byte permutes, stmatrix and at most two XORs.
// KG_VT_BATCH units are in flight (2 or 1, below): the batch's ldmatrix are issued together and its
// first byte permute takes a dependence on the last ldmatrix (one LOP3 that passes the selector
// through; without it ptxas, at the producer's 24 registers, sinks each ldmatrix to right before its
// permutes: one in flight), so a warp waits for one shared-memory round trip per batch, not per
// unit.  d 256 (NVRTC 13.0 SASS): the slowest warp makes 11 round trips a block instead of 24, in
// 174 straight-line instructions instead of about 400 (the per-chunk address setup and the loop
// control are gone); but the two units in flight take four 4-register groups of the 24, so the
// block loop's state is reloaded from local memory every block (13 spill accesses in the block
// loop, 8 before; 44 bytes spilled, 36 before).  KG_VT_BATCH=1 (one unit at a time, 22 round
// trips, 161 instructions) spills 16 bytes and nothing in the block loop; 3 and 4 make no fewer
// round trips than 2 (ptxas keeps about two in flight) and spill as much or more.  (FlashAttention-3's
// d 256 FP8 transposer, for comparison: 1-2 LDSM in flight a warp, and a fourth transposing warp,
// 16 units each; here producer warp 0 issues the TMA.)
// Measured on the H200 (tile_ab, three passes, time against the 24/20/20 chunk loop): d 256
// causal / non-causal 0.83-0.85x with 2 in flight, 0.87-0.88x with 1; d 128 causal 16k (192-key
// blocks) 0.96x with 2, 0.93-0.94x with 1; d 128 non-causal 1.05-1.06x with 2, 0.97-1.01x with 1;
// d 64 1.00x either: the default is 2 above head dim 128 and 1 up to it.
// A block with keys past `valid` (once a tile) takes a loop over the same split, one unit at a
// time, with the tail mask.  tests/test_fp8_mma_cpu.py emulates the lanes and the split.
// (KG_VT_BATCH, KERNELGEN_DEFINES, sets it for every head dim: experiments)
template <int ND> __device__ constexpr int vt_batch() {
#ifdef KG_VT_BATCH
  static_assert(KG_VT_BATCH >= 1, "KG_VT_BATCH: units in flight a warp, 1 or more");
  return KG_VT_BATCH;
#else
  return ND > 128 ? 2 : 1;
#endif
}

// prmt.b32 (__byte_perm without its selector mask: the selectors here are 0x6420 / 0x7531, and one
// that passes through an asm is not known to the compiler, which would AND it with 0x7777 each time)
__device__ __forceinline__ u32 prmt(u32 x, u32 y, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(x), "r"(y), "r"(sel));
  return d;
}

// One unit's second half, on the registers ldmatrix.x4.trans gave: the tail mask, the byte
// permutes, stmatrix.x4 at `st`.  `left`: keys of the block past this lane's byte-0 key of r_0
// (valid - 32 G - 2t), below 32: r_q's bytes of keys 8q + 2t (+ 1) at or past it are zeroed.
__device__ __forceinline__ void transpose_store(u32 (&r)[4], u32 st, u32 sel_a, u32 sel_b, int left = 32) {
  if (left < 32) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      r[q] &= (8 * q < left ? 0x0000ffffu : 0u) | (8 * q + 1 < left ? 0xffff0000u : 0u);
  }
  const u32 a0 = prmt(r[0], r[1], sel_a), b0 = prmt(r[0], r[1], sel_b);
  const u32 a1 = prmt(r[2], r[3], sel_a), b1 = prmt(r[2], r[3], sel_b);
  stsm_x4(st, a0, b0, a1, b1);
}

// Unit u's XOR patterns (ldmatrix column, stmatrix group) and immediate offsets.
template <int NK> __device__ constexpr u32 vt_ld_xor(int u) { return (u32)(((u / (NK / 32)) & 3) << 4); }
template <int NK> __device__ constexpr u32 vt_st_xor(int u) { return (u32)(((u % (NK / 32)) & 3) << 5); }
template <int NK> __device__ constexpr u32 vt_ld_off(int u) {
  return (u32)((u / (NK / 32)) >> 2) * (NK * 64) + (u32)(u % (NK / 32)) * 2048;
}
template <int NK, int ND> __device__ constexpr u32 vt_st_off(int u) {
  return (u32)(u / (NK / 32)) * (16 * 128) + (u32)((u % (NK / 32)) >> 2) * (ND * 128);
}

// x ^= K in place, opaque to the compiler (see above).
template <u32 K>
__device__ __forceinline__ void xor_in_place(u32& x) {
  if constexpr (K != 0) asm volatile("xor.b32 %0, %0, %1;\n" : "+r"(x) : "n"(K));
}

// Units u + b .. u + N - 1 of a batch (U0: the warp's first unit; `ld` / `st` hold unit u + b - 1's
// XOR pattern, unit U0 - 1's being none): their ldmatrix, then their byte permutes and stmatrix.
template <int NK, int ND, int U0, int u, int b, int N>
__device__ __forceinline__ void vt_batch_load(u32& ld, u32 (&r)[N][4]) {
  if constexpr (b < N) {
    constexpr int v = u + b;
    xor_in_place<(v == U0 ? 0u : vt_ld_xor<NK>(v - 1)) ^ vt_ld_xor<NK>(v)>(ld);
    ldsm_x4_t(ld + vt_ld_off<NK>(v), r[b][0], r[b][1], r[b][2], r[b][3]);
    vt_batch_load<NK, ND, U0, u, b + 1, N>(ld, r);
  }
}
template <int NK, int ND, int U0, int u, int b, int N>
__device__ __forceinline__ void vt_batch_store(u32& st, u32 sel_a, u32 sel_b, u32 (&r)[N][4]) {
  if constexpr (b < N) {
    constexpr int v = u + b;
    xor_in_place<(v == U0 ? 0u : vt_st_xor<NK>(v - 1)) ^ vt_st_xor<NK>(v)>(st);
    transpose_store(r[b], st + vt_st_off<NK, ND>(v), sel_a, sel_b);
    vt_batch_store<NK, ND, U0, u, b + 1, N>(st, sel_a, sel_b, r);
  }
}

// Units u .. U1 - 1 of the block (no tail mask), vt_batch<ND>() at a time.
template <int NK, int ND, int U0, int u, int U1>
__device__ __forceinline__ void vt_batches(u32& ld, u32& st, u32 sel_a, u32 sel_b) {
  if constexpr (u < U1) {
    constexpr int N = U1 - u < vt_batch<ND>() ? U1 - u : vt_batch<ND>();
    u32 r[N][4];
    vt_batch_load<NK, ND, U0, u, 0, N>(ld, r);
    // sel_a = sel_a, after the batch's last ldmatrix (lop3 0xF0: the first operand)
    if constexpr (N > 1) asm volatile("lop3.b32 %0, %0, %1, 0, 0xF0;\n" : "+r"(sel_a) : "r"(r[N - 1][3]));
    vt_batch_store<NK, ND, U0, u, 0, N>(st, sel_a, sel_b, r);
    vt_batches<NK, ND, U0, u + N, U1>(ld, st, sel_a, sel_b);
  }
}

// Warp w's share of a block with every key valid: the instantiation of warp W = w (w warp-uniform).
template <int NK, int ND, int NW, int W = 0>
__device__ __forceinline__ void transpose_v8_full(int w, u32 ld0, u32 st0, u32 sel_a, u32 sel_b) {
  if constexpr (W + 1 < NW) {
    if (w != W) {
      transpose_v8_full<NK, ND, NW, W + 1>(w, ld0, st0, sel_a, sel_b);
      return;
    }
  }
  constexpr int NU = (ND / 16) * (NK / 32), U0 = W * NU / NW;
  vt_batches<NK, ND, U0, U0, (W + 1) * NU / NW>(ld0, st0, sel_a, sel_b);
}

// Warp w's share of a block with keys past valid (left0 = valid - 2t: the keys past the lane's
// byte-0 key of r_0 in group 0), one unit at a time with the tail mask.
template <int NK, int ND, int NW>
__device__ __forceinline__ void transpose_v8_tail(int w, u32 ld0, u32 st0, u32 sel_a, u32 sel_b, int left0) {
  constexpr int NG = NK / 32, NU = (ND / 16) * NG;
  const int u1 = (w + 1) * NU / NW;
#pragma unroll 1
  for (int u = w * NU / NW; u < u1; ++u) {
    const int C = u / NG, G = u - C * NG;
    u32 r[4];
    ldsm_x4_t((ld0 ^ (u32)((C & 3) << 4)) + (u32)((C >> 2) * (NK * 64) + G * 2048), r[0], r[1], r[2], r[3]);
    transpose_store(r, (st0 ^ (u32)((G & 3) << 5)) + (u32)(C * (16 * 128) + (G >> 2) * (ND * 128)), sel_a, sel_b,
                    left0 - 32 * G);
  }
}

// The block's V^T by NW warps; tid: the thread's index among them (0 .. 32 NW - 1).
template <int NK, int ND, int NW>
__device__ __forceinline__ void transpose_v8(u32 vt, u32 land, int tid, int valid) {
  static_assert(NK % 32 == 0 && NK >= 128 && ND % 64 == 0, "V^T blocks of 128 keys (the last may hold 32-96), 64-dim landing blocks");
  static_assert(NW >= 1 && NW <= (ND / 16) * (NK / 32), "a unit or more a warp");
  // the lane's constants are recomputed per block (a dozen instructions) rather than hoisted out of
  // the caller's block loop, where they would stay live beside its state (the d 256 producer's 24
  // registers spilled them)
  asm volatile("" : "+r"(tid));
  const int lane = tid & 31, w = tid >> 5;
  const int m = lane >> 3, i = lane & 7, j = lane >> 2, t = lane & 3;
  // ldmatrix row of this lane: key 8m + i of the group, chunk 0's 16-byte column of it (the 64-byte
  // swizzle term (key >> 1) & 3)
  const u32 ld0 = land + (8 * m + i) * 64 + ((u32)((i >> 1) & 3) << 4);
  // stmatrix row of this lane: dim dl of the 16, positions 16 (m >> 1) of the group, its swizzled
  // 16-byte chunk without the group's part
  const int dl = 2 * i + ((m & 1) ^ (i >= 4 ? 1 : 0));
  const u32 st0 = vt + dl * 128 + ((u32)((m >> 1) ^ (dl & 7)) << 4);
  const u32 sel_a = j < 4 ? 0x6420u : 0x7531u, sel_b = j < 4 ? 0x7531u : 0x6420u;
  if (valid >= NK)   // every key of the block: no tail mask
    transpose_v8_full<NK, ND, NW>(w, ld0, st0, sel_a, sel_b);
  else
    transpose_v8_tail<NK, ND, NW>(w, ld0, st0, sel_a, sel_b, valid - 2 * t);
}

// The lane's constants of transpose_v8, computed once a kernel instead of once a block (experiment
// KG_VT_HOIST, KERNELGEN_DEFINES; mainloop_sm90.cuh's producer: docs/dev/fa3_fp8_d128_sass.md counts
// about 30 instructions a transposing warp and block for them at d 128, where the producer has 40
// registers; above head dim 128 its 24 spilled them).
struct VtLane {
  u32 ld, st, sel_a, sel_b;
  int w, t2;
};
__device__ __forceinline__ VtLane vt_lane(int tid) {
  const int lane = tid & 31;
  const int m = lane >> 3, i = lane & 7, j = lane >> 2;
  const int dl = 2 * i + ((m & 1) ^ (i >= 4 ? 1 : 0));
  VtLane l;
  l.ld = (8 * m + i) * 64 + ((u32)((i >> 1) & 3) << 4);
  l.st = dl * 128 + ((u32)((m >> 1) ^ (dl & 7)) << 4);
  l.sel_a = j < 4 ? 0x6420u : 0x7531u;
  l.sel_b = j < 4 ? 0x7531u : 0x6420u;
  l.w = tid >> 5;
  l.t2 = 2 * (lane & 3);
  return l;
}
template <int NK, int ND, int NW>
__device__ __forceinline__ void transpose_v8_lane(u32 vt, u32 land, const VtLane& l, int valid) {
  if (valid >= NK)
    transpose_v8_full<NK, ND, NW>(l.w, land + l.ld, vt + l.st, l.sel_a, l.sel_b);
  else
    transpose_v8_tail<NK, ND, NW>(l.w, land + l.ld, vt + l.st, l.sel_a, l.sel_b, valid - l.t2);
}
