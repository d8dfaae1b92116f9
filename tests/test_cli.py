"""CPU tests of the command line, the warmup and the traces (no GPU needed; temp cache dirs only)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import sampling

from kernelgen.apps import cli, traces
from kernelgen.apps.demo import attention_flops, demo_specs, has_cuda_gpu, visible_pairs
from kernelgen.jit import compiler
from kernelgen.kernels.spec import QuantSpec
from kernelgen.jit.cache import KernelCache

REPO = Path(__file__).resolve().parents[1]
WARMUP_RE = re.compile(r"warmup (\S+): (\d+) compiled, (\d+) already cached \((\d+) kernels\) in (.+)")

no_gpu = pytest.mark.skipif(has_cuda_gpu(), reason="checks the no-GPU behaviour")


def _warmup_counts(text: str):
    m = WARMUP_RE.search(text)
    assert m, f"no warmup summary line in:\n{text}"
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5).strip()


def test_warmup_then_second_warmup_compiles_nothing(tmp_path, capsys):
    argv = ["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "bf16", "--layout", "soa",
            "--jobs", "1", "--cache-dir", str(tmp_path)]
    before = compiler.COMPILE_COUNT
    assert cli.main(argv) == 0
    arch, compiled, cached, total, root = _warmup_counts(capsys.readouterr().out)
    assert arch == "sm_80" and compiled > 0 and cached == 0 and total == compiled
    assert root == str(tmp_path)
    assert compiler.COMPILE_COUNT - before == compiled
    # both masks by default, one scheduler: 2 attention variants + 1 scheduler
    assert total == len(cli.warmup_specs("sm_80", [64], ["bf16"], [False, True], ["soa"])) == 3

    before = compiler.COMPILE_COUNT
    assert cli.main(argv) == 0
    _, compiled2, cached2, total2, _ = _warmup_counts(capsys.readouterr().out)
    assert (compiled2, cached2, total2) == (0, total, total)
    assert compiler.COMPILE_COUNT == before


def test_warmup_process_pool(tmp_path, capsys):
    argv = ["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "fp16", "--layout", "aos",
            "--jobs", "2", "--cache-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    _, compiled, cached, total, _ = _warmup_counts(capsys.readouterr().out)
    assert (compiled, cached, total) == (3, 0, 3)
    cache = KernelCache(tmp_path)
    for spec in cli.warmup_specs("sm_80", [64], ["fp16"], [False, True], ["aos"]):
        assert cache.lookup(spec) is not None
    assert cli.main(argv) == 0
    assert _warmup_counts(capsys.readouterr().out)[1:4] == (0, 3, 3)


def test_warmup_mask_flags_select_variants(tmp_path, capsys):
    base = ["warmup", "--arch", "sm_90a", "--head-dim", "128", "--dtype", "bf16", "--layout", "soa",
            "--jobs", "1", "--cache-dir", str(tmp_path)]
    # the scheduler, the Hopper path's kernel and the sm_80 path's (arch="sm_80" calls, plans)
    assert cli.main(base + ["--causal"]) == 0
    assert _warmup_counts(capsys.readouterr().out)[1:4] == (3, 0, 3)
    assert cli.main(base + ["--no-causal"]) == 0
    assert _warmup_counts(capsys.readouterr().out)[1:4] == (2, 1, 3)  # the scheduler is shared
    names = {e["name"] for e in KernelCache(tmp_path).entries()}
    assert any("_causal_" in n for n in names) and any("_none_" in n for n in names)


def test_warmup_specs_match_dispatcher_choice():
    from kernelgen.selection import heuristics

    specs = cli.warmup_specs("sm_90a", [64, 128], ["fp16", "bf16"], [False, True], ["soa", "aos"])
    assert len(specs) == len(set(specs)) == 2 + 2 * (2 * 2 * 2 * 2)  # both mainloops on sm_90a
    sched, attn = heuristics.specs_for("sm_90a", "bf16", 128, 128, True, "aos")
    assert sched in specs and attn in specs and attn.mainloop == "sm90a"
    assert heuristics.specs_for("sm_90a", "bf16", 128, 128, True, "aos", mainloop="sm80")[1] in specs


def test_warmup_page_sizes_cover_the_hopper_paged_choices():
    """Paged d 256 on sm_90a: pages of 16 take TMA boxes on 64-key blocks, calls without a page
    size gathered rows on 48-key blocks, and pages of 24 TMA boxes on 48-key blocks: warmup builds
    what the dispatcher picks for each page size it is given (gathered rows always)."""
    from kernelgen.selection import heuristics

    kw = dict(phases=["prefill"], paged=[True])
    names = lambda specs: {s.name for s in specs if getattr(s, "kind", "") == "attention" and s.mainloop == "sm90a"}  # noqa: E731
    default = names(cli.warmup_specs("sm_90a", [256], ["bf16"], [True], ["soa"], **kw))
    both = names(cli.warmup_specs("sm_90a", [256], ["bf16"], [True], ["soa"], page_sizes=[16, 24], **kw))
    want = {heuristics.choose("sm_90a", "bf16", 256, 256, num_heads_q=8, num_heads_kv=8, mask="causal",
                              max_seqlen_q=4096, max_seqlen_k=4096, paged=True, page_size=ps).attention.name
            for ps in (0, 16, 24)}
    assert len(want) == 3 and want <= both and not want <= default
    assert {n for n in both if "_m128n48" in n and "_gather" not in n}  # the TMA variant of 24-token pages
    with pytest.raises(SystemExit) as ei:
        cli.main(["warmup", "--arch", "sm_90a", "--page-size", "0", "--cache-dir", "/nonexistent"])
    assert ei.value.code == 2


def _kv_of(s) -> str:
    """The FP8 cache dtype of a spec ("" for none): an attention spec's, a fused spec's classes'."""
    return s.long.kv_dtype if s.kind == "fused" else getattr(s, "kv_dtype", "")


def test_warmup_specs_with_kv_dtypes():
    """``kv_dtypes`` (``kernelgen warmup --kv-dtype``): the plain specs plus the FP8 K/V variants
    of every combination (on sm_90a the Hopper kernel's for prefill-shaped calls beside the sm_80
    mainloop's, and the Hopper fused kernel of a paged mixed batch), which cover what the decider
    gives FP8 calls of those shapes (prefill, chunked, decode; paged batches with long queries: the
    fused kernels, but for a chunked-prefill batch on sm_90a with a page size, one Hopper class;
    with sinks the sink variants); none without it."""
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from test_decide import A100, H200, sig

    kw = dict(head_dims=(128,), dtypes=("bf16",), causals=(True,), layouts=("soa",),
              phases=("prefill", "chunked", "decode"), gqas=(4,), paged=(False, True))
    for arch, dev in (("sm_90a", H200), ("sm_80", A100)):
        plain = warmup_specs(arch, **kw)
        both = warmup_specs(arch, kv_dtypes=("e4m3", "e5m2"), **kw)
        extra = [s for s in both if s not in plain and s.kind != "quant"]
        # an e4m3 cache with the FP8 tensor-core variant: the q quantisation kernel (quantize_q=True)
        assert [s for s in both if s.kind == "quant"] == ([QuantSpec(arch, "bf16")] if arch == "sm_90a" else [])
        assert set(plain) <= set(both) and extra and not any(_kv_of(s) for s in plain)
        assert all(s.kind in ("attention", "fused") and _kv_of(s) in ("e4m3", "e5m2") and s.arch == arch
                   for s in extra)
        assert {s.kind for s in extra} == {"attention", "fused"}
        hopper = {s.mainloop == "sm90a" for s in extra}
        assert hopper == ({True, False} if arch == "sm_90a" else {False})
        assert {_kv_of(s) for s in extra} == {"e4m3", "e5m2"}
        # (e4m3 also: the Hopper fused kernels whose long class reads a quantised q, quantize_q=True)
        qq = [s for s in extra if s.kind == "fused" and s.long.fp8_mma]
        assert len([s for s in extra if _kv_of(s) == "e4m3"]) == len([s for s in extra if _kv_of(s) == "e5m2"]) + len(qq)
        assert all(_kv_of(s) == "e4m3" for s in qq) and bool(qq) == (arch == "sm_90a")
        calls = [dict(max_seqlen_q=4096, max_seqlen_k=4096), dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True),
                 dict(max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16, batch=64, rows=64),
                 dict(max_seqlen_q=1, max_seqlen_k=256, batch=64, rows=64),
                 dict(max_seqlen_q=4096, max_seqlen_k=4096, paged=True, page_size=16, batch=8, rows=4096 * 8),
                 dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=40, rows=600)]
        seen_qq = 0
        for call in calls:
            for kv in ("e4m3", "e5m2"):
                for qd in ("", "e4m3"):     # an FP8 q too: its tensor-core kernels (sm_90a prefill shapes)
                    r = decide.decide(sig(kv_dtype=kv, q_dtype=qd, **call), dev)
                    mixed = call.get("paged") and call["max_seqlen_q"] > 1 and not qd   # (an FP8 q: one class)
                    hopper_chunked = arch == "sm_90a" and call.get("page_size") and call.get("rows") != 600
                    assert r.kind == ("fused" if mixed and not hopper_chunked else "single"), (call, r.kind)
                    assert set(r.specs) <= set(both), (call, qd, [x.name for x in r.specs])
                    if qd and kv == "e4m3":   # a q quantised by the call (quantize_q): a mixed batch's fused kernel
                        r16 = decide.decide(sig(kv_dtype=kv, **call), dev)   # (where the Hopper fused kernel runs)
                        fused_qq = r16.kind == "fused" and r16.variants.fused.hopper
                        r = decide.decide(sig(kv_dtype=kv, q_dtype=qd, quantized_q=True, **call), dev)
                        assert (r.kind == "fused" and r.variants.fused.long.fp8_mma) == fused_qq, (call, r.kind)
                        seen_qq += fused_qq
                        assert set(r.specs) <= set(both), (call, "quantized", [x.name for x in r.specs])
        assert any(getattr(s, "fp8_mma", False) for s in extra) == (arch == "sm_90a")
        assert seen_qq == (1 if arch == "sm_90a" else 0)
        sinks = warmup_specs(arch, kv_dtypes=("e4m3",), sinks=True, **kw)
        r = decide.decide(sig(kv_dtype="e4m3", sinks=True, max_seqlen_q=1, max_seqlen_k=32768, paged=True,
                              batch=64, rows=64), dev)
        assert r.sinks_fused and set(r.specs) <= set(sinks)
    with pytest.raises(ValueError, match="kv_dtypes: each must be one of"):
        warmup_specs("sm_80", kv_dtypes=("fp8",), **kw)
    # KERNELGEN_SM90_SHORT_ROWS reaches the FP8 fused kernel in the catalog as in the decider (16: the 16-row
    # FP8 decode tile instead of the keys-as-rows one)
    from kernelgen.selection.settings import Settings
    call = dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=40, rows=600)
    for rows, tag in (("16", "__m16n16w1"), (None, "__m8n16w1")):
        st = Settings(short_rows=rows)
        r = decide.decide(sig(kv_dtype="e4m3", **call), H200, st)
        assert r.kind == "fused" and tag in r.variants.fused.name
        assert set(r.specs) <= set(warmup_specs("sm_90a", kv_dtypes=("e4m3",), settings=st, **kw)), rows


