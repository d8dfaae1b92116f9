"""GPU correctness of the Hopper attention path (mainloop "sm90a": wgmma, TMA, warp specialisation).

Every case compares against the float64 reference on fresh random inputs, with out and lse
poisoned with NaN first; k/v carry NaN rows past the keys the batch uses (and past seqused_k), so
a key block that reads beyond a request must neither leak nor turn 0 * NaN into NaN.  Failures
print the largest error, where it is, and whether the LSE (which depends only on Q K^T and the
softmax) is right, which separates the two GEMMs.  Skipped without a compute capability 9.0 GPU.
"""
import zlib

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, tolerance
from kernelgen.front import api
from kernelgen.launch import fused, prepared
from kernelgen.selection import heuristics

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="needs a compute capability 9.0 (Hopper) GPU")]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_batch(qlens, klens, hq, hkv, d, dtype, seed, garbage=7, dv=None):
    """q, k, v, cu_q, cu_k for the lengths (v's head dim ``dv``, default ``d``); ``garbage`` NaN
    rows follow the used q/k/v rows."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    tq, tk = sum(qlens), sum(klens)
    q = torch.randn(tq + garbage, hq, d, generator=g, device="cuda").to(dtype)
    k = torch.randn(tk + garbage, hkv, d, generator=g, device="cuda").to(dtype)
    v = torch.randn(tk + garbage, hkv, d if dv is None else dv, generator=g, device="cuda").to(dtype)
    for t in (q, k, v):
        t[t.shape[0] - garbage:] = float("nan")
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k


def check(q, k, v, cu_q, cu_k, *, causal, layout="soa", arch="sm_90a", seqused_k=None, expect="sm90a",
          max_q=None, max_k=None, num_splits=0, expect_split=None, window_size=(-1, -1), softcap=0.0):
    """Run with NaN-poisoned out/lse and compare with the reference (same causal, window_size and
    softcap); returns (out, lse).  ``expect_split``: None = don't care, else whether the attention
    variant must be a split-KV one (then the combine kernel ran and the partials went through the
    workspace)."""
    rows = int(cu_q[-1].item())
    hq, dv = q.shape[1], v.shape[2]
    out = torch.full((q.shape[0], hq, dv), float("nan"), dtype=q.dtype, device="cuda")
    lens_q = (cu_q[1:] - cu_q[:-1]).tolist()
    lens_k = seqused_k.tolist() if seqused_k is not None else (cu_k[1:] - cu_k[:-1]).tolist()
    max_q = max(lens_q + [1]) if max_q is None else max_q
    max_k = max(lens_k + [1]) if max_k is None else max_k
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, return_lse=True, out=out,
                                        metadata_layout=layout, seqused_k=seqused_k, arch=arch, num_splits=num_splits,
                                        window_size=window_size, softcap=softcap)
    torch.cuda.synchronize()
    prep = api._CALLS._last[1]
    name = prep.attn.name
    assert ("_wgmma" in name) == (expect == "sm90a"), f"expected the {expect} path, ran {name}"
    if expect_split is not None:
        assert ("_split" in name) == expect_split and (prep.combine is not None) == expect_split, name
    ref, ref_lse, bound, lse_bound = attention_reference(q, k, v, cu_q, cu_k, causal=causal, seqused_k=seqused_k,
                                                         window_size=window_size, softcap=softcap, error_bounds=True)
    o, lse, ref, ref_lse = o[:rows], lse[:, :rows], ref[:rows], ref_lse[:, :rows]
    bound, lse_bound = bound[:rows], lse_bound[:, :rows]     # the soft-cap's tanh.approx (0 without)
    assert torch.isnan(out[rows:]).all(), "rows past cu_seqlens_q[-1] were written"
    empty = torch.isneginf(ref_lse)
    fin = ~empty
    lerr = (lse.double()[fin] - ref_lse[fin]).abs()
    lse_ok = lerr.numel() == 0 or bool((lerr <= 2e-3 + 1e-4 * ref_lse[fin].abs() + lse_bound[fin]).all())
    lse_info = f"lse max err {lerr.max().item() if lerr.numel() else 0:.3e} ({'ok' if lse_ok else 'WRONG'})"
    nan_rows = torch.isnan(o).any(-1)
    assert not nan_rows.any(), f"NaN/unwritten output at (token, head) {nan_rows.nonzero()[:8].tolist()}; {lse_info}"
    atol, rtol = tolerance(q.dtype)
    ref_c = ref.to(q.dtype).double()
    err = (o.double() - ref_c).abs()
    bad = err > atol + rtol * ref_c.abs() + bound
    if bad.any():
        idx = bad.nonzero()
        cols = torch.unique(idx[:, 2])[:16].tolist()
        toks = torch.unique(idx[:, 0])
        raise AssertionError(f"{name}: max err {err.max().item():.3e}, {int(bad.sum())} bad of {bad.numel()}, first "
                             f"(token, head, col) {idx[:4].tolist()}, columns {cols}, tokens {toks[:8].tolist()}.."
                             f"{toks[-4:].tolist()}; {lse_info}")
    assert torch.equal(torch.isneginf(lse), empty), f"rows with no visible key must have lse = -inf; {lse_info}"
    assert torch.all(o.transpose(0, 1)[empty] == 0), "rows with no visible key must be exactly 0"
    assert lse_ok, lse_info
    return o, lse


def ragged(seed, n=6, qmax=400, kmax=520):
    rng = np.random.default_rng(seed)
    qlens = [int(x) for x in rng.integers(1, qmax, size=n)]
    klens = [int(x) for x in rng.integers(1, kmax, size=n)]
    qlens[1] = 0                      # empty query
    klens[2] = 0                      # no keys: out 0, lse -inf
    qlens[3], klens[3] = 300, 70      # seqlen_q > seqlen_k: causal rows that see nothing
    qlens[4], klens[4] = 129, 257     # one row / one key past a block
    return qlens, klens


MATRIX = [(hd, dt, c, g, lay) for hd in (64, 128) for dt in ("bf16", "fp16") for c in (False, True)
          for g in (1, 4) for lay in ("soa", "aos")]


@pytest.mark.parametrize("hd,dt,causal,gqa,layout", MATRIX)
def test_hopper_matrix(hd, dt, causal, gqa, layout):
    seed = zlib.crc32(repr(("sm90", hd, dt, causal, gqa, layout)).encode()) % 100000
    qlens, klens = ragged(seed)
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 2 * gqa, 2, hd, DT[dt], seed)
    check(q, k, v, cu_q, cu_k, causal=causal, layout=layout)


#: The head dims beyond 64/128 (their own tiles, heuristics.SM90_TILES; 96 padded to 128).
WIDE = [(96, 96), (192, 192), (192, 128), (256, 256)]
WIDE_MATRIX = [(dd, dt, c, lay) for dd in WIDE for dt in ("bf16", "fp16") for c in (False, True)
               for lay in ("soa", "aos")]


@pytest.mark.parametrize("dd,dt,causal,layout", WIDE_MATRIX, ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_hopper_wide_head_dims(dd, dt, causal, layout):
    """Head dims 96, 192, 256 and 192 x 128: varlen GQA (8 query heads on 2 KV heads) with empty
    requests, O and LSE against the float64 reference, with the tile the dispatcher gives the pair."""
    d, dv = dd
    seed = zlib.crc32(repr(("sm90wide", d, dv, dt, causal, layout)).encode()) % 100000
    qlens, klens = ragged(seed)
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 8, 2, d, DT[dt], seed, dv=dv)
    check(q, k, v, cu_q, cu_k, causal=causal, layout=layout)
    assert api._CALLS._last[1].attn.name.endswith(heuristics.sm90_tile(d, dv).tag)


@pytest.mark.parametrize("dd", WIDE, ids=lambda dd: f"{dd[0]}x{dd[1]}")
def test_hopper_wide_head_dims_long(dd):
    """One long causal request (4096 x 4096, the report's d 256 shape per head) and a short one,
    16 heads: many key blocks per tile, the mask only on the diagonal ones."""
    d, dv = dd
    q, k, v, cu_q, cu_k = make_batch([4096, 77], [4096, 300], 16, 16, d, torch.bfloat16, d + dv, dv=dv)
    check(q, k, v, cu_q, cu_k, causal=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("qlen,klen", [(4096, 4096), (1000, 5000), (5000, 1000), (777, 777), (1, 3000)])
def test_hopper_long_requests(qlen, klen, causal):
    q, k, v, cu_q, cu_k = make_batch([qlen, 5], [klen, 9], 32, 8, 128, torch.bfloat16, qlen + klen)
    check(q, k, v, cu_q, cu_k, causal=causal)


# Sliding windows and soft-cap (mask "local", softcap): (causal, window_size, softcap) per case.
# With ragged()'s lengths (up to 400 queries, 520 keys, 128-key blocks) the windows leave whole key
# blocks out on both sides, and request 3 (300 queries, 70 keys) has rows that see no key.
WINDOW_CASES = {
    "left": (False, (96, -1), 0.0),
    "left_right": (False, (200, 33), 0.0),
    "right": (False, (-1, 40), 0.0),
    "causal_window": (True, (150, -1), 0.0),
    "softcap": (False, (-1, -1), 15.0),
    "softcap_causal": (True, (-1, -1), 15.0),
    "softcap_window": (False, (257, 0), 20.0),
}
WINDOW_MATRIX = [(case, hd, dt, lay) for case in WINDOW_CASES for hd in (64, 128) for dt in ("bf16", "fp16")
                 for lay in ("soa", "aos")]


@pytest.mark.parametrize("case,hd,dt,layout", WINDOW_MATRIX)
def test_hopper_window_softcap_matrix(case, hd, dt, layout):
    """Varlen GQA batches with an empty query request and an empty key request, O and LSE against
    the float64 reference, on the Hopper kernel of the window / soft-cap variant."""
    causal, window, cap = WINDOW_CASES[case]
    seed = zlib.crc32(repr(("sm90win", case, hd, dt, layout)).encode()) % 100000
    qlens, klens = ragged(seed)
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 8, 2, hd, DT[dt], seed)
    check(q, k, v, cu_q, cu_k, causal=causal, layout=layout, window_size=window, softcap=cap)
    name = api._CALLS._last[1].attn.name
    assert ("_local_" in name) == (window != (-1, -1)) and ("_softcap" in name) == (cap > 0), name


@pytest.mark.parametrize("qlen,klen", [(4096, 4096), (1000, 5000), (5000, 1000)])
@pytest.mark.parametrize("causal,window,cap", [(True, (1000, -1), 0.0), (False, (300, 700), 0.0),
                                               (True, (-1, -1), 30.0), (True, (513, 0), 50.0)])
def test_hopper_window_softcap_long_requests(qlen, klen, causal, window, cap):
    """Long requests: most key blocks lie outside the window and are never loaded."""
    q, k, v, cu_q, cu_k = make_batch([qlen, 5], [klen, 9], 16, 4, 128, torch.bfloat16, qlen + 3 * klen)
    check(q, k, v, cu_q, cu_k, causal=causal, window_size=window, softcap=cap)


def test_hopper_seqused_k_with_garbage_tail():
    """seqused_k < each request's K segment: the unused keys (NaN here) must not be seen."""
    qlens, klens = [300, 5, 130, 0, 64], [400, 40, 260, 7, 128]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 8, 2, 128, torch.bfloat16, 3)
    used = torch.tensor([333, 1, 129, 7, 0], dtype=torch.int32, device="cuda")
    for b, u in enumerate(used.tolist()):
        k0, k1 = int(cu_k[b]), int(cu_k[b + 1])
        k[k0 + u:k1] = float("nan")
        v[k0 + u:k1] = float("nan")
    for causal in (False, True):
        check(q, k, v, cu_q, cu_k, causal=causal, seqused_k=used)


