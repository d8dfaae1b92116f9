"""Six example user variants (``kernelgen.Variant``), each with its float64 reference functions.

Every maker returns ``(variant, score_mod, mask_mod)``: the Variant (C++ snippets and their CUDA
tensors) and the Python callables ``attention_reference(..., score_mod=, mask_mod=)`` takes
(FlexAttention-style, on broadcast torch tensors: ``score`` (heads, Sq, Sk) float64, ``head``
(heads, 1, 1), ``q_idx`` (1, Sq, 1) and ``kv_idx`` (1, 1, Sk) int64, ``batch``, ``q_len`` and
``kv_len`` ints), None where the variant has no such snippet.  The tests (tests/test_variant_cpu.py,
tests/gpu/test_variant_gpu.py) and tools/warm_gpu_tests.py use them.

- ``alibi``: ALiBi as a score_mod, equal to the built-in ``alibi_slopes`` (FA2's convention);
- ``softcap``: logit soft-capping as a score_mod, equal to the built-in ``softcap``;
- ``t5_bias``: a T5-style bucketed relative-position bias from a (num_heads, num_buckets) table
  (Raffel et al. 2020); the bucket of each relative position comes from an int32 lookup table
  made on the host, so the kernel and the reference pick the same bucket;
- ``document_mask``: a document (packed-sequence) mask from per-key-token document ids, with a
  kv_range that skips the key blocks of other documents;
- ``prefix_lm``: bidirectional attention within the first ``prefix_len[batch]`` keys of each
  request, causal after (use with ``causal=False``), with a kv_range that skips the keys past a
  tile's last visible one;
- ``index_arith``: ALiBi plus small index-dependent terms, written with every kind of index
  expression a snippet may use (the ``kg_idx`` index type's operators, casts and helpers).
"""
from __future__ import annotations

import math

import torch

from ..front.variant import Variant


def alibi(slopes: torch.Tensor):
    """ALiBi as a score_mod: ``score - slopes[head] * |q_idx + kv_len - q_len - kv_idx|``; slopes
    float32 (num_heads_q,)."""
    v = Variant(score_mod="score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)",
                tensors={"slopes": slopes}, name="alibi")
    sl = slopes.detach().double()

    def score_mod(score, batch, head, q_idx, kv_idx, q_len, kv_len):
        return score - sl.to(score.device)[head] * (q_idx + kv_len - q_len - kv_idx).abs().double()
    return v, score_mod, None


def softcap(cap: float):
    """Soft-capping as a score_mod: ``cap * tanh(score / cap)`` with ``kg_tanh``, accurate to about
    1e-7 (the built-in ``softcap`` and ``tanhf``, tanh.approx under --use_fast_math, are the
    hardware's tanh: 2^-11 relative, as FlashAttention-2/3/4's and FlashInfer's soft-cap)."""
    c = float(cap)
    v = Variant(score_mod=f"{c!r}f * kg_tanh(score * {1.0 / c!r}f)", name=f"softcap{c:g}")

    def score_mod(score, batch, head, q_idx, kv_idx, q_len, kv_len):
        return c * torch.tanh(score / c)
    return v, score_mod, None


def t5_buckets(num_buckets: int = 32, max_distance: int = 128, max_rel: int = 4096,
               bidirectional: bool = True) -> torch.Tensor:
    """T5's relative-position buckets (Raffel et al. 2020, mesh-tensorflow's
    ``_relative_position_bucket``) of the relative positions ``kv_pos - q_pos`` in [-max_rel,
    max_rel], as an int32 tensor indexed by ``rel + max_rel`` (CPU; move it to the GPU)."""
    rel = torch.arange(-max_rel, max_rel + 1, dtype=torch.int64)
    n = num_buckets
    ret = torch.zeros_like(rel)
    if bidirectional:
        n //= 2
        ret += (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    max_exact = n // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.double().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
                         * (n - max_exact)).long()
    large = torch.clamp(large, max=n - 1)
    return (ret + torch.where(is_small, rel, large)).to(torch.int32)


