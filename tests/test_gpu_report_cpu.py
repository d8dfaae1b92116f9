"""tools/gpu_report.py's aliases (no GPU): issue 5 names the varlen trace prefill entry
``varlen_trace_prefill_gqa``; the report carries it as a copy of the bench's
``prefill_varlen_trace`` measurement, marked ``same_as``."""
import importlib.util
import re
from pathlib import Path

import pytest

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


def test_report_carries_best_peer_and_first_calls(tmp_path, capsys):
    """The GPU report keeps the bench's best peer per entry (a markdown column) and its first-call
    summary."""
    import json

    from kernelgen.apps.bench import report

    e = report.finalize({"name": "prefill_dense_h128_s4k", "suite": "prefill", "us": 1000.0, "metric": "tflops",
                         "flops": 6e11, "peers": {"fa3": 900.0, "fa4": 950.0, "kernelgen_sm80": 700.0},
                         "unavailable": {}, "first_call_s": {"fa4": 12.0, "fa3": 0.3}}, None)
    (tmp_path / "bench.json").write_text(json.dumps(report.build_report([e], None, "NVIDIA H200", commit="c")))
    gpu_report.main(["--out", str(tmp_path), "--markdown", str(tmp_path / "h200.md")])
    rep = json.loads((tmp_path / "gpu_report.json").read_text())
    row = next(b for b in rep["benchmarks"] if b["name"] == "prefill_dense_h128_s4k")
    assert row["best_peer"] == "fa3" and abs(row["vs_best"] - 0.9) < 1e-12
    assert rep["extra"]["first_call"]["fa4"]["max_s"] == 12.0
    md = (tmp_path / "h200.md").read_text()
    assert "| prefill_dense_h128_s4k | 1000.0 | 600 |  | 0.90x fa3 | fa3 900 (0.90x)" in md


def test_report_keeps_the_peers_agreement_with_kernelgen(tmp_path, capsys):
    """A peer is only a fair bar if it computed the same attention: the bench compares every peer's
    output with kernelgen's (``max_diff``, its ``<entry>_agrees_with_peers`` checks).  The GPU report
    keeps both, so a peer called with the wrong arguments (a causal mask aligned top-left, a window
    off by one) shows in the committed report and fails its summary instead of being dropped."""
    import json

    from kernelgen.apps.bench import report

    ok = report.finalize({"name": "prefill_dense_h128_s4k", "suite": "prefill", "us": 1000.0, "metric": "tflops",
                          "flops": 6e11, "peers": {"fa3": 900.0}, "unavailable": {}, "max_diff": {"fa3": 0.004},
                          "ref_max": {"fa3": 3.0}}, None)
    bad = report.finalize({"name": "prefill_chunked_paged16", "suite": "prefill", "us": 1000.0, "metric": "tflops",
                           "flops": 6e11, "peers": {"fa4": 800.0}, "unavailable": {}, "max_diff": {"fa4": 1.5},
                           "ref_max": {"fa4": 3.0}}, None)
    (tmp_path / "bench.json").write_text(json.dumps(report.build_report([ok, bad], None, "NVIDIA H200", commit="c")))
    gpu_report.main(["--out", str(tmp_path), "--markdown", str(tmp_path / "h200.md")])
    rep = json.loads((tmp_path / "gpu_report.json").read_text())
    assert rep["checks"]["prefill_dense_h128_s4k_agrees_with_peers"] is True
    assert rep["checks"]["prefill_chunked_paged16_agrees_with_peers"] is False
    rows = {b["name"]: b for b in rep["benchmarks"]}
    assert rows["prefill_chunked_paged16"]["max_diff"] == {"fa4": 1.5}
    assert rows["prefill_dense_h128_s4k"]["max_diff"] == {"fa3": 0.004}
    md = (tmp_path / "h200.md").read_text()
    assert "| prefill_chunked_paged16_agrees_with_peers | FAIL |" in md
    # the benchmark table marks the disagreeing peer beside its ratio, and only that one
    assert "fa4 800 (0.80x, output differs)" in md and "fa3 900 (0.90x) |" in md
    # which peers disagreed travels with the entry, an empty list too (the summaries read it)
    assert rows["prefill_dense_h128_s4k"]["peers_disagreeing"] == []
    assert rows["prefill_chunked_paged16"]["peers_disagreeing"] == ["fa4"]
    assert rep["issue22"]["entries"]["prefill_dense_h128_s4k"]["peer"] == "fa3"
    assert "prefill_chunked_paged16" in rep["issue22"]["missing"]


