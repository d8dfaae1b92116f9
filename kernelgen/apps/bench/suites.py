"""The entries of ``kernelgen bench``, grouped in suites, and the registry that lists them.

Every entry is a function ``(settings, model) -> dict`` that builds its inputs on the GPU, times
kernelgen, then its peers (``peers.measure``) on the same inputs, and returns the raw entry:
``name, suite, model, us`` plus ``flops``/``bytes``/``metric`` for the rate, ``peers`` and
``unavailable`` and any extras.  ``report.finalize`` turns that into rates, roof fractions and
ratios.  An entry that cannot run raises (:class:`Skip` for a deliberate skip, e.g. a KV cache
too large for the device); the runner records it and goes on.

kernelgen's own switches (``kernelgen_aos``: AoS metadata, ``kernelgen_nosort``: the scheduler's
sort off) are not timed like the other peers: the default call and its switches are timed
together as interleaved CUDA-graph replays (``measure.time_interleaved``, median of the round
medians), and their ratio columns divide by the default call's time from the same measurement
(``switch_base_us``), not by the entry's ``us``.

Suites and entries (``<model>`` suffix: see ``models.entry_name``):

* ``prefill``: ``prefill_dense_causal_h128_s16k`` (1 x 32 heads x 16384, d 128, causal),
  ``prefill_dense_h128_s4k`` (4 x 32 x 4096, d 128), ``prefill_dense[_causal]_h64_s2k`` (8 x 32 x
  2048, d 64), ``prefill_dense[_causal]_h256_s4k`` (2 x 16 x 4096, d 256),
  ``prefill_dense_causal_gqa_h128_s4k`` (4 x 4096, 32 query / 8 KV heads, d 128),
  ``prefill_dense_causal_h96_s4k`` (4 x 32 x 4096, d 96), ``prefill_dense_causal_h192_s4k`` and
  ``prefill_dense_causal_h192x128_s4k`` (2 x 16 x 4096, d 192, value dim 192 / 128); peers: the
  three SDPA backends (and FlexAttention at --flex all).  With ``--dtype fp16`` the dense shapes,
  the first preset's varlen trace and chunked prefill run in fp16 too (``<entry>_fp16``: issue
  22's shapes; ``report.issue22_summary``).  ``prefill_varlen_trace[_<model>]``: a causal
  prefill batch of trace requests (32768-token budget, 8192-token cap: the demo's batch) per
  model preset; peers: FA2 varlen, FlexAttention (document mask), kernelgen AoS / no sort
  (interleaved graph replays; ``us_graph``: the default call's replay).
  ``prefill_chunked_paged{16,64,128}`` (first preset): 4 chunks of 2048 query tokens at the end
  of 8192 keys in a paged cache of 16-, 64- or 128-token pages.
  FlashAttention-3 (``fa3``; ``fa3_unpaged`` on a paged cache gathered into packed K/V) and
  FlashAttention-4 (``fa4``, on the paged cache itself) are peers of every prefill, decode and
  mixed entry (``peers`` module doc).
* ``decode``: ``decode_trace_b128_paged16``, ``decode_trace_b32_paged16`` (Mooncake contexts,
  pages of 16 tokens) and ``decode_long_b8_128k`` (8 x 131072) per preset, and
  ``decode_azure_b128_paged16`` (first preset: 128 Azure-conversation contexts): one query token per
  request against a paged cache (page ids shuffled); peers: FA2 varlen on the gathered cache,
  FlexAttention (document mask over the gathered cache), SDPA backends where the contexts are
  uniform, kernelgen AoS / no sort (interleaved graph replays); also ``us_graph`` (the call
  replayed from a CUDA graph, from the same measurement).
  ``graph_decode_step_b128``: one AttentionPlan decode step (128 requests, contexts capped at
  32k) replayed from a CUDA graph.
* ``mixed``: ``mixed_trace``: 3 chunked prefills (512-4096 tokens) + 192 decodes in one uniform
  call (``mixed_trace_fp8``: the same on an e4m3 cache), ``mixed_long_chunks`` (2 chunks of 4096
  tokens + 256 decodes) and ``mixed_short_chunks`` (8 new prompts of at most 512 tokens + 32
  decodes), all from the traces (``MIXED_BATCHES``); peers: ``serial`` (prefill call, then decode call), ``two_streams`` (the two calls on two
  streams), FA2 varlen and FA3 (``fa3_unpaged``) on the gathered cache and FA4 on the paged cache,
  each running the whole mixed batch in one varlen call (what an engine on them does).
* ``scheduler``: ``scheduler_b{8,128,1024,4096}`` (one scheduler launch, mean of 20 launches
  replayed from a CUDA graph; peers kernelgen_aos and kernelgen_nosort, all three interleaved) and
  ``varlen_trace_sorted`` / ``varlen_trace_unsorted`` (a skewed trace batch of 512 requests with
  the sort on / off, the pair timed as interleaved graph replays; ``sort_speedup``).
* ``compile``: ``compile_cold_variant`` (one attention variant), ``compile_cold_call`` (every
  kernel of a first call: scheduler and attention), ``compile_warm_load``, ``dispatch_in_memory``.
* ``sinks_prefill_causal_s16k`` (suite ``prefill``: 1 x 16384 tokens, causal, the first preset's
  heads) and ``sinks_decode_b128_paged16`` (suite ``decode``: decode_trace_b128_paged16's batch):
  the cost of attention sinks (``sinks=``, in the kernels: AttentionSpec.sinks): the call
  with and without sinks timed together as interleaved CUDA-graph replays; ``us`` is the call with
  sinks, ``us_nosinks`` the one without, ``sinks_ratio`` = us / us_nosinks (1.0 = free).
  ``alibi_prefill_causal_s16k`` / ``alibi_decode_b128_paged16``: the same for built-in ALiBi
  (``alibi_slopes=``: ``us_noalibi``, ``alibi_ratio``), with peers (FA4 with an ALiBi score_mod,
  FlexAttention at --flex all; FA3 and torch's FA2 take no slopes: ``alibi_entry``).
* User variants (``kernelgen.Variant``; skipped while kernelgen has none, ``VARIANT_MISSING``):
  ``variant_alibi_prefill_causal_s16k`` and ``variant_softcap_prefill_causal_s16k`` (suite
  ``prefill``: a user score_mod against the built-in ALiBi / soft-cap, ``us_builtin``,
  ``variant_ratio``; peers FlexAttention and FA4 with the same score_mod) and
  ``variant_compile_first_call`` (suite ``compile``: the first call of a never-seen variant, its
  compile included, against FlexAttention's and FA4's first call with a new score_mod; on an H200
  that call runs the sm_80 kernel while the Hopper kernel builds, ``us_hopper_ready`` is the time
  until the Hopper kernel is built).  The prefill entries wait for the background builds
  (``kernelgen.wait_for_compiles``) before they warm up and time, so they time the Hopper kernel.
* Model presets with sinks (gpt-oss) pass them (``preset_sinks``) in their trace prefill and
  decode entries (and the first preset's graph decode step); a preset with alternating layers
  (``ModelPreset.alt_window``) also runs ``prefill_varlen_trace`` and
  ``decode_trace_b128_paged16`` for its windowed layers (``<entry>_<preset>-w<window>``).
* ``overhead``: ``overhead_decode_call``, ``overhead_plan_run``, ``overhead_graph_replay`` (one
  call repeated), ``overhead_decode_call_32layers``, ``overhead_plan_run_32layers`` (calls cycling
  through 32 layers' q and out).
"""
from __future__ import annotations

import itertools

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from . import SUITES, measure, peers, twins
from .models import (DEFAULT_MODEL, PRESETS, ModelPreset, attention_flops, decode_bytes, decode_keys_read,
                     entry_name, keys_read, prefill_bytes)

#: Largest KV cache (bytes) a decode/mixed entry allocates; the peers' gathered copies come on
#: top of it (up to 3 copies in all on a 141 GB H200).
MAX_CACHE_BYTES = 32e9
PAGE_SIZE = 16
#: Dense prefill shapes: (name, batch, query heads, seqlen, head dim, causal, KV heads, value head dim).
#: Head dims 96, 192 and 192 x 128 (MLA's query-key and value dims) are issue 22's too.
DENSE_SHAPES = (
    ("prefill_dense_causal_h128_s16k", 1, 32, 16384, 128, True, 32, 128),
    ("prefill_dense_h128_s4k", 4, 32, 4096, 128, False, 32, 128),
    ("prefill_dense_causal_h64_s2k", 8, 32, 2048, 64, True, 32, 64),
    ("prefill_dense_h64_s2k", 8, 32, 2048, 64, False, 32, 64),
    ("prefill_dense_causal_h256_s4k", 2, 16, 4096, 256, True, 16, 256),
    ("prefill_dense_h256_s4k", 2, 16, 4096, 256, False, 16, 256),
    ("prefill_dense_causal_gqa_h128_s4k", 4, 32, 4096, 128, True, 8, 128),
    ("prefill_dense_causal_h96_s4k", 4, 32, 4096, 96, True, 32, 96),
    ("prefill_dense_causal_h192_s4k", 2, 16, 4096, 192, True, 16, 192),
    ("prefill_dense_causal_h192x128_s4k", 2, 16, 4096, 192, True, 16, 128),
)
#: Input dtypes of the entries (``kernelgen bench --dtype``): "bf16" every 16-bit entry as it is,
#: "fp16" the prefill suite's issue-22 shapes in fp16 (the dense shapes, the first preset's varlen
#: trace and chunked prefill, named ``<entry>_fp16``), "e4m3" the FP8 entries (``FP8_ENTRIES``,
#: ``MIXED_FP8_ENTRY``: FA3's FP8 attention as their peer).  DEFAULT_DTYPES is what a run without
#: ``--dtype`` measures.
DTYPES = ("bf16", "fp16", "e4m3")
DEFAULT_DTYPES = ("bf16", "e4m3")
FP16_SUFFIX = "_fp16"
DECODE_SHAPES = ("decode_trace_b128_paged16", "decode_trace_b32_paged16", "decode_long_b8_128k")
#: A 128-request decode batch at the Azure conversation trace's contexts (issue 23: short contexts,
#: where the per-request costs weigh most); first preset only.
AZURE_DECODE_SHAPE = "decode_azure_b128_paged16"
SCHEDULER_BATCHES = (8, 128, 1024, 4096)
LONG_CONTEXT = 131072


class Skip(Exception):
    """The entry is deliberately not run (the message says why)."""


#: Rounds of kernelgen's call alternating with each peer in the entries whose goals are ratios near 1
#: against one peer (the user-variant entries against FA4, the FP8 entries against FA3 FP8):
#: ``peers.measure``'s ``rounds``.
PEER_ROUNDS = 3


@dataclass
class Settings:
    """What every entry needs to know about the run."""

    repeat: int = measure.DEFAULT_REPEAT
    warmup: int = measure.DEFAULT_WARMUP
    #: least GPU time of each measurement's warm-up, ms (measure.warm_up)
    warmup_ms: float = measure.WARMUP_MS
    #: rounds of the interleaved switch comparisons (measure.time_interleaved)
    rounds: int = measure.DEFAULT_ROUNDS
    #: untimed replays of a configuration before each of its interleaved timings, ms of GPU time
    #: (measure.time_interleaved's settle_ms, for replays of at least measure.SETTLE_MIN_REPLAY_MS;
    #: 0: none)
    settle_ms: float = measure.SETTLE_MS
    flush: bool | str = True   # measure.flush_mode: True / "write", "read", False / "off"
    flex: str = "some"  # off | some | all
    prefill_trace: str | None = None  # None: the packaged Azure sample
    decode_trace: str | None = None  # None: the packaged Mooncake sample
    quick: bool = False
    roofs: dict | None = None
    device: int = 0
    #: time.perf_counter() after which FlexAttention is no longer compiled for new shapes (None: never)
    flex_deadline: float | None = None

    @property
    def peer_rounds(self) -> int:
        """Rounds of kernelgen's call alternating with each peer in the cost entries that pass it
        (``peers.measure``'s ``base``): ``PEER_ROUNDS``, 1 with --quick."""
        return 1 if self.quick else PEER_ROUNDS

    def time(self, fn) -> float:
        return measure.time_gpu(fn, repeat=self.repeat, warmup=self.warmup, flush=self.flush, warmup_ms=self.warmup_ms)

    def time_graph(self, fn) -> float:
        return measure.time_graph(fn, repeat=self.repeat, warmup=self.warmup, flush=self.flush,
                                  warmup_ms=self.warmup_ms)

    def time_interleaved(self, fns: dict, launches: int = 1) -> dict:
        return measure.time_interleaved(fns, rounds=self.rounds, repeat=self.repeat, warmup=self.warmup,
                                        flush=self.flush, launches=launches, warmup_ms=self.warmup_ms,
                                        settle_ms=self.settle_ms)

    def interleaved_method(self, launches: int = 1) -> str:
        method = measure.INTERLEAVED_METHOD.format(launches=launches, rounds=self.rounds, repeat=self.repeat,
                                                   flush=measure.FLUSH_METHOD[measure.flush_mode(self.flush)])
        return method + (measure.SETTLE_METHOD.format(settle_ms=self.settle_ms) if self.settle_ms > 0 else "")

    def flex_builder(self, build, where: str):
        """``build`` when FlexAttention is measured on this kind of entry ('some' or 'all'), else
        the reason it is not."""
        if self.flex == "off":
            return "not measured (--flex off)"
        if self.flex != "all" and where != "some":
            return peers.FLEX_SKIPPED_REASON.format(policy=self.flex)
        if self.flex_deadline is not None and time.perf_counter() > self.flex_deadline:
            return ("not measured: past the share of the time budget kept for FlexAttention compiles "
                    "(10-30 s a shape; raise --budget)")
        return build


@dataclass(frozen=True)
class EntryDef:
    """One registered entry: ``run(settings)`` returns the raw entry dict; ``specs(settings, arch,
    num_sms)`` lists the kernelgen kernels it will use (compiled in parallel before the run);
    ``dtype``: its inputs' dtype (``DTYPES``: the ``--dtype`` selection)."""

    name: str
    suite: str
    model: str | None
    run: Callable
    specs: Callable | None = None
    dtype: str = "bf16"


# ----------------------------------------------------------------------------------- helpers
def _torch():
    import torch

    return torch


def load_rows(path, default_name: str):
    from .. import traces

    if path is None:
        path = Path(traces.__file__).resolve().parent / "data" / default_name
    return traces.load_trace(path)


def prefill_lengths(settings: Settings) -> list:
    """The demo's prefill batch: consecutive trace requests, 32768 tokens, each capped at 8192."""
    from .. import traces

    return traces.prefill_batch(load_rows(settings.prefill_trace, traces.SAMPLE_NAME))


