"""NVRTC compiles the variant matrix for sm_80 and sm_90a (no GPU needed) with zero spills.

The large matrices compile a sample by default (tests/sampling.py): the attention variants a
pairwise covering one, the serving variants each row on each arch, the fused presets each once;
``--full-matrix`` compiles all of them.  test_render.py renders every attention variant,
test_every_serving_variant_renders and test_every_fused_variant_renders every serving and fused case.
"""
import itertools
import os
from pathlib import Path

import pytest
import sampling

from kernelgen.jit import compiler, render, sass
from kernelgen.kernels.spec import DTYPES, HEAD_DIMS, LAYOUTS, SchedulerSpec, TileConfig
from kernelgen.selection import heuristics

ARCHS = ("sm_80", "sm_90a")
MATRIX = list(itertools.product(ARCHS, DTYPES, HEAD_DIMS, (False, True)))


def _compile(spec):
    src = render.render(spec)
    return compiler.compile_cubin(src, spec.arch, compiler.default_options(spec.arch), spec.name)


@pytest.mark.parametrize("arch,dtype,hd,causal", sampling.matrix(MATRIX))
def test_attention_compiles_without_spills(arch, dtype, hd, causal):
    """Sampled: every pair of (arch, dtype, head dim, causal) values is compiled (10 of 40 cases)."""
    _, spec = heuristics.specs_for(arch, dtype, hd, hd, causal, "soa")
    res = _compile(spec)
    r = res.resources
    assert res.cubin[:4] == b"\x7fELF"
    assert compiler.elf_size(res.cubin) == len(res.cubin)
    assert 0 < r["registers"] <= 255
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["stack_frame"] == 0, r
    # the register cap promised by __launch_bounds__ holds
    assert r["registers"] * spec.num_threads * spec.tile.min_blocks <= 65536


@pytest.mark.parametrize("arch,hd", list(itertools.product(ARCHS, (64, 128))))
def test_aos_layout_compiles_without_spills(arch, hd):
    _, spec = heuristics.specs_for(arch, "bf16", hd, hd, True, "aos")
    r = _compile(spec).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r


@pytest.mark.parametrize("arch", ("sm_86", "sm_89"))
def test_small_smem_archs_compile(arch):
    for hd in HEAD_DIMS:
        _, spec = heuristics.specs_for(arch, "fp16", hd, hd, True, "soa")
        assert spec.smem_bytes() <= heuristics.SMEM_LIMIT[arch]
        assert _compile(spec).resources["spill_stores"] == 0


@pytest.mark.parametrize("arch", ("sm_100", "sm_120"))
def test_untested_blackwell_archs_compile(arch):
    """The sm_80 path compiles for Blackwell (what KERNELGEN_ALLOW_UNTESTED_ARCH=1 runs there): one
    prefill kernel per arch (NVRTC 13 knows both targets), without spills, within the arch's
    shared memory."""
    _, spec = heuristics.specs_for(arch, "bf16", 128, 128, True, "soa")
    assert spec.arch == arch and spec.mainloop == "sm80"
    assert spec.smem_bytes() <= heuristics.SMEM_LIMIT[arch]
    res = _compile(spec)
    assert res.cubin[:4] == b"\x7fELF"
    assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0


FEATURES = [
    # (tile class rows, mask, pack, paged, softcap, forced splits): the dispatcher's serving variants
    (1, "none", True, True, False, 0),       # decode, paged, auto split
    (1, "causal", True, False, True, 0),     # decode, softcap
    (8, "causal", True, True, False, 0),     # speculative decode (mid tile when packed)
    (4096, "local", False, True, True, 1),   # sliding-window prefill over a paged cache, softcap
    (512, "causal", False, False, False, 4),  # chunked prefill, forced split
]


SERVING = [f + c for f in FEATURES for c in itertools.product(ARCHS, DTYPES, HEAD_DIMS)]


def _serving_variant(arch, dtype, hd, rows, mask, pack, paged, softcap, splits):
    return heuristics.choose(arch, dtype, hd, hd, num_heads_q=32, num_heads_kv=8, mask=mask, layout="soa",
                             max_seqlen_q=rows, max_seqlen_k=32768, paged=paged, softcap=softcap, pack_gqa=pack,
                             num_splits=splits)


