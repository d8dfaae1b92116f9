"""GPU: the per-signature fast path of varlen_attention and AttentionPlan.run (issue 9).

The validated first call and the cached calls after it give the reference result on fresh data;
a cached call from a new thread, a cached call captured in a CUDA graph and replayed with new
data, and a cached call on a non-current device (two GPUs) work; the workspace of one call is
not shared by two calls in flight on different streams; the graph launch of cached calls
(kernelgen/launch/graph_launch.py) re-points its nodes as queries and outputs change.
"""
import threading

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.front import api
from kernelgen.front.plan import AttentionPlan
from kernelgen.launch import graph_launch

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
HQ, HKV, D, PS = 32, 8, 128, 16


def decode_batch(batch=32, max_ctx=3000, seed=0, device="cuda"):
    rng = np.random.default_rng(seed)
    g = torch.Generator(device=device).manual_seed(seed)
    ctx = rng.integers(1, max_ctx, size=batch)
    need = [-(-int(c) // PS) for c in ctx]
    pages = sum(need) + 3
    kc = torch.randn(pages, PS, HKV, D, generator=g, device=device).to(BF16)
    vc = torch.randn(pages, PS, HKV, D, generator=g, device=device).to(BF16)
    perm = rng.permutation(pages)
    pt = np.zeros((batch, max(need)), dtype=np.int32)
    at = 0
    for i, n in enumerate(need):
        pt[i, :n] = perm[at:at + n]
        at += n
    return {"q": torch.randn(batch, HQ, D, generator=g, device=device).to(BF16), "k": kc, "v": vc,
            "cu_q": torch.arange(batch + 1, dtype=torch.int32, device=device),
            "pt": torch.tensor(pt, device=device), "used": torch.tensor(ctx, dtype=torch.int32, device=device),
            "max_ctx": max_ctx}


def refill(a, seed):
    """New data in the same tensors (a new decode step of the same signature)."""
    g = torch.Generator(device=a["q"].device).manual_seed(seed)
    for key in ("q", "k", "v"):
        a[key].copy_(torch.randn(a[key].shape, generator=g, device=a[key].device).to(BF16))
    rng = np.random.default_rng(seed)
    used = rng.integers(1, a["pt"].shape[1] * PS + 1, size=a["used"].shape[0])
    a["used"].copy_(torch.tensor(used, dtype=torch.int32))   # rows past a request's pages hold page 0
    return a


def check(a, out, lse=None):
    k, v, cu_k = gather_paged(a["k"], a["v"], a["pt"], a["used"])
    ref, ref_lse = attention_reference(a["q"], k, v, a["cu_q"], cu_k, causal=True)
    atol, rtol = tolerance(BF16)
    r = ref.to(BF16).double()
    assert not torch.isnan(out).any()
    assert ((out.double() - r).abs() <= atol + rtol * r.abs()).all()
    if lse is not None:
        assert torch.allclose(lse.double(), ref_lse, atol=2e-3, rtol=1e-4)


def call(a, out=None, **kw):
    return kernelgen.varlen_attention(a["q"], a["k"], a["v"], a["cu_q"], None, 1, a["max_ctx"], seqused_k=a["used"],
                                      page_table=a["pt"], causal=True, out=out, **kw)


def test_validated_then_cached_calls_match_the_reference():
    api.clear_signature_cache()
    a = decode_batch()
    out = torch.full_like(a["q"], float("nan"))
    for step in range(4):
        if step:
            refill(a, step)
            out.fill_(float("nan"))
        res, lse = call(a, out=out, return_lse=True)
        torch.cuda.synchronize()
        assert res is out
        check(a, out, lse)
    assert len(api._CALLS) == 1


def test_cached_call_from_a_new_thread():
    api.clear_signature_cache()
    a = decode_batch(seed=5)
    call(a)
    torch.cuda.synchronize()
    got = {}

    def worker():
        try:
            got["out"] = call(a)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            got["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "error" not in got, got.get("error")
    check(a, got["out"])


def test_cached_call_captured_in_a_graph():
    api.clear_signature_cache()
    a = decode_batch(seed=7)
    out = torch.empty_like(a["q"])
    call(a, out=out)                                 # validated and prepared outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call(a, out=out)                             # a cache hit: one workspace from the graph pool
    for step in range(5):
        refill(a, 100 + step)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check(a, out)


def test_two_streams_do_not_share_a_workspace():
    """Back-to-back cached calls on two streams: each allocation is stream-ordered by PyTorch."""
    api.clear_signature_cache()
    a, b = decode_batch(seed=11), decode_batch(seed=12)
    call(a), call(b)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    outs = {}
    for _ in range(3):
        with torch.cuda.stream(s1):
            outs["a"] = call(a)
        with torch.cuda.stream(s2):
            outs["b"] = call(b)
    torch.cuda.synchronize()
    check(a, outs["a"])
    check(b, outs["b"])


def test_graph_launch_with_changing_pointers():
    """From a stream's second call on a cached call is one CUDA graph launch whose kernel nodes are
    re-pointed where pointers changed: alternating queries and outputs each give the reference."""
    api.clear_signature_cache()
    a = decode_batch(seed=13)
    qs = [a["q"], torch.empty_like(a["q"])]
    outs = [torch.empty_like(a["q"]), torch.empty_like(a["q"])]
    g = torch.Generator(device="cuda").manual_seed(13)
    for step in range(8):
        refill(a, 300 + step)
        q = qs[step % 2]
        q.copy_(torch.randn(q.shape, generator=g, device="cuda").to(BF16))
        out = outs[(step // 2) % 2]
        out.fill_(float("nan"))
        res = call(dict(a, q=q), out=out)
        torch.cuda.synchronize()
        assert res is out
        check(dict(a, q=q), out)
    (prep,) = api._CALLS._d.values()
    graphs = prep._tls.graphs.get(torch.cuda.current_stream().cuda_stream)
    assert isinstance(graphs, graph_launch.GraphCache), "the cached calls did not take the graph launch"
    assert len(graphs) == 4                   # one graph per (q, out) pair, each launched twice


def test_plan_run_cached_steps():
    a = decode_batch(seed=3)
    plan = AttentionPlan(max_batch=64, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=64, max_seqlen_q=1,
                         max_seqlen_k=a["max_ctx"], paged=True, causal=True)
    out = torch.empty_like(a["q"])
    lse = torch.empty(HQ, a["q"].shape[0], dtype=torch.float32, device="cuda")
    for step in range(3):
        refill(a, 200 + step)
        out.fill_(float("nan"))
        plan.run(a["q"], a["k"], a["v"], a["cu_q"], seqused_k=a["used"], page_table=a["pt"], out=out, lse=lse)
        torch.cuda.synchronize()
        check(a, out, lse)
    assert len(plan._steps) == 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_cached_call_on_a_non_current_device():
    api.clear_signature_cache()
    a = decode_batch(seed=9, device="cuda:1")
    call(a)
    torch.cuda.synchronize(1)
    with torch.cuda.device(0):
        refill(a, 19)
        out = call(a)                                # cached; launched with cuda:1 made current
        torch.cuda.synchronize(1)
    assert out.device == torch.device("cuda", 1)
    check(a, out)
