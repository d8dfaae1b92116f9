"""CPU stand-ins for the CUDA pieces of a kernelgen call, for tests without a GPU.

``install(monkeypatch)`` (the ``fake_cuda`` fixture of conftest.py) lets the public calls run on
CPU tensors up to the driver: the inputs' device check accepts the CPU, the device is an
H200's, kernels are "loaded" with fake function handles (no compile), the current device is the
CPU tensors' index (None) and the current stream a fixed handle, and ``cuLaunchKernel`` is a
stand-in of CuPy's binding that records each launch (function, grid, block, shared memory,
stream and the parameter bytes behind kernelParams).  The driver's graph API (``graph_launch``)
is a stand-in too (``FakeGraphDriver``): a graph launch records its kernel nodes as launches,
in order, with the parameters they were last set to, so a test sees the same launches on either
path.  Workspaces come from ``prepared.raw_alloc`` as CPU uint8 tensors the recorder keeps, the
capture state (``prepared.is_capturing`` and ``torch.cuda.is_current_stream_capturing``, which
``selection.tiered`` asks) is ``Recorder.capturing``; the TMA tensor-map encoder packs its arguments into the
map's bytes (``fake_encode``).  Signature caches start empty.

Kernel kinds (``FUNC``, the fake function handles, and ``PARAMS``, their parameter decoders):
"scheduler", "attention" (sm_80 path), "attention_sm90" (Hopper kernel: maps + AttnParams),
"combine", "fused" (sm_80 fused mixed-batch kernel: two AttnParams) and "fused_sm90" (the Hopper
fused mixed-batch kernel, ``params.FUSED_TMA_PARAMS``: maps + long AttnParams, short AttnParams,
short_ctas; ``Launch.fields()`` gives {"long": ..., "short": ..., "short_ctas": ...}); kinds of the
FP8, ALiBi, sink and user-variant kernels are registered on first use (``_fp8_func``: e.g.
"attention_fp8", "attention_sm90_fp8", "attention_sm90_fp8mma" for the FP8 tensor-core variant).
``Recorder.hooks`` run on each launch as it is recorded, while the call's temporaries (a converted
q) are alive.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import torch

from kernelgen.front import api, plan
from kernelgen.jit import runtime
from kernelgen.kernels import tma
from kernelgen.kernels.device import Device
from kernelgen.kernels.params import (ATTENTION_PARAMS, ATTENTION_PARAMS_FP8, COMBINE_PARAMS, FUSED_TMA_PARAMS,
                                      FUSED_TMA_PARAMS_FP8, SCHEDULER_PARAMS,
                                      TMA_ATTENTION_PARAMS, attention_params_for, ATTENTION_PARAMS_ALIBI, combine_params_for,
                                      TMA_ATTENTION_PARAMS_ALIBI, ATTENTION_PARAMS_SINKS, ATTENTION_PARAMS_ALIBI_SINKS,
                                      COMBINE_PARAMS_SINKS, TMA_ATTENTION_PARAMS_SINKS,
                                      TMA_ATTENTION_PARAMS_ALIBI_SINKS)
from kernelgen.launch import graph_launch, launch, prepared
from kernelgen.selection import signature, validation as V

PROPS = {"name": "fake H200", "cc": (9, 0), "num_sms": 132, "l2_bytes": 60 * 2 ** 20, "smem_optin": 232448}
FUNC = {"scheduler": 0x1000, "attention": 0x2000, "combine": 0x3000, "fused": 0x4000, "attention_sm90": 0x5000,
        "fused_sm90": 0x6000, "attention_alibi": 0x7000, "attention_sm90_alibi": 0x8000,
        # the sink kernels (AttentionSpec.sinks / CombineSpec.sinks; with ALiBi too)
        "attention_sinks": 0x9000, "attention_sm90_sinks": 0xa000, "combine_sinks": 0xb000,
        "attention_alibi_sinks": 0xc000, "attention_sm90_alibi_sinks": 0xd000,
        # the fused kernels on an FP8 cache (params.fused_params_for: FUSED_TMA_PARAMS_FP8, ATTENTION_PARAMS_FP8 x 2)
        "fused_sm90_fp8": 0xe000, "fused_fp8": 0xf000}
KIND = {v: k for k, v in FUNC.items()}


def _pair_params(st):
    """The sm_80 fused kernel's parameter: two AttnParams ``st`` back to back (long class, short
    class); fields() reads them as {"long": {...}, "short": {...}}."""
    class P:
        size = 2 * st.size
        names = ("long", "short")

        class struct:
            @staticmethod
            def unpack(b):
                n = st.size
                return dict(zip(st.names, st.struct.unpack(b[:n]))), dict(zip(st.names, st.struct.unpack(b[n:])))
    return P


_PairParams = _pair_params(ATTENTION_PARAMS)
_PairParamsFp8 = _pair_params(ATTENTION_PARAMS_FP8)   # (the FP8 form: with the descale fields)


class _FusedTmaParams:
    """The Hopper fused kernel's parameter (``params.FUSED_TMA_PARAMS``): three tensor maps and the
    long class's AttnParams, the short class's AttnParams, short_ctas; fields() reads them as
    {"long": {...}, "short": {...}, "short_ctas": int} (maps() reads the maps)."""

    size = FUSED_TMA_PARAMS.size
    names = ("long", "short", "short_ctas")

    class struct:
        @staticmethod
        def unpack(b):
            return FUSED_TMA_PARAMS.unpack(b)


class _FusedTmaParamsFp8(_FusedTmaParams):
    """``_FusedTmaParams`` of the FP8 form (``params.FUSED_TMA_PARAMS_FP8``: both AttnParams with the
    descale fields)."""

    size = FUSED_TMA_PARAMS_FP8.size

    class struct:
        @staticmethod
        def unpack(b):
            return FUSED_TMA_PARAMS_FP8.unpack(b)


def _tma_wrap(tma_struct, inner):
    """The parameter of a Hopper kernel with the AttnParams ``inner``: maps, then ``inner``."""
    class W:
        size = tma_struct.size
        names = inner.names

        class struct:
            @staticmethod
            def unpack(b):
                o = tma_struct.MAPS_BYTES
                return inner.struct.unpack(b[o:o + inner.size])
    return W


PARAMS = {"attention_sinks": ATTENTION_PARAMS_SINKS, "attention_alibi_sinks": ATTENTION_PARAMS_ALIBI_SINKS,
          "combine_sinks": COMBINE_PARAMS_SINKS,
          "attention_sm90_sinks": _tma_wrap(TMA_ATTENTION_PARAMS_SINKS, ATTENTION_PARAMS_SINKS),
          "attention_sm90_alibi_sinks": _tma_wrap(TMA_ATTENTION_PARAMS_ALIBI_SINKS, ATTENTION_PARAMS_ALIBI_SINKS),
          "scheduler": SCHEDULER_PARAMS, "attention": ATTENTION_PARAMS, "combine": COMBINE_PARAMS,
          "fused": _PairParams, "attention_sm90": _tma_wrap(TMA_ATTENTION_PARAMS, ATTENTION_PARAMS),
          "fused_sm90": _FusedTmaParams, "fused_sm90_fp8": _FusedTmaParamsFp8, "fused_fp8": _PairParamsFp8,
          "attention_alibi": ATTENTION_PARAMS_ALIBI,
          "attention_sm90_alibi": _tma_wrap(TMA_ATTENTION_PARAMS_ALIBI, ATTENTION_PARAMS_ALIBI)}
#: What the stand-in tensor-map encoder writes: (base address, dims, strides in bytes, box), padded
#: (3-D maps; FAKE_MAP4 for the 4-D maps of a paged cache).
FAKE_MAP = struct.Struct("<Q3Q2Q3I")
FAKE_MAP4 = struct.Struct("<Q4Q3Q4I")


def fake_encode(ptr, dims, strides_b, box, what, kind=tma.KIND_16):
    """A stand-in of cuTensorMapEncodeTiled: its arguments packed into the 128 bytes, the element
    kind in the last byte (1: ``tma.KIND_FP8``; ``map_kind``)."""
    fmt = FAKE_MAP4 if len(dims) == 4 else FAKE_MAP
    raw = fmt.pack(ptr, *dims, *strides_b, *box).ljust(tma.MAP_BYTES - 1, b"\0")
    return raw + bytes([kind == tma.KIND_FP8])


def map_kind(raw: bytes) -> str:
    """The element kind of a fake_encode map."""
    return tma.KIND_FP8 if raw[tma.MAP_BYTES - 1] else tma.KIND_16


def decode_map(raw: bytes, rank: int = 3) -> tuple:
    """(ptr, dims, strides_b, box) of a fake_encode map of that rank."""
    fmt = FAKE_MAP4 if rank == 4 else FAKE_MAP
    v = fmt.unpack(raw[:fmt.size])
    return v[0], v[1:1 + rank], v[1 + rank:2 * rank], v[2 * rank:3 * rank]
FUSED_GRID = 2 * 132


def default_short_ctas() -> int:
    """The Hopper fused launch's CTAs that start on the short queue on the fake H200 without
    KERNELGEN_MIXED_SHORT_CTAS (``heuristics.sm90_mixed_short_ctas`` of its 132 SMs; the number is
    pinned by test_fused_hopper_cpu.test_default_short_ctas_is_a_share_of_the_sms)."""
    from kernelgen.selection import heuristics

    return heuristics.sm90_mixed_short_ctas(PROPS["num_sms"])
STREAM = 0x5EED0
ATTN_GRID = 4 * PROPS["num_sms"]


@dataclass
class Launch:
    kind: str
    grid: tuple
    block: tuple
    smem: int
    stream: int
    params: bytes
    extra: object

    def fields(self) -> dict:
        """The parameter struct as a dict of field values."""
        p = PARAMS[self.kind]
        return dict(zip(p.names, p.struct.unpack(self.params)))

    def maps(self, kv_rank: int = 3) -> list:
        """The Hopper kernel's three tensor maps (q, k, v), decoded (``decode_map``; k and v of
        rank ``kv_rank``: 4 for a paged cache); they lead the Hopper fused kernel's parameter too."""
        n = tma.MAP_BYTES
        return [decode_map(self.params[i * n:(i + 1) * n], 3 if i == 0 else kv_rank) for i in range(3)]


