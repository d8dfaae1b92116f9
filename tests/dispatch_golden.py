"""What the dispatcher chooses, recorded on the CPU for a broad set of call signatures.

Each case runs ``kernelgen.varlen_attention`` (twice: the validating path, then the prepared one)
or an ``AttentionPlan`` (``run``, then ``schedule`` + ``attend``) through the fake-CUDA harness
(tests/fake_cuda.py) on a described device (an H200: cc 9.0, 132 SMs, 60 MiB L2; or an A100:
cc 8.0, 108 SMs, 40 MiB L2), and records what would reach the driver:

- every kernel loaded, in load order: its name, a hash of its ``to_json()`` and a hash of its
  rendered source with the compile options;
- every launch, in order: kind, grid, CTA size, dynamic shared memory, the parameter struct's
  values (pointers named by what they point to: an input tensor, or an offset into the
  workspace), and the TMA maps' dimensions, strides and boxes;
- the workspace sizes, and the plan's scheduler configuration;
- or the error a case raises (type and message).

FP8 calls (an e4m3 cache with a bf16 q, and e4m3 q, K and V: ``FP8_AXES``) are cases of their own, with
an ``fp8`` key the others lack; their kernels' own parameter fields (the descales) are named like the
base ones.

The fake loader gives each kernel a persistent grid of (the harness's CTAs per SM) x (the
described device's SMs).  ``warmup_specs`` of a few argument sets is recorded as well.

``python tests/dispatch_golden.py`` rewrites tests/data/dispatch_golden.json;
tests/test_dispatch_golden.py recomputes every case and compares exactly.  The file was made
from the code before the package moved into subpackages, so the test proves the move kept
every choice.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_cuda as FC  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.jit import compiler, render, runtime  # noqa: E402
from kernelgen.kernels.device import Device  # noqa: E402
from kernelgen.kernels.params import ATTENTION_PARAMS, COMBINE_PARAMS, SCHEDULER_PARAMS  # noqa: E402
from kernelgen.selection import catalog  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "dispatch_golden.json"

DEVICES = {
    "H200": {"name": "fake H200", "cc": (9, 0), "num_sms": 132, "l2_bytes": 60 * 2 ** 20, "smem_optin": 232448},
    "A100": {"name": "fake A100", "cc": (8, 0), "num_sms": 108, "l2_bytes": 40 * 2 ** 20, "smem_optin": 166912},
}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
#: Environment variables that change the choice: unset while the cases run.
ENV_KNOBS = ("KERNELGEN_ARCH", "KERNELGEN_SM90_OPTS", "KERNELGEN_SM90_SHORT_ROWS", "KERNELGEN_MIXED_SHORT_CTAS",
             "KERNELGEN_CHECK_INPUTS", "KERNELGEN_FP8_FUSED", "KERNELGEN_SM90_PACK_GQA", "KERNELGEN_TIERED_COMPILE")
POINTERS = {k: set(p.pointer_names) for k, p in (("scheduler", SCHEDULER_PARAMS), ("attention", ATTENTION_PARAMS),
                                                 ("combine", COMBINE_PARAMS))}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_SPEC_CACHE: dict = {}


def spec_record(spec) -> dict:
    """Name, to_json hash and rendered-source hash of a spec."""
    r = _SPEC_CACHE.get(spec)
    if r is None:
        src = render.render(spec) + "\n" + " ".join(compiler.default_options(spec.arch))
        r = _SPEC_CACHE[spec] = {"name": spec.name, "json": _hash(json.dumps(spec.to_json(), sort_keys=True)),
                                 "source": _hash(src)}
    return r


# ------------------------------------------------------------------------------------ cases
def _lengths(scenario: str, rng: random.Random):
    """(query lengths, key lengths) of a scenario's batch."""
    if scenario == "prefill":
        return [300, 77, 1024], [300, 77, 1024]
    if scenario == "decode":
        return [1] * 8, [rng.randint(1, 5000) for _ in range(8)]
    if scenario == "spec_decode":
        return [4] * 6, [rng.randint(100, 3000) for _ in range(6)]
    if scenario == "chunked":
        return [512, 1024], [4096, 9000]
    if scenario == "mixed":
        return [300, 1, 1, 3, 2048, 1, 0], [900, 40, 5000, 7, 2048, 1, 0]
    if scenario == "long_decode":
        return [1] * 3, [60000, 1, 30000]
    raise ValueError(scenario)


BASE = dict(device="H200", arch=None, dtype="bf16", d=128, dv=128, hq=8, hkv=8, mask="causal", softcap=0.0,
            paged=False, page_size=16, num_splits=0, pack_gqa=None, layout="soa", sqt=None, lse=False,
            scenario="prefill", sort=True, swizzle=True)

