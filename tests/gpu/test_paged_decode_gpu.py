"""GPU: paged KV, decode (pack-GQA), split-KV + combine, sliding window, softcap, seqused_k, 64-bit
offsets.  Float64 reference on fresh random inputs, NaN-poisoned outputs, exact 0 / -inf rows."""
import math
import zlib

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged, tolerance

from gpu_helpers import check  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def seed_of(*key):
    return zlib.crc32(repr(key).encode()) % 100000


def make_paged(qlens, klens, hq, hkv, d, dv, page_size, seed, dtype=BF16, spare_pages=7):
    """Random q and a paged cache with the requests' pages in random order (and spare pages)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rng = np.random.default_rng(seed)
    need = [-(-n // page_size) for n in klens]
    max_pages = max(need + [1]) + 2                   # page_table wider than needed
    num_pages = sum(need) + spare_pages
    k_cache = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda").to(dtype)
    v_cache = torch.randn(num_pages, page_size, hkv, dv, generator=g, device="cuda").to(dtype)
    perm = rng.permutation(num_pages)
    pt = np.full((len(qlens), max_pages), -1, dtype=np.int32)   # unused slots hold junk (-1)
    at = 0
    for b, n in enumerate(need):
        pt[b, :n] = perm[at:at + n]
        at += n
    q = torch.randn(sum(qlens), hq, d, generator=g, device="cuda").to(dtype)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    return q, k_cache, v_cache, torch.tensor(pt, device="cuda"), torch.tensor(klens, dtype=torch.int32, device="cuda"), cu_q


def run_paged(q, k_cache, v_cache, pt, used, cu_q, *, causal, dtype=BF16, **kw):
    total_q, hq = q.shape[:2]
    out = torch.full((total_q, hq, v_cache.shape[-1]), float("nan"), dtype=dtype, device="cuda")
    maxq = int((cu_q[1:] - cu_q[:-1]).max().item())
    o, lse = kernelgen.varlen_attention(q, k_cache, v_cache, cu_q, None, maxq, int(used.max().item()),
                                        seqused_k=used, page_table=pt, causal=causal, return_lse=True, out=out, **kw)
    torch.cuda.synchronize()
    k, v, cu_k = gather_paged(k_cache, v_cache, pt, used)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=causal, error_bounds=True,
                                                  window_size=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0))
    check(o, lse, ref, ref_lse, dtype, bound=bound, lse_bound=lb)
    return o, lse


@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
@pytest.mark.parametrize("hd,gqa", [(64, 1), (128, 4), (128, 8)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("phase", ["decode", "mixed"])
def test_paged_matrix(page_size, hd, gqa, causal, phase):
    seed = seed_of(page_size, hd, gqa, causal, phase)
    rng = np.random.default_rng(seed)
    b = 7
    klens = [int(x) for x in rng.integers(1, 3000, size=b)]
    klens[2] = 0                                   # empty context: out 0, lse -inf
    klens[3] = page_size * 3 + 1                   # last page holds one token
    qlens = [1] * b if phase == "decode" else [int(x) for x in rng.integers(1, 200, size=b)]
    qlens = [min(a, max(c, 1)) for a, c in zip(qlens, klens)] if phase == "mixed" else qlens
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 2 * gqa, 2, hd, hd, page_size, seed)
    run_paged(q, kc, vc, pt, used, cu_q, causal=causal)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 8, 17, 64])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_forced_splits(num_splits, phase):
    seed = seed_of(num_splits, phase)
    rng = np.random.default_rng(seed)
    klens = [int(x) for x in rng.integers(500, 9000, size=5)]
    qlens = [1] * 5 if phase == "decode" else [int(x) for x in rng.integers(1, 300, size=5)]
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 16, 4, 128, 128, 16, seed)
    o_split, _ = run_paged(q, kc, vc, pt, used, cu_q, causal=True, num_splits=num_splits)


@pytest.mark.parametrize("klens", [[0, 1, 32768, 17000], [32768] * 3, [0, 0]])
def test_long_and_empty_contexts_auto_split(klens):
    qlens = [1] * len(klens)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 32, 8, 128, 128, 16, seed_of(klens))
    o, lse = run_paged(q, kc, vc, pt, used, cu_q, causal=True)
    for i, n in enumerate(klens):
        if n == 0:
            assert torch.all(o[i] == 0) and torch.all(torch.isneginf(lse[:, i]))


@pytest.mark.parametrize("klens", [[65536, 40000, 1, 0], [131072] * 2])
def test_one_kv_head_decode_splits_past_128(klens):
    """Tensor-parallel decode (one KV head, 8 query heads a GPU) of a few long requests: the
    automatic split count goes past 128 (``heuristics.decode_split_bound``, up to 255 per request,
    checked on the scheduler's own reference for the launch's config), and the combine kernel
    merges that many partials per row within the bf16 tolerance of the float64 reference."""
    from kernelgen.kernels import metadata
    from gpu_helpers import prepared

    qlens = [1] * len(klens)
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 8, 1, 128, 128, 16, seed_of("tp", klens))
    o, lse = run_paged(q, kc, vc, pt, used, cu_q, causal=True)
    cfg = prepared().config
    assert cfg.max_splits > 128 and cfg.wave_ctas > 0, cfg
    buf = metadata.reference_schedule(cu_q.cpu().numpy(), None, len(klens), len(klens), cfg, "soa",
                                      seqused_k=used.cpu().numpy())
    splits = metadata.decode(buf, "soa", len(klens))["splits_nheads"] & 0xFFFF
    assert int(splits.max()) > 128, splits
    for i, n in enumerate(klens):
        if n == 0:
            assert torch.all(o[i] == 0) and torch.all(torch.isneginf(lse[:, i]))


@pytest.mark.parametrize("window,softcap,causal", [((64, 0), 0.0, True), ((32, 16), 0.0, False),
                                                   ((-1, -1), 30.0, True), ((100, 0), 50.0, True)])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_window_and_softcap(window, softcap, causal, phase):
    seed = seed_of(window, softcap, phase)
    rng = np.random.default_rng(seed)
    klens = [int(x) for x in rng.integers(1, 2000, size=5)]
    qlens = [1] * 5 if phase == "decode" else [min(int(x), c) for x, c in zip(rng.integers(1, 400, size=5), klens)]
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 8, 2, 128, 128, 16, seed)
    run_paged(q, kc, vc, pt, used, cu_q, causal=causal, window_size=window, softcap=softcap)
    # the same on packed k/v (no page table)
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    out = torch.full((q.shape[0], 8, 128), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal, window_size=window,
                                        softcap=softcap, return_lse=True, out=out)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=causal, window_size=window,
                                                  softcap=softcap, error_bounds=True)
    check(o, lse, ref, ref_lse, BF16, bound=bound, lse_bound=lb)


def test_head_dim_192_128_paged_split():
    q, kc, vc, pt, used, cu_q = make_paged([1, 1, 37], [5000, 100, 3000], 16, 4, 192, 128, 64, 3)
    run_paged(q, kc, vc, pt, used, cu_q, causal=True, num_splits=5)
    run_paged(q, kc, vc, pt, used, cu_q, causal=True)


@pytest.mark.parametrize("dtype", [torch.float16, BF16])
def test_fp16_and_pack_equivalence(dtype):
    q, kc, vc, pt, used, cu_q = make_paged([1, 2, 1, 4], [700, 3000, 1, 65], 32, 8, 128, 128, 16, 9, dtype=dtype)
    a, _ = run_paged(q, kc, vc, pt, used, cu_q, causal=True, dtype=dtype, pack_gqa=True)
    b, _ = run_paged(q, kc, vc, pt, used, cu_q, causal=True, dtype=dtype, pack_gqa=False)
    atol, rtol = tolerance(dtype)
    assert torch.allclose(a.double(), b.double(), atol=2 * atol, rtol=2 * rtol)


def test_seqused_k_with_packed_kv():
    """seqused_k without paging: lengths from seqused_k, offsets from cu_seqlens_k."""
    g = torch.Generator(device="cuda").manual_seed(5)
    used = [60, 300, 0]
    cu_k = torch.tensor([0, 100, 400, 450], dtype=torch.int32, device="cuda")
    k = torch.randn(450, 2, 64, generator=g, device="cuda").to(BF16)
    v = torch.randn(450, 2, 64, generator=g, device="cuda").to(BF16)
    q = torch.randn(3, 4, 64, generator=g, device="cuda").to(BF16)
    cu_q = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device="cuda")
    su = torch.tensor(used, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 1, 300, seqused_k=su, return_lse=True, out=out)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, seqused_k=su)
    check(o, lse, ref, ref_lse, BF16)


# ---------------------------------------------------------------------------------------------
# shared/research/edge_cases.md


def test_e1_seqused_variant_and_zero_kv():
    """E1 (a): the decode batch with empty requests given as seqused_k; (b) a q_len 1 / kv_len 0 request."""
    qlens, klens = [0, 1, 0, 1, 1], [0, 3, 0, 5, 0]
    q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, 9, 3, 64, 64, 16, 11)
    o, lse = run_paged(q, kc, vc, pt, used, cu_q, causal=True)
    assert o.shape == (3, 9, 64)
    assert torch.all(o[2] == 0) and torch.all(torch.isneginf(lse[:, 2]))
    # dispatcher equivalence: with a larger max_seqlen_q hint (no pack, other tile) the result agrees
    o2 = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 2, 5, seqused_k=used, page_table=pt, causal=True,
                                    pack_gqa=False)
    assert torch.allclose(o.double(), o2.double(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("num_splits", [2, 3, 8])
def test_e2_paged_split_writes_every_row(num_splits):
    q, kc, vc, pt, used, cu_q = make_paged([1, 1], [1024, 1024], 4, 4, 64, 64, 256, 12, spare_pages=0)
    o, _ = run_paged(q, kc, vc, pt, used, cu_q, causal=False, num_splits=num_splits)
    assert not torch.equal(o[0], o[1])
    q, kc, vc, pt, used, cu_q = make_paged([1, 3], [1024, 700], 4, 4, 64, 64, 256, 13)
    run_paged(q, kc, vc, pt, used, cu_q, causal=False, num_splits=num_splits)


@pytest.mark.parametrize("num_splits", [0, 1, 3])
def test_e4_paged_fully_masked_rows(num_splits):
    q, kc, vc, pt, used, cu_q = make_paged([4, 3], [2, 5], 4, 2, 64, 64, 16, 14)
    o, lse = run_paged(q, kc, vc, pt, used, cu_q, causal=True, num_splits=num_splits)
    assert torch.all(o[:2] == 0) and torch.all(torch.isneginf(lse[:, :2]))
    q, kc, vc, pt, used, cu_q = make_paged([130, 3], [1, 5], 4, 2, 64, 64, 16, 15)
    o, lse = run_paged(q, kc, vc, pt, used, cu_q, causal=True, num_splits=num_splits)
    assert torch.all(o[:129] == 0) and torch.all(torch.isneginf(lse[:, :129]))


@pytest.mark.parametrize("interleaved", [False, True])
def test_e5_offsets_past_2_31_elements(interleaved):
    """Pages whose base offset is >= 2^31 elements are addressed correctly (64-bit arithmetic)."""
    ps, hkv, d = 16, 8, 128
    if interleaved:
        kv = torch.zeros(65537, 2, ps, hkv, d, dtype=BF16, device="cuda")
        kc, vc = kv[:, 0], kv[:, 1]
        targets = [65535, 65536]
    else:
        kc = torch.zeros(131073, ps, hkv, d, dtype=BF16, device="cuda")
        vc = torch.zeros_like(kc)
        targets = [131071, 131072]
    q = torch.randn(1, 32, d, device="cuda").to(BF16)
    cu_q = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    used = torch.tensor([16], dtype=torch.int32, device="cuda")
    for page in targets:
        vc[page] = 3.0
        kc[page] = torch.randn(ps, hkv, d, device="cuda").to(BF16)
        pt = torch.tensor([[page]], dtype=torch.int32, device="cuda")
        out = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, 16, seqused_k=used, page_table=pt)
        torch.cuda.synchronize()
        assert torch.all(out == 3.0), f"page {page}: {out.unique()[:5].tolist()}"
    del kc, vc
    torch.cuda.empty_cache()


def test_split_lse_matches_reference():
    q, kc, vc, pt, used, cu_q = make_paged([1, 1, 1], [20000, 3, 9000], 8, 1, 128, 128, 64, 16)
    o, lse = run_paged(q, kc, vc, pt, used, cu_q, causal=False, num_splits=16)
    assert torch.all(torch.isfinite(lse))
    assert math.isfinite(float(lse.sum()))


@pytest.mark.parametrize("row_warps", [1, 2, 4, 8])
@pytest.mark.parametrize("dv,sinks,splits", [(128, False, 0), (128, True, 40), (64, True, 0), (256, False, 23)])
def test_combine_row_warps(row_warps, dv, sinks, splits, monkeypatch):
    """Every ``CombineSpec.row_warps`` merges the same partials right: the selection forced to
    ``row_warps`` (``heuristics.combine_row_warps``) on a paged split decode with empty and
    one-key contexts (splits that saw no keys), up to 40 splits a row (several rounds of UNROLL
    partials a warp at one warp a row) and a sink per head (the combine adds it once)."""
    from kernelgen.front import api
    from kernelgen.selection import heuristics
    from gpu_helpers import prepared

    monkeypatch.setattr(heuristics, "combine_row_warps", lambda *a, **k: row_warps)
    api.clear_signature_cache()
    klens = [9000, 0, 1, 4100, 700, 33, 16000]
    seed = seed_of("rw", row_warps, dv, sinks, splits)
    q, kc, vc, pt, used, cu_q = make_paged([1] * len(klens), klens, 16, 4, dv, dv, 16, seed)
    hq = q.shape[1]
    sk = torch.linspace(-1.0, 3.0, hq, device="cuda", dtype=torch.float32) if sinks else None
    out = torch.full((q.shape[0], hq, dv), float("nan"), dtype=BF16, device="cuda")
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, 1, max(klens), seqused_k=used, page_table=pt,
                                        causal=True, return_lse=True, out=out, num_splits=splits, sinks=sk)
    torch.cuda.synchronize()
    comb = prepared().combine
    assert comb is not None and ("_rw" in comb.name) == (row_warps != 4), comb.name
    assert row_warps == 4 or comb.name.endswith(f"_rw{row_warps}"), comb.name
    assert comb.grid == -(-len(klens) * hq * row_warps // 8), comb.grid   # rows_per_cta = 8 / row_warps
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse, bound, lb = attention_reference(q, k, v, cu_q, cu_k, causal=True, sinks=sk, error_bounds=True)
    check(o, lse, ref, ref_lse, BF16, bound=bound, lse_bound=lb)
    api.clear_signature_cache()
