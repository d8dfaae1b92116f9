"""Every variant renders, and rendering is a pure function of the spec."""
import itertools
import re

import jinja2
import pytest

from kernelgen.jit import render
from kernelgen.kernels.params import ATTENTION_PARAMS, SCHEDULER_PARAMS
from kernelgen.kernels.spec import (ARCHS, AttentionSpec, DTYPES, HEAD_DIMS, LAYOUTS, SchedulerSpec, TileConfig,
                                    spec_from_json)
from kernelgen.selection import heuristics

ALL = list(itertools.product(ARCHS, DTYPES, HEAD_DIMS, (False, True), LAYOUTS))


@pytest.mark.parametrize("arch,dtype,hd,causal,layout", ALL)
def test_every_attention_variant_renders(arch, dtype, hd, causal, layout):
    _, spec = heuristics.specs_for(arch, dtype, hd, hd, causal, layout)
    src = render.render(spec)
    assert 'kg_attention_fwd' in src
    assert f"constexpr int D = {hd};" in src
    assert f"constexpr bool CAUSAL = {'true' if causal else 'false'};" in src
    assert ("bf16.bf16" if dtype == "bf16" else "f16.f16") in src
    assert f"static_assert(SMEM_BYTES == {spec.smem_bytes()}" in src
    # no Jinja syntax survives rendering
    assert "{{" not in src and "{%" not in src
    assert render.render(spec) == src


@pytest.mark.parametrize("arch,layout", list(itertools.product(ARCHS, LAYOUTS)))
def test_scheduler_renders(arch, layout):
    src = render.render(SchedulerSpec(arch, layout))
    assert "kg_scheduler" in src and "{{" not in src
    # the two layouts address fields differently
    assert ("* cap4 + vb" in src) == (layout == "soa")


def test_head_dim_v_differs_renders():
    spec = AttentionSpec("sm_90a", "bf16", 192, 128, "causal", "soa", heuristics.tile_config("sm_90a", 192, 128))
    src = render.render(spec)
    assert "constexpr int D = 192;" in src and "constexpr int DV = 128;" in src
    assert spec.name == "attn_sm_90a_bf16_d192x128_causal_soa_" + spec.tile.tag


def test_strict_undefined_fails_loudly(tmp_path, monkeypatch):
    env = render.environment()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ not_a_variable }}").render()


def test_params_struct_rendered_from_one_list():
    src = render.render(heuristics.specs_for("sm_80", "bf16", 128, 128, False, "soa")[1])
    decl = ATTENTION_PARAMS.c_decl()
    assert decl in src
    # 8-byte fields first, size a multiple of 8, matching the C layout
    sizes = [8 if t in ("ptr", "i64") else 4 for _, t in ATTENTION_PARAMS.fields]
    assert sizes == sorted(sizes, reverse=True)
    assert ATTENTION_PARAMS.size % 8 == 0 and SCHEDULER_PARAMS.size % 8 == 0
    assert ATTENTION_PARAMS.size == sum(sizes) + (-sum(sizes)) % 8


def test_spec_json_round_trip_and_names_unique():
    names = set()
    for arch, dtype, hd, causal, layout in ALL:
        _, spec = heuristics.specs_for(arch, dtype, hd, hd, causal, layout)
        assert spec_from_json(spec.to_json()) == spec
        names.add(spec.name)
        assert re.fullmatch(r"[A-Za-z0-9_]+", spec.name)
    assert len(names) == len(ALL)


def test_bad_spec_values_raise():
    with pytest.raises(ValueError, match="head_dim"):
        AttentionSpec("sm_80", "bf16", 80, 80, "none", "soa", TileConfig(128, 64, 4, 2))
    with pytest.raises(ValueError, match="layout"):
        SchedulerSpec("sm_80", "csr")
    with pytest.raises(ValueError, match="block_m"):
        TileConfig(100, 64, 4, 2)
    with pytest.raises(ValueError, match="shared memory"):
        heuristics.attention_spec("sm_86", "bf16", 256, 256, False, "soa", TileConfig(128, 64, 8, 2))


