"""``kernelgen compare-layouts``: the two scheduler-metadata layouts side by side on one batch.

For each layout it builds an ``AttentionPlan`` with a capacity of ``pad_to`` (or the batch), runs
the batch padded with zero-length requests to that size (eager, or captured once in a CUDA graph
and replayed with new lengths), checks every replay against the float64 reference with
NaN-poisoned outputs, and times the scheduler and the attention kernel separately.

Rows: layout, scheduler GPU µs per launch, attention µs, metadata bytes, max error, padded replay
correct.  The scheduler runs for microseconds, comparable to the host's launch time, so it is timed as
``kernelgen bench``'s scheduler entries time it (``bench.measure.time_graph_launches``): 20
launches captured in one CUDA graph, the replay timed with CUDA events (median of ``repeat``, L2
flushed before each) and divided by 20, so host launch time is excluded (JSON key
``scheduler_graph_us``).  The attention kernel is timed eagerly: the median of ``repeat``
CUDA-event timings of one ``plan.attend`` call (JSON key ``attention_us``).

Why two layouts: FlashAttention-3 stores its varlen metadata as a struct of arrays whose offsets
depend on the batch size, so metadata planned for one batch and read with a padded one lands on
the wrong offsets; kernelgen sizes both layouts by a fixed capacity (see ``metadata.py``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from . import traces
from .bench.measure import GRAPH_LAUNCHES

HEAD_DIMS = (64, 96, 128, 192, 256)
#: How the two time columns are measured (in each JSON result, and under the table).
SCHEDULER_TIMING = (f"scheduler GPU time per launch: {GRAPH_LAUNCHES} launches captured in one CUDA graph, the "
                    f"replay timed with CUDA events (median, L2 flushed before each) and divided by {GRAPH_LAUNCHES}; "
                    f"host launch time excluded")
ATTENTION_TIMING = "attention: median CUDA-event time of one eager plan.attend call"


def trace_batch(rows, batch: int, max_len: int = 4096) -> tuple[list, list]:
    """A skewed batch of ``batch`` consecutive trace requests: every 8th request is a prefill
    (query = key = its context, capped at ``max_len``), the others are decodes (one query token
    against the context).  Returns (query lengths, key lengths) in tokens."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if not rows:
        raise ValueError("the trace has no requests")
    lq, lk = [], []
    for i in range(batch):
        ctx = min(max(int(rows[i % len(rows)][0]), 1), max_len)
        lk.append(ctx)
        lq.append(ctx if i % 8 == 7 else 1)
    return lq, lk


def parse_heads(text: str) -> tuple[int, int]:
    """``--heads Q/KV`` as (query heads, KV heads); ValueError naming the flag unless Q is a positive
    multiple of a positive KV."""
    hq, sep, hkv = str(text).partition("/")
    try:
        heads = (int(hq), int(hkv))
    except ValueError:
        heads = None
    if not sep or heads is None or heads[1] < 1 or heads[0] < 1 or heads[0] % heads[1]:
        raise ValueError(f"--heads must look like 32/8 (query heads a positive multiple of KV heads), got {text!r}")
    return heads


def check_arguments(trace=None, batch: int = 64, pad_to: int | None = None, head_dim: int = 128) -> list:
    """The checks of ``compare``'s arguments that need no GPU, so that the command reports a bad flag
    before it asks for a GPU: ValueError naming ``--batch``, ``--pad-to``, ``--head-dim`` or
    ``--trace``.  Returns the trace's rows (``traces.load_trace``)."""
    from ..kernels.metadata import MAX_CAPACITY

    if batch < 1:
        raise ValueError(f"--batch must be >= 1, got {batch}")
    for flag, value in (("--batch", batch), ("--pad-to", pad_to)):
        if value is not None and value > MAX_CAPACITY:   # (the plan's max_batch: the scheduler's limit)
            raise ValueError(f"{flag} must be <= {MAX_CAPACITY} (the scheduler's largest batch), got {value}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"--head-dim must be one of {HEAD_DIMS}, got {head_dim}")
    if pad_to is not None and pad_to < batch:
        raise ValueError(f"--pad-to ({pad_to}) must be >= --batch ({batch})")
    try:
        return traces.load_trace(trace)
    except (OSError, ValueError) as e:
        raise ValueError(f"--trace {trace}: {e}") from None


def _cu(lengths, device):
    import torch

    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device)


