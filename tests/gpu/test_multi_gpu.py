"""More than one GPU (issue 7 item 5, issue 27): kernels load per device and launches follow the
tensors' device and the current stream.  ``cuda:1`` gives the same results as ``cuda:0`` bit for
bit, both while the current device is 0 and inside ``torch.cuda.device(1)`` on a side stream, for
prefill (the Hopper path on an H200), paged decode, a fused mixed step and an FP8 cache; a plan for
device 1 runs eagerly and replays from a CUDA graph captured there; the tensor-parallel example
(torch.distributed, NCCL, one process per GPU) matches one GPU.

Needs two GPUs (skipped otherwise).  NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged, tolerance
from kernelgen.jit import runtime

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2), reason="needs 2 GPUs"),
]
BF16 = torch.bfloat16
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def prefill_inputs(seed=1):
    """Packed causal prefill (host tensors): 4 requests, one with no query rows."""
    g = torch.Generator().manual_seed(seed)
    qlens, klens = [700, 0, 129, 33], [700, 5, 300, 33]
    q = torch.randn(sum(qlens), 16, 128, generator=g).to(BF16)
    k = torch.randn(sum(klens), 4, 128, generator=g).to(BF16)
    v = torch.randn(sum(klens), 4, 128, generator=g).to(BF16)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(klens)]), dtype=torch.int32)
    return dict(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, maxq=max(qlens), maxk=max(klens))


def decode_inputs(seed=2, page_size=16):
    """Paged decode (host tensors): pages in random order, an empty context, last pages partly full."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    klens = [5000, 0, 1, 3001, 16 * 7, 2048]
    need = [-(-n // page_size) for n in klens]
    num_pages = sum(need) + 5
    kc = torch.randn(num_pages, page_size, 4, 128, generator=g).to(BF16)
    vc = torch.randn(num_pages, page_size, 4, 128, generator=g).to(BF16)
    perm = rng.permutation(num_pages)
    pt = np.full((len(klens), max(need) + 1), -1, dtype=np.int32)
    at = 0
    for b, n in enumerate(need):
        pt[b, :n] = perm[at:at + n]
        at += n
    q = torch.randn(len(klens), 32, 128, generator=g).to(BF16)
    cu_q = torch.arange(len(klens) + 1, dtype=torch.int32)
    return dict(q=q, kc=kc, vc=vc, pt=torch.tensor(pt), used=torch.tensor(klens, dtype=torch.int32), cu_q=cu_q,
                maxk=max(klens))


def to(d, dev):
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def run_prefill(x):
    out = torch.full((x["q"].shape[0], 16, 128), float("nan"), dtype=BF16, device=x["q"].device)
    return kernelgen.varlen_attention(x["q"], x["k"], x["v"], x["cu_q"], x["cu_k"], x["maxq"], x["maxk"], causal=True,
                                      return_lse=True, out=out)


def run_decode(x, num_splits):
    out = torch.full((x["q"].shape[0], 32, 128), float("nan"), dtype=BF16, device=x["q"].device)
    return kernelgen.varlen_attention(x["q"], x["kc"], x["vc"], x["cu_q"], None, 1, x["maxk"], seqused_k=x["used"],
                                      page_table=x["pt"], causal=True, num_splits=num_splits, return_lse=True, out=out)


def check_reference(out, lse, ref, ref_lse):
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "unwritten rows"
    atol, rtol = tolerance(BF16)
    r = ref.to(BF16).double().to(out.device)
    err = (out.double() - r).abs()
    assert bool((err <= atol + rtol * r.abs()).all()), f"max err {err.max().item():.3e}"
    ref_lse = ref_lse.to(lse.device)
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty)
    assert bool((out.transpose(0, 1)[empty] == 0).all())
    lerr = (lse.double()[~empty] - ref_lse[~empty]).abs()
    assert lerr.numel() == 0 or bool((lerr <= 2e-3 + 1e-4 * ref_lse[~empty].abs()).all())


def prefill_reference(x):
    return attention_reference(x["q"], x["k"], x["v"], x["cu_q"], x["cu_k"], causal=True)


def decode_reference(x):
    k, v, cu_k = gather_paged(x["kc"], x["vc"], x["pt"], x["used"])
    return attention_reference(x["q"], k, v, x["cu_q"], cu_k, causal=True)


@pytest.fixture(scope="module")
def host():
    return {"prefill": prefill_inputs(), "decode": decode_inputs()}


@pytest.fixture(scope="module")
def on_cuda0(host):
    """Results on cuda:0 (the bitwise baseline)."""
    torch.cuda.set_device(0)
    x0, d0 = to(host["prefill"], "cuda:0"), to(host["decode"], "cuda:0")
    res = {"prefill": run_prefill(x0), "decode_split4": run_decode(d0, 4), "decode_auto": run_decode(d0, 0)}
    torch.cuda.synchronize(0)
    return {k: (o.cpu(), lse.cpu()) for k, (o, lse) in res.items()}


def _assert_bitwise(a, b, what):
    assert torch.equal(a[0], b[0]), f"{what}: out differs from cuda:0"
    assert torch.equal(a[1], b[1]), f"{what}: lse differs from cuda:0"


def test_cuda1_while_current_device_is_0(host, on_cuda0):
    torch.cuda.set_device(0)
    x1, d1 = to(host["prefill"], "cuda:1"), to(host["decode"], "cuda:1")
    res = {"prefill": run_prefill(x1), "decode_split4": run_decode(d1, 4), "decode_auto": run_decode(d1, 0)}
    assert torch.cuda.current_device() == 0, "the call must not change the current device"
    torch.cuda.synchronize(1)
    for name, (o, lse) in res.items():
        assert o.device == torch.device("cuda", 1) and lse.device == torch.device("cuda", 1)
        ref, ref_lse = prefill_reference(x1) if name == "prefill" else decode_reference(d1)
        check_reference(o, lse, ref, ref_lse)
        _assert_bitwise((o.cpu(), lse.cpu()), on_cuda0[name], name)
    devices = {k.device for k in runtime.loaded_kernels()}
    assert {0, 1} <= devices, f"kernels loaded per device: {devices}"


def _sleep_on_current_stream():
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(200_000_000)          # ~0.1 s of GPU time ahead of the inputs' last write


def test_cuda1_in_device_context_on_side_stream(host, on_cuda0):
    """Inputs are written on the side stream after a GPU sleep; a launch on any other stream would
    read them before they are written and disagree with the reference."""
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        x1, d1 = to(host["prefill"], "cuda:1"), to(host["decode"], "cuda:1")
        q_pre, q_dec = x1["q"].clone(), d1["q"].clone()
        x1["q"].zero_()
        d1["q"].zero_()
        torch.cuda.synchronize(1)
        s = torch.cuda.Stream(device=1)
        with torch.cuda.stream(s):
            _sleep_on_current_stream()
            x1["q"].copy_(q_pre)
            d1["q"].copy_(q_dec)
            res = {"prefill": run_prefill(x1), "decode_split4": run_decode(d1, 4), "decode_auto": run_decode(d1, 0)}
        torch.cuda.current_stream(1).wait_stream(s)
        torch.cuda.synchronize(1)
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_device() == 0
    for name, (o, lse) in res.items():
        ref, ref_lse = prefill_reference(x1) if name == "prefill" else decode_reference(d1)
        check_reference(o, lse, ref, ref_lse)
        _assert_bitwise((o.cpu(), lse.cpu()), on_cuda0[name], name)


def test_plan_on_cuda1_in_device_context(host):
    """AttentionPlan made for device 1 (scheduler + attention launched from the plan)."""
    from kernelgen.front.plan import AttentionPlan

    x = host["prefill"]
    with torch.cuda.device(1):
        plan = AttentionPlan(max_batch=8, num_heads_q=16, num_heads_kv=4, head_dim=128, causal=True, device=1)
        x1 = to(x, "cuda:1")
        out = torch.full_like(x1["q"], float("nan"))
        plan.run(x1["q"], x1["k"], x1["v"], x1["cu_q"], x1["cu_k"], out=out)
        torch.cuda.synchronize(1)
    ref, _ = prefill_reference(x1)
    atol, rtol = tolerance(BF16)
    r = ref.to(BF16).double()
    assert not torch.isnan(out).any()
    assert bool(((out.double() - r).abs() <= atol + rtol * r.abs()).all())


def _host_mixed_paged(seed=4, hq=32, hkv=8, d=128):
    """A mixed step on a paged cache (host tensors): chunked prefills, decodes, speculative steps and
    empty requests (test_fused_gpu's mixed_lengths), pages in random order."""
    from test_fused_gpu import mixed_lengths
    from test_paged_decode_gpu import make_paged

    qlens, klens = mixed_lengths(np.random.default_rng(seed))
    with torch.cuda.device(0):
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, 16, seed=seed)
    return {k: t.cpu() for k, t in dict(q=q, kc=kc, vc=vc, pt=pt, used=used, cu_q=cu_q).items()}, max(qlens), max(klens)


