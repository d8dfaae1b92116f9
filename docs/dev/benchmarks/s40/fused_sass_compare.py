"""Session 40: the mixed_trace fused kernel (bf16 d 128 causal paged, pack-GQA decode class) compiled from one tree
(its own heuristics and templates) for sm_90a with NVRTC; writes the SASS instruction list and the source.

usage: git archive SHA | tar -x -C /tmp/t && cd /tmp/t && PYTHONPATH=$PWD python fused_sass_compare.py OUT.txt
then diff two OUT.txt files with register names normalised (sed -E 's/\\bU?R[0-9]+\\b/R/g; s/\\bU?P[0-9]\\b/P/g').
"""
import re, sys, json
from kernelgen.jit import render, compiler, sass
from kernelgen.selection import heuristics as H
fv = H.choose_fused_hopper("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                           max_seqlen_q=4096, max_seqlen_k=32768, paged=True, short_max_q=1, page_size=16)
spec = fv.fused
print(spec.name)
src = render.render(spec)
res = compiler.compile_cubin(src, "sm_90a", compiler.default_options("sm_90a"), spec.entry)
txt = sass.disassemble(res.cubin, sass.find_nvdisasm())
ins = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]+\*/\s+([^;]*);", txt)]
open(sys.argv[1], "w").write("\n".join(ins))
open(sys.argv[1] + ".src", "w").write(src)
print(len(ins), res.resources)
