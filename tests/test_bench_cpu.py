"""CPU tests of ``kernelgen bench`` (no GPU): parsing, presets, counting, report arithmetic, JSON and
table shapes, plots from synthetic results, the registry, the peer harness, the FlexAttention
document mask and the SDPA decode views against the float64 reference, and the cold compile."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from kernelgen.apps import cli
from kernelgen.apps.bench import SUITES, peers, plots, report, runner, suites
from kernelgen.apps.bench.models import (DEFAULT_MODEL, ModelPreset, PRESETS, attention_flops, decode_bytes, entry_name,
                                         prefill_bytes, resolve_models, visible_pairs)
from kernelgen.apps.demo import has_cuda_gpu

REPO = Path(__file__).resolve().parents[1]
no_gpu = pytest.mark.skipif(has_cuda_gpu(), reason="checks the no-GPU behaviour")
REQUIRED = {
    "prefill_dense_causal_h128_s16k", "prefill_dense_h128_s4k", "prefill_dense_causal_h64_s2k",
    "prefill_dense_causal_h256_s4k", "prefill_dense_h64_s2k", "prefill_dense_h256_s4k",
    "prefill_dense_causal_gqa_h128_s4k", "prefill_varlen_trace",
    "prefill_chunked_paged16", "prefill_chunked_paged64", "prefill_chunked_paged128",
    "decode_trace_b128_paged16", "decode_trace_b32_paged16", "decode_long_b8_128k", "graph_decode_step_b128",
    "mixed_trace", "mixed_trace_fp8",
    "scheduler_b8", "scheduler_b128", "scheduler_b1024", "scheduler_b4096", "varlen_trace_sorted",
    "varlen_trace_unsorted",
    "compile_cold_variant", "compile_cold_call", "compile_warm_load", "dispatch_in_memory",
    "overhead_decode_call", "overhead_plan_run", "overhead_graph_replay",
    "sinks_prefill_causal_s16k", "sinks_decode_b128_paged16",
    "alibi_prefill_causal_s16k", "alibi_decode_b128_paged16",
    "variant_alibi_prefill_causal_s16k", "variant_alibi_float_prefill_causal_s16k", "variant_softcap_prefill_causal_s16k",
    "variant_softcap_approx_prefill_causal_s16k", "variant_compile_first_call",
    "variant_example_t5_bias_prefill_causal_s16k", "variant_example_document_mask_prefill_causal_s16k",
    "variant_example_prefix_lm_prefill_causal_s16k",
}
ROOFS = {"copy_tbps": 4.0, "bf16_matmul_tflops": 800.0}


# ------------------------------------------------------------------------------------ parsing
def test_bench_parser_defaults():
    args = cli.build_parser().parse_args(["bench"])
    assert args.command == "bench"
    assert args.suite == ["all"] and args.model is None and args.trace is None
    assert args.json is None and args.plots is None and args.repeat is None and not args.quick
    assert args.flex is None and args.budget is None and not args.no_flush and args.cache_dir is None
    assert args.from_json is None and args.flush == "write"


def test_bench_parser_values():
    args = cli.build_parser().parse_args([
        "bench", "--suite", "prefill,decode,prefill", "--model", "llama3-8b,mla", "--trace", "t.csv",
        "--json", "out.json", "--plots", "pl", "--repeat", "7", "--quick", "--flex", "all", "--budget", "90",
        "--no-flush", "--jobs", "3", "--cache-dir", "cd"])
    assert args.suite == ["prefill", "decode"]
    assert args.model == ["llama3-8b", "mla"]
    assert (args.trace, args.json, args.plots, args.repeat, args.quick) == ("t.csv", "out.json", "pl", 7, True)
    assert (args.flex, args.budget, args.no_flush, args.jobs, args.cache_dir) == ("all", 90.0, True, 3, "cd")
    for suite in SUITES + ("all",):
        assert cli.build_parser().parse_args(["bench", "--suite", suite]).suite == [suite]


@pytest.mark.parametrize("argv", [["bench", "--suite", "nope"], ["bench", "--model", "gpt5"],
                                  ["bench", "--repeat", "0"], ["bench", "--flex", "maybe"], ["bench", "--suite", ","],
                                  ["bench", "--flush", "dirty"]])
def test_bench_parser_rejects(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(argv)
    assert e.value.code == 2


@pytest.mark.parametrize("argv, mode", [([], "write"), (["--flush", "read"], "read"), (["--flush", "off"], "off"),
                                        (["--no-flush"], "off"), (["--flush", "read", "--no-flush"], "off")])
def test_bench_flush_option_reaches_the_run(monkeypatch, argv, mode):
    """--flush picks how L2 is flushed before each repetition; --no-flush is --flush off."""
    from kernelgen.apps.bench import runner

    seen = {}
    monkeypatch.setattr(runner, "run", lambda **kw: seen.update(kw) or 0)
    assert runner.main_args(cli.build_parser().parse_args(["bench", "--quick", *argv])) == 0
    assert seen["flush"] == mode


def test_flush_modes(monkeypatch):
    """flush_mode maps the old booleans and names the bad value; flush_l2 writes the buffer for
    "write", reads it (a sum, no write) for "read" and leaves it alone for "off"."""
    import torch

    from kernelgen.apps.bench import measure

    assert [measure.flush_mode(f) for f in (True, False, None, "write", "read", "off")] == \
        ["write", "off", "off", "write", "read", "off"]
    for bad in ("dirty", 1, ""):
        with pytest.raises(ValueError, match="flush must be one of write, read, off"):
            measure.flush_mode(bad)
    buf = torch.ones(64, dtype=torch.int8)
    sums = []
    real_sum = torch.sum
    monkeypatch.setattr(torch, "sum", lambda t, *a, **k: sums.append((t.dtype, t.numel())) or real_sum(t, *a, **k))
    measure.flush_l2(buf, "read")
    assert sums == [(torch.int64, 8)] and bool((buf == 1).all())        # all 64 bytes read as 8 int64
    measure.flush_l2(buf, "off")
    assert bool((buf == 1).all()) and len(sums) == 1
    measure.flush_l2(buf, "write")
    assert bool((buf == 0).all()) and len(sums) == 1
    with pytest.raises(ValueError, match="unknown flush mode"):
        measure.flush_l2(buf, "dirty")
    assert measure.flush_mode(lambda: None) == "custom"
    pre = lambda: None  # noqa: E731
    assert measure.flush_fn(pre) is pre and measure.flush_fn("off") is None and measure.flush_fn(False) is None
    with pytest.raises(ValueError, match="flush must be one of"):
        measure.time_gpu(lambda: None, flush="dirty")


@no_gpu
def test_bench_without_gpu_exits_2(capsys):
    assert cli.main(["bench", "--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@no_gpu
def test_tools_bench_wrapper_without_gpu(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("tools_bench", REPO / "tools" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(mod)  # (it puts the checkout on sys.path)
    finally:
        sys.path[:] = saved
    assert mod.main(["--json", str(tmp_path / "b.json")]) == 2
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--json", "--sweep", "--only-scheduler", "--only-decode-sweep"):
        assert flag in out


# ------------------------------------------------------------------------------------ presets
def test_presets():
    want = {"llama3-8b": (32, 8, 128, 128, 0.0, 0), "llama3-70b-tp8": (8, 1, 128, 128, 0.0, 0),
            "qwen2.5-7b": (28, 4, 128, 128, 0.0, 0), "gemma2-9b": (16, 8, 256, 256, 50.0, 0),
            "mistral-7b": (32, 8, 128, 128, 0.0, 4096), "mla": (128, 128, 192, 128, 0.0, 0),
            "gpt-oss": (64, 8, 64, 64, 0.0, 0)}
    assert set(PRESETS) == set(want) and DEFAULT_MODEL == "llama3-8b"
    for name, p in PRESETS.items():
        assert (p.num_heads_q, p.num_heads_kv, p.head_dim, p.head_dim_v, p.softcap, p.window) == want[name]
        assert p.num_heads_q % p.num_heads_kv == 0
        assert p.head_dim in (64, 96, 128, 192, 256) and p.head_dim_v in (64, 96, 128, 192, 256)
    assert PRESETS["mistral-7b"].window_size == (4095, 0) and PRESETS["llama3-8b"].window_size == (-1, -1)
    assert PRESETS["llama3-8b"].kv_bytes_per_token == 8 * 256 * 2
    with pytest.raises(ValueError):
        ModelPreset("bad", 30, 8, 128, 128)


def test_resolve_models_and_names():
    assert [p.name for p in resolve_models(None)] == [DEFAULT_MODEL]
    assert [p.name for p in resolve_models(["all"])] == list(PRESETS)
    assert [p.name for p in resolve_models(["mla", "all"])][:2] == ["mla", "llama3-8b"]
    assert len(resolve_models(["mla", "all"])) == len(PRESETS)
    with pytest.raises(ValueError):
        resolve_models(["nope"])
    assert entry_name("decode_long_b8_128k", PRESETS["llama3-8b"]) == "decode_long_b8_128k"
    assert entry_name("decode_long_b8_128k", PRESETS["mla"]) == "decode_long_b8_128k_mla"
    assert entry_name("x", None) == "x"


def _pairs_brute(lq, lk, causal, wl):
    n = 0
    for r in range(lq):
        for j in range(lk):
            if causal and j > r + lk - lq:
                continue
            if causal and wl >= 0 and r + lk - lq - j > wl:
                continue
            n += 1
    return n


@pytest.mark.parametrize("lq,lk", [(1, 1), (1, 300), (5, 5), (37, 100), (100, 37), (64, 64), (0, 5), (3, 0)])
@pytest.mark.parametrize("wl", [-1, 0, 1, 15, 40, 1000])
def test_visible_pairs_brute_force(lq, lk, wl):
    assert visible_pairs(lq, lk, True, wl) == _pairs_brute(lq, lk, True, wl)
    assert visible_pairs(lq, lk, False) == lq * lk


def test_visible_pairs_matches_demo():
    from kernelgen.apps.demo import visible_pairs as demo_pairs

    for lq, lk in [(16384, 16384), (1, 131072), (512, 6000), (4085, 4085)]:
        assert visible_pairs(lq, lk, True) == demo_pairs(lq, lk, True)


def test_flops_and_bytes():
    llama, mla, mistral = PRESETS["llama3-8b"], PRESETS["mla"], PRESETS["mistral-7b"]
    # dense causal 1 x 32 x 16384, d 128: 2.20e12 FLOPs (docs/dev/perf-log.md)
    dense = ModelPreset("d", 32, 32, 128, 128)
    assert attention_flops([16384], [16384], dense) == 4 * 32 * 128 * (16384 * 16385 // 2)
    assert prefill_bytes([16384], [16384], dense) == 4 * 16384 * 32 * 128 * 2
    assert attention_flops([10], [10], mla) == 2 * 128 * (192 + 128) * 55
    # decode: K+V read; a window caps the keys read
    assert decode_bytes([1000, 10], llama) == 1010 * 8 * 256 * 2
    assert decode_bytes([10000, 10], mistral) == (4096 + 10) * 8 * 256 * 2
    assert attention_flops([1], [10000], mistral) == 4 * 32 * 128 * 4096
    # prefill: a window caps the keys read (a 2048-token chunk at the end of 16k keys reads its own
    # keys and the window before it); without the causal mask, or without a window, every key
    per_token = 8 * 256 * 2
    assert prefill_bytes([2048], [16384], mistral) == 2048 * 32 * 256 * 2 + (2048 + 4095) * per_token
    assert prefill_bytes([2048], [16384], mistral, causal=False) == 2048 * 32 * 256 * 2 + 16384 * per_token
    assert prefill_bytes([2048], [16384], llama) == 2048 * 32 * 256 * 2 + 16384 * per_token
    assert prefill_bytes([16384, 0], [16384, 5], mistral) == 16384 * 32 * 256 * 2 + 16384 * per_token


# ------------------------------------------------------------------------------ report arithmetic
def test_rates_fractions_ratios():
    assert report.rate(2e12, 1e6) == pytest.approx(2.0)
    assert report.rate(None, 5) is None and report.rate(5, 0) is None
    assert report.roof_fraction(400.0, "tflops", ROOFS) == pytest.approx(0.5)
    assert report.roof_fraction(3.0, "tbps", ROOFS) == pytest.approx(0.75)
    assert report.roof_fraction(3.0, None, ROOFS) is None and report.roof_fraction(3.0, "tbps", None) is None
    assert report.ratios(100.0, {"a": 150.0, "b": 50.0}) == {"a": pytest.approx(1.5), "b": pytest.approx(0.5)}
    assert report.ratios(None, {"a": 1.0}) == {}


def _synthetic() -> list:
    es = [
        {"name": "prefill_dense_causal_h128_s16k", "suite": "prefill", "model": None, "us": 7000.0,
         "metric": "tflops", "flops": 2.2e12, "bytes": 5.37e8,
         "peers": {"torch_fa2": 6436.0, "cudnn_sdpa": 3325.0, "fa3": 3000.0, "fa4": 3100.0},
         "first_call_s": {"torch_fa2": 0.2, "cudnn_sdpa": 0.5, "fa3": 0.4, "fa4": 14.0},
         "unavailable": {"mem_efficient_sdpa": "RuntimeError: no kernel", "kernelgen_sm90a": "ValueError: the Hopper (sm_90a) path does not support this call: soft-cap"},
         "max_diff": {"torch_fa2": 0.004, "cudnn_sdpa": 0.5}, "ref_max": {"torch_fa2": 0.9, "cudnn_sdpa": 0.9}},
        {"name": "decode_trace_b128_paged16", "suite": "decode", "model": "llama3-8b", "us": 1900.0, "metric": "tbps",
         "flops": 9.9e11 / 1000, "bytes": 7.8e9,
         "peers": {"torch_fa2_varlen": 5700.0, "fa3_unpaged": 2000.0, "fa4": 2400.0, "kernelgen_sm80": 1500.0},
         "first_call_s": {"torch_fa2_varlen": 0.1, "fa3_unpaged": 0.3, "fa4": 9.0},
         "unavailable": {"torch_fa2": peers.VARLEN_SDPA_REASON}, "max_diff": {"torch_fa2_varlen": 0.001},
         "ref_max": {"torch_fa2_varlen": 0.3}},
        {"name": "decode_long_b8_128k_mla", "suite": "decode", "model": "mla", "us": None, "peers": {},
         "unavailable": {}, "skipped": "KV cache of 86 GB exceeds the suite's 32 GB budget"},
        {"name": "scheduler_b8", "suite": "scheduler", "model": "llama3-8b", "us": 3.3, "metric": None,
         "peers": {"kernelgen_aos": 3.5, "kernelgen_nosort": 2.1}, "unavailable": {}},
        {"name": "compile_cold_variant", "suite": "compile", "model": None, "us": 4.0e6, "peers": {}, "unavailable": {}},
        {"name": "compile_warm_load", "suite": "compile", "model": None, "us": 45e3, "peers": {}, "unavailable": {}},
        {"name": "overhead_decode_call", "suite": "overhead", "model": "llama3-8b", "us": 12.0, "peers": {},
         "unavailable": {}},
        {"name": "mixed_trace", "suite": "mixed", "model": "llama3-8b", "us": None, "peers": {}, "unavailable": {},
         "error": "RuntimeError: boom"},
    ]
    return [report.finalize(e, ROOFS) for e in es]


def test_finalize():
    es = {e["name"]: e for e in _synthetic()}
    p = es["prefill_dense_causal_h128_s16k"]
    assert p["tflops"] == pytest.approx(2.2e12 / 7000e-6 / 1e12) and p["tbps"] is None
    assert p["roof_fraction"] == pytest.approx(p["tflops"] / 800.0)
    assert p["ratios"]["torch_fa2"] == pytest.approx(6436 / 7000)
    assert p["arithmetic_intensity"] == pytest.approx(2.2e12 / 5.37e8)
    d = es["decode_trace_b128_paged16"]
    assert d["tbps"] == pytest.approx(7.8e9 / 1900e-6 / 1e12) and d["tflops"] is None
    assert d["roof_fraction"] == pytest.approx(d["tbps"] / 4.0)
    s = es["scheduler_b8"]
    assert s["tflops"] is None and s["tbps"] is None and s["roof_fraction"] is None
    assert s["ratios"]["kernelgen_nosort"] == pytest.approx(2.1 / 3.3)


def test_json_report_shape():
    rep = report.build_report(_synthetic(), ROOFS, "NVIDIA H200", {"suites": ["all"]}, commit="abc", date="2026-01-01")
    json.dumps(rep)  # serialisable
    for key in ("commit", "date", "device", "tests", "checks", "benchmarks"):
        assert key in rep
    assert (rep["commit"], rep["date"], rep["device"]) == ("abc", "2026-01-01", "NVIDIA H200")
    names = [b["name"] for b in rep["benchmarks"]]
    assert "decode_long_b8_128k_mla" not in names and "mixed_trace" not in names
    assert rep["skipped"] == {"decode_long_b8_128k_mla": "KV cache of 86 GB exceeds the suite's 32 GB budget"}
    assert rep["errors"] == {"mixed_trace": "RuntimeError: boom"}
    for b in rep["benchmarks"]:
        assert {"name", "us", "tflops", "tbps", "peers"} <= set(b)
        assert isinstance(b["us"], float) and all(isinstance(v, float) for v in b["peers"].values())
    assert rep["unavailable_peers"]["decode_trace_b128_paged16"] == {"torch_fa2": peers.VARLEN_SDPA_REASON}
    assert rep["roofs"] == ROOFS and rep["settings"] == {"suites": ["all"]}
    c = rep["checks"]
    assert c["decode_trace_b128_paged16_agrees_with_peers"] is True
    assert c["prefill_dense_causal_h128_s16k_agrees_with_peers"] is False  # cudnn 0.5 off
    assert c["goal_compile_cold_le_15s"] is True and c["goal_compile_warm_load_le_30ms"] is False
    assert c["goal_overhead_decode_call_le_15us"] is True
    # what tools/gpu_report.py reads from a bench JSON
    for b in rep["benchmarks"]:
        " ".join(f"{p} {u:.0f} ({u / b['us']:.2f}x)" for p, u in (b.get("peers") or {}).items())
        f"{b['us']:10.1f}"


def test_markdown_tables():
    text = report.format_report(_synthetic(), ROOFS, "NVIDIA H200")
    assert "## kernelgen bench on NVIDIA H200" in text and "copy 4.00 TB/s" in text
    assert text.index("### prefill") < text.index("### decode") < text.index("### scheduler")
    assert ("| name | µs | TFLOP/s or TB/s | of roof | vs best peer | vs torch_fa2 | vs cudnn_sdpa | vs fa3 | vs fa4 |"
            in text)
    row = next(ln for ln in text.splitlines() if ln.startswith("| prefill_dense_causal_h128_s16k "))
    assert "7000.0" in row and "314 TFLOP/s" in row and "39%" in row and "0.92x" in row and "0.47x" in row
    assert "| 0.43x fa3 |" in row  # the fastest other implementation: fa3 at 3000 us
    row = next(ln for ln in text.splitlines() if ln.startswith("| decode_trace_b128_paged16 "))
    assert "| 1.05x fa3_unpaged |" in row  # kernelgen_sm80 (1500 us) is kernelgen itself, not a peer
    assert "### first calls" in text and "| fa4 | 2 | 11.50 | 14.00 (prefill_dense_causal_h128_s16k) |" in text
    assert "cold compile of one attention variant (new process, empty cache): 4.00 s" in text
    assert "n/a" in row
    assert "mem_efficient_sdpa (prefill_dense_causal_h128_s16k): RuntimeError: no kernel" in text
    assert "| decode_long_b8_128k_mla | skipped: KV cache" in text
    assert "| mixed_trace | error: RuntimeError: boom" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| scheduler_b8 "))
    assert "3.30" in row and "1.06x" in row and "0.64x" in row
    assert report.suite_table("overhead", []) == ""


def test_from_json_reprints_and_replots(tmp_path, capsys):
    """`kernelgen bench --from-json` re-prints a saved report's tables (and plots) without a GPU."""
    rep = report.build_report(_synthetic(), ROOFS, "NVIDIA H200", commit="abc")
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(rep))
    back = report.entries_from_report(json.loads(path.read_text()))
    assert {e["name"] for e in back} == {e["name"] for e in _synthetic()}
    argv = ["bench", "--from-json", str(path)]
    if importlib.util.find_spec("matplotlib") is not None:
        argv += ["--plots", str(tmp_path / "pl")]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| prefill_dense_causal_h128_s16k | 7000.0 | 314 TFLOP/s | 39% |" in out
    assert "| decode_long_b8_128k_mla | skipped: KV cache" in out and "| mixed_trace | error: RuntimeError" in out
    if "--plots" in argv:
        assert (tmp_path / "pl" / "roofline.png").exists() and (tmp_path / "pl" / "decode.png").exists()