def compare(layouts=("soa", "aos"), trace=None, batch: int = 64, pad_to: int | None = None, graph: bool = False,
            causal: bool = True, head_dim: int = 128, heads=(32, 8), sort: bool = True, swizzle: bool = True,
            repeat: int = 20, seed: int = 0) -> list[dict]:
    """Run the comparison; returns one dict per layout (:func:`result_row`; see the module doc).

    Raises ValueError for a bad batch / pad_to / head_dim / heads, RuntimeError without a GPU.
    """
    import torch

    from ..front.plan import AttentionPlan
    from .bench.measure import time_graph_launches
    from .reference import attention_reference, tolerance
    from .timing import time_cuda

    rows = check_arguments(trace, batch, pad_to, head_dim)
    if not torch.cuda.is_available():
        raise RuntimeError("compare-layouts needs a CUDA GPU")
    hq, hkv = heads
    pad_to = batch if pad_to is None else pad_to
    lq, lk = trace_batch(rows, batch)
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(seed)
    tq, tk = sum(lq), sum(lk)
    q = torch.randn(tq, hq, head_dim, generator=g, device=dev).to(torch.bfloat16)
    k = torch.randn(tk, hkv, head_dim, generator=g, device=dev).to(torch.bfloat16)
    v = torch.randn(tk, hkv, head_dim, generator=g, device=dev).to(torch.bfloat16)
    pad = [0] * (pad_to - batch)
    cu_q, cu_k = _cu(lq + pad, dev), _cu(lk + pad, dev)
    atol, rtol = tolerance(torch.bfloat16)
    rng = np.random.default_rng(seed)
    results = []
    for layout in layouts:
        plan = AttentionPlan(max_batch=pad_to, num_heads_q=hq, num_heads_kv=hkv, head_dim=head_dim, causal=causal,
                             metadata_layout=layout, sort=sort, head_swizzle=swizzle, device=dev)
        out = torch.full((tq, hq, head_dim), float("nan"), device=dev, dtype=torch.bfloat16)
        replay = None
        if graph:
            plan.run(q, k, v, cu_q, cu_k, out=out)
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cg):
                plan.run(q, k, v, cu_q, cu_k, out=out)
            replay = cg.replay
        max_err, ok = 0.0, True
        for trial in range(3):
            if trial:  # new lengths, same totals: permute the requests
                perm = rng.permutation(batch)
                cu_q.copy_(_cu([lq[i] for i in perm] + pad, dev))
                cu_k.copy_(_cu([lk[i] for i in perm] + pad, dev))
            out.fill_(float("nan"))
            replay() if replay else plan.run(q, k, v, cu_q, cu_k, out=out)
            torch.cuda.synchronize()
            ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=causal)
            o, r = out.double(), ref.to(torch.bfloat16).double()
            if torch.isnan(o).any():
                ok, max_err = False, float("inf")
                continue
            err = (o - r).abs()
            max_err = max(max_err, float(err.max()))
            ok = ok and bool((err <= atol + rtol * r.abs()).all())
        sched_us = time_graph_launches(lambda: plan.schedule(cu_q, cu_k), repeat=repeat, warmup=3)
        attn_us = time_cuda(lambda: plan.attend(q, k, v, cu_q, cu_k, out=out), repeat=repeat, warmup=3)
        results.append(result_row(layout, sched_us, attn_us, plan.metadata_bytes, max_err, ok, batch=batch,
                                  pad_to=pad_to, graph=graph, causal=causal, sort=sort, head_swizzle=swizzle,
                                  tokens_q=tq, tokens_k=tk))
    return results


def result_row(layout: str, scheduler_graph_us: float, attention_us: float, metadata_bytes: int, max_error: float,
               padded_replay_ok: bool, **context) -> dict:
    """One layout's result as ``compare`` returns it and ``--json`` prints it: the times in µs
    with how each was measured (``scheduler_timing``, ``attention_timing``), then ``context``
    (batch, pad_to, graph, causal, sort, head_swizzle, tokens_q, tokens_k)."""
    return {"layout": layout, "scheduler_graph_us": scheduler_graph_us, "scheduler_timing": SCHEDULER_TIMING,
            "attention_us": attention_us, "attention_timing": ATTENTION_TIMING, "metadata_bytes": metadata_bytes,
            "max_error": max_error, "padded_replay_ok": padded_replay_ok, **context}


def format_table(results) -> str:
    """The text table of ``compare``'s results, with how the times were measured under it."""
    head = (f"{'layout':6s} {'sched GPU us/launch':>19s} {'attention us':>12s} {'metadata B':>10s} {'max err':>9s}  "
            f"padded replay")
    lines = [head]
    for r in results:
        replay = "correct" if r["padded_replay_ok"] else "WRONG"
        lines.append(f"{r['layout']:6s} {r['scheduler_graph_us']:19.2f} {r['attention_us']:12.1f} "
                     f"{r['metadata_bytes']:10d} {r['max_error']:9.2e}  {replay}")
    lines.append(f"sched GPU us/launch: {SCHEDULER_TIMING}")
    lines.append(f"attention us: {ATTENTION_TIMING}")
    return "\n".join(lines)


def main_args(args) -> int:
    """CLI entry: args from cli.py's compare-layouts parser.  ``--json PATH`` writes the results
    to PATH besides printing the table, ``--json -`` prints them instead of the table;
    ``--cache-dir`` sets the kernel cache of the run."""
    try:
        heads = parse_heads(args.heads)
    except ValueError as e:
        print(f"kernelgen compare-layouts: error: {e}", file=sys.stderr)
        return 2
    if getattr(args, "cache_dir", None) is not None:
        from ..jit.cache import set_cache_dir

        set_cache_dir(args.cache_dir)
    results = compare(layouts=args.layout, trace=args.trace, batch=args.batch, pad_to=args.pad_to, graph=args.graph,
                      causal=args.causal, head_dim=args.head_dim, heads=heads, sort=not args.no_sort,
                      swizzle=not args.no_swizzle, repeat=args.repeat)
    if args.json == "-":
        print(json.dumps(results, indent=1))
    else:   # (the table first: a finished measurement is never lost to an unwritable --json path)
        r0 = results[0]
        print(f"batch {r0['batch']} padded to {r0['pad_to']} ({'CUDA graph replays' if r0['graph'] else 'eager'}), "
              f"{r0['tokens_q']} query / {r0['tokens_k']} key tokens, heads {args.heads}, d {args.head_dim}, "
              f"{'causal' if args.causal else 'non-causal'}, sort {'on' if r0['sort'] else 'off'}, "
              f"swizzle {'on' if r0['head_swizzle'] else 'off'}")
        print(format_table(results))
    if args.json and args.json != "-":
        try:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        except OSError as e:
            print(f"kernelgen compare-layouts: error: --json {args.json}: not written ({e})", file=sys.stderr)
            return 1
    return 0 if all(r["padded_replay_ok"] for r in results) else 1
