"""CPU checks of the fuzzer (tools/fuzz.py): the case generator covers every feature, respects the
batch limits and is deterministic; its inputs pass the library's validation (FP8 caches: the
quantised ``x / descale`` construction and the descales' shapes and range; FP8 queries: e4m3 q
with a (batch, num_heads_kv) ``q_descale``, ``out_dtype``); the comparison catches unwritten rows,
wrong values, inexact empty rows, writes past the last request and an ignored descale (with a
reference-backed stand-in for the GPU call).  FP8 queries: drawn last (seeds keep every other
field, checked against values recorded from the fuzzer before FP8 queries were added), the
reference gets ``q_descale``, the dispatcher's choice (through tests/fake_cuda.py) decides
between the FP8 tensor-core variant's bounds and the 16-bit tolerance, and the prewarm compiles
the FP8-q kernels.  ``quantize_q``: drawn last and only for an e4m3 cache with a 16-bit q (seeds
keep every other field, checked against values recorded before it was drawn), passed to the call,
and a call that ran the FP8 tensor-core variant (the fake H200's dispatch) checked against q
quantised as ``kernelgen.launch.quant_q.quantize_reference`` specifies, any other against the
exact q; the prewarm (the quantisation kernel included) and the summary follow.  Also the head
sharding of examples/tensor_parallel.py (the multi-GPU example's math, without NCCL)."""
import dataclasses
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelgen.apps.reference import attention_reference, gather_paged
from kernelgen.selection import heuristics
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
        "splits": {"auto", "capped", "1", "forced"},
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
        "q": {"16-bit", "e4m3"},
        "out_dtype": {"16-bit q", "argument", "out", "default"},
        "alibi": {"none", "heads", "batch_heads"},
        "sinks": {"True", "False"},
        "quantize_q": {"True", "False"},
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
    # fused: paged batches with long queries; quant: q's quantisation kernel of a quantize_q case on the
    # FP8 tensor-core variant (sm_90a only: sm_80 has neither the variant nor FP8 conversions)
    assert kinds == {"scheduler", "attention", "combine", "fused"} | ({"quant"} if arch == "sm_90a" else set())
    attn = [s for s in specs if s.kind == "attention"]
    assert {s.tile.block_m for s in attn} >= {16, 64, 128}
    assert any(s.split and s.paged and s.pack_gqa for s in attn)
    assert any(s.mask == "local" and s.softcap for s in attn)
    fp8 = [s for s in attn if s.kv_dtype]                               # FP8 caches: both mainloops on sm_90a
    assert {s.kv_dtype for s in fp8} == {"e4m3", "e5m2"}
    assert {s.mainloop for s in fp8} == ({"sm80", "sm90a"} if arch == "sm_90a" else {"sm80"})
    assert any(s.paged and s.tile.block_m <= 16 for s in fp8) and any(s.tile.block_m == 128 for s in fp8)
    fp8_kinds = set()
    for c in cases[:600]:   # an FP8 case runs one class, or on sm_90a a mixed batch's fused launch / classes in turn
        if c["kv_dtype"] and fuzz.case_recipe(c, arch, 132) is not None:
            r = fuzz.case_recipe(c, arch, 132)
            fp8_kinds.add(r.kind)
            assert {s.long.kv_dtype if s.kind == "fused" else s.kv_dtype for s in r.specs
                    if s.kind in ("attention", "fused")} == {c["kv_dtype"]}
    assert {"single", "fused"} <= fp8_kinds <= ({"single", "pair", "fused"} if arch == "sm_90a" else {"single", "fused"})


def test_inputs_pass_validation(cases):
    """Shapes only ("meta"): every drawn case builds inputs the public call accepts."""
    for c in cases[:400]:
        inp = fuzz.build_inputs(c, "meta")
        kw = inp["kwargs"]
        out = torch.empty(inp["q"].shape[:2] + (c["head_dim_v"],), dtype=inp["out_dtype"], device="meta") \
            if c["out_given"] else None
        s = V.varlen_inputs(inp["q"], inp["k"], inp["v"], inp["cu_seqlens_q"], inp["cu_seqlens_k"],
                            inp["max_seqlen_q"], inp["max_seqlen_k"], out, devtypes=("meta",),
                            seqused_k=inp["seqused_k"], page_table=inp["page_table"], out_dtype=kw.get("out_dtype"))
        assert s["batch"] == len(c["qlens"]) and s["total_q"] == fuzz.total_q_rows(c)
        assert s["paged"] == (c["kv"] == "paged")
        assert (inp["q"].stride(0) > c["num_heads_q"] * c["head_dim"]) == c["strided"]
        assert s["dtype"] == inp["out_dtype"] == {"bf16": torch.bfloat16, "fp16": torch.float16}[c["dtype"]]
        assert s.get("q_dtype") == ("e4m3" if c["q_fp8"] else None)
        if c["q_fp8"]:
            assert inp["q"].dtype == torch.float8_e4m3fn and kw["q_descale"] is inp["q_descale"]
            assert V.q_descale(kw["q_descale"], s["batch"], c["num_heads_kv"], inp["q"].device, "e4m3") \
                == (c["num_heads_kv"] if s["batch"] > 1 else 0, 1 if c["num_heads_kv"] > 1 else 0)
        else:
            assert "q_descale" not in kw and "out_dtype" not in kw and inp["q_descale"] is None
        assert kw.get("quantize_q", False) is c["quantize_q"] and ("quantize_q" in kw) == c["quantize_q"]
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
                   head_swizzle=True, k_descale=None, v_descale=None, q_descale=None, out_dtype=None, sinks=None,
                   alibi_slopes=None, quantize_q=False, max_num_splits=0, bug=None):
    """The public call's contract on the CPU, from the float64 reference (and optional bugs).
    ``quantize_q`` must be a bool and changes nothing: the stand-in keeps q exact, as a call that
    does not run the FP8 tensor-core variant does."""
    if not isinstance(quantize_q, bool):
        raise TypeError(f"quantize_q must be a bool, got {type(quantize_q).__name__}")
    sizes = V.varlen_inputs(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, out, devtypes=("cpu",),
                            seqused_k=seqused_k, page_table=page_table, out_dtype=out_dtype)
    for name, x in (("k_descale", k_descale), ("v_descale", v_descale)):
        V.descale(name, x, sizes["batch"], sizes["num_heads_kv"], q.device, sizes.get("kv_dtype"))
    V.q_descale(q_descale, sizes["batch"], sizes["num_heads_kv"], q.device, sizes.get("q_dtype"))
    V.sinks(sinks, sizes["num_heads_q"], q.device)
    V.alibi_slopes(alibi_slopes, sizes["num_heads_q"], sizes["batch"], q.device)
    if bug == "no_descale":
        k_descale = v_descale = None
    if bug == "no_q_descale":
        q_descale = None
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
                                       k_descale=k_descale, v_descale=v_descale, q_descale=q_descale,
                                       sinks=None if bug == "no_sinks" else sinks,
                                       alibi_slopes=None if bug == "no_alibi" else alibi_slopes)
    rows = int(cu_q[-1])
    total, hq = q.shape[:2]
    dtype = sizes["dtype"]                                             # the output's (an FP8 q: out_dtype / bf16)
    if out is None:
        out = torch.full((total, hq, v.shape[-1]), float("nan"), dtype=dtype)
    lse = torch.full((hq, total), float("nan"), dtype=torch.float32)
    out[:rows] = ref[:rows].to(dtype)
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
    assert all(p["kv_dtype"] is None and not p["q_fp8"] and not p["quantize_q"] for p in plain)
    assert any(d["kv_dtype"] for d in drawn)
    for p, d in zip(plain, drawn):   # (ALiBi, sinks, quantize_q and the split cap are drawn after it: may differ)
        assert {**d, "kv_dtype": None, "q_fp8": False, "out_dtype": None, "alibi": p["alibi"], "sinks": p["sinks"],
                "quantize_q": False, "max_num_splits": p["max_num_splits"]} == p


def test_alibi_and_sinks_are_drawn_last():
    """ALiBi and sinks are the case's last draws: without them every seed's case is the same but
    for those two fields, so the seeds of earlier reports draw the same batches otherwise; both
    occur, ALiBi in both shapes."""
    seeds = fuzz.batch_seeds(5, 400)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fuzz, "ALIBI_SHARE", 0.0)
        m.setattr(fuzz, "SINKS_SHARE", 0.0)
        plain = [fuzz.case_for_seed(s) for s in seeds]
    drawn = [fuzz.case_for_seed(s) for s in seeds]
    assert all(p["alibi"] is None and p["sinks"] is False for p in plain)
    assert {d["alibi"] for d in drawn} == {None, "heads", "batch_heads"} and any(d["sinks"] for d in drawn)
    for p, d in zip(plain, drawn):   # (quantize_q and the split cap are drawn after them: they may differ)
        assert {**d, "alibi": None, "sinks": False, "quantize_q": p["quantize_q"],
                "max_num_splits": p["max_num_splits"]} == p


