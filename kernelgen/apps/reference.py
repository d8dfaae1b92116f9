"""Float64 reference attention for tests and benchmarks (PyTorch, on the inputs' device).

Conventions (shared/research/edge_cases.md): query head h uses KV head h // (Hq / Hkv); causal is
bottom-right aligned (row r sees key j iff j <= r + seqlen_k - seqlen_q); a row that sees no key
has out = 0 exactly and lse = -inf; lse is the natural log of the sum of exp(scaled logits).
With attention sinks (gpt-oss) the sink logit of the row's query head joins that sum (and the
softmax denominator) with no value: a row that sees no key has out = 0 and lse = sinks[h].
"""
from __future__ import annotations

import math

import torch

#: The relative error bound of the hardware tanh, ``tanh.approx.f32`` (the PTX ISA gives its maximum
#: relative error as 2^-11; tests/gpu/test_softcap_gpu.py measures it over every float32), which the
#: built-in soft-cap takes (templates/common/softmax.cuh).
TANH_APPROX_REL_ERR = 2.0 ** -11
#: The relative error bound of the kernels' unnormalised probabilities 2^x: the MUFU's
#: ``ex2.approx.ftz.f32`` (2^-22, the PTX ISA's bound) or, in the Hopper kernels with option "x", the
#: polynomial that takes a share of them on the FMA pipe (templates/common/softmax.cuh, ``ex2_fma``:
#: at most 1.02e-4 at degree 3 and 2.9e-6 at degree 4, tests/test_ex2_fma_cpu.py).
EX2_REL_ERR = 1.1e-4


