"""Assemble gpu_report.json from one tools/gpu_check.sh run and print the summary table.

Shape: {"commit", "date", "device", "tests": {"passed", "failed", "skipped"}, "checks": {name: bool},
"benchmarks": [{"name", "us", "tflops", "tbps", "peers": {peer: us}, "max_diff": {peer: largest |peer -
kernelgen|}}], plus "extra" details.  The bench's ``<entry>_agrees_with_peers`` checks are report checks.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit_counts(path: Path) -> dict:
    if not path.exists():
        return {"passed": 0, "failed": 1, "skipped": 0, "error": "no junit.xml (pytest did not run)"}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    tests = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    failures = [f"{c.get('classname')}::{c.get('name')}" for s in suites for c in s.iter("testcase")
                if c.find("failure") is not None or c.find("error") is not None]
    passed = {c.get("name") for s in suites for c in s.iter("testcase")
              if all(c.find(x) is None for x in ("failure", "error", "skipped"))}
    return {"passed": tests - failed - skipped, "failed": failed, "skipped": skipped, "failures": failures[:50],
            "passed_names": passed}


#: checks that are a set of GPU tests all passing (test names as pytest writes them in junit.xml)
TEST_CHECKS = {
    "scheduler_matches_reference": ["test_scheduler_kernel_matches_reference[soa]",
                                    "test_scheduler_kernel_matches_reference[aos]"],
    "graph_replay_correct": ["test_graph_decode_step_100_replays[soa]", "test_graph_decode_step_100_replays[aos]"],
    "mixed_matches_reference": ["test_mixed_prefill_and_decode_batch"],
}


#: tools/gpu_check.sh's parts (its first argument)
PARTS = ("tests", "bench", "all", "reliability", "full-bench")


def optional_checks(out: Path, report: dict, tests: dict) -> None:
    """Issue-7 checks from the files of their own runs, when present in the folder: fuzz.json
    (tools/fuzz.py), sanitize_memcheck.log / sanitize_racecheck.log (tools/sanitize.sh),
    junit_multi.xml (2-GPU run) and junit_cpu_cache.xml (the CPU cache-fault tests)."""
    earlier = os.environ.get("KERNELGEN_EARLIER_RUNS")
    if earlier:  # fuzz / sanitizer / 2-GPU files that came from runs of an earlier commit
        report["extra"]["fuzz_sanitizer_multigpu_commit"] = earlier
    fuzz = load(out / "fuzz.json")
    if fuzz:
        report["checks"]["fuzz_2000_ok"] = (fuzz.get("ran", 0) >= 2000 and fuzz.get("complete") is True and
                                            fuzz.get("mismatches") == 0 and fuzz.get("unwritten_rows") == 0 and
                                            fuzz.get("exceptions") == 0)
        report["extra"]["fuzz"] = {k: fuzz.get(k) for k in ("seed", "ran", "mismatches", "unwritten_rows",
                                                             "exceptions", "seconds", "poison", "fp8_mma",
                                                             "quantize_q")}
    san = load(out / "sanitize.json")   # tools/sanitize.sh's summary, when its logs did not come back
    for tool, pattern in (("memcheck", r"ERROR SUMMARY: (\d+) error"),
                          ("racecheck", r"RACECHECK SUMMARY: \d+ hazards displayed \((\d+) error")):
        log = out / f"sanitize_{tool}.log"
        if not log.exists() and san and f"{tool}_errors" in san:
            report["checks"][f"{tool}_clean"] = san[f"{tool}_errors"] == 0 and san.get(f"{tool}_rc") == 0 \
                and bool(san.get("ok"))
            report["extra"][f"{tool}_errors"] = san[f"{tool}_errors"]
        if log.exists():
            found = re.findall(pattern, log.read_text())
            cases = log.read_text().count(": ok\n")
            report["checks"][f"{tool}_clean"] = bool(found) and int(found[-1]) == 0 and cases > 0
            report["extra"][f"{tool}_errors"] = int(found[-1]) if found else None
    names = tests.get("passed_names", set())
    if (out / "junit_multi.xml").exists():
        report["checks"]["cuda1_ok"] = all(n in names for n in (
            "test_cuda1_while_current_device_is_0", "test_cuda1_in_device_context_on_side_stream",
            "test_plan_on_cuda1_in_device_context"))
        report["checks"]["tensor_parallel_2gpu_ok"] = "test_tensor_parallel_example" in names
    cpu = out / "junit_cpu_cache.xml"
    if cpu.exists():
        c = junit_counts(cpu)
        report["checks"]["cache_concurrency_ok"] = c["failed"] == 0 and c["passed"] > 0
        report["extra"]["cpu_cache_tests"] = {k: c[k] for k in ("passed", "failed", "skipped")}


#: Report names an issue asks for that are the same measurement as a bench entry: issue 5's
#: ``varlen_trace_prefill_gqa`` (a skewed batch of trace requests, 32/8 heads, causal; peer
#: ``torch_fa2_varlen``) is the bench's ``prefill_varlen_trace`` of the default preset (llama3-8b:
#: 32 query / 8 KV heads, d 128, the demo's trace batch).
ALIASES = {"varlen_trace_prefill_gqa": "prefill_varlen_trace"}


def add_aliases(benchmarks: list) -> None:
    """Append a copy of each aliased entry under its other name (``same_as`` names the source)."""
    names = {b["name"]: b for b in benchmarks}
    for alias, src in ALIASES.items():
        if src in names and alias not in names:
            benchmarks.append({**names[src], "name": alias, "same_as": src})


#: Fields of a bench entry the report keeps when the entry has them: the rates' counts, the peer
#: ratios, best peer and agreement; the cost entries' own baselines (``sinks_*``: us_nosinks /
#: sinks_ratio, the cost docs/performance.md quotes; ``alibi_*``: us_noalibi / alibi_ratio;
#: ``variant_*``: us_builtin / variant_ratio; ``variant_example_*``: us_plain / variant_ratio; each
#: with ``twin_spread``, the calls' times over their twins' loaded as other modules, and
#: ``twin_kernels_differ`` where a twin ran another kernel) and the kernelgen time their peers are divided by
#: (``peer_base_us``; ``peer_base_by_peer`` / ``peer_rounds_us`` / ``peer_method`` where the peers were timed
#: in rounds alternating with it); ``variant_compile_first_call``'s second call (its ``us`` and its peers'
#: times are first calls), the time until its Hopper kernel was built (``us_hopper_ready``: the
#: first call runs the sm_80 kernel meanwhile), the kernels its first call ran and the background
#: build returned.
KEPT_IF_SET = ("flops", "bytes", "ratios", "best_peer", "vs_best", "max_diff", "us_nosinks", "sinks_ratio",
               "us_noalibi", "alibi_ratio", "us_builtin", "variant_ratio", "peer_base_us", "us_second_call",
               "us_hopper_ready", "first_call_kernels", "hopper_built", "commit", "fp8_speedup", "peer_atol",
               "twin_spread", "twin_kernels_differ", "us_plain", "peer_base_by_peer", "peer_rounds_us",
               "peer_method", "switch_base_us", "visible_pairs_ratio")
#: Kept whenever the bench wrote them, empty or not (report.disagrees: an empty list means every
#: compared peer agreed, an absent one that agreement must be recomputed from max_diff).
KEPT_IF_PRESENT = ("peers_disagreeing",)
def own_baseline(b: dict) -> str:
    """A cost entry's ratio to its own baseline with its twins' spread ("1.02x without ALiBi (3,850 µs;
    twins 0.98-1.01)"), "" for the others: ``kernelgen.apps.bench.report.own_baseline_text``."""
    from kernelgen.apps.bench.report import own_baseline_text

    return own_baseline_text(b)


