// ---- common/tma.cuh: mbarriers, TMA tensor loads and warp-specialisation primitives (sm_90) ----
// PTX ISA sections: "mbarrier" (arrive, expect-tx, try_wait.parity), "cp.async.bulk.tensor"
// (tensor loads that complete on an mbarrier with complete_tx::bytes), "setmaxnreg", "bar".
// An mbarrier phase completes when its pending arrival count reaches zero and its transaction
// count is back to zero; waiters name the phase by its parity (0, 1, 0, ...).  A waiter that
// asks for parity 1 on a freshly initialised barrier (phase 0 pending) returns at once, which is
// how a producer's first wait on an "empty" barrier passes.
// Templates are Jinja: write "{ %0" (with a space) inside asm operand lists, never "{" then "%".

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the barrier initialisation visible to the other threads and to the async (TMA) proxy;
// followed by a CTA-wide barrier.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }\n" ::"r"(bar) : "memory");
}

// One arrival that also announces `bytes` of transactions (the TMA copies that follow).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}

// Wait until the phase of parity `parity` of barrier `bar` has completed.  With KG_HANG_CHECK
// defined (diagnostic builds only) a wait that spins for about a second prints the barrier's
// shared-memory address, the parity and a caller tag, and traps.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity, int tag = 0) {
#ifdef KG_HANG_CHECK
  long long spins = 0;
  while (!mbar_try_wait(bar, parity)) {
    if (++spins == (1ll << 26)) {
      printf("kernelgen hang: block %d thread %d bar 0x%x parity %u tag %d\n", (int)blockIdx.x, (int)threadIdx.x, bar,
             parity, tag);
      asm volatile("trap;");
    }
  }
#else
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// 3-D tensor tile load (TMA): the box at coordinates (c0, c1, c2) (innermost first) of the
// tensor map at generic address `tmap` (a __grid_constant__ kernel parameter) into shared memory
// at `dst`; completes `bytes` transactions on barrier `bar`.  Rows outside the tensor are filled
// with zeros.
__device__ __forceinline__ void tma_load_3d(u32 dst, const void* tmap, u32 bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, { %2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// 4-D tensor tile load (TMA), as tma_load_3d with a fourth coordinate c3 (the page of a paged
// K/V cache: (head_dim, heads, page slot, page), kernelgen/tma.py paged_map_args).
__device__ __forceinline__ void tma_load_4d(u32 dst, const void* tmap, u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, { %2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses
// (wgmma operand reads, TMA writes) of the same memory.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barriers (ids 1..15; 0 is __syncthreads): `count` threads, a multiple of 32.
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Register reallocation between warpgroups (sm_90a): every warp of a warpgroup runs the same one.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
