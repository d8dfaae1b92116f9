"""Runs chosen configurations of a ``tools/mixed_sweep.py`` case once each, eagerly, for a profiler
(GPU, sm_90a): e.g. ``ncu -k regex:attn --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct
python tools/mixed_profile.py --case bench --configs prefill_only,decode_only,fused_k56``.
Each configuration runs ``--warm`` times before a ``torch.cuda.synchronize()`` and then once more,
so a profiler's ``--launch-skip`` can pick the last run.  Prints each configuration's label in
order."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="bench")
    ap.add_argument("--configs", default="prefill_only,decode_only,fused_k56")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--warm", type=int, default=1)
    a = ap.parse_args(argv)
    import torch

    import mixed_sweep
    from kernelgen.apps.bench import suites
    from kernelgen.apps.bench.models import PRESETS

    configs = [c for c in a.configs.split(",") if c]
    ks = sorted({int(c.split("_k")[1]) for c in configs if c.startswith("fused_k")})
    calls, _, desc = mixed_sweep.build_case(a.case, PRESETS[a.model], ks, suites.Settings())
    print(desc)
    for c in configs:
        for _ in range(a.warm):
            calls[c]()
        torch.cuda.synchronize()
        calls[c]()
        torch.cuda.synchronize()
        print("ran", c, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