def test_warmup_windows_cover_the_dispatchers_sliding_window_choices():
    """``windows`` (``kernelgen warmup --window N``): the local-mask kernels of causal sliding-window
    calls, ``window_size=(N, 0)``, for every other combination; the decider's kernels for such calls
    (prefill, chunked, decode, a paged mixed batch; packed and paged; the window bounds split-KV, so
    a 128-token window and a 4096-token one differ) are all in it; none without it."""
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from test_decide import A100, H200, sig

    kw = dict(head_dims=(64, 128), dtypes=("bf16",), causals=(True,), layouts=("soa",),
              phases=("prefill", "chunked", "decode"), gqas=(8,), paged=(False, True))
    calls = [dict(max_seqlen_q=4096, max_seqlen_k=4096, batch=1, rows=4096),
             dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=1, rows=512),
             dict(max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16, batch=64, rows=64),
             dict(max_seqlen_q=1, max_seqlen_k=256, batch=64, rows=64),
             dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=40, rows=600)]
    for arch, dev in (("sm_90a", H200), ("sm_80", A100)):
        plain = warmup_specs(arch, **kw)
        assert not any(getattr(s, "mask", "") == "local" for s in plain)
        for w in (128, 4096):
            specs = set(warmup_specs(arch, windows=(w,), **kw))
            assert set(plain) <= specs and any(getattr(s, "mask", "") == "local" for s in specs)
            for call in calls:
                for d in (64, 128):
                    r = decide.decide(sig(mask="local", window_left=w, window_right=0, head_dim=d, head_dim_v=d,
                                          num_heads_q=64, **call), dev)
                    assert set(r.specs) <= specs, (arch, w, d, call, [x.name for x in r.specs if x not in specs])
    # the window bounds split-KV: a long decode splits less under a 128-token window
    short = {s for s in warmup_specs("sm_90a", windows=(128,), **kw) if getattr(s, "mask", "") == "local"}
    long = {s for s in warmup_specs("sm_90a", windows=(4096,), **kw) if getattr(s, "mask", "") == "local"}
    assert short != long
    for bad in (-1, 1 << 31, 4.0, True):
        with pytest.raises(ValueError, match="windows: each must be an int in"):
            warmup_specs("sm_80", windows=(bad,), **kw)
    import numpy as np
    assert warmup_specs("sm_80", windows=(np.int64(128),), **kw) == warmup_specs("sm_80", windows=(128,), **kw)


def test_warmup_unsplit_covers_calls_without_split_kv():
    """``unsplit`` (``kernelgen warmup --unsplit``): the kernels of calls with ``num_splits=1`` (the
    FA3-compatible varlen entry's default) or ``max_num_splits=1``, which the phases' hints do not
    reach (a long decode splits; so does a 256-key one on the 16-key decode tile): the decider's
    kernels for such calls (prefill, chunked, decode, a paged mixed batch) are all in it; the unsplit
    decode and fused kernels are not without it; a superset of the plain set."""
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from test_decide import A100, H200, sig

    kw = dict(head_dims=(64, 128), dtypes=("bf16",), causals=(True,), layouts=("soa",),
              phases=("prefill", "chunked", "decode"), gqas=(1, 4, 8), paged=(False, True))
    calls = [dict(max_seqlen_q=4096, max_seqlen_k=4096, batch=1, rows=4096),
             dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=1, rows=512),
             dict(max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16, batch=64, rows=64),
             dict(max_seqlen_q=1, max_seqlen_k=20000, batch=64, rows=64),
             dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=40, rows=600),
             # speculative-decode steps (2-64 query tokens) in a paged batch: with num_splits=1 no fused
             # launch, one class on the mid tile (packed / unpacked) or, unpacked at GQA 8, the decode tile
             # (a review's find: these were missing)
             *(dict(max_seqlen_q=mq, max_seqlen_k=8192, paged=True, page_size=16, batch=64, rows=64 * mq)
               for mq in (2, 5, 8, 12, 16, 40, 64))]
    for arch, dev in (("sm_90a", H200), ("sm_80", A100)):
        plain = set(warmup_specs(arch, **kw))
        specs = set(warmup_specs(arch, unsplit=True, **kw))
        assert plain < specs
        missed = 0
        for call in calls:
            for d in (64, 128):
                for hq in (8, 32, 64):   # GQA 1, 4, 8 of kw's gqas on 8 KV heads
                    for cut in ({"num_splits": 1}, {"max_num_splits": 1}):
                        r = decide.decide(sig(head_dim=d, head_dim_v=d, num_heads_q=hq, **call, **cut), dev)
                        assert set(r.specs) <= specs, (arch, d, hq, call, cut,
                                                       [x.name for x in r.specs if x not in specs])
                        missed += not set(r.specs) <= plain
        assert missed >= 4, (arch, missed)


def test_warmup_unsplit_says_when_it_added_nothing(tmp_path, monkeypatch, capsys):
    """``--unsplit`` on options whose calls do not split (the default prefill phase at 8 KV heads, packed
    K/V) builds what the plain call builds and says so on stderr (a new user's find: it did nothing,
    silently); where it adds kernels it prints no note: decode, and the prefill phase on a paged cache
    or with one KV head (a review's find: a note keyed on the phase alone was false there)."""
    seen = _capture_warmup(monkeypatch)
    base = ["warmup", "--arch", "sm_90a", "--head-dim", "128", "--dtype", "bf16", "--cache-dir", str(tmp_path)]
    cases = [([], False), (["--phase", "decode"], True), (["--paged"], True), (["--kv-heads", "1"], True)]
    for extra, adds in cases:
        assert cli.main(base + extra) == 0
        plain = list(seen["specs"])
        capsys.readouterr()
        assert cli.main(base + extra + ["--unsplit"]) == 0
        assert (set(seen["specs"]) > set(plain)) == adds and set(seen["specs"]) >= set(plain), extra
        assert (cli.UNSPLIT_IDLE_NOTE in capsys.readouterr().err) == (not adds), extra


def test_unsplit_short_hints_reach_the_short_query_tile_classes():
    """``catalog.unsplit_short_hints``: its query lengths land in the tile classes they are there for
    (``heuristics.tile_class_for_rows``: the decode tile up to 16 rows, the mid tile up to 64), packed
    and unpacked as ``heuristics.default_pack_gqa`` packs them."""
    from kernelgen.selection import heuristics
    from kernelgen.selection.catalog import DECODE_TILE_ROWS, MID_TILE_ROWS, unsplit_short_hints

    assert heuristics.tile_class_for_rows(DECODE_TILE_ROWS) == "decode"
    assert heuristics.tile_class_for_rows(DECODE_TILE_ROWS + 1) == heuristics.tile_class_for_rows(MID_TILE_ROWS) == "mid"
    assert heuristics.tile_class_for_rows(MID_TILE_ROWS + 1) == "prefill"
    for gqa in (1, 2, 4, 5, 8, 16):
        got = set()
        for q, _k in unsplit_short_hints(gqa):
            packed = heuristics.default_pack_gqa(gqa, q)
            got.add((heuristics.tile_class_for_rows(q * gqa if packed else q, packed), packed))
        want = {("mid", False)} | ({("mid", True)} if gqa > 1 else set()) | ({("decode", False)} if gqa > 4 else set())
        assert want <= got, (gqa, got)