@pytest.mark.parametrize("rows,mask,pack,paged,softcap,splits,arch,dtype,hd",
                         sampling.matrix(SERVING, 1, lambda c: ((c[:6], c[6]), (c[6], c[7]), c[8])))
def test_serving_variants_compile_without_spills(arch, dtype, hd, rows, mask, pack, paged, softcap, splits):
    """Sampled (10 of 100): each FEATURES row on each arch, each arch with each dtype, each head dim
    (the sample puts every head dim on both archs)."""
    v = _serving_variant(arch, dtype, hd, rows, mask, pack, paged, softcap, splits)
    r = _compile(v.attention).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (v.attention.name, r)
    if v.combine is not None:
        assert _compile(v.combine).resources["spill_stores"] == 0


def test_every_serving_variant_renders():
    """All 100 serving cases, the sampled-out ones included: the dispatcher's choice renders
    completely (no Jinja left) and fits the arch's shared memory."""
    for rows, mask, pack, paged, softcap, splits, arch, dtype, hd in SERVING:
        v = _serving_variant(arch, dtype, hd, rows, mask, pack, paged, softcap, splits)
        assert v.attention.smem_bytes() <= heuristics.SMEM_LIMIT[arch], v.attention.name
        for spec in filter(None, (v.attention, v.combine)):
            src = render.render(spec)
            assert "{{" not in src and "{%" not in src and "kg_" in src, spec.name


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("hd", (128, 256))
def test_decode_tile_packed_no_mask_compiles_without_spills(arch, hd):
    """The decode tile on packed K/V without a mask (a row FEATURES does not hold): at d 256 Q in
    registers made it spill 12-20 bytes, so Q stays in shared memory above d 128."""
    v = heuristics.choose(arch, "bf16", hd, hd, num_heads_q=32, num_heads_kv=8, mask="none", max_seqlen_q=1,
                          max_seqlen_k=32768, paged=False)
    assert v.attention.tile.num_warps == 1 and v.attention.q_in_registers == (hd <= 128)
    r = _compile(v.attention).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (v.attention.name, r)


#: The sm_80 mainloop's head-dim-128 prefill on a paged cache, every feature that moves it across
#: ptxas' spill edge: (arch, mask, layout, forced splits, soft-cap, kv_dtype).
PAGED_PREFILL_128 = list(itertools.product(ARCHS, ("none", "causal", "local"), LAYOUTS, (1, 4), (False, True),
                                           ("", "e4m3")))


@pytest.mark.parametrize("arch,mask,layout,splits,softcap,kv",
                         sampling.matrix(PAGED_PREFILL_128, 1, lambda c: ((c[0], c[1]), (c[0], c[2]), (c[0], c[4]),
                                                                          (c[0], c[5]), (c[1], c[4]), c[3])))
def test_paged_prefill_128_builds_without_spills(arch, mask, layout, splits, softcap, kv):
    """Sampled (``--full-matrix``: all 96): the sm_80 mainloop's 128-row head-dim-128 prefill tile
    sits at 247-255 registers on a paged cache and spilled 12-48 bytes on some builds (NVRTC 13.0:
    the mask, split, soft-cap, FP8 cache and even the layout decide); the decider gives those calls the
    64-row tile (``heuristics.sm80_prefill_spills``).  The call's tile builds without spills."""
    v = heuristics.choose(arch, "fp16" if splits == 4 else "bf16", 128, 128, num_heads_q=32, num_heads_kv=8,
                          mask=mask, layout=layout, max_seqlen_q=4096, max_seqlen_k=32768, num_splits=splits,
                          paged=True, softcap=softcap, mainloop="sm80", kv_dtype=kv)
    heavy = heuristics.sm80_prefill_spills(arch, 128, 128, mask, True, softcap, kv)
    assert v.attention.tile.block_m == (64 if heavy else 128), v.attention.name
    r = _compile(v.attention).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (v.attention.name, r)


