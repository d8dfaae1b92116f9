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
        assert runtime.get_kernel("k", 0) == "k@2"        # loaded again, as another module
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
    assert seen[0] == seen[1] == (t.modules, t.calls)
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
    assert made == [("base", False), ("sinks", False), ("base", True), ("sinks", True)] * 2
    assert e["us"] == 104.0 and e["us_nosinks"] == 102.0
    assert e["sinks_ratio"] == pytest.approx(104 / 102)
    assert e["twin_spread"] == {"kernelgen": pytest.approx(100 / 104), "kernelgen_sinks": pytest.approx(103 / 105)}
    assert set(e["switch_us"]) == {"kernelgen", "kernelgen~2", "kernelgen_sinks", "kernelgen_sinks~2"}
    assert e["method"] == "interleaved" + suites.TWINS_METHOD
