"""Assemble gpu_report.json from one tools/gpu_check.sh run and print the summary table.

Shape: {"commit", "date", "device", "tests": {"passed", "failed", "skipped"}, "checks": {name: bool},
"benchmarks": [{"name", "us", "tflops", "tbps", "peers": {peer: us}}], plus "extra" details.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
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


def commit() -> str:
    if os.environ.get("KERNELGEN_COMMIT"):
        return os.environ["KERNELGEN_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], text=True, stderr=subprocess.DEVNULL).strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    out = args.out
    tests = junit_counts(out / "junit.xml")
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
                  "tile_sweep_causal_h128_s16k": (bench or {}).get("tile_sweep_causal_h128_s16k")},
    }
    for check, names in TEST_CHECKS.items():
        report["checks"][check] = all(n in tests.get("passed_names", ()) for n in names)
    compare = load(out / "compare.json")
    for layout in ("soa", "aos"):
        rows = [r for r in (compare or []) if r["layout"] == layout]
        report["checks"][f"padded_replay_{layout}"] = bool(rows) and all(r["padded_replay_ok"] for r in rows) and (
            f"test_seed_scenario_padded_replay[{layout}]" in tests.get("passed_names", ()))
    if compare:
        report["extra"]["compare_layouts"] = compare
    if demo:
        report["checks"].update(demo.get("check", {}))
        report["benchmarks"].append(demo["benchmark"])
        report["extra"]["demo"] = {k: demo.get(k) for k in ("max_error", "requests", "tokens")}
    else:
        report["checks"]["demo_matches_reference"] = False
    for e in (bench or {}).get("benchmarks", []):
        report["benchmarks"].append({k: e.get(k) for k in ("name", "us", "tflops", "tbps", "peers")})
        if e.get("unavailable"):
            report["extra"].setdefault("unavailable_peers", {})[e["name"]] = e["unavailable"]
    (out / "gpu_report.json").write_text(json.dumps(report, indent=2))

    t = report["tests"]
    lines = [f"GPU report {report['commit'][:10]} on {report['device']} ({report['date']})",
             f"tests: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped"]
    lines += [f"  FAILED {f}" for f in tests.get("failures", [])[:15]]
    lines += [f"check {k}: {'ok' if v else 'FAIL'}" for k, v in report["checks"].items()]
    lines.append(f"{'benchmark':36s} {'us':>10s} {'TFLOP/s':>8s}  peers (us, ratio peer/kernelgen)")
    for b in report["benchmarks"]:
        peers = "  ".join(f"{p} {u:.0f} ({u / b['us']:.2f}x)" for p, u in (b.get("peers") or {}).items())
        tf = f"{b['tflops']:.0f}" if b.get("tflops") else "-"
        lines.append(f"{b['name']:36s} {b['us']:10.1f} {tf:>8s}  {peers}")
    print("\n".join(lines))
    return 0 if t["failed"] == 0 and all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
