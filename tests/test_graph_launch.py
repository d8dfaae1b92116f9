"""The graph launch of a prepared call (kernelgen/launch/graph_launch.py, issue 9), on the CPU.

The driver's graph API is a stand-in (tests/fake_cuda.py ``FakeGraphDriver``) that keeps each
executable graph's kernel nodes with copies of their parameters and records a graph launch as
its nodes' launches.  Checked: a stream's first call launches kernel by kernel and its later calls
launch one graph with the same launches, bit for bit; each set of pointers gets its graph, launched
unchanged when the set repeats, and past the cache's capacity the least recently used graph is
re-pointed where pointers differ; capture launches directly; graphs are per stream and per thread, bounded and
freed; the fused call and AttentionPlan.run take the same path; a driver without the graph API,
or a graph the driver refuses to build, falls back to direct launches.  Review additions: a
re-pointing the driver refuses midway is never launched for the previous pointers; the raw
workspace is returned once on every path; run on another current device does all its driver and
allocator calls under the device switch; threads, streams and pointer sets interleaved launch each
call's own parameters.  tests/test_graph_launch_ctypes.py takes the same path through ctypes.
"""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from fake_cuda import STREAM, make_plan
from test_fused_cpu import CTX, QLENS, paged_inputs
from test_fused_cpu import call as fused_call
from test_signature_cache import call, paged_args, recorded, the_prepared_call

from kernelgen.launch import graph_launch, launch, prepared


@pytest.fixture
def fixed_workspace(fake_cuda, monkeypatch):
    """Every workspace at one address (as the caching allocator gives a stream's repeated
    same-size request), so repeated calls have equal pointers."""
    ws = torch.empty(64 << 20, dtype=torch.uint8)
    fake_cuda.allocations.append(ws)
    monkeypatch.setattr(prepared, "raw_alloc", lambda nbytes, stream: ws.data_ptr())
    return ws


def test_first_call_direct_then_one_graph_with_the_same_launches(fake_cuda, fixed_workspace):
    a = paged_args()
    call(a, causal=True)
    direct = recorded(fake_cuda)
    assert fake_cuda.graph_launches == 0 and [x[0] for x in direct] == ["scheduler", "attention", "combine"]
    for n in (1, 2, 3):
        fake_cuda.clear()
        call(a, causal=True)
        assert fake_cuda.graph_launches == n
        assert recorded(fake_cuda) == direct
    assert fake_cuda.graph_driver.live == 1
    assert all(x.stream == STREAM for x in fake_cuda.launches)


def test_one_graph_per_pointer_set_launched_unchanged(fake_cuda, fixed_workspace):
    a = paged_args()
    a2 = dict(a, out=torch.empty_like(a["out"]))
    call(a, causal=True)                      # direct
    call(a, causal=True)                      # the first graph: its three nodes set
    assert fake_cuda.set_params == 3 and fake_cuda.graph_driver.instantiated == 1
    call(a2, causal=True)                     # new pointers: a second graph
    assert fake_cuda.set_params == 6 and fake_cuda.graph_driver.instantiated == 2
    for x in (a, a2, a, a2):                  # as two layers of a serving loop
        fake_cuda.clear()
        call(x, causal=True)
        att, comb = fake_cuda.launches[1].fields(), fake_cuda.launches[2].fields()
        assert att["out"] == comb["out"] == x["out"].data_ptr()
    assert fake_cuda.set_params == 6 and fake_cuda.graph_driver.instantiated == 2
    assert fake_cuda.graph_launches == 6
    assert len(the_prepared_call()._tls.graphs[STREAM]) == 2


