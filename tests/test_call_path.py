"""The path of one call, traced module by module, goes down the layers (issue 21's done-criterion).

A call runs under ``sys.setprofile`` on the CPU (CUDA stubbed, tests/fake_cuda.py); every call of a
function defined in a kernelgen module is recorded, in order.  The pipeline layers are, top to
bottom, front > selection > jit > launch; ``kernels`` is the vocabulary every layer reads (specs,
ABIs, layouts), so its calls are left out of the path, and consecutive calls in one module make
one visit.  A "return upward" is a visit to a higher layer than the visit before it: the path
climbing back.  The first call of a signature (the validating
path: checks, the one decision, the kernels, the prepared launches) climbs back at most three
times: to the front's own validating function after the signature lookup, to the decider after
the device is read, to the signature cache after the launches are prepared.  A repeated call
never climbs.  A new user variant's first call that runs its sm_80 recipe while the Hopper kernel
builds (``selection.tiered``) climbs twice more: back from reading the kernels' state (jit) to the
sm_80 decision, and back from starting the build to the call's own path.  (The flat package before the move, measured the same way: 9 modules, 33 visits and
12 returns upward for the plain call, 53 visits and 16 returns for the mixed one, 36 visits and 7
returns for the plan's first step; after it: 29 visits and 3 returns, 48 and 3, 31 and 2.)
"""
import os
import sys

import pytest
import torch
from fake_cuda import make_plan
from test_fused_cpu import CTX, QLENS, paged_inputs
from test_layers import LAYERS, MODULES, PACKAGE, layer, module_name

import kernelgen

PIPELINE = ("launch", "jit", "selection", "front")
MAX_UPWARD = 3
_FILES = {str(p): m for m, p in MODULES.items()}


