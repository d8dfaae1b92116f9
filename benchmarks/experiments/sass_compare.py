"""SASS fingerprints of the kernels a change is most likely to touch (no GPU): the decode tiles
(sm_80 path, head dims 64-256, paged/causal and packed/no mask) on sm_80 and sm_90a, the sm_80 fused
mixed-batch kernels, the Hopper fused kernels (d 64/128 paged, gathered, d 192 x 128 packed) and the
pack-GQA mid/prefill tiles.  Each fingerprint is a hash of the disassembled instructions (addresses
dropped), so two trees whose JSON agree on a kernel compile it to the same machine code: a change
whose kernels all match a commit that ran on the GPU needs no new GPU run for them.

Usage (one tree at a time; compare the JSON files):
  git worktree add /tmp/wt REV && (cd /tmp/wt && PYTHONPATH=$PWD python benchmarks/experiments/sass_compare.py /tmp/rev.json)
  (in a REV from before this script moved here, it is in that tree's tools/ folder)
  PYTHONPATH=$PWD python benchmarks/experiments/sass_compare.py /tmp/head.json
"""
import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernelgen.jit import compiler, render, sass
from kernelgen.selection import heuristics  # noqa: E402

def specs() -> dict:
    """{label: spec} of the kernels fingerprinted."""
    out = {}
    for arch in ("sm_80", "sm_90a"):
        for d, dv in ((64, 64), (96, 96), (128, 128), (192, 128), (256, 256)):
            for mask, paged in (("causal", True), ("none", False)):
                v = heuristics.choose(arch, "bf16", d, dv, num_heads_q=32, num_heads_kv=8, mask=mask, max_seqlen_q=1,
                                      max_seqlen_k=32768, paged=paged, page_size=16 if paged else 0)
                out[f"dec-{arch}-{d}x{dv}-{mask}-{paged}"] = v.attention
        f = heuristics.choose_fused(arch, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                    max_seqlen_k=32768, paged=True)
        out[f"fused80-{arch}"] = f.fused
        for rows in (8, 4096):
            v = heuristics.choose(arch, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                  max_seqlen_q=rows, max_seqlen_k=32768, paged=True, page_size=16, pack_gqa=True,
                                  mainloop="sm80")
            out[f"pack-{arch}-{rows}"] = v.attention
    for d, dv, paged, ps in ((128, 128, True, 16), (64, 64, True, 16), (128, 128, True, 1), (192, 128, False, 0)):
        f = heuristics.choose_fused_hopper("sm_90a", "bf16", d, dv, num_heads_q=32, num_heads_kv=8, mask="causal",
                                           max_seqlen_q=2048, max_seqlen_k=8192, paged=paged, short_max_q=4,
                                           page_size=ps)
        out[f"fused90-{d}x{dv}-{ps}"] = f.fused
    return out


def fingerprint(spec) -> str:
    """sha256 (16 hex digits) of a spec's SASS instructions, addresses dropped."""
    r = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    lines = [re.sub(r"/\*[0-9a-f]{4,}\*/", "", x).strip() for x in sass.disassemble(r.cubin).splitlines()
             if re.match(r"\s*/\*[0-9a-f]{4,}\*/", x)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    res = {label: fingerprint(spec) for label, spec in specs().items()}
    Path(argv[0]).write_text(json.dumps(res, indent=1))
    print(f"{len(res)} kernels -> {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