def test_least_recently_used_graph_is_repointed_past_capacity(fake_cuda, fixed_workspace, monkeypatch):
    monkeypatch.setattr(graph_launch, "GRAPHS_PER_STREAM", 2)
    a = paged_args()
    layers = [dict(a, out=torch.empty_like(a["out"])) for _ in range(3)]
    call(layers[0], causal=True)
    call(layers[0], causal=True)
    call(layers[1], causal=True)
    call(layers[0], causal=True)              # layers[1]'s graph is now the least recently used
    assert fake_cuda.graph_driver.instantiated == 2 and fake_cuda.set_params == 6
    fake_cuda.clear()
    call(layers[2], causal=True)              # re-points layers[1]'s graph: out is in two nodes
    assert fake_cuda.graph_driver.instantiated == 2 and fake_cuda.set_params == 8
    assert fake_cuda.launches[1].fields()["out"] == fake_cuda.launches[2].fields()["out"] == layers[2]["out"].data_ptr()
    fake_cuda.clear()
    call(layers[0], causal=True)              # still cached, unchanged
    assert fake_cuda.set_params == 8 and fake_cuda.launches[1].fields()["out"] == layers[0]["out"].data_ptr()
    a3 = dict(layers[0], seqused_k=a["seqused_k"].clone())
    fake_cuda.clear()
    call(a3, causal=True)                     # re-points layers[2]'s graph: seqused_k and out (3 nodes)
    assert fake_cuda.set_params == 11
    s, att, comb = (x.fields() for x in fake_cuda.launches)
    assert s["seqused_k"] == att["seqused_k"] == a3["seqused_k"].data_ptr() and comb["out"] == a3["out"].data_ptr()


def test_new_workspace_address_reaches_every_node(fake_cuda):
    a = paged_args()
    call(a, causal=True)
    call(a, causal=True)
    fake_cuda.clear()
    call(a, causal=True)          # the stand-in allocator gives a new block each call
    base = fake_cuda.allocations[-1].data_ptr()
    prep = the_prepared_call()
    s, att, comb = (x.fields() for x in fake_cuda.launches)
    assert s["metadata"] == att["metadata"] == comb["metadata"] == base
    assert att["out_accum"] == comb["out_accum"] == base + prep.layout.out_accum_offset
    assert att["row_splits"] == comb["row_splits"] == base + prep.layout.row_splits_offset


def test_capture_launches_kernel_by_kernel(fake_cuda, fixed_workspace):
    a = paged_args()
    call(a, causal=True)
    call(a, causal=True)
    fake_cuda.clear()
    fake_cuda.capturing = True
    call(a, causal=True)
    assert fake_cuda.graph_launches == 1 and fake_cuda.kinds() == ["scheduler", "attention", "combine"]
    # inside capture the workspace comes from torch.empty (the capture's pool), not raw_alloc
    assert fake_cuda.launches[0].fields()["metadata"] == fake_cuda.allocations[-1].data_ptr()
    assert fake_cuda.allocations[-1].data_ptr() != fixed_workspace.data_ptr()


def test_one_graph_per_stream_bounded_and_freed(fake_cuda, fixed_workspace, monkeypatch):
    a = paged_args()
    streams = [STREAM + 16 * i for i in range(graph_launch.MAX_STREAMS + 3)]
    for s in streams:
        monkeypatch.setattr(prepared, "current_stream", lambda device, s=s: s)
        call(a, causal=True)
        call(a, causal=True)
        assert fake_cuda.launches[-1].stream == s
    assert fake_cuda.graph_launches == len(streams)
    assert fake_cuda.graph_driver.live == graph_launch.MAX_STREAMS      # the oldest were destroyed
    assert fake_cuda.graph_driver.instantiated == len(streams)
    the_prepared_call()._tls.graphs.clear()
    assert fake_cuda.graph_driver.live == 0


def test_threads_get_their_own_graphs(fake_cuda, fixed_workspace):
    a = paged_args()
    errors = []

    def worker():
        try:
            for _ in range(3):
                call(a, causal=True)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert fake_cuda.graph_driver.instantiated == 3 and fake_cuda.graph_launches == 6
    assert fake_cuda.graph_driver.live == 0       # freed with the threads' state


@pytest.mark.parametrize("arch,kinds", [("sm_80", ["scheduler", "scheduler", "fused", "combine"]),
                                        (None, ["scheduler", "scheduler", "fused_sm90", "combine"])])
def test_fused_call_is_one_graph_of_four_nodes(fake_cuda, fixed_workspace, arch, kinds):
    """The fused launch's four kernels (the sm_80 fused kernel, or on sm_90a the Hopper one, whose
    node carries the 1024-byte FUSED_TMA_PARAMS with its tensor maps), as one graph."""
    args = paged_inputs(QLENS, CTX)
    out = torch.empty_like(args[0])
    fused_call(*args, out=out, arch=arch)
    direct = recorded(fake_cuda)
    fake_cuda.clear()
    fused_call(*args, out=out, arch=arch)
    assert fake_cuda.graph_launches == 1
    assert fake_cuda.kinds() == kinds
    assert recorded(fake_cuda) == direct