def test_from_json_refuses_other_reports(tmp_path, capsys):
    """A JSON without bench entries (none, or only names no suite uses) is a usage error, not an
    empty table."""
    # (valid JSON of other shapes too: a review saw AttributeError / KeyError tracebacks, exit 1)
    for name, rep in (("other.json", {"benchmarks": [{"name": "demo", "us": 1.0}]}), ("empty.json", {}),
                      ("list.json", [1, 2]), ("null.json", None), ("noname.json", {"benchmarks": [{"suite": "prefill"}]}),
                      ("strs.json", {"benchmarks": ["prefill"]}), ("notlist.json", {"benchmarks": {"name": "x"}})):
        path = tmp_path / name
        path.write_text(json.dumps(rep))
        assert cli.main(["bench", "--from-json", str(path)]) == 2
        assert "is neither a `kernelgen bench --json` report nor a tools/gpu_report.py" in capsys.readouterr().err
    bad = tmp_path / "notes.md"
    bad.write_text("# not a report\n")
    assert cli.main(["bench", "--from-json", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"kernelgen bench: error: --from-json {bad} is not JSON")
    assert cli.main(["bench", "--from-json", str(tmp_path / "none.json")]) == 2   # (named the flag: a review)
    assert capsys.readouterr().err == f"kernelgen bench: error: --from-json {tmp_path / 'none.json'}: no such file\n"


def test_bench_refuses_a_negative_budget_and_plots_without_matplotlib(tmp_path, capsys, monkeypatch):
    """``--budget -1`` was taken as "no limit"; ``--plots`` without matplotlib measured (or printed)
    everything, then drew nothing: both are usage errors before anything runs (a new user's finds)."""
    from kernelgen.apps import demo
    from kernelgen.apps.bench import plots, runner

    with pytest.raises(SystemExit) as ei:
        cli.main(["bench", "--budget", "-1"])
    assert ei.value.code == 2 and "argument --budget: must be a finite number >= 0" in capsys.readouterr().err
    monkeypatch.setattr(plots, "available", lambda: False)
    monkeypatch.setattr(demo, "has_cuda_gpu", lambda: True)
    monkeypatch.setattr(runner, "main_args", lambda args: pytest.fail("ran without matplotlib for --plots"))
    assert cli.main(["bench", "--quick", "--plots", str(tmp_path / "pl")]) == 2
    assert capsys.readouterr().err == 'kernelgen bench: error: --plots needs matplotlib (pip install -e ".[plots]" or pip install matplotlib)\n'


def test_from_json_reads_the_committed_gpu_report_and_prints_its_commit(capsys):
    """docs/benchmarks/h200.json (tools/gpu_report.py's format, which embeds the bench's entries;
    the README's latest report) re-prints with its commit and date first, and no peer reason cut
    mid-word in the "could not run" notes."""
    path = REPO / "docs" / "benchmarks" / "h200.json"
    rep = json.loads(path.read_text())
    assert cli.main(["bench", "--from-json", str(path)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"Saved report: commit {rep['commit']}, date {rep['date']}, device {rep['device']}")
    us = next(b["us"] for b in rep["benchmarks"] if b["name"] == "prefill_dense_causal_h128_s16k")
    assert "### prefill" in out and "### decode" in out and f"| prefill_dense_causal_h128_s16k | {us:.1f} |" in out
    assert "| varlen_trace_prefill_gqa |" not in out  # an alias of prefill_varlen_trace, not repeated
    notes = [ln for ln in out.splitlines() if ln.startswith("- n/a ")]
    reasons = {" ".join(str(w).split()) for b in rep["benchmarks"] for w in (b.get("unavailable") or {}).values()}
    reasons |= {" ".join(str(w).split()) for d in (rep.get("extra", {}).get("unavailable_peers") or {}).values()
                for w in d.values()}
    assert notes and all(any(ln.endswith(report.full_reason(r)) for r in reasons) for ln in notes)
    # a reason an older report cut mid-word at 400 characters ends at its last whole word, marked
    old_cut = "x" * 380 + " Query.sizes(): [4, 32] instead. To bro"
    assert report.full_reason(old_cut).endswith("instead. To…")
    # commit and date "unknown" where a report has none
    assert report.report_header({"device": "X"}) == ("Saved report: commit unknown, date unknown, device X "
                                                     "(measured then, not now)")


def test_reasons_are_cut_at_word_boundaries():
    assert peers.clip("short", 10) == "short"
    text = "Query.sizes(): [4, 32] instead. To broadcast the inputs use expand"
    cut = peers.clip(text, 40)
    assert len(cut) <= 40 and cut.endswith("…") and text.startswith(cut[:-1]) and cut[-2] != " "
    assert text[len(cut) - 1] == " "  # the cut falls between words
    r = peers.reason(RuntimeError("word " * 200))
    assert len(r) <= 400 and r.endswith("word…")
    assert report.full_reason("x" * 10) == "x" * 10


def test_suite_of_names_every_registry_entry():
    defs = suites.registry(["all"], resolve_models(["all"]))
    assert all(report.suite_of(d.name) == d.suite for d in defs)
    assert report.suite_of("demo_azure_conv_prefill") == "prefill" and report.suite_of("demo") is None


# --------------------------------------------------------------------------------------- plots
@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_plots_from_synthetic_results(tmp_path):
    written = plots.write_plots(_synthetic(), ROOFS, tmp_path / "plots", title="NVIDIA H200, commit abc")
    names = sorted(p.name for p in written)
    assert names == sorted(["prefill.png", "decode.png", "scheduler.png", "compile.png", "overhead.png",
                            "peers.png", "roofline.png"])
    for p in written:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert not plots.suite_bars(_synthetic(), "mixed", tmp_path / "m.png")  # nothing timed there
    assert plots.roofline(_synthetic(), None, tmp_path / "r.png")  # without roofs too


def _rgb(hex_color):
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


def test_plot_colours_are_distinct_and_peers_hatched():
    """Every implementation a plot can show has its own colour (no two closer than 40 in RGB:
    kernelgen's variants used to be four near-identical blues); kernelgen's variants are solid,
    peers hatched."""
    names = list(plots.COLORS) + ["some_new_peer", "another_peer"]
    st = plots.styles(names)
    colours = [st[n]["color"] for n in names]
    assert len(set(colours)) == len(colours)
    for i, a in enumerate(colours):
        for b in colours[i + 1:]:
            assert sum((x - y) ** 2 for x, y in zip(_rgb(a), _rgb(b))) ** 0.5 >= 40, (a, b)
    family = [n for n in names if n.startswith("kernelgen")] + ["serial", "two_streams"]
    assert len(family) == 7 and all(st[n]["hatch"] is None for n in family)
    assert all(st[n]["hatch"] for n in names if n not in family)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_bars_drawn_with_the_assigned_colours_and_titles_name_device_and_commit(monkeypatch, tmp_path):
    from matplotlib.colors import to_hex

    figs = []
    real = plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *a, **k: figs.append(real(*a, **k)) or figs[-1])
    es = _synthetic()
    assert plots.suite_bars(es, "decode", tmp_path / "d.png", title="NVIDIA H200, commit abc")
    (fig, axes), = figs
    by_label = {}
    for ax in axes:
        for c in ax.containers:
            by_label[c.get_label()] = c.patches[0]
    assert set(by_label) == {"kernelgen", "torch_fa2_varlen", "fa3_unpaged", "fa4", "kernelgen_sm80"}
    for name, patch in by_label.items():
        assert to_hex(patch.get_facecolor()) == plots.COLORS[name]
        assert bool(patch.get_hatch()) == (not plots.is_kernelgen(name))
    assert "NVIDIA H200, commit abc" in figs[0][0]._suptitle.get_text()
    renderer = fig.canvas.get_renderer()  # the title clear of the legend outside the axes
    assert not fig._suptitle.get_window_extent(renderer).overlaps(fig.legends[0].get_window_extent(renderer))
    fig = plots.roofline_figure(es, ROOFS, title="NVIDIA H200, commit abc")
    assert "NVIDIA H200, commit abc" in fig.axes[0].get_title()
    assert plots.peer_bars(es, tmp_path / "p.png", title="NVIDIA H200, commit abc")
    assert "NVIDIA H200, commit abc" in figs[-1][0]._suptitle.get_text()


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_roofline_labels_do_not_overlap():
    """Eight entries at nearly the same point (the labels used to be drawn on top of each other)."""
    es = []
    for i in range(8):
        es.append(report.finalize({"name": f"prefill_entry_with_a_long_name_{i}", "suite": "prefill", "us": 1000.0 + i,
                                   "metric": "tflops", "flops": 5e11 * (1 + 0.01 * i), "bytes": 1e9,
                                   "peers": {"fa3": 900.0}, "unavailable": {}}, ROOFS))
    fig = plots.roofline_figure(es, ROOFS)
    for dpi in (fig.dpi, 120):  # as drawn, and as roofline() saves it
        fig.set_dpi(dpi)
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        from matplotlib.text import Text  # the label's text box, without its leader line
        boxes = [Text.get_window_extent(t, r) for t in fig.axes[0].texts]
        assert len(boxes) == 8
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not a.overlaps(b), (dpi, a, b)


def test_place_labels_keeps_boxes_apart():
    pts = [(100.0, 100.0)] * 5 + [(300.0, 50.0)]
    boxes = plots.place_labels(pts, [(60.0, 8.0)] * 6, bounds=(0, 0, 400, 300), taken=[(0, 0, 40, 40)])
    for i, a in enumerate(boxes):
        assert not plots._overlaps(a, (0, 0, 40, 40), 0)
        for b in boxes[i + 1:]:
            assert not plots._overlaps(a, b, 0)


# ------------------------------------------------------------------------------------ registry
def test_registry_covers_required_entries():
    defs = suites.registry(["all"], resolve_models([DEFAULT_MODEL]))
    names = [d.name for d in defs]
    assert len(names) == len(set(names)) >= 20
    assert REQUIRED <= set(names)
    assert {d.suite for d in defs} == set(SUITES)
    every = suites.registry(["all"], resolve_models(["all"]))
    names = [d.name for d in every]
    assert len(names) == len(set(names))
    for m in PRESETS:
        for base in ("prefill_varlen_trace",) + suites.DECODE_SHAPES:
            assert entry_name(base, m) in names
    assert [d.name for d in suites.registry(["compile"], [])] == ["compile_cold_variant", "compile_cold_call", "compile_warm_load",
                                                                  "dispatch_in_memory", "variant_compile_first_call"]
    sub = suites.registry(["scheduler", "overhead"], resolve_models(["mla"]))
    assert {d.suite for d in sub} == {"scheduler", "overhead"}
    assert "scheduler_b8_mla" in [d.name for d in sub]
    with pytest.raises(ValueError):
        suites.registry(["nope"], [])


def test_registry_specs_derive_and_are_valid():
    """Every kernel the full run pre-compiles can be derived for the H200 (sm_90a, 132 SMs)."""
    from kernelgen.kernels.spec import AttentionSpec

    settings = suites.Settings()
    specs = []
    for d in suites.registry(["all"], resolve_models(["all"])):
        if d.specs is not None:
            specs += d.specs(settings, "sm_90a", 132)
    specs = list(dict.fromkeys(specs))
    attn = [s for s in specs if isinstance(s, AttentionSpec)]
    assert any(s.paged and s.split for s in attn)  # decode
    assert any(s.head_dim == 192 and s.head_dim_v == 128 for s in attn)  # mla
    assert any(s.softcap and s.head_dim == 256 for s in attn)  # gemma2
    assert any(s.mask == "local" for s in attn)  # mistral
    assert {s.layout for s in attn} == {"soa", "aos"}


def test_flex_policy():
    s = suites.Settings(flex="some")
    assert s.flex_builder("B", "some") == "B"
    assert "--flex all" in s.flex_builder("B", "all")
    assert suites.Settings(flex="all").flex_builder("B", "all") == "B"
    assert "off" in suites.Settings(flex="off").flex_builder("B", "some")
    assert "time budget" in suites.Settings(flex="all", flex_deadline=0.0).flex_builder("B", "some")


def test_cache_budget_skip():
    suites.check_cache_budget(1000, PRESETS["llama3-8b"])
    with pytest.raises(suites.Skip, match="budget"):
        suites.check_cache_budget(1_889_536, PRESETS["mla"])  # decode_trace_b128 for MLA: 155 GB


def test_trace_shapes():
    s = suites.Settings()
    assert len(suites.decode_contexts(s, "decode_trace_b128_paged16")) == 128
    assert len(suites.decode_contexts(s, "decode_trace_b32_paged16")) == 32
    assert suites.decode_contexts(s, "decode_long_b8_128k") == [131072] * 8
    # issue 23's 128 decodes at the Azure conversation trace's contexts: prompt + half the reply
    from kernelgen.apps import traces
    rows = suites.load_rows(None, traces.SAMPLE_NAME)[:128]
    azure = suites.decode_contexts(s, suites.AZURE_DECODE_SHAPE)
    assert azure == [c + g // 2 for c, g in rows] and azure[0] == 374 + 44 // 2
    names = [e.name for e in suites.registry(["decode"], [PRESETS["llama3-8b"], PRESETS["qwen2.5-7b"]])]
    assert "decode_azure_b128_paged16" in names and not any(n.startswith("decode_azure") and n.endswith("qwen2.5-7b")
                                                            for n in names)
    lens = suites.prefill_lengths(s)
    assert sum(lens) <= 32768 and max(lens) <= 8192
    pre_q, pre_k, dec_k = suites.mixed_lengths(s)
    assert pre_q == [512, 2048, 4096] and len(dec_k) == 192 and all(k >= q for q, k in zip(pre_q, pre_k))
    assert suites.mixed_lengths(s, "mixed_trace") == (pre_q, pre_k, dec_k)


def test_the_mixed_batches_come_from_the_traces():
    """Issue 23's two more mixed batches: few long chunks with many decodes (2 chunks of 4096
    tokens appended to Mooncake contexts, 256 decodes) and many short chunks with few decodes (8 whole
    Azure-conversation prompts capped at 512 tokens, 32 decodes); each is a mixed-suite entry."""
    from kernelgen.apps import traces

    s = suites.Settings()
    ctx = [min(max(1, int(r[0])), 32768) for r in suites.load_rows(None, "mooncake_conv_sample.csv")]
    pre_q, pre_k, dec_k = suites.mixed_lengths(s, "mixed_long_chunks")
    assert pre_q == [4096, 4096] and pre_k == [ctx[220] + 4096, ctx[221] + 4096] and dec_k == ctx[600:856]
    pre_q, pre_k, dec_k = suites.mixed_lengths(s, "mixed_short_chunks")
    prompts = [int(r[0]) for r in suites.load_rows(None, traces.SAMPLE_NAME)]
    assert pre_q == pre_k == [min(p, 512) for p in prompts[40:48]] and 512 in pre_q and min(pre_q) < 200
    assert dec_k == ctx[900:932]
    names = [e.name for e in suites.registry(["mixed"], [PRESETS["llama3-8b"]])]
    assert names == ["mixed_trace", "mixed_trace_fp8", "mixed_trace_fp8_qq", "mixed_long_chunks", "mixed_short_chunks"]
    with pytest.raises(ValueError, match="unknown mixed batch 'mixed_x'"):
        suites.mixed_lengths(s, "mixed_x")


# ------------------------------------------------------------------------------- runner / peers
def test_run_entries_records_failures_and_budget():
    def ok(st):
        return {"name": "a", "suite": "scheduler", "us": 10.0, "peers": {"p": 20.0}, "unavailable": {}}

    def skip(st):
        raise suites.Skip("too big")

    def boom(st):
        raise RuntimeError("kaput")
    defs = [suites.EntryDef("a", "scheduler", None, ok), suites.EntryDef("b", "decode", None, skip),
            suites.EntryDef("c", "decode", None, boom)]
    lines = []
    out = runner.run_entries(defs, suites.Settings(roofs=ROOFS), log=lines.append)
    assert [e["name"] for e in out] == ["a", "b", "c"]
    assert out[0]["ratios"] == {"p": 2.0}
    assert out[1]["skipped"] == "too big" and out[1]["us"] is None
    assert out[2]["error"] == "RuntimeError: kaput"
    assert len(lines) == 3 and "ERROR" in lines[2]
    late = runner.run_entries(defs, suites.Settings(), budget_s=1e-9, start=0.0, log=lambda _m: None)
    assert all("time budget" in e["skipped"] for e in late)
    ordered = runner.order_for_report(out)
    assert [e["suite"] for e in ordered] == ["decode", "decode", "scheduler"]


def test_peer_harness_reports_every_failure():
    import torch

    ref = torch.ones(4, 2, 8)

    def bad():
        raise peers.Unavailable("cannot do this shape")

    def broken_call():
        def fn():
            raise RuntimeError("kernel exploded")
        return peers.Peer(fn)
    e = {"name": "x"}
    peers.measure(e, {
        "good": lambda: peers.Peer(lambda: ref + 0.001, lambda r: r),
        "reason": "not applicable",
        "bad": bad,
        "broken": broken_call,
    }, timer=lambda fn: 42.0, reference=ref)
    assert e["peers"] == {"good": 42.0}
    assert e["unavailable"] == {"reason": "not applicable", "bad": "cannot do this shape",
                                "broken": "RuntimeError: kernel exploded"}
    assert e["max_diff"]["good"] == pytest.approx(0.001, abs=1e-6)
    assert report.agrees(e) is True


@pytest.mark.skipif(importlib.util.find_spec("torch.nn.attention.flex_attention") is None, reason="no FlexAttention")
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_document_mask_matches_reference(monkeypatch):
    """The FlexAttention peer's document mask (bottom-right causal per request, window, soft-cap,
    GQA, head_dim_v != head_dim), run eagerly on the CPU, against the float64 reference."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    from kernelgen.apps.reference import attention_reference

    monkeypatch.setattr(peers, "_flex_compiled", flex_attention)
    torch.manual_seed(0)
    cases = [([37, 100, 5], [37, 100, 5], 4, 2, 64, 64, 0.0, -1),
             ([1] * 5, [300, 17, 129, 1, 256], 8, 2, 64, 64, 0.0, -1),
             ([3, 64, 1], [200, 64, 90], 4, 4, 64, 32, 0.0, -1),
             ([130, 1, 77], [130, 400, 300], 4, 1, 64, 64, 5.0, 31)]
    for lq, lk, hq, hkv, d, dv, cap, wl in cases:
        q, k, v = torch.randn(sum(lq), hq, d), torch.randn(sum(lk), hkv, d), torch.randn(sum(lk), hkv, dv)
        peer = peers.flex_document(q, k, v, lq, lk, True, softcap=cap, window_left=wl)()
        out = peer.output(peer.fn())
        cu_q = torch.tensor([0] + list(torch.cumsum(torch.tensor(lq), 0)), dtype=torch.int32)
        cu_k = torch.tensor([0] + list(torch.cumsum(torch.tensor(lk), 0)), dtype=torch.int32)
        ref, _ = attention_reference(q.double(), k.double(), v.double(), cu_q, cu_k, causal=True, softcap=cap,
                                     window_size=(wl, 0) if wl >= 0 else (-1, -1))
        assert out.shape == ref.shape
        assert float((out.double() - ref).abs().max()) < 1e-4


def test_sdpa_decode_views_match_reference():
    """Uniform decode batches viewed as dense SDPA inputs without a copy (CPU flash backend)."""
    import torch

    from kernelgen.apps.reference import attention_reference

    m = ModelPreset("t", 8, 2, 64, 64)
    b, s = 3, 50
    q, k, v = torch.randn(b, 8, 64), torch.randn(b * s, 2, 64), torch.randn(b * s, 2, 64)
    builders = suites.decode_sdpa_builders(q, k, v, [s] * b, m)
    assert set(builders) == set(peers.SDPA_PEERS)
    peer = builders["torch_fa2"]()
    out = peer.output(peer.fn())
    cu_q = torch.arange(b + 1, dtype=torch.int32)
    ref, _ = attention_reference(q.double(), k.double(), v.double(), cu_q, cu_q * s, causal=True)
    assert float((out.double() - ref).abs().max()) < 1e-4
    assert suites.decode_sdpa_builders(q, k, v, [s, s, s - 1], m)["cudnn_sdpa"] == peers.VARLEN_SDPA_REASON
    mistral = PRESETS["mistral-7b"]
    with pytest.raises(peers.Unavailable, match="window"):
        peers.sdpa("torch_fa2", q, k, v, False, window_left=mistral.window_left)()
    with pytest.raises(peers.Unavailable, match="soft-cap"):
        peers.fa2_varlen(q, k, v, None, None, 1, 1, True, softcap=50.0)()


def test_cold_compile_in_fresh_process(tmp_path):
    """compile_cold_variant's subprocess (NVRTC needs no GPU): a fresh cache compiles, µs reported."""
    r = suites.cold_compile("sm_80", tmp_path / "cold")
    assert r["compiled"] is True and r["us"] > 0 and r["us_get"] > 0 and r["us"] >= r["us_get"]
    assert r["resources"].get("registers")
    assert any(p.suffix == ".cubin" for p in (tmp_path / "cold").iterdir())
    assert math.isfinite(r["us_import"])


@pytest.mark.parametrize("env,expected", [(None, True), ("0", False), ("1", True)])
def test_overhead_entry_reports_whether_the_graph_launch_was_on(monkeypatch, env, expected):
    """The overhead entries' ``graph_launch`` flag says whether the measured calls went out as one
    CUDA graph launch: false while KERNELGEN_GRAPH_LAUNCH=0 (the A/B of docs/dev/perf-log.md)."""
    import torch

    from kernelgen.jit import runtime
    from kernelgen.launch import graph_launch

    if env is None:
        monkeypatch.delenv("KERNELGEN_GRAPH_LAUNCH", raising=False)
    else:
        monkeypatch.setenv("KERNELGEN_GRAPH_LAUNCH", env)
    m = PRESETS[DEFAULT_MODEL]

    class CpuTorch:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*shape, device=None, dtype=None):
            return torch.empty(*shape, dtype=dtype)

    b = 4
    q = torch.zeros(b, m.num_heads_q, m.head_dim)
    monkeypatch.setattr(suites, "_torch", lambda: CpuTorch())
    monkeypatch.setattr(suites, "_overhead_inputs", lambda settings, model: ([64] * b, (q, q, q, q, q, q)))
    monkeypatch.setattr(suites, "_variants", lambda *a, **k: ("scheduler", "attention", "combine"))
    monkeypatch.setattr(runtime, "device_arch", lambda dev, allow_untested=False: "sm90")
    monkeypatch.setattr(runtime, "device_properties", lambda dev: {"num_sms": 132})
    monkeypatch.setattr(graph_launch, "driver", lambda: object())     # the driver has the graph API
    monkeypatch.setattr(suites.measure, "host_time_us", lambda fn, samples: 1.0)
    monkeypatch.setattr(suites.Settings, "time", lambda self, fn: 2.0)
    e = suites.overhead_entry(suites.Settings(quick=True), "overhead_decode_call", m)
    assert e["graph_launch"] is expected and e["launches"] == 3 and e["us"] == 1.0


def test_the_non_causal_cost_entry_runs_without_the_presets_window(monkeypatch):
    """A preset's window is causal, window_size (w - 1, 0): the non-causal ``*_prefill_s4k_b4`` entry
    (its FLOPs and bytes count every pair) must not pass it, or the kernel would cut every key right
    of the diagonal and be credited twice its work; the causal entry keeps it."""
    import torch

    from kernelgen.front import api

    class CpuTorch:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def Generator(device=None):
            return torch.Generator()

        @staticmethod
        def randn(*shape, generator=None, device=None, dtype=None):
            return torch.empty(*shape, dtype=dtype)

        @staticmethod
        def tensor(x, dtype=None, device=None):
            return torch.tensor(x, dtype=dtype)

    seen = []
    monkeypatch.setattr(suites, "_torch", lambda: CpuTorch())
    monkeypatch.setattr(api, "varlen_attention", lambda *a, **kw: seen.append(kw))
    m = PRESETS["mistral-7b"]
    assert m.window_size == (4095, 0)
    for which, causal, window in (("fp8_prefill_s4k_b4", False, (-1, -1)), ("fp8_prefill_causal_s16k", True, (4095, 0))):
        make_call, e, rows, io = suites._cost_inputs(suites.Settings(quick=True), which, m, "x")
        make_call(None)()
        assert (seen[-1]["causal"], seen[-1]["window_size"]) == (causal, window)
        assert io.get("causal", True) is causal


# ------------------------------------------------------------------ interleaved switch comparisons
def test_time_interleaved_rotates_and_takes_median_of_medians(monkeypatch):
    """Each configuration is captured once (launches calls a replay), every round times all of them
    in an order rotated by one, and the result is the median of the round medians per call."""
    from kernelgen.apps.bench import measure

    calls, graphs, order = {"a": 0, "b": 0, "c": 0}, {}, []

    class Graph:
        def __init__(self):
            self.replays = 0

        def replay(self):
            self.replays += 1

    def fake_capture(fn):
        before = dict(calls)
        fn()
        name = next(k for k in calls if calls[k] != before[k])
        graphs[name] = Graph()
        return graphs[name]
    # round medians of a replay (4 launches) handed out in call order
    script = iter([40.0, 80.0, 120.0,   # round 0: a, b, c
                   84.0, 124.0, 44.0,   # round 1: b, c, a
                   128.0, 36.0, 76.0])  # round 2: c, a, b

    def fake_time_gpu(fn, repeat, warmup, flush):
        order.append(next(k for k, g in graphs.items() if g is fn.__self__))
        assert (repeat, warmup, flush) == (7, 0, True)
        return next(script)
    monkeypatch.setattr(measure, "capture_graph", fake_capture)
    monkeypatch.setattr(measure, "time_gpu", fake_time_gpu)
    fns = {k: (lambda k=k: calls.__setitem__(k, calls[k] + 1)) for k in calls}
    out = measure.time_interleaved(fns, rounds=3, repeat=7, warmup=2, flush=True, launches=4, warmup_ms=0)
    assert calls == {"a": 4, "b": 4, "c": 4}                   # one graph of 4 launches each
    assert [g.replays for g in graphs.values()] == [2, 2, 2]  # warm-up replays
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert out["a"] == {"us": 10.0, "rounds": [10.0, 11.0, 9.0]}
    assert out["b"] == {"us": 20.0, "rounds": [20.0, 21.0, 19.0]}
    assert out["c"] == {"us": 31.0, "rounds": [30.0, 31.0, 32.0]}
    with pytest.raises(ValueError):
        measure.time_interleaved({}, rounds=3)
    with pytest.raises(ValueError):
        measure.time_interleaved(fns, rounds=0)


def test_warm_up_runs_for_its_gpu_time_and_the_interleaved_graphs_each_warm(monkeypatch):
    """The warm-up's calls, then one timed call, then enough calls for min_ms of GPU time (capped
    at MAX_WARMUP_CALLS); time_interleaved warms each graph that way after its round-robin
    replays, and time_gpu's warmup=0 means none."""
    from kernelgen.apps.bench import measure

    n = []
    assert measure.warm_up(lambda: n.append(1), 3, 50.0, call_ms=lambda fn: (fn(), 0.4)[1]) == 3 + 1 + 124
    assert len(n) == 128                                      # 3 + 0.4 ms x 125 = 50 ms
    assert measure.warm_up(lambda: None, 3, 0.0, call_ms=lambda fn: 1 / 0) == 3   # no timed call
    assert measure.warm_up(lambda: None, 0, 50.0, call_ms=lambda fn: 1e-6) == 1 + measure.MAX_WARMUP_CALLS
    assert measure.warm_up(lambda: None, 1, 50.0, call_ms=lambda fn: 80.0) == 2   # one call covers it

    class Graph:
        def __init__(self):
            self.replays = 0

        def replay(self):
            self.replays += 1
    graphs = []
    monkeypatch.setattr(measure, "capture_graph", lambda fn: graphs.append(Graph()) or graphs[-1])
    monkeypatch.setattr(measure, "_call_ms", lambda fn: (fn(), 5.0)[1])
    monkeypatch.setattr(measure, "time_gpu", lambda fn, repeat, warmup, flush: 1.0)
    measure.time_interleaved({"a": lambda: None, "b": lambda: None}, rounds=1, repeat=1, warmup=2, warmup_ms=50.0)
    assert [g.replays for g in graphs] == [2 + 1 + 9, 2 + 1 + 9]  # 5 ms a replay: 10 replays = 50 ms


def test_time_interleaved_settles_each_configuration_before_each_timing(monkeypatch):
    """settle_ms > 0: every timing of a round comes right after untimed replays of the same graph
    for about settle_ms of GPU time (warm_up with no fixed calls), so a configuration is timed in
    its own steady state, not in the one its predecessor left; only graphs whose replay (timed
    once first) takes at least settle_min_replay_ms; 0 (the function's default) adds none; a
    negative or NaN settle_ms is refused.  The bench settles by default (Settings.settle_ms) and
    says so in its method line."""
    from kernelgen.apps.bench import measure

    events = []

    class Graph:
        def __init__(self, name):
            self.name = name

        def replay(self):
            events.append(("replay", self.name))
    made = iter("ab")
    monkeypatch.setattr(measure, "capture_graph", lambda fn: Graph(next(made)))
    monkeypatch.setattr(measure, "_call_ms", lambda fn: (fn(), 10.0)[1])

    def fake_time_gpu(fn, repeat, warmup, flush):
        events.append(("time", fn.__self__.name))
        return 1.0
    monkeypatch.setattr(measure, "time_gpu", fake_time_gpu)
    fns = {"a": lambda: None, "b": lambda: None}
    measure.time_interleaved(fns, rounds=2, repeat=1, warmup=0, settle_ms=40.0)
    # one replay each timed to decide (10 ms >= 0.5 ms); then before each timing one timed replay
    # and 3 more make the 40 ms
    settle = lambda n: [("replay", n)] * 4 + [("time", n)]   # noqa: E731
    assert events == [("replay", "a"), ("replay", "b")] + settle("a") + settle("b") + settle("b") + settle("a")
    timed = [("time", "a"), ("time", "b"), ("time", "b"), ("time", "a")]
    for kw in ({}, {"settle_ms": 40.0, "settle_min_replay_ms": 20.0}):   # none, or replays too short
        events.clear()
        made = iter("ab")
        measure.time_interleaved(fns, rounds=2, repeat=1, warmup=0, **kw)
        assert [e for e in events if e[0] == "time"] == timed
        assert len(events) == len(timed) + (2 if kw else 0), events
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="settle_ms"):
            measure.time_interleaved(fns, rounds=1, settle_ms=bad)
    from kernelgen.apps.bench.suites import Settings
    st = Settings()
    assert st.settle_ms == measure.SETTLE_MS == 150.0 and measure.SETTLE_MIN_REPLAY_MS == 0.5
    assert "untimed for 150 ms" in st.interleaved_method() and "at least 0.5 ms" in st.interleaved_method()
    assert "untimed" not in Settings(settle_ms=0.0).interleaved_method()
    # callers that format the bare method (benchmarks/experiments/mixed_sweep.py) need no settle field
    assert "rotated" in measure.INTERLEAVED_METHOD.format(launches=1, rounds=3, repeat=5,
                                                          flush=measure.FLUSH_METHOD["write"])
    # the method names the flush mode the timings used
    assert "by a 256 MB write" in st.interleaved_method()
    assert "by a 256 MB read" in Settings(flush="read").interleaved_method()
    assert "no L2 flush" in Settings(flush=False).interleaved_method()