def test_cli_md_counts_the_window_kernels_serving_warmup_adds_on_sm90a():
    """docs/cli.md: "`--serving --window 4095` adds N kernels for `sm_90a` to the M of `--serving`,
    `--window 4095,127` K" and "`--serving --unsplit` adds U" -- what ``kernelgen warmup`` builds."""
    import re

    from kernelgen.selection.catalog import warmup_specs

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    m = re.search(r"`--serving --window 4095` adds (\d+) kernels for `sm_90a` to the (\d+) of `--serving`, "
                  r"`--window 4095,127` (\d+)", text)
    assert m is not None
    kw = dict(phases=["prefill", "chunked", "decode"], gqas=[1, 4, 8], paged=[False, True])
    n = [len(warmup_specs("sm_90a", windows=w, **kw)) for w in ((), (4095,), (4095, 127))]
    assert (int(m.group(2)), int(m.group(1)), int(m.group(3))) == (n[0], n[1] - n[0], n[2] - n[0])
    u = re.search(r"`--serving --unsplit` adds (\d+) kernels for `sm_90a` to the (\d+) of `--serving`", text)
    assert u is not None
    assert (int(u.group(2)), int(u.group(1))) == (n[0], len(warmup_specs("sm_90a", unsplit=True, **kw)) - n[0])
    install = (Path(__file__).resolve().parents[1] / "docs" / "install.md").read_text()
    assert f"`--unsplit` adds the {u.group(1)}\nkernels" in install or f"`--unsplit` adds the {u.group(1)} kernels" in install


def test_install_and_cli_docs_count_the_serving_and_fp8_kernels():
    """docs/install.md and docs/cli.md state how many kernels `--serving` builds for sm_90a and how many
    `--kv-dtype e4m3` adds (sm_90a and sm_80); a user's review found install.md's counts stale (794 and
    320 where the CLI built 898 and 706): both pages now say what ``warmup_specs`` lists."""
    import re

    from kernelgen.selection.catalog import warmup_specs

    docs = Path(__file__).resolve().parents[1] / "docs"
    kw = dict(phases=["prefill", "chunked", "decode"], gqas=[1, 4, 8], paged=[False, True])
    n = {arch: [len(warmup_specs(arch, kv_dtypes=k, **kw)) for k in ((), ("e4m3",))] for arch in ("sm_90a", "sm_80")}
    install = (docs / "install.md").read_text()
    m = re.search(r"serving engine can hit \((\d+) kernels for `sm_90a`.*?`--kv-dtype e4m3` \(or `e5m2`, or both\): "
                  r"(\d+) more kernels of the serving shapes for `sm_90a` \((\d+) for\s+`sm_80`\)", install, re.S)
    assert m is not None
    assert [int(g) for g in m.groups()] == [n["sm_90a"][0], n["sm_90a"][1] - n["sm_90a"][0], n["sm_80"][1] - n["sm_80"][0]]
    m = re.search(r"`--serving --kv-dtype e4m3` adds (\d+) kernels for `sm_90a` \((\d+) for `sm_80`\)",
                  (docs / "cli.md").read_text())
    assert m is not None and [int(g) for g in m.groups()] == [n["sm_90a"][1] - n["sm_90a"][0], n["sm_80"][1] - n["sm_80"][0]]


def test_warmup_kv_heads_cover_a_tensor_parallel_shard():
    """``kv_heads`` (``kernelgen warmup --kv-heads``): a llama3-70b shard on 8 GPUs (8 query heads, 1 KV
    head) splits a paged chunked prefill that 8 KV heads would not, on sm_90a packed (pack-GQA, paged,
    split); the default catalog (8 KV heads) lacks that kernel, ``kv_heads=(1,)`` lists the decider's
    kernels of such calls."""
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from test_decide import A100, H200, sig

    kw = dict(head_dims=(128,), dtypes=("bf16",), causals=(True,), layouts=("soa",),
              phases=("prefill", "chunked", "decode"), gqas=(8,), paged=(False, True))
    calls = [dict(max_seqlen_q=600, max_seqlen_k=32768, paged=True, page_size=16, batch=1, rows=600),
             dict(max_seqlen_q=4096, max_seqlen_k=4096, batch=1, rows=4096),
             dict(max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16, batch=64, rows=64),
             dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=40, rows=600)]
    for arch, dev in (("sm_90a", H200), ("sm_80", A100)):
        default, shard = set(warmup_specs(arch, **kw)), set(warmup_specs(arch, kv_heads=(1,), **kw))
        for call in calls:
            r = decide.decide(sig(num_heads_q=8, num_heads_kv=1, **call), dev)
            assert set(r.specs) <= shard, (arch, call, [x.name for x in r.specs if x not in shard])
    chunk = decide.decide(sig(num_heads_q=8, num_heads_kv=1, **calls[0]), H200).variants.attention
    assert chunk.mainloop == "sm90a" and chunk.pack_gqa and chunk.paged and chunk.split
    assert chunk not in set(warmup_specs("sm_90a", **kw))
    assert set(warmup_specs("sm_90a", kv_heads=(8, 1), **kw)) == set(warmup_specs("sm_90a", **kw)) | \
        set(warmup_specs("sm_90a", kv_heads=(1,), **kw))
    with pytest.raises(ValueError, match="kv_heads: each must be an int >= 1"):
        warmup_specs("sm_80", kv_heads=(0,), **kw)


def test_warmup_gqa_takes_any_model_ratio(tmp_path, monkeypatch):
    """``--gqa 5`` (Qwen2.5-14B: 40 query / 8 KV heads) builds the decider's kernels of such calls; it
    took only 1, 2, 4, 8, 16 before, and the nearest of those (8) lacks the chunked prefill's sm_80
    kernel (``arch="sm_80"`` on an H200: a review's find; under KERNELGEN_DISABLE_JIT that call failed)."""
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import warmup_specs
    from test_decide import H200, sig

    seen = _capture_warmup(monkeypatch)
    base = ["warmup", "--arch", "sm_90a", "--head-dim", "128", "--dtype", "bf16", "--layout", "soa", "--causal",
            "--phase", "prefill,chunked,decode", "--both-paged", "--cache-dir", str(tmp_path)]
    assert cli.main(base + ["--gqa", "5,7"]) == 0
    kw = dict(phases=["prefill", "chunked", "decode"], paged=[False, True])
    assert seen["specs"] == warmup_specs("sm_90a", [128], ["bf16"], [True], ["soa"], gqas=[5, 7], **kw)
    calls = [dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=1, rows=512),
             dict(max_seqlen_q=512, max_seqlen_k=32768, batch=1, rows=512, arch="sm80"),
             dict(max_seqlen_q=4096, max_seqlen_k=4096, batch=1, rows=4096),
             dict(max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16, batch=64, rows=64)]
    mine = set(seen["specs"])
    eight = set(warmup_specs("sm_90a", [128], ["bf16"], [True], ["soa"], gqas=[8], **kw))
    missing = set()
    for call in calls:
        r = decide.decide(sig(num_heads_q=40, num_heads_kv=8, **call), H200)
        assert set(r.specs) <= mine, (call, [x.name for x in r.specs if x not in mine])
        missing |= set(r.specs) - eight
    assert missing   # what --gqa 8 would have left to compile at run time
    for bad in ("0", "129", "x"):
        with pytest.raises(SystemExit) as ei:
            cli.main(base + ["--gqa", bad])
        assert ei.value.code == 2


def test_warmup_head_dim_pairs_cover_mla_calls(tmp_path, monkeypatch):
    """``--head-dim 192x128`` (DeepSeek's MLA prefill: q/k 192, v 128) builds the decider's kernels of
    such calls; warmup took only equal head dims, so a KERNELGEN_DISABLE_JIT deployment could not
    pre-build them (a new user's find)."""
    from kernelgen.selection import decide
    from kernelgen.selection.catalog import head_dim_pairs, warmup_specs
    from test_decide import H200, sig

    seen = _capture_warmup(monkeypatch)
    base = ["warmup", "--arch", "sm_90a", "--dtype", "bf16", "--layout", "soa", "--causal",
            "--phase", "prefill,chunked,decode", "--both-paged", "--gqa", "1,8", "--cache-dir", str(tmp_path)]
    assert cli.main(base + ["--head-dim", "192x128,128,192X128"]) == 0
    kw = dict(phases=["prefill", "chunked", "decode"], gqas=[1, 8], paged=[False, True])
    assert seen["specs"] == warmup_specs("sm_90a", [(192, 128), 128], ["bf16"], [True], ["soa"], **kw)
    mine = set(seen["specs"])
    for call in (dict(max_seqlen_q=4096, max_seqlen_k=4096, batch=1, rows=4096),
                 dict(max_seqlen_q=512, max_seqlen_k=32768, paged=True, page_size=16, batch=1, rows=512),
                 dict(max_seqlen_q=1, max_seqlen_k=32768, paged=True, page_size=16, batch=64, rows=64)):
        r = decide.decide(sig(head_dim=192, head_dim_v=128, num_heads_q=16, num_heads_kv=16, **call), H200)
        assert set(r.specs) <= mine, (call, [x.name for x in r.specs if x not in mine])
        assert any("d192x128" in x.name for x in r.specs if x.kind == "attention")
    assert head_dim_pairs([64, (192, 128), [192, 128], 64]) == ((64, 64), (192, 128))
    for bad in ([100], [(192,)], [(192, 128, 64)], ["128"], [True]):
        with pytest.raises(ValueError, match="^head_dims: each must be one of"):
            head_dim_pairs(bad)
    for bad in ("192x", "100", "192x128x64", "x128"):
        with pytest.raises(SystemExit) as ei:
            cli.main(base + ["--head-dim", bad])
        assert ei.value.code == 2


