"""CPU: the torch.ops.kernelgen custom ops (registration, fake shapes, torch.compile tracing with a
CPU stand-in for the kernels), the FlashAttention-3 compat mapping, and the docs build."""
import functools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelgen
import kernelgen.front.api
from kernelgen.apps import reference
from kernelgen.front import compat, ops
from kernelgen.selection import validation as V

REPO = Path(__file__).resolve().parents[1]
BF16, FP16 = torch.bfloat16, torch.float16
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _out_dtype(q, out_dtype=None):
    """The output dtype kernelgen gives q (an FP8 q: out_dtype, else bfloat16)."""
    return (out_dtype or BF16) if q.dtype == E4M3 else q.dtype


# ----------------------------------------------------------------------------- stand-ins for the GPU
def reference_api(q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, *, seqused_k=None,
                  page_table=None, causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None, num_splits=0,
                  pack_gqa=None, return_lse=False, out=None, metadata_layout="soa", sort=True, head_swizzle=True,
                  sinks=None, alibi_slopes=None, k_descale=None, v_descale=None, q_descale=None, out_dtype=None,
                  quantize_q=False, max_num_splits=0):
    """kernelgen.front.api.varlen_attention computed on the CPU with the float64 reference (an FP8 q
    dequantised with q_descale; the output in out_dtype, bfloat16 by default, for it).  ``quantize_q``
    is taken and ignored: the stand-in keeps q exact, as a call the FP8 tensor-core variant does
    not take does; so is ``max_num_splits`` (the split count changes no result)."""
    if page_table is not None:
        k, v, cu_seqlens_k = reference.gather_paged(k, v, page_table, seqused_k)
        seqused_k = None
    # (q, k and v in their own dtypes: the reference reads descales only beside FP8 tensors, as kernelgen)
    o, lse = reference.attention_reference(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                           causal=causal, softmax_scale=softmax_scale, window_size=window_size,
                                           softcap=softcap, seqused_k=seqused_k, sinks=sinks,
                                           alibi_slopes=alibi_slopes, k_descale=k_descale, v_descale=v_descale,
                                           q_descale=q_descale)
    o = o.nan_to_num().to(out.dtype if out is not None else _out_dtype(q, out_dtype))
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse.float()) if return_lse else o


class Recorder:
    """Stands in for kernelgen.front.api.varlen_attention: records its arguments, returns tensors of the
    right shapes (lse[h, t] = 1000 h + t so reshapes can be checked)."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, **kw):
        self.calls.append(dict(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                               max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, **kw))
        total_q, hq = q.shape[:2]
        out = kw.get("out")
        if out is None:
            out = torch.zeros(total_q, hq, v.shape[-1], dtype=_out_dtype(q, kw.get("out_dtype")))
        lse = (torch.arange(hq).view(hq, 1) * 1000 + torch.arange(total_q).view(1, total_q)).float()
        return (out, lse) if kw.get("return_lse") else out

    @property
    def last(self):
        return self.calls[-1]


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", rec)
    return rec


@pytest.fixture
def cpu_kernels(monkeypatch):
    monkeypatch.setattr(kernelgen.front.api, "varlen_attention", reference_api)


def _maker(device, dtype, seed):
    """Random CPU tensors, or uninitialised ones elsewhere (meta, or fake CUDA under FakeTensorMode)."""
    if device == "cpu":
        g = torch.Generator().manual_seed(seed)
        return lambda *s: torch.randn(*s, generator=g).to(dtype)
    return lambda *s: torch.empty(*s, dtype=dtype, device=device)


def _ints(values, device):
    t = torch.empty(len(values), dtype=torch.int32, device=device)
    return t.copy_(torch.tensor(values, dtype=torch.int32)) if device == "cpu" else t


def packed(total_q=20, total_k=20, hq=4, hkv=2, d=64, dv=64, dtype=BF16, device="cpu", lens=(7, 13)):
    mk = _maker(device, dtype, 0)
    q, k, v = mk(total_q, hq, d), mk(total_k, hkv, d), mk(total_k, hkv, dv)
    return q, k, v, _ints([0, lens[0], lens[0] + lens[1]], device)


def paged(batch=3, num_pages=10, page_size=16, hq=4, hkv=2, d=64, dv=64, dtype=BF16, device="cpu", seqlen_q=1):
    mk = _maker(device, dtype, 1)
    q = mk(batch * seqlen_q, hq, d)
    kc, vc = mk(num_pages, page_size, hkv, d), mk(num_pages, page_size, hkv, dv)
    pt = _ints([i % num_pages for i in range(batch * 3)], device).view(batch, 3)
    used = _ints([5, 33, 48][:batch], device)
    cu = _ints([i * seqlen_q for i in range(batch + 1)], device)
    return q, kc, vc, pt, used, cu


# ----------------------------------------------------------------------------- registration
def test_ops_registered():
    assert hasattr(torch.ops.kernelgen, "varlen_attention")
    assert hasattr(torch.ops.kernelgen, "varlen_attention_out")
    schema = str(torch.ops.kernelgen.varlen_attention_out.default._schema)
    assert "Tensor(a0!) out" in schema, schema  # declared as mutated
    schema = str(torch.ops.kernelgen.varlen_attention.default._schema)
    assert "Tensor? page_table" in schema and "SymInt window_left" in schema and "-> (Tensor, Tensor)" in schema


def test_import_kernelgen_is_lazy_and_registers_on_access():
    code = ("import sys, kernelgen; assert 'torch' not in sys.modules, 'import kernelgen imported torch'; "
            "kernelgen.compat; import torch; torch.ops.kernelgen.varlen_attention; "
            "torch.ops.kernelgen.varlen_attention_out; assert kernelgen.ops.varlen_attention; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ----------------------------------------------------------------------------- fake implementations
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("dv", [64, 128])
@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("layout", ["packed", "paged"])
def test_fake_shapes_fake_tensor_mode(dtype, dv, return_lse, layout):
    with FakeTensorMode():
        if layout == "packed":
            q, k, v, cu = packed(total_q=37, total_k=50, hq=8, hkv=2, d=128, dv=dv, dtype=dtype, device="cuda")
            kw = dict(cu_seqlens_k=cu)
        else:
            q, k, v, pt, used, cu = paged(hq=8, hkv=2, d=128, dv=dv, dtype=dtype, device="cuda", seqlen_q=5)
            kw = dict(page_table=pt, seqused_k=used)
        o, lse = torch.ops.kernelgen.varlen_attention(q, k, v, cu, return_lse=return_lse, causal=True, **kw)
        assert o.shape == (q.shape[0], 8, dv) and o.dtype == dtype and o.device.type == "cuda"
        assert lse.dtype == torch.float32 and lse.device.type == "cuda"
        assert lse.shape == ((8, q.shape[0]) if return_lse else (0,))
        out = torch.empty(q.shape[0], 8, dv, dtype=dtype, device="cuda")
        lse2 = torch.ops.kernelgen.varlen_attention_out(out, q, k, v, cu, return_lse=return_lse, **kw)
        assert lse2.shape == lse.shape and lse2.dtype == torch.float32
        # the Python entry point routes fake tensors through the op
        res = ops.varlen_attention(q, k, v, cu, return_lse=True, **kw)
        assert res[0].shape == o.shape and res[1].shape == (8, q.shape[0])
        res = ops.varlen_attention(q, k, v, cu, out=out, **kw)
        assert res is out


@pytest.mark.parametrize("layout", ["packed", "paged"])
def test_fake_shapes_meta(layout):
    if layout == "packed":
        q, k, v, cu = packed(hq=6, hkv=3, d=96, dv=64, dtype=FP16, device="meta")
        o, lse = ops.varlen_attention(q, k, v, cu, cu, return_lse=True)
    else:
        q, k, v, pt, used, cu = paged(hq=6, hkv=3, d=96, dv=64, dtype=FP16, device="meta")
        o, lse = ops.varlen_attention(q, k, v, cu, page_table=pt, seqused_k=used, return_lse=True)
    assert o.device.type == "meta" and o.shape == (q.shape[0], 6, 64) and o.dtype == FP16
    assert lse.shape == (6, q.shape[0]) and lse.dtype == torch.float32


@pytest.mark.parametrize("case,exc,name", [
    ("q2d", ValueError, "q"), ("fp32", TypeError, "q"), ("paged_no_used", ValueError, "seqused_k"),
    ("packed_no_cuk", ValueError, "cu_seqlens_k"), ("k_dtype", TypeError, "k"), ("out_shape", ValueError, "out"),
    ("layout", ValueError, "metadata_layout"), ("window", ValueError, "window_size"), ("softcap", ValueError, "softcap"),
    ("splits", ValueError, "num_splits"), ("head_dim", ValueError, "head_dim"), ("heads", ValueError, "num_heads"),
    ("max_q", ValueError, "max_seqlen_q"), ("max_k", ValueError, "max_seqlen_k"),
])
def test_fake_errors_name_the_argument(case, exc, name):
    with FakeTensorMode():
        q, k, v, cu = packed(device="cuda")
        args, kw = [q, k, v, cu], dict(cu_seqlens_k=cu)
        op = torch.ops.kernelgen.varlen_attention
        if case == "q2d":
            args[0] = torch.empty(20, 64, dtype=BF16, device="cuda")
        elif case == "fp32":
            args[0] = q.float()
        elif case == "paged_no_used":
            args[1] = args[2] = torch.empty(4, 16, 2, 64, dtype=BF16, device="cuda")
            kw = dict(page_table=torch.zeros(2, 2, dtype=torch.int32, device="cuda"))
        elif case == "packed_no_cuk":
            kw = {}
        elif case == "k_dtype":
            args[1] = k.half()
        elif case == "out_shape":
            op = torch.ops.kernelgen.varlen_attention_out
            args = [torch.empty(3, 4, 64, dtype=BF16, device="cuda")] + args
        elif case == "layout":
            kw["metadata_layout"] = "csr"
        elif case == "window":
            kw["window_left"] = -5
        elif case == "softcap":
            kw["softcap"] = -1.0
        elif case == "splits":
            kw["num_splits"] = 1000
        elif case == "head_dim":
            args[0] = torch.empty(20, 4, 80, dtype=BF16, device="cuda")
            args[1] = torch.empty(20, 2, 80, dtype=BF16, device="cuda")
        elif case == "heads":
            args[1] = args[2] = torch.empty(20, 3, 64, dtype=BF16, device="cuda")
        elif case == "max_q":   # (the eager call's ValueError; the traced op accepted it: a new user's find)
            kw["max_seqlen_q"] = -5
        elif case == "max_k":
            kw["max_seqlen_k"] = -1
        with pytest.raises(exc, match=name):
            op(*args, **kw)


def test_window_size_must_be_a_pair_on_the_op_path():
    q, k, v, cu = packed(device="meta")
    with pytest.raises(TypeError, match="window_size"):
        ops.varlen_attention(q, k, v, cu, cu, window_size=(1, 2, 3))


@pytest.mark.parametrize("name,value,exc", [
    ("softcap", "x", TypeError), ("softcap", None, TypeError), ("softcap", [1.0], TypeError),
    ("softcap", True, TypeError), ("softcap", float("nan"), ValueError), ("softcap", float("inf"), ValueError),
    ("softcap", -1.0, ValueError),
    ("num_splits", "3", TypeError), ("num_splits", None, TypeError), ("num_splits", [2], TypeError),
    ("num_splits", True, TypeError), ("num_splits", float("nan"), TypeError), ("num_splits", 2.5, TypeError),
    ("num_splits", 129, ValueError), ("num_splits", -1, ValueError),
    ("softmax_scale", "x", TypeError), ("softmax_scale", True, TypeError), ("softmax_scale", float("nan"), ValueError),
])
def test_op_path_validates_scalars_before_converting(name, value, exc):
    """float()/int() ran before the checks: "x" gave float()'s own error, True became 1.0."""
    q, k, v, cu = packed(device="meta")
    with pytest.raises(exc, match=rf"^{name} must") as ei:
        ops.varlen_attention(q, k, v, cu, cu, **{name: value})
    assert type(ei.value) is exc


