"""One configuration of a ``mixed_sweep.py`` case (beside this file) run once between
``cudaProfilerStart`` / ``cudaProfilerStop``, for a profiler started with ``--profile-from-start off``
(GPU, sm_90a): the fused mixed-batch kernel (``fused_k{N}``: N short-first CTAs) or the serial
peer's calls (``decode_only``, ``prefill_only``), after ``--warm`` unprofiled runs of the same call.

    ncu --profile-from-start off -k regex:kg_attention_fused --section SourceCounters -o fused \\
        python benchmarks/experiments/mixed_profile.py --case bench --kv-dtype e4m3 --label fused_k33

The fused kernel's key-block loops are told apart in the exported source view by their SASS
(``offline_sass.py loops``: the decode tile's loop converts FP8 with ``F2FP.F16.E4M3`` and runs
``HMMA``, the long tiles' runs ``HGMMA``).  Prints the labels built and the one profiled.

Usage: PYTHONPATH=$PWD python benchmarks/experiments/mixed_profile.py [--case bench] [--kv-dtype e4m3]
       [--label fused_k33] [--rows 8] [--stages 2] [--model llama3-8b] [--warm 3]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="bench")
    ap.add_argument("--kv-dtype", default="")
    ap.add_argument("--label", default="fused_k33", help="fused_kN, decode_only, prefill_only, serial")
    ap.add_argument("--rows", type=int, default=None, help="the fused decode tile's query rows (8 or 16)")
    ap.add_argument("--stages", type=int, default=None, help="the fused decode tile's K/V stages")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--warm", type=int, default=3)
    a = ap.parse_args(argv)
    import torch

    import mixed_sweep
    from kernelgen.apps.bench import suites
    from kernelgen.apps.bench.models import PRESETS

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("mixed_profile: needs an sm_90a GPU", file=sys.stderr)
        return 2
    n = [int(a.label[len("fused_k"):])] if a.label.startswith("fused_k") else [33]
    calls, _, desc = mixed_sweep.build_case(a.case, PRESETS[a.model], n, suites.Settings(),
                                            ((a.stages, None, a.rows, None),), kv_dtype=a.kv_dtype)
    if a.label not in calls:
        raise SystemExit(f"mixed_profile: no configuration {a.label!r} (built: {', '.join(calls)})")
    f = calls[a.label]
    for _ in range(a.warm):
        f()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    f()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"{a.case}: {desc}; built {', '.join(calls)}; profiled {a.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
