"""Runs the entries of ``kernelgen bench``: roofs, parallel pre-compile, entries under a time budget,
then the table, the JSON report and the plots.

Nothing an entry does stops the run: an exception becomes ``entry["error"]``, a deliberate skip
(:class:`suites.Skip`, or the time budget) ``entry["skipped"]``; both are listed in the table and
the JSON report.  The time budget (``--budget``, default 420 s for a full run) is checked before
each entry, so the run ends at most one entry after it (entries run for the first preset across
all suites first, so what is cut is the other presets' entries).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import SUITES, measure, peers, report
from .models import resolve_models

#: Default wall-clock budgets (seconds) of a full run and of --quick (0 = none).
DEFAULT_BUDGET_S, QUICK_BUDGET_S = 420.0, 240.0
#: Share of the budget after which FlexAttention is not compiled for new shapes any more (its
#: compiles are the slow part of a run), so the later presets still get kernelgen's numbers.
FLEX_BUDGET_SHARE = 0.6


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prewarm(defs, settings, arch: str, num_sms: int, jobs: int | None = None) -> dict:
    """Compile every kernel the entries will use into the process's cache, in parallel
    (``warmup``'s process pool); returns {"compiled", "cached", "seconds"} or {"error"}."""
    from ...jit.cache import get_cache
    from ...jit.warmup import warmup

    t0 = time.perf_counter()
    specs = []
    for d in defs:
        if d.specs is None:
            continue
        try:
            specs += d.specs(settings, arch, num_sms)
        except Exception as e:  # noqa: BLE001 - a spec that cannot be derived just compiles at run time
            _log(f"prewarm: no specs for {d.name}: {type(e).__name__}: {e}")
    specs = list(dict.fromkeys(specs))
    try:
        compiled, cached = warmup(specs, get_cache().root, jobs=jobs, progress=False, desc="bench prewarm")
    except Exception as e:  # noqa: BLE001 - the entries compile what they need themselves
        return {"error": f"{type(e).__name__}: {peers.clip(str(e), 200)}", "seconds": time.perf_counter() - t0}
    return {"compiled": compiled, "cached": cached, "kernels": len(specs), "seconds": time.perf_counter() - t0}


def run_entries(defs, settings, budget_s: float = 0.0, start: float | None = None, log=_log) -> list:
    """Run each entry (after a finished one, free the GPU memory it left); returns the finalized
    entries.  ``budget_s`` > 0: entries that would start after that many seconds from ``start``
    are skipped."""
    import torch

    from .suites import Skip

    start = time.perf_counter() if start is None else start
    out = []
    for d in defs:
        elapsed = time.perf_counter() - start
        base = {"name": d.name, "suite": d.suite, "model": d.model, "us": None, "peers": {}, "unavailable": {}}
        if budget_s and elapsed > budget_s:
            e = dict(base, skipped=f"time budget of {budget_s:.0f} s spent (raise --budget)")
        else:
            t0 = time.perf_counter()
            try:
                e = d.run(settings)
            except Skip as ex:
                e = dict(base, skipped=str(ex))
            except Exception as ex:  # noqa: BLE001 - one entry's failure never stops the suite
                e = dict(base, error=f"{type(ex).__name__}: {peers.clip(str(ex).strip(), 300)}")
            e["seconds"] = round(time.perf_counter() - t0, 2)
            if torch.cuda.is_available():
                try:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception as ex:  # noqa: BLE001 - a sticky CUDA error: later entries will say so
                    e.setdefault("error", f"after the entry: {type(ex).__name__}: {ex}")
        report.finalize(e, settings.roofs)
        out.append(e)
        log(_progress_line(e, time.perf_counter() - start))
    return out


def _progress_line(e, elapsed) -> str:
    if e.get("us") is None:
        why = e.get("skipped") or e.get("error")
        return f"[{elapsed:6.1f} s] {e['name']}: {'skipped' if e.get('skipped') else 'ERROR'}: {why}"
    ratio_text = " ".join(f"{p}={r:.2f}x" for p, r in e.get("ratios", {}).items())
    return (f"[{elapsed:6.1f} s] {e['name']}: {report.fmt_us(e['us'])} us {report.fmt_rate(e)} "
            f"({e.get('seconds', 0):.1f} s) {ratio_text}")


def order_for_report(entries: list) -> list:
    """Entries grouped by suite in SUITES order, registry order within a suite."""
    rank = {s: i for i, s in enumerate(SUITES)}
    return sorted(entries, key=lambda e: rank.get(e.get("suite"), len(rank)))


def select(defs, only) -> list:
    """The entries whose name matches one of the shell patterns ``only`` (fnmatch: ``alibi_*``,
    ``*gpt-oss*``), in registry order; all of them when ``only`` is empty or None."""
    from fnmatch import fnmatchcase

    if not only:
        return list(defs)
    return [d for d in defs if any(fnmatchcase(d.name, p) for p in only)]


def run(suites=("all",), models=None, trace=None, repeat=None, quick=False, flex=None, flush=True,
        budget_s=None, json_path=None, plots_dir=None, out=None, jobs=None, after=None, only=None,
        settle_ms=None, dtypes=None) -> int:
    """The whole ``kernelgen bench`` run; returns the exit code (0 = it ran; entries that failed
    are in the report, not in the exit code; 2 = no GPU).  ``only``: shell patterns of the entry
    names to run (:func:`select`; None: every entry of the suites and presets).  ``dtypes``: the
    entries' input dtypes (``suites.DTYPES`` or "all"; None: ``suites.DEFAULT_DTYPES``).

    ``after``: optional callable run after the entries; the dict it returns is merged into the
    JSON report (tools/bench.py's tile sweep).  ``settle_ms``: Settings.settle_ms (the interleaved
    timings' untimed replays before each timing; None: measure.SETTLE_MS).  ``flush``: how L2 is
    flushed before each timed repetition (measure.flush_mode: True / "write", "read", False /
    "off"; ValueError otherwise)."""
    flush = measure.flush_mode(flush)
    import torch

    from ...jit import runtime
    from ...jit.runtime import device_arch
    from . import suites as S

    out = out or sys.stdout
    if not torch.cuda.is_available():
        print("kernelgen bench: needs a CUDA GPU (none found)", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    presets = resolve_models(models if models else (["llama3-8b"] if quick else ["all"]))
    settings = S.Settings(
        repeat=repeat or (measure.QUICK_REPEAT if quick else measure.DEFAULT_REPEAT),
        warmup=measure.QUICK_WARMUP if quick else measure.DEFAULT_WARMUP,
        warmup_ms=measure.QUICK_WARMUP_MS if quick else measure.WARMUP_MS,
        rounds=measure.QUICK_ROUNDS if quick else measure.DEFAULT_ROUNDS,
        flush=flush, flex=flex or ("off" if quick else "some"), prefill_trace=trace, decode_trace=trace,
        quick=quick, device=torch.cuda.current_device(),
        settle_ms=measure.SETTLE_MS if settle_ms is None else settle_ms)
    budget = (QUICK_BUDGET_S if quick else DEFAULT_BUDGET_S) if budget_s is None else budget_s
    if budget and budget > 0:
        settings.flex_deadline = t_start + FLEX_BUDGET_SHARE * budget
    dev = settings.device
    props = runtime.device_properties(dev)
    from ...selection.settings import allow_untested_arch

    arch = device_arch(dev, allow_untested_arch())
    defs = select(S.registry(suites, presets, dtypes or S.DEFAULT_DTYPES), only)
    _log(f"kernelgen bench: {len(defs)} entries, suites {','.join(suites)}, models "
         f"{','.join(p.name for p in presets)}, repeat {settings.repeat}, L2 flush {flush}, flex {settings.flex}, budget "
         f"{budget:.0f} s, device {props['name']} ({arch})")
    try:
        settings.roofs = measure.roofs()
        _log(f"roofs: {json.dumps(settings.roofs)}")
    except Exception as e:  # noqa: BLE001 - rates without fractions
        settings.roofs = None
        _log(f"roofs: failed ({type(e).__name__}: {e})")
    torch.cuda.empty_cache()
    pre = prewarm(defs, settings, arch, props["num_sms"], jobs=jobs)
    _log(f"prewarm: {json.dumps(pre)}")
    from .peers import preload

    peer_imports = preload()
    _log(f"peer imports: {json.dumps(peer_imports)}")
    entries = order_for_report(run_entries(defs, settings, budget, start=t_start))
    elapsed = time.perf_counter() - t_start
    info = {"suites": list(suites), "models": [p.name for p in presets], "repeat": settings.repeat,
            "warmup": settings.warmup, "warmup_ms": settings.warmup_ms, "switch_rounds": settings.rounds, "settle_ms": settings.settle_ms, "l2_flush": measure.flush_mode(flush), "l2_flush_bytes": measure.FLUSH_BYTES if measure.flush_mode(flush) != "off" else 0, "flex": settings.flex,
            "quick": quick, "budget_s": budget, "only": list(only) if only else None, "elapsed_s": round(elapsed, 1), "prewarm": pre,
            "peer_imports": peer_imports,
            "trace": trace or "packaged samples (Azure: prefill, scheduler; Mooncake: decode, mixed, overhead)",
            "torch": torch.__version__, "arch": arch, "models_detail": {p.name: p.describe() for p in presets}}
    try:
        from ..._version import __version__

        info["kernelgen"] = __version__
    except Exception:  # noqa: BLE001
        pass
    print(report.format_report(entries, settings.roofs, props["name"]), file=out)
    print(f"{sum(e.get('us') is not None for e in entries)} of {len(entries)} entries ran in {elapsed:.0f} s",
          file=out)
    extra = {}
    if after is not None:
        try:
            extra = after() or {}
        except Exception as e:  # noqa: BLE001
            extra = {"after_error": f"{type(e).__name__}: {e}"}
    if json_path:
        rep = report.build_report(entries, settings.roofs, props["name"], info)
        rep.update(extra)
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(rep, indent=2, default=str) + "\n")
        print(f"wrote {json_path}", file=out)
    if plots_dir:
        try:
            from .plots import write_plots

            title = plot_title(props["name"], report.git_commit())
            for p in write_plots(entries, settings.roofs, plots_dir, title=title):
                print(f"wrote {p}", file=out)
        except Exception as e:  # noqa: BLE001 - the numbers are already out
            print(f"plots: not written ({type(e).__name__}: {e}; pip install -e \".[plots]\" or pip install matplotlib)", file=out)
    return 0


def replot(json_path, plots_dir=None, out=None) -> int:
    """Print the tables of a saved report and (with ``plots_dir``) draw its plots; no GPU needed.

    Takes a ``kernelgen bench --json`` report or a tools/gpu_report.py one (docs/benchmarks/h200.json,
    which embeds the bench's entries: ``report.from_gpu_report``).  The first line names the
    report's commit, date and device ("unknown" where it has none).

    Raises:
        ValueError: the file is not JSON, or holds no bench entries (the message names the file).
        OSError: the file cannot be read.
    """
    out = out or sys.stdout
    try:
        raw = json.loads(Path(json_path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{json_path} is not JSON ({e})") from None
    not_a_report = ValueError(f"{json_path} is neither a `kernelgen bench --json` report nor a tools/gpu_report.py "
                              f"report with bench entries (its entries need a 'suite' or a bench entry's name)")
    benchmarks = raw.get("benchmarks") if isinstance(raw, dict) else None
    if not isinstance(benchmarks, list) or not all(isinstance(b, dict) and isinstance(b.get("name"), str)
                                                   for b in benchmarks):
        raise not_a_report
    try:   # (fields of the wrong type deeper in: the same message, before anything is printed)
        rep = report.from_gpu_report(raw)
        entries = order_for_report(report.entries_from_report(rep))
        if not entries or not all(e.get("suite") for e in entries):
            raise not_a_report
        text = report.report_header(rep) + "\n" + report.format_report(entries, rep.get("roofs"), rep.get("device"))
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"{json_path}: not a readable bench report ({type(e).__name__}: {e})") from None
    print(text, file=out)
    if plots_dir:
        from .plots import write_plots

        title = plot_title(rep.get("device"), rep.get("commit"), rep.get("date"))
        for p in write_plots(entries, rep.get("roofs"), plots_dir, title=title):
            print(f"wrote {p}", file=out)
    return 0


def plot_title(device, commit, date=None) -> str:
    """The device and commit (and date) every plot's title names ("unknown" where not known)."""
    def known(v, n=None):
        return str(v)[:n] if v not in (None, "", "unknown") else "unknown"

    text = f"{known(device)}, commit {known(commit, 10)}"
    return text + (f", {known(date)}" if date is not None else "")


def main_args(args) -> int:
    """CLI entry (args from cli.py's bench parser)."""
    if getattr(args, "from_json", None):
        return replot(args.from_json, args.plots)
    if getattr(args, "cache_dir", None):
        from ...jit.cache import set_cache_dir

        os.environ["KERNELGEN_CACHE_DIR"] = str(args.cache_dir)
        set_cache_dir(args.cache_dir)
    return run(suites=args.suite, models=args.model, trace=args.trace, repeat=args.repeat, quick=args.quick,
               flex=args.flex, flush="off" if args.no_flush else getattr(args, "flush", "write"), budget_s=args.budget,
               json_path=args.json,
               plots_dir=args.plots, jobs=args.jobs, only=getattr(args, "only", None),
               settle_ms=getattr(args, "settle_ms", None), dtypes=getattr(args, "dtype", None))
