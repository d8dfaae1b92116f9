"""Decode A/B (GPU): the bench's paged decode batches run with the kernels of several template
folders in one process, bf16 and FP8 (e4m3) caches, timed as interleaved CUDA-graph-free replays
of each configuration's prepared call (``kernelgen.apps.bench.measure.time_interleaved``, L2
flushed before each replay: ``--flush write``, the bench's default, ``read``, or ``layer``: the
GEMMs that precede attention in a decode layer of the model, the state attention meets in
serving).  The kernels of one configuration are built from its folder
(``tile_ab.patched``'s template swap), so two commits' decode tiles meet on the same inputs and
the same GPU state; the outputs are compared with the first configuration's.

Configurations: ``NAME=FOLDER`` (a ``templates/`` tree, e.g. ``git archive <commit> templates``
unpacked; ``.`` is the checkout's), optionally ``NAME=FOLDER@rwN``: the split-KV combine with N warps
a row (``heuristics.combine_row_warps`` forced to N while the call is prepared), ``@mbN``: the
FP8 decode tile for N CTAs an SM (``heuristics.FP8_DECODE_MIN_BLOCKS``), ``@stN``: N K/V stages
on an FP8 cache (``heuristics.FP8_DECODE_STAGES``), ``@rN``: the FP8 decode tile's rows (8: the keys-as-rows tile;
``heuristics.FP8_DECODE_ROWS``), ``@dNAME``: its kernels built with ``-DNAME`` (``KERNELGEN_DEFINES``, e.g.
``@dKG_TIMELINE``), joined by "+" (``@mb16+st3``).  Prints one JSON line per (shape, cache) and a summary: each
configuration's time over the first one's.

Usage: PYTHONPATH=$PWD python benchmarks/experiments/decode_ab.py --configs new=.,old=/tmp/old/templates
       [--shapes decode_trace_b128_paged16,decode_trace_b32_paged16,8x1024] [--models llama3-8b,llama3-70b-tp8]
       [--caches bf16,e4m3] [--passes 2] [--flush write|read|layer] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

_KEEP: list = []   # modules of the swapped folders' kernels (their prepared calls hold function handles)


def with_templates(folder: str, fn):
    """``fn()`` with kernels rendered from the template folder ``folder`` (loaded afresh), then the
    checkout's templates and loaded kernels back (tile_ab.py's swap without its tile patches)."""
    from kernelgen.front import api
    from kernelgen.jit import render, runtime
    saved_loaded, saved_tdir = dict(runtime._loaded), render.templates_dir
    render.templates_dir = lambda: Path(folder).resolve()
    render.environment.cache_clear()
    runtime._loaded.clear()
    api.clear_signature_cache()
    try:
        return fn()
    finally:
        render.templates_dir = saved_tdir
        render.environment.cache_clear()
        _KEEP.extend(runtime._loaded.values())
        runtime._loaded.clear()
        runtime._loaded.update(saved_loaded)
        api.clear_signature_cache()


def with_options(opt: str, fn):
    """``fn()`` with the configuration's options forced while the call is prepared (``opt``, "+"
    between several): "rwN" the split-KV combine's warps a row (``heuristics.combine_row_warps``),
    "mbN" the one-warp decode tiles' CTAs an SM on an FP8 cache (``heuristics.FP8_DECODE_MIN_BLOCKS``;
    above 12 at head dim 128 the tile spills with Q in registers: apply
    ``patches/q_frags_d128.patch`` to the checkout, which keeps Q's fragments in shared memory there),
    "stN" their K/V stages on an FP8 cache (``heuristics.FP8_DECODE_STAGES``), "rN" their rows on an FP8
    cache (``heuristics.FP8_DECODE_ROWS``), "dNAME" its kernels built with -DNAME; "" as is."""
    if not opt:
        return fn()
    from kernelgen.front import api
    from kernelgen.selection import heuristics
    opts = opt.split("+")
    for o in opts:
        if not re.fullmatch(r"(rw|mb|st)\d+|r(8|16)|d[A-Za-z_]\w*", o):
            raise ValueError(f"unknown configuration option {o!r} (rwN, mbN, stN, r8 / r16, dNAME)")
    from kernelgen.jit import compiler
    defines = [o[1:] for o in opts if o.startswith("d")]
    old_env = os.environ.get(compiler.DEFINES_ENV)
    from kernelgen.jit import runtime
    saved_loaded = dict(runtime._loaded)
    if defines:   # dNAME: the configuration's kernels built with -DNAME (KERNELGEN_DEFINES while prepared),
        # loaded afresh (the in-memory kernels are keyed by spec, not by the options they were built with)
        os.environ[compiler.DEFINES_ENV] = ",".join(([old_env] if old_env else []) + defines)
        opts = [o for o in opts if not o.startswith("d")]
        runtime._loaded.clear()
    saved = (heuristics.combine_row_warps, heuristics.FP8_DECODE_MIN_BLOCKS, heuristics.FP8_DECODE_STAGES,
             heuristics.FP8_DECODE_ROWS)
    api.clear_signature_cache()
    try:
        for o in opts:
            n = int(o[1:] if re.fullmatch(r"r\d+", o) else o[2:])
            if re.fullmatch(r"r\d+", o):
                heuristics.FP8_DECODE_ROWS = n
            elif o.startswith("rw"):
                heuristics.combine_row_warps = lambda *a, n=n, **k: n
            elif o.startswith("mb"):
                heuristics.FP8_DECODE_MIN_BLOCKS = n
            else:
                heuristics.FP8_DECODE_STAGES = n
        return fn()
    finally:
        (heuristics.combine_row_warps, heuristics.FP8_DECODE_MIN_BLOCKS, heuristics.FP8_DECODE_STAGES,
         heuristics.FP8_DECODE_ROWS) = saved
        if defines:
            if old_env is None:
                os.environ.pop(compiler.DEFINES_ENV, None)
            else:
                os.environ[compiler.DEFINES_ENV] = old_env
            _KEEP.extend(runtime._loaded.values())
            runtime._loaded.clear()
            runtime._loaded.update(saved_loaded)
        api.clear_signature_cache()


def contexts(shape: str) -> list:
    """The key lengths of a bench decode entry (``decode_trace_b32_paged16``, ...) or of ``NxL``
    (N decodes of L keys each, e.g. ``8x1024``)."""
    if re.fullmatch(r"\d+x\d+", shape):
        n, length = (int(x) for x in shape.split("x"))
        return [length] * n
    from kernelgen.apps.bench import suites
    return suites.decode_contexts(suites.Settings(), shape)


#: What precedes attention in a decode layer, per model preset (hidden size, MLP intermediate size
#: and QKV width per GPU): the previous layer's MLP down projection and this layer's QKV projection,
#: the "layer" flush (--flush layer).  llama3-8b: W_down 117 MB, W_qkv 50 MB; llama3-70b on 8 GPUs:
#: 59 and 21 MB.
LAYER_DIMS = {"llama3-8b": (4096, 14336, 6144), "llama3-70b-tp8": (8192, 3584, 1280)}
FLUSH = "write"
_LAYERS: dict = {}


def layer_gemms(model: str, tokens: int = 128):
    """A callable that runs the two bf16 GEMMs before attention in a decode layer of ``model`` on
    ``tokens`` tokens (weights read once, small outputs written), as the L2 state attention meets
    in a real step."""
    import torch
    if model not in LAYER_DIMS:
        raise ValueError(f"--flush layer knows {', '.join(LAYER_DIMS)}, not {model!r}")
    if model not in _LAYERS:
        hidden, inter, qkv = LAYER_DIMS[model]
        d = dict(device="cuda", dtype=torch.bfloat16)
        h, w_down = torch.randn(tokens, inter, **d), torch.randn(inter, hidden, **d) * 0.01
        x, w_qkv, y = torch.empty(tokens, hidden, **d), torch.randn(hidden, qkv, **d) * 0.01, torch.empty(tokens, qkv, **d)
        _LAYERS[model] = lambda: (torch.mm(h, w_down, out=x), torch.mm(x, w_qkv, out=y))
    return _LAYERS[model]


def flush_for(model: str):
    """The time_gpu flush of --flush: "write" / "read" (the bench's 256 MB buffer), or the model's
    layer GEMMs ("layer")."""
    return layer_gemms(model) if FLUSH == "layer" else FLUSH


def run(shape: str, model: str, cache: str, configs: dict) -> dict:
    import torch

    from kernelgen.apps.bench import measure, suites
    from kernelgen.apps.bench.models import PRESETS
    from kernelgen.front import api

    m = PRESETS[model]
    ctx = contexts(shape)
    q, kc, vc, pt, used, cu_q = suites.paged_batch([1] * len(ctx), ctx, m)
    kw = {}
    if cache == "e4m3":
        (kc, ks), (vc, vs) = suites.quantize_e4m3(kc), suites.quantize_e4m3(vc)
        kw = dict(k_descale=ks.reshape(1, 1).expand(len(ctx), m.num_heads_kv).contiguous(),
                  v_descale=vs.reshape(1, 1).expand(len(ctx), m.num_heads_kv).contiguous())
    maxk = max(ctx)
    fns, kernels, diffs, first = {}, {}, {}, None
    for name, spec in configs.items():
        folder, _, opt = spec.partition("@")
        out = torch.full((len(ctx), m.num_heads_q, m.head_dim_v), float("nan"), device="cuda", dtype=torch.bfloat16)

        def prepare(out=out):
            api.varlen_attention(q, kc, vc, cu_q, None, 1, maxk, seqused_k=used, page_table=pt, causal=True,
                                 window_size=m.window_size, softcap=m.softcap, out=out, **kw)
            return api._CALLS._last[1]
        prep = with_options(opt, prepare if folder == "." else lambda: with_templates(folder, prepare))
        kernels[name] = prep.attn.name + ("" if prep.combine is None else " + " + prep.combine.name)
        first = out if first is None else first
        diffs[name] = float((out.float() - first.float()).abs().nan_to_num(float("inf")).max())
        fns[name] = lambda prep=prep, out=out: prep.run(q, kc, vc, cu_q, None, used, pt, out, None)
    times = measure.time_interleaved(fns, rounds=5, repeat=10, flush=flush_for(model))
    nbytes = sum(ctx) * m.num_heads_kv * (m.head_dim + m.head_dim_v) * (1 if cache == "e4m3" else 2)
    row = {"shape": shape, "model": model, "cache": cache, "us": {n: round(r["us"], 1) for n, r in times.items()},
           "tbps": {n: round(nbytes / r["us"] / 1e6, 3) for n, r in times.items()},
           "rounds": {n: [round(x, 1) for x in r["rounds"]] for n, r in times.items()},
           "kernels": kernels, "max_abs_diff_vs_first": diffs}
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", required=True, help="NAME=FOLDER,... (FOLDER '.': the checkout's templates)")
    ap.add_argument("--shapes", default="decode_trace_b128_paged16,decode_trace_b32_paged16,decode_long_b8_128k")
    ap.add_argument("--models", default="llama3-8b,llama3-70b-tp8")
    ap.add_argument("--caches", default="bf16,e4m3")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--flush", choices=("write", "read", "layer"), default="write",
                    help="before each replay: write (default) or read the bench's 256 MB buffer, or run the GEMMs "
                         "that precede attention in a decode layer of the model (LAYER_DIMS)")
    a = ap.parse_args(argv)
    global FLUSH
    FLUSH = a.flush
    import torch
    if not torch.cuda.is_available():
        print("decode_ab: needs a GPU", file=sys.stderr)
        return 2
    configs = dict(c.split("=", 1) for c in a.configs.split(",") if c)
    rows = []
    for _ in range(a.passes):
        for model in a.models.split(","):
            for shape in a.shapes.split(","):
                for cache in a.caches.split(","):
                    rows.append(run(shape, model, cache, configs))
    base = next(iter(configs))
    for r in rows:
        print(f"{r['model']:16s} {r['shape']:28s} {r['cache']:5s} " + "  ".join(
            f"{n} {r['us'][n]:8.1f} us {r['us'][n] / r['us'][base]:.3f}" for n in configs))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