def test_hopper_strided_views():
    """q/k/v as views of one packed qkv tensor (token stride 3*H*d): TMA addresses them directly."""
    hq, d, tq = 4, 128, 700
    qkv = torch.randn(tq, 3 * hq, d, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv[:, :hq], qkv[:, hq:2 * hq], qkv[:, 2 * hq:]
    cu = torch.tensor([0, 200, 201, 700], dtype=torch.int32, device="cuda")
    check(q, k, v, cu, cu, causal=True)


@pytest.mark.parametrize("opts", ["", "p", "pr", "s"])
def test_hopper_three_warpgroups(monkeypatch, opts):
    """Head dim 64's 192-row tile (three consumer warpgroups, the ping-pong's turn passed round
    robin) with each mainloop variant, on ragged batches with partial last tiles (rows past a
    request's end, 192 not dividing the lengths), causal and not."""
    monkeypatch.delenv("KERNELGEN_SM90_OPTS", raising=False)
    monkeypatch.setattr(heuristics, "SM90_OPTS", opts)
    assert heuristics.sm90_tile(64, 64).num_warps == 12
    api.clear_signature_cache()
    try:
        for causal in (False, True):
            qlens, klens = ragged(23)
            q, k, v, cu_q, cu_k = make_batch(qlens, klens, 8, 2, 64, torch.bfloat16, 9)
            check(q, k, v, cu_q, cu_k, causal=causal)
            assert "_m192n128w12" in api._CALLS._last[1].attn.name
    finally:
        api.clear_signature_cache()


@pytest.mark.parametrize("opts,stages,bn", [("", 2, 128), ("h", 2, 128), ("s", 2, 128), ("hp", 2, 128),
                                            ("pr", 2, 128), ("p", 3, 128), ("p", 2, 192)])
def test_hopper_mainloop_options(monkeypatch, opts, stages, bn):
    """The mainloop's variants: without ping-pong, P V in 64-column halves, without the intra-
    warpgroup overlap, lazy O rescale, a three-stage K/V ring, 192-key blocks."""
    monkeypatch.delenv("KERNELGEN_SM90_OPTS", raising=False)  # the variable would win over SM90_OPTS
    monkeypatch.setattr(heuristics, "SM90_OPTS", opts)
    monkeypatch.setattr(heuristics, "SM90_TILE", heuristics.TileConfig(128, bn, 8, stages, 1))
    api.clear_signature_cache()
    try:
        for causal in (False, True):
            qlens, klens = ragged(11 + stages)
            q, k, v, cu_q, cu_k = make_batch(qlens, klens, 8, 2, 128, torch.bfloat16, 5)
            check(q, k, v, cu_q, cu_k, causal=causal)
    finally:
        api.clear_signature_cache()


def test_dispatch_automatic_and_fallbacks(monkeypatch):
    """No arch: prefill-shaped supported calls take the Hopper path; the variants it does not
    support fall back to the sm_80 path (and are right); arch="sm_80" and KERNELGEN_ARCH force."""
    qlens, klens = [600, 300, 0, 450], [600, 500, 10, 450]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 32, 8, 128, torch.bfloat16, 21)
    api.clear_signature_cache()
    check(q, k, v, cu_q, cu_k, causal=True, arch=None, expect="sm90a")
    check(q, k, v, cu_q, cu_k, causal=True, arch="sm_80", expect="sm80")
    monkeypatch.setenv("KERNELGEN_ARCH", "sm_80")
    api.clear_signature_cache()
    check(q, k, v, cu_q, cu_k, causal=False, arch=None, expect="sm80")
    monkeypatch.delenv("KERNELGEN_ARCH")
    api.clear_signature_cache()
    # decode-shaped hints: the sm_80 path (pack-GQA, small tiles)
    check(q, k, v, cu_q, cu_k, causal=True, arch=None, expect="sm80", max_q=1)
    # the report's d 256 shape (2 x 16 x 4096, causal) and the other wide head dims: the Hopper path
    for d, dv in WIDE:
        qw, kw_, vw, cw, _ = make_batch([4096, 4096], [4096, 4096], 16, 16, d, torch.bfloat16, 23, dv=dv)
        check(qw, kw_, vw, cw, cw, causal=True, arch=None, expect="sm90a")
        del qw, kw_, vw
    # a head_dim_v the Hopper path has no tile for (128 x 64): the sm_80 path
    q2, k2, v2, cu_q, cu_k = make_batch(qlens, klens, 8, 2, 128, torch.bfloat16, 22, dv=64)
    check(q2, k2, v2, cu_q, cu_k, causal=True, arch=None, expect="sm80")
    with pytest.raises(ValueError, match="Hopper"):
        kernelgen.varlen_attention(q2, k2, v2, cu_q, cu_k, 600, 600, arch="sm_90a")
    # a sliding window and a soft-cap: the Hopper path automatically, the sm_80 path when forced
    api.clear_signature_cache()
    for kw in ({"window_size": (100, 0)}, {"softcap": 30.0}, {"window_size": (300, 20), "softcap": 10.0}):
        o90, l90 = check(q, k, v, cu_q, cu_k, causal=True, arch=None, expect="sm90a", **kw)
        o80, l80 = check(q, k, v, cu_q, cu_k, causal=True, arch="sm_80", expect="sm80", **kw)
        fin = torch.isfinite(l80)
        assert torch.equal(fin, torch.isfinite(l90)) and (l90[fin] - l80[fin]).abs().max() < 1e-3