@pytest.mark.parametrize("arch,mask,layout,splits,softcap,kv", [
    ("sm_80", "local", "soa", 1, True, ""),      # 48 bytes with the 128-row tile
    ("sm_80", "causal", "soa", 1, False, "e4m3"),  # 12-20 bytes
    ("sm_90a", "causal", "soa", 4, False, ""),   # 32 bytes
    ("sm_90a", "local", "aos", 4, False, ""),    # 36 bytes
    ("sm_90a", "none", "soa", 1, False, "e4m3"),  # 24-36 bytes
])
def test_paged_prefill_128_cases_that_spilled(arch, mask, layout, splits, softcap, kv):
    """Every case, not sampled: the builds that spilled with the 128-row tile take the 64-row one."""
    test_paged_prefill_128_builds_without_spills(arch, mask, layout, splits, softcap, kv)
    assert heuristics.sm80_prefill_spills(arch, 128, 128, mask, True, softcap, kv)


def test_sm80_prefill_spill_rule_is_narrow():
    """Packed K/V, other head dims and the sm_80 builds that did not spill keep the 128-row tile."""
    assert not heuristics.sm80_prefill_spills("sm_90a", 128, 128, "causal", False, True)
    assert not heuristics.sm80_prefill_spills("sm_90a", 64, 64, "causal", True, True)
    assert not heuristics.sm80_prefill_spills("sm_80", 128, 128, "causal", True, True)
    assert not heuristics.sm80_prefill_spills("sm_80", 128, 128, "local", True, False)
    assert not heuristics.sm80_prefill_spills("sm_86", 128, 128, "local", True, True)


def test_sm80_fused_kernel_on_sm90a_with_softcap_and_pages_builds_without_spills():
    """The sm_80 fused kernel compiled for sm_90a (a mixed batch the Hopper kernels do not take)
    with a soft-cap on a paged cache spilled 28-48 bytes with the 128-row long tile; it takes the
    64-row one (every case, not sampled); on sm_80 the 128-row one builds clean and stays."""
    f = heuristics.choose_fused("sm_90a", "bf16", 128, 128, num_heads_q=8, num_heads_kv=1, mask="causal",
                                max_seqlen_k=32768, paged=True, softcap=True)
    assert f.fused.long.tile == heuristics.PAGED_PREFILL_TILE
    r = _compile(f.fused).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (f.fused.name, r)
    assert f.fused.smem_bytes() <= heuristics.SMEM_LIMIT["sm_90a"]
    assert heuristics.choose_fused("sm_80", "bf16", 128, 128, num_heads_q=8, num_heads_kv=1, mask="causal",
                                   max_seqlen_k=32768, paged=True, softcap=True).fused.long.tile.block_m == 128


def test_hdim_192_128_compiles():
    _, spec = heuristics.specs_for("sm_90a", "bf16", 192, 128, True, "soa")
    assert _compile(spec).resources["spill_stores"] == 0


@pytest.mark.parametrize("arch,layout", list(itertools.product(ARCHS, LAYOUTS)))
def test_scheduler_compiles(arch, layout):
    r = _compile(SchedulerSpec(arch, layout)).resources
    assert r["spill_stores"] == 0 and r["registers"] <= 64


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_scheduler_code_stays_rolled(arch):
    """Inside a decode call the scheduler runs with its code evicted from L2 by the K / V stream,
    and its time follows the code it touches (ncu on the H200: 70 % of its stalls waiting for
    instructions; docs/dev/perf-log.md, "Thirty-fifth session").  Its warp scans and digit ballots
    stay loops (SHFL.UP: one loop per scan site and request count, 8 in all, against 40 unrolled;
    VOTE.ANY 46 against 207, NVRTC 13.0), the 64-bit block sums use 32-bit warp reductions (no butterfly
    shuffles), and the division and block sum are shared calls; 10.6-11k instructions in all
    against 14.4-14.8k unrolled."""
    import re

    nvd = sass.find_nvdisasm()
    assert nvd is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    text = sass.disassemble(_compile(SchedulerSpec(arch, "soa")).cubin, nvd)
    ops = sass.opcode_counts(text, ("SHFL.UP", "SHFL.BFLY", "VOTE.ANY"))
    assert ops["SHFL.UP"] <= 8 and ops["SHFL.BFLY"] == 0 and ops["VOTE.ANY"] <= 60, ops
    assert len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", text, re.M)) < 12000