def test_bench_cli_passes_settle_ms_and_refuses_bad_values(monkeypatch):
    """`kernelgen bench --settle-ms MS` reaches the run (default None: the runner's Settings take
    measure.SETTLE_MS); a negative, infinite or non-numeric value is an argparse error."""
    from kernelgen.apps import cli, demo
    from kernelgen.apps.bench import runner

    seen = {}
    monkeypatch.setattr(demo, "has_cuda_gpu", lambda: True)
    monkeypatch.setattr(runner, "run", lambda **kw: seen.update(kw) or 0)
    assert cli.main(["bench", "--settle-ms", "20"]) == 0 and seen["settle_ms"] == 20.0
    assert cli.main(["bench", "--settle-ms", "0"]) == 0 and seen["settle_ms"] == 0.0
    assert cli.main(["bench"]) == 0 and seen["settle_ms"] is None   # runner: measure.SETTLE_MS
    for bad in ("-1", "x", "inf"):
        with pytest.raises(SystemExit):
            cli.main(["bench", "--settle-ms", bad])


def test_switch_ratios_divide_by_the_interleaved_default():
    """Switch columns compare with the default call from the same interleaved measurement
    (switch_base_us), the other peers with the entry's time."""
    e = {"name": "decode_trace_b32_paged16", "suite": "decode", "us": 400.0, "metric": None,
         "peers": {"torch_fa2_varlen": 2000.0}, "unavailable": {}}
    times = {suites.SWITCH_BASE: {"us": 190.0, "rounds": [190.0, 191.0]},
             peers.KG_AOS: {"us": 199.5, "rounds": [199.0, 200.0]},
             peers.KG_NOSORT: {"us": 197.6, "rounds": [197.0, 198.0]}}
    suites.record_switches(e, times, "method text")
    assert e["switch_base_us"] == 190.0 and e["switch_method"] == "method text"
    assert e["peers"] == {"torch_fa2_varlen": 2000.0, peers.KG_AOS: 199.5, peers.KG_NOSORT: 197.6}
    assert e["switch_rounds_us"][peers.KG_NOSORT] == [197.0, 198.0]
    report.finalize(e, ROOFS)
    assert e["ratios"] == {"torch_fa2_varlen": pytest.approx(5.0), peers.KG_AOS: pytest.approx(1.05),
                           peers.KG_NOSORT: pytest.approx(1.04)}
    row = next(ln for ln in report.suite_table("decode", [e]).splitlines() if ln.startswith("| decode_trace"))
    assert "5.00x" in row and "1.05x" in row and "1.04x" in row
    # without an interleaved base (an old report) the switch ratio is against us, as before
    old = dict(e, switch_base_us=None)
    assert report.entry_ratios(old)[peers.KG_NOSORT] == pytest.approx(197.6 / 400.0)


