"""CPU probe of the host (Python) cost of one decode call, without a GPU.

Measures the call of ``kernelgen/apps/bench/suites.py::overhead_entry`` -- a paged decode step of 32
requests (Mooncake contexts capped at 8192, pages of 16 tokens, llama3-8b heads 32/8, d 128,
bf16, causal, ``out=`` given, split-KV on: scheduler + attention + combine) -- through
``kernelgen.varlen_attention`` and ``AttentionPlan.run``, on CPU tensors, with the CUDA-specific
bits stubbed:

* the inputs' device check accepts the CPU (``validation.varlen_inputs``' default ``devtypes``);
* the current device / raw stream come from stubs (``torch._C._cuda_getDevice``,
  ``torch._C._cuda_getCurrentRawStream``, ``torch.cuda.current_device``, ``torch.cuda.device``);
* device properties are an H200's (132 SMs, 60 MiB L2, sm_90a) and kernels are "loaded" without
  CUDA (``runtime._load`` returns a Kernel with a null function pointer);
* the driver launch is a Python no-op in place of CuPy's ``driver.launchKernel`` (which both the
  current launcher, ``kernelgen.launch``, and the pre-issue-9 one call); the no-op costs about
  what the Cython binding itself does (~0.1 us), the driver's work is not included; likewise the
  driver's graph API (``kernelgen.graph_launch``) is a set of Python no-ops (a ctypes call costs
  about 0.5 us more), the capture check answers False and the workspace is a CPU allocation.

What it does NOT include: the driver's own ``cuLaunchKernel`` time (about 2 us a launch on Linux,
three launches a call) and the CUDA caching allocator (``torch.empty`` on a CUDA device costs more
than the CPU allocation measured here).  The numbers are for comparing versions of the Python
path on one machine, not H200 results.

Usage: PYTHONPATH=$PWD python tools/host_overhead_probe.py [--calls 2000] [--samples 15] [--json]
Runs against whichever kernelgen is on PYTHONPATH (also a pre-issue-9 checkout: the stubs cover
both launchers).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

DEVICE_PROPS = {"name": "probe (H200 properties)", "cc": (9, 0), "num_sms": 132, "l2_bytes": 60 * 2 ** 20,
                "smem_optin": 232448}
BATCH, PAGE_SIZE, CONTEXT_CAP = 32, 16, 8192
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128


class _NoDevice:
    """Stands in for ``torch.cuda.device``: a context manager that switches nothing."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def install_stubs() -> None:
    """Patch torch, kernelgen.validation/runtime and the launch backends (see the module doc)."""
    torch._C._cuda_getDevice = lambda: None                      # CPU tensors have device index None
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    torch.cuda.current_device = lambda: None
    torch.cuda.device = _NoDevice

    from kernelgen.jit import runtime
    from kernelgen.kernels.device import Device
    from kernelgen.kernels.params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS
    from kernelgen.selection import heuristics, validation

    validation.varlen_inputs.__defaults__ = (("cpu",),)
    runtime._devices[None] = Device(**DEVICE_PROPS)

    def fake_load(spec, device):
        if spec.kind == "attention":
            threads, smem, params = spec.tile.num_warps * 32, spec.smem_bytes(), ATTENTION_PARAMS
            grid = heuristics.estimated_ctas(spec.arch, spec.tile, smem, DEVICE_PROPS["num_sms"])
        elif spec.kind == "scheduler":
            threads, smem, params, grid = spec.num_threads, 0, SCHEDULER_PARAMS, 1
        else:
            threads, smem, params, grid = spec.num_threads, 0, COMBINE_PARAMS, DEVICE_PROPS["num_sms"]
        return runtime.Kernel(spec=spec, device=device, func_ptr=0, num_threads=threads, smem_bytes=smem,
                              persistent_grid=grid, params=params)

    runtime._load = fake_load
    try:
        from kernelgen.launch import graph_launch, prepared
    except ImportError:                                           # before the graph launcher
        pass
    else:
        prepared.is_capturing = lambda: False
        prepared.raw_alloc = lambda nbytes, stream: torch.empty(nbytes, dtype=torch.uint8).data_ptr()
        prepared.raw_delete = lambda address: None
        graph_launch._driver = _NoGraphDriver()
    from cupy.cuda import driver

    driver.launchKernel = _no_launch                              # the pre-issue-9 launcher calls it
    try:
        from kernelgen.launch import launch
    except ImportError:                                           # pre-issue-9 checkout
        pass
    else:
        launch._driver_launch = _no_launch


