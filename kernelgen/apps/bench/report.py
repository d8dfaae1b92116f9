"""Reports of ``kernelgen bench``: rates, roof fractions and peer ratios; the JSON report; the tables.

Arithmetic (pure functions, no GPU):

* rate: ``tflops = flops / us / 1e6`` for compute-bound entries (metric "tflops"), ``tbps =
  bytes / us / 1e6`` for memory-bound ones (metric "tbps"); the other field stays None, as in
  the report history;
* roof fraction: the rate over the roof measured in the same run (bf16 matmul TFLOP/s, copy TB/s);
* ratio to a peer: ``peer_us / us``: above 1 kernelgen is faster by that factor.  kernelgen's
  own switches (``SWITCH_PEERS``) were timed with the default call in one interleaved
  measurement: their ratio is ``peer_us / switch_base_us`` (the default call's time from that
  measurement) when the entry has one (:func:`entry_ratios`); a cost entry (``alibi_*``,
  ``variant_*``) whose ``us`` is an interleaved graph-replay time divides its peers by
  ``peer_base_us``, its call timed the peers' way (:func:`peer_base`);
* own baselines: the cost entries' ratio to kernelgen without the feature (``sinks_ratio``,
  ``alibi_ratio``) or to the built-in form of a user variant (``variant_ratio``), shown in a
  "vs own baseline" column (:data:`OWN_BASELINES`);
* best peer: the fastest other implementation measured on the entry (``peers.EXTERNAL``: FA3,
  FA4, the SDPA backends, FA2 varlen, FlexAttention; not kernelgen's switches, forced mainloops or
  serial splits) and kernelgen's ratio to it, ``vs_best`` (:func:`best_peer`);
* first calls: each peer's first call on each entry (``first_call_s``: a JIT peer compiles there)
  summarised per peer beside kernelgen's cold compiles (:func:`first_call_summary`).

JSON (``build_report``), the shape of ``docs/benchmarks/h200.json``::

    {"commit", "date", "device", "tests": {}, "checks": {name: bool},
     "benchmarks": [{"name", "us", "tflops", "tbps", "peers": {peer: us}, ...extras}],
     "roofs": {...}, "first_call": {...}, "unavailable_peers": {entry: {peer: reason}}, "skipped": {entry: reason},
     "errors": {entry: reason}, "settings": {...}}

``benchmarks`` holds only entries that produced a time; the others are under ``skipped`` and
``errors`` with their reasons (and in ``not_run`` with their suite, for :func:`entries_from_report`).  ``tests`` is empty: the bench runs no tests (tools/gpu_report.py
fills it in the GPU check's report).
"""
from __future__ import annotations

import datetime as dt
import math
import os
import subprocess
from pathlib import Path

from . import SUITES
from .peers import EXTERNAL, clip

#: Goals of issue 9 on the H200, checked when the entries ran: (entry, limit in µs, check name).
GOALS = (
    ("compile_cold_variant", 15e6, "goal_compile_cold_le_15s"),
    ("compile_warm_load", 30e3, "goal_compile_warm_load_le_30ms"),
    ("overhead_decode_call", 15.0, "goal_overhead_decode_call_le_15us"),
)
#: bf16 agreement with a peer: |peer - kernelgen| <= ATOL + RTOL * max|peer| (reference.tolerance).
ATOL, RTOL = 1.6e-2, 1.6e-2
ROOF_KEYS = {"tflops": "bf16_matmul_tflops", "tbps": "copy_tbps"}
#: kernelgen's own switches (peers.KG_AOS, peers.KG_NOSORT) and forced choices: compared with
#: switch_base_us where the entry timed them interleaved with the default call (switch_rounds_us).
SWITCH_PEERS = ("kernelgen_aos", "kernelgen_nosort")
#: The choices the dispatcher makes itself (issue 23: the automatic path must not lose to any of
#: them by more than AUTO_TOLERANCE): kernelgen forced onto a mainloop, to one split, without pack-GQA.
FORCED_CHOICES = ("kernelgen_sm90a", "kernelgen_sm80", "kernelgen_splits1", "kernelgen_nopack")
AUTO_TOLERANCE = 0.02
UNITS = {"tflops": "TFLOP/s", "tbps": "TB/s"}
#: The cost entries' own baselines: (ratio field, baseline µs field, what the baseline is).  The
#: ratio is the entry's time / the baseline's, both from one interleaved measurement.
#: A ratio field may serve two baselines (``variant_ratio``: a ``variant_example_*`` entry's over the
#: plain call, ``us_plain``; a ``variant_*`` entry's over the built-in form, ``us_builtin``): the
#: first row whose ratio and baseline fields the entry both has is the one shown.
OWN_BASELINES = (("sinks_ratio", "us_nosinks", "without sinks"), ("alibi_ratio", "us_noalibi", "without ALiBi"),
                 ("variant_ratio", "us_plain", "plain"), ("variant_ratio", "us_builtin", "built-in"))