def test_hopper_cuda_graph_replay():
    """A Hopper call captured in a CUDA graph (tensor maps travel by value in the launch) and
    replayed with new data in the same buffers."""
    qlens, klens = [700, 130], [900, 128]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 16, 4, 128, torch.bfloat16, 31, garbage=0)
    out = torch.empty_like(q)
    kw = dict(causal=True, out=out, arch="sm_90a")
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 700, 900, **kw)
    assert isinstance(api._CALLS._last[1].attn, prepared.TmaLaunch)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 700, 900, **kw)
    torch.cuda.current_stream().wait_stream(s)
    for seed in (1, 2):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, generator=gen, device="cuda").to(t.dtype))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
        atol, rtol = tolerance(q.dtype)
        assert torch.allclose(out.double(), ref.to(q.dtype).double(), atol=atol, rtol=rtol)


def test_hopper_graph_launch_repoints_tensor_maps():
    """Cached Hopper calls go out as graph launches (kernelgen/launch/graph_launch.py): each (q, k, v)
    set's graph carries its own tensor maps; alternating two query tensors gives each its result."""
    qlens, klens = [300, 77], [500, 256]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 16, 4, 128, torch.bfloat16, 41, garbage=0)
    q2 = torch.randn_like(q)
    kw = dict(causal=True, arch="sm_90a")
    refs = {}
    for qq in (q, q2):
        ref, _ = attention_reference(qq, k, v, cu_q, cu_k, causal=True)
        refs[qq.data_ptr()] = ref.to(torch.bfloat16).double()
    atol, rtol = tolerance(torch.bfloat16)
    out = torch.empty_like(q)
    for step in range(6):
        qq = (q, q2)[step % 2]
        out.fill_(float("nan"))
        kernelgen.varlen_attention(qq, k, v, cu_q, cu_k, 300, 500, out=out, **kw)
        torch.cuda.synchronize()
        r = refs[qq.data_ptr()]
        assert ((out.double() - r).abs() <= atol + rtol * r.abs()).all(), f"step {step}"
    prep = api._CALLS._last[1]
    graphs = prep._tls.graphs[torch.cuda.current_stream().cuda_stream]
    assert isinstance(prep.attn, prepared.TmaLaunch) and len(graphs) == 2


