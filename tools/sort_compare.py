"""Sorted against unsorted kernelgen calls, timed as interleaved CUDA-graph replays (GPU).

For each case the same call is built twice, with the scheduler's longest-first sort on and off
(``sort=``; SoA metadata), and the two are timed with ``kernelgen.apps.bench.measure.time_interleaved``:
each captured in its own CUDA graph, ``--rounds`` rounds alternating the two (``--repeat``
replays a round, L2 flushed before each, median), the median of the round medians reported.
This is the method of docs/perf-notes.md ("Sorted vs unsorted on decode batches"); the ratio is
unsorted / sorted (above 1: the sort pays).

Cases (``--cases``, comma list):

* ``decode_b32``, ``decode_b128``: the bench's ``decode_trace_b32_paged16`` /
  ``decode_trace_b128_paged16`` batches (Mooncake contexts, pages of 16 tokens, one query token
  a request, causal, the preset's window and soft-cap), for each ``--model`` preset;
* ``trace512``: the bench's skewed trace batch of 512 requests (every 8th a prefill), unpaged.

``--control`` adds a second, separately built unsorted call ("unsorted_again", its own output and
metadata buffers) to every comparison: its ratio to "unsorted" is the method's own offset between
two identical calls (an A/A test), the resolution a sorted/unsorted difference must exceed.
``--scheduler`` also times the scheduler launch alone (sort on / off, the call's plan; 20 launches
a graph replay, per launch) for the decode cases.

Usage: PYTHONPATH=$PWD python tools/sort_compare.py [--model llama3-8b,gemma2-9b,mistral-7b]
       [--cases decode_b32,decode_b128,trace512] [--rounds 6] [--repeat 20] [--control] [--scheduler]
       [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DECODE_CASES = {"decode_b32": "decode_trace_b32_paged16", "decode_b128": "decode_trace_b128_paged16"}


def decode_calls(model, shape: str, settings=None, variants=((True, {}), (False, {}))) -> dict:
    """{label: zero-argument call} of a bench decode batch for ``model``: one per (sort, extra
    keyword arguments) in ``variants``, labelled "sorted"/"unsorted" (plus any extra keys; a
    repeated label gets "_again")."""
    import torch

    from kernelgen.apps.bench import suites

    settings = settings or suites.Settings()
    ctx = suites.decode_contexts(settings, shape)
    q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, model, seed=7)
    calls = {}
    for srt, kw in variants:
        out = torch.empty(len(ctx), model.num_heads_q, model.head_dim_v, device="cuda", dtype=torch.bfloat16)
        label = ("sorted" if srt else "unsorted") + "".join(f"_{k}" for k in kw)
        label += "_again" if label in calls else ""
        calls[label] = suites._kg_call(q, kc, vc, cu_q, None, 1, max(ctx), model, out, seqused_k=used, page_table=pt,
                                       sort=srt, **kw)
    return calls


def trace_calls(model, batch: int = 512, settings=None, control: bool = False) -> dict:
    """{"sorted", "unsorted": call} of the bench's skewed trace batch (varlen_trace_* entries),
    plus "unsorted_again" with ``control``."""
    import torch

    from kernelgen.apps.bench import suites

    settings = settings or suites.Settings()
    lq, lk = suites._skewed(settings, batch, model)
    torch.manual_seed(3)
    m = model
    q = torch.randn(sum(lq), m.num_heads_q, m.head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lk), m.num_heads_kv, m.head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(sum(lk), m.num_heads_kv, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    cu_q, cu_k = suites._cu(lq, "cuda"), suites._cu(lk, "cuda")
    calls = {}
    labels = (("sorted", True), ("unsorted", False)) + ((("unsorted_again", False),) if control else ())
    for label, srt in labels:
        o = torch.empty(sum(lq), m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
        calls[label] = suites._kg_call(q, k, v, cu_q, cu_k, max(lq), max(lk), m, o, sort=srt)
    return calls


def scheduler_calls(model, shape: str, settings=None) -> dict:
    """{"sorted", "unsorted": zero-argument call} launching only the scheduler of a bench decode
    batch (an AttentionPlan shaped like the call: paged, causal, the preset's window and soft-cap)."""
    import torch

    from kernelgen.apps.bench import suites
    from kernelgen.front.plan import AttentionPlan

    settings = settings or suites.Settings()
    ctx = suites.decode_contexts(settings, shape)
    m = model
    used = torch.tensor(ctx, dtype=torch.int32, device="cuda")
    cu_q = torch.arange(len(ctx) + 1, dtype=torch.int32, device="cuda")
    calls = {}
    for label, srt in (("sorted", True), ("unsorted", False)):
        plan = AttentionPlan(max_batch=len(ctx), num_heads_q=m.num_heads_q, num_heads_kv=m.num_heads_kv,
                             head_dim=m.head_dim, head_dim_v=m.head_dim_v, max_seqlen_q=1, max_seqlen_k=max(ctx),
                             paged=True, causal=True, window_size=m.window_size, softcap=m.softcap, sort=srt)
        calls[label] = lambda plan=plan: plan.schedule(cu_q, None, used)
    return calls


def compare(calls: dict, rounds: int, repeat: int, launches: int = 1) -> dict:
    """Interleaved graph replays of ``calls``: {label: {"us", "rounds"}} plus "ratio" (unsorted /
    sorted) when both are there and "aa_ratio" (unsorted_again / unsorted) with the control."""
    import torch

    from kernelgen.apps.bench import measure

    t = measure.time_interleaved(calls, rounds=rounds, repeat=repeat, launches=launches)
    torch.cuda.synchronize()
    out = dict(t)
    if "sorted" in t and "unsorted" in t:
        out["ratio"] = t["unsorted"]["us"] / t["sorted"]["us"]
    if "unsorted_again" in t:
        out["aa_ratio"] = t["unsorted_again"]["us"] / t["unsorted"]["us"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b,gemma2-9b,mistral-7b")
    ap.add_argument("--cases", default="decode_b32,decode_b128,trace512")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--control", action="store_true", help="add a second unsorted call (A/A offset)")
    ap.add_argument("--scheduler", action="store_true", help="also time the decode cases' scheduler alone")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import torch

    from kernelgen.apps.bench.models import resolve_models

    if not torch.cuda.is_available():
        print("sort_compare: needs a CUDA GPU", file=sys.stderr)
        return 2
    cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in cases if c not in DECODE_CASES and c != "trace512"]
    if bad:
        ap.error(f"unknown case(s) {bad}")
    results = []
    for m in resolve_models(args.model.split(",")):
        for case in cases:
            if case == "trace512":
                calls = trace_calls(m, control=args.control)
            else:
                variants = ((True, {}), (False, {})) + (((False, {}),) if args.control else ())
                calls = decode_calls(m, DECODE_CASES[case], variants=variants)
            r = compare(calls, args.rounds, args.repeat)
            row = {"model": m.name, "case": case, **r}
            aa = f"  A/A {r['aa_ratio']:.4f}" if "aa_ratio" in r else ""
            print(f"{m.name:12s} {case:12s} sorted {r['sorted']['us']:9.1f} us  unsorted {r['unsorted']['us']:9.1f} us"
                  f"  unsorted/sorted {r['ratio']:.4f}{aa}", flush=True)
            if args.scheduler and case in DECODE_CASES:
                s = compare(scheduler_calls(m, DECODE_CASES[case]), args.rounds, args.repeat, launches=20)
                row["scheduler"] = s
                print(f"{'':12s} {'scheduler':12s} sorted {s['sorted']['us']:9.2f} us  unsorted "
                      f"{s['unsorted']['us']:9.2f} us  unsorted/sorted {s['ratio']:.4f}", flush=True)
            results.append(row)
            del calls
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
