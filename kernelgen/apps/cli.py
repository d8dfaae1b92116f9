"""The ``kernelgen`` command line: parses arguments and dispatches; the work lives elsewhere.

    kernelgen warmup [--arch sm_90a] [--head-dim 64,128] [--dtype bf16] [--causal|--no-causal]
                     [--layout soa,aos] [--phase prefill,chunked,decode] [--gqa 1,4,8] [--kv-heads 8,1] [--paged|--both-paged]
                     [--page-size 16,24] [--serving] [--softcap] [--alibi] [--sinks] [--variant FILE]
                     [--window 4096[,128]] [--kv-dtype e4m3[,e5m2]] [--unsplit] [--jobs N] [--cache-dir DIR]
    kernelgen cache path|list|verify [--repair]|clear [--cache-dir DIR]
    kernelgen doctor
    kernelgen demo [--trace FILE] [--max-tokens N] [--max-len N] [--layout soa|aos] [--arch sm_90a]
                   [--repeat N] [--json PATH] [--cache-dir DIR]
    kernelgen compare-layouts [--layout soa,aos] [--trace FILE] [--batch N] [--pad-to N] [--graph]
                   [--causal|--no-causal] [--head-dim D] [--heads Q/KV] [--no-sort] [--no-swizzle]
                   [--repeat N] [--json PATH|-] [--cache-dir DIR]
    kernelgen bench [--suite prefill,decode,mixed,scheduler,compile,overhead|all] [--model NAME[,NAME]|all]
                   [--only PATTERN[,PATTERN]]
                   [--trace FILE] [--json PATH] [--plots DIR] [--repeat N] [--quick] [--flex off|some|all]
                   [--budget S] [--flush write|read|off] [--no-flush] [--settle-ms MS] [--from-json PATH] [--jobs N]
                   [--cache-dir DIR]

Exit codes: 0 success, 1 failure (compile error, bad cache entries left, demo mismatch, a warmup
cache directory that is not trusted or not writable, a cache directory that is a file: checked
before warmup, demo, compare-layouts or bench compiles or a cache command reads anything),
2 usage error (bad option, no GPU and no --arch).
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time

from ..jit.warmup import CacheDirectoryError, warmup
from ..kernels.device import ALLOW_UNTESTED_ARCH_ENV
from ..kernels.spec import ALL_ARCHS, ARCHS, DTYPES, HEAD_DIMS, LAYOUTS, MAX_WINDOW, UNTESTED_ARCHS
from ..selection.catalog import KV_DTYPES, KV_HEADS, PHASE_HINTS, warmup_specs

PHASES = tuple(PHASE_HINTS)

NO_GPU_MESSAGE = "no CUDA GPU found; pass --arch (e.g. --arch sm_90a)"

#: What doctor says still works on a machine without a GPU (or without a driver).
NO_GPU_STILL_WORKS = (f"               without a GPU: `kernelgen warmup --arch {'|'.join(ARCHS)}` compiles "
                      "kernels for a GPU machine,\n               `kernelgen cache path|list|verify|clear` and "
                      "`kernelgen bench --from-json` work; running kernels needs an NVIDIA GPU")

_CUDA_ERROR_INSUFFICIENT_DRIVER = 35  # cudaErrorInsufficientDriver, also what a missing libcuda gives
_CUDA_ERROR_NO_DEVICE = 100  # cudaErrorNoDevice


class UsageError(Exception):
    """A bad command-line value; main() prints it and exits 2."""


def _int_list(value: str, what: str, low: int, high: int | None = None) -> list:
    """A comma-separated list of ints in [low, high] (``what`` names one in errors), duplicates dropped."""
    items = []
    for raw in (x.strip() for x in value.split(",")):
        if not raw:
            continue
        if not raw.isdigit() or int(raw) < low or (high is not None and int(raw) > high):
            bound = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{what} {raw!r} is not {bound}")
        if int(raw) not in items:
            items.append(int(raw))
    if not items:
        raise argparse.ArgumentTypeError(f"empty {what} list")
    return items


def _page_sizes(value: str) -> list:
    """--page-size: positive ints (tokens a page)."""
    return _int_list(value, "page size", 1)


def _kv_heads(value: str) -> list:
    """--kv-heads: positive ints."""
    return _int_list(value, "KV head count", 1)


def _head_dims(value: str) -> list:
    """--head-dim: head dims (ints in HEAD_DIMS) or DxDV pairs of them (head_dim x head_dim_v)."""
    items = []
    for raw in (x.strip() for x in value.split(",")):
        if not raw:
            continue
        parts = raw.lower().split("x")
        if len(parts) > 2 or not all(p.isdigit() and int(p) in HEAD_DIMS for p in parts):
            raise argparse.ArgumentTypeError(f"head dim {raw!r} is not supported (choose from "
                                             f"{', '.join(map(str, HEAD_DIMS))}, or DxDV of them, e.g. 192x128)")
        item = int(parts[0]) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
        if item not in items:
            items.append(item)
    if not items:
        raise argparse.ArgumentTypeError("empty head dim list")
    return items


#: The largest ``--gqa`` ratio (query heads per KV head) warmup takes.
MAX_GQA = 128


def _gqas(value: str) -> list:
    """--gqa: query heads per KV head, ints in [1, MAX_GQA] (any ratio a model has: 3, 5, 7, ...)."""
    return _int_list(value, "gqa ratio", 1, MAX_GQA)


def _windows(value: str) -> list:
    """--window: left windows in tokens, ints in [0, MAX_WINDOW]."""
    return _int_list(value, "window", 0, MAX_WINDOW)


def _csv_list(value: str, allowed, what: str, convert=str) -> list:
    items = []
    for raw in value.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            item = convert(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {raw!r} is not valid (choose from {', '.join(map(str, allowed))})") from None
        if item not in allowed:
            raise argparse.ArgumentTypeError(f"{what} {raw!r} is not supported (choose from {', '.join(map(str, allowed))})")
        if item not in items:
            items.append(item)
    if not items:
        raise argparse.ArgumentTypeError(f"empty {what} list")
    return items


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _nonnegative_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not x >= 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value}")
    return x


#: Hints for arch names a user may try that kernelgen spells otherwise (README: 8.7 runs sm_86's kernels).
_ARCH_HINTS = {"sm_90": "Hopper's kernels are sm_90a (wgmma and TMA need the 'a' target)",
               "sm_87": "compute capability 8.7 (Jetson Orin) runs sm_86's kernels: --arch sm_86"}


def _arch(value: str) -> str:
    if value not in ALL_ARCHS:
        hint = _ARCH_HINTS.get(value)
        raise argparse.ArgumentTypeError(f"arch {value!r} is not supported (choose from {', '.join(ARCHS)}; "
                                         f"untested: {', '.join(UNTESTED_ARCHS)})" + (f"; {hint}" if hint else ""))
    return value


def _dir_path(x: str) -> str:
    """``--cache-dir``: a path, not "" (which would mean the current directory)."""
    if not x.strip():
        raise argparse.ArgumentTypeError("an empty path (it would mean the current directory); name a directory")
    return x


def _add_cache_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", metavar="DIR", default=None, type=_dir_path,
                   help="kernel cache directory (default: $KERNELGEN_CACHE_DIR, then the user cache dir)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (argparse exits 2 on a bad option or value)."""
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="kernelgen",
        description="JIT-generated CUDA attention kernels: pre-warm and inspect the kernel cache, "
                    "check the setup, run the demo, compare the scheduler-metadata layouts, benchmark "
                    "against the peers.",
    )
    parser.add_argument("--version", action="version", version=f"kernelgen {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    w = sub.add_parser("warmup", help="compile kernel variants into the disk cache (works without a GPU given --arch)",
                       description="Compile the kernels the dispatcher would use for the given options "
                                   "into the disk cache.  Needs no GPU when --arch is given.")
    w.add_argument("--arch", type=_arch, default=None,
                   help=f"compile target ({', '.join(ARCHS)}; {', '.join(UNTESTED_ARCHS)}: the sm_80 path for "
                        f"Blackwell, untested, run with KERNELGEN_ALLOW_UNTESTED_ARCH=1); default: the current GPU's")
    w.add_argument("--head-dim", type=_head_dims, default=list(HEAD_DIMS), metavar="D[,D...]",
                   help=f"head dims (default: {','.join(map(str, HEAD_DIMS))}); DxDV for a head_dim_v other than "
                        f"the head dim, e.g. 192x128 (DeepSeek's MLA prefill)")
    w.add_argument("--dtype", type=lambda s: _csv_list(s, DTYPES + KV_DTYPES, "dtype"), default=None,
                   metavar="T[,T...]",
                   help=f"dtypes (default: {','.join(DTYPES)}): the 16-bit ones are q's and the output's; "
                        f"{' and '.join(KV_DTYPES)} add the FP8 kernels as --kv-dtype does (with a bf16 output "
                        f"unless a 16-bit dtype is given too: --dtype e4m3 = --dtype bf16 --kv-dtype e4m3)")
    mask = w.add_mutually_exclusive_group()
    mask.add_argument("--causal", dest="causal", action="store_const", const=[True],
                      help="only causal kernels (default: both masks)")
    mask.add_argument("--no-causal", dest="causal", action="store_const", const=[False],
                      help="only non-causal kernels (default: both masks)")
    w.set_defaults(causal=[False, True])
    w.add_argument("--layout", type=lambda s: _csv_list(s, LAYOUTS, "layout"), default=list(LAYOUTS),
                   metavar="L[,L...]", help=f"scheduler-metadata layouts (default: {','.join(LAYOUTS)})")
    w.add_argument("--phase", type=lambda s: _csv_list(s, PHASES, "phase"), default=["prefill"],
                   metavar="P[,P...]", help=f"call shapes ({','.join(PHASES)}; default: prefill): chunked = a "
                                           f"512-token chunk against a 32k context, decode = one token against 32k "
                                           f"and 256-token contexts")
    w.add_argument("--gqa", type=_gqas, default=[1], metavar="G[,G...]",
                   help=f"query heads per KV head, ints in [1, {MAX_GQA}] (default: 1), e.g. 5 for Qwen2.5-14B "
                        f"(40 / 8 heads)")
    w.add_argument("--kv-heads", type=_kv_heads, default=list(KV_HEADS), metavar="H[,H...]",
                   help="KV heads of the calls (default: 8; query heads = KV heads x --gqa): a tensor-parallel "
                        "shard's count, e.g. 1 for llama3-70b on 8 GPUs, whose chunks split where 8 KV heads "
                        "do not")
    pg = w.add_mutually_exclusive_group()
    pg.add_argument("--paged", dest="paged", action="store_const", const=[True], help="only paged-cache kernels")
    pg.add_argument("--no-paged", dest="paged", action="store_const", const=[False],
                    help="only packed-k/v kernels (default)")
    pg.add_argument("--both-paged", dest="paged", action="store_const", const=[False, True],
                    help="packed and paged kernels")
    w.set_defaults(paged=[False])
    w.add_argument("--softcap", action="store_true", help="also the logit-capping variants")
    w.add_argument("--alibi", action="store_true", help="also the ALiBi variants (alibi_slopes=)")
    w.add_argument("--sinks", action="store_true", help="also the attention-sink variants (sinks=)")
    w.add_argument("--window", type=_windows, default=[], metavar="N[,N...]",
                   help="also the sliding-window kernels of calls with window_size=(N, 0) (a causal window of N "
                        "tokens on the left: Mistral, Gemma 2, gpt-oss), for each N (windows under 255 tokens bound "
                        "split-KV and may take other kernels; longer ones share one set); default: none")
    w.add_argument("--variant", action="append", default=[], metavar="FILE",
                   help="a user variant (kernelgen.Variant) as a JSON file: {\"score_mod\": \"...\", "
                        "\"mask_mod\": \"...\", \"kv_range\": \"...\", \"tensors\": {\"bias\": \"float32\"}} "
                        "(Variant.to_json's format; snippets may be omitted); builds that variant's kernels "
                        "instead of the plain ones (repeatable)")
    w.add_argument("--page-size", type=_page_sizes, default=[16], metavar="N[,N...]",
                   help="with --paged, --both-paged or --serving: tokens per page of the paged caches (default: "
                        "16); on sm_90a the Hopper kernel's K/V loads (and at head dim 256 its tile) depend on it")
    w.add_argument("--serving", action="store_true",
                   help="shorthand for --phase prefill,chunked,decode --gqa 1,4,8 --both-paged")
    w.add_argument("--kv-dtype", type=lambda s: _csv_list(s, KV_DTYPES, "kv dtype"), default=[],
                   metavar="K[,K...]",
                   help=f"FP8 K/V caches ({','.join(KV_DTYPES)}; k/v float8_e4m3fn / float8_e5m2 with "
                        f"k_descale/v_descale): also build the FP8 variants of every selected call shape (one "
                        f"class: on sm_90a the Hopper kernel's for prefill shapes and the sm_80 mainloop's), and "
                        f"those of an e4m3 q with q_descale (FA3's FP8 attention: the Hopper FP8 tensor-core "
                        f"kernels); default: no FP8 kernels")
    w.add_argument("--unsplit", action="store_true",
                   help="also the kernels of calls without split-KV (num_splits=1, the default of "
                        "kernelgen.compat.flash_attn_varlen_func as of FA3's, or max_num_splits=1), which the "
                        "phases' length hints do not reach at long contexts, and those of decode steps "
                        "of 2-64 query tokens (speculative decoding)")
    w.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                   help="compile processes (default: the number of CPUs)")
    _add_cache_dir(w)
    w.set_defaults(command_parser=w)

    c = sub.add_parser("cache", help="inspect or manage the kernel cache")
    csub = c.add_subparsers(dest="cache_command", metavar="ACTION")
    csub.required = True
    for name, help_ in (("path", "print the cache directory"),
                        ("list", "list cached kernels"),
                        ("verify", "check every entry's hash (exit 1 if bad entries remain)"),
                        ("clear", "remove every cached kernel")):
        p = csub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        _add_cache_dir(p)
        p.set_defaults(command_parser=p)
        if name == "verify":
            p.add_argument("--repair", action="store_true",
                           help="delete bad entries and recompile them, remove orphaned files")

    doc = sub.add_parser("doctor", help="versions, driver, GPUs, NVRTC and the cache",
                         description="Print what kernelgen sees: versions, CUDA driver, GPUs, NVRTC, cache.")
    doc.set_defaults(command_parser=doc)

    d = sub.add_parser("demo", help="causal varlen prefill on real request lengths, checked and timed",
                       description="Llama-3-8B attention (32 q heads, 8 kv heads, head dim 128, bf16, "
                                   "causal) on a prefill batch of real request lengths: checked against a "
                                   "float64 reference and timed against torch's FA2 varlen kernel.  "
                                   "Without a GPU it pre-warms the kernels it would use for --arch.")
    d.add_argument("--trace", metavar="FILE", default=None,
                   help="request-length CSV (default: the packaged Azure LLM 2023 conversation sample)")
    d.add_argument("--max-tokens", type=_positive_int, default=32768, metavar="N", help="token budget of the batch (default 32768)")
    d.add_argument("--max-len", type=_positive_int, default=8192, metavar="N", help="cap on one request's tokens (default 8192)")
    d.add_argument("--layout", choices=LAYOUTS, default="soa", help="scheduler-metadata layout (default soa)")
    d.add_argument("--arch", type=_arch, default=None,
                   help="target to pre-warm when there is no GPU (default sm_90a)")
    d.add_argument("--repeat", type=_positive_int, default=20, metavar="N", help="timed calls per kernel, median reported (default 20)")
    d.add_argument("--json", metavar="PATH", default=None, help="also write the result as JSON")
    d.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N", help="compile processes when pre-warming")
    _add_cache_dir(d)
    d.set_defaults(command_parser=d)

    cl = sub.add_parser("compare-layouts", help="the SoA and AoS scheduler-metadata layouts side by side (GPU)",
                        description="Run one skewed trace batch (every 8th request a prefill, the rest decodes) "
                                    "through a fixed-capacity plan in each metadata layout, optionally padded "
                                    "with zero-length requests and replayed from a CUDA graph with new lengths; "
                                    "print the scheduler's GPU time per launch (20 launches replayed from one CUDA "
                                    "graph, host launch time excluded), eager attention time, metadata bytes, "
                                    "max error against the float64 reference and whether the padded replay "
                                    "was correct.")
    cl.add_argument("--layout", type=lambda v: _csv_list(v, LAYOUTS, "layout"), default=list(LAYOUTS), metavar="L[,L...]",
                    help="comma list of layouts (default soa,aos)")
    cl.add_argument("--trace", metavar="FILE", default=None, help="request-length CSV (default: the packaged sample)")
    cl.add_argument("--batch", type=_positive_int, default=64, metavar="N", help="requests taken from the trace (default 64)")
    cl.add_argument("--pad-to", type=_positive_int, default=None, metavar="N",
                    help="pad the runtime batch with zero-length requests to this size (plan capacity)")
    cl.add_argument("--graph", action="store_true", help="capture once in a CUDA graph, replay with new lengths")
    cl.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True, help="causal mask (default on)")
    cl.add_argument("--head-dim", type=int, choices=HEAD_DIMS, default=128, help="head dim (default 128)")
    cl.add_argument("--heads", default="32/8", metavar="Q/KV", help="query/KV heads (default 32/8)")
    cl.add_argument("--no-sort", action="store_true", help="turn the longest-first sort off")
    cl.add_argument("--no-swizzle", action="store_true", help="turn the head swizzle off")
    cl.add_argument("--repeat", type=_positive_int, default=20, metavar="N", help="timed runs, median reported (default 20)")
    cl.add_argument("--json", metavar="PATH", default=None,
                    help="also write the results as JSON to PATH (as demo and bench do); '-' prints the JSON to "
                         "stdout instead of the table")
    _add_cache_dir(cl)
    cl.set_defaults(command_parser=cl)

    _add_bench_parser(sub)
    return parser


