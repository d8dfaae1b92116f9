"""GPU correctness of varlen_attention against the float64 reference.

Inputs are fresh random normals (seed printed on failure through the test id), outputs and LSE are
pre-filled with NaN so an unwritten row fails, and rows that see no key must be exactly 0 / -inf.
"""
import math
import zlib

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, tolerance
from kernelgen.front.plan import AttentionPlan
from kernelgen.jit import runtime
from kernelgen.kernels import metadata
from kernelgen.launch import launch, oneoff, prepared
from kernelgen.selection import heuristics

pytestmark = pytest.mark.gpu
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_batch(qlens, klens, hq, hkv, d, dv, dtype, seed, scale_v=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tq, tk = sum(qlens), sum(klens)
    q = torch.randn(tq, hq, d, generator=g, device="cuda").to(dtype)
    k = torch.randn(tk, hkv, d, generator=g, device="cuda").to(dtype)
    v = (torch.randn(tk, hkv, dv, generator=g, device="cuda") * scale_v).to(dtype)
    cu_q = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(klens)), dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k


def run_checked(q, k, v, cu_q, cu_k, *, causal, layout="soa", scale=None):
    """Run with NaN-poisoned out/lse, compare with the reference; returns (out, lse)."""
    tq, hq = q.shape[:2]
    out = torch.full((tq, hq, v.shape[2]), float("nan"), dtype=q.dtype, device="cuda")
    o, lse = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 1, 1, causal=causal, softmax_scale=scale,
                                        return_lse=True, out=out, metadata_layout=layout)
    assert o.data_ptr() == out.data_ptr()
    torch.cuda.synchronize()
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, softmax_scale=scale)
    rows = int(cu_q[-1].item())
    o, lse, ref, ref_lse = o[:rows], lse[:, :rows], ref[:rows], ref_lse[:, :rows]
    assert not torch.isnan(o).any(), f"unwritten or NaN output rows: {torch.isnan(o).any(-1).any(-1).nonzero().flatten()[:10].tolist()}"
    assert not torch.isnan(lse).any(), "unwritten or NaN lse"
    atol, rtol = tolerance(q.dtype)
    ref_c = ref.to(q.dtype).double()
    err = (o.double() - ref_c).abs()
    bad = err > atol + rtol * ref_c.abs()
    assert not bad.any(), f"max err {err.max().item():.3e} at {bad.nonzero()[:5].tolist()}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), "rows with no visible key must have lse = -inf exactly"
    assert torch.all(o.transpose(0, 1)[empty] == 0), "rows with no visible key must be exactly 0"
    fin = ~empty
    lerr = (lse.double()[fin] - ref_lse[fin]).abs()
    assert lerr.numel() == 0 or (lerr <= 2e-3 + 1e-4 * ref_lse[fin].abs()).all(), f"lse err {lerr.max().item():.3e}"
    return o, lse


# ---------------------------------------------------------------------------------------------
# The matrix: every head dim, both dtypes, causal and not, GQA 1/4/8, both metadata layouts, on
# a random ragged batch with empty requests and seqlen_q > seqlen_k.

MATRIX = [(hd, dt, c, g, lay) for hd in (64, 96, 128, 192, 256) for dt in ("bf16", "fp16")
          for c in (False, True) for g in (1, 4, 8) for lay in ("soa", "aos")]


@pytest.mark.parametrize("hd,dt,causal,gqa,layout", MATRIX)
def test_varlen_matrix(hd, dt, causal, gqa, layout):
    seed = zlib.crc32(repr((hd, dt, causal, gqa, layout)).encode()) % 100000
    rng = np.random.default_rng(seed)
    qlens = [int(x) for x in rng.integers(1, 300, size=6)]
    klens = [int(x) for x in rng.integers(1, 400, size=6)]
    qlens[1] = 0                      # empty query
    klens[2] = 0                      # no keys: out 0, lse -inf
    qlens[3], klens[3] = 200, 70      # seqlen_q > seqlen_k: causal rows that see nothing
    hkv = 2
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, hkv * gqa, hkv, hd, hd, DT[dt], seed)
    run_checked(q, k, v, cu_q, cu_k, causal=causal, layout=layout)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("qlen,klen", [(4096, 4096), (1000, 5000), (1, 8192), (777, 777)])