def test_op_path_converts_numpy_scalars(recorder):
    """numpy scalars (accepted by kernelgen.varlen_attention) reach the op as Python numbers."""
    q, k, v, cu = packed()
    q.requires_grad_(True)  # autograd records: the call goes through torch.ops.kernelgen
    assert ops._through_op(q, k, v)
    ops.varlen_attention(q, k, v, cu, cu, softcap=np.float32(2.5), num_splits=np.int64(3),
                         softmax_scale=np.float64(0.25), window_size=(np.int32(4), 0))
    c = recorder.last
    assert c["softcap"] == 2.5 and type(c["softcap"]) is float
    assert c["num_splits"] == 3 and type(c["num_splits"]) is int
    assert c["softmax_scale"] == 0.25 and type(c["softmax_scale"]) is float
    assert c["window_size"] == (4, 0)


@pytest.mark.parametrize("layout", ["packed", "paged"])
def test_zero_kv_heads_is_a_value_error_not_a_division(layout):
    """The fake kernels took q heads modulo the KV heads: ZeroDivisionError for zero KV heads."""
    msg = r"q num_heads \(4\) must be a positive multiple of k num_heads \(0\)"
    with FakeTensorMode():
        q, k, v, cu = packed(device="cuda")
        if layout == "packed":
            k0 = torch.empty(20, 0, 64, dtype=BF16, device="cuda")
            kw = dict(cu_seqlens_k=cu)
        else:
            k0 = torch.empty(4, 16, 0, 64, dtype=BF16, device="cuda")
            kw = dict(page_table=torch.zeros(2, 2, dtype=torch.int32, device="cuda"),
                      seqused_k=torch.zeros(2, dtype=torch.int32, device="cuda"))
        with pytest.raises(ValueError, match=msg):
            torch.ops.kernelgen.varlen_attention(q, k0, k0, cu, **kw)
        with pytest.raises(ValueError, match=msg):
            torch.ops.kernelgen.varlen_attention_out(torch.empty(20, 4, 64, dtype=BF16, device="cuda"), q, k0, k0,
                                                     cu, **kw)
    q, _, _, cu = packed(device="meta")
    k0 = torch.empty(20, 0, 64, dtype=BF16, device="meta")
    with pytest.raises(ValueError, match=msg):
        ops.varlen_attention(q, k0, k0, cu, cu)


# ----------------------------------------------------------------------------- FP8 q: schema and fake implementations
_OP_ARGS = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "seqused_k", "page_table",
            "causal", "window_left", "window_right", "softcap", "softmax_scale", "num_splits", "pack_gqa",
            "return_lse", "metadata_layout", "sort", "head_swizzle", "sinks", "alibi_slopes", "k_descale",
            "v_descale", "q_descale", "out_dtype", "quantize_q", "max_num_splits"]


def test_op_schemas_append_q_descale_and_out_dtype():
    """The earlier arguments keep their order (positional calls stay valid); q_descale (Tensor?) and
    out_dtype (ScalarType?, from the Optional[torch.dtype] annotation) come after them, default
    None, then quantize_q (bool, default False) and max_num_splits (int, default 0) last."""
    for op, lead in ((torch.ops.kernelgen.varlen_attention, []), (torch.ops.kernelgen.varlen_attention_out, ["out"])):
        schema = op.default._schema
        assert [a.name for a in schema.arguments] == lead + _OP_ARGS
        assert ("Tensor? q_descale=None, ScalarType? out_dtype=None, bool quantize_q=False, SymInt max_num_splits=0)"
                in str(schema)), str(schema)
    import inspect

    p = list(inspect.signature(ops.varlen_attention).parameters)
    assert p[-6:] == ["k_descale", "v_descale", "q_descale", "out_dtype", "quantize_q", "max_num_splits"]
    assert [x for x in p if x not in ("window_size", "out")] == _OP_ARGS[:10] + _OP_ARGS[12:]


def _fp8_fake_inputs(layout, kv=E4M3, total_q=37):
    """(q, k, v, cu_seqlens_q, keywords) of an e4m3 q and an FP8 cache, fake CUDA tensors (under
    FakeTensorMode): packed or paged, 8 x 2 heads, d 128; batch 2 (paged: 3)."""
    q = torch.empty(total_q, 8, 128, dtype=E4M3, device="cuda")
    if layout == "packed":
        k = torch.empty(50, 2, 128, dtype=kv, device="cuda")
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        return q, k, torch.empty_like(k), cu, dict(cu_seqlens_k=cu)
    k = torch.empty(10, 16, 2, 128, dtype=kv, device="cuda")
    cu = torch.empty(4, dtype=torch.int32, device="cuda")
    return q, k, torch.empty_like(k), cu, dict(page_table=torch.empty(3, 3, dtype=torch.int32, device="cuda"),
                                               seqused_k=torch.empty(3, dtype=torch.int32, device="cuda"))


@pytest.mark.parametrize("out_dtype", [None, BF16, FP16])
@pytest.mark.parametrize("kv", [E4M3, E5M2])
@pytest.mark.parametrize("layout", ["packed", "paged"])
def test_fake_output_of_an_fp8_q_has_the_output_dtype(out_dtype, kv, layout):
    """The fake kernels' out is in out_dtype (bfloat16 by default, FA3's), not in q's FP8 dtype; the
    _out variant checks out against it; the Python entry point routes fake tensors through the ops."""
    want = out_dtype or BF16
    with FakeTensorMode():
        q, k, v, cu, kw = _fp8_fake_inputs(layout, kv)
        qd = torch.empty(cu.shape[0] - 1, 1, device="cuda")   # (batch 2 packed, 3 paged: checked while tracing)
        for return_lse in (False, True):
            o, lse = torch.ops.kernelgen.varlen_attention(q, k, v, cu, q_descale=qd, out_dtype=out_dtype,
                                                          return_lse=return_lse, causal=True, **kw)
            assert o.dtype == want and o.shape == (37, 8, 128) and o.device.type == "cuda"
            assert lse.dtype == torch.float32 and lse.shape == ((8, 37) if return_lse else (0,))
        out = torch.empty(37, 8, 128, dtype=want, device="cuda")
        lse = torch.ops.kernelgen.varlen_attention_out(out, q, k, v, cu, q_descale=qd, out_dtype=out_dtype, **kw)
        assert lse.shape == (0,)
        o = ops.varlen_attention(q, k, v, cu, q_descale=qd, out_dtype=out_dtype, **kw)
        assert o.dtype == want and o.shape == (37, 8, 128)
        assert ops.varlen_attention(q, k, v, cu, out=out, q_descale=qd, **kw) is out    # out's dtype, any of the two


def test_fake_output_of_a_16_bit_q_keeps_qs_dtype_with_out_dtype():
    with FakeTensorMode():
        q, k, v, cu = packed(device="cuda", dtype=FP16)
        o, _ = torch.ops.kernelgen.varlen_attention(q, k.to(E4M3), v.to(E4M3), cu, cu_seqlens_k=cu, out_dtype=FP16)
        assert o.dtype == FP16


def test_meta_fp8_q_goes_through_the_op():
    q = torch.empty(20, 4, 64, dtype=E4M3, device="meta")
    k = torch.empty(20, 2, 64, dtype=E4M3, device="meta")
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    o, lse = ops.varlen_attention(q, k, k, cu, cu, return_lse=True, q_descale=torch.empty((), device="meta"))
    assert o.device.type == "meta" and o.dtype == BF16 and o.shape == (20, 4, 64) and lse.shape == (4, 20)
    assert ops.varlen_attention(q, k, k, cu, cu, out_dtype=FP16).dtype == FP16


@pytest.mark.parametrize("kw,exc,match", [
    (dict(causal="False"), TypeError, "^causal must be a bool, got str"),   # bool("False") was a causal mask
    (dict(return_lse=None), TypeError, "^return_lse must be a bool"),
    (dict(sort="no"), TypeError, "^sort must be a bool"),
    (dict(head_swizzle=2), TypeError, "^head_swizzle must be a bool"),
    (dict(pack_gqa="yes"), TypeError, "^pack_gqa must be None or a bool"),   # was a dispatcher RuntimeError
    (dict(softcap=1e-40), ValueError, r"^softcap \(1e-40\) is too small for softmax_scale \(0.125\)"),
    (dict(cu_int64=True), TypeError, "^cu_seqlens_q must have dtype int32, got int64$"),   # eager's TypeError
])
def test_op_path_checks_options_as_eager_does(kw, exc, match):
    """The op path (meta tensors here, as under torch.compile) raises what the eager call raises for
    bad flags, pack_gqa and cu_seqlens_q's dtype (a review found bool() conversions and ValueErrors)."""
    q = torch.empty(20, 4, 64, dtype=BF16, device="meta")
    k = torch.empty(20, 2, 64, dtype=BF16, device="meta")
    cu = torch.empty(3, dtype=torch.int64 if kw.pop("cu_int64", False) else torch.int32, device="meta")
    with pytest.raises(exc, match=match):
        ops.varlen_attention(q, k, k, cu, torch.empty(3, dtype=torch.int32, device="meta"), **kw)


def _meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("case", ["k_rank", "k_head_dim", "v_shape", "v_head_dim", "cu_q_2d", "paged_with_cu_k",
                                  "paged_without_seqused"])
def test_op_path_shape_errors_read_as_eager(case):
    """A bad shape on the op path (meta tensors, as under torch.compile) raises the eager path's
    exception type with the same message up to its details (``validation.varlen_inputs`` on the
    same meta tensors)."""
    i32 = functools.partial(_meta, dtype=torch.int32)
    a = dict(q=_meta(10, 8, 64), k=_meta(12, 2, 64), v=_meta(12, 2, 64), cq=i32(3), ck=i32(3), used=None, pt=None)
    paged = dict(k=_meta(40, 16, 2, 64), v=_meta(40, 16, 2, 64), pt=i32(2, 5), used=i32(2))
    a.update({"k_rank": dict(k=_meta(12, 2, 64, 1)), "k_head_dim": dict(k=_meta(12, 2, 32)),
              "v_shape": dict(v=_meta(11, 2, 64)), "v_head_dim": dict(v=_meta(12, 2, 72)),
              "cu_q_2d": dict(cq=i32(3, 1)), "paged_with_cu_k": paged,
              "paged_without_seqused": dict(paged, ck=None, used=None)}[case])
    with pytest.raises(Exception) as eager:
        V.varlen_inputs(a["q"], a["k"], a["v"], a["cq"], a["ck"], 5, 6, None, devtypes=("meta",),
                        seqused_k=a["used"], page_table=a["pt"])
    with pytest.raises(Exception) as op:
        ops.varlen_attention(a["q"], a["k"], a["v"], a["cq"], a["ck"], 5, 6, seqused_k=a["used"], page_table=a["pt"])
    head = lambda e: re.split(r"[,(]", str(e.value))[0].strip()   # noqa: E731
    assert eager.type is op.type is ValueError and head(op) == head(eager), (str(eager.value), str(op.value))


