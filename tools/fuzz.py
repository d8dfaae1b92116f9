"""Numerical fuzzing of ``kernelgen.varlen_attention`` against the float64 reference (issue 7).

Every batch draws a random configuration over the supported features (``draw_case``: lengths 0 to
16384 skewed short with many empty requests, packed / packed + seqused_k / paged K/V with page
sizes 1, 16, 64, 256 in random page order, forced splits 1..64 or automatic, GQA 1/2/4/8, no mask /
causal / sliding windows (left-only, right > 0, right-only), softcap, bf16 / fp16, head dims
64/128 mostly and 96/192/256 and 192x128 sometimes, both metadata layouts, sort / head_swizzle,
pack_gqa None/True/False, strided q/k/v views, padding rows past ``cu_seqlens_q[-1]``, and in
about one batch of six an FP8 K/V cache, e4m3 or e5m2, with per-(request, KV head) descales in
[0.5, 2): the cache holds ``x / descale`` quantised, so the dequantised keys and values are about
N(0, 1) as ``reference.tolerance`` assumes; in about half of those an FP8 query too,
``q_fp8``: q in e4m3 quantised the same way with its own per-(request, KV head) ``q_descale``,
the case's 16-bit dtype the output's, passed as ``out_dtype`` in about half of them, else set
by ``out`` or the bf16 default), runs the call with ``out`` pre-filled with NaN and every buffer the
call allocates itself (``lse``, the metadata, the split-KV partials) poisoned (NaN / -7), and
compares with the float64 reference (which dequantises the same FP8 values exactly, q with
``q_descale`` included): ``reference.tolerance(dtype, kv_dtype)`` on values, exact 0 / -inf on
rows that see no key, no NaN, no unwritten rows, nothing written past the last request.

An FP8-q call that ran the Hopper FP8 tensor-core variant (its prepared call's attention kernel,
read right after the call, has ``_fp8mma`` in its name: on sm_90a the prefill-shaped calls at
head dims 64 / 128, and 256 without split-KV) rounds P to e4m3 and
accumulates Q K^T and P V with 13-bit mantissas, so its values are compared within the per-element bounds of ``attention_reference(..., fp8_mma_bounds=True)``
instead, as tests/gpu/test_fp8_mma_gpu.py's ``check_mma`` does (|out - ref| <= bound, the mean
error within a quarter of the mean bound, the LSE within 2e-3 + 1e-4 |lse| + its bound); every
other FP8-q call converts q exactly to the output dtype and keeps the tolerance.  Each batch's
result says which (``"fp8_mma": true``, ``"kernel"``), and the summary counts those batches
apart (``"fp8_mma"``: batches, max error, worst error / bound; coverage ``fp8_q_kernel``).  The
FP8-q fields are the case's last draws, made only for FP8-cache cases, so every other field of a
seed's case (and every case without an FP8 cache) is what it was before FP8 queries were
fuzzed.  The prewarm compiles the FP8-q kernels too (``case_recipe`` passes ``q_dtype="e4m3"``
to the dispatcher as ``varlen_attention`` does).

ALiBi (about ``ALIBI_SHARE`` of the batches: slopes per head, or per request and head in about
``ALIBI_BATCH_SHARE`` of them) and attention sinks (about ``SINKS_SHARE``: a logit a query head,
some heads without one, -inf) are drawn after everything else (``alibi``, ``sinks``), so every
other field of a seed's case is what it was before; their values come from their own generators
(``build_inputs``), so the other inputs are too.  The reference takes the same slopes and sinks.

``quantize_q`` (bool) is the case's very last draw, made only for a case with an e4m3 cache and a
16-bit q (``kv_dtype == "e4m3"``, not ``q_fp8``), true in about ``QUANTIZE_Q_SHARE`` of them: the
call then passes ``quantize_q=True`` (every input is the case's as before: the flag needs no
values).  When that call ran the FP8 tensor-core variant (``_fp8mma`` in its kernel's name, as
above) kernelgen quantised q on the device first, so the reference's q is q quantised the same
way, ``q8.float() * q_descale`` per row, with (q8, q_descale) from
``kernelgen.launch.quant_q.quantize_reference`` on the case's own q (``quantized_q``: the torch-op
specification, not the quantisation kernel the call runs on sm_89 and up), and the values are
compared within the variant's ``fp8_mma_bounds``: this checks the attention kernel given that
quantisation (tests/gpu/test_quant_q_gpu.py checks the quantisation itself, bit for bit against
``quantize_reference``).  Any other such call (decode-shaped, another head dim, the sm_80
mainloop, ALiBi) keeps q exact and has the ordinary FP8-cache check.  ``prewarm`` compiles the
kernels the call decides on (``case_recipe``: the e4m3-q recipe where it takes the tensor-core
variant, and then the quantisation kernel too, else the 16-bit q's).  The summary counts these
batches apart (``"quantize_q"``: batches, those on the tensor-core variant, their max error and
worst error / bound; coverage ``quantize_q`` and ``quantize_q_kernel``), and a failing one says so.

``max_num_splits`` (the cap on the automatic split count, FA3's varlen ``num_splits``) is drawn
after ``quantize_q``, only for a case with automatic splits (``num_splits`` 0): about
``SPLIT_CAP_SHARE`` of them pass one of ``SPLIT_CAPS`` (coverage ``splits`` "capped"); the other
fields of a seed's case are what they were before.

Usage (GPU):
    python tools/fuzz.py --batches 2000 --seed 1 [--json PATH] [--time-limit 300]
    python tools/fuzz.py --replay SEED                 # one batch, verbose
    python tools/fuzz.py --sanitize-subset [--json P]  # tiny fixed cases, one per kernel family
                                                       # (run under compute-sanitizer by tools/sanitize.sh)
CPU only:
    python tools/fuzz.py --batches 2000 --seed 1 --prewarm-only --arch sm_90a --num-sms 132
    python tools/fuzz.py --show 5 --seed 1             # print the first cases' configs

Each batch has its own seed (drawn from ``--seed``); a failing batch prints it, and
``--replay SEED`` redraws the same case and the same inputs.  Batches are bounded (``MAX_Q_TOKENS``
query rows, ``MAX_KV_TOKENS`` stored keys, ``MAX_REF_ELEMS`` float64 logits for the reference) so
2000 batches take a few minutes on an H200.  The final line is
``fuzz: N batches, M mismatches, U unwritten rows, seed S, T s``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# ---------------------------------------------------------------------------------------------
# Limits and feature tables (pure Python: draw_case needs neither torch nor a GPU)

MAX_LEN = 16384              #: longest request (query or keys), tokens
MAX_Q_TOKENS = 20000         #: query rows of one batch (padding rows included)
MAX_KV_TOKENS = 200000       #: keys stored for one batch (packed rows, or pages x page_size)
MAX_REF_ELEMS = 300_000_000  #: sum over requests of q_len * k_len * num_heads_q (reference logits)
MAX_BATCH = 8192             #: metadata.MAX_CAPACITY
MAX_ACCUM_BYTES = 8 << 30    #: forced split-KV partials: num_splits * Hq * total_q * head_dim_v * 4 bytes
POISON_INT = -7              #: fill of int32 buffers the call allocates (negative: never a count)
MAX_LOGGED_FAILURES = 30     #: mismatches printed with their case (all are counted; --json keeps 200)

DTYPES = ("bf16", "fp16")
HEAD_DIM_PAIRS = ((64, 64), (128, 128), (96, 96), (192, 192), (256, 256), (192, 128))
HEAD_DIM_WEIGHTS = (0.36, 0.44, 0.05, 0.05, 0.05, 0.05)
GQA_RATIOS = (1, 2, 4, 8)
KV_HEADS = (1, 2, 4, 8)
KV_HEADS_WEIGHTS = (0.3, 0.35, 0.25, 0.1)
PAGE_SIZES = (1, 16, 64, 256)
PAGE_SIZE_WEIGHTS = (0.15, 0.4, 0.25, 0.2)
PHASES = ("decode", "prefill", "chunked", "random", "mixed")
PHASE_WEIGHTS = (0.25, 0.2, 0.2, 0.15, 0.2)
MASKS = ("none", "causal", "causal_window", "left_only", "left_right", "right_only")
MASK_WEIGHTS = (0.28, 0.32, 0.14, 0.08, 0.1, 0.08)
SOFTCAPS = (1.0, 5.0, 20.0, 50.0)
SPLIT_CHOICES = (2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 32, 48, 63, 64)
BOUNDARY_LENS = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025,
                 4095, 4096, 16383, 16384)
WINDOW_SIZES = (0, 1, 2, 3, 7, 15, 16, 17, 31, 64, 100, 127, 128, 129, 255, 511, 1000, 2048, 4096)
HINTS = ("exact", "none", "loose")
HINT_WEIGHTS = (0.7, 0.15, 0.15)
KV_DTYPES = ("e4m3", "e5m2")  #: FP8 K/V caches (``kv_dtype``)
FP8_SHARE = 1 / 6             #: share of the batches with an FP8 K/V cache
DESCALE_RANGE = (0.5, 2.0)    #: k_descale / v_descale (and q_descale) per (request, KV head), uniform in [lo, hi)
Q_FP8_SHARE = 0.5             #: share of the FP8-cache batches whose q is FP8 too (e4m3, ``q_fp8``)
OUT_DTYPE_SHARE = 0.5         #: share of the FP8-q batches passing ``out_dtype`` explicitly (else out / bf16 decide)
ALIBI_SHARE = 0.12            #: share of the batches with ALiBi (``alibi_slopes=``, issue 25)
ALIBI_BATCH_SHARE = 0.3       #: share of the ALiBi batches whose slopes are per request, (batch, num_heads_q)
SINKS_SHARE = 0.12            #: share of the batches with attention sinks (``sinks=``, issue 25)
SINK_NONE_SHARE = 0.1         #: share of a sink batch's heads without a sink (-inf)
QUANTIZE_Q_SHARE = 0.5        #: share of the e4m3-cache, 16-bit-q batches passing ``quantize_q=True``
SPLIT_CAP_SHARE = 0.3         #: share of the automatic-split batches passing a ``max_num_splits`` cap
SPLIT_CAPS = (1, 2, 3, 4, 8, 16)   #: the caps drawn (16: vLLM's full-CUDA-graph bound through compat)


def _pick(rng, values, p=None):
    if p is None:
        return values[int(rng.integers(len(values)))]
    p = np.asarray(p, dtype=np.float64)
    return values[int(rng.choice(len(values), p=p / p.sum()))]


def _loguniform(rng, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, math.floor(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


def draw_len(rng, hi: int = MAX_LEN) -> int:
    """A request length in [1, hi], skewed short: mostly < 256, some up to 2048, a few up to 16384,
    and boundary values around tile and page sizes."""
    u = rng.random()
    if u < 0.08:
        return min(hi, int(_pick(rng, BOUNDARY_LENS)))
    if u < 0.62:
        return _loguniform(rng, 1, min(hi, 256))
    if u < 0.88:
        return _loguniform(rng, min(hi, 256), min(hi, 2048))
    return _loguniform(rng, min(hi, 2048), hi)


def _draw_batch(rng, phase: str) -> int:
    u = rng.random()
    if u < 0.1:
        return 1
    if u < 0.45:
        return int(rng.integers(2, 9))
    if u < 0.85:
        return int(rng.integers(9, 65))
    if u < 0.97:
        return int(rng.integers(65, 513))
    if u < 0.99 or phase != "decode":
        return int(rng.integers(513, 2049))
    return int(rng.integers(2049, MAX_BATCH + 1))


def _draw_lengths(rng, phase: str, batch: int) -> tuple[list, list]:
    q, k = [], []
    spec_decode = rng.random() < 0.2
    for _ in range(batch):
        kind = phase if phase != "mixed" else ("decode" if rng.random() < 0.6 else "chunked")
        if kind == "decode":
            kl = draw_len(rng)
            ql = int(rng.integers(2, 10)) if spec_decode else 1
        elif kind == "prefill":
            kl = ql = draw_len(rng)
        elif kind == "chunked":
            kl = draw_len(rng)
            ql = min(kl, draw_len(rng, 2048))
        else:                                  # random: q_len > k_len happens
            ql, kl = draw_len(rng), draw_len(rng)
        q.append(ql)
        k.append(kl)
    return q, k


def _water_fill(x: np.ndarray, limit: int) -> np.ndarray:
    """Cap the largest entries of x (non-negative ints) so that sum(x) <= limit."""
    if x.sum() <= limit:
        return x
    s = np.sort(x)
    n = len(s)
    lo, hi = 0, int(s[-1])
    while lo < hi:                               # largest cap T with sum(min(x, T)) <= limit
        mid = (lo + hi + 1) // 2
        if np.minimum(s, mid).sum() <= limit:
            lo = mid
        else:
            hi = mid - 1
    out = np.minimum(x, lo)
    del n
    return out


def stored_keys(case: dict) -> int:
    """Keys held in k/v for the batch: packed rows (seqused slack included), or pages x page_size."""
    if case["kv"] == "paged":
        ps = case["page_size"]
        return (sum(-(-n // ps) for n in case["klens"]) + case["spare_pages"]) * ps
    return sum(case["klens"]) + sum(case["kv_slack"])


def total_q_rows(case: dict) -> int:
    return sum(case["qlens"]) + case["pad_rows"]


def ref_elems(case: dict) -> int:
    return sum(a * b for a, b in zip(case["qlens"], case["klens"])) * case["num_heads_q"]


def _shrink(case: dict) -> None:
    """Enforce the batch limits by shortening the longest requests first (deterministic)."""
    q = np.asarray(case["qlens"], dtype=np.int64)
    k = np.asarray(case["klens"], dtype=np.int64)
    q = _water_fill(q, MAX_Q_TOKENS - case["pad_rows"])
    if case["kv"] == "paged":
        ps = case["page_size"]
        budget_pages = MAX_KV_TOKENS // ps - case["spare_pages"]
        while (-(-k // ps)).sum() > budget_pages:
            pages = -(-k // ps)
            k = np.minimum(k, _water_fill(pages, budget_pages) * ps)
    else:
        k = _water_fill(k, MAX_KV_TOKENS - int(sum(case["kv_slack"])))
    hq = case["num_heads_q"]
    for _ in range(100000):
        cost = q * k
        if int(cost.sum()) * hq <= MAX_REF_ELEMS:
            break
        i = int(np.argmax(cost))
        if q[i] >= k[i]:
            q[i] //= 2
        else:
            k[i] //= 2
    case["qlens"] = [int(x) for x in q]
    case["klens"] = [int(x) for x in k]
    if case["num_splits"] > 1:                   # the call allocates the partials for every split
        row_bytes = case["num_heads_q"] * max(1, total_q_rows(case)) * case["head_dim_v"] * 4
        case["num_splits"] = max(1, min(case["num_splits"], MAX_ACCUM_BYTES // row_bytes))


def draw_case(rng, seed: int | None = None) -> dict:
    """One random batch configuration (JSON-serialisable, pure Python/numpy).

    ``rng`` is a ``numpy.random.Generator``; the same generator state gives the same case.
    Keys: seed, dtype, head_dim, head_dim_v, num_heads_q, num_heads_kv, phase, qlens, klens (keys
    each request sees), kv ("packed" | "paged"), seqused (packed: pass seqused_k), kv_slack (packed:
    unused keys after each request), page_size, spare_pages, extra_cols (paged), causal, window
    [left, right], mask (the drawn kind), softcap, softmax_scale, q_scale, num_splits, pack_gqa,
    layout, sort, head_swizzle, hint ("exact" | "none" | "loose" max_seqlen hints), return_lse,
    out_given, pad_rows (query rows past the last request), strided (q/k/v are views), interleaved_kv,
    kv_dtype (None, or an FP8 cache "e4m3" / "e5m2": about ``FP8_SHARE`` of the cases; drawn after
    every field above, so those are what they were before FP8 caches were fuzzed), q_fp8 (an e4m3 q
    with ``q_descale``: about ``Q_FP8_SHARE`` of the FP8-cache cases, never without one) and
    out_dtype (None, or the case's ``dtype`` passed as ``out_dtype``: FP8-q cases only, about
    ``OUT_DTYPE_SHARE`` of them, and always for fp16 without ``out``, whose output would be bf16
    otherwise); these two are drawn last, and only for FP8-cache cases, so every other field of a
    seed's case is what it was before FP8 queries were fuzzed.  ``dtype`` is the output's dtype
    (and the kernels' 16-bit one) in every case.  ``alibi`` (None, "heads" or "batch_heads": the
    shape of ``alibi_slopes``) and ``sinks`` (bool) are drawn after all of these, for every case.
    ``quantize_q`` (bool: the call passes ``quantize_q=True``) comes next, made only for an e4m3 cache
    with a 16-bit q (``kv_dtype == "e4m3"`` and not ``q_fp8``; False without a draw otherwise), true
    in about ``QUANTIZE_Q_SHARE`` of those.  ``max_num_splits`` (int: the call's cap on the automatic
    split count, 0 = none) is the last draw of all, made only with ``num_splits`` 0: one of
    ``SPLIT_CAPS`` in about ``SPLIT_CAP_SHARE`` of those.  So every other field of a seed's case is
    what it was before these were fuzzed (a seed of an older report replays with them drawn: about
    15 % of its batches now pass a cap).
    """
    c: dict = {"seed": seed}
    c["dtype"] = _pick(rng, DTYPES)
    c["head_dim"], c["head_dim_v"] = _pick(rng, HEAD_DIM_PAIRS, HEAD_DIM_WEIGHTS)
    hkv = int(_pick(rng, KV_HEADS, KV_HEADS_WEIGHTS))
    ratio = int(_pick(rng, GQA_RATIOS))
    c["num_heads_kv"], c["num_heads_q"] = hkv, hkv * ratio
    c["phase"] = phase = _pick(rng, PHASES, PHASE_WEIGHTS)
    batch = _draw_batch(rng, phase)
    qlens, klens = _draw_lengths(rng, phase, batch)
    pz_q = float(_pick(rng, (0.0, 0.0, 0.05, 0.2, 0.5)))
    pz_k = float(_pick(rng, (0.0, 0.0, 0.05, 0.2, 0.5)))
    if batch > 2048:
        pz_q = 0.9                               # huge decode batches: mostly padding-like requests
    for i in range(batch):
        if rng.random() < pz_q:
            qlens[i] = 0
            if phase == "prefill":
                klens[i] = 0
        if rng.random() < pz_k:
            klens[i] = 0
    c["qlens"], c["klens"] = qlens, klens

    c["kv"] = "paged" if rng.random() < 0.45 else "packed"
    c["page_size"] = None
    c["spare_pages"] = 0
    c["extra_cols"] = 0
    c["seqused"] = False
    c["kv_slack"] = [0] * batch
    if c["kv"] == "paged":
        sizes = [ps for ps in PAGE_SIZES if (batch + 8) * ps <= MAX_KV_TOKENS // 2] or [1]
        weights = [PAGE_SIZE_WEIGHTS[PAGE_SIZES.index(ps)] for ps in sizes]
        c["page_size"] = int(_pick(rng, sizes, weights))
        c["spare_pages"] = int(rng.integers(1, 9))
        c["extra_cols"] = int(rng.integers(0, 4))
    else:
        c["seqused"] = bool(rng.random() < 0.25)
        if c["seqused"]:
            c["kv_slack"] = [int(x) for x in rng.integers(0, 18, size=batch)]

    mask = _pick(rng, MASKS, MASK_WEIGHTS)
    c["mask"] = mask
    w = lambda: int(_pick(rng, WINDOW_SIZES)) if rng.random() < 0.7 else int(rng.integers(0, 5000))  # noqa: E731
    if mask == "none":
        c["causal"], c["window"] = False, [-1, -1]
    elif mask == "causal":
        c["causal"], c["window"] = (True, [-1, -1]) if rng.random() < 0.8 else (False, [-1, 0])
    elif mask == "causal_window":
        r = int(_pick(rng, (-1, 0, 0, 5)))       # causal clamps right to 0 (right > 0 included)
        c["causal"], c["window"] = True, [w(), r]
    elif mask == "left_only":
        c["causal"], c["window"] = False, [w(), -1]
    elif mask == "left_right":
        c["causal"], c["window"] = False, [w(), max(1, w())]
    else:                                        # right_only
        c["causal"], c["window"] = False, [-1, w()]

    c["softcap"] = float(_pick(rng, SOFTCAPS)) if rng.random() < 0.25 else 0.0
    c["q_scale"] = float(_pick(rng, (1.0, 1.0, 1.0, 1.0, 0.25, 2.5)))
    c["softmax_scale"] = None
    if c["softcap"] == 0 and rng.random() < 0.1:
        c["softmax_scale"] = round(float(rng.uniform(0.02, 0.2)), 4)
    u = rng.random()
    c["num_splits"] = 0 if u < 0.5 else 1 if u < 0.65 else int(_pick(rng, SPLIT_CHOICES)) if u < 0.85 \
        else int(rng.integers(2, 65))
    c["pack_gqa"] = _pick(rng, (None, True, False), (0.5, 0.25, 0.25))
    c["layout"] = _pick(rng, ("soa", "aos"))
    c["sort"] = bool(rng.random() < 0.75)
    c["head_swizzle"] = bool(rng.random() < 0.75)
    c["hint"] = _pick(rng, HINTS, HINT_WEIGHTS)
    c["return_lse"] = bool(rng.random() < 0.85)
    c["out_given"] = bool(rng.random() < 0.8)
    c["pad_rows"] = int(rng.integers(1, 65)) if rng.random() < 0.15 else 0
    c["strided"] = bool(rng.random() < 0.15)
    c["interleaved_kv"] = bool(c["kv"] == "paged" and c["head_dim"] == c["head_dim_v"] and rng.random() < 0.15)
    c["kv_dtype"] = _pick(rng, KV_DTYPES) if rng.random() < FP8_SHARE else None
    # the FP8-q draws come last and only for an FP8 cache (no draw otherwise): the fields above,
    # and whole cases without an FP8 cache, are those of the seed before FP8 queries were fuzzed
    c["q_fp8"], c["out_dtype"] = False, None
    if c["kv_dtype"] and rng.random() < Q_FP8_SHARE:
        c["q_fp8"] = True
        explicit = rng.random() < OUT_DTYPE_SHARE
        if explicit or (c["dtype"] == "fp16" and not c["out_given"]):
            c["out_dtype"] = c["dtype"]
    # ALiBi and sinks last (every field above is what the seed drew before they were fuzzed)
    c["alibi"] = None
    if rng.random() < ALIBI_SHARE:
        c["alibi"] = "batch_heads" if rng.random() < ALIBI_BATCH_SHARE else "heads"
    c["sinks"] = bool(rng.random() < SINKS_SHARE)
    # quantize_q after everything (every field above is what the seed drew before it was fuzzed),
    # drawn only for an e4m3 cache with a 16-bit q (no draw otherwise)
    c["quantize_q"] = False
    if c["kv_dtype"] == "e4m3" and not c["q_fp8"]:
        c["quantize_q"] = bool(rng.random() < QUANTIZE_Q_SHARE)
    # the split cap after everything (every field above is what the seed drew before it was fuzzed),
    # drawn only for automatic splits (a cap beside a forced num_splits is refused)
    c["max_num_splits"] = 0
    if c["num_splits"] == 0 and rng.random() < SPLIT_CAP_SHARE:
        c["max_num_splits"] = int(_pick(rng, SPLIT_CAPS))
    _shrink(c)
    return c


def case_for_seed(seed: int) -> dict:
    """The case of one batch seed (what ``--replay SEED`` runs)."""
    return draw_case(np.random.default_rng(seed), seed=int(seed))


def batch_seeds(seed: int, n: int) -> list:
    """The per-batch seeds of a run (deterministic for ``seed``)."""
    return [int(x) for x in np.random.default_rng(seed).integers(0, 2 ** 31 - 1, size=n)]


def call_hints(case: dict) -> tuple:
    """(max_seqlen_q, max_seqlen_k) passed to the call."""
    mq, mk = max(case["qlens"], default=0), max(case["klens"], default=0)
    if case["hint"] == "none":
        return None, None
    if case["hint"] == "loose":
        return 2 * mq + 7, 2 * mk + 7
    return mq, mk


def page_layout(case: dict) -> tuple:
    """(need pages per request, page_table width, num_pages) of a paged case."""
    ps = case["page_size"]
    need = [-(-n // ps) for n in case["klens"]]
    width = max(need + [0]) + case["extra_cols"]
    return need, max(1, width), sum(need) + case["spare_pages"]


#: Compute capability of each compile target, for the device a case's kernels are chosen for.
_CAPABILITY = {"sm_80": (8, 0), "sm_86": (8, 6), "sm_89": (8, 9), "sm_90a": (9, 0)}


def case_recipe(case: dict, arch: str, num_sms: int):
    """The launch recipe the dispatcher makes for this case on a device of ``arch`` with
    ``num_sms`` SMs (``selection.decide.decide`` with the signature ``varlen_attention`` derives,
    the environment's overrides); None when the call launches nothing.  An FP8-q case's signature
    has ``q_dtype="e4m3"`` (``arguments.varlen_call`` passes validation's ``sizes["q_dtype"]``), so
    on sm_90a its prefill-shaped calls at head dims 64 / 128 (256 without a soft-cap, window or
    split-KV) get the FP8 tensor-core variant (``AttentionSpec.fp8_mma``) and the rest the FP8-cache kernels of the output dtype (``dtype``).
    A ``quantize_q`` case (an e4m3 cache, a 16-bit q) is decided as ``varlen_attention`` decides
    it: with ``q_dtype="e4m3"`` first (and the TMA compatibility of the contiguous e4m3 copy of q
    the kernels would read), whose recipe it runs when that is one class on the FP8 tensor-core
    variant (q quantised), else as the 16-bit q's call (no ALiBi: never quantised)."""
    import dataclasses

    from kernelgen.kernels.device import Device
    from kernelgen.selection import decide, validation
    from kernelgen.selection.settings import Settings

    total_q = total_q_rows(case)
    if total_q == 0 or not case["qlens"]:
        return None
    mask, left, right = validation.window(tuple(case["window"]), case["causal"])
    mq, mk = call_hints(case)
    paged = case["kv"] == "paged"
    if mq is None:
        mq = total_q
    if mk is None:
        mk = page_layout(case)[1] * case["page_size"] if paged else stored_keys(case)
    sig = decide.CallSignature(
        dtype=case["dtype"], head_dim=case["head_dim"], head_dim_v=case["head_dim_v"],
        num_heads_q=case["num_heads_q"], num_heads_kv=case["num_heads_kv"], mask=mask, window_left=left,
        window_right=right, layout=case["layout"], max_seqlen_q=mq, max_seqlen_k=mk, paged=paged,
        page_size=case["page_size"] if paged else 0, softcap=case["softcap"] > 0, pack_gqa=case["pack_gqa"],
        num_splits=case["num_splits"], short_query_tokens=None, arch=None, tma_ok=_tma_ok(case),
        batch=len(case["qlens"]), rows=total_q, sort=case["sort"], head_swizzle=case["head_swizzle"],
        **({"kv_dtype": case["kv_dtype"]} if case.get("kv_dtype") else {}),
        **({"q_dtype": "e4m3"} if case.get("q_fp8") else {}),
        alibi=bool(case.get("alibi")), sinks=bool(case.get("sinks")), max_num_splits=case.get("max_num_splits", 0))
    device = Device(f"fuzz {arch}", _CAPABILITY[arch], num_sms, 50 * 2 ** 20)
    settings = Settings.from_env()
    if case.get("quantize_q") and case.get("kv_dtype") == "e4m3" and not case.get("q_fp8") and not case.get("alibi"):
        r8 = decide.decide(dataclasses.replace(sig, q_dtype="e4m3", tma_ok=_tma_ok(case, quantized=True)), device,
                           settings)
        attn = getattr(r8.variants, "attention", None)
        if r8.kind == "single" and attn is not None and attn.fp8_mma:
            return r8
    return decide.decide(sig, device, settings)


def _tma_ok(case: dict, quantized: bool = False) -> bool:
    """Whether the Hopper kernel's TMA can address the case's q/k/v (``tma.tma_compatible``, as
    ``varlen_attention`` decides it), from the same shapes and strides ``build_inputs`` gives the
    real tensors (its "meta" build: no memory).  The strided views keep 16-byte strides, so most
    strided cases are TMA-compatible too.  ``quantized``: q as the contiguous e4m3 copy a
    ``quantize_q`` call's kernels read instead."""
    import torch

    from kernelgen.kernels import tma
    inp = build_inputs(case, "meta")
    if quantized:
        inp["q"] = torch.empty(inp["q"].shape, dtype=torch.float8_e4m3fn, device="meta")
    return all(tma.tma_compatible(inp[n]) for n in ("q", "k", "v"))


def case_specs(case: dict, arch: str, num_sms: int) -> list:
    """The kernel specs a case launches (``case_recipe``), for pre-compiling; a ``quantize_q`` case
    whose recipe is the FP8 tensor-core variant also launches the kernel that quantises q
    (``spec.QuantSpec`` of the case's dtype) where there is one (``spec.FP8_CVT_ARCHS``; elsewhere
    torch ops quantise, as ``launch.quant_q.quantize`` does)."""
    from kernelgen.kernels.spec import FP8_CVT_ARCHS, QuantSpec

    r = case_recipe(case, arch, num_sms)
    if r is None:
        return []
    specs = list(r.specs)
    attn = getattr(r.variants, "attention", None)
    if case.get("quantize_q") and not case.get("q_fp8") and attn is not None and attn.fp8_mma \
            and arch in FP8_CVT_ARCHS:
        specs.append(QuantSpec(arch, case["dtype"]))
    return specs


def features(case: dict) -> dict:
    """Feature labels of a case (for coverage counts)."""
    d = {
        "dtype": case["dtype"], "head_dims": f"{case['head_dim']}x{case['head_dim_v']}",
        "gqa": case["num_heads_q"] // case["num_heads_kv"], "kv": case["kv"] + ("+seqused" if case["seqused"] else ""),
        "page_size": case["page_size"], "mask": case["mask"], "softcap": case["softcap"] > 0,
        "splits": ("capped" if case.get("max_num_splits") else "auto") if case["num_splits"] == 0
        else "1" if case["num_splits"] == 1 else "forced",
        "pack_gqa": str(case["pack_gqa"]), "layout": case["layout"], "sort": case["sort"],
        "head_swizzle": case["head_swizzle"], "phase": case["phase"],
        "zero_q": any(x == 0 for x in case["qlens"]), "zero_k": any(x == 0 for x in case["klens"]),
        "long": max(case["klens"] + case["qlens"] + [0]) > 8192, "pad_rows": case["pad_rows"] > 0,
        "strided": case["strided"], "hint": case["hint"], "kv_dtype": case.get("kv_dtype") or "16-bit",
        "q": "e4m3" if case.get("q_fp8") else "16-bit",
        "alibi": case.get("alibi") or "none", "sinks": bool(case.get("sinks")),
        "quantize_q": bool(case.get("quantize_q")),
        "out_dtype": "16-bit q" if not case.get("q_fp8") else "argument" if case.get("out_dtype")
        else "out" if case["out_given"] else "default",
    }
    return d


# ---------------------------------------------------------------------------------------------
# Inputs, the call and the comparison (torch; the call needs a GPU)


def build_inputs(case: dict, device="cuda") -> dict:
    """Tensors of a case on ``device`` ("cuda", "cuda:1", "cpu", or "meta" for shapes only).

    Values come from a torch generator seeded with the case seed (on the device for CUDA, so the
    same seed gives the same inputs on every GPU of one kind).  Returns q, k, v (views when
    ``strided``), cu_seqlens_q, cu_seqlens_k (None for paged), seqused_k, page_table, k_descale and
    v_descale (None without an FP8 cache), q_descale (None without an FP8 q), out_dtype (the torch
    dtype of the output), and the call's keyword arguments in ``kwargs``.

    An FP8 case (``kv_dtype``): k_descale / v_descale float32 (batch, num_heads_kv) uniform in
    ``DESCALE_RANGE`` (from the seed); k and v hold the 16-bit path's N(0, 1) draws divided by
    their request's and head's factor, quantised to FP8 (``x / descale``, as an engine stores a
    scaled cache), so the dequantised values are about N(0, 1); unused pages and the strided
    views' extra heads are quantised with factor 1.

    An FP8-q case (``q_fp8``): q_descale float32 (batch, num_heads_kv) uniform in ``DESCALE_RANGE``
    (from its own generator, so k_descale / v_descale and k / v are the FP8-cache case's); q holds
    the 16-bit path's draws (the same generator calls, ``q_scale`` included) divided by the factor
    of their request and KV head, quantised to e4m3 (padding rows past the last request and the
    strided view's extra heads with factor 1), so the dequantised q is the 16-bit case's within the
    e4m3 rounding.  ``kwargs`` then has ``q_descale``, and ``out_dtype`` when the case passes it.

    ALiBi (``alibi``): ``alibi_slopes`` float32, (num_heads_q,) or (batch, num_heads_q): the
    geometric slopes 2^(-8 (h + 1) / heads) of Press et al. times a factor in [0.25, 2) a head (and
    request), from their own generator.  Sinks (``sinks``): float32 (num_heads_q,), N(0, 2), about
    ``SINK_NONE_SHARE`` of the heads -inf (no sink), from their own generator.  ``kwargs`` then
    has ``alibi_slopes`` / ``sinks``, and the result the same tensors under those names.

    ``quantize_q``: ``kwargs`` has ``quantize_q=True`` (no tensor changes: q stays the 16-bit
    case's, and ``q_descale`` None; ``quantized_q`` gives the reference's q).
    """
    import torch

    dev = torch.device(device)
    meta = dev.type == "meta"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[case["dtype"]]
    seed = int(case["seed"] or 0)
    gen = None if meta else torch.Generator(device=dev).manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    hq, hkv, d, dv = case["num_heads_q"], case["num_heads_kv"], case["head_dim"], case["head_dim_v"]
    extra = 2 if case["strided"] else 0       # views with larger row strides (16-byte aligned)

    def randn(*shape, scale=1.0):
        if meta:
            return torch.empty(*shape, dtype=dtype, device=dev)
        x = torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32)
        if scale != 1.0:
            x.mul_(scale)
        return x.to(dtype)

    def heads_view(shape, heads_dim, scale=1.0):
        """randn of ``shape``, as a view of a tensor with ``extra`` more heads when strided."""
        if not extra:
            return randn(*shape, scale=scale)
        big = list(shape)
        big[heads_dim] += extra
        return randn(*big, scale=scale).narrow(heads_dim, 0, shape[heads_dim])

    qlens, klens = case["qlens"], case["klens"]
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}.get(case.get("kv_dtype"))
    descales = None
    if fp8 is not None:   # (from their own generator: the 16-bit draws of the case stay as they are)
        lo, hi = DESCALE_RANGE
        drng = np.random.default_rng(seed + 2)
        descales = [torch.empty(len(qlens), hkv, dtype=torch.float32, device=dev) if meta else
                    torch.tensor(drng.uniform(lo, hi, size=(len(qlens), hkv)), dtype=torch.float32).to(dev)
                    for _ in range(2)]
    q_fp8 = bool(case.get("q_fp8"))
    if q_fp8 and fp8 is None:
        raise ValueError("an FP8 q (q_fp8) needs an FP8 K/V cache (kv_dtype)")
    q_descale = None
    if q_fp8:             # (its own generator too: k / v and their descales are the FP8-cache case's)
        lo, hi = DESCALE_RANGE
        qrng = np.random.default_rng(seed + 3)
        q_descale = torch.empty(len(qlens), hkv, dtype=torch.float32, device=dev) if meta else \
            torch.tensor(qrng.uniform(lo, hi, size=(len(qlens), hkv)), dtype=torch.float32).to(dev)

    def q_fp8_view(shape, scale):
        """heads_view's q (the same draws), divided by each row's request and KV head factor
        (padding rows and extra heads: 1) and quantised to e4m3."""
        big = list(shape)
        big[1] += extra
        if meta:
            x = torch.empty(*big, dtype=torch.float8_e4m3fn, device=dev)
        else:
            x = torch.randn(*big, generator=gen, device=dev, dtype=torch.float32)
            if scale != 1.0:
                x.mul_(scale)
            qpk = hq // hkv
            owner = torch.repeat_interleave(torch.arange(len(qlens) + 1), torch.tensor(qlens + [case["pad_rows"]]))
            per_row = torch.cat([q_descale.cpu(), torch.ones(1, hkv, dtype=torch.float32)])[owner]  # (rows, hkv)
            per_row = per_row.repeat_interleave(qpk, dim=1)                                          # (rows, hq)
            if extra:
                per_row = torch.cat([per_row, torch.ones(per_row.shape[0], extra, dtype=torch.float32)], dim=1)
            x = (x / per_row.to(dev)[:, :, None]).to(torch.float8_e4m3fn)
        return x.narrow(1, 0, shape[1]) if extra else x

    def kv_view(shape, heads_dim, scales=None):
        """heads_view's K or V; with an FP8 cache the draws divided by ``scales`` (broadcasting
        against the drawn tensor, heads padded with factor 1 for the extra heads) and quantised."""
        if fp8 is None:
            return heads_view(shape, heads_dim)
        big = list(shape)
        big[heads_dim] += extra
        if meta:
            x = torch.empty(*big, dtype=fp8, device=dev)
        else:
            x = torch.randn(*big, generator=gen, device=dev, dtype=torch.float32)
            if extra:
                pad = torch.ones(*scales.shape[:-1], extra, dtype=torch.float32, device=dev)
                scales = torch.cat([scales, pad], dim=-1)
            x = (x / scales.reshape(scales.shape + (1,) * (x.dim() - scales.dim()))).to(fp8)
        return x.narrow(heads_dim, 0, shape[heads_dim]) if extra else x

    total_q = total_q_rows(case)
    q = q_fp8_view((total_q, hq, d), case["q_scale"]) if q_fp8 else heads_view((total_q, hq, d), 1, case["q_scale"])
    cu_q_np = np.concatenate([[0], np.cumsum(qlens, dtype=np.int64)]).astype(np.int32)
    cu_q = torch.tensor(cu_q_np, dtype=torch.int32).to(dev)
    res = {"q": q, "cu_seqlens_q": cu_q, "cu_seqlens_k": None, "seqused_k": None, "page_table": None}
    if case["kv"] == "paged":
        ps = case["page_size"]
        need, width, num_pages = page_layout(case)
        perm = rng.permutation(num_pages)
        pt = np.full((len(qlens), width), -1, dtype=np.int32)   # unused slots hold -1 (never read)
        owner = np.full(num_pages, len(qlens), dtype=np.int64)  # each page's request (spare: factor 1)
        at = 0
        for b, n in enumerate(need):
            pt[b, :n] = perm[at:at + n]
            owner[perm[at:at + n]] = b
            at += n
        page_scales = [None, None]
        if descales is not None and not meta:     # (num_pages, 1, hkv): per page, broadcast over its rows
            idx = torch.tensor(owner, dtype=torch.int64).to(dev)
            page_scales = [torch.cat([x, torch.ones(1, hkv, dtype=torch.float32, device=dev)])[idx][:, None]
                           for x in descales]
        if case["interleaved_kv"]:
            shape = (num_pages, 2, ps, hkv + extra, d)
            if fp8 is None:
                kv = randn(*shape)
            else:   # (num_pages, 2, 1, hkv): k's factors, then v's
                both = None if meta else torch.stack(page_scales, dim=1)
                kv = kv_view((num_pages, 2, ps, hkv, d), 3, both)
            k, v = kv[:, 0, :, :hkv], kv[:, 1, :, :hkv]
        else:
            k = kv_view((num_pages, ps, hkv, d), 2, page_scales[0])
            v = kv_view((num_pages, ps, hkv, dv), 2, page_scales[1])
        res["page_table"] = torch.tensor(pt, dtype=torch.int32).to(dev)
        res["seqused_k"] = torch.tensor(klens, dtype=torch.int32).to(dev)
    else:
        alloc = [a + s for a, s in zip(klens, case["kv_slack"])]
        total_k = sum(alloc)
        row_scales = [None, None]
        if descales is not None and not meta:     # (total_k, hkv): each row its request's factors
            idx = torch.repeat_interleave(torch.arange(len(alloc)), torch.tensor(alloc, dtype=torch.int64)).to(dev)
            row_scales = [x[idx] for x in descales]
        k = kv_view((total_k, hkv, d), 1, row_scales[0])
        v = kv_view((total_k, hkv, dv), 1, row_scales[1])
        cu_k = np.concatenate([[0], np.cumsum(alloc, dtype=np.int64)]).astype(np.int32)
        res["cu_seqlens_k"] = torch.tensor(cu_k, dtype=torch.int32).to(dev)
        if case["seqused"]:
            res["seqused_k"] = torch.tensor(klens, dtype=torch.int32).to(dev)
    res["k"], res["v"] = k, v
    res["k_descale"], res["v_descale"] = descales if descales is not None else (None, None)
    res["q_descale"] = q_descale
    res["out_dtype"] = dtype
    mq, mk = call_hints(case)
    res["max_seqlen_q"], res["max_seqlen_k"] = mq, mk
    res["alibi_slopes"] = res["sinks"] = None
    if case.get("alibi"):   # (their own generators: every other input is the case's as before)
        arng = np.random.default_rng(seed + 4)
        shape = (len(qlens), hq) if case["alibi"] == "batch_heads" else (hq,)
        if meta:
            res["alibi_slopes"] = torch.empty(*shape, dtype=torch.float32, device=dev)
        else:
            base = 2.0 ** (-8.0 * (np.arange(hq) + 1) / hq)
            res["alibi_slopes"] = torch.tensor(base * arng.uniform(0.25, 2.0, size=shape),
                                               dtype=torch.float32).to(dev)
    if case.get("sinks"):
        srng = np.random.default_rng(seed + 5)
        if meta:
            res["sinks"] = torch.empty(hq, dtype=torch.float32, device=dev)
        else:
            x = srng.normal(0.0, 2.0, size=hq)
            x[srng.random(hq) < SINK_NONE_SHARE] = -np.inf
            res["sinks"] = torch.tensor(x, dtype=torch.float32).to(dev)
    res["kwargs"] = dict(
        seqused_k=res["seqused_k"], page_table=res["page_table"], causal=case["causal"],
        window_size=tuple(case["window"]), softcap=case["softcap"], softmax_scale=case["softmax_scale"],
        num_splits=case["num_splits"], pack_gqa=case["pack_gqa"], return_lse=case["return_lse"],
        **({"max_num_splits": case["max_num_splits"]} if case.get("max_num_splits") else {}),
        metadata_layout=case["layout"], sort=case["sort"], head_swizzle=case["head_swizzle"],
        **({} if descales is None else {"k_descale": descales[0], "v_descale": descales[1]}),
        **({"q_descale": q_descale} if q_fp8 else {}),
        **({"out_dtype": {"bf16": torch.bfloat16, "fp16": torch.float16}[case["out_dtype"]]}
           if q_fp8 and case.get("out_dtype") else {}),
        **({"alibi_slopes": res["alibi_slopes"]} if res["alibi_slopes"] is not None else {}),
        **({"sinks": res["sinks"]} if res["sinks"] is not None else {}),
        **({"quantize_q": True} if case.get("quantize_q") else {}))
    return res