class _NoGraphDriver:
    """The driver's graph API as no-ops that succeed (handles are 1)."""

    @staticmethod
    def _set(out, *args):
        out._obj.value = 1
        return 0

    cuGraphCreate = cuGraphAddKernelNode_v2 = cuGraphInstantiateWithFlags = _set

    @staticmethod
    def cuGraphExecKernelNodeSetParams_v2(exe, node, params):
        return 0

    cuGraphLaunch = staticmethod(lambda exe, stream: 0)
    cuGraphExecDestroy = cuGraphDestroy = staticmethod(lambda handle: 0)


def _no_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
    """cuLaunchKernel's stand-in: accepts the launch and enqueues nothing."""


def decode_inputs():
    """The overhead entry's decode step on the CPU (cache memory allocated, never touched)."""
    from kernelgen.apps.bench.suites import Settings, decode_contexts

    ctx = [min(c, CONTEXT_CAP) for c in decode_contexts(Settings(), "decode_trace_b32_paged16")][:BATCH]
    need = [-(-c // PAGE_SIZE) for c in ctx]
    pages = sum(need)
    bf16 = torch.bfloat16
    kc = torch.empty(pages, PAGE_SIZE, HEADS_KV, HEAD_DIM, dtype=bf16)
    vc = torch.empty(pages, PAGE_SIZE, HEADS_KV, HEAD_DIM, dtype=bf16)
    pt = torch.zeros(len(ctx), max(need), dtype=torch.int32)
    q = torch.zeros(len(ctx), HEADS_Q, HEAD_DIM, dtype=bf16)
    used = torch.tensor(ctx, dtype=torch.int32)
    cu_q = torch.arange(len(ctx) + 1, dtype=torch.int32)
    out = torch.empty(len(ctx), HEADS_Q, HEAD_DIM, dtype=bf16)
    return ctx, q, kc, vc, pt, used, cu_q, out


def make_plan(b, maxk):
    """An AttentionPlan like the overhead entry's, built on the CPU (its torch.device is the CPU)."""
    from kernelgen.front import plan as plan_mod

    real = plan_mod.torch

    class _CpuTorch:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def device(*args, **kwargs):
            return real.device("cpu")

    plan_mod.torch = _CpuTorch()
    try:
        return plan_mod.AttentionPlan(max_batch=b, num_heads_q=HEADS_Q, num_heads_kv=HEADS_KV, head_dim=HEAD_DIM,
                                      head_dim_v=HEAD_DIM, max_total_q=b, max_seqlen_q=1, max_seqlen_k=maxk,
                                      paged=True, causal=True)
    finally:
        plan_mod.torch = real


def host_us(fn, calls: int, samples: int) -> tuple[float, float]:
    """(median, min) over ``samples`` of the mean time of ``calls`` back-to-back calls, in
    microseconds (the min is the less disturbed by other processes on a shared machine)."""
    for _ in range(50):
        fn()
    per = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per), min(per)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    install_stubs()
    from kernelgen.front.api import varlen_attention

    ctx, q, kc, vc, pt, used, cu_q, out = decode_inputs()
    maxk = max(ctx)
    plan = make_plan(len(ctx), maxk)

    def call():
        return varlen_attention(q, kc, vc, cu_q, None, 1, maxk, seqused_k=used, page_table=pt, causal=True,
                                window_size=(-1, -1), softcap=0.0, out=out)

    def step():
        return plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out)

    assert call() is out and step() is out
    from kernelgen.front import api

    def first_call():
        api.clear_signature_cache()
        return call()

    cases = [("varlen_attention", call, args.calls), ("plan_run", step, args.calls),
             ("cpu_torch_empty", lambda: torch.empty(4096, dtype=torch.uint8), args.calls)]
    if hasattr(api, "clear_signature_cache"):        # issue 9: a new signature's first call
        cases.append(("first_call_of_signature", first_call, max(1, args.calls // 10)))
    res = {}
    for name, fn, calls in cases:
        res[f"{name}_us"], res[f"{name}_us_min"] = host_us(fn, calls, args.samples)
    res["launches"] = 3 if plan.combine is not None else 2
    res["excluded"] = "driver cuLaunchKernel time (~2 us a launch), CUDA caching allocator"
    if args.json:
        print(json.dumps(res))
    else:
        for name, _, _ in cases:
            print(f"{name:>23}: median {res[name + '_us']:7.2f} us   min {res[name + '_us_min']:7.2f} us")
        print(f"{'launches':>23}: {res['launches']}\n{'excluded':>23}: {res['excluded']}")
    return res


if __name__ == "__main__":
    main()
