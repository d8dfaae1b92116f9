"""The per-signature fast path of varlen_attention and AttentionPlan.run (issue 9), on the CPU.

* ``signature.key`` changes with every property validation reads (type, dtype, device, shape,
  strides of each tensor; type and value of every other argument) and not with the data.
* A repeated signature skips validation and the variant choice; any change of a validated
  property misses and raises exactly what validation raised before (the validation matrix
  replayed after warming the cache); misaligned pointers of a cached signature still raise.
* The parameter bytes of the fast path equal the one-off packers' (``oneoff.scheduler_params``,
  ``attention_params``, ``combine_params``), and those equal the pre-issue-9 packer.

CUDA is stubbed (tests/fake_cuda.py): launches are recorded by a ctypes cuLaunchKernel stand-in.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from fake_cuda import ATTN_GRID, STREAM, make_plan
from test_validation_matrix import MATRIX, OPTION_FAULTS, _build, _expect, args_for, public

import kernelgen
from kernelgen.front import api
from kernelgen.jit import runtime
from kernelgen.kernels import kernel_args
from kernelgen.kernels.params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS
from kernelgen.kernels.workspace import SplitBuffers
from kernelgen.launch import launch, oneoff
from kernelgen.selection import heuristics, signature, validation as V

BF16, I32 = torch.bfloat16, torch.int32
_LOG2E = 1.4426950408889634


def paged_args(batch=4, hq=8, hkv=2, d=128, page_size=16, num_pages=24, max_pages=6, maxk=96, out=True) -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "q": torch.randn(batch, hq, d, generator=g).to(BF16),
        "k": torch.zeros(num_pages, page_size, hkv, d, dtype=BF16),
        "v": torch.zeros(num_pages, page_size, hkv, d, dtype=BF16),
        "cu_seqlens_q": torch.arange(batch + 1, dtype=I32), "cu_seqlens_k": None, "max_seqlen_q": 1,
        "max_seqlen_k": maxk, "seqused_k": torch.full((batch,), 50, dtype=I32),
        "page_table": (torch.arange(batch * max_pages, dtype=I32) % num_pages).reshape(batch, max_pages),
        "out": torch.empty(batch, hq, d, dtype=BF16) if out else None,
    }


def packed_args(lens=(3, 5), klens=(7, 9), hq=4, hkv=4, d=64, dv=64, seqused=False) -> dict:
    g = torch.Generator().manual_seed(1)
    tq, tk = sum(lens), sum(klens)
    a = {"q": torch.randn(tq, hq, d, generator=g).to(BF16), "k": torch.randn(tk, hkv, d, generator=g).to(BF16),
         "v": torch.randn(tk, hkv, dv, generator=g).to(BF16),
         "cu_seqlens_q": torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=I32),
         "cu_seqlens_k": torch.tensor(np.concatenate([[0], np.cumsum(klens)]), dtype=I32),
         "max_seqlen_q": max(lens), "max_seqlen_k": max(klens), "seqused_k": None, "page_table": None, "out": None}
    if seqused:
        a["seqused_k"] = torch.tensor(klens, dtype=I32) - 1
    return a


def call(a, **options):
    return kernelgen.varlen_attention(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["max_seqlen_q"],
                                      a["max_seqlen_k"], seqused_k=a["seqused_k"], page_table=a["page_table"],
                                      out=a["out"], **options)


@pytest.fixture
def counts(monkeypatch):
    """Counts calls of validation.varlen_inputs and heuristics.choose."""
    n = {"validate": 0, "choose": 0}
    validate, choose = V.varlen_inputs, heuristics.choose

    def counted_validate(*args, **kw):
        n["validate"] += 1
        return validate(*args, **kw)

    def counted_choose(*args, **kw):
        n["choose"] += 1
        return choose(*args, **kw)

    monkeypatch.setattr(V, "varlen_inputs", counted_validate)
    monkeypatch.setattr(heuristics, "choose", counted_choose)
    return n


def the_prepared_call():
    (prep,) = api._CALLS._d.values()
    return prep


def expected_launches(rec, prep, a, lse, options, *, md=None, split=None, capacity=None):
    """(kind, grid, block, smem, bytes) of the call's launches, from the one-off packers and the
    loaded kernels (``md``/``split``: the plan's buffers; default: views of the last workspace)."""
    if md is None:
        md, split = prep.layout.views(rec.allocations[-1])
    q, out = a["q"], a["out"]
    batch = a["cu_seqlens_q"].shape[0] - 1
    capacity = batch if capacity is None else capacity
    hq = q.shape[1]
    _, left, right = V.window(options.get("window_size", (-1, -1)), options.get("causal", False))
    scale = options.get("softmax_scale") or 1 / math.sqrt(q.shape[-1])
    kernels = {k.spec.name: k for k in runtime.loaded_kernels()}
    attn = kernels[prep.attn.name]
    threads, smem = kernel_args.scheduler_launch_shape(capacity, kernels[prep.sched.name].smem_bytes)
    res = [("scheduler", (1, 1, 1), (threads, 1, 1), smem,
            oneoff.scheduler_params(a["cu_seqlens_q"], a["cu_seqlens_k"], a["seqused_k"], md, batch, capacity,
                                 prep.config)),
           ("attention", (ATTN_GRID, 1, 1), (attn.spec.tile.num_warps * 32, 1, 1), attn.spec.smem_bytes(),
            oneoff.attention_params(q, a["k"], a["v"], out, lse, a["cu_seqlens_q"], a["cu_seqlens_k"], md, capacity,
                                 scale, seqused_k=a["seqused_k"], page_table=a["page_table"], window=(left, right),
                                 softcap=options.get("softcap", 0.0), split=split))]
    if split is not None:
        comb = kernels[prep.combine.name]
        grid = max(1, math.ceil(out.shape[0] * hq / comb.spec.rows_per_cta))
        res.append(("combine", (grid, 1, 1), (comb.spec.num_threads, 1, 1), 0,
                    oneoff.combine_params(split, a["cu_seqlens_q"], md, out, lse, hq)))
    return res


def recorded(rec):
    return [(x.kind, x.grid, x.block, x.smem, x.params) for x in rec.launches]


# ---------------------------------------------------------------------------------------------
# signature.key


def _sub(x):
    class Sub(torch.Tensor):
        pass
    return x.as_subclass(Sub)


TENSOR_MUTATIONS = {
    "dtype": lambda x: x.to(torch.float16) if x.is_floating_point() else x.to(torch.int64),
    "device": lambda x: torch.empty(x.shape, dtype=x.dtype, device="meta"),
    "shape": lambda x: x[:-1] if x.shape[0] > 1 else torch.zeros((2,) + tuple(x.shape[1:]), dtype=x.dtype),
    "strides": lambda x: torch.zeros(tuple(x.shape[:-1]) + (2 * x.shape[-1],), dtype=x.dtype)[..., ::2],
    "rank": lambda x: x[None],
    "class": _sub,
    "absent": lambda x: None,
}


def _key(a, **opt):
    o = {"causal": False, "softcap": 0.0, "softmax_scale": None, "num_splits": 0, "pack_gqa": None,
         "return_lse": False, "metadata_layout": "soa", "sort": True, "head_swizzle": True, "window_size": (-1, -1)}
    o.update(opt)
    return signature.key((a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["seqused_k"],
                          a["page_table"], a["out"]), o["window_size"],
                         (a["max_seqlen_q"], a["max_seqlen_k"], o["causal"], o["softcap"], o["softmax_scale"],
                          o["num_splits"], o["pack_gqa"], o["return_lse"], o["metadata_layout"], o["sort"],
                          o["head_swizzle"]))


def test_key_ignores_data_and_pointers():
    a, b = paged_args(), paged_args()
    b["q"] = torch.ones_like(b["q"]) * 3
    b["seqused_k"] = torch.tensor([1, 2, 3, 4], dtype=I32)
    assert a["q"].data_ptr() != b["q"].data_ptr()
    assert _key(a) == _key(b) and hash(_key(a)) == hash(_key(b))


@pytest.mark.parametrize("name", ["q", "k", "v", "cu_seqlens_q", "seqused_k", "page_table", "out"])
@pytest.mark.parametrize("prop", sorted(TENSOR_MUTATIONS))
def test_key_changes_with_every_tensor_property(name, prop):
    a = paged_args()
    b = dict(a)
    b[name] = TENSOR_MUTATIONS[prop](a[name])
    if prop == "strides":
        assert b[name].shape == a[name].shape and b[name].stride() != a[name].stride()
    assert _key(a) != _key(b)


@pytest.mark.parametrize("change", [
    {"causal": 1}, {"causal": True}, {"softcap": 0}, {"softcap": 30.0}, {"softmax_scale": 0.1}, {"num_splits": 0.0},
    {"num_splits": 3}, {"pack_gqa": False}, {"pack_gqa": 0}, {"return_lse": True}, {"metadata_layout": "aos"},
    {"sort": False}, {"sort": 1}, {"head_swizzle": False}, {"window_size": [-1, -1]}, {"window_size": (-1.0, -1)},
    {"window_size": (-1, 4)}, {"window_size": (-1, -1, -1)},
], ids=repr)
def test_key_changes_with_every_scalar_type_and_value(change):
    assert _key(paged_args(), **change) != _key(paged_args())


def test_key_hint_types():
    a = paged_args()
    for hint in ("max_seqlen_q", "max_seqlen_k"):
        b = dict(a, **{hint: True if a[hint] == 1 else float(a[hint])})
        assert b[hint] == a[hint] and _key(a) != _key(b)
        assert _key(dict(a, **{hint: None})) != _key(a)


def test_unkeyable_arguments_raise():
    a = paged_args()
    with pytest.raises(TypeError):
        _key(a, window_size=iter((-1, -1)))
    with pytest.raises(AttributeError):
        _key(dict(a, q=[[0.0]]))


def test_cacheable_only_plain_scalars_and_tensors():
    """Python and NumPy scalars are stored (NumPy's compare and hash by value, their type in the key);
    other types are not (a Fraction, a Decimal), nor tensors of other classes."""
    from decimal import Decimal
    from fractions import Fraction

    a = paged_args()
    assert signature.cacheable(_key(a))
    assert signature.cacheable(_key(a, causal=np.bool_(True)))
    assert signature.cacheable(_key(a, softcap=np.float32(0.0)))
    assert signature.cacheable(_key(a, window_size=(np.int64(-1), -1)))
    assert _key(a, causal=np.bool_(True)) != _key(a, causal=True)   # (types differ: validated apart)
    assert not signature.cacheable(_key(a, softmax_scale=Fraction(1, 8)))
    assert not signature.cacheable(_key(a, softcap=Decimal("1.5")))


def test_signature_cache_bound_and_last_entry():
    c = signature.SignatureCache(max_entries=2)
    c.put(("a",), 1)
    c.put(("b",), 2)
    assert c.get(("a",)) == 1 and c._last == (("a",), 1)
    c.put(("c",), 3)                                   # the oldest, ("a",), goes
    assert len(c) == 2 and ("a",) not in c and c.get(("b",)) == 2 and c.get(("c",)) == 3
    assert c.get(("zzz",)) is None and c._last == (("c",), 3)
    c.clear()
    assert len(c) == 0 and c.get(("c",)) is None


# ---------------------------------------------------------------------------------------------
# varlen_attention: hits, misses, bytes


def test_repeated_signature_skips_validation_and_choice(fake_cuda, counts):
    a = paged_args()
    opts = {"causal": True, "num_splits": 3}
    assert call(a, **opts) is a["out"]
    assert counts == {"validate": 1, "choose": 1} and len(api._CALLS) == 1
    assert fake_cuda.kinds() == ["scheduler", "attention", "combine"]
    first = recorded(fake_cuda)
    fake_cuda.clear()
    b = paged_args()                                   # new tensors, same signature
    b["q"].fill_(2.0)
    assert call(b, **opts) is b["out"]
    assert counts == {"validate": 1, "choose": 1} and len(api._CALLS) == 1
    second = recorded(fake_cuda)
    assert [x[:4] for x in second] == [x[:4] for x in first]
    assert {x.stream for x in fake_cuda.launches} == {STREAM} and fake_cuda.device_switches == []
    # the same call with another option value is a new signature: validated and chosen again
    call(b, causal=True, num_splits=2)
    assert counts == {"validate": 2, "choose": 2} and len(api._CALLS) == 2


CASES = {
    "paged-split": (paged_args, {"causal": True, "num_splits": 3}),
    "paged-auto-split-lse": (lambda: paged_args(maxk=96 * 16, max_pages=96, num_pages=400),
                             {"causal": True, "return_lse": True}),
    "packed-local-softcap-lse": (packed_args, {"window_size": (4, 0), "softcap": 30.0, "return_lse": True,
                                               "num_splits": 1, "softmax_scale": 0.3}),
    "packed-seqused-aos": (lambda: packed_args(seqused=True, hq=8, hkv=2, d=128, dv=64),
                           {"metadata_layout": "aos", "sort": False, "head_swizzle": False, "num_splits": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_bytes_equal_the_one_off_packers(fake_cuda, counts, case):
    make, opts = CASES[case]
    for attempt in range(3):                           # 1 validated call, then 2 cache hits
        fake_cuda.clear()
        a = make()
        res = call(a, **opts)
        out, lse = res if opts.get("return_lse") else (res, None)
        if a["out"] is not None:
            assert out is a["out"]
        assert counts["validate"] == 1
        a = dict(a, out=out)
        prep = the_prepared_call()
        split = prep.combine is not None
        assert fake_cuda.kinds() == ["scheduler", "attention"] + (["combine"] if split else [])
        assert recorded(fake_cuda) == expected_launches(fake_cuda, prep, a, lse, opts)
        if lse is not None:
            assert lse.shape == (a["q"].shape[1], a["q"].shape[0]) and lse.dtype == torch.float32
            assert fake_cuda.launches[1].fields()["lse"] == lse.data_ptr()
        assert fake_cuda.launches[1].fields()["metadata"] == fake_cuda.allocations[-1].data_ptr()
    if case == "paged-auto-split-lse":
        assert prep.combine is not None               # the heuristic chose split-KV here


def test_misaligned_pointer_of_a_cached_signature_raises(fake_cuda):
    a = args_for("cpu")
    public(a)
    assert len(api._CALLS) == 1
    for name in ("q", "k", "v", "out"):
        fake_cuda.clear()
        x = a[name]
        flat = torch.zeros(x.numel() + 8, dtype=x.dtype)
        b = dict(a, **{name: flat[1:x.numel() + 1].view(x.shape)})    # same shape and strides, 2 bytes off
        assert b[name].stride() == x.stride() and b[name].data_ptr() % 16
        with pytest.raises(ValueError, match=rf"^{name} must start at a 16-byte aligned address"):
            public(b)
        assert fake_cuda.launches == [] and fake_cuda.allocations == []


@pytest.mark.parametrize("case_id,paged,mutate,exc,name,what", MATRIX, ids=[m[0] for m in MATRIX])
def test_matrix_after_warm_cache(case_id, paged, mutate, exc, name, what, fake_cuda):
    """Every fault of the validation matrix still raises its error after the valid signature it
    was derived from is cached."""
    base = _build(case_id, paged, "cpu", lambda a: None)
    public(base)
    assert len(api._CALLS) == 1 and len(fake_cuda.launches) >= 2
    fake_cuda.clear()
    a = _build(case_id, paged, "cpu", mutate)
    with pytest.raises(Exception) as ei:
        public(a)
    _expect(ei, exc, name, what)
    assert fake_cuda.launches == []


@pytest.mark.parametrize("options,exc,name,what", OPTION_FAULTS + [
    (dict(max_seqlen_q=True), TypeError, "max_seqlen_q", "must be an int"),
    (dict(max_seqlen_k=6.0), TypeError, "max_seqlen_k", "must be an int"),
    (dict(num_splits=0.0), TypeError, "num_splits", "must be an int"),
    (dict(window_size=(-1.0, -1)), TypeError, "window_size", "must be a pair of ints"),
    (dict(window_size=[-1, -1, 0]), TypeError, "window_size", "must be a pair of ints"),
    (dict(softcap=True), TypeError, "softcap", "must be a float"),
], ids=lambda o: repr(o) if isinstance(o, dict) else "")
def test_option_faults_after_warm_cache(options, exc, name, what, fake_cuda):
    """Options whose value equals (and hashes like) a cached one but whose type is refused still
    raise: the key holds the types."""
    a = dict(args_for("cpu"), max_seqlen_q=1, max_seqlen_k=6)
    options = dict(options)
    hints = {k: options.pop(k) for k in ("max_seqlen_q", "max_seqlen_k") if k in options}
    public(a, window_size=(-1, -1), num_splits=0, softcap=0.0)
    assert len(api._CALLS) == 1
    fake_cuda.clear()
    with pytest.raises(Exception) as ei:
        public(dict(a, **hints), **options)
    _expect(ei, exc, name, what)
    assert fake_cuda.launches == []


def test_check_inputs_env_validates_values_of_a_cached_signature(fake_cuda, monkeypatch):
    a = paged_args()
    call(a, causal=True)
    bad = dict(a, cu_seqlens_q=torch.tensor([1, 1, 2, 3, 4], dtype=I32))
    fake_cuda.clear()
    call(bad, causal=True)                            # values are not read on the fast path
    assert fake_cuda.kinds()[:2] == ["scheduler", "attention"]
    fake_cuda.clear()
    monkeypatch.setenv("KERNELGEN_CHECK_INPUTS", "1")
    with pytest.raises(ValueError, match=r"^cu_seqlens_q\[0\] must be 0"):
        call(bad, causal=True)
    with pytest.raises(ValueError, match=r"^page_table\[0\] has page ids outside"):
        call(dict(a, page_table=a["page_table"] + 100), causal=True)
    assert fake_cuda.launches == []
    call(a, causal=True)
    assert len(fake_cuda.launches) >= 2


def test_numpy_scalars_are_cached_and_exotic_option_types_work_uncached(fake_cuda, counts):
    """NumPy bools and numbers (``1 / np.sqrt(d)``) key a prepared call as Python scalars do (a review
    measured 7-15x the host time a call when they were not cached); other scalar types (a Fraction)
    validate on every call."""
    from fractions import Fraction

    a = paged_args()
    for _ in range(3):
        call(a, causal=np.bool_(True), num_splits=np.int64(3), softmax_scale=1 / np.sqrt(np.float64(128)))
    assert counts["validate"] == 1 and len(api._CALLS) == 1
    for _ in range(2):
        call(a, causal=True, num_splits=3, softmax_scale=Fraction(1, 8))
    assert counts["validate"] == 3 and len(api._CALLS) == 1
    call(a, causal=True, window_size=[-1, -1], num_splits=3)
    call(a, causal=True, window_size=[-1, -1], num_splits=3)
    assert counts["validate"] == 4 and len(api._CALLS) == 2


def test_other_current_device_is_switched_for_the_launches(fake_cuda, monkeypatch):
    from kernelgen.launch import prepared

    a = paged_args()
    call(a, causal=True)
    fake_cuda.clear()
    fake_cuda.device_switches.clear()
    monkeypatch.setattr(prepared, "current_device", lambda: 3)   # the prepared device is None (CPU)
    call(a, causal=True)
    assert fake_cuda.device_switches == [None] and len(fake_cuda.launches) >= 2


def test_launch_error_from_the_call_names_the_kernel(fake_cuda):
    a = paged_args()
    call(a, causal=True)
    prep = the_prepared_call()
    fake_cuda.capturing = True            # launched one by one (as inside a capture)
    fake_cuda.rc = 1
    with pytest.raises(launch.LaunchError, match=rf"kernel {prep.sched.name}: CUDA_ERROR_FAKE_1\b") as ei:
        call(a, causal=True)
    assert ei.value.code == 1
    fake_cuda.rc, fake_cuda.fail_kind = 2, "attention"
    with pytest.raises(launch.LaunchError, match=rf"kernel {prep.attn.name}: CUDA_ERROR_FAKE_2\b"):
        call(a, causal=True)
    fake_cuda.rc, fake_cuda.fail_kind, fake_cuda.capturing = 0, None, False
    fake_cuda.graph_rc = 3                # the graph launch (this stream's later calls) is refused
    names = "+".join(x.name for x in prep._launches() if x is not None)
    with pytest.raises(launch.LaunchError, match=rf"^cuGraphLaunch failed for kernel {re.escape(names)}: "
                                                 r"cuGraphLaunch returned CUresult 3$") as ei:
        call(a, causal=True)
    assert ei.value.code == 3 and ei.value.kernel == names
    fake_cuda.graph_rc = 0
    fake_cuda.clear()
    call(a, causal=True)
    assert fake_cuda.kinds()[:2] == ["scheduler", "attention"] and fake_cuda.graph_launches == 1


def test_empty_batch_is_not_prepared(fake_cuda):
    a = args_for("cpu", total_q=0)
    out, lse = public(a, return_lse=True)
    assert out.shape == (0, 8, 64) and lse.shape == (8, 0)
    assert len(api._CALLS) == 0 and fake_cuda.launches == []


# ---------------------------------------------------------------------------------------------
# AttentionPlan.run


def _plan(monkeypatch, **kw):
    args = dict(max_batch=8, num_heads_q=8, num_heads_kv=2, head_dim=128, max_total_q=8, max_seqlen_q=1,
                max_seqlen_k=96, paged=True, causal=True, num_splits=3)
    args.update(kw)
    return make_plan(monkeypatch, **args)


def test_plan_run_fast_path(fake_cuda, counts, monkeypatch):
    plan = _plan(monkeypatch)
    assert plan.combine is not None and plan.metadata.data_ptr() == plan._workspace.data_ptr()
    a = paged_args()
    lse = torch.empty(8, 4, dtype=torch.float32)
    runs = []
    for _ in range(3):
        fake_cuda.clear()
        res = plan.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], seqused_k=a["seqused_k"],
                       page_table=a["page_table"], out=a["out"], lse=lse)
        assert res[0] is a["out"] and res[1] is lse
        runs.append(recorded(fake_cuda))
    assert counts["validate"] == 1 and len(plan._steps) == 1
    assert fake_cuda.allocations == []                 # the plan's workspace: no allocation per step
    assert runs[0] == runs[1] == runs[2]
    prep = next(iter(plan._steps._d.values()))
    assert runs[0] == expected_launches(fake_cuda, prep, a, lse, {"causal": True}, md=plan.metadata,
                                        split=plan.split, capacity=8)
    attn = fake_cuda.launches[1].fields()
    assert attn["accum_head_stride"] == plan.max_total_q * 128 and attn["total_q"] == 4 and attn["capacity"] == 8
    for _ in range(2):   # a NumPy softmax_scale (1 / np.sqrt(d)) keys a step too: validated once
        plan.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], seqused_k=a["seqused_k"], page_table=a["page_table"],
                 out=a["out"], lse=lse, softmax_scale=1 / np.sqrt(np.float64(128)))
    assert counts["validate"] == 2 and len(plan._steps) == 2