class _PoisonedTorch:
    """Stands in for ``torch`` inside ``kernelgen.front.api`` and ``kernelgen.launch.prepared`` during a call:
    ``torch.empty`` comes back filled with NaN (floating), POISON_INT (int32) or 0xFF bytes (the
    uint8 workspace of the metadata and split partials: -1 as int32, NaN as float32), so an lse
    row, a split partial or a metadata word the kernels forget to write shows up.  Everything
    else is the real torch."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def empty(self, *args, **kwargs):
        t = self._real.empty(*args, **kwargs)
        if t.numel():
            if t.is_floating_point():
                t.fill_(float("nan"))
            elif t.dtype == self._real.int32:
                t.fill_(POISON_INT)
            elif t.dtype == self._real.uint8:
                t.fill_(0xFF)
        return t


#: Modules whose ``torch.empty`` calls make the buffers of a varlen_attention call.
_ALLOCATING_MODULES = ("kernelgen.front.api", "kernelgen.launch.prepared")


@contextmanager
def poisoned_allocations(enabled: bool = True):
    """Within the block, buffers ``kernelgen.front.api`` and ``kernelgen.launch.prepared`` allocate with
    torch.empty are poisoned."""
    import importlib

    mods = [importlib.import_module(m) for m in _ALLOCATING_MODULES]
    saved = [m.torch for m in mods]
    for m, real in zip(mods, saved):
        if enabled and not isinstance(real, _PoisonedTorch):
            m.torch = _PoisonedTorch(real)
    try:
        yield
    finally:
        for m, real in zip(mods, saved):
            m.torch = real


def reference_for(case: dict, inp: dict, fp8_mma_bounds: bool = False, error_bounds: bool = False, q=None):
    """(ref_out, ref_lse) float64 on the inputs' device (``reference.attention_reference``, with
    the FP8 q's ``q_descale``, the ALiBi slopes and the sinks); with ``fp8_mma_bounds`` (ref_out, ref_lse, out_bound, lse_bound),
    the per-element bounds of the Hopper FP8 tensor-core variant; with ``error_bounds`` the same
    four, the bounds those of the built-in soft-cap's tanh.approx (zeros without a soft-cap), which
    ``compare`` adds to the 16-bit tolerance.  ``q``: the reference's q instead of ``inp["q"]``
    (same shape: a ``quantize_q`` call that ran the tensor-core variant, ``quantized_q``'s)."""
    from kernelgen.apps import reference
    from kernelgen.apps.reference import gather_paged

    q = inp["q"] if q is None else q
    if case["kv"] == "paged":
        k, v, cu_k = gather_paged(inp["k"], inp["v"], inp["page_table"], inp["seqused_k"])
        used = None
    else:
        k, v, cu_k, used = inp["k"], inp["v"], inp["cu_seqlens_k"], inp["seqused_k"]
    return reference.attention_reference(
        q, k, v, inp["cu_seqlens_q"], cu_k, causal=case["causal"], softmax_scale=case["softmax_scale"],
        window_size=tuple(case["window"]), softcap=case["softcap"], seqused_k=used, k_descale=inp.get("k_descale"),
        v_descale=inp.get("v_descale"), q_descale=inp.get("q_descale"), alibi_slopes=inp.get("alibi_slopes"),
        sinks=inp.get("sinks"), **({"fp8_mma_bounds": True} if fp8_mma_bounds else {}),
        **({"error_bounds": True} if error_bounds else {}))


def quantized_q(case: dict, inp: dict) -> tuple:
    """(q_ref, q8, q_descale): a ``quantize_q`` case's q as kernelgen quantises it for the FP8
    tensor-core variant, from the case's own 16-bit q (``inp["q"]``, on its device): (q8,
    q_descale) = ``kernelgen.launch.quant_q.quantize_reference(q, cu_seqlens_q, batch,
    num_heads_kv)`` (``quantize``'s specification in torch ops, the same bytes as its kernel but
    independent of it: power-of-two factors per request and KV head, e4m3's rounding), q8
    (total_q, num_heads_q, head_dim) e4m3, q_descale float32 (batch, num_heads_kv); q_ref =
    ``q8.float() * q_descale`` of each row's request and KV head (exact: a power of two times an
    e4m3 value), float32 (total_q, num_heads_q, head_dim), rows past the last request with factor
    1 (no request: the reference leaves them NaN).  The
    reference then checks the attention kernel given that quantisation;
    tests/gpu/test_quant_q_gpu.py checks the quantisation itself."""
    import torch

    from kernelgen.launch import quant_q

    q = inp["q"]
    batch, hq, hkv = len(case["qlens"]), case["num_heads_q"], case["num_heads_kv"]
    q8, qd = quant_q.quantize_reference(q, inp["cu_seqlens_q"], batch, hkv)
    owner = torch.repeat_interleave(torch.arange(batch + 1), torch.tensor(case["qlens"] + [case["pad_rows"]]))
    per_row = torch.cat([qd.float(), torch.ones(1, hkv, dtype=torch.float32, device=qd.device)])[owner.to(qd.device)]
    per_row = per_row.repeat_interleave(hq // hkv, dim=1)                                   # (total_q, hq)
    return q8.float() * per_row[:, :, None], q8, qd


def tolerances(case: dict) -> tuple:
    """(atol, rtol, lse_atol, lse_rtol): ``reference.tolerance(dtype, kv_dtype)`` for values (an FP8
    cache's: the compute dtype's, see its derivation; an FP8 q converted exactly to ``dtype`` adds
    nothing), the GPU tests' LSE bound.  (The FP8 tensor-core variant's own bounds: ``compare``'s
    ``bounds``.)"""
    import torch

    from kernelgen.apps.reference import tolerance

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[case["dtype"]]
    kv = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}.get(case.get("kv_dtype"))
    atol, rtol = tolerance(dtype, kv)
    return atol, rtol, 2e-3, 1e-4


def _first_bad(bad, o, ref, bound, lse, ref_lse) -> str:
    """Details of an FP8 tensor-core mismatch for its message: how many elements are beyond the
    bound, and the first one's value, reference and bound, with its row's LSE and the reference's
    (one element against whole rows tells a corrupted value from a wrong normalisation)."""
    t, h, d = bad.nonzero()[0].tolist()
    msg = (f"; {int(bad.sum())} element(s) beyond, the first: out {float(o[t, h, d]):.5g}, ref "
           f"{float(ref[t, h, d]):.5g}, bound {float(bound[t, h, d]):.3g}")
    if lse is not None:
        msg += f", its row's lse {float(lse[h, t]):.6g} (ref {float(ref_lse[h, t]):.6g})"
    return msg


def compare(case: dict, out, lse, ref, ref_lse, rows: int, *, out_poisoned: bool = True,
            lse_poisoned: bool = True, bounds=None, approx=None) -> dict:
    """Check one batch's results.  ``rows`` = cu_seqlens_q[-1]; rows past it must stay NaN when the
    buffer was poisoned.  Returns {"ok", "unwritten_rows", "max_err", "lse_err", "errors": [...]},
    with "bound_ratio" (the largest error / bound) when ``bounds`` are given.

    ``bounds``: None for the 16-bit tolerance (``tolerances``: out against the reference rounded to
    out's dtype), or (out_bound, lse_bound) of ``attention_reference(..., fp8_mma_bounds=True)``
    for a call that ran the Hopper FP8 tensor-core variant, applied as
    tests/gpu/test_fp8_mma_gpu.py's ``check_mma`` does: |out - ref| <= out_bound per element
    (against the unrounded reference: the bound includes the output's rounding), the mean error
    within a quarter of the mean bound, |lse - ref_lse| <= lse_atol + lse_rtol |ref_lse| +
    lse_bound.  ``approx``: with the 16-bit tolerance, (out_bound, lse_bound) of
    ``attention_reference(..., error_bounds=True)`` (the built-in soft-cap's tanh.approx), added to
    it.  Either way rows that see no key must be exactly 0 with lse exactly -inf."""
    import torch

    errors = []
    atol, rtol, lse_atol, lse_rtol = tolerances(case)
    dtype = out.dtype
    o = out[:rows].double()
    nan_rows = torch.isnan(o).any(-1)                        # (rows, hq): (token, head) rows
    if lse is not None:
        nan_rows = nan_rows | torch.isnan(lse[:, :rows]).transpose(0, 1)
    unwritten = int(nan_rows.sum().item())
    if unwritten:
        idx = nan_rows.nonzero()[:5].tolist()
        errors.append(f"{unwritten} unwritten/NaN (token, head) rows, first {idx}")
    if out_poisoned and out.shape[0] > rows and not bool(torch.isnan(out[rows:]).all()):
        errors.append(f"out rows past cu_seqlens_q[-1] = {rows} were written")
    if lse is not None and lse_poisoned and lse.shape[1] > rows and not bool(torch.isnan(lse[:, rows:]).all()):
        errors.append(f"lse rows past cu_seqlens_q[-1] = {rows} were written")
    finite_o = ~torch.isnan(o)
    bound_ratio = None
    if bounds is None:
        r = ref[:rows].to(dtype).double()
        err = (o - r).abs()
        extra = 0.0 if approx is None else approx[0][:rows].to(o.device, torch.float64)
        bad = (err > atol + rtol * r.abs() + extra) & finite_o
    else:
        ob = bounds[0][:rows].to(o.device, torch.float64)
        err = (o - ref[:rows].double()).abs()
        bad = (err > ob) & finite_o
        e, b = err[finite_o], ob[finite_o]
        bound_ratio = float((e / b.clamp(min=1e-300)).max().item()) if e.numel() else 0.0
        # the mean error above the output's absolute rounding (fp16 subnormals: reference.OUT_ROUNDING_FLOOR)
        from kernelgen.apps.reference import OUT_ROUNDING_FLOOR
        e_sys = (e - OUT_ROUNDING_FLOOR).clamp(min=0)
        if e.numel() and float(e_sys.mean()) > 0.25 * float(b.mean()):
            errors.append(f"mean out error {float(e_sys.mean()):.3e} (above fp16's subnormal rounding) > a quarter "
                          f"of the mean FP8 tensor-core bound {float(b.mean()):.3e} (a systematic error)")
    max_err = float(err[finite_o].max().item()) if bool(finite_o.any()) else 0.0
    if bool(bad.any()):
        where = bad.nonzero()[:3].tolist()
        if bounds is None:
            errors.append(f"out error {max_err:.3e} > {atol:g} + {rtol:g}|ref| at (token, head, dim) {where}")
        else:
            worst = float(err[bad].max())
            errors.append(f"out error up to {worst:.3e} beyond the FP8 tensor-core bound (worst error / bound "
                          f"{bound_ratio:.3f}) at (token, head, dim) {where}" + _first_bad(bad, o, ref, ob, lse,
                                                                                              ref_lse))
    empty = torch.isneginf(ref_lse[:, :rows])                 # (hq, rows): rows that see no key
    ot = o.transpose(0, 1)                                    # (hq, rows, dv)
    written = ~nan_rows.transpose(0, 1)
    if bool((empty & written).any()) and bool((ot[empty & written] != 0).any()):
        errors.append("rows that see no key are not exactly 0")
    lse_err = 0.0
    if lse is not None:
        lt = lse[:, :rows].double()
        lw = ~torch.isnan(lt)
        if not torch.equal(torch.isneginf(lt) & lw, empty & lw):
            errors.append("lse is -inf exactly where a row sees no key: violated")
        fin = ~empty & lw
        if bool(fin.any()):
            lerr = (lt[fin] - ref_lse[:, :rows][fin]).abs()
            lse_err = float(lerr.max().item())
            tol = lse_atol + lse_rtol * ref_lse[:, :rows][fin].abs()
            for extra in (bounds, approx):
                if extra is not None:
                    tol = tol + extra[1][:, :rows].to(lt.device, torch.float64)[fin]
            if not bool((lerr <= tol).all()):
                errors.append(f"lse error {lse_err:.3e}" + ("" if bounds is None else
                              f" beyond the FP8 tensor-core bound (worst error / tolerance "
                              f"{float((lerr / tol).max()):.3f})"))
    res = {"ok": not errors, "unwritten_rows": unwritten, "max_err": max_err, "lse_err": lse_err, "errors": errors}
    if bound_ratio is not None:
        res["bound_ratio"] = bound_ratio
    return res


#: What an attention kernel's name contains when it is the Hopper FP8 tensor-core variant
#: (``AttentionSpec.fp8_mma``; ``AttentionSpec.name``).
FP8_MMA_TAG = "_fp8mma"


def forget_prepared_call() -> None:
    """Clear the memo of the call ``kernelgen.varlen_attention`` prepared or found last (the
    signature cache's last entry; the cache itself stays), so ``prepared_kernel_name`` names the
    next call's kernel or nothing (a call with no query rows prepares nothing)."""
    from kernelgen.front import api

    api._CALLS._last = (None, None)


def prepared_kernel_name():
    """The attention kernel's name (``AttentionSpec.name``) of the call ``varlen_attention``
    prepared or found last (``api._CALLS._last``, as tests/gpu/test_fp8_mma_gpu.py's ``prepared()``
    reads it), None when there is none or it has no single attention launch."""
    from kernelgen.front import api

    attn = getattr(api._CALLS._last[1], "attn", None)
    name = getattr(attn, "name", None)
    return name if isinstance(name, str) else None


def run_case(case: dict, device="cuda", *, poison: bool = True, attention=None, reference_device=None) -> dict:
    """Build the inputs, run the call with NaN-filled out / poisoned internal buffers, compare.

    ``attention``: the function under test (default ``kernelgen.varlen_attention``).
    ``reference_device``: where the reference runs ("cpu" under compute-sanitizer; default: the
    inputs' device).  Returns compare()'s dict plus seed, seconds, kernel (the prepared call's
    attention kernel, read right after the call: ``prepared_kernel_name``), fp8_mma (whether that
    is the FP8 tensor-core variant: then compared within ``fp8_mma_bounds``, else within the 16-bit
    tolerance), quantized (a ``quantize_q`` case on that variant: the reference's q is
    ``quantized_q``'s; a ``quantize_q`` case elsewhere keeps q exact and the 16-bit q's check) and
    (on an exception) error.
    """
    import torch

    t0 = time.perf_counter()
    if attention is None:
        import kernelgen

        attention = kernelgen.varlen_attention
    inp = build_inputs(case, device)
    q = inp["q"]
    hq, dv = case["num_heads_q"], case["head_dim_v"]
    rows = sum(case["qlens"])
    out = None
    if case["out_given"]:
        out = torch.full((q.shape[0], hq, dv), float("nan"), dtype=inp["out_dtype"], device=q.device)
    kernel = None
    forget_prepared_call()
    try:
        with poisoned_allocations(poison):
            res = attention(q, inp["k"], inp["v"], inp["cu_seqlens_q"], inp["cu_seqlens_k"], inp["max_seqlen_q"],
                            inp["max_seqlen_k"], out=out, **inp["kwargs"])
        kernel = prepared_kernel_name()
        o, lse = res if case["return_lse"] else (res, None)
        if q.is_cuda:
            torch.cuda.synchronize(q.device)
    except Exception as e:  # noqa: BLE001 - a raising call is a failed batch, reported with its seed
        return {"seed": case["seed"], "ok": False, "unwritten_rows": 0, "max_err": float("nan"), "lse_err": float("nan"),
                "errors": [f"{type(e).__name__}: {str(e)[:400]}"], "exception": True, "kernel": kernel,
                "fp8_mma": False, "quantized": False, "seconds": time.perf_counter() - t0}
    fp8_mma = kernel is not None and FP8_MMA_TAG in kernel
    quantized = fp8_mma and bool(case.get("quantize_q")) and not case.get("q_fp8")   # q quantised by the call
    fail = None
    if case["out_given"] and o.data_ptr() != out.data_ptr():
        fail = "the call did not return the given out tensor"
    elif o.dtype != inp["out_dtype"]:
        fail = f"the output has dtype {o.dtype}, want {inp['out_dtype']}"
    elif fp8_mma and not case.get("q_fp8") and not quantized:
        fail = f"a 16-bit q ran the FP8 tensor-core kernel {kernel} without quantize_q"
    if fail is not None:
        return {"seed": case["seed"], "ok": False, "unwritten_rows": 0, "max_err": float("nan"),
                "lse_err": float("nan"), "errors": [fail], "kernel": kernel, "fp8_mma": fp8_mma,
                "quantized": quantized, "seconds": time.perf_counter() - t0}
    if reference_device is not None and torch.device(reference_device) != q.device:
        inp = {key: (val.to(reference_device) if isinstance(val, torch.Tensor) else val) for key, val in inp.items()}
        o = o.to(reference_device)
        lse = lse.to(reference_device) if lse is not None else None
    ref = reference_for(case, inp, fp8_mma_bounds=fp8_mma, error_bounds=not fp8_mma,
                        q=quantized_q(case, inp)[0] if quantized else None)
    result = compare(case, o, lse, ref[0], ref[1], rows, out_poisoned=case["out_given"] or poison, lse_poisoned=poison,
                     bounds=ref[2:] if fp8_mma else None, approx=None if fp8_mma else ref[2:])
    result["seed"] = case["seed"]
    result["kernel"] = kernel
    result["fp8_mma"] = fp8_mma
    result["quantized"] = quantized
    result["seconds"] = time.perf_counter() - t0
    return result


# ---------------------------------------------------------------------------------------------
# Driver


def prewarm(cases, arch: str, num_sms: int, jobs: int | None = None, progress: bool = False) -> dict:
    """Compile every kernel the cases need into the disk cache, in parallel (no GPU needed)."""
    from kernelgen.jit import cache, warmup

    specs, bad = {}, 0
    for c in cases:
        try:
            for s in case_specs(c, arch, num_sms):
                specs.setdefault(s, None)
        except Exception:  # noqa: BLE001 - the batch itself will report it with its seed
            bad += 1
    t0 = time.perf_counter()
    error = None
    try:
        compiled, cached = warmup.warmup(list(specs), cache.get_cache().root, jobs=jobs, progress=progress,
                                         desc="fuzz prewarm")
    except Exception as e:  # noqa: BLE001 - the batches compile lazily and report what fails, with seeds
        compiled, cached, error = 0, 0, f"{type(e).__name__}: {str(e)[:2000]}"
    return {"kernels": len(specs), "compiled": compiled, "cached": cached, "unplannable_cases": bad,
            "seconds": time.perf_counter() - t0, "error": error}


class _Watchdog:
    """Ends the process if one batch runs longer than ``limit_s`` (a hung kernel blocks the host in
    synchronize, where nothing else could report the seed)."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.current = None
        self.since = time.monotonic()
        self._stop = threading.Event()
        if limit_s > 0:
            threading.Thread(target=self._run, daemon=True).start()

    def enter(self, label):
        self.current, self.since = label, time.monotonic()

    def leave(self):
        self.current = None

    def _run(self):
        while not self._stop.wait(2.0):
            if self.current is not None and time.monotonic() - self.since > self.limit_s:
                print(f"fuzz: HUNG {self.current} for > {self.limit_s:.0f} s; replay: python tools/fuzz.py "
                      f"--replay {self.current[1]}", flush=True)
                os._exit(3)

    def stop(self):
        self._stop.set()


def _cuda_alive(dev) -> bool:
    """False once the device's context has a sticky error (illegal address, launch failure)."""
    import torch

    try:
        x = torch.ones(4, device=dev)
        torch.cuda.synchronize(dev)
        return bool(x.sum().item() == 4)
    except Exception:  # noqa: BLE001
        return False


def run_fuzz(batches: int, seed: int, *, time_limit: float | None = None, device="cuda", poison: bool = True,
             do_prewarm: bool = True, jobs: int | None = None, hang_s: float = 180.0, log=print,
             max_failures_kept: int = 200, attention=None, arch: str | None = None, num_sms: int = 132) -> dict:
    """Run ``batches`` random batches, stopping early once ``time_limit`` seconds have passed since
    the start, the prewarm included (so a caller's wall-clock limit a little above it always gets
    the summary: the prewarm of a 2000-batch run compiles over 1000 kernels, 50-90 s on the H200
    host with an empty cache).

    ``attention``, ``arch`` and ``num_sms`` stand in for the GPU in CPU tests (default: the
    public call, and the device's arch and SM count).
    Returns a summary dict: seed, requested, ran, mismatches, unwritten_rows, seconds,
    prewarm, failures (first ``max_failures_kept``: seed, errors, fp8_mma, quantized, kernel, case),
    coverage (the case features, ``quantize_q`` among them, and "fp8_q_kernel": "fp8_mma" /
    "converted" counts of the FP8-q batches that ran, "quantize_q_kernel": "fp8_mma" (q quantised)
    / "exact" counts of the ``quantize_q`` batches that ran), max_err (per output dtype, batches
    compared within the 16-bit tolerance), fp8_mma ({"batches", "max_err", "max_bound_ratio"}: the
    batches that ran the FP8 tensor-core variant, compared within its bounds, ``quantize_q`` ones
    included), quantize_q ({"batches", "fp8_mma", "max_err", "max_bound_ratio"}: the ``quantize_q``
    batches run, those of them whose q the call quantised for the tensor-core variant, and the
    latter's largest error and worst error / bound).
    """
    import torch

    dev = torch.device(device)
    if arch is None:
        from kernelgen.jit import runtime

        index = dev.index if dev.index is not None else torch.cuda.current_device()
        device = runtime.device(index)
        arch, num_sms, device_name = device.arch, device.num_sms, device.name
    else:
        device_name = str(dev)
    start = time.perf_counter()
    seeds = batch_seeds(seed, batches)
    cases = [case_for_seed(s) for s in seeds]
    pre = None
    if do_prewarm:
        pre = prewarm(cases, arch, num_sms, jobs=jobs)
        log(f"fuzz: prewarmed {pre['kernels']} kernels ({pre['compiled']} compiled, {pre['cached']} cached) "
            f"in {pre['seconds']:.1f} s" + (f"; PREWARM FAILED: {pre['error']}" if pre["error"] else ""))
    coverage: dict = {}
    failures, mismatches, unwritten, ran, exceptions = [], 0, 0, 0, 0
    max_err = {"bf16": 0.0, "fp16": 0.0}
    mma = {"batches": 0, "max_err": 0.0, "max_bound_ratio": 0.0}
    quant = {"batches": 0, "fp8_mma": 0, "max_err": 0.0, "max_bound_ratio": 0.0}
    slowest: list = []
    dog = _Watchdog(hang_s)
    t0 = time.perf_counter()
    stopped_early = False
    try:
        for i, case in enumerate(cases):
            if time_limit is not None and time.perf_counter() - start > time_limit:
                stopped_early = True
                break
            dog.enter((i, case["seed"]))
            r = run_case(case, dev, poison=poison, attention=attention)
            dog.leave()
            ran += 1
            slowest = sorted(slowest + [(round(r["seconds"], 3), case["seed"])], reverse=True)[:5]
            labels = features(case)
            if case.get("q_fp8") and not r.get("exception"):
                labels["fp8_q_kernel"] = "fp8_mma" if r.get("fp8_mma") else "converted"
            if case.get("quantize_q") and not r.get("exception"):
                labels["quantize_q_kernel"] = "fp8_mma" if r.get("quantized") else "exact"
            for key, val in labels.items():
                coverage.setdefault(key, {}).setdefault(str(val), 0)
                coverage[key][str(val)] += 1
            unwritten += r["unwritten_rows"]
            if r.get("fp8_mma"):
                mma["batches"] += 1
                if r["max_err"] == r["max_err"]:
                    mma["max_err"] = max(mma["max_err"], r["max_err"])
                mma["max_bound_ratio"] = max(mma["max_bound_ratio"], r.get("bound_ratio") or 0.0)
            elif r["max_err"] == r["max_err"]:
                max_err[case["dtype"]] = max(max_err[case["dtype"]], r["max_err"])
            if case.get("quantize_q"):
                quant["batches"] += 1
                if r.get("quantized"):
                    quant["fp8_mma"] += 1
                    if r["max_err"] == r["max_err"]:
                        quant["max_err"] = max(quant["max_err"], r["max_err"])
                    quant["max_bound_ratio"] = max(quant["max_bound_ratio"], r.get("bound_ratio") or 0.0)
            if not r["ok"]:
                mismatches += 1
                exceptions += bool(r.get("exception"))
                if mismatches <= MAX_LOGGED_FAILURES:
                    how = (" [FP8 tensor-core bounds]" if r.get("fp8_mma") else "") \
                        + (" [q quantised]" if r.get("quantized") else " [quantize_q, q exact]"
                           if case.get("quantize_q") else "")
                    log(f"fuzz: MISMATCH batch {i} seed {case['seed']}{how}: {'; '.join(r['errors'])}")
                    log(f"fuzz:   replay: python tools/fuzz.py --replay {case['seed']}   case: {short_case(case)}")
                elif mismatches == MAX_LOGGED_FAILURES + 1:
                    log("fuzz: (further mismatches are counted, not printed; their seeds are in --json)")
                if len(failures) < max_failures_kept:
                    failures.append({"batch": i, "seed": case["seed"], "errors": r["errors"],
                                     "fp8_mma": bool(r.get("fp8_mma")), "quantized": bool(r.get("quantized")),
                                     "kernel": r.get("kernel"),
                                     "case": short_case(case)})
                if r.get("exception") and dev.type == "cuda" and not _cuda_alive(dev):
                    log("fuzz: the CUDA context is lost (sticky error); stopping")
                    stopped_early = True
                    break
            if (i + 1) % 200 == 0:
                if dev.type == "cuda":
                    torch.cuda.empty_cache()        # variable batch sizes: keep the allocator's pool small
                log(f"fuzz: {i + 1}/{batches} batches, {mismatches} mismatches, {unwritten} unwritten rows, "
                    f"{time.perf_counter() - t0:.1f} s")
    finally:
        dog.stop()
    seconds = time.perf_counter() - t0
    if stopped_early:
        log(f"fuzz: stopped after {ran} of {batches} batches (time limit {time_limit} s or a lost context)")
    return {"seed": seed, "requested": batches, "ran": ran, "complete": ran == batches, "mismatches": mismatches,
            "exceptions": exceptions, "unwritten_rows": unwritten, "seconds": seconds, "prewarm": pre,
            "max_err": max_err, "fp8_mma": mma, "quantize_q": quant, "device": device_name, "arch": arch,
            "poison": poison, "failures": failures, "slowest_batches": slowest, "coverage": coverage}


def short_case(case: dict) -> dict:
    """The case with long length lists summarised (for logs)."""
    c = dict(case)
    for key in ("qlens", "klens", "kv_slack"):
        x = c[key]
        if len(x) > 12:
            c[key] = f"{len(x)} values, sum {sum(x)}, max {max(x)}, zeros {sum(1 for v in x if v == 0)}"
    return c


def summary_line(s: dict) -> str:
    return (f"fuzz: {s['ran']} batches, {s['mismatches']} mismatches, {s['unwritten_rows']} unwritten rows, "
            f"seed {s['seed']}, {s['seconds']:.1f} s")


# ---------------------------------------------------------------------------------------------
# The compute-sanitizer subset: tiny fixed cases, one per kernel family


def sanitize_cases() -> list:
    """(name, case) pairs: tiny shapes, one per kernel family (see tools/sanitize.sh)."""
    base = dict(seed=0, phase="fixed", kv="packed", page_size=None, spare_pages=0, extra_cols=0, seqused=False,
                causal=False, window=[-1, -1], mask="none", softcap=0.0, softmax_scale=None, q_scale=1.0,
                num_splits=1, pack_gqa=None, layout="soa", sort=True, head_swizzle=True, hint="exact",
                return_lse=True, out_given=True, pad_rows=0, strided=False, interleaved_kv=False, kv_dtype=None,
                q_fp8=False, out_dtype=None, alibi=None, sinks=False, quantize_q=False)

    def case(**kw):
        c = dict(base)
        c.update(kw)
        c.setdefault("kv_slack", [0] * len(c["qlens"]))
        return c

    return [
        ("prefill_causal_packed", case(
            seed=101, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=4, num_heads_kv=2,
            qlens=[37, 0, 130, 3], klens=[37, 5, 200, 0], causal=True, mask="causal", pad_rows=5)),
        ("mid_tile_gqa_aos", case(
            seed=102, dtype="fp16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=8,
            qlens=[40, 3, 0], klens=[60, 3, 9], layout="aos", head_swizzle=False)),
        # more tiles than CTAs on an H200 (the Hopper kernel's persistent CTAs take 2-3 tiles each): the
        # tile-slot handoff between producer and consumers reuses its slots (racecheck reported it
        # there before take_tile, mainloop_sm90.cuh)
        ("prefill_split_multitile", case(
            seed=117, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=32, num_heads_kv=8,
            qlens=[130, 60], klens=[300, 260], causal=True, mask="causal", num_splits=3)),
        # a paged prefill with more tiles than CTAs on the standalone Hopper kernel: TMA boxes of pages of
        # 16 issued by four producer warps (TMA_WARPS; warps 1-3 take each tile from the slots), and the
        # same on pages of 24 through the row gather (producers arrive through cp.async.mbarrier.arrive)
        ("prefill_paged16_four_warp_boxes", case(
            seed=118, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=64, num_heads_kv=8,
            qlens=[130, 70], klens=[400, 300], kv="paged", page_size=16, spare_pages=2,
            causal=True, mask="causal")),
        ("prefill_paged24_gather", case(
            seed=119, dtype="fp16", head_dim=128, head_dim_v=128, num_heads_q=64, num_heads_kv=8,
            qlens=[130, 70], klens=[400, 300], kv="paged", page_size=24, spare_pages=2,
            causal=True, mask="causal")),
        # the same kernels with split-KV and a window: pages of 64 (four producer warps, warp 0 alone
        # issuing) and of 16 (four issuing); the gather at head dim 192 (lanes 24-31 copy nothing)
        ("prefill_paged64_split_window", case(
            seed=120, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=32, num_heads_kv=8,
            qlens=[130, 70], klens=[400, 300], kv="paged", page_size=64, spare_pages=2, num_splits=2,
            window=[100, -1], causal=True, mask="causal_window")),
        ("prefill_paged16_split", case(
            seed=121, dtype="fp16", head_dim=128, head_dim_v=128, num_heads_q=32, num_heads_kv=8,
            qlens=[130, 70], klens=[400, 300], kv="paged", page_size=16, spare_pages=2, num_splits=3,
            causal=True, mask="causal")),
        ("prefill_paged24_gather_d192", case(
            seed=122, dtype="bf16", head_dim=192, head_dim_v=192, num_heads_q=48, num_heads_kv=8,
            qlens=[130, 70], klens=[400, 300], kv="paged", page_size=24, spare_pages=2,
            causal=True, mask="causal")),
        # pack-GQA on the Hopper prefill kernel (KERNELGEN_SM90_PACK_GQA=1, off by default): Q boxes of
        # qpk heads x BM / qpk tokens, rows (token, head) through masks, partials and the epilogue; qpk 3
        # on the 192-row tile, qpk 4 with TMA page boxes from four warps and split-KV
        ("hopper_pack_gqa_d64_qpk3_split", dict(case(
            seed=123, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=24, num_heads_kv=8,
            qlens=[100, 0, 37, 60], klens=[200, 5, 300, 40], num_splits=2, causal=True, mask="causal", pad_rows=3),
            env={"KERNELGEN_SM90_PACK_GQA": "1"})),
        ("hopper_pack_gqa_paged16_split", dict(case(
            seed=124, dtype="fp16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[130, 70], klens=[400, 300], kv="paged", page_size=16, spare_pages=2, num_splits=3,
            causal=True, mask="causal"), env={"KERNELGEN_SM90_PACK_GQA": "1"})),
        ("decode_paged_packgqa_split_combine", case(
            seed=103, dtype="fp16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[1, 1, 0, 1, 1], klens=[300, 0, 5, 1000, 17], kv="paged", page_size=16, spare_pages=3,
            extra_cols=1, num_splits=4, pack_gqa=True, causal=True, mask="causal")),
        ("decode_paged_auto_split", case(
            seed=104, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=16, num_heads_kv=2,
            qlens=[1, 1], klens=[2000, 33], kv="paged", page_size=64, spare_pages=2, num_splits=0)),
        ("window_softcap_packed", case(
            seed=105, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=4, num_heads_kv=1,
            qlens=[50, 20, 0], klens=[80, 20, 4], window=[16, 4], mask="left_right", softcap=20.0,
            seqused=True, kv_slack=[3, 0, 2])),
        ("window_causal_paged_split", case(
            seed=106, dtype="fp16", head_dim=192, head_dim_v=128, num_heads_q=4, num_heads_kv=2,
            qlens=[3, 1], klens=[500, 64], kv="paged", page_size=1, spare_pages=2, window=[100, -1],
            causal=True, mask="causal_window", num_splits=3)),
        ("fused_mixed_paged", case(   # the fused launch: prefill + decode tiles, two scheduler classes
            seed=109, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[40, 1, 1, 0, 2, 130], klens=[60, 300, 1, 0, 2, 130], kv="paged", page_size=16, spare_pages=2,
            num_splits=0, causal=True, mask="causal", pad_rows=3)),
        # the fused launch with every CTA starting on the short queue, then with none (on sm_90a the
        # Hopper fused kernel: decode tiles in the shared memory TMA fills before and after them);
        # other shapes than fused_mixed_paged's, so the call signature (and its kernels) is new
        ("fused_mixed_decode_first", dict(case(
            seed=110, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[1, 150, 1, 3, 0, 1], klens=[700, 150, 20, 9, 0, 33], kv="paged", page_size=16, spare_pages=2,
            num_splits=0, causal=True, mask="causal"), env={"KERNELGEN_MIXED_SHORT_CTAS": "132"})),
        ("fused_mixed_long_first", dict(case(
            seed=111, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=8, num_heads_kv=2,
            qlens=[70, 1, 1, 2, 1], klens=[90, 400, 5, 2, 1], kv="paged", page_size=16, spare_pages=2,
            num_splits=0, causal=True, mask="causal"), env={"KERNELGEN_MIXED_SHORT_CTAS": "0"})),
        # FP8 K/V caches: paged decode with pack-GQA, splits and the combine (e4m3; the sm_80
        # mainloop), a causal packed prefill with padding (e5m2) and a chunked paged prefill (e4m3,
        # TMA page boxes), both on the Hopper kernel on sm_90a (landing stages, producer conversion; the
        # chunked batch with its decode: the Hopper fused kernel)
        ("fp8_decode_paged_packgqa_split", case(
            seed=112, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[1, 1, 0, 1], klens=[300, 0, 5, 1000], kv="paged", page_size=16, spare_pages=2,
            extra_cols=1, num_splits=4, pack_gqa=True, causal=True, mask="causal", kv_dtype="e4m3")),
        ("fp8_prefill_causal_packed", case(
            seed=113, dtype="fp16", head_dim=64, head_dim_v=64, num_heads_q=4, num_heads_kv=2,
            qlens=[37, 0, 130], klens=[37, 5, 200], causal=True, mask="causal", pad_rows=3, kv_dtype="e5m2")),
        ("fp8_chunked_prefill_paged", case(
            seed=114, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=4, num_heads_kv=2,
            qlens=[90, 1, 100], klens=[300, 40, 180], kv="paged", page_size=16, spare_pages=2, num_splits=0,
            causal=True, mask="causal", kv_dtype="e4m3")),
        # FP8 q (e4m3, q_descale): a causal packed prefill at d 128 with GQA 4 (on sm_90a the FP8
        # tensor-core variant: compared within its bounds; fp16 output through out and out_dtype)
        # and a paged decode with pack-GQA and splits on an e5m2 cache (q converted to the default
        # bf16 output: the 16-bit tolerance; no out given)
        ("fp8q_prefill_causal_packed_gqa", case(
            seed=115, dtype="fp16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[130, 0, 60], klens=[130, 9, 260], causal=True, mask="causal", pad_rows=2, kv_dtype="e4m3",
            q_fp8=True, out_dtype="fp16")),
        ("fp8q_decode_paged_converted", case(
            seed=116, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[1, 1, 0, 1], klens=[700, 0, 9, 65], kv="paged", page_size=16, spare_pages=2, num_splits=3,
            pack_gqa=True, causal=True, mask="causal", kv_dtype="e5m2", q_fp8=True, out_given=False)),
        # the d 64 FP8 tensor-core kernel on sm_90a: 192 query rows in three consumer warpgroups
        # (round-robin ping-pong), V^T transposed 16-dim chunk by chunk by the three producer warps
        ("fp8q_prefill_d64_three_warpgroups", case(
            seed=117, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=4, num_heads_kv=2,
            qlens=[130, 0, 50], klens=[200, 9, 50], causal=True, mask="causal", pad_rows=2, kv_dtype="e4m3",
            q_fp8=True)),
        # quantize_q: the bf16 q quantised on the device (kernelgen.launch.quant_q) into one buffer,
        # its factors past it, which the d 128 FP8 tensor-core kernel reads (q_descale at a fixed
        # offset from q); padding rows past the last request quantised too, read by no kernel
        ("quantize_q_prefill_causal_packed_gqa", case(
            seed=119, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
            qlens=[130, 0, 60], klens=[130, 9, 260], causal=True, mask="causal", pad_rows=2, kv_dtype="e4m3",
            quantize_q=True)),
        # the FP8-cache Hopper kernels (the converting one for a bf16 q, the FP8 tensor-core one for an
        # e4m3 q): (2 + 1 + 1) 128-row tiles x 64 heads x 3 splits = 768 tiles on 132 CTAs, so each CTA's
        # producer laps its tile slots (and the four TileInfo slots with option "t",
        # heuristics.SM90_FP8_TILEINFO; racecheck clean with it, H200, forty-fifth session)
        ("fp8_prefill_tileinfo_many_tiles", case(
            seed=125, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=64, num_heads_kv=8,
            qlens=[130, 60, 5], klens=[1000, 700, 600], num_splits=3, causal=True, mask="causal", kv_dtype="e4m3")),
        ("fp8q_prefill_tileinfo_many_tiles", case(
            seed=126, dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=64, num_heads_kv=8,
            qlens=[130, 60, 5], klens=[1000, 700, 600], num_splits=3, causal=True, mask="causal", kv_dtype="e4m3",
            q_fp8=True)),
        # ALiBi (per-request slopes) and sinks on the d 64 three-warpgroup Hopper kernel (ALiBi on
        # that tile since ac4ebcc; the sinks applied in its epilogue), a request with a longer key
        # than query range and an empty one
        ("alibi_sinks_d64_three_warpgroups", case(
            seed=118, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=8, num_heads_kv=2,
            qlens=[150, 0, 40], klens=[230, 9, 40], causal=True, mask="causal", pad_rows=2, alibi="batch_heads",
            sinks=True)),
        ("scheduler_sort_many_requests", case(
            seed=107, dtype="bf16", head_dim=64, head_dim_v=64, num_heads_q=2, num_heads_kv=1,
            qlens=[(i * 7) % 9 for i in range(40)], klens=[(i * 11) % 17 for i in range(40)], causal=True,
            mask="causal", layout="aos", sort=True)),
    ]


def run_plan_padded(device="cuda") -> dict:
    """AttentionPlan of capacity 8 running a batch of 6: 3 real requests (one with no query rows)
    padded with 3 zero-length requests, 4 query rows past the last request.  Real rows match the
    reference, rows past the last request stay NaN."""
    import torch

    from kernelgen.apps.reference import attention_reference, tolerance
    from kernelgen.front.plan import AttentionPlan

    g = torch.Generator().manual_seed(108)
    hq, hkv, d = 4, 2, 64
    qlens, klens = [33, 0, 7], [40, 6, 7]
    rows, krows = sum(qlens), sum(klens)
    q = torch.randn(rows + 4, hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(krows, hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(krows, hkv, d, generator=g).to(torch.bfloat16)
    cq = np.concatenate([[0], np.cumsum(qlens)]).tolist()
    ck = np.concatenate([[0], np.cumsum(klens)]).tolist()
    cu_q = torch.tensor(cq + [cq[-1]] * 3, dtype=torch.int32)       # batch 6 < capacity 8
    cu_k = torch.tensor(ck + [ck[-1]] * 3, dtype=torch.int32)
    out = torch.full((rows + 4, hq, d), float("nan"), dtype=torch.bfloat16)
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    plan = AttentionPlan(max_batch=8, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, causal=True, device=dev)
    qd, kd, vd, cqd, ckd, od = (x.to(dev) for x in (q, k, v, cu_q, cu_k, out))
    plan.run(qd, kd, vd, cqd, ckd, out=od)
    torch.cuda.synchronize(dev)
    got = od.cpu()
    ref, _ = attention_reference(q, k, v, cu_q[:4], cu_k[:4], causal=True)
    atol, rtol = tolerance(torch.bfloat16)
    r = ref[:rows].to(torch.bfloat16).double()
    errors = []
    if bool(torch.isnan(got[:rows]).any()):
        errors.append("unwritten rows in the padded plan batch")
    elif not bool(((got[:rows].double() - r).abs() <= atol + rtol * r.abs()).all()):
        errors.append("padded plan batch: values differ from the reference")
    if not bool(torch.isnan(got[rows:]).all()):
        errors.append("padded plan batch: rows past the last request were written")
    return {"ok": not errors, "errors": errors, "unwritten_rows": 0}


#: The sanitizer subset's user-variant score_mods (causal, on the Hopper kernel), each with its float64
#: reference (score, slopes, w, q_idx, kv_idx, lq, lk).  1: ALiBi on kg_abs of the causal distance (linear
#: below the diagonal) plus a per-key weight read by the int kv_idx from a tensor of exactly max(klens)
#: elements (the last key block's keys past kv_len must read it clamped).  2: the distance's float copy
#: used non-linearly and as an index (the forms a review found unsafe had the diagonal blocks taken the
#: distance as signed for the pairs the mask drops: an inf row part, a negative index).
VARIANT_READS = (
    ("score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx) + w[kv_idx]",
     lambda s, sl, w, qi, kj, lq, lk: s - sl * (qi + lk - lq - kj).abs() + w[kj]),
    ("score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx) / (1.f + (float)kg_abs(q_idx + kv_len - q_len - kv_idx))"
     " + w[(int)(0.5f * (float)kg_abs(q_idx + kv_len - q_len - kv_idx))]",
     lambda s, sl, w, qi, kj, lq, lk: (s - sl * (qi + lk - lq - kj).abs() / (1 + (qi + lk - lq - kj).abs())
                                       + w[torch_floor_half((qi + lk - lq - kj).abs())])),
)


def torch_floor_half(x):
    """(x * 0.5) rounded toward zero as an index tensor (the snippet's (int)(0.5f * x), x >= 0)."""
    return (x // 2).long()


def run_variant_reads(device="cuda", head_dims=(64, 128)) -> dict:
    """Causal user variants (``VARIANT_READS``) on the Hopper kernel (head dim 64: its three-warpgroup
    tile, or two warpgroups where that build spills, as the second form's does; 128), varlen with a longer key than query range, an empty request and a key count that
    ends inside a key block, outputs poisoned with NaN: every row matches the float64 reference, and
    under memcheck no read leaves ``w`` (max(klens) floats) or ``slopes``."""
    import torch

    import kernelgen
    from kernelgen.apps.reference import attention_reference, tolerance

    dev = torch.device(device)
    errors = []
    saved = os.environ.get("KERNELGEN_TIERED_COMPILE")
    os.environ["KERNELGEN_TIERED_COMPILE"] = "0"   # the Hopper kernel in this call (not the sm_80 first call)
    try:
        for d in head_dims:
            for form, (snippet, ref_mod) in enumerate(VARIANT_READS, 1):
                g = torch.Generator().manual_seed(109 + d + form)
                hq, hkv = 8, 2
                qlens, klens = [150, 0, 40], [230, 9, 40]
                q = torch.randn(sum(qlens), hq, d, generator=g).to(torch.bfloat16)
                k = torch.randn(sum(klens), hkv, d, generator=g).to(torch.bfloat16)
                v = torch.randn(sum(klens), hkv, d, generator=g).to(torch.bfloat16)
                cu_q = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]).tolist(), dtype=torch.int32)
                cu_k = torch.tensor(np.concatenate([[0], np.cumsum(klens)]).tolist(), dtype=torch.int32)
                slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)], dtype=torch.float32)
                w = torch.rand(max(klens), generator=g, dtype=torch.float32)
                var = kernelgen.Variant(score_mod=snippet, tensors={"slopes": slopes.to(dev), "w": w.to(dev)},
                                        name=f"sanitize_reads{form}")
                sl, wd = slopes.double(), w.double()

                def score_mod(score, b, head, q_idx, kv_idx, lq, lk, ref_mod=ref_mod, sl=sl, wd=wd):
                    return ref_mod(score, sl[head], wd, q_idx, kv_idx, lq, lk)
                out = torch.full((q.shape[0], hq, d), float("nan"), dtype=torch.bfloat16, device=dev)
                kernelgen.varlen_attention(*(x.to(dev) for x in (q, k, v, cu_q, cu_k)), max(qlens), max(klens),
                                           causal=True, out=out, variant=var)
                torch.cuda.synchronize(dev)
                ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True, score_mod=score_mod)
                atol, rtol = tolerance(torch.bfloat16)
                got, r = out.cpu().double(), ref.to(torch.bfloat16).double()
                if bool(torch.isnan(got).any()):
                    errors.append(f"variant reads {form} d {d}: unwritten or NaN rows")
                elif not bool(((got - r).abs() <= atol + rtol * r.abs()).all()):
                    errors.append(f"variant reads {form} d {d}: values differ from the reference "
                                  f"(max {float((got - r).abs().max()):.3g})")
    finally:
        if saved is None:
            os.environ.pop("KERNELGEN_TIERED_COMPILE", None)
        else:
            os.environ["KERNELGEN_TIERED_COMPILE"] = saved
    return {"ok": not errors, "errors": errors, "unwritten_rows": 0}