def test_long_requests(qlen, klen, causal):
    q, k, v, cu_q, cu_k = make_batch([qlen, 5], [klen, 9], 32, 8, 128, 128, torch.bfloat16, qlen + klen)
    run_checked(q, k, v, cu_q, cu_k, causal=causal)


def test_head_dim_v_differs():
    q, k, v, cu_q, cu_k = make_batch([130, 7, 0], [200, 7, 5], 8, 2, 192, 128, torch.bfloat16, 11)
    run_checked(q, k, v, cu_q, cu_k, causal=True)


def test_custom_scale_and_strided_views():
    """q/k/v as views of one packed qkv tensor (row stride 3*H*d), and a non-default scale."""
    hq, d, tq = 4, 64, 300
    qkv = torch.randn(tq, 3 * hq, d, device="cuda", dtype=torch.float16)
    q, k, v = qkv[:, :hq], qkv[:, hq:2 * hq], qkv[:, 2 * hq:]
    assert not q.is_contiguous()
    cu = torch.tensor([0, 100, 101, 300], dtype=torch.int32, device="cuda")
    run_checked(q, k, v, cu, cu, causal=True, scale=0.05)


# ---------------------------------------------------------------------------------------------
# Cases from shared/research/edge_cases.md


def test_e1_decode_gqa_with_empty_requests():
    qlens, klens = [0, 1, 0, 1], [0, 3, 0, 5]
    q, k, v, cu_q, cu_k = make_batch(qlens, klens, 9, 3, 64, 64, torch.bfloat16, 101)
    o, lse = run_checked(q, k, v, cu_q, cu_k, causal=True)
    assert o.shape == (2, 9, 64)
    # dispatcher equivalence: max_seqlen_q changes nothing (no hidden fast path keyed on it)
    o2 = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 2, 5, causal=True)
    assert torch.equal(o, o2)
    # variant (b): a request with q_len 1 and kv_len 0
    q, k, v, cu_q, cu_k = make_batch(qlens + [1], klens + [0], 9, 3, 64, 64, torch.bfloat16, 102)
    o, lse = run_checked(q, k, v, cu_q, cu_k, causal=True)
    assert torch.all(o[2] == 0) and torch.all(torch.isneginf(lse[:, 2]))


@pytest.mark.parametrize("qlen,causal", [(1, False), (2, False), (1, True)])
@pytest.mark.parametrize("mag", [128.0, 32.0])
def test_e3_very_negative_logits(qlen, causal, mag):
    d = 128
    q = torch.full((qlen, 1, d), mag, device="cuda", dtype=torch.bfloat16)
    k = torch.full((4, 1, d), -mag, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.tensor([0, qlen], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 4], dtype=torch.int32, device="cuda")
    v = torch.randn(4, 1, d, device="cuda").to(torch.bfloat16)
    o, lse = run_checked(q, k, v, cu_q, cu_k, causal=causal)
    mean = v.double().mean(0)[0]
    assert torch.allclose(o[:, 0].double(), mean.expand(qlen, d), atol=1.6e-2, rtol=1.6e-2)
    logit = -(mag * mag * d) / math.sqrt(d)
    assert torch.allclose(lse.double(), torch.full_like(lse.double(), logit + math.log(4)), rtol=1e-5, atol=0)
    ones = torch.ones(4, 1, d, device="cuda", dtype=torch.bfloat16)
    o1 = kernelgen.varlen_attention(q, k, ones, cu_q, cu_k, qlen, 4, causal=causal)
    assert torch.all(o1 == 1.0), "uniform weights over v = 1 must give exactly 1.0"