@pytest.mark.parametrize("case,exc,match", [
    ("k_16bit", TypeError, r"^k must have an FP8 dtype \(float8_e4m3fn or float8_e5m2\) with an FP8 q"),
    ("q_e5m2", TypeError, "^q must have dtype float16, bfloat16, float8_e4m3fn, got float8_e5m2$"),
    ("q_descale_16bit_q", ValueError, r"^q_descale applies to an FP8 q \(float8_e4m3fn\) only"),
    ("q_descale_shape", ValueError, r"^q_descale must have shape \(2, 2\)"),   # (the batch: cu_seqlens_q's shape)
    ("q_descale_1d", ValueError, "^q_descale must have shape .* ambiguous"),
    ("q_descale_dtype", TypeError, "^q_descale must have dtype float32, got float16"),
    ("q_descale_device", ValueError, "^q_descale must be on cuda:0"),
    ("q_descale_not_a_tensor", RuntimeError, "Optional\\[Tensor\\]' for argument 'q_descale'"),
    ("out_dtype_fp32", TypeError, "^out_dtype must be None, torch.float16 or torch.bfloat16, got torch.float32"),
    ("out_dtype_fp8", TypeError, "^out_dtype must be None, torch.float16 or torch.bfloat16"),
    ("out_dtype_16bit_q", ValueError, r"^out_dtype \(torch.float16\) must be q's dtype torch.bfloat16"),
    ("out_fp32", TypeError, r"^out must have dtype bfloat16, got float32$"),   # (TypeError, as eager raises)
    ("out_fp8", TypeError, r"^out must have dtype bfloat16, got float8_e4m3fn$"),
    ("out_vs_out_dtype", ValueError, r"^out_dtype \(torch.bfloat16\) differs from out's dtype torch.float16"),
])
def test_fake_fp8_q_errors_name_the_argument(case, exc, match):
    with FakeTensorMode():
        q, k, v, cu, kw = _fp8_fake_inputs("packed")
        op = torch.ops.kernelgen.varlen_attention
        args = [q, k, v, cu]
        if case == "k_16bit":
            args[1] = args[2] = torch.empty(50, 2, 128, dtype=BF16, device="cuda")
        elif case == "q_e5m2":
            args[0] = torch.empty(37, 8, 128, dtype=E5M2, device="cuda")
        elif case == "q_descale_16bit_q":
            args[0] = torch.empty(37, 8, 128, dtype=BF16, device="cuda")
            kw["q_descale"] = torch.empty(2, 2, device="cuda")
        elif case == "q_descale_shape":
            kw["q_descale"] = torch.empty(2, 3, device="cuda")
        elif case == "q_descale_1d":
            kw["q_descale"] = torch.empty(2, device="cuda")
        elif case == "q_descale_dtype":
            kw["q_descale"] = torch.empty(2, 2, dtype=FP16, device="cuda")
        elif case == "q_descale_device":
            kw["q_descale"] = torch.empty(2, 2)
        elif case == "q_descale_not_a_tensor":        # the schema's Tensor? refuses it (the dispatcher)
            kw["q_descale"] = 1.0
        elif case == "out_dtype_fp32":
            kw["out_dtype"] = torch.float32
        elif case == "out_dtype_fp8":
            kw["out_dtype"] = E4M3
        elif case == "out_dtype_16bit_q":
            args[0] = torch.empty(37, 8, 128, dtype=BF16, device="cuda")
            args[1] = args[2] = torch.empty(50, 2, 128, dtype=BF16, device="cuda")
            kw["out_dtype"] = FP16
        else:
            op = torch.ops.kernelgen.varlen_attention_out
            dt = {"out_fp32": torch.float32, "out_fp8": E4M3, "out_vs_out_dtype": FP16}[case]
            args = [torch.empty(37, 8, 128, dtype=dt, device="cuda")] + args
            if case == "out_vs_out_dtype":
                kw["out_dtype"] = BF16
        with pytest.raises(exc, match=match):
            op(*args, **kw)


def _meta_fp8():
    q = torch.empty(20, 4, 64, dtype=E4M3, device="meta")
    k = torch.empty(20, 2, 64, dtype=E4M3, device="meta")
    return q, k, torch.empty(3, dtype=torch.int32, device="meta")


@pytest.mark.parametrize("bad", ["bf16", torch.float32, 5])
def test_python_entry_point_checks_out_dtype_before_the_op(bad):
    """The op's schema (ScalarType?) refuses a non-dtype with a dispatcher RuntimeError (and takes an
    int as a ScalarType); the Python entry point raises TypeError naming out_dtype first."""
    q, k, cu = _meta_fp8()
    with pytest.raises(TypeError, match="^out_dtype must be None, torch.float16 or torch.bfloat16") as ei:
        ops.varlen_attention(q, k, k, cu, cu, out_dtype=bad)
    assert type(ei.value) is TypeError


@pytest.mark.parametrize("bad,exc", [("bf16", RuntimeError), (torch.float32, TypeError)])
def test_raw_op_refuses_a_bad_out_dtype_naming_it(bad, exc):
    q, k, cu = _meta_fp8()
    with pytest.raises(exc, match="out_dtype"):
        torch.ops.kernelgen.varlen_attention(q, k, k, cu, cu, out_dtype=bad)


# ----------------------------------------------------------------------------- real op through a CPU stand-in
@pytest.mark.parametrize("layout", ["packed", "paged"])
def test_opcheck(cpu_kernels, layout):
    if layout == "packed":
        q, k, v, cu = packed()
        kw = dict(cu_seqlens_k=cu, causal=True)
    else:
        q, k, v, pt, used, cu = paged(seqlen_q=2)
        kw = dict(page_table=pt, seqused_k=used, causal=True)
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention.default, (q, k, v, cu),
                              dict(kw, return_lse=return_lse))
        out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention_out.default, (out, q, k, v, cu),
                              dict(kw, return_lse=return_lse))


@pytest.mark.parametrize("kv", [E4M3, E5M2])
@pytest.mark.parametrize("out_dtype", [None, FP16])
def test_opcheck_fp8_q(cpu_kernels, kv, out_dtype):
    """The registered ops with an FP8 q (fake vs real outputs: out in out_dtype, bf16 by default).
    opcheck's test_schema cannot run on CPU FP8 inputs (its SchemaCheckMode multiplies them: no CPU
    kernel); the schema is test_opcheck's and test_op_schemas_append_q_descale_and_out_dtype's."""
    q, k, v, cu = packed()
    q8, k8, v8 = q.to(E4M3), k.to(kv), v.to(kv)
    qd, kd = torch.rand(2, 2) + 0.5, torch.rand(2, 1) + 0.5
    kw = dict(cu_seqlens_k=cu, causal=True, q_descale=qd, k_descale=kd, out_dtype=out_dtype)
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention.default, (q8, k8, v8, cu),
                              dict(kw, return_lse=return_lse), test_utils=utils)
        out = torch.empty(20, 4, 64, dtype=out_dtype or BF16)
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention_out.default, (out, q8, k8, v8, cu),
                              dict(kw, return_lse=return_lse), test_utils=utils)


