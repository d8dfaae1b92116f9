"""The graph launch through real ctypes foreign calls (kernelgen/launch/graph_launch.py), on the CPU.

tests/fake_cuda.py's ``FakeGraphDriver`` is a Python object, so ``graph_launch.Driver``'s
argtypes and ctypes' argument conversion are never exercised by it.  Here the driver is a C
shared library (tests/stub_cuda_graph.c, compiled with the system C compiler) loaded through
``graph_launch.Driver(ctypes.CDLL(...))`` exactly as libcuda.so.1 is: the C side reads
CUDA_KERNEL_NODE_PARAMS_v2 with the layout of the CUDA driver API reference and copies the
parameter bytes behind ``kernelParams[0]`` when a node is added or set, as the driver does.
Checked: the Python struct's size and field offsets equal the C compiler's; a prepared call's graph
launches, seen from C, carry the same functions, grids, blocks, shared memory, stream and
parameter bytes as its direct launches (three- and four-kernel calls, NULL and non-NULL stream
handles), with extra/kern/ctx NULL and instantiation flags 0; re-pointing reaches C; each handle is
destroyed once; driver failures name the driver function and the kernels.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from fake_cuda import FUNC, KIND, PARAMS, STREAM
from test_fused_cpu import CTX, QLENS, paged_inputs
from test_fused_cpu import call as fused_call
from test_signature_cache import call, paged_args, recorded

from kernelgen.front import api
from kernelgen.launch import graph_launch, launch, prepared

SOURCE = Path(__file__).with_name("stub_cuda_graph.c")
F_CREATE, F_ADD, F_INST, F_SET, F_LAUNCH = range(5)


@pytest.fixture(scope="session")
def stub_library(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the stub driver library")
    out = tmp_path_factory.mktemp("stub_cuda") / "libstub_cuda_graph.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(SOURCE)], check=True)
    return out


class Stub:
    """One loaded copy of the stub library (its own globals) and its test accessors."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.stub_launched.restype = ctypes.c_size_t
        self.lib.stub_params_layout.restype = ctypes.c_size_t
        self.lib.stub_exec_flags.restype = ctypes.c_ulonglong
        self.lib.stub_exec_flags.argtypes = (ctypes.c_int,)
        self.lib.stub_set_param_size.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        for kind, func in FUNC.items():
            assert self.lib.stub_set_param_size(func, PARAMS[kind].size) == 0
        self.driver = graph_launch.Driver(self.lib)

    def counts(self) -> dict:
        c = (ctypes.c_int * 9)()
        self.lib.stub_counts(c)
        return dict(zip(("graphs", "live_graphs", "execs", "live_execs", "graph_launches", "set_params",
                         "launched", "exec_destroys", "graph_destroys"), c))

    def launches(self) -> list:
        """(kind, grid, block, smem, params, stream, (extra, kern, ctx)) of each launched node."""
        res = []
        for i in range(self.counts()["launched"]):
            func, stream = ctypes.c_size_t(), ctypes.c_size_t()
            dims, ekc = (ctypes.c_uint * 7)(), (ctypes.c_size_t * 3)()
            buf = ctypes.create_string_buffer(1024)
            n = self.lib.stub_launched(i, ctypes.byref(func), dims, ctypes.byref(stream), ekc, buf)
            res.append((KIND[func.value], tuple(dims[0:3]), tuple(dims[3:6]), dims[6], buf.raw[:n], stream.value,
                        tuple(ekc)))
        return res

    def fail_next(self, which: int, rc: int) -> None:
        self.lib.stub_fail_next(which, rc)


@pytest.fixture
def stub(stub_library, tmp_path, fake_cuda, monkeypatch) -> Stub:
    """The stub library as the graph driver of the fake_cuda environment (a private copy per test,
    so no handle of another test's graphs reaches it)."""
    path = tmp_path / "libstub_copy.so"
    shutil.copyfile(stub_library, path)
    s = Stub(path)
    monkeypatch.setattr(graph_launch, "_driver", s.driver)
    ws = torch.empty(64 << 20, dtype=torch.uint8)     # every workspace at one address
    fake_cuda.allocations.append(ws)
    monkeypatch.setattr(prepared, "raw_alloc", lambda nbytes, stream: ws.data_ptr())
    return s


def test_struct_layout_matches_c(stub):
    offsets = (ctypes.c_size_t * 12)()
    size = stub.lib.stub_params_layout(offsets)
    P = graph_launch.KernelNodeParams
    names = ("func", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_mem_bytes",
             "kernel_params", "extra", "kern", "ctx")
    assert [name for name, _ in P._fields_] == list(names)
    assert ctypes.sizeof(P) == size == 72
    assert [getattr(P, name).offset for name in names] == list(offsets)
    assert list(offsets) == [0, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64]