@pytest.mark.parametrize("layout", ["soa", "aos"])
def test_e4_causal_fully_masked_rows(layout):
    q, k, v, cu_q, cu_k = make_batch([4, 3], [2, 5], 4, 2, 64, 64, torch.bfloat16, 7)
    o, lse = run_checked(q, k, v, cu_q, cu_k, causal=True, layout=layout)
    assert torch.all(o[:2] == 0) and torch.all(torch.isneginf(lse[:, :2]))
    assert torch.all(torch.isfinite(lse[:, 2:]))
    # a whole 128-row tile that sees nothing
    q, k, v, cu_q, cu_k = make_batch([130, 3], [1, 5], 4, 2, 64, 64, torch.bfloat16, 8)
    o, lse = run_checked(q, k, v, cu_q, cu_k, causal=True, layout=layout)
    assert torch.all(o[:129] == 0) and torch.all(torch.isneginf(lse[:, :129]))


# ---------------------------------------------------------------------------------------------
# Scheduler, metadata reuse, streams and graphs


def _random_config(rng, attn_spec, num_ctas):
    return metadata.SchedulerConfig(
        num_heads=int(rng.integers(1, 33)), block_m=attn_spec.tile.block_m, block_n=attn_spec.tile.block_n,
        pack_factor=int(rng.choice([1, 4, 8])), max_splits=int(rng.choice([1, 2, 16, 64, 255])),
        forced_splits=bool(rng.random() < 0.3), num_ctas=num_ctas,
        max_kvblocks_l2=int(rng.choice([0, 20, 160, 4000])), swizzle_mult=int(rng.choice([1, 4])),
        sort=bool(rng.random() < 0.8), window_left=int(rng.choice([-1, -1, -1, 0, 100, 4095])),
        wave_ctas=int(rng.choice([0, 0, num_ctas, 37, 1584])), min_share=int(rng.choice([1, 1, 1, 4, 16, 300])),
        **_random_class(rng))


def _random_class(rng) -> dict:
    """A request class of a fused launch (short or long queries) in a third of the trials."""
    r = rng.random()
    if r < 0.17:
        return {"class_min_q": 0, "class_max_q": int(rng.integers(0, 40))}
    if r < 0.33:
        return {"class_min_q": int(rng.integers(1, 40))}
    return {}


@pytest.mark.parametrize("layout", ["soa", "aos"])
def test_scheduler_kernel_matches_reference(layout):
    """>= 500 random batches per layout, batch 1..4096, empty requests, packed and not, all switches
    (sliding windows and request classes included);
    key ranges needing 1, 2 and 3 radix passes (every 11th trial has contexts up to 2^24 keys, past
    the sort key's saturation); odd trials launch with a random valid CTA size (1 to 8 requests a
    thread), every other one of them without room for the plans in shared memory."""
    rng = np.random.default_rng(5 if layout == "soa" else 6)
    arch = runtime.device_arch(0)
    _, attn_spec = heuristics.specs_for(arch, "bf16", 128, 128, True, layout)
    attn = runtime.get_kernel(attn_spec, 0)
    sched = runtime.get_kernel(heuristics.scheduler_spec(arch, layout), 0)
    stream = prepared.current_stream(0)
    for trial in range(520):
        batch = int(rng.integers(1, 4097)) if trial % 5 == 0 else int(rng.integers(1, 200))
        capacity = batch + int(rng.integers(0, 40))
        qlens = rng.integers(0, 3000, size=batch)
        qlens[rng.random(batch) < 0.2] = 0
        klens = rng.integers(0, 40000, size=batch)
        klens[rng.random(batch) < 0.1] = 0
        if trial % 7 == 0:
            klens[:] = 0                               # all-empty: the split share must not divide by 0
        use_seqused = trial % 3 == 0 or trial % 11 == 0
        cu_q = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32, device="cuda")
        cu_k = torch.tensor(np.concatenate([[0], np.cumsum(klens)]), dtype=torch.int32, device="cuda")
        if trial % 11 == 0:  # seqused_k only: cu_seqlens_k (unused) keeps the short lengths
            klens = rng.integers(0, 1 << 24, size=batch)
        used = torch.tensor(klens, dtype=torch.int32, device="cuda") if use_seqused else None
        cfg = _random_config(rng, attn_spec, attn.persistent_grid)
        md = torch.full((metadata.buffer_ints(capacity),), -7, dtype=torch.int32, device="cuda")
        if trial % 2 == 0:
            oneoff.launch_scheduler(sched, stream, cu_q, None if use_seqused else cu_k, used, md, batch, capacity, cfg)
        else:  # any valid CTA size (1 to 8 requests a thread), and on every other such trial two key
            # buffers only: sorted requests then re-read their lengths from global memory
            cap4 = metadata.round_up(capacity, 4)
            threads = int(rng.choice([t for t in (32, 64, 128, 256, 512, 1024) if 8 * t >= cap4]))
            smem = (8 if trial % 4 == 1 else 16) * cap4
            packed = oneoff.scheduler_params(cu_q, None if use_seqused else cu_k, used, md, batch, capacity, cfg)
            launch.launch_kernel(sched, 1, stream, packed, smem=smem, threads=threads)
        want = metadata.reference_schedule(cu_q.cpu().numpy(), cu_k.cpu().numpy(), batch, capacity, cfg, layout,
                                           seqused_k=klens if use_seqused else None)
        got = md.cpu().numpy()
        assert np.array_equal(got, want), f"trial {trial} batch {batch} capacity {capacity} {cfg}"


