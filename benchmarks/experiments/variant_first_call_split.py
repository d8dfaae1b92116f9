"""Where the first call of a never-seen user variant spends its time (issue 25: at most 1 s).

Mode ``nvrtc`` (no GPU needed): the Hopper attention kernel of the bench's
``variant_compile_first_call`` (llama3-8b heads, causal, sm_90a; the ALiBi score_mod with a fresh
constant), the same variant's sm_80-mainloop kernel (what a tiered first call runs meanwhile) and
the Hopper kernel of the same call without a variant, each built as ``KernelCache.get`` builds it:
render, NVRTC (its own phase times from ``--time``: C++ front end, NVVM optimizer, ptxas), cache
write (temp file, fsync, rename), the NVRTC version.  In a process that compiled once already
(NVRTC loaded, the templates compiled), as a serving process is; median of ``--repeat``.

Mode ``call``: the bench entry's path itself, a plain ``varlen_attention`` call of 4096 tokens and
then a new variant's first call, split into the kernels it builds on its own thread
(``KernelCache.get``: render, NVRTC, cache write), their module load (``runtime._load`` less the
cache) and the rest (validation, decision, launch, synchronise).  That first call runs the
variant's sm_80 kernel while its Hopper kernel builds in the background (``selection.tiered``;
``KERNELGEN_TIERED_COMPILE=0``: the Hopper kernel, built in the call): ``total_ms`` is the first
call, ``hopper_ready_ms`` the time from its start until ``kernelgen.wait_for_compiles()`` returns
after it, ``background_nvrtc_ms`` the background build's NVRTC; ``second_call_ms`` is the call
after that (it loads and runs the Hopper kernel), ``third_call_ms`` the one after.  Needs an sm_90a
GPU, or ``--fake-cuda``: the driver replaced by tests/fake_cuda.py's stand-ins (CPU tensors, no
launch, no module load) with the kernels still compiled for real, which shows what a first call
compiles on a machine without a GPU.

Usage (from the checkout root):
  PYTHONPATH=$PWD python benchmarks/experiments/variant_first_call_split.py nvrtc [--repeat 3]
  PYTHONPATH=$PWD python benchmarks/experiments/variant_first_call_split.py call [--fake-cuda] [--repeat 3]
Each prints one JSON object a line.  Results: docs/dev/perf-log.md, "First call of a user
variant: where the compile time goes (CPU)".
"""
import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernelgen.jit import cache, compiler, render, runtime  # noqa: E402
from kernelgen.selection import heuristics  # noqa: E402

N = 4096                    # tokens of the bench entry's one causal request
HQ, HKV, D = 32, 8, 128     # llama3-8b


def snippet() -> str:
    """The bench entry's ALiBi score_mod with a fresh constant (a kernel no cache holds)."""
    c = 1.0 + (1 + secrets.randbelow(999_999)) * 1e-9
    return f"score - {c:.9f}f * slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))"


def spec_for(code, mainloop=None):
    """The attention kernel of the bench entry's call on an H200 (``mainloop`` "sm80": the sm_80
    kernel a tiered first call runs while the Hopper one builds)."""
    return heuristics.choose("sm_90a", "bf16", D, D, num_heads_q=HQ, num_heads_kv=HKV, mask="causal",
                             max_seqlen_q=N, max_seqlen_k=N, variant=code, mainloop=mainloop).attention


def nvrtc_phases(source: str, arch: str, options: tuple, name: str) -> dict:
    """NVRTC's own phase times (ms) of one compile (``--time``; not part of any cache key)."""
    fd, path = tempfile.mkstemp(suffix=".csv")
    os.close(fd)
    try:
        compiler.compile_cubin(source, arch, options + (f"--time={path}",), name)
        rows = [line.split(",") for line in Path(path).read_text().splitlines()]   # (a header only in a new file)
    finally:
        os.unlink(path)
    short = {"CUDA C++ Frontend": "frontend_ms", "NVVM Optimizer": "nvvm_ms", "PTX Translation": "ptxas_ms"}
    return {short[r[1].strip()]: float(r[2]) for r in rows if len(r) >= 3 and r[1].strip() in short}


def nvrtc_mode(repeat: int) -> None:
    from kernelgen.kernels.variant_code import VariantCode

    print(json.dumps({"nvrtc": list(compiler.nvrtc_version()), "cpus": os.cpu_count()}))
    warm = spec_for(None)
    compiler.compile_cubin(render.render(warm), warm.arch, compiler.default_options(warm.arch), warm.name)
    for label in ("variant", "variant_sm80", "plain"):
        rows = []
        for _ in range(repeat):
            spec = spec_for(None if label == "plain" else VariantCode(score_mod=snippet(), tensors=(("slopes", "float32"),)),
                            "sm80" if label == "variant_sm80" else None)
            t0 = time.perf_counter()
            source = render.render(spec)
            t1 = time.perf_counter()
            options = compiler.default_options(spec.arch) + (compiler.VARIANT_OPTIONS if spec.variant else ())
            res = compiler.compile_cubin(source, spec.arch, options, spec.name)
            t2 = time.perf_counter()
            kc = cache.KernelCache(tempfile.mkdtemp(prefix="kg-split-"))
            key = kc.key_for(source, spec.arch, options)
            kc._publish(kc._stem(spec.name, key), key, spec, options, res)
            t3 = time.perf_counter()
            rows.append({"render_ms": (t1 - t0) * 1e3, "nvrtc_ms": (t2 - t1) * 1e3, "cache_write_ms": (t3 - t2) * 1e3,
                         **nvrtc_phases(source, spec.arch, options, spec.name)})
        out = {"kernel": label, "name": spec.name, "registers": res.resources.get("registers"),
               "cubin_bytes": len(res.cubin)}
        out.update({k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]})
        print(json.dumps(out), flush=True)


