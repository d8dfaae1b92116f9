"""Drive decode calls for ncu: python drive.py MODEL SHAPE N OUTDIR -> N calls, then the attention kernel's cubin and source."""
import sys
from pathlib import Path
import torch
from kernelgen import varlen_attention
from kernelgen.apps.bench import suites
from kernelgen.apps.bench.models import PRESETS
from kernelgen.front import api
from kernelgen.jit import render
from kernelgen.jit.cache import get_cache
m = PRESETS[sys.argv[1]]
shape, n, out_dir = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
ctx = suites.decode_contexts(suites.Settings(), shape)
q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, m)
out = torch.empty(len(ctx), m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
for _ in range(n):
    varlen_attention(q, kc, vc, cu_q, None, 1, max(ctx), seqused_k=used, page_table=pt, causal=True, out=out)
torch.cuda.synchronize()
spec = api._CALLS._last[1].attn.spec
out_dir.mkdir(parents=True, exist_ok=True)
tag = f"{sys.argv[1]}_{shape}"
(out_dir / f"{tag}.cubin").write_bytes(get_cache().get(spec).cubin)
(out_dir / f"{tag}.cu").write_text(render.render(spec))
print(shape, spec.name, "done", flush=True)
