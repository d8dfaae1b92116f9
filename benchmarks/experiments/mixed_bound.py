"""How fast can a mixed step be?  Counted bounds for the bench's mixed batches (CPU, no GPU).

Issue 23 asks the one-launch mixed step to take at most 0.8x the time of its serial peer (the
prefill call, then the decode call).  This script counts, from the bench's own batches
(``suites.MIXED_BATCHES``) and a preset's heads, what any launch that shares the SMs between the
two classes can reach, given rates measured on the H200:

* ``D = B / R_d``: the decode call alone, B its K/V bytes at ``R_d`` (TB/s; the decode bench's
  rate, ``decode_trace_b128_paged16`` 3.97 TB/s in the report);
* ``P = serial - D``: the prefill call alone, from the measured serial time (``--report``) when
  there is one, else ``F / R_p`` (F its FLOPs, ``R_p`` TFLOP/s);
* a decode tile streams at most ``r_d`` GB/s on the SM it holds (H200: 73 an SM standalone at 8
  SMs, 58 beside the prefill inside the fused kernel; docs/dev/perf-log.md "The decode tile's own
  ceiling" and "The keys-as-rows decode tile");
* so a work-conserving launch (no SM idle, each class at its own per-SM rate) takes at least
  ``T_wc = P + B / (SMs x r_d)`` (the prefill's SM-time plus the decode's, over the SMs), and at
  least ``(B + prefill bytes) / BW`` (HBM).  ``T_wc / serial`` is the best ratio to serial any
  SM-sharing launch can show; the fused kernel's measured ratio above it is what its scheduling,
  its tiles' slowdown beside each other and its tail cost.

Usage: PYTHONPATH=$PWD python benchmarks/experiments/mixed_bound.py [--model llama3-8b]
       [--report docs/benchmarks/h200.json] [--rd 3.97] [--rp 600] [--per-sm 73,58] [--json F]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernelgen.apps.bench import models, suites  # noqa: E402

#: The H200's SMs and the copy roof measured in the report's runs (TB/s, read + write).
SMS = 132
COPY_TBPS = 4.28


def bounds(batch: str, model, settings, rd_tbps: float, rp_tflops: float, per_sm: list[float],
           measured: dict | None = None, kv_bytes: float = 1.0) -> dict:
    """The counted bounds of one mixed batch (see the module doc); ``measured``: the report's entry
    (``us`` and ``peers.serial``) or None; ``kv_bytes``: the K/V bytes a 16-bit byte becomes (0.5: an
    FP8 cache, ``mixed_trace_fp8``)."""
    pre_q, pre_k, dec_k = suites.mixed_lengths(settings, batch)
    flops = models.attention_flops(pre_q, pre_k, model)
    b_dec = models.decode_bytes(dec_k, model) * kv_bytes
    b_pre = models.prefill_bytes(pre_q, pre_k, model)
    d_us = b_dec / (rd_tbps * 1e12) * 1e6
    out = {"batch": batch + ("_fp8" if kv_bytes != 1.0 else ""), "chunks": pre_q, "decodes": len(dec_k), "decode_mean_ctx": sum(dec_k) / len(dec_k),
           "prefill_tflop": flops / 1e12, "decode_gb": b_dec / 1e9, "prefill_gb": b_pre / 1e9,
           "decode_alone_us": d_us, "hbm_floor_us": (b_dec + b_pre) / (COPY_TBPS * 1e12) * 1e6}
    serial = (measured or {}).get("peers", {}).get("serial")
    if serial:
        out["serial_us"], out["fused_us"] = serial, measured["us"]
        out["fused_of_serial"] = measured["us"] / serial
        p_us = serial - d_us
        out["prefill_rate_tflops"] = flops / (p_us * 1e-6) / 1e12
    else:
        p_us = flops / (rp_tflops * 1e12) * 1e6
        serial = p_us + d_us
        out["serial_us"] = serial
    out["prefill_alone_us"] = p_us
    for r in per_sm:
        t = max(p_us + b_dec / (SMS * r * 1e9) * 1e6, out["hbm_floor_us"])
        out[f"t_wc_{r:g}_us"] = t
        out[f"t_wc_{r:g}_of_serial"] = t / serial
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--report", default="docs/benchmarks/h200.json",
                    help="a report whose mixed entries give the measured serial and fused times ('' = none)")
    ap.add_argument("--rd", type=float, default=3.97, help="the decode call's rate alone, TB/s")
    ap.add_argument("--rp", type=float, default=600.0, help="the prefill call's rate alone, TFLOP/s (without a report)")
    ap.add_argument("--per-sm", default="73,58", help="decode tiles' GB/s an SM (comma list)")
    ap.add_argument("--rd-fp8", type=float, default=3.67,
                    help="the FP8-cache decode call's rate alone, TB/s in FP8 bytes (fp8_decode_b128_paged16)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    model = models.PRESETS[a.model]
    entries = {}
    if a.report and Path(a.report).exists():
        entries = {e["name"]: e for e in json.load(open(a.report))["benchmarks"]}
    settings = suites.Settings()
    per_sm = [float(x) for x in a.per_sm.split(",") if x]
    rows = [bounds(b, model, settings, a.rd, a.rp, per_sm, entries.get(models.entry_name(b, model)))
            for b in suites.MIXED_BATCHES]
    # issue 24's FP8 mixed step: mixed_trace on an e4m3 cache (the decode tiles' per-SM rate in FP8 bytes
    # taken as the 16-bit tile's: an upper bound on the FP8 tile, which also converts)
    fp8 = entries.get(models.entry_name(suites.MIXED_FP8_ENTRY, model))
    rows.append(bounds("mixed_trace", model, settings, a.rd_fp8, a.rp, per_sm, fp8, kv_bytes=0.5))
    cols = ["batch", "prefill_tflop", "decode_gb", "prefill_alone_us", "decode_alone_us", "serial_us", "fused_us",
            "fused_of_serial", *(f"t_wc_{r:g}_of_serial" for r in per_sm)]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
