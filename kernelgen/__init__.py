"""kernelgen: JIT-generated CUDA attention kernels for LLM serving.

Jinja templates -> NVRTC (through CuPy, no CUDA toolkit) -> cubins cached on disk -> launched
from PyTorch on the caller's stream.  Start with ``kernelgen.varlen_attention`` (one-shot) or
``kernelgen.AttentionPlan`` (fixed capacity, CUDA-graph friendly).

The public calls are imported lazily, so ``import kernelgen.cache`` (and the CLI's cache
commands) do not pay for importing PyTorch.
"""
from ._version import __version__

__all__ = ["__version__", "varlen_attention", "AttentionPlan"]


def __getattr__(name):
    if name == "varlen_attention":
        from .api import varlen_attention

        return varlen_attention
    if name == "AttentionPlan":
        from .plan import AttentionPlan

        return AttentionPlan
    if name in ("ops", "compat"):  # imports torch and registers torch.ops.kernelgen.*
        import importlib  # (``from . import`` here would recurse into this __getattr__)

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'kernelgen' has no attribute {name!r}")
