"""Time the q quantisation of ``quantize_q=True`` (kernelgen.launch.quant_q) on the GPU: the kernel
(``quantize``: a memset and two launches of templates/quant/quant_q.cu.j2) against the torch ops of
``quantize_reference``, for a causal-16k prefill's q at the bench models' heads.  Each is timed as
CUDA-graph replays (20 calls a graph, median of 10 replays, microseconds a call) so host launch
overhead does not count; bytes moved: q read twice, q8 written once.

    python benchmarks/experiments/quant_q_time.py [--json FILE]
"""
import argparse
import json

import torch

from kernelgen.jit import runtime
from kernelgen.launch import quant_q

SHAPES = {"llama3-8b": (32, 8, 128), "gemma2-9b": (16, 8, 256), "gpt-oss": (64, 8, 64)}


def graph_time(fn, calls=20, reps=10):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / calls)
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--tokens", type=int, default=16384)
    args = ap.parse_args()
    rows = []
    for name, (hq, hkv, d) in SHAPES.items():
        for batch in (1, 64):
            q = torch.randn(args.tokens, hq, d, device="cuda").to(torch.bfloat16)
            cu = torch.linspace(0, args.tokens, batch + 1, device="cuda").round().to(torch.int32)
            off, n = quant_q.buffer_bytes(args.tokens, hq, d, batch, hkv)
            buf = torch.empty(n, dtype=torch.uint8, device="cuda")
            kern = runtime.quant_kernel(q.device, q.dtype)
            k_us = graph_time(lambda: quant_q.quantize(q, cu, batch, hkv, buffer=buf, kernel=kern))
            r_us = graph_time(lambda: quant_q.quantize_reference(q, cu, batch, hkv, buffer=buf))
            moved = 2 * q.numel() * 2 + q.numel()
            rows.append({"model": name, "batch": batch, "q_mb": q.numel() * 2 / 1e6, "kernel_us": k_us,
                         "torch_us": r_us, "kernel_tb_s": moved / k_us / 1e6})
            print(f"{name:10s} batch {batch:3d}: kernel {k_us:7.1f} us ({moved / k_us / 1e6:.2f} TB/s), "
                  f"torch ops {r_us:7.1f} us", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
