"""``kernelgen demo``: causal varlen prefill on a batch of real request lengths.

The batch: consecutive requests from the start of a trace (default: the packaged Azure LLM 2023
conversation sample), each prompt capped at ``max_len`` tokens, as many as fit in ``max_tokens``
(``traces.prefill_batch``).  Shapes: Llama-3-8B attention (32 query heads, 8 KV heads, head dim 128,
bf16, causal; prefill, so seqlen_q == seqlen_k == the request's context length).

With a GPU it checks kernelgen against the float64 reference, times it and torch's FlashAttention-2
varlen kernel with CUDA events, and prints a table.  Without one it pre-warms the kernels the run
would use for ``arch`` (so a later run on such a GPU hits the cache) and says that running needs a GPU.
"""
from __future__ import annotations

import json
import os
import sys

from ..jit.warmup import warmup
from ..kernels.device import SUPPORTED_TEXT, UNTESTED_TEXT
from ..selection.catalog import warmup_specs
from . import traces

#: Llama-3-8B attention shapes.
NUM_HEADS_Q = 32
NUM_HEADS_KV = 8
HEAD_DIM = 128
DTYPE = "bf16"
CAUSAL = True
BENCH_NAME = "demo_azure_conv_prefill"
#: Target pre-warmed by ``kernelgen demo`` on a machine without a GPU (H100/H200).
DEFAULT_ARCH = "sm_90a"
PEER_NAME = "torch_fa2_varlen"


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool = True) -> int:
    """Number of (query row, key) pairs one request's attention computes.

    Causal is bottom-right aligned: row r sees key j iff ``j <= r + seqlen_k - seqlen_q``
    (rows that see no key count 0).  Exact integer count, no loop.
    """
    lq, lk = int(seqlen_q), int(seqlen_k)
    if lq <= 0 or lk <= 0:
        return 0
    if not causal:
        return lq * lk
    off = lk - lq
    # Row r sees v(r) = clamp(r + off + 1, 0, lk) keys.
    lo = max(0, -off)                  # first row that sees at least one key
    full_from = max(0, lk - off - 1)   # first row that sees all lk keys
    total = max(0, lq - full_from) * lk
    hi = min(lq, full_from)
    if hi > lo:                        # rows lo..hi-1 see r + off + 1 keys
        a, b = lo + off + 1, hi + off
        total += (a + b) * (b - a + 1) // 2
    return total


def attention_flops(lengths_q, lengths_k=None, num_heads_q: int = NUM_HEADS_Q, head_dim: int = HEAD_DIM,
                    causal: bool = CAUSAL) -> int:
    """Forward attention FLOPs of a varlen batch: 4 * heads * head_dim * visible (row, key) pairs.

    (2 for QK^T plus 2 for PV per pair and head-dim element; the softmax is not counted.)
    """
    lengths_k = lengths_q if lengths_k is None else lengths_k
    pairs = sum(visible_pairs(a, b, causal) for a, b in zip(lengths_q, lengths_k))
    return 4 * num_heads_q * head_dim * pairs


def demo_specs(arch: str, layout: str = "soa") -> list:
    """The kernel specs the demo's call uses on ``arch`` (``selection.catalog.warmup_specs``)."""
    return warmup_specs(arch, [HEAD_DIM], [DTYPE], [CAUSAL], [layout])


def has_cuda_gpu() -> bool:
    """True when torch sees at least one CUDA device (never raises)."""
    try:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU
        return False


def compare_to_reference(out, lse, ref_out, ref_lse) -> dict:
    """Check kernel outputs against the float64 reference, elementwise.

    A value passes when ``|x - ref| <= atol + rtol * |ref|`` with (atol, rtol) from
    ``reference.tolerance(out.dtype)``; NaN anywhere fails.  ``lse`` may be None (not checked).

    Returns:
        {"matches": bool, "max_error": float (out, inf with NaN), "max_lse_error": float or None,
        "atol": float, "rtol": float}.
    """
    import torch

    from . import reference

    atol, rtol = reference.tolerance(out.dtype)
    o64 = out.double()
    ok = not bool(torch.isnan(o64).any()) and bool(((o64 - ref_out).abs() <= atol + rtol * ref_out.abs()).all())
    max_err = reference.max_error(out, ref_out)
    max_lse_err = None
    if lse is not None:
        l64 = lse.double()
        lse_ok = not bool(torch.isnan(l64).any())
        # -inf == -inf (rows that see no key) is a match; inf - inf would be NaN
        same = (l64 == ref_lse)
        diff = torch.where(same, torch.zeros_like(l64), (l64 - ref_lse).abs())
        lse_ok = lse_ok and bool((diff <= atol + rtol * ref_lse.abs()).all())
        max_lse_err = float(diff.max().item()) if diff.numel() else 0.0
        ok = ok and lse_ok
    return {"matches": ok, "max_error": max_err, "max_lse_error": max_lse_err, "atol": atol, "rtol": rtol}