def decode_contexts(settings: Settings, shape: str) -> list:
    """Contexts (tokens) of a decode shape: Mooncake rows 0-127, 128-159, or 8 x 128k; for
    ``decode_azure_b128_paged16`` Azure-conversation rows 0-127, each request's prompt plus half its
    reply (a decode step midway through the replies)."""
    if shape == "decode_long_b8_128k":
        return [LONG_CONTEXT] * 8
    if shape == AZURE_DECODE_SHAPE:
        from .. import traces

        rows = load_rows(settings.prefill_trace, traces.SAMPLE_NAME)
        return [max(1, min(int(c) + int(g) // 2, LONG_CONTEXT)) for c, g in _take(rows, 0, 128)]
    ctx = [max(1, min(int(r[0]), LONG_CONTEXT)) for r in load_rows(settings.decode_trace, "mooncake_conv_sample.csv")]
    if shape == "decode_trace_b128_paged16":
        return _take(ctx, 0, 128)
    if shape == "decode_trace_b32_paged16":
        return _take(ctx, 128, 32)
    raise ValueError(f"unknown decode shape {shape!r}")


def _take(seq, start: int, n: int) -> list:
    """n items from start, wrapping around a short trace."""
    return [seq[(start + i) % len(seq)] for i in range(n)]


def _cu(lengths, device):
    import numpy as np

    torch = _torch()
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32), dtype=torch.int32, device=device)


def check_cache_budget(tokens: int, model: ModelPreset) -> None:
    nbytes = tokens * model.kv_bytes_per_token
    if nbytes > MAX_CACHE_BYTES:
        raise Skip(f"KV cache of {nbytes / 1e9:.0f} GB ({tokens} tokens x {model.kv_bytes_per_token} B) exceeds "
                   f"the suite's {MAX_CACHE_BYTES / 1e9:.0f} GB budget")


def _torch_dtype(dtype: str):
    """The torch dtype of a 16-bit entry dtype ("bf16" or "fp16")."""
    torch = _torch()
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def paged_batch(qlens, ctx, model: ModelPreset, page_size: int = PAGE_SIZE, seed: int = 11, dtype: str = "bf16"):
    """Random ``dtype`` (bf16 or fp16) q and a paged K/V cache holding ``ctx[i]`` tokens for request
    i (page ids shuffled).  Returns q (total_q, Hq, d), k/v caches (pages, page_size, Hkv, d/dv),
    page_table, seqused_k, cu_seqlens_q.  From tools/bench.py's _paged_batch, for any preset."""
    torch = _torch()
    check_cache_budget(sum(-(-c // page_size) for c in ctx) * page_size, model)
    g = torch.Generator(device="cuda").manual_seed(seed)
    need = [-(-c // page_size) for c in ctx]
    m = model
    td = _torch_dtype(dtype)
    kc = torch.randn(sum(need), page_size, m.num_heads_kv, m.head_dim, generator=g, device="cuda", dtype=td)
    vc = torch.randn(sum(need), page_size, m.num_heads_kv, m.head_dim_v, generator=g, device="cuda", dtype=td)
    perm = torch.randperm(sum(need), device="cuda", generator=g).to(torch.int32)
    pt = torch.zeros(len(ctx), max(need), dtype=torch.int32, device="cuda")
    at = 0
    for i, n in enumerate(need):
        pt[i, :n] = perm[at:at + n]
        at += n
    q = torch.randn(sum(qlens), m.num_heads_q, m.head_dim, generator=g, device="cuda", dtype=td)
    return q, kc, vc, pt, torch.tensor(ctx, dtype=torch.int32, device="cuda"), _cu(qlens, "cuda")


def _entry(name, suite, model, **kw) -> dict:
    e = {"name": name, "suite": suite, "model": getattr(model, "name", model), "us": None, "tflops": None,
         "tbps": None, "metric": None, "peers": {}, "unavailable": {}}
    e.update(kw)
    return e


def _kg_call(q, k, v, cu_q, cu_k, max_q, max_k, model: ModelPreset, out, **kw):
    """A zero-argument kernelgen call for a preset (causal, its window and soft-cap; ``kw`` adds to
    or overrides them)."""
    from ...front.api import varlen_attention

    args = dict(causal=True, window_size=model.window_size, softcap=model.softcap, out=out)
    args.update(kw)

    def run():
        return varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, **args)
    return run


#: kernelgen's own switches, each against the default call (SoA metadata, sorted): keyword arguments.
SWITCHES = {peers.KG_AOS: {"metadata_layout": "aos"}, peers.KG_NOSORT: {"sort": False}}
#: Name of the default configuration in the interleaved switch measurement.
SWITCH_BASE = "kernelgen"


def record_switches(entry: dict, times: dict, method: str, base: str = SWITCH_BASE) -> None:
    """Put an interleaved measurement (measure.time_interleaved's result) into ``entry``: each
    switch's time under ``peers``, the default configuration's as ``switch_base_us`` (the switch
    columns' ratios are switch / default, report.entry_ratios), and every configuration's round
    medians and the method."""
    entry["switch_base_us"] = times[base]["us"]
    entry["switch_rounds_us"] = {name: t["rounds"] for name, t in times.items()}
    entry["switch_method"] = method
    for name, t in times.items():
        if name != base:
            entry["peers"][name] = t["us"]
            entry["unavailable"].pop(name, None)


#: kernelgen forced onto each mainloop, timed with the switches (report.FORCED_CHOICES).
FORCED = {peers.KG_SM90A: {"arch": "sm_90a"}, peers.KG_SM80: {"arch": "sm_80"}}
#: Decode's forced choices: the mainloops, one split, no pack-GQA.
DECODE_FORCED = {**FORCED, peers.KG_SPLITS1: {"num_splits": 1}, peers.KG_NOPACK: {"pack_gqa": False}}


def recipe_fingerprint():
    """What kernelgen's last ``varlen_attention`` call launched: (its prepared call's class, the
    names of its kernels in launch order, its scheduler configuration, and for a mixed batch the
    short class's and the CTAs that start on its queue), or None where the call cache holds no
    call.  Two calls with equal fingerprints run the same kernels on the same schedule: a forced
    choice equal to the automatic one is the same choice (``same_recipe_as_auto``)."""
    from ...front import api
    prep = api._CALLS._last[1]
    if prep is None:
        return None
    names = tuple(getattr(k, "name", None) for k in prep._launches())
    kernels = getattr(prep, "kernels", None)   # a mixed batch's: both classes' schedules
    return (type(prep).__name__, names, repr(getattr(prep, "config", None)),
            repr(getattr(kernels, "cfg_short", None)), repr(getattr(kernels, "short_ctas", None)))


def _fingerprint_of(call):
    """``recipe_fingerprint`` of ``call()`` (run once), or None where the call stored no prepared call
    (the cache's last entry is cleared first: a call that is not cached, e.g. not keyable or on
    a provisional recipe, must not report the call before it) or the fingerprint fails."""
    try:
        from ...front import api
        api._CALLS._last = (None, None)
        call()
        return recipe_fingerprint()
    except Exception:  # noqa: BLE001 - measure_switches never raises: "unknown" is never "the same"
        return None


def measure_switches(settings: Settings, entry: dict, make_call, out, forced: dict | None = None) -> None:
    """kernelgen's own switches (``SWITCHES``) and the ``forced`` choices (e.g. ``FORCED``: the
    same call forced onto each mainloop) against the default call, timed together as interleaved
    CUDA-graph replays (measure.time_interleaved), so each column is compared with the default
    call of the same rounds (the automatic choice against the forced ones: report.auto_choice).
    Fills ``entry["us_graph"]`` (the default call per graph replay), ``peers`` and
    ``switch_base_us`` (record_switches), and the configurations' output differences from ``out``
    (kernelgen's result; they change the tile order or the kernels, not the result).  A forced
    choice whose call launches what the default call launches (``recipe_fingerprint``) is listed in
    ``same_recipe_as_auto``: it is timed all the same (its ratio is the measurement's spread between
    identical calls) but it is not another choice (report.auto_choice skips it).  A
    configuration the call does not support (a forced mainloop that cannot run it) is unavailable
    with its reason; a failure of the measurement marks them all; it never raises."""
    torch = _torch()
    configs = {**SWITCHES, **(forced or {})}
    calls = {SWITCH_BASE: make_call(torch.empty_like(out))}
    base_recipe = _fingerprint_of(calls[SWITCH_BASE]) if forced else None
    for name, kw in configs.items():
        try:
            o = torch.empty_like(out)
            call = make_call(o, **kw)
            call()
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001 - e.g. the Hopper path refusing the call
            entry["unavailable"][name] = peers.reason(ex)
            entry["peers"].pop(name, None)
            continue
        if forced and name in forced and base_recipe is not None and _fingerprint_of(call) == base_recipe:
            entry.setdefault("same_recipe_as_auto", []).append(name)
        calls[name] = call
        diff = (o.float() - out.float()).abs()
        entry.setdefault("max_diff", {})[name] = float(diff.max()) if diff.numel() else 0.0
        entry.setdefault("ref_max", {})[name] = float(o.float().abs().max()) if o.numel() else 0.0
        del diff
    try:
        times = settings.time_interleaved(calls)
        torch.cuda.synchronize()
    except Exception as ex:  # noqa: BLE001 - kernelgen's own numbers stay
        for name in calls:
            if name != SWITCH_BASE:
                entry["unavailable"][name] = peers.reason(ex)
                entry["peers"].pop(name, None)
        return
    entry["us_graph"] = times[SWITCH_BASE]["us"]
    record_switches(entry, times, settings.interleaved_method())


def _mainloop_peers(make_call, out) -> dict:
    """kernelgen forced onto each mainloop (``make_call(out, arch)`` returns the call)."""
    torch = _torch()

    def build(arch):
        def b():
            run = make_call(torch.empty_like(out), arch)
            run()  # a forced path that does not support the call raises here: the peer is unavailable
            return peers.Peer(run, lambda r: r)
        return b
    return {peers.KG_SM90A: build("sm_90a"), peers.KG_SM80: build("sm_80")}


def _gather(entry, kc, vc, pt, used):
    """The paged cache gathered into packed (k, v, cu_seqlens_k) for the unpaged peers, or None
    after marking those peers unavailable (e.g. out of memory): kernelgen's numbers stay."""
    from ..reference import gather_paged

    try:
        return gather_paged(kc, vc, pt, used)
    except Exception as ex:  # noqa: BLE001
        why = f"gathering the paged cache for the unpaged peers failed: {peers.reason(ex)}"
        for p in (peers.FA2_VARLEN, peers.FLEX, peers.FA3_UNPAGED) + peers.SDPA_PEERS:
            entry["unavailable"].setdefault(p, why)
        _torch().cuda.empty_cache()
        return None


def _variants(arch, num_sms, model: ModelPreset, max_q, max_k, paged, layouts=("soa", "aos"), causal=True,
              alibi=False, sinks=False, dtype: str = "bf16", kv_dtype: str = "", q_dtype: str = ""):
    """Kernel specs varlen_attention would use for a preset's call (selection.decide's single-launch rule).
    ``alibi``: the ALiBi variants (``AttentionSpec.alibi``); ``sinks``: also the sink variants of the
    attention and combine kernels (``AttentionSpec.sinks``, ``CombineSpec.sinks``: a single-class
    call with ``sinks=``); ``kv_dtype`` / ``q_dtype``: an FP8 cache / an FP8 q ("e4m3")."""
    import dataclasses

    from ...selection import heuristics, validation

    mask, _, _ = validation.window(model.window_size, causal)
    out = []
    for layout in layouts:
        v = heuristics.choose(arch, dtype, model.head_dim, model.head_dim_v, num_heads_q=model.num_heads_q,
                              num_heads_kv=model.num_heads_kv, mask=mask, layout=layout, max_seqlen_q=max_q,
                              max_seqlen_k=max_k, paged=paged, softcap=model.softcap > 0, num_sms=num_sms,
                              alibi=alibi, kv_dtype=kv_dtype, q_dtype=q_dtype)
        specs = [v.scheduler, v.attention] + ([v.combine] if v.combine is not None else [])
        out += specs
        if sinks:
            out += [dataclasses.replace(s, sinks=True) for s in specs if s.kind in ("attention", "combine")]
    return out


def _dense_preset(heads, d, heads_kv=None, dv=None) -> ModelPreset:
    return ModelPreset(f"dense_h{d}", heads, heads_kv or heads, d, dv or d)


# ---------------------------------------------------------------------------------- prefill
def dense_entry(settings: Settings, name, batch, heads, seqlen, d, causal, heads_kv=None, dv=None,
                dtype: str = "bf16") -> dict:
    """Dense prefill, B x H x S, ``dtype`` (bf16 or fp16), MHA or (``heads_kv`` < ``heads``) GQA,
    value head dim ``dv`` (default ``d``; MLA's 192 x 128) (from tools/bench.py).  kernelgen takes
    the packed (tokens, heads, d) layout: the same data, transposed once outside the timing; FA3 and
    FA4 take that memory viewed as (B, S, H, d)."""
    torch = _torch()
    from ...front.api import varlen_attention

    hkv, dv = heads_kv or heads, dv or d
    td = _torch_dtype(dtype)
    torch.manual_seed(0)
    q4 = torch.randn(batch, heads, seqlen, d, device="cuda", dtype=td)
    k4 = torch.randn(batch, hkv, seqlen, d, device="cuda", dtype=td)
    v4 = torch.randn(batch, hkv, seqlen, dv, device="cuda", dtype=td)
    q, k, v = (t.transpose(1, 2).reshape(batch * seqlen, t.shape[1], t.shape[3]).contiguous() for t in (q4, k4, v4))
    cu = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * seqlen
    out = torch.empty(batch * seqlen, heads, dv, device="cuda", dtype=td)
    run = lambda: varlen_attention(q, k, v, cu, cu, seqlen, seqlen, causal=causal, out=out)  # noqa: E731
    m = _dense_preset(heads, d, hkv, dv)
    lens = [seqlen] * batch
    e = _entry(name, "prefill", None, metric="tflops", dtype=dtype,
               shape=f"{batch}x{heads}x{seqlen} d{d}" + (f"/{dv}" if dv != d else "")
               + (f" {heads}/{hkv} heads" if hkv != heads else "") + (" causal" if causal else "")
               + (f" {dtype}" if dtype != "bf16" else ""),
               flops=attention_flops(lens, lens, m, causal), bytes=prefill_bytes(lens, lens, m))
    e["us"] = settings.time(run)

    def to_packed(o):
        return o.transpose(1, 2).reshape(batch * seqlen, heads, dv)
    builders = {p: peers.sdpa(p, q4, k4, v4, causal, gqa=hkv != heads, to_packed=to_packed) for p in peers.SDPA_PEERS}
    builders[peers.FLEX] = settings.flex_builder(peers.flex_dense(q4, k4, v4, causal, to_packed), "all")
    builders[peers.FA3] = peers.fa3(q, k, v, causal, dense_batch=batch)
    builders[peers.FA4] = peers.fa4(q, k, v, causal, dense_batch=batch)
    builders.update(_mainloop_peers(
        lambda o, arch: (lambda: varlen_attention(q, k, v, cu, cu, seqlen, seqlen, causal=causal, out=o, arch=arch)),
        out))
    peers.measure(e, builders, settings.time, reference=out)
    return e


def preset_sinks(model: ModelPreset, seed: int = 19):
    """A preset's attention sinks for its per-model entries: float32 (Hq,) logits (random, N(0, 2^2):
    gpt-oss's learned sinks are per-query-head float32 logits, p_j = exp(s_j) / (exp(sink) +
    sum_k exp(s_k))), or None for a preset without sinks."""
    if not model.sinks:
        return None
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(model.num_heads_q, generator=g, device="cuda") * 2).float()


def varlen_prefill_entry(settings: Settings, model: ModelPreset, dtype: str = "bf16") -> dict:
    """Causal prefill of a trace batch (the demo's batch) for a preset (one layer kind of it:
    ``ModelPreset.layer_flavours``), in ``dtype`` (bf16 or fp16: ``<entry>_fp16``).  A preset with
    sinks (gpt-oss) passes them to kernelgen (``sinks=``) and to FA4 (``learnable_sink=``); the
    peers without sinks (FA3, FA2 varlen, FlexAttention) are unavailable with the reason."""
    torch = _torch()

    lens = prefill_lengths(settings)
    total, mx = sum(lens), max(lens)
    g = torch.Generator(device="cuda").manual_seed(5)
    m = model
    td = _torch_dtype(dtype)
    q = torch.randn(total, m.num_heads_q, m.head_dim, generator=g, device="cuda", dtype=td)
    k = torch.randn(total, m.num_heads_kv, m.head_dim, generator=g, device="cuda", dtype=td)
    v = torch.randn(total, m.num_heads_kv, m.head_dim_v, generator=g, device="cuda", dtype=td)
    cu = _cu(lens, "cuda")
    out = torch.empty(total, m.num_heads_q, m.head_dim_v, device="cuda", dtype=td)
    sinks = preset_sinks(m)
    extra = {"sinks": sinks} if sinks is not None else {}

    def make_call(o, **kw):
        return _kg_call(q, k, v, cu, cu, mx, mx, m, o, **{**extra, **kw})
    e = _entry(entry_name("prefill_varlen_trace", m) + (FP16_SUFFIX if dtype == "fp16" else ""), "prefill", m,
               metric="tflops", dtype=dtype,
               shape=f"{len(lens)} trace requests, {total} tokens, max {mx}" + (", sinks" if sinks is not None else "")
               + (f", {dtype}" if dtype != "bf16" else ""),
               flops=attention_flops(lens, lens, m), bytes=prefill_bytes(lens, lens, m))
    e["us"] = settings.time(make_call(out))
    builders = {p: peers.VARLEN_SDPA_REASON for p in peers.SDPA_PEERS}
    has_sinks = sinks is not None
    builders[peers.FA2_VARLEN] = peers.fa2_varlen(q, k, v, cu, cu, mx, mx, True, softcap=m.softcap,
                                                  window_left=m.window_left, sinks=has_sinks)
    builders[peers.FLEX] = settings.flex_builder(
        peers.flex_document(q, k, v, lens, lens, True, softcap=m.softcap, window_left=m.window_left, sinks=has_sinks),
        "some")
    builders[peers.FA3] = peers.fa3(q, k, v, True, cu_q=cu, cu_k=cu, max_q=mx, max_k=mx, softcap=m.softcap,
                                    window_left=m.window_left, sinks=has_sinks)
    builders[peers.FA4] = peers.fa4(q, k, v, True, cu_q=cu, cu_k=cu, max_q=mx, max_k=mx, softcap=m.softcap,
                                    window_left=m.window_left, learnable_sink=sinks)
    peers.measure(e, builders, settings.time, reference=out)
    measure_switches(settings, e, make_call, out, forced=FORCED)
    return e


#: Chunked prefill on a paged cache: (requests, query chunk, keys); each chunk is the last ``chunk``
#: tokens of its request's keys (causal), pages of each size in CHUNKED_PAGE_SIZES.
CHUNKED_SHAPE = (4, 2048, 8192)
CHUNKED_PAGE_SIZES = (16, 64, 128)


def chunked_prefill_entry(settings: Settings, page_size: int, model: ModelPreset, dtype: str = "bf16") -> dict:
    """``prefill_chunked_paged{page_size}``: CHUNKED_SHAPE's chunks against a paged cache (page ids
    shuffled), in ``dtype`` (bf16 or fp16: ``<entry>_fp16``).  Peers: FA4 on the same paged cache;
    FA3 (``fa3_unpaged``) and FA2 varlen on the cache gathered into packed K/V (outside the timing);
    kernelgen forced onto each mainloop."""
    torch = _torch()
    m = model
    b, qn, kn = CHUNKED_SHAPE
    qlens, klens = [qn] * b, [kn] * b
    q, kc, vc, pt, used, cu_q = paged_batch(qlens, klens, m, page_size, seed=13, dtype=dtype)
    out = torch.empty(b * qn, m.num_heads_q, m.head_dim_v, device="cuda", dtype=_torch_dtype(dtype))

    def make_call(o, **kw):
        return _kg_call(q, kc, vc, cu_q, None, qn, kn, m, o, seqused_k=used, page_table=pt, **kw)
    e = _entry(entry_name(f"prefill_chunked_paged{page_size}", m) + (FP16_SUFFIX if dtype == "fp16" else ""),
               "prefill", m, metric="tflops", dtype=dtype,
               shape=f"{b} x {qn} query tokens on {kn} keys, pages of {page_size}" + (f", {dtype}" if dtype != "bf16" else ""),
               flops=attention_flops(qlens, klens, m), bytes=prefill_bytes(qlens, klens, m), page_size=page_size)
    e["us"] = settings.time(make_call(out))
    builders = {peers.FA4: peers.fa4(q, kc, vc, True, cu_q=cu_q, max_q=qn, max_k=kn, softcap=m.softcap,
                                     window_left=m.window_left, page_table=pt, seqused_k=used)}
    builders.update(_mainloop_peers(lambda o, arch: make_call(o, arch=arch), out))
    peers.measure(e, builders, settings.time, reference=out)
    gathered = _gather(e, kc, vc, pt, used)
    if gathered is None:
        return e
    k, v, cu_k = gathered
    builders = {peers.FA3_UNPAGED: peers.fa3(q, k, v, True, cu_q=cu_q, cu_k=cu_k, max_q=qn, max_k=kn,
                                             softcap=m.softcap, window_left=m.window_left),
                peers.FA2_VARLEN: peers.fa2_varlen(q, k, v, cu_q, cu_k, qn, kn, True, softcap=m.softcap,
                                                   window_left=m.window_left)}
    peers.measure(e, builders, settings.time, reference=out)
    return e


# ----------------------------------------------------------------------------------- decode
def decode_measure(settings: Settings, name: str, contexts, model: ModelPreset, page_size: int = PAGE_SIZE,
                   with_peers: bool = True, flex_where: str = "all", suite: str = "decode") -> dict:
    """Paged decode: one query token per request against its context (from tools/bench.py's
    decode_entry).  tbps = K+V bytes read / time (a window caps the keys read).  A preset with
    sinks (gpt-oss) passes them to kernelgen (``sinks=``, its switches and forced mainloops too) and
    to FA4 (``learnable_sink=``); the peers without sinks are unavailable with the reason."""
    torch = _torch()
    m = model
    b = len(contexts)
    q, kc, vc, pt, used, cu_q = paged_batch([1] * b, contexts, m, page_size, seed=7)
    out = torch.empty(b, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    maxk = max(contexts)
    sinks = preset_sinks(m)
    extra = {"sinks": sinks} if sinks is not None else {}
    has_sinks = sinks is not None

    def make_call(o, **kw):
        return _kg_call(q, kc, vc, cu_q, None, 1, maxk, m, o, seqused_k=used, page_table=pt, **{**extra, **kw})
    run = make_call(out)
    e = _entry(name, suite, m, metric="tbps", shape=f"{b} requests, {sum(contexts)} context tokens, pages of {page_size}"
               + (", sinks" if has_sinks else ""),
               bytes=decode_bytes(contexts, m), flops=attention_flops([1] * b, contexts, m),
               keys_read=decode_keys_read(contexts, m))
    e["us"] = settings.time(run)
    if not with_peers:
        return e
    run()
    torch.cuda.synchronize()
    measure_switches(settings, e, make_call, out, forced=DECODE_FORCED)
    peers.measure(e, {peers.FA4: peers.fa4(q, kc, vc, True, cu_q=cu_q, max_q=1, max_k=maxk, softcap=m.softcap,
                                           window_left=m.window_left, page_table=pt, seqused_k=used,
                                           learnable_sink=sinks)},
                  settings.time, reference=out)
    # peers on the gathered (unpaged) cache, built outside the timing (the paged cache stays alive)
    gathered = _gather(e, kc, vc, pt, used)
    if gathered is None:
        return e
    k, v, cu_k = gathered
    builders = {peers.FA2_VARLEN: peers.fa2_varlen(q, k, v, cu_q, cu_k, 1, maxk, True, softcap=m.softcap,
                                                   window_left=m.window_left, sinks=has_sinks),
                peers.FA3_UNPAGED: peers.fa3(q, k, v, True, cu_q=cu_q, cu_k=cu_k, max_q=1, max_k=maxk,
                                             softcap=m.softcap, window_left=m.window_left, sinks=has_sinks)}
    builders.update(decode_sdpa_builders(q, k, v, contexts, m))
    builders[peers.FLEX] = settings.flex_builder(
        peers.flex_document(q, k, v, [1] * b, contexts, True, softcap=m.softcap, window_left=m.window_left,
                            sinks=has_sinks), flex_where)
    builders["flex_attention_paged"] = ("paged block mask not built by the suite; FlexAttention is measured on the "
                                        "gathered cache (flex_attention)")
    peers.measure(e, builders, settings.time, reference=out)
    return e


def decode_sdpa_builders(q, k, v, contexts, model: ModelPreset) -> dict:
    """SDPA peers of a decode batch on the gathered packed k/v (total_k, Hkv, d): a uniform batch
    (every context equal) is viewed as dense (B, Hkv, S, d) without a copy and q as (B, Hq, 1, d)
    (one row sees every key, so no causal flag); other batches are varlen (unavailable)."""
    m, b = model, len(contexts)
    if len(set(contexts)) != 1:
        return {p: peers.VARLEN_SDPA_REASON for p in peers.SDPA_PEERS}
    if m.sinks:
        return {p: peers.SDPA_NO_SINKS for p in peers.SDPA_PEERS}
    s = contexts[0]
    q4 = q.unsqueeze(2)
    k4 = k.view(b, s, m.num_heads_kv, m.head_dim).transpose(1, 2)
    v4 = v.view(b, s, m.num_heads_kv, m.head_dim_v).transpose(1, 2)
    wl = m.window_left if (m.window_left >= 0 and s > m.window) else -1
    return {p: peers.sdpa(p, q4, k4, v4, False, gqa=m.num_heads_q != m.num_heads_kv, softcap=m.softcap,
                          window_left=wl, to_packed=lambda o: o.squeeze(2)) for p in peers.SDPA_PEERS}


def decode_entry(settings: Settings, shape: str, model: ModelPreset) -> dict:
    contexts = decode_contexts(settings, shape)
    return decode_measure(settings, entry_name(shape, model), contexts, model,
                          flex_where="some" if shape == "decode_trace_b32_paged16" else "all")


def graph_decode_step_entry(settings: Settings, model: ModelPreset) -> dict:
    """One paged decode step (128 requests, Mooncake contexts capped at 32k) replayed from a CUDA
    graph through an AttentionPlan (from tools/bench.py's serving_entries); a preset with sinks
    makes the plan with ``sinks=True`` and passes them at every step."""
    torch = _torch()
    from ...front.plan import AttentionPlan

    m = model
    ctx = [min(c, 32768) for c in decode_contexts(settings, "decode_trace_b128_paged16")]
    q, kc, vc, pt, used, cu_q = paged_batch([1] * 128, ctx, m)
    sinks = preset_sinks(m)
    plan = AttentionPlan(max_batch=128, num_heads_q=m.num_heads_q, num_heads_kv=m.num_heads_kv, head_dim=m.head_dim,
                         head_dim_v=m.head_dim_v, max_total_q=128, max_seqlen_q=1, max_seqlen_k=32768, paged=True,
                         causal=True, window_size=m.window_size, softcap=m.softcap,
                         **({"sinks": True} if sinks is not None else {}))
    o = torch.empty(128, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    e = _entry(entry_name("graph_decode_step_b128", m), "decode", m, metric="tbps", bytes=decode_bytes(ctx, m),
               flops=attention_flops([1] * 128, ctx, m), shape=f"128 requests, {sum(ctx)} context tokens, plan + graph"
               + (", sinks" if sinks is not None else ""))
    kw = {"sinks": sinks} if sinks is not None else {}
    e["us"] = settings.time_graph(lambda: plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=o, **kw))
    return e


#: The attention-sinks cost entries: (base name, suite).
SINKS_ENTRIES = (("sinks_prefill_causal_s16k", "prefill"), ("sinks_decode_b128_paged16", "decode"))
#: The built-in ALiBi cost entries: (base name, suite).
ALIBI_ENTRIES = (("alibi_prefill_causal_s16k", "prefill"), ("alibi_decode_b128_paged16", "decode"))
SINKS_PREFILL_TOKENS = 16384
#: The FP8 K/V entries (issue 24): (base name, suite).
FP8_ENTRIES = (("fp8_prefill_causal_s16k", "prefill"), ("fp8_prefill_s4k_b4", "prefill"),
               ("fp8_decode_b128_paged16", "decode"))
#: ``*_prefill_s4k_b4``: requests and tokens a request of the non-causal prefill cost entry.
NONCAUSAL_PREFILL = (4, 4096)
#: e4m3's largest finite value: the per-tensor scale maps a tensor's amax onto it.
E4M3_MAX = 448.0
#: The agreement bound of the FP8 entries' peers (absolute, on outputs of |o| <= ~1): FA3 FP8 also
#: quantises q, and e4m3 keeps 3 mantissa bits (relative step 2^-3, rounding error up to 2^-4 per
#: element), so its output differs from kernelgen's (16-bit q) by a few 1e-2 on the bench's
#: N(0, 1) inputs.  A sanity bound (did both compute this attention?), not an accuracy claim: the
#: accuracy of kernelgen's FP8 path is tested against a float64 reference (tests/gpu/test_fp8_gpu.py).
FP8_PEER_ATOL = 0.125


def alibi_slopes(num_heads: int):
    """ALiBi's slopes (Press et al. 2022) for ``num_heads`` heads as float32 on the GPU: the geometric
    sequence ``2^(-8 i / H)``, i = 1..H (for a power-of-two H the paper's ``2^(-8/H)``, its square,
    ...; the bench keeps that formula for the others too)."""
    torch = _torch()
    h = int(num_heads)
    return torch.tensor([2.0 ** (-8.0 * i / h) for i in range(1, h + 1)], dtype=torch.float32, device="cuda")


def _last_attention_kernel() -> str | None:
    """The attention kernel's name of the last kernelgen call (its prepared call), or None (a call
    path that keeps no prepared call)."""
    from ...front import api
    return twins.attention_kernel(api._CALLS)


def _cost_inputs(settings: Settings, which: str, model: ModelPreset, label: str):
    """The inputs of a with/without cost entry (sinks_*, alibi_*, variant_*): ``*_prefill_causal_s16k``
    (one causal request of SINKS_PREFILL_TOKENS tokens, packed K/V), ``*_prefill_s4k_b4``
    (NONCAUSAL_PREFILL: 4 non-causal requests of 4096 tokens; io["causal"] is False) or
    ``*_decode_b128_paged16`` (decode_trace_b128_paged16's 128 decodes, pages of 16).  Returns
    (make_call(out, k=, v=, q=, **kw):
    k/v replace the 16-bit cache (same shape, e.g. its FP8 copy), q the bf16 queries, the raw
    entry, output rows, the tensors for peers: {"q", "k", "v", "cu_q", "cu_k", "max_q", "max_k",
    "lens_q", "lens_k"} plus "page_table" / "seqused_k" on the paged cache)."""
    torch = _torch()
    m = model
    g = torch.Generator(device="cuda").manual_seed(17)
    if which.endswith("_prefill_causal_s16k"):
        n = SINKS_PREFILL_TOKENS
        q = torch.randn(n, m.num_heads_q, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(n, m.num_heads_kv, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(n, m.num_heads_kv, m.head_dim_v, generator=g, device="cuda", dtype=torch.bfloat16)
        cu = _cu([n], "cuda")

        def make_call(o, k=k, v=v, q=q, **kw):
            return _kg_call(q, k, v, cu, cu, n, n, m, o, **kw)
        e = _entry(entry_name(which, m), "prefill", m, metric="tflops",
                   shape=f"1 x {n} tokens, causal, {m.describe()}, {label}",
                   flops=attention_flops([n], [n], m), bytes=prefill_bytes([n], [n], m))
        io = {"q": q, "k": k, "v": v, "cu_q": cu, "cu_k": cu, "max_q": n, "max_k": n, "lens_q": [n], "lens_k": [n]}
        return make_call, e, n, io
    if which.endswith("_prefill_s4k_b4"):
        b, n = NONCAUSAL_PREFILL
        q = torch.randn(b * n, m.num_heads_q, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b * n, m.num_heads_kv, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b * n, m.num_heads_kv, m.head_dim_v, generator=g, device="cuda", dtype=torch.bfloat16)
        cu = _cu([n] * b, "cuda")

        def make_call(o, k=k, v=v, q=q, **kw):
            # (a preset's window is a causal one, (w - 1, 0): without the causal mask it would still cut
            # every key right of the diagonal, so the non-causal entry runs unwindowed, as its FLOPs count)
            return _kg_call(q, k, v, cu, cu, n, n, m, o, **{"causal": False, "window_size": (-1, -1), **kw})
        e = _entry(entry_name(which, m), "prefill", m, metric="tflops",
                   shape=f"{b} x {n} tokens, non-causal, {m.describe()}, {label}",
                   flops=attention_flops([n] * b, [n] * b, m, False), bytes=prefill_bytes([n] * b, [n] * b, m, False))
        io = {"q": q, "k": k, "v": v, "cu_q": cu, "cu_k": cu, "max_q": n, "max_k": n, "lens_q": [n] * b,
              "lens_k": [n] * b, "causal": False}
        return make_call, e, b * n, io
    if which.endswith("_decode_b128_paged16"):
        ctx = decode_contexts(settings, "decode_trace_b128_paged16")
        q, kc, vc, pt, used, cu_q = paged_batch([1] * len(ctx), ctx, m, seed=7)
        maxk = max(ctx)

        def make_call(o, k=kc, v=vc, q=q, **kw):
            return _kg_call(q, k, v, cu_q, None, 1, maxk, m, o, seqused_k=used, page_table=pt, **kw)
        e = _entry(entry_name(which, m), "decode", m, metric="tbps",
                   shape=f"{len(ctx)} requests, {sum(ctx)} context tokens, pages of {PAGE_SIZE}, {label}",
                   bytes=decode_bytes(ctx, m), flops=attention_flops([1] * len(ctx), ctx, m),
                   keys_read=decode_keys_read(ctx, m))
        io = {"q": q, "k": kc, "v": vc, "cu_q": cu_q, "cu_k": None, "max_q": 1, "max_k": maxk,
              "lens_q": [1] * len(ctx), "lens_k": ctx, "page_table": pt, "seqused_k": used}
        return make_call, e, len(ctx), io
    raise ValueError(f"unknown cost entry {which!r}")


#: What a cost entry's method adds (``_with_without``: every call also timed as a twin, apps/bench/twins.py).
TWINS_METHOD = ("; each call also timed with its kernels loaded again as other modules (NAME~2), and "
                "its time the mean of its two loads")


def _with_without(settings: Settings, e: dict, calls: dict, outs: list, key: str, base_field: str,
                  ratio_field: str) -> None:
    """Time a cost entry's kernelgen calls (``calls``: {SWITCH_BASE: without the feature, key: with
    it, and any others the entry compares, e.g. the FP8 entries' four}, their outputs ``outs``)
    and a twin of each (``twins``: the same call with its kernels loaded again as other modules,
    ``NAME~2``) together as interleaved CUDA-graph replays (measure.time_interleaved): ``us`` the
    call with the feature, ``base_field`` the one without, each the mean over its two loads,
    ``ratio_field`` = us / that; ``twin_spread``: {name: the call's µs / its twin's} (how far one
    kernel moves with where its code sits: a ratio within it is not a difference);
    ``twin_kernels_differ``: the calls whose twin ran another attention kernel (it should be
    empty: a twin reloads the call's kernels, it does not choose others); ``switch_us`` /
    ``switch_rounds_us``: every configuration's.  Returns {name: the mean of its two loads' µs}."""
    torch = _torch()
    timed = twins.with_twins(calls)
    for c in timed.values():
        c()
    torch.cuda.synchronize()
    times = settings.time_interleaved(timed)
    us, spread = twins.merge(times, calls)
    e["us"] = us[key]
    e[base_field] = us[SWITCH_BASE]
    e[ratio_field] = e["us"] / e[base_field] if e[base_field] else None
    e["twin_spread"] = spread
    e["twin_kernels_differ"] = twins.kernels_differ(timed)
    e["switch_rounds_us"] = {name: t["rounds"] for name, t in times.items()}
    e["switch_us"] = {name: t["us"] for name, t in times.items()}
    e["method"] = settings.interleaved_method() + TWINS_METHOD
    return us


def sinks_entry(settings: Settings, which: str, model: ModelPreset) -> dict:
    """The cost of attention sinks on one call: ``sinks_prefill_causal_s16k`` (one causal request
    of 16384 tokens, packed K/V) or ``sinks_decode_b128_paged16`` (128 decodes on Mooncake
    contexts, pages of 16).  The call without sinks (``kernelgen``) and with them
    (``kernelgen_sinks``: per-head sinks; both are single-class calls, so the sink kernels run:
    ``AttentionSpec.sinks``, the sink added at the epilogue / in the combine, no rescale after
    them) are timed together as interleaved CUDA-graph replays (measure.time_interleaved).
    ``us``: with sinks; ``us_nosinks``: without; ``sinks_ratio``: us / us_nosinks."""
    torch = _torch()
    if which not in dict(SINKS_ENTRIES):
        raise ValueError(f"unknown sinks entry {which!r}")
    m = model
    g = torch.Generator(device="cuda").manual_seed(17)
    sinks = (torch.randn(m.num_heads_q, generator=g, device="cuda") * 2).float()
    make_call, e, rows, _io = _cost_inputs(settings, which, m, "with vs without sinks")
    outs = [torch.empty(rows, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    calls = {SWITCH_BASE: make_call(outs[0]), "kernelgen_sinks": make_call(outs[1], sinks=sinks)}
    _with_without(settings, e, calls, outs, "kernelgen_sinks", "us_nosinks", "sinks_ratio")
    # the sinks only shrink rows (factor exp(lse - logaddexp(lse, sink)) <= 1): a sanity figure
    e["sinks_max_abs_change"] = float((outs[1].float() - outs[0].float()).abs().max())
    return e


def alibi_entry(settings: Settings, which: str, model: ModelPreset) -> dict:
    """The cost of built-in ALiBi on one call, and the peers that can run it:
    ``alibi_prefill_causal_s16k`` (one causal request of 16384 tokens, packed K/V) or
    ``alibi_decode_b128_paged16`` (decode_trace_b128_paged16's 128 decodes, pages of 16), the first
    preset's heads, window and soft-cap.  kernelgen without ALiBi (``kernelgen``) and with
    ``alibi_slopes=`` (``kernelgen_alibi``: float32 (Hq,) slopes ``2^(-8 i / H)`` as in ALiBi's
    paper; the ALiBi kernel variants, ``AttentionSpec.alibi``) are timed together as interleaved
    CUDA-graph replays (measure.time_interleaved): ``us`` with ALiBi, ``us_noalibi`` without,
    ``alibi_ratio`` = us / us_noalibi (1.0 = free; issue 25 asks for at most 1.03).

    Peers on the ALiBi call, timed as every peer (CUDA events around eager calls, ``settings.time``)
    and divided by kernelgen's ALiBi call timed the same way (``peer_base_us``): ``fa4`` with ALiBi
    written as its CuTe DSL ``score_mod`` reading the slopes from ``aux_tensors`` (FA4 4.0.0b36 has
    no built-in ALiBi: no ``alibi_slopes`` argument; its sm_90 path takes a user score_mod), on the
    packed K/V or the paged cache itself; ``flex_attention`` (``--flex all``) with an ALiBi
    score_mod; ``fa3`` / ``fa3_unpaged`` and ``torch_fa2_varlen`` unavailable with the reason (no
    ALiBi argument in either).  Each peer's output is compared with kernelgen's ALiBi output."""
    torch = _torch()
    if which not in dict(ALIBI_ENTRIES):
        raise ValueError(f"unknown ALiBi entry {which!r}")
    m = model
    slopes = alibi_slopes(m.num_heads_q)
    make_call, e, rows, io = _cost_inputs(settings, which, m, "with vs without ALiBi (slopes 2^(-8i/H))")
    outs = [torch.empty(rows, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    calls = {SWITCH_BASE: make_call(outs[0]), "kernelgen_alibi": make_call(outs[1], alibi_slopes=slopes)}
    _with_without(settings, e, calls, outs, "kernelgen_alibi", "us_noalibi", "alibi_ratio")
    e["alibi_max_abs_change"] = float((outs[1].float() - outs[0].float()).abs().max())
    e["peer_base_us"] = settings.time(calls["kernelgen_alibi"])
    ref = outs[1]
    q, k, v = io["q"], io["k"], io["v"]
    wl = m.window_left if io.get("causal", True) else -1   # (a non-causal entry runs without the window)
    builders = {peers.FA4: peers.fa4(q, k, v, True, cu_q=io["cu_q"], cu_k=io["cu_k"], max_q=io["max_q"],
                                     max_k=io["max_k"], softcap=m.softcap, window_left=wl,
                                     page_table=io.get("page_table"), seqused_k=io.get("seqused_k"),
                                     score_mod=peers.fa4_alibi_score_mod, aux_tensors=[slopes])}
    if "page_table" not in io:
        builders[peers.FA3] = peers.fa3(q, k, v, True, cu_q=io["cu_q"], cu_k=io["cu_k"], max_q=io["max_q"],
                                        max_k=io["max_k"], softcap=m.softcap, window_left=wl, alibi=True)
        builders[peers.FA2_VARLEN] = peers.FA2_NO_ALIBI
        builders[peers.FLEX] = settings.flex_builder(
            peers.flex_document(q, k, v, io["lens_q"], io["lens_k"], True, softcap=m.softcap, window_left=wl,
                                alibi_slopes=slopes), "all")
        peers.measure(e, builders, settings.time, reference=ref)
        return e
    peers.measure(e, builders, settings.time, reference=ref)
    e["unavailable"][peers.FA3_UNPAGED] = peers.FA3_NO_ALIBI
    e["unavailable"][peers.FA2_VARLEN] = peers.FA2_NO_ALIBI
    where = settings.flex_builder("build", "all")
    if where != "build":
        e["unavailable"][peers.FLEX] = where
        return e
    gathered = _gather(e, k, v, io["page_table"], io["seqused_k"])
    if gathered is None:
        return e
    kg, vg, cu_k = gathered
    peers.measure(e, {peers.FLEX: peers.flex_document(q, kg, vg, io["lens_q"], io["lens_k"], True, softcap=m.softcap,
                                                      window_left=wl, alibi_slopes=slopes)},
                  settings.time, reference=ref)
    return e


def quantize_e4m3(t, scale=None):
    """``t`` as float8_e4m3fn with a per-tensor scale (``amax / 448`` unless given): returns (the
    e4m3 tensor, the float32 scale as a 0-d GPU tensor); ``fp8 * scale`` dequantises."""
    torch = _torch()
    if scale is None:
        scale = (t.abs().amax().float() / E4M3_MAX).clamp(min=torch.finfo(torch.float32).tiny)
    return (t.float() / scale).to(torch.float8_e4m3fn), scale


def fp8_entry(settings: Settings, which: str, model: ModelPreset) -> dict:
    """FP8 (e4m3) attention (issue 24) against the same call in bf16:
    ``fp8_prefill_causal_s16k`` (one causal request of 16384 tokens, packed K/V; q, k and v in
    e4m3, as FA3's FP8 forward: the Hopper kernel's FP8 tensor-core variant) or
    ``fp8_prefill_s4k_b4`` (the same on 4 non-causal requests of 4096 tokens) or
    ``fp8_decode_b128_paged16`` (decode_trace_b128_paged16's 128 decodes, pages of 16; an e4m3
    cache with bf16 queries, as serving engines run an FP8 KV cache), the first preset's heads,
    window and soft-cap.  Tensors are quantised per tensor (scale amax / 448, passed as
    ``q_descale`` / ``k_descale`` / ``v_descale`` of shape (batch, Hkv)).  The bf16 call
    (``kernelgen``) and the FP8 one (``kernelgen_fp8``; on the prefill also the e4m3 cache with the
    bf16 q, ``kernelgen_fp8_kv``, ``us_fp8_kv``, and that call with ``quantize_q=True``,
    ``kernelgen_fp8_kv_quant``, ``us_fp8_kv_quant``) are timed together as interleaved CUDA-graph
    replays: ``us`` FP8, ``us_bf16`` bf16, ``fp8_speedup`` = us_bf16 / us (issue 24 asks for 1.8x
    on the decode).  ``bytes`` counts K/V at one byte (the decode's TB/s is in FP8 bytes; the prefill's
    q, k and v at one byte and its out at two, ``fp8_prefill_bytes``; ``bytes_bf16`` the bf16 call's).

    Peer ``fa3`` (``fa3_unpaged`` on the decode: the gathered cache) runs FA3's FP8 path, which
    takes q, k and v all in e4m3 (q quantised the same way, ``q_descale`` too), timed as every peer
    and divided by kernelgen's FP8 call timed the same way (``peer_base_us``; on the prefill in
    ``Settings.peer_rounds`` rounds alternating with it, ``peer_base_by_peer``); outputs agree within
    FP8_PEER_ATOL (``peer_atol``)."""
    torch = _torch()
    if which not in dict(FP8_ENTRIES):
        raise ValueError(f"unknown FP8 entry {which!r}")
    m = model
    make_call, e, rows, io = _cost_inputs(settings, which, m, "FP8 e4m3 K/V (bf16 q) vs the bf16 cache")
    batch = len(io["lens_q"])
    k8, ks = quantize_e4m3(io["k"])
    v8, vs = quantize_e4m3(io["v"])
    kd, vd = (s.reshape(1, 1).expand(batch, m.num_heads_kv).contiguous() for s in (ks, vs))
    outs = [torch.empty(rows, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    q8, qs = quantize_e4m3(io["q"])
    qd = qs.reshape(1, 1).expand(batch, m.num_heads_kv).contiguous()
    prefill = "page_table" not in io
    calls = {SWITCH_BASE: make_call(outs[0])}
    if prefill:
        calls["kernelgen_fp8"] = make_call(outs[1], q=q8, k=k8, v=v8, q_descale=qd, k_descale=kd, v_descale=vd)
        calls["kernelgen_fp8_kv"] = make_call(outs[2], k=k8, v=v8, k_descale=kd, v_descale=vd)
        calls["kernelgen_fp8_kv_quant"] = make_call(outs[3], k=k8, v=v8, k_descale=kd, v_descale=vd, quantize_q=True)
    else:
        calls["kernelgen_fp8"] = make_call(outs[1], k=k8, v=v8, k_descale=kd, v_descale=vd)
    us = _with_without(settings, e, calls, outs, "kernelgen_fp8", "us_bf16", "fp8_ratio")
    if prefill:
        e["us_fp8_kv"] = us["kernelgen_fp8_kv"]
        e["us_fp8_kv_quant"] = us["kernelgen_fp8_kv_quant"]
    e["fp8_speedup"] = e["us_bf16"] / e["us"] if e["us"] else None
    e["fp8_max_abs_change"] = float((outs[1].float() - outs[0].float()).abs().max())
    if e["metric"] == "tbps":   # decode: bytes are K/V only, 2 per element in bf16, 1 in e4m3
        e["bytes_bf16"], e["bytes"] = e["bytes"], e["bytes"] // 2
    else:   # prefill: q, k and v read in e4m3 (1 byte), the bf16 out written (2): its arithmetic intensity
        e["bytes_bf16"], e["bytes"] = e["bytes"], fp8_prefill_bytes(io["lens_q"], io["lens_k"], m, io.get("causal", True))
    e["peer_base_us"] = settings.time(calls["kernelgen_fp8"])
    e["peer_atol"] = FP8_PEER_ATOL
    wl = m.window_left if io.get("causal", True) else -1   # (a non-causal entry runs without the window)
    if prefill:
        builders = {peers.FA3: peers.fa3(q8, k8, v8, io.get("causal", True), cu_q=io["cu_q"], cu_k=io["cu_k"],
                                         max_q=io["max_q"],
                                         max_k=io["max_k"], softcap=m.softcap, window_left=wl,
                                         descales=(qd, kd, vd))}
        peers.measure(e, builders, settings.time, reference=outs[1], base=calls["kernelgen_fp8"],
                      rounds=settings.peer_rounds)
        return e
    gathered = _gather(e, io["k"], io["v"], io["page_table"], io["seqused_k"])
    if gathered is None:
        return e
    kg, vg, cu_k = gathered
    kg8, _ = quantize_e4m3(kg, ks)
    vg8, _ = quantize_e4m3(vg, vs)
    del kg, vg
    builders = {peers.FA3_UNPAGED: peers.fa3(q8, kg8, vg8, True, cu_q=io["cu_q"], cu_k=cu_k, max_q=1,
                                             max_k=io["max_k"], softcap=m.softcap, window_left=wl,
                                             descales=(qd, kd, vd))}
    peers.measure(e, builders, settings.time, reference=outs[1])
    return e


# ------------------------------------------------------------------------------- user variants
#: The user-variant entries of suite ``prefill`` (base names), and the first-call entry (``compile``).
VARIANT_PREFILL_ENTRIES = ("variant_alibi_prefill_causal_s16k", "variant_alibi_float_prefill_causal_s16k",
                           "variant_softcap_prefill_causal_s16k", "variant_softcap_approx_prefill_causal_s16k")
VARIANT_COMPILE_ENTRY = "variant_compile_first_call"
#: Why the variant entries are skipped on a kernelgen without the user-variant API.
VARIANT_MISSING = "kernelgen has no Variant (branch variant not merged)"
#: The user score_mods (C++ expressions of kernelgen.Variant; ``score`` is the scaled logit in
#: natural units, the tensors are flat ``const T*`` pointers): ALiBi as the built-in
#: ``alibi_slopes`` computes it (bottom-right aligned distance), and a tanh soft-cap at 50.
VARIANT_ALIBI_SCORE_MOD = "score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)"
#: The same ALiBi written on a float cast of the distance: the kernel cannot see that the distance
#: is never negative below a causal diagonal, nor split the bias into a row part and a key part
#: (docs/variants.md, "What variants cost").
VARIANT_ALIBI_FLOAT_SCORE_MOD = "score - slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))"
VARIANT_SOFTCAP = 50.0
#: The soft-cap with the accurate tanh (``kg_tanh``, about 1e-7): against the built-in soft-cap
#: (tanh.approx) its ratio is what the accuracy costs.
VARIANT_SOFTCAP_SCORE_MOD = "50.f * kg_tanh(score / 50.f)"   # kg_tanh: tanhf is tanh.approx under fast math
#: The same soft-cap with the hardware tanh approximation (``tanhf`` under fast math: tanh.approx,
#: 2^-11 relative, as the built-in ``softcap`` and FA4's soft-cap): issue 25's "user variant equal to a
#: built-in" and "user variant against FA4", at equal accuracy.
VARIANT_SOFTCAP_APPROX_SCORE_MOD = "50.f * tanhf(score / 50.f)"
#: Query (= key) tokens of the first-call entry's one causal request: the compile dominates it.
VARIANT_FIRST_CALL_TOKENS = 4096


def variant_api():
    """``kernelgen.Variant`` when kernelgen has the user-variant API (the class, public as
    ``kernelgen.Variant`` from ``kernelgen.front.variant``, and ``varlen_attention(..., variant=)``);
    raises :class:`Skip` with VARIANT_MISSING otherwise."""
    import importlib
    import inspect

    from ...front import api

    # an optional module until branch variant is merged: imported by name (a static import of a
    # missing module is an error of tests/test_layers.py); kernelgen.front sits below apps
    try:
        cls = getattr(importlib.import_module("kernelgen.front.variant"), "Variant", None)
    except ImportError:
        cls = None
    try:
        takes = "variant" in inspect.signature(api.varlen_attention).parameters
    except (TypeError, ValueError):
        takes = False
    if cls is None or not takes:
        raise Skip(VARIANT_MISSING)
    return cls


def _plain(model: ModelPreset) -> ModelPreset:
    """A preset's heads and head dims without its window, soft-cap and sinks (the variant entries
    compare one score modification, nothing else)."""
    return replace(model, softcap=0.0, window=0, sinks=False, alt_window=0)


#: The cost entries of the variant examples without a built-in twin (docs/variants.md's table):
#: ``kernelgen.apps.variant_examples``' T5 bias, document mask (with its kv_range) and prefix-LM mask.
VARIANT_EXAMPLE_ENTRIES = ("variant_example_t5_bias_prefill_causal_s16k",
                           "variant_example_document_mask_prefill_causal_s16k",
                           "variant_example_prefix_lm_prefill_causal_s16k")
#: ``variant_example_document_mask_*``: the request's documents (tokens; 16384 in all).
VARIANT_EXAMPLE_DOCUMENTS = (1024, 3072, 2048, 4096, 6144)
#: ``variant_example_prefix_lm_*``: the bidirectional prefix (tokens).
VARIANT_EXAMPLE_PREFIX = 4096


def fp8_prefill_bytes(lengths_q, lengths_k, model: ModelPreset, causal: bool = True) -> int:
    """Compulsory bytes of an FP8 prefill (``fp8_entry``'s: q, k and v in e4m3): q, k and v read at one
    byte an element, the 16-bit out written at two (``prefill_bytes``'s count, in FP8)."""
    m = model
    tq, tk = sum(lengths_q), keys_read(lengths_q, lengths_k, m, causal)
    return (tq * m.num_heads_q * m.head_dim + tk * m.num_heads_kv * (m.head_dim + m.head_dim_v)
            + 2 * tq * m.num_heads_q * m.head_dim_v)


def variant_example_pairs(name: str, n: int) -> int:
    """The (query, key) pairs a variant example keeps on one request of ``n`` tokens: all causal pairs
    (``t5_bias``), each document's causal pairs (``document_mask`` over ``VARIANT_EXAMPLE_DOCUMENTS``,
    which must sum to n), or the causal pairs plus the prefix's upper triangle (``prefix_lm``)."""
    if name == "t5_bias":
        return n * (n + 1) // 2
    if name == "document_mask":
        if sum(VARIANT_EXAMPLE_DOCUMENTS) != n:
            raise ValueError(f"the documents {VARIANT_EXAMPLE_DOCUMENTS} do not sum to {n} tokens")
        return sum(d * (d + 1) // 2 for d in VARIANT_EXAMPLE_DOCUMENTS)
    if name == "prefix_lm":
        p = VARIANT_EXAMPLE_PREFIX
        return n * (n + 1) // 2 + p * (p - 1) // 2
    raise ValueError(f"unknown variant example {name!r}")


def variant_example_entry(settings: Settings, which: str, model: ModelPreset) -> dict:
    """What a variant example costs against the plain causal call, on one request of 16384 tokens with
    the first preset's heads (``VARIANT_EXAMPLE_ENTRIES``): the T5-style bucketed bias from a (heads,
    32) table (causal), the document mask over ``VARIANT_EXAMPLE_DOCUMENTS`` with its kv_range
    (causal: the blocks outside a tile's documents skipped), the prefix-LM mask with a prefix of
    ``VARIANT_EXAMPLE_PREFIX`` tokens (``causal=False`` plus the mask, its kv_range up to the
    diagonal or the prefix).  The two calls are timed as interleaved CUDA-graph replays: ``us`` the
    variant, ``us_plain`` the plain causal call, ``variant_ratio`` = us / us_plain;
    ``visible_pairs_ratio``: the (query, key) pairs the variant keeps over the causal call's, so that
    a ratio below 1 reads as skipped work (the document mask) and one above it as more work (the
    prefix's upper triangle); ``flops`` counts those pairs (the TFLOP/s is the variant's own work); ``variant_kernel``: the attention kernel it ran.  No peer: FA3 takes no
    user variant; FA4's and FlexAttention's are measured on the ALiBi and soft-cap entries."""
    torch = _torch()
    if which not in VARIANT_EXAMPLE_ENTRIES:
        raise ValueError(f"unknown variant example entry {which!r}")
    from ..variant_examples import document_ids, document_mask, prefix_lm, t5_bias, t5_buckets
    from ...jit.background import wait_for_compiles
    m = _plain(model)
    name = which[len("variant_example_"):-len("_prefill_causal_s16k")]
    make_call, e, rows, io = _cost_inputs(settings, which, m, f"the {name} example vs the plain causal call")
    n = io["max_q"]
    outs = [torch.empty(rows, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    causal = True
    if name == "t5_bias":
        g = torch.Generator(device="cuda").manual_seed(23)
        variant = t5_bias(torch.randn(m.num_heads_q, 32, generator=g, device="cuda") * 2, t5_buckets().cuda())[0]
    elif name == "document_mask":
        variant = document_mask(*document_ids([list(VARIANT_EXAMPLE_DOCUMENTS)]))[0]
    else:
        p = VARIANT_EXAMPLE_PREFIX
        variant, causal = prefix_lm(torch.tensor([p], dtype=torch.int32, device="cuda"))[0], False
    pairs = variant_example_pairs(name, n)
    e["visible_pairs_ratio"] = pairs / (n * (n + 1) // 2)
    # the rate counts the pairs the variant computes (a review: the document mask's TFLOP/s counted the
    # causal call's pairs, 3.9x its work, and read as 209 % of the matmul roof)
    e["flops"] = 2 * m.num_heads_q * (m.head_dim + m.head_dim_v) * pairs
    calls = {SWITCH_BASE: make_call(outs[0]), "kernelgen_variant": make_call(outs[1], variant=variant, causal=causal)}
    calls["kernelgen_variant"]()   # the first call may run the sm_80 kernel while the Hopper one builds
    wait_for_compiles()
    calls["kernelgen_variant"]()
    e["variant_kernel"] = _last_attention_kernel()
    _with_without(settings, e, calls, outs, "kernelgen_variant", "us_plain", "variant_ratio")
    return e


def variant_prefill_entry(settings: Settings, which: str, model: ModelPreset) -> dict:
    """A user score_mod (``kernelgen.Variant``, JIT-compiled into the attention kernel) against the
    same modification built in, on one causal request of 16384 tokens with the first preset's
    heads and head dims (no window, soft-cap or sinks):

    * ``variant_alibi_prefill_causal_s16k``: ``VARIANT_ALIBI_SCORE_MOD`` with tensors={"slopes":
      slopes} (ALiBi's geometric slopes) against ``alibi_slopes=slopes``;
    * ``variant_alibi_float_prefill_causal_s16k``: the same with ``VARIANT_ALIBI_FLOAT_SCORE_MOD``
      (``fabsf`` of a float cast);
    * ``variant_softcap_prefill_causal_s16k``: ``VARIANT_SOFTCAP_SCORE_MOD`` (the accurate ``kg_tanh``)
      against ``softcap=50`` (tanh.approx): the accuracy's cost;
    * ``variant_softcap_approx_prefill_causal_s16k``: ``VARIANT_SOFTCAP_APPROX_SCORE_MOD`` (tanh.approx,
      the built-in's and FA4's accuracy) against ``softcap=50``.

    The two calls are timed together as interleaved CUDA-graph replays: ``us`` the user variant,
    ``us_builtin`` the built-in call, ``variant_ratio`` = us / us_builtin (1.0: a user variant costs
    what the built-in one does); ``variant_max_abs_diff_vs_builtin``: their outputs' largest
    difference; ``variant_kernel`` / ``builtin_kernel``: the attention kernels the two calls run.  Peers, on the user variant's output and divided by its call timed their way
    (``peer_base_us``; each peer in ``Settings.peer_rounds`` rounds alternating with it, divided by
    kernelgen's median of those rounds, ``peer_base_by_peer``): ``flex_attention`` compiled with the same score_mod (measured at the default
    --flex some: this entry is where FlexAttention's user score_mods are the comparison) and
    ``fa4`` with the same score_mod as a CuTe DSL callable (FA4 4.0.0b36's sm_90 path applies a
    user score_mod; only sm_8x refuses one), ALiBi's slopes in ``aux_tensors``.  Skipped with
    VARIANT_MISSING on a kernelgen without ``Variant``."""
    torch = _torch()
    if which not in VARIANT_PREFILL_ENTRIES:
        raise ValueError(f"unknown variant entry {which!r}")
    Variant = variant_api()
    from ...jit.background import wait_for_compiles
    m = _plain(model)
    alibi = which.startswith("variant_alibi_")
    label = ("user ALiBi score_mod vs built-in alibi_slopes" if alibi else
             f"user soft-cap score_mod vs built-in softcap={VARIANT_SOFTCAP:g}")
    if which.startswith("variant_softcap_approx_"):
        label += " (both tanh.approx)"
    elif not alibi:
        label += " (kg_tanh, accurate, vs tanh.approx)"
    make_call, e, rows, io = _cost_inputs(settings, which, m, label)
    outs = [torch.empty(rows, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    if alibi:
        slopes = alibi_slopes(m.num_heads_q)
        mod = VARIANT_ALIBI_FLOAT_SCORE_MOD if which.startswith("variant_alibi_float_") else VARIANT_ALIBI_SCORE_MOD
        variant = Variant(score_mod=mod, mask_mod=None, kv_range=None, tensors={"slopes": slopes},
                          name="bench_alibi_float" if mod == VARIANT_ALIBI_FLOAT_SCORE_MOD else "bench_alibi")
        builtin = make_call(outs[0], alibi_slopes=slopes)
        e["score_mod"] = mod
    else:
        slopes = None
        mod = (VARIANT_SOFTCAP_APPROX_SCORE_MOD if which.startswith("variant_softcap_approx_")
               else VARIANT_SOFTCAP_SCORE_MOD)
        variant = Variant(score_mod=mod, mask_mod=None, kv_range=None, tensors=None,
                          name="bench_softcap_approx" if mod == VARIANT_SOFTCAP_APPROX_SCORE_MOD else "bench_softcap")
        builtin = make_call(outs[0], softcap=VARIANT_SOFTCAP)
        e["score_mod"] = mod
    calls = {SWITCH_BASE: builtin, "kernelgen_variant": make_call(outs[1], variant=variant)}
    # the variant's first call may run its sm_80 kernel while the Hopper kernel builds in the
    # background (docs/variants.md, "First call"): the warm-up and the timing run the Hopper kernel
    calls["kernelgen_variant"]()
    wait_for_compiles()
    for name, key in (("kernelgen_variant", "variant_kernel"), (SWITCH_BASE, "builtin_kernel")):
        calls[name]()
        e[key] = _last_attention_kernel()
    _with_without(settings, e, calls, outs, "kernelgen_variant", "us_builtin", "variant_ratio")
    e["variant_max_abs_diff_vs_builtin"] = float((outs[1].float() - outs[0].float()).abs().max())
    e["peer_base_us"] = settings.time(calls["kernelgen_variant"])
    q, k, v = io["q"], io["k"], io["v"]
    n = io["max_q"]
    flex = peers.flex_document(q, k, v, io["lens_q"], io["lens_k"], True, alibi_slopes=slopes,
                               softcap=0.0 if alibi else VARIANT_SOFTCAP)
    if alibi:
        fa4_mod, aux = peers.fa4_alibi_score_mod, [slopes]
    else:
        fa4_mod, aux = (lambda: peers.fa4_softcap_score_mod(VARIANT_SOFTCAP)), None
    builders = {peers.FLEX: settings.flex_builder(flex, "some"),
                peers.FA4: peers.fa4(q, k, v, True, cu_q=io["cu_q"], cu_k=io["cu_k"], max_q=n, max_k=n,
                                     score_mod=fa4_mod, aux_tensors=aux),
                peers.FA3: peers.FA3_NO_ALIBI if alibi else "fa3-fwd takes no user score_mod (its soft-cap is "
                                                              "built in: the built-in comparison is us_builtin)"}
    peers.measure(e, builders, settings.time, reference=outs[1], base=calls["kernelgen_variant"],
                  rounds=settings.peer_rounds)
    return e


def variant_compile_first_call_entry(settings: Settings, model: ModelPreset) -> dict:
    """``variant_compile_first_call``: the wall time of the first call of a never-seen user variant,
    the NVRTC compile of the attention kernel it runs included (the scheduler and the rest are
    cached), on one causal request of VARIANT_FIRST_CALL_TOKENS tokens with the first preset's
    heads, in a process that has made a plain call of the shape first (as a serving process has).
    The variant is ALiBi's score_mod times a fresh constant (1 + a random multiple of 1e-9, printed
    in the snippet), so no cache, in memory or on disk, has it.  On an H200 the first call runs the
    variant's sm_80-mainloop kernel while its Hopper kernel builds in the background
    (``selection.tiered``; docs/variants.md, "First call").  ``us``: perf_counter from the first
    call to its synchronised end; ``us_hopper_ready``: from the same start until
    ``wait_for_compiles()`` returns after it (the Hopper kernel built; about ``us`` when the first
    call built it itself); ``first_call_kernels``: the attention kernel(s) the first call ran (the
    names of its loaded attention kernels), ``hopper_built``: what ``wait_for_compiles`` returned;
    ``us_second_call``: the same call after that (loads and runs the Hopper kernel).  Peers, each with its own fresh constant-bearing score_mod and the same constant:
    ``flex_attention`` (a score_mod compiled from source text holding the constant, a code object
    torch.compile has not seen: it recompiles; its block mask built in the timing, as its first
    call needs it) and ``fa4`` (FA4 keys its compile cache on the score_mod's
    source and closure: a new constant compiles a new kernel; its disk cache is off unless
    FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1); their first-call µs (build + first call +
    synchronise) are their ``peers`` times, so the ratio is their first call / kernelgen's.  Each
    output is compared with kernelgen's.  Skipped with VARIANT_MISSING on a kernelgen without
    ``Variant``."""
    import secrets

    torch = _torch()
    Variant = variant_api()
    from ...front.api import varlen_attention
    from ...jit import runtime
    from ...jit.background import wait_for_compiles

    m = _plain(model)
    n = VARIANT_FIRST_CALL_TOKENS
    c = 1.0 + (1 + secrets.randbelow(999_999)) * 1e-9
    snippet = f"score - {c:.9f}f * slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))"
    g = torch.Generator(device="cuda").manual_seed(23)
    q = torch.randn(n, m.num_heads_q, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(n, m.num_heads_kv, m.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(n, m.num_heads_kv, m.head_dim_v, generator=g, device="cuda", dtype=torch.bfloat16)
    cu = _cu([n], "cuda")
    slopes = alibi_slopes(m.num_heads_q)
    out = torch.empty(n, m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    e = _entry(VARIANT_COMPILE_ENTRY, "compile", m, score_mod=snippet,
               shape=f"1 x {n} tokens, causal, {m.describe()}, a never-seen user variant",
               method="wall time (perf_counter) of the first call through its synchronised end, NVRTC compile "
                      "included; peers: build + first call + synchronise, each with a never-seen score_mod")
    # the process is warm first (NVRTC loaded, the scheduler and a plain attention kernel of the
    # shape loaded): what is timed is what a serving process pays for a new variant
    varlen_attention(q, k, v, cu, cu, n, n, causal=True, out=out)
    second = torch.empty_like(out)
    loaded = {id(x) for x in runtime.loaded_kernels()}
    for key, dest in (("us", out), ("us_second_call", second)):   # the first call, then the same call again
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        varlen_attention(q, k, v, cu, cu, n, n, causal=True, out=dest,
                         variant=Variant(score_mod=snippet, tensors={"slopes": slopes}))
        torch.cuda.synchronize()
        e[key] = (time.perf_counter() - t0) * 1e6
        if key == "us":   # its kernels; then the Hopper kernel's background build, if it started one
            e["first_call_kernels"] = [x.spec.name for x in runtime.loaded_kernels()
                                       if id(x) not in loaded and x.spec.kind == "attention"]
            e["hopper_built"] = wait_for_compiles()
            e["us_hopper_ready"] = (time.perf_counter() - t0) * 1e6
    builders = {
        peers.FLEX: settings.flex_builder(peers.flex_document(q, k, v, [n], [n], True, alibi_slopes=slopes,
                                                              alibi_factor=c), "some"),
        peers.FA4: peers.fa4(q, k, v, True, cu_q=cu, cu_k=cu, max_q=n, max_k=n,
                             score_mod=lambda: peers.fa4_alibi_score_mod(c), aux_tensors=[slopes]),
    }
    first_calls(e, builders, reference=out)
    return e


def first_calls(entry: dict, builders: dict, reference=None) -> None:
    """Each peer's first call, timed whole: build + first call + synchronise (perf_counter), into
    ``peers`` (µs) and ``first_call_s``; its output compared with ``reference`` (``max_diff``,
    ``ref_max``).  A peer that fails is unavailable with the reason; never raises for a peer."""
    torch = _torch()
    for name, build in builders.items():
        if isinstance(build, str):
            entry["unavailable"][name] = build
            continue
        peer = res = None
        try:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            peer = build()
            res = peer.fn()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            entry["peers"][name] = dt * 1e6
            entry.setdefault("first_call_s", {})[name] = dt
            if reference is not None and peer.output is not None:
                o = peer.output(res).float()
                entry.setdefault("max_diff", {})[name] = float((o - reference.float()).abs().max())
                entry.setdefault("ref_max", {})[name] = float(o.abs().max())
        except Exception as ex:  # noqa: BLE001 - a peer that cannot run is reported
            entry["unavailable"][name] = peers.reason(ex)
            entry["peers"].pop(name, None)
        finally:
            peer = res = None
            peers._settle()


# ------------------------------------------------------------------------------------ mixed
#: The mixed batches (suite ``mixed``), each one engine step of chunked prefills and decodes drawn
#: from the traces: name -> (chunks, decodes, description).  ``chunks``: ("mooncake", query lengths,
#: first row) for chunks of the given lengths appended to the Mooncake contexts from that row, or
#: ("azure", count, first row, cap) for whole new Azure-conversation prompts (no earlier context),
#: each capped at ``cap`` tokens; ``decodes``: (count, first Mooncake row).  Contexts are capped at
#: 32k tokens.
MIXED_BATCHES = {
    "mixed_trace": (("mooncake", (512, 2048, 4096), 200), (192, 300),
                    "3 chunks of 512, 2048 and 4096 tokens on trace contexts + 192 decodes"),
    # issue 23's "few long chunks with many decodes"
    "mixed_long_chunks": (("mooncake", (4096, 4096), 220), (256, 600),
                          "2 chunks of 4096 tokens on trace contexts + 256 decodes"),
    # issue 23's "many short chunks with few decodes"
    "mixed_short_chunks": (("azure", 8, 40, 512), (32, 900),
                           "8 new prompts (Azure conversations, capped at 512 tokens) + 32 decodes"),
}


def mixed_lengths(settings: Settings, batch: str = "mixed_trace"):
    """(prefill query lengths, prefill key lengths, decode key lengths) of a ``MIXED_BATCHES``
    batch (default ``mixed_trace``: 3 chunks of 512, 2048 and 4096 tokens on trace contexts, rows
    200-202, and 192 decodes, rows 300-491).  Raises ValueError for an unknown batch."""
    if batch not in MIXED_BATCHES:
        raise ValueError(f"unknown mixed batch {batch!r} (choose from {', '.join(MIXED_BATCHES)})")
    chunks, (n_dec, dec_row), _ = MIXED_BATCHES[batch]
    ctx = [min(max(1, int(r[0])), 32768) for r in load_rows(settings.decode_trace, "mooncake_conv_sample.csv")]
    if chunks[0] == "mooncake":
        pre_q = list(chunks[1])
        pre_k = [c + q_ for c, q_ in zip(_take(ctx, chunks[2], len(pre_q)), pre_q)]
    else:
        from .. import traces

        _, n, row, cap = chunks
        prompts = [max(1, int(r[0])) for r in load_rows(settings.prefill_trace, traces.SAMPLE_NAME)]
        pre_q = [min(p, cap) for p in _take(prompts, row, n)]
        pre_k = list(pre_q)
    return pre_q, pre_k, _take(ctx, dec_row, n_dec)


#: The FP8-cache mixed step (issue 24: "at most 0.8x its serial peer").
MIXED_FP8_ENTRY = "mixed_trace_fp8"
#: ... with ``quantize_q=True`` in every call (the fused kernel's long class on the FP8 tensor cores).
MIXED_FP8_QQ_ENTRY = "mixed_trace_fp8_qq"


def mixed_entry(settings: Settings, model: ModelPreset, kv_dtype: str | None = None,
                batch: str = "mixed_trace", quantize_q: bool = False) -> dict:
    """One ``MIXED_BATCHES`` batch (default ``mixed_trace``: 3 chunked prefills of 512-4096
    tokens + 192 decodes at trace contexts) in one uniform call; peers: serial (prefill-only call
    then decode-only call) and two_streams (the two calls on two streams), and FA2 varlen, FA3 on
    the gathered cache and FA4 on the paged cache, each running the whole batch in one varlen call.

    ``kv_dtype="e4m3"`` (``mixed_trace_fp8``): the same batch on an e4m3 cache with per-tensor
    scales (amax / 448, ``k_descale`` / ``v_descale`` as 0-d tensors, which every call's batch
    broadcasts) and a bf16 q, in all three kernelgen calls; the peers are serial and two_streams
    only (the others take no FP8 cache with a 16-bit q).  ``quantize_q`` (``mixed_trace_fp8_qq``,
    with ``kv_dtype="e4m3"``): every kernelgen call with ``quantize_q=True`` (the mixed call's fused
    kernel runs its long class on the FP8 tensor cores, as the serial peer's prefill call does; the
    decode call reads the 16-bit q either way)."""
    torch = _torch()
    from ...front.api import varlen_attention

    m = model
    pre_q, pre_k, dec_k = mixed_lengths(settings, batch)
    qlens, klens = pre_q + [1] * len(dec_k), pre_k + dec_k
    q, kc, vc, pt, used, cu_q = paged_batch(qlens, klens, m, seed=12)
    o = torch.empty(q.shape[0], m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
    n_pre, t_pre = len(pre_q), sum(pre_q)
    cu_pre, cu_dec = cu_q[: n_pre + 1], cu_q[n_pre:] - t_pre
    q_pre, q_dec = q[:t_pre], q[t_pre:]
    o_pre, o_dec = o[:t_pre], o[t_pre:]
    kw = dict(causal=True, window_size=m.window_size, softcap=m.softcap)
    if kv_dtype is not None:
        if kv_dtype != "e4m3":
            raise ValueError(f"mixed_entry: kv_dtype {kv_dtype!r} (only 'e4m3')")
        (kc, ks), (vc, vs) = quantize_e4m3(kc), quantize_e4m3(vc)
        kw.update(k_descale=ks, v_descale=vs)
        if quantize_q:
            kw["quantize_q"] = True
    elif quantize_q:
        raise ValueError("mixed_entry: quantize_q needs kv_dtype='e4m3'")
    run_all = lambda: varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(klens), seqused_k=used,  # noqa: E731
                                       page_table=pt, out=o, **kw)

    def prefill():
        varlen_attention(q_pre, kc, vc, cu_pre, None, max(pre_q), max(pre_k), seqused_k=used[:n_pre],
                         page_table=pt[:n_pre], out=o_pre, **kw)

    def decode():
        varlen_attention(q_dec, kc, vc, cu_dec, None, 1, max(dec_k), seqused_k=used[n_pre:],
                         page_table=pt[n_pre:], out=o_dec, **kw)

    def serial():
        prefill()
        decode()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def two_streams():
        cur = torch.cuda.current_stream()
        s1.wait_stream(cur)
        s2.wait_stream(cur)
        with torch.cuda.stream(s1):
            prefill()
        with torch.cuda.stream(s2):
            decode()
        cur.wait_stream(s1)
        cur.wait_stream(s2)
    name = (batch + "_fp8" + ("_qq" if quantize_q else "")) if kv_dtype else batch
    e = _entry(entry_name(name, m), "mixed", m, metric="tflops", flops=attention_flops(qlens, klens, m),
               bytes=prefill_bytes(qlens, klens, m) - (keys_read(qlens, klens, m) * m.num_heads_kv * (m.head_dim + m.head_dim_v)
                                                          if kv_dtype else 0),   # FP8 K/V: one byte an element
               shape=f"{len(pre_q)} prefill chunks {pre_q} + {len(dec_k)} decodes, paged"
               + (", e4m3 cache" if kv_dtype else "") + (", quantize_q" if quantize_q else ""))
    e["us"] = settings.time(run_all)
    ref = o.clone()
    builders = {"serial": lambda: peers.Peer(serial, lambda _r: o),
                "two_streams": lambda: peers.Peer(two_streams, lambda _r: o)}
    if kv_dtype:
        peers.measure(e, builders, settings.time, reference=ref)
        return e
    builders[peers.FA4] = peers.fa4(q, kc, vc, True, cu_q=cu_q, max_q=max(qlens), max_k=max(klens),
                                    softcap=m.softcap, window_left=m.window_left, page_table=pt, seqused_k=used)
    peers.measure(e, builders, settings.time, reference=ref)
    gathered = _gather(e, kc, vc, pt, used)
    if gathered is None:
        return e
    k, v, cu_k = gathered
    builders = {p: peers.VARLEN_SDPA_REASON for p in peers.SDPA_PEERS}
    builders[peers.FA2_VARLEN] = peers.fa2_varlen(q, k, v, cu_q, cu_k, max(qlens), max(klens), True,
                                                  softcap=m.softcap, window_left=m.window_left)
    builders[peers.FA3_UNPAGED] = peers.fa3(q, k, v, True, cu_q=cu_q, cu_k=cu_k, max_q=max(qlens), max_k=max(klens),
                                            softcap=m.softcap, window_left=m.window_left)
    builders[peers.FLEX] = settings.flex_builder(
        peers.flex_document(q, k, v, qlens, klens, True, softcap=m.softcap, window_left=m.window_left), "all")
    peers.measure(e, builders, settings.time, reference=ref)
    return e


# -------------------------------------------------------------------------------- scheduler
def _skewed(settings: Settings, batch: int, model: ModelPreset):
    from ..compare_layouts import trace_batch

    lq, lk = trace_batch(load_rows(settings.prefill_trace, "azure_conv_sample.csv"), batch)
    return lq, lk


#: Scheduler launches per CUDA-graph replay in the scheduler_b* entries (the time is per launch).
SCHEDULER_LAUNCHES = 20


def scheduler_entry(settings: Settings, batch: int, model: ModelPreset) -> dict:
    """scheduler_b{batch}: one scheduler launch (sort + splits + swizzle on), SoA; peers: AoS and
    SoA with the sort off.  Each configuration is a CUDA graph of 20 launches (launch overhead
    excluded, the gaps between launches included), the three timed as interleaved replays
    (measure.time_interleaved); the time is per launch."""
    from ...kernels.kernel_args import scheduler_launch_shape
    from ...front.plan import AttentionPlan

    m = model
    lq, lk = _skewed(settings, batch, m)
    cu_q, cu_k = _cu(lq, "cuda"), _cu(lk, "cuda")
    e = _entry(entry_name(f"scheduler_b{batch}", m), "scheduler", m, shape=f"{batch} requests (skewed trace batch)")
    calls = {}
    for name, layout, srt in ((SWITCH_BASE, "soa", True), (peers.KG_AOS, "aos", True), (peers.KG_NOSORT, "soa", False)):
        plan = AttentionPlan(max_batch=batch, num_heads_q=m.num_heads_q, num_heads_kv=m.num_heads_kv,
                             head_dim=m.head_dim, head_dim_v=m.head_dim_v, causal=True, metadata_layout=layout,
                             sort=srt)
        calls[name] = lambda plan=plan: plan.schedule(cu_q, cu_k)
    e["threads"], e["smem_bytes"] = scheduler_launch_shape(batch, plan.sched.smem_bytes)
    times = settings.time_interleaved(calls, launches=SCHEDULER_LAUNCHES)
    e["us"] = times[SWITCH_BASE]["us"]
    record_switches(e, times, settings.interleaved_method(SCHEDULER_LAUNCHES))
    e["us_soa"], e["us_aos"], e["us_soa_nosort"] = (times[n]["us"] for n in (SWITCH_BASE, peers.KG_AOS, peers.KG_NOSORT))
    return e


#: The sorted/unsorted pair of the varlen_trace entries, measured once for both (by model, batch).
_trace_sort_times: dict = {}


def trace_sort_entry(settings: Settings, sort: bool, model: ModelPreset, batch: int = 512) -> dict:
    """varlen_trace_sorted / varlen_trace_unsorted: the same skewed trace batch (every 8th request
    a prefill, the rest decodes; causal) with the scheduler's sort on / off.  Both calls are
    timed together, as interleaved CUDA-graph replays (measure.time_interleaved), by whichever of
    the two entries runs first; each entry reports its own time and ``sort_speedup`` (unsorted
    time / sorted time: above 1 the sort pays), the sorted one the unsorted time as its
    ``kernelgen_nosort`` peer."""
    torch = _torch()

    m = model
    lq, lk = _skewed(settings, batch, m)
    name = entry_name("varlen_trace_sorted" if sort else "varlen_trace_unsorted", m)
    e = _entry(name, "scheduler", m, metric="tflops", flops=attention_flops(lq, lk, m), bytes=prefill_bytes(lq, lk, m),
               shape=f"{batch} requests, every 8th a prefill")
    key = (m.name, batch, settings.rounds, settings.repeat)
    times = _trace_sort_times.pop(key, None)
    if times is None:
        torch.manual_seed(3)
        q = torch.randn(sum(lq), m.num_heads_q, m.head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(sum(lk), m.num_heads_kv, m.head_dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(sum(lk), m.num_heads_kv, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
        cu_q, cu_k = _cu(lq, "cuda"), _cu(lk, "cuda")
        calls = {}
        for label, srt in (("sorted", True), ("unsorted", False)):
            o = torch.empty(sum(lq), m.num_heads_q, m.head_dim_v, device="cuda", dtype=torch.bfloat16)
            calls[label] = _kg_call(q, k, v, cu_q, cu_k, max(lq), max(lk), m, o, sort=srt)
        times = settings.time_interleaved(calls)
        _trace_sort_times[key] = times  # for the other entry of the pair
    e["us"] = times["sorted" if sort else "unsorted"]["us"]
    if sort:  # the sort-off column of the other entries: unsorted / sorted
        e["peers"][peers.KG_NOSORT] = times["unsorted"]["us"]
        e["switch_base_us"] = e["us"]
    e["sort_speedup"] = times["unsorted"]["us"] / times["sorted"]["us"]
    e["rounds_us"] = {label: t["rounds"] for label, t in times.items()}
    e["method"] = settings.interleaved_method()
    return e


# ---------------------------------------------------------------------------------- compile
_COLD_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
from kernelgen.jit import compiler
from kernelgen.jit.cache import KernelCache
from kernelgen.kernels.spec import spec_from_json
t1 = time.perf_counter()
compiler.nvrtc_version()
t2 = time.perf_counter()
entry = KernelCache(sys.argv[2]).get(spec_from_json(json.loads(sys.argv[1])))
t3 = time.perf_counter()
print(json.dumps({"us": (t3 - t1) * 1e6, "us_import": (t1 - t0) * 1e6, "us_nvrtc_init": (t2 - t1) * 1e6,
                  "us_get": (t3 - t2) * 1e6, "compiled": entry.compiled, "resources": entry.resources}))
"""

_COLD_CALL_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
from kernelgen.jit import compiler
from kernelgen.jit.cache import KernelCache
from kernelgen.kernels.spec import spec_from_json
t1 = time.perf_counter()
compiler.nvrtc_version()
t2 = time.perf_counter()
cache, kernels = KernelCache(sys.argv[2]), []
for js in json.loads(sys.argv[1]):
    a = time.perf_counter()
    entry = cache.get(spec_from_json(js))
    kernels.append({"name": entry.name, "us": (time.perf_counter() - a) * 1e6, "compiled": entry.compiled})
t3 = time.perf_counter()
print(json.dumps({"us": (t3 - t1) * 1e6, "us_import": (t1 - t0) * 1e6, "us_nvrtc_init": (t2 - t1) * 1e6,
                  "kernels": kernels}))
"""

_WARM_SCRIPT = r"""
import json, sys, time
from kernelgen.jit import cache, runtime
from kernelgen.kernels.spec import spec_from_json
import cupy
spec = spec_from_json(json.loads(sys.argv[1]))
dev = int(sys.argv[3])
cache.set_cache_dir(sys.argv[2])
with cupy.cuda.Device(dev):  # the CUDA context and the device properties exist before the timing
    cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(256))
runtime.device_properties(dev)
t0 = time.perf_counter()
entry = cache.get_cache().get(spec)
t1 = time.perf_counter()
kernel = runtime.get_kernel(spec, dev)
t2 = time.perf_counter()
print(json.dumps({"us": (t2 - t0) * 1e6, "us_disk": (t1 - t0) * 1e6, "us_module_load": (t2 - t1) * 1e6,
                  "compiled": entry.compiled, "persistent_grid": kernel.persistent_grid}))
"""


def compile_spec(arch: str):
    """The attention variant the compile suite builds: llama3-8b's causal bf16 prefill (SoA)."""
    from ...selection import heuristics

    return heuristics.specs_for(arch, "bf16", 128, 128, True, "soa")[1]


def call_specs(arch: str) -> list:
    """Every kernel the first call of ``compile_spec``'s signature compiles: its scheduler and
    attention kernel (llama3-8b's causal bf16 prefill, SoA)."""
    from ...selection import heuristics

    return list(heuristics.specs_for(arch, "bf16", 128, 128, True, "soa"))


def run_script(script: str, *args, timeout: float = 300.0, env_extra: dict | None = None) -> dict:
    """Run a measurement script in a new Python process (kernelgen importable from this checkout)
    and return the JSON object on its last stdout line.  Raises RuntimeError with its stderr."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("KERNELGEN_DISABLE_JIT", None)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"measurement subprocess failed (exit {p.returncode}): {' | '.join(tail)}")
    return json.loads(lines[-1])


def cold_compile(arch: str, root) -> dict:
    """Cold compile of ``compile_spec(arch)`` into the empty cache ``root``, in a new process:
    µs from NVRTC's first use through KernelCache.get (render, compile, publish); the import of
    kernelgen is reported apart (``us_import``).  Needs no GPU."""
    spec = compile_spec(arch)
    return run_script(_COLD_SCRIPT, json.dumps(spec.to_json()), root, env_extra={"KERNELGEN_CACHE_DIR": str(root)})


def cold_compile_call(arch: str, root) -> dict:
    """Cold compile of every kernel of a first call (``call_specs``) into the empty cache
    ``root``, one after the other as the call does, in a new process: µs from NVRTC's first use
    through the last KernelCache.get, and each kernel's µs.  Needs no GPU."""
    specs = json.dumps([s.to_json() for s in call_specs(arch)])
    return run_script(_COLD_CALL_SCRIPT, specs, root, env_extra={"KERNELGEN_CACHE_DIR": str(root)})


_compile_tmp: dict = {}


def _compile_root() -> str:
    """The fresh temporary cache directory the compile suite shares between its two entries."""
    if "dir" not in _compile_tmp:
        _compile_tmp["obj"] = tempfile.TemporaryDirectory(prefix="kernelgen-bench-cache-")
        _compile_tmp["dir"] = _compile_tmp["obj"].name
    return _compile_tmp["dir"]


def compile_cold_entry(settings: Settings, model=None) -> dict:
    from ...jit.runtime import device_arch

    from ...selection.settings import allow_untested_arch

    arch = device_arch(settings.device, allow_untested_arch())
    root = tempfile.mkdtemp(prefix="cold-", dir=_compile_root())
    r = cold_compile(arch, root)
    _compile_tmp["warm_root"] = root
    e = _entry("compile_cold_variant", "compile", None, variant=compile_spec(arch).name,
               method="new process, empty cache dir: NVRTC init + render + compile + publish (KernelCache.get)")
    e.update({k: r[k] for k in ("us", "us_import", "us_nvrtc_init", "us_get", "compiled", "resources")})
    if not r["compiled"]:
        raise RuntimeError("the cold compile found the kernel already cached")
    return e


def compile_cold_call_entry(settings: Settings, model=None) -> dict:
    """compile_cold_call: what a first call compiles with an empty cache (the scheduler and the
    attention kernel of llama3-8b's causal prefill), the comparable number to a JIT peer's first
    call (``first_call_s``)."""
    from ...jit.runtime import device_arch

    from ...selection.settings import allow_untested_arch

    arch = device_arch(settings.device, allow_untested_arch())
    r = cold_compile_call(arch, tempfile.mkdtemp(prefix="cold-call-", dir=_compile_root()))
    e = _entry("compile_cold_call", "compile", None, variants=[k["name"] for k in r["kernels"]],
               method="new process, empty cache dir: NVRTC init + every kernel of a first prefill call compiled "
                      "in turn (KernelCache.get)")
    e.update({k: r[k] for k in ("us", "us_import", "us_nvrtc_init", "kernels")})
    if not all(k["compiled"] for k in r["kernels"]):
        raise RuntimeError("the cold call found a kernel already cached")
    return e


def compile_warm_entry(settings: Settings, model=None) -> dict:
    from ...jit.runtime import device_arch

    from ...selection.settings import allow_untested_arch

    arch = device_arch(settings.device, allow_untested_arch())
    root = _compile_tmp.get("warm_root")
    if root is None:  # the cold entry did not run: fill a fresh cache first
        root = tempfile.mkdtemp(prefix="warm-", dir=_compile_root())
        cold_compile(arch, root)
    r = run_script(_WARM_SCRIPT, json.dumps(compile_spec(arch).to_json()), root, settings.device,
                   env_extra={"KERNELGEN_CACHE_DIR": str(root)})
    e = _entry("compile_warm_load", "compile", None, variant=compile_spec(arch).name,
               method="new process, CUDA context made first: KernelCache.get from disk (sha256 check) + "
                      "runtime.get_kernel (module load, occupancy)")
    e.update({k: r[k] for k in ("us", "us_disk", "us_module_load", "compiled")})
    if r["compiled"]:
        raise RuntimeError("the warm load compiled instead of reading the disk cache")
    return e


def dispatch_entry(settings: Settings, model: ModelPreset) -> dict:
    """dispatch_in_memory: a second runtime.get_kernel of a loaded kernel (µs per call); extra
    ``us_choose``: heuristics.choose for a decode call of the preset."""
    from ...selection import heuristics
    from ...jit import runtime
    from ...jit.runtime import device_arch

    from ...selection.settings import allow_untested_arch

    dev = settings.device
    arch = device_arch(dev, allow_untested_arch())
    spec = compile_spec(arch)
    runtime.get_kernel(spec, dev)
    e = _entry("dispatch_in_memory", "compile", None, variant=spec.name, method="perf_counter around 10000 calls")
    e["us"] = measure.host_loop_us(lambda: runtime.get_kernel(spec, dev))
    num_sms = runtime.device_properties(dev)["num_sms"]
    m = model
    e["us_choose"] = measure.host_loop_us(lambda: heuristics.choose(
        arch, "bf16", m.head_dim, m.head_dim_v, num_heads_q=m.num_heads_q, num_heads_kv=m.num_heads_kv, mask="causal",
        max_seqlen_q=1, max_seqlen_k=32768, paged=True, num_sms=num_sms), calls=2000)
    return e


# --------------------------------------------------------------------------------- overhead
OVERHEAD_ENTRIES = ("overhead_decode_call", "overhead_plan_run", "overhead_graph_replay",
                    "overhead_decode_call_32layers", "overhead_plan_run_32layers")
OVERHEAD_CONTEXT_CAP = 8192
#: Layers the ``_32layers`` entries cycle through (a 32-layer model's decode step).
OVERHEAD_LAYERS = 32


def _overhead_inputs(settings: Settings, model: ModelPreset):
    ctx = [min(c, OVERHEAD_CONTEXT_CAP) for c in decode_contexts(settings, "decode_trace_b32_paged16")]
    return ctx, paged_batch([1] * len(ctx), ctx, model, seed=21)


def overhead_entry(settings: Settings, which: str, model: ModelPreset) -> dict:
    """Host time of one decode step (32 requests, Mooncake contexts capped at 8192, paged):
    ``overhead_decode_call`` the one-shot varlen_attention (scheduler + attention + combine),
    ``overhead_plan_run`` AttentionPlan.run, ``overhead_graph_replay`` a CUDA-graph replay of the
    plan step, each repeated on the same tensors.  The ``_32layers`` entries cycle the call
    through ``OVERHEAD_LAYERS`` layers' q and out, as the layers of a decode step do, so no call
    has the previous call's pointers (the prepared call's graph launch then re-points a graph:
    ``kernelgen/launch/graph_launch.py``).  Method: measure.host_time_us (the GPU is kept busy by a spin
    kernel so nothing the calls enqueue runs during the measurement, and fewer calls than the
    launch queue holds are enqueued per sample, so no launch blocks)."""
    torch = _torch()
    from ...launch import graph_launch
    from ...jit import runtime
    from ...front.api import varlen_attention
    from ...jit.runtime import device_arch
    from ...front.plan import AttentionPlan

    m = model
    ctx, (q, kc, vc, pt, used, cu_q) = _overhead_inputs(settings, m)
    b, maxk = len(ctx), max(ctx)
    n_layers = OVERHEAD_LAYERS if which.endswith("_32layers") else 1
    layers = [(q if i == 0 else q.clone(), torch.empty(b, m.num_heads_q, m.head_dim_v, device="cuda",
                                                       dtype=torch.bfloat16)) for i in range(n_layers)]
    turn = itertools.cycle(layers).__next__
    method = measure.HOST_METHOD + (f"; calls cycle through {n_layers} layers' q and out" if n_layers > 1 else
                                    "; the same call repeated")
    e = _entry(entry_name(which, m), "overhead", m, shape=f"decode step, {b} requests, paged, {m.describe()}",
               method=method)
    e["layers"] = n_layers
    if which.startswith("overhead_decode_call"):
        def fn():
            lq, lo = turn()
            return varlen_attention(lq, kc, vc, cu_q, None, 1, maxk, seqused_k=used, page_table=pt, causal=True,
                                    window_size=m.window_size, softcap=m.softcap, out=lo)
        dev = settings.device
        from ...selection.settings import allow_untested_arch

        specs = _variants(device_arch(dev, allow_untested_arch()), runtime.device_properties(dev)["num_sms"], m, 1, maxk, True,
                          layouts=("soa",))
        e["launches"] = len(specs)  # scheduler + attention (+ combine)
    else:
        plan = AttentionPlan(max_batch=b, num_heads_q=m.num_heads_q, num_heads_kv=m.num_heads_kv, head_dim=m.head_dim,
                             head_dim_v=m.head_dim_v, max_total_q=b, max_seqlen_q=1, max_seqlen_k=maxk, paged=True,
                             causal=True, window_size=m.window_size, softcap=m.softcap)

        def step():
            lq, lo = turn()
            return plan.run(lq, kc, vc, cu_q, seqused_k=used, page_table=pt, out=lo)
        e["launches"] = 3 if plan.combine is not None else 2
        if which.startswith("overhead_plan_run"):
            fn = step
        else:
            graph = measure.capture_graph(step)
            fn = graph.replay
            e["launches"] = 1
    # kernels enqueued as one CUDA graph launch outside capture (kernelgen/launch/graph_launch.py): the
    # driver has the graph API and KERNELGEN_GRAPH_LAUNCH is not 0 (the A/B of docs/dev/perf-log.md)
    e["graph_launch"] = (which != "overhead_graph_replay" and graph_launch.driver() is not None
                         and graph_launch.enabled())
    e["us"] = measure.host_time_us(fn, samples=5 if settings.quick else 15)
    e["gpu_us"] = settings.time(fn)
    return e


# --------------------------------------------------------------------------------- registry
def _specs_prefill(model, dtype: str = "bf16"):
    def specs(settings, arch, num_sms):
        lens = prefill_lengths(settings)
        return _variants(arch, num_sms, model, max(lens), max(lens), False, sinks=model.sinks, dtype=dtype)
    return specs


def _specs_chunked(model, dtype: str = "bf16"):
    b, qn, kn = CHUNKED_SHAPE
    return lambda settings, arch, num_sms: _variants(arch, num_sms, model, qn, kn, True, layouts=("soa",), dtype=dtype)


def _specs_decode(model, shape, cap=None, sinks=False, alibi=False):
    def specs(settings, arch, num_sms):
        ctx = decode_contexts(settings, shape)
        maxk = max(min(c, cap) for c in ctx) if cap else max(ctx)
        return _variants(arch, num_sms, model, 1, maxk, True, sinks=sinks, alibi=alibi)
    return specs


def _specs_dense(heads, d, seqlen, causal, heads_kv=None, dv=None, dtype: str = "bf16"):
    return lambda settings, arch, num_sms: _variants(arch, num_sms, _dense_preset(heads, d, heads_kv, dv), seqlen,
                                                     seqlen, False, layouts=("soa",), causal=causal, dtype=dtype)


def _specs_plan(model):
    return lambda settings, arch, num_sms: _variants(arch, num_sms, model, 4096, 4096, False)


def _specs_trace_sort(model):
    def specs(settings, arch, num_sms):
        lq, lk = _skewed(settings, 512, model)
        return _variants(arch, num_sms, model, max(lq), max(lk), False, layouts=("soa",))
    return specs


def _specs_sinks(model, which):
    """The kernels of a cost entry (sinks_*, alibi_*, variant_*): the plain call's and the built-in
    feature's variants (a user variant's kernels compile on its first call)."""
    alibi = which.startswith(("alibi_", "variant_alibi_"))
    sinks = which.startswith("sinks_")
    if which.startswith("variant_"):
        model = _plain(model)
        if which.startswith("variant_softcap_"):
            model = replace(model, softcap=VARIANT_SOFTCAP)

    def specs(settings, arch, num_sms):
        if which.endswith("_decode_b128_paged16"):
            q, k, paged, layouts = 1, max(decode_contexts(settings, "decode_trace_b128_paged16")), True, ("soa",)
        elif which.endswith("_prefill_s4k_b4"):
            q = k = NONCAUSAL_PREFILL[1]
            paged, layouts = False, ("soa",)
        else:
            q = k = SINKS_PREFILL_TOKENS
            paged, layouts = False, ("soa",)
        causal = not which.endswith("_prefill_s4k_b4")
        out = _variants(arch, num_sms, model, q, k, paged, layouts=layouts, causal=causal)
        if alibi or sinks:
            out += _variants(arch, num_sms, model, q, k, paged, layouts=layouts, causal=causal, sinks=sinks, alibi=alibi)
        if which.startswith("fp8_"):   # fp8_entry's FP8 calls: an e4m3 cache with a bf16 q (prefill too: FP8 q)
            for qd in (("", "e4m3") if not paged else ("",)):
                out += _variants(arch, num_sms, model, q, k, paged, layouts=layouts, causal=causal, kv_dtype="e4m3",
                                 q_dtype=qd)
        return out
    return specs


def _specs_mixed(model, batch: str = "mixed_trace"):
    def specs(settings, arch, num_sms):
        pre_q, pre_k, dec_k = mixed_lengths(settings, batch)
        out = []
        for mq, mk in ((max(pre_q), max(pre_k + dec_k)), (max(pre_q), max(pre_k)), (1, max(dec_k))):
            out += _variants(arch, num_sms, model, mq, mk, True, layouts=("soa",))
        return out
    return specs


def registry(suites, models: list[ModelPreset], dtypes=DEFAULT_DTYPES) -> list[EntryDef]:
    """The entries of the given suites whose dtype is one of ``dtypes`` (``DTYPES`` or "all"), in
    run order: every suite for the first preset (the single-shape entries use it), then the
    per-model prefill and decode entries of the others; the fp16 entries (the first preset's
    issue-22 prefill shapes) after the bf16 prefill entries of the first preset.

    Raises ValueError for an unknown suite name or dtype.
    """
    suites = list(SUITES) if "all" in suites else list(suites)
    bad = [s for s in suites if s not in SUITES]
    if bad:
        raise ValueError(f"unknown suite(s) {bad} (choose from {', '.join(SUITES)}, all)")
    dtypes = list(DTYPES) if "all" in dtypes else list(dtypes)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise ValueError(f"unknown dtype(s) {bad or dtypes} (choose from {', '.join(DTYPES)}, all)")
    first = models[0] if models else PRESETS[DEFAULT_MODEL]
    out: list[EntryDef] = []

    def per_model(m, first_pass: bool):
        # a model whose layers alternate (gpt-oss) also runs its windowed layers' prefill and
        # 128-request decode (``<entry>_<preset>-w<window>``)
        flavours = m.layer_flavours()
        if "prefill" in suites:
            if first_pass:
                for name, b, h, s, d, causal, hkv, dv in DENSE_SHAPES:
                    out.append(EntryDef(name, "prefill", None,
                                        lambda st, a=(name, b, h, s, d, causal, hkv, dv): dense_entry(st, *a),
                                        _specs_dense(h, d, s, causal, hkv, dv)))
            for f in flavours:
                out.append(EntryDef(entry_name("prefill_varlen_trace", f), "prefill", f.name,
                                    lambda st, f=f: varlen_prefill_entry(st, f), _specs_prefill(f)))
            if first_pass:
                for ps in CHUNKED_PAGE_SIZES:
                    out.append(EntryDef(entry_name(f"prefill_chunked_paged{ps}", m), "prefill", m.name,
                                        lambda st, ps=ps, m=m: chunked_prefill_entry(st, ps, m),
                                        _specs_chunked(m)))
            if first_pass and "fp16" in dtypes:   # issue 22's prefill shapes in fp16 too
                for name, b, h, s, d, causal, hkv, dv in DENSE_SHAPES:
                    out.append(EntryDef(name + FP16_SUFFIX, "prefill", None,
                                        lambda st, a=(name + FP16_SUFFIX, b, h, s, d, causal, hkv, dv):
                                        dense_entry(st, *a, dtype="fp16"),
                                        _specs_dense(h, d, s, causal, hkv, dv, dtype="fp16"), dtype="fp16"))
                f = flavours[0]
                out.append(EntryDef(entry_name("prefill_varlen_trace", f) + FP16_SUFFIX, "prefill", f.name,
                                    lambda st, f=f: varlen_prefill_entry(st, f, dtype="fp16"),
                                    _specs_prefill(f, dtype="fp16"), dtype="fp16"))
                for ps in CHUNKED_PAGE_SIZES:
                    out.append(EntryDef(entry_name(f"prefill_chunked_paged{ps}", m) + FP16_SUFFIX, "prefill", m.name,
                                        lambda st, ps=ps, m=m: chunked_prefill_entry(st, ps, m, dtype="fp16"),
                                        _specs_chunked(m, dtype="fp16"), dtype="fp16"))
        if "decode" in suites:
            for shape in DECODE_SHAPES:
                for f in (flavours if shape == "decode_trace_b128_paged16" else flavours[:1]):
                    out.append(EntryDef(entry_name(shape, f), "decode", f.name,
                                        lambda st, shape=shape, f=f: decode_entry(st, shape, f),
                                        _specs_decode(f, shape, sinks=f.sinks)))
            if first_pass:
                out.append(EntryDef(entry_name(AZURE_DECODE_SHAPE, m), "decode", m.name,
                                    lambda st, m=m: decode_entry(st, AZURE_DECODE_SHAPE, m),
                                    _specs_decode(m, AZURE_DECODE_SHAPE, sinks=m.sinks)))
                out.append(EntryDef(entry_name("graph_decode_step_b128", m), "decode", m.name,
                                    lambda st, m=m: graph_decode_step_entry(st, m),
                                    lambda st, arch, n, m=m: _variants(arch, n, m, 1, 32768, True, sinks=m.sinks)))
        if first_pass:
            for which, suite in SINKS_ENTRIES:
                if suite in suites:
                    out.append(EntryDef(entry_name(which, m), suite, m.name,
                                        lambda st, w=which, m=m: sinks_entry(st, w, m), _specs_sinks(m, which)))
            for which, suite in ALIBI_ENTRIES:
                if suite in suites:
                    out.append(EntryDef(entry_name(which, m), suite, m.name,
                                        lambda st, w=which, m=m: alibi_entry(st, w, m), _specs_sinks(m, which)))
            for which, suite in FP8_ENTRIES:
                if suite in suites:
                    out.append(EntryDef(entry_name(which, m), suite, m.name,
                                        lambda st, w=which, m=m: fp8_entry(st, w, m), _specs_sinks(m, which),
                                        dtype="e4m3"))
            if "prefill" in suites:
                for which in VARIANT_PREFILL_ENTRIES:
                    out.append(EntryDef(entry_name(which, m), "prefill", m.name,
                                        lambda st, w=which, m=m: variant_prefill_entry(st, w, m),
                                        _specs_sinks(m, which)))
                for which in VARIANT_EXAMPLE_ENTRIES:
                    out.append(EntryDef(entry_name(which, m), "prefill", m.name,
                                        lambda st, w=which, m=m: variant_example_entry(st, w, m),
                                        _specs_sinks(m, which)))

    if "compile" in suites:
        out.append(EntryDef("compile_cold_variant", "compile", None, compile_cold_entry))
        out.append(EntryDef("compile_cold_call", "compile", None, compile_cold_call_entry))
        out.append(EntryDef("compile_warm_load", "compile", None, compile_warm_entry))
        out.append(EntryDef("dispatch_in_memory", "compile", first.name, lambda st, m=first: dispatch_entry(st, m),
                            lambda st, arch, n: [compile_spec(arch)]))
        out.append(EntryDef(VARIANT_COMPILE_ENTRY, "compile", first.name,
                            lambda st, m=first: variant_compile_first_call_entry(st, m)))
    if "overhead" in suites:
        for which in OVERHEAD_ENTRIES:
            out.append(EntryDef(entry_name(which, first), "overhead", first.name,
                                lambda st, w=which, m=first: overhead_entry(st, w, m),
                                _specs_decode(first, "decode_trace_b32_paged16", cap=OVERHEAD_CONTEXT_CAP)))
    if "scheduler" in suites:
        for b in SCHEDULER_BATCHES:
            out.append(EntryDef(entry_name(f"scheduler_b{b}", first), "scheduler", first.name,
                                lambda st, b=b, m=first: scheduler_entry(st, b, m), _specs_plan(first)))
        for srt in (True, False):
            out.append(EntryDef(entry_name("varlen_trace_sorted" if srt else "varlen_trace_unsorted", first),
                                "scheduler", first.name, lambda st, s=srt, m=first: trace_sort_entry(st, s, m),
                                _specs_trace_sort(first)))
    per_model(first, True)
    if "mixed" in suites:
        out.append(EntryDef(entry_name("mixed_trace", first), "mixed", first.name,
                            lambda st, m=first: mixed_entry(st, m), _specs_mixed(first)))
        out.append(EntryDef(entry_name(MIXED_FP8_ENTRY, first), "mixed", first.name,
                            lambda st, m=first: mixed_entry(st, m, kv_dtype="e4m3"), dtype="e4m3"))
        out.append(EntryDef(entry_name(MIXED_FP8_QQ_ENTRY, first), "mixed", first.name,
                            lambda st, m=first: mixed_entry(st, m, kv_dtype="e4m3", quantize_q=True), dtype="e4m3"))
        for b in MIXED_BATCHES:
            if b != "mixed_trace":
                out.append(EntryDef(entry_name(b, first), "mixed", first.name,
                                    lambda st, m=first, b=b: mixed_entry(st, m, batch=b), _specs_mixed(first, b)))
    for m in models[1:]:
        per_model(m, False)
    return [d for d in out if d.dtype in dtypes]