def test_report_keeps_the_sinks_cost(tmp_path, capsys):
    """docs/performance.md quotes the cost of attention sinks (the bench's ``sinks_ratio``, its
    with/without-sinks interleaved measurement); the GPU report keeps it and ``us_nosinks`` so the
    committed report backs that figure (it used to drop both)."""
    import json

    from kernelgen.apps.bench import report

    e = report.finalize({"name": "sinks_decode_b128_paged16", "suite": "decode", "us": 1010.0, "metric": "tbps",
                         "bytes": 4e9, "peers": {}, "unavailable": {}, "us_nosinks": 1000.0,
                         "sinks_ratio": 1.01}, None)
    (tmp_path / "bench.json").write_text(json.dumps(report.build_report([e], None, "NVIDIA H200", commit="c")))
    gpu_report.main(["--out", str(tmp_path)])
    rep = json.loads((tmp_path / "gpu_report.json").read_text())
    row = next(b for b in rep["benchmarks"] if b["name"] == "sinks_decode_b128_paged16")
    assert row["us_nosinks"] == 1000.0 and row["sinks_ratio"] == 1.01


def test_report_keeps_the_alibi_and_variant_costs_and_shows_them(tmp_path, capsys):
    """Issue 25's figures: the ALiBi entries' us_noalibi / alibi_ratio, the user-variant entries'
    us_builtin / variant_ratio, the kernelgen time their peers are divided by (peer_base_us) and the
    first-call entry's second call are kept, and the markdown shows each cost entry's ratio to its
    own baseline; the GPU report's own baselines are the bench's."""
    import json

    from kernelgen.apps.bench import report

    alibi = report.finalize({"name": "alibi_prefill_causal_s16k", "suite": "prefill", "us": 4040.0, "metric": "tflops",
                             "flops": 2e12, "peers": {"fa4": 4400.0}, "unavailable": {"fa3": "no ALiBi"},
                             "us_noalibi": 4000.0, "alibi_ratio": 1.01, "peer_base_us": 4100.0,
                             "twin_spread": {"kernelgen": 0.98, "kernelgen_alibi": 1.03},
                             "max_diff": {"fa4": 0.004}, "ref_max": {"fa4": 3.0}}, None)
    var = report.finalize({"name": "variant_softcap_prefill_causal_s16k", "suite": "prefill", "us": 3900.0,
                           "metric": "tflops", "flops": 2e12, "peers": {}, "unavailable": {},
                           "us_builtin": 3950.0, "variant_ratio": 3900.0 / 3950.0, "peer_base_us": 3920.0}, None)
    first = report.finalize({"name": "variant_compile_first_call", "suite": "compile", "us": 2.5e6,
                             "peers": {"fa4": 30e6, "flex_attention": 12e6}, "unavailable": {},
                             "us_second_call": 300.0, "first_call_s": {"fa4": 30.0, "flex_attention": 12.0},
                             "us_hopper_ready": 1.5e6, "first_call_kernels": ["attn_sm_90a_var1"],
                             "hopper_built": ["attn_sm_90a_wgmma_var1"]}, None)
    (tmp_path / "bench.json").write_text(json.dumps(report.build_report([alibi, var, first], None, "NVIDIA H200",
                                                                        commit="c")))
    gpu_report.main(["--out", str(tmp_path), "--markdown", str(tmp_path / "h200.md")])
    rep = json.loads((tmp_path / "gpu_report.json").read_text())
    rows = {b["name"]: b for b in rep["benchmarks"]}
    a = rows["alibi_prefill_causal_s16k"]
    assert (a["us_noalibi"], a["alibi_ratio"], a["peer_base_us"]) == (4000.0, 1.01, 4100.0)
    assert a["twin_spread"] == {"kernelgen": 0.98, "kernelgen_alibi": 1.03}
    assert abs(a["ratios"]["fa4"] - 4400.0 / 4100.0) < 1e-12
    v = rows["variant_softcap_prefill_causal_s16k"]
    assert v["us_builtin"] == 3950.0 and abs(v["variant_ratio"] - 3900.0 / 3950.0) < 1e-12
    f = rows["variant_compile_first_call"]
    assert f["us"] == 2.5e6 and f["us_second_call"] == 300.0 and f["peers"] == {"fa4": 30e6, "flex_attention": 12e6}
    assert f["us_hopper_ready"] == 1.5e6 and f["hopper_built"] == ["attn_sm_90a_wgmma_var1"]
    assert f["first_call_kernels"] == ["attn_sm_90a_var1"]
    md = (tmp_path / "h200.md").read_text()
    assert "| 1.01x without ALiBi (4000.0 µs; twins 0.98-1.03) |" in md and "0.99x built-in (3950.0 µs)" in md
    assert "fa4 4400 (1.07x)" in md
    assert rep["checks"]["alibi_prefill_causal_s16k_agrees_with_peers"] is True


