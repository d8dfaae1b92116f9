import sys, subprocess, tempfile, re, collections, itertools
from pathlib import Path
sys.path.insert(0, "tests")
from test_decide import sig, H200
from kernelgen.selection import decide
from kernelgen.jit import render, compiler, sass
folder = sys.argv[1]
render.templates_dir = lambda: Path(folder).resolve(); render.environment.cache_clear()
bad_total = 0
for paged, kvd, d, hq, hkv in itertools.product((False, True), ("", "e4m3", "e5m2"), (64, 128, 256), (32, 8), (8, 1)):
    kw = dict(paged=True, page_size=16) if paged else dict(paged=False)
    if kvd: kw["kv_dtype"] = kvd
    try:
        s = sig(max_seqlen_q=1, max_seqlen_k=2000, rows=6, batch=6, head_dim=d, head_dim_v=d, num_heads_q=hq, num_heads_kv=hkv, **kw)
    except TypeError:
        s = sig(max_seqlen_q=1, max_seqlen_k=2000, rows=6, batch=6, **kw)
    spec = decide.decide(s, H200).variants.attention
    text = render.render(spec)
    res = compiler.compile_cubin(text, spec.arch, compiler.default_options(spec.arch), spec.name)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(res.cubin); f.flush()
        out = subprocess.run([sass.find_nvdisasm(), "-c", f.name], capture_output=True, text=True).stdout
    regs = collections.Counter(int(m) for m in re.findall(r"desc\[UR(\d+)\]", out))
    odd = {r: c for r, c in regs.items() if r % 2}
    bad_total += bool(odd)
    print(spec.name, dict(regs), "ODD" if odd else "")
print("kernels with odd descriptors:", bad_total)