def test_alibi_and_sinks_inputs_and_reference(monkeypatch):
    """A case with ALiBi and sinks: the call gets alibi_slopes / sinks of the drawn shapes (float32,
    geometric slopes times [0.25, 2), some heads without a sink), built from their own generators
    (every other input is the same as without them); the reference gets the same tensors; the
    stand-in passes, and drops of either are caught."""
    seed = next(s for s in SMALL if sum(fuzz.case_for_seed(s)["qlens"]) and sum(fuzz.case_for_seed(s)["klens"]))
    c = {**fuzz.case_for_seed(seed), "alibi": "batch_heads", "sinks": True}
    inp = fuzz.build_inputs(c, "cpu")
    plain = fuzz.build_inputs({**c, "alibi": None, "sinks": False}, "cpu")
    hq, b = c["num_heads_q"], len(c["qlens"])
    sl, sk = inp["kwargs"]["alibi_slopes"], inp["kwargs"]["sinks"]
    assert sl.shape == (b, hq) and sl.dtype == torch.float32 and sk.shape == (hq,) and sk.dtype == torch.float32
    base = 2.0 ** (-8.0 * (torch.arange(hq) + 1) / hq)
    assert bool(((sl / base >= 0.25 - 1e-6) & (sl / base < 2.0 + 1e-6)).all())
    assert bool((torch.isfinite(sk) | torch.isneginf(sk)).all())
    assert fuzz.build_inputs({**c, "alibi": "heads"}, "cpu")["alibi_slopes"].shape == (hq,)
    for name in ("q", "k", "v"):
        assert torch.equal(inp[name].float(), plain[name].float())
    assert "alibi_slopes" not in plain["kwargs"] and "sinks" not in plain["kwargs"]
    calls = _spy_reference(monkeypatch)
    r = fuzz.run_case(c, "cpu", attention=fake_attention)
    assert r["ok"], r
    ((_, kw),) = calls
    assert torch.equal(kw["alibi_slopes"], sl) and torch.equal(kw["sinks"], sk)
    monkeypatch.undo()
    for bug in ("no_alibi", "no_sinks"):
        r = fuzz.run_case(c, "cpu", attention=lambda *a, **k: fake_attention(*a, bug=bug, **k))
        assert not r["ok"], bug
    feats = fuzz.features(c)
    assert feats["alibi"] == "batch_heads" and feats["sinks"] is True


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
        if c["kv_dtype"] and not c["q_fp8"] and pred(c) and fuzz.stored_keys(c) <= 20000 and len(c["qlens"]) <= 64 \
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


# ----------------------------------------------------------------------------- FP8 queries
#: Recorded with the fuzzer before FP8 queries were added (tools/fuzz.py at 5145b81): per seed, the
#: first 16 hex digits of the sha256 of the drawn case as sorted JSON.  Seeds from batch_seeds(12345)
#: and the first FP8-cache seeds (several of which are FP8-q cases now).
PRE_FP8_Q_CASES = {
    1501552845: "32482cf279146587", 488200390: "9fe9a96484f2554f", 1693606510: "2ebda68a9fb502b6",
    680233354: "f1aab106a23cbc05", 438466540: "ee3c664efdd20d3b", 1712329280: "018287ab26d0aff4",
    5: "9c6641d790444aa8", 10: "cbee670fbe63da50", 13: "4586020465d77d05", 22: "19bf9f9f3a9c3bda",
    33: "cdffb37c10d356cb", 39: "078abfc7d1524bc1",
}
#: Recorded the same way: the first 16 hex digits of the sha256 of build_inputs(case, "cpu")'s
#: tensors' bytes (q: the 16-bit q of the case before FP8 queries), with torch 2.14.1's CPU
#: generator (another torch whose CPU randn or float8 rounding differs would need them recorded again).
PRE_FP8_Q_INPUTS = {
    3: dict(q="fb0545936e511e8a", k="62c43e04162d2309", v="082abdedd0a2b8b0"),
    5: dict(q="a0cd20eaed19e79c", k="3b43a4c37555e56f", v="336ff2590298cc33", k_descale="d040ac9b4dd2394c",
            v_descale="cd32121f81b9b144"),
    13: dict(q="b7250d2ff2949ea2", k="f1495c6f45eeeed1", v="eeed03b841eaa161", k_descale="941c0d1623dd5f20",
             v_descale="e1d5dbc2d59a880b"),
    54: dict(q="31ad60574c5a6b89", k="95d9e2df439b7053", v="e67b864fec3925fc", k_descale="c5cfefa5f8f72cf6",
             v_descale="4ffdd0c08b6f2b48"),
    211: dict(q="afb27460117f5a0e", k="049b109014008fc2", v="4ec2a0dffa5bda11", k_descale="4da4af6441ce33cc",
              v_descale="450d561560c62fb3"),
}
Q_FIELDS = ("q_fp8", "out_dtype")
#: drawn after the FP8-q fields (test_alibi_and_sinks_are_drawn_last, test_quantize_q_is_drawn_last):
#: they follow their draws
LATER_FIELDS = ("alibi", "sinks", "quantize_q", "max_num_splits")


def _digest(x) -> str:
    return hashlib.sha256(json.dumps(x, sort_keys=True).encode()).hexdigest()[:16]


def _tensor_digest(x) -> str:
    return hashlib.sha256(x.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def _without_fp8_q(c) -> dict:
    """The same case with a 16-bit q (its FP8-q fields off)."""
    return {**c, "q_fp8": False, "out_dtype": None}


def _drawn_before_fp8_q(c) -> dict:
    """The case's fields drawn before its FP8-q fields (without those and the fields drawn after)."""
    return {k: v for k, v in _without_fp8_q(c).items() if k not in LATER_FIELDS}


def _named(name) -> dict:
    (c,) = [c for n, c in fuzz.sanitize_cases() if n == name]
    return c


def test_seeds_reproduce_the_cases_drawn_before_fp8_queries():
    """Every field but the two new ones is what the fuzzer drew for the seed before FP8 queries
    (recorded values); the FP8-q fields are drawn for some of these seeds (FP8-cache ones)."""
    drawn = {}
    for seed, case_digest in PRE_FP8_Q_CASES.items():
        c = fuzz.case_for_seed(seed)
        drawn[seed] = c["q_fp8"]
        assert _digest({k: v for k, v in c.items() if k not in Q_FIELDS + LATER_FIELDS}) == case_digest, seed
        assert c["q_fp8"] or c["out_dtype"] is None
    assert sorted(s for s, q in drawn.items() if q) == [5, 13, 22, 39, 680233354]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_an_fp8_q_changes_the_kernels_only_for_the_tensor_core_variant(cases, arch):
    """An FP8-q case's kernels (what the prewarm compiles) are those of the same case with a 16-bit
    q (the FP8-cache kernels of the output dtype: q is converted) except where its recipe takes the
    FP8 tensor-core variant (sm_90a only), and where the 16-bit q's batch takes a mixed-batch launch
    (fused kernel, classes in turn): an FP8 q runs one class (decide)."""
    sms = 132 if arch == "sm_90a" else 108
    kinds, mixed = set(), 0
    for c in [c for c in cases if c["q_fp8"]]:
        r = fuzz.case_recipe(c, arch, sms)
        r16 = fuzz.case_recipe(_without_fp8_q(c), arch, sms)
        if r16 is not None and r16.kind != "single":
            assert r.kind == "single", c["seed"]
            mixed += 1
            continue
        attn = getattr(getattr(r, "variants", None), "attention", None)
        mma = attn is not None and attn.fp8_mma
        same = set(fuzz.case_specs(c, arch, sms)) == set(fuzz.case_specs(_without_fp8_q(c), arch, sms))
        assert same != mma, (c["seed"], attn.name if attn else None)
        kinds.add(mma)
    assert kinds == ({True, False} if arch == "sm_90a" else {False}) and mixed > 0


def test_seeds_reproduce_the_inputs_built_before_fp8_queries():
    """k, v and their descales are the bytes built before FP8 queries (recorded values), FP8-q
    case or not; an FP8-q case's q is the quantised form of the recorded 16-bit q, whose draws
    the 16-bit build of the case still makes."""
    kinds = set()
    for seed, want in PRE_FP8_Q_INPUTS.items():
        c = fuzz.case_for_seed(seed)
        inp = fuzz.build_inputs(c, "cpu")
        q16 = fuzz.build_inputs(_without_fp8_q(c), "cpu")["q"] if c["q_fp8"] else inp["q"]
        got = {"q": _tensor_digest(q16)}
        got.update({n: _tensor_digest(inp[n]) for n in ("k", "v", "k_descale", "v_descale") if inp[n] is not None})
        assert got == want, seed
        assert inp["q"].dtype == (torch.float8_e4m3fn if c["q_fp8"] else inp["out_dtype"])
        kinds.add((bool(c["kv_dtype"]), c["q_fp8"]))
    assert kinds == {(False, False), (True, False), (True, True)}


def test_fp8_q_share_and_out_dtype(cases):
    """q_fp8 only on an FP8 cache, about half of those; out_dtype only for an FP8 q, the case's
    dtype, sometimes (always for fp16 without out: the default would be bf16)."""
    fp8 = [c for c in cases if c["kv_dtype"]]
    fp8q = [c for c in fp8 if c["q_fp8"]]
    assert all(not c["q_fp8"] and c["out_dtype"] is None for c in cases if not c["kv_dtype"])
    assert abs(len(fp8q) / len(fp8) - fuzz.Q_FP8_SHARE) < 0.1 and len(fp8q) > 100
    assert all(c["out_dtype"] in (None, c["dtype"]) for c in fp8q)
    assert all(c["out_dtype"] == "fp16" for c in fp8q if c["dtype"] == "fp16" and not c["out_given"])
    explicit = [c for c in fp8q if c["out_dtype"]]
    assert 0.35 < len(explicit) / len(fp8q) < 0.75
    assert {c["out_dtype"] for c in explicit} == {"bf16", "fp16"}
    assert {(c["dtype"], c["out_given"], c["out_dtype"] is not None) for c in fp8q} >= {
        ("bf16", True, True), ("bf16", True, False), ("bf16", False, False), ("fp16", True, False),
        ("fp16", True, True), ("fp16", False, True)}
    assert {c["kv_dtype"] for c in fp8q} == {"e4m3", "e5m2"} and {c["kv"] for c in fp8q} == {"packed", "paged"}
    assert {c["phase"] for c in fp8q} == set(fuzz.PHASES) and any(c["strided"] for c in fp8q)
    assert {(c["head_dim"], c["head_dim_v"]) for c in fp8q} == set(fuzz.HEAD_DIM_PAIRS)


def test_fp8_q_is_drawn_last():
    """With no FP8-q share (or no explicit out_dtype) every seed's case is the same but for the
    FP8-q fields; with no FP8 cache there is no FP8 q."""
    seeds = fuzz.batch_seeds(11, 400)
    drawn = [fuzz.case_for_seed(s) for s in seeds]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fuzz, "Q_FP8_SHARE", 0.0)
        plain = [fuzz.case_for_seed(s) for s in seeds]
        m.setattr(fuzz, "Q_FP8_SHARE", 1.0)
        m.setattr(fuzz, "OUT_DTYPE_SHARE", 0.0)
        every = [fuzz.case_for_seed(s) for s in seeds]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fuzz, "FP8_SHARE", 0.0)
        m.setattr(fuzz, "Q_FP8_SHARE", 1.0)
        none = [fuzz.case_for_seed(s) for s in seeds]
    assert any(d["q_fp8"] for d in drawn) and not any(p["q_fp8"] for p in plain)
    assert [e["q_fp8"] for e in every] == [bool(e["kv_dtype"]) for e in every]
    assert all(e["out_dtype"] == ("fp16" if e["dtype"] == "fp16" and not e["out_given"] else None)
               for e in every if e["q_fp8"])
    assert not any(n["q_fp8"] for n in none)
    for p, d, e in zip(plain, drawn, every):
        assert _drawn_before_fp8_q(d) == _drawn_before_fp8_q(p) == _drawn_before_fp8_q(e)