def _add_bench_parser(sub) -> None:
    from .bench import SUITES
    from .bench.models import MODEL_NAMES, PRESETS
    from .bench.suites import DEFAULT_DTYPES as BENCH_DEFAULT_DTYPES
    from .bench.suites import DTYPES as BENCH_DTYPES

    b = sub.add_parser("bench", help="kernelgen against its peers (FA3, FA4, SDPA, cuDNN, FA2 varlen, FlexAttention) on a GPU",
                       description="Benchmark suites measured side by side with torch SDPA (flash, cuDNN, "
                                   "memory-efficient), torch's FA2 varlen entry, compiled FlexAttention, "
                                   "FlashAttention-3 and -4 (where installed) and "
                                   "kernelgen's own switches, in one process on the same inputs: CUDA events, "
                                   "L2 flushed between repetitions, median; rates as a fraction of the copy "
                                   "bandwidth and bf16 matmul rate measured in the same run.  Prints a markdown "
                                   "table per suite; --json and --plots write the report and PNG charts.  "
                                   "Model presets: " + "; ".join(p.describe() for p in PRESETS.values()) + ".")
    b.add_argument("--suite", type=lambda v: _csv_list(v, SUITES + ("all",), "suite"), default=["all"],
                   metavar="S[,S...]", help=f"suites: {', '.join(SUITES)} or all (default all)")
    b.add_argument("--model", type=lambda v: _csv_list(v, MODEL_NAMES + ("all",), "model"), default=None,
                   metavar="M[,M...]", help=f"model presets: {', '.join(MODEL_NAMES)} or all (default all; "
                                            f"llama3-8b with --quick); the first one also drives the "
                                            f"single-shape entries (scheduler, mixed, overhead, sinks_*, alibi_*, "
                                            f"variant_*); a preset with alternating layers (gpt-oss) also runs "
                                            f"its windowed layers' prefill and 128-request decode "
                                            f"(*_<preset>-w<window>)")
    b.add_argument("--only", type=lambda v: [x for x in v.split(",") if x] or None, default=None,
                   metavar="PATTERN[,PATTERN...]",
                   help="run only the entries (of --suite and --model) whose names match one of these shell "
                        "patterns, e.g. 'alibi_*,variant_*,*gpt-oss*' (default: every entry)")
    b.add_argument("--dtype", type=lambda v: _csv_list(v, BENCH_DTYPES + ("all",), "dtype"), default=None,
                   metavar="T[,T...]",
                   help=f"entries by input dtype: bf16 (every entry but the fp16 and FP8 ones), fp16 (the prefill suite's dense "
                        f"shapes, the first preset's varlen trace and chunked prefill in fp16: *_fp16), e4m3 (the "
                        f"FP8 entries: fp8_*, mixed_trace_fp8; FA3's FP8 attention beside them) or all "
                        f"(default {','.join(BENCH_DEFAULT_DTYPES)})")
    b.add_argument("--trace", metavar="FILE", default=None,
                   help="request-length CSV for every trace-driven entry (default: the packaged Azure sample "
                        "for prefill, the scheduler, decode_azure_b128_paged16 and mixed_short_chunks' prompts, "
                        "the packaged Mooncake sample for the other decode and mixed entries)")
    b.add_argument("--json", metavar="PATH", default=None, help="write the report as JSON (docs/benchmarks shape)")
    b.add_argument("--plots", metavar="DIR", default=None,
                   help="write PNG plots (one bar chart per suite, peers.png and roofline.png) into DIR (needs matplotlib)")
    b.add_argument("--repeat", type=_positive_int, default=None, metavar="N",
                   help="timed repetitions per measurement, median reported (default 20; 5 with --quick)")
    b.add_argument("--quick", action="store_true",
                   help="much faster: llama3-8b only, 5 repetitions, no FlexAttention (unless asked for)")
    b.add_argument("--flex", choices=("off", "some", "all"), default=None,
                   help="FlexAttention peer: off, some (varlen prefill and decode_trace_b32 entries; the "
                        "default), all (every shape; each new shape compiles, about 10-30 s)")
    b.add_argument("--budget", type=_nonnegative_float, default=None, metavar="S",
                   help="seconds after which the remaining entries are skipped and reported as such "
                        "(default 420; 240 with --quick; 0 = no limit)")
    b.add_argument("--flush", choices=("write", "read", "off"), default="write",
                   help="how L2 is flushed before each timed repetition: write a 256 MB buffer (default; L2 is "
                        "left holding dirty lines, whose write-back the timed call pays), read it (clean lines), "
                        "or off")
    b.add_argument("--no-flush", action="store_true", help="do not flush L2 between repetitions (--flush off)")
    b.add_argument("--settle-ms", type=_nonnegative_float, default=None, metavar="MS",
                   help="replay each configuration of an interleaved comparison (replays of 0.5 ms or more) untimed "
                        "for MS ms of GPU time before each of its timings, so that it is timed in its own steady "
                        "state of clocks and power (default 150; 0: none)")
    b.add_argument("--from-json", metavar="PATH", default=None,
                   help="measure nothing: print the tables of a saved --json report and, with --plots, draw its "
                        "plots (no GPU needed)")
    b.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                   help="compile processes for the kernels the run needs (default: the number of CPUs)")
    _add_cache_dir(b)
    b.set_defaults(command_parser=b)


