"""Bad input, systematically (issue 7 item 2): every tensor argument with a wrong dtype, device,
rank, last-dim stride or row alignment; head counts that do not divide; unsupported head dims;
cu_seqlens of the wrong dtype or length; page tables too narrow or pointing outside the cache;
mismatched batch sizes; an out tensor of the wrong shape.  Each raises TypeError (type/dtype) or
ValueError whose message starts with the argument's name and says what was expected.

Checked three ways: ``validation.varlen_inputs`` on "meta" tensors, the same on CPU tensors, and
the public ``kernelgen.varlen_attention`` on CPU tensors (with the device check widened to the CPU
so the rest of the matrix is reachable without a GPU).  Hypothesis drives random valid shapes with
one random fault each.  tests/test_validation.py holds the first examples; this file extends them.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import kernelgen
from kernelgen.selection import validation as V

BF16, FP16, I32 = torch.bfloat16, torch.float16, torch.int32
META = ("cuda", "meta")


# ---------------------------------------------------------------------------------------------
# Argument sets


def args_for(dev="meta", *, paged=False, total_q=10, total_k=12, hq=8, hkv=2, d=64, dv=None, batch=2,
             dtype=BF16, num_pages=40, page_size=16, max_pages=5, seqused=False, out=True) -> dict:
    """A valid argument set (packed or paged) on ``dev``."""
    dv = d if dv is None else dv
    e = functools.partial(torch.zeros, device=dev)
    a = {"q": e(total_q, hq, d, dtype=dtype), "cu_seqlens_q": e(batch + 1, dtype=I32), "max_seqlen_q": 5,
         "max_seqlen_k": 6, "seqused_k": None, "page_table": None, "cu_seqlens_k": None,
         "out": e(total_q, hq, dv, dtype=dtype) if out else None}
    if paged:
        a["k"] = e(num_pages, page_size, hkv, d, dtype=dtype)
        a["v"] = e(num_pages, page_size, hkv, dv, dtype=dtype)
        a["page_table"] = e(batch, max_pages, dtype=I32)
        a["seqused_k"] = e(batch, dtype=I32)
    else:
        a["k"] = e(total_k, hkv, d, dtype=dtype)
        a["v"] = e(total_k, hkv, dv, dtype=dtype)
        a["cu_seqlens_k"] = e(batch + 1, dtype=I32)
        if seqused:
            a["seqused_k"] = e(batch, dtype=I32)
    return a


def validate(a, devtypes=META):
    return V.varlen_inputs(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["max_seqlen_q"],
                           a["max_seqlen_k"], a["out"], devtypes=devtypes, seqused_k=a["seqused_k"],
                           page_table=a["page_table"])


def public(a, **options):
    return kernelgen.varlen_attention(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["max_seqlen_q"],
                                      a["max_seqlen_k"], seqused_k=a["seqused_k"], page_table=a["page_table"],
                                      out=a["out"], **options)


@pytest.fixture
def cpu_allowed(monkeypatch):
    """Let the public call accept CPU tensors, so every later check is reachable without a GPU."""
    orig = V.varlen_inputs

    def widened(*args, **kw):
        if len(args) < 9 and "devtypes" not in kw:
            kw["devtypes"] = ("cpu",)
        return orig(*args, **kw)

    monkeypatch.setattr(V, "varlen_inputs", widened)


def other_half(dtype):
    return FP16 if dtype == BF16 else BF16


def misaligned_rows(x):
    """x with its last dim widened by 2 elements then cut back: row stride not a multiple of 16 bytes."""
    wide = torch.zeros(*x.shape[:-1], x.shape[-1] + 2, dtype=x.dtype, device=x.device)
    return wide[..., : x.shape[-1]]


def last_dim_strided(x):
    """Same shape as x with stride 2 in the last dim."""
    return torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)[..., ::2]


def other_device(x):
    """An empty tensor like x on the other of "meta" / "cpu"."""
    return torch.empty(x.shape, dtype=x.dtype, device="cpu" if x.device.type == "meta" else "meta")


# ---------------------------------------------------------------------------------------------
# The matrix: (id, paged base?, mutation, exception, argument named first, what was expected)

def _set(**kw):
    return lambda a: a.update(kw)


def _map(name, fn):
    def m(a):
        a[name] = fn(a[name])
    return m


def _heads_dims(a, d=None, dv=None, hq=None, hkv=None):
    q, k, v = a["q"], a["k"], a["v"]
    d = q.shape[-1] if d is None else d
    dv = v.shape[-1] if dv is None else dv
    hq = q.shape[1] if hq is None else hq
    hkv = k.shape[-2] if hkv is None else hkv
    e = functools.partial(torch.zeros, dtype=q.dtype, device=q.device)
    a["q"] = e(q.shape[0], hq, d)
    a["k"] = e(*k.shape[:-2], hkv, d)
    a["v"] = e(*v.shape[:-2], hkv, dv)
    a["out"] = e(q.shape[0], hq, dv)


MATRIX = [
    # wrong dtype (TypeError)
    ("q-float32", False, _map("q", lambda x: x.float()), TypeError, "q", "must have dtype float16, bfloat16"),
    ("q-int8", False, _map("q", lambda x: x.to(torch.int8)), TypeError, "q", "must have dtype"),
    ("k-dtype-unlike-q", False, _map("k", lambda x: x.to(other_half(x.dtype))), TypeError, "k", "must have dtype bfloat16"),
    ("v-dtype-unlike-q", False, _map("v", lambda x: x.to(other_half(x.dtype))), TypeError, "v", "must have dtype bfloat16"),
    ("paged-k-dtype", True, _map("k", lambda x: x.float()), TypeError, "k", "must have dtype bfloat16"),
    ("out-dtype", False, _map("out", lambda x: x.float()), TypeError, "out", "must have dtype bfloat16"),
    ("cu_seqlens_q-int64", False, _map("cu_seqlens_q", lambda x: x.long()), TypeError, "cu_seqlens_q", "must have dtype int32"),
    ("cu_seqlens_k-int64", False, _map("cu_seqlens_k", lambda x: x.long()), TypeError, "cu_seqlens_k", "must have dtype int32"),
    ("cu_seqlens_k-float", False, _map("cu_seqlens_k", lambda x: x.float()), TypeError, "cu_seqlens_k", "must have dtype int32"),
    ("seqused_k-int64-packed", False, _set(seqused_k=torch.zeros(2, dtype=torch.int64, device="meta")), TypeError,
     "seqused_k", "must have dtype int32"),
    ("seqused_k-float-paged", True, _map("seqused_k", lambda x: x.float()), TypeError, "seqused_k", "must have dtype int32"),
    ("page_table-int16", True, _map("page_table", lambda x: x.to(torch.int16)), TypeError, "page_table", "must have dtype int32"),
    # not a tensor (TypeError)
    ("k-list", False, _set(k=[[1.0]]), TypeError, "k", "must be a torch.Tensor"),
    ("cu_seqlens_q-list", False, _set(cu_seqlens_q=[0, 5, 10]), TypeError, "cu_seqlens_q", "must be a torch.Tensor"),
    ("page_table-ndarray", True, _set(page_table=((0, 1), (2, 3))), TypeError, "page_table", "must be a torch.Tensor"),
    ("out-list", False, _set(out=[0.0]), TypeError, "out", "must be a torch.Tensor"),
    ("max_seqlen_k-float", False, _set(max_seqlen_k=6.0), TypeError, "max_seqlen_k", "must be an int"),
    ("max_seqlen_q-bool", False, _set(max_seqlen_q=True), TypeError, "max_seqlen_q", "must be an int"),
    # wrong device (ValueError)
    ("k-other-device", False, _map("k", other_device), ValueError, "k", "(like q)"),
    ("v-other-device", False, _map("v", other_device), ValueError, "v", "(like q)"),
    ("cu_seqlens_q-other-device", False, _map("cu_seqlens_q", other_device), ValueError, "cu_seqlens_q", "(like q)"),
    ("cu_seqlens_k-other-device", False, _map("cu_seqlens_k", other_device), ValueError, "cu_seqlens_k", "(like q)"),
    ("seqused_k-other-device", True, _map("seqused_k", other_device), ValueError, "seqused_k", "(like q)"),
    ("page_table-other-device", True, _map("page_table", other_device), ValueError, "page_table", "(like q)"),
    ("out-other-device", False, _map("out", other_device), ValueError, "out", "(like q)"),
    # wrong rank
    ("q-rank-4", False, _map("q", lambda x: x[None]), ValueError, "q", "must have 3 dimensions"),
    ("k-rank-2", False, _map("k", lambda x: x[:, 0]), ValueError, "k", "must have 3 dimensions"),
    ("k-rank-4-without-page_table", False, _map("k", lambda x: x[None]), ValueError, "k", "must have 3 dimensions"),
    ("k-packed-with-page_table", True, _map("k", lambda x: x[0]), ValueError, "k", "must be a paged cache"),
    ("v-rank-2", False, _map("v", lambda x: x[:, 0]), ValueError, "v", "must have 3 dimensions"),
    ("paged-v-rank-3", True, _map("v", lambda x: x[0]), ValueError, "v", "must have 4 dimensions"),
    ("cu_seqlens_q-rank-0", False, _map("cu_seqlens_q", lambda x: x[0]), ValueError, "cu_seqlens_q", "must have 1 dimensions"),
    ("seqused_k-rank-2", True, _map("seqused_k", lambda x: x[:, None]), ValueError, "seqused_k", "must have 1 dimensions"),
    ("page_table-rank-1", True, _map("page_table", lambda x: x[0]), ValueError, "page_table", "must have 2 dimensions"),
    ("out-rank-2", False, _map("out", lambda x: x[:, 0]), ValueError, "out", "must have 3 dimensions"),
    # last-dim stride and 16-byte rows
    ("q-last-dim-stride", False, _map("q", last_dim_strided), ValueError, "q", "must be contiguous in its last dimension"),
    ("k-last-dim-stride", False, _map("k", last_dim_strided), ValueError, "k", "must be contiguous in its last dimension"),
    ("v-last-dim-stride", False, _map("v", last_dim_strided), ValueError, "v", "must be contiguous in its last dimension"),
    ("paged-k-last-dim-stride", True, _map("k", last_dim_strided), ValueError, "k", "must be contiguous in its last"),
    ("out-last-dim-stride", False, _map("out", last_dim_strided), ValueError, "out", "must be contiguous in its last"),
    ("k-row-not-16B", False, _map("k", misaligned_rows), ValueError, "k", "must be a multiple of 8 elements (16 bytes)"),
    ("v-row-not-16B", False, _map("v", misaligned_rows), ValueError, "v", "must be a multiple of 8 elements (16 bytes)"),
    ("paged-v-row-not-16B", True, _map("v", misaligned_rows), ValueError, "v", "must be a multiple of 8 elements"),
    ("out-row-not-16B", False, _map("out", misaligned_rows), ValueError, "out", "must be a multiple of 8 elements"),
    ("page_table-last-dim-stride", True, _map("page_table", lambda x: last_dim_strided(x)), ValueError, "page_table",
     "must be contiguous in its last dimension"),
    ("cu_seqlens_k-strided", False, _map("cu_seqlens_k", lambda x: last_dim_strided(x)), ValueError, "cu_seqlens_k",
     "must be contiguous"),
    ("seqused_k-strided", True, _map("seqused_k", lambda x: last_dim_strided(x)), ValueError, "seqused_k",
     "must be contiguous, got stride 2"),
    # head counts that do not divide, unsupported head dims
    ("heads-8-over-3", False, lambda a: _heads_dims(a, hkv=3), ValueError, "q", "num_heads (8) must be a positive multiple of k num_heads (3)"),
    ("heads-2-over-4", False, lambda a: _heads_dims(a, hq=2, hkv=4), ValueError, "q", "must be a positive multiple of k num_heads (4)"),
    ("heads-kv-0", False, lambda a: _heads_dims(a, hkv=0), ValueError, "q", "must be a positive multiple of k num_heads (0)"),
    ("paged-heads-6-over-4", True, lambda a: _heads_dims(a, hq=6, hkv=4), ValueError, "q", "must be a positive multiple"),
    ("head_dim-32", False, lambda a: _heads_dims(a, d=32, dv=32), ValueError, "q", "head_dim must be one of (64, 96, 128, 192, 256)"),
    ("head_dim-512", False, lambda a: _heads_dims(a, d=512, dv=512), ValueError, "q", "head_dim must be one of"),
    ("head_dim-80-paged", True, lambda a: _heads_dims(a, d=80, dv=80), ValueError, "q", "head_dim must be one of"),
    ("head_dim_v-48", False, lambda a: _heads_dims(a, dv=48), ValueError, "v", "head_dim_v must be one of"),
    ("k-head_dim-unlike-q", False, lambda a: a.update(k=torch.zeros(12, 2, 128, dtype=BF16, device=a["q"].device)),
     ValueError, "k", "head_dim 128 must equal q head_dim 64"),
    ("v-heads-unlike-k", False, _map("v", lambda x: torch.zeros(x.shape[0], 4, x.shape[2], dtype=x.dtype, device=x.device)),
     ValueError, "v", "must have shape (12, 2, head_dim_v) like k"),
    ("paged-v-page_size-unlike-k", True, _map("v", lambda x: x[:, :8]), ValueError, "v", "like k"),
    # cu_seqlens: wrong length, empty
    ("cu_seqlens_k-longer", False, _map("cu_seqlens_k", lambda x: torch.zeros(4, dtype=I32, device=x.device)),
     ValueError, "cu_seqlens_k", "must have batch+1 = 3 entries like cu_seqlens_q, got 4"),
    ("cu_seqlens_k-shorter", False, _map("cu_seqlens_k", lambda x: x[:2]), ValueError, "cu_seqlens_k", "batch+1 = 3"),
    ("cu_seqlens_q-empty", False, _map("cu_seqlens_q", lambda x: x[:0]), ValueError, "cu_seqlens_q", "batch+1 >= 1"),
    ("cu_seqlens_k-empty", False, _map("cu_seqlens_k", lambda x: x[:0]), ValueError, "cu_seqlens_k", "batch+1 >= 1"),
    # mismatched batch sizes and paged consistency
    ("page_table-rows", True, _map("page_table", lambda x: torch.zeros(3, 5, dtype=I32, device=x.device)),
     ValueError, "page_table", "must have batch = 2 rows"),
    ("seqused_k-batch-paged", True, _map("seqused_k", lambda x: x[:1]), ValueError, "seqused_k", "must have shape (2,) (one length a request), got (1,)"),
    ("seqused_k-batch-packed", False, _set(seqused_k=torch.zeros(3, dtype=I32, device="meta")), ValueError,
     "seqused_k", "must have shape (2,) (one length a request), got (3,)"),
    ("paged-without-seqused_k", True, _set(seqused_k=None), ValueError, "seqused_k", "is required with a page_table"),
    ("paged-with-cu_seqlens_k", True, _set(cu_seqlens_k=torch.zeros(3, dtype=I32, device="meta")), ValueError,
     "cu_seqlens_k", "must be None with a page_table"),
    ("packed-without-cu_seqlens_k", False, _set(cu_seqlens_k=None), ValueError, "cu_seqlens_k", "is required"),
    ("paged-page_size-0", True, lambda a: a.update(k=a["k"][:, :0], v=a["v"][:, :0]), ValueError, "k",
     "page_size must be >= 1"),
    # out of the wrong shape
    ("out-rows", False, _map("out", lambda x: x[:-1]), ValueError, "out", "must have shape (10, 8, 64), got (9, 8, 64)"),
    ("out-heads", False, _map("out", lambda x: x[:, :4]), ValueError, "out", "must have shape (10, 8, 64)"),
    ("out-head_dim", False, _map("out", lambda x: x[..., :32]), ValueError, "out", "must have shape (10, 8, 64)"),
    # an out whose elements share memory (the kernels' writes would race)
    ("out-expanded-rows", False, _map("out", lambda x: x[:1].expand(x.shape)), ValueError, "out",
     "must not have elements that share memory (an expanded or overlapping view), got shape (10, 8, 64) with "
     "strides (0, 64, 1)"),
    ("out-overlapping-heads", False, _map("out", lambda x: x.as_strided(x.shape, (64, 8, 1))), ValueError, "out",
     "must not have elements that share memory (an expanded or overlapping view), got shape (10, 8, 64) with "
     "strides (64, 8, 1)"),
    ("out-head_dim-not-dv", False, lambda a: (_heads_dims(a, d=192, dv=128),
                                              a.update(out=torch.zeros(10, 8, 192, dtype=BF16, device=a["q"].device))),
     ValueError, "out", "must have shape (10, 8, 128)"),
    ("paged-out-rows", True, _map("out", lambda x: torch.zeros(11, 8, 64, dtype=x.dtype, device=x.device)), ValueError,
     "out", "must have shape (10, 8, 64)"),
    ("max_seqlen_q-negative", False, _set(max_seqlen_q=-3), ValueError, "max_seqlen_q", "must be >= 0"),
]
_IDS = [m[0] for m in MATRIX]
assert len(set(_IDS)) == len(_IDS)


def _expect(excinfo, exc, name, what):
    msg = str(excinfo.value)
    assert excinfo.type is exc, f"{excinfo.type.__name__}: {msg}"
    assert re.match(rf"{re.escape(name)}\b", msg), f"message does not start with {name!r}: {msg}"
    assert what in msg, f"message does not say {what!r}: {msg}"


def _build(case_id, paged, dev, mutate):
    a = args_for(dev, paged=paged)
    mutate(a)
    if dev == "cpu" and not case_id.endswith("other-device"):   # _set() mutations inject meta tensors
        for key in ("seqused_k", "cu_seqlens_k"):
            x = a[key]
            if isinstance(x, torch.Tensor) and x.device.type == "meta":
                a[key] = torch.zeros(x.shape, dtype=x.dtype)
    return a


@pytest.mark.parametrize("case_id,paged,mutate,exc,name,what", MATRIX, ids=_IDS)
def test_matrix_meta(case_id, paged, mutate, exc, name, what):
    a = _build(case_id, paged, "meta", mutate)
    with pytest.raises(Exception) as ei:
        validate(a)
    _expect(ei, exc, name, what)


@pytest.mark.parametrize("case_id,paged,mutate,exc,name,what", MATRIX, ids=_IDS)
def test_matrix_op_on_meta_tensors(case_id, paged, mutate, exc, name, what):
    """The same faults through ``kernelgen.ops.varlen_attention`` on meta tensors: the custom op's
    fake implementation (what torch.compile traces) raises what the eager call raises."""
    from kernelgen import ops

    a = _build(case_id, paged, "meta", mutate)
    with pytest.raises(Exception) as ei:
        ops.varlen_attention(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["max_seqlen_q"],
                             a["max_seqlen_k"], seqused_k=a["seqused_k"], page_table=a["page_table"], out=a["out"])
    _expect(ei, exc, name, what)


@pytest.mark.parametrize("case_id,paged,mutate,exc,name,what", MATRIX, ids=_IDS)
def test_matrix_public_call_on_cpu(case_id, paged, mutate, exc, name, what, cpu_allowed):
    """The same faults through kernelgen.varlen_attention (CPU tensors; device check widened)."""
    a = _build(case_id, paged, "cpu", mutate)          # other_device() of a CPU tensor is a meta tensor
    with pytest.raises(Exception) as ei:
        public(a)
    _expect(ei, exc, name, what)


def test_valid_sets_pass_everywhere(cpu_allowed):
    for paged in (False, True):
        for dev in ("meta", "cpu"):
            s = validate(args_for(dev, paged=paged), devtypes=("meta", "cpu"))
            assert s["batch"] == 2 and s["paged"] == paged and s["total_q"] == 10
    s = validate(args_for("meta", d=192, dv=128))
    assert (s["head_dim"], s["head_dim_v"]) == (192, 128)
    s = validate(args_for("meta", seqused=True))
    assert s["total_k"] == 12
    # the public call with no query rows returns empty outputs without launching anything
    a = args_for("cpu", total_q=0)
    out, lse = public(a, return_lse=True)
    assert out.shape == (0, 8, 64) and lse.shape == (8, 0)


def test_public_call_device_and_type_without_widening():
    """Without a GPU in the picture: CPU or meta tensors are refused by the public call, naming q."""
    for dev in ("cpu", "meta"):
        a = args_for(dev)
        with pytest.raises(ValueError, match=r"^q must be on a CUDA device, got (cpu|meta)"):
            public(a)
    a = args_for("cpu")
    a["q"] = a["q"].float()
    with pytest.raises(TypeError, match=r"^q must have dtype float16, bfloat16, float8_e4m3fn, got float32"):
        public(a)
    with pytest.raises(TypeError, match=r"^q must be a torch.Tensor, got list"):
        kernelgen.varlen_attention([[0.0]], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"])


def test_misaligned_base_address():
    """A tensor starting 2 bytes past a 16-byte boundary (CPU storage offset) is refused."""
    a = args_for("cpu")
    flat = torch.zeros(10 * 8 * 64 + 1, dtype=BF16)
    a["q"] = flat[1:].view(10, 8, 64)
    assert a["q"].data_ptr() % 16
    with pytest.raises(ValueError, match=r"^q must start at a 16-byte aligned address"):
        validate(a, devtypes=("cpu",))
    a = args_for("cpu")
    flat = torch.zeros(10 * 8 * 64 + 8, dtype=BF16)
    a["out"] = flat[8:].view(10, 8, 64)                    # 16 bytes in: aligned, accepted
    validate(a, devtypes=("cpu",))


OPTION_FAULTS = [
    (dict(pack_gqa="yes"), TypeError, "pack_gqa", "must be None or a bool"),
    (dict(pack_gqa=1), TypeError, "pack_gqa", "must be None or a bool"),
    (dict(window_size=(-2, 0)), ValueError, "window_size", "must be in [-1, "),
    (dict(window_size=(4,)), TypeError, "window_size", "must be a pair of ints"),
    (dict(window_size=(1.0, 2)), TypeError, "window_size", "must be a pair of ints"),
    (dict(softcap=-1.0), ValueError, "softcap", "must be finite and >= 0 (0 = off), got -1.0"),
    (dict(softcap=float("inf")), ValueError, "softcap", "must be finite and >= 0 (0 = off), got inf"),
    (dict(softcap="30"), TypeError, "softcap", "must be a float"),
    (dict(num_splits=129), ValueError, "num_splits", "must be in [0, 128]"),
    (dict(num_splits=-1), ValueError, "num_splits", "must be in [0, 128]"),
    (dict(num_splits=2.0), TypeError, "num_splits", "must be an int"),
    (dict(metadata_layout="AoS"), ValueError, "metadata_layout", "must be one of ('soa', 'aos')"),
    (dict(softmax_scale=0.0), ValueError, "softmax_scale", "must be a finite positive number"),
    (dict(softmax_scale="0.1"), TypeError, "softmax_scale", "must be a float or None"),
    # (a review's finds: a string flag was truthy, a huge scale or a tiny cap overflowed float32 in
    # the parameter packer, a strided sinks tensor was read as if contiguous)
    (dict(causal="False"), TypeError, "causal", "must be a bool"),
    (dict(causal=2), TypeError, "causal", "must be a bool"),
    (dict(causal=1), TypeError, "causal", "must be a bool, got int"),   # (as pack_gqa=1)
    (dict(sort="no"), TypeError, "sort", "must be a bool"),
    (dict(head_swizzle=None), TypeError, "head_swizzle", "must be a bool"),
    (dict(return_lse="yes"), TypeError, "return_lse", "must be a bool"),
    (dict(softmax_scale=3e38), ValueError, "softmax_scale", "must be at most 1.18e+38"),
    (dict(softcap=3e38), ValueError, "softcap", "must be at most 1.18e+38"),
    (dict(softcap=1e-40), ValueError, "softcap", "is too small for softmax_scale (0.125)"),
    (dict(sinks=torch.zeros(16)[::2]), ValueError, "sinks", "must be contiguous"),
    (dict(sinks=torch.zeros(1).expand(8)), ValueError, "sinks", "must be contiguous"),
]


@pytest.mark.parametrize("options,exc,name,what", OPTION_FAULTS, ids=[f"{list(o)[0]}={list(o.values())[0]!r}"
                                                                       for o, *_ in OPTION_FAULTS])
def test_public_call_option_faults(options, exc, name, what, cpu_allowed):
    a = args_for("cpu", total_q=0)
    with pytest.raises(Exception) as ei:
        public(a, **options)
    _expect(ei, exc, name, what)


# ---------------------------------------------------------------------------------------------
# Host value checks (opt-in, KERNELGEN_CHECK_INPUTS=1): page_table too narrow, ids outside the cache


def test_page_table_too_narrow_names_it_and_the_need():
    pt = torch.zeros(2, 3, dtype=I32)
    with pytest.raises(ValueError) as ei:
        V.check_paged_values(pt, torch.tensor([49, 10], dtype=I32), num_pages=10, page_size=16)
    msg = str(ei.value)
    assert msg.startswith("page_table is too narrow") and "needs 4 pages of 16 tokens" in msg and "has 3 columns" in msg
    V.check_paged_values(pt, torch.tensor([48, 0], dtype=I32), num_pages=10, page_size=16)   # exactly full: ok
    with pytest.raises(ValueError, match="^page_table is too narrow"):
        V.check_paged_values(torch.zeros(1, 0, dtype=I32), torch.tensor([1], dtype=I32), 4, 1)
    with pytest.raises(ValueError, match="^seqused_k must be >= 0"):
        V.check_paged_values(pt, torch.tensor([-1, 0], dtype=I32), num_pages=10, page_size=16)
    with pytest.raises(ValueError, match=r"^page_table\[0\] has page ids outside the cache's 10 pages"):
        V.check_paged_values(torch.tensor([[10, 0, 0], [0, 0, 0]], dtype=I32), torch.tensor([1, 1], dtype=I32), 10, 16)
    with pytest.raises(ValueError, match=r"^page_table\[1\] has page ids outside"):
        V.check_paged_values(torch.tensor([[0, 0, 0], [0, -1, 0]], dtype=I32), torch.tensor([1, 17], dtype=I32), 10, 16)
    # junk past the pages a request uses is never looked at
    V.check_paged_values(torch.tensor([[3, -1, 99], [0, 1, -5]], dtype=I32), torch.tensor([16, 17], dtype=I32), 10, 16)


# ---------------------------------------------------------------------------------------------
# Property-based tests

FAULTS = ("none", "dtype_q", "dtype_k", "dtype_v", "dtype_out", "dtype_cu_q", "dtype_cu_k", "dtype_seqused",
          "dtype_page_table", "rank_q", "rank_k", "rank_out", "stride_q", "stride_k", "stride_v", "align_k",
          "heads", "head_dim", "head_dim_v", "cu_k_len", "page_table_rows", "seqused_len", "out_shape",
          "device_k", "device_cu_q")
#: fault -> (exception, argument the message starts with)
EXPECT = {
    "dtype_q": (TypeError, "q"), "dtype_k": (TypeError, "k"), "dtype_v": (TypeError, "v"),
    "dtype_out": (TypeError, "out"), "dtype_cu_q": (TypeError, "cu_seqlens_q"), "dtype_cu_k": (TypeError, "cu_seqlens_k"),
    "dtype_seqused": (TypeError, "seqused_k"), "dtype_page_table": (TypeError, "page_table"),
    "rank_q": (ValueError, "q"), "rank_k": (ValueError, "k"), "rank_out": (ValueError, "out"),
    "stride_q": (ValueError, "q"), "stride_k": (ValueError, "k"), "stride_v": (ValueError, "v"),
    "align_k": (ValueError, "k"), "heads": (ValueError, "q"), "head_dim": (ValueError, "q"),
    "head_dim_v": (ValueError, "v"), "cu_k_len": (ValueError, "cu_seqlens_k"),
    "page_table_rows": (ValueError, "page_table"), "seqused_len": (ValueError, "seqused_k"),
    "out_shape": (ValueError, "out"), "device_k": (ValueError, "k"), "device_cu_q": (ValueError, "cu_seqlens_q"),
}


@st.composite
def configs(draw):
    hkv = draw(st.integers(1, 8))
    return dict(
        paged=draw(st.booleans()), hkv=hkv, hq=hkv * draw(st.sampled_from([1, 2, 3, 4, 8])),
        d=draw(st.sampled_from(V.HEAD_DIMS)), dv=draw(st.sampled_from(V.HEAD_DIMS)),
        dtype=draw(st.sampled_from([BF16, FP16])), batch=draw(st.integers(0, 6)), total_q=draw(st.integers(0, 40)),
        total_k=draw(st.integers(0, 40)), num_pages=draw(st.integers(1, 9)), page_size=draw(st.sampled_from([1, 16, 64])),
        max_pages=draw(st.integers(1, 6)), seqused=draw(st.booleans()), out=draw(st.booleans()),
        pad_heads=draw(st.sampled_from([0, 0, 1, 3])),
    )


def build_config(c, dev="meta"):
    a = args_for(dev, paged=c["paged"], total_q=c["total_q"], total_k=c["total_k"], hq=c["hq"], hkv=c["hkv"], d=c["d"],
                 dv=c["dv"], batch=c["batch"], dtype=c["dtype"], num_pages=c["num_pages"], page_size=c["page_size"],
                 max_pages=c["max_pages"], seqused=c["seqused"], out=c["out"])
    if c["pad_heads"]:                               # valid strided views: extra heads after ours
        p = c["pad_heads"]
        for key in ("q", "k", "v"):
            x = a[key]
            big = torch.zeros(*x.shape[:-2], x.shape[-2] + p, x.shape[-1], dtype=x.dtype, device=x.device)
            a[key] = big[..., : x.shape[-2], :]
    return a


def apply_fault(a, c, fault):
    """Apply one fault; returns False when it does not apply to this configuration."""
    half = other_half(c["dtype"])
    if fault == "dtype_q":
        a["q"] = a["q"].float()
    elif fault == "dtype_k":
        a["k"] = a["k"].to(half)
    elif fault == "dtype_v":
        a["v"] = a["v"].to(half)
    elif fault == "dtype_out":
        if a["out"] is None:
            return False
        a["out"] = a["out"].to(half)
    elif fault == "dtype_cu_q":
        a["cu_seqlens_q"] = a["cu_seqlens_q"].long()
    elif fault == "dtype_cu_k":
        if c["paged"]:
            return False
        a["cu_seqlens_k"] = a["cu_seqlens_k"].long()
    elif fault == "dtype_seqused":
        if a["seqused_k"] is None:
            return False
        a["seqused_k"] = a["seqused_k"].long()
    elif fault == "dtype_page_table":
        if not c["paged"]:
            return False
        a["page_table"] = a["page_table"].long()
    elif fault == "rank_q":
        a["q"] = a["q"][None]
    elif fault == "rank_k":
        a["k"] = a["k"][None]
    elif fault == "rank_out":
        if a["out"] is None:
            return False
        a["out"] = a["out"][:, 0]
    elif fault in ("stride_q", "stride_k", "stride_v"):
        key = fault[-1]
        a[key] = last_dim_strided(a[key])
    elif fault == "align_k":
        a["k"] = misaligned_rows(a["k"])
        if all(s <= 1 for s in a["k"].shape[:-1]):
            return False                             # a single row: its stride is never used
    elif fault == "heads":
        if c["hkv"] == 1:
            return False
        hq = c["hq"] + 1 if (c["hq"] + 1) % c["hkv"] else c["hq"] + 2
        a["q"] = torch.zeros(a["q"].shape[0], hq, c["d"], dtype=c["dtype"], device=a["q"].device)
        if a["out"] is not None:
            a["out"] = torch.zeros(a["q"].shape[0], hq, c["dv"], dtype=c["dtype"], device=a["q"].device)
    elif fault == "head_dim":
        bad = 80
        e = functools.partial(torch.zeros, dtype=c["dtype"], device=a["q"].device)
        a["q"] = e(a["q"].shape[0], c["hq"], bad)
        a["k"] = e(*a["k"].shape[:-1], bad)
    elif fault == "head_dim_v":
        a["v"] = torch.zeros(*a["v"].shape[:-1], 40, dtype=c["dtype"], device=a["v"].device)
        a["out"] = None
    elif fault == "cu_k_len":
        if c["paged"]:
            return False
        a["cu_seqlens_k"] = torch.zeros(c["batch"] + 2, dtype=I32, device=a["q"].device)
    elif fault == "page_table_rows":
        if not c["paged"]:
            return False
        a["page_table"] = torch.zeros(c["batch"] + 1, c["max_pages"], dtype=I32, device=a["q"].device)
    elif fault == "seqused_len":
        if a["seqused_k"] is None:
            return False
        a["seqused_k"] = torch.zeros(c["batch"] + 1, dtype=I32, device=a["q"].device)
    elif fault == "out_shape":
        a["out"] = torch.zeros(a["q"].shape[0] + 1, c["hq"], c["dv"], dtype=c["dtype"], device=a["q"].device)
    elif fault == "device_k":
        a["k"] = other_device(a["k"])
    elif fault == "device_cu_q":
        a["cu_seqlens_q"] = other_device(a["cu_seqlens_q"])
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(c=configs(), fault=st.sampled_from(FAULTS))
def test_property_one_fault_one_named_error(c, fault):
    """Random valid shapes pass with consistent sizes; one fault gives the expected exception type,
    with a message that starts with the faulty argument's name and says what it must be."""
    a = build_config(c)
    assume(apply_fault(a, c, fault))
    if fault == "none":
        s = validate(a)
        assert s["batch"] == c["batch"] and s["total_q"] == c["total_q"] and s["paged"] == c["paged"]
        assert (s["num_heads_q"], s["num_heads_kv"], s["head_dim"], s["head_dim_v"]) == (c["hq"], c["hkv"], c["d"], c["dv"])
        if c["paged"]:
            assert (s["num_pages"], s["page_size"], s["max_pages"]) == (c["num_pages"], c["page_size"], c["max_pages"])
        else:
            assert s["total_k"] == c["total_k"]
        return
    exc, name = EXPECT[fault]
    with pytest.raises(Exception) as ei:
        validate(a)
    msg = str(ei.value)
    assert ei.type is exc, f"{fault}: {ei.type.__name__}: {msg}"
    assert re.match(rf"{name}\b", msg), f"{fault}: {msg}"
    assert "must" in msg or "required" in msg, f"{fault}: no expectation stated: {msg}"


