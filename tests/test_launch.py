"""The launcher (kernelgen/launch.py), parameter templates (params.py) and the workspace layout
(workspace.py), on the CPU: the cuLaunchKernel binding is a stub that reads the parameter struct
behind kernelParams."""
from __future__ import annotations

import ctypes
import threading

import pytest
import torch

from kernelgen import launch, metadata, validation
from kernelgen.params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS, ParamStruct
from kernelgen.workspace import ALIGN, WorkspaceLayout


class DriverError(RuntimeError):
    def __init__(self, status):
        self.status = status
        super().__init__(f"CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered ({status})")


class Driver:
    """Records cuLaunchKernel's arguments and the parameter struct behind kernelParams; raises
    like CuPy's binding when ``rc`` is set."""

    def __init__(self, size, rc=0):
        self.size, self.rc, self.calls = size, rc, []

    def __call__(self, f, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        assert all(isinstance(x, int) for x in (f, gx, gy, gz, bx, by, bz, smem, stream, argv, extra))
        addr = ctypes.cast(argv, ctypes.POINTER(ctypes.c_void_p))[0]
        self.calls.append({"f": f, "grid": (gx, gy, gz), "block": (bx, by, bz), "smem": smem, "stream": stream,
                           "params": ctypes.string_at(addr, self.size), "extra": extra})
        if self.rc:
            raise DriverError(self.rc)


@pytest.fixture
def driver(monkeypatch):
    def install(size, rc=0):
        d = Driver(size, rc)
        monkeypatch.setattr(launch, "_driver_launch", d)
        return d
    return install


def _values(params: ParamStruct, seed: int) -> dict:
    """Distinct field values (pointers > 2^32 so a truncation would show)."""
    out = {}
    for i, (name, ty) in enumerate(params.fields):
        out[name] = {"ptr": (1 << 40) + 4096 * (i + seed), "i64": -(1 << 33) - i * 7 - seed, "i32": 1000 * i + seed,
                     "f32": 0.25 * (i + seed)}[ty]
    return out


@pytest.mark.parametrize("params", [SCHEDULER_PARAMS, ATTENTION_PARAMS, COMBINE_PARAMS], ids=lambda p: p.cname)
def test_template_plus_pointers_is_pack(params):
    """pack_static + pointer_struct.pack_into rebuild exactly pack()'s bytes; pointers lead."""
    vals = _values(params, 3)
    template = params.pack_static(vals)
    assert len(template) == params.size
    assert template[:8 * len(params.pointer_names)] == bytes(8 * len(params.pointer_names))
    buf = bytearray(template)
    params.pointer_struct.pack_into(buf, 0, *[vals[n] for n in params.pointer_names])
    assert bytes(buf) == params.pack(vals)
    assert params.names[:len(params.pointer_names)] == params.pointer_names


def test_pointers_must_lead():
    with pytest.raises(ValueError, match="pointer fields must come first"):
        ParamStruct("Bad", [("n", "i64"), ("p", "ptr")])


@pytest.mark.parametrize("params", [SCHEDULER_PARAMS, ATTENTION_PARAMS, COMBINE_PARAMS], ids=lambda p: p.cname)
def test_prepared_launch_arguments(params, driver):
    d = driver(params.size)
    vals = _values(params, 5)
    pl = launch.PreparedLaunch("kern_x", 0xABC000, grid=528, threads=96, smem=50000, params=params, static=vals)
    ptrs = [vals[n] for n in params.pointer_names]
    pl.launch(0x7777, *ptrs)
    (c,) = d.calls
    assert c["f"] == 0xABC000 and c["grid"] == (528, 1, 1) and c["block"] == (96, 1, 1) and c["smem"] == 50000
    assert c["stream"] == 0x7777 and c["extra"] == 0
    assert c["params"] == params.pack(vals)
    assert pl.packed() == params.pack(vals)
    # the next launch rewrites only the pointers; the static fields stay
    ptrs2 = [p + 16 for p in ptrs]
    pl.launch(0, *ptrs2)
    assert d.calls[1]["params"] == params.pack({**vals, **dict(zip(params.pointer_names, ptrs2))})
    assert d.calls[1]["stream"] == 0                         # the legacy default stream


def test_launch_error_names_the_kernel(driver):
    driver(SCHEDULER_PARAMS.size, rc=700)
    pl = launch.PreparedLaunch("sched_soa_sm90a", 0x10, 1, 32, 0, SCHEDULER_PARAMS,
                               _values(SCHEDULER_PARAMS, 0))
    with pytest.raises(launch.LaunchError, match=r"^cuLaunchKernel failed for kernel sched_soa_sm90a: "
                                                 r"CUDA_ERROR_ILLEGAL_ADDRESS") as ei:
        pl.launch(0, 1, 2, 3, 4)
    assert ei.value.kernel == "sched_soa_sm90a" and ei.value.code == 700
    assert isinstance(ei.value.__cause__, DriverError)
    with pytest.raises(launch.LaunchError, match="kernel k2"):
        launch.launch_packed("k2", 0x10, 1, 32, 0, 0, SCHEDULER_PARAMS.pack(_values(SCHEDULER_PARAMS, 0)))


def test_launch_packed_passes_bytes(driver):
    d = driver(COMBINE_PARAMS.size)
    packed = COMBINE_PARAMS.pack(_values(COMBINE_PARAMS, 9))
    launch.launch_packed("c", 0x20, 7, 128, 64, 0x99, packed)
    assert d.calls == [{"f": 0x20, "grid": (7, 1, 1), "block": (128, 1, 1), "smem": 64, "stream": 0x99,
                        "params": packed, "extra": 0}]


def test_binding_is_cupys_launch_kernel(monkeypatch):
    from cupy.cuda import driver

    monkeypatch.setattr(launch, "_driver_launch", None)
    assert launch.driver_launch() is driver.launchKernel
    assert launch.driver_launch() is launch._driver_launch


def test_threads_pack_into_their_own_buffers(driver):
    """Each thread has its own parameter buffer: packing in one never changes another's."""
    driver(SCHEDULER_PARAMS.size)
    pl = launch.PreparedLaunch("s", 0x10, 1, 32, 0, SCHEDULER_PARAMS, _values(SCHEDULER_PARAMS, 0))
    pl.launch(0, 11, 12, 13, 14)
    mine = pl.packed()
    seen = {}

    def other():
        pl.launch(0, 21, 22, 23, 24)
        seen["other"] = pl.packed()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert pl.packed() == mine
    assert SCHEDULER_PARAMS.pointer_struct.unpack_from(mine) == (11, 12, 13, 14)
    assert SCHEDULER_PARAMS.pointer_struct.unpack_from(seen["other"]) == (21, 22, 23, 24)


def test_workspace_layout_regions():
    lay = WorkspaceLayout(capacity=33, split=True, max_splits=5, num_heads_q=8, rows=33, head_dim_v=128)
    md_bytes = 4 * metadata.buffer_ints(33)
    regions = [(lay.metadata_offset, md_bytes), (lay.out_accum_offset, 4 * 5 * 8 * 33 * 128),
               (lay.lse_accum_offset, 4 * 5 * 8 * 33), (lay.row_splits_offset, 4 * 33)]
    for (a, n), (b, _) in zip(regions, regions[1:]):
        assert a % ALIGN == 0 and a + n <= b                   # aligned, in order, no overlap
    assert regions[-1][0] + regions[-1][1] <= lay.nbytes and lay.nbytes % ALIGN == 0
    assert lay.split_strides() == {"accum_split_stride": 8 * 33 * 128, "accum_head_stride": 33 * 128,
                                   "lse_accum_split_stride": 8 * 33, "lse_accum_head_stride": 33,
                                   "split_request_rows": 0}
    ws = torch.zeros(lay.nbytes, dtype=torch.uint8)
    md, split = lay.views(ws)
    base = ws.data_ptr()
    assert md.dtype == torch.int32 and md.shape == (metadata.buffer_ints(33),) and md.data_ptr() == base
    assert split.out_accum.shape == (5, 8, 33, 128) and split.out_accum.data_ptr() == base + lay.out_accum_offset
    assert split.lse_accum.shape == (5, 8, 33) and split.lse_accum.data_ptr() == base + lay.lse_accum_offset
    assert split.row_splits.dtype == torch.int32 and split.row_splits.data_ptr() == base + lay.row_splits_offset
    assert split.out_accum.stride() == (8 * 33 * 128, 33 * 128, 128, 1)
    plain = WorkspaceLayout(capacity=7, split=False)
    assert plain.nbytes == ALIGN * -(-4 * metadata.buffer_ints(7) // ALIGN)
    assert plain.views(torch.zeros(plain.nbytes, dtype=torch.uint8))[1] is None
    assert set(plain.split_strides().values()) == {0}
    with pytest.raises(ValueError, match="workspace must be a uint8 tensor"):
        lay.views(torch.zeros(lay.nbytes - 1, dtype=torch.uint8))


def test_check_inputs_flag_follows_the_environment(monkeypatch):
    monkeypatch.delenv("KERNELGEN_CHECK_INPUTS", raising=False)
    assert validation.host_checks_enabled() is False
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    assert validation.host_checks_enabled() is True
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "0")
    assert validation.host_checks_enabled() is False


def test_host_overhead_probe_runs():
    """tools/host_overhead_probe.py (CUDA stubbed) runs the overhead entry's decode call through
    both paths and reports a time for each.  (That a cached signature skips validation and the
    variant choice is asserted by counting in tests/test_signature_cache.py, not by timing it.)"""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, str(root / "tools" / "host_overhead_probe.py"), "--calls", "30",
                        "--samples", "3", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["launches"] == 3
    for name in ("varlen_attention", "plan_run", "cpu_torch_empty", "first_call_of_signature"):
        assert 0 < res[f"{name}_us_min"] <= res[f"{name}_us"], name