# --------------------------------------------------------------------------------------- commands
def _cache(cache_dir):
    from ..jit.cache import KernelCache

    return KernelCache(cache_dir)  # None -> default_cache_dir()


def _cache_dir_setting(cache_dir) -> str:
    """Where a command's cache directory came from, for its error messages."""
    if cache_dir is not None:
        return "--cache-dir"
    if os.environ.get("KERNELGEN_CACHE_DIR"):
        return "KERNELGEN_CACHE_DIR"
    return "the default (set --cache-dir or KERNELGEN_CACHE_DIR to choose another)"


def cache_dir_problem(root, cache_dir, write: bool) -> str | None:
    """Why the cache directory ``root`` cannot serve a command, or None.

    Checked before any compile or report: ``root`` exists and is not a directory, or (``write``)
    it (or, when missing, the nearest existing parent it would be created in) is not a writable
    directory, or creating it (``0o700``, as the cache does) and a probe file in it fails: the
    permission bits do not tell root, a read-only mount or a pseudo file system (``/proc``) apart,
    so the directory is tried (the command would create it anyway).  The message names the path
    and the setting it came from (``--cache-dir``, ``KERNELGEN_CACHE_DIR`` or the default).
    """
    import tempfile
    from pathlib import Path

    root = Path(root)
    setting = _cache_dir_setting(cache_dir)
    if root.exists() and not root.is_dir():
        return f"cache directory {root} exists but is not a directory (set by {setting})"
    try:   # (a directory without read permission, a symbolic-link loop, a path past PATH_MAX)
        os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):   # (missing, or under a file: said below or by the command)
        pass
    except OSError as e:
        return f"cache directory {root} cannot be listed: {e.strerror or e} (set by {setting})"
    from ..jit.cache import root_unsearchable
    if root.is_dir() and root_unsearchable(root):   # (listed but not entered: no entry file can be opened)
        return f"cache directory {root} cannot be entered: no search (x) permission (set by {setting})"
    if not write:
        return None
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"cache directory {root} cannot be created: {probe} is not a directory (set by {setting})"
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == root else f"cannot be created: {probe} is not writable"
        return f"cache directory {root} {what} (set by {setting})"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryFile(dir=root, prefix=".kernelgen-probe-"):
            pass
    except OSError as e:
        what = "cannot be created" if not root.is_dir() else "is not writable"
        return f"cache directory {root} {what}: {e.strerror or e} (set by {setting})"
    return None