def call_mode(repeat: int, fake: bool) -> None:
    import torch

    import kernelgen

    if fake:
        import pytest

        sys.path.insert(0, str(ROOT / "tests"))
        import fake_cuda
        mp = pytest.MonkeyPatch()
        fake_cuda.install(mp)
        device = "cpu"
    else:
        device = "cuda"
    kc = cache.set_cache_dir(tempfile.mkdtemp(prefix="kg-split-"))
    spent = {"get": 0.0, "nvrtc": 0.0, "load": 0.0, "background_nvrtc": 0.0}
    built = []
    inner_load, inner_compile = runtime._load, compiler.compile_cubin
    main = threading.get_ident()

    def load(spec, ordinal):
        t0 = time.perf_counter()
        entry = kc.get(spec)
        t1 = time.perf_counter()
        k = inner_load(spec, ordinal)     # the cache's in-memory hit, then the module load (GPU)
        spent["get"] += t1 - t0
        spent["load"] += time.perf_counter() - t1
        built.append((spec.kind, spec.name, entry.compiled))
        return k

    def compile_cubin(*a, **kw):
        t0 = time.perf_counter()
        try:
            return inner_compile(*a, **kw)
        finally:   # (the background build runs on its own thread, in parallel with the call's)
            spent["nvrtc" if threading.get_ident() == main else "background_nvrtc"] += time.perf_counter() - t0

    runtime._load, compiler.compile_cubin = load, compile_cubin
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    g = torch.Generator(device=device).manual_seed(23)
    q = torch.randn(N, HQ, D, generator=g, device=device).to(torch.bfloat16)
    k = torch.randn(N, HKV, D, generator=g, device=device).to(torch.bfloat16)
    v = torch.randn(N, HKV, D, generator=g, device=device).to(torch.bfloat16)
    cu = torch.tensor([0, N], dtype=torch.int32, device=device)
    slopes = torch.linspace(0.1, 0.8, HQ, device=device)
    out = torch.empty_like(q)
    kernelgen.varlen_attention(q, k, v, cu, cu, N, N, causal=True, out=out)   # the warm process's plain call
    sync()
    for _ in range(repeat):
        built.clear()
        spent.update(get=0.0, nvrtc=0.0, load=0.0, background_nvrtc=0.0)
        var = kernelgen.Variant(score_mod=snippet(), tensors={"slopes": slopes})
        sync()
        t0 = time.perf_counter()
        kernelgen.varlen_attention(q, k, v, cu, cu, N, N, causal=True, out=out, variant=var)
        sync()
        total = time.perf_counter() - t0
        first = {"total_ms": round(total * 1e3, 1), "nvrtc_ms": round(spent["nvrtc"] * 1e3, 1),
                 "cache_get_less_nvrtc_ms": round((spent["get"] - spent["nvrtc"]) * 1e3, 1),
                 "module_load_ms": round(spent["load"] * 1e3, 1),
                 "rest_ms": round((total - spent["get"] - spent["load"]) * 1e3, 1), "built": list(built)}
        background = kernelgen.wait_for_compiles()
        ready = time.perf_counter() - t0
        built.clear()
        spent.update(load=0.0)
        calls = []
        for _ in range(2):   # the Hopper kernel's load and first run, then the kept call
            t1 = time.perf_counter()
            kernelgen.varlen_attention(q, k, v, cu, cu, N, N, causal=True, out=out, variant=var)
            sync()
            calls.append(time.perf_counter() - t1)
        print(json.dumps({**first, "hopper_ready_ms": round(ready * 1e3, 1),
                          "background_nvrtc_ms": round(spent["background_nvrtc"] * 1e3, 1),
                          "background_built": background, "second_call_ms": round(calls[0] * 1e3, 2),
                          "second_call_module_load_ms": round(spent["load"] * 1e3, 2),
                          "second_call_loaded": [name for _, name, _ in built],
                          "third_call_ms": round(calls[1] * 1e3, 2), "fake_cuda": fake}), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("nvrtc", "call"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fake-cuda", action="store_true", help="call mode without a GPU (tests/fake_cuda.py)")
    a = ap.parse_args(argv)
    if a.mode == "nvrtc":
        nvrtc_mode(a.repeat)
    else:
        call_mode(a.repeat, a.fake_cuda)
    return 0


if __name__ == "__main__":
    sys.exit(main())