def test_fp8_q_values_through_the_op_and_the_entry_point(cpu_kernels):
    """q_descale and out_dtype reach kernelgen.varlen_attention on both paths (the values are the
    reference's: q dequantised by q_descale per (request, KV head))."""
    q, k, v, cu = packed()
    q8, k8, v8 = (4 * q).to(E4M3), k.to(E4M3), v.to(E4M3)
    qd, kd, vd = torch.tensor([[0.25, 2.0], [0.5, 1.0]]), torch.rand(2, 2) + 0.5, torch.rand(()) + 0.5
    ref, ref_lse = reference.attention_reference(q8, k8, v8, cu, cu, causal=True, q_descale=qd, k_descale=kd,
                                                 v_descale=vd)
    o1, l1 = torch.ops.kernelgen.varlen_attention(q8, k8, v8, cu, cu, causal=True, return_lse=True, q_descale=qd,
                                                  k_descale=kd, v_descale=vd, out_dtype=FP16)
    assert o1.dtype == FP16 and torch.equal(o1, ref.to(FP16)) and torch.equal(l1, ref_lse.float())
    o2 = ops.varlen_attention(q8, k8, v8, cu, cu, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    assert o2.dtype == BF16 and torch.equal(o2, ref.to(BF16))
    o3 = ops.varlen_attention(q8, k8, v8, cu, cu, causal=True, k_descale=kd, v_descale=vd)
    assert not torch.equal(o3, o2)                                         # the factor was applied
    out = torch.empty(20, 4, 64, dtype=FP16)
    lse = torch.ops.kernelgen.varlen_attention_out(out, q8, k8, v8, cu, cu, causal=True, q_descale=qd, k_descale=kd,
                                                   v_descale=vd)
    assert torch.equal(out, ref.to(FP16)) and lse.shape == (0,)


def test_compile_fullgraph_fp8_q(cpu_kernels):
    torch._dynamo.reset()

    def f(q, k, v, cu, qd):
        return ops.varlen_attention(q, k, v, cu, cu, causal=True, q_descale=qd, out_dtype=FP16).float() * 2

    q, k, v, cu = packed()
    q8, k8, v8 = q.to(E4M3), k.to(E4M3), v.to(E4M3)
    qd = torch.rand(2, 2) + 0.5
    e = f(q8, k8, v8, cu, qd)
    c = torch.compile(f, fullgraph=True, backend="aot_eager")(q8, k8, v8, cu, qd)
    assert torch.equal(e, c)
    ref, _ = reference.attention_reference(q8, k8, v8, cu, cu, causal=True, q_descale=qd)
    assert torch.equal(e, ref.to(FP16).float() * 2)


# ----------------------------------------------------------------------------- quantize_q: schema and pass-through
def test_op_schemas_end_with_quantize_q_default_false():
    """quantize_q, then max_num_splits, are the last arguments of both ops' schemas: a positional bool
    default False and a positional int default 0 (so every earlier positional call stays valid); the
    Python entry point has them last with those defaults; the FA3-compatible functions do not take
    quantize_q (FA3 has no such argument)."""
    import inspect

    for op in (torch.ops.kernelgen.varlen_attention, torch.ops.kernelgen.varlen_attention_out):
        arg, cap = op.default._schema.arguments[-2:]
        assert arg.name == "quantize_q" and str(arg.type) == "bool" and arg.default_value is False
        assert cap.name == "max_num_splits" and str(cap.type) == "int" and cap.default_value == 0
        assert not arg.kwarg_only and not cap.kwarg_only
        assert op.default._schema.arguments[-3].name == "out_dtype"
    params = inspect.signature(ops.varlen_attention).parameters
    assert list(params)[-2:] == ["quantize_q", "max_num_splits"] and params["quantize_q"].default is False
    assert params["max_num_splits"].default == 0
    assert params["quantize_q"].kind is inspect.Parameter.KEYWORD_ONLY
    for fn in (compat.flash_attn_varlen_func, compat.flash_attn_with_kvcache):
        assert "quantize_q" not in inspect.signature(fn).parameters


#: The 27 arguments of torch.ops.kernelgen.varlen_attention after q, k, v, cu_seqlens_q, cu_seqlens_k,
#: positionally: max_seqlen_q 13, max_seqlen_k 13, no seqused_k / page_table, causal, windows, softcap,
#: softmax_scale, num_splits, pack_gqa, return_lse, layout, sort, head_swizzle, sinks, alibi_slopes,
#: k/v/q descales, out_dtype; then quantize_q.
_POSITIONAL_TAIL = (13, 13, None, None, True, -1, -1, 0.0, None, 0, None, False, "soa", True, True, None, None,
                    None, None, None, None)


def test_quantize_q_reaches_varlen_attention(recorder):
    """quantize_q reaches kernelgen.varlen_attention as given (default False) on every path: the
    raw ops by keyword and positionally (the schema's last argument), functional and _out; the
    Python entry point's eager call and its call through the op (autograd recording); the compat
    functions always pass False."""
    q, k, v, cu = packed()
    k8, v8 = k.to(E4M3), v.to(E4M3)
    out = torch.empty(20, 4, 64, dtype=BF16)
    torch.ops.kernelgen.varlen_attention(q, k8, v8, cu, cu)
    assert recorder.last["quantize_q"] is False
    for flag in (True, False):
        torch.ops.kernelgen.varlen_attention(q, k8, v8, cu, cu, quantize_q=flag)
        assert recorder.last["quantize_q"] is flag and recorder.last["k"] is k8
        torch.ops.kernelgen.varlen_attention(q, k8, v8, cu, cu, *_POSITIONAL_TAIL, flag)
        c = recorder.last
        assert c["quantize_q"] is flag and c["causal"] is True and c["max_seqlen_q"] == 13 and c["out_dtype"] is None
        lse = torch.ops.kernelgen.varlen_attention_out(out, q, k8, v8, cu, cu, quantize_q=flag)
        assert recorder.last["quantize_q"] is flag and recorder.last["out"] is out and lse.shape == (0,)
        torch.ops.kernelgen.varlen_attention_out(out, q, k8, v8, cu, cu, *_POSITIONAL_TAIL, flag)
        assert recorder.last["quantize_q"] is flag and recorder.last["out"] is out
        # the Python entry point: the eager call (CPU tensors, no grad) and the op (q requires grad)
        assert not ops._through_op(q, k8, v8)
        assert ops.varlen_attention(q, k8, v8, cu, cu, quantize_q=flag).shape == (20, 4, 64)
        assert recorder.last["quantize_q"] is flag and recorder.last["q"] is q
        qg = q.clone().requires_grad_(True)
        assert ops._through_op(qg, k8, v8)
        o, lse = ops.varlen_attention(qg, k8, v8, cu, cu, causal=True, return_lse=True, quantize_q=flag)
        assert recorder.last["quantize_q"] is flag and recorder.last["causal"] is True and lse.shape == (4, 20)
    n = len(recorder.calls)
    ops.varlen_attention(q, k8, v8, cu, cu)
    assert len(recorder.calls) == n + 1 and recorder.last["quantize_q"] is False
    compat.flash_attn_varlen_func(q, k8, v8, cu, cu, 13, 13, causal=True)
    assert recorder.last["quantize_q"] is False and recorder.last["k"] is k8
    kc = torch.zeros(2, 24, 2, 64).to(E4M3)
    compat.flash_attn_with_kvcache(torch.randn(2, 1, 4, 64).to(BF16), kc, kc,
                                   cache_seqlens=torch.tensor([3, 24], dtype=torch.int32))
    assert recorder.last["quantize_q"] is False


@pytest.mark.parametrize("bad", [1, 0, None, "yes", 1.0])
def test_python_entry_point_checks_quantize_q_before_the_op(bad):
    """Through the op (meta tensors) a quantize_q that is not a bool raises TypeError naming it, as
    kernelgen.varlen_attention does on the eager path (the schema's bool would take a number or
    None as a bool, and refuse a str with a dispatcher RuntimeError)."""
    q = torch.empty(20, 4, 64, dtype=BF16, device="meta")
    k = torch.empty(20, 2, 64, dtype=E4M3, device="meta")
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    with pytest.raises(TypeError, match=rf"^quantize_q must be a bool, got {type(bad).__name__}$") as ei:
        ops.varlen_attention(q, k, k, cu, cu, quantize_q=bad)
    assert type(ei.value) is TypeError


def test_raw_op_converts_quantize_q_as_its_other_bools(recorder):
    """The raw op's ``bool quantize_q``: the dispatcher passes a number as a bool (as for causal),
    so kernelgen.varlen_attention receives True / False, and refuses a str naming the argument."""
    q, k, v, cu = packed()
    k8 = k.to(E4M3)
    for given, want in ((1, True), (0, False)):
        torch.ops.kernelgen.varlen_attention(q, k8, k8, cu, cu, quantize_q=given)
        assert recorder.last["quantize_q"] is want
    n = len(recorder.calls)
    with pytest.raises(RuntimeError, match="quantize_q"):
        torch.ops.kernelgen.varlen_attention(q, k8, k8, cu, cu, quantize_q="yes")
    assert len(recorder.calls) == n


@pytest.mark.parametrize("layout", ["packed", "paged"])
def test_fake_output_with_quantize_q_keeps_qs_dtype(layout):
    """quantize_q changes neither the fake out's shape nor its dtype (q's: the quantised q is the
    kernels' only); the _out variant takes an out in q's dtype; fake tensors go through the op."""
    with FakeTensorMode():
        q, k, v, cu, kw = _fp8_fake_inputs(layout)
        q = torch.empty(q.shape, dtype=FP16, device="cuda")
        for flag in (False, True):
            o, lse = torch.ops.kernelgen.varlen_attention(q, k, v, cu, causal=True, return_lse=True, quantize_q=flag,
                                                          **kw)
            assert o.dtype == FP16 and o.shape == (37, 8, 128) and lse.shape == (8, 37)
            out = torch.empty(37, 8, 128, dtype=FP16, device="cuda")
            assert torch.ops.kernelgen.varlen_attention_out(out, q, k, v, cu, quantize_q=flag, **kw).shape == (0,)
            assert ops.varlen_attention(q, k, v, cu, quantize_q=flag, **kw).dtype == FP16
            assert ops.varlen_attention(q, k, v, cu, out=out, quantize_q=flag, **kw) is out
        with pytest.raises(TypeError, match="^out must have dtype float16, got bfloat16$"):
            torch.ops.kernelgen.varlen_attention_out(torch.empty(37, 8, 128, dtype=BF16, device="cuda"), q, k, v, cu,
                                                     quantize_q=True, **kw)


@pytest.mark.parametrize("kv", [BF16, E4M3])
def test_opcheck_quantize_q(cpu_kernels, kv):
    """The registered ops with quantize_q=True pass torch.library.opcheck (fake vs real, aliasing;
    the schema check on 16-bit inputs only: see test_opcheck_fp8_q) on the CPU stand-in."""
    q, k, v, cu = packed()
    k2, v2 = k.to(kv), v.to(kv)
    kw = dict(cu_seqlens_k=cu, causal=True, quantize_q=True)
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    utils = ("test_schema",) + utils if kv == BF16 else utils
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention.default, (q, k2, v2, cu),
                              dict(kw, return_lse=return_lse), test_utils=utils)
        out = torch.empty(20, 4, 64, dtype=BF16)
        torch.library.opcheck(torch.ops.kernelgen.varlen_attention_out.default, (out, q, k2, v2, cu),
                              dict(kw, return_lse=return_lse), test_utils=utils)


def test_compile_fullgraph_passes_quantize_q(recorder):
    """A torch.compile(fullgraph=True) graph calls the op with the quantize_q it was traced with."""
    torch._dynamo.reset()

    def f(q, k, v, cu):
        return ops.varlen_attention(q, k, v, cu, cu, causal=True, quantize_q=True).float() * 2

    q, k, v, cu = packed()
    k8, v8 = k.to(E4M3), v.to(E4M3)
    res = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k8, v8, cu)
    assert res.shape == (20, 4, 64) and res.dtype == torch.float32
    c = recorder.last
    assert c["quantize_q"] is True and c["causal"] is True and c["k"].dtype == E4M3


def test_op_matches_python_entry_point(cpu_kernels):
    q, k, v, cu = packed()
    o1, l1 = torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu, causal=True, window_left=3, window_right=0,
                                                  softcap=5.0, softmax_scale=0.2, return_lse=True)
    o2, l2 = ops.varlen_attention(q, k, v, cu, cu, causal=True, window_size=(3, 0), softcap=5.0, softmax_scale=0.2,
                                  return_lse=True)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    o3, l3 = torch.ops.kernelgen.varlen_attention(q, k, v, cu, cu)
    assert l3.shape == (0,) and l3.dtype == torch.float32


class TinyAttention(torch.nn.Module):
    """Projections around kernelgen's varlen attention, as a model would call it."""

    def __init__(self, hidden=128, hq=4, hkv=2, d=64):
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.qkv = torch.nn.Linear(hidden, (hq + 2 * hkv) * d, bias=False)
        self.o = torch.nn.Linear(hq * d, hidden, bias=False)

    def forward(self, x, cu_seqlens, max_seqlen: int):
        t = x.shape[0]
        q, k, v = self.qkv(x).split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        q, k, v = q.reshape(t, self.hq, self.d), k.reshape(t, self.hkv, self.d), v.reshape(t, self.hkv, self.d)
        out, lse = ops.varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True,
                                        return_lse=True)
        return self.o(out.reshape(t, self.hq * self.d)), lse


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_packed(cpu_kernels, dynamic):
    torch._dynamo.reset()
    m = TinyAttention().to(BF16)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    with torch.no_grad():
        for lens in ([7, 13], [9, 30, 2]):
            x = torch.randn(sum(lens), 128, dtype=BF16)
            cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
            e, el = m(x, cu, max(lens))
            c, cl = compiled(x, cu, max(lens))
            assert torch.equal(e, c) and torch.equal(el, cl)


@pytest.mark.filterwarnings("ignore:Error detected in")
def test_no_backward_has_a_clear_error(cpu_kernels):
    torch._dynamo.reset()
    m = TinyAttention().to(BF16)
    x = torch.randn(20, 128, dtype=BF16)
    cu = torch.tensor([0, 7, 20], dtype=torch.int32)
    out, _ = m(x, cu, 13)  # forward with parameters that require grad works
    with pytest.raises(RuntimeError, match="forward-only.*no_grad"):
        out.float().sum().backward()
    with pytest.raises(Exception, match="forward-only.*no_grad"):  # a training graph fails at compile time
        torch.compile(m, fullgraph=True, backend="aot_eager")(x, cu, 13)


class CappedAttention(torch.nn.Module):
    """Scalar arguments held as attributes: under dynamic=True torch.compile makes them symbolic."""

    softcap, softmax_scale, num_splits = 5.0, 0.2, 2

    def forward(self, q, k, v, cu):
        return ops.varlen_attention(q, k, v, cu, cu, causal=True, softcap=self.softcap,
                                    softmax_scale=self.softmax_scale, num_splits=self.num_splits)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_validates_symbolic_scalars(cpu_kernels, dynamic):
    """The scalar checks on the op path trace (no math.isfinite on a symbolic float)."""
    torch._dynamo.reset()
    m = CappedAttention()
    q, k, v, cu = packed()
    e = m(q, k, v, cu)
    c = torch.compile(m, fullgraph=True, backend="aot_eager", dynamic=dynamic)(q, k, v, cu)
    assert torch.equal(e, c)
    assert torch.equal(e, ops.varlen_attention(q, k, v, cu, cu, causal=True, softcap=5.0, softmax_scale=0.2))


def test_compile_dynamic_int_arguments(cpu_kernels):
    """Int arguments of a compiled function (window sides, num_splits) are symbolic under
    dynamic=True: the op's fake checks take them (they failed "window_size must be a pair of ints,
    got (s53, s22)"), on the op path and through compat, and the results are eager's."""
    torch._dynamo.reset()

    def f(q, k, v, cu, left, right, n):
        return ops.varlen_attention(q, k, v, cu, cu, window_size=(left, right), num_splits=n)

    def g(q, k, v, cu, left, n):
        return compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, window_size=(left, 0), num_splits=n)

    q, k, v, cu = packed()
    cf = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    cg = torch.compile(g, fullgraph=True, backend="aot_eager", dynamic=True)
    for left, right, n in ((3, 2, 2), (5, 4, 3), (-1, 7, 0)):
        assert torch.equal(f(q, k, v, cu, left, right, n), cf(q, k, v, cu, left, right, n))
        assert torch.equal(g(q, k, v, cu, left, n), cg(q, k, v, cu, left, n))


def test_compile_fullgraph_out_variant(cpu_kernels):
    torch._dynamo.reset()

    def f(q, k, v, cu, out):
        o = ops.varlen_attention(q, k, v, cu, cu, causal=True, out=out)
        return o + 1

    q, k, v, cu = packed()
    out_e = torch.empty(20, 4, 64, dtype=BF16)
    out_c = torch.empty(20, 4, 64, dtype=BF16)
    e = f(q, k, v, cu, out_e)
    c = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, cu, out_c)
    assert torch.equal(e, c) and torch.equal(out_e, out_c)  # out written in place by the compiled graph too