def test_metadata_drives_two_launches():
    """The last CTA resets the semaphore, so one scheduler run can feed several attention launches."""
    q, k, v, cu_q, cu_k = make_batch([300, 1, 77], [300, 900, 77], 8, 2, 128, 128, torch.bfloat16, 21)
    plan = AttentionPlan(max_batch=3, num_heads_q=8, num_heads_kv=2, head_dim=128, causal=True)
    plan.schedule(cu_q, cu_k)
    ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    for _ in range(3):
        out = torch.full_like(q, float("nan"))
        plan.attend(q, k, v, cu_q, cu_k, out=out)
        torch.cuda.synchronize()
        assert plan.metadata[0].item() == 0 and plan.metadata[3].item() == 0, "semaphore and exit counter reset"
        assert (out.double() - ref.to(torch.bfloat16).double()).abs().max().item() < 3e-2


@pytest.mark.parametrize("layout", ["soa", "aos"])
def test_seed_scenario_padded_replay(layout):
    """Metadata planned for 5 requests; a CUDA graph replays the batch padded to 16 with zero-length
    requests (cu_seqlens extended), with new lengths each replay: real rows right, padding untouched."""
    hq, hkv, d = 8, 2, 128
    plan = AttentionPlan(max_batch=16, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, causal=True,
                         metadata_layout=layout)
    rows, krows = 700, 900                      # fixed totals; the last 32 query rows belong to no request
    q = torch.randn(rows + 32, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(krows, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = torch.full((rows + 32, hq, d), float("nan"), device="cuda", dtype=torch.bfloat16)

    def lens(seed):
        r = np.random.default_rng(seed)
        lq = r.multinomial(rows, np.ones(5) / 5)
        lk = np.maximum(lq, r.multinomial(krows - rows, np.ones(5) / 5) + lq)
        lk[-1] += krows - lk.sum()
        return lq, lk

    # (a) schedule for the 5 real requests, then attend with the padded cu_seqlens (no re-schedule)
    lq, lk = lens(0)
    cu5_q = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32, device="cuda")
    cu5_k = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32, device="cuda")
    cu16_q = torch.cat([cu5_q, cu5_q[-1:].repeat(11)])
    cu16_k = torch.cat([cu5_k, cu5_k[-1:].repeat(11)])
    plan.schedule(cu5_q, cu5_k)
    plan.attend(q, k, v, cu16_q, cu16_k, out=out)
    torch.cuda.synchronize()
    ref, _ = attention_reference(q, k, v, cu5_q, cu5_k, causal=True)
    assert (out[:rows].double() - ref[:rows].to(torch.bfloat16).double()).abs().max().item() < 3e-2
    assert torch.isnan(out[rows:]).all(), "rows past the last request must not be written"
    # (b) capture scheduler + attention for the padded batch, replay with new lengths
    g = torch.cuda.CUDAGraph()
    plan.run(q, k, v, cu16_q, cu16_k, out=out)  # warm
    with torch.cuda.graph(g):
        plan.run(q, k, v, cu16_q, cu16_k, out=out)
    for seed in range(1, 4):
        lq, lk = lens(seed)
        cu16_q.copy_(torch.tensor(np.concatenate([[0], np.cumsum(lq), [rows] * 11]), dtype=torch.int32))
        cu16_k.copy_(torch.tensor(np.concatenate([[0], np.cumsum(lk), [krows] * 11]), dtype=torch.int32))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, _ = attention_reference(q, k, v, cu16_q, cu16_k, causal=True)
        assert (out[:rows].double() - ref[:rows].to(torch.bfloat16).double()).abs().max().item() < 3e-2
        assert torch.isnan(out[rows:]).all()
        m = metadata.decode(plan.metadata.cpu().numpy(), layout, 16)
        assert m["batch"] == 16 and np.all(m["m_blocks"][5:] == 0), "padding owns no tiles"


