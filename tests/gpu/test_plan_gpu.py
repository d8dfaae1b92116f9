"""GPU: AttentionPlan for serving — CUDA-graph replays with new lengths and padded batches, mixed
prefill + decode batches, independent plans on two streams, back-to-back calls (case E6)."""
import numpy as np
import pytest
import torch

from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.front.plan import AttentionPlan

from gpu_helpers import capture, replay, write_lengths  # noqa: E402 (tests/gpu is on sys.path)

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def assert_close(out, ref, dtype=BF16):
    atol, rtol = tolerance(dtype)
    r = ref.to(dtype).double()
    assert not torch.isnan(out).any()
    err = (out.double() - r).abs()
    assert (err <= atol + rtol * r.abs()).all(), f"max err {err.max().item():.3e}"


class PagedDecodeStep:
    """Static buffers of one paged decode step at a fixed capacity (what a serving engine keeps)."""

    def __init__(self, capacity, hq=32, hkv=8, d=128, page_size=16, max_ctx=4096, layout="soa", seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.capacity, self.hq, self.hkv, self.d, self.ps = capacity, hq, hkv, d, page_size
        self.max_pages = -(-max_ctx // page_size)
        self.num_pages = capacity * self.max_pages
        self.k_cache = torch.randn(self.num_pages, page_size, hkv, d, generator=g, device="cuda").to(BF16)
        self.v_cache = torch.randn(self.num_pages, page_size, hkv, d, generator=g, device="cuda").to(BF16)
        self.q = torch.empty(capacity, hq, d, device="cuda", dtype=BF16)
        self.cu_q = torch.zeros(capacity + 1, dtype=torch.int32, device="cuda")
        self.used = torch.zeros(capacity, dtype=torch.int32, device="cuda")
        self.page_table = torch.zeros(capacity, self.max_pages, dtype=torch.int32, device="cuda")
        self.out = torch.empty(capacity, hq, d, device="cuda", dtype=BF16)
        self.lse = torch.empty(hq, capacity, device="cuda", dtype=torch.float32)
        self.plan = AttentionPlan(max_batch=capacity, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                                  max_total_q=capacity, max_seqlen_q=1, max_seqlen_k=max_ctx, paged=True, causal=True,
                                  metadata_layout=layout)

    def set_batch(self, rng, batch):
        """A new step: `batch` real requests (one query token each), the rest padding."""
        ctx = rng.integers(0, self.max_pages * self.ps + 1, size=batch)
        ctx[rng.random(batch) < 0.1] = 0
        lq = np.zeros(self.capacity, dtype=np.int64)
        lq[:batch] = 1
        used = np.zeros(self.capacity, dtype=np.int64)
        used[:batch] = ctx
        write_lengths(rng, lq, used, self.cu_q, self.used, self.page_table)
        self.q.copy_(torch.randn(self.capacity, self.hq, self.d, device="cuda").to(BF16))
        self.out.fill_(float("nan"))
        return batch

    def run(self):
        return self.plan.run(self.q, self.k_cache, self.v_cache, self.cu_q, seqused_k=self.used,
                             page_table=self.page_table, out=self.out, lse=self.lse)

    def check(self, batch):
        k, v, cu_k = gather_paged(self.k_cache, self.v_cache, self.page_table[:batch], self.used[:batch])
        ref, ref_lse = attention_reference(self.q[:batch], k, v, self.cu_q[: batch + 1], cu_k, causal=True)
        assert_close(self.out[:batch], ref)
        fin = torch.isfinite(ref_lse)
        assert torch.equal(torch.isneginf(self.lse[:, :batch]), ~fin)
        assert torch.allclose(self.lse[:, :batch][fin].double(), ref_lse[fin], atol=2e-3, rtol=1e-4)
        assert torch.isnan(self.out[batch:]).all(), "padding rows must not be written"


@pytest.mark.parametrize("layout", ["soa", "aos"])
def test_graph_decode_step_100_replays(layout):
    step = PagedDecodeStep(capacity=64, layout=layout)
    rng = np.random.default_rng(1 if layout == "soa" else 2)
    step.set_batch(rng, 64)
    g = capture(step.run, warm=1)                 # warm: compile, load
    for _ in range(100):
        batch = step.set_batch(rng, int(rng.integers(1, 65)))
        replay(g)
        step.check(batch)


def test_mixed_prefill_and_decode_batch():
    """Chunked prefills and decodes in one step through one plan (one uniform call)."""
    rng = np.random.default_rng(3)
    hq, hkv, d, ps = 32, 8, 128, 16
    qlens = [512, 1, 1, 2048, 1, 1, 1, 300] + [1] * 24
    ctx = [int(max(q, c)) for q, c in zip(qlens, rng.integers(1, 6000, size=len(qlens)))]
    need = [-(-c // ps) for c in ctx]
    pages = rng.permutation(sum(need) + 5)
    pt = np.zeros((len(qlens), max(need)), dtype=np.int32)
    at = 0
    for i, n in enumerate(need):
        pt[i, :n] = pages[at:at + n]
        at += n
    kc = torch.randn(sum(need) + 5, ps, hkv, d, device="cuda").to(BF16)
    vc = torch.randn_like(kc)
    q = torch.randn(sum(qlens), hq, d, device="cuda").to(BF16)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32, device="cuda")
    used = torch.tensor(ctx, dtype=torch.int32, device="cuda")
    ptt = torch.tensor(pt, device="cuda")
    plan = AttentionPlan(max_batch=64, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, max_total_q=4096,
                         max_seqlen_q=2048, max_seqlen_k=6000, paged=True, causal=True)
    out = torch.full_like(q, float("nan"))
    plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=ptt, out=out)
    torch.cuda.synchronize()
    k, v, cu_k = gather_paged(kc, vc, ptt, used)
    ref, _ = attention_reference(q, k, v, cu_q, cu_k, causal=True)
    assert_close(out, ref)


def test_two_plans_on_two_streams_stay_independent():
    steps = [PagedDecodeStep(capacity=32, seed=s) for s in (5, 6)]
    rngs = [np.random.default_rng(7), np.random.default_rng(8)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for it in range(10):
        batches = [st.set_batch(r, int(r.integers(1, 33))) for st, r in zip(steps, rngs)]
        torch.cuda.synchronize()
        for st, s in zip(steps, streams):
            with torch.cuda.stream(s):
                st.run()
        torch.cuda.synchronize()
        for st, b in zip(steps, batches):
            st.check(b)


def test_e6_back_to_back_on_side_stream_and_graph_replays():
    """E6: 20 back-to-back calls on a non-blocking side stream with new inputs; a captured call
    replayed 3 times with zeroed outputs: every call right, no stale state (the plan's semaphore
    lives in its own buffer and is reset on the stream)."""
    step = PagedDecodeStep(capacity=16, seed=9)
    rng = np.random.default_rng(10)
    side = torch.cuda.Stream()
    for _ in range(20):
        batch = step.set_batch(rng, 16)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            step.run()
        side.synchronize()
        step.check(batch)
    step.set_batch(rng, 16)
    g = capture(step.run, warm=0)
    for _ in range(3):
        batch = step.set_batch(rng, 16)
        step.out.zero_()
        replay(g)
        assert not torch.all(step.out == 0)
        step.check(batch)


def test_plan_checks_everything_before_launching():
    """A bad call raises before the scheduler runs (the plan's metadata is untouched), a strided or
    foreign lse is refused, and schedule() checks seqused_k."""
    step = PagedDecodeStep(capacity=8, seed=12)
    rng = np.random.default_rng(13)
    step.set_batch(rng, 8)
    step.run()
    torch.cuda.synchronize()
    before = step.plan.metadata.clone()
    bad_lse = torch.empty(8, 32, device="cuda").t()            # right shape, tokens not contiguous
    with pytest.raises(ValueError, match="lse must be contiguous"):
        step.plan.run(step.q, step.k_cache, step.v_cache, step.cu_q, seqused_k=step.used, page_table=step.page_table,
                      out=step.out, lse=bad_lse)
    with pytest.raises(TypeError, match="seqused_k must have dtype int32"):
        step.plan.run(step.q, step.k_cache, step.v_cache, step.cu_q, seqused_k=step.used.long(),
                      page_table=step.page_table, out=step.out)
    with pytest.raises(ValueError, match="seqused_k must have shape"):
        step.plan.schedule(step.cu_q, seqused_k=step.used[:4])
    torch.cuda.synchronize()
    assert torch.equal(step.plan.metadata, before), "no scheduler launch happened for the bad calls"


def _hopper() -> bool:
    return torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.parametrize("layout", ["soa", "aos"])
def test_prefill_plan_on_hopper_path_graph_replays(layout):
    """A prefill plan on an sm_90a device takes the Hopper (wgmma/TMA) kernel; one captured step is
    replayed with new lengths and batches padded past the real ones (zero-length requests), with
    out NaN-poisoned each time: real rows right, padding rows untouched.  schedule() + attend()
    runs the same kernel with its tensor maps."""
    if not _hopper():
        pytest.skip("needs an sm_90a device")
    hq, hkv, d, cap, max_q, max_k = 16, 4, 128, 8, 512, 1024
    rng = np.random.default_rng(21 if layout == "soa" else 22)
    plan = AttentionPlan(max_batch=cap, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, max_total_q=cap * max_q,
                         max_seqlen_q=max_q, max_seqlen_k=max_k, causal=True, metadata_layout=layout)
    assert plan.attn_spec.mainloop == "sm90a", plan.attn_spec
    tq, tk = cap * max_q, cap * max_k
    q = torch.empty(tq, hq, d, device="cuda", dtype=BF16)
    k = torch.empty(tk, hkv, d, device="cuda", dtype=BF16)
    v = torch.empty(tk, hkv, d, device="cuda", dtype=BF16)
    cu_q = torch.zeros(cap + 1, dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(cap + 1, dtype=torch.int32, device="cuda")
    out = torch.empty(tq, hq, d, device="cuda", dtype=BF16)
    lse = torch.empty(hq, tq, device="cuda", dtype=torch.float32)

    def new_step(batch):
        lq = np.zeros(cap, dtype=np.int64)
        lk = np.zeros(cap, dtype=np.int64)
        lq[:batch] = rng.integers(0, max_q + 1, size=batch)
        lk[:batch] = np.maximum(lq[:batch], rng.integers(0, max_k + 1, size=batch))
        cu_q.copy_(torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32))
        cu_k.copy_(torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32))
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, device="cuda").to(BF16))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        return int(lq.sum())

    def check(rows):
        ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=True)
        assert_close(out[:rows], ref[:rows])
        fin = torch.isfinite(ref_lse[:, :rows])
        assert torch.allclose(lse[:, :rows][fin].double(), ref_lse[:, :rows][fin], atol=2e-3, rtol=1e-4)
        assert torch.isnan(out[rows:]).all(), "rows past the real tokens must not be written"

    rows = new_step(cap)
    plan.run(q, k, v, cu_q, cu_k, out=out, lse=lse)
    torch.cuda.synchronize()
    check(rows)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(q, k, v, cu_q, cu_k, out=out, lse=lse)
    for batch in (1, 3, 5, 8, 2):
        rows = new_step(batch)
        replay(g)
        check(rows)
    rows = new_step(6)
    plan.schedule(cu_q, cu_k)
    plan.attend(q, k, v, cu_q, cu_k, out=out, lse=lse)
    torch.cuda.synchronize()
    check(rows)


def test_plan_arch_switch():
    """arch='sm_80' keeps a prefill plan on the mma.sync kernel; a decode-shaped plan stays there."""
    kw = dict(max_batch=4, num_heads_q=8, num_heads_kv=8, head_dim=128, causal=True)
    assert AttentionPlan(max_seqlen_q=1024, arch="sm_80", **kw).attn_spec.mainloop == "sm80"
    assert AttentionPlan(max_seqlen_q=1, max_seqlen_k=8192, **kw).attn_spec.mainloop == "sm80"
    if _hopper():
        assert AttentionPlan(max_seqlen_q=1024, **kw).attn_spec.mainloop == "sm90a"
    else:
        with pytest.raises(ValueError, match="arch"):
            AttentionPlan(max_seqlen_q=1024, arch="sm_90a", **kw)