def _check_cache_dir(command: str, root, cache_dir, write: bool) -> bool:
    """Print ``cache_dir_problem`` as the command's one error line; True when the directory is fine."""
    problem = cache_dir_problem(root, cache_dir, write)
    if problem:
        print(f"kernelgen {command}: error: {problem}", file=sys.stderr)
    return problem is None


def _variant_file(path: str):
    """The ``VariantCode`` of a ``--variant`` JSON file; UsageError (exit 2) naming the file."""
    import json

    from ..kernels.variant_code import VariantCode

    try:
        with open(path, encoding="utf-8") as f:
            return VariantCode.from_json(json.load(f))
    except OSError as e:
        raise UsageError(f"--variant {path}: cannot read it: {e}") from None
    except (ValueError, TypeError) as e:
        raise UsageError(f"--variant {path}: not a variant description: {e}") from None


def split_dtypes(dtype, kv_dtype) -> tuple:
    """``kernelgen warmup``'s (16-bit dtypes, FP8 cache dtypes) from ``--dtype`` (None: the default,
    both 16-bit dtypes) and ``--kv-dtype``: an FP8 name in ``--dtype`` (e4m3, e5m2) joins the FP8
    dtypes, and with no 16-bit dtype named the FP8 calls' output is bf16 (``out_dtype``'s default)."""
    dtype = list(DTYPES) if dtype is None else list(dtype)
    sixteen = [d for d in dtype if d in DTYPES]
    fp8 = [k for k in KV_DTYPES if k in set(kv_dtype or []) | set(dtype)]
    return (sixteen or ["bf16"]), fp8