@pytest.mark.parametrize("stream", [STREAM, 0], ids=["stream", "null-stream"])
def test_graph_launch_seen_from_c_equals_the_direct_launches(stub, fake_cuda, monkeypatch, stream):
    monkeypatch.setattr(prepared, "current_stream", lambda device: stream)
    a = paged_args()
    call(a, causal=True)                                   # direct, through the cuLaunchKernel recorder
    direct = recorded(fake_cuda)
    assert [x[0] for x in direct] == ["scheduler", "attention", "combine"]
    for n in (1, 2, 3):
        call(a, causal=True)
        c = stub.counts()
        assert c["graph_launches"] == n and c["execs"] == c["live_execs"] == 1 and c["set_params"] == 3
    seen = stub.launches()
    assert len(seen) == 9
    assert [x[:5] for x in seen] == direct * 3
    assert {x[5] for x in seen} == {stream}
    assert {x[6] for x in seen} == {(0, 0, 0)}             # extra, kern, ctx: NULL
    assert stub.lib.stub_exec_flags(0) == 0
    assert len(fake_cuda.launches) == 3                    # no direct launch after the first call


@pytest.mark.parametrize("arch,kinds", [("sm_80", ["scheduler", "scheduler", "fused", "combine"]),
                                        (None, ["scheduler", "scheduler", "fused_sm90", "combine"])])
def test_fused_call_seen_from_c(stub, fake_cuda, arch, kinds):
    """The fused launch (sm_80 path, and sm_90a's Hopper fused kernel with its 1024-byte parameter),
    as graph nodes the C stub sees."""
    args = paged_inputs(QLENS, CTX)
    out = torch.empty_like(args[0])
    fused_call(*args, out=out, arch=arch)
    direct = recorded(fake_cuda)
    fused_call(*args, out=out, arch=arch)
    seen = stub.launches()
    assert [x[0] for x in seen] == kinds
    assert [len(x[4]) for x in seen] == [PARAMS[kind].size for kind in kinds]   # fused_sm90: 1024 bytes
    assert [x[:5] for x in seen] == direct


def test_repointing_reaches_c_and_every_handle_is_destroyed_once(stub, fake_cuda, monkeypatch):
    monkeypatch.setattr(graph_launch, "GRAPHS_PER_STREAM", 2)
    a = paged_args()
    layers = [dict(a, out=torch.empty_like(a["out"])) for _ in range(3)]
    call(layers[0], causal=True)
    expected = []
    for x in (layers[0], layers[1], layers[2], layers[0], layers[2]):   # the third re-points a graph
        monkeypatch.setenv("KERNELGEN_GRAPH_LAUNCH", "0")   # the direct launches of these pointers
        fake_cuda.clear()
        call(x, causal=True)
        expected += recorded(fake_cuda)
        monkeypatch.delenv("KERNELGEN_GRAPH_LAUNCH")
        call(x, causal=True)
    assert [x[:5] for x in stub.launches()] == expected
    c = stub.counts()
    assert c["execs"] == 2 and c["graph_launches"] == 5
    api._CALLS.clear()                      # drops the prepared call: its graphs are destroyed
    c = stub.counts()
    assert c["live_execs"] == 0 and c["live_graphs"] == 0
    assert c["graphs"] == c["execs"] == c["exec_destroys"] == c["graph_destroys"] == 2   # each once


@pytest.mark.parametrize("which,function", [(F_CREATE, "cuGraphCreate"), (F_ADD, "cuGraphAddKernelNode"),
                                            (F_INST, "cuGraphInstantiate")])
def test_refused_build_through_ctypes_falls_back(stub, fake_cuda, which, function):
    a = paged_args()
    call(a, causal=True)
    stub.fail_next(which, 2)
    with pytest.warns(RuntimeWarning, match=rf"{function} failed for kernel \S+: {function} returned CUresult 2"):
        call(a, causal=True)
    assert fake_cuda.kinds() == ["scheduler", "attention", "combine"] * 2
    c = stub.counts()
    assert c["live_graphs"] == 0 and c["live_execs"] == 0 and c["graph_destroys"] == c["graphs"]
    assert c["exec_destroys"] == 0


def test_launch_and_set_params_failures_through_ctypes_name_the_driver_function(stub, fake_cuda):
    a = paged_args()
    call(a, causal=True)
    call(a, causal=True)
    prep = next(iter(api._CALLS._d.values()))
    names = "+".join(x.name for x in prep._launches() if x is not None)
    stub.fail_next(F_LAUNCH, 719)
    with pytest.raises(launch.LaunchError, match=r"^cuGraphLaunch failed for kernel .*CUresult 719$") as ei:
        call(a, causal=True)
    assert ei.value.kernel == names and ei.value.code == 719
    # the driver's error is chained as __cause__, as for a refused cuLaunchKernel (launch.LaunchError)
    cause = ei.value.__cause__
    assert isinstance(cause, graph_launch.DriverError) and (cause.status, cause.function) == (719, "cuGraphLaunch")
    stub.fail_next(F_SET, 1)
    with pytest.raises(launch.LaunchError, match=rf"^cuGraphExecKernelNodeSetParams failed for kernel "
                                                 rf"{prep.sched.name}: .*CUresult 1$") as ei:
        call(dict(a, seqused_k=a["seqused_k"].clone()), causal=True)
    assert ei.value.kernel == prep.sched.name and ei.value.code == 1
    assert isinstance(ei.value.__cause__, graph_launch.DriverError) and ei.value.__cause__.status == 1
    assert stub.counts()["graph_launches"] == 1
