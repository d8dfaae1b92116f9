"""GPU: kernelgen under torch.compile(fullgraph=True) and CUDA graphs gives the eager result, and the
FlashAttention-3 compat functions give the native calls' results (bitwise where the same kernels
run), checked against the float64 reference too."""
import zlib

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.front import compat, ops

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def seed_of(*key):
    return zlib.crc32(repr(key).encode()) % 100000


def assert_close(out, ref, dtype=BF16, bound=0.0):
    """``bound``: the reference's error bound of the kernels' approximations (``error_bounds``), added."""
    atol, rtol = tolerance(dtype)
    r = ref.to(dtype).double()
    assert not torch.isnan(out).any()
    err = (out.double() - r).abs()
    assert (err <= atol + rtol * r.abs() + bound).all(), f"max err {err.max().item():.3e}"


def packed_batch(lens, hq=32, hkv=8, d=128, seed=0, dtype=BF16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(lens)
    q = torch.randn(total, hq, d, generator=g, device="cuda").to(dtype)
    k = torch.randn(total, hkv, d, generator=g, device="cuda").to(dtype)
    v = torch.randn(total, hkv, d, generator=g, device="cuda").to(dtype)
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    return q, k, v, cu


def paged_cache(ctx, hkv=8, d=128, page_size=16, seed=0, dtype=BF16, spare=5):
    """A paged cache with each request's pages in random order; returns (k_cache, v_cache, page_table, seqused)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rng = np.random.default_rng(seed)
    need = [-(-n // page_size) for n in ctx]
    width = max(need + [1]) + 1
    num_pages = sum(need) + spare
    kc = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda").to(dtype)
    vc = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda").to(dtype)
    perm = rng.permutation(num_pages)
    pt = np.zeros((len(ctx), width), dtype=np.int32)
    at = 0
    for b, n in enumerate(need):
        pt[b, :n] = perm[at:at + n]
        at += n
    return kc, vc, torch.tensor(pt, device="cuda"), torch.tensor(ctx, dtype=torch.int32, device="cuda")


# ----------------------------------------------------------------------------- torch.compile
class Attention(torch.nn.Module):
    """The attention core of a layer: kernelgen varlen attention on (tokens, heads, dim) inputs."""

    def forward(self, q, k, v, cu_seqlens, max_seqlen: int):
        out, lse = ops.varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True,
                                        return_lse=True)
        return out, lse


class Layer(torch.nn.Module):
    """A small attention layer: QKV projection, kernelgen, output projection."""

    def __init__(self, hidden=1024, hq=8, hkv=2, d=128):
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.qkv = torch.nn.Linear(hidden, (hq + 2 * hkv) * d, bias=False)
        self.o = torch.nn.Linear(hq * d, hidden, bias=False)

    def forward(self, x, cu_seqlens, max_seqlen: int):
        t = x.shape[0]
        q, k, v = self.qkv(x).split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        q = q.reshape(t, self.hq, self.d)
        k = k.reshape(t, self.hkv, self.d)
        v = v.reshape(t, self.hkv, self.d)
        out = ops.varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True)
        return self.o(out.reshape(t, self.hq * self.d)), q, k, v, out


@torch.inference_mode()
def test_compiled_prefill_equals_eager():
    """Packed causal prefill: the compiled graph runs the same kernels on the same inputs -> bitwise."""
    torch._dynamo.reset()
    m = Attention()
    compiled = torch.compile(m, fullgraph=True, dynamic=True)
    for i, lens in enumerate(([900, 2048, 17], [5, 300, 1, 1200, 64])):
        q, k, v, cu = packed_batch(lens, seed=seed_of("prefill", i))
        e, el = m(q, k, v, cu, max(lens))
        c, cl = compiled(q, k, v, cu, max(lens))
        torch.cuda.synchronize()
        assert torch.equal(e, c) and torch.equal(el, cl)
        ref, _ = attention_reference(q, k, v, cu, cu, causal=True)
        assert_close(c, ref)


@torch.inference_mode()
def test_compiled_layer_matches_eager():
    """Projections around kernelgen in one fullgraph; attention output bitwise equal given the same q/k/v."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = Layer().cuda().to(BF16)
    compiled = torch.compile(m, fullgraph=True)
    lens = [700, 33, 1500]
    x = torch.randn(sum(lens), 1024, device="cuda").to(BF16)
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    y_e, q_e, k_e, v_e, a_e = m(x, cu, max(lens))
    y_c, q_c, k_c, v_c, a_c = compiled(x, cu, max(lens))
    torch.cuda.synchronize()
    # inductor may round the projections differently; the attention of the compiled q/k/v must be
    # exactly what eager kernelgen gives on them
    a_ref = kernelgen.varlen_attention(q_c, k_c, v_c, cu, cu, max(lens), max(lens), causal=True)
    assert torch.equal(a_c, a_ref)
    assert torch.allclose(y_c.float(), y_e.float(), atol=3e-2, rtol=3e-2)
    ref, _ = attention_reference(q_e, k_e, v_e, cu, cu, causal=True)
    assert_close(a_e, ref)


@torch.inference_mode()
def test_compiled_out_variant_writes_in_place():
    torch._dynamo.reset()

    def f(q, k, v, cu, out):
        ops.varlen_attention(q, k, v, cu, cu, 512, 512, causal=True, out=out)
        return out.float().sum()

    q, k, v, cu = packed_batch([512, 100], seed=3)
    out_e = torch.full((612, 32, 128), float("nan"), dtype=BF16, device="cuda")
    out_c = out_e.clone()
    f(q, k, v, cu, out_e)
    torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, cu, out_c)  # functionalisation of the mutation
    torch.cuda.synchronize()
    assert torch.equal(out_e, out_c)


