"""AttentionPlan's device forms on a real GPU (the fifty-ninth session's `plan._device_index`): None, 0, "cuda",
"cuda:0", torch.device("cuda") and torch.device("cuda", 0) give plans on cuda:0 whose step equals the float64
reference; "cpu" is a ValueError naming device.  Prints one line a form."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import torch  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.apps.reference import attention_reference, tolerance  # noqa: E402

torch.manual_seed(0)
lens = [7, 33, 1]
cu = torch.tensor([0, 7, 40, 41], dtype=torch.int32, device="cuda")
q = torch.randn(41, 8, 64, device="cuda", dtype=torch.bfloat16)
k = torch.randn(41, 2, 64, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
ref, _ = attention_reference(q, k, v, cu, cu, causal=True)
atol, rtol = tolerance(torch.bfloat16)
for dev in (None, 0, "cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)):
    plan = kernelgen.AttentionPlan(max_batch=4, num_heads_q=8, num_heads_kv=2, head_dim=64, max_total_q=64,
                                   max_seqlen_q=64, max_seqlen_k=64, causal=True, device=dev)
    out = torch.full_like(q, float("nan"))
    plan.run(q, k, v, cu, cu, out=out)
    torch.cuda.synchronize()
    err = (out.double() - ref).abs().max().item()
    ok = torch.allclose(out.double(), ref, atol=atol, rtol=rtol)
    print(f"device={dev!r}: plan.device {plan.device}, max |err| {err:.3e}, {'ok' if ok else 'MISMATCH'}")
try:
    kernelgen.AttentionPlan(max_batch=4, num_heads_q=8, num_heads_kv=2, head_dim=64, device="cpu")
    print("device='cpu': no error (WRONG)")
except ValueError as e:
    print(f"device='cpu': ValueError: {e}")
