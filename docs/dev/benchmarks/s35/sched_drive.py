"""Drive the Azure / trace decode calls for ncu (no torch profiler): N calls of each shape."""
import sys
import torch
from kernelgen import varlen_attention
from kernelgen.apps.bench import suites
from kernelgen.apps.bench.models import PRESETS
m = PRESETS["llama3-8b"]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
for shape in sys.argv[1].split(","):
    ctx = suites.decode_contexts(suites.Settings(), shape)
    q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, m)
    out = torch.empty(len(ctx), m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    for _ in range(n):
        varlen_attention(q, kc, vc, cu_q, None, 1, max(ctx), seqused_k=used, page_table=pt, causal=True, out=out)
    torch.cuda.synchronize()
    print(shape, "done", flush=True)
