"""Launching: prepared calls on a raw CUDA stream (above ``kernels`` only).

``launch`` (one kernel launch with its parameters packed once, the driver binding),
``graph_launch`` (a prepared call's kernels as one CUDA graph launch), ``prepared`` (a call
signature's launches, run per call), ``fused`` (the mixed-batch launches: fused kernel, or the
two request classes in turn), ``bind`` (a recipe's loaded kernels bound into one of those) and
``oneoff`` (parameters packed per launch: ``AttentionPlan.schedule`` / ``attend``) and ``sinks``
(attention sinks applied after the launches: the output rescaled by the kernels' LSE).
"""
