"""Kernels built off the caller's thread: the Hopper kernels of a new user variant's first calls.

``submit(specs)`` starts a build of each spec that has none yet: one ``concurrent.futures.Future``
per spec, kept for the process, so the calls of every thread share one build of a kernel.  A build
is ``KernelCache.get(spec)`` on the cache current at submission: render, NVRTC (which releases the
GIL), publish into the disk cache.  Nothing here touches the CUDA driver: the kernel is loaded
later on the calling thread (``runtime.get_kernel``, which then finds it in the cache's memory).
A foreground ``get`` of a spec being built (an ``AttentionPlan``, a call that takes the synchronous
path) waits on the cache's per-key lock and takes the build's result; another process waits on the
entry's file lock.

Builds run one at a time on one worker thread: NVRTC compiles on one core, and the first call that
started the build compiles its own quick kernel meanwhile (``selection.tiered``).  ``state(spec)``
says where a spec's build is; ``wait_for_compiles`` (public as ``kernelgen.wait_for_compiles``)
blocks until the builds started so far are done.

Process exit waits for the builds already submitted, queued ones included.  The worker is a
``ThreadPoolExecutor`` thread, which the interpreter joins at exit before the ``atexit`` handlers
run and before modules are torn down, so each build ends normally and its kernel lands in the
disk cache for the next process (at most one Hopper variant compile per submitted kernel: about
1.5 s on the H200 host).  Abandoning them would be safe for the cache itself (it publishes each
file through a temp file, fsync and rename, sidecar last; a build killed midway leaves at most temp
files, which the next builder of the entry removes under its lock), but a daemon thread inside
NVRTC while the interpreter and the libraries' static destructors shut down can crash the exit,
and the next process would compile the kernel again.

A forked child starts with no builds (``os.register_at_fork``): the parent's worker does not exist
there.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading

from .cache import get_cache

__all__ = ["wait_for_compiles"]

_lock = threading.Lock()
#: (cache directory, spec) -> its build's Future (pending, or done: built or failed), for the
#: process (a build into another cache directory does not count for the current one).
_futures: dict = {}
#: (spec, Future) of the builds not yet returned by ``wait_for_compiles``, in start order.
_unreported: list = []
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _build(cache, spec):
    return cache.get(spec)


def submit(specs, cache=None) -> list:
    """Start building each of ``specs`` (kernel specs) that has no build yet (pending, built or
    failed), in order, on the worker thread; ``cache``: the ``KernelCache`` to build into (default:
    ``cache.get_cache()`` now).  Returns the Future of every spec, in order (its result is the
    ``CacheEntry``; its exception what ``KernelCache.get`` raised).  Raises RuntimeError once the
    interpreter is shutting down (no new thread work then; the specs before stay submitted)."""
    if cache is None:
        cache = get_cache()
    global _pool
    out = []
    with _lock:
        for spec in specs:
            f = _futures.get((str(cache.root), spec))
            if f is None:
                if _pool is None:
                    _pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelgen-build")
                f = _pool.submit(_build, cache, spec)
                _futures[(str(cache.root), spec)] = f
                _unreported.append((spec, f))
            out.append(f)
    return out


def state(spec, cache=None) -> str | None:
    """Where the background build of ``spec`` into ``cache`` (default: ``cache.get_cache()`` now)
    is: "pending" (queued or compiling), "built", "failed", or None when none was started in this
    process."""
    if cache is None:
        cache = get_cache()
    f = _futures.get((str(cache.root), spec))
    if f is None:
        return None
    if not f.done():
        return "pending"
    return "failed" if f.exception() is not None else "built"


def wait_for_compiles(timeout: float | None = None) -> list[str]:
    """Block until every background build started so far has finished.

    Background builds are started by the first calls of a new user variant (``kernelgen.Variant``)
    on an H200: such a call runs the variant's sm_80 kernel at once and builds its Hopper kernel
    in the background (docs/variants.md, "First call").  After this returns, the next call of
    that signature loads and runs the Hopper kernel (and keeps its prepared call).  Call it after
    a new variant's first call and before timing it; before capturing a CUDA graph of its calls,
    call it and then make one more call, so that the capture neither builds nor loads a kernel.

    Args:
        timeout: the most seconds to wait (float); None waits as long as the builds take.

    Returns:
        list[str]: the names (``spec.name``) of the kernels those builds produced (compiled, or
        found in the disk cache), in the order they were started, each once: a build that an
        earlier call returned is not returned again (so [] when nothing new was built).  A build
        that failed is not listed; its error (e.g. ``kernelgen.VariantCompileError``) is raised
        by the next call that needs the kernel, which then builds it on its own thread.

    Raises:
        TimeoutError: ``timeout`` seconds passed with builds still running (they keep running; a
            later call returns them).
    """
    with _lock:
        batch = list(_unreported)
    _, running = concurrent.futures.wait([f for _, f in batch], timeout=timeout)
    if running:
        names = [s.name for s, f in batch if f in running]
        raise TimeoutError(f"{len(names)} kernel build(s) still running after {timeout} s: {', '.join(names)}")
    with _lock:
        done = {id(f) for _, f in batch}
        _unreported[:] = [x for x in _unreported if id(x[1]) not in done]
    return [s.name for s, f in batch if f.exception() is None]


def _forget_in_child() -> None:
    """After ``os.fork`` in the child: no worker, no builds (the parent's are not the child's)."""
    global _lock, _pool
    _lock = threading.Lock()
    _pool = None
    _futures.clear()
    _unreported.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
