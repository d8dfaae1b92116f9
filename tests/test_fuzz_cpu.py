"""CPU checks of the fuzzer (tools/fuzz.py): the case generator covers every feature, respects the
batch limits and is deterministic; its inputs pass the library's validation (FP8 caches: the
quantised ``x / descale`` construction and the descales' shapes and range); the comparison
catches unwritten rows, wrong values, inexact empty rows, writes past the last request and an
ignored descale (with a reference-backed stand-in for the GPU call).  Also the head sharding of examples/tensor_parallel.py
(the multi-GPU example's math, without NCCL)."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.selection import validation as V

ROOT = Path(__file__).resolve().parents[1]


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("kernelgen_tools_fuzz", ROOT / "tools" / "fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


fuzz = _load_fuzz()
N_DRAWS = 1500


@pytest.fixture(scope="module")
def cases():
    return [fuzz.case_for_seed(s) for s in fuzz.batch_seeds(12345, N_DRAWS)]


def test_deterministic_for_a_seed():
    assert fuzz.batch_seeds(7, 50) == fuzz.batch_seeds(7, 50)
    assert fuzz.batch_seeds(7, 50) != fuzz.batch_seeds(8, 50)
    assert fuzz.batch_seeds(7, 50)[:10] == fuzz.batch_seeds(7, 10)     # a prefix replays the same batches
    for s in fuzz.batch_seeds(7, 50):
        a, b = fuzz.case_for_seed(s), fuzz.case_for_seed(s)
        assert a == b and a["seed"] == s
        json.dumps(a)                                                  # plain JSON types only
    assert fuzz.case_for_seed(1) != fuzz.case_for_seed(2)
    a = fuzz.draw_case(np.random.default_rng(99), seed=99)
    assert a == fuzz.case_for_seed(99)


def test_limits(cases):
    for c in cases:
        b = len(c["qlens"])
        assert 1 <= b <= fuzz.MAX_BATCH
        assert len(c["klens"]) == b and len(c["kv_slack"]) == b
        assert all(0 <= x <= fuzz.MAX_LEN for x in c["qlens"] + c["klens"])
        assert fuzz.total_q_rows(c) <= fuzz.MAX_Q_TOKENS
        assert fuzz.stored_keys(c) <= fuzz.MAX_KV_TOKENS
        assert fuzz.ref_elems(c) <= fuzz.MAX_REF_ELEMS
        assert c["num_heads_q"] % c["num_heads_kv"] == 0
        assert c["head_dim"] in V.HEAD_DIMS and c["head_dim_v"] in V.HEAD_DIMS
        assert 0 <= c["num_splits"] <= 64
        if c["num_splits"] > 1:
            assert c["num_splits"] * c["num_heads_q"] * fuzz.total_q_rows(c) * c["head_dim_v"] * 4 <= fuzz.MAX_ACCUM_BYTES
        V.window(tuple(c["window"]), c["causal"])                      # a valid window_size
        V.softcap(c["softcap"])
        if c["softmax_scale"] is not None:
            V.softmax_scale(c["softmax_scale"], c["head_dim"])
        if c["kv"] == "paged":
            assert c["page_size"] in fuzz.PAGE_SIZES and c["spare_pages"] >= 1
            assert not c["seqused"] and sum(c["kv_slack"]) == 0
        mq, mk = fuzz.call_hints(c)
        if mq is not None:                                              # hints never understate
            assert mq >= max(c["qlens"]) and mk >= max(c["klens"])


def test_mean_cost_is_modest(cases):
    """2000 batches should take minutes on an H200: bounded averages, not only bounded maxima."""
    assert np.mean([fuzz.total_q_rows(c) for c in cases]) < 8000
    assert np.mean([fuzz.stored_keys(c) for c in cases]) < 70000
    assert np.mean([fuzz.ref_elems(c) for c in cases]) < 1e8
    assert np.mean([sum(1 for x in c["qlens"] if x) for c in cases]) < 120    # reference loops per request


def test_covers_every_feature(cases):
    seen: dict = {}
    for c in cases:
        for k, v in fuzz.features(c).items():
            seen.setdefault(k, set()).add(str(v))
    want = {
        "dtype": {"bf16", "fp16"},
        "head_dims": {"64x64", "128x128", "96x96", "192x192", "256x256", "192x128"},
        "gqa": {"1", "2", "4", "8"},
        "kv": {"packed", "packed+seqused", "paged"},
        "page_size": {"1", "16", "64", "256", "None"},
        "mask": set(fuzz.MASKS),
        "softcap": {"True", "False"},
        "splits": {"auto", "1", "forced"},
        "pack_gqa": {"None", "True", "False"},
        "layout": {"soa", "aos"},
        "sort": {"True", "False"},
        "head_swizzle": {"True", "False"},
        "phase": set(fuzz.PHASES),
        "zero_q": {"True", "False"},
        "zero_k": {"True", "False"},
        "long": {"True", "False"},
        "pad_rows": {"True", "False"},
        "strided": {"True", "False"},
        "hint": set(fuzz.HINTS),
        "kv_dtype": {"16-bit", "e4m3", "e5m2"},
    }
    for k, vals in want.items():
        assert vals <= seen[k], f"{k}: missing {vals - seen[k]}"
    splits = {c["num_splits"] for c in cases}
    assert {0, 1, 2, 64} <= splits and len(splits) > 30
    lens = [x for c in cases for x in c["klens"]]
    assert 0 in lens and max(lens) == fuzz.MAX_LEN and sum(x > 8192 for x in lens) > 20
    assert sum(x == 0 for x in lens) > 0.05 * len(lens)               # many empty requests
    assert np.median(lens) < 512                                       # skewed short
    windows = [(c["causal"], tuple(c["window"])) for c in cases if c["mask"] != "none"]
    assert any(not cz and w[0] >= 0 and w[1] == -1 for cz, w in windows)      # left only
    assert any(not cz and w[0] >= 0 and w[1] > 0 for cz, w in windows)        # left and right > 0
    assert any(not cz and w[0] == -1 and w[1] >= 0 for cz, w in windows)      # right only
    assert any(cz and w[0] >= 0 for cz, w in windows)                         # causal sliding window
    assert any(not cz and w == (-1, 0) for cz, w in windows)                  # causal as a window
    assert any(c["interleaved_kv"] for c in cases)
    assert any(not c["return_lse"] for c in cases) and any(not c["out_given"] for c in cases)
    assert any(len(c["qlens"]) > 2048 for c in cases) or any(len(c["qlens"]) > 512 for c in cases)
    fp8 = [c for c in cases if c["kv_dtype"]]                           # about one batch in six
    assert abs(len(fp8) / len(cases) - fuzz.FP8_SHARE) < 0.04
    assert {c["kv"] for c in fp8} == {"packed", "paged"} and {c["dtype"] for c in fp8} == {"bf16", "fp16"}
    assert any(c["interleaved_kv"] for c in fp8) and any(c["strided"] for c in fp8)
    assert {c["num_splits"] > 1 for c in fp8} == {True, False} and {c["phase"] for c in fp8} == set(fuzz.PHASES)
    # the last page of a request partly filled, and exactly full
    paged = [(n, c["page_size"]) for c in cases if c["kv"] == "paged" for n in c["klens"] if n]
    assert any(n % ps for n, ps in paged if ps > 1) and any(n % ps == 0 for n, ps in paged if ps > 1)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_case_has_variants(cases, arch):
    """The dispatcher's variant choice accepts every drawn case (shared memory fits the arch)."""
    specs = set()
    for c in cases[:600]:
        for s in fuzz.case_specs(c, arch, 132 if arch == "sm_90a" else 108):
            specs.add(s)
    kinds = {s.kind for s in specs}
    assert kinds == {"scheduler", "attention", "combine", "fused"}   # fused: paged batches with long queries
    attn = [s for s in specs if s.kind == "attention"]
    assert {s.tile.block_m for s in attn} >= {16, 64, 128}
    assert any(s.split and s.paged and s.pack_gqa for s in attn)
    assert any(s.mask == "local" and s.softcap for s in attn)
    fp8 = [s for s in attn if s.kv_dtype]                               # FP8 caches: both mainloops on sm_90a
    assert {s.kv_dtype for s in fp8} == {"e4m3", "e5m2"}
    assert {s.mainloop for s in fp8} == ({"sm80", "sm90a"} if arch == "sm_90a" else {"sm80"})
    assert any(s.paged and s.tile.block_m <= 16 for s in fp8) and any(s.tile.block_m == 128 for s in fp8)
    for c in cases[:600]:                                               # an FP8 case runs one class
        if c["kv_dtype"] and fuzz.case_recipe(c, arch, 132) is not None:
            r = fuzz.case_recipe(c, arch, 132)
            assert r.kind == "single" and r.variants.attention.kv_dtype == c["kv_dtype"]


