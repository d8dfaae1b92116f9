"""tools/gpu_report.py's aliases (no GPU): issue 5 names the varlen trace prefill entry
``varlen_trace_prefill_gqa``; the report carries it as a copy of the bench's
``prefill_varlen_trace`` measurement, marked ``same_as``."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("gpu_report", Path(__file__).resolve().parents[1] / "tools" / "gpu_report.py")
gpu_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_report)


def test_varlen_trace_alias_copies_the_measurement():
    src = {"name": "prefill_varlen_trace", "us": 971.8, "tflops": 507.3, "tbps": None,
           "peers": {"torch_fa2_varlen": 1833.6}, "ratios": {"torch_fa2_varlen": 1.887}}
    b = [{"name": "demo", "us": 1.0}, src]
    gpu_report.add_aliases(b)
    alias = b[-1]
    assert alias["name"] == "varlen_trace_prefill_gqa" and alias["same_as"] == "prefill_varlen_trace"
    assert {k: v for k, v in alias.items() if k not in ("name", "same_as")} == \
        {k: v for k, v in src.items() if k != "name"}
    gpu_report.add_aliases(b)            # idempotent
    assert [x["name"] for x in b].count("varlen_trace_prefill_gqa") == 1


def test_no_alias_without_its_source():
    b = [{"name": "demo", "us": 1.0}]
    gpu_report.add_aliases(b)
    assert [x["name"] for x in b] == ["demo"]
