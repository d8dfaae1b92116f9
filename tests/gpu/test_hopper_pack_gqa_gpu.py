"""GPU correctness of pack-GQA on the Hopper prefill kernel (``KERNELGEN_SM90_PACK_GQA=1``
forces it; by default ``heuristics.sm90_pack_auto`` decides): the qpk query heads of a KV head share a tile, rows
(token, head), Q loaded as one box of qpk heads x BM / qpk tokens.  Every case compares with the
float64 reference on fresh random inputs, out and lse poisoned with NaN (tests/gpu/test_hopper_gpu.py's
``check`` / ``check_paged``), and asserts that the packed Hopper kernel ran.  Ragged batches put
request ends inside tiles (tokens past a request in the Q box), empty requests, rows that see no
key, and qpk 2 / 4 / 8 on the 128-row tile and 8 on the 192-row one."""
import zlib

import pytest
import torch

from kernelgen.apps.reference import attention_reference
from kernelgen.front import api
from kernelgen.selection.settings import SM90_PACK_GQA

import gpu_helpers  # noqa: E402 (tests/gpu is on sys.path)
from test_hopper_gpu import DT, check, check_paged, make_batch, make_paged_batch, paged_lens, ragged  # noqa: E402
from test_sinks_gpu import make_sinks  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="needs a compute capability 9.0 (Hopper) GPU")]


@pytest.fixture
def packed(monkeypatch):
    """The Hopper kernel packs GQA for the test's calls (a fresh signature cache on both sides)."""
    monkeypatch.setenv(SM90_PACK_GQA, "1")
    api.clear_signature_cache()
    yield
    api.clear_signature_cache()


def ran_packed():
    name = api._CALLS._last[1].attn.name
    assert "_wgmma" in name and "_pack_" in name, name
    return name


CASES = [(hd, dt, c, hq, hkv) for hd in (64, 128) for dt in ("bf16", "fp16") for c in (False, True)
         for hq, hkv in ((8, 4), (8, 2), (8, 1))] + [(96, "bf16", True, 8, 2), (192, "bf16", True, 8, 4)]


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("hd,dt,causal,hq,hkv", CASES)
def test_packed_matrix(packed, hd, dt, causal, hq, hkv, splits):
    """num_splits 1: the kernel writes every row itself (O and LSE in the epilogue); 3: split-KV
    partials per (token, query head) row, row_splits once a token, the combine (every case has at
    least three key blocks; the automatic bound does not split these small batches)."""
    seed = zlib.crc32(repr(("sm90pack", hd, dt, causal, hq, hkv)).encode()) % 100000
    qlens, klens = ragged(seed)
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, hq, hkv, hd, DT[dt], seed)
    check(q, k, v, cu_q, cu_k, causal=causal, num_splits=splits, expect_split=splits > 1)
    ran_packed()


@pytest.mark.parametrize("splits", [3, 0])
@pytest.mark.parametrize("causal,window,cap", [(True, (-1, -1), 0.0), (True, (300, -1), 0.0), (False, (200, 100), 30.0)])
def test_packed_splits_window_softcap(packed, splits, causal, window, cap):
    """Split-KV partials per (token, query head) row, the combine, windows and soft-cap, one KV head."""
    q, k, v, cu_q, cu_k = make_batch([700, 90, 0, 1300], [2500, 4000, 30, 1300], 8, 1, 128, torch.bfloat16, 41)
    check(q, k, v, cu_q, cu_k, causal=causal, num_splits=splits, window_size=window, softcap=cap,
          expect_split=True if splits else None)
    ran_packed()


@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
def test_packed_paged(packed, page_size):
    """TMA page boxes (16: from four warps, 64, 256) and gathered rows (1) under packed Q tiles."""
    qlens, klens = paged_lens(77 + page_size)
    args = make_paged_batch(qlens, klens, 8, 2, 128, torch.bfloat16, page_size, 77)
    check_paged(*args, causal=True, gather=page_size == 1)
    ran_packed()