def test_inputs_pass_validation(cases):
    """Shapes only ("meta"): every drawn case builds inputs the public call accepts."""
    for c in cases[:400]:
        inp = fuzz.build_inputs(c, "meta")
        s = V.varlen_inputs(inp["q"], inp["k"], inp["v"], inp["cu_seqlens_q"], inp["cu_seqlens_k"],
                            inp["max_seqlen_q"], inp["max_seqlen_k"], None, devtypes=("meta",),
                            seqused_k=inp["seqused_k"], page_table=inp["page_table"])
        assert s["batch"] == len(c["qlens"]) and s["total_q"] == fuzz.total_q_rows(c)
        assert s["paged"] == (c["kv"] == "paged")
        assert (inp["q"].stride(0) > c["num_heads_q"] * c["head_dim"]) == c["strided"]
        kw = inp["kwargs"]
        V.window(kw["window_size"], kw["causal"])
        V.num_splits(kw["num_splits"])
        assert s.get("kv_dtype") == c["kv_dtype"]
        if c["kv_dtype"]:
            for name in ("k_descale", "v_descale"):
                assert V.descale(name, kw[name], s["batch"], c["num_heads_kv"], inp["q"].device, c["kv_dtype"]) \
                    == (c["num_heads_kv"] if s["batch"] > 1 else 0, 1 if c["num_heads_kv"] > 1 else 0)
        else:
            assert "k_descale" not in kw and inp["k_descale"] is None


