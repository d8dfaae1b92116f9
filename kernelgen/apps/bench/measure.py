"""Timing primitives of ``kernelgen bench`` (GPU time, CUDA-graph replays, host time) and the roofs.

GPU time (:func:`time_gpu`): every timed call is bracketed by two CUDA events on the current
stream; before each one a 256 MB buffer is zeroed (a 256 MB write evicts the H200's 60 MB L2, so
no repetition finds the previous one's inputs in L2; ``flush="read"`` reads the buffer instead,
``"off"`` skips it: FLUSH_MODES); the flush is outside the events.  Warm-up
calls run first (module loads, autotuning, clocks), then more until the warm-up has run for
``WARMUP_MS`` of GPU time (:func:`warm_up`), and the median over the repetitions is reported.
The host synchronises once, after all repetitions.

Graph replays (:func:`time_graph`): the work is captured once in a CUDA graph (after one eager
call outside the capture) and each replay is timed like a call above, so launch gaps between the
captured kernels are gone; used for small kernels (the scheduler, a decode step).

Graph launches (:func:`time_graph_launches`): N calls captured in one graph, one replay timed and
divided by N: the GPU time of one call without the host's launch time (the scheduler).

Interleaved comparisons (:func:`time_interleaved`): kernelgen's own switches (metadata layout,
sort on/off) are compared as CUDA-graph replays measured in alternating rounds, median of the
round medians.  Timed one after the other as eager calls, the first configuration measured came
out 5-10 % slower than the same work measured later (clocks and caches settling), which is as
large as the differences being measured (docs/dev/perf-log.md, "Sorted vs unsorted").

Host time (:func:`host_time_us`): see its docstring.
"""
from __future__ import annotations

import math
import statistics
import time

#: Bytes of the L2-flush buffer (written, or read, before every timed repetition: FLUSH_MODES).
FLUSH_BYTES = 256 * 1024 * 1024
#: Repetitions and warm-up calls of the full run and of --quick.
DEFAULT_REPEAT, DEFAULT_WARMUP = 20, 3
QUICK_REPEAT, QUICK_WARMUP = 5, 1
#: Least GPU time a measurement's warm-up runs, in ms (beyond its ``warmup`` calls), full run and
#: --quick.  With three warm-up calls only, the first measurement of an entry (kernelgen's own:
#: it is measured before its peers) came out 8-12 % slower than the same kernels measured later
#: in the same entry: decode_trace_b32_paged16 took 423.7 us, the identical recipe forced to
#: arch="sm_80" 385 us, and the interleaved switch rounds 422 us in their first round, 385 us in
#: the five after (H200 report of fc5aca9; 20 repetitions are ~8 ms of work).  Triton's
#: ``do_bench`` likewise warms up for a fixed time (25 ms), not a fixed count.  150 ms (50 until
#: the twenty-fourth session): the long prefill kernels are power-bound on the H200 and reach their
#: steady clocks only after about that much of their own work (SETTLE_MS, the interleaved
#: comparisons' settle), so that a kernel and its peers timed one after another are all timed in
#: that steady state, the regime of the interleaved ratios.
WARMUP_MS, QUICK_WARMUP_MS = 150.0, 10.0
#: Most calls a time-based warm-up adds (a call of a few microseconds would otherwise need 10^4).
MAX_WARMUP_CALLS = 2000

#: How L2 is flushed before each timed repetition (``kernelgen bench --flush``).  "write" zeroes
#: the buffer (the usual method; Triton's ``do_bench`` does the same): L2 is then left holding the
#: buffer's last ~60 MB as dirty lines, whose write-back the timed call pays while it reads.  "read"
#: sums the buffer instead: L2 holds clean lines, as after a layer that only read its weights.  On
#: the H200 kernelgen's one-KV-head decode call of 41-42 us after a read flush took 49 us after a
#: write flush (docs/dev/perf-log.md, "Thirty-seventh session"); the write-back falls on whichever
#: kernel runs next.  "off": no flush.
FLUSH_MODES = ("write", "read", "off")

_flush_buf = None


def flush_mode(flush) -> str:
    """The flush mode named by ``flush``: True is "write" (the default), False or None "off", a
    callable "custom" (:func:`time_gpu` calls it before each repetition), or a member of
    FLUSH_MODES.  Raises ValueError for anything else."""
    if callable(flush):
        return "custom"
    if flush is True:
        return "write"
    if flush is False or flush is None:
        return "off"
    if isinstance(flush, str) and flush in FLUSH_MODES:
        return flush
    raise ValueError(f"flush must be one of {', '.join(FLUSH_MODES)} (or a bool), got {flush!r}")


