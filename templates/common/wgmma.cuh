// ---- common/wgmma.cuh: warpgroup MMA (sm_90a) — shared-memory descriptors and the instructions ----
// PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (wgmma.mma_async, m64nNk16,
// fp32 accumulators).  One warpgroup (4 consecutive warps starting at a multiple of 4) computes a
// 64 x N tile; warp w of the group owns rows 16w..16w+15 and, in each 8-column slice j, thread
// lane = 4g + t holds D[g][8j+2t..+1] in d[4j], d[4j+1] and D[g+8][8j+2t..+1] in d[4j+2], d[4j+3]
// (the mma.m16n8 accumulator layout repeated over N/8 slices).  An A operand in registers (16
// rows a warp, k16) has mma.m16n8k16's A layout: {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}.
//
// Operands in shared memory use the 128-byte swizzle that TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B: rows of 128 bytes (64 16-bit elements), the 16-byte chunk c of row
// r stored at chunk c ^ (r % 8), atoms of 8 rows (1024 bytes, 1024-byte aligned).  Descriptor
// (64 bits): start address >> 4 in bits 0-13, leading-dimension byte offset >> 4 in 16-29,
// stride-dimension byte offset >> 4 in 32-45, base offset 0 (atoms aligned) in 49-51, swizzle
// mode in 62-63 (1 = 128-byte).
//  - K-major operand (Q as A, K as B of S = Q K^T: the reduction dim is contiguous): the stride
//    byte offset is the distance between 8-row groups (1024 for dense 128-byte rows); the leading
//    offset is unused with swizzling (set to 1); a k16 step inside the 64-element atom advances
//    the start address by 32 bytes (the swizzle is a function of the address bits, so the
//    hardware's XOR matches TMA's).
//  - MN-major operand (V as B of O = P V, imm-trans-b = 1: N = head dim is contiguous): 8 key rows
//    of 128 bytes form an atom; the stride byte offset steps 8 keys (1024), the leading byte offset
//    steps 64 elements of N to the next atom (the next 128-byte column block).  When one
//    instruction covers only one 64-wide N atom, the leading offset is unused.

__device__ __forceinline__ u64 wgmma_desc(u32 smem, u32 lbo_bytes, u32 sbo_bytes) {
  return (u64)((smem & 0x3FFFF) >> 4) | ((u64)((lbo_bytes & 0x3FFFF) >> 4) << 16) |
         ((u64)((sbo_bytes & 0x3FFFF) >> 4) << 32) | ((u64)1 << 62);
}

