"""Render a spec's Jinja template into CUDA source.

The environment uses ``StrictUndefined``: a template that names a variable the spec does not give
fails loudly instead of rendering an empty string.  Rendering writes nothing but Jinja's compiled
templates, into Jinja's own per-user cache directory (``jinja2.FileSystemBytecodeCache``: a 0700
directory under the temp dir whose owner and mode Jinja checks; entries keyed by template name and
source checksum): a new process then skips compiling the templates, about 60 ms of a warm kernel
load (``compile_warm_load``, docs/dev/perf-log.md).  Without a usable directory, or when a write
fails, templates are compiled as before.
"""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from ..kernels import metadata
from ..kernels.params import (QUANT_PARAMS, SCHEDULER_PARAMS, attention_params_for, combine_params_for,
                              fused_params_for)


def templates_dir() -> Path:
    """The template folder: inside the installed package (``kernelgen/templates``, where the wheel
    puts it), or the checkout's top-level templates/."""
    package = Path(__file__).resolve().parent.parent
    for cand in (package / "templates", package.parent / "templates"):
        if (cand / "common").is_dir():
            return cand
    raise FileNotFoundError(f"kernelgen templates not found next to {package}")


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """Jinja's compiled-template cache in its default per-user directory; write failures (a
    read-only or full temp dir) are ignored."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache():
    try:
        return _BytecodeCache()
    except (OSError, RuntimeError):   # no safe per-user directory: compile templates every process
        return None


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        bytecode_cache=_bytecode_cache(),
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    return env


_DTYPE_INFO = {
    # mma operand type, f32x2 -> packed pair conversion
    "bf16": {"mma_type": "bf16", "cvt_pack": "cvt.rn.bf16x2.f32"},
    "fp16": {"mma_type": "f16", "cvt_pack": "cvt.rn.f16x2.f32"},
}


def context(spec) -> dict:
    ctx = dict(metadata.template_constants())
    ctx.update(spec.template_vars())
    ctx["kernel_name"] = spec.entry
    ctx["spec_name"] = spec.name
    if spec.kind in ("attention", "fused"):
        ctx.update(_DTYPE_INFO[spec.dtype])
        sm90 = getattr(spec, "mainloop", "sm80") == "sm90a"
        if spec.kind == "fused":
            ctx["params_decl"] = fused_params_for(spec).c_decl()
        else:
            ctx["params_decl"] = attention_params_for(spec).c_decl()
        ctx["variants"] = spec.variant_contexts()
    elif spec.kind == "scheduler":
        ctx["params_decl"] = SCHEDULER_PARAMS.c_decl()
    elif spec.kind == "combine":
        ctx.update(_DTYPE_INFO[spec.dtype])
        ctx["params_decl"] = combine_params_for(spec).c_decl()
    elif spec.kind == "quant":
        ctx["params_decl"] = QUANT_PARAMS.c_decl()
    return ctx


#: A line the user-variant template (common/user_mod.cuh) puts after each snippet: ``render``
#: turns it into a ``#line`` directive back to the program's own file and line, so NVRTC reports a
#: snippet's errors at the snippet's own line numbers ("score_mod(2): error ...", from its
#: ``#line 1 "score_mod"``) and everything after it at its real place.
LINE_RESTORE = "//@@kg_line_restore@@"


def render(spec) -> str:
    """CUDA source of ``spec`` (a string; deterministic for a given spec and template tree)."""
    template = environment().get_template(spec.template)
    header = f"// kernelgen generated: {spec.name}\n"
    source = header + template.render(**context(spec))
    if LINE_RESTORE in source:
        lines = source.split("\n")
        for i, line in enumerate(lines):
            if line.strip() == LINE_RESTORE:
                lines[i] = f'#line {i + 2} "{spec.name}.cu"'   # the next line is line i + 2 (1-based)
        source = "\n".join(lines)
    return source
