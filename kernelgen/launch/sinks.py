"""Attention sinks (gpt-oss): one extra, value-less logit per query head, applied after the kernels.

With a sink ``sinks[h]`` the softmax of query row r of head h is
``p_j = exp(s_j) / (exp(sinks[h]) + sum_k exp(s_k))`` over the row's scaled (soft-capped, masked)
logits s; the sink adds to the denominator only.  The kernels compute the plain softmax and its
log-sum-exp ``lse = log(sum_k exp(s_k))`` (natural log, (num_heads_q, total_q)), so the sink is an
exact rescale of their output:

    new_lse = logaddexp(lse, sinks[h]),   out *= exp(lse - new_lse)

(float32 arithmetic, out cast back to its dtype).  A row that sees no key (out 0, lse -inf) keeps
out 0 and gets lse = sinks[h]; ``sinks[h] = -inf`` is no sink (factor 1, lse unchanged).

``apply`` is the one place the paths without sink kernels (``AttentionPlan.run`` / ``attend`` of a
plan without them, the fused mixed-batch launch and the classes in turn) call after their launches: plain torch ops on the current
stream, no host synchronisation, so it can be captured in a CUDA graph and reads the sink values
on the device at replay time.  It costs one extra pass over ``out`` (read and write), a few
passes over the (num_heads_q, total_q) LSE and about ten small torch launches (host time outside
a CUDA graph).  Single-class ``varlen_attention`` calls no longer come here: their kernels apply
the sinks themselves (``AttentionSpec.sinks`` / ``CombineSpec.sinks``, ``Recipe.sinks_fused``,
templates/common/sinks.cuh, the same arithmetic per row); this function remains for the mixed
batches (fused launch, classes in turn) and ``AttentionPlan``s without sink kernels (mixed, or
made without ``sinks=True``).
"""
from __future__ import annotations

import torch

def apply(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor, cu_seqlens_q: torch.Tensor | None = None):
    """Rescale ``out`` in place for ``sinks`` and write the sink-inclusive LSE into ``lse`` in place.

    Args:
        out: (total_q, num_heads_q, head_dim_v), float16/bfloat16 (or float32/64), the kernels'
            output of the plain softmax.
        lse: (num_heads_q, total_q) float32, the kernels' natural-log LSE of that softmax (-inf for
            a row that sees no key).
        sinks: (num_heads_q,) float32, one logit per query head (-inf: no sink for that head).
        cu_seqlens_q: int32 (batch + 1,): rows at or past ``cu_seqlens_q[-1]`` (no request owns
            them, the kernels do not write them) are left as they are, out and lse alike (their
            values are compared on the device, no synchronisation).  None: every row is rescaled.

    Returns ``lse`` (now the sink-inclusive LSE).

    Runs under ``torch.inference_mode``: it records no autograd (kernelgen is forward-only;
    learnable sinks, an ``nn.Parameter``, would otherwise tie ``out`` and ``lse`` to a graph, and an
    ``AttentionPlan``'s preallocated LSE scratch would chain every step onto the previous one), and
    it updates in place buffers made under inference mode even when called outside it, as the
    kernels (which write through pointers) do.
    """
    with torch.inference_mode():
        return _apply(out, lse, sinks.detach(), cu_seqlens_q)


def _apply(out, lse, sinks, cu_seqlens_q):
    lse32 = lse if lse.dtype == torch.float32 else lse.float()
    s = sinks.to(lse32.dtype).reshape(-1, 1)                      # (H, 1), per query head
    new = torch.logaddexp(lse32, s)                               # -inf only when both are -inf
    # exp(lse - new) in [0, 1]; NaN only for -inf - -inf: a row with no key (out = 0) and no sink
    factor = torch.nan_to_num(torch.exp(lse32 - new), nan=0.0)
    if cu_seqlens_q is not None:
        valid = torch.arange(lse32.shape[1], device=lse32.device) < cu_seqlens_q[-1]   # (total_q,), on device
        factor = torch.where(valid, factor, 1.0)
        new = torch.where(valid, new, lse32)
    # out (T, H, dv) *= factor (H, T): computed in float32 (the common dtype), stored in out's dtype
    out.mul_(factor.t().unsqueeze(-1))
    lse.copy_(new)
    return lse