def _small_fp8_q_seed(pred, limit=200000):
    for s in range(limit):
        c = fuzz.case_for_seed(s)
        if c["q_fp8"] and pred(c) and fuzz.stored_keys(c) <= 20000 and fuzz.total_q_rows(c) <= 3000 \
                and len(c["qlens"]) <= 64 and sum(c["qlens"]) > 0:
            return c
    raise AssertionError("no small FP8-q case with that feature")


@pytest.mark.parametrize("layout", ["packed", "paged", "strided", "pad_rows"])
def test_fp8_q_inputs_are_e4m3_with_a_q_descale(layout):
    """An FP8-q case's q is e4m3: the 16-bit case's draws divided by their request's and KV head's
    q_descale (padding rows and the strided view's extra heads by 1), quantised (within 2^-4
    relative, and the subnormal step, of the 16-bit q); q_descale float32 (batch, num_heads_kv) in
    [0.5, 2), deterministic, in the call's arguments; k / v and their descales are the 16-bit-q
    build's; out_dtype in the arguments exactly when the case draws it."""
    pred = {"packed": lambda c: c["kv"] == "packed" and not c["strided"] and not c["pad_rows"],
            "paged": lambda c: c["kv"] == "paged" and not c["strided"],
            "strided": lambda c: c["strided"], "pad_rows": lambda c: c["pad_rows"] > 0}[layout]
    c = _small_fp8_q_seed(pred)
    inp, again = fuzz.build_inputs(c, "cpu"), fuzz.build_inputs(c, "cpu")
    ref = fuzz.build_inputs(_without_fp8_q(c), "cpu")
    batch, hq, hkv, d = len(c["qlens"]), c["num_heads_q"], c["num_heads_kv"], c["head_dim"]
    q8, qd = inp["q"], inp["q_descale"]
    assert q8.dtype == torch.float8_e4m3fn and q8.shape == (fuzz.total_q_rows(c), hq, d)
    assert (q8.stride(0) > hq * d) == c["strided"]
    assert qd.dtype == torch.float32 and qd.shape == (batch, hkv) and qd.is_contiguous()
    assert bool((qd >= fuzz.DESCALE_RANGE[0]).all()) and bool((qd < fuzz.DESCALE_RANGE[1]).all())
    assert inp["kwargs"]["q_descale"] is qd and torch.equal(qd, again["q_descale"])
    assert torch.equal(q8.view(torch.uint8), again["q"].view(torch.uint8))
    assert not torch.equal(qd, inp["k_descale"]) and not torch.equal(qd, inp["v_descale"])
    for n in ("k", "v", "k_descale", "v_descale"):
        assert torch.equal(inp[n].view(torch.uint8), ref[n].view(torch.uint8)), n
    assert ref["q"].dtype == inp["out_dtype"] and ref["q_descale"] is None
    assert ("out_dtype" in inp["kwargs"]) == (c["out_dtype"] is not None)
    if c["out_dtype"]:
        assert inp["kwargs"]["out_dtype"] == inp["out_dtype"] == {"bf16": torch.bfloat16, "fp16": torch.float16}[
            c["out_dtype"]]
    # each row's factor: its request's (padding rows: 1), per KV head over its query heads;
    # strided: the view's storage, the extra heads with factor 1
    owner = torch.repeat_interleave(torch.arange(batch + 1), torch.tensor(c["qlens"] + [c["pad_rows"]]))
    factor = torch.cat([qd, torch.ones(1, hkv)])[owner].repeat_interleave(hq // hkv, dim=1).double()
    heads = hq + (2 if c["strided"] else 0)
    full8 = q8.as_strided((q8.shape[0], heads, d), q8.stride())
    full16 = ref["q"].as_strided((q8.shape[0], heads, d), ref["q"].stride())
    factor = torch.cat([factor, torch.ones(q8.shape[0], heads - hq, dtype=torch.float64)], dim=1)
    deq, want = full8.double() * factor[:, :, None], full16.double()
    tol = (2.0 ** -4 + 2.0 ** -8) * want.abs() + 2.0 ** -8
    assert bool(((deq - want).abs() <= tol).all()), float((deq - want).abs().max())
    assert not bool(((full8.double() - want).abs()[:, :hq] <= tol[:, :hq]).all())   # the factors are applied
    if c["pad_rows"]:
        rows = sum(c["qlens"])
        assert bool(((full8[rows:].double() - want[rows:]).abs() <= tol[rows:]).all())


def _spy_reference(monkeypatch):
    from kernelgen.apps import reference
    calls = []
    real = reference.attention_reference

    def spy(q, *a, **kw):
        calls.append((q, kw))
        return real(q, *a, **kw)
    monkeypatch.setattr(reference, "attention_reference", spy)
    return calls


def test_the_reference_gets_the_q_descale(monkeypatch):
    """run_case hands the reference the e4m3 q and its q_descale (no bounds: the stand-in is not
    the FP8 tensor-core variant); a 16-bit case passes none."""
    calls = _spy_reference(monkeypatch)
    c = _small_fp8_q_seed(lambda c: True)
    r = fuzz.run_case(c, "cpu", attention=fake_attention)
    assert r["ok"] and r["fp8_mma"] is False and r["kernel"] is None, r
    ((q, kw),) = calls
    want = fuzz.build_inputs(c, "cpu")
    assert q.dtype == torch.float8_e4m3fn and torch.equal(q.view(torch.uint8), want["q"].view(torch.uint8))
    assert kw["q_descale"].dtype == torch.float32 and torch.equal(kw["q_descale"], want["q_descale"])
    assert torch.equal(kw["k_descale"], want["k_descale"]) and "fp8_mma_bounds" not in kw
    calls.clear()
    fuzz.run_case(fuzz.case_for_seed(SMALL[0]), "cpu", attention=fake_attention)
    assert calls[0][1]["q_descale"] is None and calls[0][0].dtype in (torch.bfloat16, torch.float16)


def small_fp8_q_seeds(n):
    return [s for s in SMALL_FP8_POOL if fuzz.case_for_seed(s)["q_fp8"]][:n]


SMALL_FP8_POOL = small_fp8_seeds(40)


@pytest.mark.parametrize("seed", small_fp8_q_seeds(8))
def test_fp8_q_pipeline_on_cpu_with_reference_stand_in(seed):
    """FP8-q cases through build_inputs -> call (q_descale, out_dtype) -> reference (which applies
    q_descale) -> compare; a call that ignores q_descale is caught (so the reference applies it)."""
    c = fuzz.case_for_seed(seed)
    assert c["q_fp8"]
    r = fuzz.run_case(c, "cpu", poison=True, attention=fake_attention)
    assert r["ok"] and not r["fp8_mma"], (seed, r["errors"])
    bad = fuzz.run_case(c, "cpu", attention=lambda *a, **kw: fake_attention(*a, bug="no_q_descale", **kw))
    assert not bad["ok"] and any("out error" in e or "lse error" in e for e in bad["errors"]), bad["errors"]


def test_fp8_q_output_dtype_is_checked():
    """An FP8-q call whose output is not the case's dtype (an out_dtype ignored) fails."""
    c = _small_fp8_q_seed(lambda c: c["dtype"] == "fp16" and not c["out_given"])

    def ignores_out_dtype(*a, out_dtype=None, **kw):
        return fake_attention(*a, **kw)
    r = fuzz.run_case(c, "cpu", attention=ignores_out_dtype)
    assert not r["ok"] and r["errors"] == ["the output has dtype torch.bfloat16, want torch.float16"]


def _dispatching(values):
    """A stand-in for the GPU call: kernelgen.varlen_attention on the fake CUDA layer (validation,
    the dispatcher's choice and the prepared call run_case reads the kernel of), then ``values``
    (out, lse: float64, of every row) written into the batch's rows of its outputs."""
    import kernelgen

    def attention(q, k, v, cu_q, *a, **kw):
        res = kernelgen.varlen_attention(q, k, v, cu_q, *a, **kw)
        out, lse = res if kw.get("return_lse") else (res, None)
        rows = int(cu_q[-1])
        out[:rows] = values[0][:rows].to(out.dtype)
        if lse is not None:
            lse[:, :rows] = values[1][:, :rows].float()
        return res
    return attention


def _perturbed(c, inp, scale_all, scale_one):
    """(ref, ref_lse, out_bound, lse_bound, out values, worst element): the reference off by
    ``scale_all`` times the FP8 tensor-core bound everywhere (alternating signs) and ``scale_one``
    times it at the element where the bound exceeds the 16-bit tolerance most."""
    ref, ref_lse, ob, lb = fuzz.reference_for(c, inp, fp8_mma_bounds=True)
    rows = sum(c["qlens"])
    atol, rtol, _, _ = fuzz.tolerances(c)
    ratio = (ob / (atol + rtol * ref.abs()))[:rows]
    worst = tuple(int(i) for i in np.unravel_index(int(ratio.argmax()), tuple(ratio.shape)))
    assert float(ratio.max()) > 2       # there the bound is well beyond the 16-bit tolerance
    sign = torch.where(torch.arange(ob.numel()).view(ob.shape) % 2 == 0, 1.0, -1.0).double()
    off = scale_all * ob * sign
    off[worst] = scale_one * ob[worst] * sign[worst]
    return ref, ref_lse, ob, lb, ref + off, worst


def test_a_call_that_ran_fp8_mma_is_compared_within_its_bounds(fake_cuda):
    """The causal packed FP8-q prefill (d 128, GQA) runs the FP8 tensor-core variant on the fake
    H200: run_case reads that from the prepared call and compares within fp8_mma_bounds, as
    test_fp8_mma_gpu.check_mma does: an output 0.2 bound off (0.95 at one element) with the lse
    off by its bound + 1.5e-3 passes there (and fails the 16-bit tolerance); an element past its
    bound, a systematic error of 0.3 bound, an lse past its bound fail."""
    c = _named("fp8q_prefill_causal_packed_gqa")
    inp = fuzz.build_inputs(c, "cpu")
    rows = sum(c["qlens"])
    ref, ref_lse, ob, lb, out, worst = _perturbed(c, inp, 0.2, 0.95)
    lse = ref_lse + lb + 1.5e-3
    r = fuzz.run_case(c, "cpu", attention=_dispatching((out, lse)))
    assert r["ok"], r["errors"]
    assert r["fp8_mma"] is True and fuzz.FP8_MMA_TAG in r["kernel"] and "_d128_" in r["kernel"], r["kernel"]
    assert 0.9 < r["bound_ratio"] <= 1.0
    assert r["max_err"] == pytest.approx(float((out - ref)[:rows].abs().max()), rel=0.01)
    # the same output against the 16-bit tolerance fails (values and lse)
    o16 = torch.full((fuzz.total_q_rows(c), c["num_heads_q"], c["head_dim_v"]), float("nan"), dtype=torch.float16)
    o16[:rows] = out[:rows].half()
    l32 = torch.full((c["num_heads_q"], fuzz.total_q_rows(c)), float("nan"))
    l32[:, :rows] = lse[:, :rows].float()
    plain = fuzz.compare(c, o16, l32, ref, ref_lse, rows)
    assert not plain["ok"] and any(e.startswith("out error") for e in plain["errors"]) \
        and any(e.startswith("lse error") for e in plain["errors"]), plain["errors"]
    # past the bounds
    _, _, _, _, beyond, _ = _perturbed(c, inp, 0.2, 1.5)
    r = fuzz.run_case(c, "cpu", attention=_dispatching((beyond, ref_lse)))
    assert not r["ok"] and r["fp8_mma"] and len(r["errors"]) == 1 and "beyond the FP8 tensor-core bound" in \
        r["errors"][0] and f"{list(worst)}" in r["errors"][0], r["errors"]
    assert 1.45 < r["bound_ratio"] < 1.55
    _, _, _, _, systematic, _ = _perturbed(c, inp, 0.3, 0.3)
    r = fuzz.run_case(c, "cpu", attention=_dispatching((systematic, ref_lse)))
    assert not r["ok"] and len(r["errors"]) == 1 and r["errors"][0].startswith("mean out error"), r["errors"]
    r = fuzz.run_case(c, "cpu", attention=_dispatching((ref, ref_lse + lb + 2.5e-3 + 2e-4 * ref_lse.abs())))
    assert not r["ok"] and len(r["errors"]) == 1 and r["errors"][0].startswith("lse error") \
        and "FP8 tensor-core bound" in r["errors"][0], r["errors"]


def test_a_call_with_q_converted_is_compared_within_the_tolerance(fake_cuda):
    """The FP8-q paged decode runs a converted-q kernel (no fp8mma in its name): run_case keeps
    the 16-bit tolerance, so an output within the FP8 tensor-core bound but past the tolerance
    fails; the reference's values pass; the output is the default bf16 (no out, no out_dtype)."""
    c = _named("fp8q_decode_paged_converted")
    assert c["dtype"] == "bf16" and not c["out_given"] and c["out_dtype"] is None
    inp = fuzz.build_inputs(c, "cpu")
    ref, ref_lse, ob, lb, out, worst = _perturbed(c, inp, 0.0, 0.95)
    r = fuzz.run_case(c, "cpu", attention=_dispatching((ref, ref_lse)))
    assert r["ok"] and r["fp8_mma"] is False and "bound_ratio" not in r, r
    assert fuzz.FP8_MMA_TAG not in r["kernel"] and "_kve5m2_" in r["kernel"] and "_bf16_" in r["kernel"], r["kernel"]
    r = fuzz.run_case(c, "cpu", attention=_dispatching((out, ref_lse)))
    assert not r["ok"] and r["fp8_mma"] is False and len(r["errors"]) == 1, r["errors"]
    assert r["errors"][0].startswith("out error") and f"{list(worst)}" in r["errors"][0], r["errors"]


def test_the_kernel_is_read_from_the_call_just_made(fake_cuda):
    """run_case forgets the previous call's prepared kernel first: a call after an FP8 tensor-core
    one that prepares nothing (a stand-in) is not taken for one."""
    c = _named("fp8q_prefill_causal_packed_gqa")
    inp = fuzz.build_inputs(c, "cpu")
    ref, ref_lse = fuzz.reference_for(c, inp)
    assert fuzz.run_case(c, "cpu", attention=_dispatching((ref, ref_lse)))["fp8_mma"] is True
    assert fuzz.FP8_MMA_TAG in fuzz.prepared_kernel_name()
    r = fuzz.run_case(c, "cpu", attention=fake_attention)
    assert r["ok"] and r["kernel"] is None and r["fp8_mma"] is False


def test_case_recipe_is_the_dispatch_of_fp8_q_cases(fake_cuda):
    """case_recipe (what the prewarm compiles) chooses the kernel run_case's call prepares, for
    FP8-q cases (out, out_dtype and q_descale as the fuzz passes them; the fake device: an H200):
    q_dtype reaches the dispatcher as in varlen_call, and run_case's comparison follows the kernel
    (the reference's values pass either way)."""
    classes: dict = {}                    # up to 6 small cases of each: d64 / d128 / d256 on the variant, q converted
    for s in range(20000):
        c = fuzz.case_for_seed(s)
        if c["q_fp8"] and sum(c["qlens"]) > 0 and fuzz.stored_keys(c) <= 20000 and fuzz.total_q_rows(c) <= 4000 \
                and fuzz.ref_elems(c) <= 2e7 and len(c["qlens"]) <= 256:
            r = fuzz.case_recipe(c, "sm_90a", 132)
            if r.kind != "single":        # (a mixed batch's fused launch or classes in turn: q converted, no FP8 MMA)
                continue
            attn = r.variants.attention
            group = classes.setdefault(c["head_dim"] if attn.fp8_mma else "converted", [])
            if len(group) < 6:
                group.append(c)
            if len(classes) == 4 and all(len(g) == 6 for g in classes.values()):
                break
    assert sorted(map(str, classes)) == ["128", "256", "64", "converted"]
    picked = [c for g in classes.values() for c in g]
    picked += [_named("fp8q_prefill_causal_packed_gqa"), _named("fp8q_decode_paged_converted")]
    names = []
    for c in picked:
        ref = fuzz.reference_for(c, fuzz.build_inputs(c, "cpu"))
        r = fuzz.run_case(c, "cpu", attention=_dispatching(ref))
        want = fuzz.case_recipe(c, "sm_90a", 132).variants.attention.name
        assert r["ok"] and r["kernel"] == want and r["fp8_mma"] == (fuzz.FP8_MMA_TAG in want), (c["seed"], r)
        names.append(want)
    mma = [n for n in names if fuzz.FP8_MMA_TAG in n]
    assert mma and len(mma) < len(names) and all(any(f"_d{d}_" in n for n in mma) for d in (64, 128, 256))
    assert {c["out_dtype"] for c in picked} == {None, "bf16", "fp16"} and {c["out_given"] for c in picked} == {
        True, False}


def test_recipes_and_prewarm_include_the_fp8_q_kernels(cases, monkeypatch):
    """On sm_90a the FP8-q cases' recipes take the FP8 tensor-core variant at head dims 64 / 128 (and
    256 without split-KV: ``heuristics.SM90_FP8_MMA_TILE_LIMITS``) (not every one: decode-shaped calls
    convert q), no other case does but a ``quantize_q`` one (an e4m3 cache: q quantised), sm_80
    never; the prewarm compiles exactly the drawn cases' kernels, those included."""
    from kernelgen.jit import warmup

    fp8q = [c for c in cases if c["q_fp8"]]
    mma_cases = []
    for c in cases[:600] + fp8q:
        attn = getattr(getattr(fuzz.case_recipe(c, "sm_90a", 132), "variants", None), "attention", None)
        if attn is not None and attn.fp8_mma:
            assert c["q_fp8"] or (c["quantize_q"] and c["kv_dtype"] == "e4m3"), c["seed"]
            assert c["head_dim"] == c["head_dim_v"] and c["head_dim"] in (64, 128, 256)
            assert fuzz.FP8_MMA_TAG in attn.name
            assert c["head_dim"] != 256 or not attn.split, c
            mma_cases.append(c)
        attn80 = getattr(getattr(fuzz.case_recipe(c, "sm_80", 108), "variants", None), "attention", None)
        assert attn80 is None or not attn80.fp8_mma
    assert {c["kv_dtype"] for c in mma_cases} == {"e4m3", "e5m2"} and {c["head_dim"] for c in mma_cases} == {64, 128, 256}
    assert {c["dtype"] for c in mma_cases} == {"bf16", "fp16"} and {c["kv"] for c in mma_cases} == {"packed", "paged"}
    assert any(c["head_dim"] in (64, 128, 256) and c["head_dim"] == c["head_dim_v"] and c not in mma_cases for c in fp8q)
    got = []

    def record(specs, root, jobs=None, progress=False, desc=""):
        got.extend(specs)
        return len(specs), 0
    monkeypatch.setattr(warmup, "warmup", record)
    batch = fp8q[:60] + [_named("fp8q_prefill_causal_packed_gqa")]
    p = fuzz.prewarm(batch, "sm_90a", 132)
    assert p["error"] is None and p["unplannable_cases"] == 0 and p["kernels"] == len(got) == len(set(got))
    assert set(got) == {s for c in batch for s in fuzz.case_specs(c, "sm_90a", 132)}
    assert sum(1 for s in got if s.kind == "attention" and s.fp8_mma) >= 2
    assert not any(s.kind == "attention" and s.fp8_mma for c in batch
                   for s in fuzz.case_specs(_without_fp8_q(c), "sm_90a", 132))


def test_run_fuzz_reports_the_fp8_mma_batches(monkeypatch):
    """The summary counts the batches compared within the FP8 tensor-core bounds apart (their
    errors, worst error / bound), the FP8-q kernels in the coverage, fp8_mma in the failures."""
    seeds = fuzz.batch_seeds(21, 400)
    cases = {s: fuzz.case_for_seed(s) for s in seeds}
    assert sum(c["q_fp8"] for c in cases.values()) >= 4

    def canned(case, dev, poison=True, attention=None):
        mma = case["q_fp8"] and case["head_dim"] == 128
        ok = not (mma and case["dtype"] == "bf16")
        return {"seed": case["seed"], "ok": ok, "unwritten_rows": 0, "max_err": 0.5 if mma else 0.001,
                "lse_err": 0.0, "errors": [] if ok else ["out error x beyond the FP8 tensor-core bound"],
                "fp8_mma": mma, "kernel": "k_fp8mma" if mma else "k", "seconds": 0.0,
                **({"bound_ratio": 0.7} if mma else {})}
    monkeypatch.setattr(fuzz, "run_case", canned)
    lines = []
    s = fuzz.run_fuzz(400, 21, device="cpu", arch="sm_90a", do_prewarm=False, hang_s=0, log=lines.append)
    fp8q = [c for c in cases.values() if c["q_fp8"]]
    n_mma = sum(c["head_dim"] == 128 for c in fp8q)
    assert n_mma >= 1 and s["fp8_mma"] == {"batches": n_mma, "max_err": 0.5, "max_bound_ratio": 0.7}
    assert s["max_err"] == {"bf16": 0.001, "fp16": 0.001}
    assert s["coverage"]["fp8_q_kernel"] == {"fp8_mma": n_mma, "converted": len(fp8q) - n_mma}
    assert sum(s["coverage"]["q"].values()) == 400 and s["coverage"]["q"]["e4m3"] == len(fp8q)
    bad = [c for c in fp8q if c["head_dim"] == 128 and c["dtype"] == "bf16"]
    assert s["mismatches"] == len(bad) and [f["seed"] for f in s["failures"]] == [c["seed"] for c in bad]
    assert all(f["fp8_mma"] is True and f["kernel"] == "k_fp8mma" for f in s["failures"])
    assert all("[FP8 tensor-core bounds]" in line for line in lines if "MISMATCH" in line)


# ----------------------------------------------------------------------------- quantize_q
#: Recorded with the fuzzer before quantize_q was drawn (tools/fuzz.py at 22e716a): per seed, the first
#: 16 hex digits of the sha256 of the drawn case as sorted JSON.  Seeds from batch_seeds(12345): four
#: that draw quantize_q now, two e4m3-cache 16-bit-q cases that draw it False, an FP8-q case, a
#: 16-bit case and an e5m2 one.
PRE_QUANTIZE_Q_CASES = {
    730359585: "132c72882d4a97cc", 146217199: "49a86adab90b8dd5", 455221513: "e744b8cefc19573e",
    1304975114: "7c3b282cb0ddfc2f", 174946158: "53a5fe2ec021a963", 639016547: "20a66b9fe03a055c",
    680233354: "d3b4c4cb35db2e8f", 1501552845: "f8682610e4382722", 839901363: "89e5e94b7960b378",
}


def test_the_split_cap_is_drawn_last():
    """max_num_splits is the case's last draw, made only for automatic splits: with no share every
    seed's case is the same but for that field (0 everywhere); drawn, it occurs with every cap of
    SPLIT_CAPS and never beside a forced num_splits, and reaches the call's kwargs and the signature
    the prewarm decides from."""
    seeds = fuzz.batch_seeds(17, 600)
    drawn = [fuzz.case_for_seed(s) for s in seeds]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fuzz, "SPLIT_CAP_SHARE", 0.0)
        plain = [fuzz.case_for_seed(s) for s in seeds]
    assert all(p["max_num_splits"] == 0 for p in plain)
    for p, d in zip(plain, drawn):
        assert {**d, "max_num_splits": 0} == p
        assert d["max_num_splits"] == 0 or d["num_splits"] == 0
    assert {d["max_num_splits"] for d in drawn} == {0, *fuzz.SPLIT_CAPS}
    capped = next(d for d in drawn if d["max_num_splits"] and sum(d["qlens"]) and max(d["klens"]) > 2048)
    assert fuzz.build_inputs(capped, "cpu")["kwargs"]["max_num_splits"] == capped["max_num_splits"]
    r = fuzz.case_recipe(capped, "sm_90a", 132)
    bound = (r.variants.max_splits if hasattr(r.variants, "max_splits") else r.variants.short_max_splits
             if hasattr(r.variants, "short_max_splits") else r.variants.short.max_splits)
    assert bound <= capped["max_num_splits"]