def test_cold_call_compiles_every_kernel_of_a_first_call(tmp_path):
    """compile_cold_call's subprocess: the scheduler and the attention kernel of a first call, each
    compiled into the empty cache, with their own times."""
    r = suites.cold_compile_call("sm_80", tmp_path / "cold")
    names = [k["name"] for k in r["kernels"]]
    assert names == [s.name for s in suites.call_specs("sm_80")] and len(names) == 2
    assert names[0].startswith("sched") and all(k["compiled"] and k["us"] > 0 for k in r["kernels"])
    assert r["us"] >= sum(k["us"] for k in r["kernels"])
    assert len([p for p in (tmp_path / "cold").iterdir() if p.suffix == ".cubin"]) == 2


def test_sinks_entries_registered_in_their_suites():
    """The attention-sinks cost entries: the prefill one in ``prefill``, the decode one in ``decode``,
    once (first preset), each with derivable kernel specs."""
    defs = {d.name: d for d in suites.registry(["prefill", "decode"], resolve_models(["all"]))}
    assert defs["sinks_prefill_causal_s16k"].suite == "prefill"
    assert defs["sinks_decode_b128_paged16"].suite == "decode"
    assert not any(n.startswith("sinks_") and n not in ("sinks_prefill_causal_s16k", "sinks_decode_b128_paged16")
                   for n in defs)
    assert "sinks_decode_b128_paged16" not in [d.name for d in suites.registry(["prefill"], [])]
    for name in ("sinks_prefill_causal_s16k", "sinks_decode_b128_paged16"):
        assert defs[name].specs(suites.Settings(), "sm_90a", 132)


