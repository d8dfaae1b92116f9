"""GPU: a short numerical fuzz (tools/fuzz.py) against the float64 reference, and the fixed
sanitizer subset run without a sanitizer.  The full run is ``python tools/fuzz.py --batches 2000``.

A failing batch's seed is in the assertion message; ``python tools/fuzz.py --replay SEED`` reruns it.
"""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
FUZZ_SEED = 20240607
FUZZ_BATCHES = 100


def _load_fuzz():
    name = "kernelgen_tools_fuzz"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


fuzz = _load_fuzz()


def test_fuzz_short():
    lines = []
    s = fuzz.run_fuzz(FUZZ_BATCHES, FUZZ_SEED, time_limit=150, hang_s=120, log=lines.append)
    summary = fuzz.summary_line(s)
    print("\n".join(lines + [summary]))
    assert s["ran"] >= min(FUZZ_BATCHES, 30), summary
    assert s["mismatches"] == 0 and s["unwritten_rows"] == 0, (
        summary + "\n" + "\n".join(f"seed {f['seed']}: {f['errors']}" for f in s["failures"][:10]))


def test_replay_builds_the_same_inputs():
    seed = fuzz.batch_seeds(FUZZ_SEED, 3)[2]
    a = fuzz.build_inputs(fuzz.case_for_seed(seed), "cuda")
    b = fuzz.build_inputs(fuzz.case_for_seed(seed), "cuda")
    for key in ("q", "k", "v", "cu_seqlens_q"):
        x, y = a[key], b[key]
        if x.element_size() == 1 and x.is_floating_point():   # an FP8 cache: torch.equal has no FP8 kernel
            x, y = x.view(torch.uint8), y.view(torch.uint8)
        assert torch.equal(x, y), key
    for key in ("k_descale", "v_descale", "q_descale"):
        x, y = a.get(key), b.get(key)
        assert (x is None) == (y is None) and (x is None or torch.equal(x, y)), key


def test_sanitize_subset_without_sanitizer():
    lines = []
    s = fuzz.run_sanitize_subset("cuda", log=lines.append)
    assert s["ok"], "\n".join(lines)
