r"""FlashAttention-4's sm_90a forward kernel built without a GPU, and the key-block loops of any cubin
(FA4's or kernelgen's) as opcode counts and op streams, to set their inner loops side by side.

``fa4``: runs FA4's own varlen interface (``flash_attn.cute.interface.flash_attn_varlen_func``) under
torch's ``FakeTensorMode``, which compiles the kernel (CuTe DSL, sm_90a) without launching it; the DSL
keeps the cubin / PTX / SASS in ``--out`` (``CUTE_DSL_KEEP``, ``CUTE_DSL_DUMP_DIR``).  It needs a
Python with FA4 and the CuTe DSL of ``.peers/manifest.json``'s versions (this machine's Python is
3.11, the peers' wheels cp312: ``pip download --no-deps --python-version 3.11 --only-binary=:all:``
the same versions of nvidia-cutlass-dsl-libs-base / -libs-cu13 / apache-tvm-ffi / torch-c-dlpack-ext,
then a ``python3 -m venv --system-site-packages`` venv with those, the repo's flash_attn_4, quack and
nvidia-cutlass-dsl wheels and einops).  The call is a one-request causal bf16 varlen call of
``--seqlen`` tokens; ``--softcap C`` passes a user score_mod ``C * tanh(score / C)`` (tanh.approx: the
bench's ``peers.fa4_softcap_score_mod``).  FA4 chooses its tile, pack-GQA and options itself (printed).

``ours``: kernelgen's kernel for the same call (any Python with kernelgen), optionally with Hopper
option letters (``--opts``, e.g. ``mp``) and a snippet (``--score-mod``), written to ``--out``.

``loops CUBIN``: the loops of the disassembly (``nvdisasm -c``; predicated back-edges) longer than ``--min`` instructions
with each loop's opcode histogram, and with ``--stream`` the loop's instructions as a run-length op
stream (MUFU, FMNMX, HGMMA, ... kept; other opcodes as '.'): where the tanh, the row max and the
exponentials sit relative to each other.  The fifty-second session's findings: docs/dev/perf-log.md.

    venv/bin/python benchmarks/experiments/offline_sass.py fa4 --hq 64 --hkv 8 --d 64 --softcap 50 --out /tmp/fa4
    PYTHONPATH=$PWD python3 benchmarks/experiments/offline_sass.py ours --hq 64 --hkv 8 --d 64 \
        --score-mod '50.f * tanhf(score / 50.f)' --opts mp --out /tmp/ours
    python3 benchmarks/experiments/offline_sass.py loops /tmp/fa4/*.cubin --stream
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KEEP = ("MUFU", "FMNMX", "SHFL", "HGMMA", "BAR", "FFMA", "FMUL", "FADD", "F2FP", "WARPGROUP", "SYNCS", "FSEL",
        "ISETP", "STS")
_INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
_BRA = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+@!?U?P\w+\s+BRA\b.*`\((\.L_x_\d+)\)")


def fa4(a) -> None:
    """Compile FA4's sm_90a forward kernel for the call (the driver is never touched)."""
    Path(a.out).mkdir(parents=True, exist_ok=True)   # (the DSL's dumps fail into a missing folder)
    os.environ.update(FLASH_ATTENTION_ARCH="sm_90a", CUTE_DSL_ARCH="sm_90a", FLASH_ATTENTION_NUM_SMS="132",
                      CUTE_DSL_KEEP="ptx,cubin,sass", CUTE_DSL_DUMP_DIR=str(Path(a.out).resolve()),
                      CUTE_DSL_LINEINFO="1", CUDA_VISIBLE_DEVICES="")
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from flash_attn.cute import interface as iface

    score_mod = None
    if a.softcap:
        import cutlass.cute as cute
        c = float(a.softcap)

        @cute.jit
        def score_mod(score, batch_idx, head_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
            return cute.math.tanh(score * (1.0 / c), fastmath=True) * c
    chosen = iface._get_fwd_config

    def spy(**kw):   # (print what FA4 chose: its tile, pack-GQA, overlap)
        r = chosen(**kw)
        print("fa4 config:", r, {k: kw.get(k) for k in ("pack_gqa", "causal", "qhead_per_kvhead")}, flush=True)
        return r
    iface._get_fwd_config = spy
    s = a.seqlen
    with FakeTensorMode():
        q = torch.empty(s, a.hq, a.d, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(s, a.hkv, a.d, dtype=torch.bfloat16, device="cuda")
        v = torch.empty(s, a.hkv, a.d, dtype=torch.bfloat16, device="cuda")
        cu = torch.empty(2, dtype=torch.int32, device="cuda")
        iface.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=s, max_seqlen_k=s,
                                     num_splits=1, causal=True, pack_gqa=None, score_mod=score_mod)
    print("cubins:", *sorted(str(p) for p in Path(a.out).glob("*.cubin")))


def ours(a) -> None:
    """kernelgen's Hopper kernel for the call, with ``--opts`` / ``--score-mod``, into ``--out``."""
    import dataclasses

    from kernelgen.jit import compiler, render
    from kernelgen.kernels.variant_code import VariantCode
    from kernelgen.selection import heuristics
    kw = {"variant": VariantCode(score_mod=a.score_mod)} if a.score_mod else {}
    s = heuristics.choose("sm_90a", "bf16", a.d, a.d, num_heads_q=a.hq, num_heads_kv=a.hkv, mask="causal",
                          max_seqlen_q=a.seqlen, max_seqlen_k=a.seqlen, mean_q=a.seqlen, total_q=a.seqlen,
                          softcap=bool(a.softcap), **kw).attention
    if a.opts is not None:
        s = dataclasses.replace(s, sm90_opts=a.opts)
    res = compiler.compile_cubin(render.render(s), s.arch, compiler.default_options(s.arch), s.name)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    path = Path(a.out) / f"{s.name}.cubin"
    path.write_bytes(res.cubin)
    print(path, res.resources)


def disassemble(cubin: Path) -> list[str]:
    from kernelgen.jit import sass
    tool = sass.find_nvdisasm()
    if tool is None:
        raise SystemExit("nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    return subprocess.run([tool, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout.splitlines()


def back_edges(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) addresses of every loop: a predicated branch to a label at or before it (the
    unconditional ones are the tile loop's and the try-wait retries' jumps back from the code's tail)."""
    labels, pending = {}, None
    for line in lines:
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            pending = m.group(1)
            continue
        m = _INSN.match(line)
        if m and pending:
            labels[pending], pending = int(m.group(1), 16), None
    out = []
    for line in lines:
        m = _BRA.match(line)
        if m and m.group(2) in labels and labels[m.group(2)] <= int(m.group(1), 16):
            out.append((labels[m.group(2)], int(m.group(1), 16)))
    return out


def ops(lines: list[str], first: int, last: int) -> list[str]:
    out = []
    for line in lines:
        m = _INSN.match(line)
        if m and first <= int(m.group(1), 16) <= last:
            op = m.group(3)
            out.append(op if op.startswith(("MUFU", "HGMMA", "F2FP", "SYNCS", "WARPGROUP", "BAR"))
                       else "BRA" if op == "BRA" else op.split(".")[0])
    return out


def stream(seq: list[str]) -> str:
    """Run-length form of an op sequence, opcodes outside ``KEEP`` as '.'."""
    out, prev, n = [], None, 0
    for op in seq:
        k = op if op.startswith(KEEP) or op == "BRA" else "."
        if k == prev:
            n += 1
            continue
        if prev:
            out.append(prev if n == 1 else f"{prev}x{n}")
        prev, n = k, 1
    if prev:
        out.append(prev if n == 1 else f"{prev}x{n}")
    return " ".join(out)


def loops(a) -> None:
    lines = disassemble(Path(a.cubin))
    for first, last in back_edges(lines):
        seq = ops(lines, first, last)
        if len(seq) < a.min:
            continue
        hist = collections.Counter(seq)
        print(f"loop {first:#06x}-{last:#06x}: {len(seq)} instructions; "
              + ", ".join(f"{k} {v}" for k, v in hist.most_common(12)))
        if a.stream:
            print("  " + stream(seq))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("fa4", "ours"):
        p = sub.add_parser(name)
        p.add_argument("--hq", type=int, default=64)
        p.add_argument("--hkv", type=int, default=8)
        p.add_argument("--d", type=int, default=64)
        p.add_argument("--seqlen", type=int, default=16384)
        p.add_argument("--softcap", type=float, default=0.0)
        p.add_argument("--out", required=True)
        if name == "ours":
            p.add_argument("--score-mod", default=None)
            p.add_argument("--opts", default=None, help="Hopper option letters (AttentionSpec.sm90_opts)")
    p = sub.add_parser("loops")
    p.add_argument("cubin")
    p.add_argument("--min", type=int, default=300, help="shortest loop shown (instructions)")
    p.add_argument("--stream", action="store_true")
    a = ap.parse_args(argv)
    {"fa4": fa4, "ours": ours, "loops": loops}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
