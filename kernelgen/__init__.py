"""kernelgen: JIT-generated CUDA attention kernels for LLM serving.

Jinja templates -> NVRTC (through CuPy, no CUDA toolkit) -> cubins cached on disk -> launched
from PyTorch on the caller's stream.  Start with ``kernelgen.varlen_attention`` (one-shot) or
``kernelgen.AttentionPlan`` (fixed capacity, CUDA-graph friendly); besides TypeError and
ValueError they raise ``kernelgen.CompileError``, ``kernelgen.KernelNotCachedError`` and
``kernelgen.LaunchError``.

The package is layered along the path of one call (docs/architecture.md): ``front`` (the public
calls) -> ``selection`` (validation and the one decider) -> ``jit`` (render, compile, cache,
load) -> ``launch`` (prepared launches), all sharing ``kernels`` (specs and ABIs); ``apps`` holds
the command line, demo and benchmark.

The public calls are imported lazily, so ``import kernelgen.jit.cache`` (and the CLI's cache
commands) do not pay for importing PyTorch.  ``kernelgen.ops`` and ``kernelgen.compat`` (torch
custom ops, FlashAttention-3 entry points) are public module names of ``front.ops`` and
``front.compat``: ``import kernelgen.ops`` and ``from kernelgen.compat import ...`` load them.
"""
import importlib
import importlib.abc
import importlib.util
import sys

from ._version import __version__

__all__ = ["__version__", "varlen_attention", "AttentionPlan", "Variant", "wait_for_compiles", "CompileError",
           "VariantCompileError", "KernelNotCachedError", "LaunchError"]

#: Lazily imported public names: name -> (module, attribute or None for the module itself).
_LAZY = {
    "varlen_attention": ("kernelgen.front.api", "varlen_attention"),
    "AttentionPlan": ("kernelgen.front.plan", "AttentionPlan"),
    "Variant": ("kernelgen.front.variant", "Variant"),
    # the background builds of a new variant's Hopper kernels (docs/variants.md, "First call")
    "wait_for_compiles": ("kernelgen.jit.background", "wait_for_compiles"),
    # the errors a call can raise besides TypeError / ValueError (docs/api.md, "Errors")
    "CompileError": ("kernelgen.jit.compiler", "CompileError"),
    "VariantCompileError": ("kernelgen.jit.compiler", "VariantCompileError"),
    "KernelNotCachedError": ("kernelgen.jit.cache", "KernelNotCachedError"),
    "LaunchError": ("kernelgen.launch.launch", "LaunchError"),
    "ops": ("kernelgen.front.ops", None),        # imports torch and registers torch.ops.kernelgen.*
    "compat": ("kernelgen.front.compat", None),
}


def _import_public(name):
    """Import the module behind the public name ``name``; without PyTorch, an ImportError that says
    what needs it and how to install it (chained from the ModuleNotFoundError)."""
    module = _LAZY[name][0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != "torch" and not (e.name or "").startswith("torch."):
            raise
        raise ImportError(
            f"kernelgen.{name} needs PyTorch, which is not installed: kernelgen's dispatcher "
            f"(varlen_attention, AttentionPlan, kernelgen.ops) runs on torch tensors.  The full install "
            f"(`pip install -e .` in a checkout) brings it; the warmup-only "
            f"install (`pip install --no-deps`, docs/install.md \"Without a GPU\") does not: "
            f"`pip install torch`.  `kernelgen warmup` and `kernelgen cache` work without it.",
            name=e.name) from e


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kernelgen' has no attribute {name!r}")
    mod = _import_public(name)
    attr = _LAZY[name][1]
    return mod if attr is None else getattr(mod, attr)


def __dir__():
    return sorted(set(__all__) | set(_LAZY))


class _PublicModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import kernelgen.ops`` / ``kernelgen.compat``: the public name of a front module is that
    module object itself, registered under both names (its own ``__spec__`` kept)."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.rpartition(".")
        if prefix == __name__ and name in _LAZY and _LAZY[name][1] is None:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = _import_public(spec.name.rpartition(".")[2])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # the import system set the public name's spec


sys.meta_path.append(_PublicModules())