def warmup_catalog(args, arch: str, unsplit: bool | None = None) -> list:
    """The specs ``kernelgen warmup`` builds for its parsed ``args`` on ``arch``
    (``catalog.warmup_specs``; ``unsplit`` None: as ``--unsplit`` says)."""
    codes = [_variant_file(f) for f in args.variant]
    dtypes, kv_dtypes = split_dtypes(args.dtype, args.kv_dtype)
    phases, gqas, paged = args.phase, args.gqa, args.paged
    if args.serving:
        phases, gqas, paged = ["prefill", "chunked", "decode"], [1, 4, 8], [False, True]
    unsplit = args.unsplit if unsplit is None else unsplit
    return warmup_specs(arch, args.head_dim, dtypes, args.causal, args.layout, phases=phases, gqas=gqas,
                        paged=paged, softcap=args.softcap, page_sizes=args.page_size,
                        **({"alibi": True} if args.alibi else {}), **({"sinks": True} if args.sinks else {}),
                        **({"variants": codes} if codes else {}),
                        **({"kv_dtypes": kv_dtypes} if kv_dtypes else {}),
                        **({"windows": args.window} if args.window else {}), kv_heads=args.kv_heads,
                        **({"unsplit": True} if unsplit else {}))


def cmd_warmup(args) -> int:
    """``kernelgen warmup``: compile the dispatcher's variants for the options (with ``--kv-dtype``
    also their FP8 K/V variants); prints one summary line.

    Returns 1 (with the directory and the reason on stderr) when the cache directory is not
    trusted or the compiled kernels could not be written to it.  Raises UsageError (exit 2)
    without --arch and without a supported GPU.
    """
    from .demo import has_cuda_gpu

    arch = args.arch
    if arch is None:
        if not has_cuda_gpu():
            raise UsageError(NO_GPU_MESSAGE)
        from ..jit.runtime import device_arch

        from ..selection.settings import allow_untested_arch

        try:
            arch = device_arch(0, allow_untested_arch())
        except RuntimeError as e:  # an unsupported compute capability (or an untested one not allowed)
            raise UsageError(f"{e}; pass --arch") from None
    root = _cache(args.cache_dir).root
    if not _check_cache_dir("warmup", root, args.cache_dir, write=True):
        return 1
    specs = warmup_catalog(args, arch)
    # (--unsplit that adds nothing, as on most prefill-only option sets, says so: a user's find)
    unsplit_idle = args.unsplit and len(specs) == len(warmup_catalog(args, arch, unsplit=False))
    try:
        compiled, cached = warmup(specs, root, jobs=args.jobs, desc=f"warmup {arch}")
    except CacheDirectoryError as e:  # untrusted or unwritable: nothing (or not everything) was kept
        print(f"kernelgen warmup: error: {e}", file=sys.stderr)
        return 1
    print(f"warmup {arch}: {compiled} compiled, {cached} already cached ({len(specs)} kernels) in {root}")
    if unsplit_idle:
        print(UNSPLIT_IDLE_NOTE, file=sys.stderr)
    if arch in UNTESTED_ARCHS:
        print(untested_arch_note(arch))
    return 0