def _mixed_call(x, maxq, maxk):
    out = torch.full(tuple(x["q"].shape), float("nan"), dtype=BF16, device=x["q"].device)
    return kernelgen.varlen_attention(x["q"], x["kc"], x["vc"], x["cu_q"], None, maxq, maxk, seqused_k=x["used"],
                                      page_table=x["pt"], causal=True, return_lse=True, out=out)


def test_fused_mixed_step_on_cuda1():
    """A mixed prefill + decode step on cuda:1 (current device 0) runs the fused launch (on an H200
    the Hopper one) and equals cuda:0 bit for bit and the float64 reference (issue 27)."""
    from test_fused_gpu import expect_mixed_launch

    host, maxq, maxk = _host_mixed_paged()
    torch.cuda.set_device(0)
    o0, l0 = _mixed_call(to(host, "cuda:0"), maxq, maxk)
    x1 = to(host, "cuda:1")
    o1, l1 = _mixed_call(x1, maxq, maxk)
    expect_mixed_launch(None)
    assert torch.cuda.current_device() == 0 and o1.device == torch.device("cuda", 1)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    k, v, cu_k = gather_paged(x1["kc"], x1["vc"], x1["pt"], x1["used"])
    ref, ref_lse = attention_reference(x1["q"], k, v, x1["cu_q"], cu_k, causal=True)
    check_reference(o1, l1, ref, ref_lse)
    _assert_bitwise((o1.cpu(), l1.cpu()), (o0.cpu(), l0.cpu()), "fused mixed step")