class DriverError(RuntimeError):
    """What CuPy's binding raises for a failed CUresult (``status``)."""

    def __init__(self, status):
        self.status = status
        super().__init__(f"CUDA_ERROR_FAKE_{status}: fake driver error")


class Recorder:
    """A cuLaunchKernel stand-in: records every launch; raises DriverError(rc) when ``rc`` is set
    (for every kernel, or for ``fail_kind`` only)."""

    def __init__(self):
        self.launches: list[Launch] = []
        self.rc = 0
        self.fail_kind = None   # with rc: fail only this kernel kind
        self.allocations: list[torch.Tensor] = []   # uint8 workspaces made by prepared calls (kept alive)
        self.device_switches: list = []
        self.capturing = False                       # what prepared.is_capturing returns
        self.graph_launches = 0                      # cuGraphLaunch calls that launched
        self.set_params = 0                          # cuGraphExecKernelNodeSetParams calls
        self.graph_rc = 0                            # returned by cuGraphLaunch (with fail_kind as for rc)
        #: callables run with each Launch as it is recorded (direct and graph launches), while the
        #: call's tensors are alive: a test can read the memory a launch's pointers address
        self.hooks: list = []

    def __call__(self, f, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        self.record(f, (gx, gy, gz), (bx, by, bz), smem, stream, argv, extra)
        if self.rc and self.fail_kind in (None, KIND[f]):
            raise DriverError(self.rc)

    def record(self, f, grid, block, smem, stream, argv, extra) -> None:
        kind = KIND[f]
        param_addr = ctypes.cast(argv, ctypes.POINTER(ctypes.c_void_p))[0]
        self.append(Launch(kind, grid, block, smem, stream, ctypes.string_at(param_addr, PARAMS[kind].size), extra))

    def append(self, x: "Launch") -> None:
        self.launches.append(x)
        for hook in self.hooks:
            hook(x)

    def raw_alloc(self, nbytes, stream) -> int:
        t = torch.empty(nbytes, dtype=torch.uint8)
        self.allocations.append(t)
        return t.data_ptr()

    def kinds(self) -> list:
        return [x.kind for x in self.launches]

    def clear(self) -> None:
        self.launches.clear()
        self.allocations.clear()


def _value(handle):
    """A handle passed as an int or as a ctypes.c_void_p (None for NULL: 0)."""
    return (handle.value or 0) if isinstance(handle, ctypes.c_void_p) else handle


class FakeGraphDriver:
    """``graph_launch.Driver``'s stand-in: graphs are chains of kernel nodes holding copies of
    their parameters (KernelNodeParams and the bytes behind kernel_params); ``cuGraphLaunch``
    records each node as a launch through the recorder.  Handles are small ints; ``live``
    counts executable graphs not destroyed, ``instantiated`` all made."""

    def __init__(self, rec: Recorder):
        self.rec = rec
        self.graphs: dict = {}     # graph handle -> [node handles]
        self.nodes: dict = {}      # node handle -> (func, grid, block, smem, param bytes)
        self.execs: dict = {}      # exec handle -> {node handle: (func, grid, block, smem, param bytes)}
        self.next = 0x100
        self.live = 0
        self.instantiated = 0

    def _handle(self) -> int:
        self.next += 1
        return self.next

    @staticmethod
    def _read(params) -> tuple:
        # byref(KernelNodeParams) or its address
        p = params._obj if hasattr(params, "_obj") else graph_launch.KernelNodeParams.from_address(params)
        kind = KIND[p.func]
        pa = ctypes.cast(p.kernel_params, ctypes.POINTER(ctypes.c_void_p))[0]
        return (p.func, (p.grid_x, p.grid_y, p.grid_z), (p.block_x, p.block_y, p.block_z), p.shared_mem_bytes,
                ctypes.string_at(pa, PARAMS[kind].size))

    def cuGraphCreate(self, out, flags):
        h = self._handle()
        self.graphs[h] = []
        out._obj.value = h
        return 0

    def cuGraphAddKernelNode_v2(self, out, graph, deps, ndeps, params_addr):
        nodes = self.graphs[graph]
        assert ndeps == (1 if nodes else 0) and (not nodes or deps[0] == nodes[-1])   # a chain
        h = self._handle()
        self.nodes[h] = self._read(params_addr)
        nodes.append(h)
        out._obj.value = h
        return 0

    def cuGraphInstantiateWithFlags(self, out, graph, flags):
        h = self._handle()
        self.execs[h] = {n: self.nodes[n] for n in self.graphs[graph]}
        self.live += 1
        self.instantiated += 1
        out._obj.value = h
        return 0

    def cuGraphExecKernelNodeSetParams_v2(self, exe, node, params_addr):
        exe, node = _value(exe), _value(node)
        assert node in self.execs[exe]
        self.rec.set_params += 1
        self.execs[exe][node] = self._read(params_addr)
        return 0

    def cuGraphLaunch(self, exe, stream):
        exe, stream = _value(exe), _value(stream)
        rec = self.rec
        nodes = list(self.execs[exe].values())
        if rec.graph_rc and (rec.fail_kind is None or any(KIND[n[0]] == rec.fail_kind for n in nodes)):
            return rec.graph_rc
        rec.graph_launches += 1
        for func, grid, block, smem, params in nodes:
            rec.append(Launch(KIND[func], grid, block, smem, stream, params, 0))
        return 0

    def cuGraphExecDestroy(self, exe):
        del self.execs[exe]
        self.live -= 1
        return 0

    def cuGraphDestroy(self, graph):
        del self.graphs[graph]
        return 0


def _kind_func(kind: str, spec, base: int, marker: str) -> int:
    """The function id of a kernel kind registered on first use (FUNC / KIND / PARAMS): ids from
    ``base`` on, one 0x100 step per kind containing ``marker``; the parameter struct is the spec's
    (``attention_params_for``), seen past the maps on the Hopper kernel."""
    if kind not in FUNC:
        func = base + 0x100 * len([k for k in FUNC if marker in k])
        FUNC[kind] = func
        KIND[func] = kind
        st = attention_params_for(spec)
        PARAMS[kind] = _tma_wrap(st, st.inner) if spec.mainloop == "sm90a" else st
    return FUNC[kind]


def _variant_func(spec) -> int:
    """A user variant kernel's function id (``params.user_params``: the base AttnParams, then
    user0..user{n-1}): kinds ``attention[_sm90]_variant{n}[_alibi][_sinks]``."""
    kind = ("attention" + ("_sm90" if spec.mainloop == "sm90a" else "") + f"_variant{len(spec.variant.tensors)}"
            + ("_alibi" if spec.alibi else "") + ("_sinks" if spec.sinks else ""))
    return _kind_func(kind, spec, 0x10000, "_variant")


def _fp8_func(spec) -> int:
    """An FP8 K/V kernel's function id (``params.fp8_params``): kinds
    ``attention_fp8[_variant{n}][_alibi][_sinks]`` (sm_80 mainloop) and ``attention_sm90_fp8[_sinks]``
    (the Hopper kernel: maps + AttnParams), ``attention_sm90_fp8mma[_sinks]`` for its FP8
    tensor-core variant (``AttentionSpec.fp8_mma``: an FP8 q read as it is)."""
    kind = ("attention" + ("_sm90" if spec.mainloop == "sm90a" else "") + "_fp8" + ("mma" if spec.fp8_mma else "")
            + ("" if spec.variant is None else f"_variant{len(spec.variant.tensors)}")
            + ("_alibi" if spec.alibi else "") + ("_sinks" if spec.sinks else ""))
    return _kind_func(kind, spec, 0x40000, "_fp8")


def no_host_sync():
    """A MonkeyPatch in which reading a tensor's values on the host raises (``undo()`` ends it):
    the prepared and captured steps must not sync."""
    import pytest

    def boom(*a, **kw):
        raise AssertionError("host sync")
    m = pytest.MonkeyPatch()
    for name in ("item", "tolist", "__bool__", "cpu"):
        m.setattr(torch.Tensor, name, boom)
    return m


def _fake_load(spec, device):
    if spec.kind == "attention" and spec.kv_dtype:
        sm90 = spec.mainloop == "sm90a"
        return runtime.Kernel(spec=spec, device=device, func_ptr=_fp8_func(spec), num_threads=spec.num_threads,
                              smem_bytes=spec.smem_bytes(), persistent_grid=PROPS["num_sms"] if sm90 else ATTN_GRID,
                              params=attention_params_for(spec))
    if spec.kind == "attention" and spec.variant is not None:
        sm90 = spec.mainloop == "sm90a"
        return runtime.Kernel(spec=spec, device=device, func_ptr=_variant_func(spec), num_threads=spec.num_threads,
                              smem_bytes=spec.smem_bytes(), persistent_grid=PROPS["num_sms"] if sm90 else ATTN_GRID,
                              params=attention_params_for(spec))
    if spec.kind == "fused" and spec.hopper:   # one CTA per SM (384 threads, the whole register file)
        fp8 = bool(spec.long.kv_dtype)
        return runtime.Kernel(spec=spec, device=device, func_ptr=FUNC["fused_sm90_fp8" if fp8 else "fused_sm90"],
                              num_threads=spec.num_threads, smem_bytes=spec.smem_bytes(),
                              persistent_grid=PROPS["num_sms"], params=FUSED_TMA_PARAMS_FP8 if fp8 else FUSED_TMA_PARAMS)
    if spec.kind == "fused" and spec.long.kv_dtype:   # the sm_80 fused kernel on an FP8 cache
        return runtime.Kernel(spec=spec, device=device, func_ptr=FUNC["fused_fp8"], num_threads=spec.num_threads,
                              smem_bytes=spec.smem_bytes(), persistent_grid=FUSED_GRID, params=ATTENTION_PARAMS_FP8)
    if spec.kind == "attention" and spec.mainloop == "sm90a":
        func = FUNC["attention_sm90" + ("_alibi" if spec.alibi else "") + ("_sinks" if spec.sinks else "")]
        return runtime.Kernel(spec=spec, device=device, func_ptr=func, num_threads=spec.num_threads,
                              smem_bytes=spec.smem_bytes(), persistent_grid=PROPS["num_sms"],
                              params=attention_params_for(spec))
    if spec.kind == "attention":
        threads, smem, grid = spec.num_threads, spec.smem_bytes(), ATTN_GRID
    elif spec.kind == "fused":
        threads, smem, grid = spec.num_threads, spec.smem_bytes(), FUSED_GRID
    else:
        threads, smem, grid = spec.num_threads, 0, PROPS["num_sms"]
    func = FUNC[spec.kind + ("_alibi" if getattr(spec, "alibi", False) else "")
                + ("_sinks" if getattr(spec, "sinks", False) else "")]
    return runtime.Kernel(spec=spec, device=device, func_ptr=func, num_threads=threads, smem_bytes=smem,
                          persistent_grid=grid, params=attention_params_for(spec) if spec.kind == "attention"
                          else combine_params_for(spec) if spec.kind == "combine"
                          else PARAMS[spec.kind] if spec.kind != "fused" else ATTENTION_PARAMS)


class _RecordingTorch:
    """``torch`` for kernelgen.launch.prepared: uint8 allocations (workspaces) are kept by the recorder."""

    def __init__(self, rec):
        self._rec = rec

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *args, **kwargs):
        t = torch.empty(*args, **kwargs)
        if t.dtype == torch.uint8:
            self._rec.allocations.append(t)
        return t