def flush_l2(buf, mode: str) -> None:
    """Evict L2 by writing (``mode`` "write") or reading ("read") the flush buffer ``buf``; "off"
    does nothing.  Enqueued on the current stream."""
    if mode == "write":
        buf.zero_()
    elif mode == "read":
        import torch

        torch.sum(buf.view(torch.int64))
    elif mode != "off":
        raise ValueError(f"unknown flush mode {mode!r}")


def flush_fn(flush):
    """What :func:`time_gpu` runs before each repetition for ``flush`` (:func:`flush_mode`): the
    callable itself, a write or read of :func:`flush_buffer`, or None ("off")."""
    mode = flush_mode(flush)
    if mode == "custom":
        return flush
    if mode == "off":
        return None
    buf = flush_buffer()
    return lambda: flush_l2(buf, mode)


def flush_buffer():
    """The 256 MB int8 buffer written (or read: FLUSH_MODES) between repetitions (allocated once
    per process)."""
    global _flush_buf
    import torch

    if _flush_buf is None or _flush_buf.device.index != torch.cuda.current_device():
        _flush_buf = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    return _flush_buf


def _call_ms(fn) -> float:
    """GPU time of one call of ``fn`` in ms (CUDA events; synchronises)."""
    import torch

    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


def warm_up(fn, calls: int, min_ms: float, call_ms=None) -> int:
    """Call ``fn`` ``calls`` times, then, when ``min_ms`` > 0, time one more call with ``call_ms``
    (default: CUDA events, :func:`_call_ms`) and call it again until the warm-up's GPU time reaches
    about ``min_ms`` (at most ``MAX_WARMUP_CALLS`` more calls).  Returns the number of calls made."""
    for _ in range(calls):
        fn()
    if min_ms <= 0:
        return calls
    one = (call_ms or _call_ms)(fn)
    more = min(MAX_WARMUP_CALLS, max(0, math.ceil((min_ms - one) / max(one, 1e-3))))
    for _ in range(more):
        fn()
    return calls + 1 + more


def time_gpu(fn, repeat: int = DEFAULT_REPEAT, warmup: int = DEFAULT_WARMUP, flush: bool | str = True,
             warmup_ms: float = WARMUP_MS) -> float:
    """Median GPU time of one call of ``fn`` in microseconds (module doc); ``warmup`` 0: no
    warm-up at all (``warmup_ms`` is then ignored).  ``flush``: how L2 is flushed before each
    repetition (:func:`flush_mode`: True / "write", "read", False / "off", or a callable that
    enqueues the work to run before each repetition, outside the events).

    Raises ValueError for repeat < 1, warmup < 0 or an unknown ``flush``, and whatever ``fn`` raises.
    """
    import torch

    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got {repeat}, {warmup}")
    pre = flush_fn(flush)
    if warmup:
        warm_up(fn, warmup, warmup_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for s, e in zip(starts, ends):
        if pre is not None:
            pre()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))


def capture_graph(fn):
    """A CUDA graph of ``fn`` (one eager call first, outside the capture, loads kernels and
    warms the allocator).  Returns the torch.cuda.CUDAGraph; keep it alive while replaying."""
    import torch

    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def time_graph(fn, repeat: int = DEFAULT_REPEAT, warmup: int = DEFAULT_WARMUP, flush: bool | str = True,
               warmup_ms: float = WARMUP_MS) -> float:
    """Median GPU time of one replay of a CUDA graph of ``fn``, in microseconds."""
    g = capture_graph(fn)
    return time_gpu(g.replay, repeat=repeat, warmup=warmup, flush=flush, warmup_ms=warmup_ms)


#: Launches captured in one graph by :func:`time_graph_launches` (as the bench's scheduler entries).
GRAPH_LAUNCHES = 20