@settings(max_examples=300, deadline=None)
@given(batch=st.integers(1, 5), width=st.integers(0, 5), num_pages=st.integers(1, 12),
       page_size=st.sampled_from([1, 2, 16]), data=st.data())
def test_property_paged_values(batch, width, num_pages, page_size, data):
    """check_paged_values raises iff some request needs more columns than page_table has, uses a
    page id outside [0, num_pages) or has a negative length -- and the message names the argument."""
    ids = data.draw(st.lists(st.lists(st.integers(-2, num_pages + 1), min_size=width, max_size=width),
                             min_size=batch, max_size=batch))
    used = data.draw(st.lists(st.integers(-1, (width + 1) * page_size), min_size=batch, max_size=batch))
    pt = torch.tensor(ids, dtype=I32).reshape(batch, width)
    su = torch.tensor(used, dtype=I32)
    need = [-(-u // page_size) if u > 0 else 0 for u in used]
    if any(u < 0 for u in used):
        expect = "seqused_k"
    elif max(need) > width:
        expect = "page_table is too narrow"
    elif any(not 0 <= ids[b][j] < num_pages for b in range(batch) for j in range(need[b])):
        expect = "page_table["
    else:
        expect = None
    if expect is None:
        V.check_paged_values(pt, su, num_pages, page_size)
    else:
        with pytest.raises(ValueError) as ei:
            V.check_paged_values(pt, su, num_pages, page_size)
        assert str(ei.value).startswith(expect), str(ei.value)


@settings(max_examples=300, deadline=None)
@given(vals=st.lists(st.integers(-3, 30), min_size=1, max_size=8), total=st.integers(0, 30),
       name=st.sampled_from(["cu_seqlens_q", "cu_seqlens_k"]))
def test_property_cu_seqlens_values(vals, total, name):
    x = torch.tensor(vals, dtype=I32)
    bad = vals[0] != 0 or any(b < a for a, b in zip(vals, vals[1:])) or vals[-1] > total
    if bad:
        with pytest.raises(ValueError) as ei:
            V.check_cu_seqlens_values(name, x, total)
        assert str(ei.value).startswith(name)
    else:
        V.check_cu_seqlens_values(name, x, total)


@settings(max_examples=300, deadline=None)
@given(left=st.integers(-4, 300), right=st.integers(-4, 300), causal=st.booleans())
def test_property_window(left, right, causal):
    if left < -1 or right < -1:
        with pytest.raises(ValueError, match="^window_size"):
            V.window((left, right), causal)
        return
    mask, l2, r2 = V.window((left, right), causal)
    r_eff = (0 if right < 0 else min(right, 0)) if causal else right
    assert l2 == (left if mask == "local" else -1)
    if left < 0 and r_eff < 0:
        assert (mask, l2, r2) == ("none", -1, -1)
    elif left < 0 and r_eff == 0:
        assert (mask, r2) == ("causal", 0)
    else:
        assert (mask, l2, r2) == ("local", left, r_eff)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(-10, 300), cap=st.floats(allow_nan=True, allow_infinity=True, width=32))
def test_property_scalar_options(n, cap):
    if 0 <= n <= 128:
        assert V.num_splits(n) == n
    else:
        with pytest.raises(ValueError, match=r"^num_splits must be in \[0, 128\]"):
            V.num_splits(n)
    if cap == cap and cap != float("inf") and 0 <= cap <= V.SCALAR_MAX:
        assert V.softcap(cap) == float(cap)
    elif cap == cap and cap != float("inf") and cap > 0:   # finite, but times log2(e) not a float32
        with pytest.raises(ValueError, match=r"^softcap must be at most 1\.18e\+38 \(the kernels take it times "
                                             r"log2\(e\) in float32\)"):
            V.softcap(cap)
    else:
        with pytest.raises(ValueError, match="^softcap must be finite and >= 0"):
            V.softcap(cap)


def test_numpy_bools_reach_the_signature_as_python_bools(cpu_allowed):
    """A NumPy bool option enters the call signature as a Python bool: the heuristics test
    ``pack_gqa is True`` / ``is False``, which np.True_ is not."""
    import numpy as np

    from kernelgen.selection import arguments

    a = args_for("cpu", total_q=0)
    call = arguments.varlen_call(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["max_seqlen_q"],
                                 a["max_seqlen_k"], seqused_k=None, page_table=None, out=a["out"],
                                 causal=np.True_, window_size=(-1, -1), softcap=0.0, softmax_scale=None,
                                 num_splits=0, pack_gqa=np.False_, metadata_layout="soa", sort=np.True_,
                                 head_swizzle=np.False_, short_query_tokens=None, arch=None)
    sig = call.signature
    assert sig.pack_gqa is False and sig.mask == "causal" and sig.sort is True and sig.head_swizzle is False
