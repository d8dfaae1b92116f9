"""Twins: a kernelgen call whose kernels are loaded again as other modules, timed beside the call.

At gpt-oss's heads (d 64, causal 16k) the same kernel loaded as another CUmodule, or timed in
another process, measured up to 6-9 % apart on an H100 (docs/dev/perf-log.md, "Forty-seventh
session": the built-in ALiBi over plain 0.99-1.06 between two loads of one kernel in one process,
the ALiBi snippet over the built-in 0.97x in one process and 1.09x in another), which is more than
the 3 % a cost entry is asked to show.  A cost entry (``suites._with_without``) therefore times
each of its two calls twice, as loaded by the process and as a twin (``NAME~2``), interleaved in
one measurement, and reports the ratio of the two calls' means over both loads with the twins'
spread beside it: a ratio inside the spread says nothing.

A twin runs its call with the kernel set (``jit.runtime.separate_modules``) and the prepared-call
cache (``front.api.separate_signature_cache``) of its own, kept across its calls, so its first call
prepares the call again and loads every kernel again (from the disk cache, no compile), and a CUDA
graph captured from it launches the twin modules' functions.  Only ``varlen_attention`` calls
(and what calls it) are twinned: an ``AttentionPlan`` binds its kernels when it is made, so a
twin of ``plan.run`` would run the plan's own modules.
"""
from __future__ import annotations

#: Suffix of a twin's configuration name.
TWIN = "~2"


class Twin:
    """``fn`` (a zero-argument callable making one kernelgen call) run with kernels and prepared
    calls of its own (see the module doc).  Calling it returns what ``fn`` returns."""

    def __init__(self, fn):
        from ...selection import signature

        self.fn = fn
        self.modules: dict = {}
        self.calls = signature.SignatureCache(64)

    def __call__(self):
        from ...front import api
        from ...jit import runtime

        with runtime.separate_modules(self.modules), api.separate_signature_cache(self.calls):
            return self.fn()


def attention_kernel(cache) -> str | None:
    """The attention kernel's name of the last call prepared in ``cache`` (a
    ``selection.signature.SignatureCache`` of ``front.api``: the process's ``api._CALLS`` or a twin's
    ``calls``), or None when it holds none (or a call path that keeps no attention kernel)."""
    last = getattr(cache, "_last", (None, None))
    attn = getattr(last[1], "attn", None)
    return getattr(attn, "name", None)


def kernels_differ(timed: dict) -> list:
    """The names of ``with_twins``' calls whose twin's last prepared call ran another attention
    kernel than the call's own last one (read from the process's prepared-call cache just after the
    call runs again here, and from the twin's cache), sorted; [] when every twin ran its call's
    kernel or nothing can be told."""
    from ...front import api

    out = []
    for name, fn in timed.items():
        if not isinstance(fn, Twin):
            continue
        timed[name[:-len(TWIN)]]()
        mine, twin = attention_kernel(api._CALLS), attention_kernel(fn.calls)
        if mine is not None and twin is not None and mine != twin:
            out.append(name[:-len(TWIN)])
    return sorted(out)


def with_twins(calls: dict) -> dict:
    """``calls`` ({name: zero-argument kernelgen call}) followed by a ``Twin`` of each, named
    ``name + TWIN``.  Raises ValueError for a name that ends with TWIN already."""
    for name in calls:
        if name.endswith(TWIN):
            raise ValueError(f"configuration name {name!r} ends with the twin suffix {TWIN!r}")
    return {**calls, **{name + TWIN: Twin(fn) for name, fn in calls.items()}}


def merge(times: dict, names) -> tuple[dict, dict]:
    """From ``times`` (``measure.time_interleaved``'s result over ``with_twins``' configurations):
    ({name: mean of the name's and its twin's µs} for ``names``, {name: name's µs / its twin's}).
    Raises KeyError for a name or twin missing from ``times``."""
    us, spread = {}, {}
    for name in names:
        a, b = times[name]["us"], times[name + TWIN]["us"]
        us[name] = (a + b) / 2
        spread[name] = a / b if b else None
    return us, spread
