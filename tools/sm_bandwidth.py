"""Per-SM read bandwidth by copy path (GPU, sm_90): how many bytes a second one SM pulls from HBM
into shared memory with LDGSTS (cp.async, 16-byte chunks, what the decode tile uses) and with
Hopper bulk copies (cp.async.bulk, one instruction per row or per page), on N SMs at once.

The question it answers (docs/perf-notes.md, "Mixed batches: one Hopper launch"): is the decode
tile's ceiling of about 67 GB/s an SM the copy path's, or the tile's own (its softmax and MMAs
between the copies)?  These kernels copy and do nothing else: a page of keys and one of values of
one KV head (16 rows of 128 bf16 = 4096 bytes each, 8192 bytes a stage) from a paged pool laid out
like the decode batch's (``NHD``: [pages, 16, 8 heads, 128], rows of one head 2048 bytes apart) or
with a head's page contiguous (``HND``), through a ring of shared-memory stages.

- ``ldgsts``: WARPS warps, each with its own STAGES-deep ring (the decode tile's pattern): 8
  cp.async.cg of 16 bytes a lane a stage, commit, wait for the oldest group.
- ``bulk``: one producer warp fills a STAGES-deep ring shared by WARPS consumer warps with
  cp.async.bulk (NHD: one 256-byte copy a lane, 32 a stage; HND: two 4096-byte copies), completing
  on an mbarrier; each consumer warp waits for its stages and frees them (no compute).

Each CTA asks for most of an SM's shared memory, so the N CTAs sit on N distinct SMs.  Every CTA
reads ``--pages`` page pairs of its KV head through a random page table over a 2 x 2 GiB pool (far
past the 60 MB L2).  Time is the median of CUDA-event timings; GB/s an SM = bytes / time / N.

Usage: PYTHONPATH=$PWD python tools/sm_bandwidth.py [--sms 8,40,132] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_COMMON = r"""
#define ROW_BYTES 256
#define HEADS 8
#define STAGE_BYTES 8192
__device__ __forceinline__ const char* row_ptr(const char* base, int page, int head, int row) {
#if HND
  return base + ((((long long)page * HEADS + head) * 16 + row) * ROW_BYTES);
#else
  return base + ((((long long)page * 16 + row) * HEADS + head) * ROW_BYTES);
#endif
}
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
"""

_LDGSTS = _COMMON + r"""
extern "C" __global__ void __launch_bounds__(WARPS * 32, 1)
bw_ldgsts(const char* __restrict__ k, const char* __restrict__ v, const int* __restrict__ pages,
          int pages_per_cta, unsigned* sink) {
  extern __shared__ __align__(128) char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = blockIdx.x % HEADS;
  char* slice = smem + warp * STAGES * STAGE_BYTES;
  const int* pt = pages + (long long)blockIdx.x * pages_per_cta;
  const int mine = (pages_per_cta - warp + WARPS - 1) / WARPS;
  auto issue = [&](int t) {
    const int page = pt[warp + t * WARPS];
    char* dst = slice + (t % STAGES) * STAGE_BYTES;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int j = lane + 32 * c, row = j >> 4, col = (j & 15) * 16;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst + row * ROW_BYTES + col)),
                   "l"(row_ptr(k, page, head, row) + col));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst + 4096 + row * ROW_BYTES + col)),
                   "l"(row_ptr(v, page, head, row) + col));
    }
  };
  unsigned acc = 0;
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < mine) issue(t);
    asm volatile("cp.async.commit_group;");
  }
  for (int t = 0; t < mine; ++t) {
    if (t + STAGES - 1 < mine) issue(t + STAGES - 1);
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1));
    __syncwarp();
    acc ^= reinterpret_cast<const unsigned*>(slice + (t % STAGES) * STAGE_BYTES)[lane * 64];
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""

