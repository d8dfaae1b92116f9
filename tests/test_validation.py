"""Bad input gets a clear exception naming the argument (CPU: shapes checked on "meta" tensors)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelgen
from kernelgen.selection import validation as V

META = ("cuda", "meta")


def make(total_q=10, total_k=12, hq=8, hkv=2, d=64, dv=None, dtype=torch.bfloat16, batch=2):
    dv = d if dv is None else dv
    q = torch.empty(total_q, hq, d, dtype=dtype, device="meta")
    k = torch.empty(total_k, hkv, d, dtype=dtype, device="meta")
    v = torch.empty(total_k, hkv, dv, dtype=dtype, device="meta")
    cq = torch.empty(batch + 1, dtype=torch.int32, device="meta")
    ck = torch.empty(batch + 1, dtype=torch.int32, device="meta")
    return dict(q=q, k=k, v=v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=5, max_seqlen_k=6, out=None)


def check(**kw):
    args = make()
    args.update(kw)
    return V.varlen_inputs(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["cu_seqlens_k"],
                           args["max_seqlen_q"], args["max_seqlen_k"], args["out"], devtypes=META)


def test_good_input_sizes():
    s = check()
    assert s == {"total_q": 10, "total_k": 12, "num_heads_q": 8, "num_heads_kv": 2, "head_dim": 64,
                 "head_dim_v": 64, "batch": 2, "paged": False, "dtype": torch.bfloat16}


M = lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, dtype=dtype, device="meta")  # noqa: E731

CASES = [
    (dict(q="not a tensor"), TypeError, "q must be a torch.Tensor"),
    (dict(q=M(10, 8, 64, dtype=torch.float32)), TypeError, "q must have dtype"),
    (dict(k=M(12, 2, 64, dtype=torch.float16)), TypeError, "k must have dtype bfloat16"),
    (dict(q=M(10, 8)), ValueError, "q must have 3 dimensions"),
    (dict(k=M(12, 2, 32)), ValueError, "k head_dim 32 must equal q head_dim 64"),
    (dict(v=M(11, 2, 64)), ValueError, "v must have shape"),
    (dict(q=M(10, 8, 80), k=M(12, 2, 80), v=M(12, 2, 80)), ValueError, "head_dim must be one of"),
    (dict(v=M(12, 2, 72)), ValueError, "head_dim_v must be one of"),
    (dict(k=M(12, 3, 64), v=M(12, 3, 64)), ValueError, "must be a positive multiple of k num_heads"),
    (dict(q=M(10, 32768, 64), k=M(12, 1, 64), v=M(12, 1, 64)), ValueError,
     "q num_heads must be <= 32767 \\(the scheduler metadata's 15-bit head field\\), got 32768"),
    (dict(q=M(10, 64, 8).transpose(1, 2)), ValueError, "q must be contiguous in its last dimension"),
    (dict(q=torch.empty(10, 8, 64 + 4, dtype=torch.bfloat16, device="meta")[:, :, :64]), ValueError, "q stride"),
    (dict(cu_seqlens_q=M(3, dtype=torch.int64)), TypeError, "cu_seqlens_q must have dtype int32"),
    (dict(cu_seqlens_k=M(3, 1, dtype=torch.int32)), ValueError, "cu_seqlens_k must have 1 dimensions"),
    (dict(cu_seqlens_k=M(4, dtype=torch.int32)), ValueError, "cu_seqlens_k must have batch\\+1 = 3"),
    (dict(cu_seqlens_q=M(0, dtype=torch.int32)), ValueError, "cu_seqlens_q must have batch\\+1 >= 1"),
    (dict(cu_seqlens_q=M(6, dtype=torch.int32)[::2]), ValueError, "cu_seqlens_q must be contiguous"),
    (dict(max_seqlen_q=3.5), TypeError, "max_seqlen_q must be an int"),
    (dict(max_seqlen_k=-1), ValueError, "max_seqlen_k must be >= 0"),
    (dict(out=M(10, 8, 32)), ValueError, "out must have shape \\(10, 8, 64\\)"),
    (dict(out=M(10, 8, 64, dtype=torch.float16)), TypeError, "out must have dtype bfloat16"),
]


@pytest.mark.parametrize("kw,exc,msg", CASES)
def test_validation_matrix(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        check(**kw)


def test_cpu_tensors_rejected_by_public_call():
    q = torch.randn(4, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="q must be on a CUDA device"):
        kernelgen.varlen_attention(q, q, q, cu, cu, 4, 4)


def test_scalar_options():
    assert V.softmax_scale(None, 64) == pytest.approx(0.125)
    assert V.softmax_scale(0.5, 64) == 0.5
    for bad, exc in ((0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), ("x", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="softmax_scale"):
            V.softmax_scale(bad, 64)
    assert V.layout("aos") == "aos"
    with pytest.raises(ValueError, match="metadata_layout must be one of"):
        V.layout("SoA")


def test_host_value_check():
    V.check_cu_seqlens_values("cu_seqlens_q", torch.tensor([0, 3, 3, 7], dtype=torch.int32), 7)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[0\] must be 0"):
        V.check_cu_seqlens_values("cu_seqlens_q", torch.tensor([1, 3], dtype=torch.int32), 7)
    with pytest.raises(ValueError, match="non-decreasing"):
        V.check_cu_seqlens_values("cu_seqlens_k", torch.tensor([0, 3, 2], dtype=torch.int32), 7)
    with pytest.raises(ValueError, match="exceeds the 7 rows"):
        V.check_cu_seqlens_values("cu_seqlens_k", torch.tensor([0, 3, 8], dtype=torch.int32), 7)


@settings(max_examples=150, deadline=None)
@given(hq=st.integers(1, 40), hkv=st.integers(1, 40), d=st.sampled_from([32, 64, 96, 100, 128, 192, 256, 512]),
       batch=st.integers(0, 5), extra_k=st.integers(0, 2))
def test_validation_property(hq, hkv, d, batch, extra_k):
    """Valid shapes pass and return consistent sizes; invalid ones fail with a message naming an argument."""
    args = make(hq=hq, hkv=hkv, d=d, batch=batch)
    args["cu_seqlens_k"] = torch.empty(batch + 1 + extra_k, dtype=torch.int32, device="meta")
    ok = hq % hkv == 0 and d in (64, 96, 128, 192, 256) and extra_k == 0
    if ok:
        s = V.varlen_inputs(*[args[n] for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                                 "max_seqlen_k", "out")], devtypes=META)
        assert (s["num_heads_q"], s["num_heads_kv"], s["head_dim"], s["batch"]) == (hq, hkv, d, batch)
    else:
        with pytest.raises(ValueError) as ei:
            V.varlen_inputs(*[args[n] for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                                 "max_seqlen_k", "out")], devtypes=META)
        assert any(name in str(ei.value) for name in ("head_dim", "num_heads", "cu_seqlens_k"))


def paged_args(num_pages=40, page_size=16, batch=2, max_pages=5, **kw):
    a = make(batch=batch)
    a["k"] = M(num_pages, page_size, 2, 64)
    a["v"] = M(num_pages, page_size, 2, 64)
    a["cu_seqlens_k"] = None
    a["seqused_k"] = M(batch, dtype=torch.int32)
    a["page_table"] = M(batch, max_pages, dtype=torch.int32)
    a.update(kw)
    return a


def check_paged(**kw):
    a = paged_args(**kw)
    return V.varlen_inputs(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], 5, 6, a["out"],
                           devtypes=META, seqused_k=a["seqused_k"], page_table=a["page_table"])


def test_paged_sizes():
    s = check_paged()
    assert s["paged"] and s["num_pages"] == 40 and s["page_size"] == 16 and s["max_pages"] == 5


PAGED_CASES = [
    (dict(k=M(12, 2, 64)), ValueError, "k must be a paged cache"),
    (dict(cu_seqlens_k=M(3, dtype=torch.int32)), ValueError, "cu_seqlens_k must be None with a page_table"),
    (dict(seqused_k=None), ValueError, "seqused_k is required with a page_table"),
    (dict(page_table=M(2, 5, dtype=torch.int64)), TypeError, "page_table must have dtype int32"),
    (dict(page_table=M(3, 5, dtype=torch.int32)), ValueError, "page_table must have batch = 2 rows"),
    (dict(page_table=M(5, 2, dtype=torch.int32).t()), ValueError, "page_table must be contiguous"),
    (dict(seqused_k=M(3, dtype=torch.int32)), ValueError, "seqused_k must have shape \\(2,\\)"),
    (dict(seqused_k=M(2, dtype=torch.int64)), TypeError, "seqused_k must have dtype int32"),
    (dict(v=M(40, 8, 2, 64)), ValueError, "v must have shape"),
]


@pytest.mark.parametrize("kw,exc,msg", PAGED_CASES)
def test_paged_validation(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        check_paged(**kw)


def test_packed_needs_cu_seqlens_k():
    with pytest.raises(ValueError, match="cu_seqlens_k is required"):
        check(cu_seqlens_k=None)


def test_window_softcap_splits():
    assert V.window((-1, -1), False) == ("none", -1, -1)
    assert V.window((-1, -1), True) == ("causal", -1, 0)
    assert V.window((-1, 0), False) == ("causal", -1, 0)
    assert V.window((128, -1), True) == ("local", 128, 0)
    assert V.window((64, 8), False) == ("local", 64, 8)
    for bad, exc in (((-2, 0), ValueError), ((1,), TypeError), ("x", TypeError), ((1.5, 2), TypeError)):
        with pytest.raises(exc, match="window_size"):
            V.window(bad, False)
    assert V.softcap(0) == 0.0 and V.softcap(30) == 30.0
    with pytest.raises(ValueError, match="softcap"):
        V.softcap(-1.0)
    assert V.num_splits(0) == 0 and V.num_splits(64) == 64
    with pytest.raises(ValueError, match="num_splits"):
        V.num_splits(129)
    with pytest.raises(TypeError, match="num_splits"):
        V.num_splits(2.0)


def test_paged_host_value_check():
    pt = torch.tensor([[0, 1, 2], [3, 4, 0]], dtype=torch.int32)
    V.check_paged_values(pt, torch.tensor([40, 20], dtype=torch.int32), num_pages=5, page_size=16)
    with pytest.raises(ValueError, match="too narrow"):
        V.check_paged_values(pt, torch.tensor([49, 20], dtype=torch.int32), num_pages=5, page_size=16)
    with pytest.raises(ValueError, match=r"page_table\[1\] has page ids outside"):
        V.check_paged_values(pt, torch.tensor([40, 20], dtype=torch.int32), num_pages=4, page_size=16)


def test_window_bounds_and_seqused_and_lse_checks():
    V.window((V.MAX_WINDOW, 0), False)
    with pytest.raises(ValueError, match="window_size entries must be in"):
        V.window((-1, 2**31 - 1), False)
    with pytest.raises(ValueError, match="window_size entries must be in"):
        V.window((2**31, 0), True)
    cu = torch.tensor([0, 5, 5, 9], dtype=torch.int32)
    V.check_seqused_values(torch.tensor([5, 0, 3], dtype=torch.int32), cu)
    with pytest.raises(ValueError, match=r"seqused_k\[0\] = 6 must be in \[0, 5\]"):
        V.check_seqused_values(torch.tensor([6, 0, 3], dtype=torch.int32), cu)
    with pytest.raises(ValueError, match=r"seqused_k\[2\] = -1"):
        V.check_seqused_values(torch.tensor([5, 0, -1], dtype=torch.int32), cu)
    dev = torch.device("meta")
    V.lse_buffer(torch.empty(8, 10, device="meta"), 8, 10, dev)
    with pytest.raises(ValueError, match="lse must be contiguous along tokens"):
        V.lse_buffer(torch.empty(10, 8, device="meta").t(), 8, 10, dev)
    with pytest.raises(ValueError, match="lse must have shape"):
        V.lse_buffer(torch.empty(8, 11, device="meta"), 8, 10, dev)
    with pytest.raises(TypeError, match="lse must have dtype float32"):
        V.lse_buffer(torch.empty(8, 10, device="meta", dtype=torch.float16), 8, 10, dev)
    with pytest.raises(ValueError, match="lse must be on"):
        V.lse_buffer(torch.empty(8, 10), 8, 10, dev)
    with pytest.raises(ValueError, match=r"^lse must not have elements that share memory \(an expanded or "
                                         r"overlapping view\), got shape \(8, 10\) with strides \(0, 1\)$"):
        V.lse_buffer(torch.empty(1, 10, device="meta").expand(8, 10), 8, 10, dev)
    V.lse_buffer(torch.empty(1, 10, device="meta"), 1, 10, dev)   # one head: its row stride is never used


def test_written_tensors_must_not_share_memory():
    """``no_overlap``: out / lse views whose elements alias each other are refused (the kernels'
    writes would race); every non-overlapping layout passes, in any stride order."""
    x = torch.empty(10, 8, 64, device="meta")
    V.no_overlap("out", x)
    V.no_overlap("out", torch.empty(8, 10, 64, device="meta").transpose(0, 1))     # heads-major
    V.no_overlap("out", torch.empty(10, 16, 64, device="meta")[:, ::2])             # every other head
    V.no_overlap("out", torch.empty(1, 8, 64, device="meta").expand(1, 8, 64))      # a size-1 dim's stride
    V.no_overlap("out", torch.empty(0, 8, 64, device="meta"))
    for bad in (x[:1].expand(10, 8, 64), x.as_strided((10, 8, 64), (64, 8, 1)), x.as_strided((10, 8, 64), (512, 64, 2)),
                x[:, :1].expand(10, 8, 64)):
        with pytest.raises(ValueError, match=r"^out must not have elements that share memory"):
            V.no_overlap("out", bad)


@pytest.mark.parametrize("device,index", [("cuda", 3), (torch.device("cuda"), 3), ("cuda:1", 1), (1, 1),
                                          (torch.device("cuda", 0), 0)])
def test_plan_takes_the_cuda_device_it_names(monkeypatch, device, index):
    """AttentionPlan(device="cuda") (or torch.device("cuda")): the current CUDA device, as torch
    means it, not device index None (cupy's getDeviceProperties(None) raised "TypeError: an integer
    is required", and steps on cuda:N tensors would not match a plan made on "cuda"); an explicit
    index below torch.cuda.device_count(): that device."""
    from kernelgen.jit import runtime

    class Stop(Exception):
        pass

    asked = []

    def read_device(ordinal):
        asked.append(ordinal)
        raise Stop

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(runtime, "device", read_device)
    with pytest.raises(Stop):
        kernelgen.AttentionPlan(max_batch=4, num_heads_q=2, num_heads_kv=1, head_dim=64, device=device)
    assert asked == [index]


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "meta", "nonsense", 1.5, -1, "cuda:-1", True, 128, 255,
                                    256, "cuda:300", "cpu:0"])
def test_plan_device_that_is_not_cuda_is_refused_naming_it(monkeypatch, device):
    """AttentionPlan(device="cpu") raised CuPy's "TypeError: an integer is required" from the device
    query, naming nothing (a new user's find): a device that is not CUDA, or names none, is a
    ValueError naming ``device`` before any CUDA call; so is an index torch would wrap (it keeps 8 bits:
    256 read as cuda:0, 255 as the current device: a review's find)."""
    from kernelgen.jit import runtime

    monkeypatch.setattr(runtime, "device", lambda ordinal: pytest.fail("the device was read"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("the CUDA device was looked up"))
    with pytest.raises(ValueError, match="^device: "):
        kernelgen.AttentionPlan(max_batch=4, num_heads_q=2, num_heads_kv=1, head_dim=64, device=device)


@pytest.mark.parametrize("device", ["cuda:2", 5, torch.device("cuda", 3)])
def test_plan_on_a_cuda_index_past_the_devices_is_refused_naming_it(monkeypatch, device):
    """An index past torch.cuda.device_count() is the docstring's ValueError naming ``device`` (it gave
    CuPy's cudaErrorInvalidDevice, or on a machine without a driver cudaErrorInsufficientDriver)."""
    from kernelgen.jit import runtime

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(runtime, "device", lambda ordinal: pytest.fail("the device was read"))
    with pytest.raises(ValueError, match=r"^device: no CUDA device index \d \(2 visible\), got "):
        kernelgen.AttentionPlan(max_batch=4, num_heads_q=2, num_heads_kv=1, head_dim=64, device=device)


@pytest.mark.parametrize("device", ["cuda:0", 0])
def test_plan_on_a_cuda_index_without_a_cuda_device_says_so(monkeypatch, device):
    from kernelgen.jit import runtime

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(runtime, "device", lambda ordinal: pytest.fail("the device was read"))
    with pytest.raises(RuntimeError, match=r"^AttentionPlan needs a CUDA device: torch.cuda.device_count\(\) is 0$"):
        kernelgen.AttentionPlan(max_batch=4, num_heads_q=2, num_heads_kv=1, head_dim=64, device=device)


@pytest.mark.parametrize("device", [None, "cuda", torch.device("cuda")])
def test_plan_without_a_cuda_device_says_so(monkeypatch, device):
    """With no CUDA device, None and "cuda" give the same RuntimeError ("cuda" gave torch's bare one)."""
    def no_cuda():
        raise RuntimeError("Found no NVIDIA driver on your system.")

    monkeypatch.setattr(torch.cuda, "current_device", no_cuda)
    with pytest.raises(RuntimeError, match="^AttentionPlan needs a CUDA device: Found no NVIDIA driver"):
        kernelgen.AttentionPlan(max_batch=4, num_heads_q=2, num_heads_kv=1, head_dim=64, device=device)


@pytest.mark.parametrize("bad,err,match", [
    (dict(head_dim=100), ValueError, "head_dim"),
    (dict(head_dim_v=80), ValueError, "head_dim"),
    (dict(window_size=(-5, 0)), ValueError, "window_size"),
    (dict(metadata_layout="xyz"), ValueError, "metadata_layout"),
    (dict(variant="score + 1"), TypeError, "variant"),
    ("changed", ValueError, "variant tensor 'b' has dtype torch.float64 now"),
])
def test_plan_arguments_are_checked_before_the_device(monkeypatch, bad, err, match):
    """A bad plan argument raises its own error naming it also where no CUDA device is (a new
    user's find: head_dim=100 raised "AttentionPlan needs a CUDA device" on a machine without one,
    while a bad num_heads_kv got its ValueError)."""
    def no_cuda():
        raise RuntimeError("Found no NVIDIA driver on your system.")

    monkeypatch.setattr(torch.cuda, "current_device", no_cuda)
    if bad == "changed":   # a Variant whose tensor changed dtype in place since it was made
        t = torch.zeros(2)
        bad = dict(variant=kernelgen.Variant(score_mod="score + b[head]", tensors={"b": t}))
        t.data = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(err, match=match):
        kernelgen.AttentionPlan(**{**dict(max_batch=4, num_heads_q=2, num_heads_kv=1, head_dim=64), **bad})


def test_error_classes_are_top_level_names():
    """The errors a call raises besides TypeError/ValueError are public top-level names (the
    modules that define them moved when the package was split into layers)."""
    import kernelgen
    from kernelgen.jit.cache import KernelNotCachedError
    from kernelgen.jit.compiler import CompileError
    from kernelgen.launch.launch import LaunchError

    assert kernelgen.CompileError is CompileError and kernelgen.LaunchError is LaunchError
    assert kernelgen.KernelNotCachedError is KernelNotCachedError
    assert {"CompileError", "KernelNotCachedError", "LaunchError"} <= set(dir(kernelgen)) & set(kernelgen.__all__)


def test_dir_kernelgen_lists_the_lazy_public_names_without_importing_torch():
    """``dir(kernelgen)`` in a fresh interpreter shows the public calls (they are lazy attributes,
    listed by the module's ``__dir__``) and importing kernelgen does not import torch."""
    import subprocess
    import sys

    code = ("import sys, kernelgen; d = dir(kernelgen); "
            "print(sorted(set(d) & {'varlen_attention', 'AttentionPlan', '__version__', 'ops', 'compat'})); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "['AttentionPlan', '__version__', 'compat', 'ops', 'varlen_attention']"
    assert out[1] == "False"


PLAN_FAULTS = [
    (dict(num_heads_q=0), ValueError, "num_heads_q must be >= 1"),        # was a ZeroDivisionError in the heuristics
    (dict(num_heads_q=8.0), TypeError, "num_heads_q must be an int"),
    (dict(num_heads_kv=0), ValueError, "num_heads_kv must be >= 1"),
    (dict(head_dim="128"), TypeError, "head_dim must be an int"),
    (dict(head_dim_v=64.0), TypeError, "head_dim_v must be an int"),
    (dict(max_total_q=-5), ValueError, "max_total_q must be >= 0"),      # was a negative workspace size
    (dict(max_total_q=0), ValueError, "max_total_q must be >= 1"),
    (dict(max_total_q=2.9), TypeError, "max_total_q must be an int"),     # was truncated to 2
    (dict(max_total_q="4"), TypeError, "max_total_q must be an int"),
    (dict(pack_gqa="false"), TypeError, "pack_gqa must be None or a bool"),   # was truthy: packed
    (dict(sort="no"), TypeError, "sort must be a bool"),
    (dict(head_swizzle="no"), TypeError, "head_swizzle must be a bool"),
    (dict(causal="False"), TypeError, "causal must be a bool"),
    (dict(paged="yes"), TypeError, "paged must be a bool"),
    (dict(sinks="yes"), TypeError, "sinks must be a bool"),
    (dict(alibi=2), TypeError, "alibi must be a bool"),
    (dict(softcap=3e38), ValueError, "softcap must be at most"),
    (dict(softcap=1e-40), ValueError, r"softcap \(1e-40\) is too small for softmax_scale \(0.125\)"),
    (dict(quantize_q=1), TypeError, "quantize_q must be a bool, got int"),
    (dict(max_batch=0), ValueError, r"max_batch must be in \[1, 8192\], got 0"),
    (dict(dtype=torch.float32), TypeError, "dtype must be torch.float16 or torch.bfloat16, got torch.float32"),
    (dict(num_heads_q=6, num_heads_kv=4), ValueError, r"num_heads_q \(6\) must be a multiple of num_heads_kv \(4\)"),
    (dict(num_heads_q=32768, num_heads_kv=1), ValueError, r"num_heads_q must be <= 32767 .*, got 32768"),
]

#: AttentionPlan's options checked with the device's index known (``arguments.plan_options``), still
#: before the device is read.
PLAN_OPTION_FAULTS = [
    (dict(page_size=16), ValueError, r"page_size \(16\) needs paged=True and at least 1 token"),
    (dict(metadata_layout="SoA"), ValueError, "metadata_layout must be one of"),
    (dict(num_splits=129), ValueError, r"num_splits must be in \[0, 128\]"),
    (dict(window_size=(-2, 0)), ValueError, "window_size entries must be in"),
]


@pytest.mark.parametrize("kw,exc,msg", PLAN_FAULTS, ids=[f"{list(k)[0]}={list(k.values())[0]!r}" for k, *_ in PLAN_FAULTS])
def test_plan_options_are_checked_before_anything_runs(monkeypatch, kw, exc, msg):
    """AttentionPlan's options: each bad one raises naming itself before the device is read (a
    review found them passed through ``int()`` / truth tests, or failing deep in the heuristics)."""
    from kernelgen.jit import runtime

    monkeypatch.setattr(runtime, "device", lambda ordinal: pytest.fail("the device was read before the checks"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("the device was looked up first"))
    base = dict(max_batch=4, num_heads_q=8, num_heads_kv=2, head_dim=64)
    for device in (None, "cuda:0"):   # (with None the CUDA lookup came first: a RuntimeError without CUDA)
        with pytest.raises(exc, match=f"^{msg}"):
            kernelgen.AttentionPlan(**{**base, **kw}, device=device)


@pytest.mark.parametrize("kw,exc,msg", PLAN_OPTION_FAULTS,
                         ids=[f"{list(k)[0]}={list(k.values())[0]!r}" for k, *_ in PLAN_OPTION_FAULTS])
def test_plan_option_faults_before_the_device_is_read(monkeypatch, kw, exc, msg):
    from kernelgen.jit import runtime

    monkeypatch.setattr(runtime, "device", lambda ordinal: pytest.fail("the device was read before the checks"))
    with pytest.raises(exc, match=f"^{msg}"):
        kernelgen.AttentionPlan(max_batch=4, num_heads_q=8, num_heads_kv=2, head_dim=64, device="cuda:0", **kw)


def test_boolean_options():
    """``validation.flag``: bools and NumPy bools pass as Python bools; anything else (ints too, as
    ``pack_gqa`` and ``quantize_q`` always refused them) names the argument and its type."""
    import numpy as np

    got = [V.flag("causal", x) for x in (True, False, np.bool_(True), np.bool_(False))]
    assert got == [True, False, True, False] and all(type(x) is bool for x in got)
    assert V.optional_flag("pack_gqa", None) is None and V.optional_flag("pack_gqa", np.True_) is True
    for bad, name in (("False", "str"), (1, "int"), (0, "int"), (np.int64(1), "int64"), (1.0, "float"),
                      (None, "NoneType"), (torch.tensor(True), "Tensor")):
        with pytest.raises(TypeError, match=f"^causal must be a bool, got {name}$"):
            V.flag("causal", bad)
    with pytest.raises(TypeError, match="^pack_gqa must be None or a bool, got int$"):
        V.optional_flag("pack_gqa", 1)


def test_scale_and_softcap_stay_float32():
    """The kernels take ``softmax_scale * log2(e)``, ``softcap * log2(e)`` and ``softmax_scale /
    softcap`` in float32: values whose products overflow are refused naming the argument (they
    raised an OverflowError from struct.pack, naming nothing)."""
    import struct

    top = V.SCALAR_MAX
    struct.pack("f", top * 1.4426950408889634)   # the bound itself packs
    assert V.softmax_scale(top, 64) == top and V.softcap(top) == top
    with pytest.raises(ValueError, match="^softmax_scale must be at most"):
        V.softmax_scale(top * 1.01, 64)
    with pytest.raises(ValueError, match="^softcap must be at most"):
        V.softcap(top * 1.01)
    V.softcap_ratio(0.125, 30.0)
    V.softcap_ratio(0.125, 0.0)   # no soft-cap: no ratio
    with pytest.raises(ValueError, match=r"^softcap \(1e-40\) is too small for softmax_scale \(0.125\)"):
        V.softcap_ratio(0.125, 1e-40)


def test_sinks_must_be_contiguous():
    dev = torch.device("cpu")
    V.sinks(torch.zeros(8), 8, dev)
    V.sinks(torch.zeros(2)[::2], 1, dev)   # one head: its stride is never used
    for bad in (torch.zeros(16)[::2], torch.zeros(1).expand(8)):
        with pytest.raises(ValueError, match=r"^sinks must be contiguous .* pass sinks.contiguous\(\)"):
            V.sinks(bad, 8, dev)
