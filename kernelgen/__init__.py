"""kernelgen: JIT-generated CUDA attention kernels for LLM serving.

Jinja templates -> NVRTC (through CuPy, no CUDA toolkit) -> cubins cached on disk -> launched
from PyTorch on the caller's stream.  Start with ``kernelgen.varlen_attention``.
"""
from ._version import __version__
from .api import varlen_attention

__all__ = ["__version__", "varlen_attention"]
