r"""Pack-GQA on the Hopper prefill kernel against the unpacked kernel, one process, interleaved CUDA-graph
replays (``measure.time_interleaved``, L2 flushed before each replay): the same call with
``KERNELGEN_SM90_PACK_GQA=1``, automatic (packed where the Hopper kernel packs) and with
``pack_gqa=False`` (unpacked; also a different signature, so each call keeps its own prepared kernels).

Shapes (``--shapes``): ``trace_<preset>``: the bench's causal varlen trace batch
(``prefill_varlen_trace``: 44 Azure-conversation prompts, 29,006 tokens) on a preset's heads (with its
sinks, soft-cap and window as the bench entry has them); ``long_<preset>``: one causal request of
``--long`` tokens; ``chunk_<preset>``: the bench's chunked batch (4 x 2048 queries at the end of 8192
keys) on packed K/V; ``chunkN_<preset>``: 8192 // N chunks of N queries at the end of 8192 keys (the
automatic choice's threshold, ``heuristics.SM90_PACK_MAX_MEAN_Q``, lies between the measured means);
``--softcap X`` / ``--no-sinks`` / ``--no-causal`` change the preset's soft-cap / drop its sinks / the causal
mask; ``--alibi`` adds built-in ALiBi; ``--score-mod S`` a user variant (``kernelgen.Variant(score_mod=S)``); ``--dtype e4m3`` quantises q, k and v (the FP8 tensor-core tile, which packs at head dims 64 and 128).
Prints one JSON row a shape and pass (TFLOP/s, us, packed / unpacked time, the
largest difference between the two outputs, which should be 0: packing changes which rows share a
tile, not a row's arithmetic) and the kernels' names.

    PYTHONPATH=$PWD python benchmarks/experiments/pack_gqa_ab.py \
        --shapes trace_llama3-8b,trace_llama3-70b-tp8,trace_gpt-oss,long_gpt-oss,chunk_llama3-8b
"""
import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

from kernelgen.apps import traces  # noqa: E402
from kernelgen.apps.bench import measure, suites  # noqa: E402
from kernelgen.apps.bench.models import PRESETS, attention_flops  # noqa: E402
from kernelgen.front import api  # noqa: E402
from kernelgen.selection.settings import SM90_PACK_GQA  # noqa: E402