# ------------------------------------------------------------------------------- split-KV


SPLIT_FORCED = [(n, c, hd, lay) for n in (2, 3, 7) for c in (False, True) for hd in (64, 128)
                for lay in ("soa", "aos")]


@pytest.mark.parametrize("splits,causal,hd,layout", SPLIT_FORCED)
def test_hopper_forced_splits(splits, causal, hd, layout):
    """Forced num_splits on a ragged varlen batch with empty requests (no query rows, no keys),
    seqlen_q > seqlen_k, and requests with fewer key blocks than splits (empty split ranges: the
    producer loads nothing, the partial has LSE -inf); GQA 4:1; then a long-context pair."""
    seed = zlib.crc32(repr(("split", splits, causal, hd, layout)).encode()) % 100000
    qlens, klens = ragged(seed, n=7, qmax=700, kmax=3000)
    dt = torch.float16 if splits == 3 else torch.bfloat16
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 8, 2, hd, dt, seed)
    check(q, k, v, cu_q, cu_k, causal=causal, layout=layout, num_splits=splits, expect_split=True)
    prep = api._CALLS._last[1]
    assert prep.config.forced_splits and prep.config.max_splits == splits
    q, k, v, cu_q, cu_k = make_batch([384, 0, 1000], [9000, 77, 5000], 8, 2, hd, dt, seed + 1)
    check(q, k, v, cu_q, cu_k, causal=causal, layout=layout, num_splits=splits, expect_split=True)


