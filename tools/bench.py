"""GPU benchmark of the GPU check (tools/gpu_check.sh): a thin wrapper over ``kernelgen bench``.

The measurements live in ``kernelgen/apps/bench/`` (``kernelgen bench --help``).  This script keeps the
flags the GPU check uses:

* (no flag) every suite for llama3-8b without FlexAttention (its compiles do not fit the check's
  time limit), under a time budget (``--budget``, default 130 s); ``--json FILE`` writes the
  report (its ``benchmarks``, ``roofs`` and ``device`` are what tools/gpu_report.py reads);
* ``--sweep``: also the head-dim-128 prefill tile sweep (``tile_sweep_causal_h128_s16k`` in the JSON);
* ``--only-scheduler``: only the scheduler entries, one line each;
* ``--only-decode-sweep``: only the decode tile sweep;
* ``--fp8-stage-sweep``: only the FP8 decode at 2-4 K/V stages and 8 or 12 CTAs an SM
  (``heuristics.FP8_DECODE_STAGES``, ``FP8_DECODE_MIN_BLOCKS``);
* ``--fp8-prefill-sweep``: only FP8 prefill shapes on the dispatched kernel and the sm_80 mainloop,
  beside the bf16 call (``sweeps.fp8_prefill_mainloops``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sweep", action="store_true", help="also sweep the head-dim-128 prefill tiles")
    ap.add_argument("--only-scheduler", action="store_true", help="only the scheduler entries")
    ap.add_argument("--only-decode-sweep", action="store_true", help="only the decode tile sweep")
    ap.add_argument("--fp8-stage-sweep", action="store_true", help="only the FP8 decode's stage sweep")
    ap.add_argument("--fp8-prefill-sweep", action="store_true",
                    help="only FP8 prefill: the dispatched kernel, the sm_80 mainloop and bf16 per shape")
    ap.add_argument("--budget", type=float, default=130.0, help="seconds before remaining entries are skipped")
    ap.add_argument("--flex", choices=("off", "some", "all"), default="off", help="FlexAttention peers (default off)")
    args = ap.parse_args(argv)

    from kernelgen.apps.bench import runner, sweeps

    if args.only_decode_sweep:
        sweeps.decode_sweep()
        return 0
    if args.fp8_stage_sweep:
        sweeps.fp8_stage_sweep()
        return 0
    if args.fp8_prefill_sweep:
        sweeps.fp8_prefill_mainloops()
        return 0
    if args.only_scheduler:
        from kernelgen.apps.bench import suites
        from kernelgen.apps.bench.models import PRESETS

        defs = [d for d in suites.registry(["scheduler"], [PRESETS["llama3-8b"]]) if d.name.startswith("scheduler_b")]
        for e in runner.run_entries(defs, suites.Settings(), log=lambda _m: None):
            if e.get("us") is None:
                print(e["name"], "ERROR", e.get("error") or e.get("skipped"), flush=True)
            else:
                print(e["name"], {k: round(v, 2) for k, v in e.items() if k.startswith("us") and v is not None},
                      flush=True)
        return 0
    after = (lambda: {"tile_sweep_causal_h128_s16k": sweeps.tile_sweep()}) if args.sweep else None
    return runner.run(suites=["all"], models=["llama3-8b"], flex=args.flex, budget_s=args.budget,
                      json_path=args.json, after=after)


if __name__ == "__main__":
    sys.exit(main())
