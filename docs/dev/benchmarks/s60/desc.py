"""Sixtieth session, for a GPU: do the paged FP8 decode tiles whose L2-hinted copies NVRTC 13.0's ptxas
gave the odd descriptor register desc[UR1] (no mask, no splits: fp16 q at d 128, 192 x 128) fault?
Runs each call with this tree's templates (those tiles copy without the hint) and then with FOLDER's
(``python desc.py FOLDER``: a templates/ copy whose variant_sm80.cuh keeps the hint there, made by
desc.sh), each output against the float64 reference.  Run the hinted side last and in its own process:
an illegal instruction ends the CUDA context.

Usage: PYTHONPATH=$PWD python docs/dev/benchmarks/s60/desc.py [FOLDER]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks" / "experiments"))
import torch  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.apps.reference import attention_reference, gather_paged  # noqa: E402
from test_paged_decode_gpu import make_paged  # noqa: E402

CASES = [(torch.float16, 128, 128, torch.float8_e4m3fn), (torch.float16, 128, 128, torch.float8_e5m2),
         (torch.bfloat16, 192, 128, torch.float8_e4m3fn), (torch.float16, 192, 128, torch.float8_e5m2)]


def run_all() -> None:
    from kernelgen.front.api import _CALLS
    for dtype, d, dv, kv in CASES:
        klens = [3000, 1, 0, 777, 64]
        q, kc, vc, pt, used, cu_q = make_paged([1] * len(klens), klens, 32, 8, d, dv, 16, d + dv, dtype=dtype)
        kc, vc = kc.to(kv), vc.to(kv)
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=False)
        out = torch.full((len(klens), 32, dv), float("nan"), dtype=dtype, device="cuda")
        kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, max(klens), seqused_k=used, page_table=pt, causal=False,
                                   num_splits=1, out=out)
        torch.cuda.synchronize()
        err = float((out.double() - ref.double()).abs().nan_to_num(float("inf")).max())
        print(f"{_CALLS._last[1].attn.name}: max |err| {err:.3e}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        from decode_ab import with_templates
        with_templates(sys.argv[1], run_all)
    else:
        run_all()