@pytest.mark.parametrize("causal", [False, True])
def test_sort_and_swizzle_change_order_not_result(causal):
    rng = np.random.default_rng(9)
    qlens = [int(x) for x in rng.integers(1, 1500, size=40)]
    q, k, v, cu_q, cu_k = make_batch(qlens, qlens, 32, 8, 128, 128, torch.bfloat16, 77)
    outs = [kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 1500, 1500, causal=causal, sort=s, head_swizzle=w,
                                       metadata_layout=lay)
            for s in (True, False) for w in (True, False) for lay in ("soa", "aos")]
    for o in outs[1:]:
        assert torch.equal(o, outs[0])


def test_side_stream_and_cuda_graph():
    q, k, v, cu_q, cu_k = make_batch([513, 64, 0, 3], [513, 100, 9, 3], 8, 8, 64, 64, torch.float16, 31)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o = kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 513, 513, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    assert (o.double() - ref.to(torch.float16).double()).abs().max().item() < 2e-2
    # capture once, replay with new values and new lengths (same totals)
    out = torch.empty_like(q)
    kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 513, 513, causal=True, out=out)  # warm (compile/load)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kernelgen.varlen_attention(q, k, v, cu_q, cu_k, 513, 513, causal=True, out=out)
    for trial in range(3):
        q.copy_(torch.randn_like(q))
        cu_q.copy_(torch.tensor([0, 200, 500, 500, 580], dtype=torch.int32))
        cu_k.copy_(torch.tensor([0, 300, 400, 409, 625], dtype=torch.int32)[: cu_k.numel()])
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
        rows = int(cu_q[-1].item())
        assert not torch.isnan(out[:rows]).any()
        assert (out[:rows].double() - ref[:rows].to(torch.float16).double()).abs().max().item() < 2e-2


def test_degenerate_batches():
    q = torch.randn(0, 4, 64, device="cuda", dtype=torch.bfloat16)
    cu = torch.zeros(3, dtype=torch.int32, device="cuda")
    o, lse = kernelgen.varlen_attention(q, q, q, cu, cu, 0, 0, return_lse=True)
    assert o.shape == (0, 4, 64) and lse.shape == (4, 0)
    # requests exist but have no query rows: nothing to do, nothing written, no hang
    q = torch.randn(5, 4, 64, device="cuda", dtype=torch.bfloat16)
    out = torch.full_like(q, 7.0)
    kernelgen.varlen_attention(q, q, q, cu, torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda"), 0, 3, out=out)
    torch.cuda.synchronize()
    assert torch.all(out == 7.0)