def trace(fn) -> list:
    """(module, function) of every kernelgen function called while ``fn()`` runs, in order."""
    calls = []
    root = str(PACKAGE) + os.sep

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            calls.append((_FILES.get(frame.f_code.co_filename) or module_name(frame.f_code.co_filename),
                          frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def visits(calls) -> list:
    """The pipeline modules the path visits, in order: calls into ``kernels`` left out, then
    consecutive calls in one module collapsed into one visit."""
    pipe = [m for m, _ in calls if layer(m) != LAYERS["kernels"]]
    return [m for i, m in enumerate(pipe) if i == 0 or pipe[i - 1] != m]


def upward(path) -> list:
    """The visits (index, from, to) where the path climbs to a higher layer than the visit before."""
    return [(i + 1, a, b) for i, (a, b) in enumerate(zip(path, path[1:])) if layer(b) > layer(a)]


def last_layer(path) -> str:
    return {v: k for k, v in LAYERS.items()}[layer(path[-1])]


def describe(path) -> str:
    names = {v: k for k, v in LAYERS.items()}
    return " > ".join(f"{m.removeprefix('kernelgen.')}[{names.get(layer(m), 'door')}]" for m in path)


def check_path(calls, max_upward=MAX_UPWARD):
    path = visits(calls)
    ups = upward(path)
    msg = (f"{len(path)} visits, {len(ups)} returns upward "
           f"({', '.join(f'{a} -> {b}' for _, a, b in ups)}):\n{describe(path)}")
    assert len(ups) <= max_upward, msg
    return path, ups, msg


def plain_call_args():
    torch.manual_seed(0)
    q = torch.randn(10, 4, 64).to(torch.bfloat16)
    k = torch.randn(20, 4, 64).to(torch.bfloat16)
    cq = torch.tensor([0, 3, 10], dtype=torch.int32)
    ck = torch.tensor([0, 8, 20], dtype=torch.int32)
    return q, k, torch.randn_like(k), cq, ck


def test_first_call_goes_down_the_layers(fake_cuda):
    q, k, v, cq, ck = plain_call_args()
    call = kernelgen.varlen_attention
    calls = trace(lambda: call(q, k, v, cq, ck, 7, 12, causal=True))
    path, ups, msg = check_path(calls)
    assert fake_cuda.kinds() == ["scheduler", "attention"]
    assert path[0] == "kernelgen.front.api" and last_layer(path) == "launch", msg
    assert {layer(m) for m in path} == {LAYERS[x] for x in PIPELINE}, msg
    assert any(layer(m) == LAYERS["kernels"] for m, _ in calls)
    # the layers in pipeline order: validation and the decision before any kernel is loaded, the
    # kernels loaded before any launch is prepared
    first = {x: next(i for i, m in enumerate(path) if layer(m) == LAYERS[x]) for x in PIPELINE}
    assert first["front"] < first["selection"] < first["jit"] < first["launch"], msg
    # the device is read once, by one call into jit.runtime, and the decision made once
    assert calls.count(("kernelgen.jit.runtime", "device")) == 1
    assert calls.count(("kernelgen.selection.decide", "decide")) == 1
    assert [(a, b) for _, a, b in ups] == [("kernelgen.selection.signature", "kernelgen.front.api"),
                                          ("kernelgen.jit.runtime", "kernelgen.selection.decide"),
                                          ("kernelgen.launch.prepared", "kernelgen.selection.signature")], msg


def test_repeated_call_never_climbs(fake_cuda):
    q, k, v, cq, ck = plain_call_args()
    call = kernelgen.varlen_attention
    call(q, k, v, cq, ck, 7, 12, causal=True)
    fake_cuda.clear()
    calls = trace(lambda: call(q, k, v, cq, ck, 7, 12, causal=True))
    path, ups, msg = check_path(calls, max_upward=0)
    assert fake_cuda.kinds() == ["scheduler", "attention"]
    assert {layer(m) for m in path} == {LAYERS["front"], LAYERS["selection"], LAYERS["launch"]}, msg
    assert not any(m == "kernelgen.selection.decide" or m.startswith("kernelgen.jit.") for m in path), msg


def test_mixed_call_goes_down_the_layers(fake_cuda):
    """A paged batch mixing prefill chunks and decodes: the Hopper fused launch (four kernels)."""
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    call = kernelgen.varlen_attention
    calls = trace(lambda: call(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               causal=True))
    path, ups, msg = check_path(calls)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    assert calls.count(("kernelgen.jit.runtime", "device")) == 1
    assert calls.count(("kernelgen.selection.decide", "decide")) == 1
    assert "kernelgen.launch.fused" in path, msg


def test_plan_run_goes_down_the_layers(fake_cuda, monkeypatch):
    """The first step of an AttentionPlan (made before the trace): checks, the prepared step, the
    launches; the plan chose its kernels when it was made, so the step reads no device."""
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    plan = make_plan(monkeypatch, max_batch=16, num_heads_q=q.shape[1], num_heads_kv=kc.shape[2],
                     head_dim=q.shape[2], max_total_q=4096, max_seqlen_q=max(QLENS), max_seqlen_k=max(CTX),
                     paged=True, causal=True)
    fake_cuda.clear()
    calls = trace(lambda: plan.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt))
    path, ups, msg = check_path(calls)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_sm90", "combine"]
    assert path[0] == "kernelgen.front.plan" and last_layer(path) == "launch", msg
    assert not any(m.startswith("kernelgen.jit.") or m == "kernelgen.selection.decide" for m in path), msg
    assert len(ups) <= 2, msg


def test_untested_arch_switch_reaches_the_decision_through_settings(fake_cuda, monkeypatch):
    """A first call on a (faked) compute capability 10.0 device: refused with the switch named,
    then, with KERNELGEN_ALLOW_UNTESTED_ARCH=1 in the environment, run on sm_100 kernels."""
    import pytest
    from kernelgen.jit import runtime
    from kernelgen.kernels.device import Device

    monkeypatch.setitem(runtime._devices, None, Device("fake B200", (10, 0), 148, 126 * 2 ** 20, 232448))
    loaded = []
    real_load = runtime._load
    monkeypatch.setattr(runtime, "_load", lambda spec, device: loaded.append(spec.arch) or real_load(spec, device))
    q, k, v, cq, ck = plain_call_args()
    with pytest.raises(RuntimeError, match="KERNELGEN_ALLOW_UNTESTED_ARCH=1"):
        kernelgen.varlen_attention(q, k, v, cq, ck, 7, 12, causal=True)
    assert loaded == [] and fake_cuda.kinds() == []
    monkeypatch.setenv("KERNELGEN_ALLOW_UNTESTED_ARCH", "1")
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 12, causal=True)
    assert fake_cuda.kinds() == ["scheduler", "attention"] and set(loaded) == {"sm_100"}