def test_plan_run_lse_and_out_allocation(fake_cuda, monkeypatch):
    plan = _plan(monkeypatch)
    a = paged_args(out=False)
    for _ in range(2):
        fake_cuda.clear()
        out, lse = plan.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], seqused_k=a["seqused_k"],
                            page_table=a["page_table"], return_lse=True)
        assert out.shape == (4, 8, 128) and lse.shape == (8, 4)
        f = fake_cuda.launches[1].fields()
        assert f["out"] == out.data_ptr() and f["lse"] == lse.data_ptr()
    out = plan.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], seqused_k=a["seqused_k"], page_table=a["page_table"])
    assert isinstance(out, torch.Tensor) and len(plan._steps) == 2


#: fault -> (mutation of a valid step's arguments, exception, the start of its message)
PLAN_FAULTS = {
    "batch-over-capacity": (lambda a: a.update(cu_seqlens_q=torch.arange(10, dtype=I32),
                                               q=torch.zeros(9, 8, 128, dtype=BF16), out=None,
                                               seqused_k=torch.zeros(9, dtype=I32),
                                               page_table=torch.zeros(9, 6, dtype=I32)),
                            ValueError, "batch 9 exceeds the plan's capacity 8"),
    "dtype": (lambda a: a.update(q=a["q"].half(), k=a["k"].half(), v=a["v"].half(), out=a["out"].half()),
              TypeError, "q must have the plan's dtype torch.bfloat16, got torch.float16"),
    "heads": (lambda a: a.update(q=torch.zeros(4, 4, 128, dtype=BF16), out=torch.zeros(4, 4, 128, dtype=BF16)),
              ValueError, "q/k/v heads and head dims (4, 2, 128, 128) differ from the plan's (8, 2, 128, 128)"),
    "lse-shape": (lambda a: a.update(lse=torch.zeros(8, 5)), ValueError, "lse must have shape (8, 4), got (8, 5)"),
    "lse-dtype": (lambda a: a.update(lse=torch.zeros(8, 4, dtype=torch.float64)), TypeError,
                  "lse must have dtype float32, got float64"),
    "packed": (lambda a: a.update(page_table=None, cu_seqlens_k=torch.arange(5, dtype=I32),
                                  k=torch.zeros(40, 2, 128, dtype=BF16), v=torch.zeros(40, 2, 128, dtype=BF16),
                                  seqused_k=None),
               ValueError, "the plan was made with paged=True; page_table must be given"),
    "softmax_scale": (lambda a: a.update(softmax_scale=-1.0), ValueError,
                      "softmax_scale must be a finite positive number, got -1.0"),
    "softmax_scale-float32": (lambda a: a.update(softmax_scale=3e38), ValueError,
                              "softmax_scale must be at most 1.18e+38 (the kernels take it times log2(e) in float32)"),
    "seqused_k-int64": (lambda a: a.update(seqused_k=a["seqused_k"].long()), TypeError,
                        "seqused_k must have dtype int32, got int64"),
    "seqused_k-shape": (lambda a: a.update(seqused_k=torch.zeros(3, dtype=I32)), ValueError,
                        "seqused_k must have shape (4,) (one length a request), got (3,)"),
    "no-key-lengths": (lambda a: a.update(seqused_k=None), ValueError, "seqused_k is required with a page_table"),
    "misaligned-q": (lambda a: a.update(q=torch.zeros(4 * 8 * 128 + 8, dtype=BF16)[1:4 * 8 * 128 + 1].view(4, 8, 128)),
                     ValueError, "q must start at a 16-byte aligned address"),
    "return_lse-str": (lambda a: a.update(return_lse="yes"), TypeError, "return_lse must be a bool, got str"),
    "sinks-strided": (lambda a: a.update(sinks=torch.zeros(16)[::2]), ValueError,
                      "sinks must be contiguous (stride 1: the kernels read sinks[head] from its address)"),
}