def commit() -> str:
    if os.environ.get("KERNELGEN_COMMIT"):
        return os.environ["KERNELGEN_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], text=True, stderr=subprocess.DEVNULL).strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def read_report(path: Path) -> dict:
    """A report of this module's shape (``gpu_report.json``, ``docs/benchmarks/h200.json``), checked
    where tools/merge_report.py and tools/perf_page.py read it.

    Raises:
        ValueError: the file is not JSON or not of that shape; the message names the file and the
            field (``benchmarks[3].peers.fa3``).
        OSError: the file cannot be read.
    """
    try:
        rep = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None

    def bad(field, want):
        return ValueError(f"{path}: {field} must be {want}")
    if not isinstance(rep, dict):
        raise bad("the report", "a JSON object")
    if not isinstance(rep.get("benchmarks"), list):
        raise bad("benchmarks", "a list of entries")
    for k in ("tests", "checks", "extra"):
        if k in rep and not isinstance(rep[k], dict):
            raise bad(k, "an object")
    for k, v in (rep.get("checks") or {}).items():
        if not isinstance(v, bool):
            raise bad(f"checks.{k}", "true or false")
    for k, v in (rep.get("tests") or {}).items():
        if k in ("passed", "failed", "skipped") and not (_number(v) and v >= 0):
            raise bad(f"tests.{k}", "a count")
    for i, b in enumerate(rep["benchmarks"]):
        where = f"benchmarks[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            raise bad(where, "an object with a 'name'")
        for k in ("us", "tflops", "tbps"):
            if b.get(k) is not None and not (_number(b[k]) and b[k] > 0):
                raise bad(f"{where}.{k} ({b['name']})", "a positive number or null")
        for k in ("peers", "ratios", "peer_base_by_peer"):
            if b.get(k) is None:
                continue
            if not isinstance(b[k], dict):
                raise bad(f"{where}.{k} ({b['name']})", "an object")
            for p, v in b[k].items():
                if v is not None and not (_number(v) and v > 0):
                    raise bad(f"{where}.{k}.{p} ({b['name']})", "a positive number")
    return rep


def _ratio(b: dict, peer: str) -> float:
    """Peer time / kernelgen time of a benchmark row: the bench's own ratio when it has one (its
    switch columns divide by the default call's time from their interleaved measurement, a cost
    entry's peers by ``peer_base_by_peer`` / ``peer_base_us``)."""
    r = (b.get("ratios") or {}).get(peer)
    if r is not None:
        return r
    return b["peers"][peer] / ((b.get("peer_base_by_peer") or {}).get(peer) or b.get("peer_base_us") or b["us"])


def _measured_earlier(b: dict, report: dict) -> bool:
    """Whether bench entry ``b`` carries a commit other than the report's (merged from an earlier run)."""
    return bool(b.get("commit")) and not str(report["commit"]).startswith(str(b["commit"])[:7])


def _suite_at(t: dict, report: dict) -> str:
    """" (the full suite at `X`)" when the counts were measured at another commit than the report's."""
    c = str(t.get("commit") or "")[:7]
    return f" (the full suite at `{c}`)" if c and c != str(report["commit"])[:7] else ""


def issues_text(benchmarks: list, roofs: dict | None) -> str:
    """The open performance goals as Markdown (``kernelgen.apps.bench.report.goals_text``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelgen.apps.bench.report import goals_text
    return goals_text(benchmarks, roofs)


def issues(benchmarks: list, roofs: dict | None) -> dict:
    """The open performance issues' numbers on the report's entries (``kernelgen.apps.bench.report``):
    {"issue22": issue22_summary, "issue23" / "issue24" / "issue25": goal_table of ISSUE2x_GOALS}."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelgen.apps.bench import report as r
    return {"issue22": r.issue22_summary(benchmarks), "issue23": r.goal_table(benchmarks, r.ISSUE23_GOALS, roofs),
            "issue24": r.goal_table(benchmarks, r.ISSUE24_GOALS, roofs),
            "issue25": r.goal_table(benchmarks, r.ISSUE25_GOALS, roofs)}


def markdown(report: dict) -> str:
    """docs/benchmarks/h200.md: the report as readable tables (a peer whose output is outside the
    tolerance, ``report.disagrees``, is marked "output differs" beside its ratio, as the bench's tables do)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelgen.apps.bench.report import disagrees
    t = report["tests"]
    lines = ["# H200 report", "",
             f"Commit `{report['commit']}`, {report['date']}, {report['device']}.  Generated by "
             f"`tools/gpu_report.py` from one `tools/gpu_check.sh` run; the JSON is `h200.json` beside this file.", "",
             f"GPU tests{_suite_at(t, report)}: **{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped**.", "",
             "| check | result |", "| --- | --- |"]
    lines += [f"| {k} | {'ok' if v else 'FAIL'} |" for k, v in report["checks"].items()]
    lines += ["", "| benchmark | us | TFLOP/s | TB/s | vs best peer | peers: us (peer time / kernelgen time) "
                  "| vs own baseline | measured at |",
              "| --- | ---: | ---: | ---: | --- | --- | --- | --- |"]
    for b in report["benchmarks"]:
        peers = ", ".join(f"{p} {u:.0f} ({_ratio(b, p):.2f}x{', output differs' if disagrees(b, p) else ''})"
                          for p, u in (b.get("peers") or {}).items())
        tf = f"{b['tflops']:.0f}" if b.get("tflops") else ""
        tb = f"{b['tbps']:.2f}" if b.get("tbps") else ""
        best = f"{b['vs_best']:.2f}x {b['best_peer']}" if b.get("best_peer") else ""
        at = f"`{b['commit']}`" if _measured_earlier(b, report) else ""
        lines.append(f"| {b['name']} | {b['us']:.1f} | {tf} | {tb} | {best} | {peers} | {own_baseline(b)} | {at} |")
    lines += ["", "vs own baseline: a cost entry's time over kernelgen's call without the feature (sinks_*, "
                  "alibi_*) or over the built-in form of a user variant (variant_*), both from one interleaved "
                  "CUDA-graph measurement; their peers are divided by the entry's call timed as the peers are "
                  "(peer_base_us; in the user-variant and FP8 prefill entries the median of the rounds that "
                  "alternated with that peer, peer_base_by_peer)."]
    older = [b for b in report["benchmarks"] if _measured_earlier(b, report)]
    if older:
        lines += ["", f"{len(older)} of {len(report['benchmarks'])} benchmark entries were measured at an earlier "
                      "commit (column measured at); the rest at the report's commit."]
    from_earlier = (report.get("extra") or {}).get("checks_from_earlier_runs") or {}
    if from_earlier:
        lines += ["", "Checks from earlier runs (not rerun at the report's commit): " + ", ".join(
            f"{k} (`{c}`)" for k, c in from_earlier.items()) + "."]
    earlier = (report.get("extra") or {}).get("fuzz_sanitizer_multigpu_commit")
    if earlier:
        lines += ["", f"The fuzz, sanitizer and 2-GPU checks (and 4 of the passed tests) ran on commit {earlier}."]
    goals = issues_text(report["benchmarks"], (report.get("extra") or {}).get("roofs"))
    if goals:
        lines += ["", goals]
    roofs = (report.get("extra") or {}).get("roofs")
    if roofs:
        lines += ["", f"Roofs measured in the same run: copy {roofs['copy_tbps']:.2f} TB/s (read + write), "
                      f"bf16 matmul {roofs['bf16_matmul_tflops']:.0f} TFLOP/s."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--markdown", type=Path, default=None, help="also write the tables as Markdown")
    ap.add_argument("--parts", default="all",
                    help="the tools/gpu_check.sh parts the folder's run took (comma-separated, default all): the "
                         "demo's and compare-layouts' checks are evaluated only where a bench part ran (tests, "
                         "reliability alone leave them out, as not run, instead of failing them)")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    unknown = parts - set(PARTS)
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(sorted(unknown))} (known: {', '.join(PARTS)})")
    bench_ran = bool(parts & {"bench", "all", "full-bench"})
    out = args.out
    tests = junit_counts(out / "junit.xml")
    multi = junit_counts(out / "junit_multi.xml") if (out / "junit_multi.xml").exists() else None
    if multi:  # the 2-GPU machine's run of tests/gpu/test_multi_gpu.py
        for k in ("passed", "failed", "skipped"):
            tests[k] += multi[k]
        tests["passed"] -= sum(1 for n in multi["passed_names"] if n in tests["passed_names"])
        tests["failures"] += multi["failures"]
        tests["passed_names"] = set(tests["passed_names"]) | multi["passed_names"]
    demo = load(out / "demo.json")
    bench = load(out / "bench.json")
    report = {
        "commit": commit(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": (bench or {}).get("device", "unknown"),
        "tests": {k: tests[k] for k in ("passed", "failed", "skipped")},
        "checks": {},
        "benchmarks": [],
        "extra": {"failures": tests.get("failures", []), "roofs": (bench or {}).get("roofs"),
                  "first_call": (bench or {}).get("first_call"),
                  "tile_sweep_causal_h128_s16k": (bench or {}).get("tile_sweep_causal_h128_s16k")},
    }
    for check, names in TEST_CHECKS.items():
        report["checks"][check] = all(n in tests.get("passed_names", ()) for n in names)
    compare = load(out / "compare.json")
    for layout in ("soa", "aos") if bench_ran or compare else ():
        rows = [r for r in (compare or []) if r["layout"] == layout]
        report["checks"][f"padded_replay_{layout}"] = bool(rows) and all(r["padded_replay_ok"] for r in rows) and (
            f"test_seed_scenario_padded_replay[{layout}]" in tests.get("passed_names", ()))
    if compare:
        report["extra"]["compare_layouts"] = compare
    optional_checks(out, report, tests)
    if demo:
        report["checks"].update(demo.get("check", {}))
        report["benchmarks"].append(demo["benchmark"])
        report["extra"]["demo"] = {k: demo.get(k) for k in ("max_error", "requests", "tokens")}
    elif bench_ran:
        report["checks"]["demo_matches_reference"] = False
    # the bench's comparison of each peer's output with kernelgen's (report.checks): a peer that
    # computed something else is no bar to measure against, so its disagreement fails the report
    report["checks"].update({k: v for k, v in ((bench or {}).get("checks") or {}).items()
                             if k.endswith("_agrees_with_peers") or k == "auto_choice_within_2pct"})
    if bench and "auto_choice_within_2pct" in (bench.get("checks") or {}):
        from kernelgen.apps.bench.report import auto_choice_misses
        report["extra"]["auto_choice_misses"] = auto_choice_misses(bench.get("benchmarks", []))
    for e in (bench or {}).get("benchmarks", []):
        report["benchmarks"].append({k: e.get(k) for k in ("name", "us", "tflops", "tbps", "peers") + KEPT_IF_SET
                                     + KEPT_IF_PRESENT
                                     if k not in KEPT_IF_SET + KEPT_IF_PRESENT or e.get(k) or (k in KEPT_IF_PRESENT and k in e)})
        if e.get("unavailable"):
            report["extra"].setdefault("unavailable_peers", {})[e["name"]] = e["unavailable"]
    add_aliases(report["benchmarks"])
    report.update(issues(report["benchmarks"], report["extra"].get("roofs")))
    (out / "gpu_report.json").write_text(json.dumps(report, indent=2))
    if args.markdown:
        args.markdown.write_text(markdown(report))

    t = report["tests"]
    lines = [f"GPU report {report['commit'][:10]} on {report['device']} ({report['date']})",
             f"tests: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped"]
    lines += [f"  FAILED {f}" for f in tests.get("failures", [])[:15]]
    lines += [f"check {k}: {'ok' if v else 'FAIL'}" for k, v in report["checks"].items()]
    lines.append(f"{'benchmark':36s} {'us':>10s} {'TFLOP/s':>8s}  peers (us, ratio peer/kernelgen)")
    for b in report["benchmarks"]:
        peers = "  ".join(f"{p} {u:.0f} ({_ratio(b, p):.2f}x)" for p, u in (b.get("peers") or {}).items())
        tf = f"{b['tflops']:.0f}" if b.get("tflops") else "-"
        lines.append(f"{b['name']:36s} {b['us']:10.1f} {tf:>8s}  {peers}")
    print("\n".join(lines))
    return 0 if t["failed"] == 0 and all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
