"""Mixed prefill + decode batches on sm_90a: the one-launch Hopper fused kernel against the classes
in turn and the serial peer, and the split of the SMs between the two queues (GPU).

For each case (``--cases``) the same paged batch (the bench's mixed-entry construction: chunked
prefills on Mooncake trace contexts, or whole Azure prompts for ``short``, plus decodes, pages of
16 tokens, causal, the ``--model`` preset's window and soft-cap) runs as:

* ``prefill_only`` / ``decode_only``: one call with only that class's requests (what ``serial``
  adds up);
* ``serial``: the prefill call then the decode call (the bench's peer);
* ``in_turn``: both classes in one call, the long class on the Hopper kernel, then the short class
  on the sm_80 decode kernel (``fused.build_pair``);
* ``fused_k{N}``: the Hopper fused kernel with N CTAs starting on the short queue
  (``--short-ctas``; ``fused.build`` with ``FusedKernels.short_ctas`` set); with ``--stages`` /
  ``--block-n`` / ``--rows``, ``fused_s{S}n{B}m{R}_k{N}`` (the options given) for each K/V
  pipeline depth S, key block B and query rows R (8: the keys-as-rows tile) of the decode tile; with ``--granularity``, a ``_g{F}`` suffix for each factor F of the short class's
  split granularity (its scheduler's ``num_ctas``); with ``--combine-row-warps``, a ``_rw{N}`` suffix
  for each count of warps a row of the split-KV combine (``CombineSpec.row_warps``).

All are timed as interleaved CUDA-graph replays (``kernelgen.apps.bench.measure.time_interleaved``:
L2 flushed before each replay, the configurations' order rotated every round, the median of the
round medians), and every mixed configuration's output is compared with ``serial``'s.

Cases: ``bench`` (3 chunks of 512/2048/4096 tokens + 192 decodes: ``mixed_trace``), ``long`` (2
chunks of 4096 + 256 decodes: ``mixed_long_chunks``), ``short`` (8 Azure prompts of at most 512
tokens + 32 decodes: ``mixed_short_chunks``), ``light`` (1 chunk of 512 + 64 decodes), ``heavy`` (4
chunks of 4096 + 256 decodes).

Usage: PYTHONPATH=$PWD python benchmarks/experiments/mixed_sweep.py [--cases bench,long,short,light,heavy]
       [--short-ctas 0,16,24,33,48,66] [--stages 2,4] [--block-n 16,32] [--rows 8,16] [--combine-row-warps 1,4,8]
       [--model llama3-8b] [--rounds 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: "bench", "long", "short": the bench's mixed_trace, mixed_long_chunks, mixed_short_chunks batches
#: (suites.MIXED_BATCHES); the others (chunk lengths, decodes, first Mooncake row of the decodes).
CASES = {"bench": "mixed_trace", "long": "mixed_long_chunks", "short": "mixed_short_chunks",
         "light": ([512], 64, 300), "heavy": ([4096] * 4, 256, 100)}


def case_lengths(settings, case: str):
    """(prefill query lengths, prefill key lengths, decode key lengths) of a case."""
    from kernelgen.apps.bench import suites

    if isinstance(CASES[case], str):
        return suites.mixed_lengths(settings, CASES[case])
    pre_q, n_dec, row = CASES[case]
    ctx = [min(max(1, int(r[0])), 32768) for r in suites.load_rows(settings.decode_trace, "mooncake_conv_sample.csv")]
    pre_k = [c + q for c, q in zip(suites._take(ctx, 200, len(pre_q)), pre_q)]
    return pre_q, pre_k, suites._take(ctx, row, n_dec)


def build_case(case: str, model, short_ctas: list, settings, tiles=((None, None, None, None),),
               granularity=(1.0,), kv_dtype: str = "", fused_regs=(None,), row_warps=(None,)) -> tuple:
    """({label: zero-argument call}, {label: output tensor}, description) of one case.

    ``kv_dtype="e4m3"``: the cache in e4m3 with per-tensor descales (the bench's
    ``mixed_trace_fp8``), q bf16; then also ``prefill_only_qq`` and ``serial_qq`` (the prefill call
    with ``quantize_q=True``: q quantised for the FP8 tensor-core variant).  ``fused_regs``: the
    Hopper fused kernel's (producer, consumer) registers to compare (None: its default,
    ``FusedAttentionSpec.SM90_FUSED_REGS``), each a label suffix ``_r{P}``.  ``row_warps``: the
    split-KV combine's warps a row to compare (None: the dispatcher's, ``CombineSpec.row_warps``
    through ``heuristics.combine_row_warps``), each a label suffix ``_rw{N}``."""
    import torch

    from kernelgen.apps.bench import suites
    from kernelgen.front import api
    from kernelgen.jit import runtime
    from kernelgen.kernels import kernel_args
    from kernelgen.launch import bind, fused
    from kernelgen.selection import arguments, decide, heuristics

    m = model
    pre_q, pre_k, dec_k = case_lengths(settings, case)
    qlens, klens = pre_q + [1] * len(dec_k), pre_k + dec_k
    q, kc, vc, pt, used, cu_q = suites.paged_batch(qlens, klens, m, seed=12)
    n_pre, t_pre = len(pre_q), sum(pre_q)
    kw = dict(causal=True, window_size=m.window_size, softcap=m.softcap)
    descale = None
    if kv_dtype:
        if kv_dtype != "e4m3":
            raise ValueError(f"mixed_sweep: kv_dtype {kv_dtype!r} (only 'e4m3')")
        (kc, ks), (vc, vs) = suites.quantize_e4m3(kc), suites.quantize_e4m3(vc)
        kw.update(k_descale=ks, v_descale=vs)
    outs, calls = {}, {}

    def new_out(label):
        outs[label] = torch.empty(q.shape[0], m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
        return outs[label]

    o = new_out("serial")
    cu_pre, cu_dec = cu_q[: n_pre + 1], cu_q[n_pre:] - t_pre

    def prefill(o):
        api.varlen_attention(q[:t_pre], kc, vc, cu_pre, None, max(pre_q), max(pre_k), seqused_k=used[:n_pre],
                             page_table=pt[:n_pre], out=o[:t_pre], **kw)

    def decode(o):
        api.varlen_attention(q[t_pre:], kc, vc, cu_dec, None, 1, max(dec_k), seqused_k=used[n_pre:],
                             page_table=pt[n_pre:], out=o[t_pre:], **kw)
    po, do = new_out("prefill_only"), new_out("decode_only")
    calls["prefill_only"] = lambda: prefill(po)
    calls["decode_only"] = lambda: decode(do)
    calls["serial"] = lambda: (prefill(o), decode(o))
    if kv_dtype:
        def prefill_qq(o):
            api.varlen_attention(q[:t_pre], kc, vc, cu_pre, None, max(pre_q), max(pre_k), seqused_k=used[:n_pre],
                                 page_table=pt[:n_pre], out=o[:t_pre], quantize_q=True, **kw)
        pq, sq = new_out("prefill_only_qq"), new_out("serial_qq")
        calls["prefill_only_qq"] = lambda: prefill_qq(pq)
        calls["serial_qq"] = lambda: (prefill_qq(sq), decode(sq))

    dev = torch.cuda.current_device()
    device = runtime.device(dev)
    hq, hkv = m.num_heads_q, m.num_heads_kv
    thr = heuristics.short_query_tokens(hq, hkv)
    # the mixed call's checked signature: what the dispatcher chooses from (decide.recipe)
    checked = arguments.varlen_call(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used, page_table=pt,
                                    out=o, softmax_scale=None, num_splits=0, pack_gqa=None, metadata_layout="soa",
                                    sort=True, head_swizzle=True, short_query_tokens=thr, arch=None, **kw)
    sig = checked.signature
    args = ("sm_90a", "bf16", m.head_dim, m.head_dim_v)
    choice = dict(num_heads_q=hq, num_heads_kv=hkv, mask=sig.mask, max_seqlen_q=max(qlens), max_seqlen_k=max(klens),
                  paged=True, softcap=m.softcap > 0, short_max_q=thr, num_sms=device.num_sms,
                  page_size=kc.shape[1])
    if kv_dtype:
        choice["kv_dtype"] = kv_dtype
        descale = kernel_args.descale_fields(kw["k_descale"], kw["v_descale"], checked.descale)
    sizes, scale, (left, right) = checked.sizes, checked.scale, checked.window
    # one workspace shared by every mixed configuration (they run one after the other on one
    # stream): a call's own would be allocated in each captured graph's private pool, and the
    # short class's split partials are sized by all of the batch's query rows (GBs here)
    common = dict(batch=len(qlens), q=q, k=kc, v=vc, lse=None, page_table=pt, scale=scale, window=(left, right),
                  softcap=m.softcap, return_lse=False, sizes=sizes,
                  **({} if descale is None else {"descale": descale}))
    pending = []  # (label, build function, kernels, workspace layout)
    pv = heuristics.choose_pair(*args, **choice)
    if pv is not None:
        r = decide.recipe(pv, sig, device)
        pending.append(("in_turn", fused.build_pair, bind.bind(r, runtime.load(r.specs, dev)), r.workspace))
    for (st, bn, rows, defs), regs, rw in ((t, rg, w) for t in tiles for rg in fused_regs for w in row_warps):
        saved_rw = heuristics.combine_row_warps
        if rw is not None:   # the short class's combine with rw warps a row (its grid follows the spec)
            heuristics.combine_row_warps = lambda *a, _rw=rw, **k: _rw
        try:
            fv = heuristics.choose_fused_hopper(*args, **choice, short_stages=st, short_block_n=bn, short_rows=rows)
        finally:
            heuristics.combine_row_warps = saved_rw
        if fv is None:
            continue
        r = decide.recipe(fv, sig, device)
        fk = _load_with_defines(r, dev, defs, regs)
        for n in short_ctas:
            for g in granularity:
                tag = "".join(f"{c}{x}" for c, x in (("s", st), ("n", bn), ("m", rows)) if x is not None)
                if defs is not None:
                    tag += "_" + (defs.replace("KG_", "").replace("=", "").lower() or "nodefs")
                label = (f"fused_{tag}_k{n}" if len(tiles) > 1 else f"fused_k{n}") + (
                    f"_g{g:g}" if len(granularity) > 1 else "") + ("" if regs is None else f"_r{regs[0]}") + (
                    "" if rw is None else f"_rw{rw}")
                cfg = dataclasses.replace(fk.cfg_short, num_ctas=max(1, round(fk.cfg_short.num_ctas * g)))
                pending.append((label, fused.build, dataclasses.replace(
                    fk, short_ctas=min(n, fk.fused.persistent_grid), cfg_short=cfg), r.workspace))
    ws = torch.empty(max([lay.nbytes for *_, lay in pending] + [1]), dtype=torch.uint8, device="cuda")
    outs["_workspace"] = ws
    for label, build, kern, lay in pending:
        oo = new_out(label)
        prep = build(kern, layout=lay, out=oo, fixed_base=ws.data_ptr(), **common)
        calls[label] = lambda p=prep, oo=oo: p.run(q, kc, vc, cu_q, None, used, pt, oo, None)
    desc = (f"{n_pre} prefill chunks {pre_q} + {len(dec_k)} decodes, {sum(klens)} keys, paged 16, {m.name}"
            + (f", {kv_dtype} cache" if kv_dtype else ""))
    return calls, outs, desc


def _load_with_defines(recipe, dev, defs, regs=None):
    """A fused recipe's kernels loaded and bound (``launch.bind``) with KERNELGEN_DEFINES set to
    ``defs`` while the fused kernel compiles (None: as the environment has it) and, with ``regs``
    ((producer, consumer)), the fused kernel's registers set to them (its ``hopper_regs``); the
    in-memory kernel cache is bypassed so that each build is its own."""
    from kernelgen.jit import compiler, runtime
    from kernelgen.kernels.spec import FusedAttentionSpec
    from kernelgen.launch import bind

    if defs is None and regs is None:
        return bind.bind(recipe, runtime.load(recipe.specs, dev))
    old = os.environ.get(compiler.DEFINES_ENV)
    if defs is not None:
        os.environ[compiler.DEFINES_ENV] = defs
    old_regs = FusedAttentionSpec.hopper_regs
    if regs is not None:
        FusedAttentionSpec.hopper_regs = lambda self: tuple(regs)
    fused_spec = recipe.variants.fused
    runtime._loaded.pop((dev, fused_spec), None)
    try:
        return bind.bind(recipe, runtime.load(recipe.specs, dev))
    finally:
        FusedAttentionSpec.hopper_regs = old_regs
        if old is None:
            os.environ.pop(compiler.DEFINES_ENV, None)
        else:
            os.environ[compiler.DEFINES_ENV] = old
        runtime._loaded.pop((dev, fused_spec), None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="bench,light,heavy")
    ap.add_argument("--short-ctas", default="0,16,24,33,48,66")
    ap.add_argument("--stages", default="", help="decode-tile K/V stages to compare (comma list; default: "
                    "heuristics.SM90_FUSED_SHORT_STAGES)")
    ap.add_argument("--block-n", default="", help="decode-tile key blocks to compare (comma list; default: the "
                    "decode tile's)")
    ap.add_argument("--rows", default="", help="decode-tile query rows to compare (comma list of 8 (the "
                    "keys-as-rows tile) and 16; default: heuristics.SM90_FUSED_SHORT_ROWS)")
    ap.add_argument("--defines", default="", help="KERNELGEN_DEFINES values to compile the fused kernel with, "
                    "';'-separated (an empty entry: none; e.g. ';KG_KT_PREFETCH=2')")
    ap.add_argument("--granularity", default="", help="factors of the short class's split granularity to compare "
                    "(comma list; its scheduler's num_ctas times the factor: more, smaller decode tiles above 1)")
    ap.add_argument("--kv-dtype", default="", help="e4m3: the cache in e4m3 with per-tensor descales, q bf16 "
                    "(the bench's mixed_trace_fp8); adds prefill_only_qq / serial_qq (quantize_q=True)")
    ap.add_argument("--fused-regs", default="", help="the fused kernel's producer/consumer registers to compare "
                    "(comma list of P/C, e.g. 40/232,56/224; default: SM90_FUSED_REGS)")
    ap.add_argument("--combine-row-warps", default="", help="the fused launch's split-KV combine with these warps a "
                    "row (comma list of 1, 2, 4, 8; default: the dispatcher's, heuristics.combine_row_warps)")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    from kernelgen.apps.bench import measure, suites
    from kernelgen.apps.bench.models import PRESETS

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("mixed_sweep: needs an sm_90a GPU", file=sys.stderr)
        return 2
    settings = suites.Settings()
    model = PRESETS[a.model]
    short_ctas = [int(x) for x in a.short_ctas.split(",") if x]
    report = {"method": measure.INTERLEAVED_METHOD.format(launches=1, rounds=a.rounds, repeat=a.repeat, flush=measure.FLUSH_METHOD["write"]),
              "model": a.model, "cases": {}}
    for case in [c for c in a.cases.split(",") if c]:
        stages = [int(x) for x in a.stages.split(",") if x] or [None]
        block_ns = [int(x) for x in a.block_n.split(",") if x] or [None]
        rows_list = [int(x) for x in a.rows.split(",") if x] or [None]
        defs_list = a.defines.split(";") if a.defines else [None]
        tiles = [(st, bn, r, df) for st in stages for bn in block_ns for r in rows_list for df in defs_list]
        granularity = [float(x) for x in a.granularity.split(",") if x] or [1.0]
        regs = [tuple(int(y) for y in x.split("/")) for x in a.fused_regs.split(",") if x] or [None]
        row_warps = [int(x) for x in a.combine_row_warps.split(",") if x] or [None]
        calls, outs, desc = build_case(case, model, short_ctas, settings, tiles, granularity, a.kv_dtype, regs,
                                       row_warps)
        times = measure.time_interleaved(calls, rounds=a.rounds, repeat=a.repeat)
        for f in calls.values():  # one more eager run of each, then the outputs against serial's
            f()
        torch.cuda.synchronize()
        ref = outs["serial"].float()
        rows = {}
        outs.pop("_workspace", None)
        for label, t in times.items():
            err = None
            if label not in ("prefill_only", "decode_only", "prefill_only_qq"):
                err = float((outs[label].float() - ref).abs().max())
            rows[label] = {"us": t["us"], "rounds": t["rounds"], "max_abs_diff_vs_serial": err}
        serial = rows["serial"]["us"]
        for r in rows.values():
            r["ratio_to_serial"] = r["us"] / serial
        report["cases"][case] = {"shape": desc, "rows": rows}
        print(f"\n{case}: {desc}")
        print(f"{'config':>14} {'us':>10} {'x serial':>9} {'max diff':>10}")
        for label, r in rows.items():
            d = "" if r["max_abs_diff_vs_serial"] is None else f"{r['max_abs_diff_vs_serial']:.2e}"
            print(f"{label:>14} {r['us']:>10.1f} {r['ratio_to_serial']:>9.3f} {d:>10}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
