"""Compile (in parallel, into KERNELGEN_CACHE_DIR) the Hopper kernels of the paged, split-KV and
combined-slice tests in tests/gpu/test_hopper_gpu.py, so a GPU run spends its time on the tests
(the head-dim and window tests have tools/hopper_dims_warm.py and
tools/bench_hopper_window.py --warm-only).  The specs come from the dispatcher's own
``heuristics.choose`` with the tests' parameters; a spec the tests end up not using costs only its
compile.  Usage: python tools/hopper_tests_warm.py [JOBS]  (no GPU needed)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelgen.selection import heuristics  # noqa: E402
from kernelgen.jit.warmup import warmup  # noqa: E402

DT = {"bf16": "bf16", "fp16": "fp16"}


def _choose(dt, d, dv=None, *, hq=8, hkv=2, causal=True, window=(-1, -1), cap=0.0, layout="soa", max_q=700,
            max_k=9000, paged=False, page_size=0, num_splits=0, mainloop="sm90a"):
    mask = "local" if window != (-1, -1) else ("causal" if causal else "none")
    v = heuristics.choose("sm_90a", dt, d, d if dv is None else dv, num_heads_q=hq, num_heads_kv=hkv, mask=mask,
                          layout=layout, max_seqlen_q=max_q, max_seqlen_k=max_k, paged=paged, softcap=cap > 0,
                          num_splits=num_splits, num_sms=132, mainloop=mainloop, page_size=page_size)
    return [s for s in (v.scheduler, v.attention, v.combine) if s is not None]


def specs():
    out = []
    # test_hopper_paged_matrix: page sizes x (head dim, dtype, causal, GQA, layout); max_q 300, max_k ~1000
    for ps in (1, 8, 16, 24, 64, 128, 256):
        for hd, dt, causal, gqa, lay in ((128, "bf16", True, 4, "soa"), (64, "fp16", False, 1, "aos"),
                                         (128, "fp16", False, 8, "aos"), (64, "bf16", True, 2, "soa")):
            out += _choose(dt, hd, hq=2 * gqa, causal=causal, layout=lay, max_q=300, max_k=1000, paged=True,
                           page_size=ps)
    # paged long chunks (automatic dispatch) and the paged slices together
    for ps in (1, 16, 256):
        for causal in (False, True):
            out += _choose("bf16", 128, hq=32, hkv=8, causal=causal, max_q=2048, max_k=8000, paged=True,
                           page_size=ps, mainloop=None)
        for n, causal, window, cap in ((3, True, (-1, -1), 0.0), (0, True, (700, -1), 0.0), (2, False, (300, 200), 30.0),
                                       (0, True, (-1, -1), 15.0)):
            out += _choose("bf16", 128, causal=causal, window=window, cap=cap, max_q=600, max_k=9000, paged=True,
                           page_size=ps, num_splits=n)
    # paged wide head dims (test_hopper_paged_wide_head_dims*)
    for d in (96, 192, 256):
        for ps in (1, 16, 24, 256):
            for causal in (True, False):
                out += _choose("bf16" if ps in (1, 256) else "fp16", d, causal=causal, max_q=300, max_k=1000,
                               paged=True, page_size=ps)
    for d, ps in ((96, 16), (192, 16), (256, 1), (256, 64)):
        for n, causal, window, cap in ((3, True, (-1, -1), 0.0), (0, False, (300, 200), 30.0)):
            out += _choose("bf16", d, causal=causal, window=window, cap=cap, max_q=600, max_k=9000, paged=True,
                           page_size=ps, num_splits=n)
    for d in (96, 256):
        kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=900, max_seqlen_k=4000, paged=True,
                  page_size=16)
        fv = heuristics.choose_fused_hopper("sm_90a", "bf16", d, d, **kw)
        pv = heuristics.choose_pair("sm_90a", "bf16", d, d, **kw)
        if fv is not None:
            out += [x for x in (fv.scheduler, fv.fused, fv.combine) if x is not None]
        elif pv is not None:
            out += [x for x in (pv.long.scheduler, pv.long.attention, pv.short.attention, pv.short.combine)
                    if x is not None]
    # forced splits (fp16 for 3 splits), automatic splits on long contexts
    for n in (2, 3, 7):
        for causal in (False, True):
            for hd in (64, 128):
                for lay in ("soa", "aos"):
                    out += _choose("fp16" if n == 3 else "bf16", hd, causal=causal, layout=lay, num_splits=n)
    for qlens, klens, hq, hkv in (([256], [65536], 8, 2), ([2048], [8192], 4, 1), ([512, 1024], [32768, 16384], 8, 2),
                                  ([300, 0, 1024, 257], [20000, 5000, 8192, 0], 8, 2)):
        for lay, dt, hd in (("soa", "bf16", 128), ("aos", "fp16", 64)):
            for causal in (False, True):
                out += _choose(dt, hd, hq=hq, hkv=hkv, causal=causal, layout=lay, max_q=max(qlens), max_k=max(klens),
                               mainloop=None)
    for n in (3, 0):
        for causal, window, cap in ((True, (2000, -1), 0.0), (False, (700, 300), 30.0), (True, (-1, -1), 20.0)):
            out += _choose("bf16", 128, causal=causal, window=window, cap=cap, max_q=512, max_k=24000, num_splits=n,
                           mainloop=None)
    for d, dv in ((96, 96), (192, 128), (256, 256)):
        out += _choose("bf16", d, dv, causal=True, max_q=300, max_k=9000, num_splits=3)
        out += _choose("bf16", d, dv, causal=False, window=(600, 100), cap=25.0, max_q=300, max_k=9000, mainloop=None)
    # mixed batches on sm_90a (tests/gpu/test_fused_gpu.py): the Hopper fused kernel, and the
    # classes in turn (the long class's Hopper kernel, the short class's decode kernel)
    for hq, hkv, d, dt, causal in ((32, 8, 128, "bf16", True), (8, 1, 128, "fp16", True), (16, 16, 64, "bf16", False),
                                   (28, 4, 128, "bf16", True)):
        for lay in ("soa", "aos"):
            for window, cap in (((-1, -1), 0.0), ((300, 0), 0.0), ((-1, -1), 30.0)):
                mask = "local" if window != (-1, -1) else ("causal" if causal else "none")
                kw = dict(num_heads_q=hq, num_heads_kv=hkv, mask=mask, layout=lay, max_seqlen_q=900,
                          max_seqlen_k=6000, paged=True, softcap=cap > 0, page_size=16)
                fv = heuristics.choose_fused_hopper("sm_90a", dt, d, d, **kw)
                if fv is not None:
                    out += [x for x in (fv.scheduler, fv.fused, fv.combine) if x is not None]
                pv = heuristics.choose_pair("sm_90a", dt, d, d, **kw)
                if pv is not None:  # test_pair_path_still_right
                    out += [x for x in (pv.long.scheduler, pv.long.attention, pv.short.attention, pv.short.combine)
                            if x is not None]
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    s = specs()
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else None
    from kernelgen.jit import cache
    compiled, cached = warmup(s, cache.default_cache_dir(), jobs=jobs, progress=False)
    print(f"warm: {len(s)} specs, {compiled} compiled, {cached} cached")
