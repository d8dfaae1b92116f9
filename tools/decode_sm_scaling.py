"""Decode bandwidth on a subset of the SMs (GPU): how many bytes a second the sm_80 decode kernel
reads when only N of the SMs are free, the rest held by a blocker kernel.

This is the quantity that bounds a mixed batch's gain (docs/perf-notes.md, "mixed batches: one
Hopper launch"): while the long class runs on the other SMs, the decode tiles' cost is their SMs'
time, so what matters is the bandwidth one SM reaches, not the whole GPU's.

Method: a blocker kernel of (num_sms - N) CTAs, each asking for all of an SM's shared memory (one
CTA an SM, on distinct SMs, no decode CTA beside it), spins on a device flag; the decode call (the bench's
``decode_trace_b128_paged16`` batch, llama3-8b) is enqueued on a second stream with its persistent
grid cut to N SMs' worth of CTAs (so no CTA of it waits behind the blocker), and can only use the
N free SMs; a one-thread kernel after it on that stream sets the flag (the blocker also gives up
after a second).  The decode call's time is taken with CUDA events around it on its stream; the
median of ``--repeat`` runs.  The scheduler sees the cut grid too (fewer CTAs: fewer splits).

``--hot-pages K`` maps every page-table entry to one of the first K pages (K x 32 KB at llama3-8b,
pages of 16: L2-resident for K up to about 1500), so the same tiles read from L2 instead of HBM:
the decode tile's own ceiling when memory latency and bandwidth are taken away.

Usage: PYTHONPATH=$PWD python tools/decode_sm_scaling.py [--sms 8,16,33,48,66,132] [--hot-pages K] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_SRC = r"""
extern "C" __global__ void kg_blocker(volatile int* flag) {
  extern __shared__ int pad[];
  if (threadIdx.x == 0) {
    pad[0] = 0;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      __nanosleep(1000);
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (*flag == 0 && t - t0 < 1000000000ull);
  }
}
extern "C" __global__ void kg_release(int* flag) { *flag = 1; }
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", default="8,16,24,33,40,48,66,99,132")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--hot-pages", type=int, default=0, help="map the page table onto the first K pages (L2)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import cupy
    import torch

    from kernelgen.apps.bench import suites
    from kernelgen.apps.bench.models import PRESETS, decode_bytes
    from kernelgen.front import api
    from kernelgen.jit import runtime

    if not torch.cuda.is_available():
        print("decode_sm_scaling: needs a GPU", file=sys.stderr)
        return 2
    num_sms = runtime.device_properties(0)["num_sms"]
    m = PRESETS["llama3-8b"]
    settings = suites.Settings()
    ctx = suites.decode_contexts(settings, "decode_trace_b128_paged16")
    q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, m, seed=7)
    if a.hot_pages > 0:
        pt = pt % a.hot_pages
    out = torch.empty(len(ctx), m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    nbytes = decode_bytes(ctx, m)

    def decode():
        api.varlen_attention(q, kc, vc, cu_q, None, 1, max(ctx), seqused_k=used, page_table=pt, out=out, causal=True,
                             window_size=m.window_size, softcap=m.softcap)
    decode()
    torch.cuda.synchronize()
    attn = [k for k in runtime.loaded_kernels() if k.spec.kind == "attention"]
    if len(attn) != 1:
        print(f"decode_sm_scaling: expected one attention kernel, found {len(attn)}", file=sys.stderr)
        return 1
    attn = attn[0]
    full_grid = attn.persistent_grid
    per_sm = full_grid // num_sms
    mod = cupy.RawModule(code=_SRC)
    blocker, release = mod.get_function("kg_blocker"), mod.get_function("kg_release")
    smem = runtime.device_properties(0)["smem_optin"]  # all of it: no decode CTA fits beside
    blocker.max_dynamic_shared_size_bytes = smem
    flag = cupy.zeros(1, dtype=cupy.int32)
    s_block = cupy.cuda.Stream(non_blocking=True)
    s_dec = torch.cuda.Stream()
    rows = []
    for n in [int(x) for x in a.sms.split(",") if x]:
        n = min(n, num_sms)
        attn.persistent_grid = per_sm * n  # the next call prepares its launches for this grid
        api.clear_signature_cache()
        decode()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.repeat):
            flag.fill(0)
            cupy.cuda.Device().synchronize()
            torch.cuda.synchronize()
            if n < num_sms:
                blocker((num_sms - n,), (32,), (flag,), stream=s_block, shared_mem=smem)
            torch.cuda._sleep(2_000_000)  # let the blocker's CTAs take their SMs first
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s_dec.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s_dec):
                e0.record()
                decode()
                e1.record()
                release((1,), (1,), (flag,), stream=cupy.cuda.ExternalStream(s_dec.cuda_stream))
            torch.cuda.synchronize()
            s_block.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3)
        times.sort()
        us = times[len(times) // 2]
        rows.append({"sms": n, "us": us, "tbps": nbytes / us / 1e6, "gbps_per_sm": nbytes / us / 1e3 / n})
        print(f"{n:>4} SMs free: {us:9.1f} us  {nbytes / us / 1e6:5.2f} TB/s  {nbytes / us / 1e3 / n:6.1f} GB/s an SM")
    attn.persistent_grid = full_grid
    if a.json:
        Path(a.json).write_text(json.dumps({"batch": "decode_trace_b128_paged16 (llama3-8b)", "bytes": nbytes,
                                            "hot_pages": a.hot_pages,
                                            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
