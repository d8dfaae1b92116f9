"""Fifty-fifth session: the SM clock and power of kernelgen's and FA4's gpt-oss soft-cap snippet calls
(profile_vs_peers.py's gptoss_softcap_16k) over sustained back-to-back runs, alternating A B A B, each
phase ~4 s; nvidia-smi samples clocks / power every 100 ms in the background (clock.csv), this script
prints each phase's wall-clock window, calls and mean time a call (CUDA events).  Under ncu both kernels
take the same cycles (10.88 M / 10.90 M); the question is the clock each holds when run sustained."""
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERNELGEN_TIERED_COMPILE", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks" / "experiments"))
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import torch  # noqa: E402
from profile_vs_peers import build  # noqa: E402

fns = {impl: build("gptoss_softcap_16k", impl) for impl in ("kernelgen", "fa4")}
for f in fns.values():
    for _ in range(3):
        f()
torch.cuda.synchronize()
phases = []
for rnd in range(int(os.environ.get("ROUNDS", "3"))):
    for impl, f in fns.items():
        time.sleep(1.0)                       # (a gap between phases, visible in the samples)
        t0 = time.time()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        n = 0
        while time.time() - t0 < float(os.environ.get("PHASE_S", "4")):
            for _ in range(20):
                f()
            n += 20
            torch.cuda.synchronize()
        e.record()
        torch.cuda.synchronize()
        phases.append(dict(round=rnd, impl=impl, t0=t0, t1=time.time(), calls=n, us=s.elapsed_time(e) * 1e3 / n))
        print(json.dumps(phases[-1]), flush=True)
json.dump(phases, open(os.environ.get("PHASES", "phases.json"), "w"), indent=1)