def test_plan_run_takes_the_graph_path(fake_cuda, monkeypatch):
    p = make_plan(monkeypatch, max_batch=8, num_heads_q=8, num_heads_kv=2, head_dim=128, max_total_q=8,
                  max_seqlen_q=1, max_seqlen_k=96, paged=True, causal=True)
    a = paged_args()
    p.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], seqused_k=a["seqused_k"], page_table=a["page_table"],
          out=a["out"])
    direct = recorded(fake_cuda)
    fake_cuda.clear()
    p.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], seqused_k=a["seqused_k"], page_table=a["page_table"],
          out=a["out"])
    assert fake_cuda.graph_launches == 1 and recorded(fake_cuda) == direct
    assert fake_cuda.launches[0].fields()["metadata"] == p.metadata.data_ptr()


def test_no_graph_api_launches_directly(fake_cuda, fixed_workspace, monkeypatch):
    monkeypatch.setattr(graph_launch, "_driver", None)
    monkeypatch.setattr(graph_launch, "_driver_failed", True)
    a = paged_args()
    for _ in range(3):
        call(a, causal=True)
    assert fake_cuda.graph_launches == 0 and len(fake_cuda.launches) == 9


def test_environment_switches_the_graph_path_per_call(fake_cuda, fixed_workspace, monkeypatch):
    a = paged_args()
    call(a, causal=True)
    monkeypatch.setenv("KERNELGEN_GRAPH_LAUNCH", "0")
    call(a, causal=True)
    call(a, causal=True)
    assert fake_cuda.graph_launches == 0 and len(fake_cuda.launches) == 9
    monkeypatch.setenv("KERNELGEN_GRAPH_LAUNCH", "1")
    call(a, causal=True)
    assert fake_cuda.graph_launches == 1
    monkeypatch.delenv("KERNELGEN_GRAPH_LAUNCH")
    call(a, causal=True)
    assert fake_cuda.graph_launches == 2


def test_driver_binding_needs_every_entry_point():
    class Fn:
        pass

    class Lib:
        pass

    lib = Lib()
    for name in graph_launch.Driver._SIGNATURES:
        setattr(lib, name, Fn())
    drv = graph_launch.Driver(lib)
    assert drv.cuGraphLaunch.restype is graph_launch.ctypes.c_int
    assert len(drv.cuGraphAddKernelNode_v2.argtypes) == 5
    del lib.cuGraphExecKernelNodeSetParams_v2
    with pytest.raises(AttributeError):
        graph_launch.Driver(lib)


def test_refused_graph_falls_back_with_a_warning(fake_cuda, fixed_workspace, monkeypatch):
    monkeypatch.setattr(fake_cuda.graph_driver, "cuGraphInstantiateWithFlags", lambda out, graph, flags: 801)
    a = paged_args()
    call(a, causal=True)
    with pytest.warns(RuntimeWarning, match="cuGraphInstantiate failed .* CUresult 801") as w:
        call(a, causal=True)
    assert w[0].filename.endswith("test_signature_cache.py")    # the line that called varlen_attention
    call(a, causal=True)
    assert fake_cuda.graph_launches == 0 and len(fake_cuda.launches) == 9
    assert fake_cuda.graph_driver.graphs == {}            # the half-built graph was destroyed


def test_refused_graph_as_an_error_warning_then_direct_launches(fake_cuda, fixed_workspace, monkeypatch):
    """Under warnings-as-errors the refused build raises once; the thread does not retry it."""
    monkeypatch.setattr(fake_cuda.graph_driver, "cuGraphInstantiateWithFlags", lambda out, graph, flags: 801)
    a = paged_args()
    call(a, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning, match="cuGraphInstantiate failed"):
            call(a, causal=True)
        fake_cuda.clear()
        call(a, causal=True)
    assert fake_cuda.kinds() == ["scheduler", "attention", "combine"] and fake_cuda.graph_launches == 0


def test_zero_capacities_do_not_break_calls(fake_cuda, fixed_workspace, monkeypatch):
    monkeypatch.setattr(graph_launch, "GRAPHS_PER_STREAM", 0)
    monkeypatch.setattr(graph_launch, "MAX_STREAMS", 0)
    a, b = paged_args(), dict(paged_args(), out=torch.empty_like(paged_args()["out"]))
    for x in (a, a, b, a):
        fake_cuda.clear()
        call(x, causal=True)
        assert fake_cuda.launches[1].fields()["out"] == x["out"].data_ptr()