def test_compile_error_carries_log_and_source(tmp_path):
    with pytest.raises(compiler.CompileError) as ei:
        compiler.compile_cubin('extern "C" __global__ void k() { this is not cuda; }', "sm_80",
                               compiler.default_options("sm_80"), "broken_kernel")
    err = ei.value
    assert "error" in err.log.lower()
    assert err.source_path and open(err.source_path).read().startswith('extern "C"')
    assert "broken_kernel" in str(err)


def test_rejected_sources_go_to_a_private_folder_only(tmp_path, monkeypatch):
    """The rejected source is a new 0600 file in a folder of this user that no one else can write;
    a folder another user could write, or a link standing in for it, gets nothing (the temp dir is
    shared: a planted link was followed and its target overwritten); the newest FAILED_KEEP stay."""
    import stat

    bad = 'extern "C" __global__ void k() { this is not cuda; }'

    def reject():
        with pytest.raises(compiler.CompileError) as ei:
            compiler.compile_cubin(bad, "sm_80", compiler.default_options("sm_80"), "broken_kernel")
        return ei.value.source_path

    d = tmp_path / "failed"
    monkeypatch.setattr(compiler, "FAILED_DIR", d)
    p = reject()
    assert Path(p).parent == d and Path(p).read_text() == bad
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600 and stat.S_IMODE(os.stat(d).st_mode) == 0o700
    log = Path(compiler.log_path_of(p))   # the NVRTC log beside it (a command-line user reads no exception)
    assert log == Path(p).with_suffix(".log") and "error" in log.read_text().lower()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert reject() != p   # a second failure in the same process: a new file
    monkeypatch.setattr(compiler, "FAILED_KEEP", 2)
    reject()
    assert len(list(d.glob("*.cu"))) == 2 and len(list(d.glob("*.log"))) == 2   # (the oldest log goes with its source)
    os.chmod(d, 0o777)   # writable by others: nothing saved there
    assert reject() is None and len(list(d.glob("*.cu"))) == 2
    target = tmp_path / "victim"
    target.mkdir(mode=0o700)
    link = tmp_path / "planted"
    link.symlink_to(target)
    monkeypatch.setattr(compiler, "FAILED_DIR", link)
    assert reject() is None and list(target.iterdir()) == []


def test_parse_resources():
    log = ("ptxas info    : Used 128 registers, used 1 barriers, 64 bytes smem\n"
           "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n")
    r = compiler.parse_resources(log)
    assert r == {"registers": 128, "stack_frame": 16, "spill_stores": 8, "spill_loads": 12, "shared_static": 64}
    # no ptxas report at all: the register count is unknown (None), not 0, so the Hopper kernels'
    # register-pool check does not refuse a kernel for a missing report
    empty = compiler.parse_resources("")
    assert empty == {"registers": None, "stack_frame": 0, "spill_stores": 0, "spill_loads": 0, "shared_static": 0}
    from kernelgen.jit import runtime
    from kernelgen.selection import heuristics
    spec = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                             max_seqlen_q=4096, max_seqlen_k=4096).attention
    assert spec.mainloop == "sm90a"
    runtime.check_register_pool(spec, empty)                 # unknown: nothing to check
    with pytest.raises(RuntimeError, match="cannot cover setmaxnreg"):
        runtime.check_register_pool(spec, {**empty, "registers": 0})


# Fused mixed-batch kernels (prefill + decode tiles in one launch) of the serving presets:
# (num_heads_q, num_heads_kv, head_dim, mask, paged, softcap)
FUSED = [
    (32, 8, 128, "causal", True, False),    # llama3-8b, paged cache
    (32, 8, 128, "causal", False, False),   # packed K/V
    (32, 8, 128, "none", True, False),
    (28, 4, 128, "causal", True, False),    # qwen2.5-7b
    (8, 1, 128, "causal", True, True),      # llama3-70b TP8 slice, softcap
    (32, 32, 64, "causal", True, False),    # MHA, head dim 64
    (128, 128, 128, "causal", True, False),
]