def test_a_new_environment_loads_compiled_templates_from_jinja_bytecode_cache(monkeypatch):
    """The second process (here: a fresh environment) renders the same spec without compiling a
    template: Jinja's bytecode cache holds them (render.py)."""
    import jinja2

    from kernelgen.jit import render
    from kernelgen.selection import heuristics

    spec = heuristics.specs_for("sm_90a", "bf16", 128, 128, True, "soa")[1]
    render.environment.cache_clear()
    first = render.render(spec)                       # fills the bytecode cache if it was empty
    assert isinstance(render.environment().bytecode_cache, jinja2.FileSystemBytecodeCache)
    compiled = []
    real = jinja2.Environment.compile

    def counted(self, *args, **kw):
        compiled.append(args[1] if len(args) > 1 else kw.get("name"))
        return real(self, *args, **kw)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    render.environment.cache_clear()
    try:
        assert render.render(spec) == first
    finally:
        render.environment.cache_clear()
    assert compiled == []


def test_bytecode_cache_write_failure_is_ignored(monkeypatch, tmp_path):
    from kernelgen.jit import render

    def refuse(*args, **kw):
        raise OSError(30, "Read-only file system")

    import tempfile

    cache = render._BytecodeCache(str(tmp_path))
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)

    class Bucket:
        key = "k"

        def write_bytecode(self, f):
            raise AssertionError("not reached")
    cache.dump_bytecode(Bucket())                     # no exception
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("hd,hdv", [(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)])
def test_decode_tile_keeps_q_in_registers(hd, hdv):
    """The one-warp, 16-row decode tile up to head dim 128 has no Q/O tile in shared memory (Q_REGS:
    Q in registers, O staged in the K/V stages): its shared memory is the K/V stages alone; wider
    decode tiles and larger tiles keep the Q/O tile."""
    dec = heuristics.choose("sm_90a", "bf16", hd, hdv, num_heads_q=32, num_heads_kv=8, mask="causal",
                            max_seqlen_q=1, max_seqlen_k=8192, paged=True, page_size=16).attention
    t = dec.tile
    assert (t.block_m, t.num_warps, dec.mainloop) == (16, 1, "sm80")
    q = 0 if hd <= 128 else 16 * (max(hd, hdv) + 8)
    assert dec.q_in_registers == (hd <= 128)
    assert dec.smem_bytes() == 2 * (q + t.num_stages * t.block_n * (hd + 8 + hdv + 8))
    src = render.render(dec)
    assert "constexpr bool Q_REGS = NW == 1 && MT == 1 && D <= 128;" in src and "gemm_qk_regs(" in src
    mid = AttentionSpec("sm_80", "bf16", hd, hdv, "causal", "soa", heuristics.tile_config("sm_80", hd, hdv, "mid"))
    st = mid.tile
    assert mid.smem_bytes() == 2 * (st.block_m * (max(hd, hdv) + 8) + st.num_stages * st.block_n * (hd + hdv + 16))


@pytest.mark.parametrize("arch", sorted(heuristics.SMEM_LIMIT))
def test_every_tile_class_fits_the_arch_shared_memory(arch):
    """heuristics.tile_config's tile for every head-dim pair and tile class fits the arch's per-CTA
    shared memory (SMEM_LIMIT): the ~99 KB archs (sm_86, sm_89, sm_120) take the small-memory tables
    (sm_120's head dim 192 prefill tile asked for 128,000 bytes before)."""
    for (hd, hdv), cls in itertools.product([(d, d) for d in HEAD_DIMS] + [(192, 128)], heuristics.TILE_CLASSES):
        spec = AttentionSpec(arch, "bf16", hd, hdv, "causal", "soa", heuristics.tile_config(arch, hd, hdv, cls))
        assert spec.smem_bytes() <= heuristics.SMEM_LIMIT[arch], (arch, hd, hdv, cls, spec.smem_bytes())
