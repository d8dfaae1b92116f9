// ---- common/mma.cuh: the dtype-specific tensor-core instruction and fp32 -> 16-bit packing ----
// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulate.
__device__ __forceinline__ void mma_16816(float* d, const u32* a, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.{{ mma_type }}.{{ mma_type }}.f32 "
      "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 -> one packed pair of 16-bit floats, `lo` in the low half.
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  asm("{{ cvt_pack }} %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}


// fp16 operands whatever the dtype (an FP8 cache's fp16 paths: mainloop_sm80.cuh's FP8_REGS tile,
// mainloop_sm90.cuh's MMA_F16 P pack); `lo` in the low half.
__device__ __forceinline__ void mma_f16(float* d, const u32* a, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ u32 pack2_f16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
