import re, csv, subprocess, tempfile, collections, sys
sys.path.insert(0, "tests")
from test_decide import sig, H200
from kernelgen.selection import decide
from kernelgen.jit import sass, render, compiler
r = decide.decide(sig(max_seqlen_q=1, max_seqlen_k=4096, rows=128, batch=128, paged=True, page_size=16), H200)
spec = r.variants.attention
print(spec.name)
text = render.render(spec)
src = text.splitlines()
open("/tmp/attn_decode.cu", "w").write(text)
cub = compiler.compile_cubin(text, spec.arch, compiler.default_options(spec.arch), spec.name).cubin
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(cub); f.flush()
    out = subprocess.run([sass.find_nvdisasm(), "-c", "-g", f.name], capture_output=True, text=True).stdout
line_of = {}; op_of = {}; cur = None
for l in out.splitlines():
    m = re.search(r'//## File ".*?", line (\d+)', l)
    if m: cur = int(m.group(1)); continue
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
    if m: line_of[int(m.group(1),16)] = cur; op_of[int(m.group(1),16)] = m.group(2).strip()
for fn in sys.argv[1:]:
    rows = list(csv.reader(open(fn)))
    hi = [i for i, r in enumerate(rows) if r and r[0] == "Address"][0]; h = rows[hi]
    A, S, X, ST = h.index("Address"), h.index("Source"), h.index("Instructions Executed"), h.index("Warp Stall Sampling (All Samples)")
    reasons = [c for c in h if c.startswith("stall_") and "Not Issued" not in c]
    base = int(rows[hi+1][A], 16)
    samp = collections.Counter(); ex = collections.Counter(); why = collections.defaultdict(collections.Counter)
    mism = 0; tot = 0
    for r in rows[hi+1:]:
        if len(r) <= ST: continue
        a = int(r[A], 16) - base
        if a in op_of and op_of[a].split()[0] != r[S].strip().split()[0]: mism += 1
        ln = line_of.get(a)
        s = float(r[ST] or 0); tot += s
        samp[ln] += s; ex[ln] += float(r[X] or 0)
        for c in reasons:
            v = float(r[h.index(c)] or 0)
            if v: why[ln][c[6:]] += v
    print("==", fn.split("/")[-1], "mismatched", mism, "samples", tot)
    for ln, c in sorted(samp.items(), key=lambda x: -x[1])[:28]:
        top = ", ".join(f"{k} {v/c*100:.0f}%" for k, v in why[ln].most_common(2))
        print(f"{c/tot*100:5.1f}% ex {ex[ln]:9.0f} L{ln} {src[ln-1].strip()[:90] if ln else ''}  [{top}]")
