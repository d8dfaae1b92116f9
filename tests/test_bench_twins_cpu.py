"""CPU tests of the bench's twins (kernelgen/apps/bench/twins.py): a twin runs its call with a kernel
set and a prepared-call cache of its own (jit.runtime.separate_modules,
front.api.separate_signature_cache), and a cost entry times each call beside its twin and reports
the mean of the two loads with their spread."""
from __future__ import annotations

import types

import pytest

from kernelgen.apps.bench import suites, twins
from kernelgen.front import api
from kernelgen.jit import runtime


def test_separate_modules_loads_into_the_store_and_restores_the_process_set(monkeypatch):
    """Inside the block get_kernel looks up and loads into the caller's store (a kernel the process
    holds is loaded again); after it, also after an exception, the process's set is back untouched."""
    loads = []

    def fake_load(spec, ordinal):
        loads.append(spec)
        return f"{spec}@{len(loads)}"
    monkeypatch.setattr(runtime, "_load", fake_load)
    monkeypatch.setattr(runtime, "_loaded", {})
    process = runtime._loaded
    assert runtime.get_kernel("k", 0) == "k@1"
    store: dict = {}
    with runtime.separate_modules(store) as s:
        assert s is store and runtime._loaded is store
        assert not runtime.is_loaded("k", 0)              # the process's kernel is not seen here
        assert runtime.get_kernel("k", 0) == "k@2"        # loaded again, as another module
        assert runtime.is_loaded("k", 0)
        assert runtime.get_kernel("k", 0) == "k@2"        # and kept in the store
        assert not runtime.is_loaded("j", 0)
    assert runtime._loaded is process and process == {(0, "k"): "k@1"}
    assert store == {(0, "k"): "k@2"}
    with pytest.raises(RuntimeError):
        with runtime.separate_modules(store):
            raise RuntimeError("boom")
    assert runtime._loaded is process
    with runtime.separate_modules(store):                  # the store is kept across blocks
        assert runtime.get_kernel("k", 0) == "k@2"
    assert loads == ["k", "k"]


def test_separate_signature_cache_swaps_the_prepared_calls():
    from kernelgen.selection import signature

    process = api._CALLS
    mine = signature.SignatureCache(4)
    with pytest.raises(KeyError):
        with api.separate_signature_cache(mine) as c:
            assert c is mine and api._CALLS is mine
            raise KeyError("x")
    assert api._CALLS is process


def test_a_twin_runs_its_call_in_its_own_stores_every_time():
    seen = []

    def call():
        seen.append((runtime._loaded, api._CALLS))
        return len(seen)
    process = (runtime._loaded, api._CALLS)
    t = twins.Twin(call)
    assert t() == 1 and t() == 2
    assert all(m is t.modules and c is t.calls for m, c in seen)    # the same stores on every call
    assert seen[0][0] is not process[0] and seen[0][1] is not process[1]
    assert (runtime._loaded, api._CALLS) == process
    other = twins.Twin(call)
    other()
    assert seen[2][0] is other.modules and seen[2][0] is not t.modules


def test_with_twins_names_and_merge():
    a, b = (lambda: None), (lambda: None)
    timed = twins.with_twins({"kernelgen": a, "kernelgen_sinks": b})
    assert list(timed) == ["kernelgen", "kernelgen_sinks", "kernelgen~2", "kernelgen_sinks~2"]
    assert timed["kernelgen"] is a and isinstance(timed["kernelgen~2"], twins.Twin) and timed["kernelgen~2"].fn is a
    with pytest.raises(ValueError, match="twin suffix"):
        twins.with_twins({"x~2": a})
    times = {"a": {"us": 100.0}, "a~2": {"us": 110.0}, "b": {"us": 90.0}, "b~2": {"us": 90.0}}
    us, spread = twins.merge(times, ["a", "b"])
    assert us == {"a": 105.0, "b": 90.0}
    assert spread["a"] == pytest.approx(100 / 110) and spread["b"] == 1.0
    with pytest.raises(KeyError):
        twins.merge({"a": {"us": 1.0}}, ["a"])


