// ---- common/ptx.cuh: integer types and inline-PTX wrappers (no CUDA headers needed) ----
// Templates are Jinja: inside asm operand lists write "{ %0" (with a space), never "{" followed by "%".
typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

#define KG_INF __int_as_float(0x7f800000)
#define KG_FLT_MAX 3.402823466e38f
#define KG_LN2 0.69314718055994530942f

__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// L2 prefetch sizes (PTX ISA cp.async's .level::prefetch_size, SASS LDGSTS's .LTC128B): KG_CP_PREFETCH
// for every cp_async16 (0, 64, 128 or 256 bytes; 0, the default: no qualifier), an experiment define (on
// the H100, 128 made the fused mixed-batch kernels' decode tiles 1-4 % slower); cp_async16_ef's comes
// from its caller (template argument PF, KG_EF_PREFETCH overriding it).
#ifndef KG_CP_PREFETCH
#define KG_CP_PREFETCH 0
#endif
#if KG_CP_PREFETCH == 64
#define KG_CP_PF ".L2::64B"
#elif KG_CP_PREFETCH == 128
#define KG_CP_PF ".L2::128B"
#elif KG_CP_PREFETCH == 256
#define KG_CP_PF ".L2::256B"
#else
#define KG_CP_PF ""
#endif
static_assert(KG_CP_PREFETCH == 0 || KG_CP_PREFETCH == 64 || KG_CP_PREFETCH == 128 || KG_CP_PREFETCH == 256,
              "KG_CP_PREFETCH: 0, 64, 128 or 256 bytes");
// 16-byte global->shared copy; when !pred the 16 bytes are zero-filled and nothing is read.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool pred) {
  int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global" KG_CP_PF " [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// The same copy with an L2 evict_first policy (PTX ISA "createpolicy", cp.async's
// .L2::cache_hint): for data read once, so that it leaves the rest of L2 (page table, scheduler
// metadata, split-KV partials, the layer's weights) where it is.  ptxas folds the constant policy
// into the copy's memory descriptor: no extra instruction a copy.
// PF: the L2 prefetch size in bytes (0: none; 64, 128, 256).
template <int PF>
__device__ __forceinline__ void cp_async16_ef(u32 dst, const void* src, bool pred) {
  static_assert(PF == 0 || PF == 64 || PF == 128 || PF == 256, "L2 prefetch size: 0, 64, 128 or 256 bytes");
  int n = pred ? 16 : 0;
  u64 pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  if (PF == 64)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::64B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n), "l"(pol));
  else if (PF == 128)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n), "l"(pol));
  else if (PF == 256)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n), "l"(pol));
  else
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n), "l"(pol));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits for every cp.async copy of this thread, committed to a group or not (cp.async.wait_all).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Arrives on the mbarrier at shared address `bar` once every earlier cp.async copy of this thread
// has landed (PTX cp.async.mbarrier.arrive; .noinc: the barrier's expected count counts this
// arrival), so the thread need not wait for its copies itself.
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