def test_seeds_reproduce_the_cases_drawn_before_quantize_q():
    """Every field but quantize_q is what the fuzzer drew for the seed before quantize_q was drawn
    (recorded values, every field included); quantize_q is True exactly for the four seeds
    recorded as such, all e4m3-cache cases with a 16-bit q."""
    drawn = {}
    for seed, case_digest in PRE_QUANTIZE_Q_CASES.items():
        c = fuzz.case_for_seed(seed)
        assert _digest({k: v for k, v in c.items() if k not in ("quantize_q", "max_num_splits")}) == case_digest, seed
        drawn[seed] = c["quantize_q"]
        assert c["quantize_q"] is (c["quantize_q"] and c["kv_dtype"] == "e4m3" and not c["q_fp8"])
    assert sorted(s for s, q in drawn.items() if q) == [146217199, 455221513, 730359585, 1304975114]
    assert [drawn[s] for s in (174946158, 639016547)] == [False, False]
    assert {fuzz.case_for_seed(s)["kv_dtype"] for s in (174946158, 639016547)} == {"e4m3"}


def test_quantize_q_is_drawn_last():
    """quantize_q is the case's last draw, made only for an e4m3 cache with a 16-bit q: with no
    quantize_q share every seed's case is the same but for that field (False everywhere); with a
    share of 1 it is True exactly for those cases; without FP8 caches or with every FP8-cache q
    in e4m3 it is never drawn."""
    seeds = fuzz.batch_seeds(13, 600)
    drawn = [fuzz.case_for_seed(s) for s in seeds]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fuzz, "QUANTIZE_Q_SHARE", 0.0)
        plain = [fuzz.case_for_seed(s) for s in seeds]
        m.setattr(fuzz, "QUANTIZE_Q_SHARE", 1.0)
        every = [fuzz.case_for_seed(s) for s in seeds]
        m.setattr(fuzz, "FP8_SHARE", 0.0)
        no_fp8 = [fuzz.case_for_seed(s) for s in seeds]
        m.setattr(fuzz, "FP8_SHARE", 1.0)
        m.setattr(fuzz, "Q_FP8_SHARE", 1.0)
        all_fp8_q = [fuzz.case_for_seed(s) for s in seeds]
    eligible = [c["kv_dtype"] == "e4m3" and not c["q_fp8"] for c in drawn]
    assert sum(eligible) >= 10 and any(d["quantize_q"] for d in drawn) and not any(p["quantize_q"] for p in plain)
    assert [e["quantize_q"] for e in every] == eligible
    assert all(not d["quantize_q"] or ok for d, ok in zip(drawn, eligible))
    assert not any(c["quantize_q"] for c in no_fp8 + all_fp8_q)
    for p, d, e in zip(plain, drawn, every):
        assert {**d, "quantize_q": False} == {**e, "quantize_q": False} == p


