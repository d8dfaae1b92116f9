"""Seventieth session: the SASS (instruction text, addresses dropped) of 73 FP8 in-register kernels -- the 16-row
and keys-as-rows decode tiles on sm_80 / sm_90a, bf16 / fp16 q, e4m3 / e5m2, head dims 64-256 (and 128 x 64), and the
Hopper fused FP8 kernel -- one md5 and the registers per kernel, so two trees can be compared on the CPU:
`cd TREE && PYTHONPATH=$PWD python docs/dev/benchmarks/s70/sass_all.py > out.txt`, then diff (fp8_v_words: identical)."""
import sys, hashlib, re
sys.path.insert(0, 'tests')
from kernelgen.kernels.spec import AttentionSpec, TileConfig
from kernelgen.selection import heuristics as h
from kernelgen.jit import render, compiler, sass
out = []
specs = []
for arch in ("sm_80", "sm_90a"):
    for dt in ("bf16", "fp16"):
        for kv in ("e4m3", "e5m2"):
            for d, dv in ((64, 64), (96, 96), (128, 128), (128, 64), (256, 256)):
                for bm in (16, 8):
                    if bm == 8 and max(d, dv) > 128:
                        continue
                    specs.append(AttentionSpec(arch, dt, d, dv, "causal", "soa", TileConfig(bm, 16, 1, 2, 12 if d <= 128 else 8),
                                               pack_gqa=True, split=True, paged=True, kv_dtype=kv, softcap=(d == 128)))
fv = h.choose_fused_hopper('sm_90a','bf16',128,128,num_heads_q=32,num_heads_kv=8,mask='causal',max_seqlen_q=4096,
                           max_seqlen_k=20000,paged=True,page_size=16,kv_dtype='e4m3')
specs.append(fv.fused)
nv = sass.find_nvdisasm()
for s in specs:
    r = compiler.compile_cubin(render.render(s), s.arch, compiler.default_options(s.arch), s.name)
    txt = sass.disassemble(r.cubin, nv)
    # drop addresses / encodings: keep instruction text only
    ins = "\n".join(re.sub(r"/\*[0-9a-f]{4,}\*/", "", l).strip() for l in txt.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l))
    out.append(f"{s.name} {hashlib.md5(ins.encode()).hexdigest()} {r.resources['registers']}")
print("\n".join(out))
