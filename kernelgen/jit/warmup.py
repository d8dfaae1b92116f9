"""Pre-compiling kernels into the disk cache (``kernelgen warmup``, and ``kernelgen demo`` without a GPU).

The specs come from ``selection.catalog.warmup_specs`` (the dispatcher's own choices, so whatever
is pre-warmed here is exactly what a later call looks up); ``warmup`` compiles them.  Compiles run
in a process pool (NVRTC holds the GIL); each worker opens its own :class:`~kernelgen.jit.cache.KernelCache` on the same
root, and the cache's per-entry file locks keep concurrent warmups (or a warmup racing a running
program) from compiling one entry twice.  Nothing here needs a GPU.

A cache directory the cache does not trust (writable by other users, or owned by another user:
see ``cache.py``), where it would only compile in memory and keep nothing, is an error
(:class:`CacheDirectoryError`) checked before anything is compiled; so are kernels that were
compiled but could not be written.  Warmup never reports a kernel as compiled unless it was stored.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager


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


def _kernelgen_env() -> dict:
    """The caller's ``KERNELGEN_*`` variables (the compile options and the templates come from them,
    e.g. ``KERNELGEN_DEFINES``), for the workers."""
    return {k: v for k, v in os.environ.items() if k.startswith("KERNELGEN_")}


def _compile_one(root: str, spec, env: dict | None = None) -> str:
    """Worker: compile ``spec`` into the cache at ``root`` with the caller's ``KERNELGEN_*``
    variables ``env`` (a forkserver keeps the environment it started with: a second warmup after
    ``KERNELGEN_DEFINES`` changed compiled with the old one); returns its :func:`_status`."""
    from .cache import KernelCache

    if env is not None:
        for k in [k for k in os.environ if k.startswith("KERNELGEN_") and k not in env]:
            del os.environ[k]
        os.environ.update(env)
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
    """The progress bar on stderr: tqdm's on a terminal; the text bar's one final line where stderr is
    a file or pipe (a log), or where tqdm is not installed (tqdm's carriage-return updates cluttered
    a log with one line a kernel)."""
    if not enabled:
        return None
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not tty:
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
        specs: kernel specs (e.g. from ``selection.catalog.warmup_specs``).
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
    bar = _progress(len(specs), counts[_CACHED], desc, progress and bool(todo))   # (nothing to compile: no bar)
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
                env = _kernelgen_env()
                futures = [pool.submit(_compile_one, root, s, env) for s in todo]
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