#: Printed (stderr) when ``--unsplit`` adds no kernel to the options' set (``warmup_specs`` with and
#: without it: the same number of kernels, the unsplit set being a superset).
UNSPLIT_IDLE_NOTE = ("note: --unsplit added no kernel to these options (their calls do not split); it adds kernels "
                     "with --phase chunked / decode, --serving, --paged or few --kv-heads")


def untested_arch_note(arch: str) -> str:
    """The one line warmup prints after building for an untested arch (sm_100, sm_120)."""
    return (f"note: {arch} is untested on hardware (the sm_80 path compiled for Blackwell; no kernelgen test has "
            f"run on such a GPU): running these kernels needs {ALLOW_UNTESTED_ARCH_ENV}=1; check the results "
            f"(`kernelgen demo` compares against a float64 reference)")


def _fmt_table(headers, rows) -> str:
    cols = list(zip(headers, *rows)) if rows else [(h,) for h in headers]
    widths = [max(len(str(x)) for x in col) for col in cols]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(x).rjust(w) if isinstance(x, (int, float)) else str(x).ljust(w)
                               for x, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def cmd_cache(args) -> int:
    """``kernelgen cache path|list|verify|clear``; verify returns 1 while bad entries remain, and
    list, verify and clear return 1 (one error line, nothing done) when the cache directory is a
    file, or for clear and verify --repair not writable; verify too when the directory is not
    trusted (writable by other users or not the user's: the line says why and how to fix it)."""
    cache = _cache(args.cache_dir)
    action = args.cache_command
    if action == "path":
        print(cache.root)
        if os.path.exists(cache.root) and not os.path.isdir(cache.root):   # (the other commands refuse it)
            print(f"kernelgen cache path: note: {cache.root} exists but is not a directory "
                  f"(set by {_cache_dir_setting(args.cache_dir)})", file=sys.stderr)
        return 0
    write = action == "clear" or (action == "verify" and args.repair)
    if write and not os.path.lexists(cache.root):   # nothing to clear or repair: create nothing (a typo'd path)
        print(f"no cache directory at {cache.root}: nothing to {'clear' if action == 'clear' else 'repair'}")
        return 0
    if not _check_cache_dir(f"cache {action}", cache.root, args.cache_dir, write):
        return 1
    if action == "list":
        entries = cache.entries()
        if not entries:
            why = cache.unsafe_reason()
            print(f"no cached kernels in {cache.root}" + (" (no such directory yet)" if not os.path.lexists(cache.root)
                                                          else "") + (
                f" (and it is not trusted: {why}; kernelgen neither loads from nor writes to it: "
                f"chmod 700 {cache.root} or choose another with --cache-dir)" if why else ""))
            return 0
        rows = []
        for e in entries:
            # the same name can appear more than once: builds of other sources (kernelgen versions,
            # templates) or NVRTC versions, told apart by the key's first characters and NVRTC
            rows.append((
                e.get("name") or e.get("stem"),
                e.get("arch") or "?",
                e.get("nvrtc") or "?",
                str(e.get("key") or "?")[:12],
                f"{(e.get('size') or 0) / 1024:.1f}",
                "?" if e.get("registers") is None else e["registers"],
                "?" if e.get("spill_bytes") is None else e["spill_bytes"],
                "yes" if e.get("valid") else f"no ({e.get('reason', '?')})",
            ))
        print(_fmt_table(("name", "arch", "nvrtc", "key", "size KB", "registers", "spill bytes", "valid"), rows))
        total = sum(e.get("size") or 0 for e in entries)
        print(f"{len(entries)} entries, {total / 1024:.1f} KB in {cache.root}")
        return 0
    if action == "verify":
        why = cache.unsafe_reason()
        if why:   # every entry would count as bad and --repair could not help: say why, and the fix
            print(f"kernelgen cache verify: error: cache directory {cache.root} is not trusted ({why}): "
                  f"kernelgen neither loads from nor writes to it; make it owner-only (chmod 700 {cache.root}) "
                  "or choose another with --cache-dir", file=sys.stderr)
            return 1
        fates: dict = {}
        report = cache.verify(repair=args.repair, outcomes=fates)
        bad = list(report.get("bad", []))
        repaired = int(report.get("repaired", 0))
        print(f"cache {cache.root}: {report.get('ok', 0)} ok, {len(bad)} bad"
              + (f", {repaired} repaired, {report.get('orphans_removed', 0)} orphaned file(s) removed"
                 if args.repair else ""))
        label = {"repaired": "repaired", "removed": "removed (no usable spec in its sidecar to rebuild it)"}
        errors = report.get("errors", {})
        for stem in bad:
            if stem in errors:
                what = "removed" if fates.get(stem) == "removed" else "bad"
                print(f"  {what} (its rebuild failed: {errors[stem]}): {stem}")
            else:
                print(f"  {label.get(fates.get(stem), 'bad')}: {stem}")
        orphans = report.get("orphans", [])
        for stem in orphans:   # never loaded, so not bad; `cache list` shows them too
            print(f"  orphan (a cubin without its sidecar, never loaded"
                  f"{'; its lock was held, left' if args.repair else '; verify --repair removes it unless a compile holds its lock'}"
                  f"): {stem}")
        for stem in report.get("temps", []):   # (without --repair: it removes them)
            print(f"  temp files of an interrupted or running write (never loaded; verify --repair removes them "
                  f"unless a compile holds its lock): {stem}")
        remaining = len(bad) - repaired if args.repair else len(bad)
        if remaining > 0:
            if args.repair:
                print(f"{remaining} entr{'y' if remaining == 1 else 'ies'} not repaired")
                if any(fates.get(stem) == "removed" for stem in bad):
                    print("removed entries are compiled again on their next call, or by running the "
                          "`kernelgen warmup` that built them again")
            else:
                print(f"{remaining} bad entr{'y' if remaining == 1 else 'ies'} remain{'s' if remaining == 1 else ''}"
                      " (run `kernelgen cache verify --repair`)")
            return 1
        return 0
    if action == "clear":
        n = cache.clear()
        print(f"removed {n} entr{'y' if n == 1 else 'ies'} from {cache.root}")
        return 0
    raise UsageError(f"unknown cache action {action!r}")


