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
@pytest.mark.parametrize("dv", [64, 96, 128, 192, 256])
def test_combine_keeps_the_partials_in_flight(arch, dv):
    spec = CombineSpec(arch, "bf16", dv, sinks=dv == 64)
    res = compiler.compile_cubin(render.render(spec), arch, compiler.default_options(arch), spec.name)
    assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0, res.resources
    nvd = sass.find_nvdisasm()
    assert nvd is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    per_lane = dv // 32
    vw = 4 if per_lane % 4 == 0 else 2 if per_lane % 2 == 0 else 1
    loads_a_partial = per_lane // vw
    assert _longest_load_run(_ops(sass.disassemble(res.cubin, nvd))) >= UNROLL * loads_a_partial


def test_combine_grid_is_two_rows_a_cta():
    from kernelgen.kernels import kernel_args

    assert CombineSpec.rows_per_cta == 2 and CombineSpec.num_threads == 256
    assert kernel_args.combine_grid(5, 3, CombineSpec.rows_per_cta) == 8
    src = render.render(CombineSpec("sm_90a", "fp16", 128))
    assert "#define KG_COMBINE_UNROLL 8" in src and "constexpr int ROWS = 2;" in src
