"""The public calls (above every layer but the applications).

``api`` (``varlen_attention``), ``plan`` (``AttentionPlan``), ``ops`` (PyTorch custom ops,
public as ``kernelgen.ops``) and ``compat`` (FlashAttention-3 entry points, public as
``kernelgen.compat``).  Each validates (``selection.arguments``), asks ``selection.decide`` once,
loads the recipe's kernels (``jit.runtime``) and runs them (``launch``).
"""