def _merge_report():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    spec2 = importlib.util.spec_from_file_location("merge_report",
                                                   Path(__file__).resolve().parents[1] / "tools" / "merge_report.py")
    mod = importlib.util.module_from_spec(spec2)
    spec2.loader.exec_module(mod)
    return mod


def _perf_page():
    import importlib.util
    spec = importlib.util.spec_from_file_location("perf_page", Path(__file__).resolve().parents[1] / "tools" / "perf_page.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_merge_report_keeps_what_a_partial_run_did_not_rerun():
    """tools/merge_report.py: a decode-only run replaces its entries (stamped with the run's
    commit), leaves the others with the commit they were measured at, takes the suite's counts,
    and overwrites only the checks the run evaluated; the rest are listed as from an earlier run."""
    mr = _merge_report()
    base = {"commit": "aaaaaaa", "date": "d0", "device": "NVIDIA H200", "tests": {"passed": 1, "failed": 0, "skipped": 0},
            "checks": {"padded_replay_soa": True, "fuzz_2000_ok": True, "decode_x_agrees_with_peers": True},
            "benchmarks": [{"name": "prefill_x", "us": 5.0}, {"name": "decode_x", "us": 9.0, "commit": "0000000"}],
            "extra": {"failures": []}}
    run = {"commit": "bbbbbbbccc", "date": "d1", "device": "NVIDIA H200",
           "tests": {"passed": 7, "failed": 0, "skipped": 1},
           "checks": {"padded_replay_soa": False, "fuzz_2000_ok": False, "decode_x_agrees_with_peers": True,
                      "decode_y_agrees_with_peers": True},
           "benchmarks": [{"name": "decode_x", "us": 8.0}, {"name": "decode_y", "us": 3.0}],
           "extra": {"failures": [], "fuzz": {"ran": 12}}}
    m = mr.merge(base, run, "bbbbbbbccc", tests=True)
    rows = {b["name"]: b for b in m["benchmarks"]}
    assert rows["prefill_x"] == {"name": "prefill_x", "us": 5.0, "commit": "aaaaaaa"}
    assert rows["decode_x"]["us"] == 8.0 and rows["decode_x"]["commit"] == rows["decode_y"]["commit"] == "bbbbbbb"
    assert m["commit"] == "bbbbbbbccc" and m["tests"]["passed"] == 7
    # padded_replay is not the suite's to evaluate (compare-layouts did not run): kept, listed as earlier
    assert m["checks"]["padded_replay_soa"] is True and m["checks"]["fuzz_2000_ok"] is False
    assert m["extra"]["checks_from_earlier_runs"] == {"padded_replay_soa": "aaaaaaa"}
    assert m["extra"]["fuzz"] == {"ran": 12}
    assert base["benchmarks"][0] == {"name": "prefill_x", "us": 5.0}     # inputs untouched
    md = gpu_report.markdown(m)
    assert "padded_replay_soa (`aaaaaaa`)" in md and "| prefill_x | 5.0 |" in md and "`aaaaaaa` |" in md
    assert m["tests"]["commit"] == "bbbbbbb" and "GPU tests: **7 passed" in md
    # a run without the suite keeps the counts and says which commit measured them
    m2 = mr.merge(m, {**run, "commit": "ccccccc"}, "ccccccc", tests=False)
    assert m2["tests"] == {"passed": 7, "failed": 0, "skipped": 1, "commit": "bbbbbbb"}
    assert "GPU tests (the full suite at `bbbbbbb`): **7 passed" in gpu_report.markdown(m2)
    assert "GPU tests (full suite at `bbbbbbb`) 7 passed" in _perf_page().render(m2)
    # a bench-only folder fails the suite's checks (no junit.xml): they stay the suite run's
    suite = {k: True for k in gpu_report.TEST_CHECKS}
    m3 = mr.merge({**m2, "checks": {**m2["checks"], **suite}},
                  {**run, "checks": {k: False for k in suite} | {"decode_y_agrees_with_peers": False}},
                  "ddddddd", tests=False)
    assert all(m3["checks"][k] is True for k in suite) and m3["checks"]["decode_y_agrees_with_peers"] is False
    assert all(m3["extra"]["checks_from_earlier_runs"][k] == "ccccccc" for k in suite)


def test_merged_peer_reasons_travel_with_their_entries():
    """A review: merge kept the base's "could not run" reasons beside a rerun entry's new ratio for that
    peer, and dropped the run's own reasons."""
    mr = _merge_report()
    base = {"commit": "aaaaaaa1", "date": "d", "device": "H200", "tests": {"passed": 1, "failed": 0, "skipped": 0},
            "checks": {}, "benchmarks": [{"name": "prefill_x", "us": 100.0, "peers": {}},
                                         {"name": "decode_x", "us": 9.0, "peers": {}}],
            "extra": {"unavailable_peers": {"prefill_x": {"fa3": "old: not measured"},
                                            "decode_x": {"fa3": "kept: decode_x was not rerun"}}}}
    run = {"commit": "bbbbbbb2", "date": "d2", "device": "H200", "tests": {"passed": 1, "failed": 0, "skipped": 0},
           "checks": {}, "benchmarks": [{"name": "prefill_x", "us": 90.0, "peers": {"fa3": 80.0}}],
           "extra": {"unavailable_peers": {"prefill_x": {"fa4": "new reason", "fa3": "stale: fa3 ran"}}}}
    m = mr.merge(base, run, "bbbbbbb2", tests=False)
    assert m["extra"]["unavailable_peers"] == {"prefill_x": {"fa4": "new reason"},
                                               "decode_x": {"fa3": "kept: decode_x was not rerun"}}
    run["extra"]["unavailable_peers"] = {}
    assert mr.merge(base, run, "bbbbbbb2", tests=False)["extra"]["unavailable_peers"] == {
        "decode_x": {"fa3": "kept: decode_x was not rerun"}}


def test_sanitizer_summary_stands_in_for_its_logs(tmp_path):
    """When the sanitizer's logs stay on the device (a call returns few files), sanitize.json's
    counts make the memcheck / racecheck checks."""
    import json

    (tmp_path / "sanitize.json").write_text(json.dumps({"memcheck_errors": 0, "memcheck_rc": 0, "racecheck_errors": 2,
                                                        "racecheck_rc": 1, "ok": False}))
    rep = {"checks": {}, "extra": {}}
    gpu_report.optional_checks(tmp_path, rep, {})
    assert rep["checks"] == {"memcheck_clean": False, "racecheck_clean": False}   # ok is False: neither clean
    (tmp_path / "sanitize.json").write_text(json.dumps({"memcheck_errors": 0, "memcheck_rc": 0, "racecheck_errors": 0,
                                                        "racecheck_rc": 0, "ok": True}))
    gpu_report.optional_checks(tmp_path, rep, {})
    assert rep["checks"] == {"memcheck_clean": True, "racecheck_clean": True} and rep["extra"]["racecheck_errors"] == 0


def test_merged_report_carries_the_issues_numbers_and_shows_them():
    """merge_report recomputes issues 22-24's numbers on the merged entries (an entry measured
    earlier counts with the run's), and h200.md shows them."""
    mr = _merge_report()
    base = {"commit": "aaaaaaa", "date": "d0", "device": "NVIDIA H200", "tests": {"passed": 1, "failed": 0, "skipped": 0},
            "checks": {}, "benchmarks": [{"name": "prefill_dense_h128_s4k", "us": 100.0, "peers": {"fa3": 95.0}}],
            "extra": {"failures": [], "roofs": {"copy_tbps": 4.0, "bf16_matmul_tflops": 800.0}}}
    run = {"commit": "bbbbbbb", "date": "d1", "device": "NVIDIA H200", "tests": {}, "checks": {},
           "benchmarks": [{"name": "prefill_varlen_trace", "us": 100.0, "peers": {"fa4": 110.0}},
                          {"name": "decode_trace_b128_paged16", "us": 100.0, "tbps": 3.8,
                           "peers": {"fa3_unpaged": 103.0}}],
           "extra": {}}
    m = mr.merge(base, run, "bbbbbbb", tests=False)
    assert m["issue22"]["entries"] == {"prefill_dense_h128_s4k": {"peer": "fa3", "ratio": 0.95, "commit": "aaaaaaa"},
                                       "prefill_varlen_trace": {"peer": "fa4", "ratio": 1.1, "commit": "bbbbbbb"}}
    rows = {(r["entry"], r["measure"]): r for r in m["issue23"]["rows"]}
    assert rows[("decode_trace_b128_paged16", "vs:fa3|fa3_unpaged")]["ok"] is True
    assert rows[("decode_trace_b128_paged16", "roof")]["value"] == 0.95
    assert m["issue24"]["evaluated"] == 0
    md = gpu_report.markdown(m)
    assert "Issue 22 (prefill against the faster of FA3 and FA4" in md and "geometric mean 1.022x" in md
    assert "| decode_trace_b128_paged16 | vs:fa3 / fa3_unpaged | >= 1.02 | 1.030 | yes | `bbbbbbb` |" in md
    assert "Issue 24 (FP8): 0 of 8 goals met (0 evaluated)." in md


def _junit(path, names, failed=()):
    cases = "".join(f'<testcase classname="tests.gpu.t" name="{n}"/>' for n in names)
    cases += "".join(f'<testcase classname="tests.gpu.t" name="{n}"><failure message="x"/></testcase>' for n in failed)
    path.write_text(f'<testsuites><testsuite tests="{len(names) + len(failed)}" failures="{len(failed)}" '
                    f'errors="0" skipped="0">{cases}</testsuite></testsuites>')


def test_a_tests_only_run_leaves_the_bench_parts_checks_out(tmp_path, capsys):
    """``tools/gpu_check.sh tests`` runs no demo and no compare-layouts: its report leaves their
    checks out (not run) and exits 0 when the suite passed, where it used to fail them; a run that
    took a bench part and lost the demo's file still fails, and a failed test fails the run."""
    import json

    names = [n for ns in gpu_report.TEST_CHECKS.values() for n in ns]
    _junit(tmp_path / "junit.xml", names)
    assert gpu_report.main(["--out", str(tmp_path), "--parts", "tests"]) == 0
    checks = json.loads((tmp_path / "gpu_report.json").read_text())["checks"]
    assert checks == {k: True for k in gpu_report.TEST_CHECKS}
    assert "demo_matches_reference" not in capsys.readouterr().out
    # the default (all) expects the demo's and compare-layouts' files
    assert gpu_report.main(["--out", str(tmp_path)]) == 1
    checks = json.loads((tmp_path / "gpu_report.json").read_text())["checks"]
    assert checks["demo_matches_reference"] is False and checks["padded_replay_soa"] is False
    assert "check demo_matches_reference: FAIL" in capsys.readouterr().out
    _junit(tmp_path / "junit.xml", names[1:], failed=names[:1])
    assert gpu_report.main(["--out", str(tmp_path), "--parts", "tests,reliability"]) == 1
    checks = json.loads((tmp_path / "gpu_report.json").read_text())["checks"]
    assert checks["scheduler_matches_reference"] is False


def test_parts_names_an_unknown_part(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as e:
        gpu_report.main(["--out", str(tmp_path), "--parts", "tests,benhc"])
    assert e.value.code == 2
    assert "--parts: unknown part(s) benhc" in capsys.readouterr().err


MALFORMED = [
    ("[]", "the report must be a JSON object"),
    ('{"benchmarks": {}}', "benchmarks must be a list of entries"),
    ('{"benchmarks": [], "checks": []}', "checks must be an object"),
    ('{"benchmarks": [], "checks": {"fuzz_2000_ok": 1}}', "checks.fuzz_2000_ok must be true or false"),
    ('{"benchmarks": [], "tests": {"passed": "12"}}', "tests.passed must be a count"),
    ('{"benchmarks": [{"us": 3.0}]}', "benchmarks[0] must be an object with a 'name'"),
    ('{"benchmarks": [{"name": "d", "us": "3"}]}', "benchmarks[0].us (d) must be a positive number or null"),
    ('{"benchmarks": [{"name": "d", "us": 3.0, "peers": []}]}', "benchmarks[0].peers (d) must be an object"),
    ('{"benchmarks": [{"name": "d", "us": 3.0}, {"name": "e", "us": 2.0, "peers": {"fa3": 0}}]}',
     "benchmarks[1].peers.fa3 (e) must be a positive number"),
    ('{"benchmarks": [{"name": "v", "us": 3.0, "peers": {"fa4": 3.0}, "peer_base_by_peer": {"fa4": -1}}]}',
     "benchmarks[0].peer_base_by_peer.fa4 (v) must be a positive number"),
    ("{oops", "not JSON"),
]


@pytest.mark.parametrize("text,message", MALFORMED)
def test_report_tools_name_the_field_of_a_malformed_report(tmp_path, capsys, text, message):
    """tools/perf_page.py and tools/merge_report.py on a report of the wrong shape: exit 2 with the
    file and the field named (they raised KeyError / TypeError from deep inside before)."""
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        gpu_report.read_report(bad)
    assert _perf_page().main(["--report", str(bad)]) == 2
    assert f"perf_page: {bad}: {message}" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "gpu_report.json").write_text(text)
    good = tmp_path / "good.json"
    good.write_text('{"commit": "abc", "benchmarks": [], "checks": {}, "tests": {}, "extra": {}}')
    assert _merge_report().main(["--run", str(run), "--commit", "f" * 40, "--report", str(good)]) == 2
    assert f"merge_report: {run / 'gpu_report.json'}: {message}" in capsys.readouterr().err
    assert good.read_text().startswith('{"commit": "abc"')      # nothing written