def test_failed_repoint_never_leaves_the_last_graph_stale(fake_cuda, fixed_workspace, monkeypatch):
    """One graph per stream: a call with new pointers re-points the graph the previous call
    launched.  When the driver refuses a node midway, nodes before it already hold the new
    pointers, so the next call with the previous pointers must not launch that graph unchanged."""
    monkeypatch.setattr(graph_launch, "GRAPHS_PER_STREAM", 1)
    a = paged_args()
    a2 = dict(a, out=torch.empty_like(a["out"]), seqused_k=a["seqused_k"].clone())
    call(a, causal=True)                       # direct
    call(a, causal=True)                       # a's graph
    drv = fake_cuda.graph_driver
    real, seen = drv.cuGraphExecKernelNodeSetParams_v2, []

    def refuse_the_second(exe, node, params):
        seen.append(node)
        return 700 if len(seen) == 2 else real(exe, node, params)

    monkeypatch.setattr(drv, "cuGraphExecKernelNodeSetParams_v2", refuse_the_second)
    with pytest.raises(launch.LaunchError, match="^cuGraphExecKernelNodeSetParams failed for kernel "):
        call(a2, causal=True)                  # scheduler node set to a2's seqused_k, attention refused
    fake_cuda.clear()
    call(a, causal=True)
    s, att, comb = (x.fields() for x in fake_cuda.launches)
    assert s["seqused_k"] == att["seqused_k"] == a["seqused_k"].data_ptr()
    assert att["out"] == comb["out"] == a["out"].data_ptr()
    fake_cuda.clear()
    call(a2, causal=True)
    s, att, comb = (x.fields() for x in fake_cuda.launches)
    assert s["seqused_k"] == att["seqused_k"] == a2["seqused_k"].data_ptr()
    assert att["out"] == comb["out"] == a2["out"].data_ptr()


def test_raw_workspace_is_returned_once_on_every_path(fake_cuda, monkeypatch):
    """Each raw_alloc'd workspace goes back with raw_delete exactly once, after the launches were
    enqueued or refused: direct and graph launches, refused launches of either kind, a refused
    re-pointing, a refused graph build (fallback); inside capture nothing is raw-allocated."""
    live, freed = {}, []
    base = torch.empty(64 << 20, dtype=torch.uint8)
    fake_cuda.allocations.append(base)

    def alloc(nbytes, stream):
        assert stream == STREAM and nbytes == the_prepared_call().workspace_bytes
        live[base.data_ptr()] = live.get(base.data_ptr(), 0) + 1
        return base.data_ptr()

    def delete(address):
        live[address] -= 1
        assert live[address] == 0, "freed twice"
        freed.append(address)

    monkeypatch.setattr(prepared, "raw_alloc", alloc)
    monkeypatch.setattr(prepared, "raw_delete", delete)
    a = paged_args()
    call(a, causal=True)                                   # direct
    call(a, causal=True)                                   # graph
    assert len(freed) == 2
    fake_cuda.graph_rc = 5
    with pytest.raises(launch.LaunchError):
        call(a, causal=True)                               # refused graph launch
    fake_cuda.graph_rc = 0
    assert len(freed) == 3
    drv = fake_cuda.graph_driver
    with monkeypatch.context() as m:
        m.setattr(drv, "cuGraphExecKernelNodeSetParams_v2", lambda exe, node, params: 700)
        with pytest.raises(launch.LaunchError):
            call(dict(a, out=torch.empty_like(a["out"])), causal=True)   # refused re-pointing of a new graph
    assert len(freed) == 4
    fake_cuda.capturing = True
    call(a, causal=True)                                   # capture: torch.empty, no raw allocation
    fake_cuda.capturing = False
    assert len(freed) == 4
    monkeypatch.setenv("KERNELGEN_GRAPH_LAUNCH", "0")
    fake_cuda.rc = 9
    with pytest.raises(launch.LaunchError):
        call(a, causal=True)                               # refused direct launch
    fake_cuda.rc = 0
    monkeypatch.delenv("KERNELGEN_GRAPH_LAUNCH")
    assert len(freed) == 5
    monkeypatch.setattr(drv, "cuGraphInstantiateWithFlags", lambda out, graph, flags: 801)
    with pytest.warns(RuntimeWarning):
        call(dict(a, out=torch.empty_like(a["out"])), causal=True)       # refused build: direct fallback
    assert len(freed) == 6 and live == {base.data_ptr(): 0}