@pytest.mark.parametrize("fault", sorted(PLAN_FAULTS))
def test_plan_faults_raise_the_same_warm_or_cold(fault, fake_cuda, monkeypatch):
    """Each fault raises its own error naming the argument, before anything launches, whether the
    plan has prepared the valid signature or not."""
    plan = _plan(monkeypatch)
    mutate, exc, message = PLAN_FAULTS[fault]

    def run(a):
        return plan.run(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a.get("cu_seqlens_k"), seqused_k=a["seqused_k"],
                        page_table=a["page_table"], out=a["out"], lse=a.get("lse"),
                        softmax_scale=a.get("softmax_scale"), return_lse=a.get("return_lse", False),
                        sinks=a.get("sinks"))

    def faulty():
        a = dict(paged_args(), lse=torch.zeros(8, 4))
        mutate(a)
        return a

    with pytest.raises(exc) as cold:
        run(faulty())
    assert str(cold.value).startswith(message), str(cold.value)
    assert len(plan._steps) == 0
    run(dict(paged_args(), lse=torch.zeros(8, 4)))      # warm the valid signature
    assert len(plan._steps) == 1
    fake_cuda.clear()
    with pytest.raises(exc) as warm:
        run(faulty())
    assert str(warm.value) == str(cold.value)
    assert fake_cuda.launches == []