def test_compile_fullgraph_paged_decode_compat(cpu_kernels):
    torch._dynamo.reset()

    def decode(q, kc, vc, pt, used):
        return compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=pt, causal=True,
                                              return_softmax_lse=True)

    q3, kc, vc, pt, used, _ = paged()
    q = q3.view(3, 1, 4, 64)
    e = decode(q, kc, vc, pt, used)
    c = torch.compile(decode, fullgraph=True, backend="aot_eager")(q, kc, vc, pt, used)
    assert e[0].shape == (3, 1, 4, 64) and e[1].shape == (3, 4, 1)
    assert torch.equal(e[0], c[0]) and torch.equal(e[1], c[1])


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_int_cache_seqlens(cpu_kernels, dynamic):
    """An int cache_seqlens (symbolic under dynamic=True) passes the range check while tracing."""
    torch._dynamo.reset()

    def decode(q, kc, n):
        return compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=n, causal=True)

    q = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.randn(2, 24, 2, 64).to(BF16)
    compiled = torch.compile(decode, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    for n in (9, 17):
        e = decode(q, kc, n)
        assert torch.equal(e, compiled(q, kc, n))
    assert not torch.equal(decode(q, kc, 9), decode(q, kc, 17))


# ----------------------------------------------------------------------------- compat: argument mapping
def test_varlen_func_mapping(recorder):
    q, k, v, cu = packed()
    res = compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, None, None, 0.3, True)
    assert isinstance(res, torch.Tensor) and res.shape == (20, 4, 64)
    c = recorder.last
    assert c["q"] is q and c["k"] is k and c["v"] is v and c["cu_seqlens_q"] is cu and c["cu_seqlens_k"] is cu
    assert (c["max_seqlen_q"], c["max_seqlen_k"]) == (13, 13)
    assert c["softmax_scale"] == 0.3 and c["causal"] is True
    assert c["num_splits"] == 1  # FA3's varlen default: no split
    assert c["window_size"] == (-1, -1) and c["softcap"] == 0.0 and c["pack_gqa"] is None
    assert c["seqused_k"] is None and c["page_table"] is None and c["return_lse"] is False and c["out"] is None

    used = torch.tensor([3, 4], dtype=torch.int32)
    out = torch.empty(20, 4, 64, dtype=BF16)
    o, lse = compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, seqused_k=used, window_size=[8, 0], softcap=30.0,
                                           num_splits=0, pack_gqa=True, deterministic=True, return_attn_probs=True,
                                           out=out)
    c = recorder.last
    assert o is out and lse.shape == (4, 20)
    assert c["seqused_k"] is used and c["window_size"] == (8, 0) and c["softcap"] == 30.0
    assert c["num_splits"] == 0 and c["pack_gqa"] is True and c["return_lse"] is True and c["out"] is out

    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, window_size=None, num_splits=-1, return_softmax_lse=True)
    assert recorder.last["window_size"] == (-1, -1) and recorder.last["num_splits"] == 0
    assert recorder.last["return_lse"] is True


@pytest.mark.parametrize("kv", [E4M3, E5M2])
def test_varlen_func_fp8_forward(recorder, kv):
    """FA3's FP8 forward: q, k, v FP8 (kernelgen also takes an e5m2 cache with the e4m3 q) with the
    three descales, passed on as they are; the output bf16 (kernelgen's default for an FP8 q, FA3's
    dtype); a 16-bit q's q_descale is dropped (FA3 ignores it)."""
    q, k, v, cu = packed()
    q8, k8, v8 = q.to(E4M3), k.to(kv), v.to(kv)
    qd, kd, vd = torch.rand(2, 2), torch.rand(2, 1), torch.rand(())
    res = compat.flash_attn_varlen_func(q8, k8, v8, cu, cu, 13, 13, None, None, 0.3, True, None, qd, kd, vd)
    c = recorder.last
    assert c["q"] is q8 and c["k"] is k8 and c["v"] is v8
    assert c["q_descale"] is qd and c["k_descale"] is kd and c["v_descale"] is vd
    assert c["out_dtype"] is None and c["causal"] is True and c["softmax_scale"] == 0.3
    assert res.dtype == BF16 and res.shape == (20, 4, 64)
    out = torch.empty(20, 4, 64, dtype=BF16)
    o, lse = compat.flash_attn_varlen_func(q8, k8, v8, cu, cu, 13, 13, q_descale=qd, return_attn_probs=True, out=out)
    assert o is out and recorder.last["out"] is out and recorder.last["q_descale"] is qd and lse.shape == (4, 20)
    compat.flash_attn_varlen_func(q, k8, v8, cu, cu, 13, 13, q_descale=qd, k_descale=kd)
    assert recorder.last["q_descale"] is None and recorder.last["k_descale"] is kd


def test_with_kvcache_fp8_forward(recorder):
    b, s, hq, hkv, d = 3, 2, 4, 2, 64
    q8 = torch.randn(b, s, hq, d).to(E4M3)
    kc = torch.randn(b, 40, hkv, d).to(E4M3)
    qd, kd = torch.rand(b, hkv), torch.rand(())
    used = torch.tensor([3, 40, 17], dtype=torch.int32)
    o, lse = compat.flash_attn_with_kvcache(q8, kc, kc, cache_seqlens=used, q_descale=qd, k_descale=kd,
                                            v_descale=kd, causal=True, return_softmax_lse=True)
    c = recorder.last
    assert c["q"].shape == (b * s, hq, d) and c["q"].data_ptr() == q8.data_ptr() and c["q"].dtype == E4M3
    assert c["q_descale"] is qd and c["k_descale"] is kd and c["v_descale"] is kd and c["out_dtype"] is None
    assert o.dtype == BF16 and o.shape == (b, s, hq, d) and lse.shape == (b, hq, s)
    cu_q = torch.tensor([0, 1, 3, 6], dtype=torch.int32)
    o = compat.flash_attn_with_kvcache(q8.view(b * s, hq, d), kc, kc, cache_seqlens=used, cu_seqlens_q=cu_q,
                                       max_seqlen_q=3, q_descale=qd)
    assert recorder.last["q_descale"] is qd and o.dtype == BF16 and o.shape == (b * s, hq, d)
    # a 16-bit q: q_descale dropped, never read
    compat.flash_attn_with_kvcache(q8.to(BF16), kc, kc, cache_seqlens=used, q_descale=qd)
    assert recorder.last["q_descale"] is None


def test_compat_fp8_forward_values(cpu_kernels):
    """flash_attn_varlen_func / flash_attn_with_kvcache with FP8 q/k/v and the descales: the
    reference's values, in bf16."""
    torch.manual_seed(5)
    q, k, v, cu = packed()
    q8, k8, v8 = (4 * q).to(E4M3), k.to(E4M3), v.to(E4M3)
    qd, kd, vd = torch.rand(2, 2) + 0.5, torch.rand(2, 2) + 0.5, torch.rand(2, 2) + 0.5
    ref, _ = reference.attention_reference(q8, k8, v8, cu, cu, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    o = compat.flash_attn_varlen_func(q8, k8, v8, cu, cu, 13, 13, causal=True, q_descale=qd, k_descale=kd,
                                      v_descale=vd)
    assert o.dtype == BF16 and torch.equal(o, ref.to(BF16))
    b, hkv = 2, 2
    q4 = q8[:b].view(b, 1, 4, 64)
    kc, vc = k8.view(b, 10, hkv, 64), v8.view(b, 10, hkv, 64)
    used = torch.tensor([4, 10], dtype=torch.int32)
    o4 = compat.flash_attn_with_kvcache(q4, kc, vc, cache_seqlens=used, q_descale=qd, k_descale=kd, v_descale=vd)
    for i in range(b):
        n = int(used[i])
        r, _ = reference.attention_reference(q4[i], kc[i, :n], vc[i, :n], torch.tensor([0, 1], dtype=torch.int32),
                                             torch.tensor([0, n], dtype=torch.int32), q_descale=qd[i:i + 1],
                                             k_descale=kd[i:i + 1], v_descale=vd[i:i + 1])
        assert torch.equal(o4[i], r.to(BF16))


def test_varlen_func_paged(recorder):
    q, kc, vc, pt, used, cu = paged(seqlen_q=2)
    cu_k = torch.tensor([0, 5, 38, 86], dtype=torch.int32)
    compat.flash_attn_varlen_func(q, kc, vc, cu, cu_k, 2, 48, block_table=pt)  # FA2/vLLM: lengths from cu_seqlens_k
    c = recorder.last
    assert c["page_table"] is pt and c["cu_seqlens_k"] is None
    assert c["seqused_k"].dtype == torch.int32 and c["seqused_k"].tolist() == [5, 33, 48]
    compat.flash_attn_varlen_func(q, kc, vc, cu, None, 2, 48, seqused_k=used, page_table=pt)
    assert recorder.last["seqused_k"] is used and recorder.last["page_table"] is pt
    with pytest.raises(ValueError, match="page_table or block_table"):
        compat.flash_attn_varlen_func(q, kc, vc, cu, None, 2, 48, seqused_k=used, page_table=pt, block_table=pt)
    with pytest.raises(ValueError, match="seqused_k or cu_seqlens_k"):
        compat.flash_attn_varlen_func(q, kc, vc, cu, None, 2, 48, block_table=pt)
    # the key lengths' tensor is checked as on packed k/v before they are taken from it (a list raised
    # Python's own TypeError, a (4, 1) or 5-entry one an error naming seqused_k, int64 was converted)
    for bad, exc, msg in (([0, 5, 38, 86], TypeError, r"^cu_seqlens_k must be a torch.Tensor, got list$"),
                          (cu_k.view(4, 1), ValueError, r"^cu_seqlens_k must have 1 dimensions, got shape \(4, 1\)$"),
                          (cu_k.long(), TypeError, r"^cu_seqlens_k must have dtype int32, got int64$"),
                          (torch.tensor([0, 5, 38, 86, 90], dtype=torch.int32), ValueError,
                           r"^flash_attn_varlen_func: cu_seqlens_k must have as many entries as cu_seqlens_q \(4\), "
                           r"got shape \(5,\)$")):
        with pytest.raises(exc, match=msg):
            compat.flash_attn_varlen_func(q, kc, vc, cu, bad, 2, 48, block_table=pt)


def test_kvcache_cu_seqlens_q_is_checked_before_use(recorder):
    q, kc, vc, pt, used, cu = paged(seqlen_q=2)
    compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=pt, cu_seqlens_q=cu, max_seqlen_q=2)
    assert recorder.last["cu_seqlens_q"] is cu
    for bad, exc, msg in ((cu.tolist(), TypeError, r"^cu_seqlens_q must be a torch.Tensor, got list$"),
                          (cu.long(), TypeError, r"^cu_seqlens_q must have dtype int32, got int64$"),
                          (cu.view(4, 1), ValueError, r"^cu_seqlens_q must have 1 dimensions, got shape \(4, 1\)$")):
        with pytest.raises(exc, match=msg):
            compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=pt, cu_seqlens_q=bad,
                                           max_seqlen_q=2)


def test_varlen_func_vllm_positional_order_is_caught(recorder):
    q, k, v, cu = packed()
    with pytest.raises(TypeError, match="cu_seqlens_q.*keywords"):
        compat.flash_attn_varlen_func(q, k, v, 13, cu, 13, cu)  # vLLM fork: max_seqlen_q, cu_seqlens_q, ...
    assert not recorder.calls