def small_seeds(n, max_q=600, max_keys=3000, max_ref=3e6):
    out = []
    for s in range(100000):
        c = fuzz.case_for_seed(s)
        if fuzz.total_q_rows(c) <= max_q and fuzz.stored_keys(c) <= max_keys and fuzz.ref_elems(c) <= max_ref \
                and len(c["qlens"]) <= 64:
            out.append(s)
            if len(out) == n:
                return out
    return out


SMALL = small_seeds(24)


def small_fp8_seeds(n):
    out = []
    for s in range(200000):
        c = fuzz.case_for_seed(s)
        if c["kv_dtype"] and fuzz.total_q_rows(c) <= 600 and fuzz.stored_keys(c) <= 3000 \
                and fuzz.ref_elems(c) <= 3e6 and len(c["qlens"]) <= 64 \
                and any(q > 0 and k > 0 for q, k in zip(c["qlens"], c["klens"])):
            out.append(s)
            if len(out) == n:
                return out
    return out


SMALL_FP8 = small_fp8_seeds(12)


def fake_attention(q, k, v, cu_q, cu_k, max_seqlen_q=None, max_seqlen_k=None, *, out=None, seqused_k=None,
                   page_table=None, causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None,
                   num_splits=0, pack_gqa=None, return_lse=False, metadata_layout="soa", sort=True,
                   head_swizzle=True, k_descale=None, v_descale=None, bug=None):
    """The public call's contract on the CPU, from the float64 reference (and optional bugs)."""
    sizes = V.varlen_inputs(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, out, devtypes=("cpu",),
                            seqused_k=seqused_k, page_table=page_table)
    for name, x in (("k_descale", k_descale), ("v_descale", v_descale)):
        V.descale(name, x, sizes["batch"], sizes["num_heads_kv"], q.device, sizes.get("kv_dtype"))
    if bug == "no_descale":
        k_descale = v_descale = None
    V.check_cu_seqlens_values("cu_seqlens_q", cu_q, q.shape[0])
    if page_table is not None:
        V.check_paged_values(page_table, seqused_k, k.shape[0], k.shape[1])
        k2, v2, ck = gather_paged(k, v, page_table, seqused_k)
        used = None
    else:
        V.check_cu_seqlens_values("cu_seqlens_k", cu_k, k.shape[0])
        k2, v2, ck, used = k, v, cu_k, seqused_k
    ref, ref_lse = attention_reference(q, k2, v2, cu_q, ck, causal=causal, softmax_scale=softmax_scale,
                                       window_size=window_size, softcap=softcap, seqused_k=used,
                                       k_descale=k_descale, v_descale=v_descale)
    rows = int(cu_q[-1])
    total, hq = q.shape[:2]
    if out is None:
        out = torch.full((total, hq, v.shape[-1]), float("nan"), dtype=q.dtype)
    lse = torch.full((hq, total), float("nan"), dtype=torch.float32)
    out[:rows] = ref[:rows].to(q.dtype)
    lse[:, :rows] = ref_lse[:, :rows].float()
    if bug == "unwritten" and rows:
        out[rows - 1, 0] = float("nan")
    elif bug == "past_end":
        out[rows:] = 0
    elif bug == "value" and rows:
        out[rows // 2, -1, 0] += 0.25
    elif bug == "empty_not_zero":
        empty = torch.isneginf(ref_lse[:, :rows]).transpose(0, 1)
        out[:rows][empty] = 1e-4
    elif bug == "lse":
        lse[:, :rows] += 0.01
    elif bug == "raise":
        raise RuntimeError("boom")
    return (out, lse) if return_lse else out


@pytest.mark.parametrize("seed", SMALL)
def test_pipeline_on_cpu_with_reference_stand_in(seed):
    """build_inputs -> call -> reference -> compare on the CPU: a correct implementation passes."""
    c = fuzz.case_for_seed(seed)
    r = fuzz.run_case(c, "cpu", poison=True, attention=fake_attention)
    assert r["ok"], (seed, r["errors"])
    assert r["unwritten_rows"] == 0 and r["seed"] == seed


@pytest.mark.parametrize("seed", SMALL_FP8)
def test_fp8_pipeline_on_cpu_with_reference_stand_in(seed):
    """FP8 cases through build_inputs -> call (with k_descale / v_descale) -> reference (which
    dequantises) -> compare with tolerance(dtype, kv_dtype); a call that ignores the descales is
    caught."""
    c = fuzz.case_for_seed(seed)
    assert c["kv_dtype"] in fuzz.KV_DTYPES
    r = fuzz.run_case(c, "cpu", poison=True, attention=fake_attention)
    assert r["ok"], (seed, r["errors"])
    bad = fuzz.run_case(c, "cpu", attention=lambda *a, **kw: fake_attention(*a, bug="no_descale", **kw))
    assert not bad["ok"] and any("out error" in e or "lse error" in e for e in bad["errors"]), bad["errors"]


def test_fp8_is_drawn_last():
    """The FP8 choice is the case's last draw: with no FP8 share every seed's case is the same but
    for kv_dtype (the cases of seeds drawn before FP8 caches were fuzzed are unchanged)."""
    seeds = fuzz.batch_seeds(3, 300)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fuzz, "FP8_SHARE", 0.0)
        plain = [fuzz.case_for_seed(s) for s in seeds]
    drawn = [fuzz.case_for_seed(s) for s in seeds]
    assert all(p["kv_dtype"] is None for p in plain) and any(d["kv_dtype"] for d in drawn)
    for p, d in zip(plain, drawn):
        assert {**d, "kv_dtype": None} == p