def own_baseline_text(entry: dict) -> str:
    """"1.02x without sinks (3,850 µs; twins 0.97-1.01)" for a cost entry ("" for the others): its
    time over its own baseline's (:data:`OWN_BASELINES`; above 1 the feature costs that factor),
    and where the entry has them, the range of its calls' times over their twins' (``twin_spread``,
    apps/bench/twins.py: a ratio that close to 1 is within the measurement's own spread)."""
    rows = [row for row in OWN_BASELINES if entry.get(row[0]) is not None]
    for ratio_key, base_key, what in sorted(rows, key=lambda row: entry.get(row[1]) is None)[:1]:
        r = entry.get(ratio_key)
        if r is not None:
            base = entry.get(base_key)
            notes = [f"{fmt_us(base)} µs"] if base is not None else []
            spread = [x for x in (entry.get("twin_spread") or {}).values() if x is not None]
            if spread:
                notes.append(f"twins {min(spread):.2f}-{max(spread):.2f}")
            return f"{r:.2f}x {what}" + (f" ({'; '.join(notes)})" if notes else "")
    return ""


def rate(amount, us):
    """amount per second / 1e12 (TFLOP/s from FLOPs, TB/s from bytes); None without a time."""
    if amount is None or not us or us <= 0:
        return None
    return amount / (us * 1e-6) / 1e12


#: The roof of an FP8 prefill entry (``fp8_prefill_*``: q, k and v in e4m3 on FP8 tensor cores, twice
#: bf16's rate): an FP8 matmul's, which the bench does not measure yet, so such entries show no roof
#: fraction rather than one over the bf16 matmul's (a review saw 107 %).
FP8_ROOF_KEY = "fp8_matmul_tflops"


def roof_key(entry: dict, metric=None):
    """The ``roofs`` key an entry's rate is measured against (``ROOF_KEYS``; FP8 prefill entries:
    ``FP8_ROOF_KEY``), or None for a metric without a roof."""
    metric = metric or entry.get("metric")
    if metric == "tflops" and str(entry.get("name", "")).startswith("fp8_"):
        return FP8_ROOF_KEY
    return ROOF_KEYS.get(metric)


def roof_fraction(value, metric, roofs, entry: dict | None = None):
    """A rate as a fraction of its measured roof (None when either is unknown); ``entry`` picks the
    roof (``roof_key``), else the metric's."""
    key = roof_key(entry, metric) if entry is not None else ROOF_KEYS.get(metric)
    if value is None or key is None or not roofs:
        return None
    roof = roofs.get(key)
    return value / roof if roof else None


def ratios(us, peer_us: dict) -> dict:
    """{peer: peer_us / us} (> 1: kernelgen is faster)."""
    if not us or us <= 0:
        return {}
    return {p: t / us for p, t in (peer_us or {}).items() if t is not None and t > 0}


def peer_base(entry: dict):
    """The kernelgen time the entry's peers are divided by: ``peer_base_us`` where the entry has one
    (a cost entry whose ``us`` comes from interleaved CUDA-graph replays with its baseline call
    also times kernelgen's call the peers' way, CUDA events around eager calls), else ``us``."""
    return entry.get("peer_base_us") or entry.get("us")


def peer_base_for(entry: dict, peer: str):
    """The kernelgen time one peer's time is divided by: kernelgen's median over the rounds that
    alternated with that peer (``peer_base_by_peer``, ``peers.measure``'s ``base``), else
    ``peer_base``."""
    b = (entry.get("peer_base_by_peer") or {}).get(peer)
    return b if _positive(b) else peer_base(entry)