def test_with_kvcache_contiguous_cache_is_a_packed_view(recorder):
    b, s, hq, hkv, d, cache_len = 3, 2, 4, 2, 64, 40
    q = torch.randn(b, s, hq, d).to(BF16)
    kc = torch.randn(b + 1, cache_len, hkv, d).to(BF16)   # batch_size_cache may exceed batch
    vc = torch.randn(b + 1, cache_len, hkv, 32).to(BF16)  # head_dim_v != head_dim
    used = torch.tensor([3, 40, 17], dtype=torch.int32)
    o, lse = compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, causal=True, softmax_scale=0.5,
                                            window_size=(16, 0), softcap=10.0, pack_gqa=False,
                                            return_softmax_lse=True)
    c = recorder.last
    assert c["q"].shape == (b * s, hq, d) and c["q"].data_ptr() == q.data_ptr()  # a view of q
    assert c["k"].shape == ((b + 1) * cache_len, hkv, d) and c["k"].data_ptr() == kc.data_ptr()
    assert c["k"]._base is kc and c["v"]._base is vc                            # views, no copy
    assert c["cu_seqlens_q"].tolist() == [0, 2, 4, 6] and c["cu_seqlens_q"].dtype == torch.int32
    assert c["cu_seqlens_k"].tolist() == [0, 40, 80, 120] and c["cu_seqlens_k"].dtype == torch.int32
    assert c["seqused_k"] is used and c["page_table"] is None
    assert (c["max_seqlen_q"], c["max_seqlen_k"]) == (s, cache_len)
    assert c["num_splits"] == 0  # FA3 with_kvcache default: heuristic
    assert c["causal"] is True and c["softmax_scale"] == 0.5 and c["window_size"] == (16, 0)
    assert c["softcap"] == 10.0 and c["pack_gqa"] is False and c["return_lse"] is True
    assert o.shape == (b, s, hq, 32)
    # FA3's lse layout (batch, Hq, seqlen_q) from kernelgen's (Hq, total_q): lse[h, t] = 1000 h + t
    assert lse.shape == (b, hq, s) and lse.is_contiguous()
    for bi in range(b):
        for h in range(hq):
            for si in range(s):
                assert lse[bi, h, si].item() == 1000 * h + bi * s + si


def test_with_kvcache_int_and_none_cache_seqlens(recorder):
    q = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.randn(2, 24, 2, 64).to(BF16)
    out = compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=9)
    assert out.shape == (2, 1, 4, 64)
    assert recorder.last["seqused_k"].tolist() == [9, 9] and recorder.last["seqused_k"].dtype == torch.int32
    compat.flash_attn_with_kvcache(q, kc, kc)
    assert recorder.last["seqused_k"] is None and recorder.last["cu_seqlens_k"].tolist() == [0, 24, 48]


@pytest.mark.parametrize("n", [9, np.int32(9), np.int64(9), np.uint16(9), np.int8(9)], ids=lambda n: type(n).__name__)
def test_with_kvcache_integer_scalar_cache_seqlens(recorder, n):
    """Any integer scalar, numpy's included, is a length for every request (FA3 takes an int)."""
    q = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.randn(2, 24, 2, 64).to(BF16)
    out = compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=n)
    assert out.shape == (2, 1, 4, 64)
    used = recorder.last["seqused_k"]
    assert used.tolist() == [9, 9] and used.dtype == torch.int32
    assert recorder.last["cu_seqlens_k"].tolist() == [0, 24, 48]
    q3, kc, vc, pt, _, _ = paged(seqlen_q=1)
    compat.flash_attn_with_kvcache(q3.view(3, 1, 4, 64), kc, vc, cache_seqlens=n, page_table=pt)
    assert recorder.last["seqused_k"].tolist() == [9, 9, 9] and recorder.last["page_table"] is pt


def test_with_kvcache_integer_cache_seqlens_above_the_cache_is_refused(recorder):
    """An integer cache_seqlens is known on the host: one above the keys a request's cache row (or
    its page-table row) holds would read the next request's keys, or past the cache (a review's find)."""
    q = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.randn(2, 24, 2, 64).to(BF16)
    rows = torch.randn(2, 64, 2, 64).to(BF16)[:, :24]   # dims 0 and 1 not mergeable: one page a request
    q3, kcp, vcp, pt, _, _ = paged(seqlen_q=1)
    room = pt.shape[1] * kcp.shape[1]
    full = [(q, kc, kc, {}, 24), (q, rows, rows, {}, 24),
            (q3.view(3, 1, 4, 64), kcp, vcp, {"page_table": pt}, room)]
    for qq, k, v, kw, n in full:
        compat.flash_attn_with_kvcache(qq, k, v, cache_seqlens=n, **kw)   # exactly full
        assert recorder.last["seqused_k"].tolist() == [n] * qq.shape[0]
        calls = len(recorder.calls)
        with pytest.raises(ValueError, match=rf"^flash_attn_with_kvcache: cache_seqlens \({n + 1}\) exceeds the "
                                             rf"keys the cache holds per request \({n} tokens\)"):
            compat.flash_attn_with_kvcache(qq, k, v, cache_seqlens=np.int64(n + 1), **kw)
        assert len(recorder.calls) == calls


def test_with_kvcache_numpy_negative_num_splits_is_the_heuristic(recorder):
    q = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.randn(2, 24, 2, 64).to(BF16)
    compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=np.int32(5), num_splits=np.int64(-1))
    assert recorder.last["num_splits"] == 0 and recorder.last["seqused_k"].tolist() == [5, 5]


def test_with_kvcache_non_viewable_cache_goes_paged_without_copy(recorder):
    q = torch.randn(2, 1, 4, 64).to(BF16)
    big = torch.randn(2, 64, 2, 64).to(BF16)
    kc = big[:, :24]  # dims 0 and 1 cannot be merged into one view
    compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([3, 20], dtype=torch.int32))
    c = recorder.last
    assert c["k"] is kc and c["cu_seqlens_k"] is None
    assert c["page_table"].tolist() == [[0], [1]] and c["seqused_k"].tolist() == [3, 20]
    compat.flash_attn_with_kvcache(q, kc, kc)
    assert recorder.last["seqused_k"].tolist() == [24, 24]


def test_with_kvcache_paged(recorder):
    q3, kc, vc, pt, used, _ = paged(seqlen_q=1)
    q = q3.view(3, 1, 4, 64)
    compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=pt, num_splits=3)
    c = recorder.last
    assert c["k"] is kc and c["v"] is vc and c["page_table"] is pt and c["seqused_k"] is used
    # FA3's num_splits 3 is an upper bound of its heuristic: kernelgen's max_num_splits
    assert c["cu_seqlens_k"] is None and c["max_seqlen_q"] == 1 and c["num_splits"] == 0 and c["max_num_splits"] == 3
    compat.flash_attn_with_kvcache(q, kc, vc, block_table=pt)  # FA2's name; no lengths: whole page rows
    assert recorder.last["page_table"] is pt and recorder.last["seqused_k"].tolist() == [48, 48, 48]
    with pytest.raises(ValueError, match="page_table or block_table"):
        compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, page_table=pt, block_table=pt)


def test_with_kvcache_varlen_q_and_out(recorder):
    q3, kc, vc, pt, used, _ = paged(seqlen_q=1)
    cu_q = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    o, lse = compat.flash_attn_with_kvcache(q3, kc, vc, cache_seqlens=used, page_table=pt, cu_seqlens_q=cu_q,
                                            max_seqlen_q=1, return_softmax_lse=True)
    c = recorder.last
    assert c["q"] is q3 and c["cu_seqlens_q"] is cu_q and c["max_seqlen_q"] == 1
    assert o.shape == (3, 4, 64) and lse.shape == (4, 3)  # varlen q: kernelgen's (Hq, total_q) layout
    out = torch.empty(3, 1, 4, 64, dtype=BF16)
    res = compat.flash_attn_with_kvcache(q3.view(3, 1, 4, 64), kc, vc, cache_seqlens=used, page_table=pt, out=out)
    assert res is out and recorder.last["out"].data_ptr() == out.data_ptr()
    with pytest.raises(ValueError, match="out must have shape"):
        compat.flash_attn_with_kvcache(q3.view(3, 1, 4, 64), kc, vc, cache_seqlens=used, page_table=pt,
                                       out=torch.empty(3, 4, 64, dtype=BF16))


@pytest.mark.parametrize("bad,exc,match", [
    (dict(cache_seqlens=torch.tensor([1, 2], dtype=torch.int64)), TypeError, "cache_seqlens"),
    (dict(cache_seqlens=torch.tensor([1, 2, 3], dtype=torch.int32)), ValueError, "cache_seqlens"),
    (dict(cache_seqlens=True), TypeError, "cache_seqlens"),
    (dict(cache_seqlens=np.bool_(True)), TypeError, "cache_seqlens must be an integer"),
    (dict(cache_seqlens=9.0), TypeError, "cache_seqlens must be an integer .* got float"),
    (dict(cache_seqlens=np.float32(9)), TypeError, "cache_seqlens must be an integer .* got float32"),
    (dict(cache_seqlens="9"), TypeError, "cache_seqlens must be an integer .* got str"),
    (dict(cache_seqlens=-1), ValueError, r"cache_seqlens must be in \[0, 2147483647\] tokens, got -1"),
    (dict(cache_seqlens=np.int64(2 ** 31)), ValueError, "cache_seqlens must be in .* got 2147483648"),
    (dict(k_cache=torch.zeros(2, 24, 64, dtype=BF16)), ValueError, "k_cache"),
    (dict(k_cache=torch.zeros(1, 24, 2, 64, dtype=BF16)), ValueError, "batch_size_cache"),
    (dict(q=[[0.0]]), TypeError, "^flash_attn_with_kvcache: q must be a torch.Tensor, got list"),
    (dict(v_cache=torch.zeros(2, 20, 2, 64, dtype=BF16)), ValueError,
     r"^flash_attn_with_kvcache: v_cache must match k_cache in its first three dims, got \(2, 20, 2, 64\)"),
    (dict(q=torch.zeros(2, 4, 64, dtype=BF16)), ValueError,
     r"^flash_attn_with_kvcache: q must be \(batch, seqlen_q, num_heads_q, head_dim\), got shape \(2, 4, 64\)"),
    (dict(q=torch.zeros(2, 1, 4, 64, dtype=BF16), cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32)),
     ValueError, r"^flash_attn_with_kvcache: with cu_seqlens_q, q must be \(total_q, num_heads_q, head_dim\)"),
    (dict(q=torch.zeros(2, 2, 4, 64, dtype=BF16), out=torch.zeros(2, 2, 4, 64, dtype=BF16).transpose(0, 1)), ValueError,
     r"^flash_attn_with_kvcache: out must be viewable as \(batch \* seqlen_q, num_heads_q, head_dim_v\)"),
])
def test_with_kvcache_bad_arguments(recorder, bad, exc, match):
    kw = dict(q=torch.randn(2, 1, 4, 64).to(BF16), k_cache=torch.zeros(2, 24, 2, 64, dtype=BF16),
              v_cache=torch.zeros(2, 24, 2, 64, dtype=BF16))
    kw.update(bad)
    if "k_cache" in bad:
        kw["v_cache"] = kw["k_cache"]
    with pytest.raises(exc, match=match):
        compat.flash_attn_with_kvcache(**kw)
    assert not recorder.calls


# ----------------------------------------------------------------------------- compat: unsupported FA3 arguments
T = torch.zeros(2, dtype=torch.int32)
# (k_descale / v_descale are FP8 K/V arguments now, and q_descale is ignored with a 16-bit q as FA3
# does: tests/test_fp8_cpu.py)
VARLEN_UNSUPPORTED = [("seqused_q", T), ("qv", T), ("q_v", T),
                      ("attention_chunk", 128), ("sm_margin", 8), ("dropout_p", 0.1),
                      ("cp_world_size", 2), ("cp_world_size", 1.0), ("cp_world_size", True), ("cp_rank", 1),
                      ("cp_rank", 0.0), ("cp_rank", None), ("cp_tot_seqused_k", T)]