@pytest.mark.parametrize("layout", ["packed", "paged", "interleaved", "strided"])
def test_fp8_inputs_are_the_16_bit_draws_over_their_descales(layout):
    """An FP8 case's k / v are its 16-bit draws divided by their request's and KV head's factor,
    quantised (so the dequantised values are those draws within the FP8 rounding: 2^-4 relative
    for e4m3, 2^-3 for e5m2, and the subnormal step); descales float32 (batch, num_heads_kv) in
    [0.5, 2), deterministic; q and the lengths are the 16-bit case's."""
    pred = {"packed": lambda c: c["kv"] == "packed" and not c["strided"],
            "paged": lambda c: c["kv"] == "paged" and not c["interleaved_kv"],
            "interleaved": lambda c: c["interleaved_kv"], "strided": lambda c: c["strided"]}[layout]
    for s in range(200000):
        c = fuzz.case_for_seed(s)
        if c["kv_dtype"] and pred(c) and fuzz.stored_keys(c) <= 20000 and len(c["qlens"]) <= 64 \
                and any(c["klens"]):
            break
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[c["kv_dtype"]]
    inp, again = fuzz.build_inputs(c, "cpu"), fuzz.build_inputs(c, "cpu")
    ref = fuzz.build_inputs({**c, "kv_dtype": None}, "cpu")
    assert torch.equal(inp["q"], ref["q"]) and torch.equal(inp["k_descale"], again["k_descale"])
    assert torch.equal(inp["k"].view(torch.uint8), again["k"].view(torch.uint8))
    batch, hkv = len(c["qlens"]), c["num_heads_kv"]
    for name in ("k_descale", "v_descale"):
        x = inp[name]
        assert x.dtype == torch.float32 and x.shape == (batch, hkv) and x.is_contiguous()
        assert bool((x >= fuzz.DESCALE_RANGE[0]).all()) and bool((x < fuzz.DESCALE_RANGE[1]).all())
        assert inp["kwargs"][name] is x
    assert not torch.equal(inp["k_descale"], inp["v_descale"])
    rel, tiny = (2.0 ** -4, 2.0 ** -9) if c["kv_dtype"] == "e4m3" else (2.0 ** -3, 2.0 ** -16)
    if c["kv"] == "paged":
        ks, vs, cu = gather_paged(inp["k"], inp["v"], inp["page_table"], inp["seqused_k"])
        k16, v16, _ = gather_paged(ref["k"], ref["v"], ref["page_table"], ref["seqused_k"])
        lens = c["klens"]
    else:
        ks, vs, k16, v16 = inp["k"], inp["v"], ref["k"], ref["v"]
        lens = [a + b for a, b in zip(c["klens"], c["kv_slack"])]
        assert (inp["k"].stride(0) > hkv * c["head_dim"]) == c["strided"]
    assert ks.dtype == vs.dtype == fp8 and ks.shape == k16.shape and vs.shape == v16.shape
    req = torch.repeat_interleave(torch.arange(batch), torch.tensor(lens))
    for x8, x16, ds in ((ks, k16, inp["k_descale"]), (vs, v16, inp["v_descale"])):
        deq = x8.double() * ds[req].double()[:, :, None]
        want = x16.double()             # the draw rounded to 16 bits: within 2^-8 of the float32 draw
        err = (deq - want).abs()
        assert bool((err <= (rel + 2.0 ** -8) * want.abs() + tiny * 2).all()), float(err.max())