// A descriptor as (lo, hi) 32-bit halves, so that a k step advances it by one 32-bit add to the low
// half (desc_at): the start-address field (bits 0-13, address >> 4) stays below 2^14 for every
// address inside the 228 KB of shared memory, so the add never carries into the offsets or into
// the high half.  Built once for a stage's base address, the descriptors of its k steps then cost
// one add each instead of the mask, shift and ors of wgmma_desc (FlashAttention-3 advances its
// descriptors the same way).
struct WgmmaDesc {
  u32 lo, hi;
};
__device__ __forceinline__ WgmmaDesc wgmma_desc2(u32 smem, u32 lbo_bytes, u32 sbo_bytes) {
  return WgmmaDesc{((smem & 0x3FFFF) >> 4) | (((lbo_bytes & 0x3FFFF) >> 4) << 16), ((sbo_bytes & 0x3FFFF) >> 4) | (1u << 30)};
}
// The same with the 64-byte swizzle (mode 2): 8-row atoms of 64-byte rows, stride 512 bytes.
__device__ __forceinline__ WgmmaDesc wgmma_desc2_sw64(u32 smem) {
  return WgmmaDesc{((smem & 0x3FFFF) >> 4) | (1u << 16), (512u >> 4) | (2u << 30)};
}
// The descriptor of the operand `offset_bytes` (a multiple of 16) past d's start address.
__device__ __forceinline__ u64 desc_at(WgmmaDesc d, u32 offset_bytes) {
  return ((u64)d.hi << 32) | (u64)(d.lo + (offset_bytes >> 4));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pin registers in program order around asynchronous wgmma (the compiler sees no dependence
// between an accumulator and wgmma.fence / wait_group otherwise and could move its uses across).
template <int N>
__device__ __forceinline__ void fence_regs(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(u32* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

{% macro wgmma_ss(n, t=mma_type, name="wgmma_ss") -%}
// D(64 x {{ n }}) (+)= A(64 x 16, smem, K-major) * B(16 x {{ n }}, smem, K-major), {{ t }} operands; scale_d = 0: D = A*B.
__device__ __forceinline__ void {{ name }}_n{{ n }}(float* d, u64 da, u64 db, int scale_d) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %{{ n // 2 + 2 }}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ t }}.{{ t }} "
      "{ {% for i in range(n // 2) %}%{{ i }}{{ ", " if not loop.last else "" }}{% endfor %}}, "
      "%{{ n // 2 }}, %{{ n // 2 + 1 }}, p, 1, 1, 0, 0; }\n"
      : {% for i in range(n // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last else "" }}{% endfor %}

      : "l"(da), "l"(db), "r"(scale_d));
}
{%- endmacro %}

{% macro wgmma_rs(n, t=mma_type, name="wgmma_rs") -%}
// D(64 x {{ n }}) += A(64 x 16, registers) * B(16 x {{ n }}, smem, MN-major: imm-trans-b = 1), {{ t }} operands.
__device__ __forceinline__ void {{ name }}_n{{ n }}(float* d, const u32* a, u64 db) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %{{ n // 2 + 5 }}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ t }}.{{ t }} "
      "{ {% for i in range(n // 2) %}%{{ i }}{{ ", " if not loop.last else "" }}{% endfor %}}, "
      "{ %{{ n // 2 }}, %{{ n // 2 + 1 }}, %{{ n // 2 + 2 }}, %{{ n // 2 + 3 }}}, %{{ n // 2 + 4 }}, p, 1, 1, 1; }\n"
      : {% for i in range(n // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last else "" }}{% endfor %}

      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
{%- endmacro %}

{% macro wgmma_ss8(n, at, bt) -%}
// FP8 (issue 24, design variant B): D(64 x {{ n }}) (+)= A(64 x 32, smem, K-major, {{ at }}) *
// B(32 x {{ n }}, smem, K-major, {{ bt }}); no transpose immediates (8-bit operands are K-major
// only).  A k32 step is 32 bytes, as a k16 step of 16-bit operands, so the descriptors are the same.
__device__ __forceinline__ void wgmma_ss8_n{{ n }}_{{ at }}_{{ bt }}(float* d, u64 da, u64 db, int scale_d) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %{{ n // 2 + 2 }}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k32.f32.{{ at }}.{{ bt }} "
      "{ {% for i in range(n // 2) %}%{{ i }}{{ ", " if not loop.last else "" }}{% endfor %}}, "
      "%{{ n // 2 }}, %{{ n // 2 + 1 }}, p, 1, 1; }\n"
      : {% for i in range(n // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last else "" }}{% endfor %}

      : "l"(da), "l"(db), "r"(scale_d));
}
{%- endmacro %}

{% macro wgmma_rs8(n, at, bt) -%}
// FP8: D(64 x {{ n }}) += A(64 x 32, registers, {{ at }}: four bytes a register, rows g / g + 8,
// k 4t..4t+3 and 16+4t..) * B(32 x {{ n }}, smem, K-major, {{ bt }}: V^T, keys contiguous).
__device__ __forceinline__ void wgmma_rs8_n{{ n }}_{{ at }}_{{ bt }}(float* d, const u32* a, u64 db) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %{{ n // 2 + 5 }}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k32.f32.{{ at }}.{{ bt }} "
      "{ {% for i in range(n // 2) %}%{{ i }}{{ ", " if not loop.last else "" }}{% endfor %}}, "
      "{ %{{ n // 2 }}, %{{ n // 2 + 1 }}, %{{ n // 2 + 2 }}, %{{ n // 2 + 3 }}}, %{{ n // 2 + 4 }}, p, 1, 1; }\n"
      : {% for i in range(n // 2) %}"+f"(d[{{ i }}]){{ ", " if not loop.last else "" }}{% endfor %}

      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
{%- endmacro %}

{% for n, at, bt in (wgmma8_ss_shapes if wgmma8_ss_shapes is defined else []) %}
{{ wgmma_ss8(n, at, bt) }}
{% endfor %}
{% for n, at, bt in (wgmma8_rs_shapes if wgmma8_rs_shapes is defined else []) %}
{{ wgmma_rs8(n, at, bt) }}
{% endfor %}
{% for n in wgmma_ss_shapes %}
{{ wgmma_ss(n) }}
{% endfor %}
{% for n in (wgmma_ss_f16_shapes if wgmma_ss_f16_shapes is defined else []) %}
{{ wgmma_ss(n, "f16", "wgmma_ss_f16") }}
{% endfor %}
{% for n in wgmma_rs_shapes %}
{{ wgmma_rs(n) }}
{% endfor %}
{% for n in (wgmma_rs_f16_shapes if wgmma_rs_f16_shapes is defined else []) %}
{{ wgmma_rs(n, "f16", "wgmma_rs_f16") }}
{% endfor %}