def test_packed_three_warpgroups_with_sinks(packed):
    """gpt-oss's heads (64 / 8, d 64: 24 tokens x 8 heads a 192-row tile) with per-head sinks,
    which each packed row takes from its own query head."""
    qlens, klens = [500, 23, 0, 700, 191], [500, 23, 40, 900, 191]
    hq, hkv, d = 64, 8, 64
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, hq, hkv, d, torch.bfloat16, 5, garbage=0)
    sinks = make_sinks(hq, 3)
    import kernelgen
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=q.dtype, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=True, return_lse=True,
                                        out=out, sinks=sinks)
    torch.cuda.synchronize()
    name = ran_packed()
    assert "_m192n128w12" in name and "_sinks" in name, name
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True, sinks=sinks)
    gpu_helpers.check(o, lse, ref, ref_lse, q.dtype)


def test_packed_equals_unpacked(monkeypatch):
    """The same call packed and not: the same rows, row for row (only the summation order of a row's
    keys is shared; packing changes which rows share a tile, not a row's arithmetic), so equal bits."""
    import kernelgen
    q, k, v, cu_q, cu_k = make_batch([1000, 333, 64], [1000, 800, 64], 32, 8, 128, torch.bfloat16, 9, garbage=0)
    outs = []
    for flag in ("0", "1"):
        monkeypatch.setenv(SM90_PACK_GQA, flag)
        api.clear_signature_cache()
        outs.append(kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 1000, 1000, causal=True))
        assert ("_pack_" in api._CALLS._last[1].attn.name) == (flag == "1")
    api.clear_signature_cache()
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (True, (127, 0))])
@pytest.mark.parametrize("hq,hkv", [(64, 8), (32, 8)])
def test_long_requests_pack_automatically_on_the_192_row_tile(causal, window, hq, hkv):
    """Requests averaging 1024 query tokens or more: the automatic choice packs the 16-bit 192-row tile
    (head dim 64) at any length (``heuristics.sm90_pack_auto``), causal, non-causal and with
    gpt-oss's 128-token window, at 8 and 4 query heads a KV head; within the reference, and equal
    bit for bit to the same call unpacked."""
    import kernelgen
    api.clear_signature_cache()
    qlens = klens = [2500, 1100, 1800]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, hq, hkv, 64, torch.bfloat16, 23 + hq + int(causal), garbage=0)
    o, _ = check(q, k, v, cu_q, cu_k, causal=causal, window_size=window, num_splits=1)
    name = ran_packed()
    assert "_m192n128w12" in name, name
    unpacked = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), causal=causal,
                                          window_size=window, num_splits=1, pack_gqa=False)
    assert "_pack_" not in api._CALLS._last[1].attn.name
    assert torch.equal(o, unpacked)


@pytest.mark.parametrize("mask", ["causal", "none", "local"])
@pytest.mark.parametrize("hq,hkv,d", [(64, 8, 64), (8, 1, 128)])
def test_packed_alibi_per_row_slopes(mask, hq, hkv, d, monkeypatch):
    """Built-in ALiBi on packed tiles: each packed row takes its own query head's slope (per
    request: (batch, num_heads_q) slopes) and its own position; within the reference, and equal bit
    for bit to the same call unpacked (one split)."""
    import kernelgen
    from test_alibi_gpu import alibi_slopes  # noqa: E402 (tests/gpu is on sys.path)
    monkeypatch.delenv(SM90_PACK_GQA, raising=False)   # the automatic choice packs these short requests
    api.clear_signature_cache()
    qlens, klens = [500, 23, 0, 700, 191], [620, 23, 40, 900, 191]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, hq, hkv, d, torch.bfloat16, 31 + d, garbage=0)
    slopes = alibi_slopes(hq, len(qlens), seed=5)
    kw = {"causal": mask != "none", "window_size": (150, 0) if mask == "local" else (-1, -1)}
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, alibi_slopes=slopes, **kw)
    outs = {}
    for pack in (None, False):
        out = torch.full((q.shape[0], hq, d), float("nan"), dtype=q.dtype, device="cuda")
        o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, max(qlens), max(klens), return_lse=True, out=out,
                                            alibi_slopes=slopes, num_splits=1, pack_gqa=pack, **kw)
        torch.cuda.synchronize()
        name = api._CALLS._last[1].attn.name
        assert "_wgmma" in name and "_alibi" in name and ("_pack_" in name) == (pack is None), name
        gpu_helpers.check(o, lse, ref, ref_lse, q.dtype)
        outs[pack] = (o, lse)
    assert torch.equal(outs[None][0], outs[False][0]) and torch.equal(outs[None][1], outs[False][1])