def _with_feature(pred):
    for s in SMALL:
        c = fuzz.case_for_seed(s)
        if pred(c):
            return c
    pytest.skip("no small case with that feature")


@pytest.mark.parametrize("bug,what", [("unwritten", "unwritten"), ("past_end", "past cu_seqlens_q"),
                                      ("value", "out error"), ("empty_not_zero", "exactly 0"),
                                      ("lse", "lse error"), ("raise", "RuntimeError: boom")])
def test_compare_catches_bugs(bug, what):
    if bug == "past_end":
        c = _with_feature(lambda c: c["pad_rows"] > 0 and sum(c["qlens"]) > 0)
    elif bug == "empty_not_zero":
        c = _with_feature(lambda c: c["out_given"] and any(q > 0 and k == 0 for q, k in zip(c["qlens"], c["klens"])))
    else:
        c = _with_feature(lambda c: sum(c["qlens"]) > 0 and c["return_lse"] and c["out_given"])
    r = fuzz.run_case(c, "cpu", attention=lambda *a, **kw: fake_attention(*a, bug=bug, **kw))
    assert not r["ok"]
    assert any(what in e for e in r["errors"]), r["errors"]
    if bug == "unwritten":
        assert r["unwritten_rows"] == 1


def test_inputs_deterministic_and_paged_layout():
    for s in SMALL[:8]:
        c = fuzz.case_for_seed(s)
        a, b = fuzz.build_inputs(c, "cpu"), fuzz.build_inputs(c, "cpu")
        for key in ("q", "k", "v"):
            assert torch.equal(a[key], b[key])
        if c["kv"] == "paged":
            pt = a["page_table"]
            need, width, num_pages = fuzz.page_layout(c)
            assert pt.shape == (len(c["qlens"]), width) and a["k"].shape[:2] == (num_pages, c["page_size"])
            ids = torch.cat([pt[i, :n] for i, n in enumerate(need)])
            assert len(set(ids.tolist())) == ids.numel()                # each page used once
            k, _, cu = gather_paged(a["k"], a["v"], pt, a["seqused_k"])
            assert (cu[1:] - cu[:-1]).tolist() == c["klens"]