def test_quantize_q_share(cases):
    """quantize_q only on an e4m3 cache with a 16-bit q, about QUANTIZE_Q_SHARE of those, over both
    dtypes and K/V layouts; on the fake H200's dispatch (case_recipe) some take the FP8
    tensor-core variant (q quantised) and some do not (q exact)."""
    eligible = [c for c in cases if c["kv_dtype"] == "e4m3" and not c["q_fp8"]]
    qq = [c for c in cases if c["quantize_q"]]
    assert qq and all(c in eligible for c in qq) and len(eligible) > 40
    assert abs(len(qq) / len(eligible) - fuzz.QUANTIZE_Q_SHARE) < 0.2
    assert {c["dtype"] for c in qq} == {"bf16", "fp16"} and {c["kv"] for c in qq} == {"packed", "paged"}
    mma = [getattr(getattr(fuzz.case_recipe(c, "sm_90a", 132), "variants", None), "attention", None) for c in qq]
    mma = [a is not None and a.fp8_mma for a in mma]
    assert any(mma) and not all(mma)
    assert all(fuzz.features(c)["quantize_q"] is c["quantize_q"] for c in cases[:200] + qq)


def test_quantize_q_inputs_are_the_cases_with_the_flag():
    """A quantize_q case's call gets quantize_q=True and otherwise exactly the inputs of the same
    case without it (a 16-bit q, no q_descale, the same k / v and descales); no other case passes
    quantize_q."""
    seeds = [s for s in PRE_QUANTIZE_Q_CASES if fuzz.case_for_seed(s)["quantize_q"]]
    small = next(s for s in seeds if fuzz.stored_keys(fuzz.case_for_seed(s)) <= 20000)
    for s in [small] + [x for x in PRE_QUANTIZE_Q_CASES if not fuzz.case_for_seed(x)["quantize_q"]][:3]:
        c = fuzz.case_for_seed(s)
        inp = fuzz.build_inputs(c, "cpu" if s == small else "meta")
        kw = inp["kwargs"]
        if not c["quantize_q"]:
            assert "quantize_q" not in kw
            continue
        assert kw["quantize_q"] is True and "q_descale" not in kw and inp["q_descale"] is None
        assert inp["q"].dtype == inp["out_dtype"] == {"bf16": torch.bfloat16, "fp16": torch.float16}[c["dtype"]]
        plain = fuzz.build_inputs({**c, "quantize_q": False}, "cpu")
        assert {k: v for k, v in kw.items() if k != "quantize_q"}.keys() == plain["kwargs"].keys()
        for n in ("q", "k", "v", "k_descale", "v_descale"):
            assert torch.equal(inp[n].view(torch.uint8), plain[n].view(torch.uint8)), n


