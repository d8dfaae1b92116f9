// ---- common/mma.cuh: the tensor-core instruction and fp32 -> 16-bit packing ----
{% macro mma_fns(t, cvt, suffix) -%}
// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulate, {{ t }} operands.
__device__ __forceinline__ void mma_16816{{ suffix }}(float* d, const u32* a, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.{{ t }}.{{ t }}.f32 "
      "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 -> one packed pair of {{ t }} values, `lo` in the low half.
__device__ __forceinline__ u32 pack2{{ suffix }}(float lo, float hi) {
  u32 r;
  asm("{{ cvt }} %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
{%- endmacro %}
{{ mma_fns(mma_type, cvt_pack, "") }}

// The same on fp16 operands whatever the dtype (an FP8 cache's fp16 paths: mainloop_sm80.cuh's
// FP8_REGS tile, mainloop_sm90.cuh's MMA_F16 P pack and q conversion).
{{ mma_fns("f16", "cvt.rn.f16x2.f32", "_f16") }}