# (query lengths, key lengths, query heads, KV heads): few enough tiles that the split bound is > 1
LONG = [([256], [65536], 8, 2), ([2048], [8192], 4, 1), ([512, 1024], [32768, 16384], 8, 2),
        ([300, 0, 1024, 257], [20000, 5000, 8192, 0], 8, 2)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", range(len(LONG)))
def test_hopper_automatic_splits_long_context(shape, causal):
    """Few-request long-context prefill (1-4 requests of 256-2048 queries against 8k-64k keys,
    GQA 4:1, an empty request and one without keys): the dispatcher picks the Hopper kernel with
    split-KV by itself; both layouts, bf16 and fp16, O and LSE against the float64 reference."""
    qlens, klens, hq, hkv = LONG[shape]
    for i, (layout, dt, hd) in enumerate((("soa", torch.bfloat16, 128), ("aos", torch.float16, 64))):
        q, k, v, cu_q, cu_k = make_batch(qlens, klens, hq, hkv, hd, dt, 1000 * shape + 10 * i + causal)
        check(q, k, v, cu_q, cu_k, causal=causal, layout=layout, arch=None, expect_split=True)
        prep = api._CALLS._last[1]
        assert not prep.config.forced_splits and prep.config.max_splits > 1


def test_hopper_split_equals_unsplit():
    """The same call with splits (forced 5, automatic) and without (num_splits=1): all within the
    tolerance of the reference (check), and the split LSE within 1e-4 of the unsplit one."""
    q, k, v, cu_q, cu_k = make_batch([700, 1], [12000, 3000], 8, 2, 128, torch.bfloat16, 77)
    _, l1 = check(q, k, v, cu_q, cu_k, causal=True, num_splits=1, expect_split=False)
    for n in (5, 0):
        _, ln = check(q, k, v, cu_q, cu_k, causal=True, num_splits=n, expect_split=True)
        fin = torch.isfinite(l1)
        assert torch.equal(fin, torch.isfinite(ln))
        assert (ln[fin] - l1[fin]).abs().max().item() < 1e-4


@pytest.mark.parametrize("splits", [3, 0])
@pytest.mark.parametrize("causal,window,cap", [(True, (2000, -1), 0.0), (False, (700, 300), 30.0),
                                               (True, (-1, -1), 20.0)])
def test_hopper_splits_with_window_and_softcap(splits, causal, window, cap):
    """The slices together: split-KV (forced 3, automatic) on long-context requests with a sliding
    window and/or soft-cap; each split's share of the windowed key blocks, combined."""
    q, k, v, cu_q, cu_k = make_batch([512, 0, 300], [24000, 50, 9000], 8, 2, 128, torch.bfloat16,
                                     int(splits) * 7 + int(causal) + int(cap))
    check(q, k, v, cu_q, cu_k, causal=causal, arch=None, num_splits=splits, window_size=window, softcap=cap)
    name = api._CALLS._last[1].attn.name
    assert "_wgmma" in name and ("_local_" in name) == (window != (-1, -1)) and ("_softcap" in name) == (cap > 0), name
    if splits:
        assert "_split" in name, name


@pytest.mark.parametrize("d,dv", [(96, 96), (192, 128), (256, 256)])
def test_hopper_splits_wide_head_dims(d, dv):
    """Split-KV partials of the wide head dims: rows of head_dim_v floats in the workspace (d 96's
    accumulators are padded to 128 columns; only 96 are partial output)."""
    q, k, v, cu_q, cu_k = make_batch([300, 0, 129], [9000, 40, 5000], 8, 2, d, torch.bfloat16, d + dv, dv=dv)
    check(q, k, v, cu_q, cu_k, causal=True, num_splits=3, expect_split=True)
    check(q, k, v, cu_q, cu_k, causal=False, num_splits=0, arch=None, window_size=(600, 100), softcap=25.0)
# ----------------------------------------------------------------------- paged K/V (issue 5)

def make_paged_batch(qlens, klens, hq, hkv, d, dtype, page_size, seed, spare=5):
    """q and a paged cache: each request's pages drawn at random from a shuffled pool with spare
    pages between them; every slot a request does not use (spare pages, the tail of a last page,
    page-table columns past a request's pages = -1) holds NaN, so reading one shows."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rng = np.random.default_rng(seed)
    need = [-(-n // page_size) for n in klens]
    num_pages = sum(need) + spare
    kc = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda").to(dtype)
    vc = torch.randn(num_pages, page_size, hkv, d, generator=g, device="cuda").to(dtype)
    perm = rng.permutation(num_pages)
    pt = np.full((len(qlens), max(need + [1]) + 1), -1, dtype=np.int32)
    used_pages = set()
    at = 0
    for b, n in enumerate(need):
        pt[b, :n] = perm[at:at + n]
        used_pages.update(perm[at:at + n].tolist())
        tail = klens[b] - (n - 1) * page_size if n else 0
        if n and tail < page_size:
            kc[int(pt[b, n - 1]), tail:] = float("nan")
            vc[int(pt[b, n - 1]), tail:] = float("nan")
        at += n
    for p in set(range(num_pages)) - used_pages:
        kc[p] = float("nan")
        vc[p] = float("nan")
    q = torch.randn(sum(qlens), hq, d, generator=g, device="cuda").to(dtype)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    used = torch.tensor(klens, dtype=torch.int32, device="cuda")
    return q, kc, vc, torch.tensor(pt, device="cuda"), used, cu_q


def check_paged(q, kc, vc, pt, used, cu_q, *, causal, layout="soa", arch="sm_90a", expect="sm90a", gather=None,
                window_size=(-1, -1), softcap=0.0, num_splits=0):
    """A paged call with NaN-poisoned out/lse against the float64 reference on the gathered K/V
    (same causal, window_size and softcap)."""
    from kernelgen.apps.reference import gather_paged
    rows = int(cu_q[-1].item())
    hq = q.shape[1]
    out = torch.full((q.shape[0] + 3, hq, vc.shape[-1]), float("nan"), dtype=q.dtype, device="cuda")[:q.shape[0]]
    max_q = max((cu_q[1:] - cu_q[:-1]).tolist() + [1])
    o, lse = kernelgen.varlen_attention(q, kc, vc, cu_q, None, max_q, int(used.max().item()), seqused_k=used,
                                        page_table=pt, causal=causal, return_lse=True, out=out,
                                        metadata_layout=layout, arch=arch, window_size=window_size,
                                        softcap=softcap, num_splits=num_splits)
    torch.cuda.synchronize()
    name = api._CALLS._last[1].attn.name
    assert ("_wgmma" in name) == (expect == "sm90a"), f"expected the {expect} path, ran {name}"
    if gather is not None:
        assert ("_gather" in name) == gather, name
    k, v, cu_k = gather_paged(kc, vc, pt, used)
    ref, ref_lse, bound, lse_bound = attention_reference(q, k, v, cu_q, cu_k, causal=causal, window_size=window_size,
                                                         softcap=softcap, error_bounds=True)
    o, lse, ref, ref_lse = o[:rows], lse[:, :rows], ref[:rows], ref_lse[:, :rows]
    bound, lse_bound = bound[:rows], lse_bound[:, :rows]     # the soft-cap's tanh.approx (0 without)
    empty = torch.isneginf(ref_lse)
    fin = ~empty
    lerr = (lse.double()[fin] - ref_lse[fin]).abs()
    lse_ok = lerr.numel() == 0 or bool((lerr <= 2e-3 + 1e-4 * ref_lse[fin].abs() + lse_bound[fin]).all())
    lse_info = f"lse max err {lerr.max().item() if lerr.numel() else 0:.3e} ({'ok' if lse_ok else 'WRONG'})"
    nan_rows = torch.isnan(o).any(-1)
    assert not nan_rows.any(), f"{name}: NaN/unwritten output at (token, head) {nan_rows.nonzero()[:8].tolist()}; {lse_info}"
    atol, rtol = tolerance(q.dtype)
    ref_c = ref.to(q.dtype).double()
    err = (o.double() - ref_c).abs()
    bad = err > atol + rtol * ref_c.abs() + bound
    assert not bad.any(), (f"{name}: max err {err.max().item():.3e}, {int(bad.sum())} bad of {bad.numel()}, first "
                           f"(token, head, col) {bad.nonzero()[:4].tolist()}; {lse_info}")
    assert torch.equal(torch.isneginf(lse), empty), f"rows with no visible key must have lse = -inf; {lse_info}"
    assert torch.all(o.transpose(0, 1)[empty] == 0), "rows with no visible key must be exactly 0"
    assert lse_ok, f"{name}: {lse_info}"
    print(f"PAGED_OK {name} max_err {err.max().item():.2e} lse_err {lerr.max().item() if lerr.numel() else 0:.2e}")


def paged_lens(seed, n=6):
    """Chunked-prefill lengths: query chunks at the end of longer contexts, plus the edge cases."""
    rng = np.random.default_rng(seed)
    qlens = [int(x) for x in rng.integers(1, 300, size=n)]
    klens = [q + int(x) for q, x in zip(qlens, rng.integers(0, 700, size=n))]
    qlens[1] = 0                      # empty query
    klens[2] = 0                      # no keys: out 0, lse -inf
    qlens[3], klens[3] = 300, 70      # seqlen_q > seqlen_k: causal rows that see nothing
    qlens[4], klens[4] = 129, 512     # one row past a tile; keys a multiple of every page size
    return qlens, klens


PAGE_CASES = [(128, "bf16", True, 4, "soa"), (64, "fp16", False, 1, "aos"), (128, "fp16", False, 8, "aos"),
              (64, "bf16", True, 2, "soa")]
PAGED_MATRIX = [(ps, *c) for ps in (1, 8, 16, 24, 64, 128, 256) for c in PAGE_CASES]


@pytest.mark.parametrize("page_size,hd,dt,causal,gqa,layout", PAGED_MATRIX)
def test_hopper_paged_matrix(page_size, hd, dt, causal, gqa, layout):
    """Page sizes 1 and 24 take the gather path; 8, 16 and 64 TMA boxes of one page (16, 8, 2
    a block), 128 and 256 TMA boxes of one block (block_n = 128)."""
    seed = zlib.crc32(repr(("sm90paged", page_size, hd, dt, causal, gqa, layout)).encode()) % 100000
    qlens, klens = paged_lens(seed)
    args = make_paged_batch(qlens, klens, 2 * gqa, 2, hd, DT[dt], page_size, seed)
    check_paged(*args, causal=causal, layout=layout, gather=page_size in (1, 24))


@pytest.mark.parametrize("page_size", [1, 16, 24, 256])
@pytest.mark.parametrize("d", [96, 192, 256])
def test_hopper_paged_wide_head_dims(d, page_size):
    """Paged K/V at head dims 96, 192 and 256 on the Hopper path, causal and not: the tile and
    loads ``heuristics.sm90_tile_and_options`` gives (d 96: the 128-key tile, rows padded to 128
    columns; 192 and 256: 64-key blocks, TMA boxes for pages of 16 and 256; gathered rows for
    pages of 1 (d 256: 48-key blocks) and 24 (d 96, 192; d 256's 48-key blocks take TMA boxes of 24))."""
    seed = zlib.crc32(repr(("sm90paged_wide", d, page_size)).encode()) % 100000
    qlens, klens = paged_lens(seed)
    dt = torch.bfloat16 if page_size in (1, 256) else torch.float16
    args = make_paged_batch(qlens, klens, 8, 2, d, dt, page_size, seed)
    tile, opts = heuristics.sm90_tile_and_options(d, d, True, page_size)
    for causal in (True, False):
        check_paged(*args, causal=causal, gather="g" in opts)
        assert api._CALLS._last[1].attn.name.endswith(tile.tag)


@pytest.mark.parametrize("d,page_size", [(96, 16), (192, 16), (256, 1), (256, 64)])
@pytest.mark.parametrize("splits,causal,window,cap", [(3, True, (-1, -1), 0.0), (0, False, (300, 200), 30.0)])
def test_hopper_paged_wide_head_dims_with_slices(d, page_size, splits, causal, window, cap):
    """Paged wide head dims with split-KV, a sliding window and soft-cap, on long keys."""
    qlens, klens = [600, 0, 300, 129], [9000, 40, 4000, 129]
    args = make_paged_batch(qlens, klens, 8, 2, d, torch.bfloat16, page_size, 300 + d + page_size + splits)
    check_paged(*args, causal=causal, gather=page_size == 1, window_size=window, softcap=cap, num_splits=splits)


@pytest.mark.parametrize("d", [96, 256])
def test_hopper_paged_wide_head_dims_mixed_batch(d):
    """A mixed batch (one long chunk, short requests) at paged head dims 96 and 256, dispatched
    automatically: d 96 takes the Hopper fused launch (keys-as-rows decode tiles at 96), d 256 the
    classes in turn (its long class on the Hopper kernel)."""
    short = make_paged_batch([900, 1, 1, 2, 1, 3], [4000, 100, 9, 3000, 1, 50], 32, 8, d, torch.bfloat16, 16, 5 + d)
    api.clear_signature_cache()
    check_paged(*short, causal=True, arch=None, expect="sm90a", gather=False)
    prep = api._CALLS._last[1]
    assert isinstance(prep, fused.PreparedFusedCall) == (d == 96)


@pytest.mark.parametrize("page_size", [16, 256])
def test_hopper_paged_gather_on_large_pages(monkeypatch, page_size):
    """Option "g" forced on pages TMA could take: the gather path on 16-token and whole-block pages."""
    monkeypatch.delenv("KERNELGEN_SM90_OPTS", raising=False)  # the variable would win over SM90_OPTS
    monkeypatch.setattr(heuristics, "SM90_OPTS", "gp")
    api.clear_signature_cache()
    try:
        qlens, klens = paged_lens(page_size + 1)
        args = make_paged_batch(qlens, klens, 8, 2, 128, torch.bfloat16, page_size, page_size + 1)
        for causal in (False, True):
            check_paged(*args, causal=causal, gather=True)
    finally:
        api.clear_signature_cache()


def test_hopper_paged_tma_64_key_blocks(monkeypatch):
    """A 64-key block tile: TMA boxes on 64-token pages (the 4-D map's box follows block_n)."""
    monkeypatch.setattr(heuristics, "SM90_TILE", heuristics.TileConfig(128, 64, 8, 2, 1))
    api.clear_signature_cache()
    try:
        qlens, klens = paged_lens(64)
        args = make_paged_batch(qlens, klens, 8, 2, 128, torch.bfloat16, 64, 64)
        for causal in (False, True):
            check_paged(*args, causal=causal, gather=False)
    finally:
        api.clear_signature_cache()


@pytest.mark.parametrize("page_size", [1, 16, 256])
def test_hopper_paged_long_chunks_and_dispatch(page_size):
    """Chunked prefill of long requests (2048-token chunks against 5000-8000 keys, 32/8 heads):
    the automatic dispatcher takes the Hopper path (mean query length >= SM90_PAGED_MIN_MEAN_Q);
    a batch of mostly short requests takes the Hopper fused launch (the long class on Hopper);
    arch="sm_80" the sm_80 path."""
    qlens, klens = [2048, 1500, 2048, 700], [8000, 1500, 5000, 3001]
    args = make_paged_batch(qlens, klens, 32, 8, 128, torch.bfloat16, page_size, 7 + page_size)
    api.clear_signature_cache()
    check_paged(*args, causal=True, arch=None, expect="sm90a", gather=page_size == 1)
    check_paged(*args, causal=False, arch=None, expect="sm90a", gather=page_size == 1)
    check_paged(*args, causal=True, arch="sm_80", expect="sm80")
    short = make_paged_batch([900, 1, 1, 2, 1, 3], [4000, 100, 9, 3000, 1, 50], 32, 8, 128, torch.bfloat16,
                             page_size, 3)
    # a mixed batch: the Hopper fused launch (its long variant on wgmma/TMA, decode tiles SM by SM)
    check_paged(*short, causal=True, arch=None, expect="sm90a", gather=page_size == 1)
    prep = api._CALLS._last[1]
    assert isinstance(prep, fused.PreparedFusedCall) and prep.kernels.variants.fused.hopper
    check_paged(*short, causal=True, arch="sm_90a", expect="sm90a", gather=page_size == 1)
    assert not isinstance(api._CALLS._last[1], fused.PreparedFusedCall)


@pytest.mark.parametrize("page_size", [1, 16, 256])
@pytest.mark.parametrize("splits,causal,window,cap", [(3, True, (-1, -1), 0.0), (0, True, (700, -1), 0.0),
                                                      (2, False, (300, 200), 30.0), (0, True, (-1, -1), 15.0)])
def test_hopper_paged_with_window_softcap_and_splits(page_size, splits, causal, window, cap):
    """Paged K/V (gather on 1-token pages, TMA boxes of pages of 16, of blocks at 256) with the
    other slices: forced and automatic split-KV, sliding windows and soft-cap."""
    qlens, klens = [600, 0, 300, 129], [9000, 40, 4000, 129]
    args = make_paged_batch(qlens, klens, 8, 2, 128, torch.bfloat16, page_size, 100 + page_size + splits)
    check_paged(*args, causal=causal, arch="sm_90a", gather=page_size == 1, window_size=window, softcap=cap,
                num_splits=splits)
    name = api._CALLS._last[1].attn.name
    assert ("_split" in name) == (splits > 0 or api._CALLS._last[1].combine is not None), name