def test_a_cost_entry_times_both_calls_and_their_twins(monkeypatch):
    """_with_without: four configurations interleaved (each call and its twin, the twins in their
    own stores), us / base the means over the two loads, the ratio of those, the twins' spread."""
    made = []

    def recorder(name):
        def call():
            made.append((name, runtime._loaded is not process_loaded))
        return call
    process_loaded = runtime._loaded
    calls = {suites.SWITCH_BASE: recorder("base"), "kernelgen_sinks": recorder("sinks")}
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setattr(suites, "_torch", lambda: fake_torch)

    class FakeSettings:
        def time_interleaved(self, fns):
            assert list(fns) == ["kernelgen", "kernelgen_sinks", "kernelgen~2", "kernelgen_sinks~2"]
            for fn in fns.values():
                fn()
            return {"kernelgen": {"us": 100.0, "rounds": [100.0]}, "kernelgen~2": {"us": 104.0, "rounds": [104.0]},
                    "kernelgen_sinks": {"us": 103.0, "rounds": [103.0]},
                    "kernelgen_sinks~2": {"us": 105.0, "rounds": [105.0]}}

        def interleaved_method(self):
            return "interleaved"
    e: dict = {}
    suites._with_without(FakeSettings(), e, calls, [], "kernelgen_sinks", "us_nosinks", "sinks_ratio")
    # one eager call each before the timing, then the timing's; the twins in their own kernel sets
    # and each call once more where the twins' kernels are compared (twins.kernels_differ)
    assert made == [("base", False), ("sinks", False), ("base", True), ("sinks", True)] * 2 + [("base", False),
                                                                                               ("sinks", False)]
    assert e["twin_kernels_differ"] == []      # (these calls prepare nothing: nothing to compare)
    assert e["us"] == 104.0 and e["us_nosinks"] == 102.0
    assert e["sinks_ratio"] == pytest.approx(104 / 102)
    assert e["twin_spread"] == {"kernelgen": pytest.approx(100 / 104), "kernelgen_sinks": pytest.approx(103 / 105)}
    assert set(e["switch_us"]) == {"kernelgen", "kernelgen~2", "kernelgen_sinks", "kernelgen_sinks~2"}
    assert e["method"] == "interleaved" + suites.TWINS_METHOD


def test_kernels_differ_compares_each_call_with_its_twin(monkeypatch):
    """A twin that prepared another attention kernel than its call is named; equal kernels, or a
    call that keeps no prepared call, are not."""
    from kernelgen.selection import signature

    def prepared(name):
        return types.SimpleNamespace(attn=types.SimpleNamespace(name=name))

    kernel_of = {"a": "attn_x", "b": "attn_y", "c": None}

    def call(name):
        def run():
            if kernel_of[name] is not None:
                api._CALLS.put(("key", name), prepared(kernel_of[name]))
        return run
    monkeypatch.setattr(api, "_CALLS", signature.SignatureCache(8))
    timed = twins.with_twins({n: call(n) for n in "abc"})
    for fn in timed.values():
        fn()
    assert twins.kernels_differ(timed) == []
    kernel_of["b"] = "attn_z"          # the process's call now prepares another kernel than its twin did
    api._CALLS.clear()
    assert twins.kernels_differ(timed) == ["b"]
    assert twins.attention_kernel(signature.SignatureCache(2)) is None


def test_a_twin_launches_only_its_own_loads(fake_cuda, monkeypatch):
    """End to end on the fake driver: every launch of a twin's call (eager, through the graph-launch
    path, and under capture) uses the functions of the twin's own loads, every launch of the call
    the process's (sm_80 paged with ALiBi / sinks, and the Hopper path)."""
    import dataclasses

    import fake_cuda as FC
    import torch
    from test_signature_cache import packed_args, paged_args

    offset = 0x1000000
    rec, loads, funcs = fake_cuda, [], []
    base_load = runtime._load

    def load(spec, ordinal):            # every further load of a spec: another function handle
        k, n = base_load(spec, ordinal), loads.count(spec)
        loads.append(spec)
        if n:
            FC.KIND[k.func_ptr + offset * n] = FC.KIND[k.func_ptr]
            k = dataclasses.replace(k, func_ptr=k.func_ptr + offset * n)
        return k
    monkeypatch.setattr(runtime, "_load", load)
    orig_record, orig_read = rec.record, rec.graph_driver._read
    monkeypatch.setattr(rec, "record", lambda f, *a: (funcs.append(f), orig_record(f, *a))[1])
    monkeypatch.setattr(rec.graph_driver, "_read", lambda p: (lambda r: (funcs.append(r[0]), r)[1])(orig_read(p)))

    def make(a, **kw):
        return lambda: api.varlen_attention(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"],
                                            a["max_seqlen_q"], a["max_seqlen_k"], seqused_k=a["seqused_k"],
                                            page_table=a["page_table"], out=a["out"], **kw)
    pa, hop = paged_args(), packed_args(lens=(300,), klens=(300,), hq=8, hkv=8, d=128, dv=128)
    s = torch.rand(8, dtype=torch.float32)
    calls = {"paged": make(pa, causal=True), "paged_alibi": make(pa, causal=True, alibi_slopes=s),
             "paged_sinks": make(pa, causal=True, sinks=s), "hopper": make(hop, causal=True),
             "hopper_alibi": make(hop, causal=True, alibi_slopes=s)}
    timed = twins.with_twins(calls)
    for rnd in range(3):                # eager (direct launch), eager (graph launch), under capture
        rec.capturing = rnd == 2
        for name, c in timed.items():
            funcs.clear()
            c()
            assert funcs and all((f >= offset) == name.endswith(twins.TWIN) for f in funcs), (rnd, name, funcs)
    rec.capturing = False
    assert twins.kernels_differ(timed) == []