KVCACHE_UNSUPPORTED = [("k", T), ("v", T), ("qv", T), ("rotary_cos", T), ("rotary_sin", T),
                       ("cache_batch_idx", T), ("cache_leftpad", T),
                       ("attention_chunk", 64), ("sm_margin", 4),
                       ("cp_world_size", 2), ("cp_rank", 1), ("cp_tot_seqused_k", T)]


@pytest.mark.parametrize("name,value", VARLEN_UNSUPPORTED)
def test_varlen_func_unsupported_argument_raises(recorder, name, value):
    q, k, v, cu = packed()
    with pytest.raises(NotImplementedError, match=rf"flash_attn_varlen_func: argument {name}="):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, **{name: value})
    assert not recorder.calls


@pytest.mark.parametrize("name,value", KVCACHE_UNSUPPORTED)
def test_with_kvcache_unsupported_argument_raises(recorder, name, value):
    q = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.zeros(2, 24, 2, 64, dtype=BF16)
    with pytest.raises(NotImplementedError, match=rf"flash_attn_with_kvcache: argument {name}="):
        compat.flash_attn_with_kvcache(q, kc, kc, **{name: value})
    assert not recorder.calls


def test_unsupported_arguments_at_their_defaults_are_accepted(recorder):
    q, k, v, cu = packed()
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, seqused_q=None, qv=None, q_descale=None, k_descale=None,
                                  v_descale=None, attention_chunk=0, sm_margin=0, deterministic=False,
                                  dropout_p=0.0, alibi_slopes=None, scheduler_metadata=None)
    q4 = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.zeros(2, 24, 2, 64, dtype=BF16)
    compat.flash_attn_with_kvcache(q4, kc, kc, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                                   cache_batch_idx=None, cache_leftpad=None, cu_seqlens_k_new=None,
                                   rotary_seqlens=None, attention_chunk=0, rotary_interleaved=False,
                                   scheduler_metadata=None, sm_margin=0, alibi_slopes=None)
    assert len(recorder.calls) == 2


def _same_call(a: dict, b: dict) -> bool:
    """Two recorded varlen_attention calls with the same arguments (tensors compared by value)."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype
                    and x.shape == y.shape and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def test_arguments_fa3_reads_only_with_others_are_ignored(recorder):
    """FA3 reads ``scheduler_metadata`` as a precomputed schedule, ``fa_version`` picks vLLM's build,
    ``cu_seqlens_k_new`` is read only with ``k`` / ``v`` and ``rotary_seqlens`` only with
    ``rotary_cos``: SGLang passes ``cu_seqlens_k_new`` with ``k=None`` on every decode, and vLLM
    ``fa_version`` and ``scheduler_metadata`` on every call.  Each makes the same kernelgen call as
    leaving it out."""
    q, k, v, cu = packed()
    meta = torch.zeros(8, dtype=torch.int32)
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, causal=True)
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, causal=True, scheduler_metadata=meta, fa_version=3,
                                  cp_world_size=1, cp_rank=0, cp_tot_seqused_k=None, q_v=None, ver=4)
    assert _same_call(recorder.calls[0], recorder.calls[1])
    q4 = torch.randn(3, 1, 4, 64).to(BF16)
    kc = torch.zeros(3, 24, 2, 64, dtype=BF16)
    lens = torch.tensor([5, 9, 24], dtype=torch.int32)
    compat.flash_attn_with_kvcache(q4, kc, kc, cache_seqlens=lens, causal=True)
    compat.flash_attn_with_kvcache(q4, kc, kc, cache_seqlens=lens, causal=True, cu_seqlens_k_new=_ints([0, 1, 2, 3], "cpu"),
                                   rotary_seqlens=lens, scheduler_metadata=meta, fa_version=3, ver=3)
    assert _same_call(recorder.calls[2], recorder.calls[3])


def test_qv_and_q_v_are_one_argument(recorder):
    q, k, v, cu = packed()
    with pytest.raises(ValueError, match="flash_attn_varlen_func: give qv or q_v"):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, qv=T, q_v=T)
    assert not recorder.calls


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_16_bit_sinks_are_cast_to_float32(recorder, dtype):
    """vLLM's fork takes bfloat16 ``s_aux`` (gpt-oss's sink weights are bfloat16): kernelgen's
    kernels read float32, so compat passes a contiguous float32 copy of the same values; float32
    sinks go through as the same tensor."""
    q, k, v, cu = packed()
    s16 = torch.tensor([0.5, -1.25, 2.0, 3.0], dtype=dtype)
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, s_aux=s16)
    got = recorder.last["sinks"]
    assert got.dtype == torch.float32 and got.is_contiguous() and torch.equal(got, s16.float())
    q4 = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.zeros(2, 24, 2, 64, dtype=BF16)
    strided = torch.tensor([0.5, 9.0, -1.25, 9.0, 2.0, 9.0, 3.0, 9.0], dtype=dtype)[::2]
    compat.flash_attn_with_kvcache(q4, kc, kc, sinks=strided)
    got = recorder.last["sinks"]
    assert got.dtype == torch.float32 and got.is_contiguous() and torch.equal(got, s16.float())
    s32 = s16.float()
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, sinks=s32)
    assert recorder.last["sinks"] is s32


@pytest.mark.parametrize("window,want", [((-2, -2), (-1, -1)), ((2 ** 31 - 1, 0), (-1, 0)), ((-5, 3), (-1, 3)),
                                         ((127, 0), (127, 0)), ((1 << 30, -1), (1 << 30, -1)),
                                         ((np.int64(-3), np.int32(0)), (-1, 0))])
def test_window_sides_as_fa3_reads_them(recorder, window, want):
    """FA3 reads any negative side as unbounded, and drops a side that reaches every key (>=
    max_seqlen_k - 1): a side above kernelgen's range ([-1, 2^30]) that does is unbounded."""
    q, k, v, cu = packed()
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, window_size=window)
    assert recorder.last["window_size"] == want
    q4 = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.zeros(2, 24, 2, 64, dtype=BF16)
    compat.flash_attn_with_kvcache(q4, kc, kc, window_size=list(window))
    assert recorder.last["window_size"] == want
    qp, kp, vp, pt, used, cup = paged()
    compat.flash_attn_with_kvcache(qp.view(3, 1, 4, 64), kp, vp, cache_seqlens=used, page_table=pt,
                                   window_size=window)
    assert recorder.last["window_size"] == want


def test_a_window_side_above_kernelgens_range_that_does_not_reach_every_key_is_refused(recorder):
    """A side of 2^30 + 1 tokens on a call whose keys may number more (max_seqlen_k unknown, or
    larger) still masks in FA3: kernelgen cannot take it and says so, naming window_size (not
    silently unbounded)."""
    from kernelgen.selection import validation

    q, k, v, cu = packed()
    wide = ((1 << 30) + 1, 0)
    for max_k in (None, (1 << 30) + 5):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, max_k, window_size=wide)
        assert recorder.last["window_size"] == wide         # passed on as given ...
    with pytest.raises(ValueError, match=r"window_size entries must be in \[-1, 1073741824\]"):
        validation.window(recorder.last["window_size"], False)     # ... and kernelgen's check refuses it
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, (1 << 30) + 2, window_size=wide)
    assert recorder.last["window_size"] == (-1, 0)


def test_a_window_of_other_types_goes_to_kernelgens_check_as_given(recorder):
    """Sides that are not both integers are not rewritten: kernelgen's check then names the pair the
    caller gave, (-5, 1.5), not a half-rewritten (-1, 1.5)."""
    q, k, v, cu = packed()
    compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, window_size=(-5, 1.5))
    assert recorder.last["window_size"] == (-5, 1.5)


def test_softcap_at_or_below_zero_is_off_and_num_splits_is_bounded(recorder):
    """FA3: "anything > 0 activates softcapping"; its num_splits n in 2-256 bounds the heuristic's
    count (hopper/flash_prepare_scheduler.cu: min(dynamic, n)): kernelgen's max_num_splits; 1 is no
    split, <= 0 the heuristic; above 256 refused by kernelgen's check, as FA3 refuses it."""
    q, k, v, cu = packed()
    for cap, want in ((-1.0, 0.0), (-3, 0.0), (0.0, 0.0), (float("nan"), 0.0), (float("-inf"), 0.0), (30.0, 30.0)):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, softcap=cap)
        assert recorder.last["softcap"] == want
    q4 = torch.randn(2, 1, 4, 64).to(BF16)
    kc = torch.zeros(2, 24, 2, 64, dtype=BF16)
    compat.flash_attn_with_kvcache(q4, kc, kc, softcap=-50.0, num_splits=200)
    assert recorder.last["softcap"] == 0.0 and recorder.last["num_splits"] == 0
    assert recorder.last["max_num_splits"] == 200
    for n, splits, cap in ((1, 1, 0), (2, 0, 2), (16, 0, 16), (128, 0, 128), (256, 0, 256), (np.int64(129), 0, 129),
                           (0, 0, 0), (-3, 0, 0)):
        compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, num_splits=n)
        assert recorder.last["num_splits"] == splits and recorder.last["max_num_splits"] == cap, n
        assert type(recorder.last["max_num_splits"]) is int
    for n in (257, np.int64(1000)):   # FA3 refuses above 256: so does compat, quoting its own range
        with pytest.raises(ValueError, match=rf"^num_splits must be at most 256 \(<= 0: the heuristic, 1: no split, "
                                             rf"2-256: an upper bound of the heuristic\), got {n}$"):
            compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, num_splits=n)