# ---------------------------------------------------------------------------------------------
# the one-off packers against the pre-issue-9 packer (kept here as the reference)


def _pre_issue9_attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, capacity, scale, *,
                                 seqused_k=None, page_table=None, window=(-1, -1), softcap=0.0, split=None):
    paged = page_table is not None
    total_q, hq, _ = out.shape
    return ATTENTION_PARAMS.pack({
        "q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "out": out.data_ptr(),
        "lse": lse.data_ptr() if lse is not None else 0,
        "cu_seqlens_q": cu_seqlens_q.data_ptr(), "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "page_table": page_table.data_ptr() if paged else 0, "metadata": md.data_ptr(),
        "out_accum": split.out_accum.data_ptr() if split else 0, "lse_accum": split.lse_accum.data_ptr() if split else 0,
        "row_splits": split.row_splits.data_ptr() if split else 0,
        "q_row_stride": q.stride(0), "q_head_stride": q.stride(1),
        "k_row_stride": k.stride(1 if paged else 0), "k_head_stride": k.stride(-2), "k_page_stride": k.stride(0) if paged else 0,
        "v_row_stride": v.stride(1 if paged else 0), "v_head_stride": v.stride(-2), "v_page_stride": v.stride(0) if paged else 0,
        "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
        "lse_head_stride": lse.stride(0) if lse is not None else 0,
        "page_table_stride": page_table.stride(0) if paged else 0,
        "accum_split_stride": split.out_accum.stride(0) if split else 0,
        "accum_head_stride": split.out_accum.stride(1) if split else 0,
        "lse_accum_split_stride": split.lse_accum.stride(0) if split else 0,
        "lse_accum_head_stride": split.lse_accum.stride(1) if split else 0,
        "split_request_rows": split.request_rows if split else 0,   # added after issue 9 (mixed partials)
        "num_heads_q": hq, "num_heads_kv": k.shape[-2], "capacity": capacity, "total_q": total_q,
        "page_size": k.shape[1] if paged else 0, "window_left": window[0], "window_right": window[1],
        "scale_log2": scale * _LOG2E,
        "softcap_scale": scale / softcap if softcap > 0 else 0.0,
        "softcap_log2": softcap * _LOG2E,
    })