def _capture_warmup(monkeypatch) -> dict:
    """Replaces ``cli.warmup`` (no compiling): the specs ``kernelgen warmup`` hands it land in the
    returned dict's "specs"."""
    seen = {}

    def fake_warmup(specs, root, jobs=None, progress=True, desc="warmup"):
        seen["specs"] = list(specs)
        return 0, len(seen["specs"])

    monkeypatch.setattr(cli, "warmup", fake_warmup)
    return seen


def test_warmup_window_flag(tmp_path, monkeypatch):
    """``kernelgen warmup --window 4096,128`` hands warmup the local-mask kernels too, ``--kv-heads 8,1``
    the calls of both head counts; a bad value is a usage error."""
    seen = _capture_warmup(monkeypatch)
    base = ["warmup", "--arch", "sm_90a", "--head-dim", "64", "--dtype", "bf16", "--layout", "soa", "--causal",
            "--cache-dir", str(tmp_path)]
    assert cli.main(base) == 0
    assert not any(getattr(s, "mask", "") == "local" for s in seen["specs"])
    assert cli.main(base + ["--window", "4096,128,4096"]) == 0
    from kernelgen.selection.catalog import warmup_specs
    assert seen["specs"] == warmup_specs("sm_90a", [64], ["bf16"], [True], ["soa"], windows=[4096, 128])
    for bad in ("-5", "x", ","):
        with pytest.raises(SystemExit) as ei:
            cli.main(base + ["--window", bad])
        assert ei.value.code == 2
    assert cli.main(base + ["--kv-heads", "8,1"]) == 0
    assert seen["specs"] == warmup_specs("sm_90a", [64], ["bf16"], [True], ["soa"], kv_heads=[8, 1])
    assert cli.main(base + ["--unsplit"]) == 0
    assert seen["specs"] == warmup_specs("sm_90a", [64], ["bf16"], [True], ["soa"], unsplit=True)
    for bad in ("0", "x", ","):
        with pytest.raises(SystemExit) as ei:
            cli.main(base + ["--kv-heads", bad])
        assert ei.value.code == 2


def test_warmup_kv_dtype_flag_lists_fp8_specs_and_nvrtc_compiles_one(tmp_path, capsys, monkeypatch):
    """``kernelgen warmup --serving --kv-dtype e4m3,e5m2 --arch sm_90a`` hands warmup the serving set
    plus its FP8 variants (kv_dtype set; the Hopper kernel's and the sm_80 mainloop's); without the flag none;
    NVRTC builds one (an FP8 paged decode kernel for sm_90a) into the cache; a bad value is a usage
    error."""
    seen = _capture_warmup(monkeypatch)
    base = ["warmup", "--arch", "sm_90a", "--serving", "--head-dim", "128", "--dtype", "bf16", "--layout", "soa",
            "--causal", "--cache-dir", str(tmp_path)]
    assert cli.main(base) == 0
    plain = seen["specs"]
    assert not any(getattr(s, "kv_dtype", "") for s in plain)
    assert cli.main(base + ["--kv-dtype", "e4m3,e5m2"]) == 0
    fp8 = [s for s in seen["specs"] if _kv_of(s)]
    quant = [s for s in seen["specs"] if s.kind == "quant"]
    assert quant == [QuantSpec("sm_90a", "bf16")]
    assert set(plain) <= set(seen["specs"]) and len(seen["specs"]) == len(plain) + len(fp8) + len(quant)
    assert {_kv_of(s) for s in fp8} == {"e4m3", "e5m2"}
    assert all(s.kind in ("attention", "fused") and s.arch == "sm_90a" for s in fp8)
    assert {s.mainloop for s in fp8} == {"sm80", "sm90a"} and any(s.kind == "fused" for s in fp8)
    att = [s for s in fp8 if s.kind == "attention"]
    assert any(s.paged and s.tile.block_m <= 16 for s in att) and any(not s.paged for s in att)
    assert cli.main(base + ["--kv-dtype", "e5m2"]) == 0
    assert {_kv_of(s) for s in seen["specs"] if _kv_of(s)} == {"e5m2"}
    out = capsys.readouterr().out
    assert _warmup_counts(out)[0] == "sm_90a"
    for bad in ("fp8", "e4m3,int8", ""):
        with pytest.raises(SystemExit) as ei:
            cli.main(base + ["--kv-dtype", bad])
        assert ei.value.code == 2
    capsys.readouterr()
    spec = next(s for s in att if s.paged and s.tile.block_m <= 16 and s.kv_dtype == "e4m3")
    entry = KernelCache(tmp_path).get(spec)
    assert entry.compiled and KernelCache(tmp_path).lookup(spec) is not None
    assert "_kve4m3" in spec.name


def test_warmup_dtype_takes_fp8_names_as_the_kv_dtype_flag_does(tmp_path, monkeypatch):
    """``--dtype e4m3`` (issue 24's spelling) builds what ``--dtype bf16 --kv-dtype e4m3`` builds (the FP8
    calls' output is bf16 unless a 16-bit dtype is named); ``--dtype fp16,e5m2`` what ``--dtype fp16
    --kv-dtype e5m2`` does; FP8 names in both flags are merged."""
    seen = []
    monkeypatch.setattr(cli, "warmup", lambda specs, root, jobs=None, progress=True, desc="warmup":
                        (seen.append(list(specs)), (0, len(specs)))[1])
    base = ["warmup", "--arch", "sm_90a", "--head-dim", "128", "--layout", "soa", "--causal", "--phase", "decode",
            "--gqa", "4", "--paged", "--cache-dir", str(tmp_path)]
    for alias, spelled in ((["--dtype", "e4m3"], ["--dtype", "bf16", "--kv-dtype", "e4m3"]),
                           (["--dtype", "fp16,e5m2"], ["--dtype", "fp16", "--kv-dtype", "e5m2"]),
                           (["--dtype", "e4m3", "--kv-dtype", "e5m2"], ["--dtype", "bf16", "--kv-dtype", "e4m3,e5m2"])):
        assert cli.main(base + alias) == 0 and cli.main(base + spelled) == 0
        assert seen[-2] == seen[-1]
        assert any(_kv_of(s) for s in seen[-1])
    assert {s.dtype for s in seen[0] if hasattr(s, "dtype")} == {"bf16"}
    assert {_kv_of(s) for s in seen[0] if _kv_of(s)} == {"e4m3"}
    assert cli.split_dtypes(None, []) == (["fp16", "bf16"], [])


@no_gpu
def test_warmup_without_arch_and_gpu_exits_2(tmp_path, capsys):
    assert cli.main(["warmup", "--cache-dir", str(tmp_path)]) == 2
    assert "no CUDA GPU found; pass --arch (e.g. --arch sm_90a)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_warmup_bad_values_are_usage_errors(tmp_path, capsys):
    for bad in (["--arch", "sm_75"], ["--arch", "sm_80", "--head-dim", "80"], ["--arch", "sm_80", "--dtype", "fp32"],
                ["--arch", "sm_80", "--layout", "csr"], ["--arch", "sm_80", "--causal", "--no-causal"]):
        with pytest.raises(SystemExit) as ei:
            cli.main(["warmup", *bad, "--cache-dir", str(tmp_path)])
        assert ei.value.code == 2
    capsys.readouterr()


@pytest.mark.parametrize("arch,hint", [("sm_90", "Hopper's kernels are sm_90a"), ("sm_87", "--arch sm_86"),
                                       ("sm_75", None)])