def time_graph_launches(fn, launches: int = GRAPH_LAUNCHES, repeat: int = DEFAULT_REPEAT,
                        warmup: int = DEFAULT_WARMUP, flush: bool | str = True, warmup_ms: float = WARMUP_MS) -> float:
    """GPU time of one call of ``fn`` in microseconds, without the host's launch time: ``launches``
    back-to-back calls captured in one CUDA graph (after one eager round), the graph's replay
    timed like :func:`time_gpu`, divided by ``launches``.  For kernels of a few microseconds (the
    scheduler), where an eager pair of events around one launch measures mostly launch latency.

    Raises ValueError for launches < 1 (and as :func:`time_gpu`).
    """
    if launches < 1:
        raise ValueError(f"launches must be >= 1, got {launches}")

    def many():
        for _ in range(launches):
            fn()

    g = capture_graph(many)
    return time_gpu(g.replay, repeat=repeat, warmup=warmup, flush=flush, warmup_ms=warmup_ms) / launches


#: Rounds of an interleaved comparison (full run, --quick).
DEFAULT_ROUNDS, QUICK_ROUNDS = 6, 3
#: Untimed replays before each interleaved timing, ms of GPU time (time_interleaved's settle_ms,
#: the bench's default), and the shortest replay that gets them.  On the H200 the long
#: compute-bound kernels are power-bound: timed right after a slower, cooler configuration, a
#: prefill kernel's first replays ran up to 11 % faster than in its own steady state, and two
#: copies of one kernel measured 4-6 % apart in every pass; with 150 ms of its own replays first
#: the copies agreed within about 2 % (docs/dev/perf-log.md, twenty-fourth session).  Replays
#: under SETTLE_MIN_REPLAY_MS (decode steps, the scheduler: memory- or launch-bound, where 150 ms
#: would be thousands of replays per timing) are timed without.
SETTLE_MS, SETTLE_MIN_REPLAY_MS = 150.0, 0.5
#: How INTERLEAVED_METHOD names each flush mode.
FLUSH_METHOD = {"write": "L2 flushed before each by a 256 MB write", "read": "L2 flushed before each by a 256 MB read",
                "off": "no L2 flush"}
#: One-line description of time_interleaved's method (reported with the switch comparisons).
INTERLEAVED_METHOD = ("each configuration captured in its own CUDA graph ({launches} call(s) a replay); {rounds} rounds, "
                      "each timing every configuration ({repeat} replays, {flush}, median) in an order "
                      "rotated by one per round; median of the round medians, per call")
#: What INTERLEAVED_METHOD adds when the timings settle (time_interleaved's settle_ms > 0).
SETTLE_METHOD = ("; before each timing, a configuration whose replay takes at least "
                 f"{SETTLE_MIN_REPLAY_MS:g} ms replayed untimed for {{settle_ms:g}} ms of GPU time")


def time_interleaved(fns: dict, rounds: int = DEFAULT_ROUNDS, repeat: int = DEFAULT_REPEAT,
                     warmup: int = DEFAULT_WARMUP, flush: bool | str = True, launches: int = 1,
                     warmup_ms: float = WARMUP_MS, settle_ms: float = 0.0,
                     settle_min_replay_ms: float = SETTLE_MIN_REPLAY_MS) -> dict:
    """GPU time of one call of each configuration, in microseconds, measured so that the
    configurations can be compared with each other.

    ``fns``: {name: zero-argument callable enqueuing one call}.  Each is captured in its own CUDA
    graph of ``launches`` back-to-back calls (after one eager round, :func:`capture_graph`); every
    graph is replayed ``warmup`` times, then each for ``warmup_ms`` of GPU time (:func:`warm_up`); then ``rounds`` rounds each time every graph as
    :func:`time_gpu` does (``repeat`` replays, L2 flushed before each, median), in the order of
    ``fns`` rotated by one more position each round, so that no configuration is always measured
    first.  ``settle_ms`` > 0: before each timing in a round, a graph whose replay takes at least
    ``settle_min_replay_ms`` (one replay timed once, after the warm-up) is first replayed untimed
    for about ``settle_ms`` of GPU time (:func:`warm_up`), so that it is timed in its own steady
    state of clocks and power rather than in the one its predecessor left (``SETTLE_MS``).
    Returns {name: {"us": median over the rounds of the round medians / launches, "rounds": [the
    round medians / launches, in round order]}}.

    Raises ValueError for no configurations or rounds, launches < 1 (and as :func:`time_gpu`).
    """
    if not fns:
        raise ValueError("time_interleaved needs at least one configuration")
    if rounds < 1 or launches < 1:
        raise ValueError(f"rounds and launches must be >= 1, got {rounds}, {launches}")
    if not 0 <= settle_ms < math.inf:
        raise ValueError(f"settle_ms must be a finite number >= 0, got {settle_ms}")

    def many(fn):
        def run():
            for _ in range(launches):
                fn()
        return run

    graphs = {name: capture_graph(many(fn)) for name, fn in fns.items()}
    for _ in range(warmup):
        for g in graphs.values():
            g.replay()
    if warmup:
        for g in graphs.values():  # then each for at least warmup_ms of replays (warm_up)
            warm_up(g.replay, 0, warmup_ms)
    names = list(graphs)
    settles = set()
    if settle_ms > 0:
        settles = {name for name in names if _call_ms(graphs[name].replay) >= settle_min_replay_ms}
    per = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            if name in settles:
                warm_up(graphs[name].replay, 0, settle_ms)
            per[name].append(time_gpu(graphs[name].replay, repeat=repeat, warmup=0, flush=flush) / launches)
    return {name: {"us": statistics.median(v), "rounds": v} for name, v in per.items()}


