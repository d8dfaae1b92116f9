"""Branch fp8-mma: time the Hopper kernel's FP8 paths on one causal prefill (1 x 16384 tokens, 32/8
heads, d 128): FP8 tensor-core GEMMs (``heuristics.SM90_FP8_MMA``, q in e4m3), design variant A (bf16
q, FP8 K/V converted) and the bf16 call.  Prints µs and TFLOP/s per path (CUDA events, 10 calls
after 3 warm-up calls, median)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernelgen.front.plan import AttentionPlan  # noqa: E402
from kernelgen.launch import oneoff  # noqa: E402
from kernelgen.selection import heuristics  # noqa: E402


def main(n=16384, hq=32, hkv=8, d=128, paths=("fp8_mma", "fp8_variant_a", "bf16"), warm=3, calls=10):
    torch.manual_seed(0)
    q = torch.randn(n, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(n, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)

    def quant(t):
        s = t.abs().amax().float() / 448
        return (t.float() / s).to(torch.float8_e4m3fn), s
    q8, qs = quant(q)
    k8, ks = quant(k)
    v8, vs = quant(v)
    cu = torch.tensor([0, n], dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    flops = 4 * hq * d * (n * (n + 1) // 2)
    res = {}
    for name, mma, qq, kk, vv, kdv in (("fp8_mma", True, q8, k8, v8, (qs * ks, vs)),
                                        ("fp8_variant_a", False, q, k8, v8, (ks, vs)),
                                        ("bf16", False, q, k, v, None)):
        if name not in paths:
            continue
        heuristics.SM90_FP8_MMA = mma
        plan = AttentionPlan(max_batch=1, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=torch.bfloat16,
                             max_total_q=n, max_seqlen_q=n, max_seqlen_k=n, causal=True, arch="sm_90a",
                             kv_dtype="e4m3" if kdv else None)
        desc = None
        if kdv:
            kd = kdv[0].reshape(1, 1).expand(1, hkv).contiguous()
            vd = kdv[1].reshape(1, 1).expand(1, hkv).contiguous()
            desc = plan._descale_arg(kd, vd, 1)
        plan.schedule(cu, cu)

        def call():
            oneoff.attend(plan._kernels, qq, kk, vv, cu, cu, None, None, out, None, md_long=plan.metadata,
                          md_short=plan.metadata_short, split=plan.split, capacity=1, scale=d ** -0.5,
                          window=(plan.window_left, plan.window_right), softcap=0.0, alibi=None,
                          **({"descale": desc} if desc else {}))
        for _ in range(warm):
            call()
        torch.cuda.synchronize()
        ts = []
        for _ in range(calls):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1000)
        us = sorted(ts)[len(ts) // 2]
        res[name] = us
        print(f"{name}: {plan.attn_spec.name} {us:.0f} us {flops / us / 1e6:.0f} TFLOP/s", flush=True)
    heuristics.SM90_FP8_MMA = False
    return res


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", default="fp8_mma,fp8_variant_a,bf16")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    main(paths=a.paths.split(","), warm=a.warm, calls=a.calls)