def test_a_near_miss_arch_gets_a_hint(tmp_path, capsys, arch, hint):
    """A new user's review: --arch sm_90 / sm_87 only listed the supported names."""
    with pytest.raises(SystemExit) as ei:
        cli.main(["warmup", "--arch", arch, "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and f"arch {arch!r} is not supported (choose from sm_80, sm_86, sm_89, sm_90a" in err
    assert (hint in err) if hint else err.rstrip().endswith("untested: sm_100, sm_120)")


def test_cache_list_of_a_missing_directory_says_so(tmp_path, capsys):
    assert cli.main(["cache", "list", "--cache-dir", str(tmp_path / "typo")]) == 0
    assert capsys.readouterr().out == f"no cached kernels in {tmp_path / 'typo'} (no such directory yet)\n"
    assert not (tmp_path / "typo").exists()


# ---- warmup into a directory the cache will not use -------------------------------------------
WARM_ARGS = ["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "bf16", "--layout", "soa", "--causal"]


@pytest.mark.parametrize("mode,jobs", sampling.matrix([(m, j) for m in (0o777, 0o770, 0o1777) for j in ("1", "2")], 1))
def test_warmup_into_group_or_world_writable_dir_fails_and_writes_nothing(tmp_path, capsys, mode, jobs):
    """The cache neither reads nor writes such a directory: warmup used to report every kernel as
    "compiled" (into memory) and exit 0.  Sampled: each mode, and in this process and in the
    process pool (``--jobs 2``, whose workers compile for real); all six with ``--full-matrix``."""
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)
    before = compiler.COMPILE_COUNT
    try:
        assert cli.main(WARM_ARGS + ["--jobs", jobs, "--cache-dir", str(root)]) == 1
        assert list(root.iterdir()) == []
    finally:
        os.chmod(root, 0o700)
    assert compiler.COMPILE_COUNT == before  # nothing compiled either
    out, err = capsys.readouterr()
    assert not WARMUP_RE.search(out), out
    assert err.startswith(f"kernelgen warmup: error: cache directory {root} is not trusted: ")
    assert f"it is writable by group/other users (mode {oct(mode)})" in err
    assert "nothing was compiled or written" in err and f"chmod 700 {root}" in err
    assert err.count("\n") == 1  # one line
    # once private, the same command warms it
    assert cli.main(WARM_ARGS + ["--jobs", jobs, "--cache-dir", str(root)]) == 0
    assert _warmup_counts(capsys.readouterr().out)[1:4] == (2, 0, 2)


def test_warmup_into_dir_owned_by_another_user_fails(tmp_path, capsys, monkeypatch):
    from kernelgen.jit import cache
    from kernelgen.jit.warmup import CacheDirectoryError, warmup

    root = tmp_path / "theirs"
    root.mkdir(mode=0o700)
    ino = os.stat(root).st_ino
    real = cache._owner_ok
    monkeypatch.setattr(cache, "_owner_ok", lambda st: st.st_ino != ino and real(st))
    assert cli.main(WARM_ARGS + ["--jobs", "1", "--cache-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"cache directory {root} is not trusted: it is owned by another user (uid {os.stat(root).st_uid}" in err
    specs = cli.warmup_specs("sm_80", [64], ["bf16"], [True], ["soa"])
    with pytest.raises(CacheDirectoryError, match="owned by another user"):
        warmup(specs, root, jobs=1, progress=False)
    assert list(root.iterdir()) == []


def test_warmup_reports_kernels_it_could_not_write(tmp_path, capsys, monkeypatch):
    """A directory that cannot be written (simulated: root ignores chmod a-w) keeps nothing:
    warmup says how many kernels were not stored instead of counting them as compiled."""
    from kernelgen.jit import cache
    from kernelgen.jit.warmup import CacheDirectoryError, warmup

    def full(path, data):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(cache, "_write_atomic", full)
    specs = cli.warmup_specs("sm_80", [64], ["bf16"], [True], ["soa"])
    root = tmp_path / "full"
    with pytest.warns(cache.KernelCacheWarning, match="No space left"):
        with pytest.raises(CacheDirectoryError) as ei:
            warmup(specs, root, jobs=1, progress=False)
    assert str(ei.value) == (f"cache directory {root}: 2 of 2 kernel(s) were compiled but not written, it could not "
                             f"be written (read-only, full or not creatable; see the KernelCacheWarning); 0 written, "
                             f"0 already cached")
    assert KernelCache(root).lookup(specs[0]) is None
    with pytest.warns(cache.KernelCacheWarning, match="No space left"):
        assert cli.main(WARM_ARGS + ["--jobs", "1", "--cache-dir", str(tmp_path / "full2")]) == 1
    out, err = capsys.readouterr()
    assert not WARMUP_RE.search(out) and "2 of 2 kernel(s) were compiled but not written" in err


def test_warmup_dir_made_untrusted_during_the_run(tmp_path, monkeypatch):
    """The directory passes the check, then becomes world-writable before the compiles: the kernels
    are compiled in memory only, and warmup says so with the reason."""
    from kernelgen.jit import cache
    from kernelgen.jit.warmup import CacheDirectoryError, warmup

    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    specs = cli.warmup_specs("sm_80", [64], ["bf16"], [True], ["soa"])
    real_lookup = cache.KernelCache.lookup

    def lookup_then_open_up(self, spec):
        r = real_lookup(self, spec)
        os.chmod(root, 0o777)
        return r

    monkeypatch.setattr(cache.KernelCache, "lookup", lookup_then_open_up)
    try:
        with pytest.warns(cache.KernelCacheWarning, match="not safe to load kernels"):
            with pytest.raises(CacheDirectoryError, match=r"2 of 2 kernel\(s\) were compiled but not written, it is "
                                                          r"not trusted: it is writable by group/other users"):
                warmup(specs, root, jobs=1, progress=False)
        assert list(root.iterdir()) == []
    finally:
        os.chmod(root, 0o700)


def test_cache_verify_names_an_untrusted_directory_and_the_fix(tmp_path, capsys):
    """A user's review: on a world-writable cache directory verify reported "bad entries remain (run
    verify --repair)", and --repair "not repaired", neither saying why.  Now both exit 1 with one line
    naming the directory, the reason and the fix; after chmod 700 the entries verify ok."""
    d = tmp_path / "kc"
    assert cli.main(["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "bf16", "--causal",
                     "--layout", "soa", "--jobs", "1", "--cache-dir", str(d)]) == 0
    capsys.readouterr()
    os.chmod(d, 0o777)
    try:
        for extra in ([], ["--repair"]):
            assert cli.main(["cache", "verify", "--cache-dir", str(d), *extra]) == 1
            out, err = capsys.readouterr()
            assert out == "" and f"cache directory {d} is not trusted" in err
            assert "writable by group/other users" in err and f"chmod 700 {d}" in err
    finally:
        os.chmod(d, 0o700)
    assert cli.main(["cache", "verify", "--cache-dir", str(d)]) == 0
    assert ": 2 ok, 0 bad" in capsys.readouterr().out


def test_cache_commands(tmp_path, capsys):
    d = str(tmp_path / "kc")
    assert cli.main(["cache", "path", "--cache-dir", d]) == 0
    got = capsys.readouterr()
    assert got.out.strip() == d and got.err == ""
    f = tmp_path / "a_file"   # `path` prints it and notes what every other cache command refuses
    f.write_text("")
    assert cli.main(["cache", "path", "--cache-dir", str(f)]) == 0
    got = capsys.readouterr()
    assert got.out.strip() == str(f) and f"{f} exists but is not a directory (set by --cache-dir)" in got.err
    assert cli.main(["cache", "list", "--cache-dir", d]) == 0
    assert "no cached kernels" in capsys.readouterr().out

    assert cli.main(["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "bf16", "--causal",
                     "--layout", "soa", "--jobs", "1", "--cache-dir", d]) == 0
    capsys.readouterr()
    assert cli.main(["cache", "list", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    for col in ("name", "arch", "nvrtc", "key", "size KB", "registers", "spill bytes", "valid"):
        assert col in out
    assert "attn_sm_80_bf16_d64_causal_soa" in out and "sched_sm_80_soa" in out
    from kernelgen.jit import compiler
    (attn_row,) = [ln for ln in out.splitlines() if "attn_sm_80_bf16_d64_causal_soa" in ln]
    assert ".".join(map(str, compiler.nvrtc_version())) in attn_row   # builds told apart by NVRTC and key
    attn_key = json.loads(next(Path(d).glob("attn_*.json")).read_text())["key"]
    assert attn_key[:12] in attn_row
    assert "2 entries" in out

    assert cli.main(["cache", "verify", "--cache-dir", d]) == 0
    assert "2 ok, 0 bad" in capsys.readouterr().out

    # corrupt one cubin: verify fails (exit 1), verify --repair fixes it
    cubin = next(Path(d).glob("attn_*.cubin"))
    cubin.write_bytes(cubin.read_bytes()[:100])
    assert cli.main(["cache", "verify", "--cache-dir", d]) == 1
    out = capsys.readouterr().out
    assert "1 bad" in out and cubin.stem in out
    assert cli.main(["cache", "list", "--cache-dir", d]) == 0
    assert "no (" in capsys.readouterr().out
    assert cli.main(["cache", "verify", "--repair", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert "1 repaired" in out and f"repaired: {cubin.stem}" in out and "  bad:" not in out
    # a sidecar without a usable spec: the entry is removed, not rebuilt, and verify --repair says so
    side = next(Path(d).glob("sched_*.json"))
    side.write_text("{not json")
    assert cli.main(["cache", "verify", "--repair", "--cache-dir", d]) == 1
    out = capsys.readouterr().out
    assert f"removed (no usable spec in its sidecar to rebuild it): {side.stem}" in out
    assert "0 repaired" in out and "1 entry not repaired" in out and not side.exists()
    assert "compiled again on their next call, or by running the `kernelgen warmup`" in out   # how it comes back
    assert cli.main(["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "bf16", "--causal",
                     "--layout", "soa", "--jobs", "1", "--cache-dir", d]) == 0   # rebuilt by a warmup
    capsys.readouterr()
    assert cli.main(["cache", "verify", "--cache-dir", d]) == 0
    capsys.readouterr()

    # a cubin without its sidecar: `cache list` marks it, `cache verify` names it (exit 0: never loaded),
    # `verify --repair` removes it
    orphan = Path(d) / f"attn_sm_80_bf16_d64_causal_soa-{'0' * 16}.cubin"
    orphan.write_bytes(b"\x7fELF")
    assert cli.main(["cache", "list", "--cache-dir", d]) == 0
    assert "no (orphan" in capsys.readouterr().out
    assert cli.main(["cache", "verify", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert "2 ok, 0 bad" in out
    assert (f"orphan (a cubin without its sidecar, never loaded; verify --repair removes it unless a compile holds "
            f"its lock): {orphan.stem}") in out
    assert cli.main(["cache", "verify", "--repair", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert "1 orphaned file(s) removed" in out and "orphan (" not in out and not orphan.exists()

    assert cli.main(["cache", "clear", "--cache-dir", d]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert KernelCache(d).entries() == []


def test_doctor_says_how_each_switch_reads(capsys, monkeypatch):
    """A new user's review: KERNELGEN_DISABLE_JIT=maybe was listed as if it took effect (JIT stays on)."""
    for k in [k for k in os.environ if k.startswith("KERNELGEN_") and k != "KERNELGEN_CACHE_DIR"]:
        monkeypatch.delenv(k)
    for k, v in (("KERNELGEN_DISABLE_JIT", "maybe"), ("KERNELGEN_CHECK_INPUTS", "true"),
                 ("KERNELGEN_TIERED_COMPILE", "Off"), ("KERNELGEN_GRAPH_LAUNCH", "0"), ("KERNELGEN_DISABEL_JIT", "1"),
                 ("KERNELGEN_SM90_PACK_GQA", "perhaps"), ("KERNELGEN_FP8_FUSED", "yes")):
        monkeypatch.setenv(k, v)
    assert cli.main(["doctor"]) == 0
    lines = {ln.split("=")[0].split()[-1]: ln for ln in capsys.readouterr().out.splitlines() if "KERNELGEN_" in ln
             and "=" in ln}
    assert lines["KERNELGEN_DISABLE_JIT"].endswith("=maybe   (read as off: value not recognised)")
    assert lines["KERNELGEN_CHECK_INPUTS"].endswith("=true   (read as off: value not recognised)")
    assert lines["KERNELGEN_TIERED_COMPILE"].endswith("=Off   (read as off)")
    assert lines["KERNELGEN_GRAPH_LAUNCH"].endswith("=0   (read as off)")
    assert lines["KERNELGEN_FP8_FUSED"].endswith("=yes   (read as on)")
    assert lines["KERNELGEN_DISABEL_JIT"].endswith("=1   (not a variable kernelgen reads: ignored)")
    assert lines["KERNELGEN_SM90_PACK_GQA"].endswith("=perhaps   (not an on or off word: calls raise ValueError)")
    assert lines["KERNELGEN_CACHE_DIR"].endswith(os.environ["KERNELGEN_CACHE_DIR"])   # (no note)


def test_doctor(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    major, minor = compiler.nvrtc_version()
    assert re.search(rf"NVRTC\s+{major}\.{minor}", out)
    assert "kernelgen" in out and "cache dir" in out
    assert "KERNELGEN_CACHE_DIR=" in out  # set by conftest
    if not has_cuda_gpu():
        assert re.search(r"GPUs\s+no (CUDA GPU|NVIDIA driver found|NVIDIA GPU found)", out)


@no_gpu
def test_demo_without_gpu_prewarms_its_kernels(tmp_path, capsys):
    d = str(tmp_path)
    assert cli.main(["demo", "--arch", "sm_80", "--jobs", "1", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU found: pre-warmed 2 kernel(s) for sm_80 in" in out
    assert "(2 compiled now, 0 already cached)" in out
    assert "needs an NVIDIA GPU" in out
    assert "or newer" not in out and "8.0" in out and "9.0" in out and "KERNELGEN_ALLOW_UNTESTED_ARCH=1" in out
    assert max(len(line) for line in out.splitlines()) <= 250, out   # (was one line of about 600 characters)
    cache = KernelCache(d)
    assert all(cache.lookup(s) is not None for s in demo_specs("sm_80", "soa"))

    before = compiler.COMPILE_COUNT
    assert cli.main(["warmup", "--arch", "sm_80", "--head-dim", "128", "--dtype", "bf16", "--causal",
                     "--layout", "soa", "--jobs", "1", "--cache-dir", d]) == 0
    assert _warmup_counts(capsys.readouterr().out)[1:4] == (0, 2, 2)
    assert compiler.COMPILE_COUNT == before
    assert cli.main(["demo", "--arch", "sm_80", "--jobs", "1", "--cache-dir", d]) == 0   # a second demo: all cached
    assert "(0 compiled now, 2 already cached)" in capsys.readouterr().out


@no_gpu
def test_demo_bad_trace_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("context_tokens,generated_tokens\n12,3\nx,4\n")
    assert cli.main(["demo", "--trace", str(bad), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and ":3:" in err


# ------------------------------------------------------------------------------------ traces
def test_load_packaged_sample():
    rows = traces.load_trace()
    assert len(rows) == 2000
    assert all(isinstance(c, int) and isinstance(g, int) and c > 0 and g > 0 for c, g in rows)
    assert rows[0] == (374, 44)


def test_load_trace_from_path_matches_shared_source(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("timestamp_s,context_tokens,generated_tokens\n0.0,10,2\n\n1.5,7,0\n")
    assert traces.load_trace(p) == [(10, 2), (7, 0)]
    # column order comes from the header
    p.write_text("generated_tokens,context_tokens\n3,9\n")
    assert traces.load_trace(str(p)) == [(9, 3)]


@pytest.mark.parametrize("text, where", [
    ("context_tokens,generated_tokens\n12,3\nabc,4\n", ":3:"),
    ("context_tokens,generated_tokens\n12,3\n5\n", ":3:"),
    ("context_tokens,generated_tokens\n-1,3\n", ":2:"),
    ("timestamp_s,tokens\n0,1\n", ":1:"),
    ("context_tokens,generated_tokens\n", "no request rows"),
    ("", "empty"),
])
def test_malformed_trace_raises_value_error_naming_file(tmp_path, text, where):
    p = tmp_path / "broken.csv"
    p.write_text(text)
    with pytest.raises(ValueError) as ei:
        traces.load_trace(p)
    assert str(p) in str(ei.value) and where in str(ei.value)


def test_missing_trace_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        traces.load_trace(tmp_path / "nope.csv")


def test_prefill_batch_is_consecutive_and_bounded():
    rows = traces.load_trace()
    batch = traces.prefill_batch(rows)
    assert batch == traces.prefill_batch(rows)  # deterministic
    assert sum(batch) <= 32768 and max(batch) <= 8192
    assert batch == [min(c, 8192) for c, _ in rows[:len(batch)]]
    assert sum(batch) + min(rows[len(batch)][0], 8192) > 32768  # the next one would not fit

    assert traces.prefill_batch([5000, 9000, 100], max_tokens=20000, max_len=8192) == [5000, 8192, 100]
    assert traces.prefill_batch([5, 6, 7, 8], max_requests=2) == [5, 6]
    assert traces.prefill_batch([10, 10, 10], max_tokens=25) == [10, 10]
    with pytest.raises(ValueError):
        traces.prefill_batch([100], max_tokens=50, max_len=100)
    with pytest.raises(ValueError):
        traces.prefill_batch([1], max_tokens=0)


def test_causal_flop_count():
    def brute(lq, lk):
        return sum(1 for r in range(lq) for j in range(lk) if j <= r + lk - lq)

    for lq in range(0, 9):
        for lk in range(0, 9):
            assert visible_pairs(lq, lk, True) == brute(lq, lk)
            assert visible_pairs(lq, lk, False) == lq * lk
    assert attention_flops([4, 2]) == 4 * 32 * 128 * (10 + 3)


# ------------------------------------------------------------------------------------ entry points
def test_python_m_kernelgen_help():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-m", "kernelgen", "--help"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    for cmd in ("warmup", "cache", "doctor", "demo"):
        assert cmd in r.stdout


# ------------------------------------------------------------------------------------ demo helpers (CPU)
def test_compare_to_reference_on_cpu():
    import torch

    from kernelgen.apps.demo import compare_to_reference

    ref = torch.randn(6, 2, 8, dtype=torch.float64)
    ref_lse = torch.randn(2, 6, dtype=torch.float64)
    ref_lse[0, 0] = float("-inf")  # a row that sees no key
    out, lse = ref.to(torch.bfloat16), ref_lse.float()
    r = compare_to_reference(out, lse, ref, ref_lse)
    assert r["matches"] and r["max_error"] < 0.05 and r["max_lse_error"] < 1e-5
    bad = out.clone()
    bad[3, 1, 2] += 1.0
    assert not compare_to_reference(bad, lse, ref, ref_lse)["matches"]
    nan = out.clone()
    nan[0, 0, 0] = float("nan")
    r = compare_to_reference(nan, lse, ref, ref_lse)
    assert not r["matches"] and r["max_error"] == float("inf")
    bad_lse = lse.clone()
    bad_lse[1, 4] += 1.0
    assert not compare_to_reference(out, bad_lse, ref, ref_lse)["matches"]


def test_demo_result_json_shape():
    import json

    from kernelgen.apps.demo import build_result

    r = build_result(True, 1234.5, 300.0, 1500.0, None, 0.01, [10, 20])
    assert r["check"] == {"demo_matches_reference": True}
    assert set(r["benchmark"]) == {"name", "us", "tflops", "tbps", "peers"}
    assert r["benchmark"]["name"] == "demo_azure_conv_prefill" and r["benchmark"]["tbps"] is None
    assert r["benchmark"]["peers"] == {"torch_fa2_varlen": 1500.0}
    assert (r["requests"], r["tokens"], r["max_error"]) == (2, 30, 0.01)
    r = build_result(False, 1.0, 1.0, None, "RuntimeError: no FA2", float("inf"), [1])
    assert r["benchmark"]["peers"] == {} and r["peers_unavailable"]["torch_fa2_varlen"].startswith("RuntimeError")
    json.dumps(r, allow_nan=False)


def test_warmup_text_progress_bar_without_tqdm(tmp_path, monkeypatch, capsys):
    from kernelgen.jit.warmup import warmup

    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm -> ImportError
    specs = cli.warmup_specs("sm_80", [64], ["fp16"], [True], ["soa"])  # kernels other tests build too
    assert warmup(specs, tmp_path, jobs=1) == (2, 0)
    assert "2/2" in capsys.readouterr().err
    assert warmup(specs, tmp_path, jobs=1, progress=False) == (0, 2)
    assert capsys.readouterr().err == ""
    assert warmup(specs, tmp_path, jobs=1) == (0, 2)   # nothing to compile: no bar (docs/cli.md: while it compiles)
    assert capsys.readouterr().err == ""


def test_warmup_progress_in_a_log_is_one_line(monkeypatch, capsys):
    """stderr not a terminal (a log file, CI): the bar's final line only, no carriage-return updates,
    tqdm installed or not (a new user's log had one tqdm line a kernel); on a terminal tqdm's bar."""
    from kernelgen.jit import warmup as w

    bar = w._progress(3, 0, "warmup sm_80", True)
    for _ in range(3):
        bar.update(1)
    bar.close()
    err = capsys.readouterr().err
    assert err == "warmup sm_80: [" + "#" * 30 + "] 3/3\n"
    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = w._progress(3, 0, "warmup sm_80", True)
    assert isinstance(bar, tqdm.tqdm)
    bar.close()


def _refused_cache_file(tmp_path, capsys, monkeypatch, argv, via_env):
    """Run ``argv`` with a file as the cache directory (through KERNELGEN_CACHE_DIR or --cache-dir):
    exit 1, no warning, nothing compiled, nothing on stdout.  Returns (the file, stderr)."""
    f = tmp_path / "cachefile"
    f.write_text("not a directory")
    if via_env:
        monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(f))
    else:
        argv = argv + ["--cache-dir", str(f)]
    before = compiler.COMPILE_COUNT
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert compiler.COMPILE_COUNT == before and out == ""
    return f, err


@pytest.mark.parametrize("argv", [WARM_ARGS + ["--jobs", "1"], ["cache", "list"], ["cache", "verify"],
                                  ["cache", "verify", "--repair"], ["cache", "clear"]])
@pytest.mark.parametrize("via_env", [False, True])
def test_cache_dir_that_is_a_file_fails_every_cache_command_first(tmp_path, capsys, monkeypatch, argv, via_env):
    """A cache directory that is a file: one error line naming the path and the setting, exit 1,
    nothing compiled (warmup used to compile everything, then warn twice; list/verify/clear said ok)."""
    f, err = _refused_cache_file(tmp_path, capsys, monkeypatch, argv, via_env)
    assert err.count("\n") == 1 and err.startswith("kernelgen ")
    assert f"cache directory {f} exists but is not a directory" in err
    assert ("KERNELGEN_CACHE_DIR" if via_env else "--cache-dir") in err
    assert f.read_text() == "not a directory"


def test_cache_dir_under_a_file_or_unwritable_fails_warmup_and_clear(tmp_path, capsys, monkeypatch):
    f = tmp_path / "f"
    f.write_text("")
    assert cli.main(WARM_ARGS + ["--jobs", "1", "--cache-dir", str(f / "sub")]) == 1
    assert f"{f} is not a directory (set by --cache-dir)" in capsys.readouterr().err
    d = tmp_path / "ro"
    d.mkdir()
    real_access = os.access
    # read-only (r-x): writing is refused, entering is not
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if Path(p) == d and m & os.W_OK else real_access(p, m, **kw))
    assert cli.main(["cache", "clear", "--cache-dir", str(d)]) == 1
    assert f"cache directory {d} is not writable (set by --cache-dir)" in capsys.readouterr().err
    assert cli.main(["cache", "list", "--cache-dir", str(d)]) == 0  # reading needs no write access
    assert "no cached kernels" in capsys.readouterr().out


@pytest.mark.parametrize("mkdir_fails", [False, True])
def test_cache_dir_the_permission_bits_allow_but_the_file_system_refuses(tmp_path, capsys, monkeypatch, mkdir_fails):
    """Root passes every permission check, and a read-only mount or /proc passes os.access too: the
    directory (and a probe file in it) is tried before anything compiles (a new user's
    `--cache-dir /proc/nope` as root compiled every kernel, then wrote none)."""
    import errno
    import tempfile

    d = tmp_path / "cache"
    monkeypatch.setattr(os, "access", lambda p, m, **kw: True)   # as root
    if mkdir_fails:
        real_mkdir = Path.mkdir

        def mkdir(self, *a, **kw):
            if self == d:
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real_mkdir(self, *a, **kw)

        monkeypatch.setattr(Path, "mkdir", mkdir)
    else:
        d.mkdir()

        def refuse(*a, **kw):
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    monkeypatch.setattr(cli, "warmup", lambda *a, **kw: pytest.fail("compiled despite an unwritable cache directory"))
    assert cli.main(WARM_ARGS + ["--jobs", "1", "--cache-dir", str(d)]) == 1
    err = capsys.readouterr().err
    what = "cannot be created" if mkdir_fails else "is not writable"
    assert err == f"kernelgen warmup: error: cache directory {d} {what}: Read-only file system (set by --cache-dir)\n"


def test_cache_dir_probe_leaves_only_the_directory(tmp_path, capsys):
    """The write check creates the directory the command would create anyway (owner only) and
    removes its probe file."""
    d = tmp_path / "a" / "cache"
    assert cli.cache_dir_problem(d, str(d), write=True) is None
    assert d.is_dir() and list(d.iterdir()) == [] and (d.stat().st_mode & 0o077) == 0
    assert cli.cache_dir_problem(tmp_path / "b", None, write=False) is None and not (tmp_path / "b").exists()


@pytest.mark.parametrize("argv, command, flag", [
    (WARM_ARGS + ["--hed-dim", "64"], "warmup", "--hed-dim 64"),
    (["cache", "verify", "--repiar"], "cache verify", "--repiar"),
    (["cache", "path", "extra"], "cache path", "extra"),
    (["bench", "--quik"], "bench", "--quik"),
    (["doctor", "--verbose"], "doctor", "--verbose"),
])
def test_mistyped_flag_is_reported_by_its_command(capsys, argv, command, flag):
    """A flag the command does not have: that command's usage and error line, exit 2 (it was the top
    level's usage, which lists no command's flags, and `kernelgen: error:`)."""
    with pytest.raises(SystemExit) as ei:
        cli.main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: kernelgen {command} ")
    assert err.splitlines()[-1] == f"kernelgen {command}: error: unrecognized arguments: {flag}"


def test_mistyped_top_level_flag_is_reported_by_the_top_level(capsys):
    """``kernelgen --bogus warmup``: the flag was given to ``kernelgen``, not to warmup."""
    with pytest.raises(SystemExit) as ei:
        cli.main(["--bogus", "warmup", "--arch", "sm_80"])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and err.startswith("usage: kernelgen [-h]")
    assert err.splitlines()[-1] == "kernelgen: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize("driver, status, says", [
    (0, 35, "no NVIDIA driver found"),             # libcuda missing: the runtime says "insufficient driver"
    (13000, 100, "no NVIDIA GPU found"),
])
def test_doctor_without_driver_or_gpu_says_so_plainly(capsys, monkeypatch, driver, status, says):
    from cupy.cuda import runtime

    def no_devices():
        raise runtime.CUDARuntimeError(status)

    monkeypatch.setattr(runtime, "driverGetVersion", lambda: driver)
    monkeypatch.setattr(runtime, "getDeviceCount", no_devices)
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert says in out and "insufficient" not in out
    assert "kernelgen warmup --arch" in out and "kernelgen cache" in out


def test_warmup_accepts_the_untested_blackwell_archs():
    for arch in ("sm_100", "sm_120"):
        assert cli.build_parser().parse_args(["warmup", "--arch", arch]).arch == arch
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["warmup", "--arch", "sm_110"])


def test_warmup_and_cache_commands_run_without_torch(tmp_path):
    """The build-machine install of docs/install.md ("Without a GPU": kernelgen with --no-deps plus
    CuPy, NVRTC, Jinja2, filelock, NumPy, tqdm; no PyTorch): `kernelgen warmup --arch` and the
    cache commands never import torch.  A `torch` package that raises on import stands in for
    its absence (also in warmup's worker processes, which inherit PYTHONPATH)."""
    blocker = tmp_path / "blocked" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("torch is not installed here")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker.parent), str(REPO)]))
    cache = str(tmp_path / "cache")
    base = [sys.executable, "-m", "kernelgen"]
    r = subprocess.run(base + ["warmup", "--arch", "sm_80", "--head-dim", "64", "--dtype", "bf16", "--causal",
                               "--layout", "soa", "--kv-dtype", "e4m3", "--jobs", "2", "--cache-dir", cache],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _warmup_counts(r.stdout)[1:4] == (3, 0, 3)      # scheduler, attention and its FP8 variant
    r = subprocess.run(base + ["cache", "list", "--cache-dir", cache], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and "3 entries" in r.stdout and "_kve4m3" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env)
    assert "torch is not installed here" in r.stderr  # the blocker was in effect


def test_doctor_reports_a_cache_dir_that_is_a_file(tmp_path, capsys, monkeypatch):
    f = tmp_path / "cachefile"
    f.write_text("")
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(f))
    assert cli.main(["doctor"]) == 0
    assert f"unusable: cache directory {f} exists but is not a directory (set by KERNELGEN_CACHE_DIR)" in \
        capsys.readouterr().out


# ------------------------------------------------------------------ a new user's first hour
def _stub_gpu(monkeypatch, present: bool) -> None:
    """cli's commands ask ``demo.has_cuda_gpu`` (imported when they run): answer ``present``."""
    from kernelgen.apps import demo

    monkeypatch.setattr(demo, "has_cuda_gpu", lambda: present)


@pytest.mark.parametrize("argv", [["demo", "--arch", "sm_80", "--jobs", "1"], ["compare-layouts"], ["bench", "--quick"]])
@pytest.mark.parametrize("via_env", [False, True])
def test_cache_dir_that_is_a_file_fails_demo_compare_and_bench_first(tmp_path, capsys, monkeypatch, argv, via_env):
    """As warmup and the cache commands: one error line naming the path and the setting, exit 1,
    nothing compiled (demo used to compile 3 kernels, warn `[Errno 17] File exists`, then raise)."""
    _stub_gpu(monkeypatch, argv[0] != "demo")  # past the GPU check: the cache check must stop them
    f, err = _refused_cache_file(tmp_path, capsys, monkeypatch, argv, via_env)
    setting = "KERNELGEN_CACHE_DIR" if via_env else "--cache-dir"
    assert err == (f"kernelgen {argv[0]}: error: cache directory {f} exists but is not a directory "
                   f"(set by {setting})\n")
    assert f.read_text() == "not a directory"


def test_bench_from_json_does_not_check_the_cache_dir(tmp_path, monkeypatch):
    """--from-json compiles nothing, so a bad cache directory does not stop it."""
    from kernelgen.apps.bench import runner

    f = tmp_path / "x_file"
    f.write_text("")
    monkeypatch.setattr(runner, "replot", lambda path, plots: 0)
    (tmp_path / "r.json").write_text("{}")
    assert cli.main(["bench", "--from-json", str(tmp_path / "r.json"), "--cache-dir", str(f)]) == 0


@pytest.mark.parametrize("command", ["compare-layouts", "bench"])
def test_gpu_commands_without_gpu_say_the_prefix_once(capsys, monkeypatch, command):
    _stub_gpu(monkeypatch, False)
    assert cli.main([command]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernelgen {command}: error: needs a CUDA GPU (none found")
    assert err.count("kernelgen") == 1 and err.count("\n") == 1


@pytest.mark.parametrize("flags,message", [
    (["--pad-to", "4", "--batch", "8"], "--pad-to (4) must be >= --batch (8)"),
    (["--heads", "32/7"], "--heads must look like 32/8 (query heads a positive multiple of KV heads), got '32/7'"),
    (["--heads", "32"], "--heads must look like 32/8"),
    (["--trace", "/nope/missing.csv"], "--trace /nope/missing.csv: "),
    (["--batch", "9000"], "--batch must be <= 8192 (the scheduler's largest batch), got 9000"),
    (["--pad-to", "100000"], "--pad-to must be <= 8192 (the scheduler's largest batch), got 100000"),
])
def test_compare_layouts_reports_a_bad_flag_before_asking_for_a_gpu(capsys, monkeypatch, flags, message):
    """A user's review: without a GPU every bad flag printed only "needs a CUDA GPU", hiding the input
    error until the command ran on a GPU machine; now the flag's error comes first, exit 2."""
    _stub_gpu(monkeypatch, False)
    assert cli.main(["compare-layouts", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernelgen compare-layouts: error: {message}"), err
    assert "CUDA GPU" not in err and err.count("\n") == 1


def test_bench_reports_a_bad_trace_before_asking_for_a_gpu(capsys, monkeypatch, tmp_path):
    """As demo and compare-layouts do (a review: bench said only "needs a CUDA GPU", and on a GPU each
    trace-driven entry failed on its own with exit 0)."""
    _stub_gpu(monkeypatch, False)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    for path, message in ((bad, "lacks column(s) ['context_tokens', 'generated_tokens']"),
                          (tmp_path / "none.csv", "does not exist")):
        assert cli.main(["bench", "--trace", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kernelgen bench: error: --trace {path}: ") and message in err, err
        assert "CUDA GPU" not in err


def test_no_message_says_sm80_or_newer():
    """docs/install.md: not "sm_80 or newer" (8.x and 9.0; 10.x/12.x only with the switch)."""
    from kernelgen.apps import demo
    from kernelgen.kernels.device import SUPPORTED_TEXT, UNTESTED_TEXT

    pkg = REPO / "kernelgen"
    hits = [str(p) for p in pkg.rglob("*.py") if "or newer" in p.read_text()]
    assert hits == []
    assert "KERNELGEN_ALLOW_UNTESTED_ARCH=1" in UNTESTED_TEXT and "12.x" in UNTESTED_TEXT
    source = Path(demo.__file__).read_text()
    assert "needs an NVIDIA GPU of {SUPPORTED_TEXT};\\n{UNTESTED_TEXT}" in source
    assert "9.0" in SUPPORTED_TEXT and "8.0" in SUPPORTED_TEXT


def test_doctor_shows_the_package_directory(capsys):
    import kernelgen

    assert cli.main(["doctor"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"({Path(kernelgen.__file__).resolve().parent})"), first
    assert not first.rstrip(")").endswith("apps")


@pytest.mark.parametrize("arch, noted", [("sm_100", True), ("sm_120", True), ("sm_80", False), ("sm_90a", False)])
def test_warmup_for_an_untested_arch_prints_one_note(tmp_path, capsys, monkeypatch, arch, noted):
    monkeypatch.setattr(cli, "warmup", lambda specs, root, **kw: (len(specs), 0))  # no NVRTC: only the output
    assert cli.main(["warmup", "--arch", arch, "--head-dim", "64", "--dtype", "bf16", "--causal",
                     "--cache-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert _warmup_counts(lines[0])[0] == arch
    notes = [ln for ln in lines if "untested on hardware" in ln]
    if noted:
        assert len(lines) == 2 and notes == [lines[1]]
        assert arch in notes[0] and "KERNELGEN_ALLOW_UNTESTED_ARCH=1" in notes[0]
    else:
        assert lines == lines[:1]


@pytest.mark.parametrize("example", ["hf_generate", "tensor_parallel"])
def test_examples_without_gpu_exit_2(capsys, monkeypatch, example):
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(f"kernelgen_example_{example}",
                                                  REPO / "examples" / f"{example}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", [f"{example}.py"])
    assert mod.main() == 2
    assert "needs CUDA GPU" in capsys.readouterr().out.replace("a CUDA GPU", "CUDA GPU")


def test_public_calls_without_torch_say_how_to_install_it(tmp_path):
    """Without PyTorch, kernelgen.varlen_attention (and import kernelgen.ops) raise an ImportError
    that names PyTorch and the install, chained from the ModuleNotFoundError; the errors that need
    no torch still import."""
    blocker = tmp_path / "blocked" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    code = """
import kernelgen
assert kernelgen.CompileError and kernelgen.KernelNotCachedError
for get in (lambda: kernelgen.varlen_attention, lambda: kernelgen.AttentionPlan, lambda: __import__("kernelgen.ops")):
    try:
        get()
    except ImportError as e:
        assert type(e) is ImportError, type(e)
        assert isinstance(e.__cause__, ModuleNotFoundError) and e.__cause__.name == "torch", repr(e.__cause__)
        print(e)
    else:
        raise AssertionError("no ImportError")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker.parent), str(REPO)]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("kernelgen.varlen_attention needs PyTorch")
    assert "pip install -e ." in lines[0] and "--no-deps" in lines[0] and "pip install torch" in lines[0]
    assert lines[2].startswith("kernelgen.ops needs PyTorch")


def test_a_reader_that_stops_reading_ends_the_command_quietly(capsys, monkeypatch):
    """`kernelgen doctor | head -2` (walkthrough finding): the console script takes SIGPIPE's default
    action, so the reader's exit ends it as it ends cat; called as ``main(argv)`` (SIGPIPE left as Python
    sets it), a BrokenPipeError on stdout ends the command with exit status 1 and no error line."""
    r, w = os.pipe()
    os.close(r)
    out = os.fdopen(w, "w", buffering=1)   # line-buffered: the first line written raises BrokenPipeError
    monkeypatch.setattr("sys.stdout", out)
    assert cli.main(["doctor"]) == 1
    assert "BrokenPipe" not in capsys.readouterr().err
    out.close()
    # the console script: killed by SIGPIPE, nothing on stderr
    p = subprocess.run(f"{sys.executable} -m kernelgen doctor | head -1", shell=True, capture_output=True, text=True)
    assert p.stdout.startswith("kernelgen") and "BrokenPipe" not in p.stderr and "error" not in p.stderr, p.stderr


def test_cache_list_of_an_empty_untrusted_directory_says_so(tmp_path, capsys):
    """Walkthrough finding: `cache list` on an empty world-writable directory said only "no cached
    kernels", where every entry written there would be refused; now the line names the reason and
    the fix.  A trusted empty directory keeps the short line."""
    d = tmp_path / "kc"
    d.mkdir(mode=0o700)
    assert cli.main(["cache", "list", "--cache-dir", str(d)]) == 0
    assert capsys.readouterr().out.strip() == f"no cached kernels in {d}"
    os.chmod(d, 0o777)
    try:
        assert cli.main(["cache", "list", "--cache-dir", str(d)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"no cached kernels in {d} (and it is not trusted: ") and f"chmod 700 {d}" in out
        assert "writable by group/other users" in out
    finally:
        os.chmod(d, 0o700)
