"""Diagnostic first look at the Hopper attention path on a GPU, one mainloop variant per process.

``--all`` runs every variant (``VARIANTS``: options x stages x block_n) in a subprocess with a
time limit, so a kernel that hangs costs one variant (the rest go on in a fresh process); a
variant that hangs is run again built with ``KERNELGEN_DEFINES=KG_HANG_CHECK`` (its mbarrier
waits print which barrier never completed, then trap).  Each case prints the largest output error and the LSE error: the LSE depends only
on S = Q K^T and the softmax, so "LSE ok, O wrong" points at P V (the V descriptor / MN-major
layout), both wrong at Q K^T or the pipeline.  Case ``uniform`` sets K = 0 (every probability
equal): O is then the mean of V over the visible keys, which checks P V on its own.

``--prewarm`` compiles the kernels the smoke cases, tests/gpu/test_hopper_gpu.py and
tools/bench_hopper.py use into the cache (run on the CPU machine before a GPU call).

Usage: python tools/hopper_smoke.py --all [--json FILE] | --variant OPTS:STAGES[:BN],... | --prewarm
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: sm90_opts ("_" = default) : K/V stages [: block_n]
VARIANTS = ["p:2", "_:2", "pr:2", "r:2", "hp:2", "s:2", "p:3"]


def _set_variant(variant: str) -> None:
    from kernelgen.front import api
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics

    heuristics.SM90_OPTS, heuristics.SM90_TILE = parse_variant(variant)
    api.clear_signature_cache()


def parse_variant(variant: str):
    """'opts:stages[:block_n]' -> (sm90_opts, TileConfig)."""
    from kernelgen.kernels.spec import TileConfig

    parts = variant.split(":")
    bn = int(parts[2]) if len(parts) > 2 else 128
    return ("" if parts[0] == "_" else parts[0]), TileConfig(128, bn, 8, int(parts[1]), 1)


def _cases():
    """(name, qlens, klens, hq, hkv, d, causal, uniform_k)."""
    return [
        ("d128", [256], [384], 2, 2, 128, False, False),
        ("d128_causal", [256], [384], 2, 2, 128, True, False),
        ("d64_causal", [256], [384], 2, 2, 64, True, False),
        ("uniform", [256], [384], 2, 2, 128, False, True),
        ("ragged_gqa", [300, 0, 129, 50], [520, 7, 257, 0], 8, 2, 128, True, False),
    ]


def run_variant(variant: str) -> dict:
    import numpy as np
    import torch

    import kernelgen
    from kernelgen.apps.reference import attention_reference
    from kernelgen.front import api

    _set_variant(variant)
    res = {"variant": variant, "cases": {}}
    for name, qlens, klens, hq, hkv, d, causal, uniform in _cases():
        g = torch.Generator(device="cuda").manual_seed(7)
        tq, tk = sum(qlens), sum(klens)
        q = torch.randn(tq, hq, d, generator=g, device="cuda").to(torch.bfloat16)
        k = torch.randn(tk, hkv, d, generator=g, device="cuda").to(torch.bfloat16)
        v = torch.randn(tk, hkv, d, generator=g, device="cuda").to(torch.bfloat16)
        if uniform:
            k.zero_()
        cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
        out = torch.full_like(q, float("nan"))
        t0 = time.perf_counter()
        try:
            o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                                return_lse=True, out=out, arch="sm_90a")
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - report and stop: a CUDA error is sticky
            res["cases"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            res["fatal"] = True
            break
        name_k = api._CALLS._last[1].attn.name
        ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal)
        fin = torch.isfinite(ref_lse)
        o_err = (o.double() - ref).abs()
        o_err = torch.where(torch.isnan(ref), torch.zeros_like(o_err), o_err)
        nan_out = int(torch.isnan(o).any(-1).sum()) - int(torch.isnan(ref).any(-1).sum())
        lse_err = float((lse.double()[fin] - ref_lse[fin]).abs().max()) if fin.any() else 0.0
        worst = torch.nonzero(o_err == o_err.max())[:1].tolist()
        col_err = o_err.amax(dim=(0, 1))
        res["cases"][name] = {
            "kernel": name_k, "o_max_err": float(o_err.max()), "worst_at": worst, "lse_max_err": lse_err,
            "nan_rows_extra": nan_out, "ok": bool(o_err.max() < 3e-2 and lse_err < 5e-3 and nan_out == 0),
            "bad_cols_64": [int(c) for c in torch.nonzero(col_err > 3e-2).flatten()[:64].tolist()],
            "seconds": round(time.perf_counter() - t0, 2)}
    res["ok"] = all(c.get("ok") for c in res["cases"].values()) and not res.get("fatal")
    return res


def _run_batch(variants, limit, env):
    """Run variants in one process (one JSON line each, each within ``limit`` seconds, the first
    with 10 more for imports); returns (results, hung variant or None)."""
    import select

    cmd = [sys.executable, __file__, "--variant", ",".join(variants)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    done, buf = [], ""
    deadline = time.monotonic() + limit + 10
    hung = None
    while len(done) < len(variants):
        wait = deadline - time.monotonic()
        if wait <= 0:
            hung = variants[len(done)]
            p.kill()
            break
        ready, _, _ = select.select([p.stdout], [], [], wait)
        if not ready:
            continue
        line = p.stdout.readline()
        if not line:  # the process ended
            break
        if line.startswith("{"):
            done.append(json.loads(line))
            deadline = time.monotonic() + limit
    p.wait()
    if hung is None and len(done) < len(variants):  # it died (e.g. a CUDA error it could not report)
        done.append({"variant": variants[len(done)], "ok": False, "error": p.stderr.read()[-1500:]})
    return done, hung


def run_all(json_path, limit: float) -> dict:
    """Every variant; a process that hangs is killed and the rest go on in a fresh one, the hung
    variant is rerun with KG_HANG_CHECK once."""
    env = dict(os.environ)
    results, todo = [], list(VARIANTS)
    while todo:
        done, hung = _run_batch(todo, limit, env)
        results += done
        for r in done:
            print(json.dumps(r), flush=True)
        todo = todo[len(done):]
        if hung is not None:
            r = {"variant": hung, "ok": False, "error": "timed out (hang?)"}
            try:
                dbg = subprocess.run([sys.executable, __file__, "--variant", hung], capture_output=True, text=True,
                                     timeout=limit + 10, env={**env, "KERNELGEN_DEFINES": "KG_HANG_CHECK"})
                r["hang_check"] = (dbg.stdout + dbg.stderr)[-2500:]
            except subprocess.TimeoutExpired:
                r["hang_check"] = "the KG_HANG_CHECK build timed out too"
            results.append(r)
            print(json.dumps(r), flush=True)
            todo = todo[1:]
    ok = [r["variant"] for r in results if r.get("ok")]
    best = None
    for v in ok:  # the dispatcher's options: the first 2-stage 128-key variant that passed, default first
        if v.endswith(":2"):
            best = v.split(":")[0].replace("_", "")
            break
    summary = {"variants": results, "passed": ok, "best_opts": best if best is not None else "NONE"}
    if json_path:
        Path(json_path).write_text(json.dumps(summary, indent=1))
    print("SMOKE", " ".join(f"{r['variant']}={'ok' if r.get('ok') else 'FAIL'}" for r in results),
          "best_opts", summary["best_opts"], flush=True)
    return summary


def prewarm(jobs: int) -> None:
    """Compile what the smoke, the Hopper GPU tests and the bench use (CPU is enough)."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelgen.jit.cache import get_cache
    from kernelgen.kernels.spec import AttentionSpec, SchedulerSpec, TileConfig
    from kernelgen.selection import heuristics

    specs = set()
    for layout in ("soa", "aos"):
        specs.add(SchedulerSpec("sm_90a", layout))
        for dt in ("bf16", "fp16"):
            for d in (64, 128):
                for mask in ("none", "causal"):
                    specs.add(AttentionSpec("sm_90a", dt, d, d, mask, layout, heuristics.SM90_TILE, mainloop="sm90a",
                                            sm90_opts=heuristics.SM90_OPTS))
    for v in VARIANTS + ["hs:2", "h:2", "p:2:192"]:
        opts, tile = parse_variant(v)
        for mask in ("none", "causal"):
            for d in (64, 128):
                specs.add(AttentionSpec("sm_90a", "bf16", d, d, mask, "soa", tile, mainloop="sm90a", sm90_opts=opts))
    # sm_80-path variants of the dispatch test and the bench's arch="sm_80" entries
    for kw in (dict(max_seqlen_q=600, max_seqlen_k=600, mask="causal", mainloop="sm80"),
               dict(max_seqlen_q=600, max_seqlen_k=600, mask="none", mainloop="sm80"),
               dict(max_seqlen_q=1, max_seqlen_k=600, mask="causal"),
               dict(max_seqlen_q=16384, max_seqlen_k=16384, mask="causal", mainloop="sm80"),
               dict(max_seqlen_q=4096, max_seqlen_k=4096, mask="none", mainloop="sm80"),
               dict(max_seqlen_q=600, max_seqlen_k=600, mask="local"),
               dict(max_seqlen_q=600, max_seqlen_k=600, mask="causal", softcap=True)):
        v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, **kw)
        specs.update(s for s in (v.attention, v.combine) if s is not None)
    # the existing GPU tests of tools/hopper_gpu_run.sh's "regress" stage: (dtype, d, dv, hq, hkv, hints, mask)
    for dt, d, dv, hq, hkv, mq, mk, mask in (
            ("bf16", 96, 96, 8, 2, 600, 600, "causal"), ("fp16", 64, 64, 8, 8, 513, 513, "causal"),
            ("bf16", 64, 64, 4, 4, 0, 3, "none"), ("fp16", 64, 64, 4, 4, 1, 1, "causal"),
            ("bf16", 192, 128, 8, 2, 1, 1, "causal")):
        v = heuristics.choose("sm_90a", dt, d, dv, num_heads_q=hq, num_heads_kv=hkv, max_seqlen_q=mq,
                              max_seqlen_k=mk, mask=mask)
        specs.update(s for s in (v.scheduler, v.attention, v.combine) if s is not None)
    cache = get_cache()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(cache.get, sorted(specs, key=lambda s: s.name)))
    print(f"prewarmed {len(specs)} kernels in {time.perf_counter() - t0:.1f} s into {cache.root}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--variant")
    ap.add_argument("--prewarm", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--limit", type=float, default=12.0, help="seconds per variant (plus 10 per process)")
    args = ap.parse_args(argv)
    if args.prewarm:
        prewarm(args.jobs)
        return 0
    if args.variant:
        for v in args.variant.split(","):
            r = run_variant(v)
            print(json.dumps(r), flush=True)
            if r.get("fatal"):
                return 1  # a CUDA error is sticky: the next variants would fail on it
        return 0
    summary = run_all(args.json, args.limit)
    return 0 if summary["best_opts"] != "NONE" else 1


if __name__ == "__main__":
    sys.exit(main())