def _pre_issue9_combine_params(bufs, cu_seqlens_q, md, out, lse, num_heads_q):
    return COMBINE_PARAMS.pack({
        "out_accum": bufs.out_accum.data_ptr(), "lse_accum": bufs.lse_accum.data_ptr(),
        "row_splits": bufs.row_splits.data_ptr(), "cu_seqlens_q": cu_seqlens_q.data_ptr(), "metadata": md.data_ptr(),
        "out": out.data_ptr(), "lse": lse.data_ptr() if lse is not None else 0,
        "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
        "lse_head_stride": lse.stride(0) if lse is not None else 0,
        "accum_split_stride": bufs.out_accum.stride(0), "accum_head_stride": bufs.out_accum.stride(1),
        "lse_accum_split_stride": bufs.lse_accum.stride(0), "lse_accum_head_stride": bufs.lse_accum.stride(1),
        "num_heads_q": num_heads_q, "total_q": out.shape[0],
    })


def _pre_issue9_scheduler_params(cu_seqlens_q, cu_seqlens_k, seqused_k, md, batch, capacity, cfg):
    return SCHEDULER_PARAMS.pack({
        "cu_seqlens_q": cu_seqlens_q.data_ptr(),
        "cu_seqlens_k": cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else 0,
        "seqused_k": seqused_k.data_ptr() if seqused_k is not None else 0,
        "metadata": md.data_ptr(), "batch": batch, "capacity": capacity, "num_heads": cfg.num_heads,
        "block_m": cfg.block_m, "block_n": cfg.block_n, "pack_factor": cfg.pack_factor,
        "max_splits": cfg.max_splits, "forced_splits": int(cfg.forced_splits), "num_ctas": cfg.num_ctas,
        "max_kvblocks_l2": cfg.max_kvblocks_l2, "swizzle_mult": cfg.swizzle_mult, "sort": int(cfg.sort),
        "class_min_q": cfg.class_min_q, "class_max_q": cfg.class_max_q, "window_left": cfg.window_left,
        "wave_ctas": cfg.wave_ctas,  # (added with the wave-rounded split cap)
        "min_share": cfg.min_share,  # (added with the decode kernels' minimum split share)
    })