def gather_paged(k_cache, v_cache, page_table, seqused_k):
    """Packed (k, v, cu_seqlens_k) holding the first seqused_k[i] tokens of each request's pages."""
    ps = k_cache.shape[1]
    ks, vs, cu = [], [], [0]
    for b, n in enumerate(seqused_k.tolist()):
        pages = page_table[b, : -(-n // ps)].long()
        ks.append(k_cache[pages].flatten(0, 1)[:n])
        vs.append(v_cache[pages].flatten(0, 1)[:n])
        cu.append(cu[-1] + n)
    k = torch.cat(ks) if ks else k_cache[:0].flatten(0, 1)
    v = torch.cat(vs) if vs else v_cache[:0].flatten(0, 1)
    return k, v, torch.tensor(cu, dtype=torch.int32, device=k_cache.device)


#: The keywords a variant's reference callable may name beside its positional arguments.
_EXTRA_NAMES = ("kv_head", "q_offset")


def _named(fn, positional: int) -> tuple:
    """The names of ``_EXTRA_NAMES`` that ``fn`` takes by name beside its ``positional`` arguments (all of
    them with ``**kwargs``; none where its signature cannot be read, or a name is one of the
    positional ones): older reference callables without them keep working.  Read once per call."""
    if fn is None:
        return ()
    import inspect

    try:   # (follow_wrapped=False: a ``functools.wraps`` wrapper taking ``*args`` takes no keywords)
        sig = inspect.signature(fn, follow_wrapped=False)
        bound = sig.bind_partial(*range(positional)).arguments
    except (TypeError, ValueError):
        return ()
    params = sig.parameters
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    anykw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return tuple(k for k in _EXTRA_NAMES
                 if k not in bound and ((k in params and params[k].kind in named) or (k not in params and anykw)))


def _check_descales(q, k, k_descale, v_descale, q_descale, batch: int, num_heads_kv: int) -> None:
    """The descales' rules of ``varlen_attention`` (``selection.validation.descale`` / ``q_descale``):
    float32, shaped (batch, num_heads_kv) or broadcasting to it (a 1-D tensor of several factors is
    ambiguous), ``k_descale`` / ``v_descale`` with an FP8 k only, ``q_descale`` with an FP8 q only;
    ValueError / TypeError naming the argument, so the reference never reads a factor the kernels
    would not (on the descale's own device: the reference moves it to q's)."""
    from ..selection import validation
    kv = validation.KV_FP8_DTYPES.get(k.dtype)
    for name, x in (("k_descale", k_descale), ("v_descale", v_descale)):
        if x is not None:
            validation.descale(name, x, batch, num_heads_kv, x.device if isinstance(x, torch.Tensor) else None, kv)
    if q_descale is not None:
        validation.q_descale(q_descale, batch, num_heads_kv,
                             q_descale.device if isinstance(q_descale, torch.Tensor) else None,
                             validation.Q_FP8_DTYPES.get(q.dtype))


def attention_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, softmax_scale=None,
                        window_size=(-1, -1), softcap=0.0, seqused_k=None, max_elements: int = 1 << 27,
                        sinks=None, alibi_slopes=None, score_mod=None, mask_mod=None, k_descale=None,
                        v_descale=None, q_descale=None, fp8_mma_bounds: bool = False, error_bounds: bool = False):
    """Returns (out, lse): out (total_q, Hq, Dv) float64, lse (Hq, total_q) float64.

    ``window_size`` = (left, right) around the bottom-right aligned diagonal (-1 = unbounded; causal
    sets right to 0); ``softcap`` > 0 caps scaled logits as softcap * tanh(logit / softcap);
    ``seqused_k`` keeps only the first seqused_k[i] keys of request i; ``sinks`` (Hq,) adds the
    value-less logit sinks[h] to every softmax denominator of query head h, computed directly
    (the extra logit enters the row maximum and the sum; -inf: no sink).  Rows past cu_seqlens_q[-1]
    are NaN (no request owns them).  ``alibi_slopes`` (Hq,) or (batch, Hq): ALiBi (FlashAttention-2's
    convention, Press et al. 2022), computed directly: the scaled, soft-capped logit of query row i
    (0-based in its request) and key j gets ``-slope[b, h] * |i + lk - lq - j|`` before the mask
    (lk, lq: the request's key and query counts).  ``score_mod`` / ``mask_mod``: a user variant's
    reference (``kernelgen.Variant``; FlexAttention's convention, Dong et al. 2024), Python callables
    on broadcast torch tensors, applied per request b after ALiBi and before the built-in masks:
    ``score_mod(score, b, head, q_idx, kv_idx, lq, lk)`` returns the new logits from ``score``
    (heads, lq, lk) float64 (scaled, soft-capped, ALiBi-biased, natural-log units), ``head``
    (heads, 1, 1), ``q_idx`` (1, lq, 1) and ``kv_idx`` (1, 1, lk) int64 tensors (query rows in
    the request, keys); ``mask_mod(b, head, q_idx, kv_idx, lq, lk)`` returns a boolean tensor
    broadcastable to (heads, lq, lk), False = masked (-inf).  A callable that names a ``kv_head`` or
    ``q_offset`` parameter (or takes ``**kwargs``) also gets them as keywords, as a snippet sees them:
    ``kv_head`` (heads, 1, 1) int64 (each query head's KV head) and ``q_offset`` (an int,
    ``cu_seqlens_q[b]``: the request's first query row in ``q``).  ``max_elements`` bounds the size of one logits block (heads
    are processed in groups to stay under it).  ``k_descale`` / ``v_descale`` (FP8 K/V, FlashAttention-3's
    convention): None (1) or float32 tensors that broadcast to (batch, Hkv); request b's keys and values of
    KV head h are dequantised exactly, ``k.double() * k_descale[b, h]`` (every FP8 value and its product
    with a float32 factor are exact in float64).  ``q_descale`` likewise for an FP8 q (request b's
    queries of the query heads of KV head h times ``q_descale[b, h]``).  The descales follow
    ``varlen_attention``'s rules (float32, those shapes, ``k_descale`` / ``v_descale`` with an FP8 k
    and ``q_descale`` with an FP8 q only): anything else raises its ValueError / TypeError.

    ``error_bounds``: also return two tensors, per-element bounds on the error of out (shaped as out)
    and of lse (shaped as lse) that the kernels' approximations add to their 16-bit rounding (which
    ``tolerance`` covers; callers add the two): the built-in soft-cap's hardware tanh
    (tanh.approx.f32, FlashAttention-2/3/4's and FlashInfer's: relative error at most
    ``TANH_APPROX_REL_ERR`` = 2^-11, the PTX ISA's bound) moves a capped logit c tanh(s / c) by at
    most delta = c 2^-11 max_j |tanh(s_j / c)| over the row's visible keys (natural-log units; ALiBi
    after the cap leaves it as it is, a score_mod is taken to move it no further), so the lse by
    at most delta and each normalised probability a_j by a factor within exp(+-2 delta): out by at
    most (exp(2 delta) - 1) sum_j a_j |v_j|; and the exponentials' own error (``EX2_REL_ERR`` =
    E relative on each unnormalised probability, the hardware's or option "x"'s polynomial) moves
    each normalised probability by a factor within exp(+-2 e), e = -log(1 - E), and the lse by e:
    delta + e in both formulas.  0 for rows that see no key (with sinks their lse, the sink, keeps the
    exponentials' e: the bound is the looser one there).

    ``fp8_mma_bounds``: return the bounds of ``error_bounds`` (the soft-cap's and the exponentials' terms included) plus
    the per-element bounds on the error of out (shaped as out) and of lse (shaped as lse) of the
    Hopper FP8 tensor-core variant
    (``AttentionSpec.fp8_mma``; docs/dev/fp8_hopper_design.md section 8), from its two roundings:
    - the logits: Q K^T on FP8 wgmma, whose accumulator keeps 13 mantissa bits (an e8m13 sum,
      truncated: DeepSeek-V3's report, section 3.3.2, measured about 14 bits on Hopper; PyTorch's
      FP8 notes, e8m13), so each k32 instruction adds at most 2 units of 2^-13 relative to the sum
      of the absolute products it has seen: |ds| <= delta = head_dim / 32 * 2^-12 * scale * max_j
      sum_i |q_i k_ij| (dequantised, natural-log units; a soft-cap only shrinks it).  The lse moves
      by at most delta; each normalised probability by a factor within exp(+-2 delta), so out by at
      most (exp(2 delta) - 1) * sum_j a_j |v_j|;
    - the probabilities: P formed against the row maximum - 8 (values up to 256) and rounded to
      e4m3 for P V: each normal value within 2^-4 of itself (relative), a subnormal one within 2^-10
      of 256 * its row's largest (absolute: 2^-18 * max_j a_j in units of the normalised
      probabilities); the row sum is fp32 of the unrounded values: 1.05 * (2^-4 * sum_j a_j |v_j| +
      2^-18 * max_j a_j * sum_j |v_j|) (5 % for the fp32 accumulation and the sum);
    - P V on the same FP8 wgmma: O accumulates across every key block of the row, each k32 step
      adding at most 2^-12 of the absolute sum it has seen, (1 + 2^-4) sum_j a_j |v_j| + the
      subnormal term above (P rounded up): (ceil(n / 32) + 1) * 2^-12 * that, n the row's visible
      keys (the k32 steps meeting one);
    plus 2^-20 * sum_j a_j |v_j| (fp32 accumulation), 2^-8 |out| (the output's bf16 rounding;
    fp16's is smaller) and 2^-25 (absolute: half the step of fp16's subnormals, below 2^-14, where
    its rounding is no longer relative; bf16's start below 2^-126).  The lse bound adds nothing for
    its own fp32 arithmetic: callers keep their
    16-bit tolerance beside it.
    """
    total_q, hq, d = q.shape
    hkv, dv = k.shape[1], v.shape[2]
    with_bounds = fp8_mma_bounds or error_bounds
    qpk = hq // hkv
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    cq = [int(x) for x in cu_seqlens_q.tolist()]
    ck = [int(x) for x in cu_seqlens_k.tolist()]
    used = [int(x) for x in seqused_k.tolist()] if seqused_k is not None else None
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0 if right < 0 else min(right, 0)
    sink = None if sinks is None else sinks.detach().to(q.device, torch.float64)
    alibi = None if alibi_slopes is None else alibi_slopes.detach().to(q.device, torch.float64)
    nb = len(cq) - 1
    _check_descales(q, k, k_descale, v_descale, q_descale, nb, hkv)
    kd, vd, qd = (None if x is None else torch.broadcast_to(x.detach().to(q.device, torch.float64), (nb, hkv))
                  for x in (k_descale, v_descale, q_descale))
    bound = torch.full((total_q, hq, dv), float("nan"), dtype=torch.float64, device=q.device) if with_bounds else None
    lse_bound = torch.zeros((hq, total_q), dtype=torch.float64, device=q.device) if with_bounds else None
    out = torch.full((total_q, hq, dv), float("nan"), dtype=torch.float64, device=q.device)
    lse = torch.full((hq, total_q), float("nan"), dtype=torch.float64, device=q.device)
    sm_names, mm_names = _named(score_mod, 7), _named(mask_mod, 6)
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if used is not None:
            k1 = k0 + used[b]
        lq, lk = q1 - q0, k1 - k0
        if lq <= 0:
            continue
        if lk <= 0:
            out[q0:q1] = 0
            if bound is not None:
                bound[q0:q1] = 0
            lse[:, q0:q1] = float("-inf") if sink is None else sink[:, None]
            continue
        qb = q[q0:q1].double().transpose(0, 1)                      # (Hq, lq, d)
        if qd is not None:
            qb = qb * qd[b].repeat_interleave(qpk)[:, None, None]
        kb, vb = k[k0:k1].double().transpose(0, 1), v[k0:k1].double().transpose(0, 1)   # (Hkv, lk, d / dv)
        if kd is not None:
            kb = kb * kd[b][:, None, None]
        if vd is not None:
            vb = vb * vd[b][:, None, None]
        kb = kb.repeat_interleave(qpk, 0)                            # (Hq, lk, d)
        vb = vb.repeat_interleave(qpk, 0)                            # (Hq, lk, dv)
        mask = None
        if left >= 0 or right >= 0:
            r = torch.arange(lq, device=q.device)[:, None] + (lk - lq)   # row's key position
            j = torch.arange(lk, device=q.device)[None, :]
            mask = torch.zeros(lq, lk, dtype=torch.bool, device=q.device)  # True = hidden
            if right >= 0:
                mask |= j > r + right
            if left >= 0:
                mask |= j < r - left
        group = max(1, max_elements // max(1, lq * lk))
        for h0 in range(0, hq, group):
            h1 = min(hq, h0 + group)
            s = torch.matmul(qb[h0:h1], kb[h0:h1].transpose(1, 2)) * scale
            cap_abs = None
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
                cap_abs = s.abs() if with_bounds else None
            if alibi is not None:
                slope = (alibi if alibi.dim() == 1 else alibi[b])[h0:h1]
                dist = (torch.arange(lq, device=q.device)[:, None] + (lk - lq)
                        - torch.arange(lk, device=q.device)[None, :]).abs().double()
                s = s - slope[:, None, None] * dist
            if score_mod is not None or mask_mod is not None:
                hh = torch.arange(h0, h1, device=q.device)[:, None, None]
                qi = torch.arange(lq, device=q.device)[None, :, None]
                kj = torch.arange(lk, device=q.device)[None, None, :]
                extra = {"kv_head": hh // qpk, "q_offset": q0}
                if score_mod is not None:
                    s = torch.as_tensor(score_mod(s, b, hh, qi, kj, lq, lk, **{n: extra[n] for n in sm_names}),
                                        dtype=torch.float64, device=q.device).expand_as(s).clone()
                if mask_mod is not None:
                    keep = torch.as_tensor(mask_mod(b, hh, qi, kj, lq, lk, **{n: extra[n] for n in mm_names}),
                                           device=q.device).bool()
                    s = s.masked_fill(~keep.expand_as(s), float("-inf"))
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            if sink is not None:                                      # the sink is one more logit
                m = torch.maximum(m, sink[h0:h1, None, None].expand_as(m))
            m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp(s - m_safe)
            z = p.sum(dim=-1, keepdim=True)
            if sink is not None:                                      # ... with no value: z only
                z = z + torch.exp(sink[h0:h1, None, None] - m_safe)
            # (z == 0: every key masked, out 0 and lse -inf; a NaN logit, from a score_mod, makes z NaN
            # and the row NaN, as in the kernels, whose row maximum keeps a NaN: softmax.cuh)
            seen = z != 0
            o = torch.matmul(p, vb[h0:h1]) / torch.where(seen, z, torch.ones_like(z))
            o = torch.where(seen, o, torch.zeros_like(o))
            out[q0:q1, h0:h1] = o.transpose(0, 1)
            if bound is not None:
                a = torch.where(seen, p / torch.where(seen, z, torch.ones_like(z)), torch.zeros_like(p))
                va = vb[h0:h1].abs()
                s1 = torch.matmul(a, va)
                tanh_delta = torch.zeros_like(m)                                      # (heads, lq, 1)
                if cap_abs is not None:
                    tanh_delta = TANH_APPROX_REL_ERR * torch.where(torch.isfinite(s), cap_abs,
                                                                   torch.zeros_like(cap_abs)).amax(dim=-1, keepdim=True)
                # the exponentials' error (EX2_REL_ERR) joins the soft-cap's, for rows that see a key
                tanh_delta = tanh_delta + torch.where(seen, -math.log1p(-EX2_REL_ERR), 0.0)
                tanh_term = torch.expm1(2 * tanh_delta) * s1
            if bound is not None and not fp8_mma_bounds:
                bound[q0:q1, h0:h1] = tanh_term.transpose(0, 1)
                lse_bound[h0:h1, q0:q1] = tanh_delta[..., 0]
            elif bound is not None:
                sabs = torch.matmul(qb[h0:h1].abs(), kb[h0:h1].abs().transpose(1, 2)) * scale
                delta = (d / 32) * 2.0 ** -12 * sabs.amax(dim=-1, keepdim=True)          # (heads, lq, 1)
                sub = 2.0 ** -18 * a.amax(dim=-1, keepdim=True) * va.sum(dim=1, keepdim=True)
                # P V's k32 steps (O accumulates across the row's keys): those meeting a visible key
                steps = torch.div(torch.isfinite(s).sum(dim=-1, keepdim=True) + 31, 32, rounding_mode="floor") + 1
                # (the logits' two errors together: one factor exp(+-2 (delta + tanh_delta)))
                bb = 1.05 * (2.0 ** -4 * s1 + sub) + torch.expm1(2 * (delta + tanh_delta)) * s1 + 2.0 ** -20 * s1 \
                    + steps * 2.0 ** -12 * (1.0625 * s1 + sub) + 2.0 ** -8 * o.abs() + OUT_ROUNDING_FLOOR
                bound[q0:q1, h0:h1] = bb.transpose(0, 1)
                lse_bound[h0:h1, q0:q1] = (delta + tanh_delta)[..., 0]
            lse[h0:h1, q0:q1] = torch.where(seen[..., 0], torch.log(z[..., 0]) + m_safe[..., 0],
                                            torch.full_like(z[..., 0], float("-inf")))
    return (out, lse, bound, lse_bound) if with_bounds else (out, lse)


#: The absolute part of the FP8 tensor-core bound (``fp8_mma_bounds``): half the step of fp16's
#: subnormals (2^-24, below 2^-14), the most an fp16 output's rounding moves a value there; bf16's
#: subnormals start below 2^-126.  A check of the *mean* error (a systematic error) measures the
#: error above it: among subnormal outputs, correct rounding alone averages about 2^-26 an element.
OUT_ROUNDING_FLOOR = 2.0 ** -25


def tolerance(dtype, kv_dtype=None) -> tuple[float, float]:
    """(atol, rtol) against the float64 reference cast to ``dtype`` (edge_cases.md conventions).

    ``kv_dtype``: the K/V cache's dtype when it differs from ``dtype`` (``torch.float8_e4m3fn`` or
    ``torch.float8_e5m2``, or their names "e4m3" / "e5m2" as ``AttentionPlan.kv_dtype`` gives them,
    with ``k_descale`` / ``v_descale``); the bound is then that of ``dtype``
    (q's, the compute and output dtype), for inputs whose *dequantised* values are of the scale the
    16-bit tolerances assume (|q|, |k * k_descale|, |v * v_descale| about N(0, 1)).  Derivation:
    the reference dequantises the same FP8 values exactly, so the cache's quantisation error
    (e4m3: 3 mantissa bits, each element within 2^-4 of its value relative to |x|; e5m2: 2^-3) is
    in both sides and cancels; what remains is the kernel's arithmetic.  The kernel converts each
    FP8 element to ``dtype`` exactly (every e4m3 / e5m2 value is an fp16 and a bf16 value), forms
    Q K^T with fp32 accumulation of exact products and multiplies by ``softmax_scale *
    k_descale`` in fp32 (one more relative rounding of 2^-24 per logit), rounds P to ``dtype``
    for P V as with a 16-bit cache (to fp16 where the kernel runs its GEMMs on fp16, a bf16 q on
    sm_89+: finer than bf16 above 2^-14, an absolute step of 2^-24 below; the q rows, scaled
    by powers of two into fp16's range, stay exact), and multiplies O by ``v_descale`` in fp32 before the one
    rounding to ``dtype`` (2^-24 relative, against the output's own rounding of 2^-11 relative for
    fp16, 2^-8 for bf16).  So the error budget is the 16-bit path's plus terms of order 2^-23 |out|, well
    inside the rounding of the output: the same (atol, rtol).  (Against attention on the
    *unquantised* 16-bit K/V the quantisation error does count: a relative error of up to 2^-4
    per K element moves a logit by at most 2^-4 * scale * sum_i |q_i k_i|, which changes each
    probability by a factor within exp(+-2^-3 * scale * sum_i |q_i k_i|), and each V element by
    2^-4 |v|; that bound is the caller's to apply, not ``tolerance``'s.)
    """
    fp8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)} | {"e4m3", "e5m2"}
    if kv_dtype is not None and kv_dtype != dtype and kv_dtype not in fp8:
        raise ValueError(f"no tolerance for a {kv_dtype} cache")
    if dtype == torch.bfloat16:
        return 1.6e-2, 1.6e-2
    if dtype == torch.float16:
        return 2e-3, 2e-3
    raise ValueError(f"no tolerance for {dtype}")


def max_error(out, ref) -> float:
    """Largest absolute difference (NaN anywhere in out counts as infinite)."""
    o = out.double()
    if torch.isnan(o).any():
        return float("inf")
    return float((o - ref).abs().max().item()) if o.numel() else 0.0