def test_a_symbolic_num_splits_maps_as_an_eager_one(recorder):
    """num_splits traced as a SymInt (make_fx with symbolic shapes, torch.export) takes eager's mapping:
    2-256 a cap (max_num_splits), not a forced count (which refused 129-256)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    q, k, v, cu = packed()

    def f(q, k, v, cu, n):
        return compat.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, num_splits=n)

    for n in (16, 200):
        gm = make_fx(f, tracing_mode="symbolic")(q, k, v, cu, n)
        gm(q, k, v, cu, n)
        assert (recorder.last["num_splits"], recorder.last["max_num_splits"]) == (0, n)
        f(q, k, v, cu, n)
        assert (recorder.last["num_splits"], recorder.last["max_num_splits"]) == (0, n)


def test_a_batched_q_without_cu_seqlens_says_what_to_use(recorder):
    q4 = torch.randn(2, 7, 4, 64).to(BF16)
    kv = torch.zeros(2, 7, 2, 64, dtype=BF16)
    with pytest.raises(TypeError, match=r"cu_seqlens_q is required: .* use flash_attn_with_kvcache"):
        compat.flash_attn_varlen_func(q4, kv, kv, None, None, None, None, seqused_k=_ints([7, 7], "cpu"))
    assert not recorder.calls


def test_compat_signatures_follow_fa3():
    """Positional order and defaults of upstream FA3 (hopper/flash_attn_interface.py)."""
    import inspect

    p = inspect.signature(compat.flash_attn_varlen_func).parameters
    assert list(p)[:23] == ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                            "seqused_q", "seqused_k", "softmax_scale", "causal", "qv", "q_descale", "k_descale",
                            "v_descale", "window_size", "attention_chunk", "softcap", "num_splits", "pack_gqa",
                            "deterministic", "sm_margin", "return_attn_probs"]
    assert p["num_splits"].default == 1 and p["window_size"].default == (-1, -1) and p["causal"].default is False
    p = inspect.signature(compat.flash_attn_with_kvcache).parameters
    assert list(p)[:30] == ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin", "cache_seqlens",
                            "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q", "cu_seqlens_k_new",
                            "max_seqlen_q", "rotary_seqlens", "q_descale", "k_descale", "v_descale",
                            "softmax_scale", "causal", "window_size", "attention_chunk", "softcap",
                            "rotary_interleaved", "scheduler_metadata", "num_splits", "pack_gqa", "sm_margin",
                            "return_softmax_lse"]
    assert p["num_splits"].default == 0 and p["rotary_interleaved"].default is True


# ----------------------------------------------------------------------------- compat: values through the stand-in
def test_with_kvcache_values_match_reference(cpu_kernels):
    """End to end on the CPU stand-in: the mapped call computes attention over the right keys."""
    torch.manual_seed(3)
    b, hq, hkv, d, cache_len = 3, 4, 2, 64, 40
    q = torch.randn(b, 1, hq, d).to(BF16)
    kc = torch.randn(b, cache_len, hkv, d).to(BF16)
    vc = torch.randn(b, cache_len, hkv, d).to(BF16)
    used = torch.tensor([3, 40, 17], dtype=torch.int32)
    o, lse = compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, causal=True, return_softmax_lse=True)
    for i in range(b):
        n = int(used[i])
        ref, ref_lse = reference.attention_reference(
            q[i].double(), kc[i, :n].double(), vc[i, :n].double(), torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([0, n], dtype=torch.int32), causal=True)
        assert torch.equal(o[i], ref.to(BF16))
        assert torch.allclose(lse[i, :, 0].double(), ref_lse[:, 0], atol=1e-5)
    # the non-viewable (paged) route gives the same numbers
    big_k = torch.zeros(b, 64, hkv, d, dtype=BF16)
    big_v = torch.zeros(b, 64, hkv, d, dtype=BF16)
    big_k[:, :cache_len] = kc
    big_v[:, :cache_len] = vc
    o2 = compat.flash_attn_with_kvcache(q, big_k[:, :cache_len], big_v[:, :cache_len], cache_seqlens=used,
                                        causal=True)
    assert torch.equal(o, o2)


def test_flash_attn_func_and_get_scheduler_metadata(cpu_kernels):
    """FA3's other two public names (vLLM imports get_scheduler_metadata beside flash_attn_varlen_func):
    flash_attn_func on a batch of equal-length sequences against the reference per request, its
    signature FA3's, its lse (batch, heads, seqlen_q); get_scheduler_metadata gives None, which the
    entry points take as scheduler_metadata."""
    import inspect

    assert {"flash_attn_func", "get_scheduler_metadata"} <= set(compat.__all__)
    p = inspect.signature(compat.flash_attn_func).parameters
    assert list(p) == ["q", "k", "v", "softmax_scale", "causal", "qv", "q_descale", "k_descale", "v_descale",
                       "window_size", "attention_chunk", "softcap", "num_splits", "pack_gqa", "deterministic",
                       "sm_margin", "return_attn_probs"]
    assert p["num_splits"].default == 1 and p["causal"].default is False
    torch.manual_seed(4)
    b, sq, sk, hq, hkv, d = 2, 5, 9, 4, 2, 64
    q, k, v = torch.randn(b, sq, hq, d).to(BF16), torch.randn(b, sk, hkv, d).to(BF16), torch.randn(b, sk, hkv, d).to(BF16)
    for causal in (False, True):
        o = compat.flash_attn_func(q, k, v, causal=causal)
        o2, lse = compat.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
        assert o.shape == (b, sq, hq, d) and torch.equal(o, o2) and lse.shape == (b, hq, sq) and lse.dtype == torch.float32
        for i in range(b):
            ref, ref_lse = reference.attention_reference(q[i], k[i], v[i], torch.tensor([0, sq], dtype=torch.int32),
                                                         torch.tensor([0, sk], dtype=torch.int32), causal=causal)
            assert torch.equal(o[i], ref.to(BF16))
            assert torch.allclose(lse[i].double(), ref_lse, atol=1e-5)
    with pytest.raises(ValueError, match=r"^flash_attn_func: q, k and v must have the same batch size"):
        compat.flash_attn_func(q, k[:1], v[:1])
    with pytest.raises(ValueError, match=r"^flash_attn_func: k must have 4 dimensions"):
        compat.flash_attn_func(q, k[0], v[0])
    with pytest.raises(NotImplementedError, match="attention_chunk"):
        compat.flash_attn_func(q, k, v, attention_chunk=8)
    meta = compat.get_scheduler_metadata(b, sq, sk, hq, hkv, d, torch.full((b,), sk, dtype=torch.int32),
                                         causal=True, num_splits=0)
    assert meta is None
    o3 = compat.flash_attn_with_kvcache(q, k, v, causal=True, scheduler_metadata=meta)
    assert torch.equal(o3, compat.flash_attn_func(q, k, v, causal=True))


def test_flash_attn_qkvpacked_func(cpu_kernels):
    """FA3's flash_attn_qkvpacked_func: its signature; (batch, seqlen, 3, heads, d) and, with num_heads_q,
    (batch, seqlen, hq + 2 hkv, d) give exactly flash_attn_func on the unpacked q, k and v (views of
    qkv, no copy: the kernels take strides), lse included; bad shapes and head counts raise."""
    import inspect

    assert "flash_attn_qkvpacked_func" in compat.__all__
    p = inspect.signature(compat.flash_attn_qkvpacked_func).parameters
    assert list(p) == ["qkv", "softmax_scale", "causal", "q_descale", "k_descale", "v_descale", "window_size",
                       "attention_chunk", "softcap", "deterministic", "num_heads_q", "sm_margin", "return_attn_probs"]
    torch.manual_seed(5)
    b, s, h, d = 2, 7, 4, 64
    qkv = torch.randn(b, s, 3, h, d).to(BF16)
    for causal in (False, True):
        o, lse = compat.flash_attn_qkvpacked_func(qkv, causal=causal, softcap=5.0, return_attn_probs=True)
        o2, lse2 = compat.flash_attn_func(qkv[:, :, 0].contiguous(), qkv[:, :, 1].contiguous(),
                                          qkv[:, :, 2].contiguous(), causal=causal, softcap=5.0,
                                          return_attn_probs=True)
        assert o.shape == (b, s, h, d) and torch.equal(o, o2) and torch.equal(lse, lse2)
    hq, hkv = 6, 2
    packed_gqa = torch.randn(b, s, hq + 2 * hkv, d).to(BF16)
    o = compat.flash_attn_qkvpacked_func(packed_gqa, causal=True, num_heads_q=hq)
    q, k, v = packed_gqa[:, :, :hq], packed_gqa[:, :, hq:hq + hkv], packed_gqa[:, :, hq + hkv:]
    assert o.shape == (b, s, hq, d)
    assert torch.equal(o, compat.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True))
    with pytest.raises(ValueError, match=r"^flash_attn_qkvpacked_func: qkv must have shape \(batch, seqlen, 3"):
        compat.flash_attn_qkvpacked_func(packed_gqa)
    with pytest.raises(ValueError, match=r"^flash_attn_qkvpacked_func: with num_heads_q, qkv must have shape"):
        compat.flash_attn_qkvpacked_func(qkv, num_heads_q=4)
    for bad in (9, 7, 0):   # leaves 1, 3 (odd) or all 10 heads: 10 - 9, 10 - 7, and no query head
        with pytest.raises(ValueError, match=r"^flash_attn_qkvpacked_func: num_heads_q="):
            compat.flash_attn_qkvpacked_func(packed_gqa, num_heads_q=bad)
    with pytest.raises(TypeError, match="num_heads_q must be an int"):
        compat.flash_attn_qkvpacked_func(packed_gqa, num_heads_q=6.0)
    with pytest.raises(TypeError, match="qkv must be a torch.Tensor"):
        compat.flash_attn_qkvpacked_func([1, 2])
    with pytest.raises(NotImplementedError, match="attention_chunk"):
        compat.flash_attn_qkvpacked_func(qkv, attention_chunk=8)


# ----------------------------------------------------------------------------- docs
def test_build_docs(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "tools" / "build_docs.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    html = (tmp_path / "index.html").read_text()
    for page in ("quickstart.md", "api.md", "cli.md", "environment.md", "layouts.md", "serving.md", "cache.md",
                 "performance.md"):
        assert (REPO / "docs" / page).is_file()
        assert f'id="{page}"' in html or f'id="docs/{page}"' in html
    # the developer log is link-checked but not part of the user docs' page
    assert (REPO / "docs" / "dev" / "perf-log.md").is_file() and 'id="docs/dev/perf-log.md"' not in html


def test_build_docs_reports_broken_links(tmp_path):
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import build_docs
    finally:
        sys.path.pop(0)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("[ok](docs/a.md) [bad](docs/missing.md) [web](https://example.com)\n")
    (tmp_path / "docs" / "a.md").write_text("# A title\n\n[back](../README.md) [anchor](#a-title) [no](#nope)\n"
                                            "```\n[not a link](nowhere.md)\n```\n")
    errors = build_docs.check_links(tmp_path)
    assert len(errors) == 2, errors
    assert any("docs/missing.md" in e for e in errors) and any("#nope" in e for e in errors)


def test_cli_doc_covers_every_subcommand_and_flag():
    import argparse

    from kernelgen.apps.cli import build_parser

    text = (REPO / "docs" / "cli.md").read_text()
    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if f"## {path} {name}" not in text and f"{path} {name}" not in text:
                        missing.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
            else:
                for opt in action.option_strings:
                    if opt not in ("-h", "--help") and f"`{opt}" not in text and f" {opt}" not in text:
                        missing.append(f"{path} {opt}")

    walk(build_parser(), "kernelgen")
    assert not missing, f"docs/cli.md does not document: {missing}"


def test_op_path_arguments_raise_the_eager_errors():
    """On the op path (meta tensors here; tracing, or an input that requires grad), arguments the op's
    schema would refuse with a dispatcher RuntimeError (printing the whole value) raise the eager
    call's TypeError / ValueError naming them."""
    q, k, v, cu = packed(device="meta")
    for kw, exc, msg in ((dict(q=[[0.0]]), TypeError, r"^q must be a torch.Tensor, got list$"),
                         (dict(v=(1, 2)), TypeError, r"^v must be a torch.Tensor, got tuple$"),
                         (dict(cu_seqlens_q=[0, 7, 20]), TypeError, r"^cu_seqlens_q must be a torch.Tensor, got list$"),
                         (dict(seqused_k=[7, 13]), TypeError, r"^seqused_k must be a torch.Tensor, got list$"),
                         (dict(out=3), TypeError, r"^out must be a torch.Tensor, got int$"),
                         (dict(max_seqlen_k=7.0), TypeError, r"^max_seqlen_k must be an int, got float$"),
                         (dict(max_seqlen_q=-1), ValueError, r"^max_seqlen_q must be >= 0, got -1$"),
                         (dict(metadata_layout=None), ValueError, r"^metadata_layout must be one of \('soa', 'aos'\), "
                                                                  r"got None$")):
        a = dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=13, max_seqlen_k=13)
        a.update(kw)
        with pytest.raises(exc, match=msg):
            ops.varlen_attention(**a)
        if "q" in kw or "out" in kw:   # the same with out_dtype given (its check reads q's and out's dtypes)
            with pytest.raises(exc, match=msg):
                ops.varlen_attention(**a, out_dtype=BF16)
    with pytest.raises(TypeError, match=r"^q must be a torch.Tensor, got list$"):
        compat.flash_attn_varlen_func([[0.0]], k, v, cu, cu, 13, 13)
    q2 = torch.zeros(20, 4, 64, dtype=BF16, requires_grad=True)   # grad recording: the op path on CPU tensors
    with pytest.raises(TypeError, match=r"^k must be a torch.Tensor, got list$"):
        ops.varlen_attention(q2, [0.0], v, cu, cu, 13, 13)