def _guard(fn, default="unavailable"):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - doctor never crashes
        msg = str(e).splitlines()[0] if str(e) else ""
        return f"{default} ({type(e).__name__}: {msg})" if msg else f"{default} ({type(e).__name__})"


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def cmd_doctor(args) -> int:
    """``kernelgen doctor``: what kernelgen sees.  Every probe is guarded; always returns 0 (also
    without a driver or GPU: then it says so plainly and what still works)."""
    from .._version import __version__

    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # kernelgen/, not kernelgen/apps
    print(f"kernelgen      {__version__} ({package_dir})")
    print(f"python         {platform.python_version()} ({sys.executable})")

    def torch_version():
        import torch

        return f"{torch.__version__} (built for CUDA {torch.version.cuda or 'none: CPU-only build'})"

    print(f"torch          {_guard(torch_version)}")

    def cupy_version():
        import cupy

        return cupy.__version__

    print(f"cupy           {_guard(cupy_version)}")

    def nvrtc():
        from ..jit.compiler import nvrtc_version

        return ".".join(map(str, nvrtc_version()))

    print(f"NVRTC          {_guard(nvrtc)}")

    def driver_version() -> int:
        from cupy.cuda import runtime

        return int(runtime.driverGetVersion())

    drv = _guard(driver_version, "not found")
    if isinstance(drv, int):
        print(f"CUDA driver    {_cuda_version(drv) if drv > 0 else 'not found (no NVIDIA driver installed)'}")
    else:
        print(f"CUDA driver    {drv}")

    def gpus():
        from cupy.cuda import runtime as cuda_rt

        n = int(cuda_rt.getDeviceCount())
        lines = []
        from ..jit.runtime import device

        from ..selection.settings import allow_untested_arch

        allow = allow_untested_arch()
        for i in range(n):
            d = device(i)
            arch = _guard(lambda: d.compile_arch(allow), "unsupported")
            if arch in UNTESTED_ARCHS:
                arch += " (untested: KERNELGEN_ALLOW_UNTESTED_ARCH=1)"
            lines.append(f"  {i}: {d.name}, compute capability {d.cc[0]}.{d.cc[1]}, kernelgen arch {arch}, "
                         f"{d.num_sms} SMs, L2 {d.l2_bytes / 2**20:.1f} MB")
        return lines

    try:
        gpu_lines = gpus()
    except Exception as e:  # noqa: BLE001
        gpu_lines = []
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        status = getattr(e, "status", None)
        if drv == 0 or (not isinstance(drv, int) and status == _CUDA_ERROR_INSUFFICIENT_DRIVER):
            # libcuda is missing: the CUDA runtime reports it as an "insufficient" driver
            print("GPUs           no NVIDIA driver found, so no GPU can run kernels here")
        elif status == _CUDA_ERROR_NO_DEVICE:
            print("GPUs           no NVIDIA GPU found (the driver sees none)")
        else:
            print(f"GPUs           no CUDA GPU ({why})")
        print(NO_GPU_STILL_WORKS)
    else:
        if gpu_lines:
            print(f"GPUs           {len(gpu_lines)}")
            for line in gpu_lines:
                print(line)
        else:
            print("GPUs           no CUDA GPU")
            print(NO_GPU_STILL_WORKS)

    def cache_report():
        cache = _cache(None)
        problem = cache_dir_problem(cache.root, None, write=False)
        if problem:
            return f"{cache.root} (unusable: {problem})"
        entries = cache.entries()
        valid = sum(1 for e in entries if e.get("valid"))
        exists = "" if cache.root.is_dir() else " (does not exist yet)"
        return (f"{cache.root}{exists}\n"
                f"cache size     {cache.size_bytes() / 2**20:.2f} MB, {len(entries)} entries ({valid} valid)")

    print(f"cache dir      {_guard(cache_report)}")
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("KERNELGEN_"))
    if env:
        print("environment    " + "\n               ".join(f"{k}={v}{_env_note(k, v)}" for k, v in env))
    else:
        print("environment    no KERNELGEN_* variables set")
    return 0


#: The switches and how kernelgen reads their values: "on" (on only for an on word), "off" (on unless an
#: off word), "one" (on only for exactly "1"), "zero" (on unless exactly "0"), "both" (an on or off
#: word, anything else an error at the call).  Their modules: jit/cache.py, selection/settings.py,
#: selection/validation.py, launch/graph_launch.py.
_SWITCHES = {"KERNELGEN_DISABLE_JIT": "on", "KERNELGEN_ALLOW_UNTESTED_ARCH": "on", "KERNELGEN_CHECK_INPUTS": "one",
             "KERNELGEN_GRAPH_LAUNCH": "zero", "KERNELGEN_TIERED_COMPILE": "off", "KERNELGEN_FP8_FUSED": "off",
             "KERNELGEN_SM90_PACK_GQA": "both"}
#: The other variables kernelgen reads (docs/api.md, docs/cache.md, docs/dev/).
_OTHER_VARS = ("KERNELGEN_CACHE_DIR", "KERNELGEN_ARCH", "KERNELGEN_SM90_OPTS", "KERNELGEN_SM90_SHORT_ROWS",
               "KERNELGEN_MIXED_SHORT_CTAS", "KERNELGEN_DEFINES", "KERNELGEN_SMEM_CARVEOUT", "KERNELGEN_COMMIT",
               "KERNELGEN_FAMILY", "KERNELGEN_TEST_CACHE_DIR", "KERNELGEN_FULL_MATRIX", "KERNELGEN_EARLIER_RUNS",
               "KERNELGEN_TEST_NO_NVRTC_MEMO")