def build_result(matches: bool, us: float, tflops: float, peer_us, peer_reason, max_error: float, lengths) -> dict:
    """The demo's JSON result (the ``check`` and ``benchmark`` entries of ``gpu_report.json``).

    Args: matches: output within tolerance; us / tflops: kernelgen's median time (microseconds)
    and throughput (TFLOP/s); peer_us: torch FA2 varlen median time in microseconds, or None when
    it was unavailable (``peer_reason`` says why); max_error: largest |out - ref| (inf -> null);
    lengths: the batch's request lengths in tokens.
    """
    result = {
        "check": {"demo_matches_reference": bool(matches)},
        "benchmark": {
            "name": BENCH_NAME,
            "us": round(float(us), 3),
            "tflops": round(float(tflops), 3),
            "tbps": None,
            "peers": {PEER_NAME: round(float(peer_us), 3)} if peer_us else {},
        },
        "max_error": max_error if max_error != float("inf") else None,
        "requests": len(lengths),
        "tokens": int(sum(lengths)),
    }
    if peer_reason:
        result["peers_unavailable"] = {PEER_NAME: peer_reason}
    return result


def _cache_root(cache_dir):
    from ..jit import cache

    if cache_dir is not None:
        return cache.set_cache_dir(cache_dir).root
    return cache.get_cache().root


def run_demo(trace=None, max_tokens: int = traces.DEFAULT_MAX_TOKENS, max_len: int = traces.DEFAULT_MAX_LEN,
             layout: str = "soa", arch: str | None = None, repeat: int = 20, json_path=None, cache_dir=None,
             jobs: int | None = None, out=None) -> int:
    """Run the demo; returns the process exit code.

    Args:
        trace: trace CSV path (None: the packaged Azure sample); see ``traces.load_trace``.
        max_tokens: token budget of the prefill batch; max_len: cap per request (tokens).
        layout: scheduler-metadata layout, "soa" or "aos".
        arch: compile target pre-warmed when there is no GPU (default "sm_90a"); with a GPU the
            GPU's own arch is used and a different ``arch`` is reported as ignored.
        repeat: timed calls per kernel (median reported), >= 1.
        json_path: where to write the JSON result (GPU runs only).
        cache_dir: kernel cache directory (default: KERNELGEN_CACHE_DIR, then the user cache dir).
        jobs: compile processes when pre-warming without a GPU.
        out: text stream for the report (default stdout).

    Returns:
        0 on success (and always without a GPU once the pre-warm succeeded), 1 when the kernel's
        output does not match the reference.

    Raises:
        ValueError / FileNotFoundError: a bad trace file or batch bound; ValueError for a bad layout.
        compiler.CompileError: a kernel failed to compile.
    """
    out = out or sys.stdout
    if layout not in ("soa", "aos"):
        raise ValueError(f"layout must be 'soa' or 'aos', got {layout!r}")
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    rows = traces.load_trace(trace)
    lengths = traces.prefill_batch(rows, max_tokens=max_tokens, max_len=max_len)
    source = trace if trace is not None else f"{traces.SAMPLE_NAME} (Azure LLM 2023 conversation sample)"
    print(f"batch: {len(lengths)} requests, {sum(lengths)} tokens (longest {max(lengths)}) from {source}; "
          f"Llama-3-8B attention: {NUM_HEADS_Q} q heads, {NUM_HEADS_KV} kv heads, head dim {HEAD_DIM}, "
          f"{DTYPE}, causal", file=out)
    root = _cache_root(cache_dir)
    if not has_cuda_gpu():
        arch = arch or DEFAULT_ARCH
        specs = demo_specs(arch, layout)
        compiled, cached = warmup(specs, root, jobs=jobs, desc=f"pre-warm {arch}")
        print(f"No CUDA GPU found: pre-warmed {len(specs)} kernel(s) for {arch} in {root}\n"
              f"({compiled} compiled now, {cached} already cached).\n"
              f"Running the demo needs an NVIDIA GPU of {SUPPORTED_TEXT};\n{UNTESTED_TEXT}.", file=out)
        if json_path:
            print(f"{json_path} not written: the JSON report comes from a GPU run.", file=out)
        return 0
    return _run_gpu(lengths, layout, repeat, json_path, out, requested_arch=arch)