_BULK = _COMMON + r"""
extern "C" __global__ void __launch_bounds__((WARPS + 1) * 32, 1)
bw_bulk(const char* __restrict__ k, const char* __restrict__ v, const int* __restrict__ pages,
        int pages_per_cta, unsigned* sink) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = blockIdx.x % HEADS;
  const int* pt = pages + (long long)blockIdx.x * pages_per_cta;
  if (threadIdx.x < STAGES) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(&full[threadIdx.x])));
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(&empty[threadIdx.x])));
  }
  asm volatile("fence.mbarrier_init.release.cluster;");
  __syncthreads();
  unsigned acc = 0;
  if (warp == WARPS) {  // producer
    for (int i = 0; i < pages_per_cta; ++i) {
      const int s = i % STAGES;
      if (i >= STAGES) {
        const unsigned par = ((i / STAGES) - 1) & 1;
        asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1; @!p bra W; }"
                     ::"r"(smem_addr(&empty[s])), "r"(par));
      }
      const int page = pt[i];
      char* dst = smem + s * STAGE_BYTES;
      const unsigned bar = smem_addr(&full[s]);
      if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "n"(STAGE_BYTES));
      __syncwarp();
#if HND
      if (lane < 2)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 4096, [%2];"
                     ::"r"(smem_addr(dst + lane * 4096)), "l"(row_ptr(lane ? v : k, page, head, 0)), "r"(bar)
                     : "memory");
#else
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];"
                   ::"r"(smem_addr(dst + lane * ROW_BYTES)), "l"(row_ptr(lane < 16 ? k : v, page, head, lane & 15)),
                   "r"(bar) : "memory");
#endif
    }
  } else {  // consumers: stage s belongs to warp s % WARPS (STAGES is a multiple of WARPS)
    for (int i = warp; i < pages_per_cta; i += WARPS) {
      const int s = i % STAGES;
      const unsigned par = (i / STAGES) & 1;
      asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1; @!p bra W; }"
                   ::"r"(smem_addr(&full[s])), "r"(par));
      acc ^= reinterpret_cast<const unsigned*>(smem + s * STAGE_BYTES)[lane * 64];
      __syncwarp();
      if (lane == 0) asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(smem_addr(&empty[s])));
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""

CONFIGS = [
    # (path, layout, warps, stages)
    ("ldgsts", "NHD", 10, 2), ("ldgsts", "NHD", 12, 2), ("ldgsts", "NHD", 6, 4), ("ldgsts", "NHD", 4, 6),
    ("ldgsts", "HND", 10, 2),
    ("bulk", "NHD", 8, 24), ("bulk", "NHD", 4, 24), ("bulk", "NHD", 8, 8), ("bulk", "HND", 8, 24),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", default="8,40,132")
    ap.add_argument("--pages", type=int, default=4096, help="page pairs a CTA reads (8192 bytes each)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import cupy

    dev = cupy.cuda.Device()
    num_sms = dev.attributes["MultiProcessorCount"]
    pool_pages = 65536  # 65536 x 16 rows x 8 heads x 256 bytes = 2 GiB a pool
    k = cupy.empty(pool_pages * 16 * 8 * 256, dtype=cupy.uint8)
    v = cupy.empty_like(k)
    k[::4096] = 1
    v[::4096] = 2
    rng = cupy.random.default_rng(3)
    pages = rng.integers(0, pool_pages, size=num_sms * a.pages, dtype=cupy.int32)
    sink = cupy.zeros(1, dtype=cupy.uint32)
    rows = []
    for path, layout, warps, stages in CONFIGS:
        src = (f"#define WARPS {warps}\n#define STAGES {stages}\n#define HND {int(layout == 'HND')}\n"
               + (_LDGSTS if path == "ldgsts" else _BULK))
        fn = cupy.RawModule(code=src, options=("--std=c++17",)).get_function(f"bw_{path}")
        smem = (warps * stages if path == "ldgsts" else stages) * 8192
        pad = max(smem, 160 * 1024)  # one CTA an SM
        fn.max_dynamic_shared_size_bytes = pad
        threads = 32 * (warps + (path == "bulk"))
        for n in [min(int(x), num_sms) for x in a.sms.split(",") if x]:
            def launch():
                fn((n,), (threads,), (k, v, pages, cupy.int32(a.pages), sink), shared_mem=pad)
            launch()
            dev.synchronize()
            times = []
            for _ in range(a.repeat):
                e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
                e0.record()
                launch()
                e1.record()
                e1.synchronize()
                times.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3)
            times.sort()
            us = times[len(times) // 2]
            nbytes = n * a.pages * 8192
            row = {"path": path, "layout": layout, "warps": warps, "stages": stages, "smem": smem, "sms": n,
                   "us": us, "tbps": nbytes / us / 1e6, "gbps_per_sm": nbytes / us / 1e3 / n}
            rows.append(row)
            print(f"{path:6} {layout} warps {warps:2} stages {stages:2} ({smem // 1024:3} KiB) {n:4} SMs: "
                  f"{us:8.1f} us {row['tbps']:5.2f} TB/s {row['gbps_per_sm']:6.1f} GB/s an SM", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"pages_per_cta": a.pages, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
