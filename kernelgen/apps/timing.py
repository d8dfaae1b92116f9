"""GPU timing with CUDA events, shared by the demo and the benchmarks."""
from __future__ import annotations

import statistics


def time_cuda(fn, repeat: int = 20, warmup: int = 3) -> float:
    """Median GPU time of one call of ``fn``, in microseconds.

    Each call is bracketed by two CUDA events recorded on torch's current stream, so the time is
    what the GPU spent between them (launch gaps included, host work outside the stream not).
    The host synchronises once, after all calls.

    Args:
        fn: callable with no arguments that enqueues the work on the current stream.
        repeat: timed calls (>= 1); the median is returned.
        warmup: untimed calls before the timed ones (>= 0): module loads, caches, clocks.

    Raises:
        ValueError: repeat < 1 or warmup < 0.
        RuntimeError: no CUDA device (from torch), or whatever ``fn`` raises.
    """
    import torch

    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got {repeat}, {warmup}")
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))
