"""Scaffolding shared by the GPU tests (tests/gpu is on sys.path: ``from gpu_helpers import ...``).

- ``HOPPER``: whether the device is an sm_90a one; ``prepared()``: the last call's prepared launches.
- ``check``: a NaN-poisoned call's out and LSE against the float64 reference, within
  ``reference.tolerance(dtype, kv_dtype)``; rows that see no key must be 0 with LSE -inf exactly.
- ``make_packed``: random packed q / k / v (one seeded generator) and their cu_seqlens;
  ``decode_lengths``: a decode batch's lengths, two requests without a key.
- An ``AttentionPlan`` step captured in a CUDA graph and replayed: ``plan_buffers`` (the static
  tensors of a paged step at a fixed capacity), ``draw_lengths`` and ``write_lengths`` (a new
  padded step's lengths and page table, written in place), ``capture``, ``replay``, and
  ``check_rows`` (a replayed step's output rows, the rows past them still NaN).

Nothing here touches the GPU at import time: collection runs on machines without one."""
import numpy as np
import torch

from kernelgen.apps.reference import tolerance
from kernelgen.front import api

BF16 = torch.bfloat16
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def prepared():
    return api._CALLS._last[1]


def check(out, lse, ref, ref_lse, dtype, kv_dtype=None, bound=None, lse_bound=None):
    """``bound`` / ``lse_bound`` (``attention_reference(..., error_bounds=True)``): per-element error
    bounds of the kernels' approximations, added to the tolerances."""
    rows = out.shape[0]
    assert not torch.isnan(out).any(), "unwritten or NaN output rows"
    assert not torch.isnan(lse).any(), "unwritten or NaN lse"
    atol, rtol = tolerance(dtype, kv_dtype)
    r = ref.to(dtype).double()
    err = (out.double() - r).abs()
    extra = 0.0 if bound is None else bound
    assert (err <= atol + rtol * r.abs() + extra).all(), f"max err {err.max().item():.3e}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), "rows with no visible key must have lse = -inf exactly"
    assert torch.all(out.transpose(0, 1)[empty] == 0)
    fin = ~empty
    lerr = (lse.double()[fin] - ref_lse[fin]).abs()
    lextra = 0.0 if lse_bound is None else lse_bound[fin]
    assert lerr.numel() == 0 or (lerr <= 2e-3 + 1e-4 * ref_lse[fin].abs() + lextra).all(), \
        f"lse err {lerr.max().item():.3e}"
    assert rows == ref.shape[0]


def make_packed(qlens, klens, hq, hkv, d, seed, dv=None, dtype=BF16, kv_dtype=None):
    """q (dtype), k and v (kv_dtype, else dtype; v of head dim dv, else d), cu_seqlens_q / _k."""
    kv_dtype = dtype if kv_dtype is None else kv_dtype
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(sum(qlens), hq, d, generator=g, device="cuda").to(dtype)
    k = torch.randn(sum(klens), hkv, d, generator=g, device="cuda").to(kv_dtype)
    v = torch.randn(sum(klens), hkv, d if dv is None else dv, generator=g, device="cuda").to(kv_dtype)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k


def decode_lengths(n, seed):
    """(qlens, klens) of a decode batch of ``n`` requests: one query token each, 1 to 2999 keys
    drawn from ``np.random.default_rng(seed)``, requests 3 and 10 with none."""
    rng = np.random.default_rng(seed)
    klens = [int(x) for x in rng.integers(1, 3000, size=n)]
    klens[3] = klens[10] = 0
    return [1] * n, klens


def plan_buffers(cap, max_tq, hq, hkv, d, ps, max_ctx, cache_seed=None, kv_dtype=BF16, q_dtype=BF16):
    """(kc, vc, q, cu_q, used, pt, out, lse): a paged step's static tensors (what a serving engine
    keeps) for ``cap`` requests of up to ``max_ctx`` keys and ``max_tq`` query tokens in all.  The
    caches hold ``cap * max_ctx // ps`` pages: k random from a generator seeded ``cache_seed`` and v
    from the default one, or both left empty without a seed; out is bf16."""
    max_pages = max_ctx // ps
    num_pages = cap * max_pages
    if cache_seed is None:
        kc = torch.empty(num_pages, ps, hkv, d, device="cuda", dtype=kv_dtype)
        vc = torch.empty_like(kc)
    else:
        g = torch.Generator(device="cuda").manual_seed(cache_seed)
        kc = torch.randn(num_pages, ps, hkv, d, generator=g, device="cuda").to(kv_dtype)
        vc = torch.randn_like(kc)
    q = torch.empty(max_tq, hq, d, device="cuda", dtype=q_dtype)
    cu_q = torch.zeros(cap + 1, dtype=torch.int32, device="cuda")
    used = torch.zeros(cap, dtype=torch.int32, device="cuda")
    pt = torch.zeros(cap, max_pages, dtype=torch.int32, device="cuda")
    out = torch.empty(max_tq, hq, d, device="cuda", dtype=BF16)
    lse = torch.empty(hq, max_tq, device="cuda", dtype=torch.float32)
    return kc, vc, q, cu_q, used, pt, out, lse


def draw_lengths(rng, cap, max_ctx, prefill=False, ctx_high=None):
    """(batch, lq, ctx) of a new step padded to ``cap`` requests: 2 to cap real ones of one query
    token (with ``prefill`` the first two of 5 to 249), each seeing its own tokens plus 0 to
    ``ctx_high`` - 1 earlier keys (max_ctx - 256 by default); lengths 0 past the batch."""
    batch = int(rng.integers(2, cap + 1))
    lq = np.zeros(cap, dtype=np.int64)
    lq[:batch] = 1
    if prefill:
        lq[:2] = rng.integers(5, 250, size=2)
    ctx = np.zeros(cap, dtype=np.int64)
    ctx[:batch] = lq[:batch] + rng.integers(0, max_ctx - 256 if ctx_high is None else ctx_high, size=batch)
    return batch, lq, ctx


def write_lengths(rng, lq, ctx, cu_q, used, pt):
    """Writes a step's cu_seqlens_q and seqused_k, and a page table of all the pages in a random
    order, into the plan's tensors (in place: a captured graph reads the same addresses)."""
    cu_q.copy_(torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32))
    used.copy_(torch.tensor(ctx, dtype=torch.int32))
    pt.copy_(torch.tensor(rng.permutation(pt.numel()).reshape(tuple(pt.shape)), dtype=torch.int32))


def capture(run, warm=2):
    """``run()`` ``warm`` times (by default the validating call, then the prepared step's fast
    path), then once more captured in a CUDA graph, which is returned."""
    for _ in range(warm):
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph


def replay(graph):
    graph.replay()
    torch.cuda.synchronize()


def check_rows(out, ref, rows, tol):
    """A replayed step's out[:rows] within tol + tol |ref| of the reference rounded to bf16, and
    the rows past them still NaN (unwritten)."""
    r = ref.to(BF16).double()
    err = (out[:rows].double() - r).abs()
    assert not torch.isnan(out[:rows]).any()
    assert (err <= tol + tol * r.abs()).all(), f"max err {err.max().item():.3e}"
    assert torch.isnan(out[rows:]).all(), "rows past the batch's tokens must not be written"
