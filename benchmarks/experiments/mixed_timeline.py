"""Where the Hopper fused mixed-batch kernel spends its time, CTA by CTA (GPU, sm_90a).

Builds the fused kernel with ``KERNELGEN_DEFINES=KG_TIMELINE`` (globaltimer stamps and short-tile
counts per CTA, ``templates/attention/fwd_fused_sm90.cu.j2``), runs a ``mixed_sweep.py`` (beside this file) case
at each ``--short-ctas`` value and prints, for the CTAs that start on the short (decode) queue and
for the others: how many, and the mean / max of each phase (short queue, long queue, short tiles
after the long queue) in us from the launch's first stamp, plus the SM-time (CTA x us) of each
phase and its tile counts.  The decode SM-time against ``decode_only``'s bytes gives the decode
tiles' GB/s an SM inside the fused kernel; the long SM-time against ``prefill_only`` the prefill's.

Each CTA's ``%smid`` is recorded too: ``--all-runs`` prints and keeps every launch (its total,
phases, clocks and the SM ids of the CTAs that started on the short queue), which showed that the
launch time depends on that SM set (docs/dev/perf-log.md, "Mixed batches: which SMs take the
decodes").

Usage: PYTHONPATH=$PWD python benchmarks/experiments/mixed_timeline.py [--case bench] [--short-ctas 40,56,80]
       [--runs 3] [--all-runs] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def summarise(tl, grid: int) -> dict:
    """Phase statistics of one run from the (grid, 16) stamp array (ns; see the module doc)."""
    import numpy as np

    t = tl[:grid].astype(np.float64)
    t0 = t[:, 0].min()
    start, short_end, long_end, end = [(t[:, i] - t0) / 1e3 for i in range(4)]
    clk = [t[:, 8 + i] for i in range(4)]

    def mhz(a, b, sel):  # mean SM clock between stamps a and b (cycles / us) over the selected CTAs
        dt = (t[sel, b] - t[sel, a]) / 1e3
        ok = dt > 50
        return float(((clk[b][sel] - clk[a][sel])[ok] / dt[ok]).mean()) if ok.any() else None
    out = {"total_us": float(end.max())}
    # a CTA that ran short tiles before the long queue started on the short queue (whatever the
    # kernel's rule for choosing them: starts_short)
    first = t[:, 4] > 0
    smid = t[:, 6].astype(np.int64) - 1  # -1: not recorded
    out["short_first_smids"] = sorted(int(x) for x in smid[first])
    pairs = Counter(x >> 1 for x in out["short_first_smids"])  # SM pairs (s, s ^ 1)
    out["short_first_pairs_both"] = sum(1 for v in pairs.values() if v == 2)
    # every CTA: [smid, started on the short queue, short, long, after phase (us)]
    out["per_cta"] = [[int(smid[i]), int(first[i]), round(float(short_end[i] - start[i]), 1),
                       round(float(long_end[i] - short_end[i]), 1), round(float(end[i] - long_end[i]), 1)]
                      for i in range(grid)]
    for name, sel in (("short_first", first), ("long_first", ~first)):
        if not sel.any():
            continue
        short = short_end[sel] - start[sel]
        longp = long_end[sel] - short_end[sel]
        after = end[sel] - long_end[sel]
        out[name] = {
            "ctas": int(sel.sum()),
            "short_us_mean": float(short.mean()), "short_us_max": float(short.max()),
            "long_us_mean": float(longp.mean()), "long_us_max": float(longp.max()),
            "after_us_mean": float(after.mean()), "after_us_max": float(after.max()),
            "end_us_min": float(end[sel].min()), "end_us_max": float(end[sel].max()),
            "short_sm_ms": float(short.sum() / 1e3), "long_sm_ms": float(longp.sum() / 1e3),
            "after_sm_ms": float(after.sum() / 1e3),
            "short_tiles_first": int(t[sel, 4].sum()), "short_tiles_after": int(t[sel, 5].sum()),
            "mhz_short": mhz(0, 1, sel), "mhz_long": mhz(1, 2, sel), "mhz_after": mhz(2, 3, sel),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="bench")
    ap.add_argument("--short-ctas", default="40,56,80")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--kv-dtype", default="", help="e4m3: the FP8-cache batch (mixed_sweep's --kv-dtype)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each fused_kN (the best is summarised; "
                    "with --all-runs every run's total, phases and clocks are printed and kept)")
    ap.add_argument("--all-runs", action="store_true", help="print and keep every run (the run-to-run spread); "
                    "each run is preceded by an L2 flush, as in mixed_sweep's timing")
    ap.add_argument("--soak", type=float, default=0.0, help="also run prefill_only, decode_only, serial and each "
                    "fused_kN back to back for this many seconds each, printing wall-clock start/end times (to "
                    "align with an `nvidia-smi --query-gpu=clocks.sm,power.draw -lms 50` log)")
    a = ap.parse_args(argv)
    os.environ["KERNELGEN_DEFINES"] = ",".join(x for x in (os.environ.get("KERNELGEN_DEFINES", ""), "KG_TIMELINE") if x)
    import numpy as np
    import torch
    from cupy.cuda import runtime as cupy_rt

    import mixed_sweep
    from kernelgen.apps.bench import measure, suites
    from kernelgen.apps.bench.models import PRESETS

    ks = [int(x) for x in a.short_ctas.split(",") if x]
    calls, _, desc = mixed_sweep.build_case(a.case, PRESETS[a.model], ks, suites.Settings(), kv_dtype=a.kv_dtype)
    from kernelgen.jit import runtime

    fused_kernels = [k for k in runtime.loaded_kernels() if k.spec.name.startswith("fused_attn_sm_90a")]
    report = {"case": a.case, "shape": desc, "runs": {}}
    base = {lab: calls[lab] for lab in ("prefill_only", "decode_only", "serial")}
    times = measure.time_interleaved(base, rounds=3, repeat=5)
    report["alone_us"] = {k: v["us"] for k, v in times.items()}
    print(desc)
    print({k: round(v["us"], 1) for k, v in times.items()})
    for k in ks:
        label = f"fused_k{k}"
        calls[label]()  # warm
        torch.cuda.synchronize()
        kern = fused_kernels[0] if fused_kernels else None
        if kern is None:
            raise SystemExit("mixed_timeline: the fused kernel is not in runtime's table")
        ptr = int(kern.module.get_global_var("kg_timeline"))  # device address
        n = 2048 * 16
        zero = np.zeros(n, dtype=np.uint64)
        runs = []
        flush = measure.flush_buffer()
        for _ in range(a.runs):
            cupy_rt.memcpy(ptr, zero.ctypes.data, zero.nbytes, 1)  # host to device
            if a.all_runs:
                flush.zero_()
            calls[label]()
            torch.cuda.synchronize()
            host = np.empty(n, dtype=np.uint64)
            cupy_rt.memcpy(host.ctypes.data, ptr, host.nbytes, 2)  # device to host
            grid = int((host.reshape(-1, 16)[:, 3] > 0).sum())
            runs.append(summarise(host.reshape(-1, 16), grid))
        best = min(runs, key=lambda r: r["total_us"])
        report["runs"][label] = best
        if a.all_runs:
            report.setdefault("all_runs", {})[label] = runs
            print(f"\n{label}: every run (us; SM-ms of the decode-first CTAs' decode and the others' prefill; MHz)")
            for r in runs:
                sf, lf = r.get("short_first", {}), r.get("long_first", {})
                print(f"  total {r['total_us']:7.1f}  decode-first: short {sf.get('short_us_max', 0):6.0f} us "
                      f"{sf.get('short_sm_ms', 0):6.1f} SM-ms then long {sf.get('long_sm_ms', 0):5.1f}"
                      f" @{sf.get('mhz_short') or 0:5.0f}  prefill-first: long {lf.get('long_us_max', 0):6.0f} us "
                      f"{lf.get('long_sm_ms', 0):6.1f} SM-ms after {lf.get('after_sm_ms', 0):5.1f} "
                      f"({lf.get('short_tiles_after', 0)} tiles) @{lf.get('mhz_long') or 0:5.0f}  "
                      f"{sf.get('ctas', 0)} short-first CTAs, {r['short_first_pairs_both']} SM pairs both short, "
                      f"by smid // 22: {[sum(1 for x in r['short_first_smids'] if x // 22 == b) for b in range(6)]}")
        print(f"\n{label}: total {best['total_us']:.1f} us")
        for cls in ("short_first", "long_first"):
            if cls in best:
                print(f"  {cls}: " + ", ".join(f"{key} {val:.0f}" if isinstance(val, float) else f"{key} {val}"
                                              for key, val in best[cls].items()))
    if a.soak > 0:
        import time
        for label in ["prefill_only", "decode_only", "serial"] + [f"fused_k{k}" for k in ks]:
            torch.cuda.synchronize()
            t0 = time.time()
            n = 0
            while time.time() - t0 < a.soak:
                for _ in range(20):
                    calls[label]()
                torch.cuda.synchronize()
                n += 20
            print(f"soak {label} {t0:.3f} {time.time():.3f} {n} calls", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