def test_one_off_packers_equal_the_pre_issue9_packer():
    from kernelgen.kernels.metadata import SchedulerConfig

    md = torch.zeros(64, dtype=I32)
    for a, lse, split, window, softcap in (
            (paged_args(), None, SplitBuffers.allocate(3, 8, 4, 128, "cpu"), (-1, 0), 0.0),
            (dict(packed_args(), out=torch.zeros(8, 4, 64, dtype=BF16)), torch.zeros(4, 8), None, (4, 0), 30.0),
            (dict(packed_args(seqused=True), out=torch.zeros(8, 4, 64, dtype=BF16)), torch.zeros(4, 9)[:, :8],
             SplitBuffers.allocate(2, 4, 8, 64, "cpu"), (-1, -1), 0.0)):
        args = (a["q"], a["k"], a["v"], a["out"], lse, a["cu_seqlens_q"], a["cu_seqlens_k"], md, 5, 0.125)
        kw = dict(seqused_k=a["seqused_k"], page_table=a["page_table"], window=window, softcap=softcap, split=split)
        assert oneoff.attention_params(*args, **kw) == _pre_issue9_attention_params(*args, **kw)
        if split is not None:
            hq = a["q"].shape[1]
            assert (oneoff.combine_params(split, a["cu_seqlens_q"], md, a["out"], lse, hq)
                    == _pre_issue9_combine_params(split, a["cu_seqlens_q"], md, a["out"], lse, hq))
        cfg = SchedulerConfig(num_heads=3, block_m=16, block_n=16, pack_factor=4, max_splits=7, forced_splits=True,
                              num_ctas=528, max_kvblocks_l2=77, swizzle_mult=2, sort=False, window_left=window[0],
                              wave_ctas=132, min_share=16)
        sargs = (a["cu_seqlens_q"], a["cu_seqlens_k"], a["seqused_k"], md, 2, 5, cfg)
        assert oneoff.scheduler_params(*sargs) == _pre_issue9_scheduler_params(*sargs)
