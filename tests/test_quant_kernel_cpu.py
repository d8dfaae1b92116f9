"""The q quantisation kernel (``spec.QuantSpec``, templates/quant/quant_q.cu.j2) on the CPU: the
spec's checks and JSON form, its source compiled by NVRTC for every target that has FP8
conversions (0 spills, few registers), the parameter struct the launch packs, the loader
(``runtime.quant_kernel``), and the launch path of ``quant_q.quantize`` with the driver stubbed: two launches (the amax phase, then the cast)
on the current stream with q, cu_seqlens_q, a zeroed amax word array, q8 and the descales at
their places in the buffer.  The kernel's results are compared with ``quantize_reference`` bit for
bit on the GPU (tests/gpu/test_quant_q_gpu.py)."""
import ctypes
import re

import pytest
import torch

from kernelgen.jit import compiler, render, runtime
from kernelgen.kernels.params import QUANT_PARAMS
from kernelgen.kernels.spec import FP8_CVT_ARCHS, QuantSpec, spec_from_json
from kernelgen.launch import launch, prepared, quant_q
from kernelgen.selection import catalog

BF16, FP16 = torch.bfloat16, torch.float16


def test_spec_checks_and_json():
    s = QuantSpec("sm_90a", "bf16")
    assert s.name == "quantq_sm_90a_bf16" and s.kind == "quant" and s.entry == "kg_quant_q"
    assert spec_from_json(s.to_json()) == s
    for bad in ("sm_80", "sm_86"):   # no fp32 -> e4m3 conversion before sm_89
        with pytest.raises(ValueError, match=r"^arch must be one of .*got 'sm_8[06]'"):
            QuantSpec(bad, "bf16")
    with pytest.raises(ValueError, match=r"^dtype must be one of"):
        QuantSpec("sm_90a", "e4m3")


@pytest.mark.parametrize("arch", FP8_CVT_ARCHS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_compiles_without_spills(arch, dtype):
    spec = QuantSpec(arch, dtype)
    src = render.render(spec)
    assert QUANT_PARAMS.c_decl() in src and "cvt.rn.satfinite.e4m3x2.f32" in src
    res = compiler.compile_cubin(src, arch, compiler.default_options(arch), spec.name).resources
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0 and res["stack_frame"] == 0
    # 256 threads: at most 64 registers keeps four CTAs (1024 threads) an SM for the loads in flight
    assert 0 < res["registers"] <= 64
    assert res["shared_static"] == 12 * spec.rows_per_cta      # per row: amax word, request, factor


def test_template_constants_follow_the_spec():
    src = render.render(QuantSpec("sm_90a", "fp16"))
    assert re.search(r"constexpr int THREADS = 256;", src) and re.search(r"constexpr int ROWS = 64;", src)
    assert "K_LO = -24, K_HI = 15" in src                       # quantize_reference's fp16 range
    assert "K_LO = -126, K_HI = 126" in render.render(QuantSpec("sm_90a", "bf16"))


def test_param_struct_layout():
    assert QUANT_PARAMS.pointer_names == ("q", "cu_seqlens_q", "amax", "q8", "descale")
    assert QUANT_PARAMS.offset("q_row_stride") == 40 and QUANT_PARAMS.offset("total_q") == 48
    assert QUANT_PARAMS.offset("phase") == 64 and QUANT_PARAMS.size == 72


def test_warmup_builds_it_with_the_fp8_tensor_core_variant():
    specs = catalog.warmup_specs("sm_90a", head_dims=(128,), dtypes=("bf16",), kv_dtypes=("e4m3",), sinks=True)
    assert QuantSpec("sm_90a", "bf16") in specs
    assert not [s for s in catalog.warmup_specs("sm_90a", head_dims=(128,), dtypes=("bf16",), kv_dtypes=("e5m2",))
                if s.kind == "quant"]
    assert not [s for s in catalog.warmup_specs("sm_80", head_dims=(128,), dtypes=("bf16",), kv_dtypes=("e4m3",))
                if s.kind == "quant"]


def test_without_a_kernel_the_torch_ops_run():
    g = torch.Generator().manual_seed(3)
    q = (5 * torch.randn(50, 8, 64, generator=g)).to(BF16)
    cu = torch.tensor([0, 7, 7, 50], dtype=torch.int32)
    a8, ad = quant_q.quantize(q, cu, 3, 2)
    b8, bd = quant_q.quantize_reference(q, cu, 3, 2)
    assert torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)) and torch.equal(ad, bd)


class _Stub:
    """A loaded kernel of ``spec`` and launch_kernel / current_stream stand-ins: each launch's grid,
    stream and decoded fields, and the amax words as they are when the launch is made."""

    def __init__(self, monkeypatch, dtype="bf16"):
        self.launches = []
        self.kernel = runtime.Kernel(spec=QuantSpec("sm_90a", dtype), device=0, func_ptr=0x77, num_threads=256,
                                     smem_bytes=0, persistent_grid=132 * 6, params=QUANT_PARAMS)
        monkeypatch.setattr(launch, "launch_kernel", self.launch_kernel)
        monkeypatch.setattr(prepared, "current_stream", lambda index: 0x5eed)
        monkeypatch.setattr(prepared, "current_device", lambda: None)   # (a CPU tensor's device index)

    def launch_kernel(self, kernel, grid, stream, packed):
        assert kernel is self.kernel
        f = dict(zip(QUANT_PARAMS.names, QUANT_PARAMS.struct.unpack(packed)))
        f["amax_words"] = ctypes.string_at(f["amax"], 4 * f["batch"] * f["num_heads_kv"])
        self.launches.append((grid, stream, f))