@pytest.mark.parametrize("hq,hkv,hd,mask,paged,softcap,arch",
                         sampling.matrix([f + (a,) for f in FUSED for a in ARCHS], 1, lambda c: (c[:6], c[6])))
def test_fused_variants_compile_without_spills(arch, hq, hkv, hd, mask, paged, softcap):
    """Sampled: each preset of FUSED is compiled for one arch, both archs occur (7 of 14)."""
    f = heuristics.choose_fused(arch, "bf16", hd, hd, num_heads_q=hq, num_heads_kv=hkv, mask=mask,
                                max_seqlen_k=32768, paged=paged, softcap=softcap)
    assert f is not None
    heavy = arch == "sm_90a" and paged and softcap and hd == 128   # (choose_fused's long-tile rule)
    assert f.fused.short.tile.num_warps == 1 and f.fused.long.tile.block_m == (64 if heavy else 128)
    assert f.fused.long.row_splits == f.fused.short.split
    res = _compile(f.fused)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (f.fused.name, r)
    assert r["registers"] * f.fused.num_threads * f.fused.long.tile.min_blocks <= 65536
    assert f.fused.smem_bytes() <= heuristics.SMEM_LIMIT[arch]


def test_every_fused_variant_renders():
    """Every FUSED preset on both archs, the sampled-out ones included: renders completely and fits."""
    for (hq, hkv, hd, mask, paged, softcap), arch in itertools.product(FUSED, ARCHS):
        f = heuristics.choose_fused(arch, "bf16", hd, hd, num_heads_q=hq, num_heads_kv=hkv, mask=mask,
                                    max_seqlen_k=32768, paged=paged, softcap=softcap)
        assert f is not None and f.fused.smem_bytes() <= heuristics.SMEM_LIMIT[arch], (arch, hq, hkv, hd)
        src = render.render(f.fused)
        assert "{{" not in src and "{%" not in src and "kg_" in src, f.fused.name


def test_fused_not_used_where_it_does_not_fit():
    """Sliding windows and head dim 256 (four decode slices exceed shared memory) stay unfused."""
    kw = dict(num_heads_q=32, num_heads_kv=8, max_seqlen_k=4096, paged=True)
    assert heuristics.choose_fused("sm_90a", "bf16", 128, 128, mask="local", **kw) is None
    assert heuristics.choose_fused("sm_90a", "bf16", 256, 256, mask="causal", **kw) is None
    assert heuristics.choose_fused("sm_80", "bf16", 256, 256, mask="causal", **kw) is None
    assert heuristics.choose_fused("sm_90a", "bf16", 128, 128, mask="causal", short_max_q=0, **kw) is None
    # 32 query heads per KV head do not fit one 16-row tile: short tiles are per head, unpacked
    f = heuristics.choose_fused("sm_90a", "bf16", 128, 128, mask="causal", short_max_q=4, num_heads_q=32,
                                num_heads_kv=1, max_seqlen_k=4096)
    assert f is not None and not f.fused.short.pack_gqa and f.short_max_q == 4
    assert heuristics.short_query_tokens(32, 1) == 16 and heuristics.short_query_tokens(32, 8) == 4


def test_the_shared_memory_carveout_comes_from_its_variable():
    """KERNELGEN_SMEM_CARVEOUT (an experiment): unset or empty sets nothing; 0-100 is the percent
    every loaded kernel asks for; anything else is refused with the variable's name."""
    from kernelgen.jit import runtime

    assert runtime.smem_carveout({}) is None and runtime.smem_carveout({"KERNELGEN_SMEM_CARVEOUT": " "}) is None
    assert runtime.smem_carveout({"KERNELGEN_SMEM_CARVEOUT": "100"}) == 100
    assert runtime.smem_carveout({"KERNELGEN_SMEM_CARVEOUT": "0"}) == 0
    for bad in ("101", "-1", "max", "50.5"):
        with pytest.raises(ValueError, match="KERNELGEN_SMEM_CARVEOUT must be an int from 0 to 100"):
            runtime.smem_carveout({"KERNELGEN_SMEM_CARVEOUT": bad})