def _run_gpu(lengths, layout, repeat, json_path, out, requested_arch=None) -> int:
    import torch

    from ..front.api import varlen_attention
    from ..jit.runtime import device_arch
    from . import reference
    from .timing import time_cuda

    device = torch.device("cuda", torch.cuda.current_device())
    from ..selection.settings import allow_untested_arch

    arch = device_arch(device.index, allow_untested_arch())
    name = torch.cuda.get_device_name(device)
    print(f"device: {name} ({arch}); metadata layout {layout}", file=out)
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed: {seed}", file=out)

    dtype = torch.bfloat16
    total = sum(lengths)
    max_seqlen = max(lengths)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    cu_seqlens = torch.tensor(cu, dtype=torch.int32, device=device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    q = torch.randn((total, NUM_HEADS_Q, HEAD_DIM), generator=gen, device=device, dtype=dtype)
    k = torch.randn((total, NUM_HEADS_KV, HEAD_DIM), generator=gen, device=device, dtype=dtype)
    v = torch.randn((total, NUM_HEADS_KV, HEAD_DIM), generator=gen, device=device, dtype=dtype)
    o = torch.full((total, NUM_HEADS_Q, HEAD_DIM), float("nan"), device=device, dtype=dtype)

    def run_kernelgen():
        return varlen_attention(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True,
                                return_lse=True, out=o, metadata_layout=layout)

    o_kg, lse_kg = run_kernelgen()
    torch.cuda.synchronize()
    ref_o, ref_lse = reference.attention_reference(q, k, v, cu_seqlens, cu_seqlens, causal=True)
    check = compare_to_reference(o_kg, lse_kg, ref_o, ref_lse)
    del ref_o, ref_lse
    matches, max_err, max_lse_err = check["matches"], check["max_error"], check["max_lse_error"]
    atol, rtol = check["atol"], check["rtol"]

    us_kg = time_cuda(run_kernelgen, repeat=repeat, warmup=3)
    cu_i32 = cu_seqlens

    def run_fa2():
        return torch.ops.aten._flash_attention_forward(q, k, v, cu_i32, cu_i32, max_seqlen, max_seqlen, 0.0, True,
                                                       False, scale=None)

    us_fa2, fa2_reason = None, None
    try:
        run_fa2()
        torch.cuda.synchronize()
        us_fa2 = time_cuda(run_fa2, repeat=repeat, warmup=3)
    except Exception as e:  # noqa: BLE001 - the peer is optional; report why it is missing
        fa2_reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    flops = attention_flops(lengths)
    tf_kg = flops / (us_kg * 1e-6) / 1e12
    tf_fa2 = flops / (us_fa2 * 1e-6) / 1e12 if us_fa2 else None

    rows = [
        ("requests", f"{len(lengths)}"),
        ("tokens", f"{total}"),
        ("kernelgen", f"{us_kg:10.1f} us  {tf_kg:7.1f} TFLOP/s"),
        ("torch FA2 varlen", f"{us_fa2:10.1f} us  {tf_fa2:7.1f} TFLOP/s" if us_fa2 else f"unavailable ({fa2_reason})"),
        ("FA2 / kernelgen time", f"{us_fa2 / us_kg:.2f}x" if us_fa2 else "n/a"),
        ("max error (out)", f"{max_err:.3g} (atol {atol:g}, rtol {rtol:g})"),
        ("max error (lse)", f"{max_lse_err:.3g}" if max_lse_err is not None else "n/a"),
        ("matches reference", "yes" if matches else "no"),
    ]
    width = max(len(r[0]) for r in rows)
    for key, val in rows:
        print(f"  {key:<{width}}  {val}", file=out)
    if requested_arch and requested_arch != arch:
        print(f"  (--arch {requested_arch} ignored: ran on this GPU's {arch})", file=out)

    if json_path:
        result = build_result(matches, us_kg, tf_kg, us_fa2, fa2_reason, max_err, lengths)
        result.update({"seed": seed, "device": name, "arch": arch, "layout": layout})
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(f"wrote {json_path}", file=out)
    if not matches:
        print("FAILED: kernelgen's output does not match the float64 reference", file=out)
        return 1
    return 0