@torch.inference_mode()
def test_compiled_paged_decode_cuda_graphs_equals_eager():
    """Paged decode through the FA3 compat call, compiled with CUDA graphs (reduce-overhead): replays
    with new cache lengths and page tables give the eager result bitwise."""
    torch._dynamo.reset()

    def decode(q, k_cache, v_cache, page_table, cache_seqlens):
        out, lse = compat.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                  page_table=page_table, causal=True, return_softmax_lse=True)
        return out * 1, lse  # an op after attention, so inductor has something to fuse around it

    b = 24
    rng = np.random.default_rng(11)
    compiled = torch.compile(decode, fullgraph=True, mode="reduce-overhead")
    kc, vc, pt, used = paged_cache([int(x) for x in rng.integers(1, 5000, size=b)], seed=11)
    for step in range(5):
        ctx = [int(x) for x in rng.integers(1, 5000, size=b)]
        ctx = [min(c, pt.shape[1] * 16) for c in ctx]
        used = torch.tensor(ctx, dtype=torch.int32, device="cuda")
        pt = pt[torch.randperm(b, device="cuda")]  # new page tables (rows of the same cache)
        q = torch.randn(b, 1, 32, 128, device="cuda").to(BF16)
        e_out, e_lse = decode(q, kc, vc, pt, used)
        c_out, c_lse = compiled(q, kc, vc, pt, used)
        torch.cuda.synchronize()
        assert torch.equal(e_out, c_out) and torch.equal(e_lse, c_lse), f"step {step}"
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        cu_q = torch.arange(b + 1, dtype=torch.int32, device="cuda")
        ref, _ = attention_reference(q.view(b, 32, 128), k, v, cu_q, cu_k, causal=True)
        assert_close(c_out.view(b, 32, 128), ref)


# ----------------------------------------------------------------------------- compat vs native
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_func_equals_native(causal):
    lens = [900, 2048, 17, 1]
    q, k, v, cu = packed_batch(lens, seed=seed_of("varlen", causal))
    o, lse = compat.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=causal,
                                           window_size=(256, -1), softcap=20.0, return_attn_probs=True)
    n, nl = kernelgen.varlen_attention(q, k, v, cu, cu, max(lens), max(lens), causal=causal, window_size=(256, -1),
                                       softcap=20.0, num_splits=1, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(o, n) and torch.equal(lse, nl)
    ref, _, bound, _ = attention_reference(q, k, v, cu, cu, causal=causal, window_size=(256, -1), softcap=20.0,
                                           error_bounds=True)
    assert_close(o, ref, bound=bound)


def test_varlen_func_block_table_equals_native_paged():
    ctx = [1000, 17, 4000, 1]
    kc, vc, pt, used = paged_cache(ctx, seed=21)
    qlens = [1, 17, 300, 1]
    g = torch.Generator(device="cuda").manual_seed(22)
    q = torch.randn(sum(qlens), 32, 128, generator=g, device="cuda").to(BF16)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(ctx)), dtype=torch.int32, device="cuda")
    o = compat.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max(qlens), max(ctx), causal=True, block_table=pt,
                                      num_splits=0)
    n = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), max(ctx), seqused_k=used, page_table=pt,
                                   causal=True)
    torch.cuda.synchronize()
    assert torch.equal(o, n)