def install(monkeypatch) -> Recorder:
    rec = Recorder()
    # the Hopper fused launch's default split of the SMs (default_short_ctas)
    monkeypatch.delenv("KERNELGEN_MIXED_SHORT_CTAS", raising=False)
    monkeypatch.setattr(V.varlen_inputs, "__defaults__", (("cpu",),))
    monkeypatch.setitem(runtime._devices, None, Device(**PROPS))
    monkeypatch.setattr(runtime, "_loaded", {})
    monkeypatch.setattr(runtime, "_load", _fake_load)
    monkeypatch.setattr(api, "_CALLS", signature.SignatureCache())
    monkeypatch.setattr(prepared, "current_device", lambda: None)
    monkeypatch.setattr(prepared, "current_stream", lambda device: STREAM)
    monkeypatch.setattr(prepared, "torch", _RecordingTorch(rec))
    monkeypatch.setattr(launch, "_driver_launch", rec)
    rec.graph_driver = FakeGraphDriver(rec)
    monkeypatch.setattr(graph_launch, "_driver", rec.graph_driver)
    monkeypatch.setattr(prepared, "is_capturing", lambda: rec.capturing)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: rec.capturing)
    monkeypatch.setattr(prepared, "raw_alloc", rec.raw_alloc)
    monkeypatch.setattr(prepared, "raw_delete", lambda address: None)
    monkeypatch.setattr(tma, "_encoder", fake_encode)

    class _Device:                      # torch.cuda.device: records the switch, switches nothing
        def __init__(self, device):
            rec.device_switches.append(device)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "device", _Device)
    return rec


