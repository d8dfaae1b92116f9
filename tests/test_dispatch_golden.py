"""No behaviour change in what the dispatcher chooses: every case of tests/dispatch_golden.py
(varlen_attention calls and AttentionPlans over dtypes, head dims, masks, soft-cap, GQA ratios,
paged caches of 1 to 256-token pages, decode, chunked prefill, mixed batches, split-KV, pack-GQA,
both metadata layouts, forced and automatic mainloops, on a described H200 and A100) recomputed
and compared exactly with tests/data/dispatch_golden.json, which was recorded before the package
was split into subpackages: the kernels loaded (name, spec, rendered source), every launch
(grid, CTA, shared memory, parameter values, pointer wiring, TMA maps), the workspace sizes, the
errors; and the specs ``kernelgen warmup`` derives."""
import json

import pytest

import dispatch_golden as G

GOLDEN = json.loads(G.GOLDEN.read_text())


def _first_difference(a, b, path="") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k, "<missing>") != b.get(k, "<missing>"):
                return _first_difference(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: golden {json.dumps(a)[:400]} != now {json.dumps(b)[:400]}"


def _check(section: str, now: dict) -> None:
    want = GOLDEN[section]
    assert sorted(now) == sorted(want), "the case list changed: regenerate only from unchanged dispatch code"
    bad = [k for k in sorted(want) if want[k] != now[k]]
    assert not bad, f"{len(bad)} of {len(want)} {section} differ; first: {bad[0]}\n" + \
        _first_difference(want[bad[0]], now[bad[0]])


def test_the_golden_file_covers_the_case_list():
    assert len(GOLDEN["calls"]) >= 500 and len(GOLDEN["plans"]) >= 45
    kinds = {tuple(x["kind"] for x in r["launches"]) for r in GOLDEN["calls"].values() if "launches" in r}
    assert {("scheduler", "attention", "combine"), ("scheduler", "attention_sm90"),
            ("scheduler", "scheduler", "fused_sm90", "combine"), ("scheduler", "scheduler", "fused", "combine"),
            ("scheduler", "scheduler", "attention_sm90", "attention", "combine")} <= kinds
    # FP8: an e4m3 cache on the Hopper kernel and on the decode tiles, e4m3 q, K and V on the tensor-core one
    assert {("scheduler", "attention_sm90_fp8"), ("scheduler", "attention_fp8", "combine"),
            ("scheduler", "attention_sm90_fp8mma"), ("scheduler", "attention_sm90_fp8mma", "combine")} <= kinds
    names = {s["name"] for r in GOLDEN["calls"].values() for s in r.get("specs", ())}
    assert any("_masksplit_" in n and "_fp8mma_" in n for n in names)   # heuristics.SM90_MASK_SPLIT_FP8_MMA_HEAD_DIMS
    assert all(r["repeat_same"] for r in GOLDEN["calls"].values() if "launches" in r)


def test_calls_choose_as_before():
    _check("calls", {G._key(c): G.run_call(c) for c in G.call_cases()})


def test_plans_choose_as_before():
    _check("plans", {G._key(c): G.run_plan(c) for c in G.plan_cases()})


@pytest.mark.parametrize("kw", G.WARMUP_ARGS, ids=lambda kw: G._key(kw))
def test_warmup_derives_the_same_specs(kw):
    assert G.run_warmup(kw) == GOLDEN["warmup_specs"][G._key(kw)]