def test_poisoned_allocations():
    from kernelgen.front import api
    from kernelgen.launch import prepared

    real = api.torch
    with fuzz.poisoned_allocations(True):
        assert api.torch is not real and isinstance(prepared.torch, fuzz._PoisonedTorch)
        x = api.torch.empty((3, 4), dtype=torch.float32)
        i = api.torch.empty(5, dtype=torch.int32)
        assert torch.isnan(x).all() and (i == fuzz.POISON_INT).all()
        ws = prepared.torch.empty(64, dtype=torch.uint8)             # the workspace: -1 / NaN words
        assert (ws.view(torch.int32) == -1).all() and torch.isnan(ws.view(torch.float32)).all()
        assert api.torch.int32 is torch.int32 and api.torch.cuda is torch.cuda
        with fuzz.poisoned_allocations(True):                          # nested: still one layer
            assert isinstance(api.torch, fuzz._PoisonedTorch) and api.torch._real is real
            assert prepared.torch._real is real
    assert api.torch is real and prepared.torch is real
    with fuzz.poisoned_allocations(False):
        assert api.torch is real and prepared.torch is real


def test_sanitize_cases_cover_kernel_families():
    specs = []
    for name, c in fuzz.sanitize_cases():
        inp = fuzz.build_inputs(c, "meta")
        V.varlen_inputs(inp["q"], inp["k"], inp["v"], inp["cu_seqlens_q"], inp["cu_seqlens_k"], inp["max_seqlen_q"],
                        inp["max_seqlen_k"], None, devtypes=("meta",), seqused_k=inp["seqused_k"],
                        page_table=inp["page_table"])
        assert fuzz.total_q_rows(c) <= 200 and fuzz.stored_keys(c) <= 2500, name
        specs += fuzz.case_specs(c, "sm_90a", 132)
        r = fuzz.run_case(c, "cpu", attention=fake_attention)
        assert r["ok"], (name, r["errors"])
    attn = [s for s in specs if s.kind == "attention"]
    assert any(s.kind == "combine" for s in specs)
    assert {s.layout for s in specs if s.kind == "scheduler"} == {"soa", "aos"}
    assert any(s.tile.block_m == 128 and s.mask == "causal" and not s.paged for s in attn)   # prefill
    assert any(s.tile.block_m == 16 and s.pack_gqa and s.paged and s.split for s in attn)   # decode + combine
    assert any(s.mask == "local" and s.softcap for s in attn)
    assert any(s.tile.block_m == 64 for s in attn)
    assert any(s.kind == "fused" and s.short.split for s in specs)                         # fused mixed batch
    fp8 = [s for s in attn if s.kv_dtype]                                                  # FP8 caches
    assert {s.kv_dtype for s in fp8} == {"e4m3", "e5m2"}
    assert any(s.paged and s.pack_gqa and s.split and s.tile.block_m == 16 for s in fp8)
    assert any(not s.paged and s.mask == "causal" and s.tile.block_m >= 64 for s in fp8)
    assert any(s.mainloop == "sm90a" and s.paged for s in fp8) and any(s.mainloop == "sm90a" and not s.paged
                                                                        for s in fp8)   # the Hopper FP8 kernel
    zero = [c for _, c in fuzz.sanitize_cases() if 0 in c["qlens"] or 0 in c["klens"]]
    assert len(zero) >= 3


def test_water_fill():
    x = np.array([1, 100, 5, 1000, 0])
    y = fuzz._water_fill(x, 200)
    assert y.sum() <= 200 and (y <= x).all() and y[0] == 1 and y[2] == 5
    assert np.array_equal(fuzz._water_fill(x, 10 ** 6), x)