def test_gpt_oss_preset_and_its_layer_flavours():
    """gpt-oss (issue 25): 64 query / 8 KV heads, d 64, per-head sinks on every layer, a 128-token
    sliding window on every other layer.  The preset is the full-attention layer; its windowed
    layer is a derived preset (``gpt-oss-w128``, window_size (127, 0) with causal, sinks kept)."""
    p = PRESETS["gpt-oss"]
    assert (p.num_heads_q, p.num_heads_kv, p.head_dim, p.head_dim_v) == (64, 8, 64, 64)
    assert p.sinks and p.alt_window == 128 and p.window == 0 and p.window_size == (-1, -1)
    full, win = p.layer_flavours()
    assert full is p
    assert win.name == "gpt-oss-w128" and win.window == 128 and win.window_size == (127, 0) and win.sinks
    assert (win.num_heads_q, win.num_heads_kv, win.head_dim) == (64, 8, 64) and win.alt_window == 0
    assert "sinks" in p.describe() and "window 128 on alternate layers" in p.describe()
    assert [f.name for f in PRESETS["llama3-8b"].layer_flavours()] == ["llama3-8b"]
    with pytest.raises(ValueError):
        PRESETS["llama3-8b"].windowed_layer()
    assert [m.name for m in resolve_models(["gpt-oss"])] == ["gpt-oss"]
    assert "gpt-oss" in [m.name for m in resolve_models(["all"])]
    # the window caps the keys a decode of the windowed layer reads
    assert decode_bytes([1000], win) == 128 * p.kv_bytes_per_token
    assert visible_pairs(300, 300, True, win.window_left) == sum(min(r + 1, 128) for r in range(300))


def test_gpt_oss_entries_in_both_layer_flavours():
    """``--model gpt-oss`` runs the trace prefill and the 128-request decode for the full-attention
    and the window-128 layers, the other decode shapes for the full layer; the kernels they
    pre-compile include the sink variants (and the local mask of the windowed layer)."""
    from kernelgen.kernels.spec import AttentionSpec

    names = [d.name for d in suites.registry(["prefill", "decode"], resolve_models(["llama3-8b", "gpt-oss"]))]
    for n in ("prefill_varlen_trace_gpt-oss", "prefill_varlen_trace_gpt-oss-w128", "decode_trace_b128_paged16_gpt-oss",
              "decode_trace_b128_paged16_gpt-oss-w128", "decode_trace_b32_paged16_gpt-oss",
              "decode_long_b8_128k_gpt-oss"):
        assert n in names
    assert "decode_trace_b32_paged16_gpt-oss-w128" not in names and len(names) == len(set(names))
    defs = {d.name: d for d in suites.registry(["prefill", "decode"], resolve_models(["gpt-oss"]))}
    assert defs["prefill_varlen_trace_gpt-oss-w128"].model == "gpt-oss-w128"
    st = suites.Settings()
    win = [s for s in defs["prefill_varlen_trace_gpt-oss-w128"].specs(st, "sm_90a", 132) if isinstance(s, AttentionSpec)]
    assert any(s.sinks and s.mask == "local" and s.head_dim == 64 for s in win)
    dec = [s for s in defs["decode_trace_b128_paged16_gpt-oss"].specs(st, "sm_90a", 132) if isinstance(s, AttentionSpec)]
    assert any(s.sinks and s.paged for s in dec)
    # the presets without sinks pre-compile no sink kernels
    plain = suites.registry(["prefill"], resolve_models(["llama3-8b"]))
    specs = [s for d in plain if d.name == "prefill_varlen_trace" for s in d.specs(st, "sm_90a", 132)]
    assert specs and not any(getattr(s, "sinks", False) for s in specs)
    assert all(report.suite_of(n) == defs[n].suite for n in defs)


def test_gpt_oss_on_the_command_line():
    args = cli.build_parser().parse_args(["bench", "--model", "gpt-oss,llama3-8b"])
    assert args.model == ["gpt-oss", "llama3-8b"]
    assert cli.build_parser().parse_args(["bench", "--model", "all"]).model == ["all"]
    b = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "bench")[1]
    text = b.format_help()
    for name in PRESETS:
        assert name in text
    assert "gpt-oss" in (REPO / "docs" / "cli.md").read_text()


def test_alibi_and_variant_entries_registered_in_their_suites():
    """The ALiBi cost entries sit beside the sinks ones (prefill / decode, first preset, once); the
    user-variant entries are in prefill (the s16k pair) and compile (the first call); all carry
    derivable kernel specs but the first-call one (its variant is new by design)."""
    from kernelgen.kernels.spec import AttentionSpec

    defs = {d.name: d for d in suites.registry(["all"], resolve_models(["all"]))}
    assert defs["alibi_prefill_causal_s16k"].suite == "prefill" and defs["alibi_decode_b128_paged16"].suite == "decode"
    assert defs["variant_alibi_prefill_causal_s16k"].suite == "prefill"
    assert defs["variant_alibi_float_prefill_causal_s16k"].suite == "prefill"
    assert defs["variant_softcap_prefill_causal_s16k"].suite == "prefill"
    assert defs["variant_softcap_approx_prefill_causal_s16k"].suite == "prefill"
    assert "tanhf(" in suites.VARIANT_SOFTCAP_APPROX_SCORE_MOD and "kg_tanh(" in suites.VARIANT_SOFTCAP_SCORE_MOD
    assert defs["variant_compile_first_call"].suite == "compile" and defs["variant_compile_first_call"].specs is None
    assert not any(n.startswith(("alibi_", "variant_")) and n not in REQUIRED for n in defs)
    assert "alibi_decode_b128_paged16" not in [d.name for d in suites.registry(["prefill"], [])]
    assert "variant_compile_first_call" not in [d.name for d in suites.registry(["prefill", "decode"], [])]
    st = suites.Settings()
    for name in ("alibi_prefill_causal_s16k", "alibi_decode_b128_paged16", "variant_alibi_prefill_causal_s16k",
                 "variant_alibi_float_prefill_causal_s16k"):
        attn = [s for s in defs[name].specs(st, "sm_90a", 132) if isinstance(s, AttentionSpec)]
        assert any(s.alibi for s in attn) and any(not s.alibi for s in attn)
    for name in ("variant_softcap_prefill_causal_s16k", "variant_softcap_approx_prefill_causal_s16k"):
        soft = [s for s in defs[name].specs(st, "sm_90a", 132) if isinstance(s, AttentionSpec)]
        assert any(s.softcap for s in soft)
    sink = [s for s in defs["sinks_decode_b128_paged16"].specs(st, "sm_90a", 132) if isinstance(s, AttentionSpec)]
    assert any(s.sinks for s in sink) and any(not s.sinks for s in sink)
    for name in defs:
        assert report.suite_of(name) == defs[name].suite


def test_alibi_slopes_are_the_papers_geometric_sequence():
    """2^(-8 i / H), i = 1..H: for 8 heads 1/2, 1/4, ..., 1/256 (ALiBi's paper)."""
    torch = pytest.importorskip("torch")
    import types

    from kernelgen.apps.bench import suites as S

    real = torch.tensor
    fake = types.SimpleNamespace(tensor=lambda data, dtype=None, device=None: real(data, dtype=dtype),
                                 float32=torch.float32)  # (on the CPU: the entry puts them on the GPU)
    saved = S._torch
    S._torch = lambda: fake
    try:
        s8, s64 = S.alibi_slopes(8), S.alibi_slopes(64)
    finally:
        S._torch = saved
    assert s8.dtype == torch.float32 and s8.tolist() == [2.0 ** -k for k in range(1, 9)]
    assert s64.shape == (64,) and abs(float(s64[7]) - 0.5) < 1e-7 and abs(float(s64[-1]) - 2.0 ** -8) < 1e-12


def test_variant_entries_skip_without_the_variant_api(monkeypatch):
    """Before branch ``variant`` is merged kernelgen has no ``Variant``: the variant entries are
    recorded as skipped with the stated reason (the runner's Skip), never an error."""
    import types

    from kernelgen.front import api

    monkeypatch.setitem(sys.modules, "kernelgen.front.variant", None)  # (importing it raises ImportError)
    with pytest.raises(suites.Skip, match=r"^kernelgen has no Variant \(branch variant not merged\)$"):
        suites.variant_api()
    defs = {d.name: d for d in suites.registry(["prefill", "compile"], resolve_models([DEFAULT_MODEL]))}
    for name in ("variant_alibi_prefill_causal_s16k", "variant_softcap_prefill_causal_s16k",
                 "variant_compile_first_call"):
        with pytest.raises(suites.Skip, match="branch variant not merged"):
            defs[name].run(suites.Settings())
    # a Variant class alone is not enough: varlen_attention must take variant=
    monkeypatch.setitem(sys.modules, "kernelgen.front.variant", types.SimpleNamespace(Variant=object))
    monkeypatch.setattr(api, "varlen_attention", lambda q, k, v, cu_seqlens_q, *, causal=False: None)
    with pytest.raises(suites.Skip):
        suites.variant_api()
    monkeypatch.setattr(api, "varlen_attention", lambda q, k, v, cu_seqlens_q, *, variant=None: None)
    assert suites.variant_api() is object


def test_variant_score_mods_are_the_issues_snippets():
    assert suites.VARIANT_ALIBI_SCORE_MOD == "score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)"
    assert suites.VARIANT_ALIBI_FLOAT_SCORE_MOD == "score - slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))"
    assert suites.VARIANT_SOFTCAP_SCORE_MOD.startswith("50.f * kg_tanh(score / 50.f)") and suites.VARIANT_SOFTCAP == 50.0


def test_cost_entries_show_their_own_baseline_and_divide_peers_by_peer_base():
    """A cost entry's ``us`` is an interleaved graph-replay time (with its baseline in the same
    measurement); its peers, timed as eager calls, are divided by ``peer_base_us`` (kernelgen's call
    timed their way).  The table's "vs own baseline" column shows the ratio to the baseline."""
    e = report.finalize({"name": "alibi_decode_b128_paged16", "suite": "decode", "us": 1010.0, "metric": "tbps",
                         "bytes": 4e9, "peers": {"fa4": 1100.0}, "unavailable": {"fa3_unpaged": "no ALiBi"},
                         "us_noalibi": 1000.0, "alibi_ratio": 1.01, "peer_base_us": 1050.0}, ROOFS)
    assert e["ratios"]["fa4"] == pytest.approx(1100.0 / 1050.0)
    assert e["best_peer"] == "fa4" and e["vs_best"] == pytest.approx(1100.0 / 1050.0)
    assert report.own_baseline_text(e) == "1.01x without ALiBi (1000.0 µs)"
    assert report.own_baseline_text({"variant_ratio": 0.98, "us_builtin": 3900.0}) == "0.98x built-in (3900.0 µs)"
    assert report.own_baseline_text({"sinks_ratio": 1.0, "us_nosinks": 50.0}) == "1.00x without sinks (50.00 µs)"
    assert report.own_baseline_text({"us": 3.0}) == ""
    # the twins' spread (apps/bench/twins.py): each call's time over its twin's, low-high
    assert report.own_baseline_text({"alibi_ratio": 1.02, "us_noalibi": 4400.0,
                                     "twin_spread": {"kernelgen": 0.97, "kernelgen_alibi": 1.012}}) \
        == "1.02x without ALiBi (4400.0 µs; twins 0.97-1.01)"
    assert report.own_baseline_text({"variant_ratio": 0.98, "twin_spread": {"a": 1.0, "b": None}}) \
        == "0.98x plain (twins 1.00-1.00)"
    # variant_ratio over the plain call (variant_example_*) or over the built-in (variant_*)
    assert report.own_baseline_text({"variant_ratio": 1.05, "us_plain": 4000.0}) == "1.05x plain (4000.0 µs)"
    assert report.own_baseline_text({"variant_ratio": 1.01, "us_builtin": 4000.0}) == "1.01x built-in (4000.0 µs)"
    plain = report.finalize({"name": "decode_trace_b32_paged16", "suite": "decode", "us": 100.0, "metric": "tbps",
                             "bytes": 4e8, "peers": {"fa4": 90.0}, "unavailable": {}}, ROOFS)
    t = report.suite_table("decode", [e, plain])
    assert "vs own baseline" in t and "1.01x without ALiBi" in t
    assert "| decode_trace_b32_paged16 | 100.0 | 4.00 TB/s | 100% | 0.90x fa4 | - |" in t
    assert "vs own baseline" not in report.suite_table("decode", [plain])
    # a report of them re-prints with the same ratios (from-json)
    rep = report.build_report([e, plain], ROOFS, "NVIDIA H200", commit="c")
    again = {x["name"]: x for x in report.entries_from_report(json.loads(json.dumps(rep)))}
    assert again["alibi_decode_b128_paged16"]["ratios"]["fa4"] == pytest.approx(1100.0 / 1050.0)
    assert again["alibi_decode_b128_paged16"]["alibi_ratio"] == 1.01