def t5_bias(table: torch.Tensor, buckets: torch.Tensor, max_rel: int = 4096):
    """A T5-style bias: ``score + table[head, buckets[clamp(kv_pos - q_pos, -max_rel, max_rel) +
    max_rel]]`` with q_pos = q_idx + kv_len - q_len; table float32 (num_heads_q, num_buckets),
    buckets int32 (2 max_rel + 1,) (``t5_buckets``)."""
    nb = table.shape[1]
    v = Variant(score_mod=(f"const int rel = clamp(kv_idx - (q_idx + kv_len - q_len), -{max_rel}, {max_rel});\n"
                           f"return score + table[head * {nb} + buckets[rel + {max_rel}]];"),
                tensors={"table": table, "buckets": buckets}, name="t5_bias")
    tb, bk = table.detach().double(), buckets.detach().long()

    def score_mod(score, batch, head, q_idx, kv_idx, q_len, kv_len):
        rel = (kv_idx - (q_idx + kv_len - q_len)).clamp(-max_rel, max_rel) + max_rel
        b = bk.to(score.device)[rel]                        # (1, Sq, Sk)
        return score + tb.to(score.device)[head, b]          # (H, Sq, Sk)
    return v, score_mod, None


def document_ids(doc_lens_per_request, device="cuda"):
    """Per-key-token document ids and bounds for ``document_mask``: ``doc_lens_per_request`` is a
    list (one per request) of document lengths summing to the request's kv_len.  Returns (doc,
    doc_start, doc_end, koff): int32 tensors over all requests' key tokens (request b's key j at
    ``koff[b] + j``): its document id (distinct across requests), the first key and one past the
    last key of its document (request-relative), and koff (batch,) the requests' offsets."""
    doc, start, end, koff = [], [], [], []
    did, off = 0, 0
    for lens in doc_lens_per_request:
        koff.append(off)
        pos = 0
        for n in lens:
            doc += [did] * n
            start += [pos] * n
            end += [pos + n] * n
            pos += n
            did += 1
        off += pos
    t = lambda x: torch.tensor(x, dtype=torch.int32, device=device)  # noqa: E731
    return t(doc), t(start), t(end), t(koff)


def document_mask(doc, doc_start, doc_end, koff):
    """A document mask: query row q_idx (at key position q_idx + kv_len - q_len) sees key kv_idx
    iff both are in the same document (``document_ids``' tensors); with ``causal=True`` this is
    the packed-sequences mask.  kv_range: the tile's rows see keys from the first row's document
    start to the last row's document end.  Each request needs q_len <= kv_len (its keys hold its
    queries) or none: the snippets index ``doc`` at the query's key position unchecked, and the
    reference's mask_mod raises ValueError otherwise (torch indexing would wrap a negative index).
    kv_range runs for a request with no keys too (its tiles exist for the queries), so it reads the
    tables only where kv_len > 0 (an index before the tensor's start otherwise)."""
    v = Variant(mask_mod="doc[koff[batch] + q_idx + kv_len - q_len] == doc[koff[batch] + kv_idx]",
                kv_range=("const int o = koff[batch] + kv_len - q_len;\n"
                          "kv_lo = kv_len > 0 ? doc_start[o + q_lo] : 0;\n"
                          "kv_hi = kv_len > 0 ? doc_end[o + q_hi - 1] : 0;"),
                tensors={"doc": doc, "doc_start": doc_start, "doc_end": doc_end, "koff": koff}, name="document_mask")
    dc, ko = doc.detach().long(), koff.detach().long()

    def mask_mod(batch, head, q_idx, kv_idx, q_len, kv_len):
        if 0 < kv_len < q_len:   # (no key: no pair to mask)
            raise ValueError(f"document_mask: request {batch} has {q_len} queries and {kv_len} keys; the mask "
                             f"needs q_len <= kv_len (its queries' own tokens among the keys)")
        d = dc.to(q_idx.device)
        o = int(ko[batch])
        return d[o + q_idx + kv_len - q_len] == d[o + kv_idx]
    return v, None, mask_mod