def test_with_kvcache_paged_decode_equals_native():
    b = 16
    rng = np.random.default_rng(31)
    ctx = [int(x) for x in rng.integers(1, 8000, size=b)]
    kc, vc, pt, used = paged_cache(ctx, seed=31)
    q = torch.randn(b, 1, 32, 128, device="cuda").to(BF16)
    o, lse = compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=pt, causal=True,
                                            return_softmax_lse=True)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    n, nl = kernelgen.varlen_attention(q.view(b, 32, 128), kc, vc, cu_q, None, 1, None, seqused_k=used,
                                       page_table=pt, causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert o.shape == (b, 1, 32, 128) and lse.shape == (b, 32, 1)
    assert torch.equal(o.view(b, 32, 128), n)
    assert torch.equal(lse, nl.view(32, b, 1).transpose(0, 1))
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, _ = attention_reference(q.view(b, 32, 128), k, v, cu_q, cu_k, causal=True)
    assert_close(n, ref)


@pytest.mark.parametrize("seqlen_q", [1, 4])
def test_with_kvcache_contiguous_cache_equals_native_packed(seqlen_q):
    b, cache_len = 6, 3000
    g = torch.Generator(device="cuda").manual_seed(41 + seqlen_q)
    kc = torch.randn(b, cache_len, 8, 128, generator=g, device="cuda").to(BF16)
    vc = torch.randn(b, cache_len, 8, 128, generator=g, device="cuda").to(BF16)
    used = torch.tensor([1, 3000, 17, 2000, 4, 999], dtype=torch.int32, device="cuda")
    q = torch.randn(b, seqlen_q, 32, 128, generator=g, device="cuda").to(BF16)
    o = compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, causal=True)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device="cuda") * seqlen_q
    cu_k = torch.arange(b + 1, dtype=torch.int32, device="cuda") * cache_len
    n = kernelgen.varlen_attention(q.reshape(b * seqlen_q, 32, 128), kc.view(b * cache_len, 8, 128),
                                   vc.view(b * cache_len, 8, 128), cu_q, cu_k, seqlen_q, cache_len, seqused_k=used,
                                   causal=True)
    torch.cuda.synchronize()
    assert torch.equal(o.reshape(b * seqlen_q, 32, 128), n)
    # against the reference on each request's first cache_seqlens keys
    ks = torch.cat([kc[i, :int(used[i])] for i in range(b)])
    vs = torch.cat([vc[i, :int(used[i])] for i in range(b)])
    cu_used = torch.tensor([0] + list(np.cumsum(used.tolist())), dtype=torch.int32, device="cuda")
    ref, _ = attention_reference(q.reshape(b * seqlen_q, 32, 128), ks, vs, cu_q, cu_used, causal=True)
    assert_close(n, ref)


def test_with_kvcache_sliced_cache_goes_paged_and_is_correct():
    """A cache slice whose first two dims cannot be merged runs as one page per request (no copy)."""
    b, cap_len, cache_len = 4, 4096, 1000
    g = torch.Generator(device="cuda").manual_seed(51)
    big_k = torch.randn(b, cap_len, 8, 128, generator=g, device="cuda").to(BF16)
    big_v = torch.randn(b, cap_len, 8, 128, generator=g, device="cuda").to(BF16)
    kc, vc = big_k[:, :cache_len], big_v[:, :cache_len]
    used = torch.tensor([1000, 1, 500, 999], dtype=torch.int32, device="cuda")
    q = torch.randn(b, 1, 32, 128, generator=g, device="cuda").to(BF16)
    o = compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, causal=True)
    pt = torch.arange(b, dtype=torch.int32, device="cuda").view(b, 1)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    n = kernelgen.varlen_attention(q.view(b, 32, 128), kc, vc, cu_q, None, 1, None, seqused_k=used, page_table=pt,
                                   causal=True)
    torch.cuda.synchronize()
    assert torch.equal(o.view(b, 32, 128), n)
    ks = torch.cat([kc[i, :int(used[i])] for i in range(b)])
    vs = torch.cat([vc[i, :int(used[i])] for i in range(b)])
    cu_used = torch.tensor([0] + list(np.cumsum(used.tolist())), dtype=torch.int32, device="cuda")
    ref, _ = attention_reference(q.view(b, 32, 128), ks, vs, cu_q, cu_used, causal=True)
    assert_close(n, ref)