def test_peers_alternate_with_kernelgen_and_divide_by_their_own_rounds():
    """peers.measure with kernelgen's call as ``base`` and rounds > 1: each peer and the base timed in
    alternating rounds (order flipped every round), the peer's time and its own kernelgen base the
    medians of those rounds; the ratios, the best peer, the goal rows and a report re-read divide by
    that base, not by the entry's single ``peer_base_us``; a failing peer leaves no base behind."""
    import torch

    ref = torch.ones(2, 2, 8)
    order = []
    clock = {"kg": iter([110.0, 100.0, 100.0, 99.0, 100.0, 101.0]), "fa4": iter([100.0, 102.0, 98.0]),
             "fa3": iter([150.0, 150.0, 150.0])}

    def kg():
        return ref

    def timer(fn):
        name = getattr(fn, "who", "kg")
        order.append(name)
        return next(clock[name])

    def peer(name):
        def build():
            def fn():
                return ref
            fn.who = name
            return peers.Peer(fn, lambda r: r)
        return build

    def broken():
        def fn():
            raise RuntimeError("no")
        fn.who = "x"
        return peers.Peer(fn)
    e = {"name": "variant_softcap_approx_prefill_causal_s16k_gpt-oss", "suite": "prefill", "us": 95.0,
         "metric": "tflops", "flops": 1e12, "peer_base_us": 120.0}
    peers.measure(e, {"fa4": peer("fa4"), "fa3": peer("fa3"), "broken": broken}, timer, reference=ref, base=kg,
                  rounds=3)
    assert order == ["kg", "fa4", "fa4", "kg", "kg", "fa4", "kg", "fa3", "fa3", "kg", "kg", "fa3"]
    assert e["peers"] == {"fa4": 100.0, "fa3": 150.0}
    assert e["peer_base_by_peer"] == {"fa4": 100.0, "fa3": 100.0}
    assert e["peer_rounds_us"]["fa4"] == {"peer": [100.0, 102.0, 98.0], "kernelgen": [110.0, 100.0, 100.0]}
    assert "broken" in e["unavailable"] and "broken" not in e["peer_base_by_peer"]
    assert "3 rounds alternating" in e["peer_method"]
    f = report.finalize(e, ROOFS)
    assert f["ratios"]["fa4"] == pytest.approx(1.0) and f["ratios"]["fa3"] == pytest.approx(1.5)
    assert f["best_peer"] == "fa4" and f["vs_best"] == pytest.approx(1.0)
    assert report._goal_value(f, "vs:fa4", {}, None) == pytest.approx(1.0)    # not 100 / 120
    rep = report.build_report([f], ROOFS, "NVIDIA H200", commit="c")
    again = report.entries_from_report(json.loads(json.dumps(rep)))[0]
    assert again["ratios"]["fa4"] == pytest.approx(1.0)
    # without a base (or one round) a peer is timed once, divided by peer_base_us as before
    e1 = {"name": "y", "suite": "prefill", "us": 95.0, "metric": "tflops", "flops": 1e12, "peer_base_us": 120.0}
    clock["fa4"] = iter([60.0])
    peers.measure(e1, {"fa4": peer("fa4")}, timer, reference=ref, base=kg, rounds=1)
    assert e1["peers"] == {"fa4": 60.0} and "peer_base_by_peer" not in e1
    assert report.finalize(e1, ROOFS)["ratios"]["fa4"] == pytest.approx(0.5)


def test_flex_alibi_score_mod_matches_reference(monkeypatch):
    """The FlexAttention ALiBi peer (alibi_entry, the user-variant entries) computes kernelgen's
    ALiBi (bottom-right distance within each request, GQA, a window), run eagerly on the CPU,
    against the float64 reference with ``alibi_slopes``; one request with as many queries as keys
    is the variant entries' s16k shape."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    from kernelgen.apps.reference import attention_reference

    monkeypatch.setattr(peers, "_flex_compiled", flex_attention)
    torch.manual_seed(1)
    for lq, lk, hq, hkv, wl in (([37, 100, 5], [37, 100, 5], 4, 2, -1), ([1] * 4, [300, 17, 129, 1], 8, 2, -1),
                                ([130, 1], [130, 400], 4, 1, 31), ([96], [96], 8, 8, -1)):
        q, k, v = torch.randn(sum(lq), hq, 64), torch.randn(sum(lk), hkv, 64), torch.randn(sum(lk), hkv, 64)
        slopes = torch.tensor([2.0 ** (-8.0 * i / hq) for i in range(1, hq + 1)])
        peer = peers.flex_document(q, k, v, lq, lk, True, window_left=wl, alibi_slopes=slopes)()
        out = peer.output(peer.fn())
        cu_q = torch.tensor([0] + list(torch.cumsum(torch.tensor(lq), 0)), dtype=torch.int32)
        cu_k = torch.tensor([0] + list(torch.cumsum(torch.tensor(lk), 0)), dtype=torch.int32)
        ref, _ = attention_reference(q.double(), k.double(), v.double(), cu_q, cu_k, causal=True,
                                     window_size=(wl, 0) if wl >= 0 else (-1, -1), alibi_slopes=slopes.double())
        assert float((out.double() - ref).abs().max()) < 1e-4


def test_peers_without_sinks_or_alibi_state_why():
    """The peers that cannot run gpt-oss's sinks or ALiBi are unavailable with the reason (never
    run without them, which would compare a different attention)."""
    import torch

    q = k = v = torch.zeros(4, 2, 64)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    e = {"peers": {}, "unavailable": {}}
    peers.measure(e, {"torch_fa2_varlen": peers.fa2_varlen(q, k, v, cu, cu, 4, 4, True, sinks=True),
                      "flex_attention": peers.flex_document(q, k, v, [4], [4], True, sinks=True),
                      "fa2_alibi": peers.fa2_varlen(q, k, v, cu, cu, 4, 4, True, alibi=True)},
                  lambda fn: 1.0)
    assert e["peers"] == {}
    assert e["unavailable"]["torch_fa2_varlen"] == peers.FA2_NO_SINKS and "sinks" in peers.FA2_NO_SINKS
    assert e["unavailable"]["flex_attention"] == peers.FLEX_NO_SINKS
    assert e["unavailable"]["fa2_alibi"] == peers.FA2_NO_ALIBI and "ALiBi" in peers.FA2_NO_ALIBI
    assert "sinks" in peers.FA3_NO_SINKS and "ALiBi" in peers.FA3_NO_ALIBI


def test_flex_first_call_score_mod_is_a_new_function_with_the_same_logits():
    """variant_compile_first_call's FlexAttention score_mod: a new code object each time (so
    torch.compile cannot reuse a graph: a closure float would be passed as an input), computing
    the ALiBi bias times the constant."""
    import torch

    slopes = torch.tensor([0.5, 0.25])
    a, b = peers.alibi_score_mod(slopes, factor=1.000000123), peers.alibi_score_mod(slopes, factor=1.000000456)
    assert a.__code__ is not b.__code__ and "1.000000123" in a.__code__.co_filename
    s, qi, ki = torch.tensor(0.0), torch.tensor(10), torch.tensor(4)
    assert float(a(s, 0, 1, qi, ki)) == pytest.approx(-0.25 * 6 * 1.000000123)
    plain = peers.alibi_score_mod(slopes)
    assert float(plain(s, 0, 0, qi, ki)) == -3.0


def test_only_selects_entries_by_pattern():
    """``--only``: the issue-25 entries alone fit one device call (the other entries are not run or
    listed)."""
    args = cli.build_parser().parse_args(["bench", "--only", "alibi_*,variant_*,*gpt-oss*"])
    assert args.only == ["alibi_*", "variant_*", "*gpt-oss*"]
    assert cli.build_parser().parse_args(["bench"]).only is None
    defs = suites.registry(["prefill", "decode", "compile"], resolve_models(["llama3-8b", "gpt-oss"]))
    names = [d.name for d in runner.select(defs, args.only)]
    assert names == [d.name for d in defs if d.name.startswith(("alibi_", "variant_")) or "gpt-oss" in d.name]
    assert "variant_compile_first_call" in names and "prefill_varlen_trace_gpt-oss-w128" in names
    assert "prefill_varlen_trace" not in names and "sinks_prefill_causal_s16k" not in names
    assert runner.select(defs, None) == defs and runner.select(defs, ["nothing*"]) == []


def test_every_peers_constant_the_suites_name_exists():
    """suites.py reads reasons and names from peers.py (a missing one raised AttributeError in the
    middle of a GPU run: decode_long_b8_128k_gpt-oss, peers.SDPA_NO_SINKS)."""
    import re
    from pathlib import Path
    src = Path(suites.__file__).read_text()
    names = sorted(set(re.findall(r"\bpeers\.([A-Z][A-Z0-9_]*)\b", src)))
    assert "SDPA_NO_SINKS" in names and len(names) > 10
    assert [n for n in names if not hasattr(peers, n)] == []


def test_auto_choice_compares_forced_columns_timed_with_the_automatic_call():
    timed = {"kernelgen": [100.0], "kernelgen_sm80": [100.0], "kernelgen_splits1": [90.0], "kernelgen_aos": [80.0]}
    e = {"name": "d", "us": 120.0, "switch_base_us": 100.0, "switch_rounds_us": timed,
         "peers": {"kernelgen_sm80": 100.5, "kernelgen_splits1": 97.0, "kernelgen_aos": 80.0, "fa3": 90.0}}
    # the layout switch and the external peer are not dispatcher choices; splits1 is the fastest forced one
    assert report.auto_choice(e) == ("kernelgen_splits1", 0.97)
    assert report.entry_ratios(e)["kernelgen_splits1"] == 0.97    # against switch_base_us, not us
    assert report.auto_choice_misses([e]) == {"d": ["kernelgen_splits1", 0.97]}
    assert report.checks([e])["auto_choice_within_2pct"] is False
    e["peers"]["kernelgen_splits1"] = 98.5
    assert report.auto_choice_misses([e]) == {} and report.checks([e])["auto_choice_within_2pct"] is True
    # a forced call that launched the automatic call's recipe is the same choice: its ratio is spread
    e["peers"]["kernelgen_splits1"] = 90.0
    e["same_recipe_as_auto"] = ["kernelgen_splits1"]
    assert report.auto_choice(e) == ("kernelgen_sm80", 1.005) and report.auto_choice_misses([e]) == {}
    e["same_recipe_as_auto"] = ["kernelgen_splits1", "kernelgen_sm80"]
    assert report.auto_choice(e) == (None, None) and "auto_choice_within_2pct" not in report.checks([e])
    # forced columns timed apart from the automatic call (no switch rounds) are not compared
    apart = {"name": "p", "us": 100.0, "peers": {"kernelgen_sm80": 50.0}}
    assert report.auto_choice(apart) == (None, None) and "auto_choice_within_2pct" not in report.checks([apart])


def test_measure_switches_times_forced_choices_beside_the_default_and_skips_the_unsupported(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    out = torch.ones(4)

    def make_call(o, **kw):
        def run():
            if kw.get("arch") == "sm_90a":
                raise ValueError("the Hopper (sm_90a) path does not support this call: a reason")
            o.copy_(out)
        return run

    class S:
        def time_interleaved(self, calls):
            return {n: {"us": 10.0 + i, "rounds": [10.0 + i]} for i, n in enumerate(calls)}

        def interleaved_method(self):
            return "interleaved"
    # what each call launched: the automatic call and the one forced onto sm_80 the same kernels
    launched = {}
    monkeypatch.setattr(suites, "recipe_fingerprint", lambda: launched["last"])
    plain = make_call

    def make_call(o, **kw):   # noqa: F811 - the same calls, recording their recipe
        run = plain(o, **kw)

        def rec():
            run()
            launched["last"] = ("PreparedCall", ("sched", "attn_split" if kw.get("num_splits") != 1 else "attn"),
                                "nopack" if kw.get("pack_gqa") is False else "cfg")
        return rec
    e = {"name": "x", "peers": {}, "unavailable": {}}
    suites.measure_switches(S(), e, make_call, out, forced=suites.DECODE_FORCED)
    assert "Hopper" in e["unavailable"][peers.KG_SM90A] and peers.KG_SM90A not in e["peers"]
    assert e["same_recipe_as_auto"] == [peers.KG_SM80]
    assert set(e["switch_rounds_us"]) == {"kernelgen", peers.KG_AOS, peers.KG_NOSORT, peers.KG_SM80,
                                          peers.KG_SPLITS1, peers.KG_NOPACK}
    assert e["switch_base_us"] == 10.0 and e["peers"][peers.KG_SM80] == 13.0
    assert e["max_diff"][peers.KG_NOPACK] == 0.0


def test_a_call_that_stores_no_prepared_call_has_no_fingerprint():
    """The fingerprint is the call's own: a call the signature cache does not store (not keyable, a
    provisional recipe) must not inherit the previous call's, nor a failing one raise."""
    from kernelgen.front import api

    class Prep:
        config = None

        def _launches(self):
            return ()
    api._CALLS.put(("k",), Prep())
    assert suites.recipe_fingerprint() == ("Prep", (), "None", "None", "None")
    assert suites._fingerprint_of(lambda: None) is None and api._CALLS._last == (None, None)

    def boom():
        raise RuntimeError("x")
    assert suites._fingerprint_of(boom) is None
    api.clear_signature_cache()


# ------------------------------------------------------------------------------------ FP8 entries
def test_fp8_entries_registered_per_suite_once():
    defs = {d.name: d for d in suites.registry(["prefill", "decode"], resolve_models(["llama3-8b"]))}
    for base, suite in suites.FP8_ENTRIES:
        name = entry_name(base, PRESETS["llama3-8b"])
        assert defs[name].suite == suite == report.suite_of(name)
    only_prefill = [d.name for d in suites.registry(["prefill"], resolve_models(["llama3-8b"]))]
    assert not any(n.startswith("fp8_decode") for n in only_prefill)