def prefix_lm(prefix_len: torch.Tensor):
    """A prefix-LM mask: key kv_idx is visible to query row q_idx iff ``kv_idx < prefix_len[batch]``
    (the bidirectional prefix) or ``kv_idx <= q_idx + kv_len - q_len`` (causal after it); use with
    ``causal=False``.  prefix_len int32 (batch,).  kv_range: keys up to the larger of the prefix
    and the tile's last row's diagonal."""
    v = Variant(mask_mod="kv_idx < prefix_len[batch] || kv_idx <= q_idx + kv_len - q_len",
                kv_range="kv_hi = kg_max(prefix_len[batch], q_hi + kv_len - q_len);",
                tensors={"prefix_len": prefix_len}, name="prefix_lm")
    pl = prefix_len.detach().long().cpu()

    def mask_mod(batch, head, q_idx, kv_idx, q_len, kv_len):
        return (kv_idx < int(pl[batch])) | (kv_idx <= q_idx + kv_len - q_len)
    return v, None, mask_mod


def index_arith(slopes: torch.Tensor):
    """A score_mod that works the snippets' index type (``kg_idx``: an int with an exact float
    copy, docs/variants.md) through every kind of expression a user may write: sums and
    differences kept as indices, ``auto`` locals with compound assignment and increments, integer
    ``/``, ``&`` and ``clamp`` through the int, explicit casts to float and long long,
    ``kg_abs`` / ``kg_min`` / ``kg_max`` / ``to_float``, and products with floats.  An ALiBi bias
    plus small index-dependent terms; slopes float32 (num_heads_q,).  Its reference computes the
    same expression in int64 / float64."""
    v = Variant(score_mod=("auto d = q_idx + kv_len - q_len - kv_idx;\n"
                           "auto e = kv_idx;\n"
                           "e += 3; e -= 1; ++e; e--; e -= q_idx;\n"
                           "const int t = clamp(kv_idx - q_idx, -64, 64);\n"
                           "const float w = (q_idx & 1) ? 0.25f : -0.25f;\n"
                           "return score - slopes[head] * (float)kg_abs(d) + 0.001f * to_float(e) + 0.002f * t + w\n"
                           "       + 0.003f * (float)((long long)q_idx - batch) + 0.0005f * (q_idx / 3)\n"
                           "       + 0.0001f * (kv_idx * 0.5f) - (float)kg_min(q_idx, 5) * 0.01f\n"
                           "       + 0.002f * kg_max(q_idx - q_len, -2.5f);"),
                tensors={"slopes": slopes}, name="index_arith")
    sl = slopes.detach().double()

    def score_mod(score, batch, head, q_idx, kv_idx, q_len, kv_len):
        d = q_idx + kv_len - q_len - kv_idx
        e = kv_idx + 2 - q_idx
        t = (kv_idx - q_idx).clamp(-64, 64)
        w = torch.where((q_idx & 1) == 1, 0.25, -0.25)
        return (score - sl.to(score.device)[head] * d.abs() + 0.001 * e + 0.002 * t + w
                + 0.003 * (q_idx - batch) + 0.0005 * torch.div(q_idx, 3, rounding_mode="trunc")
                + 0.0001 * (kv_idx * 0.5) - q_idx.clamp(max=5) * 0.01
                + 0.002 * (q_idx - q_len).double().clamp(min=-2.5))
    return v, score_mod, None


#: name -> maker, for loops over the examples (arguments differ: see each).
EXAMPLES = ("alibi", "softcap", "t5_bias", "document_mask", "prefix_lm", "index_arith")