@pytest.mark.parametrize("d", [128, 64])
def test_tiered_first_call_climbs_twice_more(fake_cuda, monkeypatch, d):
    """A new user variant's first call whose Hopper kernel is not built (selection.tiered): after
    the decision the kernels' state is read (jit: loaded, building, on disk), then the sm_80
    decision is made (a climb back from jit to selection), the build is started (jit.background;
    here a build that does nothing) and the call goes on as a first call with the sm_80 recipe (a
    climb back from jit to selection), so two climbs more than a plain first call.  At head dim 64
    the Hopper kernel is the three-warpgroup one, whose spills are looked up first (selection.spills:
    one climb more; not built, so the decision stands), and whose two-warpgroup twin is decided and
    looked up before the build starts (one more): the build makes both, the twin last."""
    from kernelgen.jit import background, compiler

    monkeypatch.setattr(background, "_build", lambda cache, spec: None)
    compiler.nvrtc_version()            # (NVRTC imported, as after any earlier compile)
    torch.manual_seed(0)
    q = torch.randn(256, 4, d).to(torch.bfloat16)
    k = torch.randn(256, 2, d).to(torch.bfloat16)
    cu = torch.tensor([0, 128, 256], dtype=torch.int32)
    var = kernelgen.Variant(score_mod=f"score * 0.5f + {d}.f * 0.f")
    call = kernelgen.varlen_attention
    calls = trace(lambda: call(q, k, torch.randn_like(k), cu, cu, 128, 128, causal=True, variant=var))
    spill_lookup = [("kernelgen.jit.cache", "kernelgen.selection.tiered")] if d == 64 else []
    twin_lookup = spill_lookup
    path, ups, msg = check_path(calls, max_upward=MAX_UPWARD + 2 + len(spill_lookup) + len(twin_lookup))
    assert fake_cuda.kinds() == ["scheduler", "attention_variant0"]
    built = [spec for (_, spec) in background._futures]
    assert len(built) == (3 if d == 64 else 2) and built[0].variant is not None and built[0].mainloop == "sm90a"
    if d == 64:   # the three-warpgroup kernel first, its two-warpgroup twin last
        assert (built[0].tile.num_warps, built[-1].tile.num_warps) == (12, 8) and built[-1].variant is not None
    assert calls.count(("kernelgen.jit.runtime", "device")) == 1
    # the call's, its sm_80 one, at d 64 the twin's
    assert calls.count(("kernelgen.selection.decide", "decide")) == (3 if d == 64 else 2)
    assert calls.count(("kernelgen.selection.spills", "spills")) == (d == 64)
    assert [(a, b) for _, a, b in ups] == [("kernelgen.selection.signature", "kernelgen.front.api"),
                                          ("kernelgen.jit.runtime", "kernelgen.selection.decide"),
                                          *spill_lookup,
                                          ("kernelgen.jit.cache", "kernelgen.selection.tiered"),
                                          *twin_lookup,
                                          ("kernelgen.jit.runtime", "kernelgen.selection.arguments"),
                                          ("kernelgen.launch.prepared", "kernelgen.selection.signature")], msg
