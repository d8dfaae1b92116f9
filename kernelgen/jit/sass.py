"""Disassembly of compiled kernels (SASS) with NVIDIA's ``nvdisasm``, for checks and the CLI.

``nvdisasm`` comes with the ``nvidia-cuda-nvdisasm`` wheel (``pip install nvidia-cuda-nvdisasm``,
part of kernelgen's ``test`` extra) or a CUDA toolkit on the PATH; no GPU is needed.  The checks
that use it: the Hopper kernels' SASS holds warpgroup MMAs (``HGMMA``) and no local-memory
traffic (``LDL``/``STL``), tests/test_hopper_cpu.py.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


def find_nvdisasm() -> str | None:
    """Path of an ``nvdisasm`` executable: the pip wheel's (nvidia/cu13 or cu12 bin), else PATH."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for sub in ("cu13", "cu12", "cuda_nvdisasm"):
            p = Path(root) / sub / "bin" / "nvdisasm"
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes, nvdisasm: str | None = None) -> str:
    """The SASS text of a cubin.  Raises FileNotFoundError without nvdisasm and
    subprocess.CalledProcessError if it fails."""
    tool = nvdisasm or find_nvdisasm()
    if tool is None:
        raise FileNotFoundError("nvdisasm not found: pip install nvidia-cuda-nvdisasm (kernelgen's test extra)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-c", f.name], check=True, capture_output=True, text=True).stdout


def opcode_counts(sass: str, opcodes=("HGMMA", "HMMA", "LDL", "STL", "UTMALDG", "USETMAXREG")) -> dict:
    """How many instructions of each opcode (matched as a word prefix, e.g. HGMMA.64x128x16)."""
    return {op: len(re.findall(rf"\b{op}\b", sass)) for op in opcodes}