AXES = {
    "device": ["A100"],
    "arch": ["sm_80", "sm_90a", "auto"],
    "dtype": ["fp16"],
    "dims": [(64, 64), (96, 96), (192, 192), (256, 256), (192, 128)],
    "heads": [(32, 8), (16, 2), (4, 1)],
    "mask": ["none", "window_left", "window_both"],
    "softcap": [30.0],
    "page_size": [1, 16, 64, 128, 256],
    "num_splits": [1, 3, 64],
    "pack_gqa": [True, False],
    "layout": ["aos"],
    "sqt": [0, 8, 1],
    "lse": [True],
    "switches": [(False, False)],
}
SCENARIOS = ["prefill", "decode", "spec_decode", "chunked", "mixed", "long_decode"]
#: FP8 calls (an ``fp8`` key that the other cases lack, so their keys stay as they were): "kv" an e4m3
#: cache with a bf16 q, "qkv" e4m3 q, K and V (the Hopper FP8 tensor-core kernels), per-(request, KV
#: head) descales, bf16 out.
FP8_AXES = {"dims": [(64, 64), (256, 256)], "softcap": [30.0], "mask": ["none", "window_left"],
            "heads": [(64, 8)], "num_splits": [3]}


def _apply(case: dict, axis: str, value) -> dict:
    c = dict(case)
    if axis == "dims":
        c["d"], c["dv"] = value
    elif axis == "heads":
        c["hq"], c["hkv"] = value
    elif axis == "page_size":
        c["paged"], c["page_size"] = True, value
    elif axis == "switches":
        c["sort"], c["swizzle"] = value
    else:
        c[axis] = value
    return c


def call_cases() -> list:
    """The varlen_attention cases: each scenario (packed and paged) on both devices, varied along
    one axis at a time, and 160 combinations drawn with a fixed seed."""
    cases = []
    for scenario, paged in itertools.product(SCENARIOS, (False, True)):
        base = dict(BASE, scenario=scenario, paged=paged, hq=32, hkv=8)
        for dev in DEVICES:
            cases.append(dict(base, device=dev))
        for axis, values in AXES.items():
            for value in values:
                cases.append(_apply(base, axis, value))
    rng = random.Random(2024)
    for _ in range(160):
        c = dict(BASE, scenario=rng.choice(SCENARIOS), paged=rng.random() < 0.5)
        for axis, values in AXES.items():
            if rng.random() < 0.45:
                c = _apply(c, axis, rng.choice(values))
        cases.append(c)
    for scenario, paged, fp8 in itertools.product(("prefill", "chunked", "decode", "mixed"), (False, True),
                                                  ("kv", "qkv")):
        base = dict(BASE, scenario=scenario, paged=paged, hq=32, hkv=8, fp8=fp8)
        cases.append(base)
        if scenario == "prefill" and not paged:
            for axis, values in FP8_AXES.items():
                for value in values:
                    cases.append(_apply(base, axis, value))
    out, seen = [], set()
    for c in cases:
        k = json.dumps(c, sort_keys=True)
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


def plan_cases() -> list:
    """AttentionPlan cases: a plan per scenario (packed and paged, both devices) and a few variations."""
    cases = []
    for scenario, paged, dev in itertools.product(SCENARIOS, (False, True), DEVICES):
        cases.append(dict(BASE, scenario=scenario, paged=paged, device=dev, hq=32, hkv=8, plan_page_size=None))
    base = dict(BASE, scenario="mixed", paged=True, hq=32, hkv=8, plan_page_size=None)
    for axis in ("arch", "dims", "mask", "num_splits", "sqt", "layout", "softcap", "pack_gqa"):
        for value in AXES[axis]:
            cases.append(_apply(base, axis, value))
    for ps in (16, 64):
        cases.append(dict(base, page_size=ps, plan_page_size=ps))
        cases.append(dict(base, scenario="chunked", page_size=ps, plan_page_size=ps))
    return cases


# ---------------------------------------------------------------------------------- running
def _window(c):
    return {"causal": ((-1, -1), True), "none": ((-1, -1), False), "window_left": ((128, 0), False),
            "window_both": ((64, 64), True)}[c["mask"]]