@torch.inference_mode()
@pytest.mark.parametrize("qlens", [[1] * 32, [1, 300, 1, 17, 1, 1, 1024, 1]], ids=["decode", "mixed"])
def test_varlen_func_num_splits_bound_in_a_replayed_cuda_graph(qlens):
    """vLLM's full-CUDA-graph call: ``num_splits=16`` on every step, which FA3's varlen scheduler reads
    as an upper bound (kernelgen's ``max_num_splits``), with ``seqused_k`` and ``block_table``; captured
    once, replayed with new cache lengths and q, out poisoned with NaN first: each replay matches the
    float64 reference, and the eager ``kernelgen.varlen_attention(max_num_splits=16)`` call bitwise."""
    b, cap = len(qlens), 20000
    rng = np.random.default_rng(61 + b)
    kc, vc, pt, used = paged_cache([cap] * b, seed=61 + b)
    total_q = sum(qlens)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    q = torch.empty(total_q, 32, 128, device="cuda", dtype=BF16)
    out = torch.empty(total_q, 32, 128, device="cuda", dtype=BF16)

    def fill(step):
        ctx = [max(ql, int(x)) for ql, x in zip(qlens, rng.integers(1, cap, size=b))]
        used.copy_(torch.tensor(ctx, dtype=torch.int32))
        q.copy_(torch.randn(total_q, 32, 128, generator=torch.Generator(device="cuda").manual_seed(step),
                            device="cuda").to(BF16))
        out.fill_(float("nan"))

    def run():
        compat.flash_attn_varlen_func(q, kc, vc, cu_q, None, max(qlens), cap, seqused_k=used, block_table=pt,
                                      causal=True, num_splits=16, out=out)

    fill(0)
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for step in range(1, 4):
        fill(step)
        graph.replay()
        torch.cuda.synchronize()
        n = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(qlens), cap, seqused_k=used, page_table=pt,
                                       causal=True, max_num_splits=16)
        torch.cuda.synchronize()
        assert torch.equal(out, n), f"step {step}"
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
        assert_close(out, ref)


# ----------------------------------------------------------------------------- flash_attn_combine
def test_combine_of_kernelgen_key_chunks_is_attention_over_all_keys():
    """Cascade attention as FA3 users write it: kernelgen's partials over two key chunks (the second
    empty for one request) merged by ``flash_attn_combine`` give attention over all keys."""
    b, lq, hq, hkv, d, cut = 3, 40, 32, 8, 128, [300, 700, 0]
    lk = [1000, 1300, 512]
    g = torch.Generator(device="cuda").manual_seed(seed_of("combine"))
    q = torch.randn(b * lq, hq, d, generator=g, device="cuda").to(BF16)
    ks = [torch.randn(n, hkv, d, generator=g, device="cuda").to(BF16) for n in lk]
    vs = [torch.randn(n, hkv, d, generator=g, device="cuda").to(BF16) for n in lk]
    cu_q = torch.arange(0, (b + 1) * lq, lq, dtype=torch.int32, device="cuda")

    def run(parts_k, parts_v):
        lens = [x.shape[0] for x in parts_k]
        cu_k = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
        o, lse = compat.flash_attn_varlen_func(q, torch.cat(parts_k), torch.cat(parts_v), cu_q, cu_k, lq,
                                               max(lens), return_attn_probs=True)
        return o.float().view(b, lq, hq, d), lse.view(hq, b, lq).permute(1, 2, 0), cu_k

    first = run([k[:c] for k, c in zip(ks, cut)], [v[:c] for v, c in zip(vs, cut)])
    second = run([k[c:] for k, c in zip(ks, cut)], [v[c:] for v, c in zip(vs, cut)])
    # a request whose chunk has no keys: LSE -inf, its output poisoned (it must not be read)
    assert torch.isneginf(first[1][2]).all()
    op = torch.stack([first[0], second[0]])
    op[0, 2] = float("nan")
    out, lse = compat.flash_attn_combine(op, torch.stack([first[1], second[1]]), out_dtype=BF16)
    torch.cuda.synchronize()
    whole_k, whole_v = torch.cat(ks), torch.cat(vs)
    cu_k = torch.tensor([0] + list(np.cumsum(lk)), dtype=torch.int32, device="cuda")
    ref, ref_lse = attention_reference(q, whole_k, whole_v, cu_q, cu_k)
    assert_close(out.view(b * lq, hq, d), ref)
    lerr = (lse.permute(2, 0, 1).reshape(hq, -1).double() - ref_lse).abs()   # the LSE bound of the kernels' tests
    assert (lerr <= 2e-3 + 1e-4 * ref_lse.abs()).all(), f"lse err {lerr.max().item():.3e}"
