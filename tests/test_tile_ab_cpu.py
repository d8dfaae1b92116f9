"""benchmarks/experiments/tile_ab.py's pure parts: the summary of ratios and the twin configurations."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "tile_ab", Path(__file__).resolve().parents[1] / "benchmarks" / "experiments" / "tile_ab.py")
tile_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tile_ab)

CONFIGS = {"m": "bf16:128:128:128:2:p::a/templates", "h": "bf16:128:128:128:2:p::b/templates",
           "fm": "fp8q:128:128:192:2:p", "fh": "fp8q:128:128:192:2:p:KG_PIN_FP8=1", "fa3": "fa3", "fa3f": "fa3fp8"}


def test_each_time_is_divided_by_its_paths_first_configuration_over_the_passes():
    rows = [{"shape": "h128c", "us": {"m": 100.0, "h": 90.0, "fm": 80.0, "fh": 60.0, "fa3": 95.0, "fa3f": 70.0}},
            {"shape": "h128c", "us": {"m": 100.0, "h": 110.0, "fm": 80.0, "fh": 88.0, "fa3": 105.0, "fa3f": 72.0}},
            {"shape": "h64c", "us": {"fm": 50.0, "fh": 40.0}}]
    lines = tile_ab.summarize(rows, CONFIGS)
    assert lines == ["h128c: h 0.900-1.100, fh 0.750-1.100, fa3 0.950-1.050, fa3f 0.875-0.900",
                     "h64c: fh 0.800"]


def test_twins_follow_each_kernelgen_configuration_and_not_the_peers():
    twins = tile_ab.with_twins(CONFIGS)
    assert list(twins) == ["m", "m~2", "h", "h~2", "fm", "fm~2", "fh", "fh~2", "fa3", "fa3f"]
    assert twins["fh~2"] == CONFIGS["fh"] and tile_ab.path_of(twins["m~2"]) == "bf16"