def _env_note(name: str, value: str) -> str:
    """doctor's note on one KERNELGEN_* variable: how a switch's value reads, "" for the others, and a
    warning for a name kernelgen does not read (a typo)."""
    from ..selection.settings import OFF_WORDS, ON_WORDS

    how = _SWITCHES.get(name)
    if how is None:
        return "" if name in _OTHER_VARS else "   (not a variable kernelgen reads: ignored)"
    v = value.strip().lower()
    if how == "one":
        on, clear = value == "1", value in ("0", "1", "")
    elif how == "zero":
        on, clear = value != "0", value in ("0", "1", "")
    elif how == "both":
        if v in ON_WORDS or v in OFF_WORDS:
            return f"   (read as {'on' if v in ON_WORDS else 'off'})"
        return "   (not an on or off word: calls raise ValueError)" if v else ""
    else:
        on = v in ON_WORDS if how == "on" else v not in OFF_WORDS
        clear = v in ON_WORDS or v in OFF_WORDS or not v
    return f"   (read as {'on' if on else 'off'}" + ("" if clear else ": value not recognised") + ")"


def _command_cache_ok(command: str, cache_dir) -> bool:
    """The cache check of a command that compiles into the cache (demo, compare-layouts, bench):
    ``_check_cache_dir`` on the directory ``--cache-dir`` or the default names, before anything runs."""
    return _check_cache_dir(command, _cache(cache_dir).root, cache_dir, write=True)


def cmd_demo(args) -> int:
    """``kernelgen demo``: see ``demo.run_demo`` (1 when the output does not match the reference,
    or, nothing compiled, when the cache directory is a file or not writable)."""
    from .demo import run_demo

    if not _command_cache_ok("demo", args.cache_dir):
        return 1
    return run_demo(trace=args.trace, max_tokens=args.max_tokens, max_len=args.max_len, layout=args.layout,
                    arch=args.arch, repeat=args.repeat, json_path=args.json, cache_dir=args.cache_dir,
                    jobs=args.jobs)


def cmd_compare_layouts(args) -> int:
    """``kernelgen compare-layouts``: see ``compare_layouts`` (1 when a padded replay was wrong, or
    when the cache directory is a file or not writable)."""
    from .compare_layouts import check_arguments, parse_heads
    from .demo import has_cuda_gpu

    try:   # a bad flag is reported first, GPU or not (main() prefixes "kernelgen compare-layouts: error: ")
        parse_heads(args.heads)
        check_arguments(args.trace, args.batch, args.pad_to, args.head_dim)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not has_cuda_gpu():
        raise UsageError("needs a CUDA GPU (none found)")
    if not _command_cache_ok("compare-layouts", args.cache_dir):
        return 1
    from .compare_layouts import main_args

    return main_args(args)


def cmd_bench(args) -> int:
    """``kernelgen bench``: see ``kernelgen.apps.bench`` (exit 2 without a GPU; failed entries are
    reported in the tables and the JSON, not in the exit code; 1 when the cache directory is a
    file or not writable, except with --from-json, which compiles nothing)."""
    from .demo import has_cuda_gpu

    if args.plots:   # (checked before anything runs: a GPU run would measure everything, then draw nothing)
        from .bench.plots import available

        if not available():
            raise UsageError('--plots needs matplotlib (pip install -e ".[plots]" or pip install matplotlib)')
    from .bench.runner import main_args

    if args.from_json:
        if not os.path.isfile(args.from_json):
            raise UsageError(f"--from-json {args.from_json}: no such file")
        try:
            return main_args(args)
        except ValueError as e:   # not a report (its message starts with the path): name the flag
            raise UsageError(f"--from-json {e}") from None
    if args.trace is not None:   # (a bad file named before the GPU check, as demo and compare-layouts do)
        from . import traces

        try:
            traces.load_trace(args.trace)
        except (OSError, ValueError) as e:
            raise UsageError(f"--trace {args.trace}: {e}") from None
    if not has_cuda_gpu():
        raise UsageError("needs a CUDA GPU (none found; --from-json only re-draws a saved report)")
    if not _command_cache_ok("bench", args.cache_dir):
        return 1
    return main_args(args)


_COMMANDS = {"warmup": cmd_warmup, "cache": cmd_cache, "doctor": cmd_doctor, "demo": cmd_demo,
             "compare-layouts": cmd_compare_layouts, "bench": cmd_bench}


def main(argv=None) -> int:
    """Entry point of the ``kernelgen`` console script and ``python -m kernelgen``.

    Args:
        argv: argument list without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 success, 1 failure, 2 usage error (argparse errors also exit 2 through
        SystemExit, as usual).
    """
    if argv is None and hasattr(signal, "SIGPIPE"):
        # the console script behaves as a Unix filter: a reader that stops reading (`| head`) ends it
        # quietly, as it ends cat or git, instead of a BrokenPipeError line
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        except ValueError:   # not the main thread
            pass
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:   # a mistyped flag: the usage and error line of the command it was given to (argparse exits 2)
        tokens = list(sys.argv[1:] if argv is None else argv)
        at = tokens.index(args.command) if args.command in tokens else len(tokens)
        before = extra[0] in tokens[:at]   # (given before the command: the top level's)
        (parser if before else getattr(args, "command_parser", parser)).error(
            f"unrecognized arguments: {' '.join(extra)}")
    t0 = time.perf_counter()
    try:
        return _COMMANDS[args.command](args)
    except BrokenPipeError:   # main() called with argv, SIGPIPE ignored: the reader has gone, say nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # the interpreter's last flush must not raise again
        return 1
    except UsageError as e:
        print(f"kernelgen {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        print(f"kernelgen {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kernelgen {args.command}: interrupted after {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - compile errors, lock timeouts: one clear line, exit 1
        from ..jit.compiler import CompileError

        if isinstance(e, CompileError):
            print(f"kernelgen {args.command}: {e}", file=sys.stderr)
        else:
            print(f"kernelgen {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