def test_the_loader_on_devices_without_the_kernel(monkeypatch):
    """``runtime.quant_kernel``: None on the CPU and on a GPU without FP8 conversions (an A100),
    the QuantSpec of q's dtype on an sm_90a device."""
    assert runtime.quant_kernel(torch.device("cpu"), BF16) is None
    loaded = []
    monkeypatch.setattr(runtime, "get_kernel", lambda spec, ordinal: loaded.append((spec, ordinal)) or "k")
    monkeypatch.setattr(runtime, "device_arch", lambda ordinal, allow=False: "sm_80")
    assert runtime.quant_kernel(torch.device("cuda", 1), BF16) is None and loaded == []
    monkeypatch.setattr(runtime, "device_arch", lambda ordinal, allow=False: "sm_90a")
    assert runtime.quant_kernel(torch.device("cuda", 1), FP16) == "k"
    assert loaded == [(QuantSpec("sm_90a", "fp16"), 1)]

    def unknown(ordinal, allow=False):
        raise RuntimeError("no kernels for compute capability 7.0")
    monkeypatch.setattr(runtime, "device_arch", unknown)
    assert runtime.quant_kernel(torch.device("cuda", 0), BF16) is None


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_the_launches(monkeypatch, dtype):
    stub = _Stub(monkeypatch, "bf16" if dtype == BF16 else "fp16")
    total, hq, hkv, d, batch = 130, 8, 2, 96, 3
    wide = torch.zeros(total, 12, d, dtype=dtype)
    q = wide[:, :hq]                                             # rows 12 x 96 apart, heads contiguous: no copy
    cu = torch.tensor([0, 100, 100, 129], dtype=torch.int32)
    off, n = quant_q.buffer_bytes(total, hq, d, batch, hkv)
    buf = torch.empty(n, dtype=torch.uint8)
    q8, qd = quant_q.quantize(q, cu, batch, hkv, buffer=buf, kernel=stub.kernel)
    assert [x[2]["phase"] for x in stub.launches] == [0, 1]
    for grid, stream, f in stub.launches:
        assert grid == 3 * hkv and stream == 0x5eed             # ceil(130 / 64) row blocks x KV heads
        assert f["q"] == q.data_ptr() and f["q_row_stride"] == 12 * d and f["cu_seqlens_q"] == cu.data_ptr()
        assert f["q8"] == buf.data_ptr() == q8.data_ptr() and f["descale"] == buf.data_ptr() + off == qd.data_ptr()
        assert (f["total_q"], f["num_heads_kv"], f["group_elems"], f["batch"]) == (total, hkv, 4 * d, batch)
        assert f["amax_words"] == bytes(4 * batch * hkv)          # zeroed before phase 0 (nothing ran here)
    assert stub.launches[0][2]["amax"] == stub.launches[1][2]["amax"]


def test_a_q_the_kernel_cannot_read_is_copied(monkeypatch):
    stub = _Stub(monkeypatch)
    base = torch.randn(20, 8, 64).to(BF16)
    q = base[:, ::2]                                             # head stride 128: not one run a row
    quant_q.quantize(q, torch.tensor([0, 20], dtype=torch.int32), 1, 2, kernel=stub.kernel)
    f = stub.launches[0][2]
    assert f["q"] != q.data_ptr() and f["q_row_stride"] == 4 * 64 and f["group_elems"] == 2 * 64


def test_no_rows_no_launch(monkeypatch):
    stub = _Stub(monkeypatch)
    q8, qd = quant_q.quantize(torch.empty(0, 4, 64, dtype=BF16), torch.zeros(3, dtype=torch.int32), 2, 2,
                              kernel=stub.kernel)
    assert stub.launches == [] and q8.shape == (0, 4, 64) and torch.equal(qd, torch.ones(2, 2))


def test_a_misaligned_contiguous_q_is_copied(monkeypatch):
    """contiguous() returns a contiguous q at a misaligned address as it is: the kernel's 16-byte
    loads get an aligned copy (review of ee4eb67)."""
    stub = _Stub(monkeypatch)
    flat = torch.randn(20 * 4 * 64 + 8).to(BF16)
    q = flat[1:1 + 20 * 4 * 64].view(20, 4, 64)
    assert q.is_contiguous() and q.data_ptr() % 16 == 2
    quant_q.quantize(q, torch.tensor([0, 20], dtype=torch.int32), 1, 2, kernel=stub.kernel)
    f = stub.launches[0][2]
    assert f["q"] % 16 == 0 and f["q"] != q.data_ptr() and f["q_row_stride"] == 4 * 64


def test_launches_on_q_s_device(monkeypatch):
    """The kernel was loaded in q's device's context and the stream is that device's: with another
    device current the launches run under ``torch.cuda.device(q.device)`` (review of ee4eb67)."""
    stub = _Stub(monkeypatch)
    entered = []

    class _Guard:
        def __init__(self, dev):
            self.dev = dev

        def __enter__(self):
            entered.append(self.dev)

        def __exit__(self, *exc):
            entered.append("exit")
    monkeypatch.setattr(prepared, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "device", _Guard)
    q = torch.randn(10, 4, 64).to(BF16)
    quant_q.quantize(q, torch.tensor([0, 10], dtype=torch.int32), 1, 2, kernel=stub.kernel)
    assert entered == [q.device, "exit"] and len(stub.launches) == 2


def test_the_loader_takes_the_current_device_without_an_index(monkeypatch):
    loaded = []
    monkeypatch.setattr(runtime, "get_kernel", lambda spec, ordinal: loaded.append((spec, ordinal)) or "k")
    monkeypatch.setattr(runtime, "device_arch", lambda ordinal, allow=False: "sm_90a")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert runtime.quant_kernel(torch.device("cuda"), BF16) == "k" and loaded == [(QuantSpec("sm_90a", "bf16"), 2)]