def make_plan(monkeypatch, **kw):
    """An AttentionPlan on the CPU (its torch.device is the CPU; needs ``install`` first)."""

    class _CpuTorch:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def device(*args, **kwargs):
            return torch.device("cpu")

    with monkeypatch.context() as m:
        m.setattr(plan, "torch", _CpuTorch())
        m.setattr(plan, "_device_index", lambda device: None)
        p = plan.AttentionPlan(**kw)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    return p


# ------------------------------------------------------------ shared by the variant dispatcher tests
def small_batch(total_k: int = 2000, num_heads_q: int = 4):
    """(q, k, v, cu_seqlens_q, cu_seqlens_k) of two bf16 requests (3 and 7 queries; 2 KV heads, d
    64) whose keys split total_k as total_k - 12 and 12: a CPU batch for the dispatcher tests."""
    torch.manual_seed(0)
    q = torch.randn(10, num_heads_q, 64).to(torch.bfloat16)
    k = torch.randn(total_k, 2, 64).to(torch.bfloat16)
    return q, k, torch.randn_like(k), torch.tensor([0, 3, 10], dtype=torch.int32), \
        torch.tensor([0, total_k - 12, total_k], dtype=torch.int32)


def attention_fields(rec) -> list:
    """The AttnParams fields of every attention launch ``rec`` recorded."""
    return [x.fields() for x in rec.launches if x.kind.startswith("attention")]


def single_class_cases(suffix: str, combine: str = "combine") -> dict:
    """{case: (varlen_attention keywords, the launch kinds expected)} for one class of a variant's
    kernels (kinds ``attention<suffix>`` / ``attention_sm90<suffix>``): sm_80 and sm_90a, without
    and with 3 forced splits (then the ``combine`` kernel)."""
    return {
        "sm80": (dict(arch="sm_80", num_splits=1), ["scheduler", f"attention{suffix}"]),
        "hopper": (dict(arch="sm_90a", num_splits=1), ["scheduler", f"attention_sm90{suffix}"]),
        "split": (dict(arch="sm_80", num_splits=3), ["scheduler", f"attention{suffix}", combine]),
        "split_hopper": (dict(arch="sm_90a", num_splits=3), ["scheduler", f"attention_sm90{suffix}", combine]),
    }
