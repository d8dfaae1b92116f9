"""A/B of Hopper tiles and mainloop options on dense prefill shapes, as interleaved CUDA-graph
replays (``bench.measure.time_interleaved``), with FlashAttention-3 on the same inputs when
fa3-fwd is importable (``--score-mod`` / ``--softcap``: a user variant or the built-in soft-cap in
every kernelgen configuration but the ``alibi`` path's, which is the built-in to compare a snippet with;
a snippet that names ``slopes`` gets ALiBi's slopes as that tensor; the FA3 peers run without a
snippet and with ``--softcap``'s built-in soft-cap (FA3 has one), the ``fa4`` peer with
``--fa4-softcap``'s score_mod when given).

Each configuration ``name=path:d:bm:bn:stages:opts[:defines[:templates]]`` patches the tile table of its path for head
dim ``d`` (``bf16``: ``heuristics.SM90_TILES``; ``fp8q``: ``heuristics.SM90_FP8_MMA_TILES``, q, K
and V in e4m3; ``kv8``: ``heuristics.SM90_TILES`` with K and V in e4m3 and a bf16 q, the FP8-cache
prefill, ``SM90_FP8_TILES`` at head dims 192 / 256; ``alibi``: bf16 with ALiBi slopes 2^(-8 (h + 1) / heads), timed against the first ``bf16``
configuration) and ``heuristics.SM90_OPTS``, the letters exact (a "t" also on soft-capped / ALiBi /
variant kernels, ``heuristics.SM90_TILEINFO_EXTRAS``; "x" and "m" only where given, "m" at every head dim,
``heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM``, windows still without it) (and ``KERNELGEN_DEFINES`` with ``defines``, NAME[=VALUE] joined by '+'; ``REGS_FP8=P/C`` there sets the FP8-cache
kernels' producer / consumer registers instead, ``AttentionSpec.SM90_REGS_FP8``, and ``REGS_FP8_MMA_SMALL=P/C`` those
of the 12-warp FP8 tensor-core kernels at head dim 64, ``AttentionSpec.SM90_REGS_FP8_MMA_SMALL``, and ``WG3=a/b``
adds a, b to ``heuristics.SM90_THREE_WG_EXTRAS``, e.g. ``WG3=transcendental`` lets a tanh snippet take the
three-warpgroup tile) while its call is prepared; the prepared call (kernels
fixed) is what the graphs replay (block_m 192 means three consumer warpgroups, 12 warps).  ``fa3`` / ``fa3fp8`` name the
peers.  ``--passes N`` measures every shape N times; ``--twice`` times every kernelgen configuration twice
(``NAME~2``, the same kernel loaded again: identical kernels differed by 6-8 % in one call at causal
16k, docs/dev/perf-log.md); the run ends with each configuration's time over its path's first
configuration, min-max over the passes.  ``templates``: another template folder (say a branch's ``templates/`` exported with
``git archive``) rendered for that configuration only, so that two versions of the kernels
run interleaved in one process.  Shapes: ``NAME=batch:seqlen:heads_q:heads_kv:d:causal``.  Prints one JSON row per shape.

    python benchmarks/experiments/tile_ab.py --shapes h64=8:2048:32:32:64:1 \\
        --configs t128=bf16:64:128:128:2:p,t192=bf16:64:192:128:2:p,fa3=fa3
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


_KEEP: list = []   # kernels loaded under a configuration's defines (their modules stay loaded)


def patched(path: str, d: int, tile, opts: str, fn, defines: str = "", templates: str = "", reload: bool = False):
    """``fn()`` with the tile table of ``path``, the Hopper options, ``KERNELGEN_DEFINES``
    (``defines``: NAME[=VALUE] joined by '+', compiled into this configuration's kernels) and the
    template folder (``templates``) patched, then restored.  ``fp8q`` also lifts the head dim's
    ``SM90_FP8_MMA_TILE_LIMITS`` (else a non-causal or soft-capped call keeps its usual tile and the
    configuration's tile is silently not used); ``kv8`` patches ``SM90_FP8_TILES`` where it has the head
    dim (192, 256), which an FP8 cache takes before ``SM90_TILES``.  ``reload``: load the kernels afresh even without
    defines or templates (``--twice``'s second copy)."""
    import os

    from kernelgen.front import api
    from kernelgen.jit import render
    from kernelgen.selection import heuristics
    # the defines' pseudo-settings, parsed before anything is patched (a malformed one raises here):
    # WG3=a/b adds a, b to heuristics.SM90_THREE_WG_EXTRAS (e.g. transcendental, softcap);
    # REGS_FP8=P/C the FP8-cache kernels' (producer, consumer) registers of 8 consumer warps
    # (AttentionSpec.SM90_REGS_FP8[8]); REGS_FP8_MMA_SMALL=P/C the FP8 tensor-core kernels' at head
    # dim 64 with 12 consumer warps (AttentionSpec.SM90_REGS_FP8_MMA_SMALL[12]); the rest are defines
    wg3_add, regs_fp8, regs_small, kept = frozenset(), None, None, []
    for d_ in (defines.split("+") if defines else []):
        if d_.startswith("WG3="):
            wg3_add |= frozenset(d_.split("=", 1)[1].split("/"))
        elif d_.startswith("REGS_FP8="):
            regs_fp8 = tuple(int(x) for x in d_.split("=", 1)[1].split("/"))
        elif d_.startswith("REGS_FP8_MMA_SMALL="):
            regs_small = tuple(int(x) for x in d_.split("=", 1)[1].split("/"))
        else:
            kept.append(d_)
    if any(r is not None and len(r) != 2 for r in (regs_fp8, regs_small)):
        raise ValueError(f"REGS_FP8 / REGS_FP8_MMA_SMALL take PRODUCER/CONSUMER registers, got {defines!r}")
    table = (heuristics.SM90_FP8_MMA_TILES if path == "fp8q"
             else heuristics.SM90_FP8_TILES if path == "kv8" and (d, d) in heuristics.SM90_FP8_TILES
             else heuristics.SM90_TILES)
    saved, saved_opts = dict(table), heuristics.SM90_OPTS
    limits, saved_limits = heuristics.SM90_FP8_MMA_TILE_LIMITS, dict(heuristics.SM90_FP8_MMA_TILE_LIMITS)
    if path == "fp8q":
        limits.pop((d, d), None)
    saved_defs = os.environ.get("KERNELGEN_DEFINES")
    saved_tiered = os.environ.get("KERNELGEN_TIERED_COMPILE")
    # the prepared call must hold this configuration's Hopper kernel, built here under its defines and
    # templates (a first call of a user variant would otherwise build it in the background, later)
    os.environ["KERNELGEN_TIERED_COMPILE"] = "0"
    table[(d, d)] = tile
    heuristics.SM90_OPTS = opts
    saved_fp8_t = heuristics.SM90_FP8_TILEINFO   # "t" on the FP8 paths' kernels when their options ask for it
    heuristics.SM90_FP8_TILEINFO = path in ("fp8q", "kv8") and "t" in opts
    saved_ex2 = heuristics.SM90_EX2_FMA          # option "x" only where the configuration's letters have it
    heuristics.SM90_EX2_FMA = False
    saved_msplit_rule = heuristics.SM90_MASK_SPLIT_MUFU   # and "m" likewise (both of its dispatcher rules)
    heuristics.SM90_MASK_SPLIT_MUFU = False
    saved_msplit_fp8 = heuristics.SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS
    heuristics.SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS = ()
    saved_extras_t = heuristics.SM90_TILEINFO_EXTRAS   # "t" on soft-cap / ALiBi / variant kernels too where asked
    heuristics.SM90_TILEINFO_EXTRAS = "t" in opts
    from kernelgen.jit import runtime
    saved_loaded, saved_tdir = dict(runtime._loaded), render.templates_dir
    fresh = bool(defines or templates or reload)
    defines = "+".join(kept)
    from kernelgen.kernels.spec import AttentionSpec
    saved_regs = dict(AttentionSpec.SM90_REGS_FP8)
    saved_small = dict(AttentionSpec.SM90_REGS_FP8_MMA_SMALL)
    saved_wg3 = heuristics.SM90_THREE_WG_EXTRAS
    saved_msplit = heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM   # "m" where the letters ask for it, any head dim
    if "m" in opts:
        heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM = 256
    if wg3_add:
        heuristics.SM90_THREE_WG_EXTRAS = saved_wg3 | wg3_add
    if regs_fp8:
        AttentionSpec.SM90_REGS_FP8 = {**saved_regs, 8: regs_fp8}
    if regs_small:
        AttentionSpec.SM90_REGS_FP8_MMA_SMALL = {**saved_small, 12: regs_small}
    if defines:
        os.environ["KERNELGEN_DEFINES"] = defines.replace("+", ",")
    if templates:
        render.templates_dir = lambda: Path(templates).resolve()
        render.environment.cache_clear()
    if fresh:   # (loaded kernels are kept per spec, which defines and templates do not change: load afresh)
        runtime._loaded.clear()
    api.clear_signature_cache()
    try:
        return fn()
    finally:
        heuristics.SM90_FP8_TILEINFO = saved_fp8_t
        heuristics.SM90_EX2_FMA = saved_ex2
        heuristics.SM90_MASK_SPLIT_MUFU = saved_msplit_rule
        heuristics.SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS = saved_msplit_fp8
        heuristics.SM90_TILEINFO_EXTRAS = saved_extras_t
        heuristics.SM90_THREE_WG_EXTRAS = saved_wg3
        heuristics.SM90_MASK_SPLIT_MAX_HEAD_DIM = saved_msplit
        AttentionSpec.SM90_REGS_FP8 = saved_regs
        AttentionSpec.SM90_REGS_FP8_MMA_SMALL = saved_small
        table.clear()
        table.update(saved)
        limits.clear()
        limits.update(saved_limits)
        heuristics.SM90_OPTS = saved_opts
        if saved_defs is None:
            os.environ.pop("KERNELGEN_DEFINES", None)
        else:
            os.environ["KERNELGEN_DEFINES"] = saved_defs
        if saved_tiered is None:
            os.environ.pop("KERNELGEN_TIERED_COMPILE", None)
        else:
            os.environ["KERNELGEN_TIERED_COMPILE"] = saved_tiered
        if templates:
            render.templates_dir = saved_tdir
            render.environment.cache_clear()
        if fresh:   # (the prepared call holds function handles only: keep its modules loaded)
            _KEEP.extend(runtime._loaded.values())
            runtime._loaded.clear()
            runtime._loaded.update(saved_loaded)
        api.clear_signature_cache()


PEERS = ("fa3", "fa3fp8", "fa4")


def run_shape(name: str, shape: str, configs: dict, score_mod: str | None = None, softcap: float = 0.0,
              settle_ms: float = 0.0, fa4_softcap: float = 0.0, window_left: int = -1) -> dict:
    import torch

    from kernelgen.apps.bench import measure, peers, suites
    from kernelgen.front import api
    from kernelgen.kernels.spec import TileConfig

    b, s, hq, hkv, d, causal = (int(x) for x in shape.split(":"))
    causal = bool(causal)
    torch.manual_seed(3)
    q, k, v = (torch.randn(b * s, h, d, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv))
    cu = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * s
    (q8, qs), (k8, ks), (v8, vs) = (suites.quantize_e4m3(t) for t in (q, k, v))
    qd, kd, vd = (x.reshape(1, 1).expand(b, hkv).contiguous() for x in (qs, ks, vs))
    # ALiBi's slopes of hq heads (Press et al.: 2^(-8 (h + 1) / hq))
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)], device="cuda", dtype=torch.float32)
    fns, kernels, diffs, first = {}, {}, {}, {}
    for cname, spec in configs.items():
        parts = spec.split(":")
        if parts[0] in PEERS:
            try:
                if parts[0] == "fa4":
                    mod = (lambda: peers.fa4_softcap_score_mod(fa4_softcap)) if fa4_softcap else None
                    fns[cname] = peers.fa4(q, k, v, causal, cu_q=cu, cu_k=cu, max_q=s, max_k=s, score_mod=mod)().fn
                    continue
                args = (q8, k8, v8) if parts[0] == "fa3fp8" else (q, k, v)
                fns[cname] = peers.fa3(*args, causal, cu_q=cu, cu_k=cu, max_q=s, max_k=s, softcap=softcap,
                                       window_left=window_left, descales=(qd, kd, vd) if parts[0] == "fa3fp8" else None)().fn
            except Exception as e:  # noqa: BLE001 - the peer's package missing or refusing the call
                kernels[cname] = f"unavailable: {type(e).__name__}: {e}"[:200]
            continue
        path, td, bm, bn, st, opts = parts[0], *(int(x) for x in parts[1:5]), parts[5] if len(parts) > 5 else "p"
        defines = parts[6] if len(parts) > 6 else ""
        templates = parts[7] if len(parts) > 7 else ""
        if td != d:
            continue
        tile = TileConfig(bm, bn, bm // 16, st, 1)
        kw = (dict(q_descale=qd, k_descale=kd, v_descale=vd) if path == "fp8q"
              else dict(k_descale=kd, v_descale=vd) if path == "kv8"
              else dict(alibi_slopes=slopes) if path == "alibi" else {})
        if score_mod and path != "alibi":
            import kernelgen
            kw["variant"] = kernelgen.Variant(score_mod=score_mod,
                                              tensors={"slopes": slopes} if "slopes" in score_mod else None)
        if softcap:
            kw["softcap"] = softcap
        if window_left >= 0:
            kw["window_size"] = (window_left, 0 if causal else -1)
        qq, kk, vv = (q8, k8, v8) if path == "fp8q" else (q, k8, v8) if path == "kv8" else (q, k, v)

        out = torch.full_like(q, float("nan"))
        def prepare(qq=qq, kk=kk, vv=vv, kw=kw, out=out):
            api.varlen_attention(qq, kk, vv, cu, cu, s, s, causal=causal, out=out, **kw)
            return api._CALLS._last[1]   # the prepared call (its kernels fixed): timed directly
        prep = patched(path, d, tile, opts, prepare, defines, templates, reload=cname.endswith(TWIN))
        kernels[cname] = prep.attn.name
        # the output against the path's first configuration (same inputs: equal up to summation order)
        ref = first.setdefault(path, out)
        diffs[cname] = float((out.float() - ref.float()).abs().nan_to_num(float("inf")).max())
        fns[cname] = lambda prep=prep, qq=qq, kk=kk, vv=vv, out=out: prep.run(qq, kk, vv, cu, cu, None, None, out, None)
    times = measure.time_interleaved(fns, rounds=5, repeat=10, settle_ms=settle_ms) if fns else {}
    pairs = b * (s * (s + 1) // 2 if causal else s * s)
    flops = 4 * hq * d * pairs
    row = {"shape": name, "dims": shape, "us": {n: round(r["us"], 1) for n, r in times.items()},
           "tflops": {n: round(flops / r["us"] / 1e6, 1) for n, r in times.items()},
           "rounds": {n: [round(x, 1) for x in r["rounds"]] for n, r in times.items()}, "kernels": kernels,
           "max_abs_diff_vs_first_of_path": diffs, "settle_ms": settle_ms}
    print(json.dumps(row), flush=True)
    return row


def path_of(spec: str) -> str:
    """A configuration's path: ``bf16`` / ``fp8q`` (its first field), ``fa3`` / ``fa3fp8`` for the peers."""
    return spec.split(":")[0]


def summarize(rows: list, configs: dict) -> list:
    """One line per shape: each configuration's time over the first configuration of its path
    (peers: over the first kernelgen configuration of the same dtype, fa3 -> bf16, fa3fp8 -> fp8q),
    as min-max over the passes (``rows`` holds every pass's rows); below 1: faster."""
    base_path = {"fa3": "bf16", "fa3fp8": "fp8q", "fa4": "bf16", "alibi": "bf16"}
    lines = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        ratios: dict = {}
        for r in (x for x in rows if x["shape"] == shape):
            us = r["us"]
            firsts = {}
            for name in configs:
                if name in us:
                    firsts.setdefault(path_of(configs[name]), name)
            for name in us:
                path = path_of(configs[name])
                base = firsts.get(base_path.get(path, path))
                if base is not None and base != name and us[base]:
                    ratios.setdefault(name, []).append(us[name] / us[base])
        parts = [f"{n} {min(v):.3f}" + (f"-{max(v):.3f}" if len(v) > 1 else "") for n, v in ratios.items()]
        lines.append(f"{shape}: " + ", ".join(parts))
    return lines


TWIN = "~2"


def with_twins(configs: dict) -> dict:
    """``configs`` with every kernelgen configuration followed by a copy named ``NAME~2`` (the same
    kernel, loaded again as another module): their ratio is the spread of the measurement itself.
    Raises ValueError for a configuration name that holds '~'."""
    out = {}
    for name, spec in configs.items():
        if "~" in name:
            raise ValueError(f"configuration name {name!r}: '~' is reserved for --twice's copies")
        out[name] = spec
        if path_of(spec) not in PEERS:
            out[name + TWIN] = spec
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="NAME=batch:seqlen:heads_q:heads_kv:d:causal,...")
    ap.add_argument("--configs", required=True, help="NAME=path:d:bm:bn:stages:opts[:defines[:templates]] or NAME=fa3|fa3fp8|fa4,...")
    ap.add_argument("--json", default=None)
    ap.add_argument("--score-mod", default=None, help="a user score_mod snippet for every kernelgen configuration")
    ap.add_argument("--softcap", type=float, default=0.0, help="the built-in soft-cap for every kernelgen configuration")
    ap.add_argument("--fa4-softcap", type=float, default=0.0,
                    help="the fa4 peer with FA4's soft-cap score_mod cap * tanh(score / cap) (tanh.approx)")
    ap.add_argument("--window", type=int, default=-1,
                    help="a sliding window of this many keys to the left (right: 0 when causal) in every call")
    ap.add_argument("--passes", type=int, default=1, help="measure every shape this many times (one process)")
    ap.add_argument("--settle-ms", type=float, default=None,
                    help="replay each configuration untimed for this much GPU time before each of its timings "
                         "(measure.time_interleaved's settle_ms; default measure.SETTLE_MS, 0: none)")
    ap.add_argument("--twice", action="store_true",
                    help="time every kernelgen configuration twice (NAME~2: the same kernel), to show the spread")
    a = ap.parse_args(argv)
    if a.passes < 1:
        ap.error("--passes must be at least 1")
    configs = dict(c.split("=", 1) for c in a.configs.split(","))
    if a.twice:
        configs = with_twins(configs)
    from kernelgen.apps.bench import measure
    settle = measure.SETTLE_MS if a.settle_ms is None else a.settle_ms
    if not 0 <= settle < float("inf"):
        ap.error(f"--settle-ms must be a finite number >= 0, got {a.settle_ms}")
    rows = [run_shape(*sh.split("=", 1), configs, a.score_mod, a.softcap, settle, a.fa4_softcap, a.window)
            for _ in range(a.passes) for sh in a.shapes.split(",")]
    print("\n".join(["time / first configuration of the path (peers: of their dtype's path), min-max over passes:"]
                    + summarize(rows, configs)), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