def _rows_request(c) -> torch.Tensor:
    b = len(c["qlens"])
    return torch.repeat_interleave(torch.arange(b + 1), torch.tensor(c["qlens"] + [c["pad_rows"]]))


def test_quantized_q_is_the_librarys_quantisation(monkeypatch):
    """quantized_q: (q8, q_descale) are kernelgen.launch.quant_q.quantize_reference's (the torch-op
    specification of quantize, not its kernel) on the case's q, called with the case's
    cu_seqlens_q, batch and KV heads, the bytes quantize gives on the CPU; q_ref = q8 * q_descale
    of each row's request and KV head (padding rows: 1), in float32, exactly; it differs from q by
    e4m3's rounding only (2^-4 relative above the subnormal range)."""
    from kernelgen.launch import quant_q

    c = _named("quantize_q_prefill_causal_packed_gqa")
    inp = fuzz.build_inputs(c, "cpu")
    seen = []
    real = quant_q.quantize_reference

    def spy(q, cu, batch, hkv, *a, **kw):
        seen.append((q, cu, batch, hkv, a, kw))
        return real(q, cu, batch, hkv, *a, **kw)
    monkeypatch.setattr(quant_q, "quantize_reference", spy)
    monkeypatch.setattr(quant_q, "quantize", lambda *a, **kw: pytest.fail("quantized_q called quantize"))
    q_ref, q8, qd = fuzz.quantized_q(c, inp)
    ((q, cu, batch, hkv, a, kw),) = seen
    assert q is inp["q"] and cu is inp["cu_seqlens_q"] and (batch, hkv) == (3, 2) and not a and not kw
    monkeypatch.undo()
    want8, want_qd = quant_q.quantize(inp["q"], inp["cu_seqlens_q"], 3, 2)
    assert torch.equal(q8.view(torch.uint8), want8.view(torch.uint8)) and torch.equal(qd, want_qd)
    assert q_ref.dtype == torch.float32 and q_ref.shape == inp["q"].shape
    factor = torch.cat([want_qd.double(), torch.ones(1, 2, dtype=torch.float64)])[_rows_request(c)]
    want = want8.double() * factor.repeat_interleave(4, dim=1)[:, :, None]
    assert torch.equal(q_ref.double(), want)
    m, _ = torch.frexp(want_qd)
    assert bool((m == 0.5).all()) and bool((want_qd[1] == 1).all())   # powers of two; the empty request: 1
    err, q16 = (q_ref.double() - inp["q"].double()).abs(), inp["q"].double()
    assert float(err.max()) > 0 and bool((err <= 2.0 ** -4 * q16.abs() + 2.0 ** -10).all())


