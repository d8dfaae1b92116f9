"""MUFU throughput when a warp or an SM mixes tanh.approx and ex2.approx (GPU microbenchmark).

The soft-capped kernels issue two MUFU instructions a logit (MUFU.TANH, then MUFU.EX2) and are
bound near the MUFU's rate at head dim 64 (docs/dev/perf-log.md).  This measures, with the same
number of MUFU instructions in each case, whether interleaving the two functions costs throughput:

* ``ex2``: every thread applies ex2.approx(-x) to 8 independent chains (MUFU.EX2 only);
* ``tanh``: tanh.approx(x) on the chains (MUFU.TANH only);
* ``alt``: each chain alternates tanh and ex2 (one warp mixes the functions instruction by instruction);
* ``split``: even warps run tanh only, odd warps ex2 only (the SM mixes them, each warp does not);
* ``blocks``: each chain runs 16 tanh then 16 ex2 (a softmax's order: long runs of one function).

Each case runs ``--iters`` steps of 8 chains on ``--warps`` warps an SM, one CTA an SM; prints the
time, MUFU instructions (warp-level) per SM per microsecond, and the ratio to ``ex2``.

Usage: python benchmarks/experiments/mufu_mix.py [--warps 16] [--iters 4096] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SRC = r"""
extern "C" __global__ void mufu_mix(float* out, int iters, int mode) {
  float x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = 0.5f + 0.01f * (threadIdx.x & 7) + 0.001f * i;
  const int warp = threadIdx.x >> 5;
  const bool t_warp = mode == 1 || (mode == 3 && (warp & 1) == 0);
  if (mode == 2) {          // alt: tanh, ex2, tanh, ... on every chain
    for (int it = 0; it < iters; it += 2) {
#pragma unroll
      for (int i = 0; i < 8; ++i) asm volatile("tanh.approx.f32 %0, %0;" : "+f"(x[i]));
#pragma unroll
      for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = -x[i];
    }
  } else if (mode == 4) {   // blocks: 16 tanh then 16 ex2 on every chain
    for (int it = 0; it < iters; it += 32) {
#pragma unroll
      for (int r = 0; r < 16; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) asm volatile("tanh.approx.f32 %0, %0;" : "+f"(x[i]));
#pragma unroll
      for (int r = 0; r < 16; ++r) {
#pragma unroll
        for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] = -x[i];
      }
    }
  } else if (t_warp) {      // tanh only
    for (int it = 0; it < iters; ++it) {
#pragma unroll
      for (int i = 0; i < 8; ++i) asm volatile("tanh.approx.f32 %0, %0;" : "+f"(x[i]));
    }
  } else {                  // ex2 only
    for (int it = 0; it < iters; ++it) {
#pragma unroll
      for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = -x[i];
    }
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += x[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""

MODES = {"ex2": 0, "tanh": 1, "alt": 2, "split": 3, "blocks": 4}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warps", type=int, default=16, help="warps a CTA (one CTA an SM)")
    ap.add_argument("--iters", type=int, default=4096, help="MUFU steps of each chain (a multiple of 32)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import cupy as cp

    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    kern = cp.RawKernel(SRC, "mufu_mix", options=("-std=c++17",))
    threads = 32 * a.warps
    out = cp.zeros(sms * threads, dtype=cp.float32)
    iters = a.iters // 32 * 32
    ops_per_sm = a.warps * 8 * iters   # warp-level MUFU instructions an SM
    res = {"sms": sms, "warps": a.warps, "iters": iters, "modes": {}}
    for name, mode in MODES.items():
        args = (out, cp.int32(iters), cp.int32(mode))
        kern((sms,), (threads,), args)
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(a.repeat):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            kern((sms,), (threads,), args)
            e.record()
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
        us = sorted(times)[len(times) // 2]
        res["modes"][name] = {"us": us, "mufu_warp_inst_per_sm_per_us": ops_per_sm / us}
    base = res["modes"]["ex2"]["us"]
    for name, r in res["modes"].items():
        r["ratio_to_ex2"] = r["us"] / base
        print(f"{name:>7} {r['us']:9.1f} us  {r['mufu_warp_inst_per_sm_per_us']:8.1f} MUFU warp-inst / SM / us  "
              f"x ex2 {r['ratio_to_ex2']:.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