def test_graph_is_built_and_launched_with_the_prepared_device_current(fake_cuda, fixed_workspace, monkeypatch):
    """run on another current device: the graph's build, node updates, launch and the workspace
    allocation all happen while the prepared device is current (inside the device switch)."""
    events = []

    class Device:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            events.append(("enter", self.device))

        def __exit__(self, *exc):
            events.append(("exit", self.device))
            return False

    monkeypatch.setattr(torch.cuda, "device", Device)
    drv = fake_cuda.graph_driver
    for name in ("cuGraphCreate", "cuGraphInstantiateWithFlags", "cuGraphExecKernelNodeSetParams_v2", "cuGraphLaunch"):
        def traced(*args, _real=getattr(drv, name), _name=name):
            events.append(_name)
            return _real(*args)
        monkeypatch.setattr(drv, name, traced)
    alloc = prepared.raw_alloc
    monkeypatch.setattr(prepared, "raw_alloc", lambda n, s: events.append("raw_alloc") or alloc(n, s))
    a = paged_args()
    call(a, causal=True)                           # the prepared device is current: no switch
    assert "enter" not in [e[0] if isinstance(e, tuple) else e for e in events]
    monkeypatch.setattr(prepared, "current_device", lambda: 3)
    events.clear()
    call(a, causal=True)                           # graph built and launched under the switch
    call(dict(a, out=torch.empty_like(a["out"])), causal=True)   # a second graph
    call(a, causal=True)                           # the first graph again
    inside, depth = [], 0
    for e in events:
        if isinstance(e, tuple):
            depth += 1 if e[0] == "enter" else -1
            assert e[1] is None                    # the prepared device (CPU tensors: index None)
        else:
            inside.append(depth == 1)
    # raw_alloc, create, instantiate, three node updates, launch; the same; raw_alloc, launch
    assert depth == 0 and all(inside) and len(inside) == 7 + 7 + 2
    assert fake_cuda.graph_launches == 3


class _PerThreadLaunches(list):
    """The recorder's launch list, also kept per recording thread."""

    def __init__(self):
        super().__init__()
        self.by_thread = {}

    def append(self, x):
        self.by_thread.setdefault(threading.get_ident(), []).append(x)
        super().append(x)


def test_threads_streams_and_pointer_sets_interleaved(fake_cuda, monkeypatch):
    """Four threads, three streams (two kept per thread: evicted and re-added), five outputs and
    three seqused_k (two graphs per stream: re-pointed), a thread switch every microsecond: each
    call's launches, as the thread that made it recorded them, carry its pointers, its stream's
    workspace and its stream."""
    import random
    import sys

    monkeypatch.setattr(graph_launch, "GRAPHS_PER_STREAM", 2)
    monkeypatch.setattr(graph_launch, "MAX_STREAMS", 2)
    rec = fake_cuda.launches = _PerThreadLaunches()
    ws = torch.empty(64 << 20, dtype=torch.uint8)
    fake_cuda.allocations.append(ws)
    monkeypatch.setattr(prepared, "raw_alloc", lambda nbytes, stream: ws.data_ptr() + 256 * (stream % 7))
    cur = threading.local()
    monkeypatch.setattr(prepared, "current_stream", lambda device: getattr(cur, "stream", STREAM))
    a = paged_args()
    outs = [torch.empty_like(a["out"]) for _ in range(5)]
    useds = [a["seqused_k"].clone() for _ in range(3)]
    call(a, causal=True)
    errors = []

    def worker(seed):
        r = random.Random(seed)
        try:
            for _ in range(300):
                cur.stream = STREAM + 16 * r.randrange(3)
                o, u = r.choice(outs), r.choice(useds)
                call(dict(a, out=o, seqused_k=u), causal=True)
                mine = rec.by_thread[threading.get_ident()][-3:]
                s, att, comb = (x.fields() for x in mine)
                assert att["out"] == comb["out"] == o.data_ptr()
                assert s["seqused_k"] == att["seqused_k"] == u.data_ptr()
                assert s["metadata"] == att["metadata"] == comb["metadata"] == ws.data_ptr() + 256 * (cur.stream % 7)
                assert {x.stream for x in mine} == {cur.stream}
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    # each thread's graphs are its own, so the counts do not depend on the interleaving
    assert fake_cuda.graph_launches == 819 and fake_cuda.set_params == 2159
