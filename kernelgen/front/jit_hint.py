"""``KERNELGEN_DISABLE_JIT``'s error with the command that builds the missing kernel.

The kernel cache (``jit.cache``) raises ``KernelNotCachedError`` with the spec it lacks and a message
that says ``kernelgen warmup --arch ARCH ...``; the cache sits below the dispatcher, so it cannot
say which options build that spec.  The public entry points (``varlen_attention``, ``AttentionPlan``)
complete it here with ``selection.catalog.warmup_command``: the smallest ``kernelgen warmup`` command
whose set holds the spec, checked against that set.  Where none is found (a user variant, a call shape
the tried sets do not cover) the message stays as it was.
"""
from __future__ import annotations

from ..jit.cache import KernelNotCachedError
from ..selection import catalog


def completed(err: KernelNotCachedError, specs=()) -> KernelNotCachedError | None:
    """``err`` with its ``kernelgen warmup --arch ARCH ...`` replaced by a command that builds its spec
    and ``specs`` (the call's other kernels: from the scheduler's error, the command for the call's
    attention kernel, not for the scheduler alone), or None (no spec, no such phrase, no command
    found, completed already, or the search itself failed: the caller then raises ``err``)."""
    spec = err.spec
    if spec is None or getattr(err, "completed", False):
        return None
    phrase = f"`kernelgen warmup --arch {spec.arch} ...`"
    msg = str(err)
    if phrase not in msg:
        return None
    main = next((s for s in specs if getattr(s, "kind", "") in ("attention", "fused")), spec)
    try:
        cmd = catalog.warmup_command(main, also=(spec, *specs))
    except Exception:  # noqa: BLE001 - a hint must never replace the error it completes
        return None
    if cmd is None:
        return None
    out = KernelNotCachedError(msg.replace(phrase, f"`{cmd}`"), spec=spec)
    out.completed = True
    return out


def raise_with_command(err: KernelNotCachedError, specs=()) -> None:
    """Raise ``completed(err, specs)`` (with ``err``'s traceback) where there is one; else return, and
    the caller's ``except`` block re-raises ``err``.  Called from an ``except`` block only, so the happy
    path makes no call here and the entry point's frame stays the caller's next one (warnings'
    ``stacklevel``)."""
    better = completed(err, specs)
    if better is not None:
        raise better.with_traceback(err.__traceback__) from None