def test_quantize_e4m3_maps_amax_onto_448_and_dequantises_within_a_step():
    torch = pytest.importorskip("torch")
    t = torch.tensor([[-3.0, 0.5, 1.25], [2.0, -0.01, 6.0]])
    q, scale = suites.quantize_e4m3(t)
    assert q.dtype == torch.float8_e4m3fn and float(scale) == pytest.approx(6.0 / 448.0)
    assert float(q.float().abs().max()) == 448.0
    back = q.float() * scale
    # e4m3 keeps 3 mantissa bits: round-to-nearest is within 2^-4 relative of every normal value
    normal = t.abs() >= 2.0 ** -6 * float(scale)
    assert torch.all((back - t).abs()[normal] <= 2.0 ** -4 * t.abs()[normal])
    q2, s2 = suites.quantize_e4m3(t, scale)
    assert s2 is scale and torch.equal(q2.float(), q.float())


def test_fp8_peer_bound_is_used_by_disagrees():
    e = {"max_diff": {"fa3": 0.06}, "ref_max": {"fa3": 1.0}}
    assert report.disagrees(e, "fa3")
    e["peer_atol"] = suites.FP8_PEER_ATOL
    assert not report.disagrees(e, "fa3")


def test_fp8_prefill_bytes_count_one_byte_an_input_element():
    """A review: the FP8 prefill entries kept the bf16 call's bytes (their arithmetic intensity half the
    real one).  q, k and v in e4m3, the out in 16 bits."""
    from kernelgen.apps.bench.models import prefill_bytes

    m = resolve_models(["llama3-8b"])[0]
    lq, lk = [4096] * 4, [4096] * 4
    tq = tk = 4 * 4096
    want = tq * 32 * 128 + tk * 8 * 256 + 2 * tq * 32 * 128
    assert suites.fp8_prefill_bytes(lq, lk, m) == want
    assert prefill_bytes(lq, lk, m) == 2 * (tq * 32 * 256 + tk * 8 * 256)   # (the bf16 count beside it)


def test_fp8_prefill_rates_have_no_bf16_roof_fraction():
    """A review: the FP8 prefill entries (e4m3 q, k and v on FP8 tensor cores) read as 107 % of the bf16
    matmul roof.  They take FP8_ROOF_KEY's roof, which the bench does not measure: no fraction."""
    roofs = {"bf16_matmul_tflops": 800.0, "copy_tbps": 4.0}
    fp8 = report.finalize({"name": "fp8_prefill_causal_s16k", "metric": "tflops", "us": 1.0, "flops": 850e6}, roofs)
    assert fp8["tflops"] == 850.0 and fp8["roof_fraction"] is None
    assert report.finalize({"name": "fp8_prefill_causal_s16k", "metric": "tflops", "us": 1.0, "flops": 850e6},
                           {**roofs, report.FP8_ROOF_KEY: 1700.0})["roof_fraction"] == 0.5
    dec = report.finalize({"name": "fp8_decode_b128_paged16", "metric": "tbps", "us": 1.0, "bytes": 3.6e6}, roofs)
    assert dec["roof_fraction"] == 0.9   # (a decode's roof is the copy's, FP8 or not)
    bf16 = report.finalize({"name": "prefill_dense_causal_h128_s16k", "metric": "tflops", "us": 1.0, "flops": 600e6},
                           roofs)
    assert bf16["roof_fraction"] == 0.75


def test_a_peer_whose_output_is_nan_disagrees_and_is_never_the_best():
    """A review: a NaN max_diff compared False with the bound, so a NaN peer agreed and became best_peer."""
    e = {"name": "prefill_x", "suite": "prefill", "metric": "tflops", "us": 100.0, "flops": 1e12, "bytes": 1e9,
         "peers": {"fa3": 50.0, "fa4": 120.0}, "max_diff": {"fa3": float("nan"), "fa4": 0.001},
         "ref_max": {"fa3": float("nan"), "fa4": 1.0}}
    report.finalize(e, {"bf16_matmul_tflops": 800, "copy_tbps": 4})
    assert e["peers_disagreeing"] == ["fa3"] and not report.agrees(e)
    assert e["best_peer"] == "fa4" and e["vs_best"] == 1.2
    assert report.checks([e]) == {"prefill_x_agrees_with_peers": False}
    table = report.suite_table("prefill", [e])   # (the peer's ratio is marked, the agreeing one not)
    assert "| 0.50x (output differs) | 1.20x |" in table


def test_the_last_attention_kernel_is_read_from_the_last_prepared_call(monkeypatch):
    """The variant entries record which attention kernels their two calls ran (variant_kernel,
    builtin_kernel): the last prepared call's ``attn`` name, None without one."""
    import types

    from kernelgen.apps.bench import suites
    from kernelgen.front import api
    prep = types.SimpleNamespace(attn=types.SimpleNamespace(name="attn_sm_90a_x_m192n128w12s2b1"))
    monkeypatch.setattr(api._CALLS, "_last", (("k",), prep))
    assert suites._last_attention_kernel() == "attn_sm_90a_x_m192n128w12s2b1"
    monkeypatch.setattr(api._CALLS, "_last", (None, None))
    assert suites._last_attention_kernel() is None