def _inputs(c, rng):
    qlens, klens = _lengths(c["scenario"], rng)
    dt = DTYPES[c["dtype"]]
    tq = sum(qlens)
    q = torch.empty(tq, c["hq"], c["d"], dtype=dt)
    cu_q = torch.tensor([0, *itertools.accumulate(qlens)], dtype=torch.int32)
    t = {"q": q, "cu_q": cu_q}
    if c["paged"]:
        ps = c["page_size"]
        need = [-(-x // ps) for x in klens]
        pages = sum(need) + 1
        t["k"] = torch.empty(pages, ps, c["hkv"], c["d"], dtype=dt)
        t["v"] = torch.empty(pages, ps, c["hkv"], c["dv"], dtype=dt)
        t["page_table"] = torch.empty(len(qlens), max(need), dtype=torch.int32)
        t["seqused_k"] = torch.tensor(klens, dtype=torch.int32)
        t["cu_k"] = None
    else:
        t["k"] = torch.empty(sum(klens), c["hkv"], c["d"], dtype=dt)
        t["v"] = torch.empty(sum(klens), c["hkv"], c["dv"], dtype=dt)
        t["cu_k"] = torch.tensor([0, *itertools.accumulate(klens)], dtype=torch.int32)
        t["page_table"] = t["seqused_k"] = None
    t["out"] = torch.empty(tq, c["hq"], c["dv"], dtype=dt)
    if c.get("fp8"):   # e4m3 K / V (and q), descales per (request, KV head)
        e4m3 = torch.float8_e4m3fn
        t["k"], t["v"] = t["k"].to(e4m3), t["v"].to(e4m3)
        t["k_descale"] = torch.ones(len(qlens), c["hkv"], dtype=torch.float32)
        t["v_descale"] = torch.ones(len(qlens), c["hkv"], dtype=torch.float32)
        if c["fp8"] == "qkv":
            t["q"] = q.to(e4m3)
            t["q_descale"] = torch.ones(len(qlens), c["hkv"], dtype=torch.float32)
    return t, qlens, klens


class _Session:
    """The fake CUDA of one case, on the described device, with the kernels it loads in order."""

    def __init__(self, mp, device: str):
        for var in ENV_KNOBS:
            mp.delenv(var, raising=False)
        self.rec = FC.install(mp)
        props = DEVICES[device]
        mp.setitem(runtime._devices, None, Device(**props))
        self.specs = []

        def load(spec, dev):
            k = FC._fake_load(spec, dev)
            self.specs.append(spec)
            per_sm = k.persistent_grid // FC.PROPS["num_sms"]
            return dataclasses.replace(k, persistent_grid=per_sm * props["num_sms"])
        mp.setattr(runtime, "_load", load)


def _name_pointer(p: int, tensors: dict, ws) -> object:
    if p == 0:
        return 0
    for name, t in tensors.items():
        if t is not None and t.data_ptr() == p:
            return name
    for base, size in ws:
        if base <= p < base + size:
            return f"ws+{p - base}"
    return "other"


def _fields(kind: str, fields, tensors, ws):
    if isinstance(fields, dict) and kind not in POINTERS:  # fused: {"long": {...}, "short": {...}, ...}
        return {k: _fields("attention", v, tensors, ws) if isinstance(v, dict) else v for k, v in fields.items()}
    ptrs = POINTERS[kind]
    if kind == "attention":   # the base fields' pointers and any the kind's own struct adds (the FP8 descales)
        ptrs = ptrs | {k for k in fields if k.endswith("_descale")}
    return {k: (_name_pointer(v, tensors, ws) if k in ptrs else v) for k, v in fields.items()}


def _launches(rec, tensors, ws, paged: bool) -> list:
    out = []
    for x in rec.launches:
        kind = "attention" if x.kind.startswith("attention") else x.kind   # (also the FP8 kinds: _fp8, _fp8mma)
        r = {"kind": x.kind, "grid": list(x.grid), "block": list(x.block), "smem": x.smem,
             "fields": _fields(kind, x.fields(), tensors, ws)}
        if x.kind.startswith("attention_sm90") or x.kind == "fused_sm90":
            r["maps"] = [[_name_pointer(m[0], tensors, ws), list(m[1]), list(m[2]), list(m[3])]
                         for m in x.maps(4 if paged else 3)]
        out.append(r)
    return out


def _error(e: BaseException) -> dict:
    return {"error": type(e).__name__, "message": str(e)}


def run_call(c: dict) -> dict:
    rng = random.Random(json.dumps(c, sort_keys=True))
    window, causal = _window(c)
    with pytest.MonkeyPatch.context() as mp:
        s = _Session(mp, c["device"])
        t, qlens, klens = _inputs(c, rng)
        kw = dict(seqused_k=t["seqused_k"], page_table=t["page_table"], causal=causal, window_size=window,
                  softcap=c["softcap"], num_splits=c["num_splits"], pack_gqa=c["pack_gqa"], return_lse=c["lse"],
                  out=t["out"], metadata_layout=c["layout"], sort=c["sort"], head_swizzle=c["swizzle"],
                  short_query_tokens=c["sqt"], arch=c["arch"])
        if c.get("fp8"):
            kw.update(k_descale=t["k_descale"], v_descale=t["v_descale"], q_descale=t.get("q_descale"),
                      out_dtype=DTYPES[c["dtype"]])
        args = (t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], max(qlens), max(klens))
        try:
            res = kernelgen.varlen_attention(*args, **kw)
        except (ValueError, TypeError, RuntimeError) as e:
            return _error(e)
        if c["lse"]:
            t["lse"] = res[1]
        ws = [(a.data_ptr(), a.numel()) for a in s.rec.allocations]
        first = _launches(s.rec, t, ws, c["paged"])
        record = {"specs": [spec_record(x) for x in s.specs], "workspaces": [a.numel() for a in s.rec.allocations],
                  "launches": first}
        s.rec.clear()
        res = kernelgen.varlen_attention(*args, **kw)
        if c["lse"]:
            t["lse"] = res[1]
        ws = [(a.data_ptr(), a.numel()) for a in s.rec.allocations]
        record["repeat_same"] = _launches(s.rec, t, ws, c["paged"]) == first
        return record


def run_plan(c: dict) -> dict:
    rng = random.Random(json.dumps(c, sort_keys=True))
    window, causal = _window(c)
    with pytest.MonkeyPatch.context() as mp:
        s = _Session(mp, c["device"])
        t, qlens, klens = _inputs(c, rng)
        kw = dict(max_batch=len(qlens) + 3, num_heads_q=c["hq"], num_heads_kv=c["hkv"], head_dim=c["d"],
                  head_dim_v=c["dv"], dtype=DTYPES[c["dtype"]], max_total_q=t["q"].shape[0] + 64,
                  max_seqlen_q=max(qlens), max_seqlen_k=max(klens), paged=c["paged"], causal=causal,
                  window_size=window, softcap=c["softcap"], num_splits=c["num_splits"], pack_gqa=c["pack_gqa"],
                  metadata_layout=c["layout"], sort=c["sort"], head_swizzle=c["swizzle"],
                  short_query_tokens=c["sqt"], arch=c["arch"],
                  page_size=c["plan_page_size"] if c["paged"] else None)
        try:
            p = FC.make_plan(mp, **kw)
        except (ValueError, TypeError, RuntimeError) as e:
            return _error(e)
        base = p._workspace
        ws = [(base.data_ptr(), base.numel())]
        record = {"specs": [spec_record(x) for x in s.specs], "workspace": base.numel(), "hopper": p.hopper,
                  "config": dataclasses.asdict(p.config)}
        lse = torch.empty(c["hq"], t["q"].shape[0], dtype=torch.float32)
        t["lse"] = lse
        run_kw = dict(seqused_k=t["seqused_k"], page_table=t["page_table"], out=t["out"])
        try:
            p.run(t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], lse=lse, **run_kw)
        except (ValueError, TypeError, RuntimeError) as e:
            record["run"] = _error(e)
            return record
        record["run"] = _launches(s.rec, t, ws, c["paged"])
        s.rec.clear()
        p.schedule(t["cu_q"], t["cu_k"], t["seqused_k"])
        p.attend(t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], lse=lse, **run_kw)
        record["schedule_attend"] = _launches(s.rec, t, ws, c["paged"])
        return record


