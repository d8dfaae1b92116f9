"""The split-KV combine kernel on the CPU: it compiles for every head dim without spills, and its
SASS keeps all ``UNROLL`` partials of a warp's step in flight (loads back to back before the first
use), which is what lets one row merge up to 255 partials (a one-KV-head decode) in a few round
trips instead of one a partial (docs/dev/perf-log.md, "One KV head a GPU")."""
import re

import pytest

from kernelgen.jit import compiler, render, sass
from kernelgen.kernels.spec import CombineSpec

UNROLL = 8


def _ops(text: str) -> list:
    """Opcodes of an nvdisasm listing, in order (predicates dropped)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            out.append(m.group(1))
    return out


def _longest_load_run(ops: list) -> int:
    """Most global loads issued one after another with no float arithmetic between them."""
    run = best = 0
    for op in ops:
        if op.startswith("LDG"):
            run += 1
            best = max(best, run)
        elif op.startswith(("FFMA", "FMUL", "FADD", "FSEL")):
            run = 0
    return best


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dv,row_warps", [(64, 4), (96, 1), (128, 1), (128, 2), (128, 4), (128, 8), (192, 8), (256, 4)])
def test_combine_keeps_the_partials_in_flight(arch, dv, row_warps):
    spec = CombineSpec(arch, "bf16", dv, sinks=dv in (64, 128) and row_warps != 2, row_warps=row_warps)
    res = compiler.compile_cubin(render.render(spec), arch, compiler.default_options(arch), spec.name)
    assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0, res.resources
    nvd = sass.find_nvdisasm()
    assert nvd is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    per_lane = dv // 32
    vw = 4 if per_lane % 4 == 0 else 2 if per_lane % 2 == 0 else 1
    loads_a_partial = per_lane // vw
    assert _longest_load_run(_ops(sass.disassemble(res.cubin, nvd))) >= UNROLL * loads_a_partial


def test_combine_grid_is_eight_warps_a_cta():
    from kernelgen.kernels import kernel_args

    assert CombineSpec.num_threads == 256
    assert [CombineSpec("sm_90a", "bf16", 128, row_warps=r).rows_per_cta for r in (1, 2, 4, 8)] == [8, 4, 2, 1]
    assert CombineSpec("sm_90a", "bf16", 128).row_warps == 4
    assert kernel_args.combine_grid(5, 3, 2) == 8 and kernel_args.combine_grid(5, 3, 8) == 2
    src = render.render(CombineSpec("sm_90a", "fp16", 128))
    assert "#define KG_COMBINE_UNROLL 8" in src and "constexpr int ROW_WARPS = 4;" in src
    assert "constexpr int ROW_WARPS = 1;" in render.render(CombineSpec("sm_90a", "fp16", 128, row_warps=1))


def test_combine_row_warps_names_and_refusals():
    """The default (4 warps a row) keeps the kernel's name and JSON; the others are named; a row
    count outside 1 / 2 / 4 / 8 is refused naming the field."""
    from kernelgen.kernels.spec import spec_from_json

    plain, one = CombineSpec("sm_80", "bf16", 128), CombineSpec("sm_80", "bf16", 128, sinks=True, row_warps=1)
    assert plain.name == "combine_sm_80_bf16_dv128" and "row_warps" not in plain.to_json()
    assert one.name == "combine_sm_80_bf16_dv128_sinks_rw1" and one.to_json()["row_warps"] == 1
    assert spec_from_json(one.to_json()) == one and spec_from_json(plain.to_json()) == plain
    with pytest.raises(ValueError, match="row_warps"):
        CombineSpec("sm_80", "bf16", 128, row_warps=3)


@pytest.mark.parametrize("total_q,hq,dv,want", [
    (0, 32, 128, 4),        # unknown rows: the default
    (128, 32, 128, 1),      # 4096 rows: one warp a row is already a wave (132 x 32 = 4224 warps)
    (64, 32, 128, 2),       # 2048 rows
    (32, 32, 128, 4),       # 1024 rows
    (32, 8, 128, 8),        # one KV head a GPU (tensor parallel): 256 rows, 8 warps each
    (8, 8, 128, 8),
    (128, 32, 256, 1),      # head dim 256: 16 resident warps an SM
    (32, 32, 256, 2),
    (4096, 32, 128, 1),     # more rows than a wave: one warp each
])
def test_combine_row_warps_fill_one_wave(total_q, hq, dv, want):
    from kernelgen.selection import heuristics

    assert heuristics.combine_row_warps(total_q, hq, dv, 132) == want
    if total_q:
        rows, resident = total_q * hq, 132 * heuristics.COMBINE_WARPS_PER_SM[dv <= 128]
        assert want == 1 or rows * want <= resident
        assert want == 8 or rows * 2 * want > resident


def test_decode_choice_takes_the_row_warps_of_its_rows():
    """``choose`` sizes the combine from the call's own query tokens (``combine_rows``): a
    128-request decode at 32 heads merges one warp a row, 32 requests at 8 heads eight; unknown
    rows (0) keep four."""
    from kernelgen.selection import heuristics

    kw = dict(num_heads_kv=8, max_seqlen_q=1, max_seqlen_k=20000, paged=True, page_size=16, mask="causal")
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, total_q=128, combine_rows=128, **kw)
    assert v.combine is not None and v.combine.row_warps == 1
    kw["num_heads_kv"] = 1
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, total_q=32, combine_rows=32, **kw)
    assert v.combine is not None and v.combine.row_warps == 8
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, total_q=32, **kw)   # rows unknown
    assert v.combine is not None and v.combine.row_warps == 4


def test_a_plan_keeps_four_warps_a_row():
    """A plan's rows are a capacity (its steps run any number up to it), so its combine keeps four
    warps a row; the one-shot call of the same shape takes its own rows' count (one warp a row at
    128 x 32 rows: a plan sized so would merge an 8-request step's 256 rows one warp each)."""
    import dataclasses

    from kernelgen.selection import decide
    from test_decide import H200, sig

    call = sig(num_heads_q=32, num_heads_kv=8, max_seqlen_q=1, max_seqlen_k=32768, batch=128, rows=128,
               paged=True, page_size=16)
    one = decide.decide(call, H200).variants.combine
    planned = decide.decide(dataclasses.replace(call, plan=True), H200).variants.combine
    assert one is not None and one.row_warps == 1
    assert planned is not None and planned.row_warps == 4