def test_a_quantize_q_call_on_the_tensor_core_variant_is_checked_against_the_quantised_q(fake_cuda, monkeypatch):
    """The sanitize subset's quantize_q prefill (bf16, d 128, GQA, e4m3 cache) passes quantize_q=True
    and runs the FP8 tensor-core variant on the fake H200 (q quantised by kernelgen): run_case
    reads that, hands the reference quantized_q's q (not the 16-bit q) with the variant's bounds,
    and passes the reference's values; an output 1.5 bounds off at one element fails."""
    calls = _spy_reference(monkeypatch)
    c = _named("quantize_q_prefill_causal_packed_gqa")
    assert c["quantize_q"] and not c["q_fp8"] and c["kv_dtype"] == "e4m3"
    inp = fuzz.build_inputs(c, "cpu")
    q_ref = fuzz.quantized_q(c, inp)[0]
    ref = fuzz.reference_for(c, inp, fp8_mma_bounds=True, q=q_ref)
    calls.clear()
    r = fuzz.run_case(c, "cpu", attention=_dispatching(ref[:2]))
    assert r["ok"], r["errors"]
    assert r["fp8_mma"] is True and r["quantized"] is True and fuzz.FP8_MMA_TAG in r["kernel"] \
        and "_d128_" in r["kernel"] and r["kernel"] == fuzz.case_recipe(c, "sm_90a", 132).variants.attention.name
    assert 0 < r["bound_ratio"] < 0.25                  # the output's bf16 rounding only
    ((q, kw),) = calls
    assert q.dtype == torch.float32 and torch.equal(q, q_ref) and not torch.equal(q.double(), inp["q"].double())
    assert kw["fp8_mma_bounds"] is True and kw["q_descale"] is None and torch.equal(kw["k_descale"], inp["k_descale"])
    # the reference's q matters: the exact q's values are off the quantised q's somewhere
    exact = fuzz.reference_for(c, inp)
    rows = sum(c["qlens"])
    assert float((exact[0] - ref[0])[:rows].abs().max()) > 1e-3
    # 1.5 bounds off at one element
    off = ref[0].clone()
    ratio = (ref[2] / (1e-2 + ref[0].abs()))[:rows]
    worst = tuple(int(i) for i in np.unravel_index(int(ratio.argmax()), tuple(ratio.shape)))
    off[worst] += 1.5 * ref[2][worst]
    # ... and a larger error within its own (larger) bound elsewhere
    big = tuple(int(i) for i in np.unravel_index(int(ref[2][:rows].argmax()), tuple(ref[2][:rows].shape)))
    assert big != worst and 0.9 * float(ref[2][big]) > 1.1 * 1.5 * float(ref[2][worst])
    off[big] += 0.9 * ref[2][big]
    r = fuzz.run_case(c, "cpu", attention=_dispatching((off, ref[1])))
    assert not r["ok"] and r["quantized"] and len(r["errors"]) == 1 \
        and "beyond the FP8 tensor-core bound" in r["errors"][0], r["errors"]
    # the message gives the count beyond the bound and the first element's value, reference and bound
    got = float(off[worst].to(fuzz.build_inputs(c, "meta")["out_dtype"]))     # (as the output stores it)
    want = (f"1 element(s) beyond, the first: out {got:.5g}, ref {float(ref[0][worst]):.5g}, "
            f"bound {float(ref[2][worst]):.3g}, its row's lse")
    assert want in r["errors"][0], r["errors"]
    # and the error it leads with is that element's, not the largest error of the whole output
    assert r["errors"][0].startswith(f"out error up to {abs(got - float(ref[0][worst])):.3e} beyond"), r["errors"]
    assert r["max_err"] > 1.05 * abs(got - float(ref[0][worst])), r["max_err"]


@pytest.mark.parametrize("how", ["decode", "alibi", "sm_80"])
def test_a_quantize_q_call_that_keeps_q_exact_has_the_fp8_cache_check(fake_cuda, monkeypatch, how):
    """A quantize_q case the tensor-core variant does not take (decode-shaped, ALiBi, the sm_80
    mainloop) keeps q exact: run_case says so (quantized False, no fp8mma kernel), the reference
    gets the case's 16-bit q and no bounds of the variant, and the 16-bit tolerance applies (the
    exact q's values pass, an element 0.02 off fails)."""
    base = _named("quantize_q_prefill_causal_packed_gqa")
    if how == "decode":
        c = {**base, "qlens": [1, 0, 1], "pad_rows": 1}
    elif how == "alibi":
        c = {**base, "alibi": "heads"}
    else:
        c = base
        monkeypatch.setenv("KERNELGEN_ARCH", "sm_80")
    calls = _spy_reference(monkeypatch)
    inp = fuzz.build_inputs(c, "cpu")
    ref = fuzz.reference_for(c, inp)
    calls.clear()
    r = fuzz.run_case(c, "cpu", attention=_dispatching(ref))
    assert r["ok"] and r["fp8_mma"] is False and r["quantized"] is False, r
    assert r["kernel"] is not None and fuzz.FP8_MMA_TAG not in r["kernel"] and "_kve4m3_" in r["kernel"]
    ((q, kw),) = calls
    assert q is not None and q.dtype == torch.bfloat16 and torch.equal(q, inp["q"]) and "fp8_mma_bounds" not in kw
    off = ref[0].clone()
    rows = sum(c["qlens"])
    off[rows - 1, 0, 0] += 0.02 + 0.02 * abs(float(off[rows - 1, 0, 0]))
    r = fuzz.run_case(c, "cpu", attention=_dispatching((off, ref[1])))
    assert not r["ok"] and not r["quantized"] and len(r["errors"]) == 1 and r["errors"][0].startswith("out error")


def test_case_recipe_is_the_dispatch_of_quantize_q_cases(fake_cuda):
    """case_recipe (what the prewarm compiles) chooses the kernel a drawn quantize_q case's call
    prepares on the fake H200: the e4m3-q recipe where it takes the tensor-core variant (q
    quantised), else the 16-bit q's (q exact); the prewarm's specs of such a case include the
    variant and the quantisation kernel of its dtype (sm_90a: it has FP8 conversions), those of
    the case without the flag neither; on sm_80 neither."""
    from kernelgen.kernels.spec import QuantSpec

    picked: dict = {True: [], False: []}
    for s in range(60000):
        c = fuzz.case_for_seed(s)
        if c["quantize_q"] and sum(c["qlens"]) > 0 and fuzz.stored_keys(c) <= 20000 and fuzz.total_q_rows(c) <= 3000 \
                and fuzz.ref_elems(c) <= 2e7 and len(c["qlens"]) <= 128:
            attn = getattr(getattr(fuzz.case_recipe(c, "sm_90a", 132), "variants", None), "attention", None)
            mma = attn is not None and attn.fp8_mma
            if len(picked[mma]) < 3:
                picked[mma].append(c)
            if all(len(g) == 3 for g in picked.values()):
                break
    assert all(len(g) == 3 for g in picked.values()), {k: len(g) for k, g in picked.items()}
    for mma, group in picked.items():
        for c in group:
            inp = fuzz.build_inputs(c, "cpu")
            ref = fuzz.reference_for(c, inp, q=fuzz.quantized_q(c, inp)[0] if mma else None)
            r = fuzz.run_case(c, "cpu", attention=_dispatching(ref))
            want = fuzz.case_recipe(c, "sm_90a", 132).variants.attention.name
            assert r["ok"] and r["kernel"] == want and r["quantized"] is mma is r["fp8_mma"], (c["seed"], r)
            specs = fuzz.case_specs(c, "sm_90a", 132)
            plain = fuzz.case_specs({**c, "quantize_q": False}, "sm_90a", 132)
            assert any(s.kind == "attention" and s.fp8_mma for s in specs) is mma
            assert (specs == plain) is not mma and not any(s.kind == "attention" and s.fp8_mma for s in plain)
            assert [s for s in specs if s.kind == "quant"] == ([QuantSpec("sm_90a", c["dtype"])] if mma else [])
            assert not any(s.kind == "quant" for s in plain)
            specs80 = fuzz.case_specs(c, "sm_80", 108)
            assert not any(getattr(s, "fp8_mma", False) or s.kind == "quant" for s in specs80)


def test_run_fuzz_reports_the_quantize_q_batches(monkeypatch):
    """The summary counts the quantize_q batches (those whose q was quantised for the tensor-core
    variant apart, their errors and worst error / bound), the coverage has quantize_q and
    quantize_q_kernel, failures say quantized, and their log lines say how q was taken."""
    seeds = fuzz.batch_seeds(21, 400)
    cases = {s: fuzz.case_for_seed(s) for s in seeds}
    qq = [c for c in cases.values() if c["quantize_q"]]
    assert len(qq) >= 4

    def canned(case, dev, poison=True, attention=None):
        quantized = case["quantize_q"] and case["head_dim"] == 128
        ok = not (case["quantize_q"] and case["dtype"] == "bf16")
        return {"seed": case["seed"], "ok": ok, "unwritten_rows": 0, "max_err": 0.25 if quantized else 0.001,
                "lse_err": 0.0, "errors": [] if ok else ["out error x"], "fp8_mma": quantized,
                "quantized": quantized, "kernel": "k_fp8mma" if quantized else "k", "seconds": 0.0,
                **({"bound_ratio": 0.6} if quantized else {})}
    monkeypatch.setattr(fuzz, "run_case", canned)
    lines = []
    s = fuzz.run_fuzz(400, 21, device="cpu", arch="sm_90a", do_prewarm=False, hang_s=0, log=lines.append)
    n_q = sum(c["head_dim"] == 128 for c in qq)
    assert 1 <= n_q < len(qq)
    assert s["quantize_q"] == {"batches": len(qq), "fp8_mma": n_q, "max_err": 0.25, "max_bound_ratio": 0.6}
    assert s["fp8_mma"] == {"batches": n_q, "max_err": 0.25, "max_bound_ratio": 0.6}
    assert s["coverage"]["quantize_q_kernel"] == {"fp8_mma": n_q, "exact": len(qq) - n_q}
    assert s["coverage"]["quantize_q"] == {"True": len(qq), "False": 400 - len(qq)}
    bad = [c for c in qq if c["dtype"] == "bf16"]
    assert bad and s["mismatches"] == len(bad) and [f["seed"] for f in s["failures"]] == [c["seed"] for c in bad]
    assert [f["quantized"] for f in s["failures"]] == [c["head_dim"] == 128 for c in bad]
    assert all(f["case"]["quantize_q"] is True for f in s["failures"])
    mism = [line for line in lines if "MISMATCH" in line]
    assert len(mism) == len(bad)
    for line, c in zip(mism, bad):
        assert ("[FP8 tensor-core bounds] [q quantised]" if c["head_dim"] == 128 else "[quantize_q, q exact]") in line
    json.dumps(s, default=fuzz._json_default)