#: One-line description of host_time_us's method (reported with the overhead entries).
HOST_METHOD = ("host perf_counter around 100 back-to-back calls while a spin kernel keeps the GPU busy (nothing "
               "enqueued runs meanwhile; 100 calls stay below the launch queue's depth, so no launch blocks); "
               "median over samples of the per-call mean")
#: Calls enqueued per host-time sample: with at most 3 launches each this stays far below the
#: CUDA driver's queue of pending launches (about 1000), so enqueuing never blocks.
HOST_CALLS_PER_SAMPLE = 100


def host_time_us(fn, samples: int = 15, calls: int = HOST_CALLS_PER_SAMPLE, busy_ms: float = 20.0) -> float:
    """Host time of one call of ``fn`` in microseconds: what the calling thread spends to enqueue it.

    Method: for each sample the device queue is drained (synchronize), the GPU is then kept busy
    by a ``torch.cuda._sleep`` spin kernel of about ``busy_ms`` (longer than the sample's host
    time), and ``time.perf_counter`` brackets ``calls`` back-to-back calls.  While the GPU spins,
    nothing the calls enqueue starts, so the host never waits for the device (no launch blocks
    on a full queue: ``calls`` x 3 launches stays far below the driver's queue depth) and the
    GPU's execution does not compete with the host for memory or PCIe.  The median of the
    per-call means over ``samples`` samples is returned.  The busy time is sized from a first
    sample and grown if a sample's host time comes close to it.
    """
    import torch

    fn()  # loads, allocator warm-up
    torch.cuda.synchronize()
    cycles_per_ms = _cycles_per_ms()
    per_call = []
    for _ in range(samples + 1):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(busy_ms * cycles_per_ms))
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        torch.cuda.synchronize()
        per_call.append(dt / calls * 1e6)
        if dt * 1e3 > 0.5 * busy_ms:  # the GPU may have woken up during the sample: spin longer
            busy_ms = dt * 1e3 * 4
    return statistics.median(per_call[1:])


_cycles = None


def _cycles_per_ms() -> float:
    """GPU clock cycles per millisecond (for torch.cuda._sleep), measured once."""
    global _cycles
    if _cycles is None:
        import torch

        n = 10_000_000
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        s.record()
        torch.cuda._sleep(n)
        e.record()
        torch.cuda.synchronize()
        _cycles = n / max(s.elapsed_time(e), 1e-3)
    return _cycles


def host_loop_us(fn, calls: int = 10000, samples: int = 5) -> float:
    """Host time of a pure-host function (no GPU work), µs per call: median over samples of
    perf_counter around ``calls`` calls."""
    fn()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def roofs() -> dict:
    """The device's ceilings measured here: copy bandwidth (2 GB device-to-device, read + write,
    TB/s) and the bf16 matmul rate (8192^3 through torch, TFLOP/s).  From tools/bench.py."""
    import torch

    from ..timing import time_cuda

    def copy_tbps():
        x = torch.empty(2 * 1024 ** 3 // 2, dtype=torch.bfloat16, device="cuda").normal_()
        y = torch.empty_like(x)
        us = time_cuda(lambda: y.copy_(x), repeat=20, warmup=3)
        return 2 * x.numel() * 2 / (us * 1e-6) / 1e12

    def matmul_tflops():
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        us_mm = time_cuda(lambda: a @ b, repeat=20, warmup=3)
        return 2 * 8192 ** 3 / (us_mm * 1e-6) / 1e12
    return {"copy_tbps": copy_tbps(), "bf16_matmul_tflops": matmul_tflops()}