@contextmanager
def case_environment(env: dict):
    """The process environment with a sanitize case's ``env`` overrides (read where the case's
    kernels are chosen and loaded), restored after."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_sanitize_subset(device="cuda", log=print) -> dict:
    """Run the fixed tiny cases once each (inputs from the device's generator, reference on the
    CPU, so the GPU runs almost only kernelgen's kernels).  Returns {"ok", "cases": {...}}."""
    results = {}
    for name, case in sanitize_cases():
        with case_environment(case.pop("env", {})):   # read when the call's kernels are loaded (its first run)
            r = run_case(case, device, poison=True, reference_device="cpu")
        results[name] = {"ok": r["ok"], "errors": r["errors"], "max_err": r["max_err"], "fp8_mma": r["fp8_mma"],
                         "quantized": r["quantized"], "kernel": r["kernel"]}
        how = (" (FP8 tensor-core bounds" + (", q quantised)" if r["quantized"] else ")")) if r["fp8_mma"] else ""
        log(f"sanitize-subset: {name}{how}: {'ok' if r['ok'] else 'FAIL ' + '; '.join(r['errors'])}")
    r = run_plan_padded(device)
    results["plan_capacity8_batch6_padded"] = r
    log(f"sanitize-subset: plan_capacity8_batch6_padded: {'ok' if r['ok'] else 'FAIL ' + '; '.join(r['errors'])}")
    r = run_variant_reads(device)
    results["variant_reads_causal_d64_d128"] = r
    log(f"sanitize-subset: variant_reads_causal_d64_d128: {'ok' if r['ok'] else 'FAIL ' + '; '.join(r['errors'])}")
    ok = all(x["ok"] for x in results.values())
    log(f"sanitize-subset: {sum(x['ok'] for x in results.values())}/{len(results)} cases ok")
    return {"ok": ok, "cases": results}


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the summary (failures, coverage) here")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="stop starting new batches this many seconds after the start (the prewarm included)")
    ap.add_argument("--replay", type=int, default=None, metavar="SEED", help="run the one batch of this batch seed")
    ap.add_argument("--sanitize-subset", action="store_true", help="tiny fixed cases, one per kernel family")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-poison", action="store_true", help="do not poison the call's own allocations")
    ap.add_argument("--no-prewarm", action="store_true", help="compile lazily instead of in parallel up front")
    ap.add_argument("--jobs", type=int, default=None, help="prewarm compile processes (default: all cores)")
    ap.add_argument("--hang", type=float, default=180.0, help="seconds one batch may take before the run aborts")
    ap.add_argument("--prewarm-only", action="store_true", help="compile the run's kernels and exit (no GPU with --arch)")
    ap.add_argument("--arch", default=None, help="with --prewarm-only: target arch (e.g. sm_90a)")
    ap.add_argument("--num-sms", type=int, default=132, help="with --prewarm-only --arch: the device's SM count")
    ap.add_argument("--show", type=int, default=0, metavar="N", help="print the first N cases of --seed and exit")
    a = ap.parse_args(argv)

    if a.show:
        for s in batch_seeds(a.seed, a.show):
            print(json.dumps(short_case(case_for_seed(s)), default=_json_default))
        return 0
    if a.prewarm_only:
        cases = [case_for_seed(s) for s in batch_seeds(a.seed, a.batches)]
        if a.arch is None:
            from kernelgen.jit import runtime

            arch, sms = runtime.device_arch(0), runtime.device(0).num_sms
        else:
            arch, sms = a.arch, a.num_sms
        p = prewarm(cases, arch, sms, jobs=a.jobs, progress=True)
        print(f"fuzz: prewarm {arch}: {p['kernels']} kernels, {p['compiled']} compiled, {p['cached']} cached, "
              f"{p['unplannable_cases']} unplannable cases, {p['seconds']:.1f} s")
        if p["error"]:
            print(f"fuzz: prewarm FAILED: {p['error']}")
        return 0 if p["error"] is None and p["unplannable_cases"] == 0 else 1

    import torch

    if not torch.cuda.is_available():
        print("fuzz: needs a CUDA GPU (use --prewarm-only --arch ARCH or --show N without one)")
        return 2
    if a.sanitize_subset:
        s = run_sanitize_subset(a.device)
        if a.json:
            Path(a.json).write_text(json.dumps(s, indent=1, default=_json_default))
        return 0 if s["ok"] else 1
    if a.replay is not None:
        case = case_for_seed(a.replay)
        print(json.dumps(short_case(case), default=_json_default))
        r = run_case(case, a.device, poison=not a.no_poison)
        print(json.dumps(r, default=_json_default))
        print(f"fuzz: replay seed {a.replay}: {'ok' if r['ok'] else 'MISMATCH'}")
        return 0 if r["ok"] else 1
    s = run_fuzz(a.batches, a.seed, time_limit=a.time_limit, device=a.device, poison=not a.no_poison,
                 do_prewarm=not a.no_prewarm, jobs=a.jobs, hang_s=a.hang)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(s, indent=1, default=_json_default))
    print(f"fuzz: max abs error bf16 {s['max_err']['bf16']:.3e}, fp16 {s['max_err']['fp16']:.3e}; "
          f"FP8 tensor-core batches {s['fp8_mma']['batches']} (max abs error {s['fp8_mma']['max_err']:.3e}, "
          f"worst error / bound {s['fp8_mma']['max_bound_ratio']:.3f}); "
          f"quantize_q batches {s['quantize_q']['batches']} ({s['quantize_q']['fp8_mma']} with q quantised, "
          f"worst error / bound {s['quantize_q']['max_bound_ratio']:.3f}); "
          f"{s['exceptions']} exceptions; complete: {s['complete']}")
    print(summary_line(s), flush=True)
    return 0 if s["mismatches"] == 0 and s["unwritten_rows"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