def test_fp8_decode_on_cuda1(host):
    """A paged decode on an e4m3 cache with per-(request, KV head) descales on cuda:1 (current device
    0): equal to cuda:0 bit for bit and to the float64 reference, which dequantises exactly."""
    g = torch.Generator().manual_seed(9)
    d = dict(host["decode"])
    d["kc"], d["vc"] = d["kc"].to(torch.float8_e4m3fn), d["vc"].to(torch.float8_e4m3fn)
    b = d["q"].shape[0]
    d["kd"], d["vd"] = ((0.5 + 1.5 * torch.rand(b, 4, generator=g)).float() for _ in range(2))

    def call(x):
        out = torch.full((b, 32, 128), float("nan"), dtype=BF16, device=x["q"].device)
        return kernelgen.varlen_attention(x["q"], x["kc"], x["vc"], x["cu_q"], None, 1, x["maxk"],
                                          seqused_k=x["used"], page_table=x["pt"], causal=True, return_lse=True,
                                          out=out, k_descale=x["kd"], v_descale=x["vd"])
    torch.cuda.set_device(0)
    o0, l0 = call(to(d, "cuda:0"))
    x1 = to(d, "cuda:1")
    o1, l1 = call(x1)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    k, v, cu_k = gather_paged(x1["kc"], x1["vc"], x1["pt"], x1["used"])
    ref, ref_lse = attention_reference(x1["q"], k, v, x1["cu_q"], cu_k, causal=True, k_descale=x1["kd"],
                                       v_descale=x1["vd"])
    check_reference(o1, l1, ref, ref_lse)
    _assert_bitwise((o1.cpu(), l1.cpu()), (o0.cpu(), l0.cpu()), "fp8 decode")


def test_plan_graph_replays_on_cuda1(host):
    """An AttentionPlan for device 1 captured in a CUDA graph on a cuda:1 stream, replayed with new
    inputs written in place (a smaller batch the second time: rows past it padded), against the
    float64 reference each time."""
    from kernelgen.front.plan import AttentionPlan

    d = host["decode"]
    cap = d["q"].shape[0]
    with torch.cuda.device(1):
        x = to(d, "cuda:1")
        plan = AttentionPlan(max_batch=cap, num_heads_q=32, num_heads_kv=4, head_dim=128, max_total_q=cap,
                             max_seqlen_q=1, max_seqlen_k=8192, paged=True, causal=True, device=1)
        out = torch.full((cap, 32, 128), float("nan"), dtype=BF16, device="cuda:1")
        lse = torch.full((32, cap), float("nan"), dtype=torch.float32, device="cuda:1")

        def run():
            plan.run(x["q"], x["kc"], x["vc"], x["cu_q"], seqused_k=x["used"], page_table=x["pt"], out=out, lse=lse)
        run()
        run()
        torch.cuda.synchronize(1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        g = torch.Generator(device="cuda:1").manual_seed(11)
        for step, batch in enumerate((cap, cap - 2)):
            x["q"].copy_(torch.randn(x["q"].shape, generator=g, device="cuda:1").to(BF16))
            x["kc"].copy_(torch.randn(x["kc"].shape, generator=g, device="cuda:1").to(BF16))
            cu = torch.arange(cap + 1, dtype=torch.int32).clamp(max=batch)
            x["cu_q"].copy_(cu)
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize(1)
            k, v, cu_k = gather_paged(x["kc"], x["vc"], x["pt"][:batch], x["used"][:batch])
            ref, ref_lse = attention_reference(x["q"][:batch], k, v, x["cu_q"][:batch + 1], cu_k, causal=True)
            check_reference(out[:batch], lse[:, :batch], ref, ref_lse)
            assert torch.isnan(out[batch:]).all(), f"step {step}: rows past the batch were written"


def test_tensor_parallel_example():
    env = dict(os.environ, **NO_MULTICAST, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "tensor_parallel.py")], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=400)
    tail = (p.stdout[-3000:] + "\n" + p.stderr[-3000:])
    assert p.returncode == 0, tail
    assert "tensor_parallel: ok" in p.stdout, tail