def test_main_prints_the_quantize_q_batches(monkeypatch, capsys):
    """The final report line counts the quantize_q batches (with q quantised: how many, worst error /
    bound)."""
    summary = {"seed": 1, "requested": 3, "ran": 3, "complete": True, "mismatches": 0, "exceptions": 0,
               "unwritten_rows": 0, "seconds": 1.0, "max_err": {"bf16": 0.0, "fp16": 0.0},
               "fp8_mma": {"batches": 1, "max_err": 0.1, "max_bound_ratio": 0.5},
               "quantize_q": {"batches": 2, "fp8_mma": 1, "max_err": 0.1, "max_bound_ratio": 0.5}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fuzz, "run_fuzz", lambda *a, **kw: summary)
    assert fuzz.main(["--batches", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "quantize_q batches 2 (1 with q quantised, worst error / bound 0.500)" in out


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
    # head dim 64 on sm_90a: 192 rows in three consumer warpgroups, 16-bit and FP8 tensor-core
    assert any(s.tile.block_m == 192 and s.tile.num_warps == 12 and not s.kv_dtype for s in attn)
    assert any(s.tile.block_m == 192 and s.fp8_mma for s in attn)
    assert any(s.tile.block_m == 192 and s.tile.num_warps == 12 and s.alibi and s.sinks for s in attn)
    assert any(s.tile.block_m == 16 and s.pack_gqa and s.paged and s.split for s in attn)   # decode + combine
    assert any(s.mask == "local" and s.softcap for s in attn)
    assert any(s.tile.block_m == 64 for s in attn)
    assert any(s.kind == "fused" and s.short.split for s in specs)                         # fused mixed batch
    fp8 = [s for s in attn if s.kv_dtype]                                                  # FP8 caches
    fused8 = [s for s in specs if s.kind == "fused" and s.long.kv_dtype]   # a mixed step: the Hopper fused kernel
    assert any(s.hopper and s.short.split for s in fused8)
    fp8 += [s.long for s in fused8]
    assert {s.kv_dtype for s in fp8} == {"e4m3", "e5m2"}
    assert any(s.paged and s.pack_gqa and s.split and s.tile.block_m == 16 for s in fp8)
    assert any(not s.paged and s.mask == "causal" and s.tile.block_m >= 64 for s in fp8)
    assert any(s.mainloop == "sm90a" and s.paged for s in fp8) and any(s.mainloop == "sm90a" and not s.paged
                                                                        for s in fp8)   # the Hopper FP8 kernel
    zero = [c for _, c in fuzz.sanitize_cases() if 0 in c["qlens"] or 0 in c["klens"]]
    assert len(zero) >= 3
    # a case with more than two tiles a CTA on 132 SMs (128-row tiles, each head and split its own)
    (multi,) = [c for n, c in fuzz.sanitize_cases() if n == "prefill_split_multitile"]
    assert sum(-(-n // 128) for n in multi["qlens"]) * multi["num_heads_q"] * multi["num_splits"] > 2 * 132
    assert any(s.kind == "attention" and s.mainloop == "sm90a" and s.split and s.tile.block_m == 128
               for s in fuzz.case_specs(multi, "sm_90a", 132))
    # paged prefills with more tiles than CTAs on the standalone Hopper kernel: TMA boxes of pages of 16
    # (four issuing warps) and the row gather (pages of 24)
    for name, gather, split in (("prefill_paged16_four_warp_boxes", False, False), ("prefill_paged24_gather", True, False),
                                ("prefill_paged64_split_window", False, True), ("prefill_paged16_split", False, True),
                                ("prefill_paged24_gather_d192", True, False)):
        (c,) = [c for n, c in fuzz.sanitize_cases() if n == name]
        assert sum(-(-n // 128) for n in c["qlens"]) * c["num_heads_q"] * max(1, c["num_splits"]) > 132, name
        (s,) = [s for s in fuzz.case_specs(c, "sm_90a", 132) if s.kind == "attention"]
        assert s.mainloop == "sm90a" and s.paged and s.tile.block_m == 128 and not s.kv_dtype, name
        assert ("g" in s.sm90_opts) == gather and s.split == split, (name, s.sm90_opts, s.split)
    # FP8 q: the causal packed GQA prefill at d 128 on the FP8 tensor-core variant, the paged
    # decode on a converted q (the FP8-cache decode kernel of the output dtype)
    fp8q = {n: c for n, c in fuzz.sanitize_cases() if c["q_fp8"]}
    assert sorted(fp8q) == ["fp8q_decode_paged_converted", "fp8q_prefill_causal_packed_gqa",
                            "fp8q_prefill_d64_three_warpgroups", "fp8q_prefill_tileinfo_many_tiles"]
    # the FP8-cache Hopper kernels (converting, tensor-core) with more than four tiles a CTA: the producer
    # laps its tile slots (and with option "t", heuristics.SM90_FP8_TILEINFO, the TileInfo slots)
    for name, mma in (("fp8_prefill_tileinfo_many_tiles", False), ("fp8q_prefill_tileinfo_many_tiles", True)):
        (c,) = [c for n, c in fuzz.sanitize_cases() if n == name]
        (s,) = [s for s in fuzz.case_specs(c, "sm_90a", 132) if s.kind == "attention"]
        assert s.mainloop == "sm90a" and s.kv_dtype == "e4m3" and s.fp8_mma == mma, name
        assert ("t" in s.sm90_opts) == heuristics.SM90_FP8_TILEINFO, name
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(heuristics, "SM90_FP8_TILEINFO", True)
            (st,) = [s for s in fuzz.case_specs(c, "sm_90a", 132) if s.kind == "attention"]
            assert "t" in st.sm90_opts and st == dataclasses.replace(s, sm90_opts=st.sm90_opts), name
        tiles = sum(-(-n // s.tile.block_m) for n in c["qlens"]) * c["num_heads_q"] * c["num_splits"]
        assert tiles > 4 * 132 and fuzz.case_recipe(c, "sm_90a", 132).variants.max_splits == c["num_splits"], name
    for name, c in fp8q.items():
        inp = fuzz.build_inputs(c, "meta")
        assert inp["q"].dtype == torch.float8_e4m3fn and inp["kwargs"]["q_descale"].shape == (len(c["qlens"]),
                                                                                            c["num_heads_kv"])
        assert c["num_heads_q"] > c["num_heads_kv"] and c["kv_dtype"], name
    pre = fp8q["fp8q_prefill_causal_packed_gqa"]
    attn = fuzz.case_recipe(pre, "sm_90a", 132).variants.attention
    assert attn.fp8_mma and fuzz.FP8_MMA_TAG in attn.name and attn.head_dim == 128 and attn.mask == "causal" \
        and not attn.paged and attn.dtype == "fp16" and max(pre["qlens"]) > 64 and pre["kv"] == "packed"
    assert not fuzz.case_recipe(pre, "sm_80", 108).variants.attention.fp8_mma
    # quantize_q: a bf16 q the call quantises for the d 128 FP8 tensor-core variant (sm_90a only)
    qq = {n: c for n, c in fuzz.sanitize_cases() if c["quantize_q"]}
    assert sorted(qq) == ["quantize_q_prefill_causal_packed_gqa"]
    c = qq["quantize_q_prefill_causal_packed_gqa"]
    assert not c["q_fp8"] and c["kv_dtype"] == "e4m3" and c["pad_rows"] and 0 in c["qlens"]
    assert fuzz.build_inputs(c, "meta")["kwargs"]["quantize_q"] is True
    attn = fuzz.case_recipe(c, "sm_90a", 132).variants.attention
    assert attn.fp8_mma and attn.head_dim == 128 and attn.dtype == "bf16" and attn.kv_dtype == "e4m3" \
        and attn.mask == "causal" and not attn.paged
    assert not fuzz.case_recipe(c, "sm_80", 108).variants.attention.fp8_mma
    from kernelgen.kernels.spec import QuantSpec
    assert QuantSpec("sm_90a", "bf16") in fuzz.case_specs(c, "sm_90a", 132)      # the prewarm builds q's kernel
    assert all(not x["quantize_q"] for n, x in fuzz.sanitize_cases() if n != "quantize_q_prefill_causal_packed_gqa")
    dec = fp8q["fp8q_decode_paged_converted"]
    attn = fuzz.case_recipe(dec, "sm_90a", 132).variants.attention
    assert not attn.fp8_mma and attn.paged and attn.split and attn.pack_gqa and attn.kv_dtype == "e5m2" \
        and attn.dtype == "bf16" and max(dec["qlens"]) == 1 and not dec["out_given"]


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