def lengths(kind: str, long: int):
    """(query lengths, key lengths) of a shape kind."""
    if kind == "trace":
        lens = traces.prefill_batch(suites.load_rows(None, traces.SAMPLE_NAME))
        return lens, lens
    if kind == "long":
        return [long], [long]
    if kind == "chunk":
        b, qn, kn = suites.CHUNKED_SHAPE
        return [qn] * b, [kn] * b
    if kind.startswith("chunk") and kind[5:].isdigit():   # chunkN: 8192 // N chunks of N tokens on 8192 keys
        qn, kn = int(kind[5:]), suites.CHUNKED_SHAPE[2]
        return [qn] * max(1, kn // qn), [kn] * max(1, kn // qn)
    raise SystemExit(f"unknown shape kind {kind!r} (trace, long, chunk, chunkN)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="trace_llama3-8b,trace_llama3-70b-tp8,trace_gpt-oss,long_gpt-oss")
    ap.add_argument("--long", type=int, default=16384)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--softcap", type=float, default=None, help="the soft-cap instead of the preset's")
    ap.add_argument("--no-sinks", action="store_true", help="without the preset's sinks")
    ap.add_argument("--no-causal", action="store_true", help="without the causal mask")
    ap.add_argument("--heads", default=None, help="HQ/HKV: the query and KV heads instead of the preset's")
    ap.add_argument("--alibi", action="store_true",
                    help="built-in ALiBi (Press et al.'s slopes 2^(-8 h / H))")
    ap.add_argument("--score-mod", default=None, help="a user variant's score_mod (kernelgen.Variant)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "e4m3"),
                    help="e4m3: q, k and v quantised per tensor (suites.quantize_e4m3, descales (batch, KV heads)): "
                         "the FP8 tensor-core tile")
    a = ap.parse_args()
    rows = []
    for shape in a.shapes.split(","):
        kind, preset = shape.split("_", 1)
        m = (PRESETS[preset] if preset in PRESETS   # "<preset>-w<N>": the preset's sliding-window layers
             else PRESETS[preset.rsplit("-w", 1)[0]].windowed_layer())
        if a.heads:
            hq, hkv = (int(x) for x in a.heads.split("/"))
            m = dataclasses.replace(m, num_heads_q=hq, num_heads_kv=hkv)
        qlens, klens = lengths(kind, a.long)
        g = torch.Generator(device="cuda").manual_seed(11)
        tq, tk = sum(qlens), sum(klens)
        q = torch.randn(tq, m.num_heads_q, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(tk, m.num_heads_kv, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(tk, m.num_heads_kv, m.head_dim_v, generator=g, device="cuda", dtype=torch.bfloat16)
        cu_q = torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, *torch.tensor(klens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        sinks = None if a.no_sinks else suites.preset_sinks(m)
        kw = dict(causal=not a.no_causal, softcap=m.softcap if a.softcap is None else a.softcap,
                  window_size=m.window_size)
        if a.dtype == "e4m3":
            (q, qs), (k, ks), (v, vs) = (suites.quantize_e4m3(t) for t in (q, k, v))
            kw.update({f"{n}_descale": x.reshape(1, 1).expand(len(qlens), m.num_heads_kv).contiguous()
                       for n, x in (("q", qs), ("k", ks), ("v", vs))})
        if sinks is not None:
            kw["sinks"] = sinks
        if a.score_mod:
            import kernelgen
            kw["variant"] = kernelgen.Variant(score_mod=a.score_mod, name="ab_score_mod")
            os.environ["KERNELGEN_TIERED_COMPILE"] = "0"   # the Hopper kernels on the first calls, not sm_80's
        if a.alibi:
            kw["alibi_slopes"] = torch.tensor([2.0 ** (-8.0 * (h + 1) / m.num_heads_q) for h in range(m.num_heads_q)],
                                              dtype=torch.float32, device="cuda")
        flops = attention_flops(qlens, klens, m)
        fns, outs, names = {}, {}, {}
        # The prepared calls are cached by signature (shapes, scalars), not by the environment: the
        # unpacked call says pack_gqa=False, so the two calls have different signatures and each
        # keeps the kernel it was decided with (KERNELGEN_SM90_PACK_GQA=1 while both are decided).
        os.environ[SM90_PACK_GQA] = "1"
        api.clear_signature_cache()
        for label, pack in (("unpacked", False), ("packed", None)):
            out = torch.full((tq, m.num_heads_q, m.head_dim_v), float("nan"), device="cuda", dtype=torch.bfloat16)
            api.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), out=out, pack_gqa=pack, **kw)   # decided now
            names[label] = api._CALLS._last[1].attn.name
            fns[label] = (lambda out=out, pack=pack: api.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens),
                                                                           out=out, pack_gqa=pack, **kw))
            outs[label] = out
        os.environ.pop(SM90_PACK_GQA, None)
        assert "_pack_" not in names["unpacked"] and "_pack_" in names["packed"], names   # (a shape it cannot pack)
        for label, f in fns.items():   # each timed call still launches the kernel it was decided with
            f()
            assert api._CALLS._last[1].attn.name == names[label], (label, api._CALLS._last[1].attn.name)
        torch.cuda.synchronize()
        diff = float((outs["packed"].float() - outs["unpacked"].float()).abs().max())
        for p in range(a.passes):
            t = measure.time_interleaved(fns, rounds=a.rounds)
            row = {"shape": shape, "pass": p, "kernels": names, "max_abs_diff": diff,
                   "us": {k: round(x["us"], 1) for k, x in t.items()},
                   "tflops": {k: round(flops / x["us"] / 1e6, 1) for k, x in t.items()},
                   "packed_over_unpacked": round(t["packed"]["us"] / t["unpacked"]["us"], 4)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