WARMUP_ARGS = [
    dict(arch="sm_90a", phases=("prefill", "chunked", "decode"), gqas=(1, 4), paged=(False, True), softcap=True,
         page_sizes=(16, 64)),
    dict(arch="sm_80", phases=("prefill", "chunked", "decode"), gqas=(1, 8), paged=(False, True), num_sms=108),
    dict(arch="sm_86", phases=("prefill", "decode"), gqas=(1, 4), paged=(False, True)),
    dict(arch="sm_90a", head_dims=(128,), phases=("decode",)),
]


def run_warmup(kw: dict) -> list:
    kw = dict(kw)
    return [spec_record(s)["name"] for s in catalog.warmup_specs(kw.pop("arch"), **kw)]


def _key(c: dict) -> str:
    return json.dumps(c, sort_keys=True)


def record_all() -> dict:
    return {"calls": {_key(c): run_call(c) for c in call_cases()},
            "plans": {_key(c): run_plan(c) for c in plan_cases()},
            "warmup_specs": {_key(kw): run_warmup(kw) for kw in WARMUP_ARGS}}


def dumps(data: dict) -> str:
    """The golden file's text: one line per case, sorted (small diffs when a choice changes)."""
    parts = []
    for section in sorted(data):
        rows = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True, separators=(',', ':'))}"
                for k, v in sorted(data[section].items())]
        parts.append(f" {json.dumps(section)}: {{\n" + ",\n".join(rows) + "\n }")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    data = record_all()
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(dumps(data))
    n_err = sum("error" in r for r in data["calls"].values())
    print(f"{GOLDEN}: {len(data['calls'])} calls ({n_err} errors), {len(data['plans'])} plans, "
          f"{len(data['warmup_specs'])} warmup sets")


if __name__ == "__main__":
    main()
