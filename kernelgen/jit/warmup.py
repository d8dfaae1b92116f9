"""Pre-compiling kernels into the disk cache (``kernelgen warmup``, and ``kernelgen demo`` without a GPU).

The variants come from ``heuristics.specs_for``, the function the dispatcher calls at run time, so
whatever is pre-warmed here is exactly what a later call looks up.  Compiles run in a process pool
(NVRTC holds the GIL); each worker opens its own :class:`~kernelgen.jit.cache.KernelCache` on the same
root, and the cache's per-entry file locks keep concurrent warmups (or a warmup racing a running
program) from compiling one entry twice.  Nothing here needs a GPU.

A cache directory the cache does not trust (writable by other users, or owned by another user:
see ``cache.py``), where it would only compile in memory and keep nothing, is an error
(:class:`CacheDirectoryError`) checked before anything is compiled; so are kernels that were
compiled but could not be written.  Warmup never reports a kernel as compiled unless it was stored.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager

from ..selection import heuristics
from ..kernels.spec import DTYPES, HEAD_DIMS, LAYOUTS


#: Length hints (max_seqlen_q, max_seqlen_k) of the call shapes warmup pre-builds per phase: plain
#: prefill, a chunked prefill against a long context (split-KV), decode against a long context
#: (split-KV + combine) and against a short one (no split).
PHASE_HINTS = {
    "prefill": ((4096, 4096),),
    "chunked": ((512, 32768),),
    "decode": ((1, 32768), (1, 256)),
}


def warmup_specs(arch: str, head_dims=HEAD_DIMS, dtypes=DTYPES, causals=(False, True), layouts=LAYOUTS,
                 phases=("prefill",), gqas=(1,), paged=(False,), softcap: bool = False, num_sms: int = 132,
                 page_sizes=(16,)) -> list:
    """Every kernel spec the dispatcher would use for the given product of call options.

    Args:
        arch: compile target, e.g. "sm_80" or "sm_90a" (``spec.ARCHS``).
        head_dims: head dims (head_dim == head_dim_v), each in 64, 96, 128, 192, 256.
        dtypes: "fp16" and/or "bf16".
        causals: mask choices, bools (True = causal).
        layouts: scheduler-metadata layouts, "soa" and/or "aos".
        phases: call shapes from ``PHASE_HINTS`` ("prefill", "chunked", "decode").
        gqas: query heads per KV head (pack-GQA is chosen for decode-like calls when > 1).
        paged: K/V layouts to cover (False = packed, True = paged cache).
        softcap: also the logit-capping variants.
        num_sms: SM count used for the split bound (132 on an H100/H200).
        page_sizes: tokens per page of the paged caches to cover (sm_90a: the Hopper path's K/V
            loads and, at head dim 256, its tile depend on it; rows gathered through the page
            table, what a call without a known page size takes, are always included).

    Returns:
        The specs from ``heuristics.choose`` (the dispatcher's own function) for each
        combination (on sm_90a both the Hopper path's, for a paged cache both its K/V load paths,
        and, for ``arch="sm_80"`` calls and plans, and calls whose strides TMA cannot address, the
        sm_80 path's), and for paged calls with long queries those of ``heuristics.choose_fused``
        (the fused mixed-batch launch the dispatcher takes then; on sm_90a also
        ``heuristics.choose_fused_hopper``'s, or ``choose_pair``'s where it does not apply), in
        first-seen order with duplicates removed.

    Raises:
        ValueError: an unknown arch, dtype, head dim, layout or phase, or a variant that does not
            fit the arch (the same error the dispatcher would raise for that call).
    """
    out: dict = {}
    for phase in phases:
        if phase not in PHASE_HINTS:
            raise ValueError(f"phase must be one of {tuple(PHASE_HINTS)}, got {phase!r}")
    caps = (False, True) if softcap else (False,)
    for layout, dtype, head_dim, causal, phase, gqa, pg, cap in itertools.product(
            layouts, dtypes, head_dims, causals, phases, gqas, paged, caps):
        for max_q, max_k in PHASE_HINTS[phase]:
            kw = dict(num_heads_q=8 * int(gqa), num_heads_kv=8, mask="causal" if causal else "none", layout=layout,
                      max_seqlen_q=max_q, max_seqlen_k=max_k, paged=bool(pg), softcap=cap, num_sms=num_sms)
            v = heuristics.choose(arch, dtype, int(head_dim), int(head_dim), **kw)
            specs = [v.scheduler, v.attention, v.combine]
            if v.attention.mainloop == "sm90a":  # arch="sm_80" calls and plans take the sm_80 path
                v80 = heuristics.choose(arch, dtype, int(head_dim), int(head_dim), mainloop="sm80", **kw)
                specs += [v80.attention, v80.combine]
                if pg:  # both paged load paths: gathered rows (above) and TMA boxes (page sizes like 16)
                    for ps in page_sizes:
                        specs.append(heuristics.choose(arch, dtype, int(head_dim), int(head_dim), page_size=int(ps),
                                                       **kw).attention)
            hq = 8 * int(gqa)
            if pg and max_q > heuristics.short_query_tokens(hq, 8):
                # a paged call with long queries takes the fused mixed-batch launch (fused.use_fused)
                mkw = dict(num_heads_q=hq, num_heads_kv=8, mask="causal" if causal else "none", layout=layout,
                           max_seqlen_k=max_k, paged=True, softcap=cap, num_sms=num_sms)
                fv = heuristics.choose_fused(arch, dtype, int(head_dim), int(head_dim), **mkw)
                if fv is not None:
                    specs += [fv.scheduler, fv.fused, fv.combine]
                for ps in ((*page_sizes, 0) if arch == "sm_90a" else ()):  # sm_90a: the Hopper fused launch
                    hv = heuristics.choose_fused_hopper(arch, dtype, int(head_dim), int(head_dim), max_seqlen_q=max_q,
                                                        page_size=ps, **mkw)
                    if hv is not None:
                        specs += [hv.scheduler, hv.fused, hv.combine]
                        continue
                    pv = heuristics.choose_pair(arch, dtype, int(head_dim), int(head_dim), max_seqlen_q=max_q,
                                                page_size=ps, **mkw)
                    if pv is not None:  # where it does not apply: the classes in turn
                        specs += [pv.long.attention, pv.short.attention, pv.short.combine]
            for spec in specs:
                if spec is not None:
                    out.setdefault(spec, None)
    return list(out)


@contextmanager
def _jit_allowed():
    """Warmup compiles on purpose: lift KERNELGEN_DISABLE_JIT for its duration."""
    saved = os.environ.pop("KERNELGEN_DISABLE_JIT", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["KERNELGEN_DISABLE_JIT"] = saved


class CacheDirectoryError(RuntimeError):
    """Warmup cannot keep kernels in its cache directory: the cache does not trust it (writable by
    other users, or owned by another user; nothing is compiled or written then), or kernels it
    compiled could not be written there.  The message names the directory and the reason."""


def _untrusted_message(root, why: str) -> str:
    return (f"cache directory {root} is not trusted: {why}; kernelgen neither reads nor writes kernels "
            f"there, so nothing was compiled or written (fix: `chmod 700 {root}` if it is yours, or use "
            f"another --cache-dir / KERNELGEN_CACHE_DIR)")


#: What :func:`_status` reports for one spec.
_STORED, _CACHED, _NOT_STORED = "compiled", "cached", "not stored"


def _status(entry) -> str:
    """_STORED: compiled now and written to the cache; _CACHED: found there (or published by
    another process meanwhile); _NOT_STORED: compiled in memory only, nothing written."""
    if not entry.compiled:
        return _CACHED
    return _STORED if entry.path is not None else _NOT_STORED


def _compile_one(root: str, spec) -> str:
    """Worker: compile ``spec`` into the cache at ``root``; returns its :func:`_status`."""
    from .cache import KernelCache

    os.environ.pop("KERNELGEN_DISABLE_JIT", None)
    return _status(KernelCache(root).get(spec))


class _TextBar:
    """Fallback progress bar on stderr when tqdm is not installed."""

    def __init__(self, total: int, initial: int, desc: str, file, width: int = 30):
        self.total, self.n, self.desc, self.file, self.width = total, initial, desc, file, width
        self._tty = hasattr(file, "isatty") and file.isatty()
        self._draw()

    def _draw(self):
        frac = self.n / self.total if self.total else 1.0
        fill = int(round(frac * self.width))
        line = f"{self.desc}: [{'#' * fill}{'.' * (self.width - fill)}] {self.n}/{self.total}"
        if self._tty:
            self.file.write("\r" + line)
        elif self.n == self.total:
            self.file.write(line)
        self.file.flush()

    def update(self, k: int = 1):
        self.n += k
        self._draw()

    def close(self):
        if self._tty or self.n == self.total:
            self.file.write("\n")
        self.file.flush()


def _progress(total: int, initial: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _TextBar(total, initial, desc, sys.stderr)
    return tqdm(total=total, initial=initial, desc=desc, unit="kernel", file=sys.stderr, dynamic_ncols=True)


def _pool_context():
    """forkserver where available: workers fork from a fresh process, never from one that may hold
    a CUDA context (the CLI asks the driver for the GPU's arch) or torch's threads."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["kernelgen.jit.warmup", "kernelgen.jit.cache"])
    return ctx


def warmup(specs, root, jobs: int | None = None, progress: bool = True, desc: str = "warmup") -> tuple[int, int]:
    """Make sure every spec is compiled into the disk cache at ``root``.

    Args:
        specs: kernel specs (e.g. from :func:`warmup_specs`).
        root: cache directory (str or Path); created if missing.
        jobs: worker processes for the compiles (default ``os.cpu_count()``); 1 compiles in this
            process (then ``compiler.COMPILE_COUNT`` counts the compiles).
        progress: show a progress bar on stderr (tqdm, or a text bar without it).
        desc: label of the progress bar.

    Returns:
        (compiled, cached): kernels NVRTC compiled now and wrote to the cache, and kernels that
        were already in the cache (or that another process published meanwhile); they add up to
        ``len(specs)``.

    Raises:
        CacheDirectoryError: the cache does not trust ``root`` (writable by group/other users, or
            owned by another user: see ``cache.py``), checked before anything is compiled; or some
            kernels were compiled but could not be written (an unwritable, full or uncreatable
            directory, or one that became untrusted meanwhile).  The message names the directory,
            the reason and, for the latter, how many kernels were not stored.
        compiler.CompileError: NVRTC rejected a kernel (with its log and the saved source path);
            remaining compiles are cancelled, entries already published stay.
        cache.CacheLockTimeoutError: another process held an entry's lock too long.

    KERNELGEN_DISABLE_JIT is ignored here: compiling ahead of time is what warmup is for.
    """
    from .cache import KernelCache

    specs = list(dict.fromkeys(specs))
    cache = KernelCache(root)
    root = str(cache.root)
    why = cache.unsafe_reason()
    if why:  # the cache would compile every kernel in memory and keep none: say so, compile nothing
        raise CacheDirectoryError(_untrusted_message(root, why))
    todo = [s for s in specs if cache.lookup(s) is None]
    counts = {_STORED: 0, _CACHED: len(specs) - len(todo), _NOT_STORED: 0}
    bar = _progress(len(specs), counts[_CACHED], desc, progress and bool(specs))
    try:
        jobs = max(1, int(jobs or os.cpu_count() or 1))
        if jobs == 1 or len(todo) <= 1:
            with _jit_allowed():
                for s in todo:
                    counts[_status(cache.get(s))] += 1
                    if bar is not None:
                        bar.update(1)
        elif todo:
            with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=_pool_context()) as pool:
                futures = [pool.submit(_compile_one, root, s) for s in todo]
                try:
                    for fut in as_completed(futures):
                        counts[fut.result()] += 1
                        if bar is not None:
                            bar.update(1)
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
    finally:
        if bar is not None:
            bar.close()
    if counts[_NOT_STORED]:
        why = cache.unsafe_reason()
        reason = (f"it is not trusted: {why}" if why else
                  "it could not be written (read-only, full or not creatable; see the KernelCacheWarning)")
        raise CacheDirectoryError(
            f"cache directory {root}: {counts[_NOT_STORED]} of {len(todo)} kernel(s) were compiled but not "
            f"written, {reason}; {counts[_STORED]} written, {counts[_CACHED]} already cached")
    return counts[_STORED], counts[_CACHED]