def test_cli_show_and_summary(capsys):
    assert fuzz.main(["--show", "3", "--seed", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["seed"] == fuzz.batch_seeds(4, 1)[0]
    s = {"ran": 2000, "mismatches": 0, "unwritten_rows": 0, "seed": 4, "seconds": 201.23}
    assert fuzz.summary_line(s) == "fuzz: 2000 batches, 0 mismatches, 0 unwritten rows, seed 4, 201.2 s"


@pytest.fixture
def small_limits(monkeypatch):
    """Shrink the batch limits so whole fuzz runs fit a CPU reference."""
    monkeypatch.setattr(fuzz, "MAX_Q_TOKENS", 160)
    monkeypatch.setattr(fuzz, "MAX_KV_TOKENS", 1600)
    monkeypatch.setattr(fuzz, "MAX_REF_ELEMS", 150_000)


def test_run_fuzz_loop_on_cpu(small_limits):
    lines = []
    s = fuzz.run_fuzz(12, 3, device="cpu", attention=fake_attention, arch="sm_90a", do_prewarm=False,
                      hang_s=0, log=lines.append)
    assert s["ran"] == 12 and s["complete"] and s["mismatches"] == 0 and s["unwritten_rows"] == 0, lines
    assert fuzz.summary_line(s).startswith("fuzz: 12 batches, 0 mismatches, 0 unwritten rows, seed 3, ")
    assert sum(s["coverage"]["dtype"].values()) == 12
    json.dumps(s, default=fuzz._json_default)


def test_run_fuzz_reports_replayable_seeds(small_limits):
    def buggy(*a, **kw):
        return fake_attention(*a, bug="unwritten", **kw)

    lines = []
    s = fuzz.run_fuzz(6, 5, device="cpu", attention=buggy, arch="sm_90a", do_prewarm=False, hang_s=0,
                      log=lines.append)
    assert s["mismatches"] > 0 and s["unwritten_rows"] >= s["mismatches"]
    f = s["failures"][0]
    assert any(f"--replay {f['seed']}" in line for line in lines)
    assert f["seed"] in fuzz.batch_seeds(5, 6)
    again = fuzz.run_case(fuzz.case_for_seed(f["seed"]), "cpu", attention=buggy)      # the seed replays it
    assert not again["ok"] and again["errors"] == f["errors"]


def test_run_fuzz_time_limit(small_limits):
    lines = []
    s = fuzz.run_fuzz(50, 1, device="cpu", attention=fake_attention, arch="sm_90a", do_prewarm=False,
                      hang_s=0, time_limit=0.0, log=lines.append)
    assert s["ran"] <= 1 and not s["complete"]
    assert any("stopped after" in line for line in lines)


def test_run_fuzz_time_limit_counts_the_prewarm(small_limits, monkeypatch):
    """A prewarm longer than the limit leaves no time for batches: the run stops at once and still
    returns its summary (a caller's wall-clock limit just above --time-limit always gets it)."""
    def slow_prewarm(cases, arch, num_sms, jobs=None, progress=False):
        import time
        time.sleep(0.3)
        return {"kernels": 0, "compiled": 0, "cached": 0, "seconds": 0.3, "error": None}
    monkeypatch.setattr(fuzz, "prewarm", slow_prewarm)
    lines = []
    s = fuzz.run_fuzz(50, 1, device="cpu", attention=fake_attention, arch="sm_90a", do_prewarm=True,
                      hang_s=0, time_limit=0.2, log=lines.append)
    assert s["ran"] == 0 and not s["complete"] and s["prewarm"]["seconds"] == 0.3


def test_cli_without_gpu_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert fuzz.main(["--batches", "3", "--seed", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def _load_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernelgen_example_tp", ROOT / "examples" / "tensor_parallel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tensor_parallel_sharding_on_cpu():
    """The example's head shards, attended separately and concatenated along the head dims, give
    the full float64 reference."""
    tp = _load_example()
    for batch in tp.make_batches():
        full, full_lse = tp.reference(batch, "cpu")
        for world in (2, 8):
            outs, lses = [], []
            for rank in range(world):
                q, k, v = tp.shard(batch, rank, world)
                o, lse = tp.reference(dict(batch, q=q, k=k, v=v), "cpu")
                assert o.shape[1] == tp.HQ // world
                outs.append(o)
                lses.append(lse)
            got, got_lse = torch.cat(outs, dim=1), torch.cat(lses, dim=0)
            assert torch.allclose(got, full, atol=1e-12, rtol=0, equal_nan=True)
            assert torch.allclose(got_lse, full_lse, atol=1e-12, rtol=0, equal_nan=True)


def test_case_recipe_takes_tma_compatibility_from_the_built_inputs(cases):
    """case_recipe's ``tma_ok`` comes from the inputs build_inputs makes (the strided views keep
    16-byte strides: TMA-compatible), so the prewarmed kernels are the ones the call runs (before,
    every strided case was assumed to take the sm_80 path)."""
    from kernelgen.kernels import tma
    strided = [c for c in cases if c["strided"]]
    assert strided
    for c in strided[:60]:
        inp = fuzz.build_inputs(c, "meta")
        assert fuzz._tma_ok(c) == all(tma.tma_compatible(inp[n]) for n in ("q", "k", "v"))
    assert any(fuzz._tma_ok(c) for c in strided)
    hopper = [c for c in strided[:200] if fuzz._tma_ok(c) and (r := fuzz.case_recipe(c, "sm_90a", 132)) is not None
              and any(getattr(s, "mainloop", "") == "sm90a" for s in r.specs)]
    assert hopper, "some strided case takes the Hopper kernel"
