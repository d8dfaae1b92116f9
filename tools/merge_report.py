"""Merge a partial GPU run into the committed report (docs/benchmarks/h200.json and h200.md).

A device session rarely reruns everything: ``tools/gpu_report.py --out DIR`` turns one run's folder
into ``DIR/gpu_report.json``; this merges it into the committed report:

- the report's commit becomes ``--commit`` (the run's code); every entry measured earlier keeps
  (or gets) the commit it was measured at, so h200.md's "measured at" column stays true;
- benchmark entries of the run replace the report's entries of the same name (new names are
  appended), stamped with ``--commit``;
- ``tests`` come from the run when it ran the GPU suite (``--tests``); ``tests.commit`` says which
  commit the counts were measured at;
- checks: only those the run evaluated (the suite's with ``--tests`` only, the sanitizer's and the
  fuzz's where the run's folder had their files, the bench's ``*_agrees_with_peers`` /
  ``auto_choice_within_2pct``); the others keep
  their value and ``extra.checks_from_earlier_runs`` lists them with the report commit they came from;
- ``--extra KEY=FILE`` adds a JSON file (or ``KEY=TEXT`` a note) under ``extra``;
- ``issue22`` ... ``issue25``: those issues' numbers on the merged entries (``gpu_report.issues``).

Then ``h200.md`` is rewritten (``gpu_report.markdown``).  Usage:

    python tools/merge_report.py --run DIR --commit SHA [--tests] [--extra notes_x=TEXT]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_report  # noqa: E402

REPORT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "h200.json"
#: checks a run evaluates by itself: the GPU suite's, the reliability runs', the bench's
RUN_CHECKS = tuple(gpu_report.TEST_CHECKS) + ("fuzz_2000_ok", "memcheck_clean", "racecheck_clean")


def evaluated(name: str, run_checks: tuple, tests: bool = True) -> bool:
    """Whether a run's check replaces the report's: the GPU suite's checks only from a run that ran the
    suite (``tests``: a bench-only folder has no junit.xml, so gpu_report fails them there)."""
    if name in gpu_report.TEST_CHECKS and not tests:
        return False
    return name in run_checks or name.endswith("_agrees_with_peers") or name == "auto_choice_within_2pct"


def merge(base: dict, run: dict, commit: str, *, tests: bool, run_checks: tuple = RUN_CHECKS,
          extra: dict | None = None) -> dict:
    """The merged report (``base`` and ``run`` are left as they were)."""
    old_commit = str(base["commit"])[:7]
    out = json.loads(json.dumps(base))
    out["commit"], out["date"] = commit, run.get("date", base.get("date"))
    if run.get("device") and run["device"] != "unknown":
        out["device"] = run["device"]
    for b in out["benchmarks"]:
        b.setdefault("commit", old_commit)
    names = {b["name"]: i for i, b in enumerate(out["benchmarks"])}
    # an entry's peer reasons ("could not run") travel with the entry: the run's replace the base's (a
    # review: a merged report kept an old reason beside the peer's new ratio, and lost the new reasons)
    unavailable = {n: dict(r) for n, r in (out["extra"].get("unavailable_peers") or {}).items()}
    run_unavailable = run.get("extra", {}).get("unavailable_peers") or {}
    for b in run.get("benchmarks", []):
        nb = {**b, "commit": commit[:7]}
        if b["name"] in names:
            out["benchmarks"][names[b["name"]]] = nb
        else:
            out["benchmarks"].append(nb)
        reasons = {p: r for p, r in (run_unavailable.get(b["name"]) or {}).items() if p not in (b.get("peers") or {})}
        if reasons:
            unavailable[b["name"]] = reasons
        else:
            unavailable.pop(b["name"], None)
    if unavailable or "unavailable_peers" in out["extra"]:
        out["extra"]["unavailable_peers"] = unavailable
    if tests:
        out["tests"] = {**run["tests"], "commit": commit[:7]}
        out["extra"]["failures"] = run.get("extra", {}).get("failures", [])
    else:   # the counts stay the earlier suite's: say which commit ran it
        out["tests"] = {**out["tests"], "commit": str(base["tests"].get("commit", old_commit))[:7]}
    earlier = dict(out["extra"].get("checks_from_earlier_runs", {}))
    for k in out["checks"]:
        if k not in earlier:
            earlier[k] = old_commit
    for k, v in run.get("checks", {}).items():
        if evaluated(k, run_checks, tests):
            out["checks"][k] = v
            earlier.pop(k, None)
    out["extra"]["checks_from_earlier_runs"] = earlier
    for k in ("roofs", "fuzz", "memcheck_errors", "racecheck_errors", "auto_choice_misses"):
        if run.get("extra", {}).get(k) is not None:
            out["extra"][k] = run["extra"][k]
    out["extra"].update(extra or {})
    out.update(gpu_report.issues(out["benchmarks"], out["extra"].get("roofs")))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a folder with gpu_report.json")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--report", type=Path, default=REPORT)
    ap.add_argument("--tests", action="store_true", help="the run ran the GPU suite: take its test counts")
    ap.add_argument("--extra", action="append", default=[], metavar="KEY=FILE|TEXT")
    a = ap.parse_args(argv)
    extra = {}
    for kv in a.extra:
        k, _, v = kv.partition("=")
        p = Path(v)
        extra[k] = json.loads(p.read_text()) if p.suffix == ".json" and p.exists() else v
    try:
        base = gpu_report.read_report(a.report)
        run = gpu_report.read_report(a.run / "gpu_report.json")
    except (ValueError, OSError) as e:
        print(f"merge_report: {e}", file=sys.stderr)
        return 2
    merged = merge(base, run, a.commit, tests=a.tests, extra=extra)
    a.report.write_text(json.dumps(merged, indent=1) + "\n")
    a.report.with_suffix(".md").write_text(gpu_report.markdown(merged))
    print(f"{a.report}: commit {a.commit[:10]}, {len(run.get('benchmarks', []))} entries from the run, "
          f"{len(merged['extra']['checks_from_earlier_runs'])} checks from earlier runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