def test_decode_ab_flush_choices(monkeypatch):
    """benchmarks/experiments/decode_ab.py --flush: write / read go to time_gpu as they are, layer
    becomes the model's two GEMMs (known for the presets in LAYER_DIMS only)."""
    spec = importlib.util.spec_from_file_location("decode_ab", REPO / "benchmarks" / "experiments" / "decode_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    for mode in ("write", "read"):
        monkeypatch.setattr(ab, "FLUSH", mode)
        assert ab.flush_for("llama3-8b") == mode
    monkeypatch.setattr(ab, "FLUSH", "layer")
    made = []
    monkeypatch.setattr(ab, "layer_gemms", lambda model: made.append(model) or (lambda: None))
    assert callable(ab.flush_for("llama3-70b-tp8")) and made == ["llama3-70b-tp8"]
    monkeypatch.undo()
    with pytest.raises(ValueError, match="--flush layer knows llama3-8b, llama3-70b-tp8"):
        ab.layer_gemms("mla")


# ------------------------------------------------------------------ dtypes and issue 22's summary
def test_registry_dtypes_select_bf16_fp16_and_fp8_entries():
    """``--dtype``: the default run is today's (16-bit bf16 entries and the FP8 ones); fp16 adds issue 22's
    prefill shapes in fp16 (``*_fp16``: every dense shape, the first preset's varlen trace and chunked
    entries) and nothing else; e4m3 alone is the FP8 entries; an unknown dtype is an error."""
    models = resolve_models(["llama3-8b", "gpt-oss"])
    default = suites.registry(["all"], models)
    names = [d.name for d in default]
    assert not any(n.endswith("_fp16") for n in names)
    assert {d.dtype for d in default} == {"bf16", "e4m3"}
    assert {d.name for d in default if d.dtype == "e4m3"} == {
        "fp8_prefill_causal_s16k", "fp8_prefill_s4k_b4", "fp8_decode_b128_paged16", "mixed_trace_fp8",
        "mixed_trace_fp8_qq"}
    for name in ("prefill_dense_causal_h96_s4k", "prefill_dense_causal_h192_s4k", "prefill_dense_causal_h192x128_s4k"):
        assert name in names
    fp16 = suites.registry(["all"], models, ("fp16",))
    want = [s[0] + "_fp16" for s in suites.DENSE_SHAPES] + ["prefill_varlen_trace_fp16"] + [
        f"prefill_chunked_paged{ps}_fp16" for ps in suites.CHUNKED_PAGE_SIZES]
    assert [d.name for d in fp16] == want and {d.dtype for d in fp16} == {"fp16"}
    assert {d.suite for d in fp16} == {"prefill"}
    assert suites.registry(["decode", "mixed"], models, ("fp16",)) == []
    fp8 = suites.registry(["all"], models, ("e4m3",))
    assert {d.name for d in fp8} == {d.name for d in default if d.dtype == "e4m3"}
    every = [d.name for d in suites.registry(["all"], models, ("all",))]
    assert sorted(every) == sorted(names + want) and len(every) == len(set(every))
    assert set(report.ISSUE22_ENTRIES) <= set(every)
    for bad in (("fp32",), ()):
        with pytest.raises(ValueError, match="dtype"):
            suites.registry(["all"], models, bad)


def test_fp16_and_new_dense_entries_prewarm_their_own_kernels():
    """The fp16 entries pre-compile fp16 kernels; the 192 x 128 dense shape its head_dim_v 128 kernel."""
    st = suites.Settings()
    defs = {d.name: d for d in suites.registry(["prefill"], resolve_models(["llama3-8b"]), ("all",))}
    for name in ("prefill_dense_causal_h96_s4k_fp16", "prefill_varlen_trace_fp16", "prefill_chunked_paged16_fp16"):
        attn = [s for s in defs[name].specs(st, "sm_90a", 132) if s.kind == "attention"]
        assert attn and {s.dtype for s in attn} == {"fp16"}
    attn = [s for s in defs["prefill_dense_causal_h192x128_s4k"].specs(st, "sm_90a", 132) if s.kind == "attention"]
    assert {(s.head_dim, s.head_dim_v, s.dtype) for s in attn} == {(192, 128, "bf16")}
    attn = [s for s in defs["prefill_dense_causal_h96_s4k"].specs(st, "sm_90a", 132) if s.kind == "attention"]
    assert {(s.head_dim, s.head_dim_v, s.mask) for s in attn} == {(96, 96, "causal")}


def test_variant_example_entries_are_registered_with_their_plain_kernels():
    """The T5-bias, document-mask and prefix-LM examples' cost entries (docs/variants.md's table) run in
    the prefill suite for the first preset, prewarm the plain causal kernels they are timed against,
    and name a document set of exactly the 16k request."""
    st = suites.Settings()
    defs = {d.name: d for d in suites.registry(["prefill"], resolve_models(["llama3-8b"]), ("bf16",))}
    for which in suites.VARIANT_EXAMPLE_ENTRIES:
        attn = [s for s in defs[which].specs(st, "sm_90a", 132) if s.kind == "attention"]
        assert attn and all(s.mask == "causal" and s.variant is None for s in attn), which
    assert sum(suites.VARIANT_EXAMPLE_DOCUMENTS) == suites.SINKS_PREFILL_TOKENS
    with pytest.raises(ValueError, match="unknown variant example entry"):
        suites.variant_example_entry(st, "variant_example_nope_prefill_causal_s16k", resolve_models(["llama3-8b"])[0])


def test_variant_example_rates_count_the_pairs_each_variant_keeps():
    """A review: the document mask's TFLOP/s counted the plain causal call's pairs (3.9x its work: 209 % of
    the matmul roof in the report).  Pairs brute-forced from the examples' Python masks on a small request
    (the same formulas), then the 16k request's counts."""
    import torch

    from kernelgen.apps import variant_examples as X

    n = suites.SINKS_PREFILL_TOKENS
    causal = n * (n + 1) // 2
    assert suites.variant_example_pairs("t5_bias", n) == causal
    docs = suites.VARIANT_EXAMPLE_DOCUMENTS
    assert suites.variant_example_pairs("document_mask", n) == sum(d * (d + 1) // 2 for d in docs)
    assert abs(suites.variant_example_pairs("document_mask", n) / causal - 0.258) < 1e-3
    p = suites.VARIANT_EXAMPLE_PREFIX
    assert suites.variant_example_pairs("prefix_lm", n) == causal + p * (p - 1) // 2
    with pytest.raises(ValueError, match="unknown variant example"):
        suites.variant_example_pairs("nope", n)
    # the formulas against the examples' own masks, brute force on 12 tokens (documents 3, 5, 4; prefix 5)
    qi, kj = torch.arange(12)[None, :, None], torch.arange(12)[None, None, :]
    doc, ds, de, ko = X.document_ids([[3, 5, 4]], device="cpu")
    keep = X.document_mask(doc, ds, de, ko)[2](0, torch.zeros(1, 1, 1, dtype=torch.long), qi, kj, 12, 12) & (kj <= qi)
    assert int(keep.sum()) == 3 * 4 // 2 + 5 * 6 // 2 + 4 * 5 // 2
    keep = X.prefix_lm(torch.tensor([5], dtype=torch.int32))[2](0, torch.zeros(1, 1, 1, dtype=torch.long), qi, kj, 12, 12)
    assert int(torch.as_tensor(keep).expand(1, 12, 12).sum()) == 12 * 13 // 2 + 5 * 4 // 2


def test_fp8_entries_prewarm_their_fp8_kernels():
    """The FP8 entries (fp8_entry: an e4m3 cache with a bf16 q, and q, k and v in e4m3 on the prefill
    shapes) pre-compile their FP8 kernels, not only the bf16 call's (they used to compile on the
    device during the run); the non-causal 4 x 4k entry lists non-causal kernels."""
    st = suites.Settings()
    defs = {d.name: d for d in suites.registry(["prefill", "decode"], resolve_models(["llama3-8b"]), ("all",))}
    for name, mask in (("fp8_prefill_causal_s16k", "causal"), ("fp8_prefill_s4k_b4", "none")):
        attn = [s for s in defs[name].specs(st, "sm_90a", 132) if s.kind == "attention"]
        assert {(s.kv_dtype, s.fp8_mma) for s in attn} == {("", False), ("e4m3", False), ("e4m3", True)}, name
        assert {s.mask for s in attn} == {mask} and {s.mainloop for s in attn} == {"sm90a"}
    attn = [s for s in defs["fp8_decode_b128_paged16"].specs(st, "sm_90a", 132) if s.kind == "attention"]
    assert {s.kv_dtype for s in attn} == {"", "e4m3"} and all(s.paged and s.split for s in attn)


def test_bench_cli_passes_dtype(monkeypatch):
    from kernelgen.apps import demo

    seen = {}
    monkeypatch.setattr(demo, "has_cuda_gpu", lambda: True)
    monkeypatch.setattr(runner, "run", lambda **kw: seen.update(kw) or 0)
    assert cli.main(["bench", "--dtype", "fp16,e4m3"]) == 0 and seen["dtypes"] == ["fp16", "e4m3"]
    assert cli.main(["bench"]) == 0 and seen["dtypes"] is None   # runner: suites.DEFAULT_DTYPES
    with pytest.raises(SystemExit):
        cli.main(["bench", "--dtype", "fp32"])


def _i22(name, us, peers_us, max_diff=None):
    return {"name": name, "us": us, "peers": peers_us, **({"max_diff": max_diff} if max_diff else {})}


def test_issue22_summary_ratios_geomean_goals_and_missing():
    """Each of the issue's entries against the fastest of FA3 / FA3 on packed K/V / FA4 / cuDNN whose
    output agreed, divided by kernelgen's time taken the peers' way (``peer_base_us`` where the entry
    has one); other peers (FA2, FlexAttention, kernelgen's forced paths) do not count; the goals hold
    only with every entry of the issue measured."""
    entries = [
        _i22("prefill_dense_causal_h128_s16k", 100.0, {"fa3": 110.0, "fa4": 104.0, "torch_fa2": 50.0}),
        # the fastest peer disagrees with kernelgen's output: the next one is the bar
        _i22("prefill_dense_h128_s4k", 100.0, {"fa3": 90.0, "cudnn_sdpa": 103.0}, max_diff={"fa3": 1.0}),
        _i22("prefill_chunked_paged16", 90.0, {"fa3_unpaged": 102.0, "kernelgen_sm80": 10.0}),
        _i22("prefill_varlen_trace_fp16", 100.0, {"flex_attention": 40.0}),     # no issue-22 peer
        _i22("prefill_dense_causal_h64_s2k_fp16", None, {"fa3": 1.0}),          # did not run
        _i22("decode_trace_b128_paged16", 100.0, {"fa3": 10.0}),                # not the issue's
    ]
    entries[2].update(peer_base_us=100.0, commit="abc1234")
    s = report.issue22_summary(entries)
    assert s["entries"] == {"prefill_dense_causal_h128_s16k": {"peer": "fa4", "ratio": 1.04, "commit": None},
                            "prefill_dense_h128_s4k": {"peer": "cudnn_sdpa", "ratio": 1.03, "commit": None},
                            "prefill_chunked_paged16": {"peer": "fa3_unpaged", "ratio": 1.02, "commit": "abc1234"}}
    assert s["geomean"] == pytest.approx((1.04 * 1.03 * 1.02) ** (1 / 3), abs=1e-4)
    assert s["lowest"] == ["prefill_chunked_paged16", 1.02]
    assert "prefill_varlen_trace_fp16" in s["missing"] and "prefill_dense_causal_h64_s2k_fp16" in s["missing"]
    assert len(s["missing"]) == len(report.ISSUE22_ENTRIES) - 3
    assert s["each_ge_1.02"] is False and s["geomean_ge_1.05"] is False   # most of the issue's entries missing
    every = [_i22(n, 100.0, {"fa3": 106.0}) for n in report.ISSUE22_ENTRIES]
    full = report.issue22_summary(every)
    assert full["missing"] == [] and full["each_ge_1.02"] is True and full["geomean_ge_1.05"] is True
    every[0]["peers"]["fa4"] = 101.0
    assert report.issue22_summary(every)["each_ge_1.02"] is False
    assert report.issue22_summary([entries[-1]]) == {}


def test_agreement_recorded_at_finalize_survives_the_report():
    """finalize records which peers disagree while it still has the outputs' magnitudes and an FP8
    entry's own bound; a report keeps that list (not ref_max / peer_atol), so the summaries agree with
    the bench's own best_peer."""
    e = {"name": "fp8_prefill_s4k_b4", "us": 100.0, "metric": "tflops", "flops": 1e12, "peers": {"fa3": 103.0},
         "max_diff": {"fa3": 0.05}, "ref_max": {"fa3": 4.0}, "peer_atol": 0.125}
    report.finalize(e, None)
    assert e["peers_disagreeing"] == [] and e["best_peer"] == "fa3"
    kept = {k: e[k] for k in ("name", "us", "peers", "max_diff", "peers_disagreeing")}
    assert not report.disagrees(kept, "fa3")
    assert report.disagrees({k: v for k, v in kept.items() if k != "peers_disagreeing"}, "fa3")  # bf16 bound
    t = report.goal_table([kept], (("fp8_prefill_s4k_b4", "vs:fa3", ">=", 1.0),))
    assert t["rows"][0]["value"] == 1.03


def test_goal_tables_evaluate_issue_23_and_24_measures():
    """Peers (agreeing only), the copy roof, the fused step against its serial calls and one entry's
    speed-up over another, each against its bound; a goal whose entry or peer did not run is None."""
    entries = [
        {"name": "decode_trace_b128_paged16", "us": 100.0, "tbps": 4.0, "peers": {"fa3_unpaged": 103.0, "fa4": 50.0}},
        {"name": "decode_long_b8_128k", "us": 100.0, "tbps": 4.0,
         "peers": {"cudnn_sdpa": 90.0, "fa3_unpaged": 120.0}, "max_diff": {"cudnn_sdpa": 5.0}},
        {"name": "mixed_trace", "us": 79.0, "peers": {"serial": 100.0, "fa3_unpaged": 80.0}},
        {"name": "fp8_decode_b128_paged16", "us": 50.0, "tbps": 3.9, "peers": {}},
    ]
    goals = (("decode_trace_b128_paged16", "vs:fa3|fa3_unpaged", ">=", 1.02),
             ("decode_trace_b128_paged16", "roof", ">=", 0.95),
             ("decode_long_b8_128k", "vs:fa3|fa3_unpaged|cudnn_sdpa", ">=", 1.02),   # cuDNN disagrees
             ("mixed_trace", "of_serial", "<=", 0.80),
             ("mixed_trace", "vs:fa4", ">=", 1.02),                                    # not measured
             ("fp8_decode_b128_paged16", "speedup_over:decode_trace_b128_paged16", ">=", 1.8),
             ("mixed_short_chunks", "of_serial", "<=", 0.80))                         # did not run
    t = report.goal_table(entries, goals, {"copy_tbps": 4.25})
    assert [(r["value"], r["ok"]) for r in t["rows"]] == [
        (1.03, True), (pytest.approx(4.0 / 4.25, abs=1e-4), False), (1.2, True), (0.79, True), (None, None),
        (2.0, True), (None, None)]
    assert (t["met"], t["evaluated"], t["goals"]) == (4, 5, 7)
    assert report.goal_table(entries, goals[1:2], None)["rows"][0]["value"] is None   # no roof measured
    names = {g[0] for g in report.ISSUE23_GOALS + report.ISSUE24_GOALS + report.ISSUE25_GOALS}
    every = {d.name for m in PRESETS for d in suites.registry(["all"], resolve_models([m]), ("all",))}
    assert names <= every          # every goal names an entry the bench runs (a preset first: its single-shape ones)
    with pytest.raises(ValueError, match="measure"):
        report.goal_table(entries, (("mixed_trace", "speed", ">=", 1.0),))
    cost = [{"name": "sinks_prefill_causal_s16k", "us": 2.0e5, "sinks_ratio": 1.05},
            {"name": "variant_compile_first_call", "us": 0.6e6}]
    t = report.goal_table(cost, (("sinks_prefill_causal_s16k", "field:sinks_ratio", "<=", 1.03),
                                 ("variant_compile_first_call", "seconds", "<=", 1.0)))
    assert [(r["value"], r["ok"]) for r in t["rows"]] == [(1.05, False), (0.6, True)]


def test_printed_report_ends_with_the_open_goals():
    """``kernelgen bench`` and ``--from-json`` print the goals of issues 22-25 on the entries they show
    (the same text as h200.md's section), and nothing of the kind when no goal's entry ran."""
    e = report.finalize({"name": "prefill_dense_h128_s4k", "suite": "prefill", "us": 100.0, "metric": "tflops",
                         "flops": 1e11, "peers": {"fa3": 95.0}, "unavailable": {}}, None)
    text = report.format_report([e], {"copy_tbps": 4.0, "bf16_matmul_tflops": 800.0}, "H200")
    assert "## Open performance goals" in text and "geometric mean 0.950x" in text
    assert "Issue 24 (FP8): 0 of 8 goals met (0 evaluated)." in text
    other = report.finalize({"name": "scheduler_b8", "suite": "scheduler", "us": 3.0, "peers": {}, "unavailable": {}},
                            None)
    assert "Open performance goals" not in report.format_report([other], None, "H200")


def test_decode_ab_configuration_options():
    """benchmarks/experiments/decode_ab.py's NAME=FOLDER@OPTS: rwN / mbN / stN (joined by "+") hold
    while the call is prepared and are restored after it, also when it raises; others are refused."""
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics
    spec = importlib.util.spec_from_file_location("decode_ab", REPO / "benchmarks" / "experiments" / "decode_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    before = (heuristics.combine_row_warps, heuristics.FP8_DECODE_MIN_BLOCKS, heuristics.FP8_DECODE_STAGES)
    t = TileConfig(16, 16, 1, 2, 8)
    seen = ab.with_options("rw2+mb16+st3", lambda: (heuristics.combine_row_warps(1, 32, 128, 132),
                                                      heuristics.fp8_tile(t, 128, 128)))
    assert seen == (2, TileConfig(16, 16, 1, 3, 16))
    assert ab.with_options("st4", lambda: heuristics.fp8_tile(t, 128, 128)) == TileConfig(16, 16, 1, 4, before[1])
    assert (heuristics.combine_row_warps, heuristics.FP8_DECODE_MIN_BLOCKS, heuristics.FP8_DECODE_STAGES) == before

    def boom():
        raise RuntimeError("prepare failed")
    with pytest.raises(RuntimeError, match="prepare failed"):
        ab.with_options("mb14", boom)
    assert heuristics.FP8_DECODE_MIN_BLOCKS == before[1]
    with pytest.raises(ValueError, match="unknown configuration option 'x3'"):
        ab.with_options("st3+x3", lambda: None)
    assert (heuristics.combine_row_warps, heuristics.FP8_DECODE_MIN_BLOCKS, heuristics.FP8_DECODE_STAGES) == before


def test_decode_ab_define_option(monkeypatch):
    """decode_ab.py's ``@dNAME``: KERNELGEN_DEFINES gains NAME while the call is prepared (after any value it
    had), the in-memory kernels are set aside meanwhile (they are keyed by spec, not by their options) and
    both come back after it, also when it raises; combined with another option, that one holds too."""
    import os

    from kernelgen.jit import compiler, runtime
    from kernelgen.kernels.spec import TileConfig
    from kernelgen.selection import heuristics
    spec = importlib.util.spec_from_file_location("decode_ab", REPO / "benchmarks" / "experiments" / "decode_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    monkeypatch.setattr(runtime, "_loaded", {"kept": object()})
    monkeypatch.delenv(compiler.DEFINES_ENV, raising=False)
    t = TileConfig(16, 16, 1, 2, 8)

    def inside():
        runtime._loaded["new"] = object()
        return os.environ.get(compiler.DEFINES_ENV), sorted(runtime._loaded), heuristics.fp8_tile(t, 128, 128).num_stages
    assert ab.with_options("dKG_TIMELINE+st3", inside) == ("KG_TIMELINE", ["new"], 3)
    assert compiler.DEFINES_ENV not in os.environ and sorted(runtime._loaded) == ["kept"]
    assert "new" not in runtime._loaded and any(True for _ in ab._KEEP)
    monkeypatch.setenv(compiler.DEFINES_ENV, "KG_A")
    assert ab.with_options("dKG_B", lambda: os.environ[compiler.DEFINES_ENV]) == "KG_A,KG_B"
    assert os.environ[compiler.DEFINES_ENV] == "KG_A"

    def boom():
        raise RuntimeError("prepare failed")
    with pytest.raises(RuntimeError, match="prepare failed"):
        ab.with_options("dKG_C", boom)
    assert os.environ[compiler.DEFINES_ENV] == "KG_A" and sorted(runtime._loaded) == ["kept"]
    assert compiler.default_options("sm_90a")[-1] == "-DKG_A"


def test_alternating_rounds_edge_cases():
    """A failure of kernelgen's own call between a peer's rounds is raised (the entry's error), not
    reported as the peer's; the plot's peer rates follow the per-peer ratios; a per-peer base that is
    not a positive number falls back to peer_base_us (gpu_report's read_report refuses a report
    carrying one: test_gpu_report_cpu's MALFORMED); gpu_report's fallback ratio takes the per-peer base."""
    import torch

    from kernelgen.apps.bench import plots

    ref = torch.ones(2, 2, 8)
    calls = {"n": 0}

    def kg():
        return ref

    def timer(fn):
        if fn is kg:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("kernelgen's call failed")
        return 100.0

    e = {"name": "x"}
    with pytest.raises(RuntimeError, match="kernelgen's call failed"):
        peers.measure(e, {"fa4": lambda: peers.Peer(lambda: ref, lambda r: r)}, timer, reference=ref, base=kg,
                      rounds=3)
    assert "fa4" not in e.get("unavailable", {})
    row = {"name": "variant_x", "suite": "prefill", "metric": "tflops", "tflops": 400.0, "us": 95.0,
           "peer_base_us": 120.0, "peers": {"fa4": 100.0}, "peer_base_by_peer": {"fa4": 105.0}}
    rates = plots.peer_rates(row)
    assert rates["kernelgen"] == 400.0 and rates["FA4"] == pytest.approx(400.0 * 105.0 / 100.0)
    for bad in (0, -105.0, "105", float("nan"), True, None):
        assert report.peer_base_for({**row, "peer_base_by_peer": {"fa4": bad}}, "fa4") == 120.0
    import importlib.util as iu
    spec = iu.spec_from_file_location("gpu_report_t", str(Path(__file__).resolve().parents[1] / "tools" / "gpu_report.py"))
    gr = iu.module_from_spec(spec)
    spec.loader.exec_module(gr)
    assert gr._ratio({**row}, "fa4") == pytest.approx(100.0 / 105.0)
