"""Compile (in parallel, into KERNELGEN_CACHE_DIR) the kernels that tests/gpu/test_hopper_gpu.py and
``tools/bench_hopper.py`` on the 2 x 16 x 4096 shapes load, so a GPU run spends its time on the
tests.  Usage: python tools/hopper_dims_warm.py [JOBS [OPTS [BENCH_VARIANTS]]]: OPTS (default: the
dispatcher's) are the mainloop options of the head-dim matrix, BENCH_VARIANTS bench_hopper's
--variants (opts:stages[:block_n],...)."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelgen.selection import heuristics  # noqa: E402
from kernelgen.kernels.spec import AttentionSpec, SchedulerSpec, TileConfig  # noqa: E402
from kernelgen.jit.warmup import warmup  # noqa: E402

PAIRS = [(64, 64), (96, 96), (128, 128), (192, 192), (192, 128), (256, 256)]


def specs(opts=None, bench=""):
    opts = heuristics.SM90_OPTS if opts is None else opts
    out = [SchedulerSpec("sm_90a", lay) for lay in ("soa", "aos")]
    for d, dv in PAIRS:
        for dt in ("bf16", "fp16"):
            for mask in ("none", "causal"):
                for lay in ("soa", "aos"):
                    out.append(AttentionSpec("sm_90a", dt, d, dv, mask, lay, heuristics.sm90_tile(d, dv),
                                             mainloop="sm90a", sm90_opts=opts))
    t = heuristics.SM90_TILE
    for opts, tile in [("", t), ("h", t), ("s", t), ("hp", t), ("pr", t), ("p", TileConfig(128, 128, 8, 3, 1)),
                       ("p", TileConfig(128, 192, 8, 2, 1))]:
        for mask in ("none", "causal"):
            out.append(AttentionSpec("sm_90a", "bf16", 128, 128, mask, "soa", tile, mainloop="sm90a", sm90_opts=opts))
    t256 = heuristics.sm90_tile(256, 256)
    for opts, tile in [("", t256), ("p", TileConfig(128, 64, 8, 2, 1))]:
        out.append(AttentionSpec("sm_90a", "bf16", 256, 256, "causal", "soa", tile, mainloop="sm90a", sm90_opts=opts))
    for vv in filter(None, bench.split(",")):
        parts = vv.split(":")
        for d, dv in PAIRS[1:]:
            base = heuristics.sm90_tile(d, dv)
            tile = TileConfig(128, int(parts[2]) if len(parts) > 2 else base.block_n, 8, int(parts[1]), 1)
            sp = AttentionSpec("sm_90a", "bf16", d, dv, "causal", "soa", tile, mainloop="sm90a",
                               sm90_opts="" if parts[0] == "_" else parts[0])
            if sp.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]:
                out.append(sp)
    for d, dv in ((256, 256), (128, 128), (128, 64), (192, 192), (192, 128), (96, 96)):
        v = heuristics.choose("sm_90a", "bf16", d, dv, num_heads_q=16, num_heads_kv=16, mask="causal",
                              max_seqlen_q=4096, max_seqlen_k=4096, mainloop="sm80")
        out.append(v.attention)
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    a = sys.argv[1:]
    s = specs(a[1] if len(a) > 1 else None, a[2] if len(a) > 2 else "")
    compiled, cached = warmup(s, os.environ["KERNELGEN_CACHE_DIR"], jobs=int(sys.argv[1]) if len(sys.argv) > 1 else None,
                              progress=False)
    print(f"warm: {len(s)} specs, {compiled} compiled, {cached} cached")