def _positive(x) -> bool:
    """A finite positive number (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def entry_ratios(entry: dict) -> dict:
    """{peer: ratio} of an entry: peer time / the entry's ``us`` (``peer_base_for``: kernelgen's time
    of the rounds alternating with that peer where the entry has them), except for kernelgen's own
    switches when the entry has ``switch_base_us`` (peer time / that)."""
    out = {}
    for p, t in (entry.get("peers") or {}).items():
        out.update(ratios(peer_base_for(entry, p), {p: t}))
    base = entry.get("switch_base_us")
    if base:
        timed = entry.get("switch_rounds_us") or {}
        sw = {p: t for p, t in (entry.get("peers") or {}).items() if p in SWITCH_PEERS or p in timed}
        out.update(ratios(base, sw))
    return out


def auto_choice(entry: dict) -> tuple:
    """(forced choice, its time / the automatic call's) of the fastest FORCED_CHOICES column that
    was timed interleaved with the automatic call (switch_rounds_us) and launched other kernels or
    another schedule than it (not in ``same_recipe_as_auto``: the same choice, whose ratio is the
    measurement's spread), or (None, None)."""
    base, timed = entry.get("switch_base_us"), entry.get("switch_rounds_us") or {}
    same = set(entry.get("same_recipe_as_auto") or ())
    forced = {p: t for p, t in (entry.get("peers") or {}).items()
              if p in FORCED_CHOICES and p in timed and t and p not in same}
    if not base or not forced:
        return None, None
    name = min(forced, key=forced.get)
    return name, forced[name] / base


def disagrees(entry: dict, peer: str) -> bool:
    """True when the peer's output was compared with kernelgen's and is outside bf16 tolerance
    (``peers_disagreeing``, which :func:`finalize` records while the entry still has its outputs'
    magnitudes and FP8 bound, where the entry has it; a report keeps that list, not the inputs)."""
    if "peers_disagreeing" in entry:
        return peer in entry["peers_disagreeing"]
    return _outside_tolerance(entry, peer)


def _outside_tolerance(entry: dict, peer: str) -> bool:
    d = (entry.get("max_diff") or {}).get(peer)
    atol = entry.get("peer_atol", ATOL)   # an FP8 entry states its own bound (suites.FP8_PEER_ATOL)
    # (not ``d > bound``: a NaN difference, a NaN in either output, must count as disagreeing)
    return d is not None and not d <= atol + RTOL * (entry.get("ref_max") or {}).get(peer, 1.0)


def best_peer(entry: dict) -> tuple:
    """(name, ratio) of the fastest other implementation (``peers.EXTERNAL``) measured on the
    entry whose output agreed with kernelgen's (a peer outside tolerance computed something else):
    ratio = its time / kernelgen's (above 1 kernelgen is faster); (None, None) when none ran."""
    times = {p: t for p, t in (entry.get("peers") or {}).items()
             if p in EXTERNAL and t and t > 0 and not disagrees(entry, p)}
    if not times or not peer_base(entry):
        return None, None
    name = min(times, key=lambda p: times[p] / peer_base_for(entry, p))
    return name, times[name] / peer_base_for(entry, name)


def finalize(entry: dict, roofs: dict | None) -> dict:
    """Fill tflops/tbps, roof_fraction, ratios, best_peer / vs_best and arithmetic_intensity of a
    raw entry (in place)."""
    metric, us = entry.get("metric"), entry.get("us")
    entry.setdefault("peers", {})
    entry.setdefault("unavailable", {})
    entry["tflops"] = rate(entry.get("flops"), us) if metric == "tflops" else entry.get("tflops")
    entry["tbps"] = rate(entry.get("bytes"), us) if metric == "tbps" else entry.get("tbps")
    value = entry["tflops"] if metric == "tflops" else entry["tbps"] if metric == "tbps" else None
    entry["roof_fraction"] = roof_fraction(value, metric, roofs, entry)
    entry["ratios"] = entry_ratios(entry)
    entry["peers_disagreeing"] = sorted(p for p in (entry.get("max_diff") or {}) if _outside_tolerance(entry, p))
    entry["best_peer"], entry["vs_best"] = best_peer(entry)
    if entry.get("flops") and entry.get("bytes"):
        entry["arithmetic_intensity"] = entry["flops"] / entry["bytes"]
    return entry


def agrees(entry: dict):
    """True when every compared peer's output is within bf16 tolerance of kernelgen's (None when
    no output was compared)."""
    diffs = entry.get("max_diff") or {}
    if not diffs:
        return None
    return not any(disagrees(entry, p) for p in diffs)


def auto_choice_misses(entries: list) -> dict:
    """{entry: (forced choice, its time / the automatic call's)} where a forced choice timed beside
    the automatic call ran more than AUTO_TOLERANCE faster (the dispatcher chose wrong there)."""
    out = {}
    for e in entries:
        name, ratio = auto_choice(e) if e.get("us") is not None else (None, None)
        if ratio is not None and ratio < 1 - AUTO_TOLERANCE:
            out[e["name"]] = [name, round(ratio, 3)]
    return out


#: Issue 22's prefill shapes (the first preset's varlen trace and chunked entries, every dense shape;
#: each also in fp16, ``suites.FP16_SUFFIX``) and the peers it measures kernelgen against: the faster
#: of FA3 (on packed K/V where the cache is paged: ``fa3_unpaged``) and FA4, and cuDNN where it runs.
ISSUE22_BASES = ("prefill_dense_causal_h128_s16k", "prefill_dense_h128_s4k", "prefill_dense_causal_h64_s2k",
                 "prefill_dense_h64_s2k", "prefill_dense_causal_h256_s4k", "prefill_dense_h256_s4k",
                 "prefill_dense_causal_gqa_h128_s4k", "prefill_dense_causal_h96_s4k", "prefill_dense_causal_h192_s4k",
                 "prefill_dense_causal_h192x128_s4k", "prefill_varlen_trace", "prefill_chunked_paged16",
                 "prefill_chunked_paged64", "prefill_chunked_paged128")
ISSUE22_ENTRIES = ISSUE22_BASES + tuple(b + "_fp16" for b in ISSUE22_BASES)
ISSUE22_PEERS = ("fa3", "fa3_unpaged", "fa4", "cudnn_sdpa")
#: Issue 22's goals: each shape at least 1.02x its best peer, their geometric mean at least 1.05x.
ISSUE22_EACH, ISSUE22_GEOMEAN = 1.02, 1.05


def issue22_summary(entries: list) -> dict:
    """Issue 22's numbers over the entries that ran: for each of ``ISSUE22_ENTRIES`` with at least
    one of ``ISSUE22_PEERS`` measured and agreeing with kernelgen's output, the fastest such peer
    and its time / kernelgen's (above 1 kernelgen is faster); their geometric mean, the lowest, and
    whether the goals hold (``each_ge_1.02``, ``geomean_ge_1.05``: false while any of the issue's
    entries is ``missing``, i.e. has no such ratio: not run, or no peer).  Ratios divide by the
    time the peers' way (``peer_base``); each names the commit it was measured at.  Empty when
    none ran."""
    by_name = {e.get("name"): e for e in entries if e.get("us")}
    ratios = {}
    for name in ISSUE22_ENTRIES:
        e = by_name.get(name)
        if e is None:
            continue
        times = {p: t for p, t in (e.get("peers") or {}).items()
                 if p in ISSUE22_PEERS and t and t > 0 and not disagrees(e, p)}
        if times:
            best = min(times, key=lambda p: times[p] / peer_base_for(e, p))
            ratios[name] = {"peer": best, "ratio": round(times[best] / peer_base_for(e, best), 4),
                            "commit": e.get("commit")}
    if not ratios:
        return {}
    vals = [r["ratio"] for r in ratios.values()]
    geo = math.exp(sum(math.log(v) for v in vals) / len(vals))
    low = min(ratios, key=lambda n: ratios[n]["ratio"])
    missing = [n for n in ISSUE22_ENTRIES if n not in ratios]
    return {"entries": ratios, "geomean": round(geo, 4), "lowest": [low, ratios[low]["ratio"]],
            f"each_ge_{ISSUE22_EACH}": not missing and all(v >= ISSUE22_EACH for v in vals),
            f"geomean_ge_{ISSUE22_GEOMEAN}": not missing and geo >= ISSUE22_GEOMEAN,
            "missing": missing}


#: Issues 23 and 24's numbers as goals on report entries: (entry, measure, comparison, bound).
#: Measures: ``vs:p1|p2|...`` the fastest of those peers (agreeing with kernelgen's output) over
#: kernelgen's time; ``roof`` the entry's TB/s over the copy roof of the same run; ``of_serial``
#: kernelgen's time over its own prefill-then-decode calls (``serial``); ``speedup_over:E`` entry E's
#: time over this one's; ``field:K`` the entry's own K (e.g. ``sinks_ratio``); ``seconds`` its time in s.
FA3_ANY = "fa3|fa3_unpaged"
ISSUE23_GOALS = (
    ("decode_trace_b128_paged16", f"vs:{FA3_ANY}", ">=", 1.02),
    ("decode_trace_b128_paged16", "roof", ">=", 0.92),
    ("decode_azure_b128_paged16", f"vs:{FA3_ANY}", ">=", 1.02),
    ("decode_azure_b128_paged16", "roof", ">=", 0.92),
    ("decode_long_b8_128k", f"vs:{FA3_ANY}|torch_fa2|torch_fa2_varlen|cudnn_sdpa", ">=", 1.02),
    ("decode_trace_b128_paged16_llama3-70b-tp8", "roof", ">=", 0.80),
    ("decode_long_b8_128k_llama3-70b-tp8", "roof", ">=", 0.80),
    ("decode_trace_b128_paged16_llama3-70b-tp8", f"vs:{FA3_ANY}", ">=", 1.02),
    ("decode_trace_b32_paged16_llama3-70b-tp8", f"vs:{FA3_ANY}", ">=", 1.02),
    ("decode_long_b8_128k_llama3-70b-tp8", f"vs:{FA3_ANY}", ">=", 1.02),
    *((m, "of_serial", "<=", 0.80) for m in ("mixed_trace", "mixed_long_chunks", "mixed_short_chunks")),
    *((m, f"vs:{p}", ">=", 1.02) for m in ("mixed_trace", "mixed_long_chunks", "mixed_short_chunks")
      for p in (FA3_ANY, "fa4")),
)
ISSUE24_GOALS = (
    *((e, "vs:fa3", ">=", 1.0) for e in ("fp8_prefill_causal_s16k", "fp8_prefill_s4k_b4",
                                         "fp8_prefill_causal_s16k_gpt-oss", "fp8_prefill_causal_s16k_gemma2-9b")),
    ("fp8_decode_b128_paged16", "speedup_over:decode_trace_b128_paged16", ">=", 1.8),
    ("fp8_decode_b128_paged16", "roof", ">=", 0.90),
    ("mixed_trace_fp8", "of_serial", "<=", 0.80),
    ("mixed_trace_fp8_qq", "of_serial", "<=", 0.80),   # (the same step with quantize_q=True in every call)
)
#: Issue 25's: sinks and built-in ALiBi at most 3 % over the plain call, a user score_mod within 3 %
#: of the built-in it restates and at least as fast as FA4's and FlexAttention's score_mod (the
#: first preset's entries and gpt-oss's and Gemma 2's, which the report also holds), a new
#: variant's first call within 1 s.
ISSUE25_GOALS = (
    *((f"{w}_{s}", f"field:{w}_ratio", "<=", 1.03) for w in ("sinks", "alibi")
      for s in ("prefill_causal_s16k", "decode_b128_paged16")),
    *((f"variant_{v}_prefill_causal_s16k{m}", measure, op, bound)
      for m in ("", "_gpt-oss", "_gemma2-9b") for v in ("alibi", "softcap_approx")
      for measure, op, bound in (("field:variant_ratio", "<=", 1.03), ("vs:fa4", ">=", 1.0),
                                 ("vs:flex_attention", ">=", 1.0))),
    ("variant_compile_first_call", "seconds", "<=", 1.0),
)


def _goal_value(e: dict, measure: str, by_name: dict, copy_tbps):
    if measure.startswith("vs:"):
        names = measure[3:].split("|")
        vals = [t / peer_base_for(e, p) for p, t in (e.get("peers") or {}).items()
                if p in names and t and t > 0 and not disagrees(e, p)]
        return min(vals) if vals else None
    if measure == "roof":
        return e["tbps"] / copy_tbps if e.get("tbps") and copy_tbps else None
    if measure == "of_serial":
        serial = (e.get("peers") or {}).get("serial")
        return e["us"] / serial if serial else None
    if measure.startswith("field:"):
        v = e.get(measure[6:])
        return float(v) if v is not None else None
    if measure == "seconds":
        return e["us"] / 1e6
    if measure.startswith("speedup_over:"):   # eager timings both (an FP8 entry's own is peer_base_us)
        other = by_name.get(measure.split(":", 1)[1])
        return other["us"] / peer_base(e) if other else None
    raise ValueError(f"unknown goal measure {measure!r}")


def goal_table(entries: list, goals, roofs: dict | None = None) -> dict:
    """``goals`` (``ISSUE23_GOALS``, ``ISSUE24_GOALS``, ``ISSUE25_GOALS``) evaluated on the entries that
    ran: one row a goal with its value (None where the entry or its peer did not run) and the
    commit the entry was measured at (a merged report mixes runs: ``roof`` takes the latest run's
    copy roof, ``speedup_over`` two entries that may come from different runs), and ``met`` /
    ``evaluated`` / ``goals`` counts.  Peer ratios divide by the time the peers' way
    (``peer_base``).  ``roofs``: the run's (``copy_tbps`` for the ``roof`` measure)."""
    by_name = {e.get("name"): e for e in entries if e.get("us")}
    copy = (roofs or {}).get("copy_tbps")
    rows, met, evaluated = [], 0, 0
    for name, measure, op, bound in goals:
        e = by_name.get(name)
        v = _goal_value(e, measure, by_name, copy) if e is not None else None
        ok = None if v is None else (v >= bound if op == ">=" else v <= bound)
        evaluated += ok is not None
        met += ok is True
        rows.append({"entry": name, "measure": measure, "goal": f"{op} {bound}",
                     "value": None if v is None else round(v, 4), "ok": ok,
                     "commit": None if e is None else e.get("commit")})
    return {"rows": rows, "met": met, "evaluated": evaluated, "goals": len(rows)}


def goals_text(entries: list, roofs: dict | None = None) -> str:
    """The open performance goals on ``entries`` as Markdown ("" when none of their entries ran):
    issue 22's summary (:func:`issue22_summary`) and the goal tables of issues 23-25
    (:func:`goal_table`), each row with the commit its entry was measured at where it has one."""
    i22 = issue22_summary(entries)
    tables = [(n, what, goal_table(entries, goals, roofs)) for n, what, goals in (
        (23, "decode and mixed steps", ISSUE23_GOALS), (24, "FP8", ISSUE24_GOALS),
        (25, "attention variants", ISSUE25_GOALS))]
    if not i22 and not any(t["evaluated"] for _, _, t in tables):
        return ""
    lines = ["## Open performance goals", "",
             "The project's open performance issues (22: prefill against FA3 / FA4; 23: decode and mixed "
             "steps; 24: FP8; 25: attention variants) state their goals as numbers on these entries; "
             "below, computed from them (`kernelgen.apps.bench.report`: `issue22_summary`, `goal_table`; "
             "peer ratios are peer time / kernelgen time, the peers' outputs agreeing with kernelgen's; a "
             "merged report mixes runs, so each entry's commit is the table's)."]
    if i22:
        flags = ", ".join(f"{k.replace('_ge_', ' >= ')}x: {'yes' if v else 'no'}" for k, v in i22.items()
                          if k.startswith(("each_ge_", "geomean_ge_")))
        lines += ["", f"Issue 22 (prefill against the faster of FA3 and FA4, and cuDNN where it runs): "
                      f"{len(i22['entries'])} entries, geometric mean {i22['geomean']:.3f}x, lowest "
                      f"{i22['lowest'][0]} {i22['lowest'][1]:.3f}x; {flags}; {len(i22['missing'])} of the issue's "
                      f"entries without a ratio (not run, or no peer): {', '.join(i22['missing']) or 'none'}."]
    for n, what, t in tables:
        lines += ["", f"Issue {n} ({what}): {t['met']} of {t['goals']} goals met ({t['evaluated']} evaluated).", "",
                  "| entry | measure | goal | value | met | measured at |", "| --- | --- | --- | ---: | --- | --- |"]
        for r in t["rows"]:
            value = "" if r["value"] is None else f"{r['value']:.3f}"
            met = "" if r["ok"] is None else "yes" if r["ok"] else "no"
            at = f"`{r['commit']}`" if r.get("commit") else ""
            lines.append(f"| {r['entry']} | {r['measure'].replace('|', ' / ')} | {r['goal']} | {value} | {met} | {at} |")
    return "\n".join(lines)


def checks(entries: list) -> dict:
    """{check name: bool}: peer agreement per entry, ``auto_choice_within_2pct`` (no forced
    choice timed beside the automatic call ran more than 2 % faster; auto_choice_misses lists
    those that did), and the issue's goals for the entries that ran."""
    out = {}
    for e in entries:
        if e.get("us") is None:
            continue
        ok = agrees(e)
        if ok is not None:
            out[f"{e['name']}_agrees_with_peers"] = ok
    if any(auto_choice(e)[0] for e in entries if e.get("us") is not None):
        # the automatic choice within 2 % of every forced choice timed beside it (issue 23)
        out["auto_choice_within_2pct"] = not auto_choice_misses(entries)
    by_name = {e["name"]: e for e in entries if e.get("us") is not None}
    for name, limit, check in GOALS:
        if name in by_name:
            out[check] = by_name[name]["us"] <= limit
    return out


def git_commit() -> str:
    """$KERNELGEN_COMMIT, else the checkout's HEAD, else "unknown"."""
    if os.environ.get("KERNELGEN_COMMIT"):
        return os.environ["KERNELGEN_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], text=True, stderr=subprocess.DEVNULL,
                                       cwd=Path(__file__).resolve().parent).strip()
    except Exception:  # noqa: BLE001
        return "unknown"


_KEEP_OUT = {"ref_max"}


def first_call_summary(entries: list) -> dict:
    """{peer: {"entries", "median_s", "max_s", "max_entry"}} over the entries' ``first_call_s``
    (build + first call + synchronise, in the bench's process, the peers' modules imported before
    the entries: ``peers.preload``), plus ``"kernelgen_cold_compile_s"`` from
    ``compile_cold_variant`` (a new process compiling one attention variant into an empty cache)
    and ``"kernelgen_cold_call_s"`` from ``compile_cold_call`` (every kernel of a first call) when
    they ran.  kernelgen's own calls in the entries find their kernels compiled before the entries
    start (the bench pre-compiles them in parallel), so its cold compiles are the comparable numbers."""
    per: dict = {}
    for e in entries:
        for p, s in (e.get("first_call_s") or {}).items():
            per.setdefault(p, []).append((s, e["name"]))
    out: dict = {}
    for p, vals in per.items():
        times = sorted(v for v, _ in vals)
        n = len(times)
        median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
        worst = max(vals)
        out[p] = {"entries": n, "median_s": median, "max_s": worst[0], "max_entry": worst[1]}
    for name, key in (("compile_cold_variant", "kernelgen_cold_compile_s"), ("compile_cold_call", "kernelgen_cold_call_s")):
        cold = next((e for e in entries if e.get("name") == name and e.get("us")), None)
        if cold is not None:
            out[key] = cold["us"] / 1e6
    return out


def build_report(entries: list, roofs: dict | None, device: str, settings: dict | None = None,
                 commit: str | None = None, date: str | None = None) -> dict:
    """The JSON report (module doc) from finalized entries."""
    ran = [e for e in entries if e.get("us") is not None]
    report = {
        "commit": commit if commit is not None else git_commit(),
        "date": date or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "tests": {},
        "checks": checks(entries),
        "benchmarks": [],
        "roofs": roofs,
        "first_call": first_call_summary(entries),
        "issue22": issue22_summary(entries),
        "issue23": goal_table(entries, ISSUE23_GOALS, roofs),
        "issue24": goal_table(entries, ISSUE24_GOALS, roofs),
        "issue25": goal_table(entries, ISSUE25_GOALS, roofs),
        "unavailable_peers": {},
        "skipped": {e["name"]: e["skipped"] for e in entries if e.get("skipped")},
        "errors": {e["name"]: e["error"] for e in entries if e.get("error") and not e.get("skipped")},
        "not_run": [{k: e.get(k) for k in ("name", "suite", "model", "skipped", "error") if e.get(k) is not None}
                    for e in entries if e.get("us") is None],
        "settings": settings or {},
    }
    for e in ran:
        b = {k: e.get(k) for k in ("name", "us", "tflops", "tbps", "peers")}
        b.update({k: v for k, v in e.items() if k not in b and k not in _KEEP_OUT})
        report["benchmarks"].append(b)
        if e.get("unavailable"):
            report["unavailable_peers"][e["name"]] = dict(e["unavailable"])
    return report


#: The suite of an entry by its name's start (``suite_of``); the bench's registry (``suites.registry``)
#: names every entry so (tests/test_bench_cpu.py checks it), and tools/gpu_report.py's demo entry
#: (``demo_...``, a causal varlen prefill) counts as prefill.
_SUITE_PREFIXES = (("prefill_", "prefill"), ("sinks_prefill_", "prefill"), ("sinks_decode_", "decode"),
                   ("alibi_prefill_", "prefill"), ("alibi_decode_", "decode"), ("fp8_prefill_", "prefill"),
                   ("fp8_decode_", "decode"), ("variant_compile_", "compile"),
                   ("variant_", "prefill"),
                   ("demo_", "prefill"), ("decode_", "decode"), ("graph_decode_", "decode"),
                   ("mixed_", "mixed"), ("scheduler_", "scheduler"), ("varlen_trace_sorted", "scheduler"),
                   ("varlen_trace_unsorted", "scheduler"), ("compile_", "compile"), ("dispatch_", "compile"),
                   ("overhead_", "overhead"))


def suite_of(name: str) -> str | None:
    """The bench suite of an entry name (None for a name no suite uses)."""
    for prefix, suite in _SUITE_PREFIXES:
        if name.startswith(prefix):
            return suite
    return None


def from_gpu_report(rep: dict) -> dict:
    """A tools/gpu_report.py report (docs/benchmarks/h200.json: the bench's entries under
    ``benchmarks`` without their suites, roofs and peer reasons under ``extra``) in the shape of a
    ``kernelgen bench --json`` report: each entry gets its suite (``suite_of``; aliases, which
    repeat an entry under another name, are dropped), its metric (the rate it carries) and its
    roof fraction.  A bench report is returned unchanged."""
    benchmarks = rep.get("benchmarks") or []
    if not benchmarks or all(b.get("suite") for b in benchmarks):
        return rep
    extra = rep.get("extra") or {}
    roofs = rep.get("roofs") or extra.get("roofs")
    out = []
    for b in benchmarks:
        suite = b.get("suite") or suite_of(str(b.get("name", "")))
        if b.get("same_as") or suite is None:
            continue
        e = dict(b, suite=suite)
        if not e.get("metric"):
            e["metric"] = "tflops" if e.get("tflops") is not None else "tbps" if e.get("tbps") is not None else None
        value = e.get(e["metric"]) if e["metric"] else None
        e.setdefault("roof_fraction", roof_fraction(value, e["metric"], roofs, e))
        e["ratios"] = e.get("ratios") or entry_ratios(e)
        if "best_peer" not in e:
            e["best_peer"], e["vs_best"] = best_peer(e)
        out.append(e)
    return dict(rep, benchmarks=out, roofs=roofs,
                unavailable_peers=rep.get("unavailable_peers") or extra.get("unavailable_peers") or {},
                first_call=rep.get("first_call") or extra.get("first_call"))


def report_header(rep: dict) -> str:
    """The first line of a re-printed report: its commit, date and device ("unknown" where the
    JSON does not say), so an old report is not read as a current one."""
    def field(k):
        v = rep.get(k)
        return str(v) if v not in (None, "", "unknown") else "unknown"

    return (f"Saved report: commit {field('commit')}, date {field('date')}, device {field('device')} "
            f"(measured then, not now)")


def entries_from_report(rep: dict) -> list:
    """The entries of a saved JSON report (timed ones, then the ones that did not run), for
    re-printing its tables and re-drawing its plots without a GPU."""
    out = [dict(b) for b in rep.get("benchmarks", [])]
    for e in out:
        e.setdefault("peers", {})
        e.setdefault("unavailable", dict((rep.get("unavailable_peers") or {}).get(e.get("name"), {})))
        if "ratios" not in e:
            finalize(e, rep.get("roofs"))
        if "best_peer" not in e:
            e["best_peer"], e["vs_best"] = best_peer(e)
    for e in rep.get("not_run", []):
        out.append(dict(e, us=None, peers={}, unavailable={}))
    return out


# ---------------------------------------------------------------------------------- tables
def fmt_us(us) -> str:
    if us is None:
        return "-"
    if us < 100:
        return f"{us:.2f}"
    if us < 10000:
        return f"{us:.1f}"
    return f"{us:,.0f}"


def fmt_rate(e: dict) -> str:
    m = e.get("metric")
    v = e.get(m) if m in UNITS else None
    if v is None:
        return "-"
    return f"{v:.0f} {UNITS[m]}" if m == "tflops" else f"{v:.2f} {UNITS[m]}"


def fmt_frac(f) -> str:
    return "-" if f is None else f"{100 * f:.0f}%"


def _md_table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def suite_table(suite: str, entries: list) -> str:
    """Markdown table of one suite: name, µs, rate, roof fraction, one column per peer with the
    ratio peer µs / kernelgen µs ("n/a" where the peer could not run: see the notes below it;
    "(output differs)" beside a peer whose output is outside the tolerance, which ``best_peer`` skips)."""
    rows_e = [e for e in entries if e.get("suite") == suite]
    if not rows_e:
        return ""
    peer_names: list = []
    for e in rows_e:
        for p in list(e.get("peers", {})) + list(e.get("unavailable", {})):
            if p not in peer_names:
                peer_names.append(p)
    own = any(own_baseline_text(e) for e in rows_e)
    headers = (["name", "µs", "TFLOP/s or TB/s", "of roof", "vs best peer"] + (["vs own baseline"] if own else [])
               + [f"vs {p}" for p in peer_names])
    rows = []
    for e in rows_e:
        if e.get("us") is None:
            why = e.get("skipped") or e.get("error") or "no result"
            rows.append([e["name"], ("skipped: " if e.get("skipped") else "error: ") + clip(why, 100), "", "", ""]
                        + ([""] if own else []) + [""] * len(peer_names))
            continue
        r = entry_ratios(e)
        cells = []
        for p in peer_names:
            if p in r:   # (a peer whose output differs from kernelgen's beyond the tolerance: marked)
                cells.append(f"{r[p]:.2f}x" + (" (output differs)" if disagrees(e, p) else ""))
            elif p in e.get("unavailable", {}):
                cells.append("n/a")
            else:
                cells.append("")
        best, vs = best_peer(e)
        rows.append([e["name"], fmt_us(e["us"]), fmt_rate(e), fmt_frac(e.get("roof_fraction")),
                     f"{vs:.2f}x {best}" if best else "-"] + ([own_baseline_text(e) or "-"] if own else []) + cells)
    notes = _unavailable_notes(rows_e)
    text = f"### {suite}\n\n" + _md_table(headers, rows)
    if notes:
        text += "\n\n" + notes
    return text


#: Reasons longer than this were cut by reports made before ``peers.clip`` (mid-word, no mark).
_OLD_REASON_LIMIT = 400


def full_reason(why: str) -> str:
    """A peer's reason as shown in the "could not run" notes: whole, except that a reason an older
    report cut mid-word at 400 characters ends at its last whole word with "…"."""
    why = " ".join(str(why).split())
    if len(why) >= _OLD_REASON_LIMIT and not why.endswith(("…", "]", ".", ")")):
        cut = why.rfind(" ")
        why = (why[:cut] if cut > 0 else why).rstrip(" ,;:([") + "…"
    return why


def _unavailable_notes(entries: list) -> str:
    """One line per (peer, reason) with the entries it applies to; reasons whole (``full_reason``)."""
    groups: dict = {}
    for e in entries:
        for p, why in (e.get("unavailable") or {}).items():
            groups.setdefault((p, full_reason(why)), []).append(e["name"])
    lines = []
    for (p, why), names in groups.items():
        where = ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} and {len(names) - 3} more"
        lines.append(f"- n/a {p} ({where}): {why}")
    return "\n".join(lines)


def format_report(entries: list, roofs: dict | None = None, device: str | None = None) -> str:
    """Every suite's table, in SUITES order, with a header line (device, roofs) and the legend."""
    head = []
    if device:
        head.append(f"## kernelgen bench on {device}")
    if roofs:
        head.append(f"Roofs measured in the run: copy {roofs.get('copy_tbps', 0):.2f} TB/s, "
                    f"bf16 matmul {roofs.get('bf16_matmul_tflops', 0):.0f} TFLOP/s.")
    head.append("Peer columns: peer time / kernelgen time (above 1: kernelgen is faster); vs best peer: the same "
                "ratio for the fastest other implementation measured on the entry (FA3, FA4, cuDNN, FA2, ...); "
                "n/a: the peer "
                "cannot run the shape (reason below the table).  kernelgen_aos / kernelgen_nosort: kernelgen's "
                "metadata layout and sort switches, timed with the default call as interleaved CUDA-graph "
                "replays (median of round medians) and divided by the default call's time from that "
                "measurement; on the varlen and decode entries so are kernelgen_sm90a / kernelgen_sm80 (the "
                "call forced onto a mainloop) and, on decode, kernelgen_splits1 / kernelgen_nopack (one split, "
                "no pack-GQA): below 0.98 the automatic choice lost to a forced one (check "
                "auto_choice_within_2pct; a forced call that launched the automatic call's kernels and "
                "schedule, same_recipe_as_auto, is the same choice and its ratio the spread between identical "
                "calls).  vs own baseline (the sinks_*, alibi_* and variant_* entries): the entry's time over "
                "kernelgen's call without the feature, or over a user variant's built-in form, from one such "
                "interleaved measurement (above 1: the feature costs that factor).")
    parts = ["\n\n".join(head)]
    for s in SUITES:
        t = suite_table(s, entries)
        if t:
            parts.append(t)
    fc = first_call_text(first_call_summary(entries))
    if fc:
        parts.append(fc)
    goals = goals_text(entries, roofs)
    if goals:
        parts.append(goals)
    return "\n\n".join(parts) + "\n"


def first_call_text(summary: dict) -> str:
    """The first-call summary (:func:`first_call_summary`) as a markdown table ("" when empty)."""
    rows = [[p, v["entries"], f"{v['median_s']:.2f}", f"{v['max_s']:.2f} ({v['max_entry']})"]
            for p, v in summary.items() if isinstance(v, dict)]
    if not rows:
        return ""
    text = "### first calls (s: build + first call, in this process)\n\n" + _md_table(
        ["peer", "entries", "median", "max (entry)"], rows)
    if "kernelgen_cold_compile_s" in summary:
        text += (f"\n\nkernelgen's cold compile of one attention variant (new process, empty cache): "
                 f"{summary['kernelgen_cold_compile_s']:.2f} s")
        if "kernelgen_cold_call_s" in summary:
            text += (f"; of every kernel of a first call (scheduler and attention): "
                     f"{summary['kernelgen_cold_call_s']:.2f} s")
        text += "; its calls in the entries use kernels compiled before the entries start."
    return text
