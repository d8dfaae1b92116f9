"""The docs' links and the repository paths cited in code, the performance page's generator
(tools/perf_page.py) and the GPU tests' warmer (tools/warm_gpu_tests.py); no GPU."""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(name):
    spec = importlib.util.spec_from_file_location(f"tools_{name}", REPO / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build_docs = _tool("build_docs")
perf_page = _tool("perf_page")


# ----------------------------------------------------------------------------- links and paths
def test_every_relative_link_of_the_docs_resolves():
    """README.md, docs/**/*.md (the developer log included) and the READMEs of tools/ and
    benchmarks/: every relative link names an existing file, and every #anchor a heading."""
    checked = {p.relative_to(REPO).as_posix() for p in build_docs.checked_files(REPO)}
    for page in ("README.md", "docs/performance.md", "docs/dev/perf-log.md", "tools/README.md",
                 "benchmarks/experiments/README.md"):
        assert page in checked
    assert build_docs.check_links(REPO) == []


def test_user_docs_do_not_send_users_to_the_developer_log():
    """The log is linked from the performance page only (not from the README or the guides), which
    also cite none of its sections by name ("perf log, "Thirty-ninth session"": a new user's find)."""
    import re

    units = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth"
    tens = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
    whole = ("tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|"
             "nineteenth|twentieth|thirtieth|fortieth|fiftieth|sixtieth|seventieth|eightieth|ninetieth|hundredth")
    ordinal = re.compile(rf"\b(perf[- ]log|perf[- ]notes|(({tens})-({units})|{whole}|\d+(st|nd|rd|th))\s+session"
                         rf"|session\s+\d+)\b", re.IGNORECASE)
    for bad in ("in the forty-seventh session", 'perf log, "Thirty-ninth', "the fifty-first\nsession", "twelfth session",
                "Eightieth session", "the 59th session", "session 59", "Perf-log"):
        assert ordinal.search(bad), bad
    for fine in ("each test session gets", "a serving session", "the first call of a session", "in your first session"):
        assert not ordinal.search(fine), fine
    for page in ["README.md"] + [p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")]:
        text = (REPO / page).read_text()
        if page == "docs/performance.md":
            assert "dev/perf-log.md" in text
        else:
            assert "perf-log" not in text and "perf-notes" not in text, page
            assert not ordinal.search(text), (page, ordinal.search(text).group(0))


#: Paths cited in code that need not exist: build output and the link checker's own test fixtures.
NOT_FILES = {"docs/_build", "docs/_build/index.html", "docs/a.md", "docs/missing.md",
             "kernelgen/templates"}  # the templates' place inside the wheel
#: Citations left stale on purpose: a template's comments are part of the rendered source, and so
#: of every cache key built from it; they are updated with the next change to those kernels.
TEMPLATE_CITATIONS = {("templates/attention/fwd_fused_sm90.cu.j2", "tools/mixed_timeline.py"),
                      ("templates/attention/fwd_fused_sm90.cu.j2", "docs/perf-notes.md"),
                      ("templates/attention/tile_kt_sm80.cuh", "docs/perf-notes.md"),
                      # the modules' paths before the move into layers (kernels/metadata.py, workspace.py, tma.py)
                      ("templates/attention/fwd_sm80.cu.j2", "kernelgen/metadata.py"),
                      ("templates/attention/fwd_sm90.cu.j2", "kernelgen/metadata.py"),
                      ("templates/scheduler/scheduler.cu.j2", "kernelgen/metadata.py"),
                      ("templates/common/metadata.cuh", "kernelgen/metadata.py"),
                      ("templates/attention/tile_scheduler.cuh", "kernelgen/workspace.py"),
                      ("templates/combine/combine.cu.j2", "kernelgen/workspace.py"),
                      ("templates/attention/mainloop_sm90.cuh", "kernelgen/tma.py"),
                      ("templates/common/tma.cuh", "kernelgen/tma.py")}
_CITED = re.compile(r"(?<![\w/.-])((?:docs|tools|benchmarks|templates|kernelgen)/[\w./-]*\w)")


def test_paths_cited_in_code_exist():
    """Every docs/, tools/, benchmarks/, templates/ or kernelgen/ path named in the package, the
    tools, the experiments, the tests and the templates exists (a moved or deleted file leaves none
    behind)."""
    files = [p for d in ("kernelgen", "tools", "benchmarks", "tests", "templates") for p in (REPO / d).rglob("*")
             if p.is_file() and p.suffix in (".py", ".sh", ".j2", ".cuh", ".cu") and "__pycache__" not in p.parts
             and p != Path(__file__).resolve()]
    assert len(files) > 20
    missing = []
    for f in files:
        rel = f.relative_to(REPO).as_posix()
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in _CITED.finditer(line):
                path = m.group(1)
                if path in NOT_FILES or (rel, path) in TEMPLATE_CITATIONS or (REPO / path).exists():
                    continue
                missing.append(f"{rel}:{n}: {path}")
    assert not missing, missing


# ----------------------------------------------------------------------------- tools/perf_page.py
#: The committed report (the page must match it) and a frozen earlier report (a9b9bb8's, before FA3
#: and FA4 were peers) whose numbers the tests of perf_page's arithmetic spell out.
REPORT = json.loads((REPO / "docs" / "benchmarks" / "h200.json").read_text())
FROZEN = json.loads((REPO / "tests" / "data" / "perf_page_report_a9b9bb8.json").read_text())


def test_performance_page_is_generated_from_the_committed_report():
    """docs/performance.md's generated block is what tools/perf_page.py makes of h200.json
    (after a new report: python tools/perf_page.py --write --plots docs/benchmarks/plots)."""
    r = subprocess.run([sys.executable, str(REPO / "tools" / "perf_page.py"), "--check"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (REPO / "docs" / "performance.md").read_text()
    for b in REPORT["benchmarks"]:
        if not b.get("same_as"):
            assert f"| `{b['name']}` |" in page


def test_perf_page_ratios_best_peer_and_slower_entries():
    text = perf_page.render(FROZEN)
    # peers are other implementations; kernelgen's own paths are not
    assert perf_page.best_peer(next(b for b in FROZEN["benchmarks"] if b["name"] == "mixed_trace"))[0] == \
        "torch_fa2_varlen"
    row = next(line for line in text.splitlines() if line.startswith("| `decode_long_b8_128k` |"))
    assert "`torch_fa2` 969 us" in row and "**0.89x** (slower)" in row and "`kernelgen_sm80` 0.999x" in row
    row = next(line for line in text.splitlines() if line.startswith("| `prefill_dense_causal_h128_s16k` |"))
    assert "`cudnn_sdpa` 3337 us | 1.01x |" in row and "665 TFLOP/s" in row
    assert "`varlen_trace_prefill_gqa`" not in text          # gpu_report's alias is not listed twice
    assert "Not in this report: `fa3`, `fa4`" in text
    assert "`mem_efficient_sdpa` on `decode_long_b8_128k`: RuntimeError" in text


def test_perf_page_with_fa3_and_fa4_peers():
    """A report with the peers of issue 20: the fastest peer is chosen among them, the note about
    missing peers goes, reasons are grouped."""
    rep = copy.deepcopy(FROZEN)
    b = next(x for x in rep["benchmarks"] if x["name"] == "prefill_dense_causal_h128_s16k")
    b["peers"].update(fa3=2900.0, fa4=3100.0)
    b["ratios"].update(fa3=2900.0 / b["us"], fa4=3100.0 / b["us"])
    rep["extra"]["unavailable_peers"]["decode_trace_b32_paged16"].update(fa3="no paged KV (measured as fa3_unpaged)")
    text = perf_page.render(rep)
    row = next(line for line in text.splitlines() if line.startswith("| `prefill_dense_causal_h128_s16k` |"))
    assert "`fa3` 2900 us | **0.88x** (slower) |" in row and "`fa4` 0.94x" in row
    assert "Not in this report" not in text
    assert "`fa3` on `decode_trace_b32_paged16`: no paged KV (measured as fa3_unpaged)" in text
    assert "slower than the fastest peer on **5 of 10** entries" in text


def test_perf_page_splice_and_cli(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(f"# P\n\nhand\n\n{perf_page.BEGIN}\nSTALE BLOCK\n{perf_page.END}\n\nafter\n")
    assert perf_page.main(["--page", str(page), "--check"]) == 1
    assert perf_page.main(["--page", str(page), "--write"]) == 0
    text = page.read_text()
    assert text.startswith("# P\n\nhand\n") and text.endswith(f"{perf_page.END}\n\nafter\n") and "STALE" not in text
    assert perf_page.main(["--page", str(page), "--check"]) == 0
    with pytest.raises(ValueError, match="perf_page:begin"):
        perf_page.splice("no markers", "x")


def test_perf_page_plot_entries(tmp_path):
    entries = {e["name"]: e for e in perf_page.plot_entries(FROZEN)}
    assert entries["prefill_dense_causal_h128_s16k"]["suite"] == "prefill"
    assert entries["graph_decode_step_b128"]["suite"] == "decode"
    assert entries["varlen_trace_sorted"]["suite"] == "scheduler"
    assert entries["overhead_plan_run"]["suite"] == "overhead" and entries["dispatch_in_memory"]["suite"] == "compile"
    assert "demo_azure_conv_prefill" not in entries and "varlen_trace_prefill_gqa" not in entries
    roof = FROZEN["extra"]["roofs"]
    assert entries["decode_long_b8_128k"]["roof_fraction"] == pytest.approx(
        entries["decode_long_b8_128k"]["tbps"] / roof["copy_tbps"])
    assert "flex_attention" in entries["prefill_varlen_trace"]["unavailable"]
    pytest.importorskip("matplotlib")
    written = perf_page.write_plots(FROZEN, tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{s}.png" for s in ("prefill", "decode", "mixed", "scheduler",
                                                                          "compile", "overhead", "peers"))
    assert entries["decode_long_b8_128k"]["metric"] == "tbps" and entries["prefill_varlen_trace"]["metric"] == "tflops"


# ----------------------------------------------------------------------------- tools/warm_gpu_tests.py
def test_warm_gpu_tests_lists_the_hopper_test_kernels():
    """The warmer's specs: Hopper kernels of the GPU tests (every head-dim pair, the mainloop
    variants, paged, split and fused mixed kernels), no duplicates; --list prints them."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import warm_gpu_tests
    finally:
        sys.path.pop(0)
    specs = warm_gpu_tests.specs()
    names = [s.name for s in specs]
    assert len(names) == len(set(names)) > 200
    assert all(s.arch == "sm_90a" for s in specs)
    for part in ("_d64_", "_d96_", "_d192_", "_d256_", "sched_", "fused_attn_sm_90a"):
        assert any(part in n for n in names), part
    assert any(getattr(s, "paged", False) for s in specs) and any(s.kind == "combine" for s in specs)
    r = subprocess.run([sys.executable, str(REPO / "tools" / "warm_gpu_tests.py"), "--list"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == names


def test_warm_gpu_tests_lists_the_three_warpgroup_kernels_of_each_mainloop_option():
    """tests/gpu/test_hopper_gpu.py's test_hopper_three_warpgroups runs head dim 64's 192-row tile
    (three consumer warpgroups) with the options "", "p", "pr" and "s" on its ragged batch: the
    warmer lists every kernel the dispatcher picks for those calls (it had the default "p" only)."""
    import numpy as np

    sys.path.insert(0, str(REPO / "tools"))
    try:
        import warm_gpu_tests
    finally:
        sys.path.pop(0)
    from kernelgen.selection import heuristics

    rng = np.random.default_rng(23)   # test_hopper_gpu.ragged(23)
    qlens = [int(x) for x in rng.integers(1, 400, size=6)]
    klens = [int(x) for x in rng.integers(1, 520, size=6)]
    qlens[1], klens[2], (qlens[3], klens[3]), (qlens[4], klens[4]) = 0, 0, (300, 70), (129, 257)
    specs = set(warm_gpu_tests.specs())
    for opts in ("", "p", "pr", "s"):
        for mask in ("none", "causal"):
            v = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=8, num_heads_kv=2, mask=mask,
                                  max_seqlen_q=max(qlens), max_seqlen_k=max(klens), mainloop="sm90a", sm90_opts=opts)
            assert v.attention.tile.num_warps == 12, v.attention.name
            for s in (v.scheduler, v.attention, v.combine):
                assert s is None or s in specs, s.name


def test_warm_gpu_tests_follows_kernelgen_sm90_opts(monkeypatch):
    """With KERNELGEN_SM90_OPTS set (a tuning run of the GPU tests), the dispatcher picks Hopper
    kernels with those options; the warmer compiles those, as the flat package's warmers did (they
    read heuristics.SM90_OPTS, which then held the variable), not the default options' kernels."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import warm_gpu_tests
    finally:
        sys.path.pop(0)
    from kernelgen.kernels.device import Device
    from kernelgen.selection import decide
    from kernelgen.selection.settings import Settings

    monkeypatch.setenv("KERNELGEN_SM90_OPTS", "hr")
    specs = set(warm_gpu_tests.specs())
    # test_hopper_matrix's call (d 128, bf16, causal, SoA): the kernel the dispatcher picks now
    sig = decide.CallSignature(dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=8, num_heads_kv=2,
                               mask="causal", window_left=-1, layout="soa", max_seqlen_q=700, max_seqlen_k=9000,
                               paged=False, page_size=0, softcap=False, pack_gqa=None, num_splits=0,
                               short_query_tokens=None, arch=None, tma_ok=True, batch=4, rows=2000)
    r = decide.decide(sig, Device("H200", (9, 0), 132, 60 * 2 ** 20, 232448), Settings.from_env())
    assert r.variants.attention.sm90_opts == "hr"
    assert set(r.specs) <= specs
    # paged: the options plus the gather path where the page size needs it
    assert any(getattr(s, "paged", False) and s.sm90_opts in ("hr", "ghr") for s in specs)


def test_perf_page_suites_are_the_benchs():
    """perf_page orders the page by the bench's suite list itself (it kept a copy before)."""
    from kernelgen.apps import bench

    assert perf_page.SUITES is bench.SUITES


def test_api_md_names_every_parameter_of_the_warmup_functions():
    """docs/api.md spells out warmup_specs' and warmup's signatures: every parameter is named
    there (it had lost ``settings`` and ``desc``)."""
    import inspect
    import re

    from kernelgen.jit import warmup
    from kernelgen.selection import catalog

    text = (REPO / "docs" / "api.md").read_text()
    for qual, fn in (("kernelgen.selection.catalog.warmup_specs", catalog.warmup_specs),
                     ("kernelgen.jit.warmup.warmup", warmup.warmup)):
        m = re.search(re.escape(qual) + r"\(((?:[^()]|\(\))*)\)", text)     # (defaults like "()" inside)
        assert m is not None, qual
        named = [p.split("=")[0].strip() for p in m.group(1).split(",")]
        assert named == list(inspect.signature(fn).parameters), (qual, named)


def test_api_md_names_every_parameter_of_the_reference_functions():
    """docs/api.md's ``kernelgen.apps.reference`` entry gives ``attention_reference``'s and ``tolerance``'s
    signatures as the code has them: every parameter in order, the keyword-only marker where it is,
    and each default's value (a new user's find: the variants' and the descales' arguments, and
    ``kv_dtype``, were missing; a review's: prose mentions elsewhere must not stand in for it)."""
    import inspect
    import re

    from kernelgen.apps import reference

    text = (REPO / "docs" / "api.md").read_text()
    start = text.index("- `kernelgen.apps.reference`:")
    bullet = text[start:text.index("\n- ", start + 1)]
    for name in ("attention_reference", "tolerance"):
        m = re.search(rf"`{name}\(([a-z].*?)\)`", bullet)
        assert m is not None, name
        parts = [x.strip() for x in re.split(r",\s*(?=[a-z*])", m.group(1))]
        params = list(inspect.signature(getattr(reference, name)).parameters.values())
        kw_only = False
        documented = []
        for part in parts:
            if part == "*":
                kw_only = True
                continue
            pname, _, default = part.partition("=")
            documented.append((pname.strip(), kw_only, eval(default) if default else inspect.Parameter.empty))
        assert documented == [(x.name, x.kind == x.KEYWORD_ONLY, x.default) for x in params], name


def test_warm_gpu_tests_sanitize_group_builds_each_case_under_its_environment(monkeypatch):
    """The ``sanitize`` group: the kernels of tools/sanitize.sh's subset, each case's kernels chosen
    under its own ``env`` (pack-GQA on the Hopper prefill kernel, the fused launch's decode-first CTAs),
    the process environment restored after; the FP8 cases with more tiles than CTAs among them."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import fuzz
        import warm_gpu_tests
    finally:
        sys.path.pop(0)
    monkeypatch.delenv("KERNELGEN_SM90_PACK_GQA", raising=False)
    monkeypatch.delenv("KERNELGEN_MIXED_SHORT_CTAS", raising=False)
    specs = set(warm_gpu_tests.specs(["sanitize"]))
    assert "KERNELGEN_SM90_PACK_GQA" not in os.environ and "KERNELGEN_MIXED_SHORT_CTAS" not in os.environ
    cases = dict(fuzz.sanitize_cases())
    for name in ("hopper_pack_gqa_paged16_split", "fp8_prefill_tileinfo_many_tiles", "fp8q_prefill_tileinfo_many_tiles"):
        c = cases[name]
        with fuzz.case_environment(c.pop("env", {})):
            want = set(fuzz.case_specs(c, "sm_90a", 132))
        assert want and want <= specs, name
    # the paged split case packs its GQA heads only under its KERNELGEN_SM90_PACK_GQA=1
    c = dict(fuzz.sanitize_cases())["hopper_pack_gqa_paged16_split"]
    c.pop("env")
    (plain,) = [s for s in fuzz.case_specs(c, "sm_90a", 132) if s.kind == "attention"]
    (packed,) = [s for s in specs if s.kind == "attention" and s.pack_gqa and s.paged and s.split
                 and s.mainloop == "sm90a" and s.head_dim == 128 and s.dtype == "fp16"]
    assert not plain.pack_gqa and packed == dataclasses.replace(plain, pack_gqa=True, tile=packed.tile,
                                                                 sm90_opts=packed.sm90_opts)


def test_perf_page_ratios_near_one_keep_their_side():
    """A ratio that two decimals would print as 1.00x gets three (walkthrough finding: gemma2's FP8
    entry at 0.9988 read "1.00x (slower)")."""
    assert perf_page._x(0.9988) == "0.999x" and perf_page._x(1.004) == "1.004x"
    assert perf_page._x(1.0) == "1.00x" and perf_page._x(0.93) == "0.93x" and perf_page._x(1.2345) == "1.23x"


def test_warm_gpu_tests_lists_the_packed_variant_calls_and_their_spill_twins():
    """test_variant_gpu.py's ``test_hopper_pack_gqa`` (six examples packed on the Hopper kernel): the
    warmer lists each call's kernel and its spill twins, e.g. at head dim 64 with three splits both
    the packed three-warpgroup kernel and the packed two-warpgroup one the soft-cap and
    ``index_arith`` calls run (their three-warpgroup kernels spill, NVRTC 13.0), and the unpacked
    second twin."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import warm_gpu_tests
    finally:
        sys.path.pop(0)
    names = [s.name for s in warm_gpu_tests.specs(["variant_pack"])]
    assert len(names) == len(set(names))
    for code, _ in [v for k, v in warm_gpu_tests.variant_codes().items() if k != "masked_rows"]:
        mine = [n for n in names if f"_var{code.digest}_" in n and "_d64_" in n and "_split_" in n]
        tiles = {(("_pack_" in n), n.rsplit("_", 1)[-1]) for n in mine}
        assert (True, "m192n128w12s2b1") in tiles and (True, "m128n128w8s2b1") in tiles, mine
        assert (False, "m128n128w8s2b1") in tiles, mine
    assert any("_fp16_" in n and "_local_" in n and "_sinks" in n for n in names)
    assert any("_paged" in n for n in names)
